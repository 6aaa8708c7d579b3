/* test_cuda_optim_attn.c: the CUDA backend's attention, TACO and AdamW
 * kernels against the CPU reference.
 *
 * - Attention forward and backward on random inputs, several shapes (GQA,
 *   MQA and MHA; hd 16..256; T 1..300; packed documents through pos; a
 *   sliding window): every output is poisoned with NaN before the run, the
 *   relative error against the CPU must be < 1e-4 with no NaN, and the
 *   backward must give the same bits when run twice (no atomics).
 * - TACO, bit for bit against the CPU over 50 steps: weights, idx, FP8
 *   codes and scales compared byte for byte after every step, for f32, f16,
 *   nearest and stochastic bf16, k = 1/4/16, beta 0 and 0.9, R < k, the
 *   uint32 index path (R > 65535), gradients with ties, a column whose
 *   gradient holds a NaN, and a corrupt state.
 * - AdamW, bit for bit over 10 steps (both lerp branches, decay on/off).
 *
 * Exits 77 (skipped) when tk_cuda_open fails. Runs without fork: the CUDA
 * context of the parent is not usable in a forked child.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tk_convert.h"
#include "tk_hash.h"
#include "tk_ops.h"

static const tk_ops *cpu, *gpu;

/* ---- helpers ------------------------------------------------------------ */

static void *xmalloc(size_t bytes)
{
	void *p = malloc(bytes ? bytes : 1);

	ck_assert_ptr_nonnull(p);
	return p;
}

/* A device copy of bytes of host memory. */
static void *dev_from(const void *host, size_t bytes)
{
	void *d = gpu->alloc(bytes ? bytes : 1);

	ck_assert_ptr_nonnull(d);
	if (bytes)
		gpu->upload(d, host, bytes);
	return d;
}

/* A device buffer of n floats, all NaN: outputs must overwrite it. */
static float *dev_nan(size_t n)
{
	float *h = xmalloc(n * sizeof(float)), *d;

	for (size_t i = 0; i < n; i++)
		h[i] = NAN;
	d = dev_from(h, n * sizeof(float));
	free(h);
	return d;
}

static void *host_from(const void *dev, size_t bytes)
{
	void *h = xmalloc(bytes);

	gpu->download(h, dev, bytes);
	return h;
}

static void no_cuda_error(const char *where)
{
	const char *e = tk_cuda_last_error();

	ck_assert_msg(e == NULL, "%s: CUDA error: %s", where, e ? e : "");
}

static uint64_t rng_next(uint64_t *s)
{
	return tk_splitmix64_next(s);
}

/* Uniform in [-1, 1) with 24-bit resolution. */
static float rnd_uniform(uint64_t *s)
{
	return (float)((int64_t)(rng_next(s) >> 40) - (1 << 23)) * 0x1p-23f;
}

/* From a small set: many equal |G| (the tie rules). */
static float rnd_ties(uint64_t *s)
{
	static const float set[7] = {-2, -1, -0.5f, 0, 0.5f, 1, 2};

	return set[(rng_next(s) >> 32) % 7];
}

static int has_nan(const float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (isnan(x[i]))
			return 1;
	return 0;
}

/* ---- attention ------------------------------------------------------------
 */

/* ||x - ref|| / max(||ref||, 1e-2 sqrt(n)) in double, +inf on NaN: the
 * relative error, with a floor for results that are 0 in exact arithmetic
 * (dq of a query that only sees itself), where both backends return
 * rounding noise (rms ~1e-8) that no relative bound can compare. */
static double rel_err_floor(const float *x, const float *ref, size_t n)
{
	double num = 0, den = 0, fl = 1e-4 * (double)n;

	for (size_t i = 0; i < n; i++) {
		double d = (double)x[i] - (double)ref[i];

		if (isnan(x[i]) || isnan(ref[i]))
			return INFINITY;
		num += d * d;
		den += (double)ref[i] * (double)ref[i];
	}
	return sqrt(num / (den > fl ? den : fl));
}

