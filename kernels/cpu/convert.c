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

/* dst [n] of dst_dtype (F32, BF16), src [n] of src_dtype */
void tk_cpu_convert(void *dst, int dst_dtype, const void *src, int src_dtype,
		    size_t n)
{
	long long i, nn = (long long)n;

	if (dst_dtype == src_dtype) {
		if (n)
			memcpy(dst, src, n * tk_dtype_size(src_dtype));
		return;
	}
#pragma omp parallel for if (nn >= TK_CPU_PAR_MIN)
	for (i = 0; i < nn; i++)
		tk_store_f32_rne(dst, dst_dtype, (size_t)i,
				 tk_load_f32(src, src_dtype, (size_t)i));
}
