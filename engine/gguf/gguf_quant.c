/* gguf_quant.c: see gguf_quant.h. */
#include "gguf_quant.h"

#include <math.h>
#include <string.h>

#include "tk_convert.h"

void taco_q8_0_quantize_row(const float *x, int64_t n, uint8_t *out)
{
	for (int64_t b = 0; b < n / 32; b++, x += 32, out += 34) {
		float amax = 0;
		for (int j = 0; j < 32; j++)
			amax = fmaxf(amax, fabsf(x[j]));
		/* ggml: d = amax / 127, id = d ? 1 / d : 0, q = roundf(x * id),
		 * in fp32; the stored scale is d rounded to fp16 */
		float d = amax / 127.0f;
		float id = d ? 1.0f / d : 0.0f;
		uint16_t h = tk_f32_f16_rne(d);
		memcpy(out, &h, 2);
		for (int j = 0; j < 32; j++)
			out[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
	}
}