/* The GPU's x against the CPU's ref: error < 1e-4 and no NaN. */
static double check_close(const char *what, const float *x, const float *ref,
			  size_t n, const char *shape)
{
	double e = rel_err_floor(x, ref, n);

	ck_assert_msg(!has_nan(x, n), "%s %s: NaN in the output", shape, what);
	ck_assert_msg(e < 1e-4, "%s %s: relative error %g", shape, what, e);
	return e;
}

/* pos of B rows of T tokens: one document per row, or packed documents of
 * random lengths 1..80 (positions restart at 0 at each start). */
static void fill_pos(int32_t *pos, int B, int T, int docs, uint64_t *s)
{
	for (int b = 0; b < B; b++) {
		int left = 0, p = 0;

		for (int t = 0; t < T; t++) {
			if (docs && left == 0) {
				left = 1 + (int)(rng_next(s) % 80);
				p = 0;
			}
			pos[(size_t)b * T + t] = p++;
			left--;
		}
	}
}

static void check_attention(int B, int T, int nh, int nkv, int hd, int window,
			    int docs, uint64_t seed)
{
	const size_t n = (size_t)B * T, nq = n * nh * hd, nk = n * nkv * hd;
	const size_t nl = (size_t)B * nh * T;
	const float scale = 1.0f / sqrtf((float)hd);
	float *q = xmalloc(nq * 4), *k = xmalloc(nk * 4), *v = xmalloc(nk * 4);
	float *dout = xmalloc(nq * 4), *out = xmalloc(nq * 4);
	float *lse = xmalloc(nl * 4), *dq = xmalloc(nq * 4);
	float *dk = xmalloc(nk * 4), *dv = xmalloc(nk * 4);
	int32_t *pos = xmalloc(n * 4);
	float *gq, *gk, *gv, *gdout, *gout, *glse, *gdq, *gdk, *gdv;
	float *h, *h2;
	int32_t *gpos;
	char shape[128];
	double err[5];
	uint64_t s = seed;
	size_t m0 = gpu->mem_current();

	snprintf(shape, sizeof(shape),
		 "B %d T %d nh %d nkv %d hd %d window %d docs %d", B, T, nh,
		 nkv, hd, window, docs);
	/* q, k of [-2, 2): scores up to a few units, peaked softmaxes */
	tu_fill_uniform(q, nq, -2, 2, &s);
	tu_fill_uniform(k, nk, -2, 2, &s);
	tu_fill_uniform(v, nk, -1, 1, &s);
	tu_fill_uniform(dout, nq, -1, 1, &s);
	fill_pos(pos, B, T, docs, &s);

	cpu->attention_fwd(out, lse, q, k, v, pos, B, T, nh, nkv, hd, window,
			   scale);
	cpu->attention_bwd(dq, dk, dv, dout, out, lse, q, k, v, pos, B, T, nh,
			   nkv, hd, window, scale);

	gq = dev_from(q, nq * 4);
	gk = dev_from(k, nk * 4);
	gv = dev_from(v, nk * 4);
	gdout = dev_from(dout, nq * 4);
	gpos = dev_from(pos, n * 4);
	gout = dev_nan(nq);
	glse = dev_nan(nl);
	gdq = dev_nan(nq);
	gdk = dev_nan(nk);
	gdv = dev_nan(nk);

	gpu->attention_fwd(gout, glse, gq, gk, gv, gpos, B, T, nh, nkv, hd,
			   window, scale);
	no_cuda_error(shape);
	h = host_from(gout, nq * 4);
	err[0] = check_close("out", h, out, nq, shape);
	free(h);
	h = host_from(glse, nl * 4);
	err[1] = check_close("lse", h, lse, nl, shape);
	free(h);

	/* the backward from the GPU's own out and lse */
	gpu->attention_bwd(gdq, gdk, gdv, gdout, gout, glse, gq, gk, gv, gpos,
			   B, T, nh, nkv, hd, window, scale);
	no_cuda_error(shape);
	h = host_from(gdq, nq * 4);
	err[2] = check_close("dq", h, dq, nq, shape);
	free(h);
	h = host_from(gdk, nk * 4);
	err[3] = check_close("dk", h, dk, nk, shape);
	h2 = host_from(gdv, nk * 4);
	err[4] = check_close("dv", h2, dv, nk, shape);

	printf("%s: out %.1e lse %.1e dq %.1e dk %.1e dv %.1e\n", shape, err[0],
	       err[1], err[2], err[3], err[4]);

	/* again, over poisoned outputs: overwritten, and the same bits */
	gpu->free(gdk, nk * 4);
	gpu->free(gdv, nk * 4);
	gdk = dev_nan(nk);
	gdv = dev_nan(nk);
	gpu->attention_bwd(gdq, gdk, gdv, gdout, gout, glse, gq, gk, gv, gpos,
			   B, T, nh, nkv, hd, window, scale);
	no_cuda_error(shape);
	memcpy(dk, h, nk * 4);
	memcpy(dv, h2, nk * 4);
	free(h);
	free(h2);
	h = host_from(gdk, nk * 4);
	h2 = host_from(gdv, nk * 4);
	ck_assert_msg(!memcmp(h, dk, nk * 4) && !memcmp(h2, dv, nk * 4),
		      "%s: dk/dv differ between two runs", shape);
	free(h);
	free(h2);

	gpu->free(gq, nq * 4);
	gpu->free(gk, nk * 4);
	gpu->free(gv, nk * 4);
	gpu->free(gdout, nq * 4);
	gpu->free(gpos, n * 4);
	gpu->free(gout, nq * 4);
	gpu->free(glse, nl * 4);
	gpu->free(gdq, nq * 4);
	gpu->free(gdk, nk * 4);
	gpu->free(gdv, nk * 4);
	ck_assert_uint_eq(gpu->mem_current(), m0);
	free(q);
	free(k);
	free(v);
	free(dout);
	free(out);
	free(lse);
	free(dq);
	free(dk);
	free(dv);
	free(pos);
}

