/* convert.c: dst[n] (fp32) = src[n] converted from F32, BF16 or F16. */
#include <string.h>

#include "cpu_ops.h"

static float bits_to_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* bf16 is the upper half of an fp32: exact widening, NaN payloads kept. */
static float bf16_to_f32(uint16_t h)
{
	return bits_to_f32((uint32_t)h << 16);
}

/* IEEE 754 binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. */
static float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t man = h & 0x3ffu;

	if (exp == 0x1f) /* inf / nan (payload kept, quiet bit as given) */
		return bits_to_f32(sign | 0x7f800000u | (man << 13));
	if (exp == 0) {
		if (man == 0)
			return bits_to_f32(sign);
		/* Subnormal: man * 2^-24, renormalised. */
		exp = 127 - 15 + 1;
		while (!(man & 0x400u)) {
			man <<= 1;
			exp--;
		}
		man &= 0x3ffu;
		return bits_to_f32(sign | (exp << 23) | (man << 13));
	}
	return bits_to_f32(sign | ((exp + 127 - 15) << 23) | (man << 13));
}

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
			dst[i] = bf16_to_f32(h[i]);
		break;
	case TK_F16:
#pragma omp parallel for if (nn >= TK_CPU_PAR_MIN)
		for (i = 0; i < nn; i++)
			dst[i] = f16_to_f32(h[i]);
		break;
	default:
		break;
	}
}
