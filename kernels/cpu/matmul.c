/* matmul.c: C[M,N] = alpha * op(A)[M,K] op(B)[K,N] + beta * C (OpenBLAS).
 *
 * A is [M,K] (lda >= K), or [K,M] (lda >= M) when transa; B is [K,N]
 * (ldb >= N), or [N,K] (ldb >= K) when transb; C is [M,N] (ldc >= N).
 *
 * fp32 operands and result: one cblas_sgemm, no scratch. Otherwise (a bf16
 * operand or result; OpenBLAS as packaged has no bf16 GEMM) the product is
 * tiled: per (M, N) tile an fp32 accumulator acc = sum over K tiles of the
 * widened A tile times the widened B tile (cblas_sgemm, beta 1 after the
 * first K tile), then C = alpha * acc + beta * C, rounded once into
 * c_dtype. The three tiles live in one scratch buffer from tk_cpu_alloc (so
 * mem_current / mem_peak see it) of at most TK_CPU_GEMM_SCRATCH_BYTES,
 * freed before returning. If that allocation fails, a plain triple loop
 * computes the same product (slowly).
 *
 * linear_bias is matmul(0, 1, ...) with beta 0 and bias[N] (ab_dtype) added
 * to the fp32 product before C is rounded: the same paths, the bias added
 * where they store C (the same scratch, none for fp32 operands and result).
 */
#include <cblas.h>

#include "cpu_ops.h"
#include "tk_convert.h"

/* Largest tile side; three such square tiles fit the scratch bound. */
#define GEMM_TILE 768

_Static_assert((size_t)3 * GEMM_TILE * GEMM_TILE * sizeof(float) <=
		   TK_CPU_GEMM_SCRATCH_BYTES,
	       "GEMM tiles exceed TK_CPU_GEMM_SCRATCH_BYTES");

static int imin(int a, int b)
{
	return a < b ? a : b;
}

static size_t tile_floats(int mt, int nt, int kt)
{
	return (size_t)mt * kt + (size_t)kt * nt + (size_t)mt * nt;
}

/* dst [rows, cols] (row stride cols) = src [r0.., c0..] widened, src of
 * dtype with row stride ld. */
static void widen_tile(float *dst, const void *src, int dtype, int ld, int r0,
		       int rows, int c0, int cols)
{
	int r;

#pragma omp parallel for if ((long long)rows * cols >= TK_CPU_PAR_MIN)
	for (r = 0; r < rows; r++) {
		size_t o = (size_t)(r0 + r) * ld + c0;
		float *d = dst + (size_t)r * cols;

		if (dtype == TK_F32) {
			for (int c = 0; c < cols; c++)
				d[c] = ((const float *)src)[o + c];
		} else {
			for (int c = 0; c < cols; c++)
				d[c] =
				    tk_bf16_f32(((const uint16_t *)src)[o + c]);
		}
	}
}

/* C [i0.., j0..] = alpha * acc + beta * C (beta 0: C is not read)
 * + bias[j0..] (of dtype bias_dt; NULL: none), rounded once. */
static void store_tile(void *C, int c_dtype, int ldc, int i0, int mt, int j0,
		       int nt, const float *acc, float alpha, float beta,
		       const void *bias, int bias_dt)
{
	int i;

#pragma omp parallel for if ((long long)mt * nt >= TK_CPU_PAR_MIN)
	for (i = 0; i < mt; i++) {
		size_t o = (size_t)(i0 + i) * ldc + j0;
		const float *a = acc + (size_t)i * nt;

		for (int j = 0; j < nt; j++) {
			float r = alpha * a[j];

			if (beta != 0.0f)
				r = r + beta * tk_load_f32(C, c_dtype, o + j);
			if (bias)
				r = r + tk_load_f32(bias, bias_dt, j0 + j);
			tk_store_f32_rne(C, c_dtype, o + j, r);
		}
	}
}

/* No scratch: one dot product per element, same rounding of C. bias as
 * in store_tile, of ab_dtype. */
static void matmul_slow(int transa, int transb, int M, int N, int K,
			float alpha, int ab_dtype, const void *A, int lda,
			const void *B, int ldb, float beta, int c_dtype,
			void *C, int ldc, const void *bias)
{
	int i;

#pragma omp parallel for if ((long long)M * N * K >= TK_CPU_PAR_MIN)
	for (i = 0; i < M; i++) {
		for (int j = 0; j < N; j++) {
			size_t o = (size_t)i * ldc + j;
			float acc = 0.0f, r;

			for (int p = 0; p < K; p++) {
				size_t ia = transa ? (size_t)p * lda + i
						   : (size_t)i * lda + p;
				size_t ib = transb ? (size_t)j * ldb + p
						   : (size_t)p * ldb + j;
				acc = acc + tk_load_f32(A, ab_dtype, ia) *
						tk_load_f32(B, ab_dtype, ib);
			}
			r = alpha * acc;
			if (beta != 0.0f)
				r = r + beta * tk_load_f32(C, c_dtype, o);
			if (bias)
				r = r + tk_load_f32(bias, ab_dtype, j);
			tk_store_f32_rne(C, c_dtype, o, r);
		}
	}
}

/* Any bf16 operand or result; bias (ab_dtype, NULL: none) as in
 * store_tile. */
