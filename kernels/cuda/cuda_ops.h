/* cuda_ops.h: the CUDA backend's kernels, one file each (internal header).
 *
 * Every tkc_* op here is installed in the table built by ops_table.cu; the
 * contracts are the ones documented on struct tk_ops in tk_ops.h and the
 * semantics are those of the CPU reference in kernels/cpu.
 *
 * All work goes to one stream, tkc_stream(), so ops are ordered without
 * extra synchronisation; only download (and memory ops that must be
 * synchronous for the host) wait on it. Two exceptions, ordered by
 * events: copy_async runs on a copy stream (memory.cu), and the ops issued
 * between side_begin and side_end (the optimizer's) on the side stream
 * (side.cu), which tkc_stream() then returns. Ops return
 * void: a failure is recorded with tkc_check* and surfaces through
 * tk_cuda_last_error().
 *
 * Dtypes: the ops with a `dt` argument take TK_F32 or TK_BF16 and are
 * templates over the storage type (float, tkc_bf16 below), dispatched at
 * the host entry point; any other dt is recorded as an error (nothing is
 * written).
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

/* ops_table.cu: shared state of the backend. tkc_stream() is where ops
 * go: the main stream, or the side stream between side_begin and
 * side_end (side.cu). */
cudaStream_t tkc_stream(void);
cudaStream_t tkc_main_stream(void);
/* NULL: back to the main stream. */
void tkc_set_stream(cudaStream_t s);
cublasLtHandle_t tkc_lt(void);
/* The module's op table once tk_cuda_module_open has filled it, else
 * NULL (prof.cu wraps its ops). */
tk_ops *tkc_table(void);
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
/* Pinned host memory, counted apart from device memory. */
void *tkc_host_alloc(size_t bytes);
void tkc_host_free(void *p, size_t bytes);
size_t tkc_host_current(void);
size_t tkc_host_peak(void);
/* Copies on the copy stream, after everything issued on tkc_stream(). */
void tkc_copy_async(void *dst, const void *src, size_t bytes, int to_host);
void tkc_copy_wait(void);
/* The copy stream and its events: 0 or -ENODEV. Called once by
 * tk_cuda_module_open, after tkc_stream() exists. */
int tkc_copy_init(void);
/* Called by copy_async on the copy stream, under its lock, with after 0
 * just before the copy is issued and 1 just after (prof.cu times copies
 * so); NULL: none. */
typedef void (*tkc_copy_hook_fn)(int after, cudaStream_t s);
void tkc_set_copy_hook(tkc_copy_hook_fn f);

/* side.cu: the side stream and its tickets. tkc_side_init: 0 or
 * -ENODEV, once by tk_cuda_module_open after the main stream exists. */
int tkc_side_init(void);
void tkc_side_begin(void);
uint64_t tkc_side_end(void);
void tkc_side_wait(uint64_t ticket);

/* convert.cu */
void tkc_to_f32(float *dst, const void *src, int dtype, size_t n);
void tkc_convert(void *dst, int dst_dtype, const void *src, int src_dtype,
		 size_t n);

/* matmul.cu */
void tkc_matmul(int transa, int transb, int M, int N, int K, float alpha,
		int ab_dtype, const void *A, int lda, const void *B, int ldb,
		float beta, int c_dtype, void *C, int ldc);
void tkc_linear_bias(int M, int N, int K, int ab_dtype, const void *A, int lda,
		     const void *B, int ldb, const void *bias, int c_dtype,
		     void *C, int ldc);
/* Allocates the GEMM workspace (counted like any buffer): 0 or -ENOMEM.
 * Called once by tk_cuda_module_open, after the stream and handle exist. */
int tkc_matmul_init(void);

/* add.cu */
void tkc_add(int dt, void *y, const void *x, size_t n);

/* bias.cu */
void tkc_bias_fwd(int dt, void *y, const void *bias, int rows, int C);
void tkc_bias_bwd(int dt, float *dbias, const void *dy, int rows, int C);

/* embedding.cu */
void tkc_embedding_fwd(int dt, void *out, const void *table,
		       const int32_t *tokens, int n, int H);
void tkc_embedding_bwd(int dt, float *dtable, const void *dout,
		       const int32_t *rows, int n, int H, int r0, int nr);

/* rmsnorm.cu */
void tkc_rmsnorm_fwd(int dt, void *out, float *rstd, const void *x,
		     const void *w, int n, int H, float eps);
void tkc_rmsnorm_bwd(int dt, void *dx, float *dw, const void *dout,
		     const void *x, const void *w, const float *rstd, int n,
		     int H);
