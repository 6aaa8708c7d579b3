/* attention.cu: causal grouped-query attention with document masking and an
 * optional sliding window, flash style (FlashAttention-2): no [T, T] score
 * matrix is ever stored; scores live in registers one tile at a time.
 *
 * q [B*T, nh*hd], k/v [B*T, nkv*hd], out [B*T, nh*hd], lse [B, nh, T].
 * Query i attends keys lo(i) <= j <= i, lo(i) = max(doc_start(i),
 * i - window + 1 when window > 0), doc_start(i) = i - pos[i] clamped to
 * [0, i] (tk_attn_key_lo, kernels/tk_attn.h). Query head h reads kv head
 * h / (nh / nkv).
 *
 * q, k, v, out, dout, dq, dk, dv are dt (F32 or BF16: every kernel is a
 * template over the storage type ST), lse is f32. Tiles are fp32 in shared
 * memory (a bf16 input widened exactly when the tile is loaded); each
 * output is rounded once, when it is stored.
 *
 * bf16 with hd 64 or 128 on sm_80+ goes to the tensor-core kernels of
 * attention_mma.cu instead (TACO_CUDA_ATTENTION=simt keeps it here); these
 * SIMT kernels take f32, every other head dim and older devices.
 *
 * Three kernels, 256 threads each, fp32 math (fmaf), shared-memory tiles:
 * - fwd: a block owns BQ query rows of one (b, h) and walks the key tiles
 *   [min lo, last row] with an online softmax; saves lse = m + log(l).
 * - dq: a block owns BQ query rows; recomputes P = exp(s - lse) tile by
 *   tile, dS = P * (dP - D), D_i = dout_i . out_i, and dq = scale dS K.
 * - dkdv: a block owns BKV keys of one (b, kv head) and loops over every
 *   query head of the group and every query tile that can see its keys, so
 *   dk/dv are summed in a fixed order inside one block and overwritten: no
 *   atomics, the result is deterministic.
 *
 * Thread layout of a tile: tid = 16 ty + tx; a thread owns rows
 * ty * RQ + i (i < RQ) and columns tx + 16 c, so a row's 16 threads are
 * one half-warp and row reductions are 4 shuffles. Head dims are padded to
 * HDP (a multiple of 16; the padding is zero in every tile), so any hd in
 * 1..256 runs; rows of a tile have LD = HDP + 4 floats, which keeps the
 * float4 reads along d free of bank conflicts.
 */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "cuda_ops.h"
#include "tk_attn.h"

#define ATT_THREADS 256
#define ATT_BK 32    /* keys per tile of fwd and dq */
#define ATT_BQ_KV 32 /* query rows per tile of dkdv */
#define ATT_HD_MAX 256

/* Reductions over the 16 lanes of a half-warp (all 32 lanes call). */
static __device__ float hmax16(float x)
{
	for (int o = 8; o > 0; o >>= 1)
		x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
	return x;
}

static __device__ float hsum16(float x)
{
	for (int o = 8; o > 0; o >>= 1)
		x += __shfl_xor_sync(0xffffffffu, x, o);
	return x;
}

/* tile[r][d] = src row r0 + r, column d, for r < BR, d < HDP; zero past
 * nrows or hd. src rows are ld elements apart. */
template <int HDP, int BR, typename ST>
static __device__ void load_tile(float *tile, const ST *src, size_t ld, int r0,
				 int nrows, int hd)
{
	constexpr int LD = HDP + 4;

	for (int e = threadIdx.x; e < BR * HDP; e += ATT_THREADS) {
		int r = e / HDP, d = e % HDP;

		tile[r * LD + d] = r < nrows && d < hd
				       ? tkc_ld(src[(size_t)(r0 + r) * ld + d])
				       : 0.0f;
	}
}

