/* taco.c: one TACO optimizer step on the CPU (docs/taco.md).
 *
 * Every column j of W [R, C] is independent: decode its k slots, track them
 * with this step's gradient, propose the k largest untracked rows, merge,
 * step the selected entry of W, requantize. The per-column logic, its
 * arithmetic and the choices the spec leaves open are kernels/tk_taco.h,
 * shared with kernels/cuda/taco.cu; this file is how the CPU walks the
 * columns and rows (OpenMP ranges, an SSE2 scan) to find each column's
 * candidates.
 *
 * CPU layout: G is row-major, so a column is strided. Each thread takes one
 * contiguous range of columns and makes one pass over the rows, reading the
 * range's slice of each row in order. Per column it keeps the k best
 * untracked rows seen so far (unsorted) and the worst kept |G| as a
 * threshold; a row is looked at further only where |G| beats the threshold
 * (or is not finite), found 4 columns at a time with SSE2. Columns are
 * independent, so the result does not depend on the number of threads.
 *
 * taco_update works on a range of columns [col0, col0 + ncols) of W, with
 * G [R, ncols] (row stride ldg): column c of G is W's column j = col0 + c,
 * and everything that names a column (state, the stochastic-rounding hash,
 * W) uses the global j, so a range gives the bits the whole-tensor update
 * gives on those columns.
 *
 * Row-streamed update (taco_begin / taco_feed / taco_finish): the scan
 * state of all C columns lives in the caller's scan buffer; the rows are
 * offered as they are fed (they come in increasing order, so offer()'s
 * rules hold across feeds), a tracked row's gradient is recorded when it is
 * fed, and taco_finish runs the same finish_column on every column, with 0
 * for tracked rows never fed (a row never fed is a zero row, which the
 * dense scan never offers either). Scan buffer layout (taco_scan_bytes(C)
 * bytes, each array 64-byte aligned, sized for k = TK_TACO_KMAX so that the
 * size depends on C only):
 *   header   taco_scan_hdr (R, C, k, number of column groups)
 *   thr, ncand, worst, ntrk [C]          as in taco_block
 *   crow, cmag, cval, trow, tval [C * 16] as in taco_block
 *   tg [C * 16]      gradient of tracked slot s of column j at [j * 16 + s]
 *                    (0 until its row is fed)
 *   tlist [C * 16]   per group of TACO_GROUP columns, at [grp * 64 * 16],
 *                    its tracked slots as (row << 32 | (j % 64) * 16 + s),
 *                    sorted ascending: what a fed row must record
 *   tcnt, tcur [ngroups]  entries in each group's list, and the first one
 *                    whose row has not been passed yet
 *   bad [C]          as in taco_block
 */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "cpu_ops.h"
#include "tk_taco.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define TACO_GROUP 64	/* columns per scan mask */
#define TACO_PREFETCH 8 /* columns of tracked-row prefetch */

/* Scan state of a range of columns: column c of the range at [c], its
 * lists at [c * TK_TACO_KMAX ...]. Unused list entries hold row all ones and
 * |G| = +inf, so that the SIMD searches can read all TK_TACO_KMAX. */
typedef struct {
	int k;
	float *thr;	    /* a row is offered iff !(|G| <= thr) */
	int *ncand;	    /* candidates so far, <= k */
	int *worst;	    /* when ncand == k: the candidate to replace */
	int *ntrk;	    /* tracked (non-empty) slots */
	unsigned char *bad; /* a non-finite value seen: skip the column */
	uint32_t *crow;	    /* candidates (unsorted), their |G| and G */
	float *cmag;
	float *cval;
	uint32_t *trow; /* tracked rows and their decoded values */
	float *tval;
} taco_block;

/* Recording of the tracked rows' gradients during taco_feed, for the
 * groups of a view (see the scan layout above). */
