/* swiglu.c: out = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
 * With s = sigmoid(g): dgate = dout * up * s * (1 + g * (1 - s)),
 * dup = dout * silu(g).
 */
#include <math.h>

#include "cpu_ops.h"

/* out, gate, up [n] */
void tk_cpu_swiglu_fwd(float *out, const float *gate, const float *up, size_t n)
{
	long long nn = (long long)n;

#pragma omp parallel for if (nn >= TK_CPU_PAR_MIN)
	for (long long i = 0; i < nn; i++) {
		float g = gate[i];
		out[i] = g / (1.0f + expf(-g)) * up[i];
	}
}

/* dgate, dup, dout, gate, up [n] */
void tk_cpu_swiglu_bwd(float *dgate, float *dup, const float *dout,
		       const float *gate, const float *up, size_t n)
{
	long long nn = (long long)n;

#pragma omp parallel for if (nn >= TK_CPU_PAR_MIN)
	for (long long i = 0; i < nn; i++) {
		float g = gate[i], d = dout[i];
		float e1 = 1.0f + expf(-g);
		float s = 1.0f / e1, silu = g / e1;
		dgate[i] = d * up[i] * s * (1.0f + g * (1.0f - s));
		dup[i] = d * silu;
	}
}
