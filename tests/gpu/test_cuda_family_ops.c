/* test_cuda_family_ops.c: the CUDA backend's ops of the OPT and GPT-NeoX
 * families against the CPU reference backend: layernorm_fwd/bwd,
 * act_fwd/bwd (ReLU, GELU), qkv_split/merge, dropout.
 *
 * Each op runs on both backends with the same random inputs, in F32 and
 * BF16, over several shapes (n = 1, H not a multiple of 32, a 4096 x 4096
 * LayerNorm). Outputs an op overwrites are poisoned on the device first,
 * so an element the kernel never writes fails. Tolerances:
 * - qkv_split/merge (copies), dropout (an integer mask and one fp32
 *   multiply) and ReLU: bit for bit;
 * - LayerNorm: the row sums are double on both sides but in another order
 *   (CUDA's block tree), which can move a rounded mean, rstd or c1 / c2 by
 *   an ulp: f32 within 1e-6 of max |cpu| (TOL_ELEM, as RMSNorm), bf16
 *   within 1 bf16 ulp; dw and db within 1e-6;
 * - GELU: the same fp32 expression, but CUDA's erff / expf and glibc's may
 *   differ in the last ulp (each is within 2 ulps of the true value): f32
 *   within 1e-6 of max |cpu|, bf16 within 1 ulp (one ulp of fp32 can flip
 *   a rounding to bf16).
 * Invalid arguments (dtype, activation, p) write nothing and record an
 * error, which sticks: that test runs last.
 *
 * Without a usable GPU (or in a build without CUDA) the program prints why
 * and exits 77, which CTest reports as skipped. CUDA does not survive
 * fork(), so the suite runs without check's per-test fork.
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

#define TOL_ELEM 1e-6

static const tk_ops *gpu, *cpu;

/* ---- helpers ------------------------------------------------------------ */

static void gpu_ok(const char *what)
{
	const char *e = tk_cuda_last_error();

	ck_assert_msg(e == NULL, "%s: CUDA error %s", what, e);
}

static void *hnew(size_t bytes)
{
	void *p = calloc(1, bytes ? bytes : 1);

	ck_assert_ptr_nonnull(p);
	return p;
}

static void *hdup(const void *x, size_t bytes)
{
	void *p = hnew(bytes);

	memcpy(p, x, bytes);
	return p;
}

static float *frand(size_t n, float lo, float hi, uint64_t *st)
{
	float *p = hnew(n * sizeof(float));

	tu_fill_uniform(p, n, lo, hi, st);
	return p;
}

/* Device copy of host bytes. */
static void *dput(const void *h, size_t bytes)
{
	void *p = gpu->alloc(bytes ? bytes : 1);

	ck_assert_ptr_nonnull(p);
	gpu->upload(p, h, bytes);
	return p;
}

/* Host copy of device bytes (malloc'd). */
static void *dget(const void *d, size_t bytes)
{
	void *h = hnew(bytes);

	gpu->download(h, d, bytes);
	gpu_ok("download");
	return h;
}

static void dfree(void *d, size_t bytes)
{
	gpu->free(d, bytes ? bytes : 1);
}

static const int dts[2] = {TK_F32, TK_BF16};

static const char *dt_name(int dt)
{
	return dt == TK_F32 ? "f32" : "bf16";
}

/* Host copy of x [n] in dt (BF16: rounded to nearest even), malloc'd. */
static void *tconv(int dt, const float *x, size_t n)
{
	uint16_t *h;

	if (dt == TK_F32)
		return hdup(x, n * sizeof(float));
	h = hnew(n * sizeof(uint16_t));
	for (size_t i = 0; i < n; i++)
		h[i] = tk_f32_bf16_rne(x[i]);
	return h;
}

/* n random values of [lo, hi) in dt (host). */
static void *trand(int dt, size_t n, float lo, float hi, uint64_t *st)
{
	float *f = frand(n, lo, hi, st);
	void *t = tconv(dt, f, n);

	free(f);
	return t;
}

