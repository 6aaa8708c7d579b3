/* test_generate.c: generation's forward pass (engine/model/decode.h)
 * against Hugging Face transformers' generate().
 *
 * tests/fixtures/gen_generate.py wrote, for every model fixture, three
 * prompts and transformers' greedy continuation of 32 tokens with each
 * step's logits (each prompt alone, with its KV cache). Here the three run
 * together in one cache: the prompts packed into one call (in chunks that
 * split them, so a row's later tokens read its earlier ones from the
 * cache), then one decode call per step for all three rows. The engine's
 * greedy choice must be transformers' at every step, and its logits within
 * 1e-5 of them (largest difference over the largest logit). The fixtures'
 * ids are fed back, not the engine's own, so that one near tie could not
 * hide the steps after it. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen/gen.h"
#include "model/decode.h"
#include "model/mem_terms.h"
#include "model/model.h"
#include "model/model_work.h"
#include "safetensors/safetensors.h"
#include "testutil.h"

#define STEPS 32
#define ROWS 3
#define CTX 64

static const char *const fixtures[] = {
    "llama_gqa",     "qwen3_tied", "mistral_sw",  "qwen2_bias", "llama_bf16",
    "opt_pre",	     "opt_post",   "neox_par",	  "neox_seq",	"qwen3_moe",
    "qwen3_moe_aux", "gpt_oss",	   "gpt_oss_aux", "qwen3_yarn",
};
#define N_FIXTURES ((int)(sizeof(fixtures) / sizeof(fixtures[0])))

typedef struct gen_fixture {
	char dir[4096];
	int32_t prompt[ROWS][16];
	int plen[ROWS];
	int32_t ids[ROWS][STEPS];
	taco_st_file *st;
	const float *logits[ROWS]; /* [STEPS, V] */
} gen_fixture;

static void gen_load(gen_fixture *g, const char *name, int V)
{
	char path[4200];
	json_error_t jerr;
	json_t *j, *p, *ids;
	taco_err err = {{0}};

	memset(g, 0, sizeof(*g));
	snprintf(g->dir, sizeof(g->dir), "%s/%s", tu_fixture("models"), name);
	snprintf(path, sizeof(path), "%s/generate.json", g->dir);
	j = json_load_file(path, 0, &jerr);
	ck_assert_msg(j != NULL, "%s: %s", path, jerr.text);
	p = json_object_get(j, "prompts");
	ids = json_object_get(j, "ids");
	ck_assert_int_eq(json_array_size(p), ROWS);
	for (int r = 0; r < ROWS; r++) {
		json_t *pr = json_array_get(p, r), *ir = json_array_get(ids, r);
		g->plen[r] = (int)json_array_size(pr);
		ck_assert(g->plen[r] >= 1 && g->plen[r] <= 16);
		for (int i = 0; i < g->plen[r]; i++)
			g->prompt[r][i] =
			    (int32_t)json_integer_value(json_array_get(pr, i));
		ck_assert_int_eq(json_array_size(ir), STEPS);
		for (int s = 0; s < STEPS; s++)
			g->ids[r][s] =
			    (int32_t)json_integer_value(json_array_get(ir, s));
	}
	json_decref(j);
	snprintf(path, sizeof(path), "%s/generate.safetensors", g->dir);
	ck_assert_msg(taco_st_open(path, &g->st, &err) == 0, "%s", err.msg);
	for (int r = 0; r < ROWS; r++) {
		char nm[32];
		const taco_st_tensor *t;
		snprintf(nm, sizeof(nm), "logits.%d", r);
		t = taco_st_find(g->st, nm);
		ck_assert_msg(t && t->nbytes == (uint64_t)STEPS * V * 4,
			      "%s: %s", path, nm);
		g->logits[r] = t->data;
	}
}

/* max |a - ref| / max |ref| */
static double step_err(const float *a, const float *ref, int n)
{
	double d = 0, mx = 0;

	for (int i = 0; i < n; i++) {
		double e = fabs((double)a[i] - ref[i]);
		if (!(e <= d))
			d = e; /* NaN included */
		if (fabs(ref[i]) > mx)
			mx = fabs(ref[i]);
	}
	return mx > 0 ? d / mx : d;
}

/* run_fixture's cache: beside a training step's buffers (evaluation's
 * answers: a streamed model's ring lent by the step) */
