/* names.c: the tensors of each family as its Hugging Face checkpoint names
 * them, and their shapes. The model keeps these names: TACO's tensor index
 * is a position in their sorted list and the export writes them back. */
#include <stdio.h>
#include <string.h>

#include "names.h"

/* One family's names: a layer's tensors after the layer prefix, by slot
 * (NULL: the family has no such slot). */
typedef struct family_names {
	const char *layer_prefix; /* printf format with the layer index */
	const char *slot[TACO_L_COUNT];
} family_names;

static const family_names llama = {
    "model.layers.%d.",
    {
	[TACO_L_ATTN_NORM] = "input_layernorm.weight",
	[TACO_L_Q] = "self_attn.q_proj.weight",
	[TACO_L_K] = "self_attn.k_proj.weight",
	[TACO_L_V] = "self_attn.v_proj.weight",
	[TACO_L_O] = "self_attn.o_proj.weight",
	[TACO_L_Q_BIAS] = "self_attn.q_proj.bias",
	[TACO_L_K_BIAS] = "self_attn.k_proj.bias",
	[TACO_L_V_BIAS] = "self_attn.v_proj.bias",
	[TACO_L_O_BIAS] = "self_attn.o_proj.bias",
	[TACO_L_Q_NORM] = "self_attn.q_norm.weight",
	[TACO_L_K_NORM] = "self_attn.k_norm.weight",
	[TACO_L_MLP_NORM] = "post_attention_layernorm.weight",
	[TACO_L_GATE] = "mlp.gate_proj.weight",
	[TACO_L_UP] = "mlp.up_proj.weight",
	[TACO_L_DOWN] = "mlp.down_proj.weight",
	[TACO_L_ROUTER] = "mlp.gate.weight",
    }};

static const family_names gpt_oss = {
    "model.layers.%d.",
    {
	[TACO_L_ATTN_NORM] = "input_layernorm.weight",
	[TACO_L_Q] = "self_attn.q_proj.weight",
	[TACO_L_K] = "self_attn.k_proj.weight",
	[TACO_L_V] = "self_attn.v_proj.weight",
	[TACO_L_O] = "self_attn.o_proj.weight",
	[TACO_L_Q_BIAS] = "self_attn.q_proj.bias",
	[TACO_L_K_BIAS] = "self_attn.k_proj.bias",
	[TACO_L_V_BIAS] = "self_attn.v_proj.bias",
	[TACO_L_O_BIAS] = "self_attn.o_proj.bias",
	[TACO_L_SINKS] = "self_attn.sinks",
	[TACO_L_MLP_NORM] = "post_attention_layernorm.weight",
	[TACO_L_ROUTER] = "mlp.router.weight",
	[TACO_L_ROUTER_BIAS] = "mlp.router.bias",
    }};

static const family_names opt = {
    "model.decoder.layers.%d.",
    {
	[TACO_L_ATTN_NORM] = "self_attn_layer_norm.weight",
	[TACO_L_ATTN_NORM_BIAS] = "self_attn_layer_norm.bias",
	[TACO_L_Q] = "self_attn.q_proj.weight",
	[TACO_L_K] = "self_attn.k_proj.weight",
	[TACO_L_V] = "self_attn.v_proj.weight",
	[TACO_L_O] = "self_attn.out_proj.weight",
	[TACO_L_Q_BIAS] = "self_attn.q_proj.bias",
	[TACO_L_K_BIAS] = "self_attn.k_proj.bias",
	[TACO_L_V_BIAS] = "self_attn.v_proj.bias",
	[TACO_L_O_BIAS] = "self_attn.out_proj.bias",
	/* the layer's second LayerNorm, before the MLP */
	[TACO_L_MLP_NORM] = "final_layer_norm.weight",
	[TACO_L_MLP_NORM_BIAS] = "final_layer_norm.bias",
	[TACO_L_UP] = "fc1.weight",
	[TACO_L_UP_BIAS] = "fc1.bias",
	[TACO_L_DOWN] = "fc2.weight",
	[TACO_L_DOWN_BIAS] = "fc2.bias",
    }};

static const family_names neox = {
    "gpt_neox.layers.%d.",
    {
	[TACO_L_ATTN_NORM] = "input_layernorm.weight",
	[TACO_L_ATTN_NORM_BIAS] = "input_layernorm.bias",
	[TACO_L_QKV] = "attention.query_key_value.weight",
	[TACO_L_QKV_BIAS] = "attention.query_key_value.bias",
	[TACO_L_O] = "attention.dense.weight",
	[TACO_L_O_BIAS] = "attention.dense.bias",
	[TACO_L_MLP_NORM] = "post_attention_layernorm.weight",
	[TACO_L_MLP_NORM_BIAS] = "post_attention_layernorm.bias",
	[TACO_L_UP] = "mlp.dense_h_to_4h.weight",
	[TACO_L_UP_BIAS] = "mlp.dense_h_to_4h.bias",
	[TACO_L_DOWN] = "mlp.dense_4h_to_h.weight",
	[TACO_L_DOWN_BIAS] = "mlp.dense_4h_to_h.bias",
    }};

