/* test_config.c: config.json parsing, refusals and the tensor list. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/config/config.h"
#include "model/model.h"
#include "testutil.h"
#include "train/init.h"

/* Parameter counts of the reference models (shared/models/README.md). */
static const struct {
	const char *file;
	uint64_t total, in2d, in1d;
} ref_counts[] = {
    {"qwen3-32b.json", 32762123264ull, 32761446400ull, 676864},
    {"qwen3-14b.json", 14768307200ull, 14767882240ull, 424960},
    {"qwen3-8b.json", 8190735360ull, 8190427136ull, 308224},
    {"qwen3-1.7b.json", 1720574976ull, 1720451072ull, 123904},
    {"qwen3-0.6b.json", 596049920ull, 595984384ull, 65536},
    {"llama-3.1-8b.json", 8030261248ull, 8029995008ull, 266240},
    {"mistral-7b-v0.1.json", 7241732096ull, 7241465856ull, 266240},
    {"opt-13b.json", 12853473280ull, 12850800640ull, 2672640},
    {"pythia-1b.json", 1011781632ull, 1011351552ull, 430080},
    {"llama-3.3-70b.json", 70553706496ull, 70552387584ull, 1318912},
    /* mixtures of experts: every expert matrix (gpt-oss: each expert's
     * slice of a fused tensor) 2-D; gpt-oss's expert biases, which the
     * README counts as 2-D tensors [E, n], are E vectors here (AdamW's):
     * 24 (36) layers x 32 (128) experts x 3 x 2880 of them */
    {"qwen3-30b-a3b.json", 30532122624ull, 30531911680ull, 210944},
    {"gpt-oss-20b.json", 20914757184ull, 20914421760ull - 6635520ull,
     335424 + 6635520ull},
    {"gpt-oss-120b.json", 116829156672ull, 116828651520ull - 39813120ull,
     505152 + 39813120ull},
};

START_TEST(test_reference_param_counts)
{
	char rel[256];
	taco_config c;
	taco_model *m = NULL;
	taco_err err = {{0}};
	uint64_t total = 0, in2d = 0, in1d = 0;
	int r;

	snprintf(rel, sizeof(rel), "configs/%s", ref_counts[_i].file);
	r = taco_config_load(tu_fixture(rel), &c, &err);
	ck_assert_msg(r == 0, "%s", err.msg);
	r = taco_model_shapes(&c, &m, &err);
	ck_assert_msg(r == 0, "%s", err.msg);
	for (int i = 0; i < m->n_tensors; i++) {
		total += m->tensors[i].numel;
		if (m->tensors[i].ndim == 2)
			in2d += m->tensors[i].numel;
		else
			in1d += m->tensors[i].numel;
		ck_assert_ptr_null(m->tensors[i].data);
		if (i)
			ck_assert_int_lt(
			    strcmp(m->tensors[i - 1].name, m->tensors[i].name),
			    0);
	}
	ck_assert_uint_eq(total, ref_counts[_i].total);
	ck_assert_uint_eq(in2d, ref_counts[_i].in2d);
	ck_assert_uint_eq(in1d, ref_counts[_i].in1d);
	taco_model_free(m);
}
END_TEST

START_TEST(test_reference_fields)
{
	taco_config c;
	taco_err err = {{0}};
	float inv[64];

	ck_assert_int_eq(
	    taco_config_load(tu_fixture("configs/qwen3-32b.json"), &c, &err),
	    0);
	ck_assert_int_eq(c.arch, TACO_ARCH_QWEN3);
	ck_assert_int_eq(c.head_dim, 128);
	ck_assert_int_eq(c.heads * c.head_dim, 8192);
	ck_assert_int_eq(c.hidden, 5120);
	ck_assert_int_eq(c.qk_norm, 1);
	ck_assert_int_eq(c.kv_heads, 8);
	ck_assert_int_eq(c.tie_embeddings, 0);

	ck_assert_int_eq(
	    taco_config_load(tu_fixture("configs/llama-3.1-8b.json"), &c, &err),
	    0);
	ck_assert_int_eq(c.rope_type, TACO_ROPE_LLAMA3);
	ck_assert_int_eq(c.rope_original_max_pos, 8192);
	taco_config_inv_freq(&c, inv);
	/* Highest frequency untouched, lowest divided by the factor. */
	ck_assert_float_eq_tol(inv[0], 1.0f, 1e-7f);
	ck_assert_float_eq_tol(
	    inv[63], (float)(pow(500000.0, -126.0 / 128.0) / 8.0), 1e-12f);

	ck_assert_int_eq(
	    taco_config_load(tu_fixture("configs/mistral-7b-v0.1.json"), &c,
			     &err),
	    0);
	ck_assert_int_eq(c.sliding_window, 4096);
	ck_assert_int_eq(c.head_dim, 128);
}
END_TEST

