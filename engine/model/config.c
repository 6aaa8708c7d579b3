#include "config.h"
#include "util/json_file.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const struct {
	const char *arch;
	const char *model_type;
	int id;
} known_archs[] = {
    {"LlamaForCausalLM", "llama", TACO_ARCH_LLAMA},
    {"MistralForCausalLM", "mistral", TACO_ARCH_MISTRAL},
    {"Qwen2ForCausalLM", "qwen2", TACO_ARCH_QWEN2},
    {"Qwen3ForCausalLM", "qwen3", TACO_ARCH_QWEN3},
    {"OPTForCausalLM", "opt", TACO_ARCH_OPT},
    {"GPTNeoXForCausalLM", "gpt_neox", TACO_ARCH_GPT_NEOX},
    {"Qwen3MoeForCausalLM", "qwen3_moe", TACO_ARCH_QWEN3_MOE},
    {"GptOssForCausalLM", "gpt_oss", TACO_ARCH_GPT_OSS},
    {"Phi3ForCausalLM", "phi3", TACO_ARCH_PHI3},
};

const char *taco_arch_name(int arch)
{
	for (size_t i = 0; i < sizeof(known_archs) / sizeof(known_archs[0]);
	     i++)
		if (known_archs[i].id == arch)
			return known_archs[i].arch;
	return "unknown";
}

/* Reads an integer field into *out. Absent: *out keeps its default unless
 * required. Present but not an integer in [lo, hi]: error. */
static int cfg_int(json_t *root, const char *name, const char *key, int *out,
		   int required, long long lo, long long hi, taco_err *err)
{
	json_t *v = json_object_get(root, key);
	json_int_t x;

	if (!v || json_is_null(v)) {
		if (required)
			return taco_err_set(err, -EINVAL,
					    "%s: field '%s' is required", name,
					    key);
		return 0;
	}
	if (!json_is_integer(v))
		return taco_err_set(err, -EINVAL,
				    "%s: field '%s' must be an integer", name,
				    key);
	x = json_integer_value(v);
	if (x < lo || x > hi)
		return taco_err_set(err, -EINVAL,
				    "%s: field '%s' = %lld is outside [%lld, "
				    "%lld]",
				    name, key, (long long)x, lo, hi);
	*out = (int)x;
	return 0;
}

static int cfg_num(json_t *root, const char *name, const char *key, double *out,
		   double lo, double hi, taco_err *err)
{
	json_t *v = json_object_get(root, key);
	double x;

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_number(v))
		return taco_err_set(
		    err, -EINVAL, "%s: field '%s' must be a number", name, key);
	x = json_number_value(v);
	if (!(x >= lo && x <= hi))
		return taco_err_set(err, -EINVAL,
				    "%s: field '%s' = %g is outside [%g, %g]",
				    name, key, x, lo, hi);
	*out = x;
	return 0;
}

static int cfg_bool(json_t *root, const char *name, const char *key, int *out,
		    taco_err *err)
{
	json_t *v = json_object_get(root, key);

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_boolean(v))
		return taco_err_set(err, -EINVAL,
				    "%s: field '%s' must be true or false",
				    name, key);
	*out = json_is_true(v);
	return 0;
}

static int parse_arch(json_t *root, const char *name, taco_config *c,
		      taco_err *err)
{
	json_t *archs = json_object_get(root, "architectures");
	json_t *mt = json_object_get(root, "model_type");
	const char *want = NULL;
	int by_type = 0;

	if (archs && json_is_array(archs) && json_array_size(archs) > 0) {
		if (json_array_size(archs) != 1 ||
		    !json_is_string(json_array_get(archs, 0)))
			return taco_err_set(err, -EINVAL,
					    "%s: field 'architectures' must "
					    "hold exactly one name",
					    name);
		want = json_string_value(json_array_get(archs, 0));
	} else if (mt && json_is_string(mt)) {
		want = json_string_value(mt);
		by_type = 1;
	} else {
		return taco_err_set(err, -EINVAL,
				    "%s: neither 'architectures' nor "
				    "'model_type' names the model",
				    name);
	}
	for (size_t i = 0; i < sizeof(known_archs) / sizeof(known_archs[0]);
	     i++) {
		if (strcmp(want, by_type ? known_archs[i].model_type
					 : known_archs[i].arch) == 0) {
			c->arch = known_archs[i].id;
			return 0;
		}
	}
	return taco_err_set(
	    err, -ENOTSUP,
	    "%s: architecture '%s' is not supported (supported: "
	    "LlamaForCausalLM, MistralForCausalLM, "
	    "Qwen2ForCausalLM, Qwen3ForCausalLM, OPTForCausalLM, "
	    "GPTNeoXForCausalLM, Qwen3MoeForCausalLM)",
	    name, want);
}

/* LongRoPE's short_factor or long_factor: rotary_dim / 2 numbers. */
static int longrope_factors(json_t *rp, const char *name, const char *where,
			    const char *key, int n, float *out, taco_err *err)
{
	json_t *a = json_object_get(rp, key), *v;
	size_t i;

	if (!json_is_array(a) || json_array_size(a) != (size_t)n)
		return taco_err_set(err, -EINVAL,
				    "%s: %s.%s must be a list of %d numbers "
				    "(half the rotated dims of a head)",
				    name, where, key, n);
	json_array_foreach(a, i, v)
	{
		double f = json_number_value(v);
		if (!json_is_number(v) || !(f > 0) || f > 1e6)
			return taco_err_set(err, -EINVAL,
					    "%s: %s.%s[%zu] must be a number "
					    "above 0",
					    name, where, key, i);
		out[i] = (float)f;
	}
	return 0;
}

