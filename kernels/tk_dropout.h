/* tk_dropout.h: the dropout mask of tk_ops.dropout, one definition for the
 * CPU backend and (TK_HD) the CUDA backend.
 *
 * The mask is counter based: element i's decision depends only on (seed,
 * stream, i), so any thread may decide any element, the backward (the same
 * call on the gradient) needs no stored mask, and both backends draw the
 * same bits. Everything is integer math; the one floating-point step, the
 * threshold, is exact.
 */
#ifndef TK_DROPOUT_H
#define TK_DROPOUT_H

#include <stdint.h>

#include "tk_hash.h"
#include "tk_hd.h"

/* The increment of a splitmix64 stream (tk_splitmix64_next). */
#define TK_DROPOUT_GAMMA 0x9E3779B97F4A7C15ull

/* The state of one call's stream: stream is mixed on its own first, so
 * that nearby stream ids (consecutive sites of a step) give unrelated
 * keys. */
static inline TK_HD uint64_t tk_dropout_key(uint64_t seed, uint64_t stream)
{
	return tk_splitmix64(seed ^ tk_splitmix64(stream));
}

/* The smallest integer t with t * 2^-53 >= p, for p in [0, 1]: then
 * (h >> 11) * 2^-53 >= p exactly when (h >> 11) >= t. p * 2^53 is exact
 * in double (p is a float), so is the comparison with its truncation. */
static inline TK_HD uint64_t tk_dropout_threshold(float p)
{
	double s = (double)p * 0x1p53;
	uint64_t t = (uint64_t)s;

	return (double)t < s ? t + 1 : t;
}

/* 1 when element i is kept: output i of the splitmix64 stream seeded with
 * key, its top 53 bits against the threshold. */
static inline TK_HD int tk_dropout_keep(uint64_t key, uint64_t thr, uint64_t i)
{
	return (tk_splitmix64(key + i * TK_DROPOUT_GAMMA) >> 11) >= thr;
}

#endif