/* OPT and GPT-NeoX: trained like the Llama family. */
START_TEST(test_other_architectures)
{
	taco_config c;
	taco_model *m = NULL;
	taco_err err = {{0}};

	ck_assert_int_eq(
	    taco_config_load(tu_fixture("configs/opt-13b.json"), &c, &err), 0);
	ck_assert_int_eq(c.arch, TACO_ARCH_OPT);
	ck_assert_int_eq(c.tie_embeddings, 1);
	ck_assert_int_eq(c.gated_mlp, 0);
	ck_assert_int_eq(
	    taco_config_load(tu_fixture("configs/pythia-1b.json"), &c, &err),
	    0);
	ck_assert_int_eq(c.arch, TACO_ARCH_GPT_NEOX);
	ck_assert_int_eq(c.tie_embeddings, 0);
	c.layers = 1; /* small enough for random weights here */
	c.vocab = 512;
	ck_assert_int_eq(
	    taco_model_init_random(&c, tk_cpu_ops(), TK_BF16, 1, &m, &err), 0);
	ck_assert_int_ge(m->pos_embed, -1);
	ck_assert_int_ge(
	    taco_model_find(m, "gpt_neox.layers.0.attention.query_key_value."
			       "weight"),
	    0);
	taco_model_free(m);
}
END_TEST

/* The fields of the OPT and GPT-NeoX families, as modeling_opt.py and
 * modeling_gpt_neox.py read them. */
START_TEST(test_family_fields)
{
	taco_config c;
	taco_err err = {{0}};
	const char *opt350 =
	    "{\"architectures\":[\"OPTForCausalLM\"],\"hidden_size\":1024,"
	    "\"ffn_dim\":4096,\"num_hidden_layers\":24,"
	    "\"num_attention_heads\":16,\"vocab_size\":50272,"
	    "\"max_position_embeddings\":2048,\"do_layer_norm_before\":false,"
	    "\"word_embed_proj_dim\":512,\"activation_function\":\"relu\","
	    "\"dropout\":0.1,\"attention_dropout\":0.0}";
	const char *neox5 =
	    "{\"architectures\":[\"GPTNeoXForCausalLM\"],\"hidden_size\":64,"
	    "\"intermediate_size\":128,\"num_hidden_layers\":2,"
	    "\"num_attention_heads\":4,\"vocab_size\":256,"
	    "\"use_parallel_residual\":false,\"rope_parameters\":"
	    "{\"rope_type\":\"default\",\"rope_theta\":500.0,"
	    "\"partial_rotary_factor\":0.5}}";

	ck_assert_int_eq(
	    taco_config_load(tu_fixture("configs/opt-13b.json"), &c, &err), 0);
	ck_assert_int_eq(c.family, TACO_FAMILY_OPT);
	ck_assert_int_eq(c.layer_norm, 1);
	ck_assert_int_eq(c.act, TACO_ACT_RELU);
	ck_assert_int_eq(c.norm_before, 1);
	ck_assert_int_eq(c.final_norm, 1);
	ck_assert_int_eq(c.learned_pos, 1);
	ck_assert_int_eq(c.proj_dim, 5120);
	ck_assert_int_eq(c.rotary_dim, 0);
	ck_assert_int_eq(c.mlp_bias, 1);
	ck_assert_float_eq(c.dropout, 0.1f); /* OPTConfig's default */
	ck_assert_int_eq(
	    taco_config_parse(opt350, strlen(opt350), "c", &c, &err), 0);
	ck_assert_int_eq(c.norm_before, 0);
	ck_assert_int_eq(c.final_norm, 0); /* post-LN: none */
	ck_assert_int_eq(c.proj_dim, 512);
	ck_assert_int_eq(c.head_dim, 64);

	ck_assert_int_eq(
	    taco_config_load(tu_fixture("configs/pythia-1b.json"), &c, &err),
	    0);
	ck_assert_int_eq(c.family, TACO_FAMILY_NEOX);
	ck_assert_int_eq(c.act, TACO_ACT_GELU);
	ck_assert_int_eq(c.parallel_residual, 1);
	ck_assert_int_eq(c.head_dim, 256);
	ck_assert_int_eq(c.rotary_dim, 64); /* 25% of 256 */
	ck_assert_double_eq(c.rope_theta, 10000.0);
	ck_assert_float_eq(c.dropout, 0.0f);
	ck_assert_int_eq(taco_config_parse(neox5, strlen(neox5), "c", &c, &err),
			 0);
	ck_assert_int_eq(c.parallel_residual, 0);
	ck_assert_int_eq(c.rotary_dim, 8);
	ck_assert_double_eq(c.rope_theta, 500.0);
	ck_assert_int_eq(c.tie_embeddings, 0);

	/* the Llama family's values of the same fields */
	ck_assert_int_eq(
	    taco_config_load(tu_fixture("configs/qwen3-8b.json"), &c, &err), 0);
	ck_assert_int_eq(c.family, TACO_FAMILY_LLAMA);
	ck_assert_int_eq(c.act, TACO_ACT_SWIGLU);
	ck_assert_int_eq(c.rotary_dim, c.head_dim);
	ck_assert_int_eq(c.proj_dim, c.hidden);
	ck_assert_int_eq(c.final_norm, 1);
	ck_assert_int_eq(c.norm_before, 1);
}
END_TEST

