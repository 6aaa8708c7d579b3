/* tk_attn.h: the mask of tk_ops.attention_fwd / attention_bwd, one
 * definition for the CPU backend (kernels/cpu/attention.c) and (TK_HD) the
 * CUDA kernels (kernels/cuda/attention.cu, attention_mma.cu), so that both
 * see the same keys.
 *
 * Query i of a row attends keys lo(i) <= j <= i with
 *   lo(i) = max(doc_start(i), i - window + 1 when window > 0),
 *   doc_start(i) = i - pos[i] clamped to [0, i]; a negative pos: the token
 *   sees only itself.
 */
#ifndef TK_ATTN_H
#define TK_ATTN_H

#include <stdint.h>

#include "tk_hd.h"

/* lo(i): the first key query i may see; pos is this batch row's [T]
 * positions. */
static inline TK_HD int tk_attn_key_lo(const int32_t *pos, int i, int window)
{
	int p = pos[i];
	int lo = p < 0 ? i : (p > i ? 0 : i - p);

	if (window > 0 && i - window + 1 > lo)
		lo = i - window + 1;
	return lo;
}

#endif
