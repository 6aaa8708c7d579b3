/* bias.cu: bias add and its reduction.
 *
 * bias_bwd sums each column over the rows without atomics: a block owns 32
 * columns; its 16 thread rows take every 16th row, then the 16 partial sums
 * are added in a fixed order. Deterministic, and in double like the CPU.
 */
#include "cuda_ops.h"

#define BIAS_COLS 32 /* columns per block: one warp reads 128 bytes */
#define BIAS_ROWS 16 /* thread rows per block */

/* y [rows, C] += bias [C] */
__global__ static void bias_fwd_kernel(float *y, const float *bias,
				       size_t total, int C)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	     i < total; i += stride)
		y[i] += bias[i % C];
}

/* dbias [C] += sum over rows of dy [rows, C]; block (BIAS_COLS, BIAS_ROWS),
 * grid ceil(C / BIAS_COLS). */
__global__ static void bias_bwd_kernel(float *dbias, const float *dy, int rows,
				       int C)
{
	__shared__ double part[BIAS_ROWS][BIAS_COLS];
	int c = blockIdx.x * BIAS_COLS + threadIdx.x;
	double acc = 0;

	if (c < C)
		for (int r = threadIdx.y; r < rows; r += BIAS_ROWS)
			acc += dy[(size_t)r * C + c];
	part[threadIdx.y][threadIdx.x] = acc;
	__syncthreads();
	if (threadIdx.y == 0 && c < C) {
		double s = 0;
		for (int k = 0; k < BIAS_ROWS; k++)
			s += part[k][threadIdx.x];
		dbias[c] += (float)s;
	}
}

void tkc_bias_fwd(float *y, const float *bias, int rows, int C)
{
	size_t total = (size_t)(rows > 0 ? rows : 0) * (C > 0 ? C : 0);

	if (!total)
		return;
	bias_fwd_kernel<<<tkc_blocks(total), TKC_THREADS, 0, tkc_stream()>>>(
	    y, bias, total, C);
	tkc_check_launch("bias_fwd");
}

void tkc_bias_bwd(float *dbias, const float *dy, int rows, int C)
{
	if (rows <= 0 || C <= 0)
		return;
	bias_bwd_kernel<<<(C + BIAS_COLS - 1) / BIAS_COLS,
			  dim3(BIAS_COLS, BIAS_ROWS), 0, tkc_stream()>>>(
	    dbias, dy, rows, C);
	tkc_check_launch("bias_bwd");
}