#define BASE                                                                   \
	"\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"         \
	"\"intermediate_size\":128,\"num_hidden_layers\":2,"                   \
	"\"num_attention_heads\":4,\"vocab_size\":100"

static const struct {
	const char *json;
	int code;
	const char *fragment;
} bad[] = {
    {"[1,2]", -EINVAL, "not a JSON object"},
    {"{\"a\":1,", -EINVAL, "line 1"},
    {"{" BASE ",\"hidden_size\":1}", -EINVAL, "duplicate"},
    {"{\"hidden_size\":64}", -EINVAL, "architectures"},
    {"{\"architectures\":[\"GPT2LMHeadModel\"]}", -ENOTSUP, "GPT2LMHead"},
    {"{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64}", -EINVAL,
     "intermediate_size"},
    {"{" BASE ",\"num_key_value_heads\":3}", -EINVAL, "multiple"},
    {"{" BASE ",\"head_dim\":15}", -EINVAL, "head_dim"},
    {"{" BASE ",\"hidden_act\":\"gelu\"}", -ENOTSUP, "hidden_act"},
    {"{" BASE ",\"mlp_bias\":true}", -ENOTSUP, "mlp_bias"},
    {"{" BASE ",\"rope_scaling\":{\"rope_type\":\"longrope\",\"factor\":4}}",
     -ENOTSUP, "longrope"},
    /* YaRN needs the context it was trained at */
    {"{" BASE ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4}}",
     -EINVAL, "original_max_position_embeddings"},
    {"{" BASE ",\"rope_scaling\":{\"rope_type\":\"llama3\"}}", -EINVAL,
     "original_max_position_embeddings"},
    {"{" BASE ",\"rope_scaling\":{\"rope_type\":\"llama3\","
     "\"original_max_position_embeddings\":16}}",
     -EINVAL, "factor"},
    {"{" BASE ",\"vocab_size\":-1}", -EINVAL, "vocab_size"},
    {"{" BASE ",\"num_hidden_layers\":100000}", -EINVAL, "num_hidden_layers"},
    {"{" BASE ",\"rms_norm_eps\":\"x\"}", -EINVAL, "rms_norm_eps"},
    {"{" BASE ",\"attention_dropout\":0.1}", -ENOTSUP, "attention_dropout"},
    {"{\"architectures\":[\"Qwen3ForCausalLM\"],\"hidden_size\":64,"
     "\"intermediate_size\":128,\"num_hidden_layers\":2,"
     "\"num_attention_heads\":4,\"vocab_size\":100,"
     "\"use_sliding_window\":true}",
     -ENOTSUP, "use_sliding_window"},
    {"{" BASE ",\"tie_word_embeddings\":1}", -EINVAL, "tie_word_embeddings"},
#define OPT                                                                    \
	"\"architectures\":[\"OPTForCausalLM\"],\"hidden_size\":64,"           \
	"\"ffn_dim\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4,"   \
	"\"vocab_size\":100"
#define NEOX                                                                   \
	"\"architectures\":[\"GPTNeoXForCausalLM\"],\"hidden_size\":64,"       \
	"\"intermediate_size\":128,\"num_hidden_layers\":2,"                   \
	"\"num_attention_heads\":4,\"vocab_size\":100"
