/* add.cu: y[n] += x[n] */
#include "cuda_ops.h"

/* y, x [n] */
__global__ static void add_kernel(float *y, const float *x, size_t n)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride)
		y[i] += x[i];
}

void tkc_add(float *y, const float *x, size_t n)
{
	if (!n)
		return;
	add_kernel<<<tkc_blocks(n), TKC_THREADS, 0, tkc_stream()>>>(y, x, n);
	tkc_check_launch("add");
}
