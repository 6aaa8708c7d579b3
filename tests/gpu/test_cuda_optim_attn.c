/* test_cuda_optim_attn.c: the CUDA backend's attention, TACO and AdamW
 * kernels against the CPU reference.
 *
 * - Attention forward and backward on random inputs, several shapes (GQA,
 *   MQA and MHA; hd 16..256; T 1..1024; packed documents through pos; a
 *   sliding window), f32 and bf16 (the CUDA bf16 kernels against the CPU's
 *   bf16 ones): every output is poisoned with NaN before the run, the
 *   relative error against the CPU must be < 1e-4 (f32; 1e-2 for bf16
 *   outputs, lse 1e-4) with no NaN, and the backward must give the same
 *   bits when run twice (no atomics). bf16 at hd 64 and 128 runs twice,
 *   TACO_CUDA_ATTENTION=simt (the SIMT kernels) and =mma (the tensor-core
 *   kernels, attention_mma.cu; SIMT where the device is older than sm_80),
 *   each against the same CPU reference; the line printed for each check
 *   names the path, and says when mma gave the very bits of simt.
 * - TACO, bit for bit against the CPU over 50 steps: weights, idx, FP8
 *   codes and scales compared byte for byte after every step, for f32, f16,
 *   nearest and stochastic bf16, k = 1/4/16, beta 0 and 0.9, R < k, the
 *   uint32 index path (R > 65535), gradients with ties, a column whose
 *   gradient holds a NaN, and a corrupt state. The same cases run three
 *   ways on the GPU, each against the CPU's update of the whole tensor:
 *   the whole update; the columns in three ranges (col0, ncols; G a slice
 *   of the full gradient, ldg = C, or a packed copy, ldg = ncols); and the
 *   row-streamed update (taco_begin, taco_feed of row blocks, some fed
 *   whole, some as a list of rows, some never fed and so zero in the
 *   CPU's gradient, with row strides wider than C, taco_finish).
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

/* The GPU's x against the CPU's ref: error < tol and no NaN. */
static double check_close(const char *what, const float *x, const float *ref,
			  size_t n, const char *shape, double tol)
{
	double e = rel_err_floor(x, ref, n);

	ck_assert_msg(!has_nan(x, n), "%s %s: NaN in the output", shape, what);
	ck_assert_msg(e < tol, "%s %s: relative error %g", shape, what, e);
	return e;
}

/* Host copy of x [n] in dt (bf16: rounded to nearest even). */
static void *to_dt(int dt, const float *x, size_t n)
{
	void *h = xmalloc(n * (dt == TK_F32 ? 4 : 2));

	for (size_t i = 0; i < n; i++)
		tk_store_f32_rne(h, dt, i, x[i]);
	return h;
}

/* Device buffer of n elements of dt, all NaN. */
static void *dev_nan_dt(int dt, size_t n)
{
	float *f = xmalloc(n * sizeof(float));
	void *h, *d;

	for (size_t i = 0; i < n; i++)
		f[i] = NAN;
	h = to_dt(dt, f, n);
	d = dev_from(h, n * (dt == TK_F32 ? 4 : 2));
	free(h);
	free(f);
	return d;
}

/* x [n] of dt (host) widened to f32, in place into out. */
static void widen(float *out, const void *x, int dt, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = tk_load_f32(x, dt, i);
}

/* The device's n elements of dt, widened to f32 (malloc'd). */
static float *host_f32(const void *dev, int dt, size_t n)
{
	void *h = host_from(dev, n * (dt == TK_F32 ? 4 : 2));
	float *f = xmalloc(n * sizeof(float));

	widen(f, h, dt, n);
	free(h);
	return f;
}

/* pos of B rows of T tokens: one document per row (docs 0), or packed
 * documents of random lengths 1..80 (docs 1) or 1..400 (docs 2: starts
 * anywhere relative to the 64-row tiles); positions restart at 0 at each
 * start. */
