/* taco.cu: one TACO optimizer step on the GPU (docs/taco.md), bit for
 * bit the CPU reference kernels/cpu/taco.c: the same arithmetic (each fp32
 * operation rounded on its own: __fmul_rn / __fadd_rn / __fdiv_rn, and the
 * file is built with -fmad=false), the same merge keys and insertion sorts,
 * the same FP8 E4M3 / bf16 / f16 conversions and the same hash (one
 * definition for both: kernels/tk_convert.h, kernels/tk_hash.h), the same
 * non-finite column skip and corrupt-slot rules. The choices the spec leaves
 * open are documented in kernels/cpu/taco.c.
 *
 * Layout: G [R, C] is row-major, so a block takes TACO_COLS = 32 adjacent
 * columns (threadIdx.x) and every row it reads is one coalesced 128-byte
 * line. The rows of those columns are split among nseg warps (threadIdx.y):
 * warp y scans rows y, y + nseg, ... and keeps, per column, the k best
 * untracked rows it saw by (|G| desc, row asc). That order is total, so the
 * k best of the union of the per-warp lists are the k best of the column:
 * warp 0 merges the lists in shared memory and then finishes its column
 * (track, merge, step, requantize) exactly like finish_column of the CPU.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "cuda_ops.h"
#include "tk_convert.h"
#include "tk_hash.h"

#define TACO_KMAX 16
#define TACO_COLS 32	      /* columns per block: one warp wide */
#define TACO_SMEM (48 * 1024) /* static limit: no opt-in needed */
#define TACO_SEG_MAX 32	      /* warps per block (1024 threads) */

/* ---- candidate lists ------------------------------------------------------
 */

/* The k best untracked rows seen so far, unsorted; once full, worst is the
 * one a better row replaces (smallest |G|, of equal ones the largest row)
 * and thr its |G|. */
struct taco_cands {
	uint32_t row[TACO_KMAX];
	float g[TACO_KMAX];
	int n, worst;
	float thr;
};

/* Offers row r with gradient g, |g| = m finite and > 0. Rows may come in
 * any order: the comparison is the full (|G| desc, row asc) order. */
static __device__ void cand_offer(taco_cands *c, int k, uint32_t r, float g,
				  float m)
{
	int w;

	if (c->n < k) {
		c->row[c->n] = r;
		c->g[c->n] = g;
		if (++c->n < k)
			return;
	} else {
		float wm = fabsf(c->g[c->worst]);

		if (!(m > wm || (m == wm && r < c->row[c->worst])))
			return;
		c->row[c->worst] = r;
		c->g[c->worst] = g;
	}
	w = 0;
	for (int s = 1; s < k; s++) {
		float ms = fabsf(c->g[s]), mw = fabsf(c->g[w]);

		if (ms < mw || (ms == mw && c->row[s] > c->row[w]))
			w = s;
	}
	c->worst = w;
	c->thr = fabsf(c->g[w]);
}

/* ---- merge (kernels/cpu/taco.c: merge_key, slot_key, sort_ents) ---------- */

struct taco_ent {
	uint64_t key;
	float v;
	uint32_t row;
};

static __device__ uint64_t merge_key(float mag, int proposed, uint32_t row)
{
	return (uint64_t)tk_f32_bits(mag) << 33 | (uint64_t)!proposed << 32 |
	       (uint64_t)(0xFFFFFFFFu - row);
}

static __device__ uint64_t slot_key(const taco_ent *e)
{
	return (e->key >> 33) << 32 | (e->key & 0xFFFFFFFFu);
}

static __device__ void sort_ents(taco_ent *e, int n, int by_slot)
{
	for (int i = 1; i < n; i++) {
		taco_ent x = e[i];
		uint64_t kx = by_slot ? slot_key(&x) : x.key;
		int p = i;

		while (p > 0 &&
		       kx > (by_slot ? slot_key(&e[p - 1]) : e[p - 1].key)) {
			e[p] = e[p - 1];
			p--;
		}
		e[p] = x;
	}
}

static __device__ uint32_t idx_get(const void *idx, int wide, size_t i)
{
	return wide ? ((const uint32_t *)idx)[i] : ((const uint16_t *)idx)[i];
}

static __device__ void idx_set(void *idx, int wide, size_t i, uint32_t row)
{
	if (wide)
		((uint32_t *)idx)[i] = row;
	else
		((uint16_t *)idx)[i] = (uint16_t)row;
}

