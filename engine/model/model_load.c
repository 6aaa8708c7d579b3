/* model_load.c: the tensor list of a config and loading it from
 * safetensors (model_init.c: random weights on the same list). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "model_work.h"
#include "names.h"
#include "safetensors/mxfp4.h"
#include "safetensors/safetensors.h"
#include "tk_convert.h"

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

int taco_model_skeleton(const taco_config *cfg, const tk_ops *ops,
			taco_model **out, taco_err *err)
{
	taco_model *m = calloc(1, sizeof(*m));
	size_t nx = (size_t)cfg->layers * (size_t)cfg->experts * TACO_X_COUNT;
	int cap = TACO_MODEL_TENSORS_MAX + cfg->layers * TACO_L_COUNT + (int)nx,
	    n = 0;
	taco_model_tensor top[TACO_MODEL_TENSORS_MAX];
	int ntop = taco_model_tensor_names(cfg, top);
	char name[TACO_NAME_MAX];
	int64_t shape[2];

	if (!m)
		return taco_err_set(err, -ENOMEM, "out of memory");
	m->cfg = *cfg;
	m->ops = ops;
	m->aux_coef =
	    cfg->experts > 0 && cfg->router_logits ? cfg->aux_coef : 0.0;
	m->tensors = calloc((size_t)cap, sizeof(*m->tensors));
	m->layer = calloc((size_t)cfg->layers, sizeof(*m->layer));
	m->inv_freq = calloc((size_t)cfg->head_dim / 2 + 1, sizeof(float));
	m->expert = nx ? malloc(nx * sizeof(int)) : NULL;
	if (!m->tensors || !m->layer || !m->inv_freq || (nx && !m->expert)) {
		taco_model_free(m);
		return taco_err_set(err, -ENOMEM, "out of memory");
	}
	for (int i = 0; i < ntop; i++)
		add_tensor(m->tensors, &n, top[i].name, top[i].ndim,
			   top[i].shape[0], top[i].shape[1]);
	for (int l = 0; l < cfg->layers; l++) {
		for (int s = 0; s < TACO_L_COUNT; s++) {
			int nd = taco_layer_tensor_name(cfg, l, s, name,
							sizeof(name), shape);
			if (nd)
				add_tensor(m->tensors, &n, name, nd, shape[0],
					   shape[1]);
		}
		for (int e = 0; e < cfg->experts; e++)
			for (int x = 0; x < TACO_X_COUNT; x++) {
				int nd = taco_expert_tensor_name(
				    cfg, l, e, x, name, sizeof(name), shape);
				if (nd)
					add_tensor(m->tensors, &n, name, nd,
						   shape[0], shape[1]);
			}
	}
	m->n_tensors = n;
	qsort(m->tensors, (size_t)n, sizeof(*m->tensors), cmp_tensor);
	m->embed = m->lm_head = m->final_norm = m->final_norm_bias = -1;
	m->pos_embed = m->proj_in = m->proj_out = -1;
	for (int i = 0; i < ntop; i++) {
		int id = taco_model_find(m, top[i].name);
		switch (top[i].role) {
		case TACO_T_EMBED:
			m->embed = id;
			break;
		case TACO_T_HEAD:
			m->lm_head = id;
			break;
		case TACO_T_FINAL_NORM:
			m->final_norm = id;
			break;
		case TACO_T_FINAL_NORM_BIAS:
			m->final_norm_bias = id;
			break;
		case TACO_T_POS:
			m->pos_embed = id;
			break;
		case TACO_T_PROJ_IN:
			m->proj_in = id;
			break;
		case TACO_T_PROJ_OUT:
			m->proj_out = id;
			break;
		}
	}
	if (cfg->tie_embeddings)
		m->lm_head = m->embed;
	for (int i = 0; i < n; i++)
		m->tensors[i].layer = -1;
	for (int l = 0; l < cfg->layers; l++)
		for (int s = 0; s < TACO_L_COUNT; s++) {
			m->layer[l][s] =
			    taco_layer_tensor_name(cfg, l, s, name,
						   sizeof(name), shape)
				? taco_model_find(m, name)
				: -1;
			if (m->layer[l][s] >= 0)
				m->tensors[m->layer[l][s]].layer = l;
		}
	for (size_t i = 0; i < nx; i++) {
		int l = (int)(i / TACO_X_COUNT / (size_t)cfg->experts);
		int e = (int)(i / TACO_X_COUNT % (size_t)cfg->experts);
		int id =
		    taco_expert_tensor_name(cfg, l, e, (int)(i % TACO_X_COUNT),
					    name, sizeof(name), shape)
			? taco_model_find(m, name)
			: -1;
		m->expert[i] = id;
		if (id >= 0)
			m->tensors[id].layer = l;
	}
	taco_config_inv_freq(cfg, m->inv_freq);
	if (cfg->rope_type == TACO_ROPE_LONGROPE) {
		m->inv_freq_long =
		    calloc((size_t)cfg->head_dim / 2 + 1, sizeof(float));
		if (!m->inv_freq_long) {
			taco_model_free(m);
			return taco_err_set(err, -ENOMEM, "out of memory");
		}
		taco_config_inv_freq_long(cfg, m->inv_freq_long);
	}
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
	if (taco_tensor_wants_host(m, t))
		t->host = m->ops->host_alloc(bytes);
	else
		t->data = m->ops->alloc(bytes);
	if (!t->data && !t->host)
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

	int id = (int)(t - m->tensors);

	if (s->dtype == dtype) {
		taco_tensor_write(m, id, 0, s->data, s->nbytes);
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
		taco_tensor_write(m, id, i0 * es, buf, n * es);
	}
	free(buf);
	return 0;
}

/* MXFP4 storage of a fused tensor: "<fused>_blocks" and "_scales". */
static const char *const mx_suffix[2] = {"_blocks", "_scales"};