START_TEST(test_attention_gqa)
{
	check_attention(2, 1, 8, 2, 64, 0, 0, 1);
	check_attention(1, 17, 8, 2, 128, 0, 0, 2);
	check_attention(2, 300, 8, 2, 64, 0, 0, 3);
	check_attention(1, 300, 8, 2, 128, 0, 0, 4);
}
END_TEST

START_TEST(test_attention_docs_window)
{
	check_attention(2, 300, 8, 2, 64, 0, 1, 5);   /* packed documents */
	check_attention(1, 300, 8, 2, 128, 37, 0, 6); /* sliding window */
	check_attention(2, 257, 8, 2, 128, 50, 1, 7); /* both */
	check_attention(1, 65, 8, 2, 64, 1, 0, 8);    /* only itself */
}
END_TEST

START_TEST(test_attention_head_dims)
{
	/* the fixture models (hd 16, 24), padded and exact tiles, MHA and
	 * MQA */
	check_attention(2, 70, 4, 2, 16, 0, 1, 9);
	check_attention(1, 70, 4, 2, 24, 0, 0, 10);
	check_attention(1, 100, 4, 4, 80, 0, 1, 11);
	check_attention(1, 100, 4, 1, 96, 20, 0, 12);
	check_attention(1, 90, 2, 1, 256, 0, 1, 13);
}
END_TEST

/* ---- TACO ------------------------------------------------------------------
 */

/* One TACO tensor on one backend: W (dtype), idx, q, scale. */
typedef struct {
	void *W, *idx;
	uint8_t *q;
	float *scale;
} tacobuf;

typedef struct {
	int R, C, k, dtype, stochastic;
	float beta;
	int ties;    /* odd steps draw G from a small set */
	int nan_col; /* >= 0: a NaN in this column at step 20 */
	int corrupt; /* corrupt the state at step 10 */
} tcase;

static size_t esz_of(int dtype)
{
	return dtype == TK_F32 ? 4 : 2;
}

static void taco_down(const tcase *c, const tacobuf *d, tacobuf *h)
{
	const size_t n = (size_t)c->R * c->C, ck = (size_t)c->C * c->k;
	const size_t ib = c->R > 65535 ? 4 : 2;

	gpu->download(h->W, d->W, n * esz_of(c->dtype));
	gpu->download(h->idx, d->idx, ck * ib);
	gpu->download(h->q, d->q, ck);
	gpu->download(h->scale, d->scale, (size_t)c->C * 4);
}