/* acc[i][c] += A[ar + i] . Bm[bc + 16 c] over d < HDP (rows of LD). */
template <int HDP, int NI, int NC>
static __device__ void tile_dot(float (&acc)[NI][NC], const float *A, int ar,
				const float *Bm, int bc)
{
	constexpr int LD = HDP + 4;

#pragma unroll 4
	for (int d = 0; d < HDP; d += 4) {
		float4 b4[NC];

#pragma unroll
		for (int c = 0; c < NC; c++)
			b4[c] = *(const float4 *)&Bm[(bc + 16 * c) * LD + d];
#pragma unroll
		for (int i = 0; i < NI; i++) {
			float4 a4 = *(const float4 *)&A[(ar + i) * LD + d];

#pragma unroll
			for (int c = 0; c < NC; c++) {
				acc[i][c] = fmaf(a4.x, b4[c].x, acc[i][c]);
				acc[i][c] = fmaf(a4.y, b4[c].y, acc[i][c]);
				acc[i][c] = fmaf(a4.z, b4[c].z, acc[i][c]);
				acc[i][c] = fmaf(a4.w, b4[c].w, acc[i][c]);
			}
		}
	}
}

/* acc[i][c] += sum_{k < NK} P[pr + i][k] M[k][tx + 16 c]; P rows PLD
 * floats apart, M rows LD. */
template <int HDP, int NI, int NK, int PLD>
static __device__ void tile_acc(float (&acc)[NI][HDP / 16], const float *P,
				int pr, const float *M, int tx)
{
	constexpr int LD = HDP + 4, NC = HDP / 16;

	for (int k0 = 0; k0 < NK; k0 += 4) {
		float4 p4[NI];

#pragma unroll
		for (int i = 0; i < NI; i++)
			p4[i] = *(const float4 *)&P[(pr + i) * PLD + k0];
#pragma unroll
		for (int kk = 0; kk < 4; kk++) {
			const float *mr = M + (k0 + kk) * LD + tx;

#pragma unroll
			for (int c = 0; c < NC; c++) {
				float mv = mr[16 * c];

#pragma unroll
				for (int i = 0; i < NI; i++) {
					float pv = kk == 0   ? p4[i].x
						   : kk == 1 ? p4[i].y
						   : kk == 2 ? p4[i].z
							     : p4[i].w;
					acc[i][c] = fmaf(pv, mv, acc[i][c]);
				}
			}
		}
	}
}

/* acc[i][c] += sum_{k < NK} P[k][pr + i] M[k][tx + 16 c] (P transposed). */
template <int HDP, int NI, int NK, int PLD>
static __device__ void tile_acc_t(float (&acc)[NI][HDP / 16], const float *P,
				  int pr, const float *M, int tx)
{
	constexpr int LD = HDP + 4, NC = HDP / 16;

#pragma unroll 2
	for (int k = 0; k < NK; k++) {
		const float *mr = M + k * LD + tx;
		float pv[NI];

#pragma unroll
		for (int i = 0; i < NI; i++)
			pv[i] = P[k * PLD + pr + i];
#pragma unroll
		for (int c = 0; c < NC; c++) {
			float mv = mr[16 * c];

#pragma unroll
			for (int i = 0; i < NI; i++)
				acc[i][c] = fmaf(pv[i], mv, acc[i][c]);
		}
	}
}

/* Common arguments of the three kernels; ST the storage type. */
template <typename ST> struct att_args {
	const ST *q, *k, *v, *out, *dout;
	const float *lse_in;
	const int32_t *pos;
	ST *o, *dq, *dk, *dv;
	float *lse;
	int B, T, nh, nkv, hd, window;
	float scale;
	int ntiles; /* tiles along T of the kernel's own tile size */
};

/* Rows of a query tile per block: 64 up to HDP 128, 32 above (shared
 * memory). */
template <int HDP> struct att_rq {
	static constexpr int value = HDP <= 128 ? 4 : 2;
};

template <int HDP, int RQ> static constexpr size_t fwd_smem()
{
	return 4 * ((size_t)(16 * RQ + 2 * ATT_BK) * (HDP + 4) +
		    (size_t)16 * RQ * (ATT_BK + 4) + 16 * RQ);
}

