/* gguf_quant.h: ggml's q8_0, as its reference quantizer
 * (quantize_row_q8_0_ref) computes it. */
#ifndef TACO_GGUF_QUANT_H
#define TACO_GGUF_QUANT_H

#include <stdint.h>

/* x[n] (n a multiple of 32) into n / 32 blocks of 34 bytes: the block's
 * scale d = max |x| / 127 as fp16, then the 32 values round(x / d) as
 * int8 (0 for a block of zeros). */
void taco_q8_0_quantize_row(const float *x, int64_t n, uint8_t *out);

#endif