static void taco_up(const tcase *c, tacobuf *d, const tacobuf *h)
{
	const size_t n = (size_t)c->R * c->C, ck = (size_t)c->C * c->k;
	const size_t ib = c->R > 65535 ? 4 : 2;

	gpu->upload(d->W, h->W, n * esz_of(c->dtype));
	gpu->upload(d->idx, h->idx, ck * ib);
	gpu->upload(d->q, h->q, ck);
	gpu->upload(d->scale, h->scale, (size_t)c->C * 4);
}

/* First differing byte of two buffers, or -1. */
static long long first_diff(const void *a, const void *b, size_t n)
{
	const unsigned char *x = a, *y = b;

	for (size_t i = 0; i < n; i++)
		if (x[i] != y[i])
			return (long long)i;
	return -1;
}

static void check_taco(const tcase *c, int steps, uint64_t seed)
{
	const size_t n = (size_t)c->R * c->C, ck = (size_t)c->C * c->k;
	const size_t ib = c->R > 65535 ? 4 : 2, es = esz_of(c->dtype);
	const size_t m0 = gpu->mem_current();
	tacobuf hc, hg, d;
	float *G = xmalloc(n * 4), *dG;
	tk_taco_args a;
	uint64_t s = seed;
	int moved = 0;

	/* host state of the CPU run (hc), the GPU's downloaded (hg) */
	hc.W = xmalloc(n * es);
	hc.idx = xmalloc(ck * ib);
	hc.q = xmalloc(ck);
	hc.scale = xmalloc((size_t)c->C * 4);
	for (size_t i = 0; i < n; i++) {
		float w = rnd_uniform(&s);

		if (c->dtype == TK_F32)
			((float *)hc.W)[i] = w;
		else if (c->dtype == TK_BF16)
			((uint16_t *)hc.W)[i] = tk_f32_bf16_rne(w);
		else
			((uint16_t *)hc.W)[i] = tk_f32_f16_rne(w);
	}
	memset(hc.idx, 0xFF, ck * ib);
	memset(hc.q, 0, ck);
	memset(hc.scale, 0, (size_t)c->C * 4);
	hg.W = xmalloc(n * es);
	hg.idx = xmalloc(ck * ib);
	hg.q = xmalloc(ck);
	hg.scale = xmalloc((size_t)c->C * 4);
	d.W = dev_from(hc.W, n * es);
	d.idx = dev_from(hc.idx, ck * ib);
	d.q = dev_from(hc.q, ck);
	d.scale = dev_from(hc.scale, (size_t)c->C * 4);
	dG = gpu->alloc(n * 4);
	ck_assert_ptr_nonnull(dG);

	memset(&a, 0, sizeof(a));
	a.R = c->R;
	a.C = c->C;
	a.k = c->k;
	a.lr = 0.01f;
	a.beta = c->beta;
	a.weight_decay = 0.1f;
	a.stochastic = c->stochastic;
	a.seed = 1234;
	a.tensor_index = 7;
	for (int t = 1; t <= steps; t++) {
		for (size_t i = 0; i < n; i++)
			G[i] =
			    c->ties && t % 2 ? rnd_ties(&s) : rnd_uniform(&s);
		if (c->nan_col >= 0 && t == 20)
			G[(size_t)(c->R / 2) * c->C + c->nan_col] = NAN;
		if (c->corrupt && t == 10) {
			/* a slot row >= R (empty), an infinite scale and a
			 * NaN code (skipped columns), on both sides */
			taco_down(c, &d, &hg);
			if (ib == 2)
				((uint16_t *)hc.idx)[1] = (uint16_t)(c->R + 3);
			else
				((uint32_t *)hc.idx)[1] = (uint32_t)c->R + 3;
			hc.scale[1 % c->C] = INFINITY;
			hc.q[(size_t)(2 % c->C) * c->k] = 0x7F;
			taco_up(c, &d, &hc);
		}
		gpu->upload(dG, G, n * 4);
		a.step = (uint64_t)t;
		cpu->taco_update(hc.W, c->dtype, G, hc.idx, hc.q, hc.scale, &a);
		gpu->taco_update(d.W, c->dtype, dG, d.idx, d.q, d.scale, &a);
		no_cuda_error("taco_update");
		taco_down(c, &d, &hg);
		ck_assert_msg(first_diff(hg.W, hc.W, n * es) < 0,
			      "R %d C %d k %d step %d: W differs at byte %lld",
			      c->R, c->C, c->k, t,
			      first_diff(hg.W, hc.W, n * es));
		ck_assert_msg(first_diff(hg.idx, hc.idx, ck * ib) < 0,
			      "R %d C %d k %d step %d: idx differs at %lld",
			      c->R, c->C, c->k, t,
			      first_diff(hg.idx, hc.idx, ck * ib));
		ck_assert_msg(first_diff(hg.q, hc.q, ck) < 0,
			      "R %d C %d k %d step %d: q differs at %lld", c->R,
			      c->C, c->k, t, first_diff(hg.q, hc.q, ck));
		ck_assert_msg(
		    first_diff(hg.scale, hc.scale, (size_t)c->C * 4) < 0,
		    "R %d C %d k %d step %d: scale differs at byte %lld", c->R,
		    c->C, c->k, t,
		    first_diff(hg.scale, hc.scale, (size_t)c->C * 4));
		moved |= hc.scale[0] != 0.0f;
	}
	ck_assert_msg(moved, "the state never filled: the test is vacuous");

	gpu->free(d.W, n * es);
	gpu->free(d.idx, ck * ib);
	gpu->free(d.q, ck);
	gpu->free(d.scale, (size_t)c->C * 4);
	gpu->free(dG, n * 4);
	ck_assert_uint_eq(gpu->mem_current(), m0);
	free(hc.W);
	free(hc.idx);
	free(hc.q);
	free(hc.scale);
	free(hg.W);
	free(hg.idx);
	free(hg.q);
	free(hg.scale);
	free(G);
}

