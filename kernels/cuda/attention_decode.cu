/* attention_decode.cu: generation's attention, n queries against the KV
 * cache (tk_ops.h's kv_store and attention_decode; the CPU reference is
 * kernels/cpu/attention_decode.c).
 *
 * kc, vc [rows, ctx, nkv * hd]; k, v [n, nkv * hd]; q, out [n, nh * hd];
 * lse (f32) [nh, n]. Query i attends row seq[i]'s keys lo .. pos[i], lo =
 * max(0, pos[i] - window + 1) when window > 0, else 0; query head h reads
 * kv head h / (nh / nkv). The same kernel serves a prompt (many queries of
 * one row, each at its own position: causal by construction) and a decode
 * step (one query a row, at its end).
 *
 * kv_store: one thread an element of k and v, copied (bits, whatever dt)
 * to its row and position: the cache is the CPU's bit for bit.
 *
 * attention_decode: one block of DEC_WARPS warps a (query i, head h). The
 * keys lo .. pos[i] are dealt round robin to the warps (warp w takes lo +
 * w, lo + w + DEC_WARPS, ...); within a warp, lane l holds the head's
 * elements l, l + 32, ... (NC = ceil(hd / 32) of them, in registers: q
 * widened once, and the accumulator). Per key the lanes' partial dot
 * products are summed by shuffles, then the warp's online softmax in fp32
 * (FlashAttention's: running max m, sum l, accumulator rescaled by
 * exp(m_old - m_new)) takes it in. The warps' (m, l, acc) are then
 * combined in shared memory, out = acc / l rounded once (tkc_put), lse[h *
 * n + i] = m + log(l). Every query has at least its own key (lo <= pos[i]),
 * so l >= 1 and m is finite. The arithmetic differs from the CPU's (which
 * sums the dot products in index order and the softmax in two passes) in
 * order only: fp32 throughout, results within rounding of the CPU's.
 *
 * Blocks go out with the highest query index first: in a prefill, the
 * queries with the most keys start first.
 *
 * A faster version: a decode step has few blocks (n * nh, e.g. 8 rows * 32
 * heads) each walking a long cache alone, which leaves most of the device
 * idle at long contexts. Split-K (FlashDecoding) would cut the keys of
 * each (i, h) into chunks of a few hundred keys, one block a chunk
 * writing its partial (m, l, acc[hd]) to a scratch buffer, and a second
 * small kernel would combine the chunks as the warps are combined here.
 * Also: the query heads of a GQA group read the same keys, so one block
 * could serve the group (K and V tiles loaded once into shared memory,
 * vectorized 16-byte loads); and a long prefill is better served by the
 * tiled kernels of attention.cu (tensor cores), the whole prompt's scores
 * as matrix products.
 */
#include <math.h>
#include <stdint.h>

#include "cuda_ops.h"

#define DEC_WARPS 4
#define DEC_THREADS (32 * DEC_WARPS)

/* kc/vc[(seq[i] * ctx + pos[i]) * dkv + c] = k/v[i * dkv + c]; a grid-
 * stride loop over the n * dkv elements. */
template <typename T>
__global__ static void kv_store_kernel(T *kc, T *vc, const T *k, const T *v,
				       const int32_t *seq, const int32_t *pos,
				       int n, int dkv, int ctx)
{
	size_t total = (size_t)n * dkv;

	for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	     e < total; e += (size_t)gridDim.x * blockDim.x) {
		size_t i = e / dkv, c = e % dkv;
		size_t dst = ((size_t)seq[i] * ctx + (size_t)pos[i]) * dkv + c;

		kc[dst] = k[e];
		vc[dst] = v[e];
	}
}

/* Sum over the 32 lanes, every lane gets it. */
static __device__ float warp_sum(float x)
{
	for (int o = 16; o > 0; o >>= 1)
		x += __shfl_xor_sync(0xffffffffu, x, o);
	return x;
}

/* One block a (query i, head h), grid n * nh, DEC_THREADS threads; NC =
 * ceil(hd / 32) head elements a lane (NC * 32 <= TK_ATT_DEC_MAX_HD). */
