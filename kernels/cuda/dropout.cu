/* dropout.cu: inverted dropout in place, x[i] = keep(i) ? x[i] * s : +0,
 * s = 1.0f / (1.0f - p) computed once on the host (the CPU backend's fp32
 * division). The mask is tk_dropout.h's integer function of (seed, stream,
 * i) and the product one fp32 multiply rounded once, so the bits are
 * kernels/cpu/dropout.c's.
 */
#include "cuda_ops.h"
#include "tk_dropout.h"

/* x [n] */
template <typename T>
__global__ static void dropout_kernel(T *x, size_t n, uint64_t key,
				      uint64_t thr, float s)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride)
		tkc_put(&x[i],
			tk_dropout_keep(key, thr, i) ? tkc_ld(x[i]) * s : 0.0f);
}

template <typename T>
static void dropout(void *x, size_t n, uint64_t key, uint64_t thr, float s)
{
	dropout_kernel<T><<<tkc_blocks(n), TKC_THREADS, 0, tkc_stream()>>>(
	    (T *)x, n, key, thr, s);
	tkc_check_launch("dropout");
}

void tkc_dropout(int dt, void *x, size_t n, float p, uint64_t seed,
		 uint64_t stream)
{
	uint64_t key, thr;
	float s;

	if (dt != TK_F32 && dt != TK_BF16) {
		tkc_bad_dtype("dropout", dt);
		return;
	}
	/* p == 0: nothing to write; !(p <= 1) also catches a NaN */
	if (p == 0.0f || !n)
		return;
	if (!(p > 0.0f) || !(p <= 1.0f)) {
		tkc_check(cudaErrorInvalidValue, "dropout: p outside [0, 1]");
		return;
	}
	key = tk_dropout_key(seed, stream);
	thr = tk_dropout_threshold(p);
	s = 1.0f / (1.0f - p); /* inf at p == 1, where nothing is kept */
	if (dt == TK_F32)
		dropout<float>(x, n, key, thr, s);
	else
		dropout<tkc_bf16>(x, n, key, thr, s);
}