/* Device buffer of n elements of dt, every one NaN. */
static void *tnan(int dt, size_t n)
{
	float *f = hnew(n * sizeof(float));
	void *h, *d;

	for (size_t i = 0; i < n; i++)
		f[i] = NAN;
	h = tconv(dt, f, n);
	d = dput(h, n * tk_dtype_size(dt));
	free(h);
	free(f);
	return d;
}

/* max |a - ref| / max |ref| (the absolute error when ref is all zero);
 * +inf when either holds a NaN. */
static double max_err(const float *a, const float *ref, size_t n)
{
	double num = 0, den = 0;

	for (size_t i = 0; i < n; i++) {
		if (isnan(a[i]) || isnan(ref[i]))
			return INFINITY;
		if (fabs((double)a[i] - ref[i]) > num)
			num = fabs((double)a[i] - ref[i]);
		if (fabs((double)ref[i]) > den)
			den = fabs((double)ref[i]);
	}
	return den > 0 ? num / den : num;
}

static void check_close(const char *what, const float *a, const float *ref,
			size_t n, double tol)
{
	double e = max_err(a, ref, n);

	ck_assert_msg(e <= tol, "%s: relative error %g > %g", what, e, tol);
}

static void check_same(const char *what, const void *a, const void *ref,
		       size_t bytes)
{
	ck_assert_msg(memcmp(a, ref, bytes) == 0, "%s: not bit-identical",
		      what);
}

/* bf16 patterns ordered like their values (+0 and -0 together). */
static long bf16_ord(uint16_t h)
{
	long m = h & 0x7FFF;

	return h & 0x8000 ? -m : m;
}

static int bf16_nan(uint16_t h)
{
	return (h & 0x7FFF) > 0x7F80;
}

/* Every element within ulps bf16 ulps of ref, no NaN. */
static void check_bf16(const char *what, const uint16_t *a, const uint16_t *ref,
		       size_t n, long ulps)
{
	for (size_t i = 0; i < n; i++) {
		long d = bf16_ord(a[i]) - bf16_ord(ref[i]);

		ck_assert_msg(!bf16_nan(a[i]) && !bf16_nan(ref[i]),
			      "%s: NaN at %zu (0x%04x, cpu 0x%04x)", what, i,
			      a[i], ref[i]);
		ck_assert_msg(d <= ulps && d >= -ulps,
			      "%s: element %zu 0x%04x (%g), cpu 0x%04x (%g): "
			      "%ld ulps",
			      what, i, a[i], tk_bf16_f32(a[i]), ref[i],
			      tk_bf16_f32(ref[i]), d);
	}
}

/* got (device) against ref (host), n elements of dt: bit for bit when
 * same, else F32 within tol, BF16 within 1 ulp. */
static void check_dev(const char *what, int dt, const void *d_got,
		      const void *ref, size_t n, int same, double tol)
{
	size_t bytes = n * tk_dtype_size(dt);
	void *got = dget(d_got, bytes);
	char w[160];

	snprintf(w, sizeof(w), "%s (%s, %zu)", what, dt_name(dt), n);
	if (same)
		check_same(w, got, ref, bytes);
	else if (dt == TK_BF16)
		check_bf16(w, got, ref, n, 1);
	else
		check_close(w, got, ref, n, tol);
	free(got);
}

/* f32 device buffer against host floats within tol. */
static void check_dev_f32(const char *what, const float *d_got,
			  const float *ref, size_t n, double tol)
{
	float *got = dget(d_got, n * sizeof(float));

	check_close(what, got, ref, n, tol);
	free(got);
}

/* ---- layernorm ---------------------------------------------------------- */

/* special: a row offset from 0 (the two-pass variance) and a constant row
 * (variance 0, rstd = 1 / sqrt(eps): its dx, 300 times the others', would
 * loosen the max-relative check of the other rows, so only in one case). */