typedef struct {
	const uint64_t *list; /* the first group's list */
	const int *cnt;
	int *cur;
	float *tg; /* column c, slot s of the view at [c * TK_TACO_KMAX + s] */
} taco_trk;

/* Fallback storage for TACO_GROUP columns when malloc fails. */
typedef struct {
	float thr[TACO_GROUP];
	int ncand[TACO_GROUP], worst[TACO_GROUP], ntrk[TACO_GROUP];
	unsigned char bad[TACO_GROUP];
	uint32_t crow[TACO_GROUP * TK_TACO_KMAX];
	float cmag[TACO_GROUP * TK_TACO_KMAX], cval[TACO_GROUP * TK_TACO_KMAX];
	uint32_t trow[TACO_GROUP * TK_TACO_KMAX];
	float tval[TACO_GROUP * TK_TACO_KMAX];
} taco_block_small;

/* Bit c set iff column c of this row must be offered: !(|g[c]| <= thr[c]),
 * i.e. |g| beats the threshold or is NaN. nb <= 64. */
static uint64_t scan_row(const float *g, const float *thr, int nb)
{
	uint64_t hit = 0;
	int c = 0;

#ifdef __SSE2__
	const __m128 absmask = _mm_castsi128_ps(_mm_set1_epi32(0x7FFFFFFF));

	for (; c + 4 <= nb; c += 4) {
		__m128 x = _mm_and_ps(_mm_loadu_ps(g + c), absmask);
		__m128 y = _mm_cmpnle_ps(x, _mm_loadu_ps(thr + c));

		hit |= (uint64_t)_mm_movemask_ps(y) << c;
	}
#endif
	for (; c < nb; c++)
		if (!(fabsf(g[c]) <= thr[c]))
			hit |= 1ull << c;
	return hit;
}

/* Is r one of the tracked rows trow[0 .. TK_TACO_KMAX)? */
static int is_tracked(const uint32_t *trow, uint32_t r)
{
#ifdef __SSE2__
	const __m128i x = _mm_set1_epi32((int)r);
	__m128i e0 = _mm_cmpeq_epi32(x, _mm_loadu_si128((const void *)trow));
	__m128i e1 =
	    _mm_cmpeq_epi32(x, _mm_loadu_si128((const void *)(trow + 4)));
	__m128i e2 =
	    _mm_cmpeq_epi32(x, _mm_loadu_si128((const void *)(trow + 8)));
	__m128i e3 =
	    _mm_cmpeq_epi32(x, _mm_loadu_si128((const void *)(trow + 12)));

	return _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(e0, e1),
					      _mm_or_si128(e2, e3))) != 0;
#else
	int hit = 0;

	for (int i = 0; i < TK_TACO_KMAX; i++)
		hit |= trow[i] == r;
	return hit;
#endif
}

/* The candidate a new row replaces in a full list: the smallest |G|, of
 * equal ones the largest row. */
static int worst_of(const float *cmag, const uint32_t *crow)
{
	unsigned eq;
	int w, i;
#ifdef __SSE2__
	__m128 x0 = _mm_loadu_ps(cmag), x1 = _mm_loadu_ps(cmag + 4);
	__m128 x2 = _mm_loadu_ps(cmag + 8), x3 = _mm_loadu_ps(cmag + 12);
	__m128 mn = _mm_min_ps(_mm_min_ps(x0, x1), _mm_min_ps(x2, x3));

	mn = _mm_min_ps(mn, _mm_shuffle_ps(mn, mn, _MM_SHUFFLE(1, 0, 3, 2)));
	mn = _mm_min_ps(mn, _mm_shuffle_ps(mn, mn, _MM_SHUFFLE(2, 3, 0, 1)));
	eq = (unsigned)_mm_movemask_ps(_mm_cmpeq_ps(x0, mn)) |
	     (unsigned)_mm_movemask_ps(_mm_cmpeq_ps(x1, mn)) << 4 |
	     (unsigned)_mm_movemask_ps(_mm_cmpeq_ps(x2, mn)) << 8 |
	     (unsigned)_mm_movemask_ps(_mm_cmpeq_ps(x3, mn)) << 12;
#else
	float mv = cmag[0];

	for (i = 1; i < TK_TACO_KMAX; i++)
		mv = cmag[i] < mv ? cmag[i] : mv;
	eq = 0;
	for (i = 0; i < TK_TACO_KMAX; i++)
		eq |= (unsigned)(cmag[i] == mv) << i;
#endif
	w = __builtin_ctz(eq);
	for (eq &= eq - 1; eq; eq &= eq - 1) {
		i = __builtin_ctz(eq);
		if (crow[i] > crow[w])
			w = i;
	}
	return w;
}

