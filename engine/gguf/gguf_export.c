/* gguf_export.c: see gguf_export.h.
 *
 * What llama.cpp's convert_hf_to_gguf.py does, family by family (its
 * LlamaModel, Qwen2Model, Qwen3Model, Qwen3MoeModel, GptOssModel and
 * GPTNeoXModel), and nothing it does not: every transform of a tensor is a
 * permutation of its rows (or a stack of experts' rows), or a strided
 * gather of each row (gpt-oss's fused experts, transposed and split), so
 * a tensor is written a row at a time, in any size. */
#include "gguf_export.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_quant.h"
#include "gguf_vocab.h"
#include "gguf_write.h"
#include "model/config.h"
#include "safetensors/safetensors.h"
#include "tk_convert.h"
#include "util/fsutil.h"

/* How out row i of a tensor is found in its checkpoint's rows. */
enum row_map {
	ROWS_SAME = 0,
	/* Llama's q/k: the converter's permute(), which turns Hugging Face's
	 * rotate-half order of a head's rows into llama.cpp's interleaved
	 * pairs: out (head, j, s) <- in (head, s, j), j < head_dim / 2. */
	ROWS_PERMUTE,
	/* GPT-NeoX's query_key_value: per head [q k v] in the checkpoint,
	 * all q, all k, all v in llama.cpp: out (c, head, d) <- in (head, c,
	 * d). */
	ROWS_NEOX_QKV,
};

typedef struct plan_tensor {
	char name[TACO_GGUF_MAX_NAME];
	const taco_st_tensor *src; /* NULL: data (rope_freqs) or srcs */
	/* a mixture of experts' stacked matrices: nsrc experts' [R, C]
	 * tensors as one [nsrc, R, C] */
	const taco_st_tensor **srcs;
	int nsrc;
	/* gathered (gpt-oss's experts): out row i's value j is src element
	 * (i / blk) * bstride + (i % blk) * rstride + off + j * estride */
	int gather;
	int64_t blk, bstride, rstride, off, estride;
	float *data;
	int map, heads, type;
	int64_t rows, cols; /* as written: rows of cols values */
	int ndim;
	int64_t shape[3];
} plan_tensor;

typedef struct plan {
	plan_tensor *t;
	int n, cap;
	int out_type; /* the export's ggml type for matrices */
} plan;

static const char *const type_names[TACO_GGUF_TYPES] = {"bf16", "f16", "q8_0"};

const char *taco_gguf_type_name(int type)
{
	return type >= 0 && type < TACO_GGUF_TYPES ? type_names[type] : NULL;
}

int taco_gguf_type_from_name(const char *name)
{
	for (int i = 0; i < TACO_GGUF_TYPES; i++)
		if (name && !strcmp(name, type_names[i]))
			return i;
	return -1;
}

static const char *arch_name(int arch)
{
	switch (arch) {
	case TACO_ARCH_LLAMA:
	case TACO_ARCH_MISTRAL: /* the converter's LlamaModel */
		return "llama";
	case TACO_ARCH_QWEN2:
		return "qwen2";
	case TACO_ARCH_QWEN3:
		return "qwen3";
	case TACO_ARCH_QWEN3_MOE:
		return "qwen3moe";
	case TACO_ARCH_GPT_OSS:
		return "gpt-oss";
	case TACO_ARCH_GPT_NEOX:
		return "gptneox";
	}
	return NULL;
}

/* The converter's choice: vectors and norms stay F32; a matrix takes the
 * export's type, but q8_0 falls back to f16 for rows that are not whole
 * blocks of 32 (its QuantError path). */
static int pick_type(const plan *p, const char *name, int ndim, int64_t cols)
{
	size_t n = strlen(name);
	if (ndim <= 1 || (n > 12 && !strcmp(name + n - 12, "_norm.weight")))
		return TACO_GGML_F32;
	/* biases stay F32 (gpt-oss's experts' [E, n] too) */
	if (n > 5 && !strcmp(name + n - 5, ".bias"))
		return TACO_GGML_F32;
	/* a router stays F32, as the converter keeps FFN_GATE_INP */
	if (n > 19 && !strcmp(name + n - 19, "ffn_gate_inp.weight"))
		return TACO_GGML_F32;
	if (p->out_type == TACO_GGML_Q8_0 && cols % 32)
		return TACO_GGML_F16;
	return p->out_type;
}

static plan_tensor *plan_add(plan *p, taco_err *err)
{
	if (p->n == p->cap) {
		int cap = p->cap ? 2 * p->cap : 64;
		plan_tensor *t = realloc(p->t, (size_t)cap * sizeof(*t));
		if (!t) {
			taco_err_set(err, -ENOMEM, "out of memory");
			return NULL;
		}
		p->t = t;
		p->cap = cap;
	}
	memset(&p->t[p->n], 0, sizeof(p->t[0]));
	return &p->t[p->n++];
}

