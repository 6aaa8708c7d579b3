/* act.c: the MLP activations of OPT (ReLU) and GPT-NeoX (exact GELU) and
 * their derivatives, element-wise in fp32: the expressions are tk_act.h's,
 * shared with kernels/cuda/act.cu; this file runs them over OpenMP spans.
 */
#include "cpu_ops.h"
#include "tk_act.h"
#include "tk_convert.h"

/* One span; element i is read before it is written, so out may be x. */
TK_CPU_INLINE void act_fwd_span(int dt, int act, void *out, const void *x,
				size_t i0, size_t i1)
{
	for (size_t i = i0; i < i1; i++)
		tk_store_f32_rne(out, dt, i,
				 tk_act_f(act, tk_load_f32(x, dt, i)));
}

TK_CPU_INLINE void act_bwd_span(int dt, int act, void *dx, const void *dout,
				const void *x, size_t i0, size_t i1)
{
	for (size_t i = i0; i < i1; i++)
		tk_store_f32_rne(dx, dt, i,
				 tk_act_df(act, tk_load_f32(dout, dt, i),
					   tk_load_f32(x, dt, i)));
}

/* out, x [n] */
void tk_cpu_act_fwd(int dt, int act, void *out, const void *x, size_t n)
{
	long long b, nblk = (long long)((n + TK_CPU_SPAN - 1) / TK_CPU_SPAN);

	if (dt != TK_F32 && dt != TK_BF16)
		return;
	if (act != TK_ACT_RELU && act != TK_ACT_GELU)
		return;
#pragma omp parallel for if (n >= TK_CPU_PAR_MIN)
	for (b = 0; b < nblk; b++) {
		size_t i0 = (size_t)b * TK_CPU_SPAN;
		size_t i1 = n - i0 < TK_CPU_SPAN ? n : i0 + TK_CPU_SPAN;

		/* act and dt constant in each call: the branches fold */
		if (dt == TK_F32 && act == TK_ACT_RELU)
			act_fwd_span(TK_F32, TK_ACT_RELU, out, x, i0, i1);
		else if (dt == TK_F32)
			act_fwd_span(TK_F32, TK_ACT_GELU, out, x, i0, i1);
		else if (act == TK_ACT_RELU)
			act_fwd_span(TK_BF16, TK_ACT_RELU, out, x, i0, i1);
		else
			act_fwd_span(TK_BF16, TK_ACT_GELU, out, x, i0, i1);
	}
}

/* dx, dout, x [n]; dx may be dout or x */
void tk_cpu_act_bwd(int dt, int act, void *dx, const void *dout, const void *x,
		    size_t n)
{
	long long b, nblk = (long long)((n + TK_CPU_SPAN - 1) / TK_CPU_SPAN);

	if (dt != TK_F32 && dt != TK_BF16)
		return;
	if (act != TK_ACT_RELU && act != TK_ACT_GELU)
		return;
#pragma omp parallel for if (n >= TK_CPU_PAR_MIN)
	for (b = 0; b < nblk; b++) {
		size_t i0 = (size_t)b * TK_CPU_SPAN;
		size_t i1 = n - i0 < TK_CPU_SPAN ? n : i0 + TK_CPU_SPAN;

		if (dt == TK_F32 && act == TK_ACT_RELU)
			act_bwd_span(TK_F32, TK_ACT_RELU, dx, dout, x, i0, i1);
		else if (dt == TK_F32)
			act_bwd_span(TK_F32, TK_ACT_GELU, dx, dout, x, i0, i1);
		else if (act == TK_ACT_RELU)
			act_bwd_span(TK_BF16, TK_ACT_RELU, dx, dout, x, i0, i1);
		else
			act_bwd_span(TK_BF16, TK_ACT_GELU, dx, dout, x, i0, i1);
	}
}
