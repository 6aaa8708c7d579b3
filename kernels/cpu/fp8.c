/* fp8.c: OCP FP8 E4M3 ("e4m3fn") encode and decode; see fp8.h. */
#include "fp8.h"

/* code -> fp32, exact. */
float tk_fp8_e4m3_decode(uint8_t code)
{
	uint32_t sign = (uint32_t)(code & 0x80u) << 24;
	uint32_t e = (code >> 3) & 0xFu;
	uint32_t m = code & 0x7u;

	if (e == 0xF && m == 0x7)
		return tk_bits_f32(sign | 0x7FC00000u);
	if (e == 0) { /* subnormal: m * 2^-9 */
		float f = (float)m * 0x1p-9f;
		return sign ? -f : f;
	}
	/* (1 + m/8) * 2^(e - 7): rebias 7 -> 127, mantissa to the top bits */
	return tk_bits_f32(sign | ((e + 120u) << 23) | (m << 20));
}

/* fp32 -> code: round to nearest even, saturate to +-448, NaN -> 0x7F.
 * Integer arithmetic only, so the result does not depend on the FPU's
 * rounding mode. */
uint8_t tk_fp8_e4m3_encode(float x)
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
		uint32_t e = a >> 23, man, q, rem, half;
		int shift;

		if (e < 116) /* |x| < 2^-11: below a quarter of 2^-9 */
			return sign;
		man = (a & 0x7FFFFFu) | 0x800000u; /* |x| = man 2^(e-150) */
		shift = 141 - (int)e;		   /* 21..25 */
		q = man >> shift;
		rem = man & ((1u << shift) - 1u);
		half = 1u << (shift - 1);
		if (rem > half || (rem == half && (q & 1u)))
			q++;
		return (uint8_t)(sign | q);
	}
	/* Normal: keep 3 of the 23 mantissa bits, ties to even; a carry out
	 * of the mantissa bumps the exponent, which is the right result. The
	 * largest input here (just below 448) rounds to at most 448 = 0x7E. */
	a += 0x7FFFFu + ((a >> 20) & 1u);
	return (uint8_t)(sign | ((a >> 20) - (120u << 3)));
}
