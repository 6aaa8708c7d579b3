/* fused_norm.cu: RMSNorm fused with the residual add around it.
 *
 * add_rmsnorm_fwd: x += r and out = rmsnorm(x) in one kernel, one block per
 * row: each thread adds its elements, stores them and sums the squares of
 * the stored (rounded) values, then normalizes them. Before: add (read x
 * and r, write x) and rmsnorm_fwd (read x twice, write out), two kernels;
 * after: one, x and r read once from memory (the second read of x is the
 * thread's own store, in cache).
 *
 * rmsnorm_bwd_add: dres += rmsnorm_bwd(dout) without the temporary: the
 * row kernel adds each input gradient, rounded to dt as the temporary would
 * hold it, into dres. dw is rmsnorm.cu's reduction (tkc_rmsnorm_dw). Before:
 * three kernels (dw, dx into a temporary, add); after: two, and no
 * temporary written and read back.
 *
 * The element-wise arithmetic is the CPU's (-fmad=false): only the row
 * sums (in double, fixed order) and dw's sum over rows differ from the
 * CPU's in summation order.
 */
#include "cuda_ops.h"

#define FN_THREADS 256

/* x [n, H] += r [n, H]; out [n, H], rstd [n] = rmsnorm_fwd(x, w [H]);
 * grid n, block FN_THREADS. */
template <typename T>
__global__ static void __launch_bounds__(FN_THREADS)
    add_rmsnorm_kernel(T *x, const T *r, T *out, float *rstd, const T *w, int H,
		       float eps)
{
	__shared__ double red[33];
	T *xi = x + (size_t)blockIdx.x * H;
	const T *ri = r + (size_t)blockIdx.x * H;
	T *oi = out + (size_t)blockIdx.x * H;
	double ss = 0;
	float rs;

	for (int j = threadIdx.x; j < H; j += FN_THREADS) {
		float v = tkc_stored<T>(tkc_ld(xi[j]) + tkc_ld(ri[j]));

		tkc_put(&xi[j], v);
		ss += (double)v * v;
	}
	ss = tkc_block_sum(ss, red);
	rs = (float)(1.0 / sqrt(ss / H + (double)eps));
	if (threadIdx.x == 0)
		rstd[blockIdx.x] = rs;
	/* the thread's own elements of x, stored above */
	for (int j = threadIdx.x; j < H; j += FN_THREADS)
		tkc_put(&oi[j], tkc_ld(w[j]) * (tkc_ld(xi[j]) * rs));
}

/* dres [n, H] += rstd * (dout * w - x * c) rounded to T, c = dot(dout * w,
 * x) rstd^2 / H; grid n, block FN_THREADS. */
template <typename T>
__global__ static void __launch_bounds__(FN_THREADS)
    rmsnorm_dx_add_kernel(T *dres, const T *dout, const T *x, const T *w,
			  const float *rstd, int H)
{
	__shared__ double red[33];
	const T *xi = x + (size_t)blockIdx.x * H;
	const T *di = dout + (size_t)blockIdx.x * H;
	T *dri = dres + (size_t)blockIdx.x * H;
	double rs = rstd[blockIdx.x], dot = 0;
	float c;

	for (int j = threadIdx.x; j < H; j += FN_THREADS)
		dot += (double)tkc_ld(di[j]) * tkc_ld(w[j]) * tkc_ld(xi[j]);
	dot = tkc_block_sum(dot, red);
	c = (float)(dot * rs * rs / H);
	for (int j = threadIdx.x; j < H; j += FN_THREADS) {
		float dj = tkc_ld(di[j]), wj = tkc_ld(w[j]);
		float xj = tkc_ld(xi[j]);
		float g = tkc_stored<T>((float)rs * (dj * wj - xj * c));

		tkc_put(&dri[j], tkc_ld(dri[j]) + g);
	}
}

template <typename T>
static void add_rmsnorm_fwd(void *x, const void *r, void *out, float *rstd,
			    const void *w, int n, int H, float eps)
{
	add_rmsnorm_kernel<T><<<n, FN_THREADS, 0, tkc_stream()>>>(
	    (T *)x, (const T *)r, (T *)out, rstd, (const T *)w, H, eps);
	tkc_check_launch("add_rmsnorm_fwd");
}

template <typename T>
static void rmsnorm_dx_add(void *dres, const void *dout, const void *x,
			   const void *w, const float *rstd, int n, int H)
{
	rmsnorm_dx_add_kernel<T><<<n, FN_THREADS, 0, tkc_stream()>>>(
	    (T *)dres, (const T *)dout, (const T *)x, (const T *)w, rstd, H);
	tkc_check_launch("rmsnorm_bwd_add dx");
}

void tkc_add_rmsnorm_fwd(int dt, void *x, const void *r, void *out, float *rstd,
			 const void *w, int n, int H, float eps)
{
	if (n <= 0 || H <= 0)
		return;
	if (dt == TK_F32)
		add_rmsnorm_fwd<float>(x, r, out, rstd, w, n, H, eps);
	else if (dt == TK_BF16)
		add_rmsnorm_fwd<tkc_bf16>(x, r, out, rstd, w, n, H, eps);
	else
		tkc_bad_dtype("add_rmsnorm_fwd", dt);
}

void tkc_rmsnorm_bwd_add(int dt, void *dres, float *dw, const void *dout,
			 const void *x, const void *w, const float *rstd, int n,
			 int H)
{
	if (n <= 0 || H <= 0)
		return;
	if (dt != TK_F32 && dt != TK_BF16) {
		tkc_bad_dtype("rmsnorm_bwd_add", dt);
		return;
	}
	tkc_rmsnorm_dw(dt, dw, dout, x, rstd, n, H);
	if (dt == TK_F32)
		rmsnorm_dx_add<float>(dres, dout, x, w, rstd, n, H);
	else
		rmsnorm_dx_add<tkc_bf16>(dres, dout, x, w, rstd, n, H);
}
