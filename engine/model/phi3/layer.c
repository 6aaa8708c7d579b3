/* phi3/layer.c: the decoder layer of Phi-3 and Phi-4 (Phi3ForCausalLM):
 * Llama's (llama/layer.c) over two fused tensors, each one TACO tensor as
 * shipped, since TACO steps one entry per column across all of a tensor's
 * rows: qkv_proj [q; k; v] rows and gate_up_proj [gate; up] rows. q, k, v,
 * gate and up are views of their rows; the gradients go to the row blocks
 * of the fused tensors. Partial rotary and LongRoPE are in the rope tables
 * (config.c, model_step.c). */
#include "model/layer.h"

/* lp_weights, with q, k, v, gate and up pointing at their rows. */
static void phi3_weights(step_ctx *c, int l, const void *W[TACO_L_COUNT])
{
	const taco_config *cf = &c->m->cfg;
	size_t H = (size_t)cf->hidden, I = (size_t)cf->intermediate;
	size_t D = (size_t)cf->heads * cf->head_dim;
	size_t Dkv = (size_t)cf->kv_heads * cf->head_dim;

	lp_weights(c, l, W);
	W[TACO_L_Q] = W[TACO_L_QKV];
	W[TACO_L_K] = step_at(W[TACO_L_QKV], D * H, c->es);
	W[TACO_L_V] = step_at(W[TACO_L_QKV], (D + Dkv) * H, c->es);
	W[TACO_L_GATE] = W[TACO_L_GATE_UP];
	W[TACO_L_UP] = step_at(W[TACO_L_GATE_UP], I * H, c->es);
}

static void phi3_fwd(step_ctx *c, int l, const void *x, void *out)
{
	const void *W[TACO_L_COUNT];

	phi3_weights(c, l, W);
	llama_layer_fwd_w(c, l, x, out, 0, W);
}

static void phi3_recompute(step_ctx *c, int l, const void *x)
{
	const void *W[TACO_L_COUNT];

	phi3_weights(c, l, W);
	llama_layer_fwd_w(c, l, x, NULL, 1, W);
}

static void phi3_bwd(step_ctx *c, int l, const void *x)
{
	const void *W[TACO_L_COUNT];

	phi3_weights(c, l, W);
	llama_layer_bwd_w(c, l, x, W);
}

const taco_layer_ops taco_phi3_layer = {phi3_fwd, phi3_recompute, phi3_bwd};
