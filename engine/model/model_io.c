/* model_io.c: weights to and from safetensors files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_io.h"
#include "names.h"
#include "safetensors/safetensors.h"

/* Host copies of a model's tensors as safetensors entries, and the names
 * of the fused ones. */
typedef struct host_set {
	taco_st_tensor *st;
	size_t n;
	char (*names)[TACO_NAME_MAX];
} host_set;

static void host_free(host_set *h)
{
	for (size_t j = 0; h->st && j < h->n; j++)
		free((void *)h->st[j].data);
	free(h->st);
	free(h->names);
}

/* The fused entry of name in h, made [E, shape of t] if no earlier slice
 * made it; NULL when out of memory. */
static taco_st_tensor *fused_entry(host_set *h, const char *name,
				   const taco_tensor *t, int E)
{
	size_t bytes = t->numel * tk_dtype_size(t->dtype);
	taco_st_tensor *d;

	for (size_t j = 0; j < h->n; j++)
		if (strcmp(h->st[j].name, name) == 0)
			return &h->st[j];
	d = &h->st[h->n];
	snprintf(h->names[h->n], TACO_NAME_MAX, "%s", name);
	*d = (taco_st_tensor){.name = h->names[h->n],
			      .dtype = t->dtype,
			      .ndim = t->ndim + 1,
			      .shape = {E, t->shape[0], t->shape[1]},
			      .nbytes = bytes * (size_t)E,
			      .data = malloc(bytes * (size_t)E)};
	if (!d->data)
		return NULL;
	h->n++;
	return d;
}

/* Every tensor into h. With fuse, the experts' slices of a fused tensor
 * (taco_expert_view) become that one tensor [E, ...] again, as the
 * checkpoints that Hugging Face loads store it. */
static int host_tensors(const taco_model *m, int fuse, host_set *h,
			taco_err *err)
{
	size_t cap = (size_t)m->n_tensors;
	char fused[TACO_NAME_MAX];

	memset(h, 0, sizeof(*h));
	h->st = calloc(cap, sizeof(*h->st));
	h->names = calloc(cap, sizeof(*h->names));
	if (!h->st || !h->names)
		goto oom;
	for (int i = 0; i < m->n_tensors; i++) {
		const taco_tensor *t = &m->tensors[i];
		size_t bytes = t->numel * tk_dtype_size(t->dtype);
		taco_st_tensor *d;
		uint8_t *host;
		int e = 0;

		if (fuse &&
		    taco_expert_view(t->name, fused, sizeof(fused), &e)) {
			if (!(d = fused_entry(h, fused, t, m->cfg.experts)))
				goto oom;
			taco_tensor_read(
			    m, i, (uint8_t *)d->data + (size_t)e * bytes);
			continue;
		}
		if (!(host = malloc(bytes)))
			goto oom;
		taco_tensor_read(m, i, host);
		h->st[h->n++] =
		    (taco_st_tensor){.name = t->name,
				     .dtype = t->dtype,
				     .ndim = t->ndim,
				     .shape = {t->shape[0], t->shape[1]},
				     .nbytes = bytes,
				     .data = host};
	}
	return 0;
oom:
	host_free(h);
	return taco_err_set(err, -ENOMEM, "out of memory");
}

int taco_model_save_weights(const taco_model *m, const char *path,
			    taco_err *err)
{
	static const char *const meta[] = {"format", "pt", NULL};
	host_set h;
	int r = host_tensors(m, 0, &h, err);

	if (r)
		return r;
	r = taco_st_write(path, h.st, h.n, meta, err);
	host_free(&h);
	return r;
}

int taco_model_save_sharded(const taco_model *m, const char *dir,
			    uint64_t shard_bytes, taco_err *err)
{
	host_set h;
	int r = host_tensors(m, 1, &h, err);

	if (r)
		return r;
	r = taco_st_write_sharded(dir, h.st, h.n, shard_bytes, err);
	host_free(&h);
	return r;
}

int taco_model_load_weights(taco_model *m, const char *path, taco_err *err)
{
	taco_st_file *f = NULL;
	int r;

	if ((r = taco_st_open(path, &f, err)))
		return r;
	if (taco_st_count(f) != (size_t)m->n_tensors) {
		r = taco_err_set(err, -EINVAL,
				 "%s: holds %zu tensors, the model has %d",
				 path, taco_st_count(f), m->n_tensors);
		goto out;
	}
	for (int i = 0; i < m->n_tensors; i++) {
		const taco_tensor *t = &m->tensors[i];
		const taco_st_tensor *s = taco_st_find(f, t->name);
		if (!s || s->dtype != t->dtype || s->ndim != t->ndim ||
		    s->nbytes != t->numel * tk_dtype_size(t->dtype)) {
			r = taco_err_set(
			    err, -EINVAL,
			    "%s: tensor '%s' is missing or differs "
			    "in dtype or shape",
			    path, t->name);
			goto out;
		}
	}
	for (int i = 0; i < m->n_tensors; i++) {
		const taco_st_tensor *s = taco_st_find(f, m->tensors[i].name);
		taco_tensor_write(m, i, 0, s->data, s->nbytes);
	}
	r = 0;
out:
	taco_st_close(f);
	return r;
}
