/* test_weights_host.c: weights in host memory, streamed through the ring
 * (taco_step_opts.stream_layers), against the same training with every
 * weight on the device: the same losses and the same weights and optimizer
 * state, bit for bit, after 1 and 20 steps; and the "device" pool (the CPU
 * backend's counter) holds the ring instead of the streamed weights, which
 * the host pool holds. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/model_work.h"
#include "optim/optim.h"
#include "testutil.h"
#include "train/init.h"

#define STEPS 20
#define NB 2
#define NT 16

typedef struct variant {
	const char *fixture;
	int layers;	 /* 0: the fixture's weights; else random weights
			    of its config with this many layers */
	int wdtype, adt; /* weight dtype, precision */
	int overlap;	 /* optimizer on the side stream */
	int offload;	 /* layer inputs in host memory too */
	int stream;	 /* layers streamed; -1: all */
	int block;	 /* small gradient blocks (many pieces) */
	int whole;	 /* write-back of whole tensors (no changed_rows) */
} variant;

typedef struct sink_ctx {
	taco_optim *o;
	float lr;
} sink_ctx;

static const void *changed(void *ctx, taco_model *m, int id, int *k)
{
	(void)m;
	return taco_optim_changed_rows(((sink_ctx *)ctx)->o, id, k);
}

static int apply(void *ctx, taco_model *m, const taco_grad_part *p)
{
	sink_ctx *s = ctx;

	(void)m;
	return taco_optim_apply_part(s->o, p, s->lr);
}

typedef struct run {
	taco_model *m;
	taco_optim *o;
	double loss[STEPS];
	size_t dev_peak, host_peak, host_weights;
} run;

static taco_model *make_model(const variant *v, const taco_step_opts *so)
{
	char dir[4096];
	taco_model *m = NULL;
	taco_err err = {{0}};
	int r;

	snprintf(dir, sizeof(dir), "%s/%s", tu_fixture("models"), v->fixture);
	if (!v->layers) {
		r = taco_model_load_sched(dir, tk_cpu_ops(), v->adt, so, &m,
					  &err);
	} else {
		char path[4200];
		taco_config c;
		snprintf(path, sizeof(path), "%s/config.json", dir);
		ck_assert_int_eq(taco_config_load(path, &c, &err), 0);
		c.layers = v->layers;
		r = taco_model_init_random_sched(&c, tk_cpu_ops(), v->wdtype, 7,
						 so, &m, &err);
		if (!r)
			m->act_dtype = v->adt;
	}
	ck_assert_msg(r == 0, "%s: %s", v->fixture, err.msg);
	return m;
}

/* Batch s: tokens from a fixed sequence, targets the next token, a few
 * positions without a target. */
static void make_batch(int V, int s, int32_t *tok, int32_t *tgt)
{
	uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(s + 1);

	for (int i = 0; i < NB * NT + 1; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		tok[i] = (int32_t)((x >> 33) % (uint64_t)V);
	}
	for (int i = 0; i < NB * NT; i++)
		tgt[i] = (i % NT == NT - 1 || i % 7 == 3) ? -100 : tok[i + 1];
}

static void train(const variant *v, int stream, run *out)
{
	const tk_ops *ops = tk_cpu_ops();
	taco_step_opts so = {0};
	taco_optim_opts oo;
	taco_err err = {{0}};
	int32_t tok[NB * NT + 1], tgt[NB * NT];
	sink_ctx sc;
	/* the sparse write-back (TACO's slot rows), or whole tensors */
	taco_grad_sink sink = {.part = apply,
			       .ctx = &sc,
			       .changed_rows = v->whole ? NULL : changed};

	size_t base_dev = ops->mem_current(), base_host = ops->host_current();

	memset(out, 0, sizeof(*out));
	so.overlap = v->overlap;
	so.offload = v->offload;
	so.grad_block_elems = v->block ? 4096 : 0;
	if (v->layers) { /* placed at load */
		so.stream_layers = stream < 0 ? v->layers : stream;
		out->m = make_model(v, &so);
	} else { /* loaded on the device, then moved */
		out->m = make_model(v, NULL);
		so.stream_layers = stream < 0 ? out->m->cfg.layers : stream;
	}
	ck_assert_msg(taco_model_set_step_opts(out->m, &so, &err) == 0, "%s",
		      err.msg);
	ops->mem_reset_peak();
	for (int i = 0; i < out->m->n_tensors; i++) {
		const taco_tensor *t = &out->m->tensors[i];
		ck_assert_int_eq(t->host != NULL,
				 so.stream_layers && t->ndim == 2 &&
				     t->layer >=
					 out->m->cfg.layers - so.stream_layers);
		if (t->host)
			out->host_weights += t->numel * tk_dtype_size(t->dtype);
	}
	taco_optim_defaults(&oo);
	oo.seed = 11;
	ck_assert_int_eq(taco_optim_create(out->m, &oo, NULL, &out->o, &err),
			 0);
	sc.o = out->o;
	for (int s = 0; s < STEPS; s++) {
		taco_batch b = {
		    .B = NB, .T = NT, .tokens = tok, .targets = tgt};
		taco_step_stats st;
		make_batch(out->m->cfg.vocab, s, tok, tgt);
		taco_optim_begin_step(out->o);
		sc.lr = 1e-3f * (float)(1 + s % 3);
		ck_assert_msg(
		    taco_model_step(out->m, &b, 0, &sink, &st, &err) == 0, "%s",
		    err.msg);
		out->loss[s] = st.loss;
		for (int i = 0; i < out->m->n_tensors; i++)
			if (out->m->tensors[i].host) /* only in the step */
				ck_assert_ptr_null(out->m->tensors[i].data);
	}
	out->dev_peak = ops->mem_peak() - base_dev;
	out->host_peak = ops->host_peak() - base_host;
}

