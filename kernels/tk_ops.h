/* tk_ops.h: the backend op table.
 *
 * engine/ calls these ops; kernels/cpu implements them in C, kernels/cuda in
 * CUDA C. Kernels never include engine headers: everything an op needs is in
 * its arguments.
 *
 * Conventions
 * - Pointers passed to ops are backend memory (obtained from ops->alloc).
 * - Activations are row-major, in the op's dt (below). N = number of tokens
 *   (B * T), rows of an activation matrix are tokens.
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

/* attention_decode's largest head dimension. */
#define TK_ATT_DEC_MAX_HD 512

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
	int R, C;   /* W is [R, C] row-major; column j = W[:, j] */
	int col0;   /* taco_update: columns [col0, col0 + ncols) of W */
	int ncols;  /* 1..C - col0 */
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

/* Per-token state of the vocabulary-chunked loss, backend memory, n rows
 * each (offset the pointers for a slice of tokens). */
typedef struct tk_ce_rows {
	float *mx;   /* running max of the logits seen so far */
	double *se;  /* running sum of exp(logit - mx) */
	float *tl;   /* the target's logit, once its chunk has been seen */
	int32_t *am; /* running argmax (ties: the smaller id) */
	float *lse;  /* set by ce_finish: log-sum-exp over the vocabulary */
	/* ce_grad: each row's own factor on grad_scale (DPO weighs each
	 * sequence's tokens by its pair's loss), NULL: 1 for every row */
	const float *scale;
} tk_ce_rows;

/* Bytes a CPU matmul with a bf16 operand or result allocates for its
 * duration, at most: the planner counts it. */
#define TK_CPU_GEMM_SCRATCH_BYTES ((size_t)8 << 20)

typedef struct tk_ops tk_ops;

/* Bytes of one TACO row-stream scan over C columns: taco_scan_bytes(C) is
 * this on every backend (each lays its scan out within it), so that a plan
 * needs no backend. */
static inline size_t tk_taco_scan_bytes(int C)
{
	return (size_t)(C > 0 ? C : 0) * 896u + 4096u;
}

