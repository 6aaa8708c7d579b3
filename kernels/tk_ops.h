/* tk_ops.h: the backend op table.
 *
 * engine/ calls these ops; kernels/cpu implements them in C, kernels/cuda in
 * CUDA C. Kernels never include engine headers: everything an op needs is in
 * its arguments.
 *
 * Conventions
 * - Pointers passed to ops are backend memory (obtained from ops->alloc).
 * - Activations are fp32, row-major. N = number of tokens (B * T), rows of an
 *   activation matrix are tokens.
 * - q/k/v layout: [N, heads * hd], head h of token t at t * heads * hd + h *
 * hd.
 * - "pos" arrays hold each token's position inside its document: a document
 *   starts where pos == 0, and attention never crosses a document start.
 *   Positions therefore restart at each boundary (packing).
 * - Gradient outputs named d* are overwritten unless the comment says
 *   "accumulates".
 */
#ifndef TK_OPS_H
#define TK_OPS_H

#include <stddef.h>
#include <stdint.h>

enum tk_dtype {
	TK_F32 = 0,
	TK_BF16 = 1,
	TK_F16 = 2,
};

/* Bytes per element; 0 for an unknown dtype. Inline, so that code which
 * only sizes tensors (the planner, tacod) links no backend. */
static inline size_t tk_dtype_size(int dtype)
{
	switch (dtype) {
	case TK_F32:
		return 4;
	case TK_BF16:
	case TK_F16:
		return 2;
	default:
		return 0;
	}
}

/* Arguments of one TACO update (docs/taco.md). */
typedef struct tk_taco_args {
	int R, C;   /* W and G are [R, C] row-major; column j = W[:, j] */
	int k;	    /* slots per column, 1..16 */
	float lr;   /* this step's learning rate (after the schedule) */
	float beta; /* EMA decay of slot values */
	float weight_decay;
	int stochastic; /* bf16 weights: 1 stochastic rounding, 0 nearest */
	uint64_t seed;	/* job seed */
	uint64_t tensor_index; /* position in the sorted tensor-name list */
	uint64_t step;	       /* optimizer step, from 1 */
} tk_taco_args;

/* Arguments of one AdamW update (PyTorch semantics, bias-corrected). */
typedef struct tk_adamw_args {
	float lr, beta1, beta2, eps, weight_decay;
	uint64_t step; /* from 1 */
} tk_adamw_args;

typedef struct tk_ops tk_ops;

struct tk_ops {
	const char *name;

	/* Memory. alloc returns NULL on failure; every byte is counted so the
	 * planner can be checked against current and peak. */
	void *(*alloc)(size_t bytes);
	void (*free)(void *p, size_t bytes);
	size_t (*mem_current)(void);
	size_t (*mem_peak)(void);
	void (*mem_reset_peak)(void);
	void (*upload)(void *dst, const void *host_src, size_t bytes);
	void (*download)(void *host_dst, const void *src, size_t bytes);
	void (*memset0)(void *p, size_t bytes);

	/* dst[n] (fp32) = src[n] converted from dtype. */
	void (*to_f32)(float *dst, const void *src, int dtype, size_t n);

	/* C[M,N] = alpha * op(A)[M,K] op(B)[K,N] + beta * C, row-major;
	 * op(X) = X^T when the trans flag is set. */
	void (*matmul)(int transa, int transb, int M, int N, int K, float alpha,
		       const float *A, int lda, const float *B, int ldb,
		       float beta, float *C, int ldc);

	/* y[n] += x[n] */
	void (*add)(float *y, const float *x, size_t n);

	/* y[rows, C] += bias[C] */
	void (*bias_fwd)(float *y, const float *bias, int rows, int C);
	/* dbias[C] += sum over rows of dy[rows, C] (accumulates) */
	void (*bias_bwd)(float *dbias, const float *dy, int rows, int C);

	/* out[n, H] = table[tokens[i], :]; table [V, H] */
	void (*embedding_fwd)(float *out, const float *table,
			      const int32_t *tokens, int n, int H);
	/* dtable[tokens[i], :] += dout[i, :] (accumulates, deterministic) */
	void (*embedding_bwd)(float *dtable, const float *dout,
			      const int32_t *tokens, int n, int H);