static void run_free(run *r)
{
	taco_optim_free(r->o);
	taco_model_free(r->m);
}

static void same_bytes(const tk_ops *ops, const void *a, const void *b,
		       size_t n, const char *what, const char *name)
{
	void *x = malloc(n ? n : 1), *y = malloc(n ? n : 1);

	ops->download(x, a, n);
	ops->download(y, b, n);
	ck_assert_msg(memcmp(x, y, n) == 0, "%s of %s differs", what, name);
	free(x);
	free(y);
}

/* Every tensor (read from wherever it lives) and every optimizer state
 * buffer, bit for bit. */
static void same_state(const run *a, const run *b)
{
	const tk_ops *ops = tk_cpu_ops();

	for (int i = 0; i < a->m->n_tensors; i++) {
		const taco_tensor *t = &a->m->tensors[i];
		const taco_optim_tensor *sa = &a->o->t[i], *sb = &b->o->t[i];
		size_t n = t->numel * tk_dtype_size(t->dtype);
		size_t C = (size_t)t->shape[1], k = (size_t)a->o->opts.k;
		void *x = malloc(n), *y = malloc(n);
		taco_tensor_read(a->m, i, x);
		taco_tensor_read(b->m, i, y);
		ck_assert_msg(memcmp(x, y, n) == 0, "weights of %s differ",
			      t->name);
		free(x);
		free(y);
		if (sa->kind == TACO_OPT_TACO) {
			same_bytes(ops, sa->idx, sb->idx,
				   C * k * (size_t)sa->idx_bytes, "idx",
				   t->name);
			same_bytes(ops, sa->q, sb->q, C * k, "q", t->name);
			same_bytes(ops, sa->scale, sb->scale, C * 4, "scale",
				   t->name);
		} else if (sa->kind == TACO_OPT_ADAMW) {
			same_bytes(ops, sa->master, sb->master, t->numel * 4,
				   "master", t->name);
			same_bytes(ops, sa->m, sb->m, t->numel * 4, "m",
				   t->name);
			same_bytes(ops, sa->v, sb->v, t->numel * 4, "v",
				   t->name);
		}
	}
}

static void check_variant(const variant *v)
{
	run dev, host;
	const taco_work *w;
	size_t slot;

	train(v, 0, &dev);
	train(v, v->stream, &host);
	for (int s = 0; s < STEPS; s++)
		ck_assert_msg(
		    memcmp(&dev.loss[s], &host.loss[s], sizeof(double)) == 0,
		    "%s step %d: loss %.17g on the device, %.17g "
		    "streamed",
		    v->fixture, s + 1, dev.loss[s], host.loss[s]);
	same_state(&dev, &host);
	/* the device pool holds the ring and the write-back's gather
	 * buffers, not the streamed weights, which the host pool holds with
	 * the write-back's staging */
	w = host.m->work;
	ck_assert_uint_gt(host.host_weights, 0);
	/* exactly: the ring and the write-back's buffers in place of the
	 * streamed weights (a slot has room for the largest tensor of each
	 * place: a mixture of experts' dense and sparse layers' both) */
	ck_assert_uint_eq(host.dev_peak - (size_t)w->s.slots * w->wb_slot -
			      (size_t)w->s.slots * w->slot_bytes +
			      host.host_weights,
			  dev.dev_peak);
	/* which saves memory once more layers stream than the ring holds
	 * (the tiny mixtures of experts' write-back buffers, 16 rows a
	 * column, outweigh their 32-row experts: not there) */
	if (w->s.stream > TACO_RING_SLOTS && !host.m->cfg.experts)
		ck_assert_uint_lt(host.dev_peak, dev.dev_peak);
	ck_assert_uint_eq(host.host_peak,
			  dev.host_peak + host.host_weights +
			      (size_t)w->s.stream * w->wb_layer);
	ck_assert_uint_eq(host.dev_peak + host.host_weights - w->bytes,
			  dev.dev_peak - dev.m->work->bytes);
	slot = host.m->work->slot_bytes;
	ck_assert_uint_gt(slot, 0);
	run_free(&dev);
	run_free(&host);
}