static int beside_step;

/* Runs the fixture through a cache of calls of `chunk` tokens: the
 * prompts packed, then STEPS - 1 decode steps. Returns the largest step
 * error; *flips counts steps whose argmax is not transformers' id; out
 * (may be NULL) takes every logit [ROWS, STEPS, V]. */
static double run_fixture(taco_model *m, const gen_fixture *g, int chunk,
			  int *flips, float *out)
{
	int V = m->cfg.vocab, n = 0, want[ROWS];
	int32_t tok[ROWS * 16], seq[ROWS * 16], rows[ROWS] = {0, 1, 2};
	float *lg = malloc((size_t)ROWS * V * sizeof(float));
	taco_err err = {{0}};
	taco_kv *kv;
	double worst = 0;
	int r;

	ck_assert_ptr_nonnull(lg);
	r = beside_step ? taco_kv_new_beside(m, ROWS, CTX, chunk, &kv, &err)
			: taco_kv_new(m, ROWS, CTX, chunk, &kv, &err);
	ck_assert_msg(r == 0, "%s", err.msg);
	/* the prompts interleaved token by token: calls mix the rows */
	for (int i = 0; i < 16; i++)
		for (int row = 0; row < ROWS; row++)
			if (i < g->plen[row]) {
				tok[n] = g->prompt[row][i];
				seq[n] = row;
				if (i == g->plen[row] - 1)
					want[row] = n;
				n++;
			}
	/* want must ascend: the rows' last prompt tokens in call order */
	int order[ROWS] = {0, 1, 2};
	for (int a = 0; a < ROWS; a++)
		for (int b = a + 1; b < ROWS; b++)
			if (want[order[b]] < want[order[a]]) {
				int t = order[a];
				order[a] = order[b];
				order[b] = t;
			}
	int32_t wsorted[ROWS];
	for (int a = 0; a < ROWS; a++)
		wsorted[a] = want[order[a]];
	*flips = 0;
	for (int s = 0; s < STEPS; s++) {
		float *row_lg[ROWS];
		if (s == 0) {
			r = taco_model_decode(m, kv, tok, seq, n, wsorted, ROWS,
					      lg, &err);
			for (int a = 0; a < ROWS; a++)
				row_lg[order[a]] = lg + (size_t)a * V;
		} else {
			int32_t step_tok[ROWS];
			for (int row = 0; row < ROWS; row++)
				step_tok[row] = g->ids[row][s - 1];
			r = taco_model_decode(m, kv, step_tok, rows, ROWS, rows,
					      ROWS, lg, &err);
			for (int row = 0; row < ROWS; row++)
				row_lg[row] = lg + (size_t)row * V;
		}
		ck_assert_msg(r == 0, "step %d: %s", s, err.msg);
		for (int row = 0; row < ROWS; row++) {
			const float *ref = g->logits[row] + (size_t)s * V;
			double e = step_err(row_lg[row], ref, V);
			if (e > worst || isnan(e))
				worst = isnan(e) ? INFINITY : e;
			*flips +=
			    taco_gen_argmax(row_lg[row], V) != g->ids[row][s];
			if (out)
				memcpy(out + ((size_t)row * STEPS + s) * V,
				       row_lg[row], (size_t)V * sizeof(float));
		}
	}
	for (int row = 0; row < ROWS; row++)
		ck_assert_int_eq(taco_kv_len(kv, row),
				 g->plen[row] + STEPS - 1);
	taco_kv_free(kv);
	free(lg);
	return worst;
}

START_TEST(test_greedy_parity)
{
	const char *name = fixtures[_i];
	taco_err err = {{0}};
	gen_fixture g;
	taco_model *m;
	char dir[4096];
	int flips;
	double e;

	snprintf(dir, sizeof(dir), "%s/%s", tu_fixture("models"), name);
	ck_assert_msg(taco_model_load_as(dir, tk_cpu_ops(), TK_F32, &m, &err) ==
			  0,
		      "%s: %s", name, err.msg);
	gen_load(&g, name, m->cfg.vocab);
	/* calls of 16 tokens (the 24 prompt tokens in two), and of 5 */
	e = run_fixture(m, &g, 16, &flips, NULL);
	printf("%-14s greedy: %d of %d choices differ, logits within %.2e\n",
	       name, flips, ROWS * STEPS, e);
	ck_assert_msg(flips == 0, "%s: %d greedy choices differ", name, flips);
	ck_assert_msg(e <= 1e-5, "%s: logits off by %.3g", name, e);
	e = run_fixture(m, &g, 5, &flips, NULL);
	ck_assert_msg(flips == 0 && e <= 1e-5, "%s, calls of 5: %.3g", name, e);
	taco_st_close(g.st);
	taco_model_free(m);
}
END_TEST

