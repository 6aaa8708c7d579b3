/* test_golden.c: the CPU training step against Hugging Face transformers.
 *
 * tests/fixtures/gen_models.py wrote tiny random models with the loss, logits
 * and every parameter gradient that transformers computes on one batch. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "safetensors/safetensors.h"
#include "testutil.h"

static const char *const fixtures[] = {
    "llama_gqa", "qwen3_tied", "mistral_sw", "qwen2_bias", "llama_bf16",
};

typedef struct fixture {
	taco_model *m;
	int B, T;
	int32_t *tokens, *targets;
	double loss;
	int64_t n_targets;
	taco_st_file *expected;
} fixture;

static int32_t *int_matrix(json_t *rows, int *B, int *T)
{
	int32_t *out;

	*B = (int)json_array_size(rows);
	*T = (int)json_array_size(json_array_get(rows, 0));
	out = malloc(sizeof(int32_t) * (size_t)*B * (size_t)*T);
	ck_assert_ptr_nonnull(out);
	for (int b = 0; b < *B; b++)
		for (int t = 0; t < *T; t++)
			out[b * *T + t] = (int32_t)json_integer_value(
			    json_array_get(json_array_get(rows, b), t));
	return out;
}

static void fixture_load(fixture *f, const char *name)
{
	char dir[4096], path[4200];
	json_error_t jerr;
	json_t *batch, *exp;
	taco_err err = {{0}};
	int r;

	memset(f, 0, sizeof(*f));
	snprintf(dir, sizeof(dir), "%s", tu_fixture("models"));
	snprintf(dir + strlen(dir), sizeof(dir) - strlen(dir), "/%s", name);
	r = taco_model_load(dir, tk_cpu_ops(), &f->m, &err);
	ck_assert_msg(r == 0, "%s: %s", name, err.msg);
	snprintf(path, sizeof(path), "%s/batch.json", dir);
	batch = json_load_file(path, 0, &jerr);
	ck_assert_msg(batch != NULL, "%s: %s", path, jerr.text);
	f->tokens =
	    int_matrix(json_object_get(batch, "input_ids"), &f->B, &f->T);
	f->targets =
	    int_matrix(json_object_get(batch, "targets"), &f->B, &f->T);
	json_decref(batch);
	snprintf(path, sizeof(path), "%s/expected.json", dir);
	exp = json_load_file(path, 0, &jerr);
	ck_assert_msg(exp != NULL, "%s: %s", path, jerr.text);
	f->loss = json_number_value(json_object_get(exp, "loss"));
	f->n_targets = json_integer_value(json_object_get(exp, "n_targets"));
	json_decref(exp);
	snprintf(path, sizeof(path), "%s/expected.safetensors", dir);
	r = taco_st_open(path, &f->expected, &err);
	ck_assert_msg(r == 0, "%s", err.msg);
}

static void fixture_free(fixture *f)
{
	taco_model_free(f->m);
	taco_st_close(f->expected);
	free(f->tokens);
	free(f->targets);
}

static float *expected_f32(fixture *f, const char *name, size_t n)
{
	const taco_st_tensor *t = taco_st_find(f->expected, name);
	float *out;

	ck_assert_msg(t != NULL, "expected tensor %s missing", name);
	ck_assert_uint_eq(t->dtype, TK_F32);
	ck_assert_uint_eq(t->nbytes, n * sizeof(float));
	out = malloc(n * sizeof(float));
	memcpy(out, t->data, n * sizeof(float));
	return out;
}

/* Gradient sink: copies every gradient, counts calls, and optionally
 * scribbles over the tensor's weights afterwards, which must not change any
 * gradient still to come (a layer's input gradient is computed before its
 * weights may change). */
typedef struct grads {
	float **g;
	int *calls;
	int scribble;
} grads;

static int grab(void *ctx, taco_model *m, int id, float *grad)
{
	grads *gs = ctx;
	taco_tensor *t = &m->tensors[id];

	gs->calls[id]++;
	if (!gs->g[id])
		gs->g[id] = malloc(t->numel * sizeof(float));
	m->ops->download(gs->g[id], grad, t->numel * sizeof(float));
	if (gs->scribble)
		memset(t->data, 0x7F, t->numel * tk_dtype_size(t->dtype));
	return 0;
}

static void grads_init(grads *gs, const taco_model *m, int scribble)
{
	gs->g = calloc((size_t)m->n_tensors, sizeof(float *));
	gs->calls = calloc((size_t)m->n_tensors, sizeof(int));
	gs->scribble = scribble;
}

static void grads_free(grads *gs, const taco_model *m)
{
	for (int i = 0; i < m->n_tensors; i++)
		free(gs->g[i]);
	free(gs->g);
	free(gs->calls);
}

/* scribble: overwrite weights in the gradient callback. chunk: rows per
 * cross-entropy chunk (0 = default, one chunk for these fixtures). */