/* Row r of column c offers its gradient g, |g| = m, where !(m <= thr[c]).
 *
 * The candidates are kept unsorted (the merge sorts them). While fewer than
 * k, r is appended; then r replaces the worst candidate (worst_of). Rows
 * arrive in increasing order, so r loses every tie (m == thr is never
 * offered) and the list ends as the k best untracked rows by (|G| desc, row
 * asc). Rows with G = 0 never enter (thr >= 0); their proposal would be 0
 * and dropped by the merge anyway. */
static void offer(taco_block *b, int c, uint32_t r, float g, float m)
{
	const int k = b->k;
	const size_t o = (size_t)c * TK_TACO_KMAX;
	uint32_t *crow = b->crow + o;
	float *cmag = b->cmag + o;
	int n, pos;

	if (!(m <= FLT_MAX)) { /* NaN or infinity: the column is skipped */
		b->bad[c] = 1;
		b->thr[c] = INFINITY;
		return;
	}
	if (b->ntrk[c] && is_tracked(b->trow + o, r))
		return;
	n = b->ncand[c];
	pos = n < k ? n : b->worst[c];
	cmag[pos] = m;
	b->cval[o + pos] = g;
	crow[pos] = r;
	if (n < k)
		b->ncand[c] = ++n;
	if (n == k) {
		int w = worst_of(cmag, crow);

		b->worst[c] = w;
		b->thr[c] = cmag[w];
	}
}

/* Steps 2.-6. for column j (range column c) after the scan, unless the
 * scan found a non-finite gradient; tg [ntrk] holds the gradients of the
 * column's tracked rows. */
static void finish_column(void *W, int dtype, void *idx, uint8_t *q,
			  float *scale, const tk_taco_args *a,
			  const taco_block *b, int c, int j, float decay,
			  uint64_t hbase, const float *tg)
{
	const size_t o = (size_t)c * TK_TACO_KMAX;

	if (b->bad[c])
		return;
	tk_taco_finish_col(W, dtype, idx, q, scale, a, j, b->ntrk[c],
			   b->trow + o, b->tval + o, tg, b->ncand[c],
			   b->crow + o, b->cval + o, decay, hbase);
}

/* 1. Decodes the state of columns [j0, j0 + nb) into b (range column c =
 * column j0 + c). */
static void decode_cols(taco_block *b, const void *idx, const uint8_t *q,
			const float *scale, const tk_taco_args *a, int j0,
			int nb)
{
	for (int c = 0; c < nb; c++) {
		const size_t o = (size_t)c * TK_TACO_KMAX;

		b->thr[c] = 0.0f;
		b->ncand[c] = 0;
		b->worst[c] = 0;
		b->bad[c] = 0;
		for (int s = 0; s < TK_TACO_KMAX; s++) {
			b->crow[o + s] = 0xFFFFFFFFu;
			b->cmag[o + s] = INFINITY;
			b->cval[o + s] = 0.0f;
			b->trow[o + s] = 0xFFFFFFFFu;
			b->tval[o + s] = 0.0f;
		}
		b->ntrk[c] = tk_taco_decode_col(idx, q, scale, a, j0 + c,
						b->trow + o, 1, b->tval + o, 1);
	}
}

