/* dist.c: data parallel over tk_comm.h (dist.h). */
#include "dist.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tk_hash.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A sum of n floats, timed. */
static int sum_timed(taco_dist *d, float *buf, size_t n)
{
	double t0 = now();
	int r = d->comm->sum_f32(d->comm, buf, n);

	d->comm_s += now() - t0;
	return r;
}

int taco_dist_open(taco_dist *d, const taco_job *job, taco_err *err)
{
	char why[256] = "";
	int rank, world = tk_comm_world(&rank), r;

	memset(d, 0, sizeof(*d));
	if (world != job->gpus)
		return taco_err_set(
		    err, -EINVAL,
		    world == 1 ? "gpus %d: start the job's ranks with "
				 "mpirun -np %d (taco-train does it itself)"
			       : "gpus %d: started among %d ranks",
		    job->gpus, world == 1 ? job->gpus : world);
	if ((r = tk_comm_open(TACO_DIST_TIMEOUT_S, &d->comm, why, sizeof(why))))
		return taco_err_set(err, r, "gpus %d: %s", job->gpus, why);
	d->rank = d->comm->rank;
	d->size = d->comm->size;
	if (d->size != job->gpus) {
		d->comm->close(d->comm);
		d->comm = NULL;
		return taco_err_set(err, -EINVAL, "gpus %d: MPI has %d ranks",
				    job->gpus, d->size);
	}
	return 0;
}

int taco_dist_open_device(taco_dist *d, const tk_ops *ops, taco_err *err)
{
	const char *one = getenv("TACO_NCCL_ONE_RANK");
	char why[256] = "";
	int r;

	if (d->size < 2 && !(one && !strcmp(one, "1")))
		return 0;
	d->ops = ops;
	if ((r = tk_cuda_comm_open(d->comm, TACO_DIST_TIMEOUT_S, &d->dev, why,
				   sizeof(why))))
		return taco_err_set(err, r, "gpus %d: rank %d: NCCL: %s",
				    d->size, d->rank, why);
	return 0;
}

void taco_dist_close(taco_dist *d)
{
	/* the device comm first: it was made over the host one */
	if (d->dev)
		d->dev->close(d->dev);
	if (d->own)
		d->ops->free(d->own, d->own_cap * sizeof(float));
	if (d->comm)
		d->comm->close(d->comm);
	memset(d, 0, sizeof(*d));
}

static int comm_err(taco_dist *d, int r, const char *what, taco_err *err)
{
	if (r == -ETIMEDOUT)
		return taco_err_set(err, r,
				    "rank %d: %s waited over %.0f s for the "
				    "other ranks: one is gone or stuck",
				    d->rank, what, d->comm->timeout_s);
	return taco_err_set(err, r, "rank %d: %s failed (%s)", d->rank, what,
			    strerror(-r));
}

/* Part mode: the part's rows into the model's comm block, summed, then to
 * the inner sink as one contiguous part. The parts arrive in the same
 * order on every rank (the same shapes, and the global batch's embedding
 * rows), so the sums pair up. On a device comm (NCCL) the copy and the sum
 * are queued on the backend's stream, where the inner sink's update
 * follows them: the side stream while the backward goes on, with overlap
 * (model_grad.c). */
