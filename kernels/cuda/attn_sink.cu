/* attn_sink.cu: attention sinks (gpt-oss), the math of
 * kernels/cpu/attn_sink.c: after attention over the keys, each query's
 * lse takes the sink's exp(s_h) into its sum and its output scales by
 * exp(old lse - new lse); the sink's gradient is -sum over queries of
 * exp(s_h - lse) (dout . out). The forward is the CPU's operation for
 * operation (expf, logf aside); the backward sums in another order. */
#include "cuda_ops.h"

/* one thread a (row, head) */
template <typename T>
__global__ static void sink_fwd_kernel(T *out, float *lse, const float *sinks,
				       int B, int Tn, int nh, int hd)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	size_t n = (size_t)B * nh * Tn;

	if (i >= n)
		return;
	{
		int t = (int)(i % Tn), bh = (int)(i / Tn);
		int b = bh / nh, h = bh % nh;
		float l = lse[i], s = sinks[h], m = l > s ? l : s;
		float nl = __fadd_rn(m, logf(__fadd_rn(expf(__fsub_rn(l, m)),
						       expf(__fsub_rn(s, m)))));
		float f = expf(__fsub_rn(l, nl));
		size_t o = ((size_t)b * Tn + t) * nh * hd + (size_t)h * hd;
		for (int e = 0; e < hd; e++)
			tkc_put(&out[o + e], __fmul_rn(tkc_ld(out[o + e]), f));
		lse[i] = nl;
	}
}

/* one block a head: the (row, query) pairs strided over the threads, then
 * a tree in shared memory */
template <typename T>
__global__ static void
sink_bwd_kernel(float *dsinks, const T *dout, const T *out, const float *lse,
		const float *sinks, int B, int Tn, int nh, int hd)
{
	__shared__ float part[TKC_THREADS];
	int h = blockIdx.x;
	float g = 0.0f;

	for (int q = threadIdx.x; q < B * Tn; q += blockDim.x) {
		int b = q / Tn, t = q % Tn;
		size_t o = ((size_t)b * Tn + t) * nh * hd + (size_t)h * hd;
		float d = 0.0f;
		for (int e = 0; e < hd; e++)
			d = __fadd_rn(d, __fmul_rn(tkc_ld(dout[o + e]),
						   tkc_ld(out[o + e])));
		g = __fadd_rn(
		    g, __fmul_rn(
			   expf(__fsub_rn(sinks[h],
					  lse[((size_t)b * nh + h) * Tn + t])),
			   d));
	}
	part[threadIdx.x] = g;
	__syncthreads();
	for (int s = blockDim.x / 2; s > 0; s /= 2) {
		if (threadIdx.x < s)
			part[threadIdx.x] =
			    __fadd_rn(part[threadIdx.x], part[threadIdx.x + s]);
		__syncthreads();
	}
	if (threadIdx.x == 0)
		dsinks[h] = __fsub_rn(dsinks[h], part[0]);
}

template <typename T>
static void sink_fwd(void *out, float *lse, const float *sinks, int B, int Tn,
		     int nh, int hd)
{
	size_t n = (size_t)B * nh * Tn;

	sink_fwd_kernel<T>
	    <<<(unsigned)((n + TKC_THREADS - 1) / TKC_THREADS), TKC_THREADS, 0,
	       tkc_stream()>>>((T *)out, lse, sinks, B, Tn, nh, hd);
}

template <typename T>
static void sink_bwd(float *dsinks, const void *dout, const void *out,
		     const float *lse, const float *sinks, int B, int Tn,
		     int nh, int hd)
{
	sink_bwd_kernel<T><<<nh, TKC_THREADS, 0, tkc_stream()>>>(
	    dsinks, (const T *)dout, (const T *)out, lse, sinks, B, Tn, nh, hd);
}

void tkc_attn_sink_fwd(int dt, void *out, float *lse, const float *sinks, int B,
		       int T, int nh, int hd)
{
	if ((size_t)B * T * nh == 0)
		return;
	if (dt == TK_F32)
		sink_fwd<float>(out, lse, sinks, B, T, nh, hd);
	else if (dt == TK_BF16)
		sink_fwd<tkc_bf16>(out, lse, sinks, B, T, nh, hd);
	else
		tkc_bad_dtype("attn_sink_fwd", dt);
	tkc_check_launch("attn_sink_fwd");
}

void tkc_attn_sink_bwd(int dt, float *dsinks, const void *dout, const void *out,
		       const float *lse, const float *sinks, int B, int T,
		       int nh, int hd)
{
	if (!nh)
		return;
	if (dt == TK_F32)
		sink_bwd<float>(dsinks, dout, out, lse, sinks, B, T, nh, hd);
	else if (dt == TK_BF16)
		sink_bwd<tkc_bf16>(dsinks, dout, out, lse, sinks, B, T, nh, hd);
	else
		tkc_bad_dtype("attn_sink_bwd", dt);
	tkc_check_launch("attn_sink_bwd");
}
