/* test_family_ops.c: the CPU backend's ops of the OPT and GPT-NeoX
 * families (LayerNorm, ReLU / GELU, the fused query_key_value layout,
 * dropout) against references written here.
 *
 * Forward ops are compared with double-precision references; backward ops
 * with central finite differences in double of loss = sum(R * out), R the
 * op's incoming gradient (h = 1e-4: the differences are good to ~1e-8, so
 * the 1e-6 bound is the fp32 op's own error, ~1e-7, with a margin). bf16
 * variants must give the fp32 op's result on the widened inputs, rounded
 * once (the ops compute in fp32 whatever dt is). The copies and the
 * dropout mask are checked bit for bit, the mask against its documented
 * formula spelt out here from splitmix64. The CPU backend's memory is host
 * memory: the tests pass malloc'd buffers.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tk_convert.h"
#include "tk_hash.h"
#include "tk_ops.h"

static const tk_ops *ops;

/* ---- helpers ------------------------------------------------------------ */

static void *znew(size_t bytes)
{
	void *p = calloc(1, bytes ? bytes : 1);

	ck_assert_ptr_nonnull(p);
	return p;
}

static float *fnew(size_t n)
{
	return znew(n * sizeof(float));
}

static double *dnew(size_t n)
{
	return znew(n * sizeof(double));
}

static float *frand(size_t n, float lo, float hi, uint64_t *st)
{
	float *p = fnew(n);

	tu_fill_uniform(p, n, lo, hi, st);
	return p;
}

static void *dup_bytes(const void *x, size_t bytes)
{
	void *p = znew(bytes);

	memcpy(p, x, bytes);
	return p;
}

static double *to_d(const float *x, size_t n)
{
	double *p = dnew(n);

	for (size_t i = 0; i < n; i++)
		p[i] = x[i];
	return p;
}

/* x rounded to bf16 */
static uint16_t *to_bf(const float *x, size_t n)
{
	uint16_t *h = znew(n * 2);

	for (size_t i = 0; i < n; i++)
		h[i] = tk_f32_bf16_rne(x[i]);
	return h;
}

/* h widened to fp32 (exact) */
static float *bf_wide(const uint16_t *h, size_t n)
{
	float *p = fnew(n);

	for (size_t i = 0; i < n; i++)
		p[i] = tk_bf16_f32(h[i]);
	return p;
}

/* bf16 patterns ordered like their values (+0 and -0 together) */
static long bf_ord(uint16_t h)
{
	long m = h & 0x7FFF;

	return h & 0x8000 ? -m : m;
}

/* got (bf16) within ulps of ref rounded to bf16, or within abs of ref:
 * the op computes in fp32 before its one rounding, so an output that
 * cancels to near 0 (|out| of 1e-5 from terms of 1) carries the fp32
 * terms' absolute error, more than a bf16 ulp of so small a value. */
static void bf_near(const char *what, const uint16_t *got, const double *ref,
		    size_t n, long ulps, double abs)
{
	for (size_t i = 0; i < n; i++) {
		uint16_t r = tk_f32_bf16_rne((float)ref[i]);
		long d = bf_ord(got[i]) - bf_ord(r);

		ck_assert_msg((d <= ulps && d >= -ulps) ||
				  fabs(tk_bf16_f32(got[i]) - ref[i]) <= abs,
			      "%s[%zu]: 0x%04x vs ref %.9g (0x%04x)", what, i,
			      got[i], ref[i], r);
	}
}

/* got (bf16) == f (the fp32 op's output) rounded, bit for bit */
static void bf_is_rne(const char *what, const uint16_t *got, const float *f,
		      size_t n)
{
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(got[i] == tk_f32_bf16_rne(f[i]),
			      "%s[%zu]: 0x%04x vs rne(%a) = 0x%04x", what, i,
			      got[i], (double)f[i], tk_f32_bf16_rne(f[i]));
}

static void same_bytes(const char *what, const void *a, const void *b,
		       size_t bytes)
{
	ck_assert_msg(memcmp(a, b, bytes) == 0, "%s: not bit-identical", what);
}

/* n floats of a poison pattern: NaN with a payload an op would not make */
static float *fpoison(size_t n)
{
	uint32_t u = 0x7FA5A5A5u;
	float *p = fnew(n), f;

	memcpy(&f, &u, 4);
	for (size_t i = 0; i < n; i++)
		p[i] = f;
	return p;
}

/* ---- layernorm ---------------------------------------------------------- */

/* torch.nn.LayerNorm in double: out [n, H], mean and rstd [n] (NULL: not
 * wanted). */
static void ln_ref(double *out, double *mean, double *rstd, const double *x,
		   const double *w, const double *b, int n, int H, double eps)
{
	for (int i = 0; i < n; i++) {
		const double *xi = x + (size_t)i * H;
		double s = 0, ss = 0, m, r;

		for (int j = 0; j < H; j++)
			s += xi[j];
		m = s / H;
		for (int j = 0; j < H; j++)
			ss += (xi[j] - m) * (xi[j] - m);
		r = 1.0 / sqrt(ss / H + eps);
		if (mean)
			mean[i] = m;
		if (rstd)
			rstd[i] = r;
		for (int j = 0; j < H; j++)
			out[(size_t)i * H + j] = (xi[j] - m) * r * w[j] + b[j];
	}
}

