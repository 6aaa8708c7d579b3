/* test_ops.c: the CPU backend's op table against naive double references.
 *
 * Every forward op is compared with a straightforward double-precision
 * reference written here; every backward op is compared with central
 * finite differences of that reference (in double, loss = sum(R * out) for a
 * random R that is also the op's incoming gradient). The CPU backend's
 * memory is host memory, so the tests pass malloc'd buffers to the ops.
 * Sizes are chosen so that the OpenMP paths (>= 32768 elements) run too.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tk_convert.h"
#include "tk_ops.h"

static const tk_ops *ops;

/* ---- helpers ------------------------------------------------------------ */

static float *fnew(size_t n)
{
	float *p = calloc(n ? n : 1, sizeof(float));

	ck_assert_ptr_nonnull(p);
	return p;
}

static double *dnew(size_t n)
{
	double *p = calloc(n ? n : 1, sizeof(double));

	ck_assert_ptr_nonnull(p);
	return p;
}

static float *frand(size_t n, float lo, float hi, uint64_t *st)
{
	float *p = fnew(n);

	tu_fill_uniform(p, n, lo, hi, st);
	return p;
}

static double *f2d(const float *x, size_t n)
{
	double *p = dnew(n);

	for (size_t i = 0; i < n; i++)
		p[i] = x[i];
	return p;
}

static float *fcopy(const float *x, size_t n)
{
	float *p = fnew(n);

	memcpy(p, x, n * sizeof(float));
	return p;
}

/* tu_grad_check with the step of these tests. */
static double grad_check(tu_loss_fn loss, void *ctx, double *x, const float *g,
			 size_t n, size_t samples, uint64_t seed)
{
	return tu_grad_check(loss, ctx, x, g, n, samples, seed, 1e-4);
}

/* ---- memory ------------------------------------------------------------- */

START_TEST(test_memory_counters)
{
	size_t base = ops->mem_current();
	size_t peak0 = ops->mem_peak();
	char *a, *b, host[300], back[300];

	ck_assert_uint_ge(peak0, base);
	a = ops->alloc(1000);
	ck_assert_ptr_nonnull(a);
	ck_assert_uint_eq((uintptr_t)a % 64, 0);
	ck_assert_uint_eq(ops->mem_current(), base + 1000);
	ck_assert_uint_ge(ops->mem_peak(), base + 1000);
	b = ops->alloc(300);
	ck_assert_ptr_nonnull(b);
	ck_assert_uint_eq((uintptr_t)b % 64, 0);
	ck_assert_uint_eq(ops->mem_current(), base + 1300);
	ck_assert_uint_ge(ops->mem_peak(), base + 1300);

	/* upload / download / memset0 round trip */
	for (int i = 0; i < 300; i++)
		host[i] = (char)(i * 7 + 1);
	ops->upload(b, host, sizeof(host));
	ops->download(back, b, sizeof(back));
	ck_assert_mem_eq(host, back, sizeof(host));
	ops->memset0(b + 10, 100);
	ops->download(back, b, sizeof(back));
	for (int i = 0; i < 300; i++)
		ck_assert_int_eq(back[i], i >= 10 && i < 110 ? 0 : host[i]);

	ops->free(a, 1000);
	ck_assert_uint_eq(ops->mem_current(), base + 300);
	ck_assert_uint_ge(ops->mem_peak(), base + 1300);
	ops->mem_reset_peak();
	ck_assert_uint_eq(ops->mem_peak(), base + 300);
	a = ops->alloc(50);
	ck_assert_uint_eq(ops->mem_peak(), base + 350);
	ops->free(a, 50);
	ops->free(b, 300);
	ck_assert_uint_eq(ops->mem_current(), base);
	ck_assert_uint_eq(ops->mem_peak(), base + 350);
	ops->free(NULL, 0);
	ck_assert_uint_eq(ops->mem_current(), base);

	/* A zero-byte allocation is a valid pointer and counts nothing. */
	a = ops->alloc(0);
	ck_assert_ptr_nonnull(a);
	ck_assert_uint_eq(ops->mem_current(), base);
	ops->free(a, 0);
}
END_TEST

START_TEST(test_memory_threads)
{
	size_t base = ops->mem_current();

	ops->mem_reset_peak();
#pragma omp parallel for num_threads(4)
	for (int t = 0; t < 4; t++) {
		for (int r = 0; r < 2000; r++) {
			size_t sz = 64 + (size_t)((t * 31 + r) % 17) * 8;
			void *p = ops->alloc(sz);
			if (p)
				ops->free(p, sz);
		}
	}
	ck_assert_uint_eq(ops->mem_current(), base);
	ck_assert_uint_ge(ops->mem_peak(), base + 64);
	ck_assert_uint_le(ops->mem_peak(), base + 4 * (64 + 16 * 8));
}
END_TEST

/* ---- to_f32 ------------------------------------------------------------- */

static uint32_t f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

START_TEST(test_dtype_size)
{
	ck_assert_uint_eq(tk_dtype_size(TK_F32), 4);
	ck_assert_uint_eq(tk_dtype_size(TK_BF16), 2);
	ck_assert_uint_eq(tk_dtype_size(TK_F16), 2);
	ck_assert_uint_eq(tk_dtype_size(99), 0);
}
END_TEST

START_TEST(test_to_f32_known)
{
	static const uint16_t bf[] = {0x3f80, 0xc000, 0x3e20, 0x0000, 0x8000,
				      0x7f80, 0xff80, 0x0001, 0x4049, 0x7f7f};
	static const float bf_ref[] = {
	    1.0f,     -2.0f,	 0.15625f,  0.0f,      -0.0f,
	    INFINITY, -INFINITY, 0x1p-133f, 3.140625f, 0x1.fep127f};
	static const uint16_t hf[] = {0x3c00, 0xc000, 0x7bff, 0x0001,
				      0x03ff, 0x0400, 0x8000, 0x7c00,
				      0xfc00, 0x3555, 0x8001, 0x3800};
	static const float hf_ref[] = {
	    1.0f,      -2.0f, 65504.0f, 0x1p-24f,  1023 * 0x1p-24f,
	    0x1p-14f,  -0.0f, INFINITY, -INFINITY, 0.333251953125f,
	    -0x1p-24f, 0.5f};
	size_t nb = sizeof(bf) / sizeof(bf[0]), nf = sizeof(hf) / 2;
	float out[16];
	uint16_t nan16[3] = {0x7fc0, 0x7e00, 0xfe01};
	float in32[3] = {1.5f, -0.0f, 0x1p-140f};

	ops->to_f32(out, bf, TK_BF16, nb);
	for (size_t i = 0; i < nb; i++)
		ck_assert_uint_eq(f32_bits(out[i]), f32_bits(bf_ref[i]));
	ops->to_f32(out, hf, TK_F16, nf);
	for (size_t i = 0; i < nf; i++)
		ck_assert_uint_eq(f32_bits(out[i]), f32_bits(hf_ref[i]));

	ops->to_f32(out, nan16, TK_BF16, 1);
	ck_assert(isnan(out[0]));
	ops->to_f32(out, nan16 + 1, TK_F16, 2);
	ck_assert(isnan(out[0]) && isnan(out[1]) && signbit(out[1]));

	ops->to_f32(out, in32, TK_F32, 3);
	for (int i = 0; i < 3; i++)
		ck_assert_uint_eq(f32_bits(out[i]), f32_bits(in32[i]));
}
END_TEST

/* All 65536 half and bfloat16 patterns (also the parallel path). */
START_TEST(test_to_f32_all)
{
	uint16_t *h = malloc(65536 * sizeof(*h));
	float *out = fnew(65536);

	ck_assert_ptr_nonnull(h);
	for (uint32_t i = 0; i < 65536; i++)
		h[i] = (uint16_t)i;

	ops->to_f32(out, h, TK_F16, 65536);
	for (uint32_t i = 0; i < 65536; i++) {
		int e = (i >> 10) & 0x1f, m = i & 0x3ff;
		double sign = (i & 0x8000) ? -1.0 : 1.0, ref;
		if (e == 0x1f) {
			if (m)
				ck_assert(isnan(out[i]));
			else
				ck_assert(isinf(out[i]) &&
					  !!signbit(out[i]) == (sign < 0));
			continue;
		}
		ref = e == 0 ? sign * ldexp(m, -24)
			     : sign * ldexp(1024 + m, e - 25);
		ck_assert_msg((double)out[i] == ref &&
				  !!signbit(out[i]) == (sign < 0),
			      "f16 0x%04x: %a != %a", i, (double)out[i], ref);
	}

	ops->to_f32(out, h, TK_BF16, 65536);
	for (uint32_t i = 0; i < 65536; i++)
		ck_assert_uint_eq(f32_bits(out[i]), i << 16);
	free(h);
	free(out);
}
END_TEST

/* ---- matmul ------------------------------------------------------------- */

START_TEST(test_matmul)
{
	uint64_t st = 1;
	int M = 7, N = 5, K = 9, pad = 3;

	for (int ta = 0; ta < 2; ta++) {
		for (int tb = 0; tb < 2; tb++) {
			int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad;
			int ldc = N + pad;
			size_t na = (size_t)(ta ? K : M) * lda;
			size_t nb = (size_t)(tb ? N : K) * ldb;
			float *A = frand(na, -1, 1, &st);
			float *B = frand(nb, -1, 1, &st);
			float *C = frand((size_t)M * ldc, -1, 1, &st);
			float *C0 = fcopy(C, (size_t)M * ldc);
			float alpha = 0.75f, beta = -0.5f;

			ops->matmul(ta, tb, M, N, K, alpha, TK_F32, A, lda, B,
				    ldb, beta, TK_F32, C, ldc);
			for (int i = 0; i < M; i++) {
				for (int j = 0; j < ldc; j++) {
					double ref = 0, got = C[i * ldc + j];
					if (j >= N) { /* padding untouched */
						ck_assert_float_eq(
						    C[i * ldc + j],
						    C0[i * ldc + j]);
						continue;
					}
					for (int p = 0; p < K; p++) {
						double a = ta ? A[p * lda + i]
							      : A[i * lda + p];
						double b = tb ? B[j * ldb + p]
							      : B[p * ldb + j];
						ref += a * b;
					}
					ref = alpha * ref +
					      beta * (double)C0[i * ldc + j];
					ck_assert_msg(fabs(got - ref) < 1e-5,
						      "ta=%d tb=%d (%d,%d): %g "
						      "vs %g",
						      ta, tb, i, j, got, ref);
				}
			}
			free(A);
			free(B);
			free(C);
			free(C0);
		}
	}
}
END_TEST

START_TEST(test_matmul_k0)
{
	float C[6] = {1, 2, 3, 4, 5, 6}, A[1] = {0}, B[1] = {0};

	ops->matmul(0, 0, 2, 3, 0, 1.0f, TK_F32, A, 1, B, 3, 2.0f, TK_F32, C,
		    3);
	for (int i = 0; i < 6; i++)
		ck_assert_float_eq(C[i], 2.0f * (float)(i + 1));
	ops->matmul(0, 0, 2, 3, 0, 1.0f, TK_F32, A, 1, B, 3, 0.0f, TK_F32, C,
		    3);
	for (int i = 0; i < 6; i++)
		ck_assert_float_eq(C[i], 0.0f);
}
END_TEST

/* ---- add, bias ---------------------------------------------------------- */

START_TEST(test_add)
{
	uint64_t st = 2;
	size_t n = 40001;
	float *y = frand(n, -1, 1, &st), *x = frand(n, -1, 1, &st);
	float *y0 = fcopy(y, n);

	ops->add(TK_F32, y, x, n);
	for (size_t i = 0; i < n; i++)
		ck_assert_float_eq(y[i], y0[i] + x[i]);
	free(y);
	free(x);
	free(y0);
}
END_TEST

START_TEST(test_bias)
{
	uint64_t st = 3;
	int shapes[2][2] = {{3, 5}, {301, 130}}; /* small and parallel */

	for (int s = 0; s < 2; s++) {
		int rows = shapes[s][0], C = shapes[s][1];
		size_t n = (size_t)rows * C;
		float *y = frand(n, -1, 1, &st), *y0 = fcopy(y, n);
		float *bias = frand((size_t)C, -1, 1, &st);
		float *db = frand((size_t)C, -1, 1, &st);
		float *db0 = fcopy(db, (size_t)C);
		double *ref = dnew((size_t)C);

		ops->bias_fwd(TK_F32, y, bias, rows, C);
		for (size_t i = 0; i < n; i++)
			ck_assert_float_eq(y[i], y0[i] + bias[i % C]);

		/* dbias accumulates sum over rows of dy */
		ops->bias_bwd(TK_F32, db, y0, rows, C);
		for (int c = 0; c < C; c++) {
			ref[c] = db0[c];
			for (int r = 0; r < rows; r++)
				ref[c] += y0[(size_t)r * C + c];
		}
		ck_assert_double_lt(tu_rel_err_d(db, ref, (size_t)C), 1e-6);
		free(y);
		free(y0);
		free(bias);
		free(db);
		free(db0);
		free(ref);
	}
}
END_TEST

/* ---- embedding ---------------------------------------------------------- */

