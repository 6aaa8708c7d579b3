/* layernorm.cu: LayerNorm as torch.nn.LayerNorm computes it in fp32 (OPT,
 * GPT-NeoX): mean and the biased variance of each row, in two passes,
 * xhat = (x - mean) * rstd, out = xhat * w + b.
 *
 * One block per row; the row sums are in double like the CPU's
 * (kernels/cpu/layernorm.c), reduced in a fixed order (tkc_block_sum), so
 * only their last double bits can differ from the CPU's sequential sums;
 * the rest is the CPU's fp32 expression, operation for operation (no FMA:
 * -fmad=false). dw and db are reduced over rows without atomics, as
 * rmsnorm.cu does dw: a block owns 32 columns and adds 16 partial sums in
 * order. x, w, b, out, dout and dx are dt (F32 or BF16), widened exactly
 * on load; mean, rstd, dw and db are f32; each output is rounded once.
 */
#include "cuda_ops.h"

#define LN_THREADS 256
#define LN_COLS 32 /* dw, db: columns per block */
#define LN_ROWS 16 /* dw, db: thread rows per block */

/* out [n, H], mean, rstd [n], x [n, H], w, b [H]; grid n, block
 * LN_THREADS */
template <typename T>
__global__ static void __launch_bounds__(LN_THREADS)
    layernorm_fwd_kernel(T *out, float *mean, float *rstd, const T *x,
			 const T *w, const T *b, int H, float eps)
{
	__shared__ double red[33];
	const T *xi = x + (size_t)blockIdx.x * H;
	T *oi = out + (size_t)blockIdx.x * H;
	double s = 0, ss = 0, md;
	float m, r;

	for (int j = threadIdx.x; j < H; j += LN_THREADS)
		s += tkc_ld(xi[j]);
	md = tkc_block_sum(s, red) / H;
	for (int j = threadIdx.x; j < H; j += LN_THREADS) {
		double d = (double)tkc_ld(xi[j]) - md;
		ss += d * d;
	}
	ss = tkc_block_sum(ss, red);
	m = (float)md;
	r = (float)(1.0 / sqrt(ss / H + (double)eps));
	if (threadIdx.x == 0) {
		mean[blockIdx.x] = m;
		rstd[blockIdx.x] = r;
	}
	for (int j = threadIdx.x; j < H; j += LN_THREADS) {
		float xh = (tkc_ld(xi[j]) - m) * r;
		tkc_put(&oi[j], xh * tkc_ld(w[j]) + tkc_ld(b[j]));
	}
}

/* dx [n, H] = rstd * ((g - c1) - xhat * c2), g = dout * w, c1 = sum(g) / H,
 * c2 = sum(g * xhat) / H; grid n, block LN_THREADS. dx may alias dout:
 * each thread reads its elements before writing them, after the row's
 * sums. */
template <typename T>
__global__ static void __launch_bounds__(LN_THREADS)
    layernorm_dx_kernel(T *dx, const T *dout, const T *x, const T *w,
			const float *mean, const float *rstd, int H)
{
	__shared__ double red[33];
	const T *xi = x + (size_t)blockIdx.x * H;
	const T *di = dout + (size_t)blockIdx.x * H;
	T *dxi = dx + (size_t)blockIdx.x * H;
	const float m = mean[blockIdx.x], r = rstd[blockIdx.x];
	double sg = 0, sgx = 0;
	float c1, c2;

	for (int j = threadIdx.x; j < H; j += LN_THREADS) {
		float g = tkc_ld(di[j]) * tkc_ld(w[j]);
		float xh = (tkc_ld(xi[j]) - m) * r;
		sg += g;
		sgx += (double)g * xh;
	}
	sg = tkc_block_sum(sg, red);
	sgx = tkc_block_sum(sgx, red);
	c1 = (float)(sg / H);
	c2 = (float)(sgx / H);
	for (int j = threadIdx.x; j < H; j += LN_THREADS) {
		float g = tkc_ld(di[j]) * tkc_ld(w[j]);
		float xh = (tkc_ld(xi[j]) - m) * r;
		tkc_put(&dxi[j], r * ((g - c1) - xh * c2));
	}
}