static taco_model *load_fixture(const char *name, int dt)
{
	taco_err err = {{0}};
	taco_model *m;
	char dir[4096];

	snprintf(dir, sizeof(dir), "%s/%s", tu_fixture("models"), name);
	ck_assert_msg(taco_model_load_as(dir, tk_cpu_ops(), dt, &m, &err) == 0,
		      "%s: %s", name, err.msg);
	return m;
}

/* LongRoPE (Phi-3): each prompt alone in a cache of one row, as the
 * fixture generated them (transformers picks the factors by a call's last
 * position, so rows sharing calls would switch together): the prefill
 * (within original_max_position_embeddings or past it), then each step's
 * call, the switch to the long factors happening mid-generation, the keys
 * cached before it kept. Calls of 4 tokens split the longer prompts. */
START_TEST(test_longrope_alone)
{
	static const char *const names[] = {"phi3_long", "phi3_short"};
	taco_model *m = load_fixture(names[_i], TK_F32);
	int V = m->cfg.vocab, flips = 0;
	float *lg = malloc((size_t)V * sizeof(float));
	taco_err err = {{0}};
	gen_fixture g;
	double worst = 0;

	gen_load(&g, names[_i], V);
	for (int row = 0; row < ROWS; row++) {
		int32_t seq[16] = {0}, want;
		taco_kv *kv;
		ck_assert_int_eq(taco_kv_new(m, 1, CTX, 16, &kv, &err), 0);
		want = g.plen[row] - 1;
		ck_assert_msg(taco_model_decode(m, kv, g.prompt[row], seq,
						g.plen[row], &want, 1, lg,
						&err) == 0,
			      "%s", err.msg);
		for (int s = 0; s < STEPS; s++) {
			const float *ref = g.logits[row] + (size_t)s * V;
			double e = step_err(lg, ref, V);
			worst = e > worst || isnan(e) ? e : worst;
			flips += taco_gen_argmax(lg, V) != g.ids[row][s];
			if (s == STEPS - 1)
				break;
			want = 0;
			ck_assert(taco_model_decode(m, kv, &g.ids[row][s], seq,
						    1, &want, 1, lg,
						    &err) == 0);
		}
		taco_kv_free(kv);
	}
	printf("%-14s alone: %d of %d choices differ, logits within %.2e\n",
	       names[_i], flips, ROWS * STEPS, worst);
	ck_assert_int_eq(flips, 0);
	ck_assert_msg(worst <= 1e-5, "logits off by %.3g", worst);
	free(lg);
	taco_st_close(g.st);
	taco_model_free(m);
}
END_TEST

/* Streamed weights (a mixture of experts' last two layers from host
 * memory, through the ring) give the same bits, also through the ring a
 * training step's buffers lend (evaluation's answers), whose cache then
 * holds exactly the ring's bytes less, as its plan says. */