START_TEST(test_embedding)
{
	uint64_t st = 4;
	int V = 37, H = 300, n = 200; /* n * H >= the parallel threshold */
	float *table = frand((size_t)V * H, -1, 1, &st);
	float *out = fnew((size_t)n * H), *dout;
	float *dt = frand((size_t)V * H, -1, 1, &st), *dt0, *dt2;
	int32_t *tok = malloc((size_t)n * sizeof(*tok));
	double *ref = dnew((size_t)V * H);

	ck_assert_ptr_nonnull(tok);
	for (int i = 0; i < n; i++)
		tok[i] = (int32_t)((i * 7 + i / 3) % (V - 2)); /* repeats */
	ops->embedding_fwd(TK_F32, out, table, tok, n, H);
	for (int i = 0; i < n; i++)
		ck_assert_mem_eq(out + (size_t)i * H,
				 table + (size_t)tok[i] * H,
				 (size_t)H * sizeof(float));

	dout = frand((size_t)n * H, -1, 1, &st);
	dt0 = fcopy(dt, (size_t)V * H);
	ops->embedding_bwd(TK_F32, dt, dout, tok, n, H, 0, V);
	for (size_t i = 0; i < (size_t)V * H; i++)
		ref[i] = dt0[i];
	for (int i = 0; i < n; i++)
		for (int c = 0; c < H; c++)
			ref[(size_t)tok[i] * H + c] += dout[(size_t)i * H + c];
	ck_assert_double_lt(tu_rel_err_d(dt, ref, (size_t)V * H), 1e-6);
	/* Rows of unused tokens are untouched. */
	ck_assert_mem_eq(dt + (size_t)(V - 1) * H, dt0 + (size_t)(V - 1) * H,
			 (size_t)H * sizeof(float));

	/* Deterministic: the same call gives the same bits. */
	dt2 = fcopy(dt0, (size_t)V * H);
	ops->embedding_bwd(TK_F32, dt2, dout, tok, n, H, 0, V);
	ck_assert_mem_eq(dt, dt2, (size_t)V * H * sizeof(float));

	/* A slice of rows [r0, r0 + nr) into a [nr, H] table: the same bits
	 * as those rows of the whole table, the other tokens skipped. */
	{
		int r0 = 2, nr = 3;
		float *part = fcopy(dt0 + (size_t)r0 * H, (size_t)nr * H);

		ops->embedding_bwd(TK_F32, part, dout, tok, n, H, r0, nr);
		ck_assert_mem_eq(part, dt + (size_t)r0 * H,
				 (size_t)nr * H * sizeof(float));
		free(part);
	}

	free(table);
	free(out);
	free(dout);
	free(dt);
	free(dt0);
	free(dt2);
	free(tok);
	free(ref);
}
END_TEST

/* ---- rmsnorm ------------------------------------------------------------ */

struct rms_ctx {
	double *x, *w;
	const double *R;
	int n, H;
	double eps;
};

static void rms_ref(double *out, double *rstd, const double *x, const double *w,
		    int n, int H, double eps)
{
	for (int i = 0; i < n; i++) {
		double ss = 0, r;
		for (int j = 0; j < H; j++)
			ss += x[i * H + j] * x[i * H + j];
		r = 1.0 / sqrt(ss / H + eps);
		if (rstd)
			rstd[i] = r;
		for (int j = 0; j < H; j++)
			out[i * H + j] = w[j] * x[i * H + j] * r;
	}
}

static double rms_loss(void *p)
{
	struct rms_ctx *c = p;
	double *out = dnew((size_t)c->n * c->H), l = 0;

	rms_ref(out, NULL, c->x, c->w, c->n, c->H, c->eps);
	for (size_t i = 0; i < (size_t)c->n * c->H; i++)
		l += c->R[i] * out[i];
	free(out);
	return l;
}

static void check_rmsnorm(int n, int H, size_t samples, uint64_t st)
{
	size_t nx = (size_t)n * H;
	float eps = 1e-5f;
	float *x = frand(nx, -2, 2, &st),
	      *w = frand((size_t)H, 0.5f, 1.5f, &st);
	float *dout = frand(nx, -1, 1, &st), *out = fnew(nx), *rstd = fnew(n);
	float *dx = fnew(nx), *dw = frand((size_t)H, -1, 1, &st);
	float *dw0 = fcopy(dw, (size_t)H);
	double *xd = f2d(x, nx), *wd = f2d(w, (size_t)H), *R = f2d(dout, nx);
	double *oref = dnew(nx), *rref = dnew((size_t)n);
	struct rms_ctx c = {xd, wd, R, n, H, eps};

	/* one row of zeros: rstd = 1/sqrt(eps), gradient stays finite */
	memset(x, 0, (size_t)H * sizeof(float));
	memset(xd, 0, (size_t)H * sizeof(double));

	ops->rmsnorm_fwd(TK_F32, out, rstd, x, w, n, H, eps);
	rms_ref(oref, rref, xd, wd, n, H, eps);
	ck_assert_double_lt(tu_rel_err_d(out, oref, nx), 1e-6);
	ck_assert_double_lt(tu_rel_err_d(rstd, rref, (size_t)n), 1e-6);

	ops->rmsnorm_bwd(TK_F32, dx, dw, dout, x, w, rstd, n, H);
	for (int j = 0; j < H; j++)
		dw[j] -= dw0[j]; /* dw accumulates */
	ck_assert_double_lt(grad_check(rms_loss, &c, xd, dx, nx, samples, 11),
			    1e-4);
	ck_assert_double_lt(
	    grad_check(rms_loss, &c, wd, dw, (size_t)H, samples, 12), 1e-4);

	free(x);
	free(w);
	free(dout);
	free(out);
	free(rstd);
	free(dx);
	free(dw);
	free(dw0);
	free(xd);
	free(wd);
	free(R);
	free(oref);
	free(rref);
}

START_TEST(test_rmsnorm)
{
	check_rmsnorm(4, 16, 1000, 5);
	check_rmsnorm(70, 520, 40, 6); /* parallel path, sampled */
}
END_TEST

/* ---- rope --------------------------------------------------------------- */

struct rope_ctx {
	double *x;
	const double *R;
	const float *ctab, *stab;
	const int32_t *pos;
	int n, heads, hd;
};

static void rope_ref(double *out, const double *x, const float *ctab,
		     const float *stab, const int32_t *pos, int n, int heads,
		     int hd)
{
	int half = hd / 2;

	for (int t = 0; t < n; t++)
		for (int h = 0; h < heads; h++) {
			const double *xi = x + ((size_t)t * heads + h) * hd;
			double *oi = out + ((size_t)t * heads + h) * hd;
			/* out = x * cat(c, c) + rotate_half(x) * cat(s, s) */
			for (int i = 0; i < hd; i++) {
				int f = i % half;
				double c = ctab[pos[t] * half + f];
				double s = stab[pos[t] * half + f];
				double rot =
				    i < half ? -xi[i + half] : xi[i - half];
				oi[i] = xi[i] * c + rot * s;
			}
		}
}

static double rope_loss(void *p)
{
	struct rope_ctx *c = p;
	size_t nx = (size_t)c->n * c->heads * c->hd;
	double *out = dnew(nx), l = 0;

	rope_ref(out, c->x, c->ctab, c->stab, c->pos, c->n, c->heads, c->hd);
	for (size_t i = 0; i < nx; i++)
		l += c->R[i] * out[i];
	free(out);
	return l;
}

static void check_rope(int n, int heads, int hd, size_t samples, uint64_t st)
{
	int half = hd / 2, max_pos = 64;
	size_t nx = (size_t)n * heads * hd;
	float *ctab = fnew((size_t)max_pos * half);
	float *stab = fnew((size_t)max_pos * half);
	int32_t *pos = malloc((size_t)n * sizeof(*pos));
	float *x = frand(nx, -1, 1, &st), *dout = frand(nx, -1, 1, &st);
	float *y = fcopy(x, nx), *dx = fcopy(dout, nx);
	double *xd = f2d(x, nx), *R = f2d(dout, nx), *ref = dnew(nx);
	struct rope_ctx c = {xd, R, ctab, stab, pos, n, heads, hd};

	ck_assert_ptr_nonnull(pos);
	for (int p = 0; p < max_pos; p++)
		for (int i = 0; i < half; i++) {
			double inv = pow(10000.0, -2.0 * i / hd);
			ctab[p * half + i] = (float)cos(p * inv);
			stab[p * half + i] = (float)sin(p * inv);
		}
	for (int t = 0; t < n; t++) /* documents of length 5 and 7 */
		pos[t] = (t % 12) < 5 ? t % 12 : t % 12 - 5;

	ops->rope_fwd(TK_F32, y, ctab, stab, pos, n, heads, hd);
	rope_ref(ref, xd, ctab, stab, pos, n, heads, hd);
	ck_assert_double_lt(tu_rel_err_d(y, ref, nx), 1e-6);
	/* position 0 is the identity */
	ck_assert_mem_eq(y, x, (size_t)heads * hd * sizeof(float));

	ops->rope_bwd(TK_F32, dx, ctab, stab, pos, n, heads, hd);
	ck_assert_double_lt(grad_check(rope_loss, &c, xd, dx, nx, samples, 13),
			    1e-5);

	/* the backward rotation inverts the forward one */
	ops->rope_bwd(TK_F32, y, ctab, stab, pos, n, heads, hd);
	ck_assert_double_lt(tu_rel_err(y, x, nx), 1e-6);

	free(ctab);
	free(stab);
	free(pos);
	free(x);
	free(dout);
	free(y);
	free(dx);
	free(xd);
	free(R);
	free(ref);
}

START_TEST(test_rope)
{
	check_rope(13, 2, 8, 1000, 7);
	check_rope(64, 4, 128, 40, 8); /* parallel path, sampled */
}
END_TEST

/* ---- swiglu ------------------------------------------------------------- */

struct swiglu_ctx {
	double *g, *u;
	const double *R;
	size_t n;
};

static double silu_d(double g)
{
	return g / (1.0 + exp(-g));
}

static double swiglu_loss(void *p)
{
	struct swiglu_ctx *c = p;
	double l = 0;

	for (size_t i = 0; i < c->n; i++)
		l += c->R[i] * silu_d(c->g[i]) * c->u[i];
	return l;
}

static void check_swiglu(size_t n, size_t samples, uint64_t st)
{
	float *g = frand(n, -6, 6, &st), *u = frand(n, -2, 2, &st);
	float *dout = frand(n, -1, 1, &st), *out = fnew(n);
	float *dg = fnew(n), *du = fnew(n);
	double *gd, *ud, *R = f2d(dout, n), *ref = dnew(n);
	struct swiglu_ctx c;

	g[0] = -100.0f; /* saturated sigmoid: finite, ~0 */
	g[1] = 100.0f;
	g[2] = 0.0f;
	gd = f2d(g, n);
	ud = f2d(u, n);
	c = (struct swiglu_ctx){gd, ud, R, n};

	ops->swiglu_fwd(TK_F32, out, g, u, n);
	for (size_t i = 0; i < n; i++)
		ref[i] = silu_d(gd[i]) * ud[i];
	ck_assert_double_lt(tu_rel_err_d(out, ref, n), 1e-6);

	ops->swiglu_bwd(TK_F32, dg, du, dout, g, u, n);
	for (size_t i = 0; i < n; i++)
		ck_assert(isfinite(dg[i]) && isfinite(du[i]));
	ck_assert_double_lt(grad_check(swiglu_loss, &c, gd, dg, n, samples, 14),
			    1e-5);
	ck_assert_double_lt(grad_check(swiglu_loss, &c, ud, du, n, samples, 15),
			    1e-5);
	free(g);
	free(u);
	free(dout);
	free(out);
	free(dg);
	free(du);
	free(gd);
	free(ud);
	free(R);
	free(ref);
}

START_TEST(test_swiglu)
{
	check_swiglu(50, 1000, 9);
	check_swiglu(40000, 200, 10); /* parallel path, sampled */
}
END_TEST

/* ---- cross-entropy ------------------------------------------------------ */

static void ce_rows_alloc(tk_ce_rows *s, int n)
{
	s->mx = fnew((size_t)n);
	s->se = dnew((size_t)n);
	s->tl = fnew((size_t)n);
	s->lse = fnew((size_t)n);
	s->am = calloc((size_t)(n > 0 ? n : 1), sizeof(int32_t));
	ck_assert_ptr_nonnull(s->am);
	s->scale = NULL;
}

static void ce_rows_free(tk_ce_rows *s)
{
	free(s->mx);
	free(s->se);
	free(s->tl);
	free(s->lse);
	free(s->am);
}

/* ce_finish with the sums read back (the CPU backend's memory is the
 * host's). */
static void ce_finish_host(const tk_ce_rows *s, const int32_t *targets, int n,
			   double *loss_sum, int *n_correct, double *row_loss)
{
	double sums[2];

	ops->ce_finish(s, targets, n, sums, row_loss);
	if (loss_sum)
		*loss_sum = sums[0];
	if (n_correct)
		*n_correct = (int)sums[1];
}

/* The former fused op through the chunked one, one chunk of V: loss and
 * n_correct; the gradient in place when grad_scale != 0. */
static void ce_whole(float *logits, const int32_t *targets, int n, int V,
		     float grad_scale, double *loss_sum, int *n_correct,
		     double *row_loss)
{
	tk_ce_rows s;

	ce_rows_alloc(&s, n);
	ops->ce_stats(&s, logits, V, targets, n, 0, V);
	ce_finish_host(&s, targets, n, loss_sum, n_correct, row_loss);
	if (grad_scale != 0.0f)
		ops->ce_grad(TK_F32, logits, V, logits, V, &s, targets, n, 0, V,
			     grad_scale);
	ce_rows_free(&s);
}

struct ce_ctx {
	double *x;
	const int32_t *tgt;
	int n, V;
};

/* sum over valid rows of lse - x[target], in double */
static double ce_ref(const double *x, const int32_t *tgt, int n, int V)
{
	double l = 0;

	for (int i = 0; i < n; i++) {
		const double *r = x + (size_t)i * V;
		double m = r[0], s = 0;
		if (tgt[i] == -100)
			continue;
		for (int j = 1; j < V; j++)
			m = r[j] > m ? r[j] : m;
		for (int j = 0; j < V; j++)
			s += exp(r[j] - m);
		l += m + log(s) - r[tgt[i]];
	}
	return l;
}

