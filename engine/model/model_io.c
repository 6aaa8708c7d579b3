/* model_io.c: weights to and from safetensors files. */
#include <stdlib.h>
#include <string.h>

#include "model_io.h"
#include "safetensors/safetensors.h"

/* Host copies of every tensor, as safetensors entries. */
static int host_tensors(const taco_model *m, taco_st_tensor **out,
			taco_err *err)
{
	taco_st_tensor *st = calloc((size_t)m->n_tensors, sizeof(*st));

	if (!st)
		return taco_err_set(err, -ENOMEM, "out of memory");
	for (int i = 0; i < m->n_tensors; i++) {
		const taco_tensor *t = &m->tensors[i];
		size_t bytes = t->numel * tk_dtype_size(t->dtype);
		void *host = malloc(bytes);

		if (!host) {
			for (int j = 0; j < i; j++)
				free((void *)st[j].data);
			free(st);
			return taco_err_set(err, -ENOMEM, "out of memory");
		}
		taco_tensor_read(m, i, host);
		st[i] = (taco_st_tensor){.name = t->name,
					 .dtype = t->dtype,
					 .ndim = t->ndim,
					 .shape = {t->shape[0], t->shape[1]},
					 .nbytes = bytes,
					 .data = host};
	}
	*out = st;
	return 0;
}

static void free_host(const taco_model *m, taco_st_tensor *st)
{
	for (int i = 0; st && i < m->n_tensors; i++)
		free((void *)st[i].data);
	free(st);
}

int taco_model_save_weights(const taco_model *m, const char *path,
			    taco_err *err)
{
	static const char *const meta[] = {"format", "pt", NULL};
	taco_st_tensor *st;
	int r = host_tensors(m, &st, err);

	if (r)
		return r;
	r = taco_st_write(path, st, (size_t)m->n_tensors, meta, err);
	free_host(m, st);
	return r;
}

int taco_model_save_sharded(const taco_model *m, const char *dir,
			    uint64_t shard_bytes, taco_err *err)
{
	taco_st_tensor *st;
	int r = host_tensors(m, &st, err);

	if (r)
		return r;
	r = taco_st_write_sharded(dir, st, (size_t)m->n_tensors, shard_bytes,
				  err);
	free_host(m, st);
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