/* dw [H] += sum over rows of dout * x * rstd: rmsnorm_bwd's reduction
 * (deterministic, no atomics), for the fused norms. n, H > 0. */
void tkc_rmsnorm_dw(int dt, float *dw, const void *dout, const void *x,
		    const float *rstd, int n, int H);

/* fused_norm.cu */
void tkc_add_rmsnorm_fwd(int dt, void *x, const void *r, void *out, float *rstd,
			 const void *w, int n, int H, float eps);
void tkc_rmsnorm_bwd_add(int dt, void *dres, float *dw, const void *dout,
			 const void *x, const void *w, const float *rstd, int n,
			 int H);

/* rope.cu */
void tkc_rope_fwd(int dt, void *x, const float *cos, const float *sin,
		  const int32_t *pos, int n, int heads, int hd);
void tkc_rope_bwd(int dt, void *dx, const float *cos, const float *sin,
		  const int32_t *pos, int n, int heads, int hd);

/* qknorm_rope.cu */
void tkc_qknorm_rope_fwd(int dt, void *out, float *rstd, const void *x,
			 const void *w, const float *cos, const float *sin,
			 const int32_t *pos, int n, int heads, int hd, int rd,
			 float eps);
void tkc_qknorm_rope_bwd(int dt, void *dx, float *dw, const void *dout,
			 const void *x, const void *w, const float *rstd,
			 const float *cos, const float *sin, const int32_t *pos,
			 int n, int heads, int hd, int rd);

/* attention.cu */
void tkc_attention_fwd(int dt, void *out, float *lse, const void *q,
		       const void *k, const void *v, const int32_t *pos, int B,
		       int T, int nh, int nkv, int hd, int window, float scale);
void tkc_attention_bwd(int dt, void *dq, void *dk, void *dv, const void *dout,
		       const void *out, const float *lse, const void *q,
		       const void *k, const void *v, const int32_t *pos, int B,
		       int T, int nh, int nkv, int hd, int window, float scale);

/* attention_mma.cu: the tensor-core path of the two above (bf16, hd 64 or
 * 128, sm_80+; TACO_CUDA_ATTENTION=simt turns it off). Same arguments,
 * shapes already checked: 0 when it ran (errors recorded as usual),
 * -ENOTSUP when the call is not one it takes. */
int tkc_attention_mma_fwd(int dt, void *out, float *lse, const void *q,
			  const void *k, const void *v, const int32_t *pos,
			  int B, int T, int nh, int nkv, int hd, int window,
			  float scale);
int tkc_attention_mma_bwd(int dt, void *dq, void *dk, void *dv,
			  const void *dout, const void *out, const float *lse,
			  const void *q, const void *k, const void *v,
			  const int32_t *pos, int B, int T, int nh, int nkv,
			  int hd, int window, float scale);

/* attention_decode.cu: generation's KV cache and decode attention */
void tkc_kv_store(int dt, void *kc, void *vc, const void *k, const void *v,
		  const int32_t *seq, const int32_t *pos, int n, int nkv,
		  int hd, int ctx);
void tkc_attention_decode(int dt, void *out, float *lse, const void *q,
			  const void *kc, const void *vc, const int32_t *seq,
			  const int32_t *pos, int n, int nh, int nkv, int hd,
			  int ctx, int window, float scale);

/* attn_sink.cu */
void tkc_attn_sink_fwd(int dt, void *out, float *lse, const float *sinks, int B,
		       int T, int nh, int hd);
void tkc_attn_sink_bwd(int dt, float *dsinks, const void *dout, const void *out,
		       const float *lse, const float *sinks, int B, int T,
		       int nh, int hd);

/* glu_clamp.cu */
void tkc_glu_clamp_fwd(int dt, void *out, const void *gu, size_t n, int ni,
		       float alpha, float limit);
void tkc_glu_clamp_bwd(int dt, void *dgu, const void *dout, const void *gu,
		       size_t n, int ni, float alpha, float limit);

/* moe.cu */
void tkc_moe_route(int mode, int norm, int wdt, const float *logits, int N,
		   int E, int k, int32_t *idx, float *w);
void tkc_moe_route_bwd(int mode, int norm, const float *logits,
		       const int32_t *idx, const float *dw, const float *extra,
		       int N, int E, int k, float *dlogits);
void tkc_moe_prob_sum(const float *logits, int N, int E, float *psum);
void tkc_moe_sort(const int32_t *idx, int N, int E, int k, int32_t *order,
		  int32_t *inv, int32_t *counts);
void tkc_moe_gather(int dt, void *xg, const void *x, const int32_t *order,
		    int M, int k, int H);
