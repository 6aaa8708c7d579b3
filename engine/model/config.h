/* config.h: a Hugging Face config.json, reduced to what the math needs.
 *
 * Supported architectures: LlamaForCausalLM, MistralForCausalLM,
 * Qwen2ForCausalLM, Qwen3ForCausalLM (the Llama family), OPTForCausalLM,
 * GPTNeoXForCausalLM, Qwen3MoeForCausalLM and GptOssForCausalLM (mixtures of
 * experts), Phi3ForCausalLM (Phi-3, Phi-4). A field that
 * would change the math in a way we do not implement is refused by name; fields
 * that do not change the math (token ids, torch_dtype, max_position_embeddings,
 * ...) are ignored. */
#ifndef TACO_CONFIG_H
#define TACO_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "util/taco_err.h"

/* Limits on sizes a user controls through config.json. */
#define TACO_CONFIG_MAX_BYTES (1u << 20)
#define TACO_MAX_LAYERS 1024
#define TACO_MAX_HIDDEN 65536
#define TACO_MAX_INTERMEDIATE (1 << 20)
#define TACO_MAX_HEADS 1024
#define TACO_MAX_HEAD_DIM 1024
#define TACO_MAX_VOCAB (1 << 22)
#define TACO_MAX_EXPERTS 1024
#define TACO_MAX_EXPERTS_PER_TOK 32 /* tk_moe.h's TK_MOE_MAX_K */

enum taco_arch {
	TACO_ARCH_LLAMA = 1,
	TACO_ARCH_MISTRAL,
	TACO_ARCH_QWEN2,
	TACO_ARCH_QWEN3,
	TACO_ARCH_OPT,
	TACO_ARCH_GPT_NEOX,
	TACO_ARCH_QWEN3_MOE,
	TACO_ARCH_GPT_OSS,
	TACO_ARCH_PHI3,
};

/* The layer wiring a config takes (engine/model/<family>/). */
enum taco_family {
	TACO_FAMILY_LLAMA = 0, /* Llama, Mistral, Qwen2, Qwen3 */
	TACO_FAMILY_OPT,
	TACO_FAMILY_NEOX,
	TACO_FAMILY_QWEN3_MOE, /* Qwen3's attention, experts for MLPs */
	TACO_FAMILY_GPT_OSS,   /* sinks, biased router, fused experts */
	TACO_FAMILY_PHI3,      /* Llama's math, q/k/v and gate/up fused */
};

/* The MLP: gated SiLU (3 projections) or fc1, activation, fc2. */
enum taco_act {
	TACO_ACT_SWIGLU = 0,
	TACO_ACT_RELU,
	TACO_ACT_GELU, /* exact, with erf */
};

enum taco_rope_type {
	TACO_ROPE_DEFAULT = 0,
	TACO_ROPE_LLAMA3,
	TACO_ROPE_YARN,
	TACO_ROPE_LONGROPE,
};

/* LongRoPE's factors: one a rotated pair of dims. */
#define TACO_ROPE_MAX_FACTORS (TACO_MAX_HEAD_DIM / 2)