/* Dtypes. Every op with a `dt` argument stores each of its tensor
 * arguments in dt (TK_F32 or TK_BF16) unless the comment marks it "f32":
 * activations, their gradients and the weights it reads. Statistics (rstd,
 * lse), RoPE tables and weight gradients are always f32. Arithmetic is f32
 * whatever dt is: a bf16 input is widened exactly, each output is rounded
 * to nearest even once, when it is stored. The CPU and CUDA backends round
 * at the same points, so they differ only in summation order. */
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

	/* Host memory for activation offload (pinned on CUDA), counted apart
	 * from backend memory; mem_reset_peak resets its peak too. */
	void *(*host_alloc)(size_t bytes);
	void (*host_free)(void *p, size_t bytes);
	size_t (*host_current)(void);
	size_t (*host_peak)(void);
	/* Copies on a side stream, ordered after every op issued before the
	 * call; to_host 1: backend -> host, 0: host -> backend. copy_wait
	 * makes every op issued after it wait for the copies issued before
	 * it. The CPU backend copies at once. */
	void (*copy_async)(void *dst, const void *src, size_t bytes,
			   int to_host);
	void (*copy_wait)(void);
	/* The side stream, where the optimizer's updates overlap the
	 * backward. After side_begin, ops run on the side stream, each after
	 * every op issued before side_begin; side_end returns to the main
	 * stream and a ticket (> 0) for the side work issued so far;
	 * side_wait(t) makes the ops issued after it wait for that work
	 * (t == 0: all side work so far). The CPU backend runs every op at
	 * once: it counts tickets and never waits. */
	void (*side_begin)(void);
	uint64_t (*side_end)(void);
	void (*side_wait)(uint64_t ticket);

	/* dst[n] (fp32) = src[n] converted from dtype. */
	void (*to_f32)(float *dst, const void *src, int dtype, size_t n);
	/* dst[n] (dst_dtype: F32 or BF16) = src[n] (src_dtype: F32, BF16 or
	 * F16), rounded to nearest even; dst and src do not overlap. */
	void (*convert)(void *dst, int dst_dtype, const void *src,
			int src_dtype, size_t n);

	/* C[M,N] = alpha * op(A)[M,K] op(B)[K,N] + beta * C, row-major;
	 * op(X) = X^T when the trans flag is set. A and B are ab_dtype,
	 * C is c_dtype (each TK_F32 or TK_BF16); f32 accumulation, C rounded
	 * once after alpha and beta. */
	void (*matmul)(int transa, int transb, int M, int N, int K, float alpha,
		       int ab_dtype, const void *A, int lda, const void *B,
		       int ldb, float beta, int c_dtype, void *C, int ldc);

	/* y[n] += x[n] */
	void (*add)(int dt, void *y, const void *x, size_t n);

	/* y[rows, C] += bias[C] */
	void (*bias_fwd)(int dt, void *y, const void *bias, int rows, int C);
	/* dbias[C] (f32) += sum over rows of dy[rows, C] (accumulates) */
	void (*bias_bwd)(int dt, float *dbias, const void *dy, int rows, int C);

	/* out[n, H] = table[tokens[i], :]; table [V, H] */
	void (*embedding_fwd)(int dt, void *out, const void *table,
			      const int32_t *tokens, int n, int H);
	/* dtable (f32) [rows[i] - r0, :] += dout[i, :] for the tokens with
	 * r0 <= rows[i] < r0 + nr (accumulates, deterministic); the others are
	 * skipped. rows is backend memory: a slice of the table's rows is
	 * filled without the host making a list for it. */
	void (*embedding_bwd)(int dt, float *dtable, const void *dout,
			      const int32_t *rows, int n, int H, int r0,
			      int nr);

	/* out[n, H] = x / sqrt(mean(x^2) + eps) * w; rstd[n] (f32) saved. */
	void (*rmsnorm_fwd)(int dt, void *out, float *rstd, const void *x,
			    const void *w, int n, int H, float eps);
	/* dx[n, H] overwritten; dw[H] (f32) accumulates. */
	void (*rmsnorm_bwd)(int dt, void *dx, float *dw, const void *dout,
			    const void *x, const void *w, const float *rstd,
			    int n, int H);

	/* In-place rotary embedding, Hugging Face "rotate_half" convention:
	 * for i < hd/2, (x[i], x[i + hd/2]) rotated by angle pos * inv_freq[i].
	 * x [n, heads * hd]; cos/sin tables (f32) [max_pos, hd/2], row p for
	 * position p. rope_bwd applies the inverse rotation to the gradient. */
	void (*rope_fwd)(int dt, void *x, const float *cos, const float *sin,
			 const int32_t *pos, int n, int heads, int hd);
	void (*rope_bwd)(int dt, void *dx, const float *cos, const float *sin,
			 const int32_t *pos, int n, int heads, int hd);

	/* Fused ops: each gives the bits of the unfused sequence it names, in
	 * one pass over memory (the intermediate rounded to dt as the unfused
	 * ops store it).
	 *
	 * x[n, H] += r (the residual add), then out = rmsnorm_fwd(x, w):
	 * add, then rmsnorm_fwd on the stored x. rstd (f32) [n]. */
	void (*add_rmsnorm_fwd)(int dt, void *x, const void *r, void *out,
				float *rstd, const void *w, int n, int H,
				float eps);
	/* dres[n, H] += rmsnorm_bwd(dout, x, w, rstd): rmsnorm_bwd into a
	 * temporary, then add into dres. dw (f32) [H] accumulates. */
	void (*rmsnorm_bwd_add)(int dt, void *dres, float *dw, const void *dout,
				const void *x, const void *w, const float *rstd,
				int n, int H);
	/* x [n, heads * hd]. With w [hd] (Qwen3's q/k norm): out = rope_fwd of
	 * rmsnorm_fwd(x) over each head's hd values, rstd (f32) [n * heads]
	 * saved; w NULL: out = rope_fwd(x), rstd not touched. out may be x
	 * only when w is NULL.
	 * Partial rotary (GPT-NeoX's apply_rotary_pos_emb): the rotation
	 * covers the first rd (even, 0 <= rd <= hd) values of each head in
	 * the rotate_half layout over those rd values (pairs (i, i + rd/2),
	 * cos/sin [max_pos, rd / 2]); values rd..hd-1 pass through
	 * unrotated (normalized with w: the norm spans all hd). rd == hd is
	 * rope_fwd's full rotation (an odd hd's last value unrotated); rd == 0
	 * rotates nothing (cos, sin and pos unread): w NULL is then a copy,
	 * or nothing when out is x. */
	void (*qknorm_rope_fwd)(int dt, void *out, float *rstd, const void *x,
				const void *w, const float *cos,
				const float *sin, const int32_t *pos, int n,
				int heads, int hd, int rd, float eps);
	/* The backward of qknorm_rope_fwd (rd as there: rope_bwd over each
	 * head's first rd values, the rest passed through): with w, dx =
	 * rmsnorm_bwd of rope_bwd(dout) (dw (f32) [hd] accumulates, x is the
	 * norm's input); w NULL: dx = rope_bwd(dout), dx may be dout, x and dw
	 * unused. dout is not written unless it is dx. */
	void (*qknorm_rope_bwd)(int dt, void *dx, float *dw, const void *dout,
				const void *x, const void *w, const float *rstd,
				const float *cos, const float *sin,
				const int32_t *pos, int n, int heads, int hd,
				int rd);
	/* C[M, N] (c_dtype) = A[M, K] B[N, K]^T + bias[N] (bias in ab_dtype):
	 * matmul(0, 1, ...) with beta 0 and the bias added before C is
	 * rounded, once (cuBLASLt's bias epilogue). */
	void (*linear_bias)(int M, int N, int K, int ab_dtype, const void *A,
			    int lda, const void *B, int ldb, const void *bias,
			    int c_dtype, void *C, int ldc);

	/* Causal grouped-query attention.
	 * q [B*T, nh*hd], k/v [B*T, nkv*hd], out [B*T, nh*hd],
	 * lse (f32) [B, nh, T] (log-sum-exp of the scaled scores, for bwd).
	 * Query i of a row attends key j iff doc_start(i) <= j <= i and,
	 * when window > 0, i - j < window; doc_start(i) = i - pos[i].
	 * Query head h uses kv head h / (nh / nkv). */
	void (*attention_fwd)(int dt, void *out, float *lse, const void *q,
			      const void *k, const void *v, const int32_t *pos,
			      int B, int T, int nh, int nkv, int hd, int window,
			      float scale);
	/* dq overwritten, dk/dv overwritten (GQA sums over the group). */
	void (*attention_bwd)(int dt, void *dq, void *dk, void *dv,
			      const void *dout, const void *out,
			      const float *lse, const void *q, const void *k,
			      const void *v, const int32_t *pos, int B, int T,
			      int nh, int nkv, int hd, int window, float scale);

	/* Generation's KV cache, one layer's: kc, vc [rows, ctx, nkv * hd]
	 * (dt), row r's key at position p at (r * ctx + p) * nkv * hd.
	 * kv_store copies token i's k and v (k, v [n, nkv * hd]) to row
	 * seq[i], position pos[i] (0 <= pos[i] < ctx). */
	void (*kv_store)(int dt, void *kc, void *vc, const void *k,
			 const void *v, const int32_t *seq, const int32_t *pos,
			 int n, int nkv, int hd, int ctx);
	/* Attention of n queries against the cache: query i (q [n, nh * hd])
	 * attends the keys of row seq[i] at positions lo .. pos[i], lo =
	 * max(0, pos[i] - window + 1) when window > 0, else 0 (what
	 * attention_fwd gives the same query in its document: the cache
	 * holds each row's earlier tokens). out [n, nh * hd]; lse (f32)
	 * [nh, n], attention_fwd's [B = 1, nh, T = n] layout, so that
	 * attn_sink_fwd (B 1, T n) applies after it. Query head h uses kv
	 * head h / (nh / nkv). fp32 arithmetic, out rounded once; hd at
	 * most TK_ATT_DEC_MAX_HD (the engine checks). */
	void (*attention_decode)(int dt, void *out, float *lse, const void *q,
				 const void *kc, const void *vc,
				 const int32_t *seq, const int32_t *pos, int n,
				 int nh, int nkv, int hd, int ctx, int window,
				 float scale);

	/* Attention sinks (gpt-oss): sinks (f32 [nh]) a logit per head in
	 * every query's softmax denominator, taking no value. attn_sink_fwd
	 * follows attention_fwd: lse [B, nh, T] becomes log(exp(lse) +
	 * exp(sinks[h])) and each head's output row in out [B * T, nh * hd]
	 * scales by exp(old - new lse). attention_bwd then runs as it is on
	 * that out and lse; attn_sink_bwd accumulates the sinks' gradient:
	 * dsinks[h] -= sum over the queries of exp(sinks[h] - lse) (dout .
	 * out). */
	void (*attn_sink_fwd)(int dt, void *out, float *lse, const float *sinks,
			      int B, int T, int nh, int hd);
	void (*attn_sink_bwd)(int dt, float *dsinks, const void *dout,
			      const void *out, const float *lse,
			      const float *sinks, int B, int T, int nh, int hd);

	/* gpt-oss's gated activation of its experts: gu [n, 2 ni] interleaves
	 * gate (even columns) and up (odd); g = min(gate, limit), u =
	 * clamp(up, -limit, limit), out [n, ni] = (u + 1) g sigmoid(alpha g).
	 * The backward writes dgu [n, 2 ni] (may be gu): 0 where the clamps
	 * cut (their bounds pass the gradient, as torch's clamp). */
	void (*glu_clamp_fwd)(int dt, void *out, const void *gu, size_t n,
			      int ni, float alpha, float limit);
	void (*glu_clamp_bwd)(int dt, void *dgu, const void *dout,
			      const void *gu, size_t n, int ni, float alpha,
			      float limit);

	/* out[n] = silu(gate[n]) * up[n] */
	void (*swiglu_fwd)(int dt, void *out, const void *gate, const void *up,
			   size_t n);
	/* dgate may be gate and dup may be up (each element is read before
	 * it is written). */
	void (*swiglu_bwd)(int dt, void *dgate, void *dup, const void *dout,
			   const void *gate, const void *up, size_t n);

	/* A mixture of experts (kernels/cpu/moe.c; the routing of one token
	 * is tk_moe.h's, shared by both backends). N tokens, E experts, k
	 * (<= TK_MOE_MAX_K) experts a token, M = N * k slots: slot t * k + j
	 * is token t's j-th expert.
	 *
	 * moe_route: idx [N, k] and w (f32) [N, k] from the router's logits
	 * (f32) [N, E] by router mode (enum tk_moe_router), norm: divide
	 * SOFTMAX_TOPK's weights by their sum; each weight rounded to wdt. */
	void (*moe_route)(int mode, int norm, int wdt, const float *logits,
			  int N, int E, int k, int32_t *idx, float *w);
	/* Its backward: dlogits (f32) [N, E] from dw (f32) [N, k], the
	 * gradient of the weights (rounding taken as exact), plus extra
	 * (f32 [E], may be NULL) as every token's gradient of the full
	 * softmax's probabilities (the auxiliary loss's). */
	void (*moe_route_bwd)(int mode, int norm, const float *logits,
			      const int32_t *idx, const float *dw,
			      const float *extra, int N, int E, int k,
			      float *dlogits);
	/* psum (f32) [E]: softmax(logits)'s column sums over the N rows, in
	 * row order. */
	void (*moe_prob_sum)(const float *logits, int N, int E, float *psum);
	/* The slots by expert, by slot within one: order [M] (position ->
	 * slot), inv [M] (slot -> position), counts [E] (int32). */
	void (*moe_sort)(const int32_t *idx, int N, int E, int k,
			 int32_t *order, int32_t *inv, int32_t *counts);
	/* xg [M, H]: row p is x's row order[p] / k. */
	void (*moe_gather)(int dt, void *xg, const void *x,
			   const int32_t *order, int M, int k, int H);
	/* out [N, H] = sum over j of w[t, j] y[inv[t * k + j]] (fp32, j in
	 * order, rounded once). */
	void (*moe_combine)(int dt, void *out, const void *y,
			    const int32_t *inv, const float *w, int N, int k,
			    int H);
	/* Its backward: dy [M, H], row inv[t * k + j] = w[t, j] dout[t];
	 * dw (f32) [N, k] = dout[t] . y[inv[t * k + j]]. */
	void (*moe_combine_bwd)(int dt, void *dy, float *dw, const void *dout,
				const void *y, const int32_t *inv,
				const float *w, int N, int k, int H);
	/* dx [N, H] = sum over j of dxg[inv[t * k + j]] (overwritten). */
	void (*moe_scatter)(int dt, void *dx, const void *dxg,
			    const int32_t *inv, int N, int k, int H);

	/* The loss over the vocabulary in chunks. logits (f32) [n, Vc], row
	 * stride ldl, are columns [v0, v0 + Vc) of n tokens' logits; targets
	 * [n] (-100: no target).
	 *
	 * ce_stats folds one chunk into s (v0 == 0 starts it); chunks come in
	 * increasing v0 and cover [0, V). */
	void (*ce_stats)(const tk_ce_rows *s, const float *logits, int ldl,
			 const int32_t *targets, int n, int v0, int Vc);
	/* After the last chunk: s->lse; sums (backend memory, 2 doubles) =
	 * {the sum of lse - logit[target] over rows with a target, in row
	 * order (deterministic); the rows whose argmax is the target}; row_loss
	 * (backend, may be NULL) [n] each row's loss, 0 without a target.
	 * Nothing is read back: a step reads its sums once, at its end. */
	void (*ce_finish)(const tk_ce_rows *s, const int32_t *targets, int n,
			  double *sums, double *row_loss);
	/* dlogits [n, Vc] (dt, row stride ldd) = grad_scale * (softmax -
	 * onehot(target)), times s->scale[i] when set (the fp32 product
	 * grad_scale * scale[i] first), over the chunk for rows with a
	 * target, 0 for the
	 * others, from the logits and s->lse. dlogits may be logits when dt
	 * is TK_F32 and ldd == ldl. */
	void (*ce_grad)(int dt, void *dlogits, int ldd, const float *logits,
			int ldl, const tk_ce_rows *s, const int32_t *targets,
			int n, int v0, int Vc, float grad_scale);

	/* TACO update (docs/taco.md) of columns [a->col0, a->col0 + a->ncols)
	 * of W [R, C] (dtype F32, BF16 or F16) from their fp32 gradient G
	 * [R, ncols] (row stride ldg): G's column c is W's column col0 + c.
	 * State of the whole tensor, column-major, column j's slots
	 * contiguous: idx [C * k] (uint16_t when R <= 65535, else uint32_t;
	 * all ones = empty slot), q [C * k] FP8 E4M3 codes, scale [C].
	 * Bit-exact across backends. */
	void (*taco_update)(void *W, int dtype, const float *G, int ldg,
			    void *idx, uint8_t *q, float *scale,
			    const tk_taco_args *a);
	/* The same update with the gradient fed in row blocks (a vocabulary
	 * chunk, the rows of an MLP chunk, the rows a batch touches):
	 * taco_begin decodes all C columns into scan (taco_scan_bytes(C) of
	 * backend memory), taco_feed offers nrows rows of G [nrows, C] (row
	 * stride ldg): rows row0 .. row0 + nrows - 1, or rows[i] (backend
	 * memory) when rows is not NULL; rows of one update come in strictly
	 * increasing order. taco_finish tracks, merges, steps W and
	 * requantizes. A row never fed has gradient 0. The result is the bits
	 * taco_update gives on the whole gradient. a->col0 and a->ncols are
	 * not used. */
	size_t (*taco_scan_bytes)(int C);
	void (*taco_begin)(void *scan, const void *idx, const uint8_t *q,
			   const float *scale, const tk_taco_args *a);
	void (*taco_feed)(void *scan, const float *G, int ldg,
			  const int32_t *rows, int row0, int nrows,
			  const tk_taco_args *a);
	void (*taco_finish)(void *scan, void *W, int dtype, void *idx,
			    uint8_t *q, float *scale, const tk_taco_args *a);
	/* After a TACO update of W [R, C] (dtype F32, BF16 or F16): the
	 * entries at its slots' rows, vals [C * k] (dtype) = W[idx[j * k +
	 * s], j] for column j, slot s, 0 for an empty slot (idx as in
	 * taco_update: uint16_t when R <= 65535, else uint32_t). The one
	 * entry an update changes in a column is at the row of the slot it
	 * selected, which keeps its row: the streamed weights' write-back
	 * sends these and their rows instead of W. Copies: bit for bit on
	 * every backend. */
	void (*taco_gather)(void *vals, const void *W, int dtype,
			    const void *idx, int R, int C, int k);
	/* AdamW of n elements: master (fp32 copy), m, v updated in place and
	 * p (dtype) = master rounded to nearest even. */
	void (*adamw_update)(void *p, int dtype, float *master, float *m,
			     float *v, const float *g, size_t n,
			     const tk_adamw_args *a);

	/* Ops of the OPT and GPT-NeoX families.
	 *
	 * LayerNorm as torch.nn.LayerNorm computes it in fp32. Per row of
	 * x [n, H]: mean = sum(x) / H, then, in a second pass, the biased
	 * variance var = sum((x - mean)^2) / H, both sums in double in a
	 * fixed order (the CPU sums in index order, CUDA with a fixed block
	 * tree: they differ only in the last bits of the double); mean (f32)
	 * [n] = mean rounded, rstd (f32) [n] = 1 / sqrt(var + eps) rounded
	 * (eps inside the root, as torch). Then in fp32 from those two
	 * floats: xhat = (x - mean) * rstd, out [n, H] = xhat * w + b, with
	 * w, b [H]. */
	void (*layernorm_fwd)(int dt, void *out, float *mean, float *rstd,
			      const void *x, const void *w, const void *b,
			      int n, int H, float eps);
	/* From the saved mean and rstd (f32) [n], xhat as in the forward and
	 * g = dout * w (fp32): c1 = sum(g) / H and c2 = sum(g * xhat) / H per
	 * row (double sums, rounded to f32), dx [n, H] = rstd * ((g - c1) -
	 * xhat * c2), overwritten; dx may be dout. dw [H] += sum over rows of
	 * dout * xhat, db [H] += sum over rows of dout (f32, accumulate;
	 * double sums in a fixed order, deterministic). */
	void (*layernorm_bwd)(int dt, void *dx, float *dw, float *db,
			      const void *dout, const void *x, const void *w,
			      const float *mean, const float *rstd, int n,
			      int H);
	/* out[n] = act(x[n]) in fp32, act an enum tk_act: relu(x) = x > 0 ?
	 * x : 0 (+0 for x <= 0; a NaN passes through, as torch); gelu(x) =
	 * x * 0.5 * (1 + erf(x * 0.70710678)), the exact (erf) GELU of
	 * torch's nn.functional.gelu. ReLU is the same bits on every
	 * backend; GELU may differ in the last ulp (erff, expf of libm and
	 * of CUDA). out may be x. An unknown act or dt writes nothing (CUDA
	 * records an error). */
	void (*act_fwd)(int dt, int act, void *out, const void *x, size_t n);
	/* dx[n] = dout * act'(x), x the forward's input: relu'(x) = x > 0
	 * (0 at x == 0, as torch; a NaN x passes dout through); gelu'(x) =
	 * 0.5 * (1 + erf(x * 0.70710678)) + x * (exp(-0.5 * x * x) *
	 * 0.39894228), the last constant 1 / sqrt(2 pi). dx may be dout or x
	 * (each element is read before it is written). */
	void (*act_bwd)(int dt, int act, void *dx, const void *dout,
			const void *x, size_t n);
	/* GPT-NeoX's fused query_key_value output qkv [n, heads * 3 * hd],
	 * per head: q, k, v of head 0, then of head 1, ... (Hugging Face's
	 * view(n, heads, 3 * hd) then chunk(3)): q[t, h * hd + d] = qkv[t,
	 * h * 3 * hd + d], k takes + hd, v + 2 * hd; q, k, v [n, heads * hd]
	 * overwritten. Copies: bit for bit on every backend. */
	void (*qkv_split)(int dt, void *q, void *k, void *v, const void *qkv,
			  int n, int heads, int hd);
	/* The reverse: dqkv [n, heads * 3 * hd] overwritten from dq, dk, dv
	 * [n, heads * hd]. */
	void (*qkv_merge)(int dt, void *dqkv, const void *dq, const void *dk,
			  const void *dv, int n, int heads, int hd);
	/* Inverted dropout of x[n] in place: x[i] = keep(i) ? x[i] * s : +0,
	 * s = 1.0f / (1.0f - p) computed once in fp32, the product rounded
	 * once. keep(i) is integer math (tk_dropout.h): key =
	 * splitmix64(seed ^ splitmix64(stream)), h(i) = splitmix64(key + i *
	 * 0x9E3779B97F4A7C15) (output i of a splitmix64 stream seeded with
	 * key), keep(i) = (h(i) >> 11) * 2^-53 >= p. The same call on the
	 * gradient is the backward. The same bits on every backend. p == 0:
	 * nothing is written; p outside [0, 1] (or NaN): nothing is written
	 * (CUDA records an error). The engine gives each (step, layer, site)
	 * its own stream. */
	void (*dropout)(int dt, void *x, size_t n, float p, uint64_t seed,
			uint64_t stream);
};

