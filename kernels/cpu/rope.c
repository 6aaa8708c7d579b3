/* rope.c: rotary position embedding, Hugging Face "rotate_half" layout.
 *
 * For each head, the pair (x[i], x[i + hd/2]), i < hd/2, is rotated by the
 * angle pos * inv_freq[i]:
 *   x1' = x1 * cos - x2 * sin,  x2' = x2 * cos + x1 * sin.
 * The backward pass applies the transposed (inverse) rotation. x is in dt,
 * the cos/sin tables are fp32.
 */
#include "cpu_ops.h"
#include "tk_convert.h"

/* Token t of x [n, heads * hd] in place. */
TK_CPU_INLINE void rope_token(int dt, void *x, const float *c, const float *s,
			      int t, int heads, int hd, float dir)
{
	int half = hd / 2;

	for (int h = 0; h < heads; h++) {
		size_t o1 = ((size_t)t * heads + h) * hd, o2 = o1 + half;
		for (int i = 0; i < half; i++) {
			float a = tk_load_f32(x, dt, o1 + i);
			float b = tk_load_f32(x, dt, o2 + i), si = dir * s[i];
			tk_store_f32_rne(x, dt, o1 + i, a * c[i] - b * si);
			tk_store_f32_rne(x, dt, o2 + i, b * c[i] + a * si);
		}
	}
}

/* x [n, heads * hd] in place; cos/sin [max_pos, hd/2]; pos [n].
 * dir = +1 rotates forward, -1 backward (sin negated). */
static void rope_rotate(int dt, void *x, const float *cos, const float *sin,
			const int32_t *pos, int n, int heads, int hd, float dir)
{
	int half = hd / 2;

	if (dt != TK_F32 && dt != TK_BF16)
		return;
#pragma omp parallel for if ((long long)n * heads * hd >= TK_CPU_PAR_MIN)
	for (int t = 0; t < n; t++) {
		const float *c = cos + (size_t)pos[t] * half;
		const float *s = sin + (size_t)pos[t] * half;

		if (dt == TK_F32)
			rope_token(TK_F32, x, c, s, t, heads, hd, dir);
		else
			rope_token(TK_BF16, x, c, s, t, heads, hd, dir);
	}
}

void tk_cpu_rope_fwd(int dt, void *x, const float *cos, const float *sin,
		     const int32_t *pos, int n, int heads, int hd)
{
	rope_rotate(dt, x, cos, sin, pos, n, heads, hd, 1.0f);
}

/* dx [n, heads * hd] in place: dx1 = d1 * cos + d2 * sin,
 * dx2 = d2 * cos - d1 * sin. */
void tk_cpu_rope_bwd(int dt, void *dx, const float *cos, const float *sin,
		     const int32_t *pos, int n, int heads, int hd)
{
	rope_rotate(dt, dx, cos, sin, pos, n, heads, hd, -1.0f);
}
