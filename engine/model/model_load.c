/* model_load.c: the tensor list of a config and loading it from
 * safetensors (model_init.c: random weights on the same list). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "model_work.h"
#include "safetensors/safetensors.h"
#include "tk_convert.h"

static const char *const layer_names[TACO_L_COUNT] = {
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
};

/* Shape of a layer slot, or ndim 0 when the config has no such tensor. */
static int slot_shape(const taco_config *c, int slot, int64_t shape[2])
{
	int64_t H = c->hidden, I = c->intermediate;
	int64_t D = (int64_t)c->heads * c->head_dim;
	int64_t Dkv = (int64_t)c->kv_heads * c->head_dim;

	switch (slot) {
	case TACO_L_ATTN_NORM:
	case TACO_L_MLP_NORM:
		shape[0] = H;
		return 1;
	case TACO_L_Q:
		shape[0] = D, shape[1] = H;
		return 2;
	case TACO_L_K:
	case TACO_L_V:
		shape[0] = Dkv, shape[1] = H;
		return 2;
	case TACO_L_O:
		shape[0] = H, shape[1] = D;
		return 2;
	case TACO_L_Q_BIAS:
		shape[0] = D;
		return c->qkv_bias ? 1 : 0;
	case TACO_L_K_BIAS:
	case TACO_L_V_BIAS:
		shape[0] = Dkv;
		return c->qkv_bias ? 1 : 0;
	case TACO_L_O_BIAS:
		shape[0] = H;
		return c->o_bias ? 1 : 0;
	case TACO_L_Q_NORM:
	case TACO_L_K_NORM:
		shape[0] = c->head_dim;
		return c->qk_norm ? 1 : 0;
	case TACO_L_GATE:
	case TACO_L_UP:
		shape[0] = I, shape[1] = H;
		return 2;
	case TACO_L_DOWN:
		shape[0] = H, shape[1] = I;
		return 2;
	}
	return 0;
}

static void add_tensor(taco_tensor *t, int *n, const char *name, int ndim,
		       int64_t d0, int64_t d1)
{
	taco_tensor *x = &t[(*n)++];

	memset(x, 0, sizeof(*x));
	snprintf(x->name, sizeof(x->name), "%s", name);
	x->ndim = ndim;
	x->shape[0] = d0;
	x->shape[1] = ndim == 2 ? d1 : 1;
	x->numel = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
}

static int cmp_tensor(const void *a, const void *b)
{
	return strcmp(((const taco_tensor *)a)->name,
		      ((const taco_tensor *)b)->name);
}

