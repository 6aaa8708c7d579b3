/* qwen3_moe/layer.c: the decoder layer of Qwen3-MoE
 * (Qwen3MoeForCausalLM): Qwen3's attention (llama/layer.c's), and for the
 * MLP of a sparse layer a mixture of SwiGLU experts (moe.c); the layers
 * of mlp_only_layers, or off decoder_sparse_step, are Qwen3's dense
 * layers. */
#include "model/layer.h"

static void qmoe_fwd(step_ctx *c, int l, const void *x, void *out)
{
	if (!taco_config_moe_layer(&c->m->cfg, l))
		taco_llama_layer.fwd(c, l, x, out);
	else
		moe_layer_fwd(c, &moe_swiglu_experts, l, x, out);
}

static void qmoe_recompute(step_ctx *c, int l, const void *x)
{
	if (!taco_config_moe_layer(&c->m->cfg, l))
		taco_llama_layer.recompute(c, l, x);
	else
		moe_layer_recompute(c, l, x);
}

static void qmoe_bwd(step_ctx *c, int l, const void *x)
{
	if (!taco_config_moe_layer(&c->m->cfg, l))
		taco_llama_layer.bwd(c, l, x);
	else
		moe_layer_bwd(c, &moe_swiglu_experts, l, x);
}

const taco_layer_ops taco_qwen3_moe_layer = {qmoe_fwd, qmoe_recompute,
					     qmoe_bwd};