/* Offers nrows rows to the nb columns of b: row i of G (row stride ldg,
 * from the first column of b) is row rows[i], or row0 + i when rows is
 * NULL; rows increase. With t (taco_feed, b starting at a group), the rows
 * that columns track record their gradient in t->tg. */
static void scan_rows(taco_block *b, int nb, const float *G, size_t ldg,
		      const int32_t *rows, int row0, int nrows,
		      const taco_trk *t)
{
	for (int i = 0; i < nrows; i++) {
		const float *g = G + (size_t)i * ldg;
		uint32_t r = (uint32_t)(rows ? rows[i] : row0 + i);

		for (int c0 = 0; c0 < nb; c0 += TACO_GROUP) {
			int w = nb - c0 < TACO_GROUP ? nb - c0 : TACO_GROUP;
			uint64_t hit = scan_row(g + c0, b->thr + c0, w);

			while (hit) {
				int c = c0 + __builtin_ctzll(hit);

				hit &= hit - 1;
				offer(b, c, r, g[c], fabsf(g[c]));
			}
			if (t) {
				int gi = c0 / TACO_GROUP, n = t->cnt[gi];
				int cur = t->cur[gi];
				const uint64_t *l =
				    t->list + (size_t)c0 * TK_TACO_KMAX;
				float *tg = t->tg + (size_t)c0 * TK_TACO_KMAX;

				while (cur < n && (uint32_t)(l[cur] >> 32) < r)
					cur++;
				for (; cur < n && (uint32_t)(l[cur] >> 32) == r;
				     cur++) {
					uint32_t e = (uint32_t)l[cur];

					tg[e] = g[c0 + (int)(e / TK_TACO_KMAX)];
				}
				t->cur[gi] = cur;
			}
		}
	}
}

/* Runs columns [j0, j0 + nb) with the scan state in b; G at column j0. */
static void run_range(void *W, int dtype, const float *G, size_t ldg, void *idx,
		      uint8_t *q, float *scale, const tk_taco_args *a, int j0,
		      int nb, float decay, uint64_t hbase, taco_block *b)
{
	decode_cols(b, idx, q, scale, a, j0, nb);
	/* Scan: candidates for the proposals, and non-finite detection. */
	scan_rows(b, nb, G, ldg, NULL, 0, a->R, NULL);

	/* The tracked rows' gradients are scattered reads: prefetch them a
	 * few columns ahead. */
	for (int c = 0; c < nb; c++) {
		int cp = c + TACO_PREFETCH;
		float tg[TK_TACO_KMAX];

		if (cp < nb)
			for (int s = 0; s < b->ntrk[cp]; s++)
				__builtin_prefetch(
				    G +
				    (size_t)b->trow[(size_t)cp * TK_TACO_KMAX +
						    s] *
					ldg +
				    (size_t)cp);
		for (int s = 0; s < b->ntrk[c]; s++)
			tg[s] =
			    G[(size_t)b->trow[(size_t)c * TK_TACO_KMAX + s] *
				  ldg +
			      (size_t)c];
		finish_column(W, dtype, idx, q, scale, a, b, c, j0 + c, decay,
			      hbase, tg);
	}
}

/* Points b at storage for n columns in mem (4-byte arrays first, the byte
 * array last: all aligned). */
static void block_at(taco_block *b, char *mem, size_t n)
{
	const size_t nk = n * TK_TACO_KMAX;

	b->thr = (float *)mem;
	b->ncand = (int *)(b->thr + n);
	b->worst = b->ncand + n;
	b->ntrk = b->worst + n;
	b->crow = (uint32_t *)(b->ntrk + n);
	b->trow = b->crow + nk;
	b->cmag = (float *)(b->trow + nk);
	b->cval = b->cmag + nk;
	b->tval = b->cval + nk;
	b->bad = (unsigned char *)(b->tval + nk);
}

