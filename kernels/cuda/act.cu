/* act.cu: the MLP activations of OPT (ReLU) and GPT-NeoX (exact GELU) and
 * their derivatives, element-wise in fp32: the expressions are tk_act.h's,
 * shared with kernels/cpu/act.c (ReLU gives the same bits; CUDA's erff and
 * expf may differ from libm's in the last ulp, so GELU may too); these
 * kernels are templates over the storage type and the activation.
 */
#include "cuda_ops.h"
#include "tk_act.h"

/* out, x [n]; out may alias x (each element read, then written, by one
 * thread) */
template <typename T, int ACT>
__global__ static void act_fwd_kernel(T *out, const T *x, size_t n)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride)
		tkc_put(&out[i], tk_act_f(ACT, tkc_ld(x[i])));
}

/* dx, dout, x [n]; dx may alias dout or x */
template <typename T, int ACT>
__global__ static void act_bwd_kernel(T *dx, const T *dout, const T *x,
				      size_t n)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		float d = tkc_ld(dout[i]), xi = tkc_ld(x[i]);
		tkc_put(&dx[i], tk_act_df(ACT, d, xi));
	}
}

template <typename T, int ACT>
static void act_fwd(void *out, const void *x, size_t n)
{
	act_fwd_kernel<T, ACT><<<tkc_blocks(n), TKC_THREADS, 0, tkc_stream()>>>(
	    (T *)out, (const T *)x, n);
	tkc_check_launch("act_fwd");
}

template <typename T, int ACT>
static void act_bwd(void *dx, const void *dout, const void *x, size_t n)
{
	act_bwd_kernel<T, ACT><<<tkc_blocks(n), TKC_THREADS, 0, tkc_stream()>>>(
	    (T *)dx, (const T *)dout, (const T *)x, n);
	tkc_check_launch("act_bwd");
}

/* An unknown act is recorded like an unknown dtype: nothing is written. */
static void bad_act(const char *what)
{
	tkc_check(cudaErrorInvalidValue, what);
}

void tkc_act_fwd(int dt, int act, void *out, const void *x, size_t n)
{
	if (!n)
		return;
	if (dt != TK_F32 && dt != TK_BF16)
		tkc_bad_dtype("act_fwd", dt);
	else if (act != TK_ACT_RELU && act != TK_ACT_GELU)
		bad_act("act_fwd: unknown activation");
	else if (dt == TK_F32 && act == TK_ACT_RELU)
		act_fwd<float, TK_ACT_RELU>(out, x, n);
	else if (dt == TK_F32)
		act_fwd<float, TK_ACT_GELU>(out, x, n);
	else if (act == TK_ACT_RELU)
		act_fwd<tkc_bf16, TK_ACT_RELU>(out, x, n);
	else
		act_fwd<tkc_bf16, TK_ACT_GELU>(out, x, n);
}

void tkc_act_bwd(int dt, int act, void *dx, const void *dout, const void *x,
		 size_t n)
{
	if (!n)
		return;
	if (dt != TK_F32 && dt != TK_BF16)
		tkc_bad_dtype("act_bwd", dt);
	else if (act != TK_ACT_RELU && act != TK_ACT_GELU)
		bad_act("act_bwd: unknown activation");
	else if (dt == TK_F32 && act == TK_ACT_RELU)
		act_bwd<float, TK_ACT_RELU>(dx, dout, x, n);
	else if (dt == TK_F32)
		act_bwd<float, TK_ACT_GELU>(dx, dout, x, n);
	else if (act == TK_ACT_RELU)
		act_bwd<tkc_bf16, TK_ACT_RELU>(dx, dout, x, n);
	else
		act_bwd<tkc_bf16, TK_ACT_GELU>(dx, dout, x, n);
}