/* gguf <- the checkpoint's hf, rows mapped by map. */
static int add(plan *p, const taco_st_model *st, const char *gguf,
	       const char *hf, int map, int heads, taco_err *err)
{
	const taco_st_tensor *s;
	plan_tensor *t;
	int r;

	if ((r = taco_st_model_weight(st, hf, &s, err)))
		return r;
	if (s->ndim < 1 || s->ndim > 2)
		return taco_err_set(err, -EINVAL, "%s: %d dimensions", hf,
				    s->ndim);
	if (!(t = plan_add(p, err)))
		return -ENOMEM;
	snprintf(t->name, sizeof(t->name), "%s", gguf);
	t->src = s;
	t->map = map;
	t->heads = heads;
	t->ndim = s->ndim;
	t->shape[0] = s->shape[0];
	t->shape[1] = s->ndim == 2 ? s->shape[1] : 1;
	/* a vector is one row, unless its elements move */
	if (s->ndim == 1 && map == ROWS_SAME)
		t->rows = 1, t->cols = s->shape[0];
	else
		t->rows = s->shape[0], t->cols = t->shape[1];
	t->type = pick_type(p, gguf, s->ndim, s->ndim == 2 ? s->shape[1] : 1);
	if (map != ROWS_SAME &&
	    (heads < 1 ||
	     t->rows % (map == ROWS_PERMUTE ? 2 * heads : 3 * heads)))
		return taco_err_set(err, -EINVAL,
				    "%s: %lld rows do not split into %d heads",
				    hf, (long long)t->rows, heads);
	return 0;
}

/* gguf <- layer l's E experts' matrix proj ("gate_proj", ...), stacked
 * into [E, R, C] as the converter's Qwen2MoeModel stacks them. */
static int add_experts(plan *p, const taco_st_model *st, const char *gguf,
		       int l, int E, const char *proj, taco_err *err)
{
	const taco_st_tensor **srcs = calloc((size_t)E, sizeof(*srcs));
	plan_tensor *t;
	char hf[160];
	int r = 0;

	if (!srcs)
		return taco_err_set(err, -ENOMEM, "out of memory");
	for (int e = 0; e < E && !r; e++) {
		snprintf(hf, sizeof(hf),
			 "model.layers.%d.mlp.experts.%d.%s.weight", l, e,
			 proj);
		if ((r = taco_st_model_weight(st, hf, &srcs[e], err)))
			break;
		if (srcs[e]->ndim != 2 ||
		    (e && (srcs[e]->shape[0] != srcs[0]->shape[0] ||
			   srcs[e]->shape[1] != srcs[0]->shape[1] ||
			   srcs[e]->dtype != srcs[0]->dtype)))
			r = taco_err_set(err, -EINVAL,
					 "%s: not the shape and dtype of "
					 "expert 0's",
					 hf);
	}
	if (!r && !(t = plan_add(p, err)))
		r = -ENOMEM;
	if (r) {
		free(srcs);
		return r;
	}
	snprintf(t->name, sizeof(t->name), "%s", gguf);
	t->srcs = srcs;
	t->nsrc = E;
	t->ndim = 3;
	t->shape[0] = E;
	t->shape[1] = srcs[0]->shape[0];
	t->shape[2] = srcs[0]->shape[1];
	t->rows = (int64_t)E * srcs[0]->shape[0];
	t->cols = srcs[0]->shape[1];
	t->type = pick_type(p, gguf, 3, t->cols);
	return 0;
}

/* gguf <- hf gathered (g: blk, bstride, rstride, off, estride of
 * plan_tensor) into shape [ndim]; hf must have ndim dimensions and
 * want_numel elements. */
static int add_gather(plan *p, const taco_st_model *st, const char *gguf,
		      const char *hf, int ndim, const int64_t shape[3],
		      int64_t want_numel, const int64_t g[5], taco_err *err)
{
	const taco_st_tensor *s;
	plan_tensor *t;
	int64_t n = 1;
	int r;

	if ((r = taco_st_model_weight(st, hf, &s, err)))
		return r;
	for (int i = 0; i < s->ndim; i++)
		n *= s->shape[i];
	if (n != want_numel || s->ndim != ndim)
		return taco_err_set(err, -EINVAL,
				    "%s: not the config's fused shape", hf);
	if (!(t = plan_add(p, err)))
		return -ENOMEM;
	snprintf(t->name, sizeof(t->name), "%s", gguf);
	t->src = s;
	t->gather = 1;
	t->blk = g[0], t->bstride = g[1], t->rstride = g[2], t->off = g[3];
	t->estride = g[4];
	t->ndim = ndim;
	memcpy(t->shape, shape, sizeof(t->shape));
	t->cols = shape[ndim - 1];
	t->rows = ndim == 3 ? shape[0] * shape[1] : shape[0];
	t->type = pick_type(p, gguf, ndim, t->cols);
	return 0;
}

