/* add.c: y[n] += x[n] */
#include "cpu_ops.h"

void tk_cpu_add(float *y, const float *x, size_t n)
{
	long long i, nn = (long long)n;

#pragma omp parallel for if (nn >= TK_CPU_PAR_MIN)
	for (i = 0; i < nn; i++)
		y[i] += x[i];
}
