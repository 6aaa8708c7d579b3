/* moe.cu: a mixture of experts' routing, dispatch and combination, the
 * operations of kernels/cpu/moe.c in the same order (the per-token routing
 * is tk_moe.h's, compiled for both). N tokens, E experts, k experts a
 * token, M = N * k slots: slot t * k + j is token t's j-th expert. */
#include "cuda_ops.h"
#include "tk_moe.h"

__global__ static void route_kernel(int mode, int norm, int wdt,
				    const float *logits, int N, int E, int k,
				    int32_t *idx, float *w)
{
	int t = blockIdx.x * blockDim.x + threadIdx.x;

	if (t < N)
		tk_moe_route_row(mode, norm, wdt, logits + (size_t)t * E, E, k,
				 idx + (size_t)t * k, w + (size_t)t * k);
}

__global__ static void route_bwd_kernel(int mode, int norm, const float *logits,
					const int32_t *idx, const float *dw,
					const float *extra, int N, int E, int k,
					float *dlogits)
{
	int t = blockIdx.x * blockDim.x + threadIdx.x;

	if (t < N)
		tk_moe_route_bwd_row(mode, norm, logits + (size_t)t * E, E, k,
				     idx + (size_t)t * k, dw + (size_t)t * k,
				     extra, dlogits + (size_t)t * E);
}

/* one thread an expert, rows in order (the CPU's sums) */
__global__ static void prob_sum_kernel(const float *logits, int N, int E,
				       float *psum)
{
	int e = blockIdx.x * blockDim.x + threadIdx.x;
	float s = 0.0f;

	if (e >= E)
		return;
	for (int t = 0; t < N; t++) {
		const float *lg = logits + (size_t)t * E;
		float mx, den = tk_moe_softmax_den(lg, E, &mx);
		s = tk_fadd_rn(s, tk_moe_prob(lg, e, mx, den));
	}
	psum[e] = s;
}

/* One block: each thread counts its experts' slots, thread 0 lays out the
 * offsets (shared, E ints), then each thread writes its experts' slots in
 * slot order. */
__global__ static void sort_kernel(const int32_t *idx, int M, int E,
				   int32_t *order, int32_t *inv,
				   int32_t *counts)
{
	extern __shared__ int32_t off[];

	for (int e = threadIdx.x; e < E; e += blockDim.x) {
		int32_t c = 0;
		for (int s = 0; s < M; s++)
			c += idx[s] == e;
		counts[e] = c;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		int32_t at = 0;
		for (int e = 0; e < E; e++) {
			off[e] = at;
			at += counts[e];
		}
	}
	__syncthreads();
	for (int e = threadIdx.x; e < E; e += blockDim.x) {
		int32_t at = off[e];
		for (int s = 0; s < M; s++)
			if (idx[s] == e) {
				order[at] = s;
				inv[s] = at++;
			}
	}
}

template <typename T>
__global__ static void gather_kernel(T *xg, const T *x, const int32_t *order,
				     int M, int k, int H)
{
	size_t n = (size_t)M * H, stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		size_t p = i / H, h = i % H;
		xg[i] = x[(size_t)(order[p] / k) * H + h];
	}
}

template <typename T>
__global__ static void combine_kernel(T *out, const T *y, const int32_t *inv,
				      const float *w, int N, int k, int H)
{
	size_t n = (size_t)N * H, stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		size_t t = i / H, h = i % H;
		float s = 0.0f;
		for (int j = 0; j < k; j++) {
			size_t p = (size_t)inv[t * k + j];
			s = tk_fadd_rn(
			    s, tk_fmul_rn(w[t * k + j], tkc_ld(y[p * H + h])));
		}
		tkc_put(&out[i], s);
	}
}

/* one thread a slot: its dot product over H in order, and its dy row */
template <typename T>
__global__ static void combine_bwd_kernel(T *dy, float *dw, const T *dout,
					  const T *y, const int32_t *inv,
					  const float *w, int N, int k, int H)
{
	size_t s = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	size_t t = s / k, p;
	float d = 0.0f;

	if (s >= (size_t)N * k)
		return;
	p = (size_t)inv[s];
	for (int h = 0; h < H; h++) {
		float g = tkc_ld(dout[t * H + h]);
		d = tk_fadd_rn(d, tk_fmul_rn(g, tkc_ld(y[p * H + h])));
		tkc_put(&dy[p * H + h], tk_fmul_rn(w[s], g));
	}
	dw[s] = d;
}

template <typename T>
__global__ static void scatter_kernel(T *dx, const T *dxg, const int32_t *inv,
				      int N, int k, int H)
{
	size_t n = (size_t)N * H, stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		size_t t = i / H, h = i % H;
		float s = 0.0f;
		for (int j = 0; j < k; j++)
			s = tk_fadd_rn(
			    s, tkc_ld(dxg[(size_t)inv[t * k + j] * H + h]));
		tkc_put(&dx[i], s);
	}
}

static unsigned per_thread(size_t n)
{
	return (unsigned)((n + TKC_THREADS - 1) / TKC_THREADS);
}