#define PHI3                                                                   \
	"\"architectures\":[\"Phi3ForCausalLM\"],\"hidden_size\":64,"          \
	"\"intermediate_size\":128,\"num_hidden_layers\":2,"                   \
	"\"num_attention_heads\":4,\"vocab_size\":100"
    {"{" PHI3 ",\"resid_pdrop\":0.1}", -ENOTSUP, "resid_pdrop"},
    {"{" PHI3 ",\"embd_pdrop\":0.1}", -ENOTSUP, "embd_pdrop"},
    {"{" PHI3 ",\"partial_rotary_factor\":0.1}", -EINVAL, "rotary dims"},
    /* LongRoPE: a factor per rotated pair (16 dims: 8), and the context */
    {"{" PHI3 ",\"rope_scaling\":{\"rope_type\":\"longrope\","
     "\"short_factor\":[1,1],\"long_factor\":[1,1]}}",
     -EINVAL, "short_factor must be a list of 8"},
    {"{" PHI3 ",\"rope_scaling\":{\"rope_type\":\"longrope\","
     "\"short_factor\":[1,1,1,1,1,1,1,1],"
     "\"long_factor\":[1,1,1,1,1,1,1,-1]}}",
     -EINVAL, "long_factor[7]"},
    {"{" PHI3 ",\"rope_scaling\":{\"rope_type\":\"longrope\","
     "\"short_factor\":[1,1,1,1,1,1,1,1],"
     "\"long_factor\":[1,1,1,1,1,1,1,1]}}",
     -EINVAL, "original_max_position_embeddings"},
    {"{" OPT ",\"attention_dropout\":0.1}", -ENOTSUP, "attention_dropout"},
    {"{" OPT ",\"activation_dropout\":0.1}", -ENOTSUP, "activation_dropout"},
    {"{" OPT ",\"layerdrop\":0.1}", -ENOTSUP, "layerdrop"},
    {"{" OPT ",\"dropout\":0.95}", -EINVAL, "dropout"},
    {"{" OPT ",\"enable_bias\":false}", -ENOTSUP, "enable_bias"},
    {"{" OPT ",\"activation_function\":\"silu\"}", -ENOTSUP,
     "activation_function"},
    {"{" OPT ",\"tie_word_embeddings\":false}", -ENOTSUP, "untied"},
    {"{\"architectures\":[\"OPTForCausalLM\"],\"hidden_size\":64,"
     "\"ffn_dim\":128,\"num_hidden_layers\":2,\"num_attention_heads\":5,"
     "\"vocab_size\":100}",
     -EINVAL, "multiple"},
    {"{" NEOX ",\"hidden_act\":\"gelu_new\"}", -ENOTSUP, "hidden_act"},
    {"{" NEOX ",\"rotary_pct\":0.2}", -EINVAL, "even"},
    {"{" NEOX ",\"rope_scaling\":{\"type\":\"linear\",\"factor\":2}}", -ENOTSUP,
     "rope_scaling"},
    {"{" NEOX ",\"rope_parameters\":{\"rope_type\":\"yarn\"}}", -ENOTSUP,
     "rope_type"},
    {"{" NEOX ",\"attention_dropout\":0.1}", -ENOTSUP, "attention_dropout"},
};

START_TEST(test_bad_configs)
{
	taco_config c;
	taco_err err = {{0}};
	int r = taco_config_parse(bad[_i].json, strlen(bad[_i].json),
				  "x/config.json", &c, &err);

	ck_assert_msg(r == bad[_i].code, "case %d: got %d (%s)", _i, r,
		      err.msg);
	ck_assert_msg(strstr(err.msg, bad[_i].fragment) != NULL,
		      "case %d: '%s' lacks '%s'", _i, err.msg,
		      bad[_i].fragment);
	ck_assert_ptr_nonnull(strstr(err.msg, "x/config.json"));
}
END_TEST

START_TEST(test_defaults_and_ignored_fields)
{
	const char *j = "{" BASE ",\"torch_dtype\":\"bfloat16\","
			"\"bos_token_id\":1,\"some_future_field\":[1]}";
	taco_config c;
	taco_err err = {{0}};

	ck_assert_int_eq(taco_config_parse(j, strlen(j), "c", &c, &err), 0);
	ck_assert_int_eq(c.kv_heads, 4);
	ck_assert_int_eq(c.head_dim, 16);
	ck_assert_float_eq(c.rms_eps, 1e-6f);
	ck_assert_double_eq(c.rope_theta, 10000.0);
	ck_assert_int_eq(c.tie_embeddings, 0);
	ck_assert_int_eq(c.qkv_bias, 0);
	ck_assert_int_eq(c.sliding_window, 0);
}
END_TEST

START_TEST(test_model_load_errors)
{
	taco_model *m = NULL;
	taco_err err = {{0}};
	int r = taco_model_load("/nonexistent-dir", tk_cpu_ops(), &m, &err);

	ck_assert_int_lt(r, 0);
	ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent-dir"));
	ck_assert_ptr_null(m);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("config");
	TCase *tc = tcase_create("config");

	tcase_add_loop_test(tc, test_reference_param_counts, 0,
			    sizeof(ref_counts) / sizeof(ref_counts[0]));
	tcase_add_test(tc, test_reference_fields);
	tcase_add_test(tc, test_other_architectures);
	tcase_add_test(tc, test_family_fields);
	tcase_add_loop_test(tc, test_bad_configs, 0,
			    sizeof(bad) / sizeof(bad[0]));
	tcase_add_test(tc, test_defaults_and_ignored_fields);
	tcase_add_test(tc, test_model_load_errors);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