START_TEST(test_taco_dtypes)
{
	/* R, C, k, dtype, stochastic, beta, ties, nan_col, corrupt */
	static const tcase cs[] = {
	    {64, 96, 16, TK_F32, 0, 0.9f, 1, -1, 0},
	    {100, 70, 4, TK_BF16, 1, 0.9f, 1, 5, 0},
	    {100, 70, 4, TK_BF16, 0, 0.0f, 0, -1, 0},
	    {77, 45, 16, TK_F16, 1, 0.9f, 1, 44, 0},
	    {300, 33, 1, TK_BF16, 1, 0.0f, 0, -1, 0},
	};

	for (size_t i = 0; i < sizeof(cs) / sizeof(cs[0]); i++)
		check_taco(&cs[i], 50, 100 + i);
}
END_TEST

START_TEST(test_taco_shapes)
{
	static const tcase cs[] = {
	    {5, 37, 16, TK_BF16, 1, 0.9f, 1, -1, 0},	/* R < k */
	    {1, 40, 4, TK_F32, 0, 0.9f, 0, -1, 0},	/* one row */
	    {2000, 3, 16, TK_BF16, 1, 0.9f, 1, 1, 0},	/* tall, narrow */
	    {40, 1000, 16, TK_BF16, 1, 0.9f, 1, -1, 1}, /* corrupt state */
	    {513, 65, 1, TK_F32, 0, 0.0f, 1, 64, 0},	/* exact TACO, ties */
	};

	for (size_t i = 0; i < sizeof(cs) / sizeof(cs[0]); i++)
		check_taco(&cs[i], 50, 200 + i);
}
END_TEST

START_TEST(test_taco_wide_index)
{
	/* R > 65535: uint32 slot rows */
	static const tcase cs[] = {
	    {70001, 40, 4, TK_BF16, 1, 0.9f, 1, 3, 1},
	    {65536, 33, 16, TK_F32, 0, 0.0f, 0, -1, 0},
	};

	for (size_t i = 0; i < sizeof(cs) / sizeof(cs[0]); i++)
		check_taco(&cs[i], 50, 300 + i);
}
END_TEST

