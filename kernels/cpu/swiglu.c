/* swiglu.c: out = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
 * With s = sigmoid(g): dgate = dout * up * s * (1 + g * (1 - s)),
 * dup = dout * silu(g). All tensors in dt.
 */
#include <math.h>

#include "cpu_ops.h"
#include "tk_convert.h"

TK_CPU_INLINE void swiglu_fwd_span(int dt, void *out, const void *gate,
				   const void *up, size_t i0, size_t i1)
{
	for (size_t i = i0; i < i1; i++) {
		float g = tk_load_f32(gate, dt, i);
		tk_store_f32_rne(
		    out, dt, i, g / (1.0f + expf(-g)) * tk_load_f32(up, dt, i));
	}
}

/* out, gate, up [n] */
void tk_cpu_swiglu_fwd(int dt, void *out, const void *gate, const void *up,
		       size_t n)
{
	long long b, nblk = (long long)((n + TK_CPU_SPAN - 1) / TK_CPU_SPAN);

	if (dt != TK_F32 && dt != TK_BF16)
		return;
#pragma omp parallel for if (n >= TK_CPU_PAR_MIN)
	for (b = 0; b < nblk; b++) {
		size_t i0 = (size_t)b * TK_CPU_SPAN;
		size_t i1 = n - i0 < TK_CPU_SPAN ? n : i0 + TK_CPU_SPAN;

		if (dt == TK_F32)
			swiglu_fwd_span(TK_F32, out, gate, up, i0, i1);
		else
			swiglu_fwd_span(TK_BF16, out, gate, up, i0, i1);
	}
}

/* Every input element is read before an output is written: dgate may be
 * gate and dup may be up. */
TK_CPU_INLINE void swiglu_bwd_span(int dt, void *dgate, void *dup,
				   const void *dout, const void *gate,
				   const void *up, size_t i0, size_t i1)
{
	for (size_t i = i0; i < i1; i++) {
		float g = tk_load_f32(gate, dt, i),
		      d = tk_load_f32(dout, dt, i);
		float u = tk_load_f32(up, dt, i);
		float e1 = 1.0f + expf(-g);
		float s = 1.0f / e1, silu = g / e1;

		tk_store_f32_rne(dgate, dt, i,
				 d * u * s * (1.0f + g * (1.0f - s)));
		tk_store_f32_rne(dup, dt, i, d * silu);
	}
}

/* dgate, dup, dout, gate, up [n] */
void tk_cpu_swiglu_bwd(int dt, void *dgate, void *dup, const void *dout,
		       const void *gate, const void *up, size_t n)
{
	long long b, nblk = (long long)((n + TK_CPU_SPAN - 1) / TK_CPU_SPAN);

	if (dt != TK_F32 && dt != TK_BF16)
		return;
#pragma omp parallel for if (n >= TK_CPU_PAR_MIN)
	for (b = 0; b < nblk; b++) {
		size_t i0 = (size_t)b * TK_CPU_SPAN;
		size_t i1 = n - i0 < TK_CPU_SPAN ? n : i0 + TK_CPU_SPAN;

		if (dt == TK_F32)
			swiglu_bwd_span(TK_F32, dgate, dup, dout, gate, up, i0,
					i1);
		else
			swiglu_bwd_span(TK_BF16, dgate, dup, dout, gate, up, i0,
					i1);
	}
}
