/* optim.c: per-tensor optimizer state and updates. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim.h"
#include "safetensors/safetensors.h"

size_t taco_optim_tensor_bytes(int kind, int ndim, int64_t R, int64_t C, int k)
{
	size_t idx_bytes = R <= 65535 ? 2 : 4;

	if (kind == TACO_OPT_TACO && ndim == 2)
		return (size_t)C * ((size_t)k * idx_bytes + (size_t)k + 4);
	if (kind == TACO_OPT_ADAMW)
		return 12 * (size_t)R * (size_t)(ndim == 2 ? C : 1);
	return 0;
}

int taco_optim_kind_of(const taco_tensor *t, const taco_optim_opts *o,
		       int frozen)
{
	if (frozen)
		return TACO_OPT_FROZEN;
	if (t->ndim == 2 && !o->all_adamw)
		return TACO_OPT_TACO;
	return TACO_OPT_ADAMW;
}

static void *zalloc(const tk_ops *ops, size_t bytes, size_t *total)
{
	void *p = ops->alloc(bytes);

	if (p) {
		ops->memset0(p, bytes);
		*total += bytes;
	}
	return p;
}

static int init_tensor(taco_optim *o, int id, int kind, taco_err *err)
{
	const tk_ops *ops = o->model->ops;
	const taco_tensor *t = &o->model->tensors[id];
	taco_optim_tensor *s = &o->t[id];
	size_t n = t->numel, C = (size_t)t->shape[1], k = (size_t)o->opts.k;

	s->kind = kind;
	if (kind == TACO_OPT_TACO) {
		s->idx_bytes = t->shape[0] <= 65535 ? 2 : 4;
		s->idx =
		    zalloc(ops, C * k * (size_t)s->idx_bytes, &s->state_bytes);
		s->q = zalloc(ops, C * k, &s->state_bytes);
		s->scale = zalloc(ops, C * sizeof(float), &s->state_bytes);
		if (!s->idx || !s->q || !s->scale)
			goto nomem;
		/* all ones = empty slot */
		{
			size_t bytes = C * k * (size_t)s->idx_bytes;
			uint8_t *ones = malloc(bytes);
			if (!ones)
				goto nomem;
			memset(ones, 0xFF, bytes);
			ops->upload(s->idx, ones, bytes);
			free(ones);
		}
	} else if (kind == TACO_OPT_ADAMW) {
		s->master = zalloc(ops, n * 4, &s->state_bytes);
		s->m = zalloc(ops, n * 4, &s->state_bytes);
		s->v = zalloc(ops, n * 4, &s->state_bytes);
		if (!s->master || !s->m || !s->v)
			goto nomem;
		if (t->host) { /* a streamed matrix: through a device copy */
			size_t bytes = n * tk_dtype_size(t->dtype);
			void *dev = ops->alloc(bytes);
			if (!dev)
				goto nomem;
			ops->upload(dev, t->host, bytes);
			ops->to_f32(s->master, dev, t->dtype, n);
			ops->free(dev, bytes);
		} else {
			ops->to_f32(s->master, t->data, t->dtype, n);
		}
	}
	o->state_bytes += s->state_bytes;
	return 0;
nomem:
	return taco_err_set(
	    err, -ENOMEM, "cannot allocate optimizer state for '%s'", t->name);
}

static void free_tensor(const tk_ops *ops, const taco_tensor *t,
			taco_optim_tensor *s, int k)
{
	size_t C = (size_t)t->shape[1], n = t->numel;

	if (s->idx)
		ops->free(s->idx, C * (size_t)k * (size_t)s->idx_bytes);
	if (s->q)
		ops->free(s->q, C * (size_t)k);
	if (s->scale)
		ops->free(s->scale, C * sizeof(float));
	if (s->master)
		ops->free(s->master, n * 4);
	if (s->m)
		ops->free(s->m, n * 4);
	if (s->v)
		ops->free(s->v, n * 4);
}

void taco_optim_free(taco_optim *o)
{
	if (!o)
		return;
	for (int i = 0; i < TACO_MAX_ROW_STREAMS; i++)
		if (o->streams[i].scan)
			o->model->ops->free(o->streams[i].scan, o->scan_bytes);
	for (int i = 0; o->t && i < o->model->n_tensors; i++)
		free_tensor(o->model->ops, &o->model->tensors[i], &o->t[i],
			    o->opts.k);
	free(o->t);
	free(o);
}