/* Runs columns [j0, j0 + nb): with heap scan state, or TACO_GROUP columns
 * at a time with stack state if the allocation fails. */
static void run_block(void *W, int dtype, const float *G, size_t ldg, void *idx,
		      uint8_t *q, float *scale, const tk_taco_args *a, int j0,
		      int nb, float decay, uint64_t hbase)
{
	const size_t n = (size_t)nb, nk = n * TK_TACO_KMAX;
	char *mem = malloc(n * (sizeof(float) + 3 * sizeof(int) + 1) +
			   nk * (2 * sizeof(uint32_t) + 3 * sizeof(float)));
	taco_block b = {.k = a->k};

	if (mem) {
		block_at(&b, mem, n);
		run_range(W, dtype, G, ldg, idx, q, scale, a, j0, nb, decay,
			  hbase, &b);
		free(mem);
		return;
	}
	for (int c0 = 0; c0 < nb; c0 += TACO_GROUP) {
		taco_block_small sm;

		b.thr = sm.thr;
		b.ncand = sm.ncand;
		b.worst = sm.worst;
		b.ntrk = sm.ntrk;
		b.bad = sm.bad;
		b.crow = sm.crow;
		b.cmag = sm.cmag;
		b.cval = sm.cval;
		b.trow = sm.trow;
		b.tval = sm.tval;
		run_range(W, dtype, G + c0, ldg, idx, q, scale, a, j0 + c0,
			  nb - c0 < TACO_GROUP ? nb - c0 : TACO_GROUP, decay,
			  hbase, &b);
	}
}

/* Splits ncols columns into ranges of whole TACO_GROUPs, one per thread
 * when work >= TK_CPU_PAR_MIN: *per columns each, the count returned. */
static long long split_cols(int ncols, long long work, long long *per)
{
	long long ngroups = ((long long)ncols + TACO_GROUP - 1) / TACO_GROUP;
	long long nblocks = work >= TK_CPU_PAR_MIN ? omp_get_max_threads() : 1;

	if (nblocks > ngroups)
		nblocks = ngroups;
	if (nblocks < 1)
		nblocks = 1;
	*per = (ngroups + nblocks - 1) / nblocks * TACO_GROUP;
	return (ncols + *per - 1) / *per;
}

void tk_cpu_taco_update(void *W, int dtype, const float *G, int ldg, void *idx,
			uint8_t *q, float *scale, const tk_taco_args *a)
{
	long long nblocks, per, blk;
	float decay;
	uint64_t hbase;

	if (!tk_taco_args_ok(a) || !tk_taco_dtype_ok(dtype) ||
	    !tk_taco_range_ok(a, ldg))
		return;
	decay = tk_taco_decay(a);
	hbase = tk_taco_hbase(a);

	/* One range of whole TACO_GROUPs per thread: wide ranges read long
	 * contiguous runs of each row. */
	nblocks = split_cols(a->ncols, (long long)a->R * a->ncols, &per);

#pragma omp parallel for schedule(static) if (nblocks > 1)
	for (blk = 0; blk < nblocks; blk++) {
		long long c0 = blk * per;
		long long nb = a->ncols - c0 < per ? a->ncols - c0 : per;

		run_block(W, dtype, G + c0, (size_t)ldg, idx, q, scale, a,
			  (int)(a->col0 + c0), (int)nb, decay, hbase);
	}
}

/* ---- the row-streamed update ------------------------------------------ */

typedef struct {
	int R, C, k, ngroups;
} taco_scan_hdr;

/* Byte offsets of the scan buffer's arrays (layout at the top). */
typedef struct {
	size_t thr, ncand, worst, ntrk, crow, cmag, cval, trow, tval, tg;
	size_t tlist, tcnt, tcur, bad, total;
} scan_layout;

static size_t align64(size_t x)
{
	return (x + 63) & ~(size_t)63;
}