static double ce_loss(void *p)
{
	struct ce_ctx *c = p;

	return ce_ref(c->x, c->tgt, c->n, c->V);
}

START_TEST(test_cross_entropy_small)
{
	enum { n = 7, V = 11 };
	uint64_t st = 16;
	int32_t tgt[n] = {3, -100, 0, 10, 5, -100, 2};
	float *x = frand((size_t)n * V, -3, 3, &st), *g, *x0;
	double *xd, loss = -1, ref;
	float scale = 0.25f;
	int nc = -1, ncref = 0;
	struct ce_ctx c;

	/* rows 2 and 4: ties at the max, target the smaller index: correct */
	x[2 * V + 0] = x[2 * V + 4] = 9.0f;
	x[4 * V + 5] = x[4 * V + 8] = 9.0f;
	/* row 6: tie between 1 and 2 at the max, target 2: not correct */
	x[6 * V + 1] = x[6 * V + 2] = 9.0f;
	/* row 3: target is the unique argmax */
	x[3 * V + 10] = 8.0f;
	/* row 0: huge logits must not overflow */
	for (int j = 0; j < V; j++)
		x[j] += 1000.0f;
	xd = f2d(x, (size_t)n * V);
	c = (struct ce_ctx){xd, tgt, n, V};
	ref = ce_ref(xd, tgt, n, V);
	for (int i = 0; i < n; i++) { /* argmax, ties to the smaller index */
		int am = 0;
		if (tgt[i] == -100)
			continue;
		for (int j = 1; j < V; j++)
			if (x[i * V + j] > x[i * V + am])
				am = j;
		ncref += am == tgt[i];
		if (i == 2 || i == 3 || i == 4)
			ck_assert_int_eq(am, tgt[i]);
		if (i == 6)
			ck_assert_int_ne(am, tgt[i]);
	}
	/* grad_scale == 0: loss only, logits untouched */
	x0 = fcopy(x, (size_t)n * V);
	ce_whole(x, tgt, n, V, 0.0f, &loss, &nc, NULL);
	ck_assert_mem_eq(x, x0, (size_t)n * V * sizeof(float));
	ck_assert_double_lt(fabs(loss - ref), 1e-5 * fabs(ref));
	ck_assert_int_eq(nc, ncref);
	ce_whole(x, tgt, n, V, 0.0f, &loss, NULL, NULL);
	ck_assert_double_lt(fabs(loss - ref), 1e-5 * fabs(ref));

	/* with a gradient: scale * (softmax - onehot), zero for -100 rows */
	g = x;
	loss = -1;
	nc = -1;
	ce_whole(g, tgt, n, V, scale, &loss, &nc, NULL);
	ck_assert_double_lt(fabs(loss - ref), 1e-5 * fabs(ref));
	ck_assert_int_eq(nc, ncref);
	for (int j = 0; j < V; j++) {
		ck_assert_float_eq(g[1 * V + j], 0.0f);
		ck_assert_float_eq(g[5 * V + j], 0.0f);
	}
	for (int j = 0; j < (int)(n * V); j++)
		g[j] /= scale;
	ck_assert_double_lt(
	    grad_check(ce_loss, &c, xd, g, (size_t)n * V, 1000, 17), 1e-5);
	/* each valid row of the gradient sums to zero. The softmax is
	 * expf(x - lse) with lse an fp32 (tk_ce_rows), whose rounding error
	 * grows with |lse|: row 0 (logits near 1000, lse ulp 6e-5) is only
	 * good to a few 1e-5. */
	for (int i = 0; i < n; i++) {
		double s = 0;
		for (int j = 0; j < V; j++)
			s += g[i * V + j];
		ck_assert_double_lt(fabs(s), i == 0 ? 1e-4 : 1e-6);
	}
	free(x);
	free(x0);
	free(xd);
}
END_TEST

START_TEST(test_cross_entropy_large)
{
	int n = 64, V = 1000; /* parallel path */
	uint64_t st = 18;
	float *x = frand((size_t)n * V, -4, 4, &st);
	int32_t *tgt = malloc((size_t)n * sizeof(*tgt));
	double *xd = f2d(x, (size_t)n * V), loss, ref;
	int nc, ncref = 0;
	struct ce_ctx c = {xd, tgt, n, V};
	float scale = 1.0f / 48;

	ck_assert_ptr_nonnull(tgt);
	for (int i = 0; i < n; i++) {
		int am = 0;
		tgt[i] = i % 4 == 3 ? -100 : (int32_t)((i * 37) % V);
		if (i % 8 == 0) /* make some rows correct */
			x[(size_t)i * V + tgt[i]] = xd[(size_t)i * V + tgt[i]] =
			    10.0f;
		for (int j = 1; j < V; j++)
			if (x[(size_t)i * V + j] > x[(size_t)i * V + am])
				am = j;
		ncref += tgt[i] != -100 && am == tgt[i];
	}
	ref = ce_ref(xd, tgt, n, V);
	ce_whole(x, tgt, n, V, scale, &loss, &nc, NULL);
	ck_assert_double_lt(fabs(loss - ref), 1e-6 * fabs(ref));
	ck_assert_int_eq(nc, ncref);
	ck_assert_int_ge(nc, 6);
	for (size_t j = 0; j < (size_t)n * V; j++)
		x[j] /= scale;
	ck_assert_double_lt(
	    grad_check(ce_loss, &c, xd, x, (size_t)n * V, 60, 19), 1e-5);
	free(x);
	free(tgt);
	free(xd);
}
END_TEST

/* ---- attention ---------------------------------------------------------- */

struct att_ctx {
	double *q, *k, *v;
	double *sinks;	 /* [nh] gpt-oss's sink logits, or NULL */
	const double *R; /* dL/dout */
	const int32_t *pos;
	int B, T, nh, nkv, hd, window;
	double scale;
};

static int att_allowed(const int32_t *pos_row, int i, int j, int window)
{
	int ds = i - pos_row[i];

	return j >= ds && j <= i && (window <= 0 || i - j < window);
}

/* out [B*T, nh*hd], lse [B, nh, T] (lse may be NULL), all in double */
static void att_ref(double *out, double *lse, const struct att_ctx *c)
{
	int T = c->T, hd = c->hd, group = c->nh / c->nkv;
	int ldq = c->nh * hd, ldk = c->nkv * hd;
	double *s = dnew((size_t)T);

	for (int b = 0; b < c->B; b++)
		for (int h = 0; h < c->nh; h++)
			for (int i = 0; i < T; i++) {
				const int32_t *pr = c->pos + (size_t)b * T;
				const double *qi =
				    c->q + ((size_t)b * T + i) * ldq + h * hd;
				double *oi =
				    out + ((size_t)b * T + i) * ldq + h * hd;
				double m = -INFINITY, sum = 0;
				for (int j = 0; j < T; j++) {
					const double *kj =
					    c->k + ((size_t)b * T + j) * ldk +
					    (h / group) * hd;
					double d = 0;
					if (!att_allowed(pr, i, j, c->window))
						continue;
					for (int e = 0; e < hd; e++)
						d += qi[e] * kj[e];
					s[j] = c->scale * d;
					m = s[j] > m ? s[j] : m;
				}
				/* a sink: one more logit in the sum, no
				 * value */
				if (c->sinks && c->sinks[h] > m)
					m = c->sinks[h];
				if (c->sinks)
					sum = exp(c->sinks[h] - m);
				for (int e = 0; e < hd; e++)
					oi[e] = 0;
				for (int j = 0; j < T; j++) {
					const double *vj =
					    c->v + ((size_t)b * T + j) * ldk +
					    (h / group) * hd;
					double p;
					if (!att_allowed(pr, i, j, c->window))
						continue;
					p = exp(s[j] - m);
					sum += p;
					for (int e = 0; e < hd; e++)
						oi[e] += p * vj[e];
				}
				for (int e = 0; e < hd; e++)
					oi[e] /= sum;
				if (lse)
					lse[((size_t)b * c->nh + h) * T + i] =
					    m + log(sum);
			}
	free(s);
}

static double att_loss(void *p)
{
	struct att_ctx *c = p;
	size_t no = (size_t)c->B * c->T * c->nh * c->hd;
	double *out = dnew(no), l = 0;

	att_ref(out, NULL, c);
	for (size_t i = 0; i < no; i++)
		l += c->R[i] * out[i];
	free(out);
	return l;
}

/* One attention problem: float inputs, their double copies, outputs. */
struct att_case {
	int B, T, nh, nkv, hd, window;
	float scale;
	size_t nq, nk, nl;
	float *q, *k, *v, *out, *lse, *dout, *dq, *dk, *dv;
	float *sinks, *dsinks; /* NULL: no sinks */
	int32_t *pos;
	struct att_ctx c;
};

/* doclens: NULL for one document per row, else four document lengths
 * cycled through (row b starts with doclens[b % 4]); positions restart at
 * 0 at each document start. */
static void att_setup(struct att_case *a, int B, int T, int nh, int nkv, int hd,
		      int window, const int *doclens, uint64_t st)
{
	a->B = B;
	a->T = T;
	a->nh = nh;
	a->nkv = nkv;
	a->hd = hd;
	a->window = window;
	a->scale = 1.0f / sqrtf((float)hd);
	a->nq = (size_t)B * T * nh * hd;
	a->nk = (size_t)B * T * nkv * hd;
	a->nl = (size_t)B * nh * T;
	a->q = frand(a->nq, -1.5f, 1.5f, &st);
	a->k = frand(a->nk, -1.5f, 1.5f, &st);
	a->v = frand(a->nk, -1, 1, &st);
	a->dout = frand(a->nq, -1, 1, &st);
	a->out = fnew(a->nq);
	a->lse = fnew(a->nl);
	a->dq = fnew(a->nq);
	a->dk = fnew(a->nk);
	a->dv = fnew(a->nk);
	a->pos = malloc((size_t)B * T * sizeof(int32_t));
	ck_assert_ptr_nonnull(a->pos);
	for (int b = 0; b < B; b++) {
		int d = b % 4, left = doclens ? doclens[d] : T + 1, p = 0;
		for (int t = 0; t < T; t++) {
			if (left == 0) {
				d = (d + 1) % 4;
				left = doclens[d];
				p = 0;
			}
			a->pos[b * T + t] = p++;
			left--;
		}
	}
	a->sinks = a->dsinks = NULL;
	a->c = (struct att_ctx){f2d(a->q, a->nq),
				f2d(a->k, a->nk),
				f2d(a->v, a->nk),
				NULL,
				f2d(a->dout, a->nq),
				a->pos,
				B,
				T,
				nh,
				nkv,
				hd,
				window,
				a->scale};
}

static void att_free(struct att_case *a)
{
	free(a->q);
	free(a->k);
	free(a->v);
	free(a->out);
	free(a->lse);
	free(a->dout);
	free(a->dq);
	free(a->dk);
	free(a->dv);
	free(a->pos);
	free(a->sinks);
	free(a->dsinks);
	free(a->c.sinks);
	free(a->c.q);
	free(a->c.k);
	free(a->c.v);
	free((double *)a->c.R);
}

static void att_run(struct att_case *a)
{
	ops->attention_fwd(TK_F32, a->out, a->lse, a->q, a->k, a->v, a->pos,
			   a->B, a->T, a->nh, a->nkv, a->hd, a->window,
			   a->scale);
	if (a->sinks)
		ops->attn_sink_fwd(TK_F32, a->out, a->lse, a->sinks, a->B, a->T,
				   a->nh, a->hd);
	/* dq/dk/dv are overwritten: start them dirty */
	for (size_t i = 0; i < a->nq; i++)
		a->dq[i] = 7.0f;
	for (size_t i = 0; i < a->nk; i++)
		a->dk[i] = a->dv[i] = -7.0f;
	ops->attention_bwd(TK_F32, a->dq, a->dk, a->dv, a->dout, a->out, a->lse,
			   a->q, a->k, a->v, a->pos, a->B, a->T, a->nh, a->nkv,
			   a->hd, a->window, a->scale);
	if (a->sinks) { /* accumulates */
		for (int h = 0; h < a->nh; h++)
			a->dsinks[h] = 0.0f;
		ops->attn_sink_bwd(TK_F32, a->dsinks, a->dout, a->out, a->lse,
				   a->sinks, a->B, a->T, a->nh, a->hd);
	}
}

/* Gives a case gpt-oss's attention sinks: a logit per head, around the
 * scores' range so that they take a real share of each softmax. */
static void att_add_sinks(struct att_case *a, uint64_t st)
{
	a->sinks = frand((size_t)a->nh, -1.0f, 2.0f, &st);
	a->dsinks = fnew((size_t)a->nh);
	a->c.sinks = f2d(a->sinks, (size_t)a->nh);
}

/* Forward against the reference, backward against finite differences;
 * with sinks, theirs too. */
static void att_check_x(int B, int T, int nh, int nkv, int hd, int window,
			const int *doclens, size_t samples, uint64_t st,
			int sinks)
{
	struct att_case a;
	double *oref, *lref;

	att_setup(&a, B, T, nh, nkv, hd, window, doclens, st);
	if (sinks)
		att_add_sinks(&a, st + 1000);
	att_run(&a);
	oref = dnew(a.nq);
	lref = dnew(a.nl);
	att_ref(oref, lref, &a.c);
	ck_assert_msg(tu_rel_err_d(a.out, oref, a.nq) < 2e-6,
		      "T=%d window=%d out err %g", T, window,
		      tu_rel_err_d(a.out, oref, a.nq));
	ck_assert_double_lt(tu_rel_err_d(a.lse, lref, a.nl), 1e-6);
	ck_assert_double_lt(
	    grad_check(att_loss, &a.c, a.c.q, a.dq, a.nq, samples, 21), 1e-4);
	ck_assert_double_lt(
	    grad_check(att_loss, &a.c, a.c.k, a.dk, a.nk, samples, 22), 1e-4);
	ck_assert_double_lt(
	    grad_check(att_loss, &a.c, a.c.v, a.dv, a.nk, samples, 23), 1e-4);
	if (sinks)
		ck_assert_double_lt(grad_check(att_loss, &a.c, a.c.sinks,
					       a.dsinks, (size_t)nh, samples,
					       24),
				    1e-4);
	free(oref);
	free(lref);
	att_free(&a);
}