/* The scan of the widest TACO tensor: any of them may come in rows. */
static size_t widest_scan(const taco_model *m, const taco_optim_opts *opts,
			  const uint8_t *frozen, size_t (*scan_bytes)(int C))
{
	int64_t C = 0;

	for (int i = 0; i < m->n_tensors; i++) {
		const taco_tensor *t = &m->tensors[i];
		if (taco_optim_kind_of(t, opts, frozen ? frozen[i] : 0) ==
			TACO_OPT_TACO &&
		    t->shape[1] > C)
			C = t->shape[1];
	}
	return C ? scan_bytes((int)C) : 0;
}

size_t taco_optim_scan_total(const taco_model *m, const taco_optim_opts *opts,
			     const uint8_t *frozen, size_t (*scan_bytes)(int C))
{
	return TACO_MAX_ROW_STREAMS * widest_scan(m, opts, frozen, scan_bytes);
}

int taco_optim_create(taco_model *m, const taco_optim_opts *opts,
		      const uint8_t *frozen, taco_optim **out, taco_err *err)
{
	taco_optim *o;
	int r;

	if (!opts->all_adamw && (opts->k < 1 || opts->k > 16))
		return taco_err_set(err, -EINVAL, "taco.k must be in [1, 16]");
	o = calloc(1, sizeof(*o));
	if (!o)
		return taco_err_set(err, -ENOMEM, "out of memory");
	o->model = m;
	o->opts = *opts;
	o->t = calloc((size_t)m->n_tensors, sizeof(*o->t));
	if (!o->t) {
		free(o);
		return taco_err_set(err, -ENOMEM, "out of memory");
	}
	for (int i = 0; i < TACO_MAX_ROW_STREAMS; i++)
		o->streams[i].tensor = -1;
	for (int i = 0; i < m->n_tensors; i++) {
		int kind = taco_optim_kind_of(&m->tensors[i], opts,
					      frozen ? frozen[i] : 0);
		if ((r = init_tensor(o, i, kind, err))) {
			taco_optim_free(o);
			return r;
		}
	}
	o->scan_bytes = widest_scan(m, opts, frozen, m->ops->taco_scan_bytes);
	for (int i = 0; o->scan_bytes && i < TACO_MAX_ROW_STREAMS; i++) {
		o->streams[i].scan = m->ops->alloc(o->scan_bytes);
		if (!o->streams[i].scan) {
			taco_optim_free(o);
			return taco_err_set(err, -ENOMEM,
					    "cannot allocate the optimizer's "
					    "row-stream buffers");
		}
	}
	*out = o;
	return 0;
}

void taco_optim_begin_step(taco_optim *o)
{
	o->step++;
}

static tk_taco_args taco_args(const taco_optim *o, int id, float lr)
{
	const taco_tensor *t = &o->model->tensors[id];

	return (tk_taco_args){
	    .R = (int)t->shape[0],
	    .C = (int)t->shape[1],
	    .col0 = 0,
	    .ncols = (int)t->shape[1],
	    .k = o->opts.k,
	    .lr = lr,
	    .beta = o->opts.beta,
	    .weight_decay = o->opts.weight_decay,
	    .stochastic = o->opts.stochastic,
	    .seed = o->opts.seed,
	    .tensor_index = (uint64_t)id,
	    .step = o->step,
	};
}

static taco_optim_stream *stream_of(taco_optim *o, int id, int open)
{
	for (int i = 0; i < TACO_MAX_ROW_STREAMS; i++)
		if (o->streams[i].tensor == id)
			return &o->streams[i];
	for (int i = 0; open && i < TACO_MAX_ROW_STREAMS; i++)
		if (o->streams[i].tensor < 0 && o->streams[i].scan) {
			o->streams[i].tensor = id;
			return &o->streams[i];
		}
	return NULL;
}