static void ln_case(int dt, int n, int H, int special, uint64_t *st)
{
	size_t nx = (size_t)n * H, es = tk_dtype_size(dt);
	float eps = 1e-5f;
	float *xf = frand(nx, -2, 2, st);
	void *x, *w = trand(dt, H, 0.5f, 1.5f, st),
		 *b = trand(dt, H, -1, 1, st);
	void *dout = trand(dt, nx, -1, 1, st), *out = hnew(nx * es);
	void *dx = hnew(nx * es);
	float *mean = hnew(n * 4), *rstd = hnew(n * 4);
	float *dw = frand(H, -1, 1, st), *db = frand(H, -1, 1, st);
	void *d_x, *d_w, *d_b, *d_dout, *d_out, *d_dx, *g1;
	float *d_mean, *d_rstd, *d_dw, *d_db;

	if (special && n > 2)
		for (int j = 0; j < H; j++) {
			xf[(size_t)H + j] += 3.0f;
			xf[(size_t)2 * H + j] = 0.5f;
		}
	x = tconv(dt, xf, nx);
	d_x = dput(x, nx * es);
	d_w = dput(w, H * es);
	d_b = dput(b, H * es);
	d_dout = dput(dout, nx * es);
	d_out = tnan(dt, nx);
	d_dx = tnan(dt, nx);
	d_mean = tnan(TK_F32, n);
	d_rstd = tnan(TK_F32, n);
	d_dw = dput(dw, H * 4);
	d_db = dput(db, H * 4);

	cpu->layernorm_fwd(dt, out, mean, rstd, x, w, b, n, H, eps);
	gpu->layernorm_fwd(dt, d_out, d_mean, d_rstd, d_x, d_w, d_b, n, H, eps);
	check_dev("layernorm_fwd out", dt, d_out, out, nx, 0, TOL_ELEM);
	check_dev_f32("layernorm_fwd mean", d_mean, mean, n, TOL_ELEM);
	check_dev_f32("layernorm_fwd rstd", d_rstd, rstd, n, TOL_ELEM);

	/* the backward from the CPU's statistics on both sides */
	gpu->upload(d_mean, mean, n * 4);
	gpu->upload(d_rstd, rstd, n * 4);
	cpu->layernorm_bwd(dt, dx, dw, db, dout, x, w, mean, rstd, n, H);
	gpu->layernorm_bwd(dt, d_dx, d_dw, d_db, d_dout, d_x, d_w, d_mean,
			   d_rstd, n, H);
	check_dev("layernorm_bwd dx", dt, d_dx, dx, nx, 0, TOL_ELEM);
	check_dev_f32("layernorm_bwd dw", d_dw, dw, H, TOL_ELEM);
	check_dev_f32("layernorm_bwd db", d_db, db, H, TOL_ELEM);

	/* dx over dout: the GPU's own dx bit for bit, dw and db read dout
	 * before it is overwritten (the same sums again, from 0) */
	g1 = dget(d_dx, nx * es);
	gpu->memset0(d_dw, H * 4);
	gpu->memset0(d_db, H * 4);
	gpu->layernorm_bwd(dt, d_dout, d_dw, d_db, d_dout, d_x, d_w, d_mean,
			   d_rstd, n, H);
	check_dev("layernorm_bwd dx = dout", dt, d_dout, g1, nx, 1, 0);
	for (int j = 0; j < H; j++) {
		dw[j] = 0;
		db[j] = 0;
	}
	cpu->layernorm_bwd(dt, dx, dw, db, dout, x, w, mean, rstd, n, H);
	check_dev_f32("layernorm_bwd dw (dx = dout)", d_dw, dw, H, TOL_ELEM);
	check_dev_f32("layernorm_bwd db (dx = dout)", d_db, db, H, TOL_ELEM);
	gpu_ok("layernorm");

	free(g1);
	free(xf);
	free(x);
	free(w);
	free(b);
	free(dout);
	free(out);
	free(dx);
	free(mean);
	free(rstd);
	free(dw);
	free(db);
	dfree(d_x, nx * es);
	dfree(d_w, H * es);
	dfree(d_b, H * es);
	dfree(d_dout, nx * es);
	dfree(d_out, nx * es);
	dfree(d_dx, nx * es);
	dfree(d_mean, n * 4);
	dfree(d_rstd, n * 4);
	dfree(d_dw, H * 4);
	dfree(d_db, H * 4);
}