/* Phi-3's fused qkv_proj ([q; k; v] rows) and gate_up_proj ([gate; up]
 * rows), each one tensor as shipped. */
static const family_names phi3 = {
    "model.layers.%d.",
    {
	[TACO_L_ATTN_NORM] = "input_layernorm.weight",
	[TACO_L_QKV] = "self_attn.qkv_proj.weight",
	[TACO_L_O] = "self_attn.o_proj.weight",
	[TACO_L_MLP_NORM] = "post_attention_layernorm.weight",
	[TACO_L_GATE_UP] = "mlp.gate_up_proj.weight",
	[TACO_L_DOWN] = "mlp.down_proj.weight",
    }};

static const family_names *names_of(const taco_config *c)
{
	switch (c->family) {
	case TACO_FAMILY_PHI3:
		return &phi3;
	case TACO_FAMILY_OPT:
		return &opt;
	case TACO_FAMILY_NEOX:
		return &neox;
	case TACO_FAMILY_GPT_OSS:
		return &gpt_oss;
	default:
		return &llama;
	}
}

/* Shape of layer l's slot, or ndim 0 when it has no such tensor. */
static int slot_shape(const taco_config *c, int l, int slot, int64_t shape[2])
{
	int64_t H = c->hidden, I = c->intermediate;
	int moe = taco_config_moe_layer(c, l);
	int64_t D = (int64_t)c->heads * c->head_dim;
	int64_t Dkv = (int64_t)c->kv_heads * c->head_dim;
	int fused =
	    c->family == TACO_FAMILY_NEOX || c->family == TACO_FAMILY_PHI3;
	int gate_up = c->family == TACO_FAMILY_PHI3;

	switch (slot) {
	case TACO_L_ATTN_NORM:
	case TACO_L_MLP_NORM:
		shape[0] = H;
		return 1;
	case TACO_L_ATTN_NORM_BIAS:
	case TACO_L_MLP_NORM_BIAS:
		shape[0] = H;
		return c->layer_norm ? 1 : 0;
	case TACO_L_Q:
		shape[0] = D, shape[1] = H;
		return fused ? 0 : 2;
	case TACO_L_K:
	case TACO_L_V:
		shape[0] = Dkv, shape[1] = H;
		return fused ? 0 : 2;
	case TACO_L_QKV:
		shape[0] = D + 2 * Dkv, shape[1] = H;
		return fused ? 2 : 0;
	case TACO_L_O:
		shape[0] = H, shape[1] = D;
		return 2;
	case TACO_L_Q_BIAS:
		shape[0] = D;
		return c->qkv_bias && !fused ? 1 : 0;
	case TACO_L_K_BIAS:
	case TACO_L_V_BIAS:
		shape[0] = Dkv;
		return c->qkv_bias && !fused ? 1 : 0;
	case TACO_L_QKV_BIAS:
		shape[0] = D + 2 * Dkv;
		return c->qkv_bias && fused ? 1 : 0;
	case TACO_L_O_BIAS:
		shape[0] = H;
		return c->o_bias ? 1 : 0;
	case TACO_L_Q_NORM:
	case TACO_L_K_NORM:
		shape[0] = c->head_dim;
		return c->qk_norm ? 1 : 0;
	case TACO_L_ROUTER:
		shape[0] = c->experts, shape[1] = H;
		return moe ? 2 : 0;
	case TACO_L_ROUTER_BIAS:
		shape[0] = c->experts;
		return moe && c->router_bias ? 1 : 0;
	case TACO_L_SINKS:
		shape[0] = c->heads;
		return c->attn_sinks ? 1 : 0;
	case TACO_L_GATE:
		shape[0] = I, shape[1] = H;
		return c->gated_mlp && !moe && !gate_up ? 2 : 0;
	case TACO_L_UP:
		shape[0] = I, shape[1] = H;
		return moe || gate_up ? 0 : 2;
	case TACO_L_GATE_UP:
		shape[0] = 2 * I, shape[1] = H;
		return gate_up ? 2 : 0;
	case TACO_L_UP_BIAS:
		shape[0] = I;
		return c->mlp_bias ? 1 : 0;
	case TACO_L_DOWN:
		shape[0] = H, shape[1] = I;
		return moe ? 0 : 2;
	case TACO_L_DOWN_BIAS:
		shape[0] = H;
		return c->mlp_bias ? 1 : 0;
	}
	return 0;
}

int taco_layer_tensor_name(const taco_config *c, int l, int slot, char *buf,
			   size_t len, int64_t shape[2])
{
	const family_names *f = names_of(c);
	int nd, n;

	if (slot < 0 || slot >= TACO_L_COUNT || !f->slot[slot])
		return 0;
	shape[0] = shape[1] = 0;
	if (!(nd = slot_shape(c, l, slot, shape)))
		return 0;
	n = snprintf(buf, len, f->layer_prefix, l);
	if (n < 0 || (size_t)n >= len)
		return 0;
	snprintf(buf + n, len - (size_t)n, "%s", f->slot[slot]);
	return nd;
}