static void matmul_tiled(int transa, int transb, int M, int N, int K,
			 float alpha, int ab_dtype, const void *A, int lda,
			 const void *B, int ldb, float beta, int c_dtype,
			 void *C, int ldc, const void *bias)
{
	const size_t cap = TK_CPU_GEMM_SCRATCH_BYTES / sizeof(float);
	int mt = imin(M, GEMM_TILE), nt = imin(N, GEMM_TILE);
	int kt = imin(K, GEMM_TILE);
	size_t bytes;
	float *sa, *sb, *sc;

	/* Shrink the largest side until the three tiles fit. */
	while (tile_floats(mt, nt, kt) > cap) {
		if (kt >= mt && kt >= nt && kt > 1)
			kt = (kt + 1) / 2;
		else if (mt >= nt && mt > 1)
			mt = (mt + 1) / 2;
		else
			nt = (nt + 1) / 2;
	}
	/* Always the whole bound, whatever the tiles use: the planner counts
	 * exactly this while any bf16 GEMM runs. */
	bytes = TK_CPU_GEMM_SCRATCH_BYTES;
	sa = tk_cpu_alloc(bytes);
	if (!sa) {
		matmul_slow(transa, transb, M, N, K, alpha, ab_dtype, A, lda, B,
			    ldb, beta, c_dtype, C, ldc, bias);
		return;
	}
	sb = sa + (size_t)mt * kt;
	sc = sb + (size_t)kt * nt;

	for (int i0 = 0; i0 < M; i0 += mt) {
		int mi = imin(mt, M - i0);

		for (int j0 = 0; j0 < N; j0 += nt) {
			int nj = imin(nt, N - j0);

			for (int p0 = 0; p0 < K; p0 += kt) {
				int kp = imin(kt, K - p0);

				/* The tiles keep the operands' orientation:
				 * op(A) tile [mi, kp] as [kp, mi] when
				 * transa, op(B) tile [kp, nj] as [nj, kp]
				 * when transb. */
				if (transa)
					widen_tile(sa, A, ab_dtype, lda, p0, kp,
						   i0, mi);
				else
					widen_tile(sa, A, ab_dtype, lda, i0, mi,
						   p0, kp);
				if (transb)
					widen_tile(sb, B, ab_dtype, ldb, j0, nj,
						   p0, kp);
				else
					widen_tile(sb, B, ab_dtype, ldb, p0, kp,
						   j0, nj);
				cblas_sgemm(CblasRowMajor,
					    transa ? CblasTrans : CblasNoTrans,
					    transb ? CblasTrans : CblasNoTrans,
					    mi, nj, kp, 1.0f, sa,
					    transa ? mi : kp, sb,
					    transb ? kp : nj,
					    p0 == 0 ? 0.0f : 1.0f, sc, nj);
			}
			store_tile(C, c_dtype, ldc, i0, mi, j0, nj, sc, alpha,
				   beta, bias, ab_dtype);
		}
	}
	tk_cpu_free(sa, bytes);
}

void tk_cpu_matmul(int transa, int transb, int M, int N, int K, float alpha,
		   int ab_dtype, const void *A, int lda, const void *B, int ldb,
		   float beta, int c_dtype, void *C, int ldc)
{
	if (M <= 0 || N <= 0)
		return;
	if ((ab_dtype != TK_F32 && ab_dtype != TK_BF16) ||
	    (c_dtype != TK_F32 && c_dtype != TK_BF16))
		return;
	if (K <= 0) {
		/* Empty product: BLAS would reject lda = 0; C = beta * C. */
		for (int i = 0; i < M; i++)
			for (int j = 0; j < N; j++) {
				size_t o = (size_t)i * ldc + j;
				tk_store_f32_rne(
				    C, c_dtype, o,
				    beta == 0.0f
					? 0.0f
					: beta * tk_load_f32(C, c_dtype, o));
			}
		return;
	}
	if (ab_dtype == TK_F32 && c_dtype == TK_F32) {
		cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans,
			    transb ? CblasTrans : CblasNoTrans, M, N, K, alpha,
			    (const float *)A, lda, (const float *)B, ldb, beta,
			    (float *)C, ldc);
		return;
	}
	matmul_tiled(transa, transb, M, N, K, alpha, ab_dtype, A, lda, B, ldb,
		     beta, c_dtype, C, ldc, NULL);
}

/* C [M, N] = A [M, K] B [N, K]^T + bias [N]: fp32 throughout, one sgemm
 * into C and the bias added in place (matmul then bias_fwd, bit for bit);
 * otherwise the tiled product with the bias added to each fp32 tile before
 * it is rounded into C. */
void tk_cpu_linear_bias(int M, int N, int K, int ab_dtype, const void *A,
			int lda, const void *B, int ldb, const void *bias,
			int c_dtype, void *C, int ldc)
{
	int i;

	if (M <= 0 || N <= 0)
		return;
	if ((ab_dtype != TK_F32 && ab_dtype != TK_BF16) ||
	    (c_dtype != TK_F32 && c_dtype != TK_BF16))
		return;
	if (K <= 0) {
		/* Empty product: C = bias. */
		for (i = 0; i < M; i++)
			for (int j = 0; j < N; j++)
				tk_store_f32_rne(
				    C, c_dtype, (size_t)i * ldc + j,
				    tk_load_f32(bias, ab_dtype, j));
		return;
	}
	if (ab_dtype == TK_F32 && c_dtype == TK_F32) {
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K,
			    1.0f, (const float *)A, lda, (const float *)B, ldb,
			    0.0f, (float *)C, ldc);
#pragma omp parallel for if ((long long)M * N >= TK_CPU_PAR_MIN)
		for (i = 0; i < M; i++) {
			float *c = (float *)C + (size_t)i * ldc;

			for (int j = 0; j < N; j++)
				c[j] = c[j] + ((const float *)bias)[j];
		}
		return;
	}
	matmul_tiled(0, 1, M, N, K, 1.0f, ab_dtype, A, lda, B, ldb, 0.0f,
		     c_dtype, C, ldc, bias);
}