/* gpt-oss's layer l experts as the converter's GptOssModel writes them
 * from bf16 (not MXFP4) tensors: gate_up_proj [E, H, 2I] (x @ W, gate
 * and up interleaved) transposed and split into ffn_gate_exps and
 * ffn_up_exps [E, I, H], down_proj [E, I, H] transposed into
 * ffn_down_exps [E, H, I], gate_up_proj_bias [E, 2I] split, down_proj_bias
 * as it is. */
static int add_gpt_oss_experts(plan *p, const taco_config *c,
			       const taco_st_model *st, int l, taco_err *err)
{
	int64_t E = c->experts, H = c->hidden, I = c->moe_intermediate;
	char g[TACO_GGUF_MAX_NAME], h[160];
	int r;

	for (int par = 0; par < 2; par++) {
		const char *which = par ? "up" : "gate";
		const int64_t w[5] = {I, H * 2 * I, 2, par, 2 * I};
		const int64_t b[5] = {1, 2 * I, 0, par, 2};
		const int64_t ws[3] = {E, I, H}, bs[3] = {E, I, 0};
		snprintf(g, sizeof(g), "blk.%d.ffn_%s_exps.weight", l, which);
		snprintf(h, sizeof(h),
			 "model.layers.%d.mlp.experts.gate_up_proj", l);
		if ((r = add_gather(p, st, g, h, 3, ws, E * H * 2 * I, w, err)))
			return r;
		snprintf(g, sizeof(g), "blk.%d.ffn_%s_exps.bias", l, which);
		snprintf(h, sizeof(h),
			 "model.layers.%d.mlp.experts.gate_up_proj_bias", l);
		if ((r = add_gather(p, st, g, h, 2, bs, E * 2 * I, b, err)))
			return r;
	}
	{
		const int64_t d[5] = {H, I * H, 1, 0, H};
		const int64_t ds[3] = {E, H, I};
		snprintf(g, sizeof(g), "blk.%d.ffn_down_exps.weight", l);
		snprintf(h, sizeof(h), "model.layers.%d.mlp.experts.down_proj",
			 l);
		if ((r = add_gather(p, st, g, h, 3, ds, E * I * H, d, err)))
			return r;
	}
	snprintf(g, sizeof(g), "blk.%d.ffn_down_exps.bias", l);
	snprintf(h, sizeof(h), "model.layers.%d.mlp.experts.down_proj_bias", l);
	return add(p, st, g, h, ROWS_SAME, 0, err);
}

static int plan_gpt_oss(plan *p, const taco_config *c, const taco_st_model *st,
			taco_err *err)
{
	char g[TACO_GGUF_MAX_NAME], h[128];
	int r;

#define L(gs, hs)                                                              \
	do {                                                                   \
		snprintf(g, sizeof(g), "blk.%d.%s", l, gs);                    \
		snprintf(h, sizeof(h), "model.layers.%d.%s", l, hs);           \
		if ((r = add(p, st, g, h, ROWS_SAME, 0, err)))                 \
			return r;                                              \
	} while (0)

	if ((r = add(p, st, "token_embd.weight", "model.embed_tokens.weight",
		     ROWS_SAME, 0, err)))
		return r;
	for (int l = 0; l < c->layers; l++) {
		L("attn_norm.weight", "input_layernorm.weight");
		L("attn_q.weight", "self_attn.q_proj.weight");
		L("attn_k.weight", "self_attn.k_proj.weight");
		L("attn_v.weight", "self_attn.v_proj.weight");
		L("attn_output.weight", "self_attn.o_proj.weight");
		L("attn_q.bias", "self_attn.q_proj.bias");
		L("attn_k.bias", "self_attn.k_proj.bias");
		L("attn_v.bias", "self_attn.v_proj.bias");
		L("attn_output.bias", "self_attn.o_proj.bias");
		L("attn_sinks.weight", "self_attn.sinks");
		L("post_attention_norm.weight",
		  "post_attention_layernorm.weight");
		L("ffn_gate_inp.weight", "mlp.router.weight");
		L("ffn_gate_inp.bias", "mlp.router.bias");
		if ((r = add_gpt_oss_experts(p, c, st, l, err)))
			return r;
	}
#undef L
	if ((r = add(p, st, "output_norm.weight", "model.norm.weight",
		     ROWS_SAME, 0, err)))
		return r;
	return add(p, st, "output.weight", "lm_head.weight", ROWS_SAME, 0, err);
}

