/* swiglu.cu: out = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
 * With s = sigmoid(g): dgate = dout * up * s * (1 + g * (1 - s)),
 * dup = dout * silu(g). The expressions of kernels/cpu/swiglu.c, operation
 * for operation (no FMA: -fmad=false); only expf may differ by an ulp.
 */
#include "cuda_ops.h"

/* out, gate, up [n] */
__global__ static void swiglu_fwd_kernel(float *out, const float *gate,
					 const float *up, size_t n)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		float g = gate[i];
		out[i] = g / (1.0f + expf(-g)) * up[i];
	}
}

/* dgate, dup, dout, gate, up [n]; dgate/dup may alias gate/up (each
 * element is read before it is written, by the same thread). */
__global__ static void swiglu_bwd_kernel(float *dgate, float *dup,
					 const float *dout, const float *gate,
					 const float *up, size_t n)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		float g = gate[i], d = dout[i], u = up[i];
		float e1 = 1.0f + expf(-g);
		float s = 1.0f / e1, silu = g / e1;
		dgate[i] = d * u * s * (1.0f + g * (1.0f - s));
		dup[i] = d * silu;
	}
}

void tkc_swiglu_fwd(float *out, const float *gate, const float *up, size_t n)
{
	if (!n)
		return;
	swiglu_fwd_kernel<<<tkc_blocks(n), TKC_THREADS, 0, tkc_stream()>>>(
	    out, gate, up, n);
	tkc_check_launch("swiglu_fwd");
}

void tkc_swiglu_bwd(float *dgate, float *dup, const float *dout,
		    const float *gate, const float *up, size_t n)
{
	if (!n)
		return;
	swiglu_bwd_kernel<<<tkc_blocks(n), TKC_THREADS, 0, tkc_stream()>>>(
	    dgate, dup, dout, gate, up, n);
	tkc_check_launch("swiglu_bwd");
}
