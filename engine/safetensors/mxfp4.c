/* mxfp4.c: see mxfp4.h. */
#include "mxfp4.h"

#include "tk_convert.h"

void taco_mxfp4_dequant_bf16(const uint8_t *blocks, const uint8_t *scales,
			     size_t E, size_t R, size_t C, uint16_t *out)
{
	size_t G = C / 32;

	for (size_t e = 0; e < E; e++)
		for (size_t r = 0; r < R; r++)
			for (size_t g = 0; g < G; g++) {
				const uint8_t *b =
				    blocks + ((e * R + r) * G + g) * 16;
				uint8_t s = scales[(e * R + r) * G + g];
				for (size_t j = 0; j < 32; j++) {
					uint8_t code = j % 2 ? b[j / 2] >> 4
							     : b[j / 2] & 15u;
					size_t c = g * 32 + j;
					out[(e * C + c) * R + r] =
					    tk_f32_bf16_rne(
						tk_mxfp4_decode(code, s));
				}
			}
}