	/* out[n, H] = x / sqrt(mean(x^2) + eps) * w; rstd[n] saved for bwd. */
	void (*rmsnorm_fwd)(float *out, float *rstd, const float *x,
			    const float *w, int n, int H, float eps);
	/* dx[n, H] overwritten; dw[H] accumulates. */
	void (*rmsnorm_bwd)(float *dx, float *dw, const float *dout,
			    const float *x, const float *w, const float *rstd,
			    int n, int H);

	/* In-place rotary embedding, Hugging Face "rotate_half" convention:
	 * for i < hd/2, (x[i], x[i + hd/2]) rotated by angle pos * inv_freq[i].
	 * x [n, heads * hd]; cos/sin tables [max_pos, hd/2], row p for
	 * position p. rope_bwd applies the inverse rotation to the gradient. */
	void (*rope_fwd)(float *x, const float *cos, const float *sin,
			 const int32_t *pos, int n, int heads, int hd);
	void (*rope_bwd)(float *dx, const float *cos, const float *sin,
			 const int32_t *pos, int n, int heads, int hd);

	/* Causal grouped-query attention.
	 * q [B*T, nh*hd], k/v [B*T, nkv*hd], out [B*T, nh*hd],
	 * lse [B, nh, T] (log-sum-exp of the scaled scores, kept for bwd).
	 * Query i of a row attends key j iff doc_start(i) <= j <= i and,
	 * when window > 0, i - j < window; doc_start(i) = i - pos[i].
	 * Query head h uses kv head h / (nh / nkv). */
	void (*attention_fwd)(float *out, float *lse, const float *q,
			      const float *k, const float *v,
			      const int32_t *pos, int B, int T, int nh, int nkv,
			      int hd, int window, float scale);
	/* dq overwritten, dk/dv overwritten (GQA sums over the group). */
	void (*attention_bwd)(float *dq, float *dk, float *dv,
			      const float *dout, const float *out,
			      const float *lse, const float *q, const float *k,
			      const float *v, const int32_t *pos, int B, int T,
			      int nh, int nkv, int hd, int window, float scale);

	/* out[n] = silu(gate[n]) * up[n] */
	void (*swiglu_fwd)(float *out, const float *gate, const float *up,
			   size_t n);
	void (*swiglu_bwd)(float *dgate, float *dup, const float *dout,
			   const float *gate, const float *up, size_t n);

	/* Fused softmax cross-entropy over one chunk of tokens.
	 * logits [n, V] in; when grad_scale != 0 it is overwritten by
	 * grad_scale * (softmax - onehot(target)) for rows whose target is
	 * valid, and by 0 for rows whose target is -100.
	 * Sets loss_sum to the sum of -log p(target) over valid rows (double,
	 * rows added in order: deterministic), n_correct (may be NULL) to
	 * how many valid rows have argmax == target, and row_loss[n] (may be
	 * NULL) to each row's -log p(target), 0 for rows without a target. */
	void (*cross_entropy)(float *logits, const int32_t *targets, int n,
			      int V, float grad_scale, double *loss_sum,
			      int *n_correct, double *row_loss);

	/* TACO update of W [R, C] (dtype F32, BF16 or F16) from the fp32
	 * gradient G [R, C]. State, column-major, column j's slots contiguous:
	 * idx [C * k] (uint16_t when R <= 65535, else uint32_t; all ones =
	 * empty slot), q [C * k] FP8 E4M3 codes, scale [C]. Bit-exact across
	 * backends: see docs/taco.md. */
	void (*taco_update)(void *W, int dtype, const float *G, void *idx,
			    uint8_t *q, float *scale, const tk_taco_args *a);
	/* AdamW of n elements: master (fp32 copy), m, v updated in place and
	 * p (dtype) = master rounded to nearest even. */
	void (*adamw_update)(void *p, int dtype, float *master, float *m,
			     float *v, const float *g, size_t n,
			     const tk_adamw_args *a);
};

/* The CPU backend: fp32 reference kernels, OpenBLAS GEMM. */
const tk_ops *tk_cpu_ops(void);

/* The CUDA backend on device 0: 0 and *out set, or -ENODEV (no device or
 * driver, why says which) / -ENOSYS (built without CUDA). */
int tk_cuda_open(const tk_ops **out, char *why, size_t why_len);
/* First CUDA/cuBLAS error since open, or NULL; ops return void so the engine
 * polls this after each step. */
const char *tk_cuda_last_error(void);

#endif