struct ln_ctx {
	double *x, *w, *b;
	const double *R;
	int n, H;
	double eps;
};

static double ln_loss(void *p)
{
	struct ln_ctx *c = p;
	size_t nx = (size_t)c->n * c->H;
	double *out = dnew(nx), l = 0;

	ln_ref(out, NULL, NULL, c->x, c->w, c->b, c->n, c->H, c->eps);
	for (size_t i = 0; i < nx; i++)
		l += c->R[i] * out[i];
	free(out);
	return l;
}

/* Inputs of one case: x [n, H] uniform in [-2, 2), and when n > 2 a
 * second row offset by 4 (mean 4 against a spread of 1: the two-pass
 * variance). (A constant row has its own test: its rstd, 1 / sqrt(eps),
 * would dominate the norms of the finite-difference check, and the
 * differences themselves are poor there, var being O(h^2) against eps.) */
static float *ln_input(int n, int H, uint64_t *st)
{
	float *x = frand((size_t)n * H, -2, 2, st);

	if (n > 2)
		for (int j = 0; j < H; j++)
			x[(size_t)H + j] += 4.0f;
	return x;
}

static void check_ln_f32(int n, int H, size_t samples, uint64_t st)
{
	size_t nx = (size_t)n * H;
	float eps = 1e-5f;
	float *x = ln_input(n, H, &st), *w = frand((size_t)H, 0.5f, 1.5f, &st);
	float *b = frand((size_t)H, -1, 1, &st), *dout = frand(nx, -1, 1, &st);
	float *out = fpoison(nx), *mean = fpoison(n), *rstd = fpoison(n);
	float *dx = fpoison(nx), *dw = fnew(H), *db = fnew(H);
	float *dx2, *dw2 = fnew(H), *db2 = fnew(H);
	double *xd = to_d(x, nx), *wd = to_d(w, H), *bd = to_d(b, H);
	double *R = to_d(dout, nx), *oref = dnew(nx), *mref = dnew(n);
	double *rref = dnew(n);
	struct ln_ctx c = {xd, wd, bd, R, n, H, eps};

	ops->layernorm_fwd(TK_F32, out, mean, rstd, x, w, b, n, H, eps);
	ln_ref(oref, mref, rref, xd, wd, bd, n, H, eps);
	ck_assert_double_lt(tu_rel_err_d(out, oref, nx), 1e-6);
	ck_assert_double_lt(tu_rel_err_d(mean, mref, n), 1e-6);
	ck_assert_double_lt(tu_rel_err_d(rstd, rref, n), 1e-6);

	ops->layernorm_bwd(TK_F32, dx, dw, db, dout, x, w, mean, rstd, n, H);
	ck_assert_double_lt(
	    tu_grad_check(ln_loss, &c, xd, dx, nx, samples, 11, 1e-4), 1e-6);
	ck_assert_double_lt(
	    tu_grad_check(ln_loss, &c, wd, dw, (size_t)H, samples, 12, 1e-4),
	    1e-6);
	ck_assert_double_lt(
	    tu_grad_check(ln_loss, &c, bd, db, (size_t)H, samples, 13, 1e-4),
	    1e-6);

	/* dw and db accumulate: a second call from the first's sums doubles
	 * them (x + x is exact); dx is overwritten with the same bits. */
	memcpy(dw2, dw, H * sizeof(float));
	memcpy(db2, db, H * sizeof(float));
	dx2 = fpoison(nx);
	ops->layernorm_bwd(TK_F32, dx2, dw2, db2, dout, x, w, mean, rstd, n, H);
	same_bytes("layernorm_bwd dx again", dx2, dx, nx * sizeof(float));
	for (int j = 0; j < H; j++) {
		ck_assert_float_eq(dw2[j], 2 * dw[j]);
		ck_assert_float_eq(db2[j], 2 * db[j]);
	}
	/* dx over dout: the same bits, and dw / db read dout first */
	memset(dw2, 0, H * sizeof(float));
	memset(db2, 0, H * sizeof(float));
	memcpy(dx2, dout, nx * sizeof(float));
	ops->layernorm_bwd(TK_F32, dx2, dw2, db2, dx2, x, w, mean, rstd, n, H);
	same_bytes("layernorm_bwd dx = dout", dx2, dx, nx * sizeof(float));
	same_bytes("layernorm_bwd dw, dx = dout", dw2, dw, H * sizeof(float));
	same_bytes("layernorm_bwd db, dx = dout", db2, db, H * sizeof(float));

	free(x);
	free(w);
	free(b);
	free(dout);
	free(out);
	free(mean);
	free(rstd);
	free(dx);
	free(dx2);
	free(dw);
	free(db);
	free(dw2);
	free(db2);
	free(xd);
	free(wd);
	free(bd);
	free(R);
	free(oref);
	free(mref);
	free(rref);
}

START_TEST(test_layernorm_f32)
{
	check_ln_f32(1, 1, 1000, 1);
	check_ln_f32(1, 33, 1000, 2);
	check_ln_f32(4, 16, 1000, 3);
	check_ln_f32(37, 67, 300, 4);
	check_ln_f32(70, 520, 40, 5); /* parallel path, sampled */
}
END_TEST

/* A constant row (variance 0): xhat is exactly 0, out = b bit for bit,
 * rstd = 1 / sqrt(eps), and the gradient is rstd * (g - mean(g)) (the
 * variance term vanishes with xhat). */
