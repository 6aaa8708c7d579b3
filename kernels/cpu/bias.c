/* bias.c: bias add and its reduction. y, bias and dy are in dt; dbias is
 * fp32. */
#include "cpu_ops.h"
#include "tk_convert.h"

/* Columns per task in bias_bwd: one double accumulator block per thread. */
#define BIAS_COLS 64

TK_CPU_INLINE void bias_row(int dt, void *y, const void *bias, size_t off,
			    int C)
{
	for (int c = 0; c < C; c++)
		tk_store_f32_rne(y, dt, off + c,
				 tk_load_f32(y, dt, off + c) +
				     tk_load_f32(bias, dt, c));
}

/* y [rows, C] += bias [C] */
void tk_cpu_bias_fwd(int dt, void *y, const void *bias, int rows, int C)
{
	int r;

	if (dt != TK_F32 && dt != TK_BF16)
		return;
#pragma omp parallel for if ((long long)rows * C >= TK_CPU_PAR_MIN)
	for (r = 0; r < rows; r++) {
		if (dt == TK_F32)
			bias_row(TK_F32, y, bias, (size_t)r * C, C);
		else
			bias_row(TK_BF16, y, bias, (size_t)r * C, C);
	}
}

TK_CPU_INLINE void bias_cols(int dt, float *dbias, const void *dy, int rows,
			     int C, int c0, int nc)
{
	double acc[BIAS_COLS] = {0};

	for (int r = 0; r < rows; r++) {
		size_t o = (size_t)r * C + c0;
		for (int c = 0; c < nc; c++)
			acc[c] += tk_load_f32(dy, dt, o + c);
	}
	for (int c = 0; c < nc; c++)
		dbias[c0 + c] += (float)acc[c];
}

/* dbias [C] += sum over rows of dy [rows, C]. Each task owns a block of
 * columns and sums rows in order, so the result is deterministic. */
void tk_cpu_bias_bwd(int dt, float *dbias, const void *dy, int rows, int C)
{
	int nblk = (C + BIAS_COLS - 1) / BIAS_COLS, b;

	if (dt != TK_F32 && dt != TK_BF16)
		return;
#pragma omp parallel for if ((long long)rows * C >= TK_CPU_PAR_MIN)
	for (b = 0; b < nblk; b++) {
		int c0 = b * BIAS_COLS;
		int nc = C - c0 < BIAS_COLS ? C - c0 : BIAS_COLS;

		if (dt == TK_F32)
			bias_cols(TK_F32, dbias, dy, rows, C, c0, nc);
		else
			bias_cols(TK_BF16, dbias, dy, rows, C, c0, nc);
	}
}
