/* gpt_oss/layer.c: the decoder layer of gpt-oss (GptOssForCausalLM): the
 * Llama family's attention (llama/layer.c's) with q/k/v/o biases, a sink
 * logit per head and, on the sliding layers, a window; for the MLP a
 * mixture of experts with a biased top-k router (moe.c) over gpt-oss's
 * fused experts (experts.c). Every layer has experts. */
#include "model/layer.h"

static void goss_fwd(step_ctx *c, int l, const void *x, void *out)
{
	taco_layer_acts *a = lp_acts(c, l);
	const void *W[TACO_L_COUNT];
	int N = c->w->s.N, H = c->m->cfg.hidden;

	lp_weights(c, l, W);
	llama_attn_fwd(c, l, x, a, W);
	moe_fwd(c, &gpt_oss_experts, l, a, W, a->ln2, out);
	c->o->add(c->dt, out, a->x_mid, (size_t)N * H);
}

/* Backward's recompute stops at ln2: moe_bwd routes again. */
static void goss_recompute(step_ctx *c, int l, const void *x)
{
	const void *W[TACO_L_COUNT];

	lp_weights(c, l, W);
	llama_attn_fwd(c, l, x, lp_acts(c, l), W);
}

static void goss_bwd(step_ctx *c, int l, const void *x)
{
	taco_layer_acts *a = lp_acts(c, l);
	const void *W[TACO_L_COUNT];

	lp_weights(c, l, W);
	moe_bwd(c, &gpt_oss_experts, l, a, W, a->ln2, c->w->dx, c->w->dtmp);
	llama_attn_bwd(c, l, x, a, W);
}

const taco_layer_ops taco_gpt_oss_layer = {goss_fwd, goss_recompute, goss_bwd};