/* gpt-oss's fused expert tensors by slot, and expert e's slice. */
static int fused_expert(const taco_config *c, int l, int e, int x, char *buf,
			size_t len, int64_t shape[2])
{
	static const char *const fused[TACO_X_COUNT] = {
	    [TACO_X_UP] = "gate_up_proj",
	    [TACO_X_DOWN] = "down_proj",
	    [TACO_X_UP_BIAS] = "gate_up_proj_bias",
	    [TACO_X_DOWN_BIAS] = "down_proj_bias",
	};
	int64_t H = c->hidden, I = c->moe_intermediate;
	int n;

	if (!fused[x])
		return 0;
	n = snprintf(buf, len, "model.layers.%d.mlp.experts.%s[%d]", l,
		     fused[x], e);
	if (n < 0 || (size_t)n >= len)
		return 0;
	switch (x) {
	case TACO_X_UP:
		shape[0] = H, shape[1] = 2 * I;
		return 2;
	case TACO_X_DOWN:
		shape[0] = I, shape[1] = H;
		return 2;
	case TACO_X_UP_BIAS:
		shape[0] = 2 * I;
		return 1;
	default:
		shape[0] = H;
		return 1;
	}
}

int taco_expert_tensor_name(const taco_config *c, int l, int e, int x,
			    char *buf, size_t len, int64_t shape[2])
{
	static const char *const proj[TACO_X_COUNT] = {"gate_proj", "up_proj",
						       "down_proj"};
	int64_t H = c->hidden, I = c->moe_intermediate;
	int n;

	if (!taco_config_moe_layer(c, l) || e < 0 || e >= c->experts || x < 0 ||
	    x >= TACO_X_COUNT)
		return 0;
	shape[0] = shape[1] = 0;
	if (c->fused_experts)
		return fused_expert(c, l, e, x, buf, len, shape);
	if (!proj[x])
		return 0;
	n = snprintf(buf, len, "model.layers.%d.mlp.experts.%d.%s.weight", l, e,
		     proj[x]);
	if (n < 0 || (size_t)n >= len)
		return 0;
	shape[0] = x == TACO_X_DOWN ? H : I;
	shape[1] = x == TACO_X_DOWN ? I : H;
	return 2;
}

int taco_expert_view(const char *name, char *fused, size_t len, int *e)
{
	size_t n = strlen(name), i;
	long v = 0;

	if (n < 4 || name[n - 1] != ']')
		return 0;
	for (i = n - 1; i > 0 && name[i - 1] >= '0' && name[i - 1] <= '9'; i--)
		;
	if (i == n - 1 || i < 2 || name[i - 1] != '[' || i - 1 >= len ||
	    n - 1 - i > 6)
		return 0;
	for (size_t j = i; j < n - 1; j++)
		v = v * 10 + (name[j] - '0');
	memcpy(fused, name, i - 1);
	fused[i - 1] = '\0';
	*e = (int)v;
	return 1;
}

int taco_model_tensor_names(const taco_config *c, taco_model_tensor *out)
{
	int64_t H = c->hidden, V = c->vocab, P = c->proj_dim;
	int n = 0;

#define PUT(role, nm, nd, d0, d1)                                              \
	out[n++] = (taco_model_tensor)                                         \
	{                                                                      \
		(role), (nm), (nd),                                            \
		{                                                              \
			(d0), (d1)                                             \
		}                                                              \
	}
	switch (c->family) {
	case TACO_FAMILY_OPT:
		PUT(TACO_T_EMBED, "model.decoder.embed_tokens.weight", 2, V, P);
		/* learned positions carry an offset of 2 */
		PUT(TACO_T_POS, "model.decoder.embed_positions.weight", 2,
		    (int64_t)c->max_pos + 2, H);
		if (P != H) { /* Linear(P -> H) and back, no biases */
			PUT(TACO_T_PROJ_IN, "model.decoder.project_in.weight",
			    2, H, P);
			PUT(TACO_T_PROJ_OUT, "model.decoder.project_out.weight",
			    2, P, H);
		}
		if (c->final_norm) {
			PUT(TACO_T_FINAL_NORM,
			    "model.decoder.final_layer_norm.weight", 1, H, 0);
			PUT(TACO_T_FINAL_NORM_BIAS,
			    "model.decoder.final_layer_norm.bias", 1, H, 0);
		}
		break;
	case TACO_FAMILY_NEOX:
		PUT(TACO_T_EMBED, "gpt_neox.embed_in.weight", 2, V, H);
		PUT(TACO_T_FINAL_NORM, "gpt_neox.final_layer_norm.weight", 1, H,
		    0);
		PUT(TACO_T_FINAL_NORM_BIAS, "gpt_neox.final_layer_norm.bias", 1,
		    H, 0);
		if (!c->tie_embeddings)
			PUT(TACO_T_HEAD, "embed_out.weight", 2, V, H);
		break;
	default:
		PUT(TACO_T_EMBED, "model.embed_tokens.weight", 2, V, H);
		PUT(TACO_T_FINAL_NORM, "model.norm.weight", 1, H, 0);
		if (!c->tie_embeddings)
			PUT(TACO_T_HEAD, "lm_head.weight", 2, V, H);
		break;
	}
#undef PUT
	return n;
}
