/* tk_taco.h: TACO's per-column logic (docs/taco.md), one definition for the
 * CPU backend (kernels/cpu/taco.c, C11) and the CUDA backend
 * (kernels/cuda/taco.cu, nvcc, __host__ __device__): the state's slot
 * access, the decode of a column (step 1), and its finish once the scan has
 * found the candidates: track, propose, merge with its keys and sort,
 * select and step the weight with its rounding, requantize (steps 2.-6.).
 * The numbers are the steps of docs/taco.md.
 *
 * What each backend keeps is how it walks the columns and rows: the CPU
 * gives each OpenMP thread a range of columns and scans G row by row
 * (SSE2); the GPU gives a block 32 columns, splits their rows among warps
 * and merges the warps' candidate lists in shared memory. Both then call
 * tk_taco_finish_col per column with the same inputs, so the bits are the
 * same: every fp32 operation here is one tk_fmul_rn / tk_fadd_rn / ...
 * (tk_hd.h), rounded on its own, and the FP8, bf16 and f16 conversions and
 * the hash are those of tk_convert.h and tk_hash.h.
 *
 * Shapes: W [R, C] row-major; the state of column j, slot s is at
 * j * k + s: idx (uint16 when R <= 65535, "narrow", else uint32, "wide"),
 * q (FP8 E4M3 codes), and scale [C]. An empty slot has idx all ones.
 *
 * Choices the spec leaves open, which both backends and the Python
 * reference (tests/reference/taco_ref.py) make the same way:
 *
 * - Slot order after the merge: the kept slots come first, sorted by |value|
 *   (the fp32 value before requantization) descending, equal |value| by
 *   smaller row first; then the empty slots. So slot 0 is always s*. (Which
 *   slots are kept uses the spec's merge tie rule, tracked before proposed
 *   then smaller row; only their order afterwards ignores tracked/proposed.)
 * - An empty slot has idx all ones (0xFFFF or 0xFFFFFFFF) and q = 0; a
 *   column with every slot empty has scale 0.
 * - A kept slot whose value requantizes to zero (|v / scale| <= 2^-10) keeps
 *   its row with code 0x00 or 0x80 (signed zero); next step it decodes to 0,
 *   is tracked like any slot, and is dropped if its value is then 0.
 * - On reading the state, a slot whose idx is not all ones but is >= R
 *   (corrupt state) counts as empty.
 * - Non-finite input: a column whose gradient G[:, j] holds a NaN or an
 *   infinity anywhere (the backends' scans mark it and never finish it), or
 *   in which a tracked or proposed value is not finite (overflow, or a
 *   corrupt scale / NaN code in the state), is skipped: its slots, codes,
 *   scale and weights are left exactly as they were. Other columns are
 *   updated normally.
 * - If amax / 448 underflows to 0, v / scale is +-inf and encodes to +-448
 *   (saturation), as the spec's formula gives.
 * - F16 weights: the spec defines stochastic rounding for bf16 only; F16
 *   weights always round to nearest even, whatever a->stochastic says. F32
 *   weights ignore a->stochastic.
 * - Invalid arguments (k outside 1..16, an empty shape, an unknown dtype)
 *   make a call a no-op (tk_taco_args_ok, tk_taco_dtype_ok).
 */
#ifndef TK_TACO_H
#define TK_TACO_H

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "tk_convert.h"
#include "tk_hash.h"
#include "tk_hd.h"
#include "tk_ops.h"

#define TK_TACO_KMAX 16 /* slots per column, at most */

/* ---- arguments ------------------------------------------------------- */

/* The shape and k every entry point takes. */
static inline TK_HD int tk_taco_args_ok(const tk_taco_args *a)
{
	return a && a->R > 0 && a->C > 0 && a->k >= 1 && a->k <= TK_TACO_KMAX;
}

/* The weight dtypes TACO steps. */
static inline TK_HD int tk_taco_dtype_ok(int dtype)
{
	return dtype == TK_F32 || dtype == TK_BF16 || dtype == TK_F16;
}

/* taco_update's columns [col0, col0 + ncols) inside W, and G [R, ncols]
 * with row stride ldg. */
static inline TK_HD int tk_taco_range_ok(const tk_taco_args *a, int ldg)
{
	return a->col0 >= 0 && a->ncols >= 1 && a->ncols <= a->C - a->col0 &&
	       ldg >= a->ncols;
}

/* The per-call constants of step 5: the decoupled decay 1 - lr * wd, and
 * the hash base splitmix64(splitmix64(seed ^ tensor_index) ^ step) that
 * the column index is mixed into for stochastic rounding. */
static inline TK_HD float tk_taco_decay(const tk_taco_args *a)
{
	return tk_fsub_rn(1.0f, tk_fmul_rn(a->lr, a->weight_decay));
}

