/* rmsnorm.c: RMSNorm as Hugging Face LlamaRMSNorm computes it in fp32:
 * rstd = 1 / sqrt(mean(x^2) + eps), out = w * (x * rstd).
 * The mean of squares is accumulated in double. x, w, out, dout and dx are
 * in dt; rstd and dw are fp32.
 *
 * The fused pair with the residual add: add_rmsnorm_fwd adds a row and
 * normalizes it while it is in cache, rmsnorm_bwd_add adds each row's input
 * gradient into the residual gradient instead of storing it for add to
 * read back. Both run the unfused ops' row code, so the bits are theirs.
 */
#include <math.h>

#include "cpu_ops.h"
#include "tk_convert.h"

/* Columns per task for the dw reduction. */
#define RMS_COLS 64

TK_CPU_INLINE void rms_fwd_row(int dt, void *out, float *rstd, const void *x,
			       const void *w, int i, int H, float eps)
{
	const size_t o = (size_t)i * H;
	double ss = 0;
	float r;

	for (int j = 0; j < H; j++) {
		float xj = tk_load_f32(x, dt, o + j);
		ss += (double)xj * xj;
	}
	r = (float)(1.0 / sqrt(ss / H + (double)eps));
	rstd[i] = r;
	for (int j = 0; j < H; j++)
		tk_store_f32_rne(out, dt, o + j,
				 tk_load_f32(w, dt, j) *
				     (tk_load_f32(x, dt, o + j) * r));
}

/* out [n, H], rstd [n], x [n, H], w [H] */
void tk_cpu_rmsnorm_fwd(int dt, void *out, float *rstd, const void *x,
			const void *w, int n, int H, float eps)
{
	if (dt != TK_F32 && dt != TK_BF16)
		return;
#pragma omp parallel for if ((long long)n * H >= TK_CPU_PAR_MIN)
	for (int i = 0; i < n; i++) {
		if (dt == TK_F32)
			rms_fwd_row(TK_F32, out, rstd, x, w, i, H, eps);
		else
			rms_fwd_row(TK_BF16, out, rstd, x, w, i, H, eps);
	}
}

/* Row i of x += r (rounded as add stores it), then of rmsnorm_fwd on the
 * stored x. */
TK_CPU_INLINE void add_rms_row(int dt, void *x, const void *r, void *out,
			       float *rstd, const void *w, int i, int H,
			       float eps)
{
	const size_t o = (size_t)i * H;

	for (int j = 0; j < H; j++)
		tk_store_f32_rne(x, dt, o + j,
				 tk_load_f32(x, dt, o + j) +
				     tk_load_f32(r, dt, o + j));
	rms_fwd_row(dt, out, rstd, x, w, i, H, eps);
}

/* x [n, H] += r [n, H], then out [n, H], rstd [n] = rmsnorm_fwd(x, w [H]) */
void tk_cpu_add_rmsnorm_fwd(int dt, void *x, const void *r, void *out,
			    float *rstd, const void *w, int n, int H, float eps)
{
	if (dt != TK_F32 && dt != TK_BF16)
		return;
#pragma omp parallel for if ((long long)n * H >= TK_CPU_PAR_MIN)
	for (int i = 0; i < n; i++) {
		if (dt == TK_F32)
			add_rms_row(TK_F32, x, r, out, rstd, w, i, H, eps);
		else
			add_rms_row(TK_BF16, x, r, out, rstd, w, i, H, eps);
	}
}

/* Row i of dx; add (a constant): dx += the row rounded to dt, as add would
 * read it back from a temporary. */