START_TEST(test_layernorm)
{
	uint64_t st = 101;

	for (int t = 0; t < 2; t++) {
		ln_case(dts[t], 1, 1, 0, &st);
		ln_case(dts[t], 1, 33, 0, &st);
		ln_case(dts[t], 37, 67, 0, &st);
		ln_case(dts[t], 37, 67, 1, &st);
		ln_case(dts[t], 2048, 96, 0, &st);
		ln_case(dts[t], 3, 8192, 0, &st);
		ln_case(dts[t], 4096, 4096, 0, &st);
	}
}
END_TEST

/* ---- activations -------------------------------------------------------- */

static void act_case(int dt, int act, size_t n, uint64_t *st)
{
	size_t b = n * tk_dtype_size(dt);
	int exact = act == TK_ACT_RELU;
	void *x = trand(dt, n, -8, 8, st), *d = trand(dt, n, -1, 1, st);
	void *out = hnew(b), *dx = hnew(b), *g_out, *g_dx;
	void *d_x = dput(x, b), *d_d = dput(d, b), *d_out = tnan(dt, n);
	void *d_dx = tnan(dt, n), *d_t;
	char w[64];

	snprintf(w, sizeof(w), "act %d", act);
	cpu->act_fwd(dt, act, out, x, n);
	gpu->act_fwd(dt, act, d_out, d_x, n);
	check_dev("act_fwd", dt, d_out, out, n, exact, TOL_ELEM);
	cpu->act_bwd(dt, act, dx, d, x, n);
	gpu->act_bwd(dt, act, d_dx, d_d, d_x, n);
	check_dev("act_bwd", dt, d_dx, dx, n, exact, TOL_ELEM);

	/* in place on the device: the out-of-place bits */
	g_out = dget(d_out, b);
	g_dx = dget(d_dx, b);
	d_t = dput(x, b);
	gpu->act_fwd(dt, act, d_t, d_t, n);
	check_dev("act_fwd out = x", dt, d_t, g_out, n, 1, 0);
	gpu->upload(d_t, d, b);
	gpu->act_bwd(dt, act, d_t, d_t, d_x, n);
	check_dev("act_bwd dx = dout", dt, d_t, g_dx, n, 1, 0);
	gpu->upload(d_t, x, b);
	gpu->act_bwd(dt, act, d_t, d_d, d_t, n);
	check_dev("act_bwd dx = x", dt, d_t, g_dx, n, 1, 0);
	gpu_ok(w);

	free(x);
	free(d);
	free(out);
	free(dx);
	free(g_out);
	free(g_dx);
	dfree(d_x, b);
	dfree(d_d, b);
	dfree(d_out, b);
	dfree(d_dx, b);
	dfree(d_t, b);
}

START_TEST(test_act)
{
	size_t sizes[] = {1, 999, 1 << 20, (3u << 20) + 7};
	uint64_t st = 102;

	for (int t = 0; t < 2; t++)
		for (int act = TK_ACT_RELU; act <= TK_ACT_GELU; act++)
			for (size_t k = 0; k < 4; k++)
				act_case(dts[t], act, sizes[k], &st);
}
END_TEST

/* ReLU at +-0, subnormals and NaN: the CPU's bits (a NaN passes through
 * as the same pattern); GELU there and far out: the CPU's bits at +-0 and
 * the subnormals, within 1e-6 elsewhere, NaN for NaN. */
START_TEST(test_act_special)
{
	enum { N = 8 };
	float x[N] = {0.0f, -0.0f,  0x1p-149f, -0x1p-149f,
		      NAN,  -30.0f, 30.0f,     -5.5f};
	float d[N] = {2, 2, 2, 2, 2, 2, 2, 2}, c[N], *got;
	float *d_x = dput(x, sizeof(x)), *d_d = dput(d, sizeof(d));
	float *d_o = tnan(TK_F32, N);

	for (int act = TK_ACT_RELU; act <= TK_ACT_GELU; act++)
		for (int bwd = 0; bwd < 2; bwd++) {
			if (bwd) {
				cpu->act_bwd(TK_F32, act, c, d, x, N);
				gpu->act_bwd(TK_F32, act, d_o, d_d, d_x, N);
			} else {
				cpu->act_fwd(TK_F32, act, c, x, N);
				gpu->act_fwd(TK_F32, act, d_o, d_x, N);
			}
			got = dget(d_o, sizeof(c));
			if (act == TK_ACT_RELU) {
				check_same("relu special", got, c, sizeof(c));
			} else {
				check_same("gelu special", got, c, 4 * 4);
				ck_assert(isnan(got[4]) && isnan(c[4]));
				for (int i = 5; i < N; i++)
					ck_assert_msg(
					    fabsf(got[i] - c[i]) <= 1e-6f,
					    "gelu special bwd %d [%d]: %a vs "
					    "%a",
					    bwd, i, (double)got[i],
					    (double)c[i]);
			}
			free(got);
		}
	gpu_ok("act special");
	dfree(d_x, sizeof(x));
	dfree(d_d, sizeof(d));
	dfree(d_o, sizeof(c));
}
END_TEST

