/* swiglu.cu: out = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
 * With s = sigmoid(g): dgate = dout * up * s * (1 + g * (1 - s)),
 * dup = dout * silu(g). The expressions of kernels/cpu/swiglu.c, operation
 * for operation (no FMA: -fmad=false); only expf may differ by an ulp.
 * dt F32 or BF16: fp32 arithmetic, each output rounded once.
 */
#include "cuda_ops.h"

/* out, gate, up [n] */
template <typename T>
__global__ static void swiglu_fwd_kernel(T *out, const T *gate, const T *up,
					 size_t n)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		float g = tkc_ld(gate[i]);
		tkc_put(&out[i], g / (1.0f + expf(-g)) * tkc_ld(up[i]));
	}
}

/* dgate, dup, dout, gate, up [n]; dgate/dup may alias gate/up (each
 * element is read before it is written, by the same thread). */
template <typename T>
__global__ static void swiglu_bwd_kernel(T *dgate, T *dup, const T *dout,
					 const T *gate, const T *up, size_t n)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		float g = tkc_ld(gate[i]), d = tkc_ld(dout[i]);
		float u = tkc_ld(up[i]);
		float e1 = 1.0f + expf(-g);
		float s = 1.0f / e1, silu = g / e1;
		tkc_put(&dgate[i], d * u * s * (1.0f + g * (1.0f - s)));
		tkc_put(&dup[i], d * silu);
	}
}

template <typename T>
static void swiglu_fwd(void *out, const void *gate, const void *up, size_t n)
{
	swiglu_fwd_kernel<T><<<tkc_blocks(n), TKC_THREADS, 0, tkc_stream()>>>(
	    (T *)out, (const T *)gate, (const T *)up, n);
	tkc_check_launch("swiglu_fwd");
}

template <typename T>
static void swiglu_bwd(void *dgate, void *dup, const void *dout,
		       const void *gate, const void *up, size_t n)
{
	swiglu_bwd_kernel<T><<<tkc_blocks(n), TKC_THREADS, 0, tkc_stream()>>>(
	    (T *)dgate, (T *)dup, (const T *)dout, (const T *)gate,
	    (const T *)up, n);
	tkc_check_launch("swiglu_bwd");
}

void tkc_swiglu_fwd(int dt, void *out, const void *gate, const void *up,
		    size_t n)
{
	if (!n)
		return;
	if (dt == TK_F32)
		swiglu_fwd<float>(out, gate, up, n);
	else if (dt == TK_BF16)
		swiglu_fwd<tkc_bf16>(out, gate, up, n);
	else
		tkc_bad_dtype("swiglu_fwd", dt);
}

void tkc_swiglu_bwd(int dt, void *dgate, void *dup, const void *dout,
		    const void *gate, const void *up, size_t n)
{
	if (!n)
		return;
	if (dt == TK_F32)
		swiglu_bwd<float>(dgate, dup, dout, gate, up, n);
	else if (dt == TK_BF16)
		swiglu_bwd<tkc_bf16>(dgate, dup, dout, gate, up, n);
	else
		tkc_bad_dtype("swiglu_bwd", dt);
}