static void check_fixture(const char *name, int scribble, int chunk, int keep)
{
	fixture f;
	taco_err err = {{0}};
	taco_step_stats st;
	grads gs;
	taco_batch b;
	double worst = 0, logit_err = 0;
	const char *worst_name = "";
	int r;

	fixture_load(&f, name);
	f.m->ce_chunk_elems = (size_t)chunk * f.m->cfg.vocab;
	f.m->keep_activations = keep;
	b = (taco_batch){f.B, f.T, f.tokens, f.targets, NULL};

	if (!scribble) {
		size_t n = (size_t)f.B * f.T * f.m->cfg.vocab;
		float *logits = malloc(n * sizeof(float));
		float *ref = expected_f32(&f, "logits", n);
		double e;

		r = taco_model_logits(f.m, &b, logits, &err);
		ck_assert_msg(r == 0, "%s", err.msg);
		e = tu_rel_err(logits, ref, n);
		logit_err = e;
		ck_assert_msg(e < 1e-4, "%s: logits rel err %.3g", name, e);
		free(logits);
		free(ref);
		r = taco_model_eval(f.m, &b, &st, &err);
		ck_assert_msg(r == 0, "%s", err.msg);
		ck_assert_msg(fabs(st.loss - f.loss) / f.loss < 1e-5,
			      "%s: eval loss %.9g vs %.9g", name, st.loss,
			      f.loss);
	}

	grads_init(&gs, f.m, scribble);
	r = taco_model_step(f.m, &b, 0, grab, &gs, &st, &err);
	ck_assert_msg(r == 0, "%s", err.msg);
	ck_assert_int_eq(st.n_targets, f.n_targets);
	ck_assert_msg(fabs(st.loss - f.loss) / f.loss < 1e-5,
		      "%s: loss %.9g vs %.9g (rel %.3g)", name, st.loss, f.loss,
		      fabs(st.loss - f.loss) / f.loss);
	for (int i = 0; i < f.m->n_tensors; i++) {
		taco_tensor *t = &f.m->tensors[i];
		char gname[160];
		float *ref;
		double e;

		ck_assert_msg(gs.calls[i] == 1, "%s: %s got %d callbacks", name,
			      t->name, gs.calls[i]);
		snprintf(gname, sizeof(gname), "grad.%s", t->name);
		ref = expected_f32(&f, gname, t->numel);
		e = tu_rel_err(gs.g[i], ref, t->numel);
		if (e > worst) {
			worst = e;
			worst_name = t->name;
		}
		ck_assert_msg(e < 1e-4, "%s: %s gradient rel err %.3g", name,
			      t->name, e);
		free(ref);
	}
	if (!scribble && !chunk && !keep)
		fprintf(stderr,
			"golden %-10s loss rel err %.2g, logits %.2g, worst "
			"gradient %.2g (%s)\n",
			name, fabs(st.loss - f.loss) / f.loss, logit_err, worst,
			worst_name);
	grads_free(&gs, f.m);
	fixture_free(&f);
}

START_TEST(test_fixture)
{
	check_fixture(fixtures[_i], 0, 0, 0);
}
END_TEST

/* 5 rows per chunk: 7 chunks, the last one short. */
START_TEST(test_fixture_chunked_loss)
{
	check_fixture(fixtures[_i], 0, 5, 0);
}
END_TEST

START_TEST(test_fixture_weights_change_in_callback)
{
	check_fixture(fixtures[_i], 1, 0, 0);
}
END_TEST

/* Every layer's intermediates kept: no recompute, same results. */
START_TEST(test_fixture_keep_activations)
{
	check_fixture(fixtures[_i], 1, 0, 1);
}
END_TEST

/* Three documents packed into one row with restarting positions give the
 * same loss and gradients as the same documents as separate padded rows. */
static void check_packing(const char *name)
{
	static const int lens[3] = {5, 7, 4};
	const int P = 16, U = 7;
	int32_t ptok[16], ptgt[16], ppos[16], utok[21], utgt[21];
	fixture f;
	taco_err err = {{0}};
	taco_step_stats sp, su;
	grads gp, gu;
	int o = 0, r;
	uint64_t rng = 42;

	fixture_load(&f, name);
	for (int i = 0; i < 21; i++)
		utok[i] = 0, utgt[i] = -100;
	for (int d = 0; d < 3; d++) {
		for (int t = 0; t < lens[d]; t++, o++) {
			float u;
			tu_fill_uniform(&u, 1, 0, (float)f.m->cfg.vocab, &rng);
			ptok[o] = utok[d * U + t] = (int32_t)u;
			ppos[o] = t;
		}
	}
	for (int d = 0, s = 0; d < 3; s += lens[d], d++) {
		for (int t = 0; t < lens[d]; t++) {
			int y = t + 1 < lens[d] ? ptok[s + t + 1] : -100;
			ptgt[s + t] = utgt[d * U + t] = y;
		}
	}
	ck_assert_int_eq(o, P);

	grads_init(&gp, f.m, 0);
	grads_init(&gu, f.m, 0);
	r = taco_model_step(f.m, &(taco_batch){1, P, ptok, ptgt, ppos}, 0, grab,
			    &gp, &sp, &err);
	ck_assert_msg(r == 0, "%s", err.msg);
	r = taco_model_step(f.m, &(taco_batch){3, U, utok, utgt, NULL}, 0, grab,
			    &gu, &su, &err);
	ck_assert_msg(r == 0, "%s", err.msg);
	ck_assert_int_eq(sp.n_targets, su.n_targets);
	ck_assert_msg(fabs(sp.loss - su.loss) < 1e-6 * su.loss,
		      "%s: packed loss %.9g, separate %.9g", name, sp.loss,
		      su.loss);
	for (int i = 0; i < f.m->n_tensors; i++) {
		double e = tu_rel_err(gp.g[i], gu.g[i], f.m->tensors[i].numel);
		ck_assert_msg(e < 1e-5, "%s: %s packed vs separate %.3g", name,
			      f.m->tensors[i].name, e);
	}
	grads_free(&gp, f.m);
	grads_free(&gu, f.m);
	fixture_free(&f);
}