/* Steps W[at] (row r*, column j) by -lr * sign(v): spec step 5. */
static __device__ void step_weight(void *W, int dtype, size_t at, float v,
				   const tk_taco_args &a, float decay,
				   uint64_t hbase, int j)
{
	float w, x, nw;

	w = tk_load_f32(W, dtype, at);
	x = __fmul_rn(w, decay);
	nw = v > 0.0f ? __fsub_rn(x, a.lr) : __fadd_rn(x, a.lr);
	if (dtype == TK_BF16 && a.stochastic) {
		uint32_t h = (uint32_t)tk_splitmix64(hbase ^ (uint64_t)j);

		((uint16_t *)W)[at] = tk_f32_bf16_sr(nw, h);
	} else {
		tk_store_f32_rne(W, dtype, at, nw);
	}
}

/* ---- the kernel -----------------------------------------------------------
 */

/* Shared memory of a block with nseg warps and k slots, 4-byte words:
 * trow [TACO_COLS][TACO_KMAX], ntrk [TACO_COLS], then per (warp, column):
 * count, bad flag, rows [k] and gradients [k]. */
static size_t taco_smem_bytes(int nseg, int k)
{
	return 4 * ((size_t)TACO_COLS * TACO_KMAX + TACO_COLS +
		    (size_t)nseg * TACO_COLS * (2 + 2 * (size_t)k));
}

/* grid: ceil(C / 32) blocks of (32, nseg) threads. */
static __global__ void __launch_bounds__(TACO_COLS *TACO_SEG_MAX)
    taco_kernel(void *W, int dtype, const float *G, void *idx, uint8_t *q,
		float *scale, tk_taco_args a, uint64_t hbase, int nseg)
{
	extern __shared__ uint32_t tsm[];
	const int k = a.k, R = a.R, C = a.C, wide = a.R > 65535;
	const int tx = threadIdx.x, ty = threadIdx.y;
	const int j = blockIdx.x * TACO_COLS + tx;
	const int slot = ty * TACO_COLS + tx;
	const uint32_t empty = wide ? 0xFFFFFFFFu : 0xFFFFu;
	uint32_t *trow_s = tsm;				       /* [32][KMAX] */
	int *ntrk_s = (int *)(trow_s + TACO_COLS * TACO_KMAX); /* [32] */
	int *cnt_s = ntrk_s + TACO_COLS;		       /* [nseg*32] */
	int *bad_s = cnt_s + nseg * TACO_COLS;		       /* [nseg*32] */
	uint32_t *crow_s = (uint32_t *)(bad_s + nseg * TACO_COLS);
	float *cg_s = (float *)(crow_s + (size_t)nseg * TACO_COLS * k);
	float tval[TACO_KMAX];
	taco_cands cd;
	int bad = 0, ntrk;

	/* 1. decode the state (warp 0; the others only need the rows) */
	if (ty == 0) {
		int n = 0;

		if (j < C) {
			const size_t o = (size_t)j * (size_t)k;

			for (int s = 0; s < k; s++) {
				uint32_t row = idx_get(idx, wide, o + s);

				if (row == empty || row >= (uint32_t)R)
					continue;
				trow_s[tx * TACO_KMAX + n] = row;
				tval[n] = __fmul_rn(
				    tk_fp8_e4m3_decode(q[o + s]), scale[j]);
				n++;
			}
		}
		ntrk_s[tx] = n;
	}
	__syncthreads();
	ntrk = ntrk_s[tx];

	/* Scan this warp's rows: proposals and non-finite detection. A row
	 * is looked at further only where !(|G| <= thr) (beats the current
	 * worst, or is NaN), as on the CPU. */
	cd.n = 0;
	cd.worst = 0;
	cd.thr = 0.0f;
	if (j < C) {
		const uint32_t *trow = trow_s + tx * TACO_KMAX;
		const float *gc = G + j;
		int r = ty;

#define TACO_VISIT(gv, rv)                                                     \
	do {                                                                   \
		float m_ = fabsf(gv);                                          \
		if (!(m_ <= cd.thr)) {                                         \
			int t_ = 0;                                            \
			if (!(m_ <= FLT_MAX)) {                                \
				bad = 1;                                       \
				cd.thr = INFINITY;                             \
			} else {                                               \
				for (int s_ = 0; s_ < ntrk; s_++)              \
					t_ |= trow[s_] == (uint32_t)(rv);      \
				if (!t_)                                       \
					cand_offer(&cd, k, (uint32_t)(rv), gv, \
						   m_);                        \
			}                                                      \
		}                                                              \
	} while (0)

		/* four independent loads in flight per thread */
		for (; R - r > 3 * nseg; r += 4 * nseg) {
			float g0 = gc[(size_t)r * C];
			float g1 = gc[(size_t)(r + nseg) * C];
			float g2 = gc[(size_t)(r + 2 * nseg) * C];
			float g3 = gc[(size_t)(r + 3 * nseg) * C];

			TACO_VISIT(g0, r);
			TACO_VISIT(g1, r + nseg);
			TACO_VISIT(g2, r + 2 * nseg);
			TACO_VISIT(g3, r + 3 * nseg);
		}
		for (; r < R; r += nseg) {
			float g0 = gc[(size_t)r * C];

			TACO_VISIT(g0, r);
		}
#undef TACO_VISIT
	}

	/* Publish the lists of warps 1.. for warp 0. */
	if (ty > 0) {
		cnt_s[slot] = cd.n;
		bad_s[slot] = bad;
		for (int s = 0; s < cd.n; s++) {
			crow_s[(size_t)slot * k + s] = cd.row[s];
			cg_s[(size_t)slot * k + s] = cd.g[s];
		}
	}
	__syncthreads();
	if (ty != 0 || j >= C)
		return;
	for (int sg = 1; sg < nseg; sg++) {
		const int o = sg * TACO_COLS + tx;

		bad |= bad_s[o];
		for (int s = 0; s < cnt_s[o]; s++) {
			float g = cg_s[(size_t)o * k + s];

			cand_offer(&cd, k, crow_s[(size_t)o * k + s], g,
				   fabsf(g));
		}
	}
	if (bad)
		return;

	/* 2.-6.: finish_column of kernels/cpu/taco.c */
	{
		const float beta = a.beta, omb = __fsub_rn(1.0f, beta);
		const float decay =
		    __fsub_rn(1.0f, __fmul_rn(a.lr, a.weight_decay));
		taco_ent e[2 * TACO_KMAX];
		int ne = 0, nkeep;
		float amax, sc;

		for (int s = 0; s < ntrk; s++) { /* 2. track */
			uint32_t r = trow_s[tx * TACO_KMAX + s];
			float g = G[(size_t)r * C + (size_t)j];
			float t1 = __fmul_rn(beta, tval[s]);
			float t2 = __fmul_rn(omb, g);
			float v = __fadd_rn(t1, t2);

			if (!(fabsf(v) <= FLT_MAX))
				return;
			if (v != 0.0f)
				e[ne++] = {merge_key(fabsf(v), 0, r), v, r};
		}
		for (int s = 0; s < cd.n; s++) { /* 3. propose */
			uint32_t r = cd.row[s];
			float u = __fmul_rn(omb, cd.g[s]);

			if (!(fabsf(u) <= FLT_MAX))
				return;
			if (u != 0.0f)
				e[ne++] = {merge_key(fabsf(u), 1, r), u, r};
		}
		sort_ents(e, ne, 0); /* 4. merge */
		nkeep = ne < k ? ne : k;
		sort_ents(e, nkeep, 1);

		if (nkeep > 0) /* 5. select and step */
			step_weight(W, dtype,
				    (size_t)e[0].row * (size_t)C + (size_t)j,
				    e[0].v, a, decay, hbase, j);

		amax = nkeep > 0 ? fabsf(e[0].v) : 0.0f; /* 6. requantize */
		sc = __fdiv_rn(amax, 448.0f);
		for (int s = 0; s < k; s++) {
			size_t at = (size_t)j * (size_t)k + (size_t)s;

			if (s < nkeep) {
				idx_set(idx, wide, at, e[s].row);
				q[at] =
				    tk_fp8_e4m3_encode(__fdiv_rn(e[s].v, sc));
			} else {
				idx_set(idx, wide, at, empty);
				q[at] = 0;
			}
		}
		scale[j] = nkeep > 0 ? sc : 0.0f;
	}
}

