/* qknorm_rope.cu: Qwen3's per-head RMSNorm of q and k fused with RoPE.
 *
 * x [n, heads * hd]: one warp per (token, head) row of hd values. Forward:
 * the warp sums the row's squares (double, a fixed butterfly), each lane
 * normalizes a pair (i, i + rd/2), rounds both values to dt as rmsnorm_fwd
 * stores them, and rotates the pair as rope.cu does. Before: rmsnorm_fwd
 * then rope_fwd, two kernels and the normalized tensor written and read
 * back; after: one kernel, x read once and out written once.
 *
 * Backward: the warp recomputes rope_bwd(dout) element by element (rounded
 * as rope_bwd stores it in place) wherever rmsnorm_bwd reads its dout, so
 * dout is never rotated in memory. dw [hd] is summed over the rows without
 * atomics as rmsnorm.cu does it: a block owns 32 columns, its 32 thread
 * rows take every 32nd row, and the partial sums are added in a fixed
 * order. Before: rope_bwd (read and write dout), then rmsnorm_bwd's dw and
 * dx kernels; after: the dx kernel and the dw kernel, dout only read.
 *
 * Without w both directions are RoPE alone, out of place or in place (each
 * lane reads its pair before writing it). The element-wise arithmetic is
 * the CPU's (-fmad=false); only the row sums and dw's sum over rows differ
 * from the CPU's in summation order (in double).
 *
 * Partial rotary (GPT-NeoX): the pairs are (i, i + rd/2) over each head's
 * first rd values (tables [max_pos, rd / 2]); values rd..hd-1 pass through
 * (normalized with w). rd == hd is the full rotation; rd == 0 reads no
 * table nor pos.
 */
#include "cuda_ops.h"

#define QK_WARPS 4 /* rows per block of the row kernels */
#define QK_COLS 32 /* dw: columns per block */
#define QK_ROWS 32 /* dw: thread rows per block */
#define QK_DW_THREADS (QK_COLS * QK_ROWS)

/* Row `row`'s position's row of a table [max_pos, nhalf]; neither read
 * when nhalf is 0. */
__device__ static inline const float *
qk_tab(const float *tab, const int32_t *pos, size_t row, int heads, int nhalf)
{
	return nhalf ? tab + (size_t)pos[row / heads] * nhalf : tab;
}

/* The sum over the warp, the same bits in every lane (each butterfly step
 * adds the same two values in either order). */
