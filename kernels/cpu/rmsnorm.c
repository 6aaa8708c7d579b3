/* rmsnorm.c: RMSNorm as Hugging Face LlamaRMSNorm computes it in fp32:
 * rstd = 1 / sqrt(mean(x^2) + eps), out = w * (x * rstd).
 * The mean of squares is accumulated in double.
 */
#include <math.h>

#include "cpu_ops.h"

/* Columns per task for the dw reduction. */
#define RMS_COLS 64

/* out [n, H], rstd [n], x [n, H], w [H] */
void tk_cpu_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *w,
			int n, int H, float eps)
{
#pragma omp parallel for if ((long long)n * H >= TK_CPU_PAR_MIN)
	for (int i = 0; i < n; i++) {
		const float *xi = x + (size_t)i * H;
		float *oi = out + (size_t)i * H;
		double ss = 0;
		float r;

		for (int j = 0; j < H; j++)
			ss += (double)xi[j] * xi[j];
		r = (float)(1.0 / sqrt(ss / H + (double)eps));
		rstd[i] = r;
		for (int j = 0; j < H; j++)
			oi[j] = w[j] * (xi[j] * r);
	}
}

/* With xhat = x * rstd and g = dout * w:
 *   dx = rstd * (g - xhat * mean(g * xhat)),  dw += sum_rows dout * xhat.
 * dx [n, H] overwritten, dw [H] accumulates; dout, x [n, H], rstd [n]. */
void tk_cpu_rmsnorm_bwd(float *dx, float *dw, const float *dout, const float *x,
			const float *w, const float *rstd, int n, int H)
{
	int par = (long long)n * H >= TK_CPU_PAR_MIN;
	int nblk = (H + RMS_COLS - 1) / RMS_COLS;

#pragma omp parallel for if (par)
	for (int i = 0; i < n; i++) {
		const float *xi = x + (size_t)i * H;
		const float *di = dout + (size_t)i * H;
		float *dxi = dx + (size_t)i * H;
		double r = rstd[i], dot = 0;
		float c;

		for (int j = 0; j < H; j++)
			dot += (double)di[j] * w[j] * xi[j];
		/* mean(g * xhat) * rstd = dot * rstd^2 / H */
		c = (float)(dot * r * r / H);
		for (int j = 0; j < H; j++)
			dxi[j] = (float)r * (di[j] * w[j] - xi[j] * c);
	}

	/* dw: each task owns a block of columns, rows summed in order. */
#pragma omp parallel for if (par)
	for (int b = 0; b < nblk; b++) {
		int c0 = b * RMS_COLS;
		int nc = H - c0 < RMS_COLS ? H - c0 : RMS_COLS;
		double acc[RMS_COLS] = {0};

		for (int i = 0; i < n; i++) {
			const float *xi = x + (size_t)i * H + c0;
			const float *di = dout + (size_t)i * H + c0;
			double r = rstd[i];
			for (int c = 0; c < nc; c++)
				acc[c] += (double)di[c] * xi[c] * r;
		}
		for (int c = 0; c < nc; c++)
			dw[c0 + c] += (float)acc[c];
	}
}