int taco_model_find(const taco_model *m, const char *name)
{
	int lo = 0, hi = m->n_tensors - 1;

	while (lo <= hi) {
		int mid = (lo + hi) / 2;
		int c = strcmp(m->tensors[mid].name, name);
		if (c == 0)
			return mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return -1;
}

size_t taco_model_param_count(const taco_model *m)
{
	size_t n = 0;

	for (int i = 0; i < m->n_tensors; i++)
		n += m->tensors[i].numel;
	return n;
}

/* OPT and GPT-NeoX tensors, as Hugging Face names them: shapes for the
 * planner. Returns the count. */
static int other_tensors(const taco_config *c, taco_tensor *t)
{
	int64_t H = c->hidden, F = c->intermediate, V = c->vocab;
	int n = 0, opt = c->arch == TACO_ARCH_OPT;
	char name[TACO_NAME_MAX];
	static const char *const opt_layer[][2] = {
	    {"self_attn.q_proj", "HH"},
	    {"self_attn.k_proj", "HH"},
	    {"self_attn.v_proj", "HH"},
	    {"self_attn.out_proj", "HH"},
	    {"self_attn_layer_norm", "H"},
	    {"fc1", "FH"},
	    {"fc2", "HF"},
	    {"final_layer_norm", "H"},
	};
	static const char *const neox_layer[][2] = {
	    {"input_layernorm", "H"},
	    {"post_attention_layernorm", "H"},
	    {"attention.query_key_value", "QH"},
	    {"attention.dense", "HH"},
	    {"mlp.dense_h_to_4h", "FH"},
	    {"mlp.dense_4h_to_h", "HF"},
	};
	const char *const(*layer)[2] = opt ? opt_layer : neox_layer;
	int per = opt ? 8 : 6;

	if (opt) {
		int64_t P = c->proj_dim;
		add_tensor(t, &n, "model.decoder.embed_tokens.weight", 2, V, P);
		/* learned positions carry an offset of 2 */
		add_tensor(t, &n, "model.decoder.embed_positions.weight", 2,
			   c->max_pos + 2, H);
		if (P != H) { /* Linear(P -> H) and back, no biases */
			add_tensor(t, &n, "model.decoder.project_in.weight", 2,
				   H, P);
			add_tensor(t, &n, "model.decoder.project_out.weight", 2,
				   P, H);
		}
		if (c->final_norm) {
			add_tensor(t, &n,
				   "model.decoder.final_layer_norm.weight", 1,
				   H, 0);
			add_tensor(t, &n, "model.decoder.final_layer_norm.bias",
				   1, H, 0);
		}
	} else {
		add_tensor(t, &n, "gpt_neox.embed_in.weight", 2, V, H);
		add_tensor(t, &n, "gpt_neox.final_layer_norm.weight", 1, H, 0);
		add_tensor(t, &n, "gpt_neox.final_layer_norm.bias", 1, H, 0);
		if (!c->tie_embeddings)
			add_tensor(t, &n, "embed_out.weight", 2, V, H);
	}
	for (int l = 0; l < c->layers; l++) {
		for (int i = 0; i < per; i++) {
			const char *d = layer[i][1];
			int64_t rows = d[0] == 'H'   ? H
				       : d[0] == 'F' ? F
						     : 3 * H;
			int64_t cols = d[1] == 'F' ? F : H;
			const char *pre =
			    opt ? "model.decoder.layers" : "gpt_neox.layers";
			if (d[1]) { /* a Linear: weight [rows, cols], bias */
				snprintf(name, sizeof(name), "%s.%d.%s.weight",
					 pre, l, layer[i][0]);
				add_tensor(t, &n, name, 2, rows, cols);
			} else { /* a LayerNorm: weight and bias */
				snprintf(name, sizeof(name), "%s.%d.%s.weight",
					 pre, l, layer[i][0]);
				add_tensor(t, &n, name, 1, rows, 0);
			}
			snprintf(name, sizeof(name), "%s.%d.%s.bias", pre, l,
				 layer[i][0]);
			add_tensor(t, &n, name, 1, rows, 0);
		}
	}
	return n;
}

int taco_model_skeleton(const taco_config *cfg, const tk_ops *ops,
			taco_model **out, taco_err *err)
{
	taco_model *m = calloc(1, sizeof(*m));
	int cap = 8 + cfg->layers * (TACO_L_COUNT + 4), n = 0;
	char name[TACO_NAME_MAX];

	if (!m)
		return taco_err_set(err, -ENOMEM, "out of memory");
	m->cfg = *cfg;
	m->ops = ops;
	m->tensors = calloc((size_t)cap, sizeof(*m->tensors));
	m->layer = calloc((size_t)cfg->layers, sizeof(*m->layer));
	m->inv_freq = calloc((size_t)cfg->head_dim / 2, sizeof(float));
	if (!m->tensors || !m->layer || !m->inv_freq) {
		taco_model_free(m);
		return taco_err_set(err, -ENOMEM, "out of memory");
	}
	if (cfg->shapes_only) {
		n = other_tensors(cfg, m->tensors);
		goto sort;
	}
	add_tensor(m->tensors, &n, "model.embed_tokens.weight", 2, cfg->vocab,
		   cfg->hidden);
	add_tensor(m->tensors, &n, "model.norm.weight", 1, cfg->hidden, 0);
	if (!cfg->tie_embeddings)
		add_tensor(m->tensors, &n, "lm_head.weight", 2, cfg->vocab,
			   cfg->hidden);
	for (int l = 0; l < cfg->layers; l++) {
		for (int s = 0; s < TACO_L_COUNT; s++) {
			int64_t shape[2] = {0, 0};
			int nd = slot_shape(cfg, s, shape);
			if (!nd)
				continue;
			snprintf(name, sizeof(name), "model.layers.%d.%s", l,
				 layer_names[s]);
			add_tensor(m->tensors, &n, name, nd, shape[0],
				   shape[1]);
		}
	}
sort:
	m->n_tensors = n;
	qsort(m->tensors, (size_t)n, sizeof(*m->tensors), cmp_tensor);
	if (cfg->arch == TACO_ARCH_OPT) {
		m->embed =
		    taco_model_find(m, "model.decoder.embed_tokens.weight");
		m->final_norm =
		    taco_model_find(m, "model.decoder.final_layer_norm.weight");
	} else if (cfg->arch == TACO_ARCH_GPT_NEOX) {
		m->embed = taco_model_find(m, "gpt_neox.embed_in.weight");
		m->final_norm =
		    taco_model_find(m, "gpt_neox.final_layer_norm.weight");
	} else {
		m->embed = taco_model_find(m, "model.embed_tokens.weight");
		m->final_norm = taco_model_find(m, "model.norm.weight");
	}
	m->lm_head = cfg->tie_embeddings ? m->embed
		     : cfg->arch == TACO_ARCH_GPT_NEOX
			 ? taco_model_find(m, "embed_out.weight")
			 : taco_model_find(m, "lm_head.weight");
	for (int l = 0; l < cfg->layers; l++) {
		for (int s = 0; s < TACO_L_COUNT; s++) {
			snprintf(name, sizeof(name), "model.layers.%d.%s", l,
				 layer_names[s]);
			m->layer[l][s] =
			    cfg->shapes_only ? -1 : taco_model_find(m, name);
		}
	}
	taco_config_inv_freq(cfg, m->inv_freq);
	*out = m;
	return 0;
}

int taco_model_shapes(const taco_config *cfg, taco_model **out, taco_err *err)
{
	return taco_model_skeleton(cfg, NULL, out, err);
}

int taco_model_alloc_tensor(taco_model *m, taco_tensor *t, int dtype,
			    taco_err *err)
{
	size_t bytes = t->numel * tk_dtype_size(dtype);

	t->dtype = dtype;
	t->data = m->ops->alloc(bytes);
	if (!t->data)
		return taco_err_set(err, -ENOMEM,
				    "cannot allocate %zu bytes for tensor '%s'",
				    bytes, t->name);
	return 0;
}

/* Tensors some checkpoints carry that hold no parameters of ours. */
static int ignorable(const char *name, const taco_config *cfg)
{
	size_t n = strlen(name);
	const char *suffix = "rotary_emb.inv_freq";
	size_t sn = strlen(suffix);

	if (n >= sn && strcmp(name + n - sn, suffix) == 0)
		return 1;
	/* A tied model may still carry a copy of the head. */
	return cfg->tie_embeddings && strcmp(name, "lm_head.weight") == 0;
}

static void shape_str(char *buf, size_t len, int ndim, const int64_t *shape)
{
	size_t o = 0;

	o += (size_t)snprintf(buf, len, "[");
	for (int i = 0; i < ndim && o < len; i++)
		o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? ", " : "",
				      (long long)shape[i]);
	if (o < len)
		snprintf(buf + o, len - o, "]");
}