START_TEST(test_packing)
{
	check_packing(_i == 0 ? "llama_gqa" : "qwen3_tied");
}
END_TEST

START_TEST(test_bad_batch)
{
	fixture f;
	taco_err err = {{0}};
	taco_step_stats st;
	int32_t tok[4] = {1, 2, 3, 4}, tgt[4] = {2, 3, 4, -100};
	int32_t pos[4] = {0, 1, 3, 4};
	int r;

	fixture_load(&f, "llama_gqa");
	tok[2] = 256;
	r = taco_model_step(f.m, &(taco_batch){1, 4, tok, tgt, NULL}, 0, NULL,
			    NULL, &st, &err);
	ck_assert_int_eq(r, -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "token id 256"));
	tok[2] = 3;
	tgt[1] = -5;
	r = taco_model_eval(f.m, &(taco_batch){1, 4, tok, tgt, NULL}, &st,
			    &err);
	ck_assert_int_eq(r, -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "target id -5"));
	tgt[1] = 3;
	r = taco_model_eval(f.m, &(taco_batch){1, 4, tok, tgt, pos}, &st, &err);
	ck_assert_int_eq(r, -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "position 2"));
	r = taco_model_eval(f.m, &(taco_batch){0, 4, tok, tgt, NULL}, &st,
			    &err);
	ck_assert_int_eq(r, -EINVAL);
	/* All targets masked: loss 0, a zero gradient, no failure. */
	for (int i = 0; i < 4; i++)
		tgt[i] = -100;
	r = taco_model_step(f.m, &(taco_batch){1, 4, tok, tgt, NULL}, 0, NULL,
			    NULL, &st, &err);
	ck_assert_int_eq(r, 0);
	ck_assert_int_eq(st.n_targets, 0);
	fixture_free(&f);
}
END_TEST

/* transformers loaded what taco-train exported and computed this loss
 * (tests/fixtures/gen_export.py); the engine agrees. */
START_TEST(test_export_matches_transformers)
{
	taco_model *m = NULL;
	taco_err err = {{0}};
	json_t *batch, *exp;
	taco_step_stats st;
	int B, T, r;
	int32_t *tok, *lab, *tgt;
	double want;

	r = taco_model_load(tu_fixture("export/llama_bf16_taco"), tk_cpu_ops(),
			    &m, &err);
	ck_assert_msg(r == 0, "%s", err.msg);
	for (int i = 0; i < m->n_tensors; i++)
		ck_assert_int_eq(m->tensors[i].dtype, TK_BF16);
	batch =
	    json_load_file(tu_fixture("models/llama_bf16/batch.json"), 0, NULL);
	exp =
	    json_load_file(tu_fixture("export/llama_bf16_taco.json"), 0, NULL);
	ck_assert_ptr_nonnull(batch);
	ck_assert_ptr_nonnull(exp);
	tok = int_matrix(json_object_get(batch, "input_ids"), &B, &T);
	lab = int_matrix(json_object_get(batch, "labels"), &B, &T);
	tgt = malloc(sizeof(int32_t) * (size_t)B * (size_t)T);
	for (int b = 0; b < B; b++)
		for (int t = 0; t < T; t++)
			tgt[b * T + t] = t + 1 < T ? lab[b * T + t + 1] : -100;
	r = taco_model_eval(m, &(taco_batch){B, T, tok, tgt, NULL}, &st, &err);
	ck_assert_msg(r == 0, "%s", err.msg);
	want = json_real_value(json_object_get(exp, "loss"));
	ck_assert_msg(fabs(st.loss - want) < 1e-5 * want,
		      "export: loss %.9g, transformers %.9g", st.loss, want);
	free(tok);
	free(lab);
	free(tgt);
	json_decref(batch);
	json_decref(exp);
	taco_model_free(m);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("golden");
	TCase *tc = tcase_create("golden");
	int n = sizeof(fixtures) / sizeof(fixtures[0]);

	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, test_fixture, 0, n);
	tcase_add_loop_test(tc, test_fixture_chunked_loss, 0, n);
	tcase_add_loop_test(tc, test_fixture_weights_change_in_callback, 0, n);
	tcase_add_loop_test(tc, test_fixture_keep_activations, 0, n);
	tcase_add_loop_test(tc, test_packing, 0, 2);
	tcase_add_test(tc, test_bad_batch);
	tcase_add_test(tc, test_export_matches_transformers);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
