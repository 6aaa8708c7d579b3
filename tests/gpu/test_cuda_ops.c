/* test_cuda_ops.c: the CUDA backend against the CPU reference backend.
 *
 * Every op of the table (but attention and the optimizers: see
 * test_cuda_optim_attn.c; decode attention, kv_store and attention_decode,
 * is here, at the attention tests' tolerance) runs on both backends with
 * the same random inputs, several shapes including odd ones, in each dtype
 * the op takes (F32, and BF16: the CUDA bf16 kernels against the CPU's
 * bf16 ones).
 * Outputs that an op overwrites are poisoned with NaN on the device first,
 * so an element the kernel never writes fails the comparison; any NaN is a
 * failure. Ops the CUDA backend computes with the CPU's exact operations
 * are compared bit for bit, the others within a relative error (max |gpu -
 * cpu| / max |cpu|): 1e-6 for element-wise fp32 work, 1e-2 for the bf16
 * tensor-core GEMM; bf16 outputs within 1 bf16 ulp of the CPU's. The
 * chunked loss is checked over several vocabulary chunks against one
 * chunk and against the CPU; pinned host memory and the side-stream
 * copies round-trip; the profile (tk_cuda_profile_start/stop) puts each op
 * in its phase and stream and gives the table back. The fused ops (norm
 * with the residual add, q/k norm with RoPE, the GEMM with its bias
 * epilogue) are checked like the ops they fuse.
 *
 * Without a usable GPU (or in a build without CUDA) the program prints why
 * and exits 77, which CTest reports as skipped. CUDA does not survive
 * fork(), so the suite runs without check's per-test fork.
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
#include "tk_hash.h"
#include "tk_ops.h"

#define TOL_ELEM 1e-6
#define TOL_GEMM 1e-2
#define TOL_GEMM_BF16_F32 1e-3 /* bf16 inputs, f32 output */

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

/* ---- dtypes ---------------------------------------------------------------
 */

static const int dts[2] = {TK_F32, TK_BF16};

static const char *dt_name(int dt)
{
	return dt == TK_F32 ? "f32" : "bf16";
}

/* Host copy of x [n] in dt: the floats themselves (F32) or rounded to
 * nearest even (BF16). malloc'd. */
static void *tconv(int dt, const float *x, size_t n)
{
	uint16_t *h;

	if (dt == TK_F32)
		return fdup(x, n);
	h = hnew(n * sizeof(uint16_t));
	for (size_t i = 0; i < n; i++)
		h[i] = tk_f32_bf16_rne(x[i]);
	return h;
}

/* n random values of [lo, hi) in dt (host). */
static void *trand(int dt, size_t n, float lo, float hi, uint64_t *st)
{
	float *f = frand(n, lo, hi, st);
	void *t;

	if (dt == TK_F32)
		return f;
	t = tconv(dt, f, n);
	free(f);
	return t;
}

/* Device buffer of n elements of dt, all NaN. */
static void *tnan(int dt, size_t n)
{
	float *f;
	void *h, *d;

	if (dt == TK_F32)
		return dnan(n);
	f = hnew(n * sizeof(float));
	for (size_t i = 0; i < n; i++)
		f[i] = NAN;
	h = tconv(dt, f, n);
	d = dput(h, n * tk_dtype_size(dt));
	free(h);
	free(f);
	return d;
}

/* bf16 bit patterns ordered like their values (+0 and -0 together). */
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

/* got against ref, both n elements of dt: F32 bit for bit (same) or within
 * tol, BF16 within 1 ulp. */