TK_CPU_INLINE void rms_bwd_row(int dt, void *dx, int add, const void *dout,
			       const void *x, const void *w, const float *rstd,
			       int i, int H)
{
	const size_t o = (size_t)i * H;
	double r = rstd[i], dot = 0;
	float c;

	for (int j = 0; j < H; j++)
		dot += (double)tk_load_f32(dout, dt, o + j) *
		       tk_load_f32(w, dt, j) * tk_load_f32(x, dt, o + j);
	/* mean(g * xhat) * rstd = dot * rstd^2 / H */
	c = (float)(dot * r * r / H);
	for (int j = 0; j < H; j++) {
		float g = (float)r * (tk_load_f32(dout, dt, o + j) *
					  tk_load_f32(w, dt, j) -
				      tk_load_f32(x, dt, o + j) * c);

		if (add)
			g = tk_load_f32(dx, dt, o + j) + tk_round_f32(g, dt);
		tk_store_f32_rne(dx, dt, o + j, g);
	}
}

TK_CPU_INLINE void rms_dw_cols(int dt, float *dw, const void *dout,
			       const void *x, const float *rstd, int n, int H,
			       int c0, int nc)
{
	double acc[RMS_COLS] = {0};

	for (int i = 0; i < n; i++) {
		const size_t o = (size_t)i * H + c0;
		double r = rstd[i];
		for (int c = 0; c < nc; c++)
			acc[c] += (double)tk_load_f32(dout, dt, o + c) *
				  tk_load_f32(x, dt, o + c) * r;
	}
	for (int c = 0; c < nc; c++)
		dw[c0 + c] += (float)acc[c];
}

/* dx [n, H] (add: dx +=), dw [H] accumulates; dout, x [n, H], rstd [n]. */
static void rms_bwd(int dt, void *dx, int add, float *dw, const void *dout,
		    const void *x, const void *w, const float *rstd, int n,
		    int H)
{
	int par = (long long)n * H >= TK_CPU_PAR_MIN;
	int nblk = (H + RMS_COLS - 1) / RMS_COLS;

	if (dt != TK_F32 && dt != TK_BF16)
		return;
#pragma omp parallel for if (par)
	for (int i = 0; i < n; i++) {
		if (dt == TK_F32 && add)
			rms_bwd_row(TK_F32, dx, 1, dout, x, w, rstd, i, H);
		else if (dt == TK_F32)
			rms_bwd_row(TK_F32, dx, 0, dout, x, w, rstd, i, H);
		else if (add)
			rms_bwd_row(TK_BF16, dx, 1, dout, x, w, rstd, i, H);
		else
			rms_bwd_row(TK_BF16, dx, 0, dout, x, w, rstd, i, H);
	}

	/* dw: each task owns a block of columns, rows summed in order. */
#pragma omp parallel for if (par)
	for (int b = 0; b < nblk; b++) {
		int c0 = b * RMS_COLS;
		int nc = H - c0 < RMS_COLS ? H - c0 : RMS_COLS;

		if (dt == TK_F32)
			rms_dw_cols(TK_F32, dw, dout, x, rstd, n, H, c0, nc);
		else
			rms_dw_cols(TK_BF16, dw, dout, x, rstd, n, H, c0, nc);
	}
}

/* With xhat = x * rstd and g = dout * w:
 *   dx = rstd * (g - xhat * mean(g * xhat)),  dw += sum_rows dout * xhat.
 * dx [n, H] overwritten, dw [H] accumulates; dout, x [n, H], rstd [n]. */
void tk_cpu_rmsnorm_bwd(int dt, void *dx, float *dw, const void *dout,
			const void *x, const void *w, const float *rstd, int n,
			int H)
{
	rms_bwd(dt, dx, 0, dw, dout, x, w, rstd, n, H);
}

/* dres [n, H] += rmsnorm_bwd's dx (rounded to dt first, as the temporary
 * holds it); dw [H] accumulates. */
void tk_cpu_rmsnorm_bwd_add(int dt, void *dres, float *dw, const void *dout,
			    const void *x, const void *w, const float *rstd,
			    int n, int H)
{
	rms_bwd(dt, dres, 1, dw, dout, x, w, rstd, n, H);
}
