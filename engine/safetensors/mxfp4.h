/* mxfp4.h: MXFP4 weights as gpt-oss's checkpoints store its experts. */
#ifndef TACO_MXFP4_H
#define TACO_MXFP4_H

#include <stddef.h>
#include <stdint.h>

/* The bf16 bits of E matrices W [E, C, R] from their MXFP4 storage:
 * blocks [E, R, C / 32, 16] (two FP4 E2M1 codes a byte, the low nibble
 * first) and scales [E, R, C / 32] (E8M0), as transformers'
 * convert_moe_packed_tensors dequantizes and transposes them: out[e, c,
 * r] is value c of row r of matrix e. Exact (tk_mxfp4_decode). */
void taco_mxfp4_dequant_bf16(const uint8_t *blocks, const uint8_t *scales,
			     size_t E, size_t R, size_t C, uint16_t *out);

#endif
