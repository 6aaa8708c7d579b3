/* cross_entropy.cu: fused softmax cross-entropy over a chunk of tokens.
 *
 * Per row: m = max(x), sum = sum exp(x - m) (double), lse = m + log(sum),
 * loss = lse - x[target]. Rows whose target is -100 (or otherwise outside
 * [0, V)) are ignored: no loss, not counted, zero gradient.
 *
 * One block per row (V reaches 152064: a row is 600 KB, so the block
 * streams it twice, once to reduce and once to write the gradient). Each
 * thread keeps an online (max, sum, argmax): a new maximum rescales its
 * sum, so the row is read once for all three. The per-thread states are
 * merged in a fixed tree: deterministic. Each row's loss and "correct"
 * land in device arrays; the host adds them in row order, as the CPU
 * backend does, so loss_sum is a deterministic sum.
 */
#include <limits.h>
#include <math.h>
#include <mutex>
#include <stdlib.h>

#include "cuda_ops.h"

#define CE_THREADS 1024
/* The second merge step is one warp over the per-warp states. */
static_assert(CE_THREADS == 32 * 32, "one state per lane of warp 0");

/* Online softmax state of a part of a row. */
typedef struct ce_state {
	float m;  /* max so far (-inf when empty) */
	int idx;  /* smallest index holding m (INT_MAX when empty) */
	double s; /* sum of exp(x - m) */
} ce_state;

/* s scaled from max m to max to; empty sums stay 0 (no inf - inf). */
__device__ static double ce_rescale(double s, float m, float to)
{
	return s == 0.0 ? 0.0 : s * exp((double)m - (double)to);
}

__device__ static ce_state ce_merge(ce_state a, ce_state b)
{
	ce_state r;

	r.m = a.m > b.m ? a.m : b.m;
	r.idx = a.m > b.m ? a.idx : b.m > a.m ? b.idx : min(a.idx, b.idx);
	r.s = ce_rescale(a.s, a.m, r.m) + ce_rescale(b.s, b.m, r.m);
	return r;
}

__device__ static ce_state ce_shfl_down(ce_state a, int o)
{
	ce_state r;

	r.m = __shfl_down_sync(0xffffffffu, a.m, o);
	r.idx = __shfl_down_sync(0xffffffffu, a.idx, o);
	r.s = __shfl_down_sync(0xffffffffu, a.s, o);
	return r;
}

/* logits [n, V] (gradient in place when grad_scale != 0), targets [n],
 * loss [n] and correct [n] per row; grid n, block CE_THREADS. */
__global__ static void __launch_bounds__(CE_THREADS)
    ce_kernel(float *logits, const int32_t *targets, int V, float grad_scale,
	      double *loss, int *correct)
{
	__shared__ ce_state warp_state[CE_THREADS / 32];
	__shared__ ce_state row_state;
	float *x = logits + (size_t)blockIdx.x * V;
	int32_t target = targets[blockIdx.x];
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	ce_state st = {-INFINITY, INT_MAX, 0.0};
	float xt, inv;

	if (target < 0 || target >= V) {
		if (grad_scale != 0.0f)
			for (int j = threadIdx.x; j < V; j += CE_THREADS)
				x[j] = 0.0f;
		if (threadIdx.x == 0) {
			loss[blockIdx.x] = 0.0;
			correct[blockIdx.x] = 0;
		}
		return;
	}
	/* Read before the gradient pass overwrites it (a barrier lies
	 * between: the reduction below). */
	xt = x[target];
	for (int j = threadIdx.x; j < V; j += CE_THREADS) {
		float v = x[j];

		/* Strict >: a thread sees its indices in increasing order,
		 * so it keeps the smallest index among ties. */
		if (v > st.m) {
			st.s = ce_rescale(st.s, st.m, v) + 1.0;
			st.m = v;
			st.idx = j;
		} else if (st.m > -INFINITY) {
			st.s += expf(v - st.m);
		}
	}
	for (int o = 16; o > 0; o >>= 1)
		st = ce_merge(st, ce_shfl_down(st, o));
	if (lane == 0)
		warp_state[w] = st;
	__syncthreads();
	if (w == 0) {
		st = warp_state[lane]; /* CE_THREADS / 32 == 32 warps */
		for (int o = 16; o > 0; o >>= 1)
			st = ce_merge(st, ce_shfl_down(st, o));
		if (lane == 0)
			row_state = st;
	}
	__syncthreads();
	st = row_state;
	if (threadIdx.x == 0) {
		double lse = (double)st.m + log(st.s);
		loss[blockIdx.x] = lse - (double)xt;
		correct[blockIdx.x] = st.idx == target;
	}
	if (grad_scale == 0.0f)
		return;
	/* The CPU's expressions: e = exp(x - m), g = scale * (e * inv). */
	inv = (float)(1.0 / st.s);
	for (int j = threadIdx.x; j < V; j += CE_THREADS) {
		float g = grad_scale * (expf(x[j] - st.m) * inv);
		x[j] = j == target ? g - grad_scale : g;
	}
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
		tkc_check(cudaErrorMemoryAllocation, "cross_entropy scratch");
		return NULL;
	}
	scratch_cap = cap;
	return scratch;
}

void tkc_cross_entropy(float *logits, const int32_t *targets, int n, int V,
		       float grad_scale, double *loss_sum, int *n_correct,
		       double *row_loss)
{
	std::lock_guard<std::mutex> g(ce_lock);
	double *loss, *h_loss = NULL, total = 0;
	int *corr, *h_corr = NULL, nc = 0;
	void *s;

	if (n <= 0 || V <= 0) {
		if (loss_sum)
			*loss_sum = 0;
		if (n_correct)
			*n_correct = 0;
		return;
	}
	if (!(s = ce_scratch((size_t)n)))
		return;
	loss = row_loss ? row_loss : (double *)s;
	corr = (int *)((double *)s + scratch_cap);
	ce_kernel<<<n, CE_THREADS, 0, tkc_stream()>>>(logits, targets, V,
						      grad_scale, loss, corr);
	if (tkc_check_launch("cross_entropy"))
		return;
	if (!loss_sum && !n_correct)
		return;
	/* The totals are host values: wait for the rows, add them in order. */
	h_loss = (double *)malloc((size_t)n * sizeof(*h_loss));
	h_corr = (int *)malloc((size_t)n * sizeof(*h_corr));
	if (!h_loss || !h_corr) {
		tkc_check(cudaErrorMemoryAllocation, "cross_entropy host sums");
		goto out;
	}
	if (tkc_check(cudaMemcpyAsync(h_loss, loss, (size_t)n * sizeof(double),
				      cudaMemcpyDeviceToHost, tkc_stream()),
		      "cross_entropy loss") ||
	    tkc_check(cudaMemcpyAsync(h_corr, corr, (size_t)n * sizeof(int),
				      cudaMemcpyDeviceToHost, tkc_stream()),
		      "cross_entropy correct") ||
	    tkc_check(cudaStreamSynchronize(tkc_stream()),
		      "cross_entropy sync"))
		goto out;
	for (int i = 0; i < n; i++) {
		total += h_loss[i];
		nc += h_corr[i];
	}
	if (loss_sum)
		*loss_sum = total;
	if (n_correct)
		*n_correct = nc;
out:
	free(h_loss);
	free(h_corr);
}
