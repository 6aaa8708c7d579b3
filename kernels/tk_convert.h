/* tk_convert.h: the small-float conversions of the kernels, one definition
 * for the CPU backend (C11) and the CUDA backend (nvcc, __host__ __device__).
 *
 * Integer arithmetic on the bit patterns only (the one floating-point
 * operation, a small integer times a power of two when widening a
 * subnormal, is exact), so the results are the same bits on every backend,
 * whatever the rounding mode, FMA contraction or flush-to-zero setting.
 *
 * bf16 is the upper half of an fp32. IEEE binary16 (f16) has 1 sign, 5
 * exponent (bias 15) and 10 mantissa bits.
 *
 * FP8 E4M3 is the OCP "e4m3fn" format: 1 sign, 4 exponent (bias 7) and 3
 * mantissa bits; exponent 0 holds the subnormals m * 2^-9; the only NaN
 * codes are 0x7F and 0xFF; there is no infinity; the largest finite value is
 * 448 (0x7E). Encoding rounds to nearest, ties to even, and saturates: every
 * non-NaN input (infinities included) gives a finite code, |x| >= 448 gives
 * +-448; a NaN input gives 0x7F. The sign of a zero or of a value that rounds
 * to zero is kept (0x80 is -0).
 *
 * tk_load_f32 / tk_store_f32_rne read and write one element of a tensor
 * of any tk_dtype (TK_F32, TK_BF16, TK_F16) with the conversions above.
 *
 * The one definition of these conversions: the CPU kernels, the CUDA kernels
 * and the engine (which includes kernels headers, never the reverse) all
 * call these.
 */
#ifndef TK_CONVERT_H
#define TK_CONVERT_H

#include <stdint.h>
#include <string.h>

#include "tk_hd.h"
#include "tk_ops.h"

/* The bit pattern of an fp32, and back. */
static inline TK_HD uint32_t tk_f32_bits(float f)
{
#ifdef __CUDA_ARCH__
	return __float_as_uint(f);
#else
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
#endif
}

static inline TK_HD float tk_bits_f32(uint32_t u)
{
#ifdef __CUDA_ARCH__
	return __uint_as_float(u);
#else
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
#endif
}

/* bf16 -> fp32: exact widening, NaN payloads kept. */
static inline TK_HD float tk_bf16_f32(uint16_t h)
{
	return tk_bits_f32((uint32_t)h << 16);
}

/* fp32 -> bf16, round to nearest even; a NaN stays a (quiet) NaN. */
static inline TK_HD uint16_t tk_f32_bf16_rne(float f)
{
	uint32_t b = tk_f32_bits(f);

	if ((b & 0x7FFFFFFFu) > 0x7F800000u)
		return (uint16_t)((b >> 16) | 0x40);
	b += 0x7FFFu + ((b >> 16) & 1u);
	return (uint16_t)(b >> 16);
}

/* fp32 -> bf16, stochastic rounding of docs/taco.md: b = (b + (h & 0xFFFF)) &
 * 0xFFFF0000. A NaN stays a (quiet) NaN (the plain formula could carry a
 * negative NaN's pattern round to +0); finite values past the largest bf16
 * round to infinity, as the formula gives. */
static inline TK_HD uint16_t tk_f32_bf16_sr(float f, uint32_t h)
{
	uint32_t b = tk_f32_bits(f);

	if ((b & 0x7FFFFFFFu) > 0x7F800000u)
		return (uint16_t)((b >> 16) | 0x40);
	b = (b + (h & 0xFFFFu)) & 0xFFFF0000u;
	return (uint16_t)(b >> 16);
}

/* IEEE binary16 -> fp32 (exact; inf and NaN payloads kept). */
static inline TK_HD float tk_f16_f32(uint16_t h)
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
 * NaN gives a quiet NaN (sign kept, payload dropped: 0x7E00). */
static inline TK_HD uint16_t tk_f32_f16_rne(float f)
{
	uint32_t x = tk_f32_bits(f);
	uint32_t sign = (x >> 16) & 0x8000u;
	uint32_t a = x & 0x7FFFFFFFu;

	if (a > 0x7F800000u)
		return (uint16_t)(sign | 0x7E00u);
	if (a >= 0x477FF000u) /* 65520 and above round to infinity */
		return (uint16_t)(sign | 0x7C00u);
	if (a < 0x38800000u) { /* below 2^-14: subnormal (or zero) result */
		uint32_t e = a >> 23, man, q, rem, tie;
		int shift;

		if (e < 102) /* below 2^-25: rounds to zero */
			return (uint16_t)sign;
		/* value = man * 2^(e - 150); result q = round(value * 2^24) */
		man = (a & 0x7FFFFFu) | 0x800000u;
		shift = 126 - (int)e; /* 14..24 */
		q = man >> shift;
		rem = man & ((1u << shift) - 1u);
		tie = 1u << (shift - 1);
		if (rem > tie || (rem == tie && (q & 1u)))
			q++;
		return (uint16_t)(sign | q);
	}
	a -= 0x38000000u; /* rebias the exponent from 127 to 15 */
	a += 0xFFFu + ((a >> 13) & 1u);
	return (uint16_t)(sign | (a >> 13));
}

/* FP8 E4M3 code -> fp32, exact; 0x7F and 0xFF give a quiet NaN of that
 * sign. */
