/* test_optim.c: the model-level optimizer: who gets what, state sizes,
 * frozen tensors, saving and loading state. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "optim/optim.h"
#include "testutil.h"

static size_t state_bytes_of(const taco_model *m, const taco_optim_opts *o)
{
	size_t total = 0;

	for (int i = 0; i < m->n_tensors; i++) {
		const taco_tensor *t = &m->tensors[i];
		total += taco_optim_tensor_bytes(taco_optim_kind_of(t, o, 0),
						 t->ndim, t->shape[0],
						 t->shape[1], o->k);
	}
	return total;
}

/* docs/taco.md's formula on the headline model: 3.80 M columns of 52 bytes, the
 * two 151936-row tensors at 84, and 0.68 M AdamW elements at 12. */
START_TEST(test_qwen3_32b_state_bytes)
{
	taco_config c;
	taco_model *m = NULL;
	taco_optim_opts o;
	taco_err err = {{0}};

	ck_assert_int_eq(
	    taco_config_load(tu_fixture("configs/qwen3-32b.json"), &c, &err),
	    0);
	ck_assert_int_eq(taco_model_shapes(&c, &m, &err), 0);
	taco_optim_defaults(&o);
	ck_assert_uint_eq(state_bytes_of(m, &o),
			  3801088ull * 52 + 2 * 5120 * 84 + 676864ull * 12);
	taco_model_free(m);
}
END_TEST

/* OPT-13B is not an architecture the engine trains, but its state size is
 * the preprint's headline: the same formula over its tensor shapes, read
 * from its config.json. */
START_TEST(test_opt_13b_state_bytes)
{
	json_t *c = json_load_file(tu_fixture("configs/opt-13b.json"), 0, NULL);
	int64_t H, F, L, V, P;
	size_t total = 0;
	const int k = 16;

	ck_assert_ptr_nonnull(c);
	H = json_integer_value(json_object_get(c, "hidden_size"));
	F = json_integer_value(json_object_get(c, "ffn_dim"));
	L = json_integer_value(json_object_get(c, "num_hidden_layers"));
	V = json_integer_value(json_object_get(c, "vocab_size"));
	P = json_integer_value(json_object_get(c, "max_position_embeddings")) +
	    2; /* OPT's learned positions carry an offset of 2 */
	/* 2-D: token and position embeddings (the head is tied), per layer
	 * q/k/v/out [H, H], fc1 [F, H], fc2 [H, F] */
	total += taco_optim_tensor_bytes(TACO_OPT_TACO, 2, V, H, k);
	total += taco_optim_tensor_bytes(TACO_OPT_TACO, 2, P, H, k);
	for (int64_t l = 0; l < L; l++) {
		total += 4 * taco_optim_tensor_bytes(TACO_OPT_TACO, 2, H, H, k);
		total += taco_optim_tensor_bytes(TACO_OPT_TACO, 2, F, H, k);
		total += taco_optim_tensor_bytes(TACO_OPT_TACO, 2, H, F, k);
		/* 1-D: 4 attention biases, fc1 and fc2 biases, two layer
		 * norms of weight and bias */
		total += taco_optim_tensor_bytes(TACO_OPT_ADAMW, 1,
						 4 * H + F + H + 4 * H, 1, k);
	}
	total += taco_optim_tensor_bytes(TACO_OPT_ADAMW, 1, 2 * H, 1, k);
	/* 1.85 M columns x 52 B + 2.67 M AdamW elements x 12 B */
	ck_assert_uint_eq(total, 1853440ull * 52 + 2672640ull * 12);
	ck_assert_uint_eq(total, 128450560ull);
	json_decref(c);
}
END_TEST

static taco_model *load(const char *name)
{
	taco_model *m = NULL;
	taco_err err = {{0}};
	char rel[128];

	snprintf(rel, sizeof(rel), "models/%s", name);
	ck_assert_int_eq(
	    taco_model_load(tu_fixture(rel), tk_cpu_ops(), &m, &err), 0);
	return m;
}

