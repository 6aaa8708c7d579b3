/* test_moe.c: a mixture of experts under the optimizer (docs/taco.md, "A
 * mixture of experts"): each expert matrix is a TACO tensor of its own; an
 * expert that received no token in a step keeps its weights and its
 * state; one TACO step of the engine equals TACO on transformers'
 * gradient; the refusals of what a mixture of experts cannot run yet. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/model_work.h"
#include "optim/optim.h"
#include "safetensors/safetensors.h"
#include "testutil.h"
#include "train/train.h"

typedef struct batch {
	int B, T;
	int32_t *tokens, *targets;
} batch;

static taco_model *load(const char *name, batch *bt)
{
	char dir[4200], path[4300];
	taco_err err = {{0}};
	taco_model *m = NULL;
	json_t *j;

	snprintf(dir, sizeof(dir), "%s/%s", tu_fixture("models"), name);
	ck_assert_msg(taco_model_load(dir, tk_cpu_ops(), &m, &err) == 0, "%s",
		      err.msg);
	snprintf(path, sizeof(path), "%s/batch.json", dir);
	j = json_load_file(path, 0, NULL);
	ck_assert_ptr_nonnull(j);
	bt->tokens =
	    tu_int_matrix(json_object_get(j, "input_ids"), &bt->B, &bt->T);
	bt->targets =
	    tu_int_matrix(json_object_get(j, "targets"), &bt->B, &bt->T);
	json_decref(j);
	return m;
}

static taco_optim *optim_of(taco_model *m)
{
	taco_optim_opts oo;
	taco_optim *o = NULL;
	taco_err err = {{0}};

	taco_optim_defaults(&oo);
	ck_assert_msg(taco_optim_create(m, &oo, NULL, &o, &err) == 0, "%s",
		      err.msg);
	return o;
}

/* A copy of tensor id's bytes and of its optimizer state: TACO's idx, q
 * and scale, or AdamW's master, m and v (gpt-oss's expert biases). */
typedef struct snap {
	void *w, *st[3];
	size_t wb, sb[3];
} snap;

/* The state arrays of tensor id and their sizes. */
static void state_of(const taco_model *m, const taco_optim *o, int id,
		     void *p[3], size_t b[3])
{
	const taco_tensor *t = &m->tensors[id];
	const taco_optim_tensor *ot = &o->t[id];
	size_t C = (size_t)t->shape[1], k = (size_t)o->opts.k;

	if (t->ndim == 2) {
		p[0] = ot->idx, b[0] = C * k * (size_t)ot->idx_bytes;
		p[1] = ot->q, b[1] = C * k;
		p[2] = ot->scale, b[2] = C * sizeof(float);
	} else {
		p[0] = ot->master, p[1] = ot->m, p[2] = ot->v;
		b[0] = b[1] = b[2] = t->numel * sizeof(float);
	}
}

static void snap_take(snap *s, const taco_model *m, const taco_optim *o, int id)
{
	const taco_tensor *t = &m->tensors[id];
	void *p[3];

	state_of(m, o, id, p, s->sb);
	s->wb = t->numel * tk_dtype_size(t->dtype);
	s->w = malloc(s->wb);
	memcpy(s->w, t->data, s->wb);
	for (int j = 0; j < 3; j++) {
		s->st[j] = malloc(s->sb[j]);
		memcpy(s->st[j], p[j], s->sb[j]);
	}
}

static int snap_same(const snap *s, const taco_model *m, const taco_optim *o,
		     int id)
{
	void *p[3];
	size_t b[3];
	int same = !memcmp(s->w, m->tensors[id].data, s->wb);

	state_of(m, o, id, p, b);
	for (int j = 0; j < 3; j++)
		same &= !memcmp(s->st[j], p[j], s->sb[j]);
	return same;
}

static void snap_free(snap *s)
{
	free(s->w);
	for (int j = 0; j < 3; j++)
		free(s->st[j]);
}

/* Qwen3-MoE (one Linear per expert) and gpt-oss (each expert's slices of
 * fused tensors, biases included), each with some idle experts. */
static const char *const idle_fixtures[] = {"qwen3_moe_aux", "gpt_oss_aux"};
static const char *const hf_fixtures[] = {"qwen3_moe", "gpt_oss"};

/* Step 1 gives experts state; in step 2 (another batch) an expert that
 * receives no token keeps its weights and its TACO state bit for bit,
 * and the experts that do receive tokens move. */