/* grid: ntiles * B * nh blocks, the last query tiles (most keys) first. */
template <typename ST, int HDP, int RQ>
static __global__ void __launch_bounds__(ATT_THREADS)
    att_fwd_kernel(att_args<ST> a)
{
	constexpr int BQ = 16 * RQ, BK = ATT_BK, LD = HDP + 4, PLD = BK + 4;
	constexpr int NC = HDP / 16;
	extern __shared__ float4 att_smem4[];
	float *Qs = (float *)att_smem4;	    /* [BQ][LD] */
	float *Ks = Qs + BQ * LD;	    /* [BK][LD] */
	float *Vs = Ks + BK * LD;	    /* [BK][LD] */
	float *Ps = Vs + BK * LD;	    /* [BQ][PLD] */
	int *lo_s = (int *)(Ps + BQ * PLD); /* [BQ] */
	const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
	const int nbh = a.B * a.nh, bh = blockIdx.x % nbh;
	const int tile = a.ntiles - 1 - (int)(blockIdx.x / nbh);
	const int b = bh / a.nh, h = bh % a.nh, g = h / (a.nh / a.nkv);
	const int T = a.T, hd = a.hd, q0 = tile * BQ;
	const int qn = min(BQ, T - q0), khi = q0 + qn - 1;
	const size_t ldq = (size_t)a.nh * hd, ldk = (size_t)a.nkv * hd;
	const size_t qoff = (size_t)b * T * ldq + (size_t)h * hd;
	const size_t koff = (size_t)b * T * ldk + (size_t)g * hd;
	const int32_t *pb = a.pos + (size_t)b * T;
	float o[RQ][NC], m[RQ], l[RQ];
	int lo_r[RQ], klo = q0;

	load_tile<HDP, BQ>(Qs, a.q + qoff, ldq, q0, qn, hd);
	if (tid < BQ)
		lo_s[tid] =
		    tid < qn ? tk_attn_key_lo(pb, q0 + tid, a.window) : INT_MAX;
	__syncthreads();
	for (int r = 0; r < qn; r++)
		klo = min(klo, lo_s[r]);
#pragma unroll
	for (int i = 0; i < RQ; i++) {
		lo_r[i] = lo_s[ty * RQ + i]; /* INT_MAX past T: no key */
		m[i] = -INFINITY;
		l[i] = 0.0f;
#pragma unroll
		for (int c = 0; c < NC; c++)
			o[i][c] = 0.0f;
	}

	for (int kt = klo; kt <= khi; kt += BK) {
		float s[RQ][2];

		load_tile<HDP, BK>(Ks, a.k + koff, ldk, kt, khi - kt + 1, hd);
		load_tile<HDP, BK>(Vs, a.v + koff, ldk, kt, khi - kt + 1, hd);
		__syncthreads();
#pragma unroll
		for (int i = 0; i < RQ; i++)
			s[i][0] = s[i][1] = 0.0f;
		tile_dot<HDP, RQ, 2>(s, Qs, ty * RQ, Ks, tx);

		/* online softmax: rescale what came before by
		 * exp(m_old - m_new) */
#pragma unroll
		for (int i = 0; i < RQ; i++) {
			const int qi = q0 + ty * RQ + i;
			float mt = -INFINITY, mn, alpha, ps;

#pragma unroll
			for (int c = 0; c < 2; c++) {
				int j = kt + tx + 16 * c;

				s[i][c] = j >= lo_r[i] && j <= qi
					      ? s[i][c] * a.scale
					      : -INFINITY;
				mt = fmaxf(mt, s[i][c]);
			}
			mn = fmaxf(m[i], hmax16(mt));
			if (mn == -INFINITY) { /* no key of this row yet */
				alpha = 1.0f;
				s[i][0] = s[i][1] = 0.0f;
			} else {
				alpha = expf(m[i] - mn); /* 0 from -inf */
				s[i][0] = expf(s[i][0] - mn);
				s[i][1] = expf(s[i][1] - mn);
			}
			ps = hsum16(s[i][0] + s[i][1]);
			l[i] = l[i] * alpha + ps;
			m[i] = mn;
#pragma unroll
			for (int c = 0; c < NC; c++)
				o[i][c] *= alpha;
			Ps[(ty * RQ + i) * PLD + tx] = s[i][0];
			Ps[(ty * RQ + i) * PLD + tx + 16] = s[i][1];
		}
		__syncthreads();
		tile_acc<HDP, RQ, BK, PLD>(o, Ps, ty * RQ, Vs, tx);
		__syncthreads();
	}

#pragma unroll
	for (int i = 0; i < RQ; i++) {
		const int r = ty * RQ + i;

		if (r < qn) { /* l >= 1: key i itself is always allowed */
			float inv = 1.0f / l[i];
			ST *orow = a.o + qoff + (size_t)(q0 + r) * ldq;

#pragma unroll
			for (int c = 0; c < NC; c++)
				if (tx + 16 * c < hd)
					tkc_put(&orow[tx + 16 * c],
						o[i][c] * inv);
			if (tx == 0)
				a.lse[((size_t)b * a.nh + h) * T + q0 + r] =
				    m[i] + logf(l[i]);
		}
	}
}