static void fill_pos(int32_t *pos, int B, int T, int docs, uint64_t *s)
{
	for (int b = 0; b < B; b++) {
		int left = 0, p = 0;

		for (int t = 0; t < T; t++) {
			if (docs && left == 0) {
				left = 1 + (int)(rng_next(s) %
						 (docs == 2 ? 400 : 80));
				p = 0;
			}
			pos[(size_t)b * T + t] = p++;
			left--;
		}
	}
}

/* One attention shape's inputs and the CPU's results (f32 copies of the dt
 * tensors), shared by the GPU paths checked against them. */
typedef struct {
	int dt, B, T, nh, nkv, hd, window, docs;
	size_t n, nq, nk, nl, es;
	float scale;
	void *tq, *tk, *tv, *tdout; /* inputs, dt */
	int32_t *pos;
	float *out, *lse, *dq, *dk, *dv; /* the CPU's */
} att_case;

/* The GPU's forward and backward on c, path the TACO_CUDA_ATTENTION value
 * (NULL: unset), against the CPU. simt_out: NULL, or the bits of out of the
 * simt path (then the line says whether this path gave the same). Returns
 * the GPU's out (dt bits, malloc'd). */
static void *check_attention_gpu(const att_case *c, const char *path,
				 const void *simt_out)
{
	const int dt = c->dt, B = c->B, T = c->T, nh = c->nh, nkv = c->nkv;
	const int hd = c->hd, window = c->window;
	const size_t nq = c->nq, nk = c->nk, nl = c->nl, es = c->es;
	const float scale = c->scale;
	const double tol = dt == TK_F32 ? 1e-4 : 1e-2;
	void *gq, *gk, *gv, *gdout, *gout, *gdq, *gdk, *gdv, *hout;
	float *glse, *h, *h2;
	void *b0, *b1, *b2;
	int32_t *gpos;
	char shape[200];
	double err[5];
	size_t m0 = gpu->mem_current();

	snprintf(shape, sizeof(shape),
		 "%s %s B %d T %d nh %d nkv %d hd %d window %d docs %d",
		 dt == TK_F32 ? "f32" : "bf16", path ? path : "default", B, T,
		 nh, nkv, hd, window, c->docs);
	if (path)
		ck_assert_int_eq(setenv("TACO_CUDA_ATTENTION", path, 1), 0);
	else
		unsetenv("TACO_CUDA_ATTENTION");

	gq = dev_from(c->tq, nq * es);
	gk = dev_from(c->tk, nk * es);
	gv = dev_from(c->tv, nk * es);
	gdout = dev_from(c->tdout, nq * es);
	gpos = dev_from(c->pos, c->n * 4);
	gout = dev_nan_dt(dt, nq);
	glse = dev_nan(nl);
	gdq = dev_nan_dt(dt, nq);
	gdk = dev_nan_dt(dt, nk);
	gdv = dev_nan_dt(dt, nk);

	gpu->attention_fwd(dt, gout, glse, gq, gk, gv, gpos, B, T, nh, nkv, hd,
			   window, scale);
	no_cuda_error(shape);
	hout = host_from(gout, nq * es);
	h = host_f32(gout, dt, nq);
	err[0] = check_close("out", h, c->out, nq, shape, tol);
	free(h);
	h = host_from(glse, nl * 4);
	err[1] = check_close("lse", h, c->lse, nl, shape, 1e-4);
	free(h);

	/* the backward from the GPU's own out and lse */
	gpu->attention_bwd(dt, gdq, gdk, gdv, gdout, gout, glse, gq, gk, gv,
			   gpos, B, T, nh, nkv, hd, window, scale);
	no_cuda_error(shape);
	h = host_f32(gdq, dt, nq);
	err[2] = check_close("dq", h, c->dq, nq, shape, tol);
	free(h);
	h = host_f32(gdk, dt, nk);
	err[3] = check_close("dk", h, c->dk, nk, shape, tol);
	free(h);
	h2 = host_f32(gdv, dt, nk);
	err[4] = check_close("dv", h2, c->dv, nk, shape, tol);
	free(h2);

	printf("%s: out %.1e lse %.1e dq %.1e dk %.1e dv %.1e%s\n", shape,
	       err[0], err[1], err[2], err[3], err[4],
	       simt_out && !memcmp(hout, simt_out, nq * es)
		   ? " (out: the same bits as simt)"
		   : "");

	/* again, over poisoned outputs: overwritten, and the same bits */
	b0 = host_from(gdq, nq * es);
	b1 = host_from(gdk, nk * es);
	b2 = host_from(gdv, nk * es);
	gpu->free(gdq, nq * es);
	gpu->free(gdk, nk * es);
	gpu->free(gdv, nk * es);
	gdq = dev_nan_dt(dt, nq);
	gdk = dev_nan_dt(dt, nk);
	gdv = dev_nan_dt(dt, nk);
	gpu->attention_bwd(dt, gdq, gdk, gdv, gdout, gout, glse, gq, gk, gv,
			   gpos, B, T, nh, nkv, hd, window, scale);
	no_cuda_error(shape);
	{
		void *c0 = host_from(gdq, nq * es),
		     *c1 = host_from(gdk, nk * es),
		     *c2 = host_from(gdv, nk * es);

		ck_assert_msg(!memcmp(c0, b0, nq * es) &&
				  !memcmp(c1, b1, nk * es) &&
				  !memcmp(c2, b2, nk * es),
			      "%s: dq/dk/dv differ between two runs", shape);
		free(c0);
		free(c1);
		free(c2);
	}
	free(b0);
	free(b1);
	free(b2);
	unsetenv("TACO_CUDA_ATTENTION");

	gpu->free(gq, nq * es);
	gpu->free(gk, nk * es);
	gpu->free(gv, nk * es);
	gpu->free(gdout, nq * es);
	gpu->free(gpos, c->n * 4);
	gpu->free(gout, nq * es);
	gpu->free(glse, nl * 4);
	gpu->free(gdq, nq * es);
	gpu->free(gdk, nk * es);
	gpu->free(gdv, nk * es);
	ck_assert_uint_eq(gpu->mem_current(), m0);
	return hout;
}