START_TEST(test_kinds_and_frozen)
{
	taco_model *m = load("qwen3_tied");
	taco_optim *o = NULL;
	taco_optim_opts opts;
	taco_err err = {{0}};
	uint8_t *frozen = calloc((size_t)m->n_tensors, 1);
	float *g = malloc(m->tensors[m->embed].numel * sizeof(float));
	void *before = malloc(m->tensors[m->embed].numel * 4);
	size_t expect = 0;

	taco_optim_defaults(&opts);
	frozen[m->embed] = 1;
	ck_assert_int_eq(taco_optim_create(m, &opts, frozen, &o, &err), 0);
	for (int i = 0; i < m->n_tensors; i++) {
		const taco_tensor *t = &m->tensors[i];
		int want = i == m->embed  ? TACO_OPT_FROZEN
			   : t->ndim == 2 ? TACO_OPT_TACO
					  : TACO_OPT_ADAMW;
		ck_assert_int_eq(o->t[i].kind, want);
		ck_assert_uint_eq(o->t[i].state_bytes,
				  taco_optim_tensor_bytes(want, t->ndim,
							  t->shape[0],
							  t->shape[1], 16));
		expect += o->t[i].state_bytes;
	}
	ck_assert_uint_eq(o->state_bytes, expect);
	/* a frozen tensor never changes */
	for (size_t i = 0; i < m->tensors[m->embed].numel; i++)
		g[i] = (float)i;
	memcpy(before, m->tensors[m->embed].data,
	       m->tensors[m->embed].numel * 4);
	taco_optim_begin_step(o);
	taco_optim_apply(o, m->embed, g, 0.1f);
	ck_assert_mem_eq(before, m->tensors[m->embed].data,
			 m->tensors[m->embed].numel * 4);
	taco_optim_free(o);
	opts.all_adamw = 1;
	ck_assert_int_eq(taco_optim_create(m, &opts, NULL, &o, &err), 0);
	ck_assert_uint_eq(o->state_bytes, 12 * taco_model_param_count(m));
	taco_optim_free(o);
	free(frozen);
	free(g);
	free(before);
	taco_model_free(m);
}
END_TEST

/* Saved state loads into a fresh optimizer identically; a state saved with
 * another k is refused. */
START_TEST(test_save_load)
{
	taco_model *m = load("llama_gqa");
	taco_optim *o = NULL, *o2 = NULL;
	taco_optim_opts opts;
	taco_err err = {{0}};
	char path[] = "/tmp/taco-optim-XXXXXX";
	int fd = mkstemp(path);
	uint64_t rng = 9;

	close(fd);
	taco_optim_defaults(&opts);
	ck_assert_int_eq(taco_optim_create(m, &opts, NULL, &o, &err), 0);
	for (int s = 0; s < 3; s++) {
		taco_optim_begin_step(o);
		for (int i = 0; i < m->n_tensors; i++) {
			size_t n = m->tensors[i].numel;
			float *g = malloc(n * sizeof(float));
			tu_fill_uniform(g, n, -1, 1, &rng);
			taco_optim_apply(o, i, g, 0.01f);
			free(g);
		}
	}
	ck_assert_int_eq(taco_optim_save(o, path, &err), 0);
	ck_assert_int_eq(taco_optim_create(m, &opts, NULL, &o2, &err), 0);
	ck_assert_int_eq(taco_optim_load(o2, path, &err), 0);
	ck_assert_uint_eq(o2->step, 3);
	for (int i = 0; i < m->n_tensors; i++) {
		const taco_optim_tensor *a = &o->t[i], *b = &o2->t[i];
		size_t C = (size_t)m->tensors[i].shape[1];
		if (a->kind == TACO_OPT_TACO) {
			ck_assert_mem_eq(a->idx, b->idx, C * 16 * 2);
			ck_assert_mem_eq(a->q, b->q, C * 16);
			ck_assert_mem_eq(a->scale, b->scale, C * 4);
		} else {
			ck_assert_mem_eq(a->m, b->m, m->tensors[i].numel * 4);
			ck_assert_mem_eq(a->v, b->v, m->tensors[i].numel * 4);
			ck_assert_mem_eq(a->master, b->master,
					 m->tensors[i].numel * 4);
		}
	}
	taco_optim_free(o2);
	opts.k = 4;
	ck_assert_int_eq(taco_optim_create(m, &opts, NULL, &o2, &err), 0);
	ck_assert_int_eq(taco_optim_load(o2, path, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "k = 4"));
	taco_optim_free(o2);
	taco_optim_free(o);
	unlink(path);
	taco_model_free(m);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("optim");
	TCase *tc = tcase_create("optim");

	tcase_add_test(tc, test_qwen3_32b_state_bytes);
	tcase_add_test(tc, test_opt_13b_state_bytes);
	tcase_add_test(tc, test_kinds_and_frozen);
	tcase_add_test(tc, test_save_load);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