/* Adds gguf <- hf when the checkpoint has hf. */
static int add_opt(plan *p, const taco_st_model *st, const char *gguf,
		   const char *hf, int map, int heads, taco_err *err)
{
	if (!taco_st_model_find(st, hf))
		return 0;
	return add(p, st, gguf, hf, map, heads, err);
}

/* Llama 3's rope scaling as the converter writes it: rope_freqs.weight,
 * the factor each frequency of a head is divided by. */
static int add_rope_freqs(plan *p, const taco_config *c, taco_err *err)
{
	int half = c->head_dim / 2;
	/* in fp32 throughout, as the converter's torch scalars compute */
	float old = (float)c->rope_original_max_pos;
	float factor = (float)c->rope_factor;
	float lo_wl =
	    (float)(c->rope_original_max_pos / c->rope_low_freq_factor);
	float hi_wl =
	    (float)(c->rope_original_max_pos / c->rope_high_freq_factor);
	float span =
	    (float)(c->rope_high_freq_factor - c->rope_low_freq_factor);
	plan_tensor *t;

	if (!(t = plan_add(p, err)))
		return -ENOMEM;
	if (!(t->data = malloc((size_t)half * sizeof(float))))
		return taco_err_set(err, -ENOMEM, "out of memory");
	for (int i = 0; i < half; i++) {
		/* 1 / base ** (arange(0, dim, 2, float32) / dim) */
		float e = (float)(2 * i) / (float)c->head_dim;
		float freq = 1.0f / powf((float)c->rope_theta, e);
		float wl = (float)(2 * M_PI) / freq;
		float f;
		if (wl < hi_wl)
			f = 1;
		else if (wl > lo_wl)
			f = factor;
		else {
			float sm =
			    (old / wl - (float)c->rope_low_freq_factor) / span;
			f = 1.0f / ((1.0f - sm) / factor + sm);
		}
		t->data[i] = f;
	}
	snprintf(t->name, sizeof(t->name), "rope_freqs.weight");
	t->ndim = 1;
	t->shape[0] = half;
	t->rows = 1;
	t->cols = half;
	t->type = TACO_GGML_F32;
	return 0;
}

static int plan_llama(plan *p, const taco_config *c, const taco_st_model *st,
		      taco_err *err)
{
	/* Llama and Mistral rotate halves in Hugging Face and pairs in
	 * llama.cpp's "llama"; Qwen's "qwen2"/"qwen3" rotate halves too */
	int perm = c->arch == TACO_ARCH_LLAMA || c->arch == TACO_ARCH_MISTRAL;
	int qm = perm ? ROWS_PERMUTE : ROWS_SAME;
	char g[TACO_GGUF_MAX_NAME], h[128];
	int r;

#define L(gs, hs, map, heads, opt)                                             \
	do {                                                                   \
		snprintf(g, sizeof(g), "blk.%d.%s", l, gs);                    \
		snprintf(h, sizeof(h), "model.layers.%d.%s", l, hs);           \
		if ((r = (opt ? add_opt : add)(p, st, g, h, map, heads, err))) \
			return r;                                              \
	} while (0)

	if ((r = add(p, st, "token_embd.weight", "model.embed_tokens.weight",
		     ROWS_SAME, 0, err)))
		return r;
	if (c->rope_type == TACO_ROPE_LLAMA3 && c->arch == TACO_ARCH_LLAMA &&
	    (r = add_rope_freqs(p, c, err)))
		return r;
	for (int l = 0; l < c->layers; l++) {
		L("attn_norm.weight", "input_layernorm.weight", ROWS_SAME, 0,
		  0);
		L("attn_q.weight", "self_attn.q_proj.weight", qm, c->heads, 0);
		L("attn_k.weight", "self_attn.k_proj.weight", qm, c->kv_heads,
		  0);
		L("attn_v.weight", "self_attn.v_proj.weight", ROWS_SAME, 0, 0);
		L("attn_output.weight", "self_attn.o_proj.weight", ROWS_SAME, 0,
		  0);
		L("attn_q.bias", "self_attn.q_proj.bias", qm, c->heads, 1);
		L("attn_k.bias", "self_attn.k_proj.bias", qm, c->kv_heads, 1);
		L("attn_v.bias", "self_attn.v_proj.bias", ROWS_SAME, 0, 1);
		L("attn_output.bias", "self_attn.o_proj.bias", ROWS_SAME, 0, 1);
		L("attn_q_norm.weight", "self_attn.q_norm.weight", ROWS_SAME, 0,
		  1);
		L("attn_k_norm.weight", "self_attn.k_norm.weight", ROWS_SAME, 0,
		  1);
		L("ffn_norm.weight", "post_attention_layernorm.weight",
		  ROWS_SAME, 0, 0);
		if (taco_config_moe_layer(c, l)) {
			static const char *const exps[3][2] = {
			    {"ffn_gate_exps.weight", "gate_proj"},
			    {"ffn_up_exps.weight", "up_proj"},
			    {"ffn_down_exps.weight", "down_proj"}};
			L("ffn_gate_inp.weight", "mlp.gate.weight", ROWS_SAME,
			  0, 0);
			for (int x = 0; x < 3; x++) {
				snprintf(g, sizeof(g), "blk.%d.%s", l,
					 exps[x][0]);
				if ((r = add_experts(p, st, g, l, c->experts,
						     exps[x][1], err)))
					return r;
			}
			continue;
		}
		L("ffn_gate.weight", "mlp.gate_proj.weight", ROWS_SAME, 0, 0);
		L("ffn_up.weight", "mlp.up_proj.weight", ROWS_SAME, 0, 0);
		L("ffn_down.weight", "mlp.down_proj.weight", ROWS_SAME, 0, 0);
	}
#undef L
	if ((r = add(p, st, "output_norm.weight", "model.norm.weight",
		     ROWS_SAME, 0, err)))
		return r;
	/* tied: llama.cpp reads token_embd again, and the converter writes
	 * no output.weight */
	if (!c->tie_embeddings &&
	    (r = add(p, st, "output.weight", "lm_head.weight", ROWS_SAME, 0,
		     err)))
		return r;
	return 0;
}