START_TEST(test_idle_expert_keeps_state)
{
	batch bt;
	taco_model *m = load(idle_fixtures[_i], &bt);
	taco_optim *o = optim_of(m);
	const taco_config *cf = &m->cfg;
	size_t nx = (size_t)cf->layers * cf->experts * TACO_X_COUNT;
	int32_t *c1 = malloc((size_t)cf->layers * cf->experts * 4);
	snap *s = calloc(nx, sizeof(*s));
	taco_step_stats st;
	taco_err err = {{0}};
	int N = bt.B * bt.T, kept = 0, moved = 0;
	int32_t *tok2 = malloc((size_t)N * 4);

	ck_assert_int_gt(cf->experts, 0);
	ck_assert_int_eq(taco_train_step(m, o, NULL,
					 &(taco_batch){bt.B, bt.T, bt.tokens,
						       bt.targets, NULL, 0},
					 0.01f, &st, &err),
			 0);
	memcpy(c1, m->work->moe_count,
	       (size_t)cf->layers * cf->experts * sizeof(int32_t));
	for (size_t i = 0; i < nx; i++)
		if (m->expert[i] >= 0)
			snap_take(&s[i], m, o, m->expert[i]);
	/* another batch: the tokens reversed */
	for (int i = 0; i < N; i++)
		tok2[i] = bt.tokens[N - 1 - i];
	ck_assert_int_eq(taco_train_step(m, o, NULL,
					 &(taco_batch){bt.B, bt.T, tok2,
						       bt.targets, NULL, 0},
					 0.01f, &st, &err),
			 0);
	for (size_t i = 0; i < nx; i++) {
		int l = (int)(i / TACO_X_COUNT / (size_t)cf->experts);
		int e = (int)(i / TACO_X_COUNT % (size_t)cf->experts);
		int n1, n2;
		if (m->expert[i] < 0)
			continue;
		n1 = c1[l * cf->experts + e];
		n2 = m->work->moe_count[l * cf->experts + e];
		if (n2 == 0) {
			ck_assert_msg(snap_same(&s[i], m, o, m->expert[i]),
				      "%s: no token in step 2, but it changed",
				      m->tensors[m->expert[i]].name);
			kept += n1 > 0;
		} else if (n1 > 0) {
			moved += !snap_same(&s[i], m, o, m->expert[i]);
		}
		snap_free(&s[i]);
	}
	/* the batches leave experts idle after they had state, and move
	 * the others (the counts are transformers' routing, fixed) */
	ck_assert_int_gt(kept, 0);
	ck_assert_int_gt(moved, 0);
	free(s);
	free(c1);
	free(tok2);
	free(bt.tokens);
	free(bt.targets);
	taco_optim_free(o);
	taco_model_free(m);
}
END_TEST

/* One TACO step of the engine (its own gradients, handed in parts)
 * against TACO applied to transformers' gradient (expected.safetensors),
 * tensor by tensor: the same weights, but where a column's two largest
 * gradients are within the gradients' rounding of each other. */