static scan_layout layout_of(int C)
{
	const size_t n = (size_t)(C > 0 ? C : 0), nk = n * TK_TACO_KMAX;
	const size_t ng = (n + TACO_GROUP - 1) / TACO_GROUP;
	scan_layout l;
	size_t at = align64(sizeof(taco_scan_hdr));

#define SCAN_ARRAY(f, bytes)                                                   \
	do {                                                                   \
		l.f = at;                                                      \
		at = align64(at + (bytes));                                    \
	} while (0)
	SCAN_ARRAY(thr, n * sizeof(float));
	SCAN_ARRAY(ncand, n * sizeof(int));
	SCAN_ARRAY(worst, n * sizeof(int));
	SCAN_ARRAY(ntrk, n * sizeof(int));
	SCAN_ARRAY(crow, nk * sizeof(uint32_t));
	SCAN_ARRAY(cmag, nk * sizeof(float));
	SCAN_ARRAY(cval, nk * sizeof(float));
	SCAN_ARRAY(trow, nk * sizeof(uint32_t));
	SCAN_ARRAY(tval, nk * sizeof(float));
	SCAN_ARRAY(tg, nk * sizeof(float));
	SCAN_ARRAY(tlist, nk * sizeof(uint64_t));
	SCAN_ARRAY(tcnt, ng * sizeof(int));
	SCAN_ARRAY(tcur, ng * sizeof(int));
	SCAN_ARRAY(bad, n);
#undef SCAN_ARRAY
	l.total = at;
	return l;
}

/* The scan state of all C columns, a view starting at column c0 (a
 * multiple of TACO_GROUP for the recording). */
static void scan_views(void *scan, int C, int k, int c0, taco_block *b,
		       taco_trk *t)
{
	const scan_layout l = layout_of(C);
	char *m = scan;
	const size_t o = (size_t)c0, ok = o * TK_TACO_KMAX;

	b->k = k;
	b->thr = (float *)(m + l.thr) + o;
	b->ncand = (int *)(m + l.ncand) + o;
	b->worst = (int *)(m + l.worst) + o;
	b->ntrk = (int *)(m + l.ntrk) + o;
	b->crow = (uint32_t *)(m + l.crow) + ok;
	b->cmag = (float *)(m + l.cmag) + ok;
	b->cval = (float *)(m + l.cval) + ok;
	b->trow = (uint32_t *)(m + l.trow) + ok;
	b->tval = (float *)(m + l.tval) + ok;
	b->bad = (unsigned char *)(m + l.bad) + o;
	if (t) {
		t->list = (const uint64_t *)(m + l.tlist) + ok;
		t->cnt = (const int *)(m + l.tcnt) + o / TACO_GROUP;
		t->cur = (int *)(m + l.tcur) + o / TACO_GROUP;
		t->tg = (float *)(m + l.tg) + ok;
	}
}

/* The size every backend gives (tk_ops.h), which holds this layout: the
 * kernel tests check that it does. */
size_t tk_cpu_taco_scan_bytes(int C)
{
	size_t need = layout_of(C).total, fixed = tk_taco_scan_bytes(C);

	return need > fixed ? need : fixed;
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return (a > b) - (a < b);
}

/* Has the scan buffer been begun for this tensor's shape? */
static int scan_matches(const void *scan, const tk_taco_args *a)
{
	const taco_scan_hdr *h = scan;

	return scan && tk_taco_args_ok(a) && h->R == a->R && h->C == a->C &&
	       h->k == a->k;
}

