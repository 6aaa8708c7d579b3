/* convert.c: dst[n] (fp32) = src[n] converted from F32, BF16 or F16. */
#include <string.h>

#include "cpu_ops.h"
#include "tk_convert.h"

/* dst [n], src [n] of dtype */
void tk_cpu_to_f32(float *dst, const void *src, int dtype, size_t n)
{
	const uint16_t *h = src;
	long long i, nn = (long long)n;

	switch (dtype) {
	case TK_F32:
		if (n)
			memmove(dst, src, n * sizeof(float));
		break;
	case TK_BF16:
#pragma omp parallel for if (nn >= TK_CPU_PAR_MIN)
		for (i = 0; i < nn; i++)
			dst[i] = tk_bf16_f32(h[i]);
		break;
	case TK_F16:
#pragma omp parallel for if (nn >= TK_CPU_PAR_MIN)
		for (i = 0; i < nn; i++)
			dst[i] = tk_f16_f32(h[i]);
		break;
	default:
		break;
	}
}
