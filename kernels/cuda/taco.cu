/* taco.cu: one TACO optimizer step on the GPU (docs/taco.md), bit for
 * bit the CPU reference kernels/cpu/taco.c. The per-column logic (decode,
 * the merge keys and sorts, the weight step and its rounding,
 * requantization) is kernels/tk_taco.h, one definition for both backends,
 * with the choices the spec leaves open; each fp32 operation there is
 * rounded on its own (tk_fmul_rn and the others are __fmul_rn and its
 * kin on the device, and the file is built with -fmad=false). The
 * conversions and the hash are tk_convert.h and tk_hash.h. This file is
 * how the GPU walks the columns and rows to find each column's candidates.
 *
 * Two ways in, one finish (tk_taco_finish_col):
 *
 * taco_update (columns [col0, col0 + ncols) of W, G [R, ncols] with row
 * stride ldg; G's column c is W's column j = col0 + c, and j is what the
 * state, W and the stochastic-rounding hash use). G is row-major, so a
 * block takes TACO_COLS = 32 adjacent columns (threadIdx.x) and every row
 * it reads is one coalesced 128-byte line. The rows of those columns are
 * split among nseg warps (threadIdx.y): warp y scans rows y, y + nseg, ...
 * and keeps, per column, the k best untracked rows it saw by (|G| desc,
 * row asc). That order is total, so the k best of the union of the
 * per-warp lists are the k best of the column: warp 0 merges the lists in
 * shared memory and then finishes its column.
 *
 * The row-streamed update (taco_begin, taco_feed..., taco_finish) keeps the
 * same per-column scan state in the caller's scan buffer between calls:
 * begin decodes the slots; each feed scans its rows (the same kernel shape
 * as above, and the chunk's rows also split across TACO_SPLIT blocks per
 * column group, each writing its block's list to a partial slot of the
 * scan buffer), then a merge kernel folds the partial lists into the
 * column's list (the same total order, so the union over feeds and blocks
 * is the k best of the column) and picks up the gradients of the tracked
 * rows this feed holds; finish runs tk_taco_finish_col from the state. Rows
 * never fed have gradient +0: a tracked row's gradient starts as +0, and a row
 * with G = 0 never proposes, as in the dense update. Rows come in strictly
 * increasing order across feeds, so a fed row with |G| equal to the
 * column's current threshold loses the tie, exactly as on the CPU.
 *
 * Scan buffer of C columns, 4-byte words, slot-major so that a warp of
 * adjacent columns reads a line (column j of array X at X[s * C + j]):
 *   thr [C]          a row is looked at iff !(|G| <= thr)
 *   ncand [C], worst [C], ntrk [C], bad [C]
 *   trow [16][C]     tracked rows (decoded slots, in slot order)
 *   tval [16][C]     their decoded values
 *   tg [16][C]       their gradients (+0 until fed)
 *   crow [16][C]     candidates (unsorted) and their gradients
 *   cg [16][C]
 *   pn [4][C], pbad [4][C], prow [4][16][C], pg [4][16][C]: the per-block
 *                    partial lists of one feed (TACO_SPLIT = 4)
 * = (5 + 5 * 16 + 4 * (2 + 2 * 16)) * 4 = 884 bytes per column, sized for
 * k = 16 whatever k is (taco_scan_bytes depends on C only).
 */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "cuda_ops.h"
#include "tk_taco.h"

#define TACO_COLS 32	      /* columns per block: one warp wide */
#define TACO_SMEM (48 * 1024) /* static limit: no opt-in needed */
#define TACO_SEG_MAX 32	      /* warps per block (1024 threads) */
#define TACO_SPLIT 4	      /* feed: blocks per column group, at most */

/* ---- candidate lists ------------------------------------------------------
 */

/* The k best untracked rows seen so far, unsorted; once full, worst is the
 * one a better row replaces (smallest |G|, of equal ones the largest row)
 * and thr its |G|. */
