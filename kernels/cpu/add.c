/* add.c: y[n] += x[n] */
#include "cpu_ops.h"
#include "tk_convert.h"

TK_CPU_INLINE void add_span(int dt, void *y, const void *x, size_t i0,
			    size_t i1)
{
	for (size_t i = i0; i < i1; i++)
		tk_store_f32_rne(y, dt, i,
				 tk_load_f32(y, dt, i) + tk_load_f32(x, dt, i));
}

void tk_cpu_add(int dt, void *y, const void *x, size_t n)
{
	long long b, nblk = (long long)((n + TK_CPU_SPAN - 1) / TK_CPU_SPAN);

	if (dt != TK_F32 && dt != TK_BF16)
		return;
#pragma omp parallel for if (n >= TK_CPU_PAR_MIN)
	for (b = 0; b < nblk; b++) {
		size_t i0 = (size_t)b * TK_CPU_SPAN;
		size_t i1 = n - i0 < TK_CPU_SPAN ? n : i0 + TK_CPU_SPAN;

		if (dt == TK_F32)
			add_span(TK_F32, y, x, i0, i1);
		else
			add_span(TK_BF16, y, x, i0, i1);
	}
}
