/* glu_clamp.c: gpt-oss's gated activation of its experts. The projection
 * gu [n, 2 ni] interleaves gate (even columns) and up (odd):
 *   g = min(gate, limit), u = clamp(up, -limit, limit),
 *   out = (u + 1) g sigmoid(alpha g)                        [n, ni].
 * Backward, with s = sigmoid(alpha g): d(gate) = dout (u + 1) (s + alpha g
 * s (1 - s)) where gate <= limit, else 0; d(up) = dout g s where |up| <=
 * limit, else 0 (torch's clamp passes the gradient at the bounds). fp32
 * arithmetic, each output rounded once to dt. */
#include <math.h>

#include "cpu_ops.h"
#include "tk_convert.h"

TK_CPU_INLINE void glu_fwd_rows(int dt, void *out, const void *gu, size_t n,
				int ni, float alpha, float limit)
{
	long long r;

#pragma omp parallel for if (n * (size_t)ni >= TK_CPU_PAR_MIN)
	for (r = 0; r < (long long)n; r++)
		for (int j = 0; j < ni; j++) {
			size_t a = (size_t)r * 2 * ni + 2 * (size_t)j;
			float g = tk_load_f32(gu, dt, a);
			float u = tk_load_f32(gu, dt, a + 1);
			g = g < limit ? g : limit;
			u = u < -limit ? -limit : u > limit ? limit : u;
			tk_store_f32_rne(out, dt, (size_t)r * ni + j,
					 (u + 1.0f) *
					     (g / (1.0f + expf(-(alpha * g)))));
		}
}

/* out [n, ni] from gu [n, 2 ni] */
void tk_cpu_glu_clamp_fwd(int dt, void *out, const void *gu, size_t n, int ni,
			  float alpha, float limit)
{
	if (dt == TK_F32)
		glu_fwd_rows(TK_F32, out, gu, n, ni, alpha, limit);
	else if (dt == TK_BF16)
		glu_fwd_rows(TK_BF16, out, gu, n, ni, alpha, limit);
}

TK_CPU_INLINE void glu_bwd_rows(int dt, void *dgu, const void *dout,
				const void *gu, size_t n, int ni, float alpha,
				float limit)
{
	long long r;

#pragma omp parallel for if (n * (size_t)ni >= TK_CPU_PAR_MIN)
	for (r = 0; r < (long long)n; r++)
		for (int j = 0; j < ni; j++) {
			size_t a = (size_t)r * 2 * ni + 2 * (size_t)j;
			float g0 = tk_load_f32(gu, dt, a);
			float u0 = tk_load_f32(gu, dt, a + 1);
			float d = tk_load_f32(dout, dt, (size_t)r * ni + j);
			float g = g0 < limit ? g0 : limit;
			float u = u0 < -limit  ? -limit
				  : u0 > limit ? limit
					       : u0;
			float s = 1.0f / (1.0f + expf(-(alpha * g)));
			float dg =
			    d * (u + 1.0f) * (s + alpha * g * s * (1.0f - s));
			float du = d * (g * s);
			tk_store_f32_rne(dgu, dt, a, g0 <= limit ? dg : 0.0f);
			tk_store_f32_rne(dgu, dt, a + 1,
					 u0 >= -limit && u0 <= limit ? du
								     : 0.0f);
		}
}

/* dgu [n, 2 ni] from dout [n, ni] and gu; dgu may be gu (each pair is read
 * before it is written) */
void tk_cpu_glu_clamp_bwd(int dt, void *dgu, const void *dout, const void *gu,
			  size_t n, int ni, float alpha, float limit)
{
	if (dt == TK_F32)
		glu_bwd_rows(TK_F32, dgu, dout, gu, n, ni, alpha, limit);
	else if (dt == TK_BF16)
		glu_bwd_rows(TK_BF16, dgu, dout, gu, n, ni, alpha, limit);
}