START_TEST(test_layernorm_constant_row)
{
	int n = 2, H = 33;
	size_t nx = (size_t)n * H;
	float eps = 1e-5f;
	uint64_t st = 8;
	float *x = frand(nx, -2, 2, &st), *w = frand(H, 0.5f, 1.5f, &st);
	float *b = frand(H, -1, 1, &st), *dout = frand(nx, -1, 1, &st);
	float *out = fnew(nx), *mean = fnew(n), *rstd = fnew(n);
	float *dx = fnew(nx), *dw = fnew(H), *db = fnew(H);
	double *ref = dnew(H), gm = 0, r = 1.0 / sqrt((double)eps);

	for (int j = 0; j < H; j++)
		x[j] = 0.75f;
	ops->layernorm_fwd(TK_F32, out, mean, rstd, x, w, b, n, H, eps);
	ck_assert_float_eq(mean[0], 0.75f);
	ck_assert_float_eq(rstd[0], (float)r);
	same_bytes("layernorm constant row out", out, b, H * 4);
	ops->layernorm_bwd(TK_F32, dx, dw, db, dout, x, w, mean, rstd, n, H);
	for (int j = 0; j < H; j++)
		gm += (double)dout[j] * w[j] / H;
	for (int j = 0; j < H; j++)
		ref[j] = rstd[0] * ((double)dout[j] * w[j] - gm);
	ck_assert_double_lt(tu_rel_err_d(dx, ref, H), 1e-6);
	free(x);
	free(w);
	free(b);
	free(dout);
	free(out);
	free(mean);
	free(rstd);
	free(dx);
	free(dw);
	free(db);
	free(ref);
}
END_TEST

/* bf16: the fp32 op on the widened inputs, each output rounded once; out
 * within 1 ulp of the double reference rounded. */
static void check_ln_bf16(int n, int H, uint64_t st)
{
	size_t nx = (size_t)n * H;
	float eps = 1e-5f;
	float *xf = ln_input(n, H, &st), *wf = frand(H, 0.5f, 1.5f, &st);
	float *bf = frand(H, -1, 1, &st), *df = frand(nx, -1, 1, &st);
	uint16_t *x = to_bf(xf, nx), *w = to_bf(wf, H), *b = to_bf(bf, H);
	uint16_t *dout = to_bf(df, nx), *out = znew(nx * 2), *dx = znew(nx * 2);
	float *x32 = bf_wide(x, nx), *w32 = bf_wide(w, H), *b32 = bf_wide(b, H);
	float *d32 = bf_wide(dout, nx), *out32 = fnew(nx), *dx32 = fnew(nx);
	float *mean = fnew(n), *rstd = fnew(n), *mean32 = fnew(n);
	float *rstd32 = fnew(n), *dw = frand(H, -1, 1, &st);
	float *db = frand(H, -1, 1, &st);
	float *dw32 = dup_bytes(dw, H * 4), *db32 = dup_bytes(db, H * 4);
	double *xd = to_d(x32, nx), *wd = to_d(w32, H), *bd = to_d(b32, H);
	double *oref = dnew(nx);

	ops->layernorm_fwd(TK_BF16, out, mean, rstd, x, w, b, n, H, eps);
	ops->layernorm_fwd(TK_F32, out32, mean32, rstd32, x32, w32, b32, n, H,
			   eps);
	bf_is_rne("layernorm_fwd bf16", out, out32, nx);
	same_bytes("layernorm_fwd bf16 mean", mean, mean32, n * 4);
	same_bytes("layernorm_fwd bf16 rstd", rstd, rstd32, n * 4);
	ln_ref(oref, NULL, NULL, xd, wd, bd, n, H, eps);
	/* 1 ulp, or 1e-6 absolute (the fp32 error of |terms| <= ~4) */
	bf_near("layernorm_fwd bf16 vs double", out, oref, nx, 1, 1e-6);

	ops->layernorm_bwd(TK_BF16, dx, dw, db, dout, x, w, mean, rstd, n, H);
	ops->layernorm_bwd(TK_F32, dx32, dw32, db32, d32, x32, w32, mean32,
			   rstd32, n, H);
	bf_is_rne("layernorm_bwd bf16 dx", dx, dx32, nx);
	same_bytes("layernorm_bwd bf16 dw", dw, dw32, H * 4);
	same_bytes("layernorm_bwd bf16 db", db, db32, H * 4);

	free(xf);
	free(wf);
	free(bf);
	free(df);
	free(x);
	free(w);
	free(b);
	free(dout);
	free(out);
	free(dx);
	free(x32);
	free(w32);
	free(b32);
	free(d32);
	free(out32);
	free(dx32);
	free(mean);
	free(rstd);
	free(mean32);
	free(rstd32);
	free(dw);
	free(db);
	free(dw32);
	free(db32);
	free(xd);
	free(wd);
	free(bd);
	free(oref);
}

START_TEST(test_layernorm_bf16)
{
	check_ln_bf16(1, 1, 21);
	check_ln_bf16(5, 67, 22);
	check_ln_bf16(70, 520, 23);
}
END_TEST

