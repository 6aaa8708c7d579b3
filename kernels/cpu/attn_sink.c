/* attn_sink.c: attention sinks (gpt-oss), a learned logit s_h per head in
 * every query's softmax denominator, which takes no value:
 *   p_j = exp(a_j) / (sum_k exp(a_k) + exp(s_h)).
 * They apply after attention over the keys (attention_fwd): with l = lse
 * of the keys, the new lse is l' = log(exp(l) + exp(s_h)) and each output
 * scales by exp(l - l'). attention_bwd over the keys is then exact as it
 * is, given the new lse and output (its D_i = dout_i . out_i is the sum of
 * p_j dp_j over the keys alone); the sink's own gradient is
 *   d(s_h) = -sum over queries of exp(s_h - l') (dout_i . out_i).
 * Layouts: out, dout [B * T, nh * hd] (dt); lse f32 [B, nh, T]. */
#include <math.h>

#include "cpu_ops.h"
#include "tk_convert.h"

TK_CPU_INLINE void sink_fwd_rows(int dt, void *out, float *lse,
				 const float *sinks, int B, int T, int nh,
				 int hd)
{
	int bh;

#pragma omp parallel for if ((size_t)B * T * nh * hd >= TK_CPU_PAR_MIN)
	for (bh = 0; bh < B * nh; bh++) {
		int b = bh / nh, h = bh % nh;
		for (int t = 0; t < T; t++) {
			float *l = &lse[(size_t)bh * T + t];
			float s = sinks[h], m = *l > s ? *l : s;
			float nl = m + logf(expf(*l - m) + expf(s - m));
			float f = expf(*l - nl);
			size_t o =
			    ((size_t)b * T + t) * nh * hd + (size_t)h * hd;
			for (int e = 0; e < hd; e++)
				tk_store_f32_rne(out, dt, o + e,
						 tk_load_f32(out, dt, o + e) *
						     f);
			*l = nl;
		}
	}
}

void tk_cpu_attn_sink_fwd(int dt, void *out, float *lse, const float *sinks,
			  int B, int T, int nh, int hd)
{
	if (dt == TK_F32)
		sink_fwd_rows(TK_F32, out, lse, sinks, B, T, nh, hd);
	else if (dt == TK_BF16)
		sink_fwd_rows(TK_BF16, out, lse, sinks, B, T, nh, hd);
}

TK_CPU_INLINE void sink_bwd_heads(int dt, float *dsinks, const void *dout,
				  const void *out, const float *lse,
				  const float *sinks, int B, int T, int nh,
				  int hd)
{
	int h;

#pragma omp parallel for if ((size_t)B * T * nh * hd >= TK_CPU_PAR_MIN)
	for (h = 0; h < nh; h++) {
		float g = 0.0f;
		for (int b = 0; b < B; b++)
			for (int t = 0; t < T; t++) {
				size_t o = ((size_t)b * T + t) * nh * hd +
					   (size_t)h * hd;
				float d = 0.0f, p;
				for (int e = 0; e < hd; e++)
					d += tk_load_f32(dout, dt, o + e) *
					     tk_load_f32(out, dt, o + e);
				p = expf(sinks[h] -
					 lse[((size_t)b * nh + h) * T + t]);
				g += p * d;
			}
		dsinks[h] -= g;
	}
}

void tk_cpu_attn_sink_bwd(int dt, float *dsinks, const void *dout,
			  const void *out, const float *lse, const float *sinks,
			  int B, int T, int nh, int hd)
{
	if (dt == TK_F32)
		sink_bwd_heads(TK_F32, dsinks, dout, out, lse, sinks, B, T, nh,
			       hd);
	else if (dt == TK_BF16)
		sink_bwd_heads(TK_BF16, dsinks, dout, out, lse, sinks, B, T, nh,
			       hd);
}