static int plan_neox(plan *p, const taco_config *c, const taco_st_model *st,
		     taco_err *err)
{
	char g[TACO_GGUF_MAX_NAME], h[128];
	int r;

#define L(gs, hs, map)                                                         \
	do {                                                                   \
		snprintf(g, sizeof(g), "blk.%d.%s", l, gs);                    \
		snprintf(h, sizeof(h), "gpt_neox.layers.%d.%s", l, hs);        \
		if ((r = add(p, st, g, h, map, c->heads, err)))                \
			return r;                                              \
	} while (0)

	if ((r = add(p, st, "token_embd.weight", "gpt_neox.embed_in.weight",
		     ROWS_SAME, 0, err)))
		return r;
	for (int l = 0; l < c->layers; l++) {
		L("attn_norm.weight", "input_layernorm.weight", ROWS_SAME);
		L("attn_norm.bias", "input_layernorm.bias", ROWS_SAME);
		L("attn_qkv.weight", "attention.query_key_value.weight",
		  ROWS_NEOX_QKV);
		L("attn_qkv.bias", "attention.query_key_value.bias",
		  ROWS_NEOX_QKV);
		L("attn_output.weight", "attention.dense.weight", ROWS_SAME);
		L("attn_output.bias", "attention.dense.bias", ROWS_SAME);
		L("ffn_norm.weight", "post_attention_layernorm.weight",
		  ROWS_SAME);
		L("ffn_norm.bias", "post_attention_layernorm.bias", ROWS_SAME);
		L("ffn_up.weight", "mlp.dense_h_to_4h.weight", ROWS_SAME);
		L("ffn_up.bias", "mlp.dense_h_to_4h.bias", ROWS_SAME);
		L("ffn_down.weight", "mlp.dense_4h_to_h.weight", ROWS_SAME);
		L("ffn_down.bias", "mlp.dense_4h_to_h.bias", ROWS_SAME);
	}
#undef L
	if ((r = add(p, st, "output_norm.weight",
		     "gpt_neox.final_layer_norm.weight", ROWS_SAME, 0, err)) ||
	    (r = add(p, st, "output_norm.bias",
		     "gpt_neox.final_layer_norm.bias", ROWS_SAME, 0, err)))
		return r;
	/* llama.cpp's gptneox needs output.weight: a tied head is the
	 * embedding again */
	return add(p, st, "output.weight",
		   c->tie_embeddings ? "gpt_neox.embed_in.weight"
				     : "embed_out.weight",
		   ROWS_SAME, 0, err);
}