/* dw [H] += sum over rows of dout * xhat, db [H] += sum over rows of dout;
 * block (LN_COLS, LN_ROWS), grid ceil(H / LN_COLS). */
template <typename T>
__global__ static void layernorm_dwb_kernel(float *dw, float *db, const T *dout,
					    const T *x, const float *mean,
					    const float *rstd, int n, int H)
{
	__shared__ double pw[LN_ROWS][LN_COLS], pb[LN_ROWS][LN_COLS];
	int c = blockIdx.x * LN_COLS + threadIdx.x;
	double aw = 0, ab = 0;

	if (c < H)
		for (int i = threadIdx.y; i < n; i += LN_ROWS) {
			size_t o = (size_t)i * H + c;
			float d = tkc_ld(dout[o]);
			float xh = (tkc_ld(x[o]) - mean[i]) * rstd[i];
			aw += (double)d * xh;
			ab += d;
		}
	pw[threadIdx.y][threadIdx.x] = aw;
	pb[threadIdx.y][threadIdx.x] = ab;
	__syncthreads();
	if (threadIdx.y == 0 && c < H) {
		double sw = 0, sb = 0;
		for (int k = 0; k < LN_ROWS; k++) {
			sw += pw[k][threadIdx.x];
			sb += pb[k][threadIdx.x];
		}
		dw[c] += (float)sw;
		db[c] += (float)sb;
	}
}

template <typename T>
static void layernorm_fwd(void *out, float *mean, float *rstd, const void *x,
			  const void *w, const void *b, int n, int H, float eps)
{
	layernorm_fwd_kernel<T><<<n, LN_THREADS, 0, tkc_stream()>>>(
	    (T *)out, mean, rstd, (const T *)x, (const T *)w, (const T *)b, H,
	    eps);
	tkc_check_launch("layernorm_fwd");
}

template <typename T>
static void layernorm_bwd(void *dx, float *dw, float *db, const void *dout,
			  const void *x, const void *w, const float *mean,
			  const float *rstd, int n, int H)
{
	/* dw and db first: they read dout, which dx may overwrite. */
	layernorm_dwb_kernel<T><<<(H + LN_COLS - 1) / LN_COLS,
				  dim3(LN_COLS, LN_ROWS), 0, tkc_stream()>>>(
	    dw, db, (const T *)dout, (const T *)x, mean, rstd, n, H);
	tkc_check_launch("layernorm_bwd dw db");
	layernorm_dx_kernel<T><<<n, LN_THREADS, 0, tkc_stream()>>>(
	    (T *)dx, (const T *)dout, (const T *)x, (const T *)w, mean, rstd,
	    H);
	tkc_check_launch("layernorm_bwd dx");
}

void tkc_layernorm_fwd(int dt, void *out, float *mean, float *rstd,
		       const void *x, const void *w, const void *b, int n,
		       int H, float eps)
{
	if (n <= 0 || H <= 0)
		return;
	if (dt == TK_F32)
		layernorm_fwd<float>(out, mean, rstd, x, w, b, n, H, eps);
	else if (dt == TK_BF16)
		layernorm_fwd<tkc_bf16>(out, mean, rstd, x, w, b, n, H, eps);
	else
		tkc_bad_dtype("layernorm_fwd", dt);
}

void tkc_layernorm_bwd(int dt, void *dx, float *dw, float *db, const void *dout,
		       const void *x, const void *w, const float *mean,
		       const float *rstd, int n, int H)
{
	if (n <= 0 || H <= 0)
		return;
	if (dt == TK_F32)
		layernorm_bwd<float>(dx, dw, db, dout, x, w, mean, rstd, n, H);
	else if (dt == TK_BF16)
		layernorm_bwd<tkc_bf16>(dx, dw, db, dout, x, w, mean, rstd, n,
					H);
	else
		tkc_bad_dtype("layernorm_bwd", dt);
}
