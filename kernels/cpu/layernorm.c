/* layernorm.c: LayerNorm as torch.nn.LayerNorm computes it in fp32 (OPT,
 * GPT-NeoX): mean and the biased variance of each row, in two passes,
 * xhat = (x - mean) * rstd, out = xhat * w + b.
 *
 * The row sums are in double, in index order; kernels/cuda/layernorm.cu
 * sums the same terms with a fixed block tree, so the two differ only in
 * the last bits of the double (as for RMSNorm). Everything after the sums
 * is the same fp32 expression on both backends. x, w, b, out, dout and dx
 * are in dt; mean, rstd, dw and db are fp32.
 */
#include <math.h>

#include "cpu_ops.h"
#include "tk_convert.h"

/* Columns per task for the dw / db reduction. */
#define LN_COLS 64

TK_CPU_INLINE void ln_fwd_row(int dt, void *out, float *mean, float *rstd,
			      const void *x, const void *w, const void *b,
			      int i, int H, float eps)
{
	const size_t o = (size_t)i * H;
	double s = 0, ss = 0, md;
	float m, r;

	for (int j = 0; j < H; j++)
		s += tk_load_f32(x, dt, o + j);
	md = s / H;
	/* The second pass about the double mean: no cancellation of
	 * E[x^2] - E[x]^2 when the mean is large against the spread. */
	for (int j = 0; j < H; j++) {
		double d = (double)tk_load_f32(x, dt, o + j) - md;
		ss += d * d;
	}
	m = (float)md;
	r = (float)(1.0 / sqrt(ss / H + (double)eps));
	mean[i] = m;
	rstd[i] = r;
	for (int j = 0; j < H; j++) {
		float xh = (tk_load_f32(x, dt, o + j) - m) * r;
		tk_store_f32_rne(out, dt, o + j,
				 xh * tk_load_f32(w, dt, j) +
				     tk_load_f32(b, dt, j));
	}
}

/* out [n, H], mean [n], rstd [n], x [n, H], w [H], b [H] */
void tk_cpu_layernorm_fwd(int dt, void *out, float *mean, float *rstd,
			  const void *x, const void *w, const void *b, int n,
			  int H, float eps)
{
	if (dt != TK_F32 && dt != TK_BF16)
		return;
	if (n <= 0 || H <= 0)
		return;
#pragma omp parallel for if ((long long)n * H >= TK_CPU_PAR_MIN)
	for (int i = 0; i < n; i++) {
		if (dt == TK_F32)
			ln_fwd_row(TK_F32, out, mean, rstd, x, w, b, i, H, eps);
		else
			ln_fwd_row(TK_BF16, out, mean, rstd, x, w, b, i, H,
				   eps);
	}
}

/* Row i of dx. The sums read the whole row before any of it is written,
 * and element j of dout is read before dx[j] is written: dx may be dout. */
TK_CPU_INLINE void ln_bwd_row(int dt, void *dx, const void *dout, const void *x,
			      const void *w, const float *mean,
			      const float *rstd, int i, int H)
{
	const size_t o = (size_t)i * H;
	const float m = mean[i], r = rstd[i];
	double sg = 0, sgx = 0;
	float c1, c2;

	for (int j = 0; j < H; j++) {
		float g = tk_load_f32(dout, dt, o + j) * tk_load_f32(w, dt, j);
		float xh = (tk_load_f32(x, dt, o + j) - m) * r;
		sg += g;
		sgx += (double)g * xh;
	}
	c1 = (float)(sg / H);
	c2 = (float)(sgx / H);
	for (int j = 0; j < H; j++) {
		float g = tk_load_f32(dout, dt, o + j) * tk_load_f32(w, dt, j);
		float xh = (tk_load_f32(x, dt, o + j) - m) * r;
		tk_store_f32_rne(dx, dt, o + j, r * ((g - c1) - xh * c2));
	}
}

TK_CPU_INLINE void ln_dwb_cols(int dt, float *dw, float *db, const void *dout,
			       const void *x, const float *mean,
			       const float *rstd, int n, int H, int c0, int nc)
{
	double aw[LN_COLS] = {0}, ab[LN_COLS] = {0};

	for (int i = 0; i < n; i++) {
		const size_t o = (size_t)i * H + c0;
		const float m = mean[i], r = rstd[i];

		for (int c = 0; c < nc; c++) {
			float d = tk_load_f32(dout, dt, o + c);
			float xh = (tk_load_f32(x, dt, o + c) - m) * r;
			aw[c] += (double)d * xh;
			ab[c] += d;
		}
	}
	for (int c = 0; c < nc; c++) {
		dw[c0 + c] += (float)aw[c];
		db[c0 + c] += (float)ab[c];
	}
}

/* With xhat = (x - mean) * rstd and g = dout * w:
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
 *   dw += sum_rows dout * xhat,  db += sum_rows dout.
 * dx [n, H] overwritten, dw, db [H] accumulate; dout, x [n, H], w [H],
 * mean, rstd [n]. dw and db come first: they read dout, which dx may be. */
void tk_cpu_layernorm_bwd(int dt, void *dx, float *dw, float *db,
			  const void *dout, const void *x, const void *w,
			  const float *mean, const float *rstd, int n, int H)
{
	int par = (long long)n * H >= TK_CPU_PAR_MIN;
	int nblk = (H + LN_COLS - 1) / LN_COLS;

	if (dt != TK_F32 && dt != TK_BF16)
		return;
	if (n <= 0 || H <= 0)
		return;
		/* Each task owns a block of columns and sums the rows in order.
		 */
#pragma omp parallel for if (par)
	for (int blk = 0; blk < nblk; blk++) {
		int c0 = blk * LN_COLS;
		int nc = H - c0 < LN_COLS ? H - c0 : LN_COLS;

		if (dt == TK_F32)
			ln_dwb_cols(TK_F32, dw, db, dout, x, mean, rstd, n, H,
				    c0, nc);
		else
			ln_dwb_cols(TK_BF16, dw, db, dout, x, mean, rstd, n, H,
				    c0, nc);
	}
#pragma omp parallel for if (par)
	for (int i = 0; i < n; i++) {
		if (dt == TK_F32)
			ln_bwd_row(TK_F32, dx, dout, x, w, mean, rstd, i, H);
		else
			ln_bwd_row(TK_BF16, dx, dout, x, w, mean, rstd, i, H);
	}
}