/* ---- AdamW ------------------------------------------------------------------
 */

static void check_adamw(int dtype, float beta1, float wd, uint64_t seed)
{
	const size_t n = 100003, es = esz_of(dtype);
	float *x = xmalloc(n * 4), *m = xmalloc(n * 4), *v = xmalloc(n * 4);
	float *g = xmalloc(n * 4), *h;
	void *p = xmalloc(n * es), *hp;
	float *dx, *dm, *dv, *dg;
	void *dp;
	tk_adamw_args a = {.lr = 1e-3f,
			   .beta1 = beta1,
			   .beta2 = 0.999f,
			   .eps = 1e-8f,
			   .weight_decay = wd};
	uint64_t s = seed;
	size_t m0 = gpu->mem_current();

	for (size_t i = 0; i < n; i++)
		x[i] = rnd_uniform(&s);
	memset(m, 0, n * 4);
	memset(v, 0, n * 4);
	memset(p, 0, n * es);
	dx = dev_from(x, n * 4);
	dm = dev_from(m, n * 4);
	dv = dev_from(v, n * 4);
	dp = dev_from(p, n * es);
	dg = gpu->alloc(n * 4);
	ck_assert_ptr_nonnull(dg);
	for (int t = 1; t <= 10; t++) {
		/* magnitudes over 20 binades: sqrt and eps both matter */
		for (size_t i = 0; i < n; i++)
			g[i] = rnd_uniform(&s) * ldexpf(1, -(int)(i % 20));
		gpu->upload(dg, g, n * 4);
		a.step = (uint64_t)t;
		cpu->adamw_update(p, dtype, x, m, v, g, n, &a);
		gpu->adamw_update(dp, dtype, dx, dm, dv, dg, n, &a);
		no_cuda_error("adamw_update");
		h = host_from(dx, n * 4);
		ck_assert_msg(first_diff(h, x, n * 4) < 0,
			      "step %d: master differs at byte %lld", t,
			      first_diff(h, x, n * 4));
		free(h);
		h = host_from(dm, n * 4);
		ck_assert_msg(!memcmp(h, m, n * 4), "step %d: m differs", t);
		free(h);
		h = host_from(dv, n * 4);
		ck_assert_msg(!memcmp(h, v, n * 4), "step %d: v differs", t);
		free(h);
		hp = host_from(dp, n * es);
		ck_assert_msg(!memcmp(hp, p, n * es), "step %d: p differs", t);
		free(hp);
	}
	gpu->free(dx, n * 4);
	gpu->free(dm, n * 4);
	gpu->free(dv, n * 4);
	gpu->free(dp, n * es);
	gpu->free(dg, n * 4);
	ck_assert_uint_eq(gpu->mem_current(), m0);
	free(x);
	free(m);
	free(v);
	free(g);
	free(p);
}

START_TEST(test_adamw)
{
	check_adamw(TK_F32, 0.9f, 0.0f, 1);
	check_adamw(TK_BF16, 0.9f, 0.1f, 2);
	check_adamw(TK_F16, 0.3f, 0.1f, 3); /* the other lerp branch */
}
END_TEST

static Suite *cuda_suite(void)
{
	Suite *s = suite_create("cuda_optim_attn");
	TCase *tc = tcase_create("cuda");

	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_attention_gqa);
	tcase_add_test(tc, test_attention_docs_window);
	tcase_add_test(tc, test_attention_head_dims);
	tcase_add_test(tc, test_taco_dtypes);
	tcase_add_test(tc, test_taco_shapes);
	tcase_add_test(tc, test_taco_wide_index);
	tcase_add_test(tc, test_adamw);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	char why[256] = "";

	if (tk_cuda_open(&gpu, why, sizeof(why)) < 0) {
		printf("skipped: %s\n", why);
		return 77;
	}
	cpu = tk_cpu_ops();
	return tu_run(cuda_suite(), 1) ? EXIT_FAILURE : EXIT_SUCCESS;
}
