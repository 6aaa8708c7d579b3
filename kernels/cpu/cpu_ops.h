/* cpu_ops.h: the CPU backend's kernels, one file each (internal header).
 *
 * Every function here is installed in the table built by ops_table.c; the
 * contracts are the ones documented on struct tk_ops in tk_ops.h.
 */
#ifndef TK_CPU_OPS_H
#define TK_CPU_OPS_H

#include "tk_ops.h"

/* Below this many elements an elementwise loop stays on one thread. */
#define TK_CPU_PAR_MIN 32768

/* memory.c */
void *tk_cpu_alloc(size_t bytes);
void tk_cpu_free(void *p, size_t bytes);
size_t tk_cpu_mem_current(void);
size_t tk_cpu_mem_peak(void);
void tk_cpu_mem_reset_peak(void);
void tk_cpu_upload(void *dst, const void *host_src, size_t bytes);
void tk_cpu_download(void *host_dst, const void *src, size_t bytes);
void tk_cpu_memset0(void *p, size_t bytes);

/* convert.c */
void tk_cpu_to_f32(float *dst, const void *src, int dtype, size_t n);

/* matmul.c */
void tk_cpu_matmul(int transa, int transb, int M, int N, int K, float alpha,
		   const float *A, int lda, const float *B, int ldb, float beta,
		   float *C, int ldc);

/* add.c */
void tk_cpu_add(float *y, const float *x, size_t n);

/* bias.c */
void tk_cpu_bias_fwd(float *y, const float *bias, int rows, int C);
void tk_cpu_bias_bwd(float *dbias, const float *dy, int rows, int C);

/* embedding.c */
void tk_cpu_embedding_fwd(float *out, const float *table, const int32_t *tokens,
			  int n, int H);
void tk_cpu_embedding_bwd(float *dtable, const float *dout,
			  const int32_t *tokens, int n, int H);

/* rmsnorm.c */
void tk_cpu_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *w,
			int n, int H, float eps);
void tk_cpu_rmsnorm_bwd(float *dx, float *dw, const float *dout, const float *x,
			const float *w, const float *rstd, int n, int H);

/* rope.c */
void tk_cpu_rope_fwd(float *x, const float *cos, const float *sin,
		     const int32_t *pos, int n, int heads, int hd);
void tk_cpu_rope_bwd(float *dx, const float *cos, const float *sin,
		     const int32_t *pos, int n, int heads, int hd);

/* attention.c */
void tk_cpu_attention_fwd(float *out, float *lse, const float *q,
			  const float *k, const float *v, const int32_t *pos,
			  int B, int T, int nh, int nkv, int hd, int window,
			  float scale);
void tk_cpu_attention_bwd(float *dq, float *dk, float *dv, const float *dout,
			  const float *out, const float *lse, const float *q,
			  const float *k, const float *v, const int32_t *pos,
			  int B, int T, int nh, int nkv, int hd, int window,
			  float scale);

/* swiglu.c */
void tk_cpu_swiglu_fwd(float *out, const float *gate, const float *up,
		       size_t n);
void tk_cpu_swiglu_bwd(float *dgate, float *dup, const float *dout,
		       const float *gate, const float *up, size_t n);

/* cross_entropy.c */
void tk_cpu_cross_entropy(float *logits, const int32_t *targets, int n, int V,
			  float grad_scale, double *loss_sum, int *n_correct,
			  double *row_loss);

/* taco.c */
void tk_cpu_taco_update(void *W, int dtype, const float *G, void *idx,
			uint8_t *q, float *scale, const tk_taco_args *a);

/* adamw.c */
void tk_cpu_adamw_update(void *p, int dtype, float *master, float *m, float *v,
			 const float *g, size_t n, const tk_adamw_args *a);

#endif