static void att_check(int B, int T, int nh, int nkv, int hd, int window,
		      const int *doclens, size_t samples, uint64_t st)
{
	att_check_x(B, T, nh, nkv, hd, window, doclens, samples, st, 0);
}

/* gpt-oss: sinks, with full attention and a sliding window (its
 * alternate layers), GQA, and documents packed in a row. */
START_TEST(test_attention_sinks)
{
	static const int docs[4] = {5, 7, 4, 9};

	att_check_x(2, 9, 4, 2, 4, 0, NULL, 100000, 41, 1);
	att_check_x(2, 12, 4, 2, 4, 3, docs, 100000, 42, 1);
	att_check_x(1, 130, 2, 1, 64, 40, docs, 12, 43, 1);
}
END_TEST

START_TEST(test_attention_causal)
{
	/* plain causal GQA, every gradient entry checked */
	att_check(2, 9, 4, 2, 4, 0, NULL, 100000, 31);
	/* MHA (group 1) and MQA (one kv head, serial path) */
	att_check(1, 7, 3, 3, 4, 0, NULL, 100000, 32);
	att_check(1, 8, 2, 1, 6, 0, NULL, 100000, 33);
}
END_TEST

START_TEST(test_attention_docs_window)
{
	/* two documents per row (pos restarts at 0), window < T */
	static const int docs[4] = {5, 7, 4, 9};

	att_check(2, 12, 4, 2, 4, 0, docs, 100000, 34);
	att_check(2, 12, 4, 2, 4, 3, docs, 100000, 35);
	att_check(2, 12, 4, 2, 4, 3, NULL, 100000, 36);
	/* window 1: each query sees only itself, out == v */
	att_check(1, 6, 2, 1, 4, 1, NULL, 100000, 37);
}
END_TEST

/* T larger than the kernel's query tile, hd 64: sampled gradients. */
START_TEST(test_attention_tiled)
{
	static const int docs[4] = {70, 33, 101, 50};

	att_check(1, 150, 4, 2, 16, 0, NULL, 16, 38);
	att_check(2, 150, 4, 2, 16, 40, docs, 8, 39);
	att_check(1, 130, 2, 1, 64, 0, docs, 12, 40);
}
END_TEST

/* A gradient flowing into a single query reaches only the keys that query
 * may attend: every other dk/dv entry (and dq of other queries) is zero. */
START_TEST(test_attention_masked_grad)
{
	static const int docs[4] = {6, 10, 6, 10};
	int B = 2, T = 16, nh = 4, nkv = 2, hd = 4, window = 4;
	int qb = 1, qi = 9, qh = 3, kvh = qh / (nh / nkv);
	struct att_case a;
	int lo;

	att_setup(&a, B, T, nh, nkv, hd, window, docs, 41);
	/* row 1 holds documents of length 10 and 6: query 9 is in the first
	 * and its window (keys 6..9) does not reach the document start. */
	ck_assert_int_eq(a.pos[qb * T + qi], 9);
	memset(a.dout, 0, a.nq * sizeof(float));
	for (int e = 0; e < hd; e++)
		a.dout[((size_t)qb * T + qi) * nh * hd + qh * hd + e] =
		    1.0f + e;
	att_run(&a);
	lo = qi - window + 1;
	for (int b = 0; b < B; b++)
		for (int j = 0; j < T; j++)
			for (int g = 0; g < nkv; g++)
				for (int e = 0; e < hd; e++) {
					size_t o =
					    ((size_t)b * T + j) * nkv * hd +
					    g * hd + e;
					int live = b == qb && g == kvh &&
						   j >= lo && j <= qi;
					if (!live) {
						ck_assert_float_eq(a.dk[o],
								   0.0f);
						ck_assert_float_eq(a.dv[o],
								   0.0f);
					} else {
						ck_assert_float_ne(a.dv[o],
								   0.0f);
					}
				}
	for (size_t i = 0; i < a.nq; i++) {
		size_t row = i / ((size_t)nh * hd), h = i / hd % nh;
		if (row != (size_t)qb * T + qi || h != (size_t)qh)
			ck_assert_float_eq(a.dq[i], 0.0f);
	}

	/* the same with the document start inside the window */
	memset(a.dout, 0, a.nq * sizeof(float));
	qb = 0;
	qi = 7; /* row 0: documents of 6 then 10: query 7 has pos 1 */
	ck_assert_int_eq(a.pos[qb * T + qi], 1);
	a.dout[((size_t)qb * T + qi) * nh * hd + 0] = 1.0f;
	att_run(&a);
	for (int j = 0; j < T; j++) {
		size_t o = ((size_t)qb * T + j) * nkv * hd;
		if (j == 6 || j == 7)
			ck_assert_float_ne(a.dv[o], 0.0f);
		else
			ck_assert_float_eq(a.dv[o], 0.0f);
	}
	att_free(&a);
}
END_TEST

/* ---- bf16 storage ------------------------------------------------------- */

/* bf16 <-> fp32, as tk_convert.h does them (the test does not include the
 * kernels' header: these are written out here). */
static uint16_t bf_rne(float f)
{
	uint32_t b;

	memcpy(&b, &f, 4);
	if ((b & 0x7FFFFFFFu) > 0x7F800000u)
		return (uint16_t)((b >> 16) | 0x40);
	b += 0x7FFFu + ((b >> 16) & 1u);
	return (uint16_t)(b >> 16);
}

static float bf_f32(uint16_t h)
{
	uint32_t b = (uint32_t)h << 16;
	float f;

	memcpy(&f, &b, 4);
	return f;
}

/* x rounded to bf16 (the op's bf16 input) */
static uint16_t *bf_from(const float *x, size_t n)
{
	uint16_t *p = calloc(n ? n : 1, 2);

	ck_assert_ptr_nonnull(p);
	for (size_t i = 0; i < n; i++)
		p[i] = bf_rne(x[i]);
	return p;
}

/* h widened (the fp32 op's input) */
static float *bf_wide(const uint16_t *h, size_t n)
{
	float *p = fnew(n);

	for (size_t i = 0; i < n; i++)
		p[i] = bf_f32(h[i]);
	return p;
}

static uint16_t *bf_copy(const uint16_t *h, size_t n)
{
	uint16_t *p = calloc(n ? n : 1, 2);

	ck_assert_ptr_nonnull(p);
	memcpy(p, h, n * 2);
	return p;
}

/* A random bf16 tensor and its widened fp32 copy. */
static uint16_t *bf_rand(size_t n, float lo, float hi, uint64_t *st,
			 float **wide)
{
	float *x = frand(n, lo, hi, st);
	uint16_t *h = bf_from(x, n);

	free(x);
	*wide = bf_wide(h, n);
	return h;
}

/* got (bf16) == ref (the fp32 op's output) rounded, bit for bit. */
static void bf_eq_rne(const uint16_t *got, const float *ref, size_t n,
		      const char *what)
{
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(got[i] == bf_rne(ref[i]),
			      "%s[%zu]: 0x%04x vs rne(%a) = 0x%04x", what, i,
			      got[i], (double)ref[i], bf_rne(ref[i]));
}

/* Bit-identical fp32 outputs. */
static void f32_bits_eq(const float *a, const float *b, size_t n,
			const char *what)
{
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(!memcmp(&a[i], &b[i], 4), "%s[%zu]: %a vs %a",
			      what, i, (double)a[i], (double)b[i]);
}

START_TEST(test_bf16_elementwise)
{
	uint64_t st = 50;
	size_t n = 40001;
	float *x32, *y32, *g32, *u32, *d32, *o32, *dg32, *du32;
	uint16_t *x = bf_rand(n, -3, 3, &st, &x32);
	uint16_t *y = bf_rand(n, -3, 3, &st, &y32);
	uint16_t *g = bf_rand(n, -6, 6, &st, &g32);
	uint16_t *u = bf_rand(n, -2, 2, &st, &u32);
	uint16_t *d = bf_rand(n, -1, 1, &st, &d32);
	uint16_t *o = calloc(n, 2), *dg = calloc(n, 2), *du = calloc(n, 2);
	uint16_t *ga, *ua;

	/* add */
	ops->add(TK_BF16, y, x, n);
	ops->add(TK_F32, y32, x32, n);
	bf_eq_rne(y, y32, n, "add");

	/* swiglu */
	o32 = fnew(n);
	dg32 = fnew(n);
	du32 = fnew(n);
	ops->swiglu_fwd(TK_BF16, o, g, u, n);
	ops->swiglu_fwd(TK_F32, o32, g32, u32, n);
	bf_eq_rne(o, o32, n, "swiglu_fwd");
	ops->swiglu_bwd(TK_BF16, dg, du, d, g, u, n);
	ops->swiglu_bwd(TK_F32, dg32, du32, d32, g32, u32, n);
	bf_eq_rne(dg, dg32, n, "swiglu_bwd dgate");
	bf_eq_rne(du, du32, n, "swiglu_bwd dup");
	/* dgate aliasing gate and dup aliasing up: the same bits */
	ga = bf_copy(g, n);
	ua = bf_copy(u, n);
	ops->swiglu_bwd(TK_BF16, ga, ua, d, ga, ua, n);
	ck_assert_mem_eq(ga, dg, n * 2);
	ck_assert_mem_eq(ua, du, n * 2);
	free(ga);
	free(ua);
	{ /* and in fp32 */
		float *g2 = fcopy(g32, n), *u2 = fcopy(u32, n);

		ops->swiglu_bwd(TK_F32, g2, u2, d32, g2, u2, n);
		ck_assert_mem_eq(g2, dg32, n * 4);
		ck_assert_mem_eq(u2, du32, n * 4);
		free(g2);
		free(u2);
	}
	free(x);
	free(y);
	free(g);
	free(u);
	free(d);
	free(o);
	free(dg);
	free(du);
	free(x32);
	free(y32);
	free(g32);
	free(u32);
	free(d32);
	free(o32);
	free(dg32);
	free(du32);
}
END_TEST

START_TEST(test_bf16_bias_embedding)
{
	uint64_t st = 51;
	int rows = 301, C = 130, V = 37, H = 300, n = 200;
	size_t ny = (size_t)rows * C;
	float *y32, *b32, *t32, *do32, *db = frand((size_t)C, -1, 1, &st);
	uint16_t *y = bf_rand(ny, -2, 2, &st, &y32);
	uint16_t *b = bf_rand((size_t)C, -2, 2, &st, &b32);
	uint16_t *t = bf_rand((size_t)V * H, -2, 2, &st, &t32);
	uint16_t *dout = bf_rand((size_t)n * H, -1, 1, &st, &do32);
	uint16_t *out = calloc((size_t)n * H, 2);
	float *db2 = fcopy(db, (size_t)C), *out32 = fnew((size_t)n * H);
	float *dt = frand((size_t)V * H, -1, 1, &st), *dt2, *dt0;
	int32_t *tok = malloc((size_t)n * sizeof(*tok));
	double *ref = dnew((size_t)V * H);

	ck_assert_ptr_nonnull(tok);
	ops->bias_fwd(TK_BF16, y, b, rows, C);
	ops->bias_fwd(TK_F32, y32, b32, rows, C);
	bf_eq_rne(y, y32, ny, "bias_fwd");
	ops->bias_bwd(TK_BF16, db, y, rows, C);
	{
		float *yw = bf_wide(y, ny);

		ops->bias_bwd(TK_F32, db2, yw, rows, C);
		free(yw);
	}
	f32_bits_eq(db, db2, (size_t)C, "bias_bwd");

	for (int i = 0; i < n; i++) /* repeats, and skipped tokens */
		tok[i] = i % 9 == 4 ? -1 : (int32_t)((i * 7 + i / 3) % (V - 2));
	ops->embedding_fwd(TK_BF16, out, t, tok, n, H);
	ops->embedding_fwd(TK_F32, out32, t32, tok, n, H);
	bf_eq_rne(out, out32, (size_t)n * H, "embedding_fwd");

	dt0 = fcopy(dt, (size_t)V * H);
	dt2 = fcopy(dt, (size_t)V * H);
	ops->embedding_bwd(TK_BF16, dt, dout, tok, n, H, 0, V);
	ops->embedding_bwd(TK_F32, dt2, do32, tok, n, H, 0, V);
	f32_bits_eq(dt, dt2, (size_t)V * H, "embedding_bwd");
	/* a negative row skips its token */
	for (size_t i = 0; i < (size_t)V * H; i++)
		ref[i] = dt0[i];
	for (int i = 0; i < n; i++)
		if (tok[i] >= 0)
			for (int c = 0; c < H; c++)
				ref[(size_t)tok[i] * H + c] +=
				    do32[(size_t)i * H + c];
	ck_assert_double_lt(tu_rel_err_d(dt2, ref, (size_t)V * H), 1e-6);

	free(y);
	free(b);
	free(t);
	free(dout);
	free(out);
	free(y32);
	free(b32);
	free(t32);
	free(do32);
	free(db);
	free(db2);
	free(out32);
	free(dt);
	free(dt2);
	free(dt0);
	free(tok);
	free(ref);
}
END_TEST