typedef struct taco_config {
	int arch;
	int hidden;	  /* hidden_size */
	int intermediate; /* intermediate_size */
	int layers;	  /* num_hidden_layers */
	int heads;	  /* num_attention_heads */
	int kv_heads;	  /* num_key_value_heads (GQA); = heads when absent */
	int head_dim;	  /* head_dim, else hidden / heads */
	int vocab;	  /* vocab_size */
	int max_pos;	  /* max_position_embeddings (informational) */
	float rms_eps;	  /* rms_norm_eps */
	double rope_theta;
	int rope_type;
	/* llama3 rope scaling */
	double rope_factor;
	double rope_low_freq_factor;
	double rope_high_freq_factor;
	int rope_original_max_pos;
	/* YaRN (rope_factor, rope_original_max_pos too) */
	double rope_beta_fast, rope_beta_slow;
	int rope_truncate;
	/* cos and sin are multiplied by it (YaRN's and LongRoPE's attention
	 * factor; 1 otherwise) */
	double rope_attn_factor;
	/* LongRoPE (rope_original_max_pos too): each frequency divided by
	 * its short factor, or by its long one where a batch's last position
	 * passes rope_original_max_pos */
	float rope_short[TACO_ROPE_MAX_FACTORS];
	float rope_long[TACO_ROPE_MAX_FACTORS];
	int tie_embeddings; /* tie_word_embeddings */
	int qkv_bias;	    /* q/k/v projections have biases */
	int o_bias;	    /* o projection has a bias */
	int qk_norm;	    /* Qwen3 per-head RMSNorm of q and k */
	int sliding_window; /* 0 = none */
	/* layers that attend fully despite sliding_window (layer_types'
	 * full_attention), one bit a layer */
	uint8_t full_attn[TACO_MAX_LAYERS / 8];
	int attn_sinks; /* gpt-oss: a learned sink logit per head */
	int gated_mlp;	/* SwiGLU (3 projections) rather than fc1/fc2 */
	/* OPT and GPT-NeoX (the Llama family: RMSNorm, SwiGLU, pre-norm,
	 * sequential residual, full rotary, a final norm) */
	int family;	       /* TACO_FAMILY_* */
	int layer_norm;	       /* LayerNorm with weight and bias (eps:
				  rms_eps), not RMSNorm */
	int act;	       /* TACO_ACT_* */
	int mlp_bias;	       /* fc1 / fc2 carry biases */
	int norm_before;       /* pre-norm; 0: OPT's post-LN */
	int parallel_residual; /* GPT-NeoX: x + attn(ln1 x) + mlp(ln2 x) */
	int rotary_dim;	       /* rotated dims of a head: head_dim, fewer
				  (NeoX partial rotary), 0 (OPT) */
	int learned_pos;       /* OPT: positions from a table of max_pos +
				  2 rows, row pos + 2 */
	int proj_dim;	       /* OPT word_embed_proj_dim: the embedding's
				  width (project_in / out when != hidden) */
	int final_norm;	       /* a norm after the last layer */
	float dropout;	       /* residual dropout the config trains with
				  (OPT dropout, NeoX hidden_dropout) */
	int pad_embed;	       /* OPT: the embedding's padding_idx
				  (pad_token_id), whose row the lookup
				  gives no gradient; -1: none */
	/* A mixture of experts (experts > 0): each sparse layer's MLP is a
	 * router over `experts` SwiGLU experts of moe_intermediate columns,
	 * top_k of them a token; the other layers keep a dense MLP of
	 * `intermediate` columns. */
	int experts;	      /* num_experts */
	int top_k;	      /* num_experts_per_tok */
	int moe_intermediate; /* moe_intermediate_size */
	int norm_topk;	      /* norm_topk_prob */
	int sparse_step;      /* decoder_sparse_step */
	/* mlp_only_layers, one bit a layer */
	uint8_t mlp_only[TACO_MAX_LAYERS / 8];
	double aux_coef;   /* router_aux_loss_coef */
	int router_logits; /* output_router_logits: the auxiliary loss is
			      trained by default */
	/* gpt-oss: the router has a bias and takes the softmax over the top
	 * k logits (tk_moe.h's TOPK_SOFTMAX); its experts are fused tensors
	 * (gate_up [E, H, 2 I] interleaved, down [E, I, H], x @ W) with
	 * biases, activated by glu_clamp (swiglu_alpha, swiglu_limit). */
	int router_bias;
	int fused_experts;
	float glu_alpha, glu_limit;
} taco_config;

/* Whether layer l's MLP is a mixture of experts. */
int taco_config_moe_layer(const taco_config *c, int l);
/* Whether some layer has a dense MLP. */
int taco_config_has_dense(const taco_config *c);
/* Layer l's attention window (0: full). */
int taco_config_window(const taco_config *c, int l);

/* Parses config.json text. name is used in error messages (a path). */
int taco_config_parse(const char *json, size_t len, const char *name,
		      taco_config *out, taco_err *err);

/* Reads and parses path. */
int taco_config_load(const char *path, taco_config *out, taco_err *err);

const char *taco_arch_name(int arch);

/* inv_freq[rotary_dim / 2] as Hugging Face computes it (fp32 result),
 * scaling applied. */
void taco_config_inv_freq(const taco_config *c, float *inv_freq);
/* LongRoPE: the frequencies of the long factors, and whether a call whose
 * last position is last_pos takes them (transformers: its max position
 * id + 1 past original_max_position_embeddings). */
void taco_config_inv_freq_long(const taco_config *c, float *inv_freq);
int taco_config_rope_long(const taco_config *c, int last_pos);

#endif
