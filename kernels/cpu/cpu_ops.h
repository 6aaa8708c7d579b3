/* cpu_ops.h: the CPU backend's kernels, one file each (internal header).
 *
 * Every function here is installed in the table built by ops_table.c; the
 * contracts are the ones documented on struct tk_ops in tk_ops.h.
 *
 * Dtypes: an op with a `dt` argument accepts TK_F32 and TK_BF16 (any other
 * value makes it a no-op). Each op's body is written once, as an inline
 * function of dt that loads with tk_load_f32 and stores with
 * tk_store_f32_rne; it is instantiated with the constant TK_F32 (the
 * arithmetic of the fp32-only kernels, unchanged) and TK_BF16 (inputs
 * widened exactly, the same fp32 arithmetic, each output rounded to nearest
 * even once when stored).
 */
#ifndef TK_CPU_OPS_H
#define TK_CPU_OPS_H

#include "tk_ops.h"

/* Below this many elements an elementwise loop stays on one thread. */
#define TK_CPU_PAR_MIN 32768

/* Elements per task of the elementwise ops. */
#define TK_CPU_SPAN 4096

/* A body instantiated per constant dtype (the loads and stores fold). */
#define TK_CPU_INLINE static inline __attribute__((always_inline))

/* memory.c */
void *tk_cpu_alloc(size_t bytes);
void tk_cpu_free(void *p, size_t bytes);
size_t tk_cpu_mem_current(void);
size_t tk_cpu_mem_peak(void);
void tk_cpu_mem_reset_peak(void);
void tk_cpu_upload(void *dst, const void *host_src, size_t bytes);
void tk_cpu_download(void *host_dst, const void *src, size_t bytes);
void tk_cpu_memset0(void *p, size_t bytes);
void *tk_cpu_host_alloc(size_t bytes);
void tk_cpu_host_free(void *p, size_t bytes);
size_t tk_cpu_host_current(void);
size_t tk_cpu_host_peak(void);
void tk_cpu_copy_async(void *dst, const void *src, size_t bytes, int to_host);
void tk_cpu_copy_wait(void);
void tk_cpu_side_begin(void);
uint64_t tk_cpu_side_end(void);
void tk_cpu_side_wait(uint64_t ticket);

/* convert.c */
void tk_cpu_to_f32(float *dst, const void *src, int dtype, size_t n);
void tk_cpu_convert(void *dst, int dst_dtype, const void *src, int src_dtype,
		    size_t n);

/* matmul.c */
void tk_cpu_matmul(int transa, int transb, int M, int N, int K, float alpha,
		   int ab_dtype, const void *A, int lda, const void *B, int ldb,
		   float beta, int c_dtype, void *C, int ldc);
void tk_cpu_linear_bias(int M, int N, int K, int ab_dtype, const void *A,
			int lda, const void *B, int ldb, const void *bias,
			int c_dtype, void *C, int ldc);

/* add.c */
void tk_cpu_add(int dt, void *y, const void *x, size_t n);

/* bias.c */
void tk_cpu_bias_fwd(int dt, void *y, const void *bias, int rows, int C);
void tk_cpu_bias_bwd(int dt, float *dbias, const void *dy, int rows, int C);

/* embedding.c */
void tk_cpu_embedding_fwd(int dt, void *out, const void *table,
			  const int32_t *tokens, int n, int H);
void tk_cpu_embedding_bwd(int dt, float *dtable, const void *dout,
			  const int32_t *rows, int n, int H, int r0, int nr);

/* rmsnorm.c */
void tk_cpu_rmsnorm_fwd(int dt, void *out, float *rstd, const void *x,
			const void *w, int n, int H, float eps);
void tk_cpu_rmsnorm_bwd(int dt, void *dx, float *dw, const void *dout,
			const void *x, const void *w, const float *rstd, int n,
			int H);
void tk_cpu_add_rmsnorm_fwd(int dt, void *x, const void *r, void *out,
			    float *rstd, const void *w, int n, int H,
			    float eps);
void tk_cpu_rmsnorm_bwd_add(int dt, void *dres, float *dw, const void *dout,
			    const void *x, const void *w, const float *rstd,
			    int n, int H);

/* rope.c */
void tk_cpu_rope_fwd(int dt, void *x, const float *cos, const float *sin,
		     const int32_t *pos, int n, int heads, int hd);
void tk_cpu_rope_bwd(int dt, void *dx, const float *cos, const float *sin,
		     const int32_t *pos, int n, int heads, int hd);

/* qknorm_rope.c */
void tk_cpu_qknorm_rope_fwd(int dt, void *out, float *rstd, const void *x,
			    const void *w, const float *cos, const float *sin,
			    const int32_t *pos, int n, int heads, int hd,
			    int rd, float eps);
void tk_cpu_qknorm_rope_bwd(int dt, void *dx, float *dw, const void *dout,
			    const void *x, const void *w, const float *rstd,
			    const float *cos, const float *sin,
			    const int32_t *pos, int n, int heads, int hd,
			    int rd);

/* attention.c */
void tk_cpu_attention_fwd(int dt, void *out, float *lse, const void *q,
			  const void *k, const void *v, const int32_t *pos,
			  int B, int T, int nh, int nkv, int hd, int window,
			  float scale);
void tk_cpu_attention_bwd(int dt, void *dq, void *dk, void *dv,
			  const void *dout, const void *out, const float *lse,
			  const void *q, const void *k, const void *v,
			  const int32_t *pos, int B, int T, int nh, int nkv,
			  int hd, int window, float scale);

