/* matmul.c: C[M,N] = alpha * op(A)[M,K] op(B)[K,N] + beta * C (OpenBLAS).
 *
 * A is [M,K] (lda >= K), or [K,M] (lda >= M) when transa; B is [K,N]
 * (ldb >= N), or [N,K] (ldb >= K) when transb; C is [M,N] (ldc >= N).
 */
#include <cblas.h>

#include "cpu_ops.h"

void tk_cpu_matmul(int transa, int transb, int M, int N, int K, float alpha,
		   const float *A, int lda, const float *B, int ldb, float beta,
		   float *C, int ldc)
{
	if (M <= 0 || N <= 0)
		return;
	if (K <= 0) {
		/* Empty product: BLAS would reject lda = 0; C = beta * C. */
		for (int i = 0; i < M; i++)
			for (int j = 0; j < N; j++)
				C[(size_t)i * ldc + j] =
				    beta == 0.0f
					? 0.0f
					: beta * C[(size_t)i * ldc + j];
		return;
	}
	cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans,
		    transb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda,
		    B, ldb, beta, C, ldc);
}