static const variant variants[] = {
    /* the golden fixtures' own weights, every layer streamed */
    {"llama_gqa", 0, 0, TK_F32, 0, 0, -1, 0, 0},
    {"llama_gqa", 0, 0, TK_BF16, 1, 0, -1, 1, 0},
    {"qwen3_tied", 0, 0, TK_BF16, 0, 0, -1, 0, 0},
    {"qwen3_tied", 0, 0, TK_F32, 1, 1, 1, 1, 0},
    {"opt_pre", 0, 0, TK_F32, 0, 0, -1, 0, 0},
    {"opt_post", 0, 0, TK_BF16, 1, 0, -1, 0, 0},
    {"neox_par", 0, 0, TK_BF16, 0, 0, -1, 1, 0},
    {"neox_seq", 0, 0, TK_F32, 1, 0, 1, 0, 0},
    /* deeper models: the ring wraps, slots are written back and refilled
     * (all streamed, or the last 5 of 7 as `auto` would) */
    {"llama_gqa", 7, TK_BF16, TK_BF16, 1, 0, -1, 1, 0},
    {"llama_gqa", 7, TK_BF16, TK_BF16, 0, 1, 5, 0, 0},
    {"qwen3_tied", 7, TK_F32, TK_F32, 1, 0, 5, 0, 0},
    {"qwen2_bias", 7, TK_BF16, TK_F32, 0, 0, -1, 1, 0},
    {"opt_post", 7, TK_BF16, TK_BF16, 1, 1, 5, 1, 0},
    {"neox_par", 7, TK_F32, TK_F32, 0, 0, -1, 0, 0},
    {"neox_seq", 7, TK_BF16, TK_BF16, 1, 0, 4, 0, 0},
    /* whole tensors written back (a sink without changed_rows) */
    {"llama_gqa", 7, TK_BF16, TK_BF16, 1, 0, -1, 0, 1},
    {"opt_pre", 0, 0, TK_F32, 0, 0, -1, 1, 1},
    /* mixtures of experts: every expert matrix in the ring beside the
     * layer's slots; idle experts written back unchanged; dense and
     * sparse layers mixed (qwen3_moe_aux: every second layer sparse) */
    {"qwen3_moe", 0, 0, TK_F32, 0, 0, -1, 0, 0},
    {"gpt_oss", 0, 0, TK_BF16, 1, 0, -1, 1, 0},
    {"qwen3_moe_aux", 7, TK_BF16, TK_BF16, 1, 0, -1, 0, 0},
    {"gpt_oss_aux", 7, TK_F32, TK_F32, 0, 1, -1, 0, 1},
    /* Phi-3: the fused qkv_proj and gate_up_proj in the ring, their row
     * blocks written back */
    {"phi3_long", 0, 0, TK_F32, 0, 0, -1, 0, 0},
    {"phi3_short", 7, TK_BF16, TK_BF16, 1, 0, 5, 1, 0},
};

START_TEST(test_weights_host)
{
	check_variant(&variants[_i]);
}
END_TEST

/* Eval and scoring stream the same way (forward only, nothing written
 * back), and the schedule checks its range. */
START_TEST(test_weights_host_eval_and_limits)
{
	variant v = {"llama_gqa", 5, TK_BF16, TK_BF16, 0, 0, 3, 0, 0};
	taco_step_opts so = {.stream_layers = 3};
	taco_model *a = make_model(&v, NULL), *b = make_model(&v, &so);
	int32_t tok[NB * NT + 1], tgt[NB * NT];
	taco_batch bt = {.B = NB, .T = NT, .tokens = tok, .targets = tgt};
	taco_step_stats sa, sb;
	double ra[NB], rb[NB];
	taco_err err = {{0}};

	make_batch(a->cfg.vocab, 3, tok, tgt);
	ck_assert_int_eq(taco_model_eval(a, &bt, &sa, &err), 0);
	ck_assert_int_eq(taco_model_eval(b, &bt, &sb, &err), 0);
	ck_assert(memcmp(&sa.loss, &sb.loss, sizeof(double)) == 0);
	ck_assert_int_eq(taco_model_score(a, &bt, ra, &err), 0);
	ck_assert_int_eq(taco_model_score(b, &bt, rb, &err), 0);
	ck_assert(memcmp(ra, rb, sizeof(ra)) == 0);
	so.stream_layers = 6;
	ck_assert_int_eq(taco_model_set_step_opts(b, &so, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "stream_layers"));
	so.stream_layers = 1;
	so.keep_activations = 1;
	ck_assert_int_eq(taco_model_set_step_opts(b, &so, &err), -EINVAL);
	/* back to the device: nothing left in host memory */
	so.keep_activations = 0;
	so.stream_layers = 0;
	ck_assert_int_eq(taco_model_set_step_opts(b, &so, &err), 0);
	for (int i = 0; i < b->n_tensors; i++)
		ck_assert_ptr_null(b->tensors[i].host);
	ck_assert_int_eq(taco_model_eval(b, &bt, &sb, &err), 0);
	ck_assert(memcmp(&sa.loss, &sb.loss, sizeof(double)) == 0);
	taco_model_free(a);
	taco_model_free(b);
	ck_assert_uint_eq(tk_cpu_ops()->host_current(), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("weights_host");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 600);
	tcase_add_loop_test(tc, test_weights_host, 0,
			    (int)(sizeof(variants) / sizeof(variants[0])));
	tcase_add_test(tc, test_weights_host_eval_and_limits);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