/* One shape in dt: the CPU reference, then each GPU path against it (bf16
 * at hd 64 and 128: simt and mma; otherwise the default). */
static void check_attention_dt(int dt, int B, int T, int nh, int nkv, int hd,
			       int window, int docs, uint64_t seed)
{
	att_case c = {0};
	float *q, *k, *v, *dout;
	void *tout, *tdq, *tdk, *tdv;
	uint64_t s = seed;

	c.dt = dt;
	c.B = B;
	c.T = T;
	c.nh = nh;
	c.nkv = nkv;
	c.hd = hd;
	c.window = window;
	c.docs = docs;
	c.n = (size_t)B * T;
	c.nq = c.n * nh * hd;
	c.nk = c.n * nkv * hd;
	c.nl = (size_t)B * nh * T;
	c.es = dt == TK_F32 ? 4 : 2;
	c.scale = 1.0f / sqrtf((float)hd);
	q = xmalloc(c.nq * 4);
	k = xmalloc(c.nk * 4);
	v = xmalloc(c.nk * 4);
	dout = xmalloc(c.nq * 4);
	c.out = xmalloc(c.nq * 4);
	c.lse = xmalloc(c.nl * 4);
	c.dq = xmalloc(c.nq * 4);
	c.dk = xmalloc(c.nk * 4);
	c.dv = xmalloc(c.nk * 4);
	c.pos = xmalloc(c.n * 4);

	/* q, k of [-2, 2): scores up to a few units, peaked softmaxes */
	tu_fill_uniform(q, c.nq, -2, 2, &s);
	tu_fill_uniform(k, c.nk, -2, 2, &s);
	tu_fill_uniform(v, c.nk, -1, 1, &s);
	tu_fill_uniform(dout, c.nq, -1, 1, &s);
	fill_pos(c.pos, B, T, docs, &s);
	c.tq = to_dt(dt, q, c.nq);
	c.tk = to_dt(dt, k, c.nk);
	c.tv = to_dt(dt, v, c.nk);
	c.tdout = to_dt(dt, dout, c.nq);
	tout = xmalloc(c.nq * c.es);
	tdq = xmalloc(c.nq * c.es);
	tdk = xmalloc(c.nk * c.es);
	tdv = xmalloc(c.nk * c.es);

	cpu->attention_fwd(dt, tout, c.lse, c.tq, c.tk, c.tv, c.pos, B, T, nh,
			   nkv, hd, window, c.scale);
	cpu->attention_bwd(dt, tdq, tdk, tdv, c.tdout, tout, c.lse, c.tq, c.tk,
			   c.tv, c.pos, B, T, nh, nkv, hd, window, c.scale);
	widen(c.out, tout, dt, c.nq);
	widen(c.dq, tdq, dt, c.nq);
	widen(c.dk, tdk, dt, c.nk);
	widen(c.dv, tdv, dt, c.nk);

	if (dt == TK_BF16 && (hd == 64 || hd == 128)) {
		void *simt = check_attention_gpu(&c, "simt", NULL);

		free(check_attention_gpu(&c, "mma", simt));
		free(simt);
	} else {
		free(check_attention_gpu(&c, NULL, NULL));
	}

	free(c.tq);
	free(c.tk);
	free(c.tv);
	free(c.tdout);
	free(tout);
	free(tdq);
	free(tdk);
	free(tdv);
	free(q);
	free(k);
	free(v);
	free(dout);
	free(c.out);
	free(c.lse);
	free(c.dq);
	free(c.dk);
	free(c.dv);
	free(c.pos);
}

