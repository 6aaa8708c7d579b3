/* cross_entropy.cu: the softmax cross-entropy over the vocabulary in
 * chunks (tk_ops.h ce_stats, ce_finish, ce_grad).
 *
 * Per token row i the state s holds, over the chunks seen so far, the
 * running max mx (float), the running sum se (double) of exp(x - mx), the
 * target's logit tl and the running argmax am (ties: the smaller id).
 *
 * ce_stats, one block per row, reads the chunk twice: first its max and
 * argmax (each thread scans its columns in increasing order with a strict
 * >, the per-thread results merge in a fixed tree, ties to the smaller
 * column), then, with the new running max mx' = max(mx, chunk max), the
 * sum of expf(x - mx') in double (tkc_block_sum: a fixed order). Then
 *   se' = se * exp((double)mx - (double)mx') + chunk sum
 * (an empty se, the first chunk, is not rescaled), am moves to the chunk's
 * argmax only when the chunk max is strictly larger than mx (chunks come in
 * increasing v0, so a tie keeps the smaller id). v0 == 0 starts the row
 * afresh (tl = 0 until the target's chunk is seen).
 *
 * ce_finish: lse = (float)((double)mx + log(se)); each row's loss
 * (double)mx + log(se) - (double)tl (0 without a target) and whether am is
 * the target land in device arrays; the host adds them in row order, so
 * loss_sum is a deterministic sum. A row has a target iff targets[i] >= 0
 * (-100 is the convention for none).
 *
 * ce_grad: dlogits = grad_scale (times the row's scale when there is one)
 * * (expf(x - lse) - onehot), 0 for rows without a target, stored in dt
 * (rounded once). Each element is read and
 * written by one thread, so dlogits may be logits (dt F32, ldd == ldl).
 */
#include <limits.h>
#include <math.h>
#include <mutex>
#include <stdlib.h>

#include "cuda_ops.h"

#define CE_THREADS 256
#define CE_WARPS (CE_THREADS / 32)

/* Max of part of a row and the smallest column holding it. */
typedef struct ce_max {
	float m;
	int idx; /* INT_MAX when empty */
} ce_max;

__device__ static ce_max ce_max_merge(ce_max a, ce_max b)
{
	ce_max r;

	r.m = a.m > b.m ? a.m : b.m;
	r.idx = a.m > b.m ? a.idx : b.m > a.m ? b.idx : min(a.idx, b.idx);
	return r;
}

__device__ static ce_max ce_max_shfl(ce_max a, int o)
{
	ce_max r;

	r.m = __shfl_down_sync(0xffffffffu, a.m, o);
	r.idx = __shfl_down_sync(0xffffffffu, a.idx, o);
	return r;
}

/* Folds the chunk x [Vc] (columns v0.. of row blockIdx.x) into the row's
 * state; grid n, block CE_THREADS. */
__global__ static void __launch_bounds__(CE_THREADS)
    ce_stats_kernel(tk_ce_rows s, const float *logits, int ldl,
		    const int32_t *targets, int v0, int Vc)
{
	__shared__ ce_max warp_max[CE_WARPS];
	__shared__ ce_max row_max;
	__shared__ double red[33];
	const size_t i = blockIdx.x;
	const float *x = logits + i * (size_t)ldl;
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	ce_max st = {-INFINITY, INT_MAX};
	float mx_old, mx_new;
	double sum = 0;

	for (int j = threadIdx.x; j < Vc; j += CE_THREADS) {
		float v = x[j];

		/* strict >: a thread sees its columns in increasing order */
		if (v > st.m) {
			st.m = v;
			st.idx = j;
		}
	}
	for (int o = 16; o > 0; o >>= 1)
		st = ce_max_merge(st, ce_max_shfl(st, o));
	if (lane == 0)
		warp_max[w] = st;
	__syncthreads();
	if (w == 0) {
		ce_max e = {-INFINITY, INT_MAX};

		st = lane < CE_WARPS ? warp_max[lane] : e;
		for (int o = 16; o > 0; o >>= 1)
			st = ce_max_merge(st, ce_max_shfl(st, o));
		if (lane == 0)
			row_max = st;
	}
	__syncthreads();
	st = row_max;
	mx_old = v0 == 0 ? -INFINITY : s.mx[i];
	mx_new = st.m > mx_old ? st.m : mx_old;

	for (int j = threadIdx.x; j < Vc; j += CE_THREADS)
		sum += (double)expf(x[j] - mx_new);
	sum = tkc_block_sum(sum, red);

	if (threadIdx.x == 0) {
		double se = v0 == 0 ? 0.0 : s.se[i];
		int32_t t = targets[i];

		if (se != 0.0)
			se *= exp((double)mx_old - (double)mx_new);
		s.se[i] = se + sum;
		s.mx[i] = mx_new;
		if (v0 == 0 || st.m > mx_old)
			s.am[i] = v0 + st.idx;
		if (t >= v0 && t - v0 < Vc)
			s.tl[i] = x[t - v0];
		else if (v0 == 0)
			s.tl[i] = 0.0f;
	}
}

