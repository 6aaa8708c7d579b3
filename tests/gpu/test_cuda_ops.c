/* test_cuda_ops.c: the CUDA backend against the CPU reference backend.
 *
 * Every op of the table (but attention and the optimizers: see
 * test_cuda_optim_attn.c) runs on both backends with the same random
 * inputs, several shapes including odd ones. Outputs that an op overwrites
 * are poisoned with NaN on the device first, so an element the kernel never
 * writes fails the comparison; any NaN is a failure. Ops the CUDA backend
 * computes with the CPU's exact operations are compared bit for bit, the
 * others within a relative error (max |gpu - cpu| / max |cpu|): 1e-6 for
 * element-wise work, 1e-2 for the bf16 tensor-core GEMM.
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
#include "tk_hash.h"
#include "tk_ops.h"

#define TOL_ELEM 1e-6
#define TOL_GEMM 1e-2

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

static float *frand(size_t n, float lo, float hi, uint64_t *st)
{
	float *p = hnew(n * sizeof(float));

	tu_fill_uniform(p, n, lo, hi, st);
	return p;
}

static float *fdup(const float *x, size_t n)
{
	float *p = hnew(n * sizeof(float));

	memcpy(p, x, n * sizeof(float));
	return p;
}

static void *dnew(size_t bytes)
{
	void *p = gpu->alloc(bytes);

	ck_assert_ptr_nonnull(p);
	return p;
}

/* Device copy of host bytes. */
static void *dput(const void *h, size_t bytes)
{
	void *p = dnew(bytes);

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

/* Device buffer of n floats, all NaN. */
static float *dnan(size_t n)
{
	float *h = hnew(n * sizeof(float));
	float *d;

	for (size_t i = 0; i < n; i++)
		h[i] = NAN;
	d = dput(h, n * sizeof(float));
	free(h);
	return d;
}

static uint32_t rnd(uint64_t *st, uint32_t n)
{
	return (uint32_t)(tk_splitmix64_next(st) % n);
}

/* max |a - ref| / max |ref| (the absolute error when ref is all zero);
 * +inf when a or ref holds a NaN. */
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

/* Bit-identical, NaN payloads included. */
static void check_same(const char *what, const void *a, const void *ref,
		       size_t bytes)
{
	ck_assert_msg(memcmp(a, ref, bytes) == 0, "%s: not bit-identical",
		      what);
}

/* ---- memory ------------------------------------------------------------- */

START_TEST(test_memory)
{
	size_t c0 = gpu->mem_current(), n = 1000003;
	unsigned char *h = hnew(n), *back;
	void *p, *z;

	for (size_t i = 0; i < n; i++)
		h[i] = (unsigned char)(i * 131 + 7);
	p = dnew(n);
	ck_assert_uint_eq(gpu->mem_current(), c0 + n);
	ck_assert_uint_ge(gpu->mem_peak(), c0 + n);
	gpu->upload(p, h, n);
	back = dget(p, n);
	check_same("upload/download", back, h, n);
	free(back);
	gpu->memset0((char *)p + 5, n - 10);
	back = dget(p, n);
	for (size_t i = 0; i < n; i++)
		ck_assert_uint_eq(back[i], i < 5 || i >= n - 5 ? h[i] : 0);
	free(back);
	z = dnew(0); /* a pointer even for 0 bytes */
	gpu->free(z, 0);
	gpu->free(p, n);
	gpu->free(NULL, 0);
	ck_assert_uint_eq(gpu->mem_current(), c0);
	ck_assert_uint_ge(gpu->mem_peak(), c0 + n);
	gpu->mem_reset_peak();
	ck_assert_uint_eq(gpu->mem_peak(), c0);
	/* An impossible allocation fails cleanly, with no sticky error. */
	ck_assert_ptr_null(gpu->alloc((size_t)1 << 60));
	ck_assert_uint_eq(gpu->mem_current(), c0);
	gpu_ok("memory");
	free(h);
}
END_TEST

/* ---- to_f32 -------------------------------------------------------------- */

START_TEST(test_to_f32)
{
	size_t n = 65536 + 13; /* every 16-bit pattern, then a few again */
	uint16_t *h = hnew(n * sizeof(uint16_t));
	float *ref = hnew(n * sizeof(float)), *got, *d;
	uint16_t *src;
	uint64_t st = 11;

	for (size_t i = 0; i < n; i++)
		h[i] = (uint16_t)(i * 40503u);
	src = dput(h, n * sizeof(uint16_t));
	for (int dt = TK_BF16; dt <= TK_F16; dt++) {
		d = dnan(n);
		cpu->to_f32(ref, h, dt, n);
		gpu->to_f32(d, src, dt, n);
		got = dget(d, n * sizeof(float));
		check_same(dt == TK_BF16 ? "to_f32 bf16" : "to_f32 f16", got,
			   ref, n * sizeof(float));
		free(got);
		gpu->free(d, n * sizeof(float));
	}
	gpu->free(src, n * sizeof(uint16_t));
	/* F32: a copy, NaN payloads kept. */
	{
		float *x = frand(n, -3, 3, &st);
		uint32_t nan_bits = 0x7fc01234u;
		float *dx;

		memcpy(&x[7], &nan_bits, sizeof(nan_bits));
		dx = dput(x, n * sizeof(float));
		d = dnan(n);
		gpu->to_f32(d, dx, TK_F32, n);
		got = dget(d, n * sizeof(float));
		check_same("to_f32 f32", got, x, n * sizeof(float));
		free(got);
		free(x);
		gpu->free(d, n * sizeof(float));
		gpu->free(dx, n * sizeof(float));
	}
	gpu_ok("to_f32");
	free(h);
	free(ref);
}
END_TEST

/* ---- matmul ------------------------------------------------------------- */

/* One matmul on both backends; lda/ldb/ldc are the minimum plus pad; A and
 * B start off elements into their buffers (alignment). With beta == 0, C is
 * NaN on the device: every element of op's M x N must be written, and the
 * padding columns must stay NaN (never written). */
static void mm_case(int ta, int tb, int M, int N, int K, float alpha,
		    float beta, int pad, int off, uint64_t *st)
{
	int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
	size_t na = (size_t)(ta ? K : M) * lda + off;
	size_t nb = (size_t)(tb ? N : K) * ldb + off;
	size_t nc = (size_t)M * ldc;
	float *A = frand(na, -1, 1, st), *B = frand(nb, -1, 1, st);
	float *C = frand(nc, -1, 1, st), *ref, *got, *dA, *dB, *dC;
	double num = 0, den = 0;
	char what[128];

	if (beta == 0.0f)
		for (size_t i = 0; i < nc; i++)
			C[i] = NAN;
	ref = fdup(C, nc);
	dA = dput(A, na * sizeof(float));
	dB = dput(B, nb * sizeof(float));
	dC = dput(C, nc * sizeof(float));
	cpu->matmul(ta, tb, M, N, K, alpha, A + off, lda, B + off, ldb, beta,
		    ref, ldc);
	gpu->matmul(ta, tb, M, N, K, alpha, dA + off, lda, dB + off, ldb, beta,
		    dC, ldc);
	got = dget(dC, nc * sizeof(float));
	snprintf(what, sizeof(what),
		 "matmul ta=%d tb=%d M=%d N=%d K=%d alpha=%g beta=%g pad=%d "
		 "off=%d",
		 ta, tb, M, N, K, alpha, beta, pad, off);
	gpu_ok(what);
	/* error relative to max |C| over the whole product */
	for (int i = 0; i < M; i++)
		for (int j = 0; j < N; j++) {
			double g = got[(size_t)i * ldc + j];
			double r = ref[(size_t)i * ldc + j];
			ck_assert_msg(!isnan(g) && !isnan(r),
				      "%s: NaN at %d,%d", what, i, j);
			if (fabs(g - r) > num)
				num = fabs(g - r);
			if (fabs(r) > den)
				den = fabs(r);
		}
	ck_assert_msg(num <= TOL_GEMM * den, "%s: error %g of max |C| %g", what,
		      num, den);
	/* the padding columns are not C's: untouched */
	for (int i = 0; i < M; i++)
		for (int j = N; j < ldc; j++)
			check_same(what, &got[(size_t)i * ldc + j],
				   &C[(size_t)i * ldc + j], sizeof(float));
	free(A);
	free(B);
	free(C);
	free(ref);
	free(got);
	gpu->free(dA, na * sizeof(float));
	gpu->free(dB, nb * sizeof(float));
	gpu->free(dC, nc * sizeof(float));
}

START_TEST(test_matmul)
{
	static const int shapes[][3] = {
	    {1, 1, 1},	    {17, 33, 65}, {64, 128, 256},
	    {130, 77, 300}, {3, 1000, 5}, {257, 31, 1024},
	};
	uint64_t st = 21;

	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (int t = 0; t < 4; t++) {
			int M = shapes[s][0], N = shapes[s][1];
			int K = shapes[s][2];
			mm_case(t & 1, t >> 1, M, N, K, 1.0f, 0.0f, 0, 0, &st);
			mm_case(t & 1, t >> 1, M, N, K, 0.5f, 1.0f, 3, 1, &st);
			mm_case(t & 1, t >> 1, M, N, K, -2.0f, 0.25f, 8, 2,
				&st);
		}
	/* The three GEMMs of the loss chunk: logits, dh, and the head
	 * gradient accumulated. */
	mm_case(0, 1, 37, 5003, 96, 1.0f, 0.0f, 0, 0, &st);
	mm_case(0, 0, 37, 96, 5003, 1.0f, 0.0f, 0, 0, &st);
	mm_case(1, 0, 5003, 96, 37, 1.0f, 1.0f, 0, 0, &st);
}
END_TEST

START_TEST(test_matmul_k0)
{
	uint64_t st = 22;
	int M = 5, N = 7, ldc = 9;
	float *C = frand((size_t)M * ldc, -1, 1, &st), *got, *dC;

	/* beta == 0: zeros, even over NaN */
	dC = dnan((size_t)M * ldc);
	gpu->matmul(0, 0, M, N, 0, 1.0f, NULL, 1, NULL, 1, 0.0f, dC, ldc);
	got = dget(dC, (size_t)M * ldc * sizeof(float));
	for (int i = 0; i < M; i++)
		for (int j = 0; j < ldc; j++)
			if (j < N)
				ck_assert_float_eq(got[i * ldc + j], 0.0f);
			else
				ck_assert(isnan(got[i * ldc + j]));
	free(got);
	/* beta != 0: C scaled */
	gpu->upload(dC, C, (size_t)M * ldc * sizeof(float));
	gpu->matmul(1, 1, M, N, 0, 1.0f, NULL, 1, NULL, 1, 2.0f, dC, ldc);
	got = dget(dC, (size_t)M * ldc * sizeof(float));
	for (int i = 0; i < M; i++)
		for (int j = 0; j < ldc; j++)
			ck_assert_float_eq(got[i * ldc + j],
					   j < N ? 2.0f * C[i * ldc + j]
						 : C[i * ldc + j]);
	gpu_ok("matmul K = 0");
	free(got);
	free(C);
	gpu->free(dC, (size_t)M * ldc * sizeof(float));
}
END_TEST

/* More shapes than the descriptor cache holds, then the first ones again
 * (rebuilt after eviction), and one shape at every pointer alignment. */
START_TEST(test_matmul_cache)
{
	uint64_t st = 23;

	for (int round = 0; round < 2; round++)
		for (int s = 0; s < 80; s++)
			mm_case(s & 1, (s >> 1) & 1, 3 + s, 5 + 2 * s, 7 + s,
				1.0f, 0.0f, 0, 0, &st);
	for (int off = 0; off < 4; off++)
		mm_case(0, 1, 33, 65, 129, 1.0f, 0.0f, 0, off, &st);
}
END_TEST

/* ---- element-wise ------------------------------------------------------- */

START_TEST(test_add)
{
	/* more than the 65535-block grid covers in one pass */
	size_t sizes[] = {1, 1000, (size_t)65535 * 256 + 12345};
	uint64_t st = 31;

	for (size_t s = 0; s < 3; s++) {
		size_t n = sizes[s];
		float *y = frand(n, -1, 1, &st), *x = frand(n, -1, 1, &st);
		float *dy = dput(y, n * sizeof(float));
		float *dx = dput(x, n * sizeof(float)), *got;

		cpu->add(y, x, n);
		gpu->add(dy, dx, n);
		got = dget(dy, n * sizeof(float));
		check_same("add", got, y, n * sizeof(float));
		free(got);
		free(y);
		free(x);
		gpu->free(dy, n * sizeof(float));
		gpu->free(dx, n * sizeof(float));
	}
	gpu_ok("add");
}
END_TEST

START_TEST(test_bias)
{
	static const int shapes[][2] = {
	    {1, 1}, {1000, 67}, {4096, 1024}, {3, 5000}};
	uint64_t st = 32;

	for (size_t s = 0; s < 4; s++) {
		int rows = shapes[s][0], C = shapes[s][1];
		size_t n = (size_t)rows * C;
		float *y = frand(n, -1, 1, &st), *b = frand(C, -1, 1, &st);
		float *db = frand(C, -1, 1, &st), *got;
		float *d_y = dput(y, n * sizeof(float));
		float *d_b = dput(b, C * sizeof(float));
		float *d_db = dput(db, C * sizeof(float));

		/* bwd first: it reads y as dy before fwd changes it */
		cpu->bias_bwd(db, y, rows, C);
		gpu->bias_bwd(d_db, d_y, rows, C);
		got = dget(d_db, C * sizeof(float));
		check_close("bias_bwd", got, db, C, TOL_ELEM);
		free(got);
		cpu->bias_fwd(y, b, rows, C);
		gpu->bias_fwd(d_y, d_b, rows, C);
		got = dget(d_y, n * sizeof(float));
		check_same("bias_fwd", got, y, n * sizeof(float));
		free(got);
		free(y);
		free(b);
		free(db);
		gpu->free(d_y, n * sizeof(float));
		gpu->free(d_b, C * sizeof(float));
		gpu->free(d_db, C * sizeof(float));
	}
	gpu_ok("bias");
}
END_TEST

/* n tokens of ids in [0, V) (mode 0), all the same id (mode 1: one row
 * receives every gradient, more than a flush holds), or with -1 ids. */
static void emb_case(int n, int V, int H, int mode, uint64_t *st)
{
	int32_t *tok = hnew((size_t)n * sizeof(int32_t));
	size_t nt = (size_t)V * H, no = (size_t)n * H;
	float *table = frand(nt, -1, 1, st), *dout = frand(no, -1, 1, st);
	float *out = hnew(no * sizeof(float)), *dtable = frand(nt, -1, 1, st);
	float *d_table, *d_out, *d_dout, *d_dtable, *got;
	int32_t *d_tok;

	for (int i = 0; i < n; i++)
		tok[i] = mode == 1			? V / 2
			 : mode == 2 && rnd(st, 5) == 0 ? -1
							: (int32_t)rnd(st, V);
	d_tok = dput(tok, (size_t)n * sizeof(int32_t));
	d_table = dput(table, nt * sizeof(float));
	d_dtable = dput(dtable, nt * sizeof(float));
	d_dout = dput(dout, no * sizeof(float));
	d_out = dnan(no);
	cpu->embedding_fwd(out, table, tok, n, H);
	gpu->embedding_fwd(d_out, d_table, d_tok, n, H);
	got = dget(d_out, no * sizeof(float));
	check_same("embedding_fwd", got, out, no * sizeof(float));
	free(got);
	cpu->embedding_bwd(dtable, dout, tok, n, H);
	gpu->embedding_bwd(d_dtable, d_dout, d_tok, n, H);
	got = dget(d_dtable, nt * sizeof(float));
	/* the same additions in the same order: bit-identical */
	check_same("embedding_bwd", got, dtable, nt * sizeof(float));
	free(got);
	gpu_ok("embedding");
	free(tok);
	free(table);
	free(dout);
	free(out);
	free(dtable);
	gpu->free(d_tok, (size_t)n * sizeof(int32_t));
	gpu->free(d_table, nt * sizeof(float));
	gpu->free(d_dtable, nt * sizeof(float));
	gpu->free(d_dout, no * sizeof(float));
	gpu->free(d_out, no * sizeof(float));
}

START_TEST(test_embedding)
{
	uint64_t st = 33;

	emb_case(1, 1, 1, 0, &st);
	emb_case(37, 11, 67, 0, &st);
	emb_case(300, 1000, 257, 2, &st);
	emb_case(2000, 40, 1000, 0, &st);
	emb_case(9000, 17, 300, 1, &st);
	emb_case(4096, 32000, 512, 2, &st);
}
END_TEST

static void rms_case(int n, int H, uint64_t *st)
{
	size_t nh = (size_t)n * H;
	float *x = frand(nh, -2, 2, st), *w = frand(H, 0.5f, 1.5f, st);
	float *dout = frand(nh, -1, 1, st), *dw = frand(H, -1, 1, st);
	float *out = hnew(nh * sizeof(float)), *rstd = hnew(n * sizeof(float));
	float *dx = hnew(nh * sizeof(float)), *got;
	float *d_x = dput(x, nh * sizeof(float));
	float *d_w = dput(w, H * sizeof(float));
	float *d_dout = dput(dout, nh * sizeof(float));
	float *d_dw = dput(dw, H * sizeof(float));
	float *d_out = dnan(nh), *d_rstd = dnan(n), *d_dx = dnan(nh);

	cpu->rmsnorm_fwd(out, rstd, x, w, n, H, 1e-6f);
	gpu->rmsnorm_fwd(d_out, d_rstd, d_x, d_w, n, H, 1e-6f);
	got = dget(d_out, nh * sizeof(float));
	check_close("rmsnorm_fwd out", got, out, nh, TOL_ELEM);
	free(got);
	got = dget(d_rstd, n * sizeof(float));
	check_close("rmsnorm_fwd rstd", got, rstd, n, TOL_ELEM);
	free(got);
	/* the backward pass from the same rstd on both sides */
	gpu->upload(d_rstd, rstd, n * sizeof(float));
	cpu->rmsnorm_bwd(dx, dw, dout, x, w, rstd, n, H);
	gpu->rmsnorm_bwd(d_dx, d_dw, d_dout, d_x, d_w, d_rstd, n, H);
	got = dget(d_dx, nh * sizeof(float));
	check_close("rmsnorm_bwd dx", got, dx, nh, TOL_ELEM);
	free(got);
	got = dget(d_dw, H * sizeof(float));
	check_close("rmsnorm_bwd dw", got, dw, H, TOL_ELEM);
	free(got);
	gpu_ok("rmsnorm");
	free(x);
	free(w);
	free(dout);
	free(dw);
	free(out);
	free(rstd);
	free(dx);
	gpu->free(d_x, nh * sizeof(float));
	gpu->free(d_w, H * sizeof(float));
	gpu->free(d_dout, nh * sizeof(float));
	gpu->free(d_dw, H * sizeof(float));
	gpu->free(d_out, nh * sizeof(float));
	gpu->free(d_rstd, n * sizeof(float));
	gpu->free(d_dx, nh * sizeof(float));
}

START_TEST(test_rmsnorm)
{
	uint64_t st = 34;

	rms_case(1, 1, &st);
	rms_case(37, 67, &st);
	rms_case(128, 4096, &st);
	rms_case(3, 8192, &st);
	rms_case(2048, 96, &st);
}
END_TEST

static void rope_case(int n, int heads, int hd, uint64_t *st)
{
	int half = hd / 2, max_pos = 50;
	size_t nx = (size_t)n * heads * hd, nt = (size_t)max_pos * half;
	float *x = frand(nx, -1, 1, st), *c = frand(nt, -1, 1, st);
	float *s = frand(nt, -1, 1, st), *got;
	int32_t *pos = hnew((size_t)n * sizeof(int32_t));
	float *d_x, *d_c, *d_s;
	int32_t *d_pos;

	for (int i = 0; i < n; i++)
		pos[i] = (int32_t)rnd(st, max_pos);
	d_x = dput(x, nx * sizeof(float));
	d_c = dput(c, (nt ? nt : 1) * sizeof(float));
	d_s = dput(s, (nt ? nt : 1) * sizeof(float));
	d_pos = dput(pos, (size_t)n * sizeof(int32_t));
	cpu->rope_fwd(x, c, s, pos, n, heads, hd);
	gpu->rope_fwd(d_x, d_c, d_s, d_pos, n, heads, hd);
	got = dget(d_x, nx * sizeof(float));
	check_same("rope_fwd", got, x, nx * sizeof(float));
	free(got);
	cpu->rope_bwd(x, c, s, pos, n, heads, hd);
	gpu->rope_bwd(d_x, d_c, d_s, d_pos, n, heads, hd);
	got = dget(d_x, nx * sizeof(float));
	check_same("rope_bwd", got, x, nx * sizeof(float));
	free(got);
	gpu_ok("rope");
	free(x);
	free(c);
	free(s);
	free(pos);
	gpu->free(d_x, nx * sizeof(float));
	gpu->free(d_c, (nt ? nt : 1) * sizeof(float));
	gpu->free(d_s, (nt ? nt : 1) * sizeof(float));
	gpu->free(d_pos, (size_t)n * sizeof(int32_t));
}

START_TEST(test_rope)
{
	uint64_t st = 35;

	rope_case(1, 1, 2, &st);
	rope_case(19, 3, 10, &st);
	rope_case(7, 2, 7, &st); /* odd hd: the last element is left alone */
	rope_case(512, 8, 128, &st);
}
END_TEST

START_TEST(test_swiglu)
{
	size_t sizes[] = {1, 999, 1 << 20};
	uint64_t st = 36;

	for (size_t k = 0; k < 3; k++) {
		size_t n = sizes[k], b = n * sizeof(float);
		float *g = frand(n, -20, 20, &st), *u = frand(n, -2, 2, &st);
		float *d = frand(n, -1, 1, &st), *out = hnew(b);
		float *dg = hnew(b), *du = hnew(b), *got;
		float *d_g = dput(g, b), *d_u = dput(u, b), *d_d = dput(d, b);
		float *d_out = dnan(n), *d_dg = dnan(n), *d_du = dnan(n);

		cpu->swiglu_fwd(out, g, u, n);
		gpu->swiglu_fwd(d_out, d_g, d_u, n);
		got = dget(d_out, b);
		check_close("swiglu_fwd", got, out, n, TOL_ELEM);
		free(got);
		cpu->swiglu_bwd(dg, du, d, g, u, n);
		gpu->swiglu_bwd(d_dg, d_du, d_d, d_g, d_u, n);
		got = dget(d_dg, b);
		check_close("swiglu_bwd dgate", got, dg, n, TOL_ELEM);
		free(got);
		got = dget(d_du, b);
		check_close("swiglu_bwd dup", got, du, n, TOL_ELEM);
		free(got);
		gpu_ok("swiglu");
		free(g);
		free(u);
		free(d);
		free(out);
		free(dg);
		free(du);
		gpu->free(d_g, b);
		gpu->free(d_u, b);
		gpu->free(d_d, b);
		gpu->free(d_out, b);
		gpu->free(d_dg, b);
		gpu->free(d_du, b);
	}
}
END_TEST

/* ---- cross-entropy ------------------------------------------------------ */

/* Targets: -100 for about one row in 6, the row's argmax for about one in
 * 3 (so n_correct counts something), else random. */
static void ce_case(int n, int V, float grad_scale, int with_rows, uint64_t *st)
{
	size_t nv = (size_t)n * V;
	float *x = frand(nv, -8, 8, st), *got;
	int32_t *tgt = hnew((size_t)n * sizeof(int32_t));
	double *rl = hnew((size_t)n * sizeof(double)), *grl, loss = 0, gloss;
	int nc = 0, gnc = -1;
	float *d_x;
	int32_t *d_t;
	double *d_rl = NULL;
	char what[96];

	for (int i = 0; i < n; i++) {
		uint32_t k = rnd(st, 6);
		const float *r = x + (size_t)i * V;
		int am = 0;

		for (int j = 1; j < V; j++)
			if (r[j] > r[am])
				am = j;
		tgt[i] = k == 0 ? -100 : k <= 2 ? am : (int32_t)rnd(st, V);
	}
	d_x = dput(x, nv * sizeof(float));
	d_t = dput(tgt, (size_t)n * sizeof(int32_t));
	if (with_rows) {
		double *nan_rows = hnew((size_t)n * sizeof(double));
		for (int i = 0; i < n; i++)
			nan_rows[i] = NAN;
		d_rl = dput(nan_rows, (size_t)n * sizeof(double));
		free(nan_rows);
	}
	snprintf(what, sizeof(what), "cross_entropy n=%d V=%d scale=%g", n, V,
		 grad_scale);
	cpu->cross_entropy(x, tgt, n, V, grad_scale, &loss, &nc, rl);
	gloss = NAN;
	gpu->cross_entropy(d_x, d_t, n, V, grad_scale, &gloss,
			   with_rows ? &gnc : NULL, d_rl);
	gpu_ok(what);
	/* GPU expf is within 2 ulp: each loss within ~2e-7 absolute */
	ck_assert_msg(fabs(gloss - loss) <= TOL_ELEM * (fabs(loss) + n),
		      "%s: loss_sum %.17g, cpu %.17g", what, gloss, loss);
	if (with_rows) {
		ck_assert_msg(gnc == nc, "%s: n_correct %d, cpu %d", what, gnc,
			      nc);
		grl = dget(d_rl, (size_t)n * sizeof(double));
		for (int i = 0; i < n; i++)
			ck_assert_msg(fabs(grl[i] - rl[i]) <=
					  TOL_ELEM * (fabs(rl[i]) + 1),
				      "%s: row %d loss %.17g, cpu %.17g", what,
				      i, grl[i], rl[i]);
		free(grl);
	}
	/* logits in place: the gradient, or untouched when scale == 0 */
	got = dget(d_x, nv * sizeof(float));
	for (int i = 0; i < n; i++)
		check_close(what, got + (size_t)i * V, x + (size_t)i * V,
			    (size_t)V, TOL_ELEM);
	free(got);
	free(x);
	free(tgt);
	free(rl);
	gpu->free(d_x, nv * sizeof(float));
	gpu->free(d_t, (size_t)n * sizeof(int32_t));
	if (d_rl)
		gpu->free(d_rl, (size_t)n * sizeof(double));
}

START_TEST(test_cross_entropy)
{
	uint64_t st = 37;

	ce_case(1, 1, 1.0f, 1, &st);
	ce_case(5, 7, 0.2f, 1, &st);
	ce_case(33, 1000, 1.0f / 33, 1, &st);
	ce_case(33, 1000, 0.0f, 1, &st);
	ce_case(2000, 3001, 1.0f / 2000, 0, &st);
	ce_case(24, 152064, 1.0f / 24, 1, &st);
	ce_case(6, 152064, 0.0f, 0, &st);
}
END_TEST

/* ---- suite -------------------------------------------------------------- */

static Suite *cuda_suite(void)
{
	Suite *s = suite_create("cuda_ops");
	TCase *tc = tcase_create("cuda_vs_cpu");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_memory);
	tcase_add_test(tc, test_to_f32);
	tcase_add_test(tc, test_matmul);
	tcase_add_test(tc, test_matmul_k0);
	tcase_add_test(tc, test_matmul_cache);
	tcase_add_test(tc, test_add);
	tcase_add_test(tc, test_bias);
	tcase_add_test(tc, test_embedding);
	tcase_add_test(tc, test_rmsnorm);
	tcase_add_test(tc, test_rope);
	tcase_add_test(tc, test_swiglu);
	tcase_add_test(tc, test_cross_entropy);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	char why[256] = "";
	int r;

	r = tk_cuda_open(&gpu, why, sizeof(why));
	if (r < 0) {
		printf("test_cuda_ops: skipped: %s\n", why);
		return 77;
	}
	cpu = tk_cpu_ops();
	return tu_run(cuda_suite(), 1);
}
