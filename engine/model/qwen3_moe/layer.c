/* qwen3_moe/layer.c: the decoder layer of Qwen3-MoE
 * (Qwen3MoeForCausalLM): Qwen3's attention (llama/layer.c's), and for the
 * MLP of a sparse layer a mixture of SwiGLU experts (moe.c); the layers
 * of mlp_only_layers, or off decoder_sparse_step, are Qwen3's dense
 * layers. */
#include "model/layer.h"

static void qmoe_fwd(step_ctx *c, int l, const void *x, void *out)
{
	taco_layer_acts *a = lp_acts(c, l);
	const void *W[TACO_L_COUNT];
	int N = c->w->s.N, H = c->m->cfg.hidden;

	if (!taco_config_moe_layer(&c->m->cfg, l)) {
		taco_llama_layer.fwd(c, l, x, out);
		return;
	}
	lp_weights(c, l, W);
	llama_attn_fwd(c, l, x, a, W);
	moe_fwd(c, &moe_swiglu_experts, l, a, W, a->ln2, out);
	c->o->add(c->dt, out, a->x_mid, (size_t)N * H);
}

/* Backward's recompute stops at ln2: moe_bwd routes again. */
static void qmoe_recompute(step_ctx *c, int l, const void *x)
{
	const void *W[TACO_L_COUNT];

	if (!taco_config_moe_layer(&c->m->cfg, l)) {
		taco_llama_layer.recompute(c, l, x);
		return;
	}
	lp_weights(c, l, W);
	llama_attn_fwd(c, l, x, lp_acts(c, l), W);
}

static void qmoe_bwd(step_ctx *c, int l, const void *x)
{
	taco_layer_acts *a = lp_acts(c, l);
	const void *W[TACO_L_COUNT];

	if (!taco_config_moe_layer(&c->m->cfg, l)) {
		taco_llama_layer.bwd(c, l, x);
		return;
	}
	lp_weights(c, l, W);
	moe_bwd(c, &moe_swiglu_experts, l, a, W, a->ln2, c->w->dx,
		c->w->dtmp);
	llama_attn_bwd(c, l, x, a, W);
}

const taco_layer_ops taco_qwen3_moe_layer = {qmoe_fwd, qmoe_recompute,
					     qmoe_bwd};
