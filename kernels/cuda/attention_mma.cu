/* attention_mma.cu: the tensor-core path of causal grouped-query attention,
 * FlashAttention-2 style, for bf16 tensors with head dims 64 and 128 on
 * sm_80 and later. The contract is attention.cu's (tk_ops.h
 * attention_fwd / attention_bwd): query i of a row attends keys
 * lo(i) <= j <= i, lo(i) = max(doc_start(i), i - window + 1 when
 * window > 0), doc_start(i) = i - pos[i] clamped to [0, i] (a negative pos:
 * the token sees only itself); head h reads kv head h / (nh / nkv); lse
 * [B, nh, T] f32 of the scaled scores; dq, dk, dv overwritten, dk/dv summed
 * over the GQA group in a fixed order inside one CTA: no atomics, the same
 * bits every run.
 *
 * When it runs: tkc_attention_fwd / tkc_attention_bwd (attention.cu) try
 * tkc_attention_mma_fwd / _bwd first. These run when dt is TK_BF16, hd is
 * 64 or 128, every tensor is 16-byte aligned, the device is sm_80 or later
 * and the module holds sm_80+ code for it; otherwise they return -ENOTSUP
 * and the SIMT kernels run (f32, other head dims, older devices). hd 256 is
 * left to the SIMT kernels: a dk/dv CTA holds 16 x 256 fp32 of each per
 * warp, 256 registers per thread before anything else.
 *
 * TACO_CUDA_ATTENTION, read on every call: "simt" forces the SIMT kernels;
 * "mma", unset (or anything else) uses these kernels wherever they apply.
 *
 * Math. S = Q K^T, dP = dO V^T, O = P V, dV = P^T dO, dQ = dS K and
 * dK = dS^T Q are mma.sync m16n8k16 (bf16 operands, fp32 accumulation).
 * Scores, the softmax statistics, D_i = dout_i . out_i and every
 * accumulator are fp32; the exponentials are exp2 of log2e-scaled scores.
 * P and dS are rounded to bf16 (nearest even) to be MMA operands, the one
 * rounding the SIMT kernels do not have (2^-9 relative per element); each
 * output is rounded once, when it is stored.
 *
 * Fragments (PTX ISA, mma.m16n8k16, g = lane >> 2, t = lane & 3; in each
 * .b32 register the lower 16 bits hold the smaller column / k):
 *   A 16x16: a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
 *   B 16x8:  b0 (k 2t..2t+1, n g), b1 (k 2t+8..2t+9, n g)
 *   C 16x8:  c0, c1 (g, 2t..2t+1), c2, c3 (g+8, 2t..2t+1)
 * The C fragments of two adjacent n8 tiles are, element for element, the A
 * fragment of one k16 slice, so P and dS go from the accumulators into the
 * next MMA without shared memory.
 *
 * Operands come from shared memory with ldmatrix.x4: four 8x8 bf16
 * matrices, lane l giving the address of row l & 7 of matrix l >> 3, and
 * every lane receiving (row g, columns 2t, 2t+1) of each matrix (.trans:
 * (rows 2t, 2t+1, column g), i.e. the matrix transposed). An A operand (or
 * a B operand stored k-major, [k][n]: V, dO, Q, K when they are the right
 * factor of a product over keys or queries) is read with matrices (rows
 * 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) (.trans for B); a
 * B operand stored n-major, [n][k] (K in Q K^T, Q in K Q^T, V in dO V^T),
 * with (0-7, 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15), which gives b0,
 * b1 of two adjacent n8 tiles. am_lrow_* / am_lcol_* say which row and
 * column each lane points at.
 *
 * Tiles: bf16 rows of HD + 8 elements in shared memory (the 8 row
 * addresses of one ldmatrix then fall in 8 different 16-byte bank groups),
 * filled by cp.async 16 bytes at a time, rows past the end zero-filled (so
 * no garbage, NaN included, ever reaches an MMA: masked products are exact
 * zeros), double-buffered so the next tile loads while this one is
 * multiplied. Three kernels, 128 threads (4 warps) each:
 * - fwd: a CTA owns AM_BR = 64 query rows of one (b, h), a warp 16 of them;
 *   it walks key tiles of AM_BC = 64 from the rows' smallest lo to the last
 *   row with an online softmax (row max and sum over the 4 lanes of a row
 *   by __shfl_xor 1 and 2) and stores out and lse = m + log(l).
 *   Shared memory: Q [64], K [2][64], V [2][64] rows (45 KiB at hd 64,
 *   85 KiB at hd 128).
 * - dq: the same CTA shape; recomputes P = exp(s scale - lse) tile by
 *   tile, dS = P (dP - D) with D from dout and out, dq = scale dS K.
 *   Shared memory: Q [64], dO [64], K [2][64], V [2][64] rows (54 KiB,
 *   102 KiB).
 * - dkdv: a CTA owns AM_BC = 64 keys of one (b, kv head), a warp 16 of
 *   them; it loops over every query head of the group and every query tile
 *   of BQ rows (64 at hd 64, 32 at hd 128: registers) that sees one of its
 *   keys, computing S^T = K Q^T and dP^T = V dO^T (keys as MMA rows, so
 *   P^T and dS^T are A fragments as they stand), dv += P^T dO and
 *   dk += dS^T Q in registers, stored once. D of a query tile is summed from
 *   its dO and out rows in shared memory: no scratch buffer, nothing for
 *   the memory plan. Shared memory: K [64], V [64], Q, dO, out [2][BQ]
 *   rows (73 KiB, 86 KiB).
 * Key (query) tiles before the smallest lo (after the last row, outside
 * the window) are never visited; only tiles that cross a boundary are
 * masked. Rows past T are loaded as zeros and never stored.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ops.h"
#include "tk_attn.h"

#define AM_THREADS 128 /* 4 warps */
#define AM_BR 64       /* query rows of a fwd / dq CTA, 16 per warp */
#define AM_BC 64       /* keys of a fwd / dq tile and of a dkdv CTA */
#define AM_PAD 8       /* bf16 after each shared-memory row */
#define AM_LOG2E 1.44269504088896341f
#define AM_LN2 0.693147180559945309f