/* An unknown dtype writes nothing. */
START_TEST(test_layernorm_bad_dtype)
{
	int n = 3, H = 40;
	size_t nx = (size_t)n * H;
	uint64_t st = 31;
	float *x = frand(nx, -1, 1, &st), *w = frand(H, -1, 1, &st);
	float *b = frand(H, -1, 1, &st);
	float *out = fpoison(nx), *mean = fpoison(n), *rstd = fpoison(n);
	float *dw = fpoison(H), *db = fpoison(H), *dx = fpoison(nx);
	float *p = fpoison(nx);

	for (int dt = TK_F16; dt <= TK_F16 + 5; dt += 5) {
		ops->layernorm_fwd(dt, out, mean, rstd, x, w, b, n, H, 1e-5f);
		ops->layernorm_bwd(dt, dx, dw, db, x, x, w, mean, rstd, n, H);
	}
	same_bytes("layernorm_fwd bad dt out", out, p, nx * 4);
	same_bytes("layernorm_fwd bad dt mean", mean, p, n * 4);
	same_bytes("layernorm_fwd bad dt rstd", rstd, p, n * 4);
	same_bytes("layernorm_bwd bad dt dx", dx, p, nx * 4);
	same_bytes("layernorm_bwd bad dt dw", dw, p, H * 4);
	same_bytes("layernorm_bwd bad dt db", db, p, H * 4);
	free(x);
	free(w);
	free(b);
	free(out);
	free(mean);
	free(rstd);
	free(dw);
	free(db);
	free(dx);
	free(p);
}
END_TEST

/* ---- gpt-oss's clamped gated activation ---------------------------------- */

#define GLU_ALPHA 1.702f
#define GLU_LIMIT 7.0f

static double glu_d(double g, double u)
{
	g = g < GLU_LIMIT ? g : GLU_LIMIT;
	u = u < -GLU_LIMIT ? -GLU_LIMIT : u > GLU_LIMIT ? GLU_LIMIT : u;
	return (u + 1) * g / (1 + exp(-(double)GLU_ALPHA * g));
}

struct glu_ctx {
	double *gu;
	const double *R;
	size_t n;
	int I;
};

static double glu_loss(void *p)
{
	struct glu_ctx *c = p;
	double l = 0;

	for (size_t r = 0; r < c->n; r++)
		for (int j = 0; j < c->I; j++) {
			const double *a = c->gu + r * 2 * c->I + 2 * j;
			l += c->R[r * c->I + j] * glu_d(a[0], a[1]);
		}
	return l;
}

/* fp32 against the double function and finite differences (inputs across
 * both clamps, kept off their kinks); the bounds pass the gradient, past
 * them it is 0; bf16 is the fp32 op rounded once; in place. */
START_TEST(test_glu_clamp)
{
	const size_t n = 37;
	const int I = 24;
	size_t m = n * I;
	uint64_t st = 61;
	float *gu = frand(2 * m, -10, 10, &st), *d = frand(m, -1, 1, &st);
	float *out = fpoison(m), *dgu = fpoison(2 * m), *t;
	double *gud, *R = to_d(d, m);
	uint16_t *hgu, *hd, *hout = malloc(m * 2), *hdgu = malloc(2 * m * 2);
	float *wgu, *wd, *fout = fnew(m), *fdgu = fnew(2 * m);
	struct glu_ctx c;

	for (size_t i = 0; i < 2 * m; i++) /* off the clamps' kinks */
		if (fabsf(fabsf(gu[i]) - GLU_LIMIT) < 1e-2f)
			gu[i] = 0.5f;
	gu[0] = GLU_LIMIT, gu[1] = -GLU_LIMIT; /* the bounds themselves */
	gu[2] = 9.0f, gu[3] = -9.0f;	       /* past them */
	gud = to_d(gu, 2 * m);
	c = (struct glu_ctx){gud, R, n, I};
	ops->glu_clamp_fwd(TK_F32, out, gu, n, I, GLU_ALPHA, GLU_LIMIT);
	for (size_t i = 0; i < m; i++) {
		double r = glu_d(gu[2 * i], gu[2 * i + 1]);
		ck_assert_msg(fabs(out[i] - r) <= 1e-5 * (1 + fabs(r)),
			      "glu fwd [%zu]: %a ref %.9g", i, (double)out[i],
			      r);
	}
	ops->glu_clamp_bwd(TK_F32, dgu, d, gu, n, I, GLU_ALPHA, GLU_LIMIT);
	ck_assert(dgu[0] != 0 && dgu[1] != 0); /* at the bounds */
	ck_assert(dgu[2] == 0 && dgu[3] == 0); /* past them */
	/* finite differences off the kinks: row 0's first pair inside */
	gu[0] = 6.5f, gu[1] = -6.5f;
	gud[0] = 6.5, gud[1] = -6.5;
	ops->glu_clamp_bwd(TK_F32, dgu, d, gu, n, I, GLU_ALPHA, GLU_LIMIT);
	ck_assert_double_lt(
	    tu_grad_check(glu_loss, &c, gud, dgu, 2 * m, 100000, 9, 1e-4),
	    1e-6);
	/* in place: dgu over gu */
	t = dup_bytes(gu, 2 * m * 4);
	ops->glu_clamp_bwd(TK_F32, t, d, t, n, I, GLU_ALPHA, GLU_LIMIT);
	same_bytes("glu_clamp_bwd in place", t, dgu, 2 * m * 4);
	/* bf16: the fp32 op on the widened inputs, rounded once */
	hgu = to_bf(gu, 2 * m);
	hd = to_bf(d, m);
	wgu = bf_wide(hgu, 2 * m);
	wd = bf_wide(hd, m);
	ops->glu_clamp_fwd(TK_BF16, hout, hgu, n, I, GLU_ALPHA, GLU_LIMIT);
	ops->glu_clamp_fwd(TK_F32, fout, wgu, n, I, GLU_ALPHA, GLU_LIMIT);
	bf_is_rne("glu_clamp_fwd bf16", hout, fout, m);
	ops->glu_clamp_bwd(TK_BF16, hdgu, hd, hgu, n, I, GLU_ALPHA, GLU_LIMIT);
	ops->glu_clamp_bwd(TK_F32, fdgu, wd, wgu, n, I, GLU_ALPHA, GLU_LIMIT);
	bf_is_rne("glu_clamp_bwd bf16", hdgu, fdgu, 2 * m);
	free(gu), free(d), free(out), free(dgu), free(t), free(gud), free(R);
	free(hgu), free(hd), free(hout), free(hdgu), free(wgu), free(wd);
	free(fout), free(fdgu);
}
END_TEST

