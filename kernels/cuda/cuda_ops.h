/* cuda_ops.h: the CUDA backend's kernels, one file each (internal header).
 *
 * Every tkc_* op here is installed in the table built by ops_table.cu; the
 * contracts are the ones documented on struct tk_ops in tk_ops.h and the
 * semantics are those of the CPU reference in kernels/cpu.
 *
 * All work goes to one stream, tkc_stream(), so ops are ordered without
 * extra synchronisation; only download (and memory ops that must be
 * synchronous for the host) wait on it. Ops return void: a failure is
 * recorded with tkc_check* and surfaces through tk_cuda_last_error().
 */
#ifndef TK_CUDA_OPS_H
#define TK_CUDA_OPS_H

#include <cublasLt.h>
#include <cuda_runtime.h>

/* tk_ops.h is C: include it through this header only. */
/* The module is built with hidden visibility; its entry points say so. */
#define TKC_EXPORT __attribute__((visibility("default")))

#ifdef __cplusplus
extern "C" {
#endif

#include "tk_ops.h"

/* Threads per block of the simple element-wise kernels. */
#define TKC_THREADS 256
/* Grid-stride kernels never launch more blocks than this. */
#define TKC_MAX_BLOCKS 65535u

/* ops_table.cu: shared state of the backend. */
cudaStream_t tkc_stream(void);
cublasLtHandle_t tkc_lt(void);
/* Records the first failure (what: the call that failed); later ones are
 * dropped so the root cause is reported. Return 0 or -EIO. */
int tkc_check(cudaError_t e, const char *what);
int tkc_check_blas(cublasStatus_t s, const char *what);
/* After a kernel launch: cudaGetLastError() through tkc_check. */
int tkc_check_launch(const char *what);
/* Blocks for a grid-stride loop over n items, TKC_THREADS per block. */
unsigned tkc_blocks(size_t n);

/* memory.cu */
void *tkc_alloc(size_t bytes);
void tkc_free(void *p, size_t bytes);
size_t tkc_mem_current(void);
size_t tkc_mem_peak(void);
void tkc_mem_reset_peak(void);
void tkc_upload(void *dst, const void *host_src, size_t bytes);
void tkc_download(void *host_dst, const void *src, size_t bytes);
void tkc_memset0(void *p, size_t bytes);

/* convert.cu */
void tkc_to_f32(float *dst, const void *src, int dtype, size_t n);

/* matmul.cu */
void tkc_matmul(int transa, int transb, int M, int N, int K, float alpha,
		const float *A, int lda, const float *B, int ldb, float beta,
		float *C, int ldc);
/* Allocates the GEMM workspace (counted like any buffer): 0 or -ENOMEM.
 * Called once by tk_cuda_module_open, after the stream and handle exist. */
int tkc_matmul_init(void);

/* add.cu */
void tkc_add(float *y, const float *x, size_t n);

/* bias.cu */
void tkc_bias_fwd(float *y, const float *bias, int rows, int C);
void tkc_bias_bwd(float *dbias, const float *dy, int rows, int C);

/* embedding.cu */
void tkc_embedding_fwd(float *out, const float *table, const int32_t *tokens,
		       int n, int H);
void tkc_embedding_bwd(float *dtable, const float *dout, const int32_t *tokens,
		       int n, int H);

/* rmsnorm.cu */
void tkc_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *w,
		     int n, int H, float eps);
void tkc_rmsnorm_bwd(float *dx, float *dw, const float *dout, const float *x,
		     const float *w, const float *rstd, int n, int H);

/* rope.cu */
void tkc_rope_fwd(float *x, const float *cos, const float *sin,
		  const int32_t *pos, int n, int heads, int hd);
void tkc_rope_bwd(float *dx, const float *cos, const float *sin,
		  const int32_t *pos, int n, int heads, int hd);

/* attention.cu (part B) */
void tkc_attention_fwd(float *out, float *lse, const float *q, const float *k,
		       const float *v, const int32_t *pos, int B, int T, int nh,
		       int nkv, int hd, int window, float scale);
void tkc_attention_bwd(float *dq, float *dk, float *dv, const float *dout,
		       const float *out, const float *lse, const float *q,
		       const float *k, const float *v, const int32_t *pos,
		       int B, int T, int nh, int nkv, int hd, int window,
		       float scale);

/* swiglu.cu */
void tkc_swiglu_fwd(float *out, const float *gate, const float *up, size_t n);
void tkc_swiglu_bwd(float *dgate, float *dup, const float *dout,
		    const float *gate, const float *up, size_t n);

/* cross_entropy.cu */
void tkc_cross_entropy(float *logits, const int32_t *targets, int n, int V,
		       float grad_scale, double *loss_sum, int *n_correct,
		       double *row_loss);

/* taco.cu (part B) */
void tkc_taco_update(void *W, int dtype, const float *G, void *idx, uint8_t *q,
		     float *scale, const tk_taco_args *a);

/* adamw.cu (part B) */
void tkc_adamw_update(void *p, int dtype, float *master, float *m, float *v,
		      const float *g, size_t n, const tk_adamw_args *a);

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
/* Sum of v over the block, returned to every thread, in a fixed order (so
 * deterministic). blockDim.x a multiple of 32, at most 1024; every thread
 * of the block calls it; shared holds 33 doubles, reusable on return. */
__device__ static inline double tkc_block_sum(double v, double *shared)
{
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	int nw = blockDim.x >> 5;

	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_down_sync(0xffffffffu, v, o);
	if (lane == 0)
		shared[w] = v;
	__syncthreads();
	if (w == 0) {
		v = lane < nw ? shared[lane] : 0.0;
		for (int o = 16; o > 0; o >>= 1)
			v += __shfl_down_sync(0xffffffffu, v, o);
		if (lane == 0)
			shared[32] = v;
	}
	__syncthreads();
	v = shared[32];
	__syncthreads();
	return v;
}
#endif

#endif