static inline TK_HD uint64_t tk_taco_hbase(const tk_taco_args *a)
{
	return tk_splitmix64(tk_splitmix64(a->seed ^ a->tensor_index) ^
			     a->step);
}

/* ---- the slots ------------------------------------------------------- */

/* Is idx uint32 (R > 65535) rather than uint16? */
static inline TK_HD int tk_taco_wide(int R)
{
	return R > 65535;
}

/* The idx of an empty slot: all ones of its width. */
static inline TK_HD uint32_t tk_taco_empty(int wide)
{
	return wide ? 0xFFFFFFFFu : 0xFFFFu;
}

static inline TK_HD uint32_t tk_taco_idx_get(const void *idx, int wide,
					     size_t i)
{
	return wide ? ((const uint32_t *)idx)[i] : ((const uint16_t *)idx)[i];
}

static inline TK_HD void tk_taco_idx_set(void *idx, int wide, size_t i,
					 uint32_t row)
{
	if (wide)
		((uint32_t *)idx)[i] = row;
	else
		((uint16_t *)idx)[i] = (uint16_t)row;
}

/* The row slot i of a tensor with R rows tracks, into *row: 1, or 0 when
 * the slot is empty or its row is >= R (corrupt: counts as empty). */
static inline TK_HD int tk_taco_slot_row(const void *idx, int R, size_t i,
					 uint32_t *row)
{
	const int wide = tk_taco_wide(R);
	uint32_t r = tk_taco_idx_get(idx, wide, i);

	if (r == tk_taco_empty(wide) || r >= (uint32_t)R)
		return 0;
	*row = r;
	return 1;
}

/* 1. Decodes column j's slots in slot order: the n tracked rows into
 * trow[0], trow[ts], ... and their values decode(q) * scale[j] into
 * tval[0], tval[vs], ...; returns n. The strides let the CPU write a
 * column's contiguous list (1) and the GPU its slot-major scan buffer (C). */
static inline TK_HD int tk_taco_decode_col(const void *idx, const uint8_t *q,
					   const float *scale,
					   const tk_taco_args *a, int j,
					   uint32_t *trow, size_t ts,
					   float *tval, size_t vs)
{
	const size_t o = (size_t)j * (size_t)a->k;
	int n = 0;

	for (int s = 0; s < a->k; s++) {
		uint32_t row;

		if (!tk_taco_slot_row(idx, a->R, o + (size_t)s, &row))
			continue;
		trow[(size_t)n * ts] = row;
		tval[(size_t)n * vs] =
		    tk_fmul_rn(tk_fp8_e4m3_decode(q[o + (size_t)s]), scale[j]);
		n++;
	}
	return n;
}

/* ---- the merge (step 4) ---------------------------------------------- */

/* One entry of the merge: key orders it (larger first), v is its value. */
typedef struct tk_taco_ent {
	uint64_t key;
	float v;
	uint32_t row;
} tk_taco_ent;

/* Sort keys, larger first. |value| is >= 0 and finite, so its bit pattern
 * orders like the value. Merge: bits(|v|) << 33 | tracked << 32 |
 * (0xFFFFFFFF - row): |value| desc, tracked before proposed, smaller row. */
static inline TK_HD uint64_t tk_taco_merge_key(float mag, int proposed,
					       uint32_t row)
{
	return (uint64_t)tk_f32_bits(mag) << 33 | (uint64_t)!proposed << 32 |
	       (uint64_t)(0xFFFFFFFFu - row);
}

/* Slots: the merge key without the tracked bit, |value| desc, smaller
 * row. */
static inline TK_HD uint64_t tk_taco_slot_key(const tk_taco_ent *e)
{
	return (e->key >> 33) << 32 | (e->key & 0xFFFFFFFFu);
}

/* Enters row r's value v (tracked, or proposed) into the merge e [*ne]:
 * a value 0 is dropped; returns 0, entering nothing, when v is not finite
 * (the column is then skipped). */
static inline TK_HD int tk_taco_enter(tk_taco_ent *e, int *ne, float v,
				      int proposed, uint32_t r)
{
	if (!(fabsf(v) <= FLT_MAX))
		return 0;
	if (v != 0.0f) {
		e[*ne].key = tk_taco_merge_key(fabsf(v), proposed, r);
		e[*ne].v = v;
		e[*ne].row = r;
		(*ne)++;
	}
	return 1;
}

/* Insertion sort of e [n] (n <= 2 * TK_TACO_KMAX), larger key first, by
 * the merge key or (by_slot) the slot key. The keys are distinct (rows
 * are), so the order is total and any sort gives it; this one is short and
 * needs no memory. */
