/* gpt_oss/layer.c: the decoder layer of gpt-oss (GptOssForCausalLM): the
 * Llama family's attention (llama/layer.c's) with q/k/v/o biases, a sink
 * logit per head and, on the sliding layers, a window; for the MLP a
 * mixture of experts with a biased top-k router (moe.c) over gpt-oss's
 * fused experts (experts.c). Every layer has experts. */
#include "model/layer.h"

static void goss_fwd(step_ctx *c, int l, const void *x, void *out)
{
	moe_layer_fwd(c, &gpt_oss_experts, l, x, out);
}

static void goss_bwd(step_ctx *c, int l, const void *x)
{
	moe_layer_bwd(c, &gpt_oss_experts, l, x);
}

const taco_layer_ops taco_gpt_oss_layer = {goss_fwd, moe_layer_recompute,
					   goss_bwd};