__device__ static inline double qk_warp_sum(double v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

/* Element j of rope_bwd of the row d [hd], rounded to T; c and s are the
 * row's position's tables [nhalf] (nhalf = rd / 2). */
template <typename T>
__device__ static inline float qk_rot_bwd_at(const T *d, const float *c,
					     const float *s, int j, int nhalf)
{
	int i = j < nhalf ? j : j - nhalf;
	float a, b, si;

	if (j >= 2 * nhalf) /* past the rotated dims: passed through */
		return tkc_ld(d[j]);
	a = tkc_ld(d[i]);
	b = tkc_ld(d[nhalf + i]);
	si = -1.0f * s[i];
	return tkc_stored<T>(j < nhalf ? a * c[i] - b * si : b * c[i] + a * si);
}

/* out [rows, hd] = rope (dir +1 forward, -1 backward) of x over each
 * row's first 2 * nhalf values, the rest passed through, normalized first
 * when w [hd] is set (rstd [rows] saved); out may be x without w.
 * rows = n * heads; grid ceil(rows / QK_WARPS), block QK_WARPS warps. */
template <typename T>
__global__ static void __launch_bounds__(QK_WARPS * 32)
    qk_fwd_kernel(T *out, float *rstd, const T *x, const T *w, const float *cos,
		  const float *sin, const int32_t *pos, size_t rows, int heads,
		  int hd, int nhalf, float eps, float dir)
{
	size_t row = (size_t)blockIdx.x * QK_WARPS + (threadIdx.x >> 5);
	int lane = threadIdx.x & 31;
	const T *xi;
	T *oi;
	const float *c, *s;
	float r = 0.0f;

	if (row >= rows) /* the whole warp: no block-wide sync follows */
		return;
	xi = x + row * hd;
	oi = out + row * hd;
	c = qk_tab(cos, pos, row, heads, nhalf);
	s = qk_tab(sin, pos, row, heads, nhalf);
	if (w) {
		double ss = 0;

		for (int j = lane; j < hd; j += 32) {
			float xj = tkc_ld(xi[j]);
			ss += (double)xj * xj;
		}
		ss = qk_warp_sum(ss);
		r = (float)(1.0 / sqrt(ss / hd + (double)eps));
		if (lane == 0)
			rstd[row] = r;
	}
	for (int i = lane; i < nhalf; i += 32) {
		float a = tkc_ld(xi[i]), b = tkc_ld(xi[nhalf + i]);
		float si = dir * s[i];

		if (w) {
			a = tkc_stored<T>(tkc_ld(w[i]) * (a * r));
			b = tkc_stored<T>(tkc_ld(w[nhalf + i]) * (b * r));
		}
		tkc_put(&oi[i], a * c[i] - b * si);
		tkc_put(&oi[nhalf + i], b * c[i] + a * si);
	}
	for (int j = 2 * nhalf + lane; j < hd; j += 32) {
		float v = tkc_ld(xi[j]);

		if (w)
			v = tkc_ld(w[j]) * (v * r);
		tkc_put(&oi[j], v);
	}
}

/* dx [rows, hd] = rmsnorm_bwd's dx with dout = rope_bwd(dout), x the
 * norm's input; dx is not dout. Grid and block as qk_fwd_kernel. */
template <typename T>
__global__ static void __launch_bounds__(QK_WARPS * 32)
    qk_bwd_kernel(T *dx, const T *dout, const T *x, const T *w,
		  const float *rstd, const float *cos, const float *sin,
		  const int32_t *pos, size_t rows, int heads, int hd, int nhalf)
{
	size_t row = (size_t)blockIdx.x * QK_WARPS + (threadIdx.x >> 5);
	int lane = threadIdx.x & 31;
	const T *di, *xi;
	T *dxi;
	const float *c, *s;
	double rs, dot = 0;
	float k;

	if (row >= rows)
		return;
	di = dout + row * hd;
	xi = x + row * hd;
	dxi = dx + row * hd;
	c = qk_tab(cos, pos, row, heads, nhalf);
	s = qk_tab(sin, pos, row, heads, nhalf);
	rs = rstd[row];
	for (int j = lane; j < hd; j += 32)
		dot += (double)qk_rot_bwd_at(di, c, s, j, nhalf) *
		       tkc_ld(w[j]) * tkc_ld(xi[j]);
	dot = qk_warp_sum(dot);
	k = (float)(dot * rs * rs / hd);
	for (int j = lane; j < hd; j += 32) {
		float g = qk_rot_bwd_at(di, c, s, j, nhalf);

		tkc_put(&dxi[j],
			(float)rs * (g * tkc_ld(w[j]) - tkc_ld(xi[j]) * k));
	}
}

/* dw [hd] += sum over rows of rope_bwd(dout) * x * rstd; block (QK_COLS,
 * QK_ROWS), grid ceil(hd / QK_COLS). */
template <typename T>
__global__ static void __launch_bounds__(QK_DW_THREADS)
    qk_dw_kernel(float *dw, const T *dout, const T *x, const float *rstd,
		 const float *cos, const float *sin, const int32_t *pos,
		 size_t rows, int heads, int hd, int nhalf)
{
	__shared__ double part[QK_ROWS][QK_COLS];
	int j = blockIdx.x * QK_COLS + threadIdx.x;
	double acc = 0;

	if (j < hd)
		for (size_t row = threadIdx.y; row < rows; row += QK_ROWS) {
			size_t o = row * hd;
			float g = qk_rot_bwd_at(
			    dout + o, qk_tab(cos, pos, row, heads, nhalf),
			    qk_tab(sin, pos, row, heads, nhalf), j, nhalf);

			acc += (double)g * tkc_ld(x[o + j]) * (double)rstd[row];
		}
	part[threadIdx.y][threadIdx.x] = acc;
	__syncthreads();
	if (threadIdx.y == 0 && j < hd) {
		double sum = 0;
		for (int r = 0; r < QK_ROWS; r++)
			sum += part[r][threadIdx.x];
		dw[j] += (float)sum;
	}
}

static unsigned qk_grid(size_t rows)
{
	return (unsigned)((rows + QK_WARPS - 1) / QK_WARPS);
}

template <typename T>
static void qk_fwd(void *out, float *rstd, const void *x, const void *w,
		   const float *cos, const float *sin, const int32_t *pos,
		   int n, int heads, int hd, int rd, float eps, float dir,
		   const char *what)
{
	size_t rows = (size_t)n * heads;

	if (!w && rd / 2 == 0 && out == x) /* nothing to rotate or copy */
		return;
	qk_fwd_kernel<T><<<qk_grid(rows), QK_WARPS * 32, 0, tkc_stream()>>>(
	    (T *)out, rstd, (const T *)x, (const T *)w, cos, sin, pos, rows,
	    heads, hd, rd / 2, eps, dir);
	tkc_check_launch(what);
}

template <typename T>
static void qk_bwd(void *dx, float *dw, const void *dout, const void *x,
		   const void *w, const float *rstd, const float *cos,
		   const float *sin, const int32_t *pos, int n, int heads,
		   int hd, int rd)
{
	size_t rows = (size_t)n * heads;

	qk_dw_kernel<T><<<(hd + QK_COLS - 1) / QK_COLS, dim3(QK_COLS, QK_ROWS),
			  0, tkc_stream()>>>(dw, (const T *)dout, (const T *)x,
					     rstd, cos, sin, pos, rows, heads,
					     hd, rd / 2);
	tkc_check_launch("qknorm_rope_bwd dw");
	qk_bwd_kernel<T><<<qk_grid(rows), QK_WARPS * 32, 0, tkc_stream()>>>(
	    (T *)dx, (const T *)dout, (const T *)x, (const T *)w, rstd, cos,
	    sin, pos, rows, heads, hd, rd / 2);
	tkc_check_launch("qknorm_rope_bwd dx");
}

void tkc_qknorm_rope_fwd(int dt, void *out, float *rstd, const void *x,
			 const void *w, const float *cos, const float *sin,
			 const int32_t *pos, int n, int heads, int hd, int rd,
			 float eps)
{
	if (n <= 0 || heads <= 0 || hd <= 0)
		return;
	if (dt == TK_F32)
		qk_fwd<float>(out, rstd, x, w, cos, sin, pos, n, heads, hd, rd,
			      eps, 1.0f, "qknorm_rope_fwd");
	else if (dt == TK_BF16)
		qk_fwd<tkc_bf16>(out, rstd, x, w, cos, sin, pos, n, heads, hd,
				 rd, eps, 1.0f, "qknorm_rope_fwd");
	else
		tkc_bad_dtype("qknorm_rope_fwd", dt);
}

void tkc_qknorm_rope_bwd(int dt, void *dx, float *dw, const void *dout,
			 const void *x, const void *w, const float *rstd,
			 const float *cos, const float *sin, const int32_t *pos,
			 int n, int heads, int hd, int rd)
{
	if (n <= 0 || heads <= 0 || hd <= 0)
		return;
	if (dt != TK_F32 && dt != TK_BF16) {
		tkc_bad_dtype("qknorm_rope_bwd", dt);
		return;
	}
	if (!w) { /* RoPE's inverse rotation alone */
		if (dt == TK_F32)
			qk_fwd<float>(dx, NULL, dout, NULL, cos, sin, pos, n,
				      heads, hd, rd, 0.0f, -1.0f,
				      "qknorm_rope_bwd");
		else
			qk_fwd<tkc_bf16>(dx, NULL, dout, NULL, cos, sin, pos, n,
					 heads, hd, rd, 0.0f, -1.0f,
					 "qknorm_rope_bwd");
		return;
	}
	if (dt == TK_F32)
		qk_bwd<float>(dx, dw, dout, x, w, rstd, cos, sin, pos, n, heads,
			      hd, rd);
	else
		qk_bwd<tkc_bf16>(dx, dw, dout, x, w, rstd, cos, sin, pos, n,
				 heads, hd, rd);
}