static inline TK_HD void tk_taco_sort(tk_taco_ent *e, int n, int by_slot)
{
	for (int i = 1; i < n; i++) {
		tk_taco_ent x = e[i];
		uint64_t kx = by_slot ? tk_taco_slot_key(&x) : x.key;
		int p = i;

		while (p > 0 && kx > (by_slot ? tk_taco_slot_key(&e[p - 1])
					      : e[p - 1].key)) {
			e[p] = e[p - 1];
			p--;
		}
		e[p] = x;
	}
}

/* ---- the step (step 5) ----------------------------------------------- */

/* Steps W[at] (row r*, column j of the whole tensor) by -lr * sign(v)
 * with the decoupled decay: a = w * decay, then a - lr or a + lr, written
 * back in dtype. BF16 with a->stochastic rounds stochastically with the low
 * 32 bits of splitmix64(hbase ^ j), so the bits do not depend on how the
 * columns are split among threads or blocks; F16 (the spec has no
 * stochastic f16) and nearest BF16 round to nearest even. */
static inline TK_HD void tk_taco_step_weight(void *W, int dtype, size_t at,
					     float v, const tk_taco_args *a,
					     float decay, uint64_t hbase, int j)
{
	float w = tk_load_f32(W, dtype, at);
	float x = tk_fmul_rn(w, decay);
	float nw = v > 0.0f ? tk_fsub_rn(x, a->lr) : tk_fadd_rn(x, a->lr);

	if (dtype == TK_BF16 && a->stochastic) {
		uint32_t h = (uint32_t)tk_splitmix64(hbase ^ (uint64_t)j);

		((uint16_t *)W)[at] = tk_f32_bf16_sr(nw, h);
	} else {
		tk_store_f32_rne(W, dtype, at, nw);
	}
}

/* ---- a column's finish (steps 2.-6.) ---------------------------------- */

/* Finishes column j (of the whole tensor) after its scan: trow, tval and
 * tg [ntrk] are the tracked rows (tk_taco_decode_col), their decoded
 * values and this step's gradients; crow and cg [ncand] the candidates,
 * the k best untracked rows by (|G| desc, row asc) with their gradients,
 * in any order. decay and hbase: tk_taco_decay, tk_taco_hbase. A column
 * whose scan found a non-finite gradient must not come here; a non-finite
 * tracked or proposed value returns before anything is written. */
static inline TK_HD void
tk_taco_finish_col(void *W, int dtype, void *idx, uint8_t *q, float *scale,
		   const tk_taco_args *a, int j, int ntrk, const uint32_t *trow,
		   const float *tval, const float *tg, int ncand,
		   const uint32_t *crow, const float *cg, float decay,
		   uint64_t hbase)
{
	const int k = a->k, wide = tk_taco_wide(a->R);
	const float beta = a->beta, omb = tk_fsub_rn(1.0f, beta);
	tk_taco_ent e[2 * TK_TACO_KMAX];
	int ne = 0, nkeep;
	float amax, sc;

	for (int s = 0; s < ntrk; s++) { /* 2. track */
		uint32_t r = trow[s];
		float t1 = tk_fmul_rn(beta, tval[s]);
		float t2 = tk_fmul_rn(omb, tg[s]);
		float v = tk_fadd_rn(t1, t2);

		if (!tk_taco_enter(e, &ne, v, 0, r))
			return;
	}
	for (int s = 0; s < ncand; s++) { /* 3. propose */
		uint32_t r = crow[s];
		float u = tk_fmul_rn(omb, cg[s]);

		if (!tk_taco_enter(e, &ne, u, 1, r))
			return;
	}
	/* 4. merge: keep the k first in merge order, then order them as
	 * slots (slot 0 = s*, argmax |v| with ties to the smaller row). */
	tk_taco_sort(e, ne, 0);
	nkeep = ne < k ? ne : k;
	tk_taco_sort(e, nkeep, 1);

	if (nkeep > 0) /* 5. select and step */
		tk_taco_step_weight(W, dtype,
				    (size_t)e[0].row * (size_t)a->C + (size_t)j,
				    e[0].v, a, decay, hbase, j);

	/* 6. requantize, from the fp32 values of 4. */
	amax = nkeep > 0 ? fabsf(e[0].v) : 0.0f;
	sc = tk_fdiv_rn(amax, 448.0f);
	for (int s = 0; s < k; s++) {
		size_t at = (size_t)j * (size_t)k + (size_t)s;

		if (s < nkeep) {
			tk_taco_idx_set(idx, wide, at, e[s].row);
			q[at] = tk_fp8_e4m3_encode(tk_fdiv_rn(e[s].v, sc));
		} else {
			tk_taco_idx_set(idx, wide, at, tk_taco_empty(wide));
			q[at] = 0;
		}
	}
	scale[j] = nkeep > 0 ? sc : 0.0f;
}

#endif