/* ---- primitives: inline PTX ----------------------------------------------
 * A build for an older architecture as well (CMAKE_CUDA_ARCHITECTURES) gets
 * traps in their place: am_supported() only lets kernels compiled for
 * sm_80+ run. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define AM_SM80 0
#else
#define AM_SM80 1
#endif

/* The CTA's dynamic shared memory, 16-byte aligned. */
static __device__ __forceinline__ uint16_t *am_smem(void)
{
	extern __shared__ uint4 am_smem4[];

	return (uint16_t *)am_smem4;
}

#if AM_SM80
static __device__ __forceinline__ uint32_t am_saddr(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}
#endif

/* d += a b, one m16n8k16 MMA: a the A fragment, b0 b1 the B fragment. */
static __device__ __forceinline__ void
am_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
#if AM_SM80
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
		     "{%0, %1, %2, %3};\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
		       "r"(b1));
#else
	__trap();
#endif
}

/* Four 8x8 bf16 matrices from shared memory; p is this lane's row. */
static __device__ __forceinline__ void am_ldsm4(uint32_t (&r)[4],
						const uint16_t *p)
{
#if AM_SM80
	asm volatile(
	    "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
	    : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	    : "r"(am_saddr(p)));
#else
	r[0] = r[1] = r[2] = r[3] = 0;
	__trap();
#endif
}

/* The same, each matrix transposed. */
static __device__ __forceinline__ void am_ldsm4t(uint32_t (&r)[4],
						 const uint16_t *p)
{
#if AM_SM80
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
		     "{%0, %1, %2, %3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(am_saddr(p)));
#else
	r[0] = r[1] = r[2] = r[3] = 0;
	__trap();
#endif
}

/* Starts copying 16 bytes from global src to shared dst; bytes (0 or 16)
 * of them are read, the rest is zero-filled. */
static __device__ __forceinline__ void am_cp16(uint16_t *dst,
					       const uint16_t *src, int bytes)
{
#if AM_SM80
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
			 am_saddr(dst)),
		     "l"(src), "r"(bytes)
		     : "memory");
#else
	__trap();
#endif
}