START_TEST(test_bf16_rmsnorm_rope)
{
	uint64_t st = 52;
	int n = 70, H = 520, heads = 4, hd = 130, half = hd / 2, max_pos = 64;
	size_t nx = (size_t)n * H;
	float *x32, *w32, *do32, *rstd = fnew((size_t)n),
				 *rstd2 = fnew((size_t)n);
	uint16_t *x = bf_rand(nx, -2, 2, &st, &x32);
	uint16_t *w = bf_rand((size_t)H, 0.5f, 1.5f, &st, &w32);
	uint16_t *dout = bf_rand(nx, -1, 1, &st, &do32);
	uint16_t *out = calloc(nx, 2), *dx = calloc(nx, 2);
	float *out32 = fnew(nx), *dx32 = fnew(nx);
	float *dw = frand((size_t)H, -1, 1, &st), *dw2 = fcopy(dw, (size_t)H);
	float *ctab = fnew((size_t)max_pos * half);
	float *stab = fnew((size_t)max_pos * half);
	int32_t *pos = malloc((size_t)n * sizeof(*pos));

	ck_assert_ptr_nonnull(pos);
	ops->rmsnorm_fwd(TK_BF16, out, rstd, x, w, n, H, 1e-5f);
	ops->rmsnorm_fwd(TK_F32, out32, rstd2, x32, w32, n, H, 1e-5f);
	bf_eq_rne(out, out32, nx, "rmsnorm_fwd");
	f32_bits_eq(rstd, rstd2, (size_t)n, "rmsnorm rstd");
	ops->rmsnorm_bwd(TK_BF16, dx, dw, dout, x, w, rstd, n, H);
	ops->rmsnorm_bwd(TK_F32, dx32, dw2, do32, x32, w32, rstd2, n, H);
	bf_eq_rne(dx, dx32, nx, "rmsnorm_bwd dx");
	f32_bits_eq(dw, dw2, (size_t)H, "rmsnorm_bwd dw");

	/* rope on [n, heads * hd] (= [n, H]) */
	for (int p = 0; p < max_pos; p++)
		for (int i = 0; i < half; i++) {
			double inv = pow(10000.0, -2.0 * i / hd);
			ctab[p * half + i] = (float)cos(p * inv);
			stab[p * half + i] = (float)sin(p * inv);
		}
	for (int t = 0; t < n; t++)
		pos[t] = (t % 12) < 5 ? t % 12 : t % 12 - 5;
	ops->rope_fwd(TK_BF16, x, ctab, stab, pos, n, heads, hd);
	ops->rope_fwd(TK_F32, x32, ctab, stab, pos, n, heads, hd);
	bf_eq_rne(x, x32, nx, "rope_fwd");
	free(x32);
	x32 = bf_wide(x, nx);
	ops->rope_bwd(TK_BF16, x, ctab, stab, pos, n, heads, hd);
	ops->rope_bwd(TK_F32, x32, ctab, stab, pos, n, heads, hd);
	bf_eq_rne(x, x32, nx, "rope_bwd");

	free(x);
	free(w);
	free(dout);
	free(out);
	free(dx);
	free(x32);
	free(w32);
	free(do32);
	free(rstd);
	free(rstd2);
	free(out32);
	free(dx32);
	free(dw);
	free(dw2);
	free(ctab);
	free(stab);
	free(pos);
}
END_TEST

/* bf16 attention: each block widens its slices and runs the fp32 block
 * code on them with leading dimension hd (instead of heads * hd), so the
 * result is the fp32 op's on the widened inputs, rounded, unless the BLAS
 * sums differently for another leading dimension: a 1-ulp tolerance. */
static int bf_ulps(uint16_t a, uint16_t b)
{
	int ia = a & 0x8000 ? -(a & 0x7FFF) : a;
	int ib = b & 0x8000 ? -(b & 0x7FFF) : b;

	return ia > ib ? ia - ib : ib - ia;
}

static void bf_near_rne(const uint16_t *got, const float *ref, size_t n,
			int ulps, const char *what)
{
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(bf_ulps(got[i], bf_rne(ref[i])) <= ulps,
			      "%s[%zu]: 0x%04x vs rne(%a) = 0x%04x", what, i,
			      got[i], (double)ref[i], bf_rne(ref[i]));
}

static void check_att_bf16(int B, int T, int nh, int nkv, int hd, int window,
			   const int *doclens, uint64_t st)
{
	struct att_case a;
	uint16_t *q, *k, *v, *dout, *out, *dq, *dk, *dv;
	float *lse;

	att_setup(&a, B, T, nh, nkv, hd, window, doclens, st);
	q = bf_from(a.q, a.nq);
	k = bf_from(a.k, a.nk);
	v = bf_from(a.v, a.nk);
	dout = bf_from(a.dout, a.nq);
	out = calloc(a.nq, 2);
	dq = calloc(a.nq, 2);
	dk = calloc(a.nk, 2);
	dv = calloc(a.nk, 2);
	lse = fnew(a.nl);
	free(a.q);
	free(a.k);
	free(a.v);
	free(a.dout);
	a.q = bf_wide(q, a.nq);
	a.k = bf_wide(k, a.nk);
	a.v = bf_wide(v, a.nk);
	a.dout = bf_wide(dout, a.nq);

	ops->attention_fwd(TK_BF16, out, lse, q, k, v, a.pos, B, T, nh, nkv, hd,
			   window, a.scale);
	ops->attention_fwd(TK_F32, a.out, a.lse, a.q, a.k, a.v, a.pos, B, T, nh,
			   nkv, hd, window, a.scale);
	bf_near_rne(out, a.out, a.nq, 1, "attention out");
	for (size_t i = 0; i < a.nl; i++)
		ck_assert_float_eq_tol(lse[i], a.lse[i],
				       4e-7f * fabsf(a.lse[i]) + 1e-7f);

	/* backward from the same (bf16) out and lse */
	free(a.out);
	a.out = bf_wide(out, a.nq);
	ops->attention_bwd(TK_BF16, dq, dk, dv, dout, out, lse, q, k, v, a.pos,
			   B, T, nh, nkv, hd, window, a.scale);
	ops->attention_bwd(TK_F32, a.dq, a.dk, a.dv, a.dout, a.out, lse, a.q,
			   a.k, a.v, a.pos, B, T, nh, nkv, hd, window, a.scale);
	bf_near_rne(dq, a.dq, a.nq, 1, "attention dq");
	bf_near_rne(dk, a.dk, a.nk, 1, "attention dk");
	bf_near_rne(dv, a.dv, a.nk, 1, "attention dv");
	free(q);
	free(k);
	free(v);
	free(dout);
	free(out);
	free(dq);
	free(dk);
	free(dv);
	free(lse);
	att_free(&a);
}

START_TEST(test_bf16_attention)
{
	static const int docs[4] = {70, 33, 101, 50};

	check_att_bf16(2, 9, 4, 2, 4, 0, NULL, 60);
	check_att_bf16(2, 150, 4, 2, 16, 40, docs, 61);
	check_att_bf16(1, 130, 2, 1, 64, 0, docs, 62);
}
END_TEST

/* ---- bf16 matmul -------------------------------------------------------- */

/* C = alpha op(A) op(B) + beta C0 in double, and the magnitude
 * |alpha| sum |a b| + |beta C0| (for the tolerance), on fp32 inputs. */
static void mm_ref(double *ref, double *mag, int ta, int tb, int M, int N,
		   int K, float alpha, const float *A, int lda, const float *B,
		   int ldb, float beta, const float *C0, int ldc)
{
	int i;

#pragma omp parallel for
	for (i = 0; i < M; i++)
		for (int j = 0; j < N; j++) {
			double s = 0, m = 0;
			for (int p = 0; p < K; p++) {
				double x = ta ? A[(size_t)p * lda + i]
					      : A[(size_t)i * lda + p];
				double y = tb ? B[(size_t)j * ldb + p]
					      : B[(size_t)p * ldb + j];
				s += x * y;
				m += fabs(x * y);
			}
			ref[(size_t)i * N + j] =
			    alpha * s + beta * (double)C0[(size_t)i * ldc + j];
			mag[(size_t)i * N + j] =
			    fabs(alpha) * m +
			    fabs(beta * (double)C0[(size_t)i * ldc + j]);
		}
}

static void check_mm(int ta, int tb, int M, int N, int K, int ab_dt,
		     uint64_t st)
{
	const int pad = 3;
	int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
	size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb;
	size_t nc = (size_t)M * ldc;
	float *A32, *B32, *C32, *Cf;
	uint16_t *A16, *B16, *C16, *Cb;
	float alpha = 0.75f, beta = -0.5f;
	double *ref = dnew((size_t)M * N), *mag = dnew((size_t)M * N);
	size_t base = ops->mem_current(), peak;
	const void *A, *B;

	A16 = bf_rand(na, -1, 1, &st, &A32);
	B16 = bf_rand(nb, -1, 1, &st, &B32);
	C16 = bf_rand(nc, -1, 1, &st, &C32);
	A = ab_dt == TK_BF16 ? (const void *)A16 : (const void *)A32;
	B = ab_dt == TK_BF16 ? (const void *)B16 : (const void *)B32;
	mm_ref(ref, mag, ta, tb, M, N, K, alpha, A32, lda, B32, ldb, beta, C32,
	       ldc);

	/* fp32 result (only with bf16 operands: f32 x f32 is test_matmul) */
	Cf = fcopy(C32, nc);
	if (ab_dt == TK_BF16) {
		ops->mem_reset_peak();
		ops->matmul(ta, tb, M, N, K, alpha, ab_dt, A, lda, B, ldb, beta,
			    TK_F32, Cf, ldc);
		peak = ops->mem_peak();
		ck_assert_uint_eq(ops->mem_current(), base);
		ck_assert_uint_gt(peak, base); /* the scratch is counted */
		ck_assert_uint_le(peak - base, TK_CPU_GEMM_SCRATCH_BYTES);
		for (int i = 0; i < M; i++)
			for (int j = 0; j < ldc; j++) {
				size_t o = (size_t)i * ldc + j;
				double r = j < N ? ref[(size_t)i * N + j] : 0;

				if (j >= N) {
					ck_assert(!memcmp(&Cf[o], &C32[o], 4));
					continue;
				}
				ck_assert_msg(fabs(Cf[o] - r) <=
						  1e-5 * mag[(size_t)i * N + j],
					      "f32 out ta %d tb %d (%d,%d): "
					      "%.9g vs %.9g",
					      ta, tb, i, j, (double)Cf[o], r);
			}
	}

	/* bf16 result */
	Cb = bf_copy(C16, nc);
	ops->mem_reset_peak();
	ops->matmul(ta, tb, M, N, K, alpha, ab_dt, A, lda, B, ldb, beta,
		    TK_BF16, Cb, ldc);
	peak = ops->mem_peak();
	ck_assert_uint_eq(ops->mem_current(), base);
	ck_assert_uint_le(peak - base, TK_CPU_GEMM_SCRATCH_BYTES);
	for (int i = 0; i < M; i++)
		for (int j = 0; j < ldc; j++) {
			size_t o = (size_t)i * ldc + j;
			double r = j < N ? ref[(size_t)i * N + j] : 0;
			uint16_t want = bf_rne((float)r);

			if (j >= N) {
				ck_assert_uint_eq(Cb[o], C16[o]);
				continue;
			}
			/* rne of the reference within 1 ulp, or (when the
			 * sum cancels) within the fp32 error bound plus
			 * half a bf16 ulp */
			ck_assert_msg(bf_ulps(Cb[o], want) <= 1 ||
					  fabs(bf_f32(Cb[o]) - r) <=
					      1e-5 * mag[(size_t)i * N + j] +
						  fabs(r) * 0x1p-8,
				      "bf16 out ta %d tb %d (%d,%d): %a vs %a",
				      ta, tb, i, j, (double)bf_f32(Cb[o]), r);
		}
	free(A16);
	free(B16);
	free(C16);
	free(A32);
	free(B32);
	free(C32);
	free(Cf);
	free(Cb);
	free(ref);
	free(mag);
}

START_TEST(test_matmul_bf16)
{
	uint64_t st = 70;

	for (int ta = 0; ta < 2; ta++)
		for (int tb = 0; tb < 2; tb++) {
			check_mm(ta, tb, 7, 5, 9, TK_BF16, st++);
			/* two K tiles */
			check_mm(ta, tb, 300, 700, 900, TK_BF16, st++);
			/* fp32 operands, bf16 result */
			check_mm(ta, tb, 33, 70, 50, TK_F32, st++);
		}
	/* several tiles along M, N and K */
	check_mm(0, 1, 800, 1000, 1700, TK_BF16, st++);
	check_mm(1, 0, 1000, 780, 800, TK_BF16, st++);
}
END_TEST

START_TEST(test_matmul_bf16_k0)
{
	uint16_t C[6], A[1] = {0}, B[1] = {0};
	float Cf[6] = {1, 2, 3, 4, 5, 6};

	for (int i = 0; i < 6; i++)
		C[i] = bf_rne((float)(i + 1));
	ops->matmul(0, 0, 2, 3, 0, 1.0f, TK_BF16, A, 1, B, 3, 2.0f, TK_BF16, C,
		    3);
	for (int i = 0; i < 6; i++)
		ck_assert_float_eq(bf_f32(C[i]), 2.0f * (float)(i + 1));
	ops->matmul(0, 0, 2, 3, 0, 1.0f, TK_BF16, A, 1, B, 3, 0.0f, TK_F32, Cf,
		    3);
	for (int i = 0; i < 6; i++)
		ck_assert_float_eq(Cf[i], 0.0f);
}
END_TEST

/* ---- fused ops ---------------------------------------------------------- */

/* Each fused op against the unfused sequence it names: the same bits, in
 * both dtypes (bf16 inputs rounded from the same random values). */

static const int fdts[2] = {TK_F32, TK_BF16};

/* n random values of [lo, hi) in dt (malloc'd). */
static void *t_rand(int dt, size_t n, float lo, float hi, uint64_t *st)
{
	float *f = frand(n, lo, hi, st);
	uint16_t *h;

	if (dt == TK_F32)
		return f;
	h = bf_from(f, n);
	free(f);
	return h;
}