/* ---- activations -------------------------------------------------------- */

static double gelu_d(double x)
{
	return 0.5 * x * (1 + erf(x / sqrt(2.0)));
}

static double gelu_grad_d(double x)
{
	return 0.5 * (1 + erf(x / sqrt(2.0))) +
	       x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
}

static double act_d(int act, double x)
{
	return act == TK_ACT_RELU ? (x > 0 ? x : 0) : gelu_d(x);
}

struct act_ctx {
	double *x;
	const double *R;
	size_t n;
	int act;
};

static double act_loss(void *p)
{
	struct act_ctx *c = p;
	double l = 0;

	for (size_t i = 0; i < c->n; i++)
		l += c->R[i] * act_d(c->act, c->x[i]);
	return l;
}

/* fp32: forward against the double function, |err| <= 1e-6 (1 + |x|)
 * (erff is within a couple of ulps; for x << 0, 1 + erf(x) loses relative
 * precision, not absolute); the backward against the double derivative and
 * against finite differences. x avoids |x| < 1e-3 for ReLU so that the
 * differences do not straddle the kink. */
static void check_act_f32(int act, size_t n, uint64_t st)
{
	float *x = frand(n, -6, 6, &st), *d = frand(n, -1, 1, &st);
	float *out = fpoison(n), *dx = fpoison(n), *t;
	double *xd, *R = to_d(d, n), *gref = dnew(n);
	struct act_ctx c;

	for (size_t i = 0; i < n; i++)
		if (act == TK_ACT_RELU && fabsf(x[i]) < 1e-3f)
			x[i] = 0.5f;
	xd = to_d(x, n);
	c = (struct act_ctx){xd, R, n, act};
	ops->act_fwd(TK_F32, act, out, x, n);
	for (size_t i = 0; i < n; i++) {
		double r = act_d(act, x[i]);

		ck_assert_msg(fabs(out[i] - r) <= 1e-6 * (1 + fabs(xd[i])),
			      "act %d fwd [%zu]: x %a out %a ref %.9g", act, i,
			      (double)x[i], (double)out[i], r);
		if (act == TK_ACT_RELU)
			ck_assert_float_eq(out[i], (float)r); /* exact */
	}
	ops->act_bwd(TK_F32, act, dx, d, x, n);
	for (size_t i = 0; i < n; i++)
		gref[i] = d[i] *
			  (act == TK_ACT_RELU ? (x[i] > 0) : gelu_grad_d(x[i]));
	ck_assert_double_lt(tu_rel_err_d(dx, gref, n), 1e-6);
	/* every entry of the small cases, 100 of the large one (each loss
	 * is a pass over all n) */
	ck_assert_double_lt(
	    tu_grad_check(act_loss, &c, xd, dx, n, 1000, 7, 1e-4), 1e-6);

	/* in place: out over x, dx over dout, dx over x (the same bits) */
	t = dup_bytes(x, n * 4);
	ops->act_fwd(TK_F32, act, t, t, n);
	same_bytes("act_fwd in place", t, out, n * 4);
	memcpy(t, d, n * 4);
	ops->act_bwd(TK_F32, act, t, t, x, n);
	same_bytes("act_bwd dx = dout", t, dx, n * 4);
	memcpy(t, x, n * 4);
	ops->act_bwd(TK_F32, act, t, d, t, n);
	same_bytes("act_bwd dx = x", t, dx, n * 4);

	free(x);
	free(d);
	free(out);
	free(dx);
	free(t);
	free(xd);
	free(R);
	free(gref);
}

START_TEST(test_act_f32)
{
	for (int act = TK_ACT_RELU; act <= TK_ACT_GELU; act++) {
		check_act_f32(act, 1, 40 + act);
		check_act_f32(act, 999, 42 + act);
		check_act_f32(act, 100003, 44 + act); /* parallel, sampled */
	}
}
END_TEST