static inline TK_HD float tk_fp8_e4m3_decode(uint8_t code)
{
	uint32_t sign = (uint32_t)(code & 0x80u) << 24;
	uint32_t e = (code >> 3) & 0xFu;
	uint32_t m = code & 0x7u;

	if (e == 0xF && m == 0x7)
		return tk_bits_f32(sign | 0x7FC00000u);
	if (e == 0) {			      /* subnormal: m * 2^-9 */
		float f = (float)m * 0x1p-9f; /* exact */
		return sign ? -f : f;
	}
	/* (1 + m/8) * 2^(e - 7): rebias 7 -> 127, mantissa to the top bits */
	return tk_bits_f32(sign | ((e + 120u) << 23) | (m << 20));
}

/* One MXFP4 value (OCP microscaling, as gpt-oss ships its experts): the
 * FP4 E2M1 code (bit 3 the sign; 0..7: 0, 0.5, 1, 1.5, 2, 3, 4, 6) times
 * its block's E8M0 scale 2^(scale - 127), as transformers computes it: the
 * product in fp32, exact (overflowing to infinity for the largest scales;
 * scale 255, NaN in the format, is read as 2^128). */
static inline TK_HD float tk_mxfp4_decode(uint8_t code, uint8_t scale)
{
	/* in half steps: m = 0, 1 subnormal, else (2 + m % 2) 2^(m / 2 - 1) */
	uint32_t m = code & 7u;
	float h = (float)(m < 2 ? m : (2u + (m & 1u)) << ((m >> 1) - 1u));
	int e = (int)scale - 128; /* 2^(scale - 127) / 2, for the half steps */
	float p = e < -126 ? tk_bits_f32(1u << (e + 149)) /* subnormal */
			   : tk_bits_f32((uint32_t)(e + 127) << 23);
	float v = h * p;

	return code & 8u ? -v : v;
}

/* fp32 -> FP8 E4M3 code: round to nearest even, saturate to +-448, NaN ->
 * 0x7F, the sign of a zero result kept. */
static inline TK_HD uint8_t tk_fp8_e4m3_encode(float x)
{
	uint32_t b = tk_f32_bits(x);
	uint8_t sign = (uint8_t)((b >> 24) & 0x80u);
	uint32_t a = b & 0x7FFFFFFFu;

	if (a > 0x7F800000u)
		return 0x7F;
	if (a >= 0x43E00000u) /* 448 and above, infinity included */
		return (uint8_t)(sign | 0x7Eu);
	if (a < 0x3C800000u) {
		/* Below 2^-6: the result is a subnormal code q = round(|x| *
		 * 2^9), 0..8 (8 is the smallest normal, code 0x08). */
		uint32_t e = a >> 23, man, q, rem, tie;
		int shift;

		if (e < 116) /* |x| < 2^-11: below a quarter of 2^-9 */
			return sign;
		man = (a & 0x7FFFFFu) | 0x800000u; /* |x| = man 2^(e-150) */
		shift = 141 - (int)e;		   /* 21..25 */
		q = man >> shift;
		rem = man & ((1u << shift) - 1u);
		tie = 1u << (shift - 1);
		if (rem > tie || (rem == tie && (q & 1u)))
			q++;
		return (uint8_t)(sign | q);
	}
	/* Normal: keep 3 of the 23 mantissa bits, ties to even; a carry out
	 * of the mantissa bumps the exponent, which is the right result. The
	 * largest input here (just below 448) rounds to at most 448 = 0x7E. */
	a += 0x7FFFFu + ((a >> 20) & 1u);
	return (uint8_t)(sign | ((a >> 20) - (120u << 3)));
}

/* Element i of p, a tensor of dtype (TK_F32, TK_BF16, else TK_F16), as
 * fp32 (exact). */
static inline TK_HD float tk_load_f32(const void *p, int dtype, size_t i)
{
	switch (dtype) {
	case TK_F32:
		return ((const float *)p)[i];
	case TK_BF16:
		return tk_bf16_f32(((const uint16_t *)p)[i]);
	default:
		return tk_f16_f32(((const uint16_t *)p)[i]);
	}
}

/* Element i of p, a tensor of dtype (TK_F32, TK_BF16, else TK_F16), = x
 * rounded to nearest even. */
static inline TK_HD void tk_store_f32_rne(void *p, int dtype, size_t i, float x)
{
	switch (dtype) {
	case TK_F32:
		((float *)p)[i] = x;
		break;
	case TK_BF16:
		((uint16_t *)p)[i] = tk_f32_bf16_rne(x);
		break;
	default:
		((uint16_t *)p)[i] = tk_f32_f16_rne(x);
		break;
	}
}

/* x as a tensor of dtype (TK_F32, TK_BF16, else TK_F16) holds it once
 * stored: rounded to nearest even, widened back (exact). What a fused op
 * computes with where the unfused sequence stores an intermediate and reads
 * it again. */
static inline TK_HD float tk_round_f32(float x, int dtype)
{
	switch (dtype) {
	case TK_F32:
		return x;
	case TK_BF16:
		return tk_bf16_f32(tk_f32_bf16_rne(x));
	default:
		return tk_f16_f32(tk_f32_f16_rne(x));
	}
}

#endif