/* The router of moe_route. */
enum tk_moe_router {
	TK_MOE_SOFTMAX_TOPK = 0, /* Qwen3-MoE: softmax over all, top-k */
	TK_MOE_TOPK_SOFTMAX = 1, /* gpt-oss: top-k logits, softmax of those */
};

/* The activation of act_fwd / act_bwd (OPT: ReLU, GPT-NeoX: GELU). */
enum tk_act {
	TK_ACT_RELU = 1,
	TK_ACT_GELU = 2,
};

/* The CPU backend: reference kernels in C, OpenBLAS GEMM. */
const tk_ops *tk_cpu_ops(void);

/* The CUDA backend on device 0: 0 and *out set, or -ENODEV (no device or
 * driver, why says which) / -ENOSYS (built without CUDA). */
int tk_cuda_open(const tk_ops **out, char *why, size_t why_len);
/* One GPU the CUDA runtime sees, as tk_cuda_devices lists it. */
typedef struct tk_device_info {
	int index;	 /* the runtime's number: CUDA_VISIBLE_DEVICES's */
	char name[96];	 /* "NVIDIA H200" */
	uint64_t memory; /* total device memory, bytes */
	int cc_major, cc_minor; /* compute capability */
	int usable;		/* the CUDA backend runs on it (8.0 or newer) */
} tk_device_info;