static void *t_copy(int dt, const void *p, size_t n)
{
	size_t b = n * tk_dtype_size(dt);
	void *q = malloc(b ? b : 1);

	ck_assert_ptr_nonnull(q);
	memcpy(q, p, b);
	return q;
}

static void same_bits(const char *what, int dt, const void *a, const void *b,
		      size_t bytes)
{
	const unsigned char *x = a, *y = b;

	for (size_t i = 0; i < bytes; i++)
		ck_assert_msg(x[i] == y[i], "%s (%s): byte %zu differs", what,
			      dt == TK_F32 ? "f32" : "bf16", i);
}

/* rope tables of max_pos positions, as test_rope; packed documents of
 * lengths 5 and 7 in pos [n] */
static void rope_setup(float **ctab, float **stab, int32_t **pos, int n, int hd,
		       int max_pos)
{
	int half = hd / 2;

	*ctab = fnew((size_t)max_pos * (half ? half : 1));
	*stab = fnew((size_t)max_pos * (half ? half : 1));
	*pos = malloc((size_t)n * sizeof(**pos));
	ck_assert_ptr_nonnull(*pos);
	for (int p = 0; p < max_pos; p++)
		for (int i = 0; i < half; i++) {
			double inv = pow(10000.0, -2.0 * i / hd);
			(*ctab)[p * half + i] = (float)cos(p * inv);
			(*stab)[p * half + i] = (float)sin(p * inv);
		}
	for (int t = 0; t < n; t++)
		(*pos)[t] = (t % 12) < 5 ? t % 12 : t % 12 - 5;
}

static void check_fused_norm(int dt, int n, int H, uint64_t st)
{
	size_t nx = (size_t)n * H, es = tk_dtype_size(dt), bx = nx * es;
	void *x = t_rand(dt, nx, -2, 2, &st), *r = t_rand(dt, nx, -2, 2, &st);
	void *w = t_rand(dt, (size_t)H, 0.5f, 1.5f, &st);
	void *dout = t_rand(dt, nx, -1, 1, &st);
	void *dres = t_rand(dt, nx, -1, 1, &st), *x2 = t_copy(dt, x, nx);
	void *dres2 = t_copy(dt, dres, nx);
	void *out = calloc(nx ? nx : 1, es), *out2 = calloc(nx ? nx : 1, es);
	void *tmp = calloc(nx ? nx : 1, es);
	float *rstd = fnew((size_t)n), *rstd2 = fnew((size_t)n);
	float *dw = frand((size_t)H, -1, 1, &st), *dw2 = fcopy(dw, (size_t)H);
	size_t base = ops->mem_current();

	/* add then rmsnorm_fwd on the stored sum */
	ops->add(dt, x2, r, nx);
	ops->rmsnorm_fwd(dt, out2, rstd2, x2, w, n, H, 1e-6f);
	ops->mem_reset_peak();
	ops->add_rmsnorm_fwd(dt, x, r, out, rstd, w, n, H, 1e-6f);
	ck_assert_uint_eq(ops->mem_peak(), base); /* nothing allocated */
	same_bits("add_rmsnorm_fwd x", dt, x, x2, bx);
	same_bits("add_rmsnorm_fwd out", dt, out, out2, bx);
	same_bits("add_rmsnorm_fwd rstd", dt, rstd, rstd2,
		  (size_t)n * sizeof(float));

	/* rmsnorm_bwd into a temporary, then add; dw accumulates */
	ops->rmsnorm_bwd(dt, tmp, dw2, dout, x, w, rstd, n, H);
	ops->add(dt, dres2, tmp, nx);
	ops->mem_reset_peak();
	ops->rmsnorm_bwd_add(dt, dres, dw, dout, x, w, rstd, n, H);
	ck_assert_uint_eq(ops->mem_peak(), base);
	same_bits("rmsnorm_bwd_add dres", dt, dres, dres2, bx);
	same_bits("rmsnorm_bwd_add dw", dt, dw, dw2, (size_t)H * sizeof(float));

	free(x);
	free(r);
	free(w);
	free(dout);
	free(dres);
	free(x2);
	free(dres2);
	free(out);
	free(out2);
	free(tmp);
	free(rstd);
	free(rstd2);
	free(dw);
	free(dw2);
}

START_TEST(test_fused_norm)
{
	/* H not a multiple of 8, single rows and columns, the parallel
	 * paths */
	static const int shapes[][2] = {{1, 1},	   {3, 7},     {5, 64},
					{70, 520}, {33, 1001}, {9, 4100}};
	uint64_t st = 80;

	for (int t = 0; t < 2; t++)
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
			check_fused_norm(fdts[t], shapes[s][0], shapes[s][1],
					 st++);
}
END_TEST

static void check_qknorm_rope(int dt, int n, int heads, int hd, uint64_t st)
{
	size_t nx = (size_t)n * heads * hd, es = tk_dtype_size(dt);
	size_t bx = nx * es, nr = (size_t)n * heads;
	float *ctab, *stab, eps = 1e-6f;
	int32_t *pos;
	void *x = t_rand(dt, nx, -2, 2, &st),
	     *w = t_rand(dt, hd, 0.5f, 1.5f, &st);
	void *dout = t_rand(dt, nx, -1, 1, &st), *dout0 = t_copy(dt, dout, nx);
	void *out = calloc(nx, es), *ref = calloc(nx, es);
	void *dx = calloc(nx, es), *dref = calloc(nx, es), *g;
	float *rstd = fnew(nr), *rstd2 = fnew(nr);
	float *dw = frand((size_t)hd, -1, 1, &st), *dw2 = fcopy(dw, (size_t)hd);
	size_t base = ops->mem_current();

	rope_setup(&ctab, &stab, &pos, n, hd, 64);

	/* with w: rmsnorm_fwd over each head's hd values, then rope_fwd */
	ops->rmsnorm_fwd(dt, ref, rstd2, x, w, (int)nr, hd, eps);
	ops->rope_fwd(dt, ref, ctab, stab, pos, n, heads, hd);
	ops->mem_reset_peak();
	ops->qknorm_rope_fwd(dt, out, rstd, x, w, ctab, stab, pos, n, heads, hd,
			     hd, eps);
	ck_assert_uint_eq(ops->mem_peak(), base);
	same_bits("qknorm_rope_fwd out", dt, out, ref, bx);
	same_bits("qknorm_rope_fwd rstd", dt, rstd, rstd2, nr * sizeof(float));

	/* its backward: rope_bwd of dout in place, then rmsnorm_bwd */
	g = t_copy(dt, dout, nx);
	ops->rope_bwd(dt, g, ctab, stab, pos, n, heads, hd);
	ops->rmsnorm_bwd(dt, dref, dw2, g, x, w, rstd, (int)nr, hd);
	ops->mem_reset_peak();
	ops->qknorm_rope_bwd(dt, dx, dw, dout, x, w, rstd, ctab, stab, pos, n,
			     heads, hd, hd);
	ck_assert_uint_eq(ops->mem_peak(), base);
	same_bits("qknorm_rope_bwd dx", dt, dx, dref, bx);
	same_bits("qknorm_rope_bwd dw", dt, dw, dw2,
		  (size_t)hd * sizeof(float));
	same_bits("qknorm_rope_bwd dout kept", dt, dout, dout0, bx);
	free(g);

	/* w NULL: rope alone, out of place and in place; rstd untouched */
	memcpy(ref, x, bx);
	ops->rope_fwd(dt, ref, ctab, stab, pos, n, heads, hd);
	memcpy(rstd2, rstd, nr * sizeof(float));
	ops->qknorm_rope_fwd(dt, out, rstd, x, NULL, ctab, stab, pos, n, heads,
			     hd, hd, eps);
	same_bits("qknorm_rope_fwd w NULL", dt, out, ref, bx);
	same_bits("qknorm_rope_fwd rstd untouched", dt, rstd, rstd2,
		  nr * sizeof(float));
	memcpy(out, x, bx);
	ops->qknorm_rope_fwd(dt, out, NULL, out, NULL, ctab, stab, pos, n,
			     heads, hd, hd, eps);
	same_bits("qknorm_rope_fwd in place", dt, out, ref, bx);

	memcpy(dref, dout, bx);
	ops->rope_bwd(dt, dref, ctab, stab, pos, n, heads, hd);
	memcpy(dw2, dw, (size_t)hd * sizeof(float));
	ops->qknorm_rope_bwd(dt, dx, NULL, dout, NULL, NULL, NULL, ctab, stab,
			     pos, n, heads, hd, hd);
	same_bits("qknorm_rope_bwd w NULL", dt, dx, dref, bx);
	same_bits("qknorm_rope_bwd w NULL dout kept", dt, dout, dout0, bx);
	ops->qknorm_rope_bwd(dt, dout, NULL, dout, NULL, NULL, NULL, ctab, stab,
			     pos, n, heads, hd, hd);
	same_bits("qknorm_rope_bwd in place", dt, dout, dref, bx);
	same_bits("qknorm_rope_bwd dw untouched", dt, dw, dw2,
		  (size_t)hd * sizeof(float));

	free(ctab);
	free(stab);
	free(pos);
	free(x);
	free(w);
	free(dout);
	free(dout0);
	free(out);
	free(ref);
	free(dx);
	free(dref);
	free(rstd);
	free(rstd2);
	free(dw);
	free(dw2);
}

/* Partial rotary (GPT-NeoX's apply_rotary_pos_emb with rotary_ndims = rd):
 * dst = src with each head's first rd values rotated by dir in the
 * rotate_half layout over those rd values (pairs (i, i + rd/2), tables
 * [max_pos, rd / 2]), each value rounded to dt; values rd..hd-1 copied.
 * Written out here, the fp32 expressions of rope.c. */
static void rot_ref(int dt, void *dst, const void *src, const float *ctab,
		    const float *stab, const int32_t *pos, int n, int heads,
		    int hd, int rd, float dir)
{
	int half = rd / 2;

	for (size_t row = 0; row < (size_t)n * heads; row++) {
		size_t o = row * hd, t = row / heads;

		for (int i = 0; i < half; i++) {
			float c = ctab[(size_t)pos[t] * half + i];
			float si = dir * stab[(size_t)pos[t] * half + i];
			float a = tk_load_f32(src, dt, o + i);
			float b = tk_load_f32(src, dt, o + half + i);

			tk_store_f32_rne(dst, dt, o + i, a * c - b * si);
			tk_store_f32_rne(dst, dt, o + half + i, b * c + a * si);
		}
		for (int j = rd; j < hd; j++)
			tk_store_f32_rne(dst, dt, o + j,
					 tk_load_f32(src, dt, o + j));
	}
}

/* got against ref row by row: the rotated part [0, rd) (parts & 1) and
 * the pass-through part [rd, hd) (parts & 2) of each head separately. */
static void same_parts(const char *what, int dt, const void *got,
		       const void *ref, size_t rows, int hd, int rd, int parts)
{
	size_t es = tk_dtype_size(dt);
	char msg[128];

	for (size_t r = 0; r < rows; r++) {
		const char *g = (const char *)got + r * hd * es;
		const char *f = (const char *)ref + r * hd * es;

		snprintf(msg, sizeof(msg), "%s rotated, row %zu", what, r);
		if (parts & 1)
			same_bits(msg, dt, g, f, (size_t)rd * es);
		snprintf(msg, sizeof(msg), "%s pass-through, row %zu", what, r);
		if (parts & 2)
			same_bits(msg, dt, g + rd * es, f + rd * es,
				  (size_t)(hd - rd) * es);
	}
}

/* The rotated values of y (rd of each head) against the rotation in double
 * of the stored y: within the fp32 sequence's rounding (bf16: one rounding
 * of the result). */
static void near_rot(int dt, const void *got, const void *y, const float *ctab,
		     const float *stab, const int32_t *pos, int n, int heads,
		     int hd, int rd)
{
	int half = rd / 2;
	double tol = dt == TK_F32 ? 1e-6 : 1.0 / 128;

	for (size_t row = 0; row < (size_t)n * heads; row++) {
		size_t o = row * hd, t = row / heads;

		for (int j = 0; j < rd; j++) {
			int i = j % half;
			double c = ctab[(size_t)pos[t] * half + i];
			double s = stab[(size_t)pos[t] * half + i];
			double a = tk_load_f32(y, dt, o + i);
			double b = tk_load_f32(y, dt, o + half + i);
			double want = j < half ? a * c - b * s : b * c + a * s;
			double e = fabs(tk_load_f32(got, dt, o + j) - want);

			ck_assert_msg(e <= tol * (fabs(a) + fabs(b)) + 1e-30,
				      "qknorm_rope rd %d: row %zu dim %d off "
				      "by %g",
				      rd, row, j, e);
		}
	}
}

/* qknorm_rope with rd < hd (and rd == hd, which checks rot_ref against
 * rope.c): fwd and bwd, with and without w, out of place and in place,
 * against the explicit partial rotation (rot_ref) after / before the
 * unfused rmsnorm ops; rd == 0 reads no table nor pos (NULL here). */