int taco_optim_apply_part(taco_optim *o, const taco_grad_part *p, float lr)
{
	const tk_ops *ops = o->model->ops;
	taco_tensor *t = &o->model->tensors[p->tensor];
	taco_optim_tensor *s = &o->t[p->tensor];
	tk_taco_args a = taco_args(o, p->tensor, lr);
	int whole =
	    p->kind == TACO_PART_WHOLE ||
	    (p->kind == TACO_PART_COLS && p->cols == a.C && p->ld == a.C);
	taco_optim_stream *st;

	if (s->kind == TACO_OPT_FROZEN)
		return 0;
	if (!t->data) /* streamed and not in the ring: outside a step */
		return -EINVAL;
	if (whole)
		return taco_optim_apply(o, p->tensor, p->g, lr);
	if (s->kind != TACO_OPT_TACO)
		return -EINVAL;
	if (p->kind == TACO_PART_COLS) {
		a.col0 = p->col0;
		a.ncols = p->cols;
		ops->taco_update(t->data, t->dtype, p->g, p->ld, s->idx, s->q,
				 s->scale, &a);
		return 0;
	}
	if (!(st = stream_of(o, p->tensor, p->first)))
		return -EBUSY;
	if (p->first)
		ops->taco_begin(st->scan, s->idx, s->q, s->scale, &a);
	ops->taco_feed(st->scan, p->g, p->ld, p->row_ids, p->row0, p->rows, &a);
	if (p->last) {
		ops->taco_finish(st->scan, t->data, t->dtype, s->idx, s->q,
				 s->scale, &a);
		st->tensor = -1;
	}
	return 0;
}

const void *taco_optim_changed_rows(const taco_optim *o, int id, int *k)
{
	if (o->t[id].kind != TACO_OPT_TACO)
		return NULL;
	*k = o->opts.k;
	return o->t[id].idx;
}

int taco_optim_apply(taco_optim *o, int id, const float *grad, float lr)
{
	const tk_ops *ops = o->model->ops;
	taco_tensor *t = &o->model->tensors[id];
	taco_optim_tensor *s = &o->t[id];

	if (s->kind != TACO_OPT_FROZEN && !t->data)
		return -EINVAL; /* streamed, outside a step (see optim.h) */
	if (s->kind == TACO_OPT_TACO) {
		tk_taco_args a = taco_args(o, id, lr);
		ops->taco_update(t->data, t->dtype, grad, a.C, s->idx, s->q,
				 s->scale, &a);
	} else if (s->kind == TACO_OPT_ADAMW) {
		tk_adamw_args a = {
		    .lr = lr,
		    .beta1 = o->opts.adam_beta1,
		    .beta2 = o->opts.adam_beta2,
		    .eps = o->opts.adam_eps,
		    .weight_decay = o->opts.adam_weight_decay,
		    .step = o->step,
		};
		ops->adamw_update(t->data, t->dtype, s->master, s->m, s->v,
				  grad, t->numel, &a);
	}
	return 0;
}

/* One state buffer of one tensor, as a checkpoint entry. */
typedef struct state_buf {
	char name[TACO_NAME_MAX + 16];
	void *dev;
	size_t bytes;
	int dtype;
	int ndim;
	int64_t shape[2];
} state_buf;

static int state_list(const taco_optim *o, state_buf **out, size_t *n_out)
{
	size_t n = 0, cap = (size_t)o->model->n_tensors * 3;
	state_buf *b = calloc(cap ? cap : 1, sizeof(*b));

	if (!b)
		return -ENOMEM;
	for (int i = 0; i < o->model->n_tensors; i++) {
		const taco_tensor *t = &o->model->tensors[i];
		const taco_optim_tensor *s = &o->t[i];
		int64_t C = t->shape[1], k = o->opts.k;
		int64_t numel = (int64_t)t->numel;
#define PUT(kind, ptr, dt, nd, d0, d1, es)                                     \
	do {                                                                   \
		snprintf(b[n].name, sizeof(b[n].name), "%s.%s", kind,          \
			 t->name);                                             \
		b[n].dev = (ptr);                                              \
		b[n].dtype = (dt);                                             \
		b[n].ndim = (nd);                                              \
		b[n].shape[0] = (d0);                                          \
		b[n].shape[1] = (d1);                                          \
		b[n].bytes =                                                   \
		    (size_t)(d0) * (size_t)((nd) == 2 ? (d1) : 1) * (es);      \
		n++;                                                           \
	} while (0)
		if (s->kind == TACO_OPT_TACO) {
			PUT("taco.idx", s->idx,
			    s->idx_bytes == 2 ? TACO_ST_U16 : TACO_ST_U32, 2, C,
			    k, (size_t)s->idx_bytes);
			PUT("taco.q", s->q, TACO_ST_U8, 2, C, k, 1);
			PUT("taco.scale", s->scale, TK_F32, 1, C, 0, 4);
		} else if (s->kind == TACO_OPT_ADAMW) {
			PUT("adamw.master", s->master, TK_F32, 1, numel, 0, 4);
			PUT("adamw.m", s->m, TK_F32, 1, numel, 0, 4);
			PUT("adamw.v", s->v, TK_F32, 1, numel, 0, 4);
		}
#undef PUT
	}
	*out = b;
	*n_out = n;
	return 0;
}