START_TEST(test_streamed_weights)
{
	taco_model *m = load_fixture("qwen3_moe", TK_F32);
	taco_step_opts so = m->sched;
	taco_err err = {{0}};
	gen_fixture g;
	size_t n = (size_t)ROWS * STEPS * m->cfg.vocab;
	float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
	const tk_ops *o = tk_cpu_ops();
	uint64_t own[TACO_PLAN_TERMS] = {0}, lent[TACO_PLAN_TERMS] = {0};
	uint64_t host = 0, sum = 0, sum_own = 0;
	int32_t one = 1;
	float *lg = malloc((size_t)m->cfg.vocab * sizeof(float));
	size_t before;
	taco_kv *kv;
	int flips;

	gen_load(&g, "qwen3_moe", m->cfg.vocab);
	run_fixture(m, &g, 16, &flips, a);
	so.stream_layers = 2;
	ck_assert_msg(taco_model_set_step_opts(m, &so, &err) == 0, "%s",
		      err.msg);
	run_fixture(m, &g, 16, &flips, b);
	ck_assert_int_eq(flips, 0);
	ck_assert(memcmp(a, b, n * sizeof(float)) == 0);

	/* beside a step: without the step's buffers a call is refused */
	ck_assert_int_eq(taco_kv_new_beside(m, ROWS, CTX, 16, &kv, &err), 0);
	ck_assert_int_eq(taco_model_decode(m, kv, &one, &(int32_t){0}, 1,
					   &(int32_t){0}, 1, lg, &err),
			 -EINVAL);
	ck_assert_int_eq(taco_kv_len(kv, 0), 0);
	taco_kv_free(kv);
	ck_assert_int_eq(taco_work_ensure(m, 2, 16, &err), 0);
	beside_step = 1;
	memset(b, 0, n * sizeof(float));
	run_fixture(m, &g, 16, &flips, b);
	beside_step = 0;
	ck_assert_int_eq(flips, 0);
	ck_assert(memcmp(a, b, n * sizeof(float)) == 0);
	ck_assert_int_eq(taco_kv_plan(m, ROWS, CTX, 16, own, &host), 0);
	ck_assert_int_eq(taco_kv_plan_beside(m, ROWS, CTX, 16, lent, &host), 0);
	for (int t = 0; t < TACO_PLAN_TERMS; t++) {
		sum += lent[t];
		sum_own += own[t];
	}
	ck_assert_uint_gt(own[TACO_PLAN_WEIGHT_RING], 0);
	ck_assert_uint_eq(lent[TACO_PLAN_WEIGHT_RING], 0);
	ck_assert_uint_eq(sum, sum_own - own[TACO_PLAN_WEIGHT_RING]);
	before = o->mem_current();
	ck_assert_int_eq(taco_kv_new_beside(m, ROWS, CTX, 16, &kv, &err), 0);
	ck_assert_uint_eq(o->mem_current() - before, sum);
	taco_kv_free(kv);
	ck_assert_uint_eq(o->mem_current(), before);
	free(lg);
	free(a);
	free(b);
	taco_st_close(g.st);
	taco_model_free(m);
}
END_TEST

/* bf16 precision: the same greedy path, within what bf16 rounding gives
 * (transformers' own bf16 runs of these fixtures are off by a few
 * percent). */
START_TEST(test_bf16)
{
	taco_model *m = load_fixture("llama_gqa", TK_BF16);
	gen_fixture g;
	int flips;
	double e;

	gen_load(&g, "llama_gqa", m->cfg.vocab);
	e = run_fixture(m, &g, 16, &flips, NULL);
	printf("llama_gqa bf16: %d of %d choices differ, logits within "
	       "%.2e\n",
	       flips, ROWS * STEPS, e);
	ck_assert_msg(e < 5e-2, "bf16 logits off by %.3g", e);
	taco_st_close(g.st);
	taco_model_free(m);
}
END_TEST

/* The cache and its call buffers are what taco_kv_plan says, byte for
 * byte (the CPU allocator's counter). */
START_TEST(test_plan_exact)
{
	const char *names[] = {"llama_gqa", "opt_post", "gpt_oss", "neox_par"};

	for (int i = 0; i < 4; i++) {
		taco_model *m =
		    load_fixture(names[i], i % 2 ? TK_BF16 : TK_F32);
		const tk_ops *o = tk_cpu_ops();
		uint64_t term[TACO_PLAN_TERMS] = {0}, host = 0, sum = 0;
		size_t before = o->mem_current();
		taco_err err = {{0}};
		taco_kv *kv;

		ck_assert_int_eq(taco_kv_plan(m, 4, 48, 32, term, &host), 0);
		for (int t = 0; t < TACO_PLAN_TERMS; t++)
			sum += term[t];
		ck_assert_int_eq(taco_kv_new(m, 4, 48, 32, &kv, &err), 0);
		ck_assert_uint_eq(o->mem_current() - before, sum);
		ck_assert_uint_eq(term[TACO_PLAN_KV_CACHE],
				  2ull * m->cfg.layers * 4 * 48 *
				      m->cfg.kv_heads * m->cfg.head_dim *
				      (i % 2 ? 2 : 4));
		taco_kv_free(kv);
		ck_assert_uint_eq(o->mem_current(), before);
		taco_model_free(m);
	}
}
END_TEST

