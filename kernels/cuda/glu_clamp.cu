/* glu_clamp.cu: gpt-oss's gated activation, the expressions of
 * kernels/cpu/glu_clamp.c operation for operation (no FMA: -fmad=false;
 * expf may differ by an ulp). gu [n, 2 ni] interleaves gate and up. */
#include "cuda_ops.h"

template <typename T>
__global__ static void glu_fwd_kernel(T *out, const T *gu, size_t n, int ni,
				      float alpha, float limit)
{
	size_t m = n * (size_t)ni, stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < m;
	     i += stride) {
		size_t a = i / ni * 2 * ni + 2 * (i % ni);
		float g = tkc_ld(gu[a]), u = tkc_ld(gu[a + 1]);
		g = g < limit ? g : limit;
		u = u < -limit ? -limit : u > limit ? limit : u;
		tkc_put(&out[i],
			(u + 1.0f) * (g / (1.0f + expf(-(alpha * g)))));
	}
}

template <typename T>
__global__ static void glu_bwd_kernel(T *dgu, const T *dout, const T *gu,
				      size_t n, int ni, float alpha,
				      float limit)
{
	size_t m = n * (size_t)ni, stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < m;
	     i += stride) {
		size_t a = i / ni * 2 * ni + 2 * (i % ni);
		float g0 = tkc_ld(gu[a]), u0 = tkc_ld(gu[a + 1]);
		float d = tkc_ld(dout[i]);
		float g = g0 < limit ? g0 : limit;
		float u = u0 < -limit ? -limit : u0 > limit ? limit : u0;
		float s = 1.0f / (1.0f + expf(-(alpha * g)));
		float dg = d * (u + 1.0f) * (s + alpha * g * s * (1.0f - s));
		float du = d * (g * s);
		tkc_put(&dgu[a], g0 <= limit ? dg : 0.0f);
		tkc_put(&dgu[a + 1], u0 >= -limit && u0 <= limit ? du : 0.0f);
	}
}

template <typename T>
static void glu_fwd(void *out, const void *gu, size_t n, int ni, float alpha,
		    float limit)
{
	glu_fwd_kernel<T>
	    <<<tkc_blocks(n * (size_t)ni), TKC_THREADS, 0, tkc_stream()>>>(
		(T *)out, (const T *)gu, n, ni, alpha, limit);
}

template <typename T>
static void glu_bwd(void *dgu, const void *dout, const void *gu, size_t n,
		    int ni, float alpha, float limit)
{
	glu_bwd_kernel<T>
	    <<<tkc_blocks(n * (size_t)ni), TKC_THREADS, 0, tkc_stream()>>>(
		(T *)dgu, (const T *)dout, (const T *)gu, n, ni, alpha, limit);
}

void tkc_glu_clamp_fwd(int dt, void *out, const void *gu, size_t n, int ni,
		       float alpha, float limit)
{
	if (!n || ni <= 0)
		return;
	if (dt == TK_F32)
		glu_fwd<float>(out, gu, n, ni, alpha, limit);
	else if (dt == TK_BF16)
		glu_fwd<tkc_bf16>(out, gu, n, ni, alpha, limit);
	else
		tkc_bad_dtype("glu_clamp_fwd", dt);
	tkc_check_launch("glu_clamp_fwd");
}

void tkc_glu_clamp_bwd(int dt, void *dgu, const void *dout, const void *gu,
		       size_t n, int ni, float alpha, float limit)
{
	if (!n || ni <= 0)
		return;
	if (dt == TK_F32)
		glu_bwd<float>(dgu, dout, gu, n, ni, alpha, limit);
	else if (dt == TK_BF16)
		glu_bwd<tkc_bf16>(dgu, dout, gu, n, ni, alpha, limit);
	else
		tkc_bad_dtype("glu_clamp_bwd", dt);
	tkc_check_launch("glu_clamp_bwd");
}