/* LongRoPE (transformers' _compute_longrope_parameters, Phi-3's): the
 * factors; original_max_position_embeddings at the top level first (as
 * Phi3Config standardises it), factor max_position_embeddings over it
 * when absent, the attention factor from the factor when absent. */
static int parse_longrope(json_t *root, json_t *rp, const char *name,
			  const char *where, taco_config *c, taco_err *err)
{
	int n = c->rotary_dim / 2, r;
	double factor = NAN, attn = NAN;

	c->rope_type = TACO_ROPE_LONGROPE;
	c->rope_original_max_pos = c->max_pos;
	if ((r = longrope_factors(rp, name, where, "short_factor", n,
				  c->rope_short, err)) ||
	    (r = longrope_factors(rp, name, where, "long_factor", n,
				  c->rope_long, err)) ||
	    (r = cfg_int(rp, name, "original_max_position_embeddings",
			 &c->rope_original_max_pos, 0, 1, 1 << 30, err)) ||
	    (r = cfg_int(root, name, "original_max_position_embeddings",
			 &c->rope_original_max_pos, 0, 1, 1 << 30, err)) ||
	    (r = cfg_num(rp, name, "factor", &factor, 1e-6, 1e6, err)) ||
	    (r = cfg_num(rp, name, "attention_factor", &attn, 1e-6, 1e6, err)))
		return r;
	if (c->rope_original_max_pos < 1)
		return taco_err_set(err, -EINVAL,
				    "%s: longrope needs "
				    "original_max_position_embeddings",
				    name);
	if (isnan(factor))
		factor = (double)c->max_pos / c->rope_original_max_pos;
	if (isnan(attn))
		attn =
		    factor <= 1.0
			? 1.0
			: sqrt(1 + log(factor) /
				       log((double)c->rope_original_max_pos));
	c->rope_factor = factor;
	c->rope_attn_factor = attn;
	return 0;
}

/* YaRN (transformers' _compute_yarn_parameters): factor, or
 * max_position_embeddings / original_max_position_embeddings without one;
 * beta_fast 32 and beta_slow 1 by default, truncate true; the attention
 * factor given, or from mscale and mscale_all_dim, or 0.1 ln(factor) + 1. */