START_TEST(test_decode_errors)
{
	taco_model *m = load_fixture("opt_pre", TK_F32);
	taco_err err = {{0}};
	int32_t tok[4] = {5, 6, 7, 8}, seq[4] = {0, 0, 1, 1}, w[2] = {1, 3};
	float lg[2 * 256];
	taco_kv *kv;

	/* OPT's learned positions bound the context */
	ck_assert_int_eq(taco_kv_new(m, 2, 65, 8, &kv, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "learned positions"));
	ck_assert_int_eq(taco_kv_new(m, 4, 16, 2, &kv, &err), -EINVAL);
	ck_assert_int_eq(taco_kv_new(m, 2, 3, 4, &kv, &err), 0);
	tok[2] = 256;
	ck_assert_int_eq(taco_model_decode(m, kv, tok, seq, 4, w, 2, lg, &err),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "vocabulary"));
	ck_assert_int_eq(taco_kv_len(kv, 1), 0); /* nothing appended */
	tok[2] = 7;
	seq[3] = 2;
	ck_assert_int_eq(taco_model_decode(m, kv, tok, seq, 4, w, 2, lg, &err),
			 -EINVAL);
	seq[3] = 1;
	w[1] = 1;
	ck_assert_int_eq(taco_model_decode(m, kv, tok, seq, 4, w, 2, lg, &err),
			 -EINVAL);
	w[1] = 3;
	ck_assert_int_eq(taco_model_decode(m, kv, tok, seq, 4, w, 2, lg, &err),
			 0);
	ck_assert_int_eq(taco_kv_len(kv, 0), 2);
	/* row 0 holds 3 positions: two more do not fit */
	ck_assert_int_eq(
	    taco_model_decode(m, kv, tok, seq, 2, NULL, 0, lg, &err), -ENOSPC);
	ck_assert_int_eq(taco_kv_len(kv, 0), 2);
	taco_kv_free(kv);
	taco_model_free(m);
}
END_TEST

/* The sampler's draws against the softmax of a small row. */
START_TEST(test_sampler)
{
	const float lg[4] = {0.0f, 1.0f, 2.0f, 3.0f};
	float pf[4], p[4], z = 0;
	int32_t pi[4];
	int cnt[4] = {0}, n = 40000;
	taco_sampling s = {.max_tokens = 1, .temperature = 1.0f, .top_p = 1.0f};
	taco_gen_rng r = taco_gen_rng_of(42, 0);

	for (int i = 0; i < 4; i++)
		z += (p[i] = expf(lg[i]));
	for (int i = 0; i < n; i++)
		cnt[taco_gen_sample(lg, 4, &s, &r, pf, pi)]++;
	for (int i = 0; i < 4; i++)
		ck_assert_msg(fabs((double)cnt[i] / n - p[i] / z) < 0.01,
			      "token %d: %d of %d against p %.3f", i, cnt[i], n,
			      (double)(p[i] / z));
	/* top-k 2: the two largest; top-p 0.5: the largest alone (0.64);
	 * top-p 0.7: the two largest (0.64 + 0.24) */
	for (int mode = 0; mode < 3; mode++) {
		memset(cnt, 0, sizeof(cnt));
		s.top_k = mode == 0 ? 2 : 0;
		s.top_p = mode == 1 ? 0.5f : mode == 2 ? 0.7f : 1.0f;
		for (int i = 0; i < 4000; i++)
			cnt[taco_gen_sample(lg, 4, &s, &r, pf, pi)]++;
		ck_assert_int_eq(cnt[0] + cnt[1], 0);
		ck_assert_int_eq(cnt[2] == 0, mode == 1);
		ck_assert_int_gt(cnt[3], 0);
	}
	/* temperature 0: the first largest */
	{
		const float tie[3] = {1.0f, 5.0f, 5.0f};
		s.temperature = 0.0f;
		ck_assert_int_eq(taco_gen_sample(tie, 3, &s, &r, pf, pi), 1);
	}
}
END_TEST

/* The demo model and its tokenizer (examples/demo). */
typedef struct demo {
	taco_model *m;
	taco_tok *tok;
	taco_kv *kv;
	int32_t *prompt[2];
	int plen[2];
} demo;