extern "C" void tkc_taco_update(void *W, int dtype, const float *G, void *idx,
				uint8_t *q, float *scale, const tk_taco_args *a)
{
	uint64_t hbase;
	int nseg = TACO_SEG_MAX;
	unsigned blocks;

	/* Invalid arguments are a no-op, as on the CPU. */
	if (!a || a->R <= 0 || a->C <= 0 || a->k < 1 || a->k > TACO_KMAX)
		return;
	if (dtype != TK_F32 && dtype != TK_BF16 && dtype != TK_F16)
		return;
	hbase =
	    tk_splitmix64(tk_splitmix64(a->seed ^ a->tensor_index) ^ a->step);

	/* As many row segments as the candidate lists fit in static shared
	 * memory (32 at k = 1, 8 at k = 16), and no more than rows. */
	while (nseg > 1 && taco_smem_bytes(nseg, a->k) > TACO_SMEM)
		nseg /= 2;
	while (nseg > 1 && nseg / 2 >= a->R)
		nseg /= 2;
	blocks = (unsigned)(((size_t)a->C + TACO_COLS - 1) / TACO_COLS);
	taco_kernel<<<blocks, dim3(TACO_COLS, nseg),
		      taco_smem_bytes(nseg, a->k), tkc_stream()>>>(
	    W, dtype, G, idx, q, scale, *a, hbase, nseg);
	tkc_check_launch("taco_update");
}