static int on_part(void *ctx, taco_model *m, const taco_grad_part *p)
{
	taco_dist *d = ctx;
	size_t n = (size_t)p->rows * (size_t)p->cols, cap = 0;
	float *out = taco_model_comm_block(m, &cap);
	taco_grad_part q = *p;
	int r;

	if (!out && d->size == 1 && d->dev) { /* TACO_NCCL_ONE_RANK */
		if (n > d->own_cap) {
			if (d->own)
				d->ops->free(d->own,
					     d->own_cap * sizeof(float));
			d->own_cap = 0;
			if (!(d->own = d->ops->alloc(n * sizeof(float))))
				return -ENOMEM;
			d->own_cap = n;
		}
		out = d->own;
		cap = d->own_cap;
	}
	if (!out || n > cap) /* a part is at most a block */
		return -EOVERFLOW;
	if (d->dev) {
		r = d->dev->sum_rows_f32(d->dev, p->g, p->ld, p->rows, p->cols,
					 out);
	} else {
		for (int i = 0; i < p->rows; i++)
			memcpy(out + (size_t)i * p->cols,
			       p->g + (size_t)i * p->ld,
			       (size_t)p->cols * sizeof(float));
		r = sum_timed(d, out, n);
	}
	if (r)
		return r;
	q.g = out;
	q.ld = p->cols;
	return d->inner->part(d->inner->ctx, m, &q);
}

static const void *on_changed_rows(void *ctx, taco_model *m, int tensor, int *k)
{
	taco_dist *d = ctx;

	return d->inner->changed_rows
		   ? d->inner->changed_rows(d->inner->ctx, m, tensor, k)
		   : NULL;
}

const taco_grad_sink *taco_dist_sink(taco_dist *d, const taco_grad_sink *inner)
{
	if (d->size < 2 && !d->dev)
		return inner;
	d->inner = inner;
	d->sink =
	    (taco_grad_sink){on_part, NULL, inner->skip, d, on_changed_rows};
	return &d->sink;
}

int taco_dist_sum(taco_dist *d, double *v, int n, taco_err *err)
{
	int r;

	if (d->size < 2)
		return 0;
	if ((r = d->comm->sum_f64(d->comm, v, (size_t)n)))
		return comm_err(d, r, "a sum", err);
	return 0;
}

int taco_dist_sum_f32(taco_dist *d, float *buf, size_t n, taco_err *err)
{
	int r;

	if (d->size < 2 && !d->dev)
		return 0;
	r = d->dev ? d->dev->sum_f32(d->dev, buf, n) : sum_timed(d, buf, n);
	if (r)
		return comm_err(d, r, "a gradient sum", err);
	return 0;
}

/* A digest of n bytes: splitmix64 over 8-byte words, then the tail. */
static uint64_t digest(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t w;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		memcpy(&w, b + i, 8);
		h = tk_splitmix64(h ^ w);
	}
	for (; i < n; i++)
		h = tk_splitmix64(h ^ b[i]);
	return h;
}

int taco_dist_check_weights(taco_dist *d, const taco_model *m, int64_t step,
			    taco_err *err)
{
	uint64_t h = 0x77656967687473ull, all[64]; /* "weights" */
	size_t cap = 0;
	void *buf = NULL;
	int r = 0;

	if (d->size < 2)
		return 0;
	for (int i = 0; i < m->n_tensors && !r; i++) {
		size_t bytes =
		    m->tensors[i].numel * tk_dtype_size(m->tensors[i].dtype);
		if (bytes > cap) {
			void *b = realloc(buf, bytes);
			if (!b) {
				r = taco_err_set(err, -ENOMEM, "out of memory");
				break;
			}
			buf = b;
			cap = bytes;
		}
		taco_tensor_read(m, i, buf);
		h = digest(h, buf, bytes);
	}
	free(buf);
	if (r)
		return r;
	if ((r = d->comm->gather_u64(d->comm, h, all)))
		return comm_err(d, r, "the weights' check", err);
	for (int k = 1; k < d->size; k++)
		if (all[k] != all[0])
			return taco_err_set(err, -EIO,
					    "step %lld: rank %d's weights "
					    "differ from rank 0's: the ranks "
					    "diverged",
					    (long long)step, k);
	return 0;
}

int taco_dist_barrier(taco_dist *d, double timeout_s, taco_err *err)
{
	int r;

	if (d->size < 2)
		return 0;
	if ((r = d->comm->barrier(d->comm, timeout_s)))
		return comm_err(d, r, "waiting for rank 0", err);
	return 0;
}