static void demo_open(demo *d)
{
	const char *texts[2] = {"5 numbers after 69", "3 numbers after 9"};
	char dir[4096], path[4200];
	taco_err err = {{0}};

	memset(d, 0, sizeof(*d));
	snprintf(dir, sizeof(dir), "%s/../../examples/demo/model",
		 tu_fixture("."));
	ck_assert_msg(
	    taco_model_load_as(dir, tk_cpu_ops(), TK_F32, &d->m, &err) == 0,
	    "%s", err.msg);
	snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
	ck_assert_msg(taco_tok_load(path, &d->tok, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(taco_kv_new(d->m, 4, 96, 64, &d->kv, &err), 0);
	for (int i = 0; i < 2; i++) {
		taco_tok_ids ids = {0};
		ck_assert_int_eq(taco_tok_encode(d->tok, texts[i],
						 strlen(texts[i]), 1, &ids,
						 &err),
				 0);
		d->prompt[i] = ids.ids;
		d->plen[i] = (int)ids.n;
	}
}

static void demo_close(demo *d)
{
	taco_kv_free(d->kv);
	taco_tok_free(d->tok);
	taco_model_free(d->m);
	free(d->prompt[0]);
	free(d->prompt[1]);
}

static int gen(demo *d, const taco_sampling *s, int n, taco_gen_delta cb,
	       void *ctx, taco_completion *out)
{
	taco_err err = {{0}};
	const int32_t *p[4] = {d->prompt[0], d->prompt[1], d->prompt[0],
			       d->prompt[1]};
	int pl[4] = {d->plen[0], d->plen[1], d->plen[0], d->plen[1]};

	return taco_generate(d->m, d->kv, d->tok, p, pl, n, s, cb, ctx, out,
			     &err);
}

/* Greedy through taco_generate is the model's own argmax, row by row. */
START_TEST(test_generate_greedy)
{
	demo d;
	taco_completion c[2];
	taco_sampling s = {.max_tokens = 24, .top_p = 1.0f};
	taco_err err = {{0}};
	int V;

	demo_open(&d);
	V = d.m->cfg.vocab;
	ck_assert_int_eq(gen(&d, &s, 2, NULL, NULL, c), 0);
	for (int i = 0; i < 2; i++) {
		float *lg = malloc((size_t)V * sizeof(float));
		int32_t zero = 0, last = d.plen[i] - 1;
		ck_assert_int_eq(c[i].n_ids, 24);
		ck_assert_int_eq(c[i].finish, TACO_FINISH_LENGTH);
		taco_kv_clear(d.kv, 3);
		int32_t seq[64];
		for (int j = 0; j < d.plen[i]; j++)
			seq[j] = 3;
		ck_assert_int_eq(taco_model_decode(d.m, d.kv, d.prompt[i], seq,
						   d.plen[i], &last, 1, lg,
						   &err),
				 0);
		for (int t = 0; t < 24; t++) {
			int32_t row = 3, id = taco_gen_argmax(lg, V);
			ck_assert_int_eq(id, c[i].ids[t]);
			ck_assert_int_eq(taco_model_decode(d.m, d.kv, &id, &row,
							   1, &zero, 1, lg,
							   &err),
					 0);
		}
		free(lg);
		taco_completion_clear(&c[i]);
	}
	demo_close(&d);
}
END_TEST

typedef struct deltas {
	char buf[2][4096];
	size_t len[2];
	int calls, cancel_at;
} deltas;

static int on_delta(void *ctx, int i, const char *text, size_t len)
{
	deltas *d = ctx;

	ck_assert(d->len[i] + len < sizeof(d->buf[i]));
	memcpy(d->buf[i] + d->len[i], text, len);
	d->len[i] += len;
	return ++d->calls == d->cancel_at;
}

/* A seed repeats its completions; stop strings and tokens end them;
 * the streamed text is the completion's. */
START_TEST(test_generate_sampled)
{
	demo d;
	taco_completion a[4], b[4], c[2];
	taco_sampling s = {.max_tokens = 32,
			   .temperature = 1.0f,
			   .top_p = 0.95f,
			   .top_k = 50,
			   .seed = 7};
	deltas ds;
	int same = 1;

	demo_open(&d);
	ck_assert_int_eq(gen(&d, &s, 4, NULL, NULL, a), 0);
	ck_assert_int_eq(gen(&d, &s, 4, NULL, NULL, b), 0);
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(a[i].n_ids, b[i].n_ids);
		ck_assert(memcmp(a[i].ids, b[i].ids, (size_t)a[i].n_ids * 4) ==
			  0);
		ck_assert_str_eq(a[i].text, b[i].text);
		taco_completion_clear(&b[i]);
	}
	/* completions 0 and 2 share a prompt, not a generator */
	same = a[0].n_ids == a[2].n_ids &&
	       memcmp(a[0].ids, a[2].ids, (size_t)a[0].n_ids * 4) == 0;
	ck_assert(!same);
	s.seed = 8;
	ck_assert_int_eq(gen(&d, &s, 4, NULL, NULL, b), 0);
	same = a[0].n_ids == b[0].n_ids &&
	       memcmp(a[0].ids, b[0].ids, (size_t)a[0].n_ids * 4) == 0;
	ck_assert(!same);
	for (int i = 0; i < 4; i++)
		taco_completion_clear(&b[i]);

	/* greedy text, then a stop string from its middle */
	taco_sampling g = {.max_tokens = 24, .top_p = 1.0f};
	ck_assert_int_eq(gen(&d, &g, 2, NULL, NULL, c), 0);
	ck_assert_uint_gt(c[0].len, 8);
	char stop[4] = {0};
	memcpy(stop, c[0].text + c[0].len / 2, 3);
	const char *stops[1] = {stop};
	size_t cut = (size_t)(strstr(c[0].text, stop) - c[0].text);
	g.stop = stops;
	g.n_stop = 1;
	memset(&ds, 0, sizeof(ds));
	ck_assert_int_eq(gen(&d, &g, 2, on_delta, &ds, b), 0);
	ck_assert_uint_eq(b[0].len, cut);
	ck_assert(memcmp(b[0].text, c[0].text, cut) == 0);
	ck_assert_int_eq(b[0].finish, TACO_FINISH_STOP);
	for (int i = 0; i < 2; i++) {
		ck_assert_uint_eq(ds.len[i], b[i].len);
		ck_assert(memcmp(ds.buf[i], b[i].text, b[i].len) == 0);
		taco_completion_clear(&b[i]);
	}
	/* the third token as a stop token: two tokens, finish stop */
	int32_t third = c[1].ids[2];
	g.n_stop = 0;
	g.stop_ids = &third;
	g.n_stop_ids = 1;
	ck_assert_int_eq(gen(&d, &g, 2, NULL, NULL, b), 0);
	ck_assert_int_le(b[1].n_ids, 2);
	ck_assert_int_eq(b[1].finish, TACO_FINISH_STOP);
	for (int i = 0; i < 2; i++)
		taco_completion_clear(&b[i]);
	/* the caller cancels */
	memset(&ds, 0, sizeof(ds));
	ds.cancel_at = 2;
	g.n_stop_ids = 0;
	ck_assert_int_eq(gen(&d, &g, 2, on_delta, &ds, b), -ECANCELED);
	/* bad sampling, a prompt past the context */
	g.top_p = 0.0f;
	ck_assert_int_eq(gen(&d, &g, 2, NULL, NULL, b), -EINVAL);
	g.top_p = 1.0f;
	{
		int32_t longp[100] = {0};
		const int32_t *pp[1] = {longp};
		int pl[1] = {96};
		taco_err err = {{0}};
		ck_assert_int_eq(taco_generate(d.m, d.kv, d.tok, pp, pl, 1, &g,
					       NULL, NULL, b, &err),
				 -E2BIG);
	}
	for (int i = 0; i < 2; i++)
		taco_completion_clear(&c[i]);
	for (int i = 0; i < 4; i++)
		taco_completion_clear(&a[i]);
	demo_close(&d);
}
END_TEST

Suite *generate_suite(void)
{
	Suite *s = suite_create("generate");
	TCase *tc = tcase_create("parity");

	tcase_set_timeout(tc, 600);
	tcase_add_loop_test(tc, test_greedy_parity, 0, N_FIXTURES);
	tcase_add_loop_test(tc, test_longrope_alone, 0, 2);
	tcase_add_test(tc, test_streamed_weights);
	tcase_add_test(tc, test_bf16);
	tcase_add_test(tc, test_plan_exact);
	tcase_add_test(tc, test_decode_errors);
	tcase_add_test(tc, test_sampler);
	tcase_add_test(tc, test_generate_greedy);
	tcase_add_test(tc, test_generate_sampled);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(generate_suite(), 0);
}