/* Every GPU the CUDA runtime sees, at most cap into out: how many it sees
 * (the count may exceed cap), or -ENODEV (no driver or device, why says
 * which) / -ENOSYS (built without CUDA). Opens no backend and sets no
 * device for later ops (tacod's "devices": "auto", taco-train
 * --list-devices). */
int tk_cuda_devices(tk_device_info *out, int cap, char *why, size_t why_len);
/* After tk_cuda_open: the device comm of a data-parallel job (tk_comm.h),
 * over NCCL, which the module loads at run time (libnccl.so.2: NVIDIA's
 * nvidia-nccl-cu13 wheel, or the toolkit's; $TACO_NCCL_LIB names one). The
 * NCCL id goes from rank 0 to the others over host (the MPI comm, which
 * must outlive it); every sum is bounded by timeout_s. -ENOSYS: built
 * without nccl.h; -ENODEV: no libnccl.so.2; -EIO: NCCL failed; why says
 * which. */
struct tk_comm;
int tk_cuda_comm_open(struct tk_comm *host, double timeout_s,
		      struct tk_comm **out, char *why, size_t why_len);
/* First CUDA/cuBLAS error since open, or NULL; ops return void so the engine
 * polls this after each step. */
const char *tk_cuda_last_error(void);

/* A profile of the CUDA backend by phase, from CUDA events around every
 * op (for benchmarks: each op then costs two event records). Each op
 * belongs to one phase; work on the main stream is busy time, the gaps
 * between ops are idle: the GPU waiting for the host, or for the side or
 * copy stream (side_wait, copy_wait). The side stream (optimizer updates)
 * and the copy stream (offload) overlap the main one and are reported
 * apart. An op's time is from the event before it to the one after it on
 * its stream, so it includes its launch latency when the stream was empty,
 * and, for upload and download, their wait for the host. Memory
 * management, the stream waits and taco_scan_bytes are not device work and
 * are not timed (kernels/cuda/prof.cu). */
