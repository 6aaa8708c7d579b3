/* rmsnorm.cu: RMSNorm as Hugging Face LlamaRMSNorm computes it in fp32:
 * rstd = 1 / sqrt(mean(x^2) + eps), out = w * (x * rstd).
 *
 * One block per row; the row sums are in double like the CPU's, reduced in
 * a fixed order (tkc_block_sum), so only their last double bits can differ
 * from the CPU's sequential sum. dw is reduced over rows without atomics,
 * as bias_bwd: a block owns 32 columns and adds 16 partial sums in order.
 * x, w, out, dout and dx are dt (F32 or BF16), widened exactly on load;
 * rstd and dw are f32; each output is rounded once when stored.
 */
#include "cuda_ops.h"

#define RMS_THREADS 256
#define RMS_COLS 32 /* dw: columns per block */
#define RMS_ROWS 16 /* dw: thread rows per block */

/* out [n, H], rstd [n], x [n, H], w [H]; grid n, block RMS_THREADS */
template <typename T>
__global__ static void __launch_bounds__(RMS_THREADS)
    rmsnorm_fwd_kernel(T *out, float *rstd, const T *x, const T *w, int H,
		       float eps)
{
	__shared__ double red[33];
	const T *xi = x + (size_t)blockIdx.x * H;
	T *oi = out + (size_t)blockIdx.x * H;
	double ss = 0;
	float r;

	for (int j = threadIdx.x; j < H; j += RMS_THREADS) {
		float xj = tkc_ld(xi[j]);
		ss += (double)xj * xj;
	}
	ss = tkc_block_sum(ss, red);
	r = (float)(1.0 / sqrt(ss / H + (double)eps));
	if (threadIdx.x == 0)
		rstd[blockIdx.x] = r;
	for (int j = threadIdx.x; j < H; j += RMS_THREADS)
		tkc_put(&oi[j], tkc_ld(w[j]) * (tkc_ld(xi[j]) * r));
}

/* dx [n, H] = rstd * (dout * w - x * c), c = dot(dout * w, x) rstd^2 / H;
 * grid n, block RMS_THREADS. dx may alias dout (read before written by the
 * same thread, after the whole row's dot). */
template <typename T>
__global__ static void __launch_bounds__(RMS_THREADS)
    rmsnorm_dx_kernel(T *dx, const T *dout, const T *x, const T *w,
		      const float *rstd, int H)
{
	__shared__ double red[33];
	const T *xi = x + (size_t)blockIdx.x * H;
	const T *di = dout + (size_t)blockIdx.x * H;
	T *dxi = dx + (size_t)blockIdx.x * H;
	double r = rstd[blockIdx.x], dot = 0;
	float c;

	for (int j = threadIdx.x; j < H; j += RMS_THREADS)
		dot += (double)tkc_ld(di[j]) * tkc_ld(w[j]) * tkc_ld(xi[j]);
	dot = tkc_block_sum(dot, red);
	c = (float)(dot * r * r / H);
	for (int j = threadIdx.x; j < H; j += RMS_THREADS) {
		float dj = tkc_ld(di[j]), wj = tkc_ld(w[j]);
		float xj = tkc_ld(xi[j]);
		tkc_put(&dxi[j], (float)r * (dj * wj - xj * c));
	}
}

/* dw [H] += sum over rows of dout * x * rstd; block (RMS_COLS, RMS_ROWS),
 * grid ceil(H / RMS_COLS). */
template <typename T>
__global__ static void rmsnorm_dw_kernel(float *dw, const T *dout, const T *x,
					 const float *rstd, int n, int H)
{
	__shared__ double part[RMS_ROWS][RMS_COLS];
	int c = blockIdx.x * RMS_COLS + threadIdx.x;
	double acc = 0;

	if (c < H)
		for (int i = threadIdx.y; i < n; i += RMS_ROWS) {
			size_t o = (size_t)i * H + c;
			acc += (double)tkc_ld(dout[o]) * tkc_ld(x[o]) *
			       (double)rstd[i];
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

template <typename T>
static void rmsnorm_fwd(void *out, float *rstd, const void *x, const void *w,
			int n, int H, float eps)
{
	rmsnorm_fwd_kernel<T><<<n, RMS_THREADS, 0, tkc_stream()>>>(
	    (T *)out, rstd, (const T *)x, (const T *)w, H, eps);
	tkc_check_launch("rmsnorm_fwd");
}

template <typename T>
static void rmsnorm_bwd(void *dx, float *dw, const void *dout, const void *x,
			const void *w, const float *rstd, int n, int H)
{
	/* dw first: it reads dout, which dx may overwrite. */
	rmsnorm_dw_kernel<T>
	    <<<(H + RMS_COLS - 1) / RMS_COLS, dim3(RMS_COLS, RMS_ROWS), 0,
	       tkc_stream()>>>(dw, (const T *)dout, (const T *)x, rstd, n, H);
	tkc_check_launch("rmsnorm_bwd dw");
	rmsnorm_dx_kernel<T><<<n, RMS_THREADS, 0, tkc_stream()>>>(
	    (T *)dx, (const T *)dout, (const T *)x, (const T *)w, rstd, H);
	tkc_check_launch("rmsnorm_bwd dx");
}

void tkc_rmsnorm_dw(int dt, float *dw, const void *dout, const void *x,
		    const float *rstd, int n, int H)
{
	if (dt == TK_F32)
		rmsnorm_dw_kernel<float>
		    <<<(H + RMS_COLS - 1) / RMS_COLS, dim3(RMS_COLS, RMS_ROWS),
		       0, tkc_stream()>>>(dw, (const float *)dout,
					  (const float *)x, rstd, n, H);
	else if (dt == TK_BF16)
		rmsnorm_dw_kernel<tkc_bf16>
		    <<<(H + RMS_COLS - 1) / RMS_COLS, dim3(RMS_COLS, RMS_ROWS),
		       0, tkc_stream()>>>(dw, (const tkc_bf16 *)dout,
					  (const tkc_bf16 *)x, rstd, n, H);
	else {
		tkc_bad_dtype("rmsnorm dw", dt);
		return;
	}
	tkc_check_launch("rmsnorm dw");
}

void tkc_rmsnorm_fwd(int dt, void *out, float *rstd, const void *x,
		     const void *w, int n, int H, float eps)
{
	if (n <= 0 || H <= 0)
		return;
	if (dt == TK_F32)
		rmsnorm_fwd<float>(out, rstd, x, w, n, H, eps);
	else if (dt == TK_BF16)
		rmsnorm_fwd<tkc_bf16>(out, rstd, x, w, n, H, eps);
	else
		tkc_bad_dtype("rmsnorm_fwd", dt);
}

void tkc_rmsnorm_bwd(int dt, void *dx, float *dw, const void *dout,
		     const void *x, const void *w, const float *rstd, int n,
		     int H)
{
	if (n <= 0 || H <= 0)
		return;
	if (dt == TK_F32)
		rmsnorm_bwd<float>(dx, dw, dout, x, w, rstd, n, H);
	else if (dt == TK_BF16)
		rmsnorm_bwd<tkc_bf16>(dx, dw, dout, x, w, rstd, n, H);
	else
		tkc_bad_dtype("rmsnorm_bwd", dt);
}