static double yarn_mscale(double scale, double mscale)
{
	return scale <= 1 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

static int parse_yarn(json_t *root, json_t *rp, const char *name,
		      const char *where, taco_config *c, taco_err *err)
{
	double attn = NAN, ms = 0, ms_all = 0;
	int max_pos = 0, r;

	c->rope_type = TACO_ROPE_YARN;
	c->rope_factor = NAN;
	c->rope_original_max_pos = 0;
	c->rope_beta_fast = 32;
	c->rope_beta_slow = 1;
	c->rope_truncate = 1;
	if ((r = cfg_num(rp, name, "factor", &c->rope_factor, 1e-3, 1e6,
			 err)) ||
	    (r = cfg_int(rp, name, "original_max_position_embeddings",
			 &c->rope_original_max_pos, 1, 1, 1 << 30, err)) ||
	    (r = cfg_int(root, name, "max_position_embeddings", &max_pos, 0, 0,
			 1 << 30, err)) ||
	    (r = cfg_num(rp, name, "beta_fast", &c->rope_beta_fast, 1e-6, 1e6,
			 err)) ||
	    (r = cfg_num(rp, name, "beta_slow", &c->rope_beta_slow, 1e-6, 1e6,
			 err)) ||
	    (r = cfg_bool(rp, name, "truncate", &c->rope_truncate, err)) ||
	    (r = cfg_num(rp, name, "attention_factor", &attn, 1e-6, 1e6,
			 err)) ||
	    (r = cfg_num(rp, name, "mscale", &ms, 0, 1e6, err)) ||
	    (r = cfg_num(rp, name, "mscale_all_dim", &ms_all, 0, 1e6, err)))
		return r;
	if (isnan(c->rope_factor)) {
		if (!max_pos)
			return taco_err_set(err, -EINVAL,
					    "%s: yarn %s needs factor", name,
					    where);
		c->rope_factor = (double)max_pos / c->rope_original_max_pos;
	}
	if (isnan(attn))
		attn = ms && ms_all ? yarn_mscale(c->rope_factor, ms) /
					  yarn_mscale(c->rope_factor, ms_all)
				    : yarn_mscale(c->rope_factor, 1);
	c->rope_attn_factor = attn;
	return 0;
}

/* rope_scaling (transformers 4) or rope_parameters (transformers 5). */
static int parse_rope(json_t *root, const char *name, taco_config *c,
		      taco_err *err)
{
	json_t *rp = json_object_get(root, "rope_parameters");
	json_t *rs = json_object_get(root, "rope_scaling");
	const char *where = "rope_parameters";
	json_t *t;
	const char *type = "default";
	int r;

	/* GptOssConfig's default_theta */
	c->rope_theta = c->arch == TACO_ARCH_GPT_OSS ? 150000.0 : 10000.0;
	c->rope_attn_factor = 1.0;
	r = cfg_num(root, name, "rope_theta", &c->rope_theta, 1.0, 1e12, err);
	if (r)
		return r;
	if (!rp || json_is_null(rp)) {
		rp = rs;
		where = "rope_scaling";
	}
	/* GptOssConfig would default to its YaRN: every released config
	 * states it */
	if ((!rp || json_is_null(rp)) && c->arch == TACO_ARCH_GPT_OSS)
		return taco_err_set(err, -EINVAL,
				    "%s: a gpt_oss config needs "
				    "rope_parameters (or rope_scaling)",
				    name);
	if (!rp || json_is_null(rp))
		return 0;
	if (!json_is_object(rp))
		return taco_err_set(err, -EINVAL,
				    "%s: field '%s' must be an object", name,
				    where);
	r = cfg_num(rp, name, "rope_theta", &c->rope_theta, 1.0, 1e12, err);
	if (r)
		return r;
	t = json_object_get(rp, "rope_type");
	if (!t)
		t = json_object_get(rp, "type");
	if (t && json_is_string(t))
		type = json_string_value(t);
	else if (t && !json_is_null(t))
		return taco_err_set(err, -EINVAL,
				    "%s: field '%s.rope_type' must be a string",
				    name, where);
	if (strcmp(type, "default") == 0)
		return 0;
	if (strcmp(type, "yarn") == 0)
		return parse_yarn(root, rp, name, where, c, err);
	if (strcmp(type, "longrope") == 0 && c->arch == TACO_ARCH_PHI3)
		return parse_longrope(root, rp, name, where, c, err);
	if (strcmp(type, "llama3") != 0)
		return taco_err_set(err, -ENOTSUP,
				    "%s: %s.rope_type '%s' is not supported "
				    "(supported: default, llama3, yarn; "
				    "longrope for phi3)",
				    name, where, type);
	c->rope_type = TACO_ROPE_LLAMA3;
	c->rope_factor = c->rope_low_freq_factor = c->rope_high_freq_factor =
	    NAN;
	c->rope_original_max_pos = 0;
	if ((r = cfg_num(rp, name, "factor", &c->rope_factor, 1e-3, 1e6,
			 err)) ||
	    (r = cfg_num(rp, name, "low_freq_factor", &c->rope_low_freq_factor,
			 1e-6, 1e6, err)) ||
	    (r = cfg_num(rp, name, "high_freq_factor",
			 &c->rope_high_freq_factor, 1e-6, 1e6, err)) ||
	    (r = cfg_int(rp, name, "original_max_position_embeddings",
			 &c->rope_original_max_pos, 1, 1, 1 << 30, err)))
		return r;
	if (isnan(c->rope_factor) || isnan(c->rope_low_freq_factor) ||
	    isnan(c->rope_high_freq_factor))
		return taco_err_set(err, -EINVAL,
				    "%s: llama3 %s needs factor, "
				    "low_freq_factor and high_freq_factor",
				    name, where);
	if (!(c->rope_high_freq_factor > c->rope_low_freq_factor))
		return taco_err_set(err, -EINVAL,
				    "%s: %s.high_freq_factor must exceed "
				    "low_freq_factor",
				    name, where);
	return 0;
}

/* Fields that would change the math in ways we do not implement. */
static int refuse_unsupported(json_t *root, const char *name,
			      const taco_config *c, taco_err *err)
{
	json_t *v;
	double drop = 0;
	int flag = 0, r;

	v = json_object_get(root, "hidden_act");
	if (!v)
		v = json_object_get(root, "hidden_activation");
	if (v &&
	    (!json_is_string(v) || strcmp(json_string_value(v), "silu") != 0))
		return taco_err_set(err, -ENOTSUP,
				    "%s: hidden_act must be \"silu\"", name);
	if ((r = cfg_bool(root, name, "mlp_bias", &flag, err)))
		return r;
	if (flag)
		return taco_err_set(err, -ENOTSUP,
				    "%s: mlp_bias = true is not supported",
				    name);
	if ((r = cfg_num(root, name, "attention_dropout", &drop, 0, 1, err)))
		return r;
	if (drop != 0)
		return taco_err_set(err, -ENOTSUP,
				    "%s: attention_dropout must be 0", name);
	if (c->arch == TACO_ARCH_QWEN2 || c->arch == TACO_ARCH_QWEN3 ||
	    c->arch == TACO_ARCH_QWEN3_MOE) {
		flag = 0;
		if ((r = cfg_bool(root, name, "use_sliding_window", &flag,
				  err)))
			return r;
		if (flag)
			return taco_err_set(err, -ENOTSUP,
					    "%s: use_sliding_window = true is "
					    "not supported for %s",
					    name, taco_arch_name(c->arch));
	}
	v = json_object_get(root, "layer_types");
	if (v && json_is_array(v) && c->arch != TACO_ARCH_MISTRAL &&
	    c->arch != TACO_ARCH_GPT_OSS) {
		size_t i;
		json_t *e;
		json_array_foreach(v, i, e)
		{
			if (!json_is_string(e) ||
			    strcmp(json_string_value(e), "full_attention"))
				return taco_err_set(
				    err, -ENOTSUP,
				    "%s: layer_types[%zu] must be "
				    "\"full_attention\"",
				    name, i);
		}
	}
	v = json_object_get(root, "pretraining_tp");
	if (v && json_is_integer(v) && json_integer_value(v) != 1)
		return taco_err_set(err, -ENOTSUP,
				    "%s: pretraining_tp must be 1", name);
	return 0;
}

/* A dropout field that must be 0: the engine has no dropout there. */
static int zero_dropout(json_t *root, const char *name, const char *key,
			taco_err *err)
{
	double d = 0;
	int r = cfg_num(root, name, key, &d, 0, 1, err);

	if (r)
		return r;
	if (d != 0)
		return taco_err_set(err, -ENOTSUP, "%s: %s must be 0", name,
				    key);
	return 0;
}

/* The residual dropout rate of a config: [0, 0.9]. */
static int get_dropout(json_t *root, const char *name, const char *key,
		       float *out, taco_err *err)
{
	double d = *out;
	int r = cfg_num(root, name, key, &d, 0, 0.9, err);

	if (!r)
		*out = (float)d;
	return r;
}

/* The sizes every family names the same way. */
static int parse_sizes(json_t *root, const char *name, const char *ffn,
		       taco_config *c, taco_err *err)
{
	int r;

	if ((r = cfg_int(root, name, "hidden_size", &c->hidden, 1, 1,
			 TACO_MAX_HIDDEN, err)) ||
	    (r = cfg_int(root, name, ffn, &c->intermediate, 1, 1,
			 TACO_MAX_INTERMEDIATE, err)) ||
	    (r = cfg_int(root, name, "num_hidden_layers", &c->layers, 1, 1,
			 TACO_MAX_LAYERS, err)) ||
	    (r = cfg_int(root, name, "num_attention_heads", &c->heads, 1, 1,
			 TACO_MAX_HEADS, err)) ||
	    (r = cfg_int(root, name, "vocab_size", &c->vocab, 1, 1,
			 TACO_MAX_VOCAB, err)))
		return r;
	if (c->hidden % c->heads)
		return taco_err_set(err, -EINVAL,
				    "%s: hidden_size (%d) is not a multiple of "
				    "num_attention_heads (%d)",
				    name, c->hidden, c->heads);
	c->kv_heads = c->heads;
	c->head_dim = c->hidden / c->heads;
	c->proj_dim = c->hidden;
	c->norm_before = 1;
	c->final_norm = 1;
	return 0;
}

/* OPTForCausalLM (modeling_opt.py): learned positions with an offset of
 * 2, LayerNorm, biases everywhere, fc1 / activation / fc2, pre-LN or
 * post-LN, project_in / project_out when word_embed_proj_dim differs. */
static int parse_opt(json_t *root, const char *name, taco_config *c,
		     taco_err *err)
{
	json_t *v;
	int bias = 1, affine = 1, remove_final = 0, r;

	c->family = TACO_FAMILY_OPT;
	c->layer_norm = 1;
	c->rms_eps = 1e-5f; /* nn.LayerNorm's default: not in the config */
	c->learned_pos = 1;
	c->act = TACO_ACT_RELU;
	c->tie_embeddings = 1;
	c->dropout = 0.1f; /* OPTConfig's default */
	c->pad_embed = 1;  /* OPTConfig's pad_token_id */
	if ((r = parse_sizes(root, name, "ffn_dim", c, err)))
		return r;
	c->max_pos = 2048;
	if ((r = cfg_int(root, name, "max_position_embeddings", &c->max_pos, 0,
			 1, 1 << 20, err)) ||
	    (r = cfg_bool(root, name, "do_layer_norm_before", &c->norm_before,
			  err)) ||
	    (r = cfg_bool(root, name, "_remove_final_layer_norm", &remove_final,
			  err)) ||
	    (r = cfg_int(root, name, "word_embed_proj_dim", &c->proj_dim, 0, 1,
			 TACO_MAX_HIDDEN, err)) ||
	    (r = cfg_bool(root, name, "enable_bias", &bias, err)) ||
	    (r = cfg_bool(root, name, "layer_norm_elementwise_affine", &affine,
			  err)) ||
	    (r = cfg_bool(root, name, "tie_word_embeddings", &c->tie_embeddings,
			  err)) ||
	    (r = get_dropout(root, name, "dropout", &c->dropout, err)) ||
	    (r = cfg_int(root, name, "pad_token_id", &c->pad_embed, 0, -1,
			 TACO_MAX_VOCAB, err)) ||
	    (r = zero_dropout(root, name, "attention_dropout", err)) ||
	    (r = zero_dropout(root, name, "activation_dropout", err)) ||
	    (r = zero_dropout(root, name, "layerdrop", err)))
		return r;
	if (!bias)
		return taco_err_set(err, -ENOTSUP,
				    "%s: enable_bias = false is not supported",
				    name);
	if (!affine)
		return taco_err_set(err, -ENOTSUP,
				    "%s: layer_norm_elementwise_affine = false "
				    "is not supported",
				    name);
	if (!c->tie_embeddings)
		return taco_err_set(err, -ENOTSUP,
				    "%s: an untied OPT head is not supported",
				    name);
	v = json_object_get(root, "activation_function");
	if (v && !json_is_null(v)) {
		const char *a = json_is_string(v) ? json_string_value(v) : "";
		if (strcmp(a, "relu") == 0)
			c->act = TACO_ACT_RELU;
		else if (strcmp(a, "gelu") == 0)
			c->act = TACO_ACT_GELU;
		else
			return taco_err_set(err, -ENOTSUP,
					    "%s: activation_function must be "
					    "\"relu\" or \"gelu\"",
					    name);
	}
	/* modeling_opt.py: the final LayerNorm exists only for pre-LN */
	c->final_norm = c->norm_before && !remove_final;
	c->qkv_bias = c->o_bias = c->mlp_bias = 1;
	c->rotary_dim = 0;
	return 0;
}

/* GPTNeoXForCausalLM (modeling_gpt_neox.py): the fused query_key_value
 * laid out per head, partial rotary in the half-rotation layout, LayerNorm,
 * exact GELU, parallel or sequential residual, untied embed_out. */
static int parse_neox(json_t *root, const char *name, taco_config *c,
		      taco_err *err)
{
	json_t *rp = json_object_get(root, "rope_parameters");
	json_t *v;
	double pct = 0.25, eps = 1e-5;
	int r;

	c->family = TACO_FAMILY_NEOX;
	c->pad_embed = -1;
	c->layer_norm = 1;
	c->act = TACO_ACT_GELU;
	c->parallel_residual = 1;
	c->qkv_bias = c->o_bias = c->mlp_bias = 1;
	if ((r = parse_sizes(root, name, "intermediate_size", c, err)))
		return r;
	c->max_pos = 0;
	c->rope_theta = 10000.0;
	if ((r = cfg_int(root, name, "max_position_embeddings", &c->max_pos, 0,
			 0, 1 << 30, err)) ||
	    (r = cfg_num(root, name, "layer_norm_eps", &eps, 1e-30, 1, err)) ||
	    (r = cfg_bool(root, name, "use_parallel_residual",
			  &c->parallel_residual, err)) ||
	    (r = cfg_bool(root, name, "tie_word_embeddings", &c->tie_embeddings,
			  err)) ||
	    (r = cfg_bool(root, name, "attention_bias", &c->qkv_bias, err)) ||
	    (r = cfg_num(root, name, "rotary_pct", &pct, 0, 1, err)) ||
	    (r = cfg_num(root, name, "rotary_emb_base", &c->rope_theta, 1.0,
			 1e12, err)) ||
	    (r = cfg_num(root, name, "rope_theta", &c->rope_theta, 1.0, 1e12,
			 err)) ||
	    (r = get_dropout(root, name, "hidden_dropout", &c->dropout, err)) ||
	    (r = zero_dropout(root, name, "attention_dropout", err)))
		return r;
	c->rms_eps = (float)eps;
	c->o_bias = c->qkv_bias;
	if (rp && !json_is_null(rp)) {
		json_t *t;
		if (!json_is_object(rp))
			return taco_err_set(err, -EINVAL,
					    "%s: field 'rope_parameters' must "
					    "be an object",
					    name);
		t = json_object_get(rp, "rope_type");
		if (t && !json_is_null(t) &&
		    (!json_is_string(t) ||
		     strcmp(json_string_value(t), "default")))
			return taco_err_set(err, -ENOTSUP,
					    "%s: rope_parameters.rope_type "
					    "must be \"default\"",
					    name);
		if ((r = cfg_num(rp, name, "rope_theta", &c->rope_theta, 1.0,
				 1e12, err)) ||
		    (r = cfg_num(rp, name, "partial_rotary_factor", &pct, 0, 1,
				 err)))
			return r;
	}
	v = json_object_get(root, "rope_scaling");
	if (v && !json_is_null(v))
		return taco_err_set(err, -ENOTSUP,
				    "%s: rope_scaling is not supported for "
				    "GPT-NeoX",
				    name);
	v = json_object_get(root, "hidden_act");
	if (v && !json_is_null(v) &&
	    (!json_is_string(v) || strcmp(json_string_value(v), "gelu")))
		return taco_err_set(err, -ENOTSUP,
				    "%s: hidden_act must be \"gelu\"", name);
	/* transformers: int(head_size * rotary_pct) */
	c->rotary_dim = (int)(c->head_dim * pct);
	if (c->rotary_dim % 2)
		return taco_err_set(err, -EINVAL,
				    "%s: %d rotary dims of a head (head_dim %d "
				    "x %g) must be even",
				    name, c->rotary_dim, c->head_dim, pct);
	return 0;
}

int taco_config_moe_layer(const taco_config *c, int l)
{
	if (c->experts <= 0 || l < 0 || l >= c->layers)
		return 0;
	if (c->mlp_only[l / 8] & (1u << (l % 8)))
		return 0;
	return (l + 1) % c->sparse_step == 0;
}

/* Qwen3MoeForCausalLM (modeling_qwen3_moe.py): Qwen3's attention; the MLP
 * of a sparse layer is a softmax router over SwiGLU experts
 * (Qwen3MoeConfig's defaults for absent fields). */
static int parse_qwen3_moe(json_t *root, const char *name, taco_config *c,
			   taco_err *err)
{
	json_t *v = json_object_get(root, "mlp_only_layers");
	int r;

	c->family = TACO_FAMILY_QWEN3_MOE;
	c->experts = 128;
	c->top_k = 8;
	c->moe_intermediate = 768;
	c->sparse_step = 1;
	c->aux_coef = 0.001;
	/* transformers 5 saves num_experts as num_local_experts (its
	 * attribute_map); the released configs say num_experts */
	if ((r = cfg_int(root, name, "num_experts", &c->experts, 0, 0,
			 TACO_MAX_EXPERTS, err)) ||
	    (r = cfg_int(root, name, "num_local_experts", &c->experts, 0, 0,
			 TACO_MAX_EXPERTS, err)) ||
	    (r = cfg_int(root, name, "num_experts_per_tok", &c->top_k, 0, 1,
			 TACO_MAX_EXPERTS_PER_TOK, err)) ||
	    (r = cfg_int(root, name, "moe_intermediate_size",
			 &c->moe_intermediate, 0, 1, TACO_MAX_INTERMEDIATE,
			 err)) ||
	    (r = cfg_int(root, name, "decoder_sparse_step", &c->sparse_step, 0,
			 1, TACO_MAX_LAYERS, err)) ||
	    (r = cfg_bool(root, name, "norm_topk_prob", &c->norm_topk, err)) ||
	    (r = cfg_bool(root, name, "output_router_logits", &c->router_logits,
			  err)) ||
	    (r = cfg_num(root, name, "router_aux_loss_coef", &c->aux_coef, 0,
			 1e6, err)))
		return r;
	if (c->experts && c->top_k > c->experts)
		return taco_err_set(err, -EINVAL,
				    "%s: num_experts_per_tok (%d) exceeds "
				    "num_experts (%d)",
				    name, c->top_k, c->experts);
	if (v && !json_is_null(v)) {
		size_t i;
		json_t *e;
		if (!json_is_array(v))
			return taco_err_set(err, -EINVAL,
					    "%s: field 'mlp_only_layers' must "
					    "be a list of layer indices",
					    name);
		json_array_foreach(v, i, e)
		{
			json_int_t l =
			    json_is_integer(e) ? json_integer_value(e) : -1;
			if (l < 0 || l >= c->layers)
				return taco_err_set(
				    err, -EINVAL,
				    "%s: mlp_only_layers[%zu] must be a "
				    "layer index, 0 to %d",
				    name, i, c->layers - 1);
			c->mlp_only[l / 8] |= (uint8_t)(1u << (l % 8));
		}
	}
	return 0;
}

int taco_config_has_dense(const taco_config *c)
{
	for (int l = 0; l < c->layers; l++)
		if (!taco_config_moe_layer(c, l))
			return 1;
	return 0;
}

int taco_config_window(const taco_config *c, int l)
{
	if (l >= 0 && l < c->layers && (c->full_attn[l / 8] & (1u << (l % 8))))
		return 0;
	return c->sliding_window;
}

/* layer_types: each "sliding_attention" or "full_attention"; absent,
 * GptOssConfig's default (even layers sliding). */
static int parse_layer_types(json_t *root, const char *name, taco_config *c,
			     taco_err *err)
{
	json_t *v = json_object_get(root, "layer_types"), *e;
	size_t i;

	if (!v || json_is_null(v)) {
		for (int l = 1; l < c->layers; l += 2)
			c->full_attn[l / 8] |= (uint8_t)(1u << (l % 8));
		return 0;
	}
	if (!json_is_array(v) || json_array_size(v) != (size_t)c->layers)
		return taco_err_set(err, -EINVAL,
				    "%s: field 'layer_types' must list %d "
				    "layer types",
				    name, c->layers);
	json_array_foreach(v, i, e)
	{
		const char *t = json_is_string(e) ? json_string_value(e) : "";
		if (strcmp(t, "full_attention") == 0)
			c->full_attn[i / 8] |= (uint8_t)(1u << (i % 8));
		else if (strcmp(t, "sliding_attention") != 0)
			return taco_err_set(err, -ENOTSUP,
					    "%s: layer_types[%zu] must be "
					    "\"sliding_attention\" or "
					    "\"full_attention\"",
					    name, i);
	}
	return 0;
}

/* GptOssForCausalLM (modeling_gpt_oss.py): Llama's attention with q/k/v/o
 * biases, a sink per head and a window on the sliding layers; every MLP a
 * biased top-k router over fused, biased experts (GptOssConfig's defaults
 * for absent fields). A checkpoint quantized with MXFP4 is dequantized at
 * load; no other quantization is known. */
static int parse_gpt_oss(json_t *root, const char *name, taco_config *c,
			 taco_err *err)
{
	json_t *q = json_object_get(root, "quantization_config");
	json_t *qm = q ? json_object_get(q, "quant_method") : NULL;
	double alpha = 1.702, limit = 7.0;
	int r;

	c->family = TACO_FAMILY_GPT_OSS;
	c->experts = 128;
	c->top_k = 4;
	c->moe_intermediate = c->intermediate;
	c->sparse_step = 1;
	c->aux_coef = 0.001;
	c->sliding_window = 128;
	c->attn_sinks = c->router_bias = c->fused_experts = 1;
	if ((r = cfg_int(root, name, "num_local_experts", &c->experts, 0, 1,
			 TACO_MAX_EXPERTS, err)) ||
	    (r = cfg_int(root, name, "experts_per_token", &c->top_k, 0, 1,
			 TACO_MAX_EXPERTS_PER_TOK, err)) ||
	    (r = cfg_int(root, name, "num_experts_per_tok", &c->top_k, 0, 1,
			 TACO_MAX_EXPERTS_PER_TOK, err)) ||
	    (r = cfg_int(root, name, "sliding_window", &c->sliding_window, 0, 0,
			 1 << 30, err)) ||
	    (r = cfg_num(root, name, "swiglu_alpha", &alpha, 1e-6, 1e6, err)) ||
	    (r = cfg_num(root, name, "swiglu_limit", &limit, 1e-6, 1e6, err)) ||
	    (r = cfg_bool(root, name, "output_router_logits", &c->router_logits,
			  err)) ||
	    (r = cfg_num(root, name, "router_aux_loss_coef", &c->aux_coef, 0,
			 1e6, err)) ||
	    (r = parse_layer_types(root, name, c, err)))
		return r;
	if (c->top_k > c->experts)
		return taco_err_set(err, -EINVAL,
				    "%s: num_experts_per_tok (%d) exceeds "
				    "num_local_experts (%d)",
				    name, c->top_k, c->experts);
	if (q && !json_is_null(q) &&
	    (!json_is_string(qm) ||
	     strcmp(json_string_value(qm), "mxfp4") != 0))
		return taco_err_set(err, -ENOTSUP,
				    "%s: quantization_config.quant_method "
				    "must be \"mxfp4\" (the released "
				    "checkpoint's experts)",
				    name);
	c->glu_alpha = (float)alpha;
	c->glu_limit = (float)limit;
	return 0;
}

/* Phi3ForCausalLM (modeling_phi3.py): Llama's math with q/k/v fused in
 * qkv_proj and gate/up in gate_up_proj, a partial rotary
 * (partial_rotary_factor, in rope_parameters or at the top level), an
 * optional sliding window on every layer; residual and embedding dropout
 * must be off (the released configs have them 0). */
static int parse_phi3(json_t *root, const char *name, taco_config *c,
		      taco_err *err)
{
	json_t *rp = json_object_get(root, "rope_parameters");
	double pct = 1.0;
	int r;

	if (!rp || json_is_null(rp))
		rp = json_object_get(root, "rope_scaling");
	c->family = TACO_FAMILY_PHI3;
	if ((r = cfg_num(root, name, "partial_rotary_factor", &pct, 1e-6, 1,
			 err)) ||
	    (json_is_object(rp) &&
	     (r = cfg_num(rp, name, "partial_rotary_factor", &pct, 1e-6, 1,
			  err))) ||
	    (r = cfg_int(root, name, "sliding_window", &c->sliding_window, 0, 0,
			 1 << 30, err)) ||
	    (r = zero_dropout(root, name, "resid_pdrop", err)) ||
	    (r = zero_dropout(root, name, "embd_pdrop", err)))
		return r;
	/* transformers: int(head_dim * partial_rotary_factor) */
	c->rotary_dim = (int)(c->head_dim * pct);
	if (c->rotary_dim < 2 || c->rotary_dim % 2)
		return taco_err_set(err, -EINVAL,
				    "%s: %d rotary dims of a head (head_dim %d "
				    "x %g) must be even and at least 2",
				    name, c->rotary_dim, c->head_dim, pct);
	return 0;
}

/* The config of the object root into the taco_config arg (untouched on an
 * error). */
static int from_json(json_t *root, const char *name, void *arg, taco_err *err)
{
	taco_config *out = arg;
	taco_config c;
	double eps = 1e-6;
	int r, bias = 0;

	memset(&c, 0, sizeof(c));
	c.rope_attn_factor = 1.0;
	if ((r = parse_arch(root, name, &c, err)))
		return r;
	if (c.arch == TACO_ARCH_OPT || c.arch == TACO_ARCH_GPT_NEOX) {
		r = c.arch == TACO_ARCH_OPT ? parse_opt(root, name, &c, err)
					    : parse_neox(root, name, &c, err);
		if (!r)
			*out = c;
		return r;
	}
	c.gated_mlp = 1;
	c.norm_before = c.final_norm = 1;
	c.pad_embed = -1;
	if ((r = cfg_int(root, name, "hidden_size", &c.hidden, 1, 1,
			 TACO_MAX_HIDDEN, err)) ||
	    (r = cfg_int(root, name, "intermediate_size", &c.intermediate, 1, 1,
			 TACO_MAX_INTERMEDIATE, err)) ||
	    (r = cfg_int(root, name, "num_hidden_layers", &c.layers, 1, 1,
			 TACO_MAX_LAYERS, err)) ||
	    (r = cfg_int(root, name, "num_attention_heads", &c.heads, 1, 1,
			 TACO_MAX_HEADS, err)) ||
	    (r = cfg_int(root, name, "vocab_size", &c.vocab, 1, 1,
			 TACO_MAX_VOCAB, err)))
		return r;
	c.kv_heads = c.heads;
	if ((r = cfg_int(root, name, "num_key_value_heads", &c.kv_heads, 0, 1,
			 TACO_MAX_HEADS, err)))
		return r;
	if (c.heads % c.kv_heads)
		return taco_err_set(err, -EINVAL,
				    "%s: num_attention_heads (%d) is not a "
				    "multiple of num_key_value_heads (%d)",
				    name, c.heads, c.kv_heads);
	c.head_dim = c.hidden / c.heads;
	if ((r = cfg_int(root, name, "head_dim", &c.head_dim, 0, 2,
			 TACO_MAX_HEAD_DIM, err)))
		return r;
	if (c.head_dim % 2 || c.head_dim < 2)
		return taco_err_set(err, -EINVAL,
				    "%s: head_dim (%d) must be even and >= 2",
				    name, c.head_dim);
	c.max_pos = 0;
	if ((r = cfg_int(root, name, "max_position_embeddings", &c.max_pos, 0,
			 0, 1 << 30, err)))
		return r;
	if ((r = cfg_num(root, name, "rms_norm_eps", &eps, 1e-30, 1, err)))
		return r;
	c.rms_eps = (float)eps;
	c.rotary_dim = c.head_dim;
	if (c.arch == TACO_ARCH_PHI3 && (r = parse_phi3(root, name, &c, err)))
		return r;
	if ((r = parse_rope(root, name, &c, err)))
		return r;
	if ((r = cfg_bool(root, name, "tie_word_embeddings", &c.tie_embeddings,
			  err)))
		return r;
	c.proj_dim = c.hidden;
	bias = c.arch == TACO_ARCH_GPT_OSS; /* GptOssConfig's default */
	if ((r = cfg_bool(root, name, "attention_bias", &bias, err)))
		return r;
	switch (c.arch) {
	case TACO_ARCH_QWEN2: /* q/k/v always carry a bias in Qwen2 */
		c.qkv_bias = 1;
		break;
	case TACO_ARCH_QWEN3_MOE:
		if ((r = parse_qwen3_moe(root, name, &c, err)))
			return r;
		/* Qwen3's attention */
		/* fall through */
	case TACO_ARCH_QWEN3:
		c.qk_norm = 1;
		c.qkv_bias = c.o_bias = bias;
		break;
	case TACO_ARCH_GPT_OSS:
		if ((r = parse_gpt_oss(root, name, &c, err)))
			return r;
		c.qkv_bias = c.o_bias = bias;
		break;
	case TACO_ARCH_MISTRAL:
		if ((r = cfg_int(root, name, "sliding_window",
				 &c.sliding_window, 0, 0, 1 << 30, err)))
			return r;
		c.qkv_bias = c.o_bias = bias;
		break;
	default:
		c.qkv_bias = c.o_bias = bias;
		break;
	}
	if ((r = refuse_unsupported(root, name, &c, err)))
		return r;
	*out = c;
	return 0;
}

int taco_config_parse(const char *json, size_t len, const char *name,
		      taco_config *out, taco_err *err)
{
	return taco_json_read(name, json, len, TACO_CONFIG_MAX_BYTES,
			      TACO_JSON_OBJECT, from_json, out, err);
}

int taco_config_load(const char *path, taco_config *out, taco_err *err)
{
	return taco_json_read_file(path, TACO_CONFIG_MAX_BYTES,
				   TACO_JSON_OBJECT, from_json, out, err);
}

/* YaRN's dimension of num_rot rotations over the original context. */
static double yarn_dim(double num_rot, int dim, double base, double max_pos)
{
	return (dim * log(max_pos / (num_rot * 2 * M_PI))) / (2 * log(base));
}

/* YaRN's frequencies in transformers' fp32 operations: each between the
 * extrapolated (the base's) and the interpolated (divided by factor) one
 * by a linear ramp over the dimensions [low, high]. */
static void yarn_inv_freq(const taco_config *c, float *inv_freq)
{
	int dim = c->rotary_dim, half = dim / 2;
	double lo = yarn_dim(c->rope_beta_fast, dim, c->rope_theta,
			     c->rope_original_max_pos);
	double hi = yarn_dim(c->rope_beta_slow, dim, c->rope_theta,
			     c->rope_original_max_pos);
	float factor = (float)c->rope_factor;

	if (c->rope_truncate) {
		lo = floor(lo);
		hi = ceil(hi);
	}
	lo = lo > 0 ? lo : 0;
	hi = hi < dim - 1 ? hi : dim - 1;
	if (lo == hi)
		hi += 0.001;
	for (int i = 0; i < half; i++) {
		float e = (float)(2 * i) / (float)dim;
		float pos = (float)pow(c->rope_theta, e);
		float extra = 1.0f / pos, inter = 1.0f / (factor * pos);
		float ramp = ((float)i - (float)lo) / (float)(hi - lo);
		float ef;
		ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
		ef = 1.0f - ramp;
		inv_freq[i] = inter * (1.0f - ef) + extra * ef;
	}
}

/* LongRoPE's, as transformers: 1 / (factor * base ** (2i / dim)), the
 * power in fp32 of the fp32 exponent. */
static void longrope_inv_freq(const taco_config *c, const float *factor,
			      float *inv_freq)
{
	for (int i = 0; i < c->rotary_dim / 2; i++) {
		float e = (float)(2 * i) / (float)c->rotary_dim;
		float p = (float)pow(c->rope_theta, e);
		inv_freq[i] = 1.0f / (factor[i] * p);
	}
}

void taco_config_inv_freq_long(const taco_config *c, float *inv_freq)
{
	longrope_inv_freq(c, c->rope_long, inv_freq);
}

int taco_config_rope_long(const taco_config *c, int last_pos)
{
	return c->rope_type == TACO_ROPE_LONGROPE &&
	       last_pos + 1 > c->rope_original_max_pos;
}

void taco_config_inv_freq(const taco_config *c, float *inv_freq)
{
	int half = c->rotary_dim / 2;

	if (c->rope_type == TACO_ROPE_YARN) {
		yarn_inv_freq(c, inv_freq);
		return;
	}
	if (c->rope_type == TACO_ROPE_LONGROPE) {
		longrope_inv_freq(c, c->rope_short, inv_freq);
		return;
	}
	for (int i = 0; i < half; i++) {
		float e = (float)(2 * i) / (float)c->rotary_dim;
		double f = (float)(1.0 / (float)pow(c->rope_theta, e));

		if (c->rope_type == TACO_ROPE_LLAMA3) {
			double old = c->rope_original_max_pos;
			double lo_wl = old / c->rope_low_freq_factor;
			double hi_wl = old / c->rope_high_freq_factor;
			double wl = 2 * M_PI / f;

			if (wl > lo_wl) {
				f = f / c->rope_factor;
			} else if (wl >= hi_wl) {
				double s =
				    (old / wl - c->rope_low_freq_factor) /
				    (c->rope_high_freq_factor -
				     c->rope_low_freq_factor);
				f = (1 - s) * f / c->rope_factor + s * f;
			}
		}
		inv_freq[i] = (float)f;
	}
}