/* bf16: the fp32 op on the widened inputs, rounded; in place too. */
static void check_act_bf16(int act, size_t n, uint64_t st)
{
	float *xf = frand(n, -6, 6, &st), *df = frand(n, -1, 1, &st);
	uint16_t *x = to_bf(xf, n), *d = to_bf(df, n), *out = znew(n * 2);
	uint16_t *dx = znew(n * 2), *t;
	float *x32 = bf_wide(x, n), *d32 = bf_wide(d, n), *o32 = fnew(n);
	float *dx32 = fnew(n);

	ops->act_fwd(TK_BF16, act, out, x, n);
	ops->act_fwd(TK_F32, act, o32, x32, n);
	bf_is_rne("act_fwd bf16", out, o32, n);
	ops->act_bwd(TK_BF16, act, dx, d, x, n);
	ops->act_bwd(TK_F32, act, dx32, d32, x32, n);
	bf_is_rne("act_bwd bf16", dx, dx32, n);
	t = dup_bytes(x, n * 2);
	ops->act_fwd(TK_BF16, act, t, t, n);
	same_bytes("act_fwd bf16 in place", t, out, n * 2);
	memcpy(t, d, n * 2);
	ops->act_bwd(TK_BF16, act, t, t, x, n);
	same_bytes("act_bwd bf16 dx = dout", t, dx, n * 2);
	memcpy(t, x, n * 2);
	ops->act_bwd(TK_BF16, act, t, d, t, n);
	same_bytes("act_bwd bf16 dx = x", t, dx, n * 2);
	free(xf);
	free(df);
	free(x);
	free(d);
	free(out);
	free(dx);
	free(t);
	free(x32);
	free(d32);
	free(o32);
	free(dx32);
}

START_TEST(test_act_bf16)
{
	for (int act = TK_ACT_RELU; act <= TK_ACT_GELU; act++) {
		check_act_bf16(act, 1, 50 + act);
		check_act_bf16(act, 70001, 52 + act);
	}
}
END_TEST

/* ReLU at and around 0, NaN; GELU at 0 and far out. */
START_TEST(test_act_special)
{
	float x[6] = {0.0f, -0.0f, 0x1p-149f, -0x1p-149f, NAN, 1.0f};
	float d[6] = {3.0f, 3.0f, 3.0f, 3.0f, 3.0f, 3.0f};
	float out[6], dx[6];
	float g[4] = {0.0f, -20.0f, 20.0f, -0.0f}, go[4], gd[4], one[4];

	ops->act_fwd(TK_F32, TK_ACT_RELU, out, x, 6);
	ops->act_bwd(TK_F32, TK_ACT_RELU, dx, d, x, 6);
	/* relu(+-0) = +0 and relu'(0) = 0, as torch */
	for (int i = 0; i < 2; i++) {
		ck_assert(out[i] == 0.0f && !signbit(out[i]));
		ck_assert(dx[i] == 0.0f);
	}
	ck_assert_float_eq(out[2], 0x1p-149f); /* a subnormal is > 0 */
	ck_assert_float_eq(dx[2], 3.0f);
	ck_assert(out[3] == 0.0f && dx[3] == 0.0f);
	ck_assert(isnan(out[4])); /* NaN propagates */
	ck_assert_float_eq(dx[4], 3.0f);
	ck_assert(out[5] == 1.0f && dx[5] == 3.0f);

	for (int i = 0; i < 4; i++)
		one[i] = 1.0f;
	ops->act_fwd(TK_F32, TK_ACT_GELU, go, g, 4);
	ops->act_bwd(TK_F32, TK_ACT_GELU, gd, one, g, 4);
	ck_assert(go[0] == 0.0f && gd[0] == 0.5f);
	ck_assert(go[1] == 0.0f && gd[1] == 0.0f); /* erf(-14.1) = -1 */
	ck_assert(go[2] == 20.0f && gd[2] == 1.0f);
	ck_assert(go[3] == 0.0f && gd[3] == 0.5f);
}
END_TEST

/* An unknown act or dtype writes nothing. */
START_TEST(test_act_bad)
{
	size_t n = 100;
	uint64_t st = 60;
	float *x = frand(n, -1, 1, &st), *o = fpoison(n), *p = fpoison(n);
	int bad_act[3] = {0, 3, -1};

	for (int k = 0; k < 3; k++) {
		ops->act_fwd(TK_F32, bad_act[k], o, x, n);
		ops->act_bwd(TK_F32, bad_act[k], o, x, x, n);
		ops->act_fwd(TK_BF16, bad_act[k], o, x, n);
	}
	ops->act_fwd(TK_F16, TK_ACT_GELU, o, x, n);
	ops->act_bwd(TK_F16, TK_ACT_RELU, o, x, x, n);
	ops->act_fwd(9, TK_ACT_RELU, o, x, n);
	same_bytes("act bad arguments", o, p, n * 4);
	free(x);
	free(o);
	free(p);
}
END_TEST

/* ---- fused query_key_value layout --------------------------------------- */

/* n elements of es bytes of random bit patterns (NaNs among them: the
 * copies keep every bit). */
static void *rbits(size_t n, size_t es, uint64_t *st)
{
	unsigned char *p = znew(n * es);

	for (size_t i = 0; i < n * es; i++)
		p[i] = (unsigned char)(tk_splitmix64_next(st) >> 56);
	return p;
}

