/* bias.c: bias add and its reduction. */
#include "cpu_ops.h"

/* Columns per task in bias_bwd: one double accumulator block per thread. */
#define BIAS_COLS 64

/* y [rows, C] += bias [C] */
void tk_cpu_bias_fwd(float *y, const float *bias, int rows, int C)
{
	int r;

#pragma omp parallel for if ((long long)rows * C >= TK_CPU_PAR_MIN)
	for (r = 0; r < rows; r++) {
		float *yr = y + (size_t)r * C;
		for (int c = 0; c < C; c++)
			yr[c] += bias[c];
	}
}

/* dbias [C] += sum over rows of dy [rows, C]. Each task owns a block of
 * columns and sums rows in order, so the result is deterministic. */
void tk_cpu_bias_bwd(float *dbias, const float *dy, int rows, int C)
{
	int nblk = (C + BIAS_COLS - 1) / BIAS_COLS, b;

#pragma omp parallel for if ((long long)rows * C >= TK_CPU_PAR_MIN)
	for (b = 0; b < nblk; b++) {
		int c0 = b * BIAS_COLS;
		int nc = C - c0 < BIAS_COLS ? C - c0 : BIAS_COLS;
		double acc[BIAS_COLS] = {0};

		for (int r = 0; r < rows; r++) {
			const float *dr = dy + (size_t)r * C + c0;
			for (int c = 0; c < nc; c++)
				acc[c] += dr[c];
		}
		for (int c = 0; c < nc; c++)
			dbias[c0 + c] += (float)acc[c];
	}
}
