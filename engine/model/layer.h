/* layer.h: what the families' decoder layers share (internal to
 * engine/model): the linear layers, the norms, the MLP's blocks, the
 * gradient hand-over of small tensors. Each family's layer is one file,
 * <family>/layer.c, behind a taco_layer_ops table (step.h). */
#ifndef TACO_MODEL_LAYER_H
#define TACO_MODEL_LAYER_H

#include "step.h"

/* The layer ops of each family. */
extern const taco_layer_ops taco_llama_layer;
extern const taco_layer_ops taco_opt_layer;
extern const taco_layer_ops taco_neox_layer;
extern const taco_layer_ops taco_qwen3_moe_layer;
extern const taco_layer_ops taco_gpt_oss_layer;
extern const taco_layer_ops taco_phi3_layer;

/* llama/layer.c: the Llama family's attention, which Qwen3-MoE shares.
 * fwd: from the layer input x through ln2 = norm(x_mid); bwd: from w->dtmp
 * (the gradient of ln2) and w->dx (the layer output's), leaving in w->dx
 * the gradient of x. */
void llama_attn_fwd(step_ctx *c, int l, const void *x, taco_layer_acts *a,
		    const void *W[TACO_L_COUNT]);
void llama_attn_bwd(step_ctx *c, int l, const void *x, taco_layer_acts *a,
		    const void *W[TACO_L_COUNT]);
/* The whole Llama layer over the weights W (lp_weights', or views of them:
 * Phi-3's fused tensors); recompute stops at ln2. Where the layer has
 * fused tensors (TACO_L_QKV, TACO_L_GATE_UP: [q; k; v] and [gate; up]
 * rows), the gradients go to their row blocks. */
void llama_layer_fwd_w(step_ctx *c, int l, const void *x, void *out,
		       int recompute, const void *W[TACO_L_COUNT]);
void llama_layer_bwd_w(step_ctx *c, int l, const void *x,
		       const void *W[TACO_L_COUNT]);

/* A family's experts, which moe.c runs over the slots sorted by expert
 * (expert e's rows are its run of moe_counts(c, l)[e] rows): fwd from
 * a->xg into a->ey; bwd from w->moe_dy (the slots' output gradient) to
 * their input gradient, over it, and the experts' gradients to the sink
 * (an expert without a slot gets none). */
typedef struct moe_experts_ops {
	void (*fwd)(step_ctx *c, int l, taco_layer_acts *a);
	void (*bwd)(step_ctx *c, int l, taco_layer_acts *a);
} moe_experts_ops;

extern const moe_experts_ops moe_swiglu_experts; /* Qwen3-MoE's (moe.c) */
extern const moe_experts_ops gpt_oss_experts;	 /* gpt_oss/experts.c */

/* moe.c: a mixture of experts' MLP of layer l (its router, W[TACO_L_ROUTER]
 * and its bias, and experts x) from in [N, H] (ln2). fwd: out [N, H]; bwd:
 * dout [N, H] the gradient of out, din [N, H] that of in (overwritten),
 * the router's and the experts' gradients to the sink. Backward routes
 * again unless activations are kept. */
void moe_fwd(step_ctx *c, const moe_experts_ops *x, int l, taco_layer_acts *a,
	     const void *W[TACO_L_COUNT], const void *in, void *out);
void moe_bwd(step_ctx *c, const moe_experts_ops *x, int l, taco_layer_acts *a,
	     const void *W[TACO_L_COUNT], const void *in, const void *dout,
	     void *din);
/* A decoder layer of the Llama family's attention (llama_attn_*) and a
 * mixture of experts x for its MLP (Qwen3-MoE's sparse layers, gpt-oss's
 * every layer), as taco_layer_ops' three calls; the recompute stops at
 * ln2, since moe_bwd routes again. */
void moe_layer_fwd(step_ctx *c, const moe_experts_ops *x, int l, const void *in,
		   void *out);