static void check_qkv(int dt, int n, int heads, int hd, uint64_t st)
{
	size_t es = tk_dtype_size(dt), nq = (size_t)n * heads * hd;
	unsigned char *qkv = rbits(3 * nq, es, &st);
	unsigned char *q = rbits(nq, es, &st), *k = rbits(nq, es, &st);
	unsigned char *v = rbits(nq, es, &st), *back = rbits(3 * nq, es, &st);
	unsigned char *sep[3];

	ops->qkv_split(dt, q, k, v, qkv, n, heads, hd);
	sep[0] = q;
	sep[1] = k;
	sep[2] = v;
	/* q[t, h * hd + d] = qkv[t, h * 3 * hd + c * hd + d], c = 0, 1, 2 */
	for (int t = 0; t < n; t++)
		for (int h = 0; h < heads; h++)
			for (int c = 0; c < 3; c++)
				for (int d = 0; d < hd; d++) {
					size_t f = (size_t)t * heads * 3 * hd +
						   (size_t)h * 3 * hd +
						   (size_t)c * hd + d;
					size_t s = (size_t)t * heads * hd +
						   (size_t)h * hd + d;

					ck_assert_msg(
					    !memcmp(sep[c] + s * es,
						    qkv + f * es, es),
					    "qkv_split dt %d (%d, %d, %d): t "
					    "%d h %d part %d d %d",
					    dt, n, heads, hd, t, h, c, d);
				}
	/* the reverse puts every byte back */
	ops->qkv_merge(dt, back, q, k, v, n, heads, hd);
	same_bytes("qkv_merge(qkv_split)", back, qkv, 3 * nq * es);
	free(qkv);
	free(q);
	free(k);
	free(v);
	free(back);
}

START_TEST(test_qkv)
{
	static const int shapes[][3] = {{1, 1, 1},  {3, 1, 5},	 {5, 4, 1},
					{7, 3, 8},  {2, 12, 64}, {1, 1, 96},
					{64, 8, 64}}; /* last: parallel */

	for (int dt = TK_F32; dt <= TK_BF16; dt++)
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
			check_qkv(dt, shapes[s][0], shapes[s][1], shapes[s][2],
				  70 + s);
}
END_TEST

START_TEST(test_qkv_bad_dtype)
{
	int n = 2, heads = 3, hd = 4;
	size_t nq = (size_t)n * heads * hd;
	float *a = fpoison(3 * nq), *q = fpoison(nq), *p = fpoison(3 * nq);

	ops->qkv_split(TK_F16, q, q, q, a, n, heads, hd);
	ops->qkv_merge(TK_F16, a, q, q, q, n, heads, hd);
	ops->qkv_split(-1, a, a, a, q, n, heads, hd);
	same_bytes("qkv bad dtype q", q, p, nq * 4);
	same_bytes("qkv bad dtype qkv", a, p, 3 * nq * 4);
	free(a);
	free(q);
	free(p);
}
END_TEST

/* ---- dropout ------------------------------------------------------------ */

/* The mask as tk_ops.h documents it, written out: key = splitmix64(seed ^
 * splitmix64(stream)), h = splitmix64(key + i * 0x9E3779B97F4A7C15), kept
 * when (h >> 11) * 2^-53 >= p (exact in double). */
static int doc_keep(uint64_t seed, uint64_t stream, size_t i, float p)
{
	uint64_t key = tk_splitmix64(seed ^ tk_splitmix64(stream));
	uint64_t h = tk_splitmix64(key + (uint64_t)i * 0x9E3779B97F4A7C15ull);

	return (double)(h >> 11) * 0x1p-53 >= (double)p;
}

/* n ones, and the op on them */
START_TEST(test_dropout_mask)
{
	const size_t n = 1000000;
	const float ps[3] = {0.1f, 0.5f, 0.9f};
	float *x = fnew(n), *y = fnew(n);

	for (int k = 0; k < 3; k++) {
		float p = ps[k], s = 1.0f / (1.0f - p);
		size_t kept = 0, diff = 0;
		double mu = n * (1.0 - p), sigma = sqrt(n * p * (1.0 - p));

		for (size_t i = 0; i < n; i++)
			x[i] = 1.0f + (float)(i % 7) * 0.125f;
		memcpy(y, x, n * 4);
		ops->dropout(TK_F32, y, n, p, 1234, 77);
		for (size_t i = 0; i < n; i++) {
			int keep = doc_keep(1234, 77, i, p);

			/* the documented mask and scale, exactly */
			ck_assert_msg(keep ? y[i] == x[i] * s
					   : y[i] == 0.0f && !signbit(y[i]),
				      "dropout p %g [%zu]: %a from %a, keep %d",
				      (double)p, i, (double)y[i], (double)x[i],
				      keep);
			kept += keep;
		}
		ck_assert_msg(fabs((double)kept - mu) <= 3 * sigma,
			      "p %g: kept %zu of %zu, expected %g +- %g",
			      (double)p, kept, n, mu, 3 * sigma);

		/* a different stream, a different seed: other masks, about
		 * 2 p (1 - p) of the decisions differ */
		for (int alt = 0; alt < 2; alt++) {
			uint64_t seed = alt ? 1235 : 1234;
			uint64_t stream = alt ? 77 : 78;
			float *z = dup_bytes(x, n * 4);

			ops->dropout(TK_F32, z, n, p, seed, stream);
			diff = 0;
			for (size_t i = 0; i < n; i++)
				diff += (z[i] == 0.0f) != (y[i] == 0.0f);
			ck_assert_double_gt(diff, 2 * n * p * (1 - p) * 0.95);
			ck_assert_double_lt(diff, 2 * n * p * (1 - p) * 1.05);
			free(z);
		}
		/* the same call twice: the same bits */
		{
			float *z = dup_bytes(x, n * 4);

			ops->dropout(TK_F32, z, n, p, 1234, 77);
			same_bytes("dropout again", z, y, n * 4);
			free(z);
		}
	}
	free(x);
	free(y);
}
END_TEST

