/* dtype.h: fp32 to storage dtypes, round to nearest even (host code). */
#ifndef TACO_DTYPE_H
#define TACO_DTYPE_H

#include <stddef.h>
#include <stdint.h>

uint16_t taco_f32_to_bf16(float f);
uint16_t taco_f32_to_f16(float f);
float taco_bf16_to_f32(uint16_t h);

/* dst[n] in dtype (TK_F32, TK_BF16, TK_F16) from src[n]. */
void taco_f32_to_dtype(void *dst, const float *src, size_t n, int dtype);

#endif
