/* tk_moe.h: a mixture of experts' routing of one token, compiled by both
 * backends (kernels/cpu/moe.c, kernels/cuda/moe.cu) so that they choose
 * the same experts with the same weights.
 *
 * Routers (TK_MOE_*):
 * - SOFTMAX_TOPK (Qwen3-MoE): p = softmax(logits) over the E experts, the
 *   k largest p (ties: the smaller expert), divided by their sum when
 *   norm is set;
 * - TOPK_SOFTMAX (gpt-oss): the k largest logits, softmax over those k.
 * Slots are in descending weight order. A weight is rounded to wdt (a
 * bf16 model's experts are weighted in bf16, as transformers casts them).
 *
 * Every operation is one fp32 operation in a fixed order (expf aside: the
 * device's may differ by an ulp). */
#ifndef TK_MOE_H
#define TK_MOE_H

#include <math.h>
#include <stdint.h>

#include "tk_convert.h"
#include "tk_hd.h"

/* Experts a token goes to, at most (the routing's stack arrays). */
#define TK_MOE_MAX_K 32

/* The index of the largest of v[0..E) not yet in sel[0..n) (ties: the
 * smaller index). */
static inline TK_HD int tk_moe_argmax(const float *v, int E, const int32_t *sel,
				      int n)
{
	int best = -1;

	for (int e = 0; e < E; e++) {
		int taken = 0;
		for (int j = 0; j < n; j++)
			taken |= sel[j] == e;
		if (!taken && (best < 0 || v[e] > v[best]))
			best = e;
	}
	return best;
}

/* The largest of lg[0..E) and sum exp(lg - max) in index order. */
static inline TK_HD float tk_moe_softmax_den(const float *lg, int E, float *mx)
{
	float m = lg[0], s = 0.0f;

	for (int e = 1; e < E; e++)
		m = lg[e] > m ? lg[e] : m;
	for (int e = 0; e < E; e++)
		s = tk_fadd_rn(s, expf(tk_fsub_rn(lg[e], m)));
	*mx = m;
	return s;
}

/* p_e of the full softmax. */
static inline TK_HD float tk_moe_prob(const float *lg, int e, float mx,
				      float den)
{
	return tk_fdiv_rn(expf(tk_fsub_rn(lg[e], mx)), den);
}

/* The unrounded weights w[0..k) of the experts idx[0..k) (already
 * chosen) from the token's logits lg [E]. */
static inline TK_HD void tk_moe_weights(int mode, int norm, const float *lg,
					int E, int k, const int32_t *idx,
					float *w)
{
	float mx, den, s = 0.0f;

	if (mode == 0) {
		den = tk_moe_softmax_den(lg, E, &mx);
		for (int j = 0; j < k; j++) {
			w[j] = tk_moe_prob(lg, idx[j], mx, den);
			s = tk_fadd_rn(s, w[j]);
		}
		for (int j = 0; norm && j < k; j++)
			w[j] = tk_fdiv_rn(w[j], s);
		return;
	}
	mx = lg[idx[0]];
	for (int j = 0; j < k; j++) {
		w[j] = expf(tk_fsub_rn(lg[idx[j]], mx));
		s = tk_fadd_rn(s, w[j]);
	}
	for (int j = 0; j < k; j++)
		w[j] = tk_fdiv_rn(w[j], s);
}

/* One token: its experts idx [k] and weights w [k] (rounded to wdt). */
static inline TK_HD void tk_moe_route_row(int mode, int norm, int wdt,
					  const float *lg, int E, int k,
					  int32_t *idx, float *w)
{
	float mx, den;

	if (mode == 0) {
		/* the order of p is the order of the logits, ties apart:
		 * choose on p, as transformers does */
		den = tk_moe_softmax_den(lg, E, &mx);
		for (int j = 0; j < k; j++) {
			int best = -1;
			float pb = 0.0f;
			for (int e = 0; e < E; e++) {
				int taken = 0;
				float pe;
				for (int i = 0; i < j; i++)
					taken |= idx[i] == e;
				if (taken)
					continue;
				pe = tk_moe_prob(lg, e, mx, den);
				if (best < 0 || pe > pb) {
					best = e;
					pb = pe;
				}
			}
			idx[j] = best;
		}
	} else {
		for (int j = 0; j < k; j++)
			idx[j] = tk_moe_argmax(lg, E, idx, j);
	}
	tk_moe_weights(mode, norm, lg, E, k, idx, w);
	for (int j = 0; j < k; j++)
		w[j] = tk_round_f32(w[j], wdt);
}

/* Backward of one token: dlg [E] = d(loss) / d(logits) from dw [k], the
 * gradient of the weights, and extra [E] (may be NULL), a gradient of
 * the full softmax's p (the auxiliary loss's). */
static inline TK_HD void tk_moe_route_bwd_row(int mode, int norm,
					      const float *lg, int E, int k,
					      const int32_t *idx,
					      const float *dw,
					      const float *extra, float *dlg)
{
	float w[TK_MOE_MAX_K], g[TK_MOE_MAX_K];
	float mx, den, dot = 0.0f, s = 0.0f, gp = 0.0f;

	tk_moe_weights(mode, 0, lg, E, k, idx, w);
	if (mode == 0) {
		/* w are the p of the chosen experts; g: d/dp of each */
		for (int j = 0; j < k; j++)
			s = tk_fadd_rn(s, w[j]);
		for (int j = 0; j < k; j++)
			dot = tk_fadd_rn(
			    dot, tk_fmul_rn(dw[j], tk_fdiv_rn(w[j], s)));
		for (int j = 0; j < k; j++)
			g[j] = norm ? tk_fdiv_rn(tk_fsub_rn(dw[j], dot), s)
				    : dw[j];
	} else {
		for (int j = 0; j < k; j++)
			dot = tk_fadd_rn(dot, tk_fmul_rn(dw[j], w[j]));
	}
	den = tk_moe_softmax_den(lg, E, &mx);
	/* sum_e g_e p_e over the full softmax (mode 0's routed part and
	 * the extra) */
	for (int e = 0; e < E; e++) {
		float ge = extra ? extra[e] : 0.0f;
		for (int j = 0; mode == 0 && j < k; j++)
			if (idx[j] == e)
				ge = tk_fadd_rn(ge, g[j]);
		gp =
		    tk_fadd_rn(gp, tk_fmul_rn(ge, tk_moe_prob(lg, e, mx, den)));
	}
	for (int e = 0; e < E; e++) {
		float ge = extra ? extra[e] : 0.0f, d;
		for (int j = 0; mode == 0 && j < k; j++)
			if (idx[j] == e)
				ge = tk_fadd_rn(ge, g[j]);
		d = mode == 0 || extra ? tk_fmul_rn(tk_moe_prob(lg, e, mx, den),
						    tk_fsub_rn(ge, gp))
				       : 0.0f;
		/* gpt-oss: the softmax over the chosen k */
		for (int j = 0; mode != 0 && j < k; j++)
			if (idx[j] == e)
				d = tk_fadd_rn(
				    d,
				    tk_fmul_rn(w[j], tk_fsub_rn(dw[j], dot)));
		dlg[e] = d;
	}
}

#endif