static void check_t(const char *what, int dt, const void *got, const void *ref,
		    size_t n, int same, double tol)
{
	char w[160];

	snprintf(w, sizeof(w), "%s (%s)", what, dt_name(dt));
	if (dt == TK_BF16)
		check_bf16(w, got, ref, n, 1);
	else if (same)
		check_same(w, got, ref, n * sizeof(float));
	else
		check_close(w, got, ref, n, tol);
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

/* ---- host memory and side-stream copies --------------------------------- */

START_TEST(test_host_copy)
{
	size_t h0 = gpu->host_current(), n = 3 * 1000003;
	unsigned char *a = gpu->host_alloc(n), *b = gpu->host_alloc(n), *back;
	void *d1 = dnew(n), *d2 = dnew(n);

	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	ck_assert_uint_eq(gpu->host_current(), h0 + 2 * n);
	ck_assert_uint_ge(gpu->host_peak(), h0 + 2 * n);
	for (size_t i = 0; i < n; i++)
		a[i] = (unsigned char)(i * 7 + 3);
	/* host -> device on the copy stream; the memset0 issued before the
	 * copy is ordered before it, the download after copy_wait sees it */
	gpu->memset0(d1, n);
	gpu->copy_async(d1, a, n, 0);
	gpu->copy_wait();
	back = dget(d1, n);
	check_same("copy_async to device", back, a, n);
	free(back);
	/* device -> device through the host: an op (upload) issued before the
	 * copy is seen by it; the copy back waits for the first one */
	gpu->upload(d2, a + 1, n - 1);
	gpu->copy_async(b, d2, n - 1, 1);
	gpu->copy_async(d1, b, n - 1, 0);
	gpu->copy_wait();
	back = dget(d1, n - 1);
	check_same("copy_async round trip", back, a + 1, n - 1);
	free(back);
	gpu_ok("copy_async");
	gpu->host_free(a, n);
	gpu->host_free(b, n);
	gpu->host_free(NULL, 0);
	ck_assert_uint_eq(gpu->host_current(), h0);
	gpu->free(d1, n);
	gpu->free(d2, n);
	gpu_ok("host memory");
}
END_TEST

/* ---- matmul ------------------------------------------------------------- */

/* One matmul on both backends; lda/ldb/ldc are the minimum plus pad; A and
 * B start off elements into their buffers (alignment). A and B are ab, C
 * is cd (TK_F32 or TK_BF16). With beta == 0, C is NaN on the device: every
 * element of op's M x N must be written, and the padding columns must stay
 * NaN (never written). Error relative to max |C|: TOL_GEMM, and
 * TOL_GEMM_BF16_F32 for bf16 inputs with an f32 output (both sides then
 * multiply the same bf16 values exactly and accumulate in f32). */
static void mm_case_t(int ab, int cd, int ta, int tb, int M, int N, int K,
		      float alpha, float beta, int pad, int off, uint64_t *st)
{
	int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
	size_t na = (size_t)(ta ? K : M) * lda + off;
	size_t nb = (size_t)(tb ? N : K) * ldb + off;
	size_t nc = (size_t)M * ldc;
	size_t ea = tk_dtype_size(ab), ec = tk_dtype_size(cd);
	float *C = frand(nc, -1, 1, st);
	void *A = trand(ab, na, -1, 1, st), *B = trand(ab, nb, -1, 1, st);
	void *Ct, *ref, *got, *dA, *dB, *dC;
	float *gf, *rf;
	double num = 0, den = 0;
	double tol =
	    ab == TK_BF16 && cd == TK_F32 ? TOL_GEMM_BF16_F32 : TOL_GEMM;
	char what[160];

	if (beta == 0.0f)
		for (size_t i = 0; i < nc; i++)
			C[i] = NAN;
	Ct = tconv(cd, C, nc);
	ref = tconv(cd, C, nc);
	dA = dput(A, na * ea);
	dB = dput(B, nb * ea);
	dC = dput(Ct, nc * ec);
	cpu->matmul(ta, tb, M, N, K, alpha, ab, (char *)A + off * ea, lda,
		    (char *)B + off * ea, ldb, beta, cd, ref, ldc);
	gpu->matmul(ta, tb, M, N, K, alpha, ab, (char *)dA + off * ea, lda,
		    (char *)dB + off * ea, ldb, beta, cd, dC, ldc);
	got = dget(dC, nc * ec);
	snprintf(what, sizeof(what),
		 "matmul %s->%s ta=%d tb=%d M=%d N=%d K=%d alpha=%g beta=%g "
		 "pad=%d off=%d",
		 dt_name(ab), dt_name(cd), ta, tb, M, N, K, alpha, beta, pad,
		 off);
	gpu_ok(what);
	gf = hnew(nc * sizeof(float));
	rf = hnew(nc * sizeof(float));
	cpu->to_f32(gf, got, cd, nc);
	cpu->to_f32(rf, ref, cd, nc);
	/* error relative to max |C| over the whole product */
	for (int i = 0; i < M; i++)
		for (int j = 0; j < N; j++) {
			double g = gf[(size_t)i * ldc + j];
			double r = rf[(size_t)i * ldc + j];
			ck_assert_msg(!isnan(g) && !isnan(r),
				      "%s: NaN at %d,%d", what, i, j);
			if (fabs(g - r) > num)
				num = fabs(g - r);
			if (fabs(r) > den)
				den = fabs(r);
		}
	ck_assert_msg(num <= tol * den, "%s: error %g of max |C| %g", what, num,
		      den);
	/* the padding columns are not C's: untouched */
	for (int i = 0; i < M; i++)
		for (int j = N; j < ldc; j++)
			check_same(what,
				   (char *)got + ((size_t)i * ldc + j) * ec,
				   (char *)Ct + ((size_t)i * ldc + j) * ec, ec);
	free(A);
	free(B);
	free(C);
	free(Ct);
	free(ref);
	free(got);
	free(gf);
	free(rf);
	gpu->free(dA, na * ea);
	gpu->free(dB, nb * ea);
	gpu->free(dC, nc * ec);
}

static void mm_case(int ta, int tb, int M, int N, int K, float alpha,
		    float beta, int pad, int off, uint64_t *st)
{
	mm_case_t(TK_F32, TK_F32, ta, tb, M, N, K, alpha, beta, pad, off, st);
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

/* bf16 A and B (the weights used as they are), bf16 or f32 C, every
 * transpose, odd sizes, padded leading dimensions and 2-byte aligned
 * pointers. */
START_TEST(test_matmul_bf16)
{
	static const int shapes[][3] = {
	    {1, 1, 1},	    {17, 33, 65}, {64, 128, 256},
	    {130, 77, 300}, {3, 1000, 5},
	};
	uint64_t st = 24;

	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (int t = 0; t < 4; t++)
			for (int c = 0; c < 2; c++) {
				int M = shapes[s][0], N = shapes[s][1];
				int K = shapes[s][2], cd = dts[c];

				mm_case_t(TK_BF16, cd, t & 1, t >> 1, M, N, K,
					  1.0f, 0.0f, 0, 0, &st);
				mm_case_t(TK_BF16, cd, t & 1, t >> 1, M, N, K,
					  0.5f, 1.0f, 3, 1, &st);
				mm_case_t(TK_BF16, cd, t & 1, t >> 1, M, N, K,
					  -2.0f, 0.25f, 8, 3, &st);
			}
	/* the loss chunk's GEMMs with bf16 weights: logits in f32, dh in
	 * bf16, the head gradient accumulated in f32 */
	mm_case_t(TK_BF16, TK_F32, 0, 1, 37, 5003, 96, 1.0f, 0.0f, 0, 0, &st);
	mm_case_t(TK_BF16, TK_BF16, 0, 0, 37, 96, 5003, 1.0f, 0.0f, 0, 0, &st);
	mm_case_t(TK_BF16, TK_F32, 1, 0, 5003, 96, 37, 1.0f, 1.0f, 0, 0, &st);
	/* the same shape at every 2-byte alignment (a distinct cache key) */
	for (int off = 0; off < 8; off++)
		mm_case_t(TK_BF16, TK_BF16, 0, 1, 33, 65, 129, 1.0f, 0.0f, 0,
			  off, &st);
}
END_TEST

START_TEST(test_matmul_k0)
{
	uint64_t st = 22;
	int M = 5, N = 7, ldc = 9;
	size_t nc = (size_t)M * ldc;

	for (int t = 0; t < 2; t++) {
		int cd = dts[t];
		size_t ec = tk_dtype_size(cd);
		float *Cf = frand(nc, -1, 1, &st), *gf = hnew(nc * 4);
		void *C = tconv(cd, Cf, nc), *got, *dC;

		/* beta == 0: zeros, even over NaN */
		dC = tnan(cd, nc);
		gpu->matmul(0, 0, M, N, 0, 1.0f, TK_BF16, NULL, 1, NULL, 1,
			    0.0f, cd, dC, ldc);
		got = dget(dC, nc * ec);
		cpu->to_f32(gf, got, cd, nc);
		for (int i = 0; i < M; i++)
			for (int j = 0; j < ldc; j++)
				if (j < N)
					ck_assert_float_eq(gf[i * ldc + j],
							   0.0f);
				else
					ck_assert(isnan(gf[i * ldc + j]));
		free(got);
		/* beta != 0: C scaled (by 2: exact in either dtype) */
		gpu->upload(dC, C, nc * ec);
		gpu->matmul(1, 1, M, N, 0, 1.0f, cd, NULL, 1, NULL, 1, 2.0f, cd,
			    dC, ldc);
		got = dget(dC, nc * ec);
		cpu->to_f32(gf, got, cd, nc);
		cpu->to_f32(Cf, C, cd, nc);
		for (int i = 0; i < M; i++)
			for (int j = 0; j < ldc; j++)
				ck_assert_float_eq(gf[i * ldc + j],
						   j < N
						       ? 2.0f * Cf[i * ldc + j]
						       : Cf[i * ldc + j]);
		gpu_ok("matmul K = 0");
		free(got);
		free(C);
		free(Cf);
		free(gf);
		gpu->free(dC, nc * ec);
	}
}
END_TEST

/* More shapes than the descriptor cache holds, then the first ones again
 * (rebuilt after eviction), and one shape at every pointer alignment. */
START_TEST(test_matmul_cache)
{
	uint64_t st = 23;

	for (int round = 0; round < 2; round++)
		for (int s = 0; s < 80; s++)
			mm_case_t(s % 3 == 2 ? TK_BF16 : TK_F32,
				  s % 3 == 2 && s % 2 ? TK_BF16 : TK_F32, s & 1,
				  (s >> 1) & 1, 3 + s, 5 + 2 * s, 7 + s, 1.0f,
				  0.0f, 0, 0, &st);
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

	for (int t = 0; t < 2; t++)
		for (size_t s = 0; s < 3; s++) {
			int dt = dts[t];
			size_t n = sizes[s], b = n * tk_dtype_size(dt);
			void *y = trand(dt, n, -1, 1, &st);
			void *x = trand(dt, n, -1, 1, &st);
			void *dy = dput(y, b), *dx = dput(x, b), *got;

			cpu->add(dt, y, x, n);
			gpu->add(dt, dy, dx, n);
			got = dget(dy, b);
			check_t("add", dt, got, y, n, 1, 0);
			free(got);
			free(y);
			free(x);
			gpu->free(dy, b);
			gpu->free(dx, b);
		}
	gpu_ok("add");
}
END_TEST

START_TEST(test_bias)
{
	static const int shapes[][2] = {
	    {1, 1}, {1000, 67}, {4096, 1024}, {3, 5000}};
	uint64_t st = 32;

	for (int t = 0; t < 2; t++)
		for (size_t s = 0; s < 4; s++) {
			int dt = dts[t], rows = shapes[s][0], C = shapes[s][1];
			size_t n = (size_t)rows * C, es = tk_dtype_size(dt);
			void *y = trand(dt, n, -1, 1, &st);
			void *b = trand(dt, C, -1, 1, &st);
			float *db = frand(C, -1, 1, &st), *gotf;
			void *got;
			void *d_y = dput(y, n * es), *d_b = dput(b, C * es);
			float *d_db = dput(db, C * sizeof(float));

			/* bwd first: it reads y as dy before fwd changes it;
			 * dbias is f32 in both dtypes */
			cpu->bias_bwd(dt, db, y, rows, C);
			gpu->bias_bwd(dt, d_db, d_y, rows, C);
			gotf = dget(d_db, C * sizeof(float));
			check_close(dt == TK_F32 ? "bias_bwd (f32)"
						 : "bias_bwd (bf16)",
				    gotf, db, C, TOL_ELEM);
			free(gotf);
			cpu->bias_fwd(dt, y, b, rows, C);
			gpu->bias_fwd(dt, d_y, d_b, rows, C);
			got = dget(d_y, n * es);
			check_t("bias_fwd", dt, got, y, n, 1, 0);
			free(got);
			free(y);
			free(b);
			free(db);
			gpu->free(d_y, n * es);
			gpu->free(d_b, C * es);
			gpu->free(d_db, C * sizeof(float));
		}
	gpu_ok("bias");
}
END_TEST

/* n tokens of ids in [0, V) (mode 0), all the same id (mode 1: one row
 * receives every gradient, more than a flush holds), or with -1 ids (mode
 * 2: skipped by the backward, a zero row forward). */
static void emb_case(int dt, int n, int V, int H, int mode, uint64_t *st)
{
	int32_t *tok = hnew((size_t)n * sizeof(int32_t));
	size_t nt = (size_t)V * H, no = (size_t)n * H, es = tk_dtype_size(dt);
	void *table = trand(dt, nt, -1, 1, st),
	     *dout = trand(dt, no, -1, 1, st);
	void *out = hnew(no * es), *d_table, *d_out, *d_dout, *got;
	float *dtable = frand(nt, -1, 1, st), *d_dtable, *gotf;
	int32_t *d_tok;
	char what[64];

	for (int i = 0; i < n; i++)
		tok[i] = mode == 1			? V / 2
			 : mode == 2 && rnd(st, 5) == 0 ? -1
							: (int32_t)rnd(st, V);
	d_tok = dput(tok, (size_t)n * sizeof(int32_t));
	d_table = dput(table, nt * es);
	d_dtable = dput(dtable, nt * sizeof(float));
	d_dout = dput(dout, no * es);
	d_out = tnan(dt, no);
	cpu->embedding_fwd(dt, out, table, tok, n, H);
	gpu->embedding_fwd(dt, d_out, d_table, d_tok, n, H);
	got = dget(d_out, no * es);
	snprintf(what, sizeof(what), "embedding_fwd (%s)", dt_name(dt));
	check_same(what, got, out, no * es); /* a copy: the same bits */
	free(got);
	cpu->embedding_bwd(dt, dtable, dout, tok, n, H, 0, V);
	gpu->embedding_bwd(dt, d_dtable, d_dout, d_tok, n, H, 0, V);
	gotf = dget(d_dtable, nt * sizeof(float));
	/* the same additions in the same order: bit-identical */
	snprintf(what, sizeof(what), "embedding_bwd (%s)", dt_name(dt));
	check_same(what, gotf, dtable, nt * sizeof(float));
	free(gotf);
	/* rows [r0, r0 + nr) only, into a table of nr rows: again the bits
	 * of the CPU */
	{
		int r0 = V / 3, nr = V / 3 + 1;
		size_t np = (size_t)nr * H;
		float *part = frand(np, -1, 1, st),
		      *d_part = dput(part, np * 4);

		cpu->embedding_bwd(dt, part, dout, tok, n, H, r0, nr);
		gpu->embedding_bwd(dt, d_part, d_dout, d_tok, n, H, r0, nr);
		gotf = dget(d_part, np * sizeof(float));
		snprintf(what, sizeof(what), "embedding_bwd rows (%s)",
			 dt_name(dt));
		check_same(what, gotf, part, np * sizeof(float));
		free(gotf);
		free(part);
		gpu->free(d_part, np * sizeof(float));
	}
	gpu_ok("embedding");
	free(tok);
	free(table);
	free(dout);
	free(out);
	free(dtable);
	gpu->free(d_tok, (size_t)n * sizeof(int32_t));
	gpu->free(d_table, nt * es);
	gpu->free(d_dtable, nt * sizeof(float));
	gpu->free(d_dout, no * es);
	gpu->free(d_out, no * es);
}

START_TEST(test_embedding)
{
	uint64_t st = 33;

	for (int t = 0; t < 2; t++) {
		emb_case(dts[t], 1, 1, 1, 0, &st);
		emb_case(dts[t], 37, 11, 67, 0, &st);
		emb_case(dts[t], 300, 1000, 257, 2, &st);
		emb_case(dts[t], 2000, 40, 1000, 0, &st);
		emb_case(dts[t], 9000, 17, 300, 1, &st);
		emb_case(dts[t], 4096, 32000, 512, 2, &st);
	}
}
END_TEST

static void rms_case(int dt, int n, int H, uint64_t *st)
{
	size_t nh = (size_t)n * H, es = tk_dtype_size(dt);
	void *x = trand(dt, nh, -2, 2, st), *w = trand(dt, H, 0.5f, 1.5f, st);
	void *dout = trand(dt, nh, -1, 1, st);
	float *dw = frand(H, -1, 1, st), *rstd = hnew(n * sizeof(float));
	void *out = hnew(nh * es), *dx = hnew(nh * es), *got;
	void *d_x = dput(x, nh * es), *d_w = dput(w, H * es);
	void *d_dout = dput(dout, nh * es);
	float *d_dw = dput(dw, H * sizeof(float)), *d_rstd = dnan(n), *gotf;
	void *d_out = tnan(dt, nh), *d_dx = tnan(dt, nh);

	cpu->rmsnorm_fwd(dt, out, rstd, x, w, n, H, 1e-6f);
	gpu->rmsnorm_fwd(dt, d_out, d_rstd, d_x, d_w, n, H, 1e-6f);
	got = dget(d_out, nh * es);
	check_t("rmsnorm_fwd out", dt, got, out, nh, 0, TOL_ELEM);
	free(got);
	gotf = dget(d_rstd, n * sizeof(float));
	check_close("rmsnorm_fwd rstd", gotf, rstd, n, TOL_ELEM);
	free(gotf);
	/* the backward pass from the same rstd on both sides */
	gpu->upload(d_rstd, rstd, n * sizeof(float));
	cpu->rmsnorm_bwd(dt, dx, dw, dout, x, w, rstd, n, H);
	gpu->rmsnorm_bwd(dt, d_dx, d_dw, d_dout, d_x, d_w, d_rstd, n, H);
	got = dget(d_dx, nh * es);
	check_t("rmsnorm_bwd dx", dt, got, dx, nh, 0, TOL_ELEM);
	free(got);
	gotf = dget(d_dw, H * sizeof(float));
	check_close("rmsnorm_bwd dw", gotf, dw, H, TOL_ELEM);
	free(gotf);
	gpu_ok("rmsnorm");
	free(x);
	free(w);
	free(dout);
	free(dw);
	free(out);
	free(rstd);
	free(dx);
	gpu->free(d_x, nh * es);
	gpu->free(d_w, H * es);
	gpu->free(d_dout, nh * es);
	gpu->free(d_dw, H * sizeof(float));
	gpu->free(d_out, nh * es);
	gpu->free(d_rstd, n * sizeof(float));
	gpu->free(d_dx, nh * es);
}

START_TEST(test_rmsnorm)
{
	uint64_t st = 34;

	for (int t = 0; t < 2; t++) {
		rms_case(dts[t], 1, 1, &st);
		rms_case(dts[t], 37, 67, &st);
		rms_case(dts[t], 128, 4096, &st);
		rms_case(dts[t], 3, 8192, &st);
		rms_case(dts[t], 2048, 96, &st);
	}
}
END_TEST

static void rope_case(int dt, int n, int heads, int hd, uint64_t *st)
{
	int half = hd / 2, max_pos = 50;
	size_t nx = (size_t)n * heads * hd, nt = (size_t)max_pos * half;
	size_t es = tk_dtype_size(dt);
	void *x = trand(dt, nx, -1, 1, st), *got;
	float *c = frand(nt, -1, 1, st), *s = frand(nt, -1, 1, st);
	int32_t *pos = hnew((size_t)n * sizeof(int32_t));
	void *d_x;
	float *d_c, *d_s;
	int32_t *d_pos;

	for (int i = 0; i < n; i++)
		pos[i] = (int32_t)rnd(st, max_pos);
	d_x = dput(x, nx * es);
	d_c = dput(c, (nt ? nt : 1) * sizeof(float));
	d_s = dput(s, (nt ? nt : 1) * sizeof(float));
	d_pos = dput(pos, (size_t)n * sizeof(int32_t));
	cpu->rope_fwd(dt, x, c, s, pos, n, heads, hd);
	gpu->rope_fwd(dt, d_x, d_c, d_s, d_pos, n, heads, hd);
	got = dget(d_x, nx * es);
	check_t("rope_fwd", dt, got, x, nx, 1, 0);
	free(got);
	/* both sides go on from the CPU's result (a 1-ulp bf16 difference
	 * would otherwise compound) */
	gpu->upload(d_x, x, nx * es);
	cpu->rope_bwd(dt, x, c, s, pos, n, heads, hd);
	gpu->rope_bwd(dt, d_x, d_c, d_s, d_pos, n, heads, hd);
	got = dget(d_x, nx * es);
	check_t("rope_bwd", dt, got, x, nx, 1, 0);
	free(got);
	gpu_ok("rope");
	free(x);
	free(c);
	free(s);
	free(pos);
	gpu->free(d_x, nx * es);
	gpu->free(d_c, (nt ? nt : 1) * sizeof(float));
	gpu->free(d_s, (nt ? nt : 1) * sizeof(float));
	gpu->free(d_pos, (size_t)n * sizeof(int32_t));
}

START_TEST(test_rope)
{
	uint64_t st = 35;

	for (int t = 0; t < 2; t++) {
		rope_case(dts[t], 1, 1, 2, &st);
		rope_case(dts[t], 19, 3, 10, &st);
		/* odd hd: the last element is left alone */
		rope_case(dts[t], 7, 2, 7, &st);
		rope_case(dts[t], 512, 8, 128, &st);
	}
}
END_TEST

/* Attention sinks: the forward's rescaled outputs and lse, and the sinks'
 * gradient (summed in another order on the device), against the CPU. */
START_TEST(test_attn_sink)
{
	const int B = 2, T = 33, nh = 4, hd = 64;
	size_t no = (size_t)B * T * nh * hd, nl = (size_t)B * nh * T;
	uint64_t st = 91;

	for (int t = 0; t < 2; t++) {
		int dt = dts[t];
		size_t es = tk_dtype_size(dt);
		void *out = trand(dt, no, -1, 1, &st);
		void *dout = trand(dt, no, -1, 1, &st);
		float *lse = frand(nl, -2, 3, &st), *sk = frand(nh, -1, 2, &st);
		float ds[4] = {0.5f, 0, 0, -1}, *got;
		void *d_out = dput(out, no * es), *d_dout = dput(dout, no * es);
		float *d_lse = dput(lse, nl * 4), *d_sk = dput(sk, nh * 4);
		float *d_ds = dput(ds, sizeof(ds));
		void *gout;

		cpu->attn_sink_fwd(dt, out, lse, sk, B, T, nh, hd);
		gpu->attn_sink_fwd(dt, d_out, d_lse, d_sk, B, T, nh, hd);
		gout = dget(d_out, no * es);
		check_t("attn_sink_fwd out", dt, gout, out, no, 0, TOL_ELEM);
		free(gout);
		got = dget(d_lse, nl * 4);
		check_close("attn_sink_fwd lse", got, lse, nl, TOL_ELEM);
		free(got);
		cpu->attn_sink_bwd(dt, ds, dout, out, lse, sk, B, T, nh, hd);
		gpu->attn_sink_bwd(dt, d_ds, d_dout, d_out, d_lse, d_sk, B, T,
				   nh, hd);
		got = dget(d_ds, sizeof(ds));
		check_close("attn_sink_bwd", got, ds, 4, 1e-4);
		free(got);
		gpu_ok("attn_sink");
		free(out), free(dout), free(lse), free(sk);
		gpu->free(d_out, no * es);
		gpu->free(d_dout, no * es);
		gpu->free(d_lse, nl * 4);
		gpu->free(d_sk, nh * 4);
		gpu->free(d_ds, sizeof(ds));
	}
}
END_TEST

/* ---- decode attention ---------------------------------------------------
 */

/* attention_decode's f32 out and lse: the attention tests' tolerance
 * (test_cuda_optim_attn.c); bf16 out within 1 ulp (check_t), tighter than
 * their 1e-2. */
#define TOL_ATT 1e-4

/* One layer's KV cache on both backends, the same contents: kc, vc [rows,
 * ctx, nkv * hd] of dt. */
typedef struct {
	int dt, nh, nkv, hd, rows, ctx, window;
	size_t es, nc;	 /* element size, elements of kc (and of vc) */
	void *kc, *vc;	 /* the CPU's (host) */
	void *gkc, *gvc; /* the GPU's */
	char name[64];
} dec_cache;

/* Random contents (earlier tokens of each row) on both backends. */
static void dec_open(dec_cache *c, int dt, int nh, int nkv, int hd, int rows,
		     int ctx, int window, uint64_t *st)
{
	c->dt = dt;
	c->nh = nh;
	c->nkv = nkv;
	c->hd = hd;
	c->rows = rows;
	c->ctx = ctx;
	c->window = window;
	c->es = tk_dtype_size(dt);
	c->nc = (size_t)rows * ctx * nkv * hd;
	c->kc = trand(dt, c->nc, -2, 2, st);
	c->vc = trand(dt, c->nc, -1, 1, st);
	c->gkc = dput(c->kc, c->nc * c->es);
	c->gvc = dput(c->vc, c->nc * c->es);
	snprintf(c->name, sizeof(c->name),
		 "nh %d nkv %d hd %d rows %d ctx %d window %d", nh, nkv, hd,
		 rows, ctx, window);
}

static void dec_close(dec_cache *c)
{
	free(c->kc);
	free(c->vc);
	gpu->free(c->gkc, c->nc * c->es);
	gpu->free(c->gvc, c->nc * c->es);
}

/* One step of generation on both backends: n new tokens (k, v, q random),
 * token i at row seq[i], position pos[i], stored (kv_store) then attending
 * (attention_decode). The caches must stay byte for byte the same; out and
 * lse (poisoned with NaN on the device) within tolerance. */
static void dec_step(dec_cache *c, const char *step, const int32_t *seq,
		     const int32_t *pos, int n, uint64_t *st)
{
	const int dt = c->dt, nh = c->nh, nkv = c->nkv, hd = c->hd;
	const int ctx = c->ctx, window = c->window;
	const size_t es = c->es, nq = (size_t)n * nh * hd;
	const size_t nk = (size_t)n * nkv * hd, nl = (size_t)nh * n;
	const float scale = 1.0f / sqrtf((float)hd);
	void *q = trand(dt, nq, -2, 2, st), *k = trand(dt, nk, -2, 2, st);
	void *v = trand(dt, nk, -1, 1, st), *out = hnew(nq * es), *got;
	float *lse = hnew(nl * sizeof(float)), *gotf;
	void *gq = dput(q, nq * es), *gk = dput(k, nk * es);
	void *gv = dput(v, nk * es), *gout = tnan(dt, nq);
	int32_t *gseq = dput(seq, (size_t)n * 4),
		*gpos = dput(pos, (size_t)n * 4);
	float *glse = dnan(nl);
	char w[200], wo[100]; /* wo: check_t's what, under its 160 */

	snprintf(w, sizeof(w), "%s, %s", c->name, step);
	cpu->kv_store(dt, c->kc, c->vc, k, v, seq, pos, n, nkv, hd, ctx);
	gpu->kv_store(dt, c->gkc, c->gvc, gk, gv, gseq, gpos, n, nkv, hd, ctx);
	gpu_ok(w);
	got = dget(c->gkc, c->nc * es);
	ck_assert_msg(memcmp(got, c->kc, c->nc * es) == 0,
		      "kv_store kc (%s) %s: not bit-identical", dt_name(dt), w);
	free(got);
	got = dget(c->gvc, c->nc * es);
	ck_assert_msg(memcmp(got, c->vc, c->nc * es) == 0,
		      "kv_store vc (%s) %s: not bit-identical", dt_name(dt), w);
	free(got);

	cpu->attention_decode(dt, out, lse, q, c->kc, c->vc, seq, pos, n, nh,
			      nkv, hd, ctx, window, scale);
	gpu->attention_decode(dt, gout, glse, gq, c->gkc, c->gvc, gseq, gpos, n,
			      nh, nkv, hd, ctx, window, scale);
	gpu_ok(w);
	got = dget(gout, nq * es);
	snprintf(wo, sizeof(wo), "attention_decode out, %s, %s", c->name, step);
	check_t(wo, dt, got, out, nq, 0, TOL_ATT);
	free(got);
	gotf = dget(glse, nl * sizeof(float));
	snprintf(w, sizeof(w), "attention_decode lse (%s), %s, %s", dt_name(dt),
		 c->name, step);
	check_close(w, gotf, lse, nl, TOL_ATT);
	free(gotf);

	free(q), free(k), free(v), free(out), free(lse);
	gpu->free(gq, nq * es);
	gpu->free(gk, nk * es);
	gpu->free(gv, nk * es);
	gpu->free(gout, nq * es);
	gpu->free(gseq, (size_t)n * 4);
	gpu->free(gpos, (size_t)n * 4);
	gpu->free(glse, nl * sizeof(float));
}

/* rows 3, ctx 64: a prefill of row 0 (20 queries at positions 0..19),
 * then decode steps of one query a row, at positions that reach the
 * cache's end (63), a row's start (0: the query sees only itself) and
 * the window's edge. */
static void dec_case(int dt, int nh, int nkv, int hd, int window, uint64_t seed)
{
	static const int32_t s1[3] = {0, 1, 2}, p1[3] = {20, 45, 63};
	static const int32_t s2[3] = {2, 0, 1}, p2[3] = {0, 21, 6};
	static const int32_t s3[2] = {1, 2}, p3[2] = {7, 1};
	int32_t seq[20], pos[20];
	uint64_t st = seed;
	dec_cache c;

	for (int i = 0; i < 20; i++)
		seq[i] = 0, pos[i] = i;
	dec_open(&c, dt, nh, nkv, hd, 3, 64, window, &st);
	dec_step(&c, "prefill row 0 at 0..19", seq, pos, 20, &st);
	dec_step(&c, "decode at 20, 45, 63", s1, p1, 3, &st);
	dec_step(&c, "decode at 0, 21, 6", s2, p2, 3, &st);
	dec_step(&c, "decode of two rows at 7, 1", s3, p3, 2, &st);
	dec_close(&c);
}

/* A long prompt: 600 queries of row 1 at positions 0..599 (blocks with
 * up to 600 keys), then a decode step of both rows. */
static void dec_long(int dt, int nh, int nkv, int hd, int window, uint64_t seed)
{
	const int n = 600;
	static const int32_t s1[2] = {1, 0}, p1[2] = {600, 599};
	int32_t *seq = hnew((size_t)n * 4), *pos = hnew((size_t)n * 4);
	uint64_t st = seed;
	dec_cache c;

	for (int i = 0; i < n; i++)
		seq[i] = 1, pos[i] = i;
	dec_open(&c, dt, nh, nkv, hd, 2, 608, window, &st);
	dec_step(&c, "prefill row 1 at 0..599", seq, pos, n, &st);
	dec_step(&c, "decode at 600, 599", s1, p1, 2, &st);
	dec_close(&c);
	free(seq);
	free(pos);
}

/* kv_store bit for bit and attention_decode within TOL_ATT (bf16: 1 ulp)
 * against the CPU: GQA (nh 8, nkv 2) at hd 64, 128 and an odd 40, MQA at
 * the largest hd (TK_ATT_DEC_MAX_HD), MHA at hd 1, windows 0 and 7 (and a
 * longer one over the long prompt). */
START_TEST(test_attention_decode)
{
	size_t m0 = gpu->mem_current();

	for (int t = 0; t < 2; t++) {
		int dt = dts[t];

		for (int wi = 0; wi < 2; wi++) {
			int window = wi ? 7 : 0;

			dec_case(dt, 8, 2, 64, window, 201 + wi);
			dec_case(dt, 8, 2, 128, window, 203 + wi);
			dec_case(dt, 8, 2, 40, window, 205 + wi);
		}
		dec_case(dt, 4, 1, TK_ATT_DEC_MAX_HD, 0, 207);
		dec_case(dt, 2, 2, 1, 7, 208);
		dec_long(dt, 8, 2, 64, 0, 209);
		dec_long(dt, 8, 2, 128, 100, 210);
	}
	ck_assert_uint_eq(gpu->mem_current(), m0);
}
END_TEST

/* gpt-oss's clamped gated activation against the CPU, across both clamps,
 * in place too. */
START_TEST(test_glu_clamp)
{
	const size_t n = 301;
	const int I = 96;
	size_t m = n * I;
	uint64_t st = 63;

	for (int t = 0; t < 2; t++) {
		int dt = dts[t];
		size_t es = tk_dtype_size(dt);
		void *gu = trand(dt, 2 * m, -10, 10, &st);
		void *d = trand(dt, m, -1, 1, &st);
		void *out = hnew(m * es), *dgu = hnew(2 * m * es), *got;
		void *d_gu = dput(gu, 2 * m * es), *d_d = dput(d, m * es);
		void *d_out = tnan(dt, m), *d_dgu = tnan(dt, 2 * m);

		cpu->glu_clamp_fwd(dt, out, gu, n, I, 1.702f, 7.0f);
		gpu->glu_clamp_fwd(dt, d_out, d_gu, n, I, 1.702f, 7.0f);
		got = dget(d_out, m * es);
		check_t("glu_clamp_fwd", dt, got, out, m, 0, TOL_ELEM);
		free(got);
		cpu->glu_clamp_bwd(dt, dgu, d, gu, n, I, 1.702f, 7.0f);
		gpu->glu_clamp_bwd(dt, d_dgu, d_d, d_gu, n, I, 1.702f, 7.0f);
		got = dget(d_dgu, 2 * m * es);
		check_t("glu_clamp_bwd", dt, got, dgu, 2 * m, 0, TOL_ELEM);
		free(got);
		gpu->glu_clamp_bwd(dt, d_gu, d_d, d_gu, n, I, 1.702f, 7.0f);
		got = dget(d_gu, 2 * m * es);
		check_t("glu_clamp_bwd in place", dt, got, dgu, 2 * m, 0,
			TOL_ELEM);
		free(got);
		gpu_ok("glu_clamp");
		free(gu), free(d), free(out), free(dgu);
		gpu->free(d_gu, 2 * m * es);
		gpu->free(d_d, m * es);
		gpu->free(d_out, m * es);
		gpu->free(d_dgu, 2 * m * es);
	}
}
END_TEST

/* ---- a mixture of experts ------------------------------------------------ */

/* Routing (both routers), the sort, gather, combine and their backward,
 * against the CPU: the same experts and slot order exactly, the values
 * within an element's rounding (the device's expf may differ by an ulp). */
START_TEST(test_moe)
{
	const int N = 37, E = 8, H = 48;
	uint64_t st = 77;

	for (int mode = 0; mode < 2; mode++)
		for (int t = 0; t < 2; t++) {
			int dt = dts[t], k = mode ? 3 : 2, M = N * k;
			size_t es = tk_dtype_size(dt);
			float *lg = frand((size_t)N * E, -3, 3, &st);
			float *extra = frand((size_t)E, -1, 1, &st);
			float *dw = frand((size_t)M, -1, 1, &st);
			void *x = trand(dt, (size_t)N * H, -2, 2, &st);
			void *y = trand(dt, (size_t)M * H, -2, 2, &st);
			void *dout = trand(dt, (size_t)N * H, -1, 1, &st);
			int32_t *idx = hnew((size_t)M * 4),
				*ord = hnew((size_t)M * 4);
			int32_t *inv = hnew((size_t)M * 4),
				*cnt = hnew((size_t)E * 4);
			float *w = hnew((size_t)M * 4),
			      *dl = hnew((size_t)N * E * 4);
			float *ps = hnew((size_t)E * 4),
			      *dwc = hnew((size_t)M * 4);
			void *xg = hnew((size_t)M * H * es),
			     *out = hnew((size_t)N * H * es);
			void *dy = hnew((size_t)M * H * es),
			     *dx = hnew((size_t)N * H * es);
			void *d_lg = dput(lg, (size_t)N * E * 4);
			void *d_ex = dput(extra, (size_t)E * 4),
			     *d_dw = dput(dw, (size_t)M * 4);
			void *d_x = dput(x, (size_t)N * H * es),
			     *d_y = dput(y, (size_t)M * H * es);
			void *d_dout = dput(dout, (size_t)N * H * es);
			void *d_idx = dnan((size_t)M), *d_w = dnan((size_t)M);
			void *d_ord = dnan((size_t)M), *d_inv = dnan((size_t)M);
			void *d_cnt = dnan((size_t)E),
			     *d_dl = dnan((size_t)N * E);
			void *d_ps = dnan((size_t)E), *d_dwc = dnan((size_t)M);
			void *d_xg = tnan(dt, (size_t)M * H),
			     *d_out = tnan(dt, (size_t)N * H);
			void *d_dy = tnan(dt, (size_t)M * H),
			     *d_dx = tnan(dt, (size_t)N * H);
			void *got;

			cpu->moe_route(mode, 1, dt, lg, N, E, k, idx, w);
			gpu->moe_route(mode, 1, dt, d_lg, N, E, k, d_idx, d_w);
			got = dget(d_idx, (size_t)M * 4);
			check_same("moe_route idx", got, idx, (size_t)M * 4);
			free(got);
			got = dget(d_w, (size_t)M * 4);
			check_close("moe_route w", got, w, (size_t)M, TOL_ELEM);
			free(got);
			cpu->moe_route_bwd(mode, 1, lg, idx, dw, extra, N, E, k,
					   dl);
			gpu->moe_route_bwd(mode, 1, d_lg, d_idx, d_dw, d_ex, N,
					   E, k, d_dl);
			got = dget(d_dl, (size_t)N * E * 4);
			check_close("moe_route_bwd", got, dl, (size_t)N * E,
				    TOL_ELEM);
			free(got);
			cpu->moe_prob_sum(lg, N, E, ps);
			gpu->moe_prob_sum(d_lg, N, E, d_ps);
			got = dget(d_ps, (size_t)E * 4);
			check_close("moe_prob_sum", got, ps, (size_t)E,
				    TOL_ELEM);
			free(got);
			cpu->moe_sort(idx, N, E, k, ord, inv, cnt);
			gpu->moe_sort(d_idx, N, E, k, d_ord, d_inv, d_cnt);
			got = dget(d_ord, (size_t)M * 4);
			check_same("moe_sort order", got, ord, (size_t)M * 4);
			free(got);
			got = dget(d_inv, (size_t)M * 4);
			check_same("moe_sort inv", got, inv, (size_t)M * 4);
			free(got);
			got = dget(d_cnt, (size_t)E * 4);
			check_same("moe_sort counts", got, cnt, (size_t)E * 4);
			free(got);
			cpu->moe_gather(dt, xg, x, ord, M, k, H);
			gpu->moe_gather(dt, d_xg, d_x, d_ord, M, k, H);
			got = dget(d_xg, (size_t)M * H * es);
			check_t("moe_gather", dt, got, xg, (size_t)M * H, 1, 0);
			free(got);
			cpu->moe_combine(dt, out, y, inv, w, N, k, H);
			gpu->moe_combine(dt, d_out, d_y, d_inv, d_w, N, k, H);
			got = dget(d_out, (size_t)N * H * es);
			check_t("moe_combine", dt, got, out, (size_t)N * H, 0,
				TOL_ELEM);
			free(got);
			cpu->moe_combine_bwd(dt, dy, dwc, dout, y, inv, w, N, k,
					     H);
			gpu->moe_combine_bwd(dt, d_dy, d_dwc, d_dout, d_y,
					     d_inv, d_w, N, k, H);
			got = dget(d_dy, (size_t)M * H * es);
			check_t("moe_combine_bwd dy", dt, got, dy,
				(size_t)M * H, 0, TOL_ELEM);
			free(got);
			got = dget(d_dwc, (size_t)M * 4);
			check_close("moe_combine_bwd dw", got, dwc, (size_t)M,
				    1e-5);
			free(got);
			cpu->moe_scatter(dt, dx, y, inv, N, k, H);
			gpu->moe_scatter(dt, d_dx, d_y, d_inv, N, k, H);
			got = dget(d_dx, (size_t)N * H * es);
			check_t("moe_scatter", dt, got, dx, (size_t)N * H, 0,
				TOL_ELEM);
			free(got);
			gpu_ok("moe");
			free(lg), free(extra), free(dw), free(x), free(y);
			free(dout), free(idx), free(ord), free(inv), free(cnt);
			free(w), free(dl), free(ps), free(dwc), free(xg);
			free(out), free(dy), free(dx);
			gpu->free(d_lg, (size_t)N * E * 4);
			gpu->free(d_ex, (size_t)E * 4);
			gpu->free(d_dw, (size_t)M * 4);
			gpu->free(d_x, (size_t)N * H * es);
			gpu->free(d_y, (size_t)M * H * es);
			gpu->free(d_dout, (size_t)N * H * es);
			gpu->free(d_idx, (size_t)M * 4);
			gpu->free(d_w, (size_t)M * 4);
			gpu->free(d_ord, (size_t)M * 4);
			gpu->free(d_inv, (size_t)M * 4);
			gpu->free(d_cnt, (size_t)E * 4);
			gpu->free(d_dl, (size_t)N * E * 4);
			gpu->free(d_ps, (size_t)E * 4);
			gpu->free(d_dwc, (size_t)M * 4);
			gpu->free(d_xg, (size_t)M * H * es);
			gpu->free(d_out, (size_t)N * H * es);
			gpu->free(d_dy, (size_t)M * H * es);
			gpu->free(d_dx, (size_t)N * H * es);
		}
}
END_TEST

START_TEST(test_swiglu)
{
	size_t sizes[] = {1, 999, 1 << 20};
	uint64_t st = 36;

	for (int t = 0; t < 2; t++)
		for (size_t k = 0; k < 3; k++) {
			int dt = dts[t];
			size_t n = sizes[k], b = n * tk_dtype_size(dt);
			void *g = trand(dt, n, -20, 20, &st);
			void *u = trand(dt, n, -2, 2, &st);
			void *d = trand(dt, n, -1, 1, &st), *out = hnew(b);
			void *dg = hnew(b), *du = hnew(b), *got;
			void *d_g = dput(g, b), *d_u = dput(u, b);
			void *d_d = dput(d, b), *d_out = tnan(dt, n);
			void *d_dg = tnan(dt, n), *d_du = tnan(dt, n);

			cpu->swiglu_fwd(dt, out, g, u, n);
			gpu->swiglu_fwd(dt, d_out, d_g, d_u, n);
			got = dget(d_out, b);
			check_t("swiglu_fwd", dt, got, out, n, 0, TOL_ELEM);
			free(got);
			cpu->swiglu_bwd(dt, dg, du, d, g, u, n);
			gpu->swiglu_bwd(dt, d_dg, d_du, d_d, d_g, d_u, n);
			got = dget(d_dg, b);
			check_t("swiglu_bwd dgate", dt, got, dg, n, 0,
				TOL_ELEM);
			free(got);
			got = dget(d_du, b);
			check_t("swiglu_bwd dup", dt, got, du, n, 0, TOL_ELEM);
			free(got);
			/* in place: dgate over gate, dup over up */
			gpu->swiglu_bwd(dt, d_g, d_u, d_d, d_g, d_u, n);
			got = dget(d_g, b);
			check_t("swiglu_bwd dgate in place", dt, got, dg, n, 0,
				TOL_ELEM);
			free(got);
			got = dget(d_u, b);
			check_t("swiglu_bwd dup in place", dt, got, du, n, 0,
				TOL_ELEM);
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

/* ---- fused ops ---------------------------------------------------------- */

/* add_rmsnorm_fwd and rmsnorm_bwd_add as rms_case: the added x bit for bit
 * (one rounded sum per element on both sides), the rest within the
 * rmsnorm tolerances; the backward from the CPU's rstd. */
static void fused_norm_case(int dt, int n, int H, uint64_t *st)
{
	size_t nh = (size_t)n * H, es = tk_dtype_size(dt);
	void *x = trand(dt, nh, -2, 2, st), *r = trand(dt, nh, -2, 2, st);
	void *w = trand(dt, H, 0.5f, 1.5f, st);
	void *dout = trand(dt, nh, -1, 1, st), *dres = trand(dt, nh, -1, 1, st);
	float *dw = frand(H, -1, 1, st), *rstd = hnew(n * sizeof(float));
	void *out = hnew(nh * es), *got;
	void *d_x = dput(x, nh * es), *d_r = dput(r, nh * es);
	void *d_w = dput(w, H * es), *d_dout = dput(dout, nh * es);
	void *d_dres = dput(dres, nh * es), *d_out = tnan(dt, nh);
	float *d_dw = dput(dw, H * sizeof(float)), *d_rstd = dnan(n), *gotf;

	cpu->add_rmsnorm_fwd(dt, x, r, out, rstd, w, n, H, 1e-6f);
	gpu->add_rmsnorm_fwd(dt, d_x, d_r, d_out, d_rstd, d_w, n, H, 1e-6f);
	got = dget(d_x, nh * es);
	check_same(dt == TK_F32 ? "add_rmsnorm_fwd x (f32)"
				: "add_rmsnorm_fwd x (bf16)",
		   got, x, nh * es);
	free(got);
	got = dget(d_out, nh * es);
	check_t("add_rmsnorm_fwd out", dt, got, out, nh, 0, TOL_ELEM);
	free(got);
	gotf = dget(d_rstd, n * sizeof(float));
	check_close("add_rmsnorm_fwd rstd", gotf, rstd, n, TOL_ELEM);
	free(gotf);
	/* the backward from the same x and rstd on both sides */
	gpu->upload(d_x, x, nh * es);
	gpu->upload(d_rstd, rstd, n * sizeof(float));
	cpu->rmsnorm_bwd_add(dt, dres, dw, dout, x, w, rstd, n, H);
	gpu->rmsnorm_bwd_add(dt, d_dres, d_dw, d_dout, d_x, d_w, d_rstd, n, H);
	got = dget(d_dres, nh * es);
	check_t("rmsnorm_bwd_add dres", dt, got, dres, nh, 0, TOL_ELEM);
	free(got);
	gotf = dget(d_dw, H * sizeof(float));
	check_close("rmsnorm_bwd_add dw", gotf, dw, H, TOL_ELEM);
	free(gotf);
	gpu_ok("fused norm");
	free(x);
	free(r);
	free(w);
	free(dout);
	free(dres);
	free(dw);
	free(rstd);
	free(out);
	gpu->free(d_x, nh * es);
	gpu->free(d_r, nh * es);
	gpu->free(d_w, H * es);
	gpu->free(d_dout, nh * es);
	gpu->free(d_dres, nh * es);
	gpu->free(d_out, nh * es);
	gpu->free(d_dw, H * sizeof(float));
	gpu->free(d_rstd, n * sizeof(float));
}

START_TEST(test_fused_norm)
{
	uint64_t st = 38;

	for (int t = 0; t < 2; t++) {
		fused_norm_case(dts[t], 1, 1, &st);
		fused_norm_case(dts[t], 37, 67, &st);
		fused_norm_case(dts[t], 128, 4096, &st);
		fused_norm_case(dts[t], 3, 8192, &st);
		fused_norm_case(dts[t], 2048, 96, &st);
		fused_norm_case(dts[t], 300, 1001, &st);
	}
}
END_TEST

/* qknorm_rope_fwd / bwd as rms_case and rope_case: with w within the
 * rmsnorm tolerances (the row sums' order), without w (RoPE alone, out of
 * place and in place) bit for bit; the backward from the CPU's rstd. rd:
 * the rotated dims of each head (GPT-NeoX's partial rotary when < hd,
 * tables [max_pos, rd / 2]); rd 0 passes NULL tables and pos to both. */
static void qk_case(int dt, int n, int heads, int hd, int rd, uint64_t *st)
{
	int half = rd / 2, max_pos = 50;
	size_t nx = (size_t)n * heads * hd, nr = (size_t)n * heads;
	size_t nt = (size_t)max_pos * (half ? half : 1), es = tk_dtype_size(dt);
	void *x = trand(dt, nx, -2, 2, st), *w = trand(dt, hd, 0.5f, 1.5f, st);
	void *dout = trand(dt, nx, -1, 1, st);
	float *c = frand(nt, -1, 1, st), *s = frand(nt, -1, 1, st);
	float *dw = frand(hd, -1, 1, st), *rstd = hnew(nr * sizeof(float));
	int32_t *pos = hnew((size_t)n * sizeof(int32_t));
	void *out = hnew(nx * es), *dx = hnew(nx * es), *got;
	void *d_x, *d_w, *d_dout, *d_out, *d_dx;
	float *d_c, *d_s, *d_dw, *d_rstd, *gotf, *hc = c, *hs = s, *dc, *ds;
	int32_t *d_pos, *hpos = pos, *dpos;

	/* packed documents: positions restart at random points */
	for (int i = 0, p = 0; i < n; i++, p++) {
		if (p >= max_pos || rnd(st, 9) == 0)
			p = 0;
		pos[i] = p;
	}
	d_x = dput(x, nx * es);
	d_w = dput(w, hd * es);
	d_dout = dput(dout, nx * es);
	d_c = dput(c, nt * sizeof(float));
	d_s = dput(s, nt * sizeof(float));
	d_pos = dput(pos, (size_t)n * sizeof(int32_t));
	d_dw = dput(dw, hd * sizeof(float));
	d_rstd = dnan(nr);
	d_out = tnan(dt, nx);
	d_dx = tnan(dt, nx);
	dc = d_c;
	ds = d_s;
	dpos = d_pos;
	if (!rd) { /* neither backend reads them */
		hc = hs = dc = ds = NULL;
		hpos = dpos = NULL;
	}

	/* with w */
	cpu->qknorm_rope_fwd(dt, out, rstd, x, w, hc, hs, hpos, n, heads, hd,
			     rd, 1e-6f);
	gpu->qknorm_rope_fwd(dt, d_out, d_rstd, d_x, d_w, dc, ds, dpos, n,
			     heads, hd, rd, 1e-6f);
	got = dget(d_out, nx * es);
	check_t("qknorm_rope_fwd out", dt, got, out, nx, 0, TOL_ELEM);
	free(got);
	gotf = dget(d_rstd, nr * sizeof(float));
	check_close("qknorm_rope_fwd rstd", gotf, rstd, nr, TOL_ELEM);
	free(gotf);
	gpu->upload(d_rstd, rstd, nr * sizeof(float));
	cpu->qknorm_rope_bwd(dt, dx, dw, dout, x, w, rstd, hc, hs, hpos, n,
			     heads, hd, rd);
	gpu->qknorm_rope_bwd(dt, d_dx, d_dw, d_dout, d_x, d_w, d_rstd, dc, ds,
			     dpos, n, heads, hd, rd);
	got = dget(d_dx, nx * es);
	check_t("qknorm_rope_bwd dx", dt, got, dx, nx, 0, TOL_ELEM);
	free(got);
	gotf = dget(d_dw, hd * sizeof(float));
	check_close("qknorm_rope_bwd dw", gotf, dw, hd, TOL_ELEM);
	free(gotf);
	got = dget(d_dout, nx * es); /* dout is only read */
	check_same("qknorm_rope_bwd dout", got, dout, nx * es);
	free(got);

	/* w NULL: out of place, then in place over x; rstd untouched */
	gpu->upload(d_rstd, rstd, nr * sizeof(float));
	cpu->qknorm_rope_fwd(dt, out, NULL, x, NULL, hc, hs, hpos, n, heads, hd,
			     rd, 1e-6f);
	gpu->qknorm_rope_fwd(dt, d_out, d_rstd, d_x, NULL, dc, ds, dpos, n,
			     heads, hd, rd, 1e-6f);
	got = dget(d_out, nx * es);
	check_t("qknorm_rope_fwd w NULL", dt, got, out, nx, 1, 0);
	free(got);
	gotf = dget(d_rstd, nr * sizeof(float));
	check_same("qknorm_rope_fwd rstd untouched", gotf, rstd,
		   nr * sizeof(float));
	free(gotf);
	gpu->qknorm_rope_fwd(dt, d_x, NULL, d_x, NULL, dc, ds, dpos, n, heads,
			     hd, rd, 1e-6f);
	got = dget(d_x, nx * es);
	check_t("qknorm_rope_fwd in place", dt, got, out, nx, 1, 0);
	free(got);
	cpu->qknorm_rope_bwd(dt, dx, NULL, dout, NULL, NULL, NULL, hc, hs, hpos,
			     n, heads, hd, rd);
	gpu->qknorm_rope_bwd(dt, d_dx, NULL, d_dout, NULL, NULL, NULL, dc, ds,
			     dpos, n, heads, hd, rd);
	got = dget(d_dx, nx * es);
	check_t("qknorm_rope_bwd w NULL", dt, got, dx, nx, 1, 0);
	free(got);
	gpu->qknorm_rope_bwd(dt, d_dout, NULL, d_dout, NULL, NULL, NULL, dc, ds,
			     dpos, n, heads, hd, rd);
	got = dget(d_dout, nx * es);
	check_t("qknorm_rope_bwd in place", dt, got, dx, nx, 1, 0);
	free(got);
	gpu_ok("qknorm_rope");
	free(x);
	free(w);
	free(dout);
	free(c);
	free(s);
	free(dw);
	free(rstd);
	free(pos);
	free(out);
	free(dx);
	gpu->free(d_x, nx * es);
	gpu->free(d_w, hd * es);
	gpu->free(d_dout, nx * es);
	gpu->free(d_c, nt * sizeof(float));
	gpu->free(d_s, nt * sizeof(float));
	gpu->free(d_pos, (size_t)n * sizeof(int32_t));
	gpu->free(d_dw, hd * sizeof(float));
	gpu->free(d_rstd, nr * sizeof(float));
	gpu->free(d_out, nx * es);
	gpu->free(d_dx, nx * es);
}

START_TEST(test_qknorm_rope)
{
	uint64_t st = 39;

	for (int t = 0; t < 2; t++) {
		qk_case(dts[t], 1, 1, 2, 2, &st);
		qk_case(dts[t], 19, 3, 10, 10, &st);
		/* odd hd: the last value normalized, not rotated */
		qk_case(dts[t], 7, 2, 7, 7, &st);
		qk_case(dts[t], 33, 5, 16, 16, &st);
		qk_case(dts[t], 300, 4, 64, 64, &st);
		qk_case(dts[t], 512, 8, 128, 128, &st);
		/* hd past a warp's pairs and a dw block */
		qk_case(dts[t], 9, 2, 200, 200, &st);
		/* GPT-NeoX's partial rotary: rd = hd/2, hd/4 (Pythia), 0,
		 * with and without w */
		qk_case(dts[t], 33, 5, 16, 8, &st);
		qk_case(dts[t], 33, 5, 16, 4, &st);
		qk_case(dts[t], 33, 5, 16, 0, &st);
		qk_case(dts[t], 300, 4, 64, 32, &st);
		qk_case(dts[t], 300, 4, 64, 16, &st);
		qk_case(dts[t], 300, 4, 64, 0, &st);
		qk_case(dts[t], 512, 8, 128, 64, &st);
		qk_case(dts[t], 512, 8, 128, 32, &st);
		qk_case(dts[t], 19, 3, 80, 20, &st);
		/* pass-through past a warp's lanes and a dw block */
		qk_case(dts[t], 9, 2, 200, 100, &st);
		qk_case(dts[t], 9, 2, 200, 50, &st);
		qk_case(dts[t], 9, 2, 200, 0, &st);
	}
}
END_TEST

/* One linear_bias on both backends, as mm_case_t: C NaN on the device
 * (every element of M x N written, the padding columns never), the error
 * relative to max |C|; A, B and bias start off elements into their
 * buffers (alignment). */
static void lb_case(int ab, int cd, int M, int N, int K, int pad, int off,
		    int boff, uint64_t *st)
{
	int lda = K + pad, ldb = K + pad, ldc = N + pad;
	size_t na = (size_t)M * lda + off, nb = (size_t)N * ldb + off;
	size_t nbias = (size_t)N + boff, nc = (size_t)M * ldc;
	size_t ea = tk_dtype_size(ab), ec = tk_dtype_size(cd);
	float *Cn = hnew(nc * sizeof(float)), *gf, *rf;
	void *A = trand(ab, na, -1, 1, st), *B = trand(ab, nb, -1, 1, st);
	void *bias = trand(ab, nbias, -1, 1, st);
	void *Ct, *ref, *got, *dA, *dB, *dbias, *dC;
	double num = 0, den = 0;
	double tol =
	    ab == TK_BF16 && cd == TK_F32 ? TOL_GEMM_BF16_F32 : TOL_GEMM;
	char what[160];

	for (size_t i = 0; i < nc; i++)
		Cn[i] = NAN;
	Ct = tconv(cd, Cn, nc);
	ref = tconv(cd, Cn, nc);
	dA = dput(A, na * ea);
	dB = dput(B, nb * ea);
	dbias = dput(bias, nbias * ea);
	dC = dput(Ct, nc * ec);
	cpu->linear_bias(M, N, K, ab, (char *)A + off * ea, lda,
			 (char *)B + off * ea, ldb, (char *)bias + boff * ea,
			 cd, ref, ldc);
	gpu->linear_bias(M, N, K, ab, (char *)dA + off * ea, lda,
			 (char *)dB + off * ea, ldb, (char *)dbias + boff * ea,
			 cd, dC, ldc);
	got = dget(dC, nc * ec);
	snprintf(what, sizeof(what),
		 "linear_bias %s->%s M=%d N=%d K=%d pad=%d off=%d boff=%d",
		 dt_name(ab), dt_name(cd), M, N, K, pad, off, boff);
	gpu_ok(what);
	gf = hnew(nc * sizeof(float));
	rf = hnew(nc * sizeof(float));
	cpu->to_f32(gf, got, cd, nc);
	cpu->to_f32(rf, ref, cd, nc);
	for (int i = 0; i < M; i++)
		for (int j = 0; j < N; j++) {
			double g = gf[(size_t)i * ldc + j];
			double r = rf[(size_t)i * ldc + j];
			ck_assert_msg(!isnan(g) && !isnan(r),
				      "%s: NaN at %d,%d", what, i, j);
			if (fabs(g - r) > num)
				num = fabs(g - r);
			if (fabs(r) > den)
				den = fabs(r);
		}
	ck_assert_msg(num <= tol * den, "%s: error %g of max |C| %g", what, num,
		      den);
	for (int i = 0; i < M; i++)
		for (int j = N; j < ldc; j++)
			check_same(what,
				   (char *)got + ((size_t)i * ldc + j) * ec,
				   (char *)Ct + ((size_t)i * ldc + j) * ec, ec);
	free(A);
	free(B);
	free(bias);
	free(Cn);
	free(Ct);
	free(ref);
	free(got);
	free(gf);
	free(rf);
	gpu->free(dA, na * ea);
	gpu->free(dB, nb * ea);
	gpu->free(dbias, nbias * ea);
	gpu->free(dC, nc * ec);
}

/* The engine's kinds (f32 and bf16 throughout) and bf16 operands with an
 * f32 C; K = 0 (C = bias); odd sizes, padded leading dimensions, then
 * every 2-byte alignment of the operands and of the bias (a distinct
 * cache key each). */
START_TEST(test_linear_bias)
{
	static const int shapes[][3] = {
	    {1, 1, 1},	  {17, 33, 65},	   {64, 128, 256},   {130, 77, 300},
	    {3, 1000, 5}, {257, 31, 1024}, {1024, 896, 896}, {5, 7, 0},
	};
	static const int kinds[][2] = {
	    {TK_F32, TK_F32}, {TK_BF16, TK_BF16}, {TK_BF16, TK_F32}};
	uint64_t st = 25;

	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (int k = 0; k < 3; k++) {
			int M = shapes[s][0], N = shapes[s][1];
			int K = shapes[s][2];

			lb_case(kinds[k][0], kinds[k][1], M, N, K, 0, 0, 0,
				&st);
			lb_case(kinds[k][0], kinds[k][1], M, N, K, 3, 1, 0,
				&st);
		}
	for (int k = 0; k < 3; k++)
		for (int off = 0; off < 8; off++)
			lb_case(kinds[k][0], kinds[k][1], 33, 65, 129, 0, off,
				off, &st);
}
END_TEST

/* ---- cross-entropy ------------------------------------------------------ */

/* The per-row state of the chunked loss, n rows, host or device. */
typedef struct {
	tk_ce_rows s;
	int n;
	int dev;
} ce_state;

static void ce_state_new(ce_state *c, int n, int dev)
{
	size_t un = n > 0 ? (size_t)n : 1;

	c->n = n;
	c->dev = dev;
	c->s.scale = NULL;
	if (dev) {
		c->s.mx = dnew(un * sizeof(float));
		c->s.se = dnew(un * sizeof(double));
		c->s.tl = dnew(un * sizeof(float));
		c->s.am = dnew(un * sizeof(int32_t));
		c->s.lse = dnan(un);
	} else {
		c->s.mx = hnew(un * sizeof(float));
		c->s.se = hnew(un * sizeof(double));
		c->s.tl = hnew(un * sizeof(float));
		c->s.am = hnew(un * sizeof(int32_t));
		c->s.lse = hnew(un * sizeof(float));
	}
}

static void ce_state_free(ce_state *c)
{
	size_t un = c->n > 0 ? (size_t)c->n : 1;

	if (c->dev) {
		gpu->free(c->s.mx, un * sizeof(float));
		gpu->free(c->s.se, un * sizeof(double));
		gpu->free(c->s.tl, un * sizeof(float));
		gpu->free(c->s.am, un * sizeof(int32_t));
		gpu->free(c->s.lse, un * sizeof(float));
	} else {
		free(c->s.mx);
		free(c->s.se);
		free(c->s.tl);
		free(c->s.am);
		free(c->s.lse);
	}
}

/* Runs the loss on ops o over logits x [n, V] (row stride ldl) in chunks of
 * width cw (the last narrower): stats over every chunk, then finish. */
static void ce_run(const tk_ops *o, ce_state *c, const float *x, int ldl,
		   const int32_t *tgt, int n, int V, int cw, double *loss,
		   int *nc, double *rl)
{
	for (int v0 = 0; v0 < V; v0 += cw)
		o->ce_stats(&c->s, x + v0, ldl, tgt, n, v0,
			    V - v0 < cw ? V - v0 : cw);
	{
		/* the sums stay in backend memory until read */
		double h[2], *sums = o == cpu ? h : o->alloc(sizeof(h));

		ck_assert_ptr_nonnull(sums);
		o->ce_finish(&c->s, tgt, n, sums, rl);
		if (o != cpu) {
			o->download(h, sums, sizeof(h));
			o->free(sums, sizeof(h));
		}
		*loss = h[0];
		*nc = (int)h[1];
	}
}

/* Targets: -100 for about one row in 6, the row's argmax for about one in
 * 3 (so n_correct counts something), else random. Every fourth row holds
 * its max twice, in different chunks when there are several, and takes
 * one copy as target: the smaller id (the argmax: correct) or, rows 4 mod
 * 8, the larger (not correct). The loss over chunks of width cw is compared
 * with one chunk (GPU and CPU) and the CPU's chunks: lse, loss_sum,
 * n_correct, row_loss; then the gradient of every chunk, f32 and bf16,
 * f32 in place over the logits. */
static void ce_case(int n, int V, int cw, float grad_scale, int with_rows,
		    uint64_t *st)
{
	const int ldl = V + 3; /* a row stride wider than the row */
	size_t nv = (size_t)n * ldl;
	float *x = frand(nv, -8, 8, st);
	int32_t *tgt = hnew((size_t)n * sizeof(int32_t));
	double *rl = hnew((size_t)n * sizeof(double)), *grl;
	double loss1 = 0, gloss = NAN, gloss1 = NAN, closs = NAN;
	int nc1 = -1, gnc = -1, gnc1 = -1, cnc = -1;
	ce_state g, g1, c, c1;
	float *rs, *d_rs;
	float *d_x, *glse, *dlog;
	int32_t *d_t;
	double *d_rl = NULL;
	char what[128];

	for (int i = 0; i < n; i++) {
		uint32_t k = rnd(st, 6);
		float *r = x + (size_t)i * ldl;
		int am = 0, am2 = -1;

		if (i % 4 == 0 && V > 1) { /* the max twice */
			int a = (int)rnd(st, (uint32_t)V);
			/* a chunk width apart (another chunk, cw < V) */
			int b =
			    V > cw
				? (a + cw) % V
				: (a + 1 + (int)rnd(st, (uint32_t)V - 1)) % V;

			r[a] = r[b] = 9.0f; /* above every other logit */
			/* the smaller id is the argmax: half the rows take
			 * the other copy as target */
			am2 = i % 8 == 4 ? (a > b ? a : b) : (a < b ? a : b);
		}
		for (int j = 1; j < V; j++)
			if (r[j] > r[am])
				am = j;
		tgt[i] = k == 0	    ? -100
			 : am2 >= 0 ? am2
			 : k <= 2   ? am
				    : (int32_t)rnd(st, V);
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
	snprintf(what, sizeof(what), "ce n=%d V=%d chunk=%d scale=%g", n, V, cw,
		 grad_scale);
	ce_state_new(&g, n, 1);
	ce_state_new(&g1, n, 1);
	ce_state_new(&c, n, 0);
	ce_state_new(&c1, n, 0);
	ce_run(cpu, &c1, x, ldl, tgt, n, V, V, &loss1, &nc1, rl);
	ce_run(cpu, &c, x, ldl, tgt, n, V, cw, &closs, &cnc, NULL);
	ce_run(gpu, &g1, d_x, ldl, d_t, n, V, V, &gloss1, &gnc1, NULL);
	ce_run(gpu, &g, d_x, ldl, d_t, n, V, cw, &gloss,
	       with_rows ? &gnc : NULL, d_rl);
	gpu_ok(what);
	/* GPU expf is within 2 ulp: each loss within ~2e-7 absolute; the
	 * chunked sum rescales, so chunked and whole differ in the last
	 * bits only */
	ck_assert_msg(fabs(gloss - loss1) <= TOL_ELEM * (fabs(loss1) + n),
		      "%s: loss_sum %.17g, cpu %.17g", what, gloss, loss1);
	ck_assert_msg(fabs(gloss1 - loss1) <= TOL_ELEM * (fabs(loss1) + n),
		      "%s: one chunk: loss_sum %.17g, cpu %.17g", what, gloss1,
		      loss1);
	ck_assert_msg(fabs(closs - loss1) <= TOL_ELEM * (fabs(loss1) + n),
		      "%s: cpu chunks: loss_sum %.17g, one chunk %.17g", what,
		      closs, loss1);
	ck_assert_msg(
	    gnc1 == nc1 && cnc == nc1,
	    "%s: n_correct %d (gpu one chunk), %d (cpu chunks), cpu %d", what,
	    gnc1, cnc, nc1);
	if (with_rows) {
		ck_assert_msg(gnc == nc1, "%s: n_correct %d, cpu %d", what, gnc,
			      nc1);
		grl = dget(d_rl, (size_t)n * sizeof(double));
		for (int i = 0; i < n; i++)
			ck_assert_msg(fabs(grl[i] - rl[i]) <=
					  TOL_ELEM * (fabs(rl[i]) + 1),
				      "%s: row %d loss %.17g, cpu %.17g", what,
				      i, grl[i], rl[i]);
		free(grl);
	}
	glse = dget(g.s.lse, (size_t)n * sizeof(float));
	check_close(what, glse, c1.s.lse, (size_t)n, TOL_ELEM);
	free(glse);
	glse = dget(g1.s.lse, (size_t)n * sizeof(float));
	check_close(what, glse, c1.s.lse, (size_t)n, TOL_ELEM);
	free(glse);

	/* gradient chunk by chunk from the GPU's lse (the CPU's for the CPU):
	 * f32 and bf16 into a buffer of row stride ldd = cw + 1, f32 again
	 * with a factor a row (DPO's, negative ones included), and f32 in
	 * place (over a copy of the logits) */
	rs = hnew((size_t)(n > 0 ? n : 1) * sizeof(float));
	for (int i = 0; i < n; i++)
		rs[i] = ((float)(i % 4) - 1.5f) * 0.75f;
	d_rs = dput(rs, (size_t)(n > 0 ? n : 1) * sizeof(float));
	for (int t = 0; t < 3; t++) {
		int dt = dts[t < 2 ? t : 0], ldd = cw + 1;
		size_t es = tk_dtype_size(dt), nd = (size_t)n * ldd;
		void *ref = hnew(nd * es), *d_d = tnan(dt, nd), *got, *rc, *gc;

		c1.s.scale = t == 2 ? rs : NULL;
		g.s.scale = t == 2 ? d_rs : NULL;

		for (int v0 = 0; v0 < V; v0 += cw) {
			int w = V - v0 < cw ? V - v0 : cw;

			cpu->ce_grad(dt, ref, ldd, x + v0, ldl, &c1.s, tgt, n,
				     v0, w, grad_scale);
			gpu->ce_grad(dt, d_d, ldd, d_x + v0, ldl, &g.s, d_t, n,
				     v0, w, grad_scale);
			got = dget(d_d, nd * es);
			gpu_ok(what);
			/* the chunk's columns of every row */
			rc = hnew((size_t)n * w * es);
			gc = hnew((size_t)n * w * es);
			for (int i = 0; i < n; i++) {
				memcpy((char *)rc + (size_t)i * w * es,
				       (char *)ref + (size_t)i * ldd * es,
				       (size_t)w * es);
				memcpy((char *)gc + (size_t)i * w * es,
				       (char *)got + (size_t)i * ldd * es,
				       (size_t)w * es);
			}
			if (dt == TK_F32)
				for (int i = 0; i < n; i++)
					check_close(what,
						    (float *)gc + (size_t)i * w,
						    (float *)rc + (size_t)i * w,
						    (size_t)w, TOL_ELEM);
			else
				check_bf16(what, gc, rc, (size_t)n * w, 1);
			/* the padding column is never written */
			for (int i = 0; i < n; i++)
				if (dt == TK_F32)
					ck_assert(isnan(
					    ((float *)
						 got)[(size_t)i * ldd + cw]));
				else
					ck_assert(bf16_nan(
					    ((uint16_t *)
						 got)[(size_t)i * ldd + cw]));
			free(rc);
			free(gc);
			free(got);
		}
		free(ref);
		gpu->free(d_d, nd * es);
	}
	c1.s.scale = NULL;
	g.s.scale = NULL;
	gpu->free(d_rs, (size_t)(n > 0 ? n : 1) * sizeof(float));
	free(rs);
	/* in place over the logits (dt F32, ldd == ldl) */
	dlog = fdup(x, nv);
	for (int v0 = 0; v0 < V; v0 += cw) {
		int w = V - v0 < cw ? V - v0 : cw;

		cpu->ce_grad(TK_F32, dlog + v0, ldl, dlog + v0, ldl, &c1.s, tgt,
			     n, v0, w, grad_scale);
		gpu->ce_grad(TK_F32, d_x + v0, ldl, d_x + v0, ldl, &g.s, d_t, n,
			     v0, w, grad_scale);
	}
	{
		float *got = dget(d_x, nv * sizeof(float));

		for (int i = 0; i < n; i++)
			check_close(what, got + (size_t)i * ldl,
				    dlog + (size_t)i * ldl, (size_t)V,
				    TOL_ELEM);
		free(got);
	}
	free(dlog);
	ce_state_free(&g);
	ce_state_free(&g1);
	ce_state_free(&c);
	ce_state_free(&c1);
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

	ce_case(1, 1, 1, 1.0f, 1, &st);
	ce_case(5, 7, 3, 0.2f, 1, &st);
	ce_case(33, 1000, 1000, 1.0f / 33, 1, &st);
	ce_case(33, 1000, 256, 0.0f, 1, &st);
	ce_case(2000, 3001, 1024, 1.0f / 2000, 0, &st);
	ce_case(24, 152064, 8192, 1.0f / 24, 1, &st);
	ce_case(6, 152064, 50000, 0.0f, 0, &st);
}
END_TEST

/* ---- last: an error is sticky ------------------------------------------- */

/* f32 A and B with a bf16 C is not offered: recorded as an error, C left
 * alone. tk_cuda_last_error keeps the first error for good, so this runs
 * after every other test. */
START_TEST(test_matmul_unsupported)
{
	float *dA = dnan(4), *dB = dnan(4);
	uint16_t *dC = tnan(TK_BF16, 4), h[4];

	gpu_ok("before the unsupported matmul");
	gpu->matmul(0, 0, 2, 2, 2, 1.0f, TK_F32, dA, 2, dB, 2, 0.0f, TK_BF16,
		    dC, 2);
	ck_assert_ptr_nonnull(tk_cuda_last_error());
	gpu->download(h, dC, sizeof(h)); /* not dget: the error stays */
	for (int i = 0; i < 4; i++)
		ck_assert(bf16_nan(h[i]));
	gpu->free(dA, 4 * sizeof(float));
	gpu->free(dB, 4 * sizeof(float));
	gpu->free(dC, 4 * sizeof(uint16_t));
}
END_TEST

/* ---- the profile -------------------------------------------------------- */

/* tk_cuda_profile_start/stop: each op lands in its phase and on its
 * stream (main, side between side_begin and side_end, copy for
 * copy_async), the waits and memory ops are not timed, and stop puts the
 * real table back (the one the engine holds a pointer to). */
START_TEST(test_profile)
{
	const int M = 512;
	size_t n = (size_t)M * M, bytes = n * sizeof(float);
	tk_ops saved = *gpu;
	tk_profile p;
	float *x = dnew(bytes), *y = dnew(bytes), *z = dnew(bytes);
	void *h = gpu->host_alloc(bytes);
	double busy = 0;
	uint32_t probe;

	ck_assert_ptr_nonnull(h);
	ck_assert_int_eq(tk_cuda_profile_stop(&p), -EINVAL);
	ck_assert_int_eq(tk_cuda_profile_start(), 0);
	ck_assert_int_eq(tk_cuda_profile_start(), -EBUSY);
	ck_assert(gpu->matmul != saved.matmul); /* wrapped */
	ck_assert(gpu->alloc == saved.alloc);	/* not device work */
	ck_assert(gpu->side_wait == saved.side_wait);
	gpu->memset0(x, bytes);	   /* 1: elementwise, main */
	gpu->memset0(y, bytes);	   /* 2 */
	gpu->add(TK_F32, y, x, n); /* 3 */
	gpu->matmul(0, 0, M, M, M, 1.0f, TK_F32, x, M, y, M, 0.0f, TK_F32, z,
		    M); /* 4: gemm, main */
	gpu->side_begin();
	gpu->add(TK_F32, z, x, n); /* 5: elementwise, side */
	gpu->side_wait(gpu->side_end());
	gpu->copy_async(h, z, bytes, 1); /* 6: the copy stream */
	gpu->copy_wait();
	gpu->download(&probe, z, sizeof(probe)); /* 7: copy, main */
	ck_assert_int_eq(tk_cuda_profile_stop(&p), 0);
	ck_assert(memcmp(gpu, &saved, sizeof(saved)) == 0);
	ck_assert_int_eq(tk_cuda_profile_stop(&p), -EINVAL);
	ck_assert_uint_eq(p.ops, 7);
	ck_assert(p.main_ms[TK_PHASE_GEMM] > 0);
	ck_assert(p.main_ms[TK_PHASE_ELEMENTWISE] > 0);
	ck_assert(p.main_ms[TK_PHASE_COPY] > 0);
	ck_assert(p.side_ms[TK_PHASE_ELEMENTWISE] > 0);
	ck_assert(p.copy_ms > 0);
	for (int i = 0; i < TK_PHASE_COUNT; i++) {
		if (i != TK_PHASE_ELEMENTWISE)
			ck_assert(p.side_ms[i] == 0);
		busy += p.main_ms[i];
	}
	ck_assert(p.main_ms[TK_PHASE_ATTENTION] == 0);
	ck_assert(p.main_ms[TK_PHASE_LOSS] == 0);
	ck_assert(p.main_ms[TK_PHASE_OPTIMIZER] == 0);
	/* one stream's ops do not overlap: busy within wall (events tick
	 * at about 0.5 us) */
	ck_assert_msg(busy <= p.wall_ms + 0.01, "busy %g > wall %g", busy,
		      p.wall_ms);
	ck_assert(p.idle_ms >= 0 && p.idle_ms <= p.wall_ms);
	/* a second profile starts afresh, and an op after stop is not in it */
	ck_assert_int_eq(tk_cuda_profile_start(), 0);
	gpu->memset0(x, bytes);
	ck_assert_int_eq(tk_cuda_profile_stop(&p), 0);
	gpu->memset0(x, bytes);
	ck_assert_uint_eq(p.ops, 1);
	ck_assert(p.copy_ms == 0 && p.main_ms[TK_PHASE_GEMM] == 0);
	gpu_ok("profile");
	gpu->host_free(h, bytes);
	gpu->free(x, bytes);
	gpu->free(y, bytes);
	gpu->free(z, bytes);
}
END_TEST

/* ---- suite -------------------------------------------------------------- */

static Suite *cuda_suite(void)
{
	Suite *s = suite_create("cuda_ops");
	TCase *tc = tcase_create("cuda_vs_cpu");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_memory);
	tcase_add_test(tc, test_host_copy);
	tcase_add_test(tc, test_to_f32);
	tcase_add_test(tc, test_matmul);
	tcase_add_test(tc, test_matmul_bf16);
	tcase_add_test(tc, test_matmul_k0);
	tcase_add_test(tc, test_matmul_cache);
	tcase_add_test(tc, test_add);
	tcase_add_test(tc, test_bias);
	tcase_add_test(tc, test_embedding);
	tcase_add_test(tc, test_rmsnorm);
	tcase_add_test(tc, test_rope);
	tcase_add_test(tc, test_swiglu);
	tcase_add_test(tc, test_moe);
	tcase_add_test(tc, test_attention_decode);
	tcase_add_test(tc, test_attn_sink);
	tcase_add_test(tc, test_glu_clamp);
	tcase_add_test(tc, test_cross_entropy);
	tcase_add_test(tc, test_profile);
	tcase_add_test(tc, test_fused_norm);
	tcase_add_test(tc, test_qknorm_rope);
	tcase_add_test(tc, test_linear_bias);
	tcase_add_test(tc, test_matmul_unsupported); /* last: sticky error */
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