static int64_t src_row(const plan_tensor *t, int64_t i)
{
	int64_t hd, half, h, rest;

	switch (t->map) {
	case ROWS_PERMUTE:
		hd = t->rows / t->heads, half = hd / 2;
		h = i / hd, rest = i % hd; /* rest = j * 2 + s */
		return h * hd + (rest % 2) * half + rest / 2;
	case ROWS_NEOX_QKV:
		hd = t->rows / (3 * t->heads);
		rest = i % (t->heads * hd); /* out (c, h, d) */
		h = rest / hd;
		return h * 3 * hd + (i / (t->heads * hd)) * hd + rest % hd;
	}
	return i;
}

/* The architecture's keys ("ARCH.NAME"), added until one fails: the first
 * error stays in r. */
typedef struct meta {
	taco_gguf *g;
	const char *arch;
	int r;
} meta;

static const char *arch_key(const meta *m, const char *name, char *k,
			    size_t len)
{
	snprintf(k, len, "%s.%s", m->arch, name);
	return k;
}

static void meta_u32(meta *m, const char *name, int v)
{
	char k[96];
	if (!m->r)
		m->r = taco_gguf_kv_u32(m->g, arch_key(m, name, k, sizeof(k)),
					(uint32_t)v);
}

static void meta_f32(meta *m, const char *name, double v)
{
	char k[96];
	if (!m->r)
		m->r = taco_gguf_kv_f32(m->g, arch_key(m, name, k, sizeof(k)),
					(float)v);
}

static void meta_bool(meta *m, const char *name, int v)
{
	char k[96];
	if (!m->r)
		m->r =
		    taco_gguf_kv_bool(m->g, arch_key(m, name, k, sizeof(k)), v);
}

static int add_meta(taco_gguf *g, const taco_config *c, const char *arch,
		    const char *name, int ftype)
{
	meta m = {g, arch, 0};

	m.r = taco_gguf_kv_str(g, "general.architecture", arch);
	m.r = m.r ?: taco_gguf_kv_str(g, "general.type", "model");
	m.r = m.r ?: taco_gguf_kv_str(g, "general.name", name);
	meta_u32(&m, "block_count", c->layers);
	meta_u32(&m, "context_length", c->max_pos);
	meta_u32(&m, "embedding_length", c->hidden);
	meta_u32(&m, "feed_forward_length", c->intermediate);
	meta_u32(&m, "attention.head_count", c->heads);
	if (c->experts > 0) { /* the converter's TextModel and Qwen2MoeModel */
		meta_u32(&m, "expert_count", c->experts);
		meta_u32(&m, "expert_used_count", c->top_k);
		meta_u32(&m, "expert_feed_forward_length", c->moe_intermediate);
	}
	if (c->family == TACO_FAMILY_GPT_OSS) {
		/* the converter's GptOssModel, and TextModel's YaRN keys */
		meta_u32(&m, "attention.sliding_window", c->sliding_window);
		m.r = m.r
			  ?: taco_gguf_kv_str(g, "gpt-oss.rope.scaling.type",
					      "yarn");
		meta_f32(&m, "rope.scaling.factor", c->rope_factor);
		meta_u32(&m, "rope.scaling.original_context_length",
			 c->rope_original_max_pos);
		meta_f32(&m, "rope.scaling.yarn_beta_fast", c->rope_beta_fast);
		meta_f32(&m, "rope.scaling.yarn_beta_slow", c->rope_beta_slow);
	}
	if (c->family == TACO_FAMILY_NEOX) {
		meta_u32(&m, "rope.dimension_count", c->rotary_dim);
		meta_bool(&m, "use_parallel_residual", c->parallel_residual);
		meta_f32(&m, "attention.layer_norm_epsilon", c->rms_eps);
		/* not the converter's (llama.cpp's default is 10000): so that
		 * a model with another base is read right */
		meta_f32(&m, "rope.freq_base", c->rope_theta);
	} else {
		meta_u32(&m, "attention.head_count_kv", c->kv_heads);
		meta_f32(&m, "rope.freq_base", c->rope_theta);
		meta_f32(&m, "attention.layer_norm_rms_epsilon", c->rms_eps);
		meta_u32(&m, "attention.key_length", c->head_dim);
		meta_u32(&m, "attention.value_length", c->head_dim);
		if (!strcmp(arch, "llama")) {
			meta_u32(&m, "vocab_size", c->vocab);
			meta_u32(&m, "rope.dimension_count", c->head_dim);
		}
	}
	m.r = m.r ?: taco_gguf_kv_u32(g, "general.file_type", (uint32_t)ftype);
	m.r = m.r ?: taco_gguf_kv_u32(g, "general.quantization_version", 2);
	return m.r;
}

/* One row of cols values from src (its dtype), element j at j * stride,
 * into out (type). */