/* Uploads s into t (allocated in dtype): as it is, or converted element by
 * element (rounded to nearest even) through a bounded host buffer. */
static int upload_as(taco_model *m, taco_tensor *t, const taco_st_tensor *s,
		     int dtype, taco_err *err)
{
	enum { PIECE = 1 << 20 }; /* elements per conversion */
	size_t es = tk_dtype_size(dtype);
	uint8_t *buf;

	if (s->dtype == dtype) {
		m->ops->upload(t->data, s->data, s->nbytes);
		return 0;
	}
	buf = malloc((size_t)PIECE * es);
	if (!buf)
		return taco_err_set(err, -ENOMEM, "out of memory");
	for (size_t i0 = 0; i0 < t->numel; i0 += PIECE) {
		size_t n = t->numel - i0 < PIECE ? t->numel - i0 : PIECE;
		for (size_t i = 0; i < n; i++)
			tk_store_f32_rne(
			    buf, dtype, i,
			    tk_load_f32(s->data, s->dtype, i0 + i));
		m->ops->upload((uint8_t *)t->data + i0 * es, buf, n * es);
	}
	free(buf);
	return 0;
}

static int load_weights(taco_model *m, const char *dir, taco_err *err)
{
	taco_st_model *st = NULL;
	int r, dt;

	r = taco_st_open_model(dir, &st, err);
	if (r)
		return r;
	for (int i = 0; i < m->n_tensors; i++) {
		taco_tensor *t = &m->tensors[i];
		const taco_st_tensor *s = taco_st_model_find(st, t->name);

		if (!s) {
			r = taco_err_set(err, -EINVAL,
					 "%s: tensor '%s' is missing", dir,
					 t->name);
			goto out;
		}
		if (!taco_st_dtype_supported(s->dtype)) {
			r = taco_err_set(err, -ENOTSUP,
					 "%s: tensor '%s' has dtype %s "
					 "(supported: F32, BF16, F16)",
					 dir, t->name,
					 taco_st_dtype_name(s->dtype));
			goto out;
		}
		if (s->ndim != t->ndim || s->shape[0] != t->shape[0] ||
		    (t->ndim == 2 && s->shape[1] != t->shape[1])) {
			char have[160], want[64];
			shape_str(have, sizeof(have), s->ndim, s->shape);
			shape_str(want, sizeof(want), t->ndim, t->shape);
			r = taco_err_set(err, -EINVAL,
					 "%s: tensor '%s' has shape %s, the "
					 "config needs %s",
					 dir, t->name, have, want);
			goto out;
		}
		dt = m->act_dtype == TK_BF16 ? TK_BF16 : s->dtype;
		if ((r = taco_model_alloc_tensor(m, t, dt, err)) ||
		    (r = upload_as(m, t, s, dt, err)))
			goto out;
	}
	for (size_t i = 0; i < taco_st_model_count(st); i++) {
		const taco_st_tensor *s = taco_st_model_get(st, i);
		if (taco_model_find(m, s->name) < 0 &&
		    !ignorable(s->name, &m->cfg)) {
			r = taco_err_set(err, -EINVAL,
					 "%s: tensor '%s' is not part of a %s "
					 "with this config",
					 dir, s->name,
					 taco_arch_name(m->cfg.arch));
			goto out;
		}
	}
	r = 0;
out:
	taco_st_model_close(st);
	return r;
}