START_TEST(test_taco_step_on_transformers_gradient)
{
	batch bt, bt2;
	const char *name = hf_fixtures[_i];
	taco_model *m = load(name, &bt);
	taco_model *ref = load(name, &bt2);
	taco_optim *o = optim_of(m), *oref = optim_of(ref);
	taco_st_file *exp = NULL;
	taco_step_stats st;
	taco_err err = {{0}};
	char path[4300];
	size_t cols = 0, differ = 0, velems = 0, vdiffer = 0;
	int experts = 0;
	float *grad = malloc(sizeof(float) << 20);

	snprintf(path, sizeof(path), "%s/%s/expected.safetensors",
		 tu_fixture("models"), name);
	ck_assert_int_eq(taco_st_open(path, &exp, &err), 0);
	ck_assert_int_eq(taco_train_step(m, o, NULL,
					 &(taco_batch){bt.B, bt.T, bt.tokens,
						       bt.targets, NULL, 0},
					 0.01f, &st, &err),
			 0);
	taco_optim_begin_step(oref);
	for (int i = 0; i < ref->n_tensors; i++) {
		const taco_tensor *t = &ref->tensors[i];
		const taco_st_tensor *g;
		char gname[160];
		int any = 0;
		snprintf(gname, sizeof(gname), "grad.%s", t->name);
		g = taco_st_find(exp, gname);
		ck_assert_ptr_nonnull(g);
		ck_assert_uint_eq(g->nbytes, t->numel * sizeof(float));
		/* the mapping may be unaligned */
		memcpy(grad, g->data, g->nbytes);
		for (size_t k = 0; k < t->numel; k++)
			any |= grad[k] != 0.0f;
		/* the vectors: AdamW, whose first step is lr times the
		 * gradient's sign (up to an ulp of the weight) but where |g|
		 * is near eps; an expert's
		 * vector without a gradient is not stepped (idle) */
		if (t->ndim == 1) {
			if (!any)
				continue;
			ck_assert_int_eq(taco_optim_apply(oref, i, grad, 0.01f),
					 0);
			for (size_t k = 0; k < t->numel; k++) {
				float a = ((const float *)t->data)[k];
				float b =
				    ((const float *)m->tensors[i].data)[k];
				/* an ulp or two of the weight: the
				 * division's rounding; a sign apart is
				 * 2 lr */
				vdiffer +=
				    fabsf(a - b) > 1e-6f * fabsf(a) + 1e-9f;
				velems++;
			}
			continue;
		}
		ck_assert_int_eq(taco_optim_apply(oref, i, grad, 0.01f), 0);
		experts += strstr(t->name, ".mlp.experts.") != NULL;
		/* columns where the two steps moved different entries */
		for (int64_t c = 0; c < t->shape[1]; c++) {
			int same = 1;
			for (int64_t r = 0; r < t->shape[0]; r++) {
				size_t at = (size_t)(r * t->shape[1] + c);
				same &= ((const float *)t->data)[at] ==
					((const float *)m->tensors[i].data)[at];
			}
			differ += !same;
			cols++;
		}
	}
	/* 8 experts: Qwen3-MoE's 3 matrices in 2 sparse layers, gpt-oss's
	 * 2 in 3 layers */
	ck_assert_int_eq(experts, m->cfg.fused_experts ? 3 * 8 * 2 : 2 * 8 * 3);
	fprintf(stderr,
		"moe %s: TACO on the engine's gradient vs on transformers': "
		"%zu of %zu columns differ\n",
		name, differ, cols);
	/* gradients agree to about 1e-6 relative: a column's choice differs
	 * only on such a near tie */
	ck_assert_msg(differ * 1000 <= cols,
		      "%zu of %zu columns stepped differently", differ, cols);
	fprintf(stderr,
		"moe %s: AdamW on the engine's gradient vs on transformers': "
		"%zu of %zu vector elements differ\n",
		name, vdiffer, velems);
	ck_assert_msg(vdiffer * 1000 <= velems,
		      "%zu of %zu vector elements stepped differently", vdiffer,
		      velems);
	taco_st_close(exp);
	free(grad);
	free(bt.tokens);
	free(bt.targets);
	free(bt2.tokens);
	free(bt2.targets);
	taco_optim_free(o);
	taco_optim_free(oref);
	taco_model_free(m);
	taco_model_free(ref);
}
END_TEST

/* What a mixture of experts cannot run is refused by name. */
START_TEST(test_refusals)
{
	batch bt;
	taco_model *m = load("qwen3_moe", &bt);
	taco_step_opts so = {0};
	taco_err err = {{0}};

	/* data parallel needs the ranks' sum of the routing's counts */
	so.ranks = 2;
	ck_assert_int_eq(taco_model_set_step_opts(m, &so, &err), 0);
	{
		int n = bt.B * bt.T;
		int32_t *g = malloc(sizeof(int32_t) * (size_t)n * 2);
		for (int i = 0; i < 2 * n; i++)
			g[i] = bt.tokens[i % n];
		taco_model_set_global_batch(m, g, 2 * n);
		ck_assert_int_eq(
		    taco_model_step(m,
				    &(taco_batch){bt.B, bt.T, bt.tokens,
						  bt.targets, NULL, 0},
				    0, NULL, &(taco_step_stats){0}, &err),
		    0);
		ck_assert_int_eq(
		    taco_model_step(m,
				    &(taco_batch){bt.B, bt.T, bt.tokens,
						  bt.targets, NULL, 0},
				    0, &(taco_grad_sink){0},
				    &(taco_step_stats){0}, &err),
		    -EINVAL);
		ck_assert_ptr_nonnull(
		    strstr(err.msg, "taco_model_set_rank_sum"));
		taco_model_set_global_batch(m, NULL, 0);
		free(g);
	}
	ck_assert_int_eq(taco_model_set_dropout(m, 0.1f, 1, &err), -EINVAL);
	free(bt.tokens);
	free(bt.targets);
	taco_model_free(m);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("moe");
	TCase *tc = tcase_create("moe");

	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, test_idle_expert_keeps_state, 0, 2);
	tcase_add_loop_test(tc, test_taco_step_on_transformers_gradient, 0, 2);
	tcase_add_test(tc, test_refusals);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
