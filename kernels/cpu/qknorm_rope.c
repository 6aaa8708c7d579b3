/* qknorm_rope.c: Qwen3's per-head RMSNorm of q and k fused with RoPE.
 *
 * x [n, heads * hd]: each (token, head) row of hd values is a row of
 * rmsnorm.c (rstd per row, the mean of squares in double), each normalized
 * value rounded to dt as rmsnorm_fwd stores it, then rotated as rope.c
 * does. The backward recomputes rope_bwd(dout) element by element, rounded
 * to dt as rope_bwd stores it in place, wherever rmsnorm.c's backward reads
 * its dout: the same expressions on the same values, so the bits of the
 * unfused sequence without its intermediate tensor. Without w the ops are
 * RoPE alone, out of place or in place. The cos/sin tables, rstd and dw are
 * fp32.
 *
 * Partial rotary (GPT-NeoX): only the first rd values of each head are
 * rotated, in the rotate_half layout over those rd values (pairs (i, i +
 * rd/2), tables [max_pos, rd / 2]); values rd..hd-1 pass through (the norm,
 * with w, still spans all hd). rd == hd is the full rotation; an odd rd
 * leaves its last value unrotated as rope.c does an odd hd.
 */
#include <math.h>

#include "cpu_ops.h"
#include "tk_convert.h"

/* Columns per task of the dw reduction: hd is small, so narrow blocks keep
 * a few threads busy. */
#define QK_COLS 16

/* Element j of rope_bwd of the row at o of d [., hd], rounded to dt; c and
 * s are the row's position's tables [half] (half = rd / 2). */
TK_CPU_INLINE float rot_bwd_at(int dt, const void *d, size_t o, const float *c,
			       const float *s, int j, int half)
{
	float a, b, si;
	int i = j < half ? j : j - half;

	if (j >= 2 * half) /* past the rotated dims: passed through */
		return tk_load_f32(d, dt, o + j);
	a = tk_load_f32(d, dt, o + i);
	b = tk_load_f32(d, dt, o + half + i);
	si = -1.0f * s[i];
	return tk_round_f32(j < half ? a * c[i] - b * si : b * c[i] + a * si,
			    dt);
}

/* dst row at o = src row rotated by dir (+1 forward, -1 backward) over its
 * first 2 * half values, the rest copied; dst may be src: both values of a
 * pair are read before either is written. */
TK_CPU_INLINE void rot_row(int dt, void *dst, const void *src, size_t o,
			   const float *c, const float *s, int hd, int half,
			   float dir)
{
	for (int i = 0; i < half; i++) {
		float a = tk_load_f32(src, dt, o + i);
		float b = tk_load_f32(src, dt, o + half + i), si = dir * s[i];
		tk_store_f32_rne(dst, dt, o + i, a * c[i] - b * si);
		tk_store_f32_rne(dst, dt, o + half + i, b * c[i] + a * si);
	}
	if (dst != src)
		for (int j = 2 * half; j < hd; j++)
			tk_store_f32_rne(dst, dt, o + j,
					 tk_load_f32(src, dt, o + j));
}

/* Row `row` (token * heads + head): rmsnorm_fwd over its hd values, then
 * rope_fwd over the first 2 * half. */
TK_CPU_INLINE void norm_rot_row(int dt, void *out, float *rstd, const void *x,
				const void *w, const float *c, const float *s,
				size_t row, int hd, int half, float eps)
{
	const size_t o = row * hd;
	double ss = 0;
	float r;

	for (int j = 0; j < hd; j++) {
		float xj = tk_load_f32(x, dt, o + j);
		ss += (double)xj * xj;
	}
	r = (float)(1.0 / sqrt(ss / hd + (double)eps));
	rstd[row] = r;
	for (int i = 0; i < half; i++) {
		float a = tk_round_f32(tk_load_f32(w, dt, i) *
					   (tk_load_f32(x, dt, o + i) * r),
				       dt);
		float b =
		    tk_round_f32(tk_load_f32(w, dt, half + i) *
				     (tk_load_f32(x, dt, o + half + i) * r),
				 dt);
		float si = 1.0f * s[i];

		tk_store_f32_rne(out, dt, o + i, a * c[i] - b * si);
		tk_store_f32_rne(out, dt, o + half + i, b * c[i] + a * si);
	}
	for (int j = 2 * half; j < hd; j++)
		tk_store_f32_rne(out, dt, o + j,
				 tk_load_f32(w, dt, j) *
				     (tk_load_f32(x, dt, o + j) * r));
}

/* Row `row`: dx = rmsnorm_bwd's dx with dout = rope_bwd(dout), the
 * expressions of rmsnorm.c's rms_bwd_row. */
TK_CPU_INLINE void rot_norm_bwd_row(int dt, void *dx, const void *dout,
				    const void *x, const void *w,
				    const float *rstd, const float *c,
				    const float *s, size_t row, int hd,
				    int half)
{
	const size_t o = row * hd;
	double r = rstd[row], dot = 0;
	float k;

	for (int j = 0; j < hd; j++)
		dot += (double)rot_bwd_at(dt, dout, o, c, s, j, half) *
		       tk_load_f32(w, dt, j) * tk_load_f32(x, dt, o + j);
	k = (float)(dot * r * r / hd);
	for (int j = 0; j < hd; j++)
		tk_store_f32_rne(dx, dt, o + j,
				 (float)r *
				     (rot_bwd_at(dt, dout, o, c, s, j, half) *
					  tk_load_f32(w, dt, j) -
				      tk_load_f32(x, dt, o + j) * k));
}

/* Token t's row of a table [max_pos, half]; no table (nor pos) is read
 * when half is 0. */