void tkc_moe_combine(int dt, void *out, const void *y, const int32_t *inv,
		     const float *w, int N, int k, int H);
void tkc_moe_combine_bwd(int dt, void *dy, float *dw, const void *dout,
			 const void *y, const int32_t *inv, const float *w,
			 int N, int k, int H);
void tkc_moe_scatter(int dt, void *dx, const void *dxg, const int32_t *inv,
		     int N, int k, int H);

/* swiglu.cu */
void tkc_swiglu_fwd(int dt, void *out, const void *gate, const void *up,
		    size_t n);
void tkc_swiglu_bwd(int dt, void *dgate, void *dup, const void *dout,
		    const void *gate, const void *up, size_t n);

/* cross_entropy.cu */
void tkc_ce_stats(const tk_ce_rows *s, const float *logits, int ldl,
		  const int32_t *targets, int n, int v0, int Vc);
void tkc_ce_finish(const tk_ce_rows *s, const int32_t *targets, int n,
		   double *sums, double *row_loss);
void tkc_ce_grad(int dt, void *dlogits, int ldd, const float *logits, int ldl,
		 const tk_ce_rows *s, const int32_t *targets, int n, int v0,
		 int Vc, float grad_scale);

/* taco.cu */
void tkc_taco_update(void *W, int dtype, const float *G, int ldg, void *idx,
		     uint8_t *q, float *scale, const tk_taco_args *a);
size_t tkc_taco_scan_bytes(int C);
void tkc_taco_begin(void *scan, const void *idx, const uint8_t *q,
		    const float *scale, const tk_taco_args *a);
void tkc_taco_feed(void *scan, const float *G, int ldg, const int32_t *rows,
		   int row0, int nrows, const tk_taco_args *a);
void tkc_taco_finish(void *scan, void *W, int dtype, void *idx, uint8_t *q,
		     float *scale, const tk_taco_args *a);
void tkc_taco_gather(void *vals, const void *W, int dtype, const void *idx,
		     int R, int C, int k);

/* adamw.cu */
void tkc_adamw_update(void *p, int dtype, float *master, float *m, float *v,
		      const float *g, size_t n, const tk_adamw_args *a);

/* Ops of the OPT and GPT-NeoX families. */
/* layernorm.cu */
void tkc_layernorm_fwd(int dt, void *out, float *mean, float *rstd,
		       const void *x, const void *w, const void *b, int n,
		       int H, float eps);
void tkc_layernorm_bwd(int dt, void *dx, float *dw, float *db, const void *dout,
		       const void *x, const void *w, const float *mean,
		       const float *rstd, int n, int H);
/* act.cu */
void tkc_act_fwd(int dt, int act, void *out, const void *x, size_t n);
void tkc_act_bwd(int dt, int act, void *dx, const void *dout, const void *x,
		 size_t n);
/* qkv.cu */
void tkc_qkv_split(int dt, void *q, void *k, void *v, const void *qkv, int n,
		   int heads, int hd);
void tkc_qkv_merge(int dt, void *dqkv, const void *dq, const void *dk,
		   const void *dv, int n, int heads, int hd);
/* dropout.cu */
void tkc_dropout(int dt, void *x, size_t n, float p, uint64_t seed,
		 uint64_t stream);

/* An op asked for a dtype it does not take: recorded as an invalid value
 * (what names the op). */
void tkc_bad_dtype(const char *what, int dtype);

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
#include "tk_convert.h"

/* Storage of a bf16 tensor element: its bit pattern, a type of its own so
 * that the overloads below pick the conversion. Kernels of the ops with a
 * `dt` are templates over the storage type T (float or tkc_bf16): they
 * load with tkc_ld (exact widening), compute in fp32 and store with
 * tkc_put (round to nearest even, tk_convert.h), once per output. */
struct tkc_bf16 {
	uint16_t bits;
};

__host__ __device__ static inline float tkc_ld(float x)
{
	return x;
}

__host__ __device__ static inline float tkc_ld(tkc_bf16 x)
{
	return tk_bf16_f32(x.bits);
}

__host__ __device__ static inline void tkc_put(float *p, float x)
{
	*p = x;
}

__host__ __device__ static inline void tkc_put(tkc_bf16 *p, float x)
{
	p->bits = tk_f32_bf16_rne(x);
}

/* x as a T element holds it once stored (tkc_put then tkc_ld): what a fused
 * kernel computes with where the unfused ops store an intermediate. */
template <typename T>
__host__ __device__ static inline float tkc_stored(float x)
{
	T t;

	tkc_put(&t, x);
	return tkc_ld(t);
}

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