void moe_layer_recompute(step_ctx *c, int l, const void *in);
void moe_layer_bwd(step_ctx *c, const moe_experts_ops *x, int l,
		   const void *in);
/* Expert e of layer l's tensor x (TACO_X_*), -1 if none. */
int moe_expert_id(const step_ctx *c, int l, int e, int x);
/* Layer l's count of slots by expert, host memory [E]. */
const int32_t *moe_counts(const step_ctx *c, int l);
/* Expert e of layer l received no slot here: with data parallel, where
 * another rank's slice reached it, its tensor x's zero gradient, so that
 * the ranks hand the same parts to the sums (call it where its gradient
 * would be handed). */
void moe_idle_grad(step_ctx *c, int l, int e, int x);

/* y[N, out] = x[N, in] W[out, in]^T (+ b[out], added before y is
 * rounded). */
void lp_linear_fwd(step_ctx *c, void *y, const void *x, const void *W,
		   const void *b, int N, int in, int out);
/* dx[N, in] = beta * dx + dy[N, out] W[out, in] */
void lp_linear_bwd_x(step_ctx *c, void *dx, const void *dy, const void *W,
		     int N, int in, int out, float beta);
/* Layer l's weights as the ops read them, by slot (NULL: none). */
void lp_weights(step_ctx *c, int l, const void *W[TACO_L_COUNT]);
/* Layer l's activations (one set, or one per layer when kept). */
taco_layer_acts *lp_acts(step_ctx *c, int l);
/* MLP block b: columns [j0, j0 + *n) of the intermediate dimension. */
int lp_block(step_ctx *c, int b, int *n);
/* Where a norm weight's (or bias's) gradient [H] accumulates: the sink's
 * buffer, or when not wanted a zeroed block, since the op adds it
 * somewhere; grad_whole_end(c, id) hands it over after the op. */
float *lp_norm_grad(step_ctx *c, int id, int H);
/* A bias's gradient: the column sums of dy [N, C], to the sink. */
void lp_bias_grad(step_ctx *c, int id, const void *dy, int N, int C);

/* The family's norm of x [n, H] into out: RMSNorm (b and mean unused)
 * or LayerNorm with bias; mean and rstd (f32 [n]) kept for backward. */
void lp_norm_fwd(step_ctx *c, void *out, float *mean, float *rstd,
		 const void *x, const void *w, const void *b, int n, int H);
/* Its backward from dout: the input gradient into tmp [n, H], then added
 * to dres unless dres is NULL; the weight's (tensor wid) and the bias's
 * (bid) gradients to the sink. tmp may be dout (LayerNorm; RMSNorm without
 * dres). */
void lp_norm_bwd(step_ctx *c, int wid, int bid, void *dres, void *tmp,
		 const void *dout, const void *x, const void *w,
		 const float *mean, const float *rstd, int n, int H);

/* Residual dropout of x [n] (site 0: the attention branch, 1: the MLP's)
 * of layer l while training: the mask of (seed, batch rng, l, site). */
void lp_dropout(step_ctx *c, void *x, size_t n, int l, int site);
/* The gradient of a dropped branch: dy [N, H] masked into w->ddrop, or dy
 * itself without dropout. */
const void *lp_dropped(step_ctx *c, const void *dy, int l, int site);

/* The fc1 / activation / fc2 MLP (OPT, GPT-NeoX) of in [N, H] into out
 * [N, H], biases included, block by block. */
void lp_mlp_fwd(step_ctx *c, taco_layer_acts *a, const void *W[TACO_L_COUNT],
		const void *in, void *out);
/* Its backward: dout [N, H] the gradient of its output, din [N, H] that
 * of its input (overwritten); the weights' gradients to the sink. Each
 * block is recomputed from in unless activations are kept. */
void lp_mlp_bwd(step_ctx *c, int l, taco_layer_acts *a,
		const void *W[TACO_L_COUNT], const void *in, const void *dout,
		void *din);

#endif