template <int HDP, int RQ> static constexpr size_t dq_smem()
{
	return 4 * ((size_t)(2 * 16 * RQ + 2 * ATT_BK) * (HDP + 4) +
		    (size_t)16 * RQ * (ATT_BK + 4) + 16 * RQ);
}

/* D_i = dout_i . out_i of tile row r (all 16 lanes of the row's half-warp
 * get it); dOs holds dout rows, orow is row r of out. */
template <int HDP, typename ST>
static __device__ float row_D(const float *dOs, int r, const ST *orow,
			      int valid, int hd, int tx)
{
	constexpr int LD = HDP + 4;
	float acc = 0.0f;

	if (valid)
		for (int d = tx; d < hd; d += 16)
			acc = fmaf(dOs[r * LD + d], tkc_ld(orow[d]), acc);
	return hsum16(acc);
}

/* grid: ntiles * B * nh blocks, the last query tiles first. */
template <typename ST, int HDP, int RQ>
static __global__ void __launch_bounds__(ATT_THREADS)
    att_dq_kernel(att_args<ST> a)
{
	constexpr int BQ = 16 * RQ, BK = ATT_BK, LD = HDP + 4, PLD = BK + 4;
	constexpr int NC = HDP / 16;
	extern __shared__ float4 att_smem4[];
	float *Qs = (float *)att_smem4;	     /* [BQ][LD] */
	float *dOs = Qs + BQ * LD;	     /* [BQ][LD] */
	float *Ks = dOs + BQ * LD;	     /* [BK][LD] */
	float *Vs = Ks + BK * LD;	     /* [BK][LD] */
	float *dSs = Vs + BK * LD;	     /* [BQ][PLD] */
	int *lo_s = (int *)(dSs + BQ * PLD); /* [BQ] */
	const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
	const int nbh = a.B * a.nh, bh = blockIdx.x % nbh;
	const int tile = a.ntiles - 1 - (int)(blockIdx.x / nbh);
	const int b = bh / a.nh, h = bh % a.nh, g = h / (a.nh / a.nkv);
	const int T = a.T, hd = a.hd, q0 = tile * BQ;
	const int qn = min(BQ, T - q0), khi = q0 + qn - 1;
	const size_t ldq = (size_t)a.nh * hd, ldk = (size_t)a.nkv * hd;
	const size_t qoff = (size_t)b * T * ldq + (size_t)h * hd;
	const size_t koff = (size_t)b * T * ldk + (size_t)g * hd;
	const int32_t *pb = a.pos + (size_t)b * T;
	const float *lrow = a.lse_in + ((size_t)b * a.nh + h) * T;
	float dqa[RQ][NC], L[RQ], D[RQ];
	int lo_r[RQ], klo = q0;

	load_tile<HDP, BQ>(Qs, a.q + qoff, ldq, q0, qn, hd);
	load_tile<HDP, BQ>(dOs, a.dout + qoff, ldq, q0, qn, hd);
	if (tid < BQ)
		lo_s[tid] =
		    tid < qn ? tk_attn_key_lo(pb, q0 + tid, a.window) : INT_MAX;
	__syncthreads();
	for (int r = 0; r < qn; r++)
		klo = min(klo, lo_s[r]);
#pragma unroll
	for (int i = 0; i < RQ; i++) {
		const int r = ty * RQ + i;

		lo_r[i] = lo_s[r];
		L[i] = r < qn ? lrow[q0 + r] : 0.0f;
		D[i] = row_D<HDP>(
		    dOs, r, a.out + qoff + (size_t)(q0 + min(r, qn - 1)) * ldq,
		    r < qn, hd, tx);
#pragma unroll
		for (int c = 0; c < NC; c++)
			dqa[i][c] = 0.0f;
	}

	for (int kt = klo; kt <= khi; kt += BK) {
		float s[RQ][2], dp[RQ][2];

		load_tile<HDP, BK>(Ks, a.k + koff, ldk, kt, khi - kt + 1, hd);
		load_tile<HDP, BK>(Vs, a.v + koff, ldk, kt, khi - kt + 1, hd);
		__syncthreads();
#pragma unroll
		for (int i = 0; i < RQ; i++)
			s[i][0] = s[i][1] = dp[i][0] = dp[i][1] = 0.0f;
		tile_dot<HDP, RQ, 2>(s, Qs, ty * RQ, Ks, tx);
		tile_dot<HDP, RQ, 2>(dp, dOs, ty * RQ, Vs, tx);
#pragma unroll
		for (int i = 0; i < RQ; i++) {
			const int qi = q0 + ty * RQ + i;

#pragma unroll
			for (int c = 0; c < 2; c++) {
				int j = kt + tx + 16 * c;
				float p = j >= lo_r[i] && j <= qi
					      ? expf(s[i][c] * a.scale - L[i])
					      : 0.0f;

				dSs[(ty * RQ + i) * PLD + tx + 16 * c] =
				    p * (dp[i][c] - D[i]);
			}
		}
		__syncthreads();
		tile_acc<HDP, RQ, BK, PLD>(dqa, dSs, ty * RQ, Ks, tx);
		__syncthreads();
	}

#pragma unroll
	for (int i = 0; i < RQ; i++) {
		const int r = ty * RQ + i;

		if (r < qn) {
			ST *drow = a.dq + qoff + (size_t)(q0 + r) * ldq;

#pragma unroll
			for (int c = 0; c < NC; c++)
				if (tx + 16 * c < hd)
					tkc_put(&drow[tx + 16 * c],
						dqa[i][c] * a.scale);
		}
	}
}