/* Per row: lse, the loss (0 without a target) and argmax == target. */
__global__ static void ce_finish_kernel(tk_ce_rows s, const int32_t *targets,
					int n, double *loss, int *correct)
{
	const int stride = gridDim.x * blockDim.x;

	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		double lse = (double)s.mx[i] + log(s.se[i]);
		int32_t t = targets[i];

		s.lse[i] = (float)lse;
		if (t >= 0) {
			loss[i] = lse - (double)s.tl[i];
			correct[i] = s.am[i] == t;
		} else {
			loss[i] = 0.0;
			correct[i] = 0;
		}
	}
}

/* sums = {the rows' losses, the correct rows}, added in row order as the
 * CPU does (bit-identical totals): one thread, once per step, a few
 * thousand additions. */
__global__ static void ce_sums_kernel(const double *loss, const int *correct,
				      int n, double *sums)
{
	double total = 0;
	long long nc = 0;

	for (int i = 0; i < n; i++) {
		total += loss[i];
		nc += correct[i];
	}
	sums[0] = total;
	sums[1] = (double)nc;
}

/* dlogits [n, Vc] (row stride ldd) from logits (row stride ldl); grid n,
 * block CE_THREADS. */
template <typename T>
__global__ static void __launch_bounds__(CE_THREADS)
    ce_grad_kernel(T *dlogits, int ldd, const float *logits, int ldl,
		   const float *lse, const float *scale, const int32_t *targets,
		   int v0, int Vc, float grad_scale)
{
	const size_t i = blockIdx.x;
	const float *x = logits + i * (size_t)ldl;
	T *d = dlogits + i * (size_t)ldd;
	const int32_t t = targets[i];

	if (t < 0) {
		for (int j = threadIdx.x; j < Vc; j += CE_THREADS)
			tkc_put(&d[j], 0.0f);
		return;
	}
	const float l = lse[i];
	const float gs = scale ? __fmul_rn(grad_scale, scale[i]) : grad_scale;

	for (int j = threadIdx.x; j < Vc; j += CE_THREADS) {
		float p = expf(x[j] - l);
		float oh = v0 + j == t ? 1.0f : 0.0f;

		tkc_put(&d[j], gs * (p - oh));
	}
}

void tkc_ce_stats(const tk_ce_rows *s, const float *logits, int ldl,
		  const int32_t *targets, int n, int v0, int Vc)
{
	if (n <= 0 || Vc <= 0)
		return;
	ce_stats_kernel<<<n, CE_THREADS, 0, tkc_stream()>>>(*s, logits, ldl,
							    targets, v0, Vc);
	tkc_check_launch("ce_stats");
}

static std::mutex ce_lock;
static void *scratch; /* loss [cap] doubles, then correct [cap] ints */
static size_t scratch_cap;

/* Device room for n rows' loss and correct; NULL on failure (recorded). */
static void *ce_scratch(size_t n)
{
	size_t cap = scratch_cap;

	if (n <= cap)
		return scratch;
	while (cap < n)
		cap = cap ? 2 * cap : 1024;
	tkc_free(scratch, scratch_cap * (sizeof(double) + sizeof(int)));
	scratch_cap = 0;
	scratch = tkc_alloc(cap * (sizeof(double) + sizeof(int)));
	if (!scratch) {
		tkc_check(cudaErrorMemoryAllocation, "ce_finish scratch");
		return NULL;
	}
	scratch_cap = cap;
	return scratch;
}

void tkc_ce_finish(const tk_ce_rows *s, const int32_t *targets, int n,
		   double *sums, double *row_loss)
{
	std::lock_guard<std::mutex> g(ce_lock);
	double *loss;
	int *corr;
	void *sc;

	if (n <= 0) {
		tkc_memset0(sums, 2 * sizeof(double));
		return;
	}
	if (!(sc = ce_scratch((size_t)n)))
		return;
	loss = row_loss ? row_loss : (double *)sc;
	corr = (int *)((double *)sc + scratch_cap);
	ce_finish_kernel<<<tkc_blocks((size_t)n), TKC_THREADS, 0,
			   tkc_stream()>>>(*s, targets, n, loss, corr);
	if (tkc_check_launch("ce_finish"))
		return;
	ce_sums_kernel<<<1, 1, 0, tkc_stream()>>>(loss, corr, n, sums);
	tkc_check_launch("ce_finish sums");
}

void tkc_ce_grad(int dt, void *dlogits, int ldd, const float *logits, int ldl,
		 const tk_ce_rows *s, const int32_t *targets, int n, int v0,
		 int Vc, float grad_scale)
{
	if (n <= 0 || Vc <= 0)
		return;
	if (dt == TK_F32)
		ce_grad_kernel<float><<<n, CE_THREADS, 0, tkc_stream()>>>(
		    (float *)dlogits, ldd, logits, ldl, s->lse, s->scale,
		    targets, v0, Vc, grad_scale);
	else if (dt == TK_BF16)
		ce_grad_kernel<tkc_bf16><<<n, CE_THREADS, 0, tkc_stream()>>>(
		    (tkc_bf16 *)dlogits, ldd, logits, ldl, s->lse, s->scale,
		    targets, v0, Vc, grad_scale);
	else {
		tkc_bad_dtype("ce_grad", dt);
		return;
	}
	tkc_check_launch("ce_grad");
}