static void check_qknorm_rope_rd(int dt, int n, int heads, int hd, int rd,
				 uint64_t st)
{
	size_t nx = (size_t)n * heads * hd, es = tk_dtype_size(dt);
	size_t bx = nx * es, nr = (size_t)n * heads, bw = hd * sizeof(float);
	float *ctab, *stab, *ct, *sn, eps = 1e-6f;
	int32_t *pos, *ps;
	void *x = t_rand(dt, nx, -2, 2, &st),
	     *w = t_rand(dt, hd, 0.5f, 1.5f, &st);
	void *dout = t_rand(dt, nx, -1, 1, &st), *dout0 = t_copy(dt, dout, nx);
	void *out = calloc(nx, es), *ref = calloc(nx, es), *y = calloc(nx, es);
	void *dx = calloc(nx, es), *dref = calloc(nx, es), *g = calloc(nx, es);
	float *rstd = fnew(nr), *rstd2 = fnew(nr);
	float *dw = frand((size_t)hd, -1, 1, &st), *dw2 = fcopy(dw, (size_t)hd);

	rope_setup(&ctab, &stab, &pos, n, rd, 64);
	ct = rd ? ctab : NULL;
	sn = rd ? stab : NULL;
	ps = rd ? pos : NULL;
	if (rd == hd) { /* the reference is rope.c's rotation */
		memcpy(ref, x, bx);
		ops->rope_fwd(dt, ref, ctab, stab, pos, n, heads, hd);
		rot_ref(dt, out, x, ctab, stab, pos, n, heads, hd, rd, 1.0f);
		same_bits("rot_ref == rope_fwd", dt, out, ref, bx);
		memcpy(ref, dout, bx);
		ops->rope_bwd(dt, ref, ctab, stab, pos, n, heads, hd);
		rot_ref(dt, out, dout, ctab, stab, pos, n, heads, hd, rd,
			-1.0f);
		same_bits("rot_ref == rope_bwd", dt, out, ref, bx);
	}

	/* with w: rmsnorm_fwd over all hd values, then the partial rotation */
	ops->rmsnorm_fwd(dt, y, rstd2, x, w, (int)nr, hd, eps);
	rot_ref(dt, ref, y, ctab, stab, pos, n, heads, hd, rd, 1.0f);
	ops->qknorm_rope_fwd(dt, out, rstd, x, w, ct, sn, ps, n, heads, hd, rd,
			     eps);
	same_parts("qknorm_rope_fwd", dt, out, ref, nr, hd, rd, 3);
	/* past rd: rmsnorm_fwd's bits */
	same_parts("qknorm_rope_fwd vs norm", dt, out, y, nr, hd, rd, 2);
	near_rot(dt, out, y, ctab, stab, pos, n, heads, hd, rd);
	same_bits("qknorm_rope_fwd rstd", dt, rstd, rstd2, nr * sizeof(float));

	/* its backward: the partial inverse rotation, then rmsnorm_bwd */
	rot_ref(dt, g, dout, ctab, stab, pos, n, heads, hd, rd, -1.0f);
	ops->rmsnorm_bwd(dt, dref, dw2, g, x, w, rstd, (int)nr, hd);
	ops->qknorm_rope_bwd(dt, dx, dw, dout, x, w, rstd, ct, sn, ps, n, heads,
			     hd, rd);
	same_parts("qknorm_rope_bwd dx", dt, dx, dref, nr, hd, rd, 3);
	same_bits("qknorm_rope_bwd dw", dt, dw, dw2, bw);
	same_bits("qknorm_rope_bwd dout kept", dt, dout, dout0, bx);

	/* w NULL: the rotation alone, out of place and in place; the
	 * pass-through values are x's bits; rstd untouched */
	rot_ref(dt, ref, x, ctab, stab, pos, n, heads, hd, rd, 1.0f);
	memcpy(rstd2, rstd, nr * sizeof(float));
	memset(out, 0xff, bx);
	ops->qknorm_rope_fwd(dt, out, rstd, x, NULL, ct, sn, ps, n, heads, hd,
			     rd, eps);
	same_parts("qknorm_rope_fwd w NULL", dt, out, ref, nr, hd, rd, 3);
	same_parts("qknorm_rope_fwd w NULL vs x", dt, out, x, nr, hd, rd, 2);
	near_rot(dt, out, x, ctab, stab, pos, n, heads, hd, rd);
	same_bits("qknorm_rope_fwd rstd untouched", dt, rstd, rstd2,
		  nr * sizeof(float));
	memcpy(out, x, bx);
	ops->qknorm_rope_fwd(dt, out, NULL, out, NULL, ct, sn, ps, n, heads, hd,
			     rd, eps);
	same_parts("qknorm_rope_fwd in place", dt, out, ref, nr, hd, rd, 3);

	rot_ref(dt, dref, dout, ctab, stab, pos, n, heads, hd, rd, -1.0f);
	memcpy(dw2, dw, bw);
	memset(dx, 0xff, bx);
	ops->qknorm_rope_bwd(dt, dx, NULL, dout, NULL, NULL, NULL, ct, sn, ps,
			     n, heads, hd, rd);
	same_parts("qknorm_rope_bwd w NULL", dt, dx, dref, nr, hd, rd, 3);
	same_bits("qknorm_rope_bwd w NULL dout kept", dt, dout, dout0, bx);
	ops->qknorm_rope_bwd(dt, dout, NULL, dout, NULL, NULL, NULL, ct, sn, ps,
			     n, heads, hd, rd);
	same_parts("qknorm_rope_bwd in place", dt, dout, dref, nr, hd, rd, 3);
	same_bits("qknorm_rope_bwd dw untouched", dt, dw, dw2, bw);
	if (rd == 0) { /* no rotation: a copy, and in place nothing */
		same_bits("qknorm_rope_fwd rd 0 copy", dt, ref, x, bx);
		same_bits("qknorm_rope_bwd rd 0 copy", dt, dref, dout0, bx);
	}

	free(ctab);
	free(stab);
	free(pos);
	free(x);
	free(w);
	free(dout);
	free(dout0);
	free(out);
	free(ref);
	free(y);
	free(dx);
	free(dref);
	free(g);
	free(rstd);
	free(rstd2);
	free(dw);
	free(dw2);
}

START_TEST(test_fused_qknorm_rope)
{
	/* heads 1..8, hd 16/64/128 (and an odd one: its last value is not
	 * rotated), the parallel paths */
	static const int shapes[][3] = {
	    {1, 1, 16},	 {13, 2, 16},  {29, 3, 64}, {17, 5, 128},
	    {70, 8, 64}, {50, 8, 128}, {12, 4, 7},  {40, 1, 128},
	};
	uint64_t st = 90;

	for (int t = 0; t < 2; t++)
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
			check_qknorm_rope(fdts[t], shapes[s][0], shapes[s][1],
					  shapes[s][2], st++);
}
END_TEST

START_TEST(test_fused_qknorm_rope_partial)
{
	/* GPT-NeoX's partial rotary: rd = hd, hd/2, hd/4, 0 (Pythia's
	 * rotary_pct 0.25 is hd/4), hd 80 (rd 20: pairs not a power of two),
	 * several dw column blocks, the parallel paths */
	static const int shapes[][3] = {
	    {1, 1, 16},	  {13, 2, 16}, {29, 3, 64},
	    {17, 5, 128}, {9, 4, 80},  {70, 8, 64},
	};
	uint64_t st = 190;

	for (int t = 0; t < 2; t++)
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]);
		     s++) {
			int hd = shapes[s][2];
			const int rds[] = {hd, hd / 2, hd / 4, 0};

			for (int r = 0; r < 4; r++)
				check_qknorm_rope_rd(fdts[t], shapes[s][0],
						     shapes[s][1], hd, rds[r],
						     st++);
		}
}
END_TEST

/* linear_bias against matmul(0, 1, ...) then bias_fwd: f32 within 1e-6
 * (the same GEMM), bf16 C exactly the fp32 product plus bias rounded once.
 * The unfused bf16 result rounds the product first: within one ulp of it,
 * or, where the sum cancels (a result well below the product, so of a
 * finer ulp), within that first rounding's error. Padding columns stay as
 * they were; the scratch is matmul's. */
/* sum over p of |A[i, p] B[j, p]| (fp32 A, B [N, K]): the scale of a
 * dot product's rounding error. */
static double dot_mag(const float *A, int lda, const float *B, int ldb, int i,
		      int j, int K)
{
	double m = 0;

	for (int p = 0; p < K; p++)
		m += fabs((double)A[(size_t)i * lda + p] *
			  B[(size_t)j * ldb + p]);
	return m;
}

static void check_linear_bias(int ab, int cd, int M, int N, int K, uint64_t st)
{
	const int pad = 3;
	int lda = K + pad, ldb = K + pad, ldc = N + pad;
	size_t na = (size_t)M * lda, nb = (size_t)N * ldb, nc = (size_t)M * ldc;
	size_t ec = tk_dtype_size(cd);
	void *A = t_rand(ab, na, -1, 1, &st), *B = t_rand(ab, nb, -1, 1, &st);
	void *bias = t_rand(ab, (size_t)N, -1, 1, &st);
	void *C0 = t_rand(cd, nc, -1, 1, &st), *C = t_copy(cd, C0, nc);
	void *Cu = t_copy(cd, C0, nc);
	float *Cf = frand(nc, -1, 1, &st), *bw = fnew((size_t)N);
	size_t base = ops->mem_current(), peak_mm, peak_lb;

	ops->to_f32(bw, bias, ab, (size_t)N);
	/* unfused */
	ops->mem_reset_peak();
	ops->matmul(0, 1, M, N, K, 1.0f, ab, A, lda, B, ldb, 0.0f, cd, Cu, ldc);
	peak_mm = ops->mem_peak();
	/* bias_fwd row by row (ldc > N), the bias as it is (ab == cd) or
	 * widened (bf16 operands, f32 C) */
	if (ab == cd || cd == TK_F32)
		for (int i = 0; i < M; i++)
			ops->bias_fwd(cd, (char *)Cu + (size_t)i * ldc * ec,
				      ab == cd ? bias : (void *)bw, 1, N);
	/* fused */
	ops->mem_reset_peak();
	ops->linear_bias(M, N, K, ab, A, lda, B, ldb, bias, cd, C, ldc);
	peak_lb = ops->mem_peak();
	ck_assert_uint_eq(ops->mem_current(), base);
	/* the scratch matmul takes, no more (none in fp32) */
	ck_assert_uint_eq(peak_lb, peak_mm);
	ck_assert_uint_le(peak_lb - base, TK_CPU_GEMM_SCRATCH_BYTES);
	if (ab == TK_F32 && cd == TK_F32)
		ck_assert_uint_eq(peak_lb, base);
	/* the fp32 product, the bias added, rounded once */
	ops->matmul(0, 1, M, N, K, 1.0f, ab, A, lda, B, ldb, 0.0f, TK_F32, Cf,
		    ldc);

	for (int i = 0; i < M; i++)
		for (int j = 0; j < ldc; j++) {
			size_t o = (size_t)i * ldc + j;
			float got, un, acc = Cf[o], want = acc + bw[j % N];

			if (j >= N) { /* padding untouched */
				ck_assert(!memcmp((char *)C + o * ec,
						  (char *)C0 + o * ec, ec));
				continue;
			}
			if (cd == TK_F32) {
				got = ((float *)C)[o];
				un = ((float *)Cu)[o];
				ck_assert_msg(fabsf(got - un) <=
						  1e-6f * (fabsf(un) + 1e-3f),
					      "linear_bias f32 (%d,%d): %a vs "
					      "%a",
					      i, j, (double)got, (double)un);
				continue;
			}
			got = bf_f32(((uint16_t *)C)[o]);
			/* bf16 operands: matmul into f32 runs the same tiles,
			 * so exactly rne(acc + bias); fp32 operands: its one
			 * sgemm may sum in another order than the tiles */
			if (ab == TK_BF16)
				ck_assert_msg(
				    ((uint16_t *)C)[o] == bf_rne(want),
				    "linear_bias (%d,%d): 0x%04x vs "
				    "rne(%a)",
				    i, j, ((uint16_t *)C)[o], (double)want);
			else
				ck_assert_msg(
				    bf_ulps(((uint16_t *)C)[o], bf_rne(want)) <=
					    1 ||
					fabs((double)got - want) <=
					    1e-5 * dot_mag(A, lda, B, ldb, i, j,
							   K) +
						fabs(want) * 0x1p-8,
				    "linear_bias f32->bf16 (%d,%d): %a vs %a",
				    i, j, (double)got, (double)want);
			if (ab != cd)
				continue;
			un = bf_f32(((uint16_t *)Cu)[o]);
			if (bf_ulps(((uint16_t *)C)[o], ((uint16_t *)Cu)[o]) >
			    1)
				ck_assert_msg(
				    fabs((double)got - un) <=
					0x1p-8 * (fabs(acc) + fabs(want)) +
					    1e-30,
				    "linear_bias vs unfused (%d,%d): "
				    "%a vs %a",
				    i, j, (double)got, (double)un);
		}
	free(A);
	free(B);
	free(bias);
	free(C0);
	free(C);
	free(Cu);
	free(Cf);
	free(bw);
}

START_TEST(test_linear_bias)
{
	static const int shapes[][3] = {
	    {1, 1, 1},	    {7, 5, 9},	     {33, 70, 50},
	    {17, 1001, 65}, {300, 700, 900}, {64, 130, 1600},
	};
	static const int dt[][2] = {{TK_F32, TK_F32},
				    {TK_BF16, TK_BF16},
				    {TK_BF16, TK_F32},
				    {TK_F32, TK_BF16}};
	uint64_t st = 100;

	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (int d = 0; d < 4; d++)
			check_linear_bias(dt[d][0], dt[d][1], shapes[s][0],
					  shapes[s][1], shapes[s][2], st++);
}
END_TEST

/* K = 0: C = bias, rounded to C's dtype. */
START_TEST(test_linear_bias_k0)
{
	float bias[3] = {0.5f, -1.25f, 3.0f + 0x1p-12f}, C[6];
	uint16_t Cb[6], bb[3];

	ops->linear_bias(2, 3, 0, TK_F32, NULL, 1, NULL, 1, bias, TK_F32, C, 3);
	for (int i = 0; i < 6; i++)
		ck_assert_float_eq(C[i], bias[i % 3]);
	ops->linear_bias(2, 3, 0, TK_F32, NULL, 1, NULL, 1, bias, TK_BF16, Cb,
			 3);
	for (int i = 0; i < 6; i++)
		ck_assert_uint_eq(Cb[i], bf_rne(bias[i % 3]));
	for (int i = 0; i < 3; i++)
		bb[i] = bf_rne(bias[i]);
	ops->linear_bias(2, 3, 0, TK_BF16, NULL, 1, NULL, 1, bb, TK_F32, C, 3);
	for (int i = 0; i < 6; i++)
		ck_assert_float_eq(C[i], bf_f32(bb[i % 3]));
}
END_TEST