/* Keys of a dkdv block: 64 up to HDP 64, 32 above (shared memory). */
template <int HDP> struct att_rk {
	static constexpr int value = HDP <= 64 ? 4 : 2;
};

template <int HDP, int RK> static constexpr size_t dkdv_smem()
{
	return 4 * ((size_t)(2 * 16 * RK + 2 * ATT_BQ_KV) * (HDP + 4) +
		    2 * (size_t)ATT_BQ_KV * (16 * RK + 4) + 3 * ATT_BQ_KV);
}

/* grid: ntiles * B * nkv blocks, the first key tiles (most queries)
 * first. */
template <typename ST, int HDP, int RK>
static __global__ void __launch_bounds__(ATT_THREADS)
    att_dkdv_kernel(att_args<ST> a)
{
	constexpr int BKV = 16 * RK, BQ = ATT_BQ_KV, LD = HDP + 4;
	constexpr int PLD = BKV + 4, NC = HDP / 16;
	extern __shared__ float4 att_smem4[];
	float *Ks = (float *)att_smem4;	     /* [BKV][LD] */
	float *Vs = Ks + BKV * LD;	     /* [BKV][LD] */
	float *Qs = Vs + BKV * LD;	     /* [BQ][LD] */
	float *dOs = Qs + BQ * LD;	     /* [BQ][LD] */
	float *Ps = dOs + BQ * LD;	     /* [BQ][PLD], P^T of the tile */
	float *dSs = Ps + BQ * PLD;	     /* [BQ][PLD] */
	int *lo_s = (int *)(dSs + BQ * PLD); /* [BQ] */
	float *lse_s = (float *)(lo_s + BQ); /* [BQ] */
	float *D_s = lse_s + BQ;	     /* [BQ] */
	const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
	const int nbg = a.B * a.nkv, bg = blockIdx.x % nbg;
	const int kt = (int)(blockIdx.x / nbg);
	const int b = bg / a.nkv, g = bg % a.nkv, group = a.nh / a.nkv;
	const int T = a.T, hd = a.hd, kv0 = kt * BKV;
	const int kn = min(BKV, T - kv0), kvlast = kv0 + kn - 1;
	const size_t ldq = (size_t)a.nh * hd, ldk = (size_t)a.nkv * hd;
	const size_t koff = (size_t)b * T * ldk + (size_t)g * hd;
	const int32_t *pb = a.pos + (size_t)b * T;
	/* queries past kvlast + window - 1 see none of these keys */
	const int qend =
	    a.window > 0 && a.window < T - kvlast ? kvlast + a.window : T;
	float dka[RK][NC], dva[RK][NC];

	load_tile<HDP, BKV>(Ks, a.k + koff, ldk, kv0, kn, hd);
	load_tile<HDP, BKV>(Vs, a.v + koff, ldk, kv0, kn, hd);
#pragma unroll
	for (int i = 0; i < RK; i++)
#pragma unroll
		for (int c = 0; c < NC; c++)
			dka[i][c] = dva[i][c] = 0.0f;

	for (int h = g * group; h < (g + 1) * group; h++) {
		const size_t qoff = (size_t)b * T * ldq + (size_t)h * hd;
		const float *lrow = a.lse_in + ((size_t)b * a.nh + h) * T;

		for (int q0 = kv0; q0 < qend; q0 += BQ) {
			const int qn = min(BQ, T - q0);
			int need = 0;

			/* skip tiles none of whose rows sees these keys
			 * (other documents, outside the window) */
			if (tid < BQ) {
				int lo = tid < qn ? tk_attn_key_lo(pb, q0 + tid,
								   a.window)
						  : INT_MAX;

				lo_s[tid] = lo;
				lse_s[tid] = tid < qn ? lrow[q0 + tid] : 0.0f;
				need = lo <= kvlast;
			}
			if (!__syncthreads_or(need))
				continue;
			load_tile<HDP, BQ>(Qs, a.q + qoff, ldq, q0, qn, hd);
			load_tile<HDP, BQ>(dOs, a.dout + qoff, ldq, q0, qn, hd);
			__syncthreads();
			{
				/* D of row tid / 8, 8 lanes per row */
				const int r = tid >> 3, sub = tid & 7;
				const ST *orow =
				    a.out + qoff + (size_t)(q0 + r) * ldq;
				float acc = 0.0f;

				if (r < qn)
					for (int d = sub; d < hd; d += 8)
						acc =
						    fmaf(dOs[r * LD + d],
							 tkc_ld(orow[d]), acc);
				for (int o = 4; o > 0; o >>= 1)
					acc += __shfl_xor_sync(0xffffffffu, acc,
							       o);
				if (sub == 0)
					D_s[r] = acc;
			}
			__syncthreads();
			{
				float s[RK][2], dp[RK][2];

#pragma unroll
				for (int i = 0; i < RK; i++)
					s[i][0] = s[i][1] = dp[i][0] =
					    dp[i][1] = 0.0f;
				tile_dot<HDP, RK, 2>(s, Ks, ty * RK, Qs, tx);
				tile_dot<HDP, RK, 2>(dp, Vs, ty * RK, dOs, tx);
#pragma unroll
				for (int i = 0; i < RK; i++) {
					const int kr = ty * RK + i;
					const int j = kv0 + kr;

#pragma unroll
					for (int c = 0; c < 2; c++) {
						const int qr = tx + 16 * c;
						float p =
						    kr < kn && qr < qn &&
							    j >= lo_s[qr] &&
							    j <= q0 + qr
							? expf(s[i][c] *
								   a.scale -
							       lse_s[qr])
							: 0.0f;

						Ps[qr * PLD + kr] = p;
						dSs[qr * PLD + kr] =
						    p * (dp[i][c] - D_s[qr]);
					}
				}
			}
			__syncthreads();
			tile_acc_t<HDP, RK, BQ, PLD>(dva, Ps, ty * RK, dOs, tx);
			tile_acc_t<HDP, RK, BQ, PLD>(dka, dSs, ty * RK, Qs, tx);
			__syncthreads();
		}
	}

#pragma unroll
	for (int i = 0; i < RK; i++) {
		const int kr = ty * RK + i;

		if (kr < kn) {
			ST *dkrow = a.dk + koff + (size_t)(kv0 + kr) * ldk;
			ST *dvrow = a.dv + koff + (size_t)(kv0 + kr) * ldk;

#pragma unroll
			for (int c = 0; c < NC; c++)
				if (tx + 16 * c < hd) {
					tkc_put(&dkrow[tx + 16 * c],
						dka[i][c] * a.scale);
					tkc_put(&dvrow[tx + 16 * c], dva[i][c]);
				}
		}
	}
}

