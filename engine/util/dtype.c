#include "dtype.h"

#include <math.h>
#include <string.h>

#include "tk_ops.h"

uint16_t taco_f32_to_bf16(float f)
{
	uint32_t b;

	memcpy(&b, &f, 4);
	if ((b & 0x7FFFFFFF) > 0x7F800000) /* NaN stays a quiet NaN */
		return (uint16_t)((b >> 16) | 0x40);
	b += 0x7FFF + ((b >> 16) & 1);
	return (uint16_t)(b >> 16);
}

float taco_bf16_to_f32(uint16_t h)
{
	uint32_t b = (uint32_t)h << 16;
	float f;

	memcpy(&f, &b, 4);
	return f;
}

uint16_t taco_f32_to_f16(float f)
{
	uint32_t x, a, sign;

	memcpy(&x, &f, 4);
	sign = (x >> 16) & 0x8000;
	a = x & 0x7FFFFFFF;
	if (a > 0x7F800000)
		return (uint16_t)(sign | 0x7E00);
	if (a >= 0x477FF000) /* 65520 and above round to infinity */
		return (uint16_t)(sign | 0x7C00);
	if (a < 0x38800000) /* below 2^-14: subnormal, exact scaling */
		return (uint16_t)(sign | (uint32_t)lrintf(fabsf(f) * 0x1p24f));
	a -= 0x38000000; /* rebias the exponent from 127 to 15 */
	a += 0xFFF + ((a >> 13) & 1);
	return (uint16_t)(sign | (a >> 13));
}

void taco_f32_to_dtype(void *dst, const float *src, size_t n, int dtype)
{
	for (size_t i = 0; i < n; i++) {
		if (dtype == TK_F32)
			((float *)dst)[i] = src[i];
		else if (dtype == TK_BF16)
			((uint16_t *)dst)[i] = taco_f32_to_bf16(src[i]);
		else
			((uint16_t *)dst)[i] = taco_f32_to_f16(src[i]);
	}
}