void tk_cpu_taco_begin(void *scan, const void *idx, const uint8_t *q,
		       const float *scale, const tk_taco_args *a)
{
	const scan_layout l = layout_of(a ? a->C : 0);
	taco_scan_hdr *h = scan;
	int ngroups, gi;

	if (!scan || !tk_taco_args_ok(a))
		return;
	ngroups = (a->C + TACO_GROUP - 1) / TACO_GROUP;
	*h = (taco_scan_hdr){a->R, a->C, a->k, ngroups};

#pragma omp parallel for schedule(static) if ((long long)a->C * a->k >=        \
					      TK_CPU_PAR_MIN / 16)
	for (gi = 0; gi < ngroups; gi++) {
		const int c0 = gi * TACO_GROUP;
		const int nb = a->C - c0 < TACO_GROUP ? a->C - c0 : TACO_GROUP;
		taco_block b;
		taco_trk t;
		uint64_t *list;
		int n = 0;

		scan_views(scan, a->C, a->k, c0, &b, &t);
		decode_cols(&b, idx, q, scale, a, c0, nb);
		list = (uint64_t *)((char *)scan + l.tlist) +
		       (size_t)c0 * TK_TACO_KMAX;
		for (int c = 0; c < nb; c++)
			for (int s = 0; s < b.ntrk[c]; s++) {
				uint32_t r =
				    b.trow[(size_t)c * TK_TACO_KMAX + s];

				list[n++] = (uint64_t)r << 32 |
					    (uint64_t)(c * TK_TACO_KMAX + s);
				t.tg[(size_t)c * TK_TACO_KMAX + s] = 0.0f;
			}
		qsort(list, (size_t)n, sizeof(*list), cmp_u64);
		((int *)((char *)scan + l.tcnt))[gi] = n;
		t.cur[0] = 0;
	}
}

void tk_cpu_taco_feed(void *scan, const float *G, int ldg, const int32_t *rows,
		      int row0, int nrows, const tk_taco_args *a)
{
	long long nblocks, per, blk;

	if (!scan_matches(scan, a) || nrows <= 0 || ldg < a->C)
		return;
	nblocks = split_cols(a->C, (long long)nrows * a->C, &per);

#pragma omp parallel for schedule(static) if (nblocks > 1)
	for (blk = 0; blk < nblocks; blk++) {
		long long c0 = blk * per;
		long long nb = a->C - c0 < per ? a->C - c0 : per;
		taco_block b;
		taco_trk t;

		scan_views(scan, a->C, a->k, (int)c0, &b, &t);
		scan_rows(&b, (int)nb, G + c0, (size_t)ldg, rows, row0, nrows,
			  &t);
	}
}

void tk_cpu_taco_finish(void *scan, void *W, int dtype, void *idx, uint8_t *q,
			float *scale, const tk_taco_args *a)
{
	long long nblocks, per, blk;
	float decay;
	uint64_t hbase;

	if (!scan_matches(scan, a) || !tk_taco_dtype_ok(dtype))
		return;
	decay = tk_taco_decay(a);
	hbase = tk_taco_hbase(a);
	nblocks = split_cols(a->C, (long long)a->C * a->k * 64, &per);

#pragma omp parallel for schedule(static) if (nblocks > 1)
	for (blk = 0; blk < nblocks; blk++) {
		long long c0 = blk * per;
		long long nb = a->C - c0 < per ? a->C - c0 : per;
		taco_block b;
		taco_trk t;

		scan_views(scan, a->C, a->k, (int)c0, &b, &t);
		for (int c = 0; c < (int)nb; c++)
			finish_column(W, dtype, idx, q, scale, a, &b, c,
				      (int)c0 + c, decay, hbase,
				      t.tg + (size_t)c * TK_TACO_KMAX);
	}
}

void tk_cpu_taco_gather(void *vals, const void *W, int dtype, const void *idx,
			int R, int C, int k)
{
	size_t es = dtype == TK_F32 ? 4 : 2, n = (size_t)C * (size_t)k;

	for (size_t i = 0; i < n; i++) {
		size_t j = i / (size_t)k;
		char *out = (char *)vals + i * es;
		uint32_t r;

		if (!tk_taco_slot_row(idx, R, i, &r)) {
			memset(out, 0, es);
			continue;
		}
		memcpy(out, (const char *)W + ((size_t)r * (size_t)C + j) * es,
		       es);
	}
}
