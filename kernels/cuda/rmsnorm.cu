/* rmsnorm.cu: RMSNorm as Hugging Face LlamaRMSNorm computes it in fp32:
 * rstd = 1 / sqrt(mean(x^2) + eps), out = w * (x * rstd).
 *
 * One block per row; the row sums are in double like the CPU's, reduced in
 * a fixed order (tkc_block_sum), so only their last double bits can differ
 * from the CPU's sequential sum. dw is reduced over rows without atomics,
 * as bias_bwd: a block owns 32 columns and adds 16 partial sums in order.
 */
#include "cuda_ops.h"

#define RMS_THREADS 256
#define RMS_COLS 32 /* dw: columns per block */
#define RMS_ROWS 16 /* dw: thread rows per block */

/* out [n, H], rstd [n], x [n, H], w [H]; grid n, block RMS_THREADS */
__global__ static void __launch_bounds__(RMS_THREADS)
    rmsnorm_fwd_kernel(float *out, float *rstd, const float *x, const float *w,
		       int H, float eps)
{
	__shared__ double red[33];
	const float *xi = x + (size_t)blockIdx.x * H;
	float *oi = out + (size_t)blockIdx.x * H;
	double ss = 0;
	float r;

	for (int j = threadIdx.x; j < H; j += RMS_THREADS)
		ss += (double)xi[j] * xi[j];
	ss = tkc_block_sum(ss, red);
	r = (float)(1.0 / sqrt(ss / H + (double)eps));
	if (threadIdx.x == 0)
		rstd[blockIdx.x] = r;
	for (int j = threadIdx.x; j < H; j += RMS_THREADS)
		oi[j] = w[j] * (xi[j] * r);
}

/* dx [n, H] = rstd * (dout * w - x * c), c = dot(dout * w, x) rstd^2 / H;
 * grid n, block RMS_THREADS. dx may alias dout (read before written by the
 * same thread, after the whole row's dot). */
__global__ static void __launch_bounds__(RMS_THREADS)
    rmsnorm_dx_kernel(float *dx, const float *dout, const float *x,
		      const float *w, const float *rstd, int H)
{
	__shared__ double red[33];
	const float *xi = x + (size_t)blockIdx.x * H;
	const float *di = dout + (size_t)blockIdx.x * H;
	float *dxi = dx + (size_t)blockIdx.x * H;
	double r = rstd[blockIdx.x], dot = 0;
	float c;

	for (int j = threadIdx.x; j < H; j += RMS_THREADS)
		dot += (double)di[j] * w[j] * xi[j];
	dot = tkc_block_sum(dot, red);
	c = (float)(dot * r * r / H);
	for (int j = threadIdx.x; j < H; j += RMS_THREADS)
		dxi[j] = (float)r * (di[j] * w[j] - xi[j] * c);
}

/* dw [H] += sum over rows of dout * x * rstd; block (RMS_COLS, RMS_ROWS),
 * grid ceil(H / RMS_COLS). */
__global__ static void rmsnorm_dw_kernel(float *dw, const float *dout,
					 const float *x, const float *rstd,
					 int n, int H)
{
	__shared__ double part[RMS_ROWS][RMS_COLS];
	int c = blockIdx.x * RMS_COLS + threadIdx.x;
	double acc = 0;

	if (c < H)
		for (int i = threadIdx.y; i < n; i += RMS_ROWS) {
			size_t o = (size_t)i * H + c;
			acc += (double)dout[o] * x[o] * (double)rstd[i];
		}
	part[threadIdx.y][threadIdx.x] = acc;
	__syncthreads();
	if (threadIdx.y == 0 && c < H) {
		double s = 0;
		for (int k = 0; k < RMS_ROWS; k++)
			s += part[k][threadIdx.x];
		dw[c] += (float)s;
	}
}

void tkc_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *w,
		     int n, int H, float eps)
{
	if (n <= 0 || H <= 0)
		return;
	rmsnorm_fwd_kernel<<<n, RMS_THREADS, 0, tkc_stream()>>>(out, rstd, x, w,
								H, eps);
	tkc_check_launch("rmsnorm_fwd");
}

void tkc_rmsnorm_bwd(float *dx, float *dw, const float *dout, const float *x,
		     const float *w, const float *rstd, int n, int H)
{
	if (n <= 0 || H <= 0)
		return;
	/* dw first: it reads dout, which dx may overwrite. */
	rmsnorm_dw_kernel<<<(H + RMS_COLS - 1) / RMS_COLS,
			    dim3(RMS_COLS, RMS_ROWS), 0, tkc_stream()>>>(
	    dw, dout, x, rstd, n, H);
	tkc_check_launch("rmsnorm_bwd dw");
	rmsnorm_dx_kernel<<<n, RMS_THREADS, 0, tkc_stream()>>>(dx, dout, x, w,
							       rstd, H);
	tkc_check_launch("rmsnorm_bwd dx");
}