enum tk_phase {
	TK_PHASE_GEMM = 0,    /* matmul, linear_bias */
	TK_PHASE_ATTENTION,   /* attention_* */
	TK_PHASE_ELEMENTWISE, /* norms, RoPE, SwiGLU, adds, embeddings,
				 convert, to_f32, memset0, the fused ones */
	TK_PHASE_LOSS,	      /* ce_* */
	TK_PHASE_OPTIMIZER,   /* taco_*, adamw_update */
	TK_PHASE_COPY,	      /* copy_async, upload, download */
	TK_PHASE_COUNT
};

typedef struct tk_profile {
	double wall_ms;			/* start to stop, main stream */
	double main_ms[TK_PHASE_COUNT]; /* busy, main stream */
	double side_ms[TK_PHASE_COUNT]; /* busy, side stream (overlapped) */
	double copy_ms;			/* busy, copy stream (overlapped) */
	double idle_ms;			/* wall - sum of main_ms */
	uint64_t ops;			/* ops timed */
} tk_profile;

/* Profile the ops issued from now on: 0, -ENOSYS (no CUDA backend open,
 * or built without CUDA), -EBUSY (already profiling), -ENOMEM (no events
 * for it) or -EIO. Call it, and stop, between ops, from the thread that
 * issues them: the backend's op table is swapped for timing wrappers. */
int tk_cuda_profile_start(void);
/* Wait for the device, stop profiling and fill *out: 0, -EINVAL (not
 * profiling), -ENOSYS (no CUDA backend open), -ENOSPC (more ops than
 * events: the profile is partial; *out is still filled) or -EIO (an event
 * failed: *out is filled from the others). */
int tk_cuda_profile_stop(tk_profile *out);

#endif