int taco_optim_save(const taco_optim *o, const char *path, taco_err *err)
{
	const tk_ops *ops = o->model->ops;
	state_buf *b = NULL;
	taco_st_tensor *st = NULL;
	size_t n = 0;
	char step[32], k[16], kind[16];
	const char *meta[] = {"step", step, "k", k, "optimizer", kind, NULL};
	int r;

	if (state_list(o, &b, &n))
		return taco_err_set(err, -ENOMEM, "out of memory");
	st = calloc(n ? n : 1, sizeof(*st));
	if (!st) {
		r = taco_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		void *host = malloc(b[i].bytes ? b[i].bytes : 1);
		if (!host) {
			r = taco_err_set(err, -ENOMEM, "out of memory");
			goto out;
		}
		ops->download(host, b[i].dev, b[i].bytes);
		st[i] =
		    (taco_st_tensor){.name = b[i].name,
				     .dtype = b[i].dtype,
				     .ndim = b[i].ndim,
				     .shape = {b[i].shape[0], b[i].shape[1]},
				     .nbytes = b[i].bytes,
				     .data = host};
	}
	snprintf(step, sizeof(step), "%" PRIu64, o->step);
	snprintf(k, sizeof(k), "%d", o->opts.k);
	snprintf(kind, sizeof(kind), "%s",
		 o->opts.all_adamw ? "adamw" : "taco");
	r = taco_st_write(path, st, n, meta, err);
out:
	for (size_t i = 0; st && i < n; i++)
		free((void *)st[i].data);
	free(st);
	free(b);
	return r;
}

int taco_optim_load(taco_optim *o, const char *path, taco_err *err)
{
	const tk_ops *ops = o->model->ops;
	taco_st_file *f = NULL;
	state_buf *b = NULL;
	size_t n = 0;
	const char *step, *k;
	char *end;
	int r;

	if ((r = taco_st_open(path, &f, err)))
		return r;
	if (state_list(o, &b, &n)) {
		r = taco_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	step = taco_st_meta(f, "step");
	k = taco_st_meta(f, "k");
	if (!step || !k || atoi(k) != o->opts.k) {
		r = taco_err_set(err, -EINVAL,
				 "%s: optimizer state is not for k = %d", path,
				 o->opts.k);
		goto out;
	}
	if (taco_st_count(f) != n) {
		r = taco_err_set(err, -EINVAL,
				 "%s: holds %zu state tensors, this job needs "
				 "%zu (different model, optimizer or frozen "
				 "tensors?)",
				 path, taco_st_count(f), n);
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		const taco_st_tensor *t = taco_st_find(f, b[i].name);
		if (!t || t->dtype != b[i].dtype || t->nbytes != b[i].bytes) {
			r = taco_err_set(err, -EINVAL,
					 "%s: state tensor '%s' is missing or "
					 "has the wrong type or size",
					 path, b[i].name);
			goto out;
		}
	}
	/* All checked: now overwrite the live state. */
	for (size_t i = 0; i < n; i++)
		ops->upload(b[i].dev, taco_st_find(f, b[i].name)->data,
			    b[i].bytes);
	o->step = strtoull(step, &end, 10);
	r = 0;
out:
	free(b);
	taco_st_close(f);
	return r;
}
