/* init.c: random weights on a config's tensor list (model/model_load.c), at
 * the speed a 32B model needs: 32e9 values in seconds, not minutes.
 *
 * A 2-D weight value is 0.02 times the standard normal quantile of one of
 * 65536 equally likely levels, picked by 16 random bits: one table lookup
 * instead of Box-Muller's log, sqrt and cos. The levels are spaced finer
 * than bf16 can tell apart near 0; the tails stop at 4.3 sigma, which a
 * benchmark's weights never miss. A value depends only on the seed, the
 * tensor id and its block of BLOCK elements, so blocks are made in parallel
 * and the weights do not depend on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "init.h"

#include "tk_convert.h"
#include "tk_hash.h"

#define LEVELS 65536
#define BLOCK 4096		/* elements per random stream */
#define CHUNK ((size_t)1 << 24) /* elements per upload: 32 MiB of bf16 */

static double normal_cdf(double x)
{
	return 0.5 * erfc(-x / sqrt(2.0));
}

/* The x with normal_cdf(x) = p, 0 < p < 1: bisection to double precision. */
static double normal_quantile(double p)
{
	double lo = -10.0, hi = 10.0;

	for (int i = 0; i < 64; i++) {
		double mid = 0.5 * (lo + hi);
		if (normal_cdf(mid) < p)
			lo = mid;
		else
			hi = mid;
	}
	return 0.5 * (lo + hi);
}

/* table[LEVELS] in dtype: 0.02 * quantile((i + 0.5) / LEVELS). */
static int make_table(int dtype, void **out)
{
	float *f = malloc(LEVELS * sizeof(float));
	void *t = malloc(LEVELS * tk_dtype_size(dtype));

	if (!f || !t) {
		free(f);
		free(t);
		return -ENOMEM;
	}
	for (int i = 0; i < LEVELS / 2; i++) {
		float x = (float)(0.02 * normal_quantile((i + 0.5) / LEVELS));
		f[i] = x;
		f[LEVELS - 1 - i] = -x; /* symmetric */
	}
	for (size_t i = 0; i < LEVELS; i++)
		tk_store_f32_rne(t, dtype, i, f[i]);
	free(f);
	*out = t;
	return 0;
}

/* dst[n] (element size es) = the values of elements first.. of a tensor
 * whose stream key is key; first is a multiple of BLOCK. */
static void fill_normal(void *dst, size_t es, const void *table, uint64_t key,
			size_t first, size_t n)
{
	long blocks = (long)((n + BLOCK - 1) / BLOCK);

#pragma omp parallel for schedule(static)
	for (long b = 0; b < blocks; b++) {
		size_t off = (size_t)b * BLOCK;
		size_t cnt = n - off < BLOCK ? n - off : BLOCK;
		uint64_t s = tk_splitmix64(key + first / BLOCK + (size_t)b);
		uint64_t bits = 0;

		for (size_t j = 0; j < cnt; j++) {
			unsigned lvl;
			if (j % 4 == 0)
				bits = tk_splitmix64_next(&s);
			lvl = (unsigned)(bits & 0xFFFF);
			bits >>= 16;
			if (es == 2)
				((uint16_t *)dst)[off + j] =
				    ((const uint16_t *)table)[lvl];
			else
				((uint32_t *)dst)[off + j] =
				    ((const uint32_t *)table)[lvl];
		}
	}
}

/* dst[n] = v in dtype (norm weights 1, biases 0). */
static void fill_const(void *dst, int dtype, float v, size_t n)
{
	size_t es = tk_dtype_size(dtype);

	tk_store_f32_rne(dst, dtype, 0, v);
	for (size_t j = 1; j < n; j++)
		memcpy((char *)dst + j * es, dst, es);
}

int taco_model_init_random(const taco_config *cfg, const tk_ops *ops, int dtype,
			   uint64_t seed, taco_model **out, taco_err *err)
{
	return taco_model_init_random_sched(cfg, ops, dtype, seed, NULL, out,
					    err);
}

int taco_model_init_random_sched(const taco_config *cfg, const tk_ops *ops,
				 int dtype, uint64_t seed,
				 const taco_step_opts *sched, taco_model **out,
				 taco_err *err)
{
	size_t es = tk_dtype_size(dtype);
	taco_model *m = NULL;
	void *table = NULL, *host = NULL;
	int r;

	if (!es)
		return taco_err_set(err, -EINVAL, "unknown weight dtype %d",
				    dtype);
	if ((r = taco_model_skeleton(cfg, ops, &m, err)))
		return r;
	if (sched && (r = taco_model_set_step_opts(m, sched, err)))
		goto fail;
	if (make_table(dtype, &table) || !(host = malloc(CHUNK * es))) {
		r = taco_err_set(err, -ENOMEM, "out of memory");
		goto fail;
	}
	for (int i = 0; i < m->n_tensors; i++) {
		taco_tensor *t = &m->tensors[i];
		uint64_t key = tk_splitmix64(seed ^ tk_splitmix64((uint64_t)i));
		size_t n0 = t->numel < CHUNK ? t->numel : CHUNK;

		if ((r = taco_model_alloc_tensor(m, t, dtype, err)))
			goto fail;
		if (t->ndim == 1) /* one fill serves every chunk */
			fill_const(host, dtype, strstr(t->name, "bias") ? 0 : 1,
				   n0);
		for (size_t off = 0; off < t->numel; off += CHUNK) {
			size_t n =
			    t->numel - off < CHUNK ? t->numel - off : CHUNK;
			if (t->ndim == 2)
				fill_normal(host, es, table, key, off, n);
			taco_tensor_write(m, i, off * es, host, n * es);
		}
	}
	free(table);
	free(host);
	*out = m;
	return 0;
fail:
	free(table);
	free(host);
	taco_model_free(m);
	return r;
}
