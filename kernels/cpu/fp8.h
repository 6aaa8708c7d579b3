/* fp8.h: small-float conversions of the CPU optimizer kernels (internal).
 *
 * FP8 E4M3 is the OCP "e4m3fn" format: 1 sign, 4 exponent (bias 7) and 3
 * mantissa bits; exponent 0 holds the subnormals m * 2^-9; the only NaN
 * codes are 0x7F and 0xFF; there is no infinity; the largest finite value is
 * 448 (0x7E). Encoding rounds to nearest, ties to even, and saturates: every
 * non-NaN input (infinities included) gives a finite code, |x| >= 448 gives
 * +-448; a NaN input gives 0x7F. The sign of a zero or of a value that rounds
 * to zero is kept (0x80 is -0).
 *
 * The bf16 / fp16 helpers are the kernels' own copies (kernels never include
 * engine headers); they round exactly like engine/dtype.c.
 */
#ifndef TK_CPU_FP8_H
#define TK_CPU_FP8_H

#include <stdint.h>
#include <string.h>

/* fp8.c */
uint8_t tk_fp8_e4m3_encode(float x);
float tk_fp8_e4m3_decode(uint8_t code);

static inline uint32_t tk_f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float tk_bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static inline float tk_bf16_f32(uint16_t h)
{
	return tk_bits_f32((uint32_t)h << 16);
}

/* fp32 -> bf16, round to nearest even; a NaN stays a (quiet) NaN. */
static inline uint16_t tk_f32_bf16_rne(float f)
{
	uint32_t b = tk_f32_bits(f);

	if ((b & 0x7FFFFFFFu) > 0x7F800000u)
		return (uint16_t)((b >> 16) | 0x40);
	b += 0x7FFFu + ((b >> 16) & 1u);
	return (uint16_t)(b >> 16);
}

/* fp32 -> bf16, stochastic rounding of taco.md: b = (b + (h & 0xFFFF)) &
 * 0xFFFF0000. A NaN stays a (quiet) NaN (the plain formula could carry a
 * negative NaN's pattern round to +0); finite values past the largest bf16
 * round to infinity, as the formula gives. */
static inline uint16_t tk_f32_bf16_sr(float f, uint32_t h)
{
	uint32_t b = tk_f32_bits(f);

	if ((b & 0x7FFFFFFFu) > 0x7F800000u)
		return (uint16_t)((b >> 16) | 0x40);
	b = (b + (h & 0xFFFFu)) & 0xFFFF0000u;
	return (uint16_t)(b >> 16);
}

/* IEEE binary16 -> fp32 (exact). */
static inline float tk_f16_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1Fu;
	uint32_t man = h & 0x3FFu;

	if (exp == 0x1F)
		return tk_bits_f32(sign | 0x7F800000u | (man << 13));
	if (exp == 0) {
		float f = (float)man * 0x1p-24f; /* exact */
		return sign ? -f : f;
	}
	return tk_bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

/* fp32 -> IEEE binary16, round to nearest even, overflow to infinity; a
 * NaN gives a quiet NaN. */
static inline uint16_t tk_f32_f16_rne(float f)
{
	uint32_t x = tk_f32_bits(f);
	uint32_t sign = (x >> 16) & 0x8000u;
	uint32_t a = x & 0x7FFFFFFFu;

	if (a > 0x7F800000u)
		return (uint16_t)(sign | 0x7E00u);
	if (a >= 0x477FF000u) /* 65520 and above round to infinity */
		return (uint16_t)(sign | 0x7C00u);
	if (a < 0x38800000u) { /* below 2^-14: subnormal (or zero) result */
		uint32_t e = a >> 23, man, q, rem, half;
		int shift;

		if (e < 102) /* below 2^-25: rounds to zero */
			return (uint16_t)sign;
		/* value = man * 2^(e - 150); result q = round(value * 2^24) */
		man = (a & 0x7FFFFFu) | 0x800000u;
		shift = 126 - (int)e; /* 14..24 */
		q = man >> shift;
		rem = man & ((1u << shift) - 1u);
		half = 1u << (shift - 1);
		if (rem > half || (rem == half && (q & 1u)))
			q++;
		return (uint16_t)(sign | q);
	}
	a -= 0x38000000u; /* rebias the exponent from 127 to 15 */
	a += 0xFFFu + ((a >> 13) & 1u);
	return (uint16_t)(sign | (a >> 13));
}

#endif