/* Closes the group of the copies started since the last commit. */
static __device__ __forceinline__ void am_cp_commit(void)
{
#if AM_SM80
	asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

/* Waits until at most N of this thread's groups are in flight. */
template <int N> static __device__ __forceinline__ void am_cp_wait(void)
{
#if AM_SM80
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

/* bf16x2 of (lo, hi), each rounded to nearest even: lo in bits 0-15. */
static __device__ __forceinline__ uint32_t am_pack(float lo, float hi)
{
	uint32_t r;

#if AM_SM80
	asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#else
	r = 0;
	__trap();
#endif
	return r;
}
/* ---- end of primitives */

/* Arguments of the three kernels; bf16 tensors as their bit patterns. */
struct am_args {
	const uint16_t *q, *k, *v, *out, *dout;
	const float *lse_in;
	const int32_t *pos;
	uint16_t *o, *dq, *dk, *dv;
	float *lse;
	int B, T, nh, nkv, window;
	float scale;
	int ntiles; /* CTAs along T */
};

/* The row / column of a 16x16 block whose address lane gives ldmatrix.x4:
 * _a for an A operand, or a B operand stored [k][n] (with .trans); _b for a
 * B operand stored [n][k], two n8 tiles (header comment). */
static __host__ __device__ __forceinline__ int am_lrow_a(int lane)
{
	return (lane & 7) + (lane & 8);
}

static __host__ __device__ __forceinline__ int am_lcol_a(int lane)
{
	return (lane & 16) >> 1;
}

static __host__ __device__ __forceinline__ int am_lrow_b(int lane)
{
	return (lane & 7) + ((lane & 16) >> 1);
}

static __host__ __device__ __forceinline__ int am_lcol_b(int lane)
{
	return lane & 8;
}

/* The A fragment of k16 slice kk from the C fragments c of 16 x (8 n)
 * accumulators: n8 tiles 2 kk and 2 kk + 1, rounded to bf16. */
template <int N>
static __device__ __forceinline__ void am_c2a(uint32_t (&a)[4],
					      const float (&c)[N][4], int kk)
{
	a[0] = am_pack(c[2 * kk][0], c[2 * kk][1]);
	a[1] = am_pack(c[2 * kk][2], c[2 * kk][3]);
	a[2] = am_pack(c[2 * kk + 1][0], c[2 * kk + 1][1]);
	a[3] = am_pack(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

/* Max / sum over the 4 lanes of one fragment row (lanes 4g .. 4g + 3). */
static __device__ __forceinline__ float am_max4(float x)
{
	x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
	return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

static __device__ __forceinline__ float am_sum4(float x)
{
	x += __shfl_xor_sync(0xffffffffu, x, 1);
	return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

/* Starts copying rows r0 .. r0 + R - 1 of src (row stride ld elements,
 * HD columns) into dst [R][HD + AM_PAD]; rows >= rend are zero-filled
 * (src row 0, in bounds, stands in as their address). All threads call. */
template <int HD, int R>
static __device__ __forceinline__ void
am_load_tile(uint16_t *dst, const uint16_t *src, size_t ld, int r0, int rend)
{
	constexpr int CPR = HD / 8, LD = HD + AM_PAD; /* 16-byte chunks */
	static_assert(R * CPR % AM_THREADS == 0, "tile of whole rounds");

#pragma unroll
	for (int i = 0; i < R * CPR / AM_THREADS; i++) {
		const int c = (int)threadIdx.x + i * AM_THREADS;
		const int r = c / CPR, col = c % CPR * 8, gr = r0 + r;
		const int ok = gr < rend;

		am_cp16(dst + r * LD + col,
			src + (size_t)(ok ? gr : 0) * ld + col, ok ? 16 : 0);
	}
}

/* Part of the dot product of two bf16 rows x, y of HD: the pairs part,
 * part + NP, part + 2 NP, ... (interleaved, so NP lanes on one row of a
 * padded tile read different banks), in fp32. */
template <int HD, int NP>
static __device__ __forceinline__ float am_dot(const uint16_t *x,
					       const uint16_t *y, int part)
{
	float acc = 0.0f;

#pragma unroll
	for (int k = 0; k < HD / 2 / NP; k++) {
		const int c = 2 * (part + NP * k);
		const uint32_t u = *(const uint32_t *)(x + c);
		const uint32_t v = *(const uint32_t *)(y + c);

		acc = fmaf(tk_bits_f32(u << 16), tk_bits_f32(v << 16), acc);
		acc = fmaf(tk_bits_f32(u & 0xFFFF0000u),
			   tk_bits_f32(v & 0xFFFF0000u), acc);
	}
	return acc;
}

/* ---- forward --------------------------------------------------------------
 */

template <int HD> static constexpr size_t am_fwd_smem()
{
	return (size_t)(AM_BR + 4 * AM_BC) * (HD + AM_PAD) * 2 + AM_BR * 4;
}

/* grid: ntiles * B * nh CTAs, the last query tiles (most keys) first. */
template <int HD>
static __global__ void __launch_bounds__(AM_THREADS) am_fwd_kernel(am_args a)
{
	constexpr int LD = HD + AM_PAD, NS = AM_BC / 8, NO = HD / 8;
	uint16_t *Qs = am_smem();		  /* [AM_BR][LD] */
	uint16_t *Ks = Qs + AM_BR * LD;		  /* [2][AM_BC][LD] */
	uint16_t *Vs = Ks + 2 * AM_BC * LD;	  /* [2][AM_BC][LD] */
	int *lo_s = (int *)(Vs + 2 * AM_BC * LD); /* [AM_BR] */
	const int tid = (int)threadIdx.x, lane = tid & 31, w = tid >> 5;
	const int g = lane >> 2, t = lane & 3;
	const int nbh = a.B * a.nh, bh = (int)blockIdx.x % nbh;
	const int tile = a.ntiles - 1 - (int)blockIdx.x / nbh;
	const int b = bh / a.nh, h = bh % a.nh, kvh = h / (a.nh / a.nkv);
	const int T = a.T, q0 = tile * AM_BR, qn = min(AM_BR, T - q0);
	const int qlast = q0 + qn - 1;
	const size_t ldq = (size_t)a.nh * HD, ldk = (size_t)a.nkv * HD;
	const size_t koff = (size_t)b * T * ldk + (size_t)kvh * HD;
	const uint16_t *qb = a.q + (size_t)b * T * ldq + (size_t)h * HD;
	const uint16_t *kb = a.k + koff, *vb = a.v + koff;
	const int32_t *pb = a.pos + (size_t)b * T;
	const float sl2 = a.scale * AM_LOG2E;
	/* this lane's rows of the tile: g and g + 8 of the warp's 16 */
	const int r0 = w * 16 + g, r1 = r0 + 8;
	/* per row: running max m (log2 units), this lane's part of the sum
	 * l (the 4 lanes of a row rescale theirs alike: summed at the end) */
	float o[NO][4], m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
	int klo = q0, lomax = 0, nk, lo0, lo1;

	am_load_tile<HD, AM_BR>(Qs, qb, ldq, q0, T);
	if (tid < AM_BR)
		lo_s[tid] =
		    tid < qn ? tk_attn_key_lo(pb, q0 + tid, a.window) : INT_MAX;
	__syncthreads();
	for (int r = 0; r < qn; r++) {
		klo = min(klo, lo_s[r]);
		lomax = max(lomax, lo_s[r]);
	}
	lo0 = lo_s[r0]; /* INT_MAX past T: every key masked */
	lo1 = lo_s[r1];
	nk = (qlast - klo) / AM_BC + 1;
	am_load_tile<HD, AM_BC>(Ks, kb, ldk, klo, qlast + 1);
	am_load_tile<HD, AM_BC>(Vs, vb, ldk, klo, qlast + 1);
	am_cp_commit();
#pragma unroll
	for (int n = 0; n < NO; n++)
		o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

	for (int it = 0; it < nk; it++) {
		const int kt = klo + it * AM_BC, cur = it & 1;
		const uint16_t *Kt = Ks + cur * AM_BC * LD;
		const uint16_t *Vt = Vs + cur * AM_BC * LD;
		/* every row sees every key of the tile: no mask */
		const int full = kt >= lomax && kt + AM_BC - 1 <= q0;
		float s[NS][4], mx0 = -INFINITY, mx1 = -INFINITY, ms0, ms1;
		float al0, al1;

		/* the next tile into the other buffer, read by no one since
		 * the __syncthreads ending the last iteration */
		if (it + 1 < nk) {
			am_load_tile<HD, AM_BC>(Ks + (cur ^ 1) * AM_BC * LD, kb,
						ldk, kt + AM_BC, qlast + 1);
			am_load_tile<HD, AM_BC>(Vs + (cur ^ 1) * AM_BC * LD, vb,
						ldk, kt + AM_BC, qlast + 1);
		}
		am_cp_commit(); /* possibly empty: wait<1> below stays right */
		am_cp_wait<1>();
		__syncthreads();

		/* S [16 rows][64 keys] = Q K^T over HD */
#pragma unroll
		for (int j = 0; j < NS; j++)
			s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
		for (int kk = 0; kk < HD / 16; kk++) {
			uint32_t qa[4];

			am_ldsm4(qa, Qs + (w * 16 + am_lrow_a(lane)) * LD +
					 kk * 16 + am_lcol_a(lane));
#pragma unroll
			for (int jp = 0; jp < NS / 2; jp++) {
				uint32_t kf[4];

				am_ldsm4(kf,
					 Kt + (jp * 16 + am_lrow_b(lane)) * LD +
					     kk * 16 + am_lcol_b(lane));
				am_mma(s[2 * jp], qa, kf[0], kf[1]);
				am_mma(s[2 * jp + 1], qa, kf[2], kf[3]);
			}
		}

		/* scale to log2 units, mask, row maxima */
#pragma unroll
		for (int j = 0; j < NS; j++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				const int col = kt + 8 * j + 2 * t + e;

				s[j][e] = full || (col >= lo0 && col <= q0 + r0)
					      ? s[j][e] * sl2
					      : -INFINITY;
				s[j][2 + e] =
				    full || (col >= lo1 && col <= q0 + r1)
					? s[j][2 + e] * sl2
					: -INFINITY;
				mx0 = fmaxf(mx0, s[j][e]);
				mx1 = fmaxf(mx1, s[j][2 + e]);
			}
		mx0 = fmaxf(m0, am_max4(mx0));
		mx1 = fmaxf(m1, am_max4(mx1));
		/* a row with no key yet keeps m = -inf: subtract 0 instead,
		 * so exp2 gives 0 for its -inf scores, not NaN */
		ms0 = mx0 == -INFINITY ? 0.0f : mx0;
		ms1 = mx1 == -INFINITY ? 0.0f : mx1;
		al0 = exp2f(m0 - ms0); /* 0 while m was -inf */
		al1 = exp2f(m1 - ms1);
		m0 = mx0;
		m1 = mx1;
		l0 *= al0;
		l1 *= al1;
#pragma unroll
		for (int j = 0; j < NS; j++) {
			s[j][0] = exp2f(s[j][0] - ms0);
			s[j][1] = exp2f(s[j][1] - ms0);
			s[j][2] = exp2f(s[j][2] - ms1);
			s[j][3] = exp2f(s[j][3] - ms1);
			l0 += s[j][0] + s[j][1];
			l1 += s[j][2] + s[j][3];
		}
#pragma unroll
		for (int n = 0; n < NO; n++) {
			o[n][0] *= al0;
			o[n][1] *= al0;
			o[n][2] *= al1;
			o[n][3] *= al1;
		}

		/* O [16][HD] += P [16][64 keys] V [64][HD] */
#pragma unroll
		for (int kk = 0; kk < AM_BC / 16; kk++) {
			uint32_t pa[4];

			am_c2a<NS>(pa, s, kk);
#pragma unroll
			for (int dp = 0; dp < HD / 16; dp++) {
				uint32_t vf[4];

				am_ldsm4t(
				    vf, Vt + (kk * 16 + am_lrow_a(lane)) * LD +
					    dp * 16 + am_lcol_a(lane));
				am_mma(o[2 * dp], pa, vf[0], vf[1]);
				am_mma(o[2 * dp + 1], pa, vf[2], vf[3]);
			}
		}
		__syncthreads(); /* this buffer is refilled next iteration */
	}

	l0 = am_sum4(l0);
	l1 = am_sum4(l1);
	{
		uint16_t *ob =
		    a.o + (size_t)b * T * ldq + (size_t)h * HD + 2 * t;
		float *lb = a.lse + ((size_t)b * a.nh + h) * T + q0;
		/* l >= 1 on a row < T: its largest score gives exp2(0) */
		const float i0 = l0 > 0.0f ? 1.0f / l0 : 0.0f;
		const float i1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;

		if (r0 < qn) {
			uint16_t *row = ob + (size_t)(q0 + r0) * ldq;

#pragma unroll
			for (int n = 0; n < NO; n++)
				*(uint32_t *)(row + 8 * n) =
				    am_pack(o[n][0] * i0, o[n][1] * i0);
			if (t == 0)
				lb[r0] = (m0 + log2f(l0)) * AM_LN2;
		}
		if (r1 < qn) {
			uint16_t *row = ob + (size_t)(q0 + r1) * ldq;

#pragma unroll
			for (int n = 0; n < NO; n++)
				*(uint32_t *)(row + 8 * n) =
				    am_pack(o[n][2] * i1, o[n][3] * i1);
			if (t == 0)
				lb[r1] = (m1 + log2f(l1)) * AM_LN2;
		}
	}
}

/* ---- backward: dq ---------------------------------------------------------
 */

template <int HD> static constexpr size_t am_dq_smem()
{
	return (size_t)(2 * AM_BR + 4 * AM_BC) * (HD + AM_PAD) * 2 + AM_BR * 4;
}

/* grid: ntiles * B * nh CTAs, the last query tiles first. */
template <int HD>
static __global__ void __launch_bounds__(AM_THREADS) am_dq_kernel(am_args a)
{
	constexpr int LD = HD + AM_PAD, NS = AM_BC / 8, NO = HD / 8;
	uint16_t *Qs = am_smem();		  /* [AM_BR][LD] */
	uint16_t *dOs = Qs + AM_BR * LD;	  /* [AM_BR][LD] */
	uint16_t *Ks = dOs + AM_BR * LD;	  /* [2][AM_BC][LD] */
	uint16_t *Vs = Ks + 2 * AM_BC * LD;	  /* [2][AM_BC][LD] */
	int *lo_s = (int *)(Vs + 2 * AM_BC * LD); /* [AM_BR] */
	const int tid = (int)threadIdx.x, lane = tid & 31, w = tid >> 5;
	const int g = lane >> 2, t = lane & 3;
	const int nbh = a.B * a.nh, bh = (int)blockIdx.x % nbh;
	const int tile = a.ntiles - 1 - (int)blockIdx.x / nbh;
	const int b = bh / a.nh, h = bh % a.nh, kvh = h / (a.nh / a.nkv);
	const int T = a.T, q0 = tile * AM_BR, qn = min(AM_BR, T - q0);
	const int qlast = q0 + qn - 1;
	const size_t ldq = (size_t)a.nh * HD, ldk = (size_t)a.nkv * HD;
	const size_t qoff = (size_t)b * T * ldq + (size_t)h * HD;
	const size_t koff = (size_t)b * T * ldk + (size_t)kvh * HD;
	const uint16_t *kb = a.k + koff, *vb = a.v + koff;
	const int32_t *pb = a.pos + (size_t)b * T;
	const float *lrow = a.lse_in + ((size_t)b * a.nh + h) * T + q0;
	const float sl2 = a.scale * AM_LOG2E;
	const int r0 = w * 16 + g, r1 = r0 + 8;
	float dq[NO][4], L0, L1, D0, D1;
	int klo = q0, lomax = 0, nk, lo0, lo1;

	am_load_tile<HD, AM_BR>(Qs, a.q + qoff, ldq, q0, T);
	am_load_tile<HD, AM_BR>(dOs, a.dout + qoff, ldq, q0, T);
	am_cp_commit();
	if (tid < AM_BR)
		lo_s[tid] =
		    tid < qn ? tk_attn_key_lo(pb, q0 + tid, a.window) : INT_MAX;
	__syncthreads();
	for (int r = 0; r < qn; r++) {
		klo = min(klo, lo_s[r]);
		lomax = max(lomax, lo_s[r]);
	}
	lo0 = lo_s[r0];
	lo1 = lo_s[r1];
	nk = (qlast - klo) / AM_BC + 1;
	am_load_tile<HD, AM_BC>(Ks, kb, ldk, klo, qlast + 1);
	am_load_tile<HD, AM_BC>(Vs, vb, ldk, klo, qlast + 1);
	am_cp_commit();
	/* lse in log2 units: P = exp2(s scale log2e - L) */
	L0 = r0 < qn ? lrow[r0] * AM_LOG2E : 0.0f;
	L1 = r1 < qn ? lrow[r1] * AM_LOG2E : 0.0f;
#pragma unroll
	for (int n = 0; n < NO; n++)
		dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;

	/* D of the warp's rows, dO from shared memory (the first group),
	 * out from global: lanes 2x, 2x + 1 sum row w * 16 + x */
	am_cp_wait<1>();
	__syncthreads();
	{
		const int rr = w * 16 + (lane >> 1);
		float d = 0.0f;

		if (rr < qn)
			d = am_dot<HD, 2>(
			    dOs + rr * LD,
			    a.out + qoff + (size_t)(q0 + rr) * ldq, lane & 1);
		d += __shfl_xor_sync(0xffffffffu, d, 1);
		D0 = __shfl_sync(0xffffffffu, d, 2 * g);      /* row r0 */
		D1 = __shfl_sync(0xffffffffu, d, 2 * g + 16); /* row r1 */
	}

	for (int it = 0; it < nk; it++) {
		const int kt = klo + it * AM_BC, cur = it & 1;
		const uint16_t *Kt = Ks + cur * AM_BC * LD;
		const uint16_t *Vt = Vs + cur * AM_BC * LD;
		const int full = kt >= lomax && kt + AM_BC - 1 <= q0;
		float s[NS][4], dp[NS][4];

		if (it + 1 < nk) {
			am_load_tile<HD, AM_BC>(Ks + (cur ^ 1) * AM_BC * LD, kb,
						ldk, kt + AM_BC, qlast + 1);
			am_load_tile<HD, AM_BC>(Vs + (cur ^ 1) * AM_BC * LD, vb,
						ldk, kt + AM_BC, qlast + 1);
		}
		am_cp_commit();
		am_cp_wait<1>();
		__syncthreads();

		/* S = Q K^T and dP = dO V^T, [16 rows][64 keys] */
#pragma unroll
		for (int j = 0; j < NS; j++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				s[j][e] = dp[j][e] = 0.0f;
#pragma unroll
		for (int kk = 0; kk < HD / 16; kk++) {
			const int aoff = (w * 16 + am_lrow_a(lane)) * LD +
					 kk * 16 + am_lcol_a(lane);
			uint32_t qa[4], da[4];

			am_ldsm4(qa, Qs + aoff);
			am_ldsm4(da, dOs + aoff);
#pragma unroll
			for (int jp = 0; jp < NS / 2; jp++) {
				const int boff =
				    (jp * 16 + am_lrow_b(lane)) * LD + kk * 16 +
				    am_lcol_b(lane);
				uint32_t kf[4], vf[4];

				am_ldsm4(kf, Kt + boff);
				am_ldsm4(vf, Vt + boff);
				am_mma(s[2 * jp], qa, kf[0], kf[1]);
				am_mma(s[2 * jp + 1], qa, kf[2], kf[3]);
				am_mma(dp[2 * jp], da, vf[0], vf[1]);
				am_mma(dp[2 * jp + 1], da, vf[2], vf[3]);
			}
		}

		/* dS = P (dP - D), P = exp(s scale - lse), 0 where masked */
#pragma unroll
		for (int j = 0; j < NS; j++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				const int col = kt + 8 * j + 2 * t + e;
				const float p0 =
				    full || (col >= lo0 && col <= q0 + r0)
					? exp2f(fmaf(s[j][e], sl2, -L0))
					: 0.0f;
				const float p1 =
				    full || (col >= lo1 && col <= q0 + r1)
					? exp2f(fmaf(s[j][2 + e], sl2, -L1))
					: 0.0f;

				s[j][e] = p0 * (dp[j][e] - D0);
				s[j][2 + e] = p1 * (dp[j][2 + e] - D1);
			}

			/* dQ [16][HD] += dS [16][64 keys] K [64][HD] */
#pragma unroll
		for (int kk = 0; kk < AM_BC / 16; kk++) {
			uint32_t sa[4];

			am_c2a<NS>(sa, s, kk);
#pragma unroll
			for (int dd = 0; dd < HD / 16; dd++) {
				uint32_t kf[4];

				am_ldsm4t(
				    kf, Kt + (kk * 16 + am_lrow_a(lane)) * LD +
					    dd * 16 + am_lcol_a(lane));
				am_mma(dq[2 * dd], sa, kf[0], kf[1]);
				am_mma(dq[2 * dd + 1], sa, kf[2], kf[3]);
			}
		}
		__syncthreads();
	}

	{
		uint16_t *db = a.dq + qoff + 2 * t;

		if (r0 < qn) {
			uint16_t *row = db + (size_t)(q0 + r0) * ldq;

#pragma unroll
			for (int n = 0; n < NO; n++)
				*(uint32_t *)(row + 8 * n) = am_pack(
				    dq[n][0] * a.scale, dq[n][1] * a.scale);
		}
		if (r1 < qn) {
			uint16_t *row = db + (size_t)(q0 + r1) * ldq;

#pragma unroll
			for (int n = 0; n < NO; n++)
				*(uint32_t *)(row + 8 * n) = am_pack(
				    dq[n][2] * a.scale, dq[n][3] * a.scale);
		}
	}
}

/* ---- backward: dk, dv -----------------------------------------------------
 */

/* Query rows per tile of a dkdv CTA: at hd 128, dk and dv take 128
 * registers a thread, and S^T, dP^T 4 per 8 queries each. */
template <int HD> struct am_kv_bq {
	static constexpr int value = HD <= 64 ? 64 : 32;
};

template <int HD, int BQ> static constexpr size_t am_dkdv_smem()
{
	return (size_t)(2 * AM_BC + 6 * BQ) * (HD + AM_PAD) * 2 +
	       (size_t)5 * BQ * 4;
}

/* Probes query tile q (rows q .. q + BQ - 1) for keys kv0 .. kvlast:
 * lo[r] = tk_attn_key_lo of row q + r (INT_MAX past T); returns whether a row
 * sees one of the keys, and *full whether every row sees all of them. Every
 * thread calls (two barriers); the results are the CTA's. */
template <int BQ>
static __device__ int am_probe(const int32_t *pb, int T, int window, int q,
			       int kv0, int kvlast, int *lo, int *full)
{
	const int tid = (int)threadIdx.x;
	int need = 0, all = 1;

	if (tid < BQ) {
		const int i = q + tid; /* >= kv0: i >= every key is causal */
		const int l = i < T ? tk_attn_key_lo(pb, i, window) : INT_MAX;

		lo[tid] = l;
		need = l <= kvlast;
		all = l <= kv0;
	}
	need = __syncthreads_or(need);
	*full = __syncthreads_and(all) && q >= kvlast;
	return need;
}

/* Moves (*h, *q) to the first tile at or after it, in the order heads,
 * then query tiles from kv0 in steps of BQ below qend, that sees one of the
 * keys (*h == hend: none); lo and *full from am_probe. CTA-uniform. */
template <int BQ>
static __device__ void am_next(const int32_t *pb, int T, int window, int kv0,
			       int kvlast, int qend, int hend, int *h, int *q,
			       int *lo, int *full)
{
	while (*h < hend) {
		for (; *q < qend; *q += BQ)
			if (am_probe<BQ>(pb, T, window, *q, kv0, kvlast, lo,
					 full))
				return;
		++*h;
		*q = kv0;
	}
}

/* Starts loading query tile q of head h (Q, dO, out rows into Qd, dOd,
 * Od) and sets L[r] = lse of row q + r in log2 units (0 past T). */
template <int HD, int BQ>
static __device__ void am_kv_issue(const am_args &a, int b, int h, int q,
				   uint16_t *Qd, uint16_t *dOd, uint16_t *Od,
				   float *L)
{
	const int tid = (int)threadIdx.x;
	const size_t ldq = (size_t)a.nh * HD;
	const size_t off = (size_t)b * a.T * ldq + (size_t)h * HD;
	const float *lrow = a.lse_in + ((size_t)b * a.nh + h) * a.T;

	am_load_tile<HD, BQ>(Qd, a.q + off, ldq, q, a.T);
	am_load_tile<HD, BQ>(dOd, a.dout + off, ldq, q, a.T);
	am_load_tile<HD, BQ>(Od, a.out + off, ldq, q, a.T);
	if (tid < BQ)
		L[tid] = q + tid < a.T ? lrow[q + tid] * AM_LOG2E : 0.0f;
}

/* grid: ntiles * B * nkv CTAs, the first key tiles (most queries) first. */
template <int HD, int BQ>
static __global__ void __launch_bounds__(AM_THREADS) am_dkdv_kernel(am_args a)
{
	constexpr int LD = HD + AM_PAD, NQ = BQ / 8, NO = HD / 8;
	constexpr int TPR = AM_THREADS / BQ;   /* threads per row of D */
	uint16_t *Ks = am_smem();	       /* [AM_BC][LD] */
	uint16_t *Vs = Ks + AM_BC * LD;	       /* [AM_BC][LD] */
	uint16_t *Qs = Vs + AM_BC * LD;	       /* [2][BQ][LD] */
	uint16_t *dOs = Qs + 2 * BQ * LD;      /* [2][BQ][LD] */
	uint16_t *Os = dOs + 2 * BQ * LD;      /* [2][BQ][LD] */
	int *lo_s = (int *)(Os + 2 * BQ * LD); /* [2][BQ] */
	float *L_s = (float *)(lo_s + 2 * BQ); /* [2][BQ] */
	float *D_s = L_s + 2 * BQ;	       /* [BQ] */
	const int tid = (int)threadIdx.x, lane = tid & 31, w = tid >> 5;
	const int g = lane >> 2, t = lane & 3;
	const int nbg = a.B * a.nkv, bg = (int)blockIdx.x % nbg;
	const int kv0 = (int)blockIdx.x / nbg * AM_BC;
	const int b = bg / a.nkv, kvh = bg % a.nkv, group = a.nh / a.nkv;
	const int T = a.T, kn = min(AM_BC, T - kv0), kvlast = kv0 + kn - 1;
	/* queries past kvlast + window - 1 see none of these keys */
	const int qend =
	    a.window > 0 && a.window < T - kvlast ? kvlast + a.window : T;
	const int hend = (kvh + 1) * group;
	const size_t ldk = (size_t)a.nkv * HD;
	const size_t koff = (size_t)b * T * ldk + (size_t)kvh * HD;
	const int32_t *pb = a.pos + (size_t)b * T;
	const float sl2 = a.scale * AM_LOG2E;
	/* this lane's keys: rows g and g + 8 of the warp's 16 */
	const int j0 = kv0 + w * 16 + g, j1 = j0 + 8;
	float dk[NO][4], dv[NO][4];
	int h = kvh * group, q = kv0, full = 0, cur = 0;

#pragma unroll
	for (int n = 0; n < NO; n++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			dk[n][e] = dv[n][e] = 0.0f;
	/* K, V of the CTA travel with the first query tile's group */
	am_load_tile<HD, AM_BC>(Ks, a.k + koff, ldk, kv0, T);
	am_load_tile<HD, AM_BC>(Vs, a.v + koff, ldk, kv0, T);
	am_next<BQ>(pb, T, a.window, kv0, kvlast, qend, hend, &h, &q, lo_s,
		    &full);
	if (h < hend)
		am_kv_issue<HD, BQ>(a, b, h, q, Qs, dOs, Os, L_s);
	am_cp_commit();

	while (h < hend) {
		const int nb = cur ^ 1;
		const uint16_t *Qt = Qs + cur * BQ * LD;
		const uint16_t *dOt = dOs + cur * BQ * LD;
		const int *lot = lo_s + cur * BQ;
		const float *Lt = L_s + cur * BQ;
		int hn = h, qn = q + BQ, fulln = 0;
		float st[NQ][4], dpt[NQ][4];

		/* find and start the next tile; its buffers were last read
		 * before the __syncthreads ending the previous iteration */
		am_next<BQ>(pb, T, a.window, kv0, kvlast, qend, hend, &hn, &qn,
			    lo_s + nb * BQ, &fulln);
		if (hn < hend)
			am_kv_issue<HD, BQ>(a, b, hn, qn, Qs + nb * BQ * LD,
					    dOs + nb * BQ * LD,
					    Os + nb * BQ * LD, L_s + nb * BQ);
		am_cp_commit();
		am_cp_wait<1>();
		__syncthreads();

		/* D_r = dO_r . out_r, TPR adjacent lanes a row */
		{
			const int r = tid / TPR, part = tid % TPR;
			float d = am_dot<HD, TPR>(
			    dOt + r * LD, Os + (cur * BQ + r) * LD, part);

#pragma unroll
			for (int x = 1; x < TPR; x <<= 1)
				d += __shfl_xor_sync(0xffffffffu, d, x);
			if (part == 0)
				D_s[r] = d;
		}
		__syncthreads();

		/* S^T = K Q^T and dP^T = V dO^T, [16 keys][BQ queries] */
#pragma unroll
		for (int j = 0; j < NQ; j++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				st[j][e] = dpt[j][e] = 0.0f;
#pragma unroll
		for (int kk = 0; kk < HD / 16; kk++) {
			const int aoff = (w * 16 + am_lrow_a(lane)) * LD +
					 kk * 16 + am_lcol_a(lane);
			uint32_t ka[4], va[4];

			am_ldsm4(ka, Ks + aoff);
			am_ldsm4(va, Vs + aoff);
#pragma unroll
			for (int jp = 0; jp < NQ / 2; jp++) {
				const int boff =
				    (jp * 16 + am_lrow_b(lane)) * LD + kk * 16 +
				    am_lcol_b(lane);
				uint32_t qf[4], df[4];

				am_ldsm4(qf, Qt + boff);
				am_ldsm4(df, dOt + boff);
				am_mma(st[2 * jp], ka, qf[0], qf[1]);
				am_mma(st[2 * jp + 1], ka, qf[2], qf[3]);
				am_mma(dpt[2 * jp], va, df[0], df[1]);
				am_mma(dpt[2 * jp + 1], va, df[2], df[3]);
			}
		}

		/* P^T = exp(s scale - lse) where query i = q + c sees key j
		 * (0 elsewhere), dS^T = P^T (dP^T - D) */
#pragma unroll
		for (int j = 0; j < NQ; j++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				const int c = 8 * j + 2 * t + e, i = q + c;
				const int lo = lot[c];
				const float L = Lt[c], D = D_s[c];
				const float p0 =
				    full || (j0 >= lo && j0 <= i)
					? exp2f(fmaf(st[j][e], sl2, -L))
					: 0.0f;
				const float p1 =
				    full || (j1 >= lo && j1 <= i)
					? exp2f(fmaf(st[j][2 + e], sl2, -L))
					: 0.0f;

				st[j][e] = p0;
				st[j][2 + e] = p1;
				dpt[j][e] = p0 * (dpt[j][e] - D);
				dpt[j][2 + e] = p1 * (dpt[j][2 + e] - D);
			}

			/* dV [16][HD] += P^T dO, dK [16][HD] += dS^T Q (over
			 * BQ) */
#pragma unroll
		for (int kq = 0; kq < BQ / 16; kq++) {
			uint32_t pa[4], sa[4];

			am_c2a<NQ>(pa, st, kq);
			am_c2a<NQ>(sa, dpt, kq);
#pragma unroll
			for (int dd = 0; dd < HD / 16; dd++) {
				const int off =
				    (kq * 16 + am_lrow_a(lane)) * LD + dd * 16 +
				    am_lcol_a(lane);
				uint32_t of[4], qf[4];

				am_ldsm4t(of, dOt + off);
				am_ldsm4t(qf, Qt + off);
				am_mma(dv[2 * dd], pa, of[0], of[1]);
				am_mma(dv[2 * dd + 1], pa, of[2], of[3]);
				am_mma(dk[2 * dd], sa, qf[0], qf[1]);
				am_mma(dk[2 * dd + 1], sa, qf[2], qf[3]);
			}
		}
		__syncthreads(); /* buffers cur are refilled next iteration */

		h = hn;
		q = qn;
		full = fulln;
		cur = nb;
	}
	am_cp_wait<0>(); /* nothing left in flight (no tile: K, V) */

	{
		uint16_t *dkb = a.dk + koff + 2 * t, *dvb = a.dv + koff + 2 * t;

		if (j0 < T) {
			uint16_t *kr = dkb + (size_t)j0 * ldk;
			uint16_t *vr = dvb + (size_t)j0 * ldk;

#pragma unroll
			for (int n = 0; n < NO; n++) {
				*(uint32_t *)(kr + 8 * n) = am_pack(
				    dk[n][0] * a.scale, dk[n][1] * a.scale);
				*(uint32_t *)(vr + 8 * n) =
				    am_pack(dv[n][0], dv[n][1]);
			}
		}
		if (j1 < T) {
			uint16_t *kr = dkb + (size_t)j1 * ldk;
			uint16_t *vr = dvb + (size_t)j1 * ldk;

#pragma unroll
			for (int n = 0; n < NO; n++) {
				*(uint32_t *)(kr + 8 * n) = am_pack(
				    dk[n][2] * a.scale, dk[n][3] * a.scale);
				*(uint32_t *)(vr + 8 * n) =
				    am_pack(dv[n][2], dv[n][3]);
			}
		}
	}
}

/* ---- host side ------------------------------------------------------------
 */

/* Whether the device (0, the backend's) is sm_80+ and runs code compiled
 * for sm_80+ (a module built for older architectures as well only has
 * traps in the kernels' place there): asked once. */
static int am_supported(void)
{
	static int ok = -1;

	if (ok < 0) {
		int dev = 0, major = 0;
		cudaFuncAttributes fa;

		ok = cudaGetDevice(&dev) == cudaSuccess &&
		     cudaDeviceGetAttribute(&major,
					    cudaDevAttrComputeCapabilityMajor,
					    dev) == cudaSuccess &&
		     major >= 8 &&
		     cudaFuncGetAttributes(
			 &fa, (const void *)am_fwd_kernel<64>) == cudaSuccess &&
		     fa.ptxVersion >= 80;
		/* a failed query leaves an error for the next
		 * cudaGetLastError: not this op's failure, clear it */
		(void)cudaGetLastError();
	}
	return ok;
}

/* Whether these kernels take the call (the caller checked the shape). */
static int am_applies(int dt, int hd, const void *const *ptrs, int n)
{
	const char *env = getenv("TACO_CUDA_ATTENTION");

	if (dt != TK_BF16 || (hd != 64 && hd != 128))
		return 0;
	if (env && !strcmp(env, "simt"))
		return 0;
	/* 16-byte rows for cp.async (hd * 2 bytes keeps every row so) */
	for (int i = 0; i < n; i++)
		if ((uintptr_t)ptrs[i] % 16)
			return 0;
	return am_supported();
}

/* Launches kern over blocks CTAs of AM_THREADS with smem bytes of dynamic
 * shared memory; *raised: the kernel's limit is already smem. */
static void am_launch(void (*kern)(am_args), long long blocks, size_t smem,
		      const am_args &a, const char *what, int *raised)
{
	if (blocks <= 0 || blocks > INT_MAX) {
		tkc_check(cudaErrorInvalidConfiguration, what);
		return;
	}
	if (!*raised) {
		if (tkc_check(cudaFuncSetAttribute(
				  (const void *)kern,
				  cudaFuncAttributeMaxDynamicSharedMemorySize,
				  (int)smem),
			      what) < 0)
			return;
		*raised = 1;
	}
	kern<<<(unsigned)blocks, AM_THREADS, smem, tkc_stream()>>>(a);
	tkc_check_launch(what);
}

/* The static flags remember, per instantiation, the raised limit. */
template <int HD> static void am_fwd(const am_args &a0)
{
	static int raised;
	am_args a = a0;

	a.ntiles = (a.T + AM_BR - 1) / AM_BR;
	am_launch(am_fwd_kernel<HD>, (long long)a.ntiles * a.B * a.nh,
		  am_fwd_smem<HD>(), a, "attention_fwd (mma)", &raised);
}

template <int HD> static void am_bwd(const am_args &a0)
{
	constexpr int BQ = am_kv_bq<HD>::value;
	static int raised_dq, raised_kv;
	am_args a = a0;

	a.ntiles = (a.T + AM_BR - 1) / AM_BR;
	am_launch(am_dq_kernel<HD>, (long long)a.ntiles * a.B * a.nh,
		  am_dq_smem<HD>(), a, "attention_bwd (mma dq)", &raised_dq);
	a.ntiles = (a.T + AM_BC - 1) / AM_BC;
	am_launch(am_dkdv_kernel<HD, BQ>, (long long)a.ntiles * a.B * a.nkv,
		  am_dkdv_smem<HD, BQ>(), a, "attention_bwd (mma dk, dv)",
		  &raised_kv);
}

extern "C" int tkc_attention_mma_fwd(int dt, void *out, float *lse,
				     const void *q, const void *k,
				     const void *v, const int32_t *pos, int B,
				     int T, int nh, int nkv, int hd, int window,
				     float scale)
{
	const void *ptrs[] = {out, q, k, v};
	am_args a = {};

	if (!am_applies(dt, hd, ptrs, 4))
		return -ENOTSUP;
	a.q = (const uint16_t *)q;
	a.k = (const uint16_t *)k;
	a.v = (const uint16_t *)v;
	a.pos = pos;
	a.o = (uint16_t *)out;
	a.lse = lse;
	a.B = B;
	a.T = T;
	a.nh = nh;
	a.nkv = nkv;
	a.window = window;
	a.scale = scale;
	if (hd == 64)
		am_fwd<64>(a);
	else
		am_fwd<128>(a);
	return 0;
}

extern "C" int tkc_attention_mma_bwd(int dt, void *dq, void *dk, void *dv,
				     const void *dout, const void *out,
				     const float *lse, const void *q,
				     const void *k, const void *v,
				     const int32_t *pos, int B, int T, int nh,
				     int nkv, int hd, int window, float scale)
{
	const void *ptrs[] = {dq, dk, dv, dout, out, q, k, v};
	am_args a = {};

	if (!am_applies(dt, hd, ptrs, 8))
		return -ENOTSUP;
	a.q = (const uint16_t *)q;
	a.k = (const uint16_t *)k;
	a.v = (const uint16_t *)v;
	a.out = (const uint16_t *)out;
	a.dout = (const uint16_t *)dout;
	a.lse_in = lse;
	a.pos = pos;
	a.dq = (uint16_t *)dq;
	a.dk = (uint16_t *)dk;
	a.dv = (uint16_t *)dv;
	a.B = B;
	a.T = T;
	a.nh = nh;
	a.nkv = nkv;
	a.window = window;
	a.scale = scale;
	if (hd == 64)
		am_bwd<64>(a);
	else
		am_bwd<128>(a);
	return 0;
}
