/* tk_hash.h: splitmix64, the one mixing function of the project (TACO's
 * stochastic-rounding hash, data order, random initialisation); host and,
 * under nvcc, device code (TK_HD). */
#ifndef TK_HASH_H
#define TK_HASH_H

#include <stdint.h>

#include "tk_hd.h"

/* The standard splitmix64 output for state x (docs/taco.md). */
static inline TK_HD uint64_t tk_splitmix64(uint64_t x)
{
	uint64_t z = x + 0x9E3779B97F4A7C15ull;

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* A stream: returns the next output and advances *s. */
static inline TK_HD uint64_t tk_splitmix64_next(uint64_t *s)
{
	uint64_t z = tk_splitmix64(*s);

	*s += 0x9E3779B97F4A7C15ull;
	return z;
}

#endif
