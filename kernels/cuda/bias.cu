/* bias.cu: bias add and its reduction (dt F32 or BF16).
 *
 * bias_bwd sums each column over the rows without atomics: a block owns 32
 * columns; its 16 thread rows take every 16th row, then the 16 partial sums
 * are added in a fixed order. Deterministic, and in double like the CPU;
 * dbias is f32 whatever dt is.
 */
#include "cuda_ops.h"

#define BIAS_COLS 32 /* columns per block: one warp reads a line */
#define BIAS_ROWS 16 /* thread rows per block */

/* y [rows, C] += bias [C] */
template <typename T>
__global__ static void bias_fwd_kernel(T *y, const T *bias, size_t total, int C)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	     i < total; i += stride)
		tkc_put(&y[i], tkc_ld(y[i]) + tkc_ld(bias[i % C]));
}

/* dbias [C] += sum over rows of dy [rows, C]; block (BIAS_COLS, BIAS_ROWS),
 * grid ceil(C / BIAS_COLS). */
template <typename T>
__global__ static void bias_bwd_kernel(float *dbias, const T *dy, int rows,
				       int C)
{
	__shared__ double part[BIAS_ROWS][BIAS_COLS];
	int c = blockIdx.x * BIAS_COLS + threadIdx.x;
	double acc = 0;

	if (c < C)
		for (int r = threadIdx.y; r < rows; r += BIAS_ROWS)
			acc += tkc_ld(dy[(size_t)r * C + c]);
	part[threadIdx.y][threadIdx.x] = acc;
	__syncthreads();
	if (threadIdx.y == 0 && c < C) {
		double s = 0;
		for (int k = 0; k < BIAS_ROWS; k++)
			s += part[k][threadIdx.x];
		dbias[c] += (float)s;
	}
}

template <typename T>
static void bias_fwd(void *y, const void *bias, size_t total, int C)
{
	bias_fwd_kernel<T><<<tkc_blocks(total), TKC_THREADS, 0, tkc_stream()>>>(
	    (T *)y, (const T *)bias, total, C);
	tkc_check_launch("bias_fwd");
}

template <typename T>
static void bias_bwd(float *dbias, const void *dy, int rows, int C)
{
	bias_bwd_kernel<T>
	    <<<(C + BIAS_COLS - 1) / BIAS_COLS, dim3(BIAS_COLS, BIAS_ROWS), 0,
	       tkc_stream()>>>(dbias, (const T *)dy, rows, C);
	tkc_check_launch("bias_bwd");
}

void tkc_bias_fwd(int dt, void *y, const void *bias, int rows, int C)
{
	size_t total = (size_t)(rows > 0 ? rows : 0) * (C > 0 ? C : 0);

	if (!total)
		return;
	if (dt == TK_F32)
		bias_fwd<float>(y, bias, total, C);
	else if (dt == TK_BF16)
		bias_fwd<tkc_bf16>(y, bias, total, C);
	else
		tkc_bad_dtype("bias_fwd", dt);
}

void tkc_bias_bwd(int dt, float *dbias, const void *dy, int rows, int C)
{
	if (rows <= 0 || C <= 0)
		return;
	if (dt == TK_F32)
		bias_bwd<float>(dbias, dy, rows, C);
	else if (dt == TK_BF16)
		bias_bwd<tkc_bf16>(dbias, dy, rows, C);
	else
		tkc_bad_dtype("bias_bwd", dt);
}