/* ---- fused query_key_value layout --------------------------------------- */

/* n elements of es bytes of random bit patterns (NaNs among them). */
static void *rbits(size_t n, size_t es, uint64_t *st)
{
	unsigned char *p = hnew(n * es);

	for (size_t i = 0; i < n * es; i++)
		p[i] = (unsigned char)(tk_splitmix64_next(st) >> 56);
	return p;
}

static void qkv_case(int dt, int n, int heads, int hd, uint64_t *st)
{
	size_t es = tk_dtype_size(dt), nq = (size_t)n * heads * hd;
	size_t bq = nq * es;
	void *qkv = rbits(3 * nq, es, st), *q = hnew(bq), *k = hnew(bq);
	void *v = hnew(bq), *back = hnew(3 * bq);
	void *d_qkv = dput(qkv, 3 * bq), *d_q = tnan(dt, nq);
	void *d_k = tnan(dt, nq), *d_v = tnan(dt, nq), *d_back;

	cpu->qkv_split(dt, q, k, v, qkv, n, heads, hd);
	gpu->qkv_split(dt, d_q, d_k, d_v, d_qkv, n, heads, hd);
	check_dev("qkv_split q", dt, d_q, q, nq, 1, 0);
	check_dev("qkv_split k", dt, d_k, k, nq, 1, 0);
	check_dev("qkv_split v", dt, d_v, v, nq, 1, 0);
	/* the merge of fresh gradients, into a poisoned buffer */
	free(q);
	free(k);
	free(v);
	q = rbits(nq, es, st);
	k = rbits(nq, es, st);
	v = rbits(nq, es, st);
	gpu->upload(d_q, q, bq);
	gpu->upload(d_k, k, bq);
	gpu->upload(d_v, v, bq);
	d_back = tnan(dt, 3 * nq);
	cpu->qkv_merge(dt, back, q, k, v, n, heads, hd);
	gpu->qkv_merge(dt, d_back, d_q, d_k, d_v, n, heads, hd);
	check_dev("qkv_merge", dt, d_back, back, 3 * nq, 1, 0);
	gpu_ok("qkv");

	free(qkv);
	free(q);
	free(k);
	free(v);
	free(back);
	dfree(d_qkv, 3 * bq);
	dfree(d_q, bq);
	dfree(d_k, bq);
	dfree(d_v, bq);
	dfree(d_back, 3 * bq);
}

START_TEST(test_qkv)
{
	static const int shapes[][3] = {
	    {1, 1, 1},	 {3, 1, 5},    {5, 4, 1},     {7, 3, 8},
	    {1, 32, 80}, {33, 12, 64}, {4096, 16, 64}};
	uint64_t st = 103;

	for (int t = 0; t < 2; t++)
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
			qkv_case(dts[t], shapes[s][0], shapes[s][1],
				 shapes[s][2], &st);
}
END_TEST

/* ---- dropout ------------------------------------------------------------ */

static void drop_case(int dt, size_t n, float p, uint64_t seed, uint64_t stream,
		      uint64_t *st)
{
	size_t b = n * tk_dtype_size(dt);
	void *x = trand(dt, n, -3, 3, st), *d_x = dput(x, b);

	cpu->dropout(dt, x, n, p, seed, stream);
	gpu->dropout(dt, d_x, n, p, seed, stream);
	check_dev("dropout", dt, d_x, x, n, 1, 0);
	gpu_ok("dropout");
	free(x);
	dfree(d_x, b);
}