void tkc_moe_route(int mode, int norm, int wdt, const float *logits, int N,
		   int E, int k, int32_t *idx, float *w)
{
	if (N <= 0)
		return;
	route_kernel<<<per_thread((size_t)N), TKC_THREADS, 0, tkc_stream()>>>(
	    mode, norm, wdt, logits, N, E, k, idx, w);
	tkc_check_launch("moe_route");
}

void tkc_moe_route_bwd(int mode, int norm, const float *logits,
		       const int32_t *idx, const float *dw, const float *extra,
		       int N, int E, int k, float *dlogits)
{
	if (N <= 0)
		return;
	route_bwd_kernel<<<per_thread((size_t)N), TKC_THREADS, 0,
			   tkc_stream()>>>(mode, norm, logits, idx, dw, extra,
					   N, E, k, dlogits);
	tkc_check_launch("moe_route_bwd");
}

void tkc_moe_prob_sum(const float *logits, int N, int E, float *psum)
{
	prob_sum_kernel<<<per_thread((size_t)E), TKC_THREADS, 0,
			  tkc_stream()>>>(logits, N, E, psum);
	tkc_check_launch("moe_prob_sum");
}

void tkc_moe_sort(const int32_t *idx, int N, int E, int k, int32_t *order,
		  int32_t *inv, int32_t *counts)
{
	int threads = E < 1024 ? E : 1024;

	sort_kernel<<<1, threads, (size_t)E * sizeof(int32_t), tkc_stream()>>>(
	    idx, N * k, E, order, inv, counts);
	tkc_check_launch("moe_sort");
}

template <typename T>
static void gather(void *xg, const void *x, const int32_t *order, int M, int k,
		   int H)
{
	gather_kernel<T>
	    <<<tkc_blocks((size_t)M * H), TKC_THREADS, 0, tkc_stream()>>>(
		(T *)xg, (const T *)x, order, M, k, H);
}

template <typename T>
static void combine(void *out, const void *y, const int32_t *inv,
		    const float *w, int N, int k, int H)
{
	combine_kernel<T>
	    <<<tkc_blocks((size_t)N * H), TKC_THREADS, 0, tkc_stream()>>>(
		(T *)out, (const T *)y, inv, w, N, k, H);
}

template <typename T>
static void combine_bwd(void *dy, float *dw, const void *dout, const void *y,
			const int32_t *inv, const float *w, int N, int k, int H)
{
	combine_bwd_kernel<T>
	    <<<per_thread((size_t)N * k), TKC_THREADS, 0, tkc_stream()>>>(
		(T *)dy, dw, (const T *)dout, (const T *)y, inv, w, N, k, H);
}

template <typename T>
static void scatter(void *dx, const void *dxg, const int32_t *inv, int N, int k,
		    int H)
{
	scatter_kernel<T>
	    <<<tkc_blocks((size_t)N * H), TKC_THREADS, 0, tkc_stream()>>>(
		(T *)dx, (const T *)dxg, inv, N, k, H);
}

void tkc_moe_gather(int dt, void *xg, const void *x, const int32_t *order,
		    int M, int k, int H)
{
	if (!M)
		return;
	if (dt == TK_F32)
		gather<float>(xg, x, order, M, k, H);
	else if (dt == TK_BF16)
		gather<tkc_bf16>(xg, x, order, M, k, H);
	else
		tkc_bad_dtype("moe_gather", dt);
	tkc_check_launch("moe_gather");
}

void tkc_moe_combine(int dt, void *out, const void *y, const int32_t *inv,
		     const float *w, int N, int k, int H)
{
	if (!N)
		return;
	if (dt == TK_F32)
		combine<float>(out, y, inv, w, N, k, H);
	else if (dt == TK_BF16)
		combine<tkc_bf16>(out, y, inv, w, N, k, H);
	else
		tkc_bad_dtype("moe_combine", dt);
	tkc_check_launch("moe_combine");
}

void tkc_moe_combine_bwd(int dt, void *dy, float *dw, const void *dout,
			 const void *y, const int32_t *inv, const float *w,
			 int N, int k, int H)
{
	if (!N)
		return;
	if (dt == TK_F32)
		combine_bwd<float>(dy, dw, dout, y, inv, w, N, k, H);
	else if (dt == TK_BF16)
		combine_bwd<tkc_bf16>(dy, dw, dout, y, inv, w, N, k, H);
	else
		tkc_bad_dtype("moe_combine_bwd", dt);
	tkc_check_launch("moe_combine_bwd");
}

void tkc_moe_scatter(int dt, void *dx, const void *dxg, const int32_t *inv,
		     int N, int k, int H)
{
	if (!N)
		return;
	if (dt == TK_F32)
		scatter<float>(dx, dxg, inv, N, k, H);
	else if (dt == TK_BF16)
		scatter<tkc_bf16>(dx, dxg, inv, N, k, H);
	else
		tkc_bad_dtype("moe_scatter", dt);
	tkc_check_launch("moe_scatter");
}
