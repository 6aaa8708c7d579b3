/* add.cu: y[n] += x[n] (dt F32 or BF16; fp32 sum, y rounded once). */
#include "cuda_ops.h"

/* y, x [n] */
template <typename T>
__global__ static void add_kernel(T *y, const T *x, size_t n)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride)
		tkc_put(&y[i], tkc_ld(y[i]) + tkc_ld(x[i]));
}

template <typename T> static void add(void *y, const void *x, size_t n)
{
	add_kernel<T><<<tkc_blocks(n), TKC_THREADS, 0, tkc_stream()>>>(
	    (T *)y, (const T *)x, n);
	tkc_check_launch("add");
}

void tkc_add(int dt, void *y, const void *x, size_t n)
{
	if (!n)
		return;
	if (dt == TK_F32)
		add<float>(y, x, n);
	else if (dt == TK_BF16)
		add<tkc_bf16>(y, x, n);
	else
		tkc_bad_dtype("add", dt);
}