/* p == 0 writes nothing, p == 1 zeroes everything; a p outside [0, 1] or
 * NaN, or an unknown dtype, writes nothing. */
START_TEST(test_dropout_edges)
{
	size_t n = 5000;
	uint64_t st = 90;
	float *x = frand(n, -1, 1, &st), *p = fpoison(n), *z;
	float bad[4] = {-0.1f, 1.5f, NAN, -0.0f};

	z = dup_bytes(p, n * 4);
	ops->dropout(TK_F32, z, n, 0.0f, 1, 2);
	for (int k = 0; k < 4; k++)
		ops->dropout(TK_F32, z, n, bad[k], 1, 2);
	ops->dropout(TK_BF16, z, n, 0.0f, 1, 2);
	ops->dropout(TK_F16, z, n, 0.5f, 1, 2);
	ops->dropout(5, z, n, 0.5f, 1, 2);
	same_bytes("dropout writes nothing", z, p, n * 4);
	free(z);

	z = dup_bytes(x, n * 4);
	ops->dropout(TK_F32, z, n, 1.0f, 1, 2);
	for (size_t i = 0; i < n; i++)
		ck_assert(z[i] == 0.0f && !signbit(z[i]));
	free(z);
	ops->dropout(TK_F32, x, 0, 0.5f, 1, 2); /* n == 0 */
	free(x);
	free(p);
}
END_TEST

/* bf16: the mask of fp32, the product rounded once. */
START_TEST(test_dropout_bf16)
{
	size_t n = 200003;
	uint64_t st = 91;
	float *xf = frand(n, -3, 3, &st), p = 0.3f, s = 1.0f / (1.0f - p);
	uint16_t *x = to_bf(xf, n), *y = dup_bytes(x, n * 2);

	ops->dropout(TK_BF16, y, n, p, 42, 5);
	for (size_t i = 0; i < n; i++) {
		uint16_t want = doc_keep(42, 5, i, p)
				    ? tk_f32_bf16_rne(tk_bf16_f32(x[i]) * s)
				    : 0;

		ck_assert_msg(y[i] == want,
			      "dropout bf16 [%zu]: 0x%04x vs 0x%04x", i, y[i],
			      want);
	}
	free(xf);
	free(x);
	free(y);
}
END_TEST

/* The backward is the same call on the gradient: for y = dropout(x),
 * d(sum(y * g)) / dx = dropout(g), checked by central differences. */
struct drop_ctx {
	double *x;
	const float *g;
	size_t n;
	float p;
	float *buf;
};

static double drop_loss(void *v)
{
	struct drop_ctx *c = v;
	double l = 0;

	for (size_t i = 0; i < c->n; i++)
		c->buf[i] = (float)c->x[i];
	ops->dropout(TK_F32, c->buf, c->n, c->p, 9, 3);
	for (size_t i = 0; i < c->n; i++)
		l += (double)c->buf[i] * c->g[i];
	return l;
}

START_TEST(test_dropout_backward)
{
	size_t n = 3000;
	uint64_t st = 92;
	float *x = frand(n, -1, 1, &st), *g = frand(n, -1, 1, &st);
	float *dg = dup_bytes(g, n * 4), *buf = fnew(n);
	double *xd = to_d(x, n);
	struct drop_ctx c = {xd, g, n, 0.25f, buf};

	ops->dropout(TK_F32, dg, n, 0.25f, 9, 3);
	/* The loss is linear in x: a large h (1/64) keeps the fp32 rounding
	 * of x +- h and of the scaled products (~1e-7 each) small against
	 * 2h, a few 1e-6 relative. */
	ck_assert_double_lt(
	    tu_grad_check(drop_loss, &c, xd, dg, n, n, 1, 0x1p-6), 1e-5);
	free(x);
	free(g);
	free(dg);
	free(buf);
	free(xd);
}
END_TEST

/* ---- suite -------------------------------------------------------------- */

static Suite *family_suite(void)
{
	Suite *s = suite_create("family_ops");
	TCase *tc = tcase_create("cpu");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_layernorm_f32);
	tcase_add_test(tc, test_layernorm_constant_row);
	tcase_add_test(tc, test_layernorm_bf16);
	tcase_add_test(tc, test_layernorm_bad_dtype);
	tcase_add_test(tc, test_act_f32);
	tcase_add_test(tc, test_glu_clamp);
	tcase_add_test(tc, test_act_bf16);
	tcase_add_test(tc, test_act_special);
	tcase_add_test(tc, test_act_bad);
	tcase_add_test(tc, test_qkv);
	tcase_add_test(tc, test_qkv_bad_dtype);
	tcase_add_test(tc, test_dropout_mask);
	tcase_add_test(tc, test_dropout_edges);
	tcase_add_test(tc, test_dropout_bf16);
	tcase_add_test(tc, test_dropout_backward);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	ops = tk_cpu_ops();
	return tu_run(family_suite(), 0) ? EXIT_FAILURE : EXIT_SUCCESS;
}