/* Whether name is a fused tensor (or its MXFP4 blocks or scales) whose
 * expert 0 slice is one of m's tensors. */
static int fused_of(const taco_model *m, const char *name)
{
	char buf[TACO_NAME_MAX + 8];
	size_t n = strlen(name);

	if (n + 4 > sizeof(buf))
		return 0;
	for (int j = 0; j < 2; j++) {
		size_t sn = strlen(mx_suffix[j]);
		if (n > sn && strcmp(name + n - sn, mx_suffix[j]) == 0) {
			snprintf(buf, sizeof(buf), "%.*s[0]", (int)(n - sn),
				 name);
			if (taco_model_find(m, buf) >= 0)
				return 1;
		}
	}
	snprintf(buf, sizeof(buf), "%s[0]", name);
	return taco_model_find(m, buf) >= 0;
}

/* bytes of the bf16 scratch one expert's MXFP4 matrix dequantizes into */
static size_t fused_scratch(const taco_model *m)
{
	size_t n = 2;

	for (int i = 0; i < m->n_tensors; i++) {
		char fused[TACO_NAME_MAX];
		int e;
		if (taco_expert_view(m->tensors[i].name, fused, sizeof(fused),
				     &e) &&
		    m->tensors[i].numel * 2 > n)
			n = m->tensors[i].numel * 2;
	}
	return n;
}

/* Whether the fused tensor f is [E, shape of t]. */
static int fused_shape_ok(const taco_st_tensor *f, const taco_tensor *t,
			  int64_t E)
{
	if (f->ndim != t->ndim + 1 || f->shape[0] != E ||
	    f->shape[1] != t->shape[0])
		return 0;
	return t->ndim == 1 || f->shape[2] == t->shape[1];
}

/* t is expert e's slice of a fused tensor: *out, a view of its bytes (or,
 * stored as MXFP4, of deq, where its bf16 values are dequantized as
 * transformers does). 1: found; 0: no fused tensor of that name; < 0: an
 * error (a shape that does not fit). */