static void convert_row(const void *src, int dtype, int64_t cols,
			int64_t stride, int type, float *f, uint8_t *out)
{
	for (int64_t j = 0; j < cols; j++)
		f[j] = tk_load_f32(src, dtype, (size_t)(j * stride));
	switch (type) {
	case TACO_GGML_F32:
		memcpy(out, f, (size_t)cols * 4);
		break;
	case TACO_GGML_F16:
	case TACO_GGML_BF16:
		for (int64_t j = 0; j < cols; j++)
			tk_store_f32_rne(
			    out, type == TACO_GGML_F16 ? TK_F16 : TK_BF16,
			    (size_t)j, f[j]);
		break;
	case TACO_GGML_Q8_0:
		taco_q8_0_quantize_row(f, cols, out);
		break;
	}
}

static int write_tensor(taco_gguf *g, const plan_tensor *t, float *f,
			uint8_t *out, taco_err *err)
{
	int be, bb, r;
	size_t es = t->src ? taco_st_dtype_size(t->src->dtype) : 4;

	taco_ggml_block(t->type, &be, &bb);
	if (t->srcs)
		es = taco_st_dtype_size(t->srcs[0]->dtype);
	for (int64_t i = 0; i < t->rows; i++) {
		int64_t per = t->srcs ? t->rows / t->nsrc : 0;
		const uint8_t *s =
		    t->srcs ? (const uint8_t *)t->srcs[i / per]->data +
				  (size_t)(i % per) * (size_t)t->cols * es
		    : t->src ? (const uint8_t *)t->src->data +
				   (size_t)src_row(t, i) * (size_t)t->cols * es
			     : (const uint8_t *)(t->data + i * t->cols);
		int dtype = t->srcs  ? t->srcs[0]->dtype
			    : t->src ? t->src->dtype
				     : TK_F32;
		int64_t stride = 1;
		if (t->gather) {
			s = (const uint8_t *)t->src->data +
			    (size_t)((i / t->blk) * t->bstride +
				     (i % t->blk) * t->rstride + t->off) *
				es;
			stride = t->estride;
		}
		convert_row(s, dtype, t->cols, stride, t->type, f, out);
		if ((r = taco_gguf_write_data(
			 g, out, (size_t)(t->cols / be * bb), err)))
			return r;
	}
	return 0;
}

/* What llama.cpp's qwen3moe runs: every layer sparse, the weights of a
 * token's experts renormalised (its graph always divides them by their
 * sum). */
static int moe_supported(const taco_config *c, const char *cfg_path,
			 taco_err *err)
{
	if (c->arch != TACO_ARCH_QWEN3_MOE)
		return 0;
	for (int l = 0; l < c->layers; l++)
		if (!taco_config_moe_layer(c, l))
			return taco_err_set(err, -ENOTSUP,
					    "%s: layer %d has a dense MLP "
					    "(mlp_only_layers or "
					    "decoder_sparse_step), which "
					    "llama.cpp's qwen3moe does not "
					    "have",
					    cfg_path, l);
	if (!c->norm_topk)
		return taco_err_set(err, -ENOTSUP,
				    "%s: norm_topk_prob false: llama.cpp's "
				    "qwen3moe always renormalises the "
				    "experts' weights",
				    cfg_path);
	return 0;
}

/* What llama.cpp's gpt-oss runs: the activation's alpha 1.702 and limit 7
 * (constants there), sliding windows on the even layers (its default
 * pattern: the converter writes none) and YaRN. */
static int gpt_oss_supported(const taco_config *c, const char *cfg_path,
			     taco_err *err)
{
	if (c->arch != TACO_ARCH_GPT_OSS)
		return 0;
	if (c->glu_alpha != 1.702f || c->glu_limit != 7.0f)
		return taco_err_set(err, -ENOTSUP,
				    "%s: llama.cpp's gpt-oss runs swiglu_alpha "
				    "1.702 and swiglu_limit 7 only",
				    cfg_path);
	for (int l = 0; l < c->layers; l++)
		if ((taco_config_window(c, l) > 0) != (l % 2 == 0))
			return taco_err_set(err, -ENOTSUP,
					    "%s: llama.cpp's gpt-oss slides "
					    "the window on the even layers "
					    "only; layer %d differs",
					    cfg_path, l);
	if (c->rope_type != TACO_ROPE_YARN)
		return taco_err_set(err, -ENOTSUP,
				    "%s: llama.cpp's gpt-oss is written with "
				    "YaRN rope scaling only",
				    cfg_path);
	return 0;
}

static const char *base_name(const char *dir)
{
	size_t n = strlen(dir);
	while (n > 1 && dir[n - 1] == '/')
		n--;
	const char *s = dir + n;
	while (s > dir && s[-1] != '/')
		s--;
	return s;
}