/* ---- host side ------------------------------------------------------------
 */

/* Launches kern over blocks * 256 threads with smem bytes of dynamic
 * shared memory (raising the kernel's limit above 48 KiB once). */
template <typename ST>
static void att_launch(void (*kern)(att_args<ST>), long long blocks,
		       size_t smem, const att_args<ST> &a, const char *what,
		       int *raised)
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
	kern<<<(unsigned)blocks, ATT_THREADS, smem, tkc_stream()>>>(a);
	tkc_check_launch(what);
}

/* The static flags remember, per instantiation, that the kernel's shared
 * memory limit was raised. */
template <typename ST, int HDP> static void att_fwd(const att_args<ST> &a0)
{
	constexpr int RQ = att_rq<HDP>::value, BQ = 16 * RQ;
	static int raised;
	att_args<ST> a = a0;

	a.ntiles = (a.T + BQ - 1) / BQ;
	att_launch<ST>(att_fwd_kernel<ST, HDP, RQ>,
		       (long long)a.ntiles * a.B * a.nh, fwd_smem<HDP, RQ>(), a,
		       "attention_fwd", &raised);
}

template <typename ST, int HDP> static void att_bwd(const att_args<ST> &a0)
{
	constexpr int RQ = att_rq<HDP>::value, BQ = 16 * RQ;
	constexpr int RK = att_rk<HDP>::value, BKV = 16 * RK;
	static int raised_dq, raised_kv;
	att_args<ST> a = a0;

	a.ntiles = (a.T + BQ - 1) / BQ;
	att_launch<ST>(att_dq_kernel<ST, HDP, RQ>,
		       (long long)a.ntiles * a.B * a.nh, dq_smem<HDP, RQ>(), a,
		       "attention_bwd (dq)", &raised_dq);
	a.ntiles = (a.T + BKV - 1) / BKV;
	att_launch<ST>(att_dkdv_kernel<ST, HDP, RK>,
		       (long long)a.ntiles * a.B * a.nkv, dkdv_smem<HDP, RK>(),
		       a, "attention_bwd (dk, dv)", &raised_kv);
}

