/* rope.c: rotary position embedding, Hugging Face "rotate_half" layout.
 *
 * For each head, the pair (x[i], x[i + hd/2]), i < hd/2, is rotated by the
 * angle pos * inv_freq[i]:
 *   x1' = x1 * cos - x2 * sin,  x2' = x2 * cos + x1 * sin.
 * The backward pass applies the transposed (inverse) rotation.
 */
#include "cpu_ops.h"

/* x [n, heads * hd] in place; cos/sin [max_pos, hd/2]; pos [n].
 * dir = +1 rotates forward, -1 backward (sin negated). */
static void rope_rotate(float *x, const float *cos, const float *sin,
			const int32_t *pos, int n, int heads, int hd, float dir)
{
	int half = hd / 2;

#pragma omp parallel for if ((long long)n * heads * hd >= TK_CPU_PAR_MIN)
	for (int t = 0; t < n; t++) {
		const float *c = cos + (size_t)pos[t] * half;
		const float *s = sin + (size_t)pos[t] * half;

		for (int h = 0; h < heads; h++) {
			float *x1 = x + ((size_t)t * heads + h) * hd;
			float *x2 = x1 + half;
			for (int i = 0; i < half; i++) {
				float a = x1[i], b = x2[i], si = dir * s[i];
				x1[i] = a * c[i] - b * si;
				x2[i] = b * c[i] + a * si;
			}
		}
	}
}

void tk_cpu_rope_fwd(float *x, const float *cos, const float *sin,
		     const int32_t *pos, int n, int heads, int hd)
{
	rope_rotate(x, cos, sin, pos, n, heads, hd, 1.0f);
}

/* dx [n, heads * hd] in place: dx1 = d1 * cos + d2 * sin,
 * dx2 = d2 * cos - d1 * sin. */
void tk_cpu_rope_bwd(float *dx, const float *cos, const float *sin,
		     const int32_t *pos, int n, int heads, int hd)
{
	rope_rotate(dx, cos, sin, pos, n, heads, hd, -1.0f);
}