/* One shape in f32 and in bf16. */
static void check_attention(int B, int T, int nh, int nkv, int hd, int window,
			    int docs, uint64_t seed)
{
	check_attention_dt(TK_F32, B, T, nh, nkv, hd, window, docs, seed);
	check_attention_dt(TK_BF16, B, T, nh, nkv, hd, window, docs, seed);
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

/* bf16 only (both paths): shapes that stress the tensor-core kernels'
 * 64-row tiles: T around and between tile sizes, batches, MHA / GQA /
 * MQA, packed documents (docs 2: long documents starting anywhere), the
 * window of 1 (only itself), 2 and 127 (query tiles starting right at the
 * last query that sees a key tile; key tiles ending one short of the
 * diagonal), and a larger case. */
START_TEST(test_attention_mma_tiles)
{
	check_attention_dt(TK_BF16, 1, 1, 8, 2, 64, 0, 0, 30);
	check_attention_dt(TK_BF16, 2, 63, 4, 4, 128, 0, 0, 31);
	check_attention_dt(TK_BF16, 3, 65, 8, 1, 64, 0, 1, 32);
	check_attention_dt(TK_BF16, 2, 129, 8, 2, 128, 37, 0, 33);
	check_attention_dt(TK_BF16, 1, 300, 4, 4, 64, 1, 1, 34);
	check_attention_dt(TK_BF16, 2, 300, 8, 2, 128, 2, 0, 35);
	check_attention_dt(TK_BF16, 1, 640, 4, 2, 64, 127, 0, 36);
	check_attention_dt(TK_BF16, 2, 1000, 8, 1, 128, 0, 1, 37);
	check_attention_dt(TK_BF16, 1, 1000, 8, 2, 64, 37, 2, 38);
	check_attention_dt(TK_BF16, 2, 1000, 4, 4, 128, 0, 2, 39);
	check_attention_dt(TK_BF16, 2, 1024, 8, 2, 128, 0, 0, 40);
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

/* How the GPU runs a step: the whole update, the columns in three ranges,
 * or the row-streamed update. */
enum { TACO_WHOLE, TACO_RANGES, TACO_STREAM };

/* One row block of a streamed step: rows r0 .. r0 + n - 1, fed whole or
 * (list) only the rows marked in fed[]. */
typedef struct {
	int r0, n, list;
} tfeed;

/* Plans a streamed step over the c->R rows of G [R, C]: blocks of 1 ..
 * R / 4 + 1 rows, each fed whole, not fed at all or fed as a list of about
 * half its rows; the rows not fed are zeroed in G (the gradient the
 * streamed update must act as if it had) and fed[r] = 0. Returns the
 * number of feeds written to f (at most R). */
static int taco_plan(const tcase *c, float *G, unsigned char *fed, tfeed *f,
		     uint64_t *s)
{
	const int R = c->R, C = c->C;
	int nf = 0;

	for (int r0 = 0; r0 < R;) {
		int n = 1 + (int)(rng_next(s) % (uint64_t)(R / 4 + 1));
		int kind = (int)(rng_next(s) % 3); /* whole, none, list */

		if (n > R - r0)
			n = R - r0;
		for (int r = r0; r < r0 + n; r++) {
			fed[r] = kind == 0 || (kind == 2 && rng_next(s) % 2);
			if (!fed[r])
				memset(G + (size_t)r * C, 0,
				       (size_t)C * sizeof(float));
		}
		if (kind != 1)
			f[nf++] = (tfeed){r0, n, kind == 2};
		r0 += n;
	}
	return nf;
}

/* The GPU's streamed step from the planned feeds; G [R, C] (host) holds
 * the gradient, zero where not fed. Fed whole: from a device copy of G of
 * row stride C + 5; as a list: the block's fed rows packed (row stride C +
 * 2) with their ids. */
static void taco_stream_gpu(const tcase *c, tacobuf *d, const float *G,
			    const unsigned char *fed, const tfeed *f, int nf,
			    const tk_taco_args *a)
{
	const int R = c->R, C = c->C, lds = C + 5, ldp = C + 2;
	const size_t scan_b = gpu->taco_scan_bytes(C);
	float *hs = xmalloc((size_t)R * lds * 4), *dS, *dP, *hp;
	int32_t *hr = xmalloc((size_t)R * 4), *dR;
	void *scan = gpu->alloc(scan_b);

	ck_assert_ptr_nonnull(scan);
	ck_assert_uint_eq(scan_b, gpu->taco_scan_bytes(C)); /* C only */
	for (int r = 0; r < R; r++) {
		memcpy(hs + (size_t)r * lds, G + (size_t)r * C, (size_t)C * 4);
		for (int j = C; j < lds; j++)
			hs[(size_t)r * lds + j] = NAN; /* never read */
	}
	dS = dev_from(hs, (size_t)R * lds * 4);
	hp = xmalloc((size_t)R * ldp * 4);
	dP = gpu->alloc((size_t)R * ldp * 4);
	dR = gpu->alloc((size_t)R * 4);
	ck_assert_ptr_nonnull(dP);
	ck_assert_ptr_nonnull(dR);
	gpu->taco_begin(scan, d->idx, d->q, d->scale, a);
	for (int i = 0; i < nf; i++) {
		int m = 0;

		if (!f[i].list) {
			gpu->taco_feed(scan, dS + (size_t)f[i].r0 * lds, lds,
				       NULL, f[i].r0, f[i].n, a);
			continue;
		}
		for (int r = f[i].r0; r < f[i].r0 + f[i].n; r++)
			if (fed[r]) {
				memcpy(hp + (size_t)m * ldp, G + (size_t)r * C,
				       (size_t)C * 4);
				for (int j = C; j < ldp; j++)
					hp[(size_t)m * ldp + j] = NAN;
				hr[m++] = r;
			}
		if (!m)
			continue;
		/* upload waits for the copy, and is ordered after the
		 * previous feed on the backend's stream: reuse is safe */
		gpu->upload(dP, hp, (size_t)m * ldp * 4);
		gpu->upload(dR, hr, (size_t)m * 4);
		gpu->taco_feed(scan, dP, ldp, dR, 0, m, a);
	}
	gpu->taco_finish(scan, d->W, c->dtype, d->idx, d->q, d->scale, a);
	no_cuda_error("taco streamed");
	gpu->free(scan, scan_b);
	gpu->free(dS, (size_t)R * lds * 4);
	gpu->free(dP, (size_t)R * ldp * 4);
	gpu->free(dR, (size_t)R * 4);
	free(hs);
	free(hp);
	free(hr);
}

/* The GPU's step in three column ranges [0, c1), [c1, c2), [c2, C), the
 * last first: the first and last from the full gradient dG (ldg = C), the
 * middle one from a packed copy of its columns (ldg = c2 - c1). */
static void taco_ranges_gpu(const tcase *c, tacobuf *d, const float *G,
			    const float *dG, const tk_taco_args *a0,
			    uint64_t *s)
{
	const int R = c->R, C = c->C;
	tk_taco_args a = *a0;
	int c1, c2, w;
	float *hp, *dP;

	if (C < 3) {
		c1 = 0;
		c2 = C;
	} else {
		c1 = 1 + (int)(rng_next(s) % (uint64_t)(C - 2));
		c2 = c1 + 1 + (int)(rng_next(s) % (uint64_t)(C - c1 - 1));
	}
	if (c2 < C) {
		a.col0 = c2;
		a.ncols = C - c2;
		gpu->taco_update(d->W, c->dtype, dG + c2, C, d->idx, d->q,
				 d->scale, &a);
	}
	if (c1 > 0) {
		a.col0 = 0;
		a.ncols = c1;
		gpu->taco_update(d->W, c->dtype, dG, C, d->idx, d->q, d->scale,
				 &a);
	}
	w = c2 - c1;
	hp = xmalloc((size_t)R * w * 4);
	for (int r = 0; r < R; r++)
		memcpy(hp + (size_t)r * w, G + (size_t)r * C + c1,
		       (size_t)w * 4);
	dP = dev_from(hp, (size_t)R * w * 4);
	a.col0 = c1;
	a.ncols = w;
	gpu->taco_update(d->W, c->dtype, dP, w, d->idx, d->q, d->scale, &a);
	no_cuda_error("taco ranges");
	gpu->free(dP, (size_t)R * w * 4);
	free(hp);
}

static void check_taco(const tcase *c, int steps, uint64_t seed, int mode)
{
	const size_t n = (size_t)c->R * c->C, ck = (size_t)c->C * c->k;
	const size_t ib = c->R > 65535 ? 4 : 2, es = esz_of(c->dtype);
	const size_t m0 = gpu->mem_current();
	tacobuf hc, hg, d;
	float *G = xmalloc(n * 4), *dG;
	unsigned char *fed = xmalloc((size_t)c->R);
	tfeed *feeds = xmalloc((size_t)c->R * sizeof(tfeed));
	tk_taco_args a;
	uint64_t s = seed;
	int moved = 0, nf = 0;

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
	a.col0 = 0;
	a.ncols = c->C; /* the CPU: the whole tensor */
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
		if (mode == TACO_STREAM)
			nf = taco_plan(c, G, fed, feeds, &s);
		if (c->nan_col >= 0 && t == 20) {
			int r = c->R / 2;

			/* streamed: a row that is fed (the first one from
			 * R / 2 on, else before), so that the GPU sees it */
			while (mode == TACO_STREAM && r < c->R && !fed[r])
				r++;
			if (r == c->R)
				for (r = c->R / 2; r > 0 && !fed[r]; r--)
					;
			G[(size_t)r * c->C + c->nan_col] = NAN;
		}
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
		cpu->taco_update(hc.W, c->dtype, G, c->C, hc.idx, hc.q,
				 hc.scale, &a);
		if (mode == TACO_WHOLE)
			gpu->taco_update(d.W, c->dtype, dG, c->C, d.idx, d.q,
					 d.scale, &a);
		else if (mode == TACO_RANGES)
			taco_ranges_gpu(c, &d, G, dG, &a, &s);
		else
			taco_stream_gpu(c, &d, G, fed, feeds, nf, &a);
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
	free(fed);
	free(feeds);
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
		check_taco(&cs[i], 50, 100 + i, TACO_WHOLE);
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
		check_taco(&cs[i], 50, 200 + i, TACO_WHOLE);
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
		check_taco(&cs[i], 50, 300 + i, TACO_WHOLE);
}
END_TEST

/* The cases above again, the GPU updating the columns in three ranges,
 * then streaming the rows, each step against the CPU's whole update. */
static const tcase taco_more[] = {
    /* R, C, k, dtype, stochastic, beta, ties, nan_col, corrupt */
    {64, 96, 16, TK_F32, 0, 0.9f, 1, -1, 0},
    {100, 70, 4, TK_BF16, 1, 0.9f, 1, 5, 0},
    {77, 45, 16, TK_F16, 1, 0.9f, 1, 44, 0},
    {300, 33, 1, TK_BF16, 1, 0.0f, 0, -1, 0},
    {5, 37, 16, TK_BF16, 1, 0.9f, 1, -1, 0},
    {1, 40, 4, TK_F32, 0, 0.9f, 0, -1, 0},
    {2000, 3, 16, TK_BF16, 1, 0.9f, 1, 1, 0},
    {40, 1000, 16, TK_BF16, 1, 0.9f, 1, -1, 1},
    {513, 65, 1, TK_F32, 0, 0.0f, 1, 64, 0},
    {4100, 300, 16, TK_BF16, 1, 0.9f, 1, 7, 0}, /* many rows per feed */
    {70001, 40, 4, TK_BF16, 1, 0.9f, 1, 3, 1},
};

START_TEST(test_taco_ranges)
{
	for (size_t i = 0; i < sizeof(taco_more) / sizeof(taco_more[0]); i++)
		check_taco(
		    &taco_more[i],
		    i + 1 < sizeof(taco_more) / sizeof(taco_more[0]) ? 50 : 12,
		    400 + i, TACO_RANGES);
}
END_TEST

START_TEST(test_taco_stream)
{
	for (size_t i = 0; i < sizeof(taco_more) / sizeof(taco_more[0]); i++)
		check_taco(
		    &taco_more[i],
		    i + 1 < sizeof(taco_more) / sizeof(taco_more[0]) ? 50 : 25,
		    500 + i, TACO_STREAM);
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

/* taco_gather (the streamed weights' write-back): the GPU copies the same
 * entries as the CPU, bit for bit, empty slots 0, both index widths and
 * element sizes. */
static void check_gather(int R, int C, int k, int dtype, uint64_t seed)
{
	size_t es = dtype == TK_F32 ? 4 : 2, ib = R <= 65535 ? 2 : 4;
	size_t n = (size_t)R * C, ns = (size_t)C * k;
	uint8_t *W = xmalloc(n * es), *idx = xmalloc(ns * ib);
	uint8_t *want = xmalloc(ns * es), *got;
	void *dW, *didx, *dv;
	uint64_t st = seed;

	for (size_t i = 0; i < n * es; i++)
		W[i] = (uint8_t)rng_next(&st);
	for (size_t i = 0; i < ns; i++) {
		uint64_t h = rng_next(&st);
		uint32_t r = h % 5 == 0 ? 0xFFFFFFFFu : (uint32_t)(h >> 8) % R;
		if (ib == 2)
			((uint16_t *)idx)[i] = (uint16_t)r;
		else
			((uint32_t *)idx)[i] = r;
	}
	cpu->taco_gather(want, W, dtype, idx, R, C, k);
	dW = dev_from(W, n * es);
	didx = dev_from(idx, ns * ib);
	dv = dev_nan(ns * es / 4 + 1);
	gpu->taco_gather(dv, dW, dtype, didx, R, C, k);
	no_cuda_error("taco_gather");
	got = host_from(dv, ns * es);
	ck_assert_msg(memcmp(got, want, ns * es) == 0,
		      "taco_gather R %d C %d k %d: GPU differs from CPU", R, C,
		      k);
	gpu->free(dW, n * es);
	gpu->free(didx, ns * ib);
	gpu->free(dv, (ns * es / 4 + 1) * sizeof(float));
	free(W);
	free(idx);
	free(want);
	free(got);
}

START_TEST(test_taco_gather)
{
	check_gather(4096, 1000, 16, TK_BF16, 1);
	check_gather(300, 77, 4, TK_F32, 2);
	check_gather(70000, 33, 16, TK_BF16, 3); /* uint32 indices */
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
	tcase_add_test(tc, test_attention_mma_tiles);
	tcase_add_test(tc, test_taco_dtypes);
	tcase_add_test(tc, test_taco_shapes);
	tcase_add_test(tc, test_taco_wide_index);
	tcase_add_test(tc, test_taco_ranges);
	tcase_add_test(tc, test_taco_stream);
	tcase_add_test(tc, test_adamw);
	tcase_add_test(tc, test_taco_gather);
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