/* Runs F(a) at the smallest instantiated HDP >= hd. */
template <typename ST, int BWD> static void att_dispatch(const att_args<ST> &a)
{
#define ATT_RUN(H)                                                             \
	do {                                                                   \
		if (BWD)                                                       \
			att_bwd<ST, H>(a);                                     \
		else                                                           \
			att_fwd<ST, H>(a);                                     \
	} while (0)
	if (a.hd <= 16)
		ATT_RUN(16);
	else if (a.hd <= 32)
		ATT_RUN(32);
	else if (a.hd <= 64)
		ATT_RUN(64);
	else if (a.hd <= 80)
		ATT_RUN(80);
	else if (a.hd <= 96)
		ATT_RUN(96);
	else if (a.hd <= 128)
		ATT_RUN(128);
	else
		ATT_RUN(256);
#undef ATT_RUN
}

/* Shapes the kernels take; the op table has no error channel but the
 * recorder (a wrong shape is a bug of the caller, not data). */
static int att_valid(int nh, int nkv, int hd, const char *what)
{
	if (nkv <= 0 || nh % nkv != 0 || hd <= 0 || hd > ATT_HD_MAX) {
		tkc_check(cudaErrorInvalidValue, what);
		return 0;
	}
	return 1;
}

template <typename ST>
static void attention_fwd(void *out, float *lse, const void *q, const void *k,
			  const void *v, const int32_t *pos, int B, int T,
			  int nh, int nkv, int hd, int window, float scale)
{
	att_args<ST> a = {};

	a.q = (const ST *)q;
	a.k = (const ST *)k;
	a.v = (const ST *)v;
	a.pos = pos;
	a.o = (ST *)out;
	a.lse = lse;
	a.B = B;
	a.T = T;
	a.nh = nh;
	a.nkv = nkv;
	a.hd = hd;
	a.window = window;
	a.scale = scale;
	att_dispatch<ST, 0>(a);
}