/* attention_decode.c */
void tk_cpu_kv_store(int dt, void *kc, void *vc, const void *k, const void *v,
		     const int32_t *seq, const int32_t *pos, int n, int nkv,
		     int hd, int ctx);
void tk_cpu_attention_decode(int dt, void *out, float *lse, const void *q,
			     const void *kc, const void *vc, const int32_t *seq,
			     const int32_t *pos, int n, int nh, int nkv, int hd,
			     int ctx, int window, float scale);

/* attn_sink.c */
void tk_cpu_attn_sink_fwd(int dt, void *out, float *lse, const float *sinks,
			  int B, int T, int nh, int hd);
void tk_cpu_attn_sink_bwd(int dt, float *dsinks, const void *dout,
			  const void *out, const float *lse, const float *sinks,
			  int B, int T, int nh, int hd);

/* glu_clamp.c */
void tk_cpu_glu_clamp_fwd(int dt, void *out, const void *gu, size_t n, int ni,
			  float alpha, float limit);
void tk_cpu_glu_clamp_bwd(int dt, void *dgu, const void *dout, const void *gu,
			  size_t n, int ni, float alpha, float limit);

/* moe.c */
void tk_cpu_moe_route(int mode, int norm, int wdt, const float *logits, int N,
		      int E, int k, int32_t *idx, float *w);
void tk_cpu_moe_route_bwd(int mode, int norm, const float *logits,
			  const int32_t *idx, const float *dw,
			  const float *extra, int N, int E, int k,
			  float *dlogits);
void tk_cpu_moe_prob_sum(const float *logits, int N, int E, float *psum);
void tk_cpu_moe_sort(const int32_t *idx, int N, int E, int k, int32_t *order,
		     int32_t *inv, int32_t *counts);
void tk_cpu_moe_gather(int dt, void *xg, const void *x, const int32_t *order,
		       int M, int k, int H);
void tk_cpu_moe_combine(int dt, void *out, const void *y, const int32_t *inv,
			const float *w, int N, int k, int H);
void tk_cpu_moe_combine_bwd(int dt, void *dy, float *dw, const void *dout,
			    const void *y, const int32_t *inv, const float *w,
			    int N, int k, int H);
void tk_cpu_moe_scatter(int dt, void *dx, const void *dxg, const int32_t *inv,
			int N, int k, int H);

/* swiglu.c */
void tk_cpu_swiglu_fwd(int dt, void *out, const void *gate, const void *up,
		       size_t n);
void tk_cpu_swiglu_bwd(int dt, void *dgate, void *dup, const void *dout,
		       const void *gate, const void *up, size_t n);

/* cross_entropy.c: the vocabulary-chunked loss */
void tk_cpu_ce_stats(const tk_ce_rows *s, const float *logits, int ldl,
		     const int32_t *targets, int n, int v0, int Vc);
void tk_cpu_ce_finish(const tk_ce_rows *s, const int32_t *targets, int n,
		      double *sums, double *row_loss);
void tk_cpu_ce_grad(int dt, void *dlogits, int ldd, const float *logits,
		    int ldl, const tk_ce_rows *s, const int32_t *targets, int n,
		    int v0, int Vc, float grad_scale);

/* taco.c */
void tk_cpu_taco_update(void *W, int dtype, const float *G, int ldg, void *idx,
			uint8_t *q, float *scale, const tk_taco_args *a);
size_t tk_cpu_taco_scan_bytes(int C);
void tk_cpu_taco_begin(void *scan, const void *idx, const uint8_t *q,
		       const float *scale, const tk_taco_args *a);
void tk_cpu_taco_feed(void *scan, const float *G, int ldg, const int32_t *rows,
		      int row0, int nrows, const tk_taco_args *a);
void tk_cpu_taco_finish(void *scan, void *W, int dtype, void *idx, uint8_t *q,
			float *scale, const tk_taco_args *a);
void tk_cpu_taco_gather(void *vals, const void *W, int dtype, const void *idx,
			int R, int C, int k);

/* adamw.c */
void tk_cpu_adamw_update(void *p, int dtype, float *master, float *m, float *v,
			 const float *g, size_t n, const tk_adamw_args *a);

/* Ops of the OPT and GPT-NeoX families. */
/* layernorm.c */
void tk_cpu_layernorm_fwd(int dt, void *out, float *mean, float *rstd,
			  const void *x, const void *w, const void *b, int n,
			  int H, float eps);
void tk_cpu_layernorm_bwd(int dt, void *dx, float *dw, float *db,
			  const void *dout, const void *x, const void *w,
			  const float *mean, const float *rstd, int n, int H);
/* act.c */
void tk_cpu_act_fwd(int dt, int act, void *out, const void *x, size_t n);
void tk_cpu_act_bwd(int dt, int act, void *dx, const void *dout, const void *x,
		    size_t n);
/* qkv.c */
void tk_cpu_qkv_split(int dt, void *q, void *k, void *v, const void *qkv, int n,
		      int heads, int hd);
void tk_cpu_qkv_merge(int dt, void *dqkv, const void *dq, const void *dk,
		      const void *dv, int n, int heads, int hd);
/* dropout.c */
void tk_cpu_dropout(int dt, void *x, size_t n, float p, uint64_t seed,
		    uint64_t stream);

#endif
