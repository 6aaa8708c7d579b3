/* moe.c: a mixture of experts' routing, dispatch and combination (the
 * contracts of tk_ops.h; the per-token routing is tk_moe.h's). Shapes: N
 * tokens, E experts, k experts a token, M = N * k routed slots; slot
 * t * k + j is token t's j-th expert. */
#include <string.h>

#include "cpu_ops.h"
#include "tk_convert.h"
#include "tk_moe.h"

/* logits f32 [N, E] -> idx [N, k], w f32 [N, k] */
void tk_cpu_moe_route(int mode, int norm, int wdt, const float *logits, int N,
		      int E, int k, int32_t *idx, float *w)
{
	int t;

#pragma omp parallel for if (N * E >= TK_CPU_PAR_MIN)
	for (t = 0; t < N; t++)
		tk_moe_route_row(mode, norm, wdt, logits + (size_t)t * E, E, k,
				 idx + (size_t)t * k, w + (size_t)t * k);
}

/* dlogits f32 [N, E] from dw f32 [N, k] (+ extra [E]) */
void tk_cpu_moe_route_bwd(int mode, int norm, const float *logits,
			  const int32_t *idx, const float *dw,
			  const float *extra, int N, int E, int k,
			  float *dlogits)
{
	int t;

#pragma omp parallel for if (N * E >= TK_CPU_PAR_MIN)
	for (t = 0; t < N; t++)
		tk_moe_route_bwd_row(mode, norm, logits + (size_t)t * E, E, k,
				     idx + (size_t)t * k, dw + (size_t)t * k,
				     extra, dlogits + (size_t)t * E);
}

/* psum [E] = the column sums of softmax(logits) over the N rows, in row
 * order */
void tk_cpu_moe_prob_sum(const float *logits, int N, int E, float *psum)
{
	for (int e = 0; e < E; e++)
		psum[e] = 0.0f;
	for (int t = 0; t < N; t++) {
		const float *lg = logits + (size_t)t * E;
		float mx, den = tk_moe_softmax_den(lg, E, &mx);
		for (int e = 0; e < E; e++)
			psum[e] =
			    tk_fadd_rn(psum[e], tk_moe_prob(lg, e, mx, den));
	}
}

/* The slots sorted by expert, by slot within one: order [M] (position ->
 * slot), inv [M] (slot -> position), counts [E]. */
void tk_cpu_moe_sort(const int32_t *idx, int N, int E, int k, int32_t *order,
		     int32_t *inv, int32_t *counts)
{
	size_t M = (size_t)N * k;
	int32_t at = 0;

	memset(counts, 0, (size_t)E * sizeof(*counts));
	for (size_t s = 0; s < M; s++)
		if (idx[s] >= 0 && idx[s] < E)
			counts[idx[s]]++;
	for (int e = 0; e < E; e++)
		for (size_t s = 0; s < M; s++)
			if (idx[s] == e) {
				order[at] = (int32_t)s;
				inv[s] = at++;
			}
}

TK_CPU_INLINE void gather_rows(int dt, void *xg, const void *x,
			       const int32_t *order, int M, int k, int H)
{
	int p;

#pragma omp parallel for if ((size_t)M * H >= TK_CPU_PAR_MIN)
	for (p = 0; p < M; p++) {
		size_t t = (size_t)(order[p] / k);
		for (int h = 0; h < H; h++)
			tk_store_f32_rne(xg, dt, (size_t)p * H + h,
					 tk_load_f32(x, dt, t * H + h));
	}
}

/* xg [M, H]: row p is x's row order[p] / k */
void tk_cpu_moe_gather(int dt, void *xg, const void *x, const int32_t *order,
		       int M, int k, int H)
{
	if (dt == TK_F32)
		gather_rows(TK_F32, xg, x, order, M, k, H);
	else if (dt == TK_BF16)
		gather_rows(TK_BF16, xg, x, order, M, k, H);
}