int taco_model_refuse_shapes_only(const taco_config *c, const char *where,
				  taco_err *err)
{
	return taco_err_set(err, -ENOTSUP,
			    "%s: %s can be planned but not trained (supported: "
			    "LlamaForCausalLM, MistralForCausalLM, "
			    "Qwen2ForCausalLM, Qwen3ForCausalLM)",
			    where, taco_arch_name(c->arch));
}

int taco_model_load(const char *dir, const tk_ops *ops, taco_model **out,
		    taco_err *err)
{
	return taco_model_load_as(dir, ops, TK_F32, out, err);
}

int taco_model_load_as(const char *dir, const tk_ops *ops, int act_dtype,
		       taco_model **out, taco_err *err)
{
	char path[4096];
	taco_config cfg;
	taco_model *m = NULL;
	int r;

	if (snprintf(path, sizeof(path), "%s/config.json", dir) >=
	    (int)sizeof(path))
		return taco_err_set(err, -ENAMETOOLONG, "%s: path too long",
				    dir);
	r = taco_config_load(path, &cfg, err);
	if (r)
		return r;
	if (cfg.shapes_only)
		return taco_model_refuse_shapes_only(&cfg, path, err);
	if (act_dtype != TK_F32 && act_dtype != TK_BF16)
		return taco_err_set(err, -EINVAL,
				    "precision must be fp32 or "
				    "bf16");
	r = taco_model_skeleton(&cfg, ops, &m, err);
	if (r)
		return r;
	m->act_dtype = act_dtype;
	r = load_weights(m, dir, err);
	if (r) {
		taco_model_free(m);
		return r;
	}
	*out = m;
	return 0;
}

void taco_model_free(taco_model *m)
{
	if (!m)
		return;
	taco_model_release_work(m);
	if (m->tensors)
		for (int i = 0; i < m->n_tensors; i++)
			if (m->tensors[i].data)
				m->ops->free(
				    m->tensors[i].data,
				    m->tensors[i].numel *
					tk_dtype_size(m->tensors[i].dtype));
	free(m->tensors);
	free(m->layer);
	free(m->inv_freq);
	free(m);
}