TK_CPU_INLINE const float *tab_at(const float *tab, const int32_t *pos,
				  size_t t, int half)
{
	return half ? tab + (size_t)pos[t] * half : tab;
}

/* dw [c0, c0 + nc) += sum over rows, in order, of rope_bwd(dout) * x *
 * rstd (rmsnorm.c's rms_dw_cols on the rotated gradient). */
TK_CPU_INLINE void rot_norm_dw_cols(int dt, float *dw, const void *dout,
				    const void *x, const float *rstd,
				    const float *cos, const float *sin,
				    const int32_t *pos, int n, int heads,
				    int hd, int half, int c0, int nc)
{
	double acc[QK_COLS] = {0};

	for (size_t row = 0; row < (size_t)n * heads; row++) {
		const size_t o = row * hd;
		const float *c = tab_at(cos, pos, row / heads, half);
		const float *s = tab_at(sin, pos, row / heads, half);
		double r = rstd[row];

		for (int j = 0; j < nc; j++)
			acc[j] += (double)rot_bwd_at(dt, dout, o, c, s, c0 + j,
						     half) *
				  tk_load_f32(x, dt, o + c0 + j) * r;
	}
	for (int j = 0; j < nc; j++)
		dw[c0 + j] += (float)acc[j];
}

/* Token t's heads rows. */
TK_CPU_INLINE void fwd_token(int dt, void *out, float *rstd, const void *x,
			     const void *w, const float *cos, const float *sin,
			     const int32_t *pos, int t, int heads, int hd,
			     int half, float eps)
{
	const float *c = tab_at(cos, pos, (size_t)t, half);
	const float *s = tab_at(sin, pos, (size_t)t, half);

	for (int h = 0; h < heads; h++) {
		size_t row = (size_t)t * heads + h;

		if (w)
			norm_rot_row(dt, out, rstd, x, w, c, s, row, hd, half,
				     eps);
		else
			rot_row(dt, out, x, row * hd, c, s, hd, half, 1.0f);
	}
}

TK_CPU_INLINE void bwd_token(int dt, void *dx, const void *dout, const void *x,
			     const void *w, const float *rstd, const float *cos,
			     const float *sin, const int32_t *pos, int t,
			     int heads, int hd, int half)
{
	const float *c = tab_at(cos, pos, (size_t)t, half);
	const float *s = tab_at(sin, pos, (size_t)t, half);

	for (int h = 0; h < heads; h++) {
		size_t row = (size_t)t * heads + h;

		if (w)
			rot_norm_bwd_row(dt, dx, dout, x, w, rstd, c, s, row,
					 hd, half);
		else
			rot_row(dt, dx, dout, row * hd, c, s, hd, half, -1.0f);
	}
}

/* out, x [n, heads * hd]; rstd [n * heads] (with w); w [hd] or NULL;
 * cos/sin [max_pos, rd / 2]; pos [n]; the first rd of each head's hd
 * values rotated. */
void tk_cpu_qknorm_rope_fwd(int dt, void *out, float *rstd, const void *x,
			    const void *w, const float *cos, const float *sin,
			    const int32_t *pos, int n, int heads, int hd,
			    int rd, float eps)
{
	int half = rd / 2;

	if (dt != TK_F32 && dt != TK_BF16)
		return;
	if (!w && !half && out == x) /* nothing to rotate, nothing to copy */
		return;
#pragma omp parallel for if ((long long)n * heads * hd >= TK_CPU_PAR_MIN)
	for (int t = 0; t < n; t++) {
		if (dt == TK_F32)
			fwd_token(TK_F32, out, rstd, x, w, cos, sin, pos, t,
				  heads, hd, half, eps);
		else
			fwd_token(TK_BF16, out, rstd, x, w, cos, sin, pos, t,
				  heads, hd, half, eps);
	}
}

/* dx, dout [n, heads * hd]; cos/sin [max_pos, rd / 2]; with w: x [n, heads *
 * hd] the norm's input, rstd [n * heads], dw [hd] accumulates. */
void tk_cpu_qknorm_rope_bwd(int dt, void *dx, float *dw, const void *dout,
			    const void *x, const void *w, const float *rstd,
			    const float *cos, const float *sin,
			    const int32_t *pos, int n, int heads, int hd,
			    int rd)
{
	int par = (long long)n * heads * hd >= TK_CPU_PAR_MIN;
	int nblk = (hd + QK_COLS - 1) / QK_COLS, half = rd / 2;

	if (dt != TK_F32 && dt != TK_BF16)
		return;
	if (!w && !half && dx == dout)
		return;
#pragma omp parallel for if (par)
	for (int t = 0; t < n; t++) {
		if (dt == TK_F32)
			bwd_token(TK_F32, dx, dout, x, w, rstd, cos, sin, pos,
				  t, heads, hd, half);
		else
			bwd_token(TK_BF16, dx, dout, x, w, rstd, cos, sin, pos,
				  t, heads, hd, half);
	}
	if (!w)
		return;
		/* dw: each task owns a block of columns, rows summed in order
		 * (any blocking gives rmsnorm_bwd's bits: columns are
		 * independent). */
#pragma omp parallel for if (par)
	for (int b = 0; b < nblk; b++) {
		int c0 = b * QK_COLS;
		int nc = hd - c0 < QK_COLS ? hd - c0 : QK_COLS;

		if (dt == TK_F32)
			rot_norm_dw_cols(TK_F32, dw, dout, x, rstd, cos, sin,
					 pos, n, heads, hd, half, c0, nc);
		else
			rot_norm_dw_cols(TK_BF16, dw, dout, x, rstd, cos, sin,
					 pos, n, heads, hd, half, c0, nc);
	}
}