template <typename ST>
static void attention_bwd(void *dq, void *dk, void *dv, const void *dout,
			  const void *out, const float *lse, const void *q,
			  const void *k, const void *v, const int32_t *pos,
			  int B, int T, int nh, int nkv, int hd, int window,
			  float scale)
{
	att_args<ST> a = {};

	a.q = (const ST *)q;
	a.k = (const ST *)k;
	a.v = (const ST *)v;
	a.out = (const ST *)out;
	a.dout = (const ST *)dout;
	a.lse_in = lse;
	a.pos = pos;
	a.dq = (ST *)dq;
	a.dk = (ST *)dk;
	a.dv = (ST *)dv;
	a.B = B;
	a.T = T;
	a.nh = nh;
	a.nkv = nkv;
	a.hd = hd;
	a.window = window;
	a.scale = scale;
	att_dispatch<ST, 1>(a);
}

extern "C" void tkc_attention_fwd(int dt, void *out, float *lse, const void *q,
				  const void *k, const void *v,
				  const int32_t *pos, int B, int T, int nh,
				  int nkv, int hd, int window, float scale)
{
	if (B <= 0 || T <= 0 || nh <= 0)
		return;
	if (!att_valid(nh, nkv, hd,
		       "attention_fwd: shape (nh % nkv, hd 1..256)"))
		return;
	/* bf16, hd 64 / 128, sm_80+: tensor cores (attention_mma.cu) */
	if (tkc_attention_mma_fwd(dt, out, lse, q, k, v, pos, B, T, nh, nkv, hd,
				  window, scale) == 0)
		return;
	if (dt == TK_F32)
		attention_fwd<float>(out, lse, q, k, v, pos, B, T, nh, nkv, hd,
				     window, scale);
	else if (dt == TK_BF16)
		attention_fwd<tkc_bf16>(out, lse, q, k, v, pos, B, T, nh, nkv,
					hd, window, scale);
	else
		tkc_bad_dtype("attention_fwd", dt);
}

extern "C" void tkc_attention_bwd(int dt, void *dq, void *dk, void *dv,
				  const void *dout, const void *out,
				  const float *lse, const void *q,
				  const void *k, const void *v,
				  const int32_t *pos, int B, int T, int nh,
				  int nkv, int hd, int window, float scale)
{
	if (B <= 0 || T <= 0 || nh <= 0)
		return;
	if (!att_valid(nh, nkv, hd,
		       "attention_bwd: shape (nh % nkv, hd 1..256)"))
		return;
	if (tkc_attention_mma_bwd(dt, dq, dk, dv, dout, out, lse, q, k, v, pos,
				  B, T, nh, nkv, hd, window, scale) == 0)
		return;
	if (dt == TK_F32)
		attention_bwd<float>(dq, dk, dv, dout, out, lse, q, k, v, pos,
				     B, T, nh, nkv, hd, window, scale);
	else if (dt == TK_BF16)
		attention_bwd<tkc_bf16>(dq, dk, dv, dout, out, lse, q, k, v,
					pos, B, T, nh, nkv, hd, window, scale);
	else
		tkc_bad_dtype("attention_bwd", dt);
}