template <typename T, int NC>
__global__ static void __launch_bounds__(DEC_THREADS)
    decode_kernel(T *out, float *lse, const T *q, const T *kc, const T *vc,
		  const int32_t *seq, const int32_t *pos, int n, int nh,
		  int nkv, int hd, int ctx, int window, float scale)
{
	__shared__ float acc_s[DEC_WARPS][NC * 32];
	__shared__ float m_s[DEC_WARPS], l_s[DEC_WARPS];
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	const int h = (int)(blockIdx.x % (unsigned)nh);
	const int i = n - 1 - (int)(blockIdx.x / (unsigned)nh);
	const int p = pos[i];
	const int lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
	const size_t dq = (size_t)nh * hd, dkv = (size_t)nkv * hd;
	const size_t qo = (size_t)i * dq + (size_t)h * hd;
	const size_t base =
	    (size_t)seq[i] * ctx * dkv + (size_t)(h / (nh / nkv)) * hd;
	float qr[NC], acc[NC], m = -INFINITY, l = 0.0f;

#pragma unroll
	for (int c = 0; c < NC; c++) {
		int e = lane + 32 * c;

		qr[c] = e < hd ? tkc_ld(q[qo + e]) : 0.0f;
		acc[c] = 0.0f;
	}

	for (int j = lo + w; j <= p; j += DEC_WARPS) {
		const T *kr = kc + base + (size_t)j * dkv;
		const T *vr = vc + base + (size_t)j * dkv;
		float d = 0.0f, s, mn, alpha, pj;

#pragma unroll
		for (int c = 0; c < NC; c++) {
			int e = lane + 32 * c;

			if (e < hd)
				d = fmaf(qr[c], tkc_ld(kr[e]), d);
		}
		s = warp_sum(d) * scale;
		mn = fmaxf(m, s);
		if (mn == -INFINITY) /* a -inf score: no weight */
			continue;
		alpha = expf(m - mn); /* 0 from m = -inf */
		pj = expf(s - mn);
		l = l * alpha + pj;
		m = mn;
#pragma unroll
		for (int c = 0; c < NC; c++) {
			int e = lane + 32 * c;

			acc[c] = fmaf(pj, e < hd ? tkc_ld(vr[e]) : 0.0f,
				      acc[c] * alpha);
		}
	}

	/* the warps' partial softmaxes, combined at the block's max */
#pragma unroll
	for (int c = 0; c < NC; c++)
		acc_s[w][lane + 32 * c] = acc[c];
	if (lane == 0) {
		m_s[w] = m;
		l_s[w] = l;
	}
	__syncthreads();
	if (w == 0) {
		float mx = -INFINITY, sum = 0.0f, f[DEC_WARPS];

#pragma unroll
		for (int u = 0; u < DEC_WARPS; u++)
			mx = fmaxf(mx, m_s[u]);
#pragma unroll
		for (int u = 0; u < DEC_WARPS; u++) {
			/* a warp without keys: m -inf, l 0, acc 0 */
			f[u] = m_s[u] == -INFINITY ? 0.0f : expf(m_s[u] - mx);
			sum = fmaf(l_s[u], f[u], sum);
		}
#pragma unroll
		for (int c = 0; c < NC; c++) {
			int e = lane + 32 * c;
			float o = 0.0f;

			if (e >= hd)
				continue;
#pragma unroll
			for (int u = 0; u < DEC_WARPS; u++)
				o = fmaf(acc_s[u][e], f[u], o);
			tkc_put(&out[qo + e], o / sum);
		}
		if (lane == 0)
			lse[(size_t)h * n + i] = mx + logf(sum);
	}
}

template <typename T>
static void kv_store(void *kc, void *vc, const void *k, const void *v,
		     const int32_t *seq, const int32_t *pos, int n, int dkv,
		     int ctx)
{
	kv_store_kernel<T>
	    <<<tkc_blocks((size_t)n * dkv), TKC_THREADS, 0, tkc_stream()>>>(
		(T *)kc, (T *)vc, (const T *)k, (const T *)v, seq, pos, n, dkv,
		ctx);
}

template <typename T, int NC>
static void decode_launch(void *out, float *lse, const void *q, const void *kc,
			  const void *vc, const int32_t *seq,
			  const int32_t *pos, int n, int nh, int nkv, int hd,
			  int ctx, int window, float scale)
{
	decode_kernel<T, NC>
	    <<<(unsigned)((size_t)n * nh), DEC_THREADS, 0, tkc_stream()>>>(
		(T *)out, lse, (const T *)q, (const T *)kc, (const T *)vc, seq,
		pos, n, nh, nkv, hd, ctx, window, scale);
}

/* The smallest instantiated NC with 32 NC >= hd. */
template <typename T>
static void decode(void *out, float *lse, const void *q, const void *kc,
		   const void *vc, const int32_t *seq, const int32_t *pos,
		   int n, int nh, int nkv, int hd, int ctx, int window,
		   float scale)
{
#define DEC_RUN(NC)                                                            \
	decode_launch<T, NC>(out, lse, q, kc, vc, seq, pos, n, nh, nkv, hd,    \
			     ctx, window, scale)
	if (hd <= 32)
		DEC_RUN(1);
	else if (hd <= 64)
		DEC_RUN(2);
	else if (hd <= 128)
		DEC_RUN(4);
	else if (hd <= 256)
		DEC_RUN(8);
	else
		DEC_RUN(16);
#undef DEC_RUN
}

static_assert(TK_ATT_DEC_MAX_HD <= 16 * 32,
	      "attention_decode: hd above the largest instantiation");

extern "C" void tkc_kv_store(int dt, void *kc, void *vc, const void *k,
			     const void *v, const int32_t *seq,
			     const int32_t *pos, int n, int nkv, int hd,
			     int ctx)
{
	if (n <= 0 || nkv <= 0 || hd <= 0)
		return;
	if (dt == TK_F32)
		kv_store<float>(kc, vc, k, v, seq, pos, n, nkv * hd, ctx);
	else if (dt == TK_BF16)
		kv_store<tkc_bf16>(kc, vc, k, v, seq, pos, n, nkv * hd, ctx);
	else {
		tkc_bad_dtype("kv_store", dt);
		return;
	}
	tkc_check_launch("kv_store");
}

extern "C" void tkc_attention_decode(int dt, void *out, float *lse,
				     const void *q, const void *kc,
				     const void *vc, const int32_t *seq,
				     const int32_t *pos, int n, int nh, int nkv,
				     int hd, int ctx, int window, float scale)
{
	if (n <= 0 || nh <= 0)
		return;
	/* the op table has no error channel but the recorder (a wrong shape
	 * is a bug of the caller, not data) */
	if (nkv <= 0 || nh % nkv != 0 || hd <= 0 || hd > TK_ATT_DEC_MAX_HD) {
		tkc_check(cudaErrorInvalidValue,
			  "attention_decode: shape (nh % nkv, hd 1..512)");
		return;
	}
	if (dt == TK_F32)
		decode<float>(out, lse, q, kc, vc, seq, pos, n, nh, nkv, hd,
			      ctx, window, scale);
	else if (dt == TK_BF16)
		decode<tkc_bf16>(out, lse, q, kc, vc, seq, pos, n, nh, nkv, hd,
				 ctx, window, scale);
	else {
		tkc_bad_dtype("attention_decode", dt);
		return;
	}
	tkc_check_launch("attention_decode");
}