/* ---- the chunked loss against the former fused op ----------------------- */

/* The former cross_entropy (kernels/cpu/cross_entropy.c before the chunked
 * loss), loss and n_correct only, verbatim arithmetic. */
static double old_ce_row(const float *x, int32_t target, int V, int *correct)
{
	int amax = 0;
	float m = x[0], xt;
	double sum = 0, lse;

	*correct = 0;
	if (target < 0 || target >= V)
		return 0.0;
	for (int j = 1; j < V; j++)
		if (x[j] > m) {
			m = x[j];
			amax = j;
		}
	xt = x[target];
	for (int j = 0; j < V; j++)
		sum += expf(x[j] - m);
	lse = (double)m + log(sum);
	*correct = amax == target;
	return lse - (double)xt;
}

static void old_cross_entropy(const float *logits, const int32_t *targets,
			      int n, int V, double *loss_sum, int *n_correct,
			      double *row_loss)
{
	double total = 0;
	int nc = 0;

	for (int i = 0; i < n; i++) {
		int c;
		double l =
		    old_ce_row(logits + (size_t)i * V, targets[i], V, &c);

		total += l;
		nc += c;
		row_loss[i] = l;
	}
	*loss_sum = total;
	*n_correct = nc;
}

/* The loss over chunks of the given sizes (cycled), logits [n, V]. */
static void ce_chunked(tk_ce_rows *s, const float *x, const int32_t *tgt, int n,
		       int V, const int *sizes, int nsizes, double *loss,
		       int *nc, double *row_loss)
{
	int v0 = 0, c = 0;

	while (v0 < V) {
		int vc = sizes[c++ % nsizes];

		if (vc > V - v0)
			vc = V - v0;
		ops->ce_stats(s, x + v0, V, tgt, n, v0, vc);
		v0 += vc;
	}
	ce_finish_host(s, tgt, n, loss, nc, row_loss);
}

START_TEST(test_ce_chunks)
{
	enum { n = 64, V = 1000 };
	static const int split1[1] = {V};
	static const int split2[6] = {1, 7, 333, 59, 2, 100};
	static const int split3[3] = {250, 250, 500};
	static const int split4[2] = {1, 3};
	const int *splits[4] = {split1, split2, split3, split4};
	const int nsplit[4] = {1, 6, 3, 2};
	uint64_t st = 80;
	float *x = frand((size_t)n * V, -4, 4, &st);
	int32_t tgt[n];
	double loss_old, loss1 = 0, rl_old[n], rl[n];
	int nc_old, nc1 = 0;
	tk_ce_rows s1, s;
	int32_t am1[n];

	for (int i = 0; i < n; i++)
		tgt[i] = i % 5 == 3 ? -100 : (int32_t)((i * 37) % V);
	/* ties at the max across chunk boundaries (split2 starts chunks at
	 * 0, 1, 8, 341, 400, 402, 502, 503, ...): the smaller id wins */
	for (int i = 0; i < 16; i++) {
		static const int at[16][2] = {
		    {0, 1},	{7, 8},	    {340, 341}, {1, 999},
		    {8, 402},	{249, 250}, {0, 999},	{500, 501},
		    {401, 402}, {341, 342}, {3, 4},	{1, 2},
		    {998, 999}, {100, 800}, {502, 503}, {250, 251}};
		float *r = x + (size_t)i * V;

		r[at[i][0]] = r[at[i][1]] = 9.0f;
		if (tgt[i] >= 0) /* some rows correct, some not */
			tgt[i] = i % 2 ? at[i][0] : at[i][1];
	}
	for (int i = 16; i < n; i += 3) /* correct rows */
		if (tgt[i] >= 0)
			x[(size_t)i * V + tgt[i]] = 10.0f;
	x[(size_t)20 * V + 5] = 1000.0f; /* huge logits */

	old_cross_entropy(x, tgt, n, V, &loss_old, &nc_old, rl_old);
	ce_rows_alloc(&s1, n);
	ce_rows_alloc(&s, n);
	for (int k = 0; k < 4; k++) {
		double loss = -1;
		int nc = -1;

		ce_chunked(&s, x, tgt, n, V, splits[k], nsplit[k], &loss, &nc,
			   rl);
		if (k == 0) { /* one chunk: the former op exactly */
			ck_assert(loss == loss_old);
			ck_assert_int_eq(nc, nc_old);
			for (int i = 0; i < n; i++)
				ck_assert(rl[i] == rl_old[i]);
			loss1 = loss;
			nc1 = nc;
			memcpy(am1, s.am, sizeof(am1));
			ce_chunked(&s1, x, tgt, n, V, split1, 1, &loss, &nc,
				   NULL);
			ce_chunked(&s1, x, tgt, n, V, split1, 1, NULL, NULL,
				   NULL);
			continue;
		}
		/* Not 1e-12: a chunk seen before the row's final max sums
		 * expf(x - mx) against an earlier mx, then rescales by
		 * exp(mx - new mx); each fp32 expf term is rounded (2^-24)
		 * against another reference than in one chunk. Observed
		 * ~3e-12 here; the rounding bound is ~1e-8. */
		ck_assert_msg(fabs(loss - loss1) <= 1e-10 * fabs(loss1),
			      "split %d: %.17g vs %.17g", k, loss, loss1);
		ck_assert_int_eq(nc, nc1);
		for (int i = 0; i < n; i++) {
			ck_assert_int_eq(s.am[i], am1[i]);
			if (tgt[i] < 0)
				ck_assert(rl[i] == 0.0);
			ck_assert_float_eq_tol(s.lse[i], s1.lse[i],
					       1e-6f * fabsf(s1.lse[i]));
		}
	}
	ck_assert_int_ge(nc1, 10);
	ce_rows_free(&s1);
	ce_rows_free(&s);
	free(x);
}
END_TEST

/* ce_grad per chunk against softmax - onehot in double; bf16 = rne(f32). */
START_TEST(test_ce_grad)
{
	enum { n = 40, V = 1000 };
	static const int split[4] = {1, 7, 333, 120};
	uint64_t st = 81;
	float *x = frand((size_t)n * V, -4, 4, &st);
	float *g = fnew((size_t)n * V), *g1 = fnew((size_t)n * V);
	uint16_t *gb = calloc((size_t)n * V, 2);
	int32_t tgt[n];
	tk_ce_rows s;
	float scale = 0.125f;
	double num = 0, den = 0;
	int v0 = 0, c = 0;

	for (int i = 0; i < n; i++)
		tgt[i] = i % 7 == 2 ? -100 : (int32_t)((i * 131) % V);
	ce_rows_alloc(&s, n);
	ce_chunked(&s, x, tgt, n, V, split, 4, NULL, NULL, NULL);
	for (int j = 0; j < (int)(n * V); j++)
		gb[j] = 0x7FC0; /* overwritten, -100 rows included */
	while (v0 < V) {
		int vc = split[c++ % 4];

		if (vc > V - v0)
			vc = V - v0;
		ops->ce_grad(TK_F32, g + v0, V, x + v0, V, &s, tgt, n, v0, vc,
			     scale);
		ops->ce_grad(TK_BF16, gb + v0, V, x + v0, V, &s, tgt, n, v0, vc,
			     scale);
		v0 += vc;
	}
	/* one chunk, in place */
	memcpy(g1, x, (size_t)n * V * 4);
	ops->ce_grad(TK_F32, g1, V, g1, V, &s, tgt, n, 0, V, scale);
	ck_assert_mem_eq(g1, g, (size_t)n * V * 4);
	/* a factor a row: each row as if its grad_scale were the fp32
	 * product scale * factor */
	{
		float rs[n];
		for (int i = 0; i < n; i++)
			rs[i] = ((float)(i % 5) - 2.0f) * 0.3f;
		s.scale = rs;
		ops->ce_grad(TK_F32, g1, V, x, V, &s, tgt, n, 0, V, scale);
		s.scale = NULL;
		for (int i = 0; i < n; i++) {
			float *one = fnew(V);
			tk_ce_rows si = s;
			si.mx += i, si.se += i, si.tl += i, si.am += i,
			    si.lse += i;
			ops->ce_grad(TK_F32, one, V, x + (size_t)i * V, V, &si,
				     tgt + i, 1, 0, V, scale * rs[i]);
			ck_assert_mem_eq(one, g1 + (size_t)i * V,
					 (size_t)V * 4);
			free(one);
		}
	}
	bf_eq_rne(gb, g, (size_t)n * V, "ce_grad bf16");
	for (int i = 0; i < n; i++) {
		const float *r = x + (size_t)i * V;
		double m = r[0], sum = 0;

		for (int j = 1; j < V; j++)
			m = r[j] > m ? r[j] : m;
		for (int j = 0; j < V; j++)
			sum += exp((double)r[j] - m);
		for (int j = 0; j < V; j++) {
			double ref =
			    tgt[i] < 0 ? 0
				       : scale * (exp((double)r[j] - m) / sum -
						  (j == tgt[i]));
			double e = g[(size_t)i * V + j] - ref;

			if (tgt[i] < 0)
				ck_assert(g[(size_t)i * V + j] == 0.0f);
			ck_assert_double_le(fabs(e), 1e-6);
			num += e * e;
			den += ref * ref;
		}
	}
	ck_assert_double_lt(sqrt(num / den), 1e-6);
	ce_rows_free(&s);
	free(x);
	free(g);
	free(g1);
	free(gb);
}
END_TEST

/* ---- the CUDA profile without CUDA --------------------------------------- */

/* No CUDA backend open in this program (and none at all in a build without
 * CUDA): the profile says so, and stop still clears *out. */
START_TEST(test_profile_without_cuda)
{
	tk_profile p;

	memset(&p, 0xA5, sizeof(p));
	ck_assert_int_eq(tk_cuda_profile_start(), -ENOSYS);
	ck_assert_int_eq(tk_cuda_profile_stop(&p), -ENOSYS);
	ck_assert_uint_eq(p.ops, 0);
	ck_assert(p.wall_ms == 0);
}
END_TEST

/* ---- host memory -------------------------------------------------------- */

START_TEST(test_host_memory)
{
	size_t base = ops->host_current(), dbase = ops->mem_current();
	char *h = ops->host_alloc(1000), *d = ops->alloc(1000), back[1000];

	ck_assert_ptr_nonnull(h);
	ck_assert_ptr_nonnull(d);
	ck_assert_uint_eq(ops->host_current(), base + 1000);
	ck_assert_uint_ge(ops->host_peak(), base + 1000);
	ck_assert_uint_eq(ops->mem_current(), dbase + 1000); /* apart */
	for (int i = 0; i < 1000; i++)
		back[i] = (char)(i * 7);
	ops->upload(d, back, 1000);
	ops->copy_async(h, d, 1000, 1);
	ops->copy_wait();
	ck_assert_mem_eq(h, back, 1000);
	memset(d, 0, 1000);
	ops->copy_async(d, h, 1000, 0);
	ops->copy_wait();
	ck_assert_mem_eq(d, back, 1000);
	ops->host_free(h, 1000);
	ops->free(d, 1000);
	ck_assert_uint_eq(ops->host_current(), base);
	ck_assert_uint_eq(ops->mem_current(), dbase);
	ck_assert_uint_ge(ops->host_peak(), base + 1000);
	ops->host_free(NULL, 0);
}
END_TEST

/* ---- suite -------------------------------------------------------------- */

static Suite *ops_suite(void)
{
	Suite *s = suite_create("ops");
	TCase *tc = tcase_create("cpu");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_memory_counters);
	tcase_add_test(tc, test_memory_threads);
	tcase_add_test(tc, test_dtype_size);
	tcase_add_test(tc, test_to_f32_known);
	tcase_add_test(tc, test_to_f32_all);
	tcase_add_test(tc, test_matmul);
	tcase_add_test(tc, test_matmul_k0);
	tcase_add_test(tc, test_add);
	tcase_add_test(tc, test_bias);
	tcase_add_test(tc, test_embedding);
	tcase_add_test(tc, test_rmsnorm);
	tcase_add_test(tc, test_rope);
	tcase_add_test(tc, test_swiglu);
	tcase_add_test(tc, test_cross_entropy_small);
	tcase_add_test(tc, test_cross_entropy_large);
	tcase_add_test(tc, test_attention_causal);
	tcase_add_test(tc, test_attention_docs_window);
	tcase_add_test(tc, test_attention_sinks);
	tcase_add_test(tc, test_attention_tiled);
	tcase_add_test(tc, test_attention_masked_grad);
	tcase_add_test(tc, test_bf16_elementwise);
	tcase_add_test(tc, test_bf16_bias_embedding);
	tcase_add_test(tc, test_bf16_rmsnorm_rope);
	tcase_add_test(tc, test_bf16_attention);
	tcase_add_test(tc, test_matmul_bf16);
	tcase_add_test(tc, test_matmul_bf16_k0);
	tcase_add_test(tc, test_fused_norm);
	tcase_add_test(tc, test_fused_qknorm_rope);
	tcase_add_test(tc, test_fused_qknorm_rope_partial);
	tcase_add_test(tc, test_linear_bias);
	tcase_add_test(tc, test_linear_bias_k0);
	tcase_add_test(tc, test_ce_chunks);
	tcase_add_test(tc, test_ce_grad);
	tcase_add_test(tc, test_host_memory);
	tcase_add_test(tc, test_profile_without_cuda);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	ops = tk_cpu_ops();
	sr = srunner_create(ops_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