static int expert_slice(taco_st_model *st, const char *dir, int64_t E,
			const taco_tensor *t, uint16_t *deq,
			taco_st_tensor *out, taco_err *err)
{
	char fused[TACO_NAME_MAX], nm[TACO_NAME_MAX + 8];
	const taco_st_tensor *f, *b, *s;
	int e;

	if (!taco_expert_view(t->name, fused, sizeof(fused), &e))
		return 0;
	*out = (taco_st_tensor){.name = t->name, .ndim = t->ndim};
	out->shape[0] = t->shape[0];
	out->shape[1] = t->shape[1];
	if ((f = taco_st_model_find(st, fused))) {
		size_t bytes = t->numel * taco_st_dtype_size(f->dtype);
		if (!fused_shape_ok(f, t, E))
			goto bad_shape;
		out->dtype = f->dtype;
		out->nbytes = bytes;
		out->data = (const uint8_t *)f->data + (size_t)e * bytes;
		return 1;
	}
	snprintf(nm, sizeof(nm), "%s%s", fused, mx_suffix[0]);
	b = taco_st_model_find(st, nm);
	snprintf(nm, sizeof(nm), "%s%s", fused, mx_suffix[1]);
	s = taco_st_model_find(st, nm);
	if (!b || !s)
		return 0;
	/* blocks [E, R, C / 32, 16] and scales [E, R, C / 32] (U8) of W [E,
	 * C, R]: t is [C, R] */
	if (t->ndim != 2 || b->dtype != TACO_ST_U8 || s->dtype != TACO_ST_U8 ||
	    b->ndim != 4 || s->ndim != 3 || t->shape[0] % 32 ||
	    b->shape[1] != t->shape[1] || b->shape[2] != t->shape[0] / 32 ||
	    b->shape[3] != 16 || s->shape[0] != b->shape[0] ||
	    s->shape[1] != b->shape[1] || s->shape[2] != b->shape[2] ||
	    b->shape[0] != E) {
		char want[64];
		shape_str(want, sizeof(want), t->ndim, t->shape);
		return taco_err_set(err, -EINVAL,
				    "%s: MXFP4 tensors '%s_blocks' and "
				    "'_scales' do not hold %lld experts of "
				    "shape %s (U8 [%lld, %lld, %lld, 16] and "
				    "[%lld, %lld, %lld] expected)",
				    dir, fused, (long long)E, want,
				    (long long)E, (long long)t->shape[1],
				    (long long)t->shape[0] / 32, (long long)E,
				    (long long)t->shape[1],
				    (long long)t->shape[0] / 32);
	}
	taco_mxfp4_dequant_bf16(
	    (const uint8_t *)b->data + (size_t)e * t->numel / 2,
	    (const uint8_t *)s->data + (size_t)e * t->numel / 32, 1,
	    (size_t)t->shape[1], (size_t)t->shape[0], deq);
	out->dtype = TK_BF16;
	out->nbytes = t->numel * 2;
	out->data = deq;
	return 1;
bad_shape : {
	char have[160], want[64];
	shape_str(have, sizeof(have), f->ndim, f->shape);
	shape_str(want, sizeof(want), t->ndim, t->shape);
	return taco_err_set(err, -EINVAL,
			    "%s: tensor '%s' has shape %s, the config needs "
			    "[%lld, %s",
			    dir, fused, have, (long long)E, want + 1);
}
}

static int load_weights(taco_model *m, const char *dir, taco_err *err)
{
	taco_st_model *st = NULL;
	taco_st_tensor view;
	uint16_t *deq = NULL;
	int r, dt;

	r = taco_st_open_model(dir, &st, err);
	if (r)
		return r;
	deq = malloc(fused_scratch(m));
	if (!deq) {
		r = taco_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < m->n_tensors; i++) {
		taco_tensor *t = &m->tensors[i];
		const taco_st_tensor *s = taco_st_model_find(st, t->name);

		if (!s) {
			r = expert_slice(st, dir, m->cfg.experts, t, deq, &view,
					 err);
			if (r < 0)
				goto out;
			s = r ? &view : NULL;
		}
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
		if (taco_model_find(m, s->name) < 0 && !fused_of(m, s->name) &&
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
	free(deq);
	taco_st_model_close(st);
	return r;
}

int taco_model_load(const char *dir, const tk_ops *ops, taco_model **out,
		    taco_err *err)
{
	return taco_model_load_as(dir, ops, TK_F32, out, err);
}

int taco_model_load_as(const char *dir, const tk_ops *ops, int act_dtype,
		       taco_model **out, taco_err *err)
{
	return taco_model_load_sched(dir, ops, act_dtype, NULL, out, err);
}

int taco_model_load_sched(const char *dir, const tk_ops *ops, int act_dtype,
			  const taco_step_opts *sched, taco_model **out,
			  taco_err *err)
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
	if (act_dtype != TK_F32 && act_dtype != TK_BF16)
		return taco_err_set(err, -EINVAL,
				    "precision must be fp32 or "
				    "bf16");
	r = taco_model_skeleton(&cfg, ops, &m, err);
	if (r)
		return r;
	m->act_dtype = act_dtype;
	if (sched && (r = taco_model_set_step_opts(m, sched, err))) {
		taco_model_free(m);
		return r;
	}
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
		for (int i = 0; i < m->n_tensors; i++) {
			taco_tensor *t = &m->tensors[i];
			size_t bytes = t->numel * tk_dtype_size(t->dtype);
			if (t->host)
				m->ops->host_free(t->host, bytes);
			else if (t->data)
				m->ops->free(t->data, bytes);
		}
	free(m->tensors);
	free(m->layer);
	free(m->expert);
	free(m->inv_freq);
	free(m->inv_freq_long);
	free(m);
}