START_TEST(test_dropout)
{
	size_t sizes[] = {1, 4097, 1 << 20, (5u << 20) + 3};
	float ps[] = {0.1f, 0.5f, 0.9f, 1.0f, 1e-9f};
	uint64_t st = 104;

	for (int t = 0; t < 2; t++)
		for (size_t k = 0; k < 4; k++)
			for (size_t j = 0; j < 5; j++)
				drop_case(dts[t], sizes[k], ps[j], 1234 + j,
					  ((uint64_t)k << 40) + 7 * j, &st);
}
END_TEST

/* p == 0 writes nothing. */
START_TEST(test_dropout_p0)
{
	size_t n = 10007;
	float *d_x = tnan(TK_F32, n), *h = dget(d_x, n * 4);

	gpu->dropout(TK_F32, d_x, n, 0.0f, 1, 2);
	gpu->dropout(TK_BF16, d_x, n, 0.0f, 1, 2);
	check_dev("dropout p = 0", TK_F32, d_x, h, n, 1, 0);
	gpu_ok("dropout p = 0");
	free(h);
	dfree(d_x, n * 4);
}
END_TEST

/* ---- last: invalid arguments (the error is sticky) ---------------------- */

START_TEST(test_invalid)
{
	size_t n = 64;
	int heads = 2, hd = 4, rows = 4, H = 16; /* rows * H = n */
	float *d_a = tnan(TK_F32, 3 * n), *d_b = tnan(TK_F32, n);
	float *h_a = dget(d_a, 3 * n * 4), *h_b = dget(d_b, n * 4);

	gpu_ok("before the invalid calls");
	gpu->act_fwd(TK_F32, 0, d_b, d_a, n);
	ck_assert_ptr_nonnull(tk_cuda_last_error());
	gpu->act_bwd(TK_F32, 3, d_b, d_a, d_a, n);
	gpu->act_fwd(TK_F16, TK_ACT_GELU, d_b, d_a, n);
	gpu->dropout(TK_F32, d_b, n, 1.5f, 1, 2);
	gpu->dropout(TK_F32, d_b, n, -0.5f, 1, 2);
	gpu->dropout(TK_F32, d_b, n, NAN, 1, 2);
	gpu->dropout(TK_F16, d_b, n, 0.5f, 1, 2);
	gpu->qkv_split(TK_F16, d_b, d_b, d_b, d_a, 1, heads, hd);
	gpu->qkv_merge(TK_F16, d_a, d_b, d_b, d_b, 1, heads, hd);
	gpu->layernorm_fwd(TK_F16, d_b, d_a, d_a, d_a, d_a, d_a, rows, H,
			   1e-5f);
	gpu->layernorm_bwd(TK_F16, d_b, d_a, d_a, d_a, d_a, d_a, d_a, d_a, rows,
			   H);
	/* not dget: it asserts no error */
	{
		float *a = hnew(3 * n * 4), *b = hnew(n * 4);

		gpu->download(a, d_a, 3 * n * 4);
		gpu->download(b, d_b, n * 4);
		check_same("invalid calls: a", a, h_a, 3 * n * 4);
		check_same("invalid calls: b", b, h_b, n * 4);
		free(a);
		free(b);
	}
	free(h_a);
	free(h_b);
	dfree(d_a, 3 * n * 4);
	dfree(d_b, n * 4);
}
END_TEST

/* ---- suite -------------------------------------------------------------- */

static Suite *family_suite(void)
{
	Suite *s = suite_create("cuda_family_ops");
	TCase *tc = tcase_create("cuda_vs_cpu");

	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_layernorm);
	tcase_add_test(tc, test_act);
	tcase_add_test(tc, test_act_special);
	tcase_add_test(tc, test_qkv);
	tcase_add_test(tc, test_dropout);
	tcase_add_test(tc, test_dropout_p0);
	tcase_add_test(tc, test_invalid); /* last: sticky error */
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	char why[256] = "";

	if (tk_cuda_open(&gpu, why, sizeof(why)) < 0) {
		printf("test_cuda_family_ops: skipped: %s\n", why);
		return 77;
	}
	cpu = tk_cpu_ops();
	return tu_run(family_suite(), 1);
}