TK_CPU_INLINE void combine_rows(int dt, void *out, const void *y,
				const int32_t *inv, const float *w, int N,
				int k, int H)
{
	int t;

#pragma omp parallel for if ((size_t)N * H >= TK_CPU_PAR_MIN)
	for (t = 0; t < N; t++)
		for (int h = 0; h < H; h++) {
			float s = 0.0f;
			for (int j = 0; j < k; j++) {
				size_t p = (size_t)inv[(size_t)t * k + j];
				s = tk_fadd_rn(
				    s,
				    tk_fmul_rn(w[(size_t)t * k + j],
					       tk_load_f32(y, dt, p * H + h)));
			}
			tk_store_f32_rne(out, dt, (size_t)t * H + h, s);
		}
}

/* out [N, H] = sum_j w[t, j] y[inv[t * k + j]] */
void tk_cpu_moe_combine(int dt, void *out, const void *y, const int32_t *inv,
			const float *w, int N, int k, int H)
{
	if (dt == TK_F32)
		combine_rows(TK_F32, out, y, inv, w, N, k, H);
	else if (dt == TK_BF16)
		combine_rows(TK_BF16, out, y, inv, w, N, k, H);
}

TK_CPU_INLINE void combine_bwd_rows(int dt, void *dy, float *dw,
				    const void *dout, const void *y,
				    const int32_t *inv, const float *w, int N,
				    int k, int H)
{
	int t;

#pragma omp parallel for if ((size_t)N * H >= TK_CPU_PAR_MIN)
	for (t = 0; t < N; t++)
		for (int j = 0; j < k; j++) {
			size_t s = (size_t)t * k + j, p = (size_t)inv[s];
			float d = 0.0f;
			for (int h = 0; h < H; h++) {
				float g =
				    tk_load_f32(dout, dt, (size_t)t * H + h);
				d = tk_fadd_rn(
				    d, tk_fmul_rn(
					   g, tk_load_f32(y, dt, p * H + h)));
				tk_store_f32_rne(dy, dt, p * H + h,
						 tk_fmul_rn(w[s], g));
			}
			dw[s] = d;
		}
}

/* dy [M, H]: row inv[t * k + j] = w[t, j] dout[t]; dw f32 [N, k] =
 * dout[t] . y[inv[t * k + j]] */
void tk_cpu_moe_combine_bwd(int dt, void *dy, float *dw, const void *dout,
			    const void *y, const int32_t *inv, const float *w,
			    int N, int k, int H)
{
	if (dt == TK_F32)
		combine_bwd_rows(TK_F32, dy, dw, dout, y, inv, w, N, k, H);
	else if (dt == TK_BF16)
		combine_bwd_rows(TK_BF16, dy, dw, dout, y, inv, w, N, k, H);
}

TK_CPU_INLINE void scatter_rows(int dt, void *dx, const void *dxg,
				const int32_t *inv, int N, int k, int H)
{
	int t;

#pragma omp parallel for if ((size_t)N * H >= TK_CPU_PAR_MIN)
	for (t = 0; t < N; t++)
		for (int h = 0; h < H; h++) {
			float s = 0.0f;
			for (int j = 0; j < k; j++)
				s = tk_fadd_rn(
				    s, tk_load_f32(
					   dxg, dt,
					   (size_t)inv[(size_t)t * k + j] * H +
					       h));
			tk_store_f32_rne(dx, dt, (size_t)t * H + h, s);
		}
}

/* dx [N, H] = sum_j dxg[inv[t * k + j]] */
void tk_cpu_moe_scatter(int dt, void *dx, const void *dxg, const int32_t *inv,
			int N, int k, int H)
{
	if (dt == TK_F32)
		scatter_rows(TK_F32, dx, dxg, inv, N, k, H);
	else if (dt == TK_BF16)
		scatter_rows(TK_BF16, dx, dxg, inv, N, k, H);
}