struct taco_cands {
	uint32_t row[TK_TACO_KMAX];
	float g[TK_TACO_KMAX];
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

/* Shared memory of a scan block with nseg warps and k slots, 4-byte words:
 * trow [TACO_COLS][TK_TACO_KMAX], ntrk [TACO_COLS], then per (warp, column):
 * count, bad flag, rows [k] and gradients [k]. */
static size_t taco_smem_bytes(int nseg, int k)
{
	return 4 * ((size_t)TACO_COLS * TK_TACO_KMAX + TACO_COLS +
		    (size_t)nseg * TACO_COLS * (2 + 2 * (size_t)k));
}

/* Warps of a scan block: as many as the candidate lists fit in static
 * shared memory (32 at k = 1, 8 at k = 16), and no more than rows. */
static int taco_nseg(int k, long long rows)
{
	int nseg = TACO_SEG_MAX;

	while (nseg > 1 && taco_smem_bytes(nseg, k) > TACO_SMEM)
		nseg /= 2;
	while (nseg > 1 && nseg / 2 >= rows)
		nseg /= 2;
	return nseg;
}

/* Pointers into the shared memory of a scan block. */
struct scan_smem {
	uint32_t *trow; /* [TACO_COLS][TK_TACO_KMAX] */
	int *ntrk;	/* [TACO_COLS] */
	int *cnt;	/* [nseg * TACO_COLS] */
	int *bad;	/* [nseg * TACO_COLS] */
	uint32_t *crow; /* [nseg * TACO_COLS][k] */
	float *cg;	/* [nseg * TACO_COLS][k] */
};

static __device__ scan_smem scan_smem_at(uint32_t *tsm, int nseg, int k)
{
	scan_smem m;

	m.trow = tsm;
	m.ntrk = (int *)(m.trow + TACO_COLS * TK_TACO_KMAX);
	m.cnt = m.ntrk + TACO_COLS;
	m.bad = m.cnt + nseg * TACO_COLS;
	m.crow = (uint32_t *)(m.bad + nseg * TACO_COLS);
	m.cg = (float *)(m.crow + (size_t)nseg * TACO_COLS * k);
	return m;
}

/* Looks at row r's gradient gv of this thread's column: a row is looked at
 * further only where !(|G| <= thr) (beats the current worst, or is NaN),
 * as on the CPU; a non-finite value marks the column bad. */
static __device__ void visit(taco_cands &cd, int &bad, int k,
			     const uint32_t *trow, int ntrk, float gv,
			     uint32_t r)
{
	float m = fabsf(gv);

	if (m <= cd.thr)
		return;
	if (!(m <= FLT_MAX)) {
		bad = 1;
		cd.thr = INFINITY;
		return;
	}
	for (int s = 0; s < ntrk; s++)
		if (trow[s] == r)
			return;
	cand_offer(&cd, k, r, gv, m);
}

/* Warp 0 of a scan block gathers the other warps' lists into its own cd
 * (and their bad flags); every thread of the block calls it. */
static __device__ void block_merge(const scan_smem &sm, int nseg, int k,
				   taco_cands &cd, int &bad)
{
	const int tx = threadIdx.x, ty = threadIdx.y;
	const int slot = ty * TACO_COLS + tx;

	if (ty > 0) {
		sm.cnt[slot] = cd.n;
		sm.bad[slot] = bad;
		for (int s = 0; s < cd.n; s++) {
			sm.crow[(size_t)slot * k + s] = cd.row[s];
			sm.cg[(size_t)slot * k + s] = cd.g[s];
		}
	}
	__syncthreads();
	if (ty != 0)
		return;
	for (int sg = 1; sg < nseg; sg++) {
		const int o = sg * TACO_COLS + tx;

		bad |= sm.bad[o];
		for (int s = 0; s < sm.cnt[o]; s++) {
			float g = sm.cg[(size_t)o * k + s];

			cand_offer(&cd, k, sm.crow[(size_t)o * k + s], g,
				   fabsf(g));
		}
	}
}

/* ---- taco_update: one pass over the dense gradient ----------------------
 */

/* grid: ceil(ncols / 32) blocks of (32, nseg) threads. */
static __global__ void __launch_bounds__(TACO_COLS *TACO_SEG_MAX)
    taco_kernel(void *W, int dtype, const float *G, int ldg, void *idx,
		uint8_t *q, float *scale, tk_taco_args a, uint64_t hbase,
		int nseg)
{
	extern __shared__ uint32_t tsm[];
	const int k = a.k, R = a.R;
	const int tx = threadIdx.x, ty = threadIdx.y;
	const int c = blockIdx.x * TACO_COLS + tx; /* column of G */
	const int j = a.col0 + c;		   /* column of W */
	const scan_smem sm = scan_smem_at(tsm, nseg, k);
	const uint32_t *trow = sm.trow + tx * TK_TACO_KMAX;
	float tval[TK_TACO_KMAX], tg[TK_TACO_KMAX];
	taco_cands cd;
	int bad = 0, ntrk;

	/* 1. decode the state (warp 0; the others only need the rows) */
	if (ty == 0)
		sm.ntrk[tx] = c < a.ncols
				  ? tk_taco_decode_col(
					idx, q, scale, &a, j,
					sm.trow + tx * TK_TACO_KMAX, 1, tval, 1)
				  : 0;
	__syncthreads();
	ntrk = sm.ntrk[tx];

	/* Scan this warp's rows: proposals and non-finite detection. */
	cd.n = 0;
	cd.worst = 0;
	cd.thr = 0.0f;
	if (c < a.ncols) {
		const float *gc = G + c;
		int r = ty;

		/* four independent loads in flight per thread */
		for (; R - r > 3 * nseg; r += 4 * nseg) {
			float g0 = gc[(size_t)r * ldg];
			float g1 = gc[(size_t)(r + nseg) * ldg];
			float g2 = gc[(size_t)(r + 2 * nseg) * ldg];
			float g3 = gc[(size_t)(r + 3 * nseg) * ldg];

			visit(cd, bad, k, trow, ntrk, g0, (uint32_t)r);
			visit(cd, bad, k, trow, ntrk, g1, (uint32_t)(r + nseg));
			visit(cd, bad, k, trow, ntrk, g2,
			      (uint32_t)(r + 2 * nseg));
			visit(cd, bad, k, trow, ntrk, g3,
			      (uint32_t)(r + 3 * nseg));
		}
		for (; r < R; r += nseg)
			visit(cd, bad, k, trow, ntrk, gc[(size_t)r * ldg],
			      (uint32_t)r);
	}
	block_merge(sm, nseg, k, cd, bad);
	if (ty != 0 || c >= a.ncols || bad)
		return;
	for (int s = 0; s < ntrk; s++)
		tg[s] = G[(size_t)trow[s] * ldg + c];
	tk_taco_finish_col(W, dtype, idx, q, scale, &a, j, ntrk, trow, tval, tg,
			   cd.n, cd.row, cd.g, tk_taco_decay(&a), hbase);
}

/* Shapes the update takes (the CPU's checks): invalid ones are a no-op. */
static int taco_valid(int dtype, const tk_taco_args *a)
{
	return tk_taco_args_ok(a) && tk_taco_dtype_ok(dtype);
}

extern "C" void tkc_taco_update(void *W, int dtype, const float *G, int ldg,
				void *idx, uint8_t *q, float *scale,
				const tk_taco_args *a)
{
	int nseg;
	unsigned blocks;

	/* Invalid arguments are a no-op, as on the CPU. */
	if (!taco_valid(dtype, a) || !tk_taco_range_ok(a, ldg))
		return;
	nseg = taco_nseg(a->k, a->R);
	blocks = (unsigned)(((size_t)a->ncols + TACO_COLS - 1) / TACO_COLS);
	taco_kernel<<<blocks, dim3(TACO_COLS, nseg),
		      taco_smem_bytes(nseg, a->k), tkc_stream()>>>(
	    W, dtype, G, ldg, idx, q, scale, *a, tk_taco_hbase(a), nseg);
	tkc_check_launch("taco_update");
}

/* ---- the row-streamed update --------------------------------------------
 */

#define SCAN_WORDS (5 + 5 * TK_TACO_KMAX + TACO_SPLIT * (2 + 2 * TK_TACO_KMAX))

/* The arrays of a scan buffer of C columns (layout at the top). */
struct taco_scan {
	float *thr;
	int *ncand, *worst, *ntrk, *bad;
	uint32_t *trow;
	float *tval, *tg;
	uint32_t *crow;
	float *cg;
	int *pn, *pbad;
	uint32_t *prow;
	float *pg;
};

static __host__ __device__ taco_scan scan_at(void *p, int C)
{
	const size_t n = (size_t)C, nk = n * TK_TACO_KMAX;
	taco_scan s;

	s.thr = (float *)p;
	s.ncand = (int *)(s.thr + n);
	s.worst = s.ncand + n;
	s.ntrk = s.worst + n;
	s.bad = s.ntrk + n;
	s.trow = (uint32_t *)(s.bad + n);
	s.tval = (float *)(s.trow + nk);
	s.tg = s.tval + nk;
	s.crow = (uint32_t *)(s.tg + nk);
	s.cg = (float *)(s.crow + nk);
	s.pn = (int *)(s.cg + nk);
	s.pbad = s.pn + TACO_SPLIT * n;
	s.prow = (uint32_t *)(s.pbad + TACO_SPLIT * n);
	s.pg = (float *)(s.prow + TACO_SPLIT * nk);
	return s;
}

/* The size every backend gives (tk_ops.h), which holds this layout. */
static_assert(SCAN_WORDS * 4 <= 896, "the scan outgrew tk_taco_scan_bytes");

extern "C" size_t tkc_taco_scan_bytes(int C)
{
	return tk_taco_scan_bytes(C);
}

/* Column j's candidates from the scan state. */
static __device__ taco_cands load_cands(const taco_scan &s, int C, int k, int j)
{
	taco_cands cd;

	cd.n = s.ncand[j];
	cd.worst = s.worst[j];
	cd.thr = s.thr[j];
	for (int i = 0; i < cd.n && i < k; i++) {
		cd.row[i] = s.crow[(size_t)i * C + j];
		cd.g[i] = s.cg[(size_t)i * C + j];
	}
	return cd;
}

/* One thread per column: decode, empty lists, gradients +0. */
static __global__ void taco_begin_kernel(taco_scan s, const void *idx,
					 const uint8_t *q, const float *scale,
					 tk_taco_args a)
{
	const int C = a.C;
	const int j = blockIdx.x * blockDim.x + threadIdx.x;
	int n;

	if (j >= C)
		return;
	n = tk_taco_decode_col(idx, q, scale, &a, j, s.trow + j, (size_t)C,
			       s.tval + j, (size_t)C);
	for (int i = 0; i < TK_TACO_KMAX; i++) {
		s.tg[(size_t)i * C + j] = 0.0f;
		if (i >= n) {
			s.trow[(size_t)i * C + j] = 0xFFFFFFFFu;
			s.tval[(size_t)i * C + j] = 0.0f;
		}
	}
	s.ntrk[j] = n;
	s.ncand[j] = 0;
	s.worst[j] = 0;
	s.thr[j] = 0.0f;
	s.bad[j] = 0;
}

/* Scans chunk rows [lo, lo + per) (block y's share, lo = y * per) of G
 * [nrows, C]; row i of the chunk is row rows[i] of W, or row0 + i. Writes
 * the block's list to partial slot y. grid (ceil(C / 32), nsplit), block
 * (32, nseg). */
static __global__ void __launch_bounds__(TACO_COLS *TACO_SEG_MAX)
    taco_feed_kernel(taco_scan s, const float *G, int ldg, const int32_t *rows,
		     int row0, int nrows, int per, tk_taco_args a, int nseg)
{
	extern __shared__ uint32_t tsm[];
	const int k = a.k, C = a.C, R = a.R;
	const int tx = threadIdx.x, ty = threadIdx.y, y = blockIdx.y;
	const int j = blockIdx.x * TACO_COLS + tx;
	const scan_smem sm = scan_smem_at(tsm, nseg, k);
	const uint32_t *trow = sm.trow + tx * TK_TACO_KMAX;
	const int lo = y * per, hi = min(nrows, lo + per);
	taco_cands cd;
	int bad = 0, ntrk;

	if (ty == 0) {
		int n = j < C && !s.bad[j] ? s.ntrk[j] : 0;

		for (int i = 0; i < n; i++)
			sm.trow[tx * TK_TACO_KMAX + i] =
			    s.trow[(size_t)i * C + j];
		sm.ntrk[tx] = n;
	}
	__syncthreads();
	ntrk = sm.ntrk[tx];

	cd.n = 0;
	cd.worst = 0;
	/* The column's threshold so far: every row of this feed comes after
	 * the rows of its list, so one with |G| == thr loses the tie. */
	cd.thr = j < C ? s.thr[j] : INFINITY;
	if (j < C && !s.bad[j]) {
		const float *gc = G + j;
		int i = lo + ty;

		for (; hi - i > 3 * nseg; i += 4 * nseg) {
			float g0 = gc[(size_t)i * ldg];
			float g1 = gc[(size_t)(i + nseg) * ldg];
			float g2 = gc[(size_t)(i + 2 * nseg) * ldg];
			float g3 = gc[(size_t)(i + 3 * nseg) * ldg];
			int r0, r1, r2, r3;

			if (rows) {
				r0 = rows[i];
				r1 = rows[i + nseg];
				r2 = rows[i + 2 * nseg];
				r3 = rows[i + 3 * nseg];
			} else {
				r0 = row0 + i;
				r1 = r0 + nseg;
				r2 = r0 + 2 * nseg;
				r3 = r0 + 3 * nseg;
			}
			/* a row outside W (a caller's bug) is never taken */
			if (r0 >= 0 && r0 < R)
				visit(cd, bad, k, trow, ntrk, g0, (uint32_t)r0);
			if (r1 >= 0 && r1 < R)
				visit(cd, bad, k, trow, ntrk, g1, (uint32_t)r1);
			if (r2 >= 0 && r2 < R)
				visit(cd, bad, k, trow, ntrk, g2, (uint32_t)r2);
			if (r3 >= 0 && r3 < R)
				visit(cd, bad, k, trow, ntrk, g3, (uint32_t)r3);
		}
		for (; i < hi; i += nseg) {
			int r = rows ? rows[i] : row0 + i;

			if (r >= 0 && r < R)
				visit(cd, bad, k, trow, ntrk,
				      gc[(size_t)i * ldg], (uint32_t)r);
		}
	}
	block_merge(sm, nseg, k, cd, bad);
	if (ty != 0 || j >= C)
		return;
	s.pn[(size_t)y * C + j] = cd.n;
	s.pbad[(size_t)y * C + j] = bad;
	for (int i = 0; i < cd.n; i++) {
		const size_t at = ((size_t)y * TK_TACO_KMAX + i) * C + j;

		s.prow[at] = cd.row[i];
		s.pg[at] = cd.g[i];
	}
}

/* Index of row r in the ascending rows [n], or -1. */
static __device__ int find_row(const int32_t *rows, int n, uint32_t r)
{
	int lo = 0, hi = n - 1;

	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2;
		uint32_t v = (uint32_t)rows[mid];

		if (rows[mid] >= 0 && v == r)
			return mid;
		if (rows[mid] < 0 || v < r)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return -1;
}

/* One thread per column: folds the nsplit partial lists of this feed into
 * the column's list and picks up the fed gradients of its tracked rows. */
static __global__ void taco_feed_merge_kernel(taco_scan s, const float *G,
					      int ldg, const int32_t *rows,
					      int row0, int nrows,
					      tk_taco_args a, int nsplit)
{
	const int C = a.C, k = a.k;
	const int j = blockIdx.x * blockDim.x + threadIdx.x;
	taco_cands cd;
	int bad = 0;

	if (j >= C || s.bad[j])
		return;
	for (int y = 0; y < nsplit; y++)
		bad |= s.pbad[(size_t)y * C + j];
	if (bad) {
		s.bad[j] = 1;
		s.thr[j] = INFINITY;
		return;
	}
	cd = load_cands(s, C, k, j);
	for (int y = 0; y < nsplit; y++) {
		const int n = s.pn[(size_t)y * C + j];

		for (int i = 0; i < n; i++) {
			const size_t at =
			    ((size_t)y * TK_TACO_KMAX + i) * C + j;
			float g = s.pg[at];

			cand_offer(&cd, k, s.prow[at], g, fabsf(g));
		}
	}
	s.ncand[j] = cd.n;
	s.worst[j] = cd.worst;
	s.thr[j] = cd.thr;
	for (int i = 0; i < cd.n; i++) {
		s.crow[(size_t)i * C + j] = cd.row[i];
		s.cg[(size_t)i * C + j] = cd.g[i];
	}
	for (int i = 0; i < s.ntrk[j]; i++) {
		const uint32_t r = s.trow[(size_t)i * C + j];
		long long at = -1;

		if (rows)
			at = find_row(rows, nrows, r);
		else if ((long long)r >= row0 && (long long)r - row0 < nrows)
			at = (long long)r - row0;
		if (at >= 0)
			s.tg[(size_t)i * C + j] = G[(size_t)at * ldg + j];
	}
}

/* One thread per column: tk_taco_finish_col from the scan state. */
static __global__ void taco_finish_kernel(taco_scan s, void *W, int dtype,
					  void *idx, uint8_t *q, float *scale,
					  tk_taco_args a, uint64_t hbase)
{
	const int C = a.C, k = a.k;
	const int j = blockIdx.x * blockDim.x + threadIdx.x;
	uint32_t trow[TK_TACO_KMAX];
	float tval[TK_TACO_KMAX], tg[TK_TACO_KMAX];
	taco_cands cd;
	int ntrk;

	if (j >= C || s.bad[j])
		return;
	ntrk = s.ntrk[j];
	for (int i = 0; i < ntrk; i++) {
		trow[i] = s.trow[(size_t)i * C + j];
		tval[i] = s.tval[(size_t)i * C + j];
		tg[i] = s.tg[(size_t)i * C + j];
	}
	cd = load_cands(s, C, k, j);
	tk_taco_finish_col(W, dtype, idx, q, scale, &a, j, ntrk, trow, tval, tg,
			   cd.n, cd.row, cd.g, tk_taco_decay(&a), hbase);
}

static unsigned col_blocks(int C)
{
	return (unsigned)(((size_t)C + TKC_THREADS - 1) / TKC_THREADS);
}

extern "C" void tkc_taco_begin(void *scan, const void *idx, const uint8_t *q,
			       const float *scale, const tk_taco_args *a)
{
	if (!taco_valid(TK_F32, a))
		return;
	taco_begin_kernel<<<col_blocks(a->C), TKC_THREADS, 0, tkc_stream()>>>(
	    scan_at(scan, a->C), idx, q, scale, *a);
	tkc_check_launch("taco_begin");
}

extern "C" void tkc_taco_feed(void *scan, const float *G, int ldg,
			      const int32_t *rows, int row0, int nrows,
			      const tk_taco_args *a)
{
	const unsigned cblocks =
	    a ? (unsigned)(((size_t)a->C + TACO_COLS - 1) / TACO_COLS) : 0;
	int nseg, nsplit = 1, per;

	if (!taco_valid(TK_F32, a) || nrows <= 0 || ldg < a->C)
		return;
	if (!rows) { /* rows past W are not W's: never looked at */
		if (row0 < 0 || row0 >= a->R)
			return;
		if (nrows > a->R - row0)
			nrows = a->R - row0;
	}
	/* Enough blocks to fill the device (a few hundred), each with a few
	 * rows per warp at least. */
	nseg = taco_nseg(a->k, nrows);
	while (nsplit < TACO_SPLIT && (size_t)cblocks * nsplit < 512 &&
	       nrows >= 2 * nsplit * nseg * 16)
		nsplit *= 2;
	per = (nrows + nsplit - 1) / nsplit;
	nseg = taco_nseg(a->k, per);
	taco_feed_kernel<<<dim3(cblocks, nsplit), dim3(TACO_COLS, nseg),
			   taco_smem_bytes(nseg, a->k), tkc_stream()>>>(
	    scan_at(scan, a->C), G, ldg, rows, row0, nrows, per, *a, nseg);
	if (tkc_check_launch("taco_feed scan"))
		return;
	taco_feed_merge_kernel<<<col_blocks(a->C), TKC_THREADS, 0,
				 tkc_stream()>>>(scan_at(scan, a->C), G, ldg,
						 rows, row0, nrows, *a, nsplit);
	tkc_check_launch("taco_feed merge");
}

extern "C" void tkc_taco_finish(void *scan, void *W, int dtype, void *idx,
				uint8_t *q, float *scale, const tk_taco_args *a)
{
	if (!taco_valid(dtype, a))
		return;
	taco_finish_kernel<<<col_blocks(a->C), TKC_THREADS, 0, tkc_stream()>>>(
	    scan_at(scan, a->C), W, dtype, idx, q, scale, *a, tk_taco_hbase(a));
	tkc_check_launch("taco_finish");
}

/* One thread per slot: a copy of one entry (tk_ops.h). */
static __global__ void taco_gather_kernel(void *vals, const void *W, int es,
					  const void *idx, int R, int C, int k)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	size_t n = (size_t)C * (size_t)k;
	size_t j, at;
	uint32_t r;

	if (i >= n)
		return;
	j = i / (size_t)k;
	if (!tk_taco_slot_row(idx, R, i, &r)) {
		if (es == 4)
			((uint32_t *)vals)[i] = 0;
		else
			((uint16_t *)vals)[i] = 0;
		return;
	}
	at = (size_t)r * (size_t)C + j;
	if (es == 4)
		((uint32_t *)vals)[i] = ((const uint32_t *)W)[at];
	else
		((uint16_t *)vals)[i] = ((const uint16_t *)W)[at];
}

void tkc_taco_gather(void *vals, const void *W, int dtype, const void *idx,
		     int R, int C, int k)
{
	size_t n = (size_t)C * (size_t)k;
	int es = dtype == TK_F32 ? 4 : 2;

	if (!n)
		return;
	taco_gather_kernel<<<(unsigned)((n + TKC_THREADS - 1) / TKC_THREADS),
			     TKC_THREADS, 0, tkc_stream()>>>(vals, W, es, idx,
							     R, C, k);
	tkc_check_launch("taco_gather");
}