int taco_gguf_export(const char *model_dir, const char *weights_dir,
		     const char *out_path, int type, uint64_t max_bytes,
		     const char *chat_template, taco_err *err)
{
	static const int ggml[TACO_GGUF_TYPES] = {TACO_GGML_BF16, TACO_GGML_F16,
						  TACO_GGML_Q8_0};
	/* llama.cpp's LLAMA_FTYPE_MOSTLY_* */
	static const int ftype[TACO_GGUF_TYPES] = {32, 1, 7};
	char cfg_path[4200], name[256];
	taco_config c;
	taco_st_model *st = NULL;
	taco_gguf *g = NULL;
	plan p = {0};
	const char *arch;
	float *f = NULL;
	uint8_t *out = NULL;
	int64_t maxcols = 1;
	int r;

	if (!taco_gguf_type_name(type))
		return taco_err_set(err, -EINVAL,
				    "GGUF type %d: not bf16, f16 "
				    "or q8_0",
				    type);
	snprintf(cfg_path, sizeof(cfg_path), "%s/config.json", model_dir);
	if ((r = taco_config_load(cfg_path, &c, err)))
		return r;
	if ((r = gpt_oss_supported(&c, cfg_path, err)))
		return r;
	if (c.arch == TACO_ARCH_PHI3)
		return taco_err_set(
		    err, -ENOTSUP,
		    "%s: GGUF export of Phi-3 (llama.cpp's "
		    "phi3: the fused qkv_proj and gate_up_proj, "
		    "LongRoPE's factors) is not written yet",
		    cfg_path);
	if (!(arch = arch_name(c.arch)))
		return taco_err_set(err, -ENOTSUP,
				    "%s: %s has no llama.cpp architecture: "
				    "GGUF export takes Llama, Mistral, Qwen2, "
				    "Qwen3, Qwen3-MoE, gpt-oss and GPT-NeoX",
				    cfg_path, taco_arch_name(c.arch));
	if ((r = moe_supported(&c, cfg_path, err)))
		return r;
	if (c.rope_type == TACO_ROPE_YARN && c.arch != TACO_ARCH_GPT_OSS)
		return taco_err_set(err, -ENOTSUP,
				    "%s: YaRN rope scaling is not written to "
				    "GGUF yet",
				    cfg_path);
	if ((r = taco_st_open_model(weights_dir ? weights_dir : model_dir, &st,
				    err)) ||
	    (r = taco_gguf_new(&g, err)))
		goto out;
	p.out_type = ggml[type];
	r = c.family == TACO_FAMILY_NEOX      ? plan_neox(&p, &c, st, err)
	    : c.family == TACO_FAMILY_GPT_OSS ? plan_gpt_oss(&p, &c, st, err)
					      : plan_llama(&p, &c, st, err);
	if (r)
		goto out;
	snprintf(name, sizeof(name), "%s", base_name(model_dir));
	if ((r = add_meta(g, &c, arch, name, ftype[type]))) {
		r = taco_err_set(err, r, "%s: GGUF keys: %s", out_path,
				 strerror(-r));
		goto out;
	}
	if ((r = taco_gguf_add_vocab(g, model_dir, c.vocab, chat_template,
				     err)))
		goto out;
	for (int i = 0; i < p.n; i++) {
		if (p.t[i].cols > maxcols)
			maxcols = p.t[i].cols;
		if ((r = taco_gguf_add_tensor(g, p.t[i].name, p.t[i].type,
					      p.t[i].ndim, p.t[i].shape, NULL,
					      err)))
			goto out;
	}
	if (taco_gguf_file_size(g) > max_bytes) {
		r = taco_err_set(err, -EFBIG,
				 "%s: the GGUF file would be %llu bytes, over "
				 "the limit of %llu",
				 out_path,
				 (unsigned long long)taco_gguf_file_size(g),
				 (unsigned long long)max_bytes);
		goto out;
	}
	if (!(f = malloc((size_t)maxcols * sizeof(float))) ||
	    !(out = malloc((size_t)maxcols * 4))) {
		r = taco_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	if ((r = taco_gguf_begin(g, out_path, err)))
		goto out;
	for (int i = 0; i < p.n; i++)
		if ((r = write_tensor(g, &p.t[i], f, out, err)))
			goto out;
	r = taco_gguf_finish(g, err);
out:
	for (int i = 0; i < p.n; i++) {
		free(p.t[i].data);
		free(p.t[i].srcs);
	}
	free(p.t);
	free(f);
	free(out);
	taco_gguf_free(g);
	taco_st_model_close(st);
	return r;
}
