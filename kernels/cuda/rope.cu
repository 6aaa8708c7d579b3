/* rope.cu: rotary position embedding, Hugging Face "rotate_half" layout.
 *
 * For each head, the pair (x[i], x[i + hd/2]), i < hd/2, is rotated by the
 * angle pos * inv_freq[i]:
 *   x1' = x1 * cos - x2 * sin,  x2' = x2 * cos + x1 * sin.
 * The backward pass applies the inverse rotation (sin negated). One thread
 * per pair, the CPU's expressions (bit-identical without FMA). x is dt (F32
 * or BF16), the tables f32; both elements of a pair are read before either
 * is written, and each is rounded once.
 */
#include "cuda_ops.h"

/* x [n, heads * hd] in place; cos/sin [max_pos, hd/2]; pos [n];
 * pairs = n * heads * (hd / 2); dir = +1 forward, -1 backward. */
template <typename T>
__global__ static void rope_kernel(T *x, const float *cos, const float *sin,
				   const int32_t *pos, size_t pairs, int heads,
				   int hd, float dir)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;
	int half = hd / 2;

	for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	     p < pairs; p += stride) {
		size_t th = p / half; /* token * heads + head */
		int i = (int)(p % half);
		size_t t = th / heads;
		const float *c = cos + (size_t)pos[t] * half;
		const float *s = sin + (size_t)pos[t] * half;
		T *x1 = x + th * hd;
		T *x2 = x1 + half;
		float a = tkc_ld(x1[i]), b = tkc_ld(x2[i]), si = dir * s[i];

		tkc_put(&x1[i], a * c[i] - b * si);
		tkc_put(&x2[i], b * c[i] + a * si);
	}
}

static void rope(int dt, void *x, const float *cos, const float *sin,
		 const int32_t *pos, int n, int heads, int hd, float dir,
		 const char *what)
{
	size_t pairs;

	if (n <= 0 || heads <= 0 || hd < 2)
		return;
	pairs = (size_t)n * heads * (hd / 2);
	if (dt == TK_F32)
		rope_kernel<float>
		    <<<tkc_blocks(pairs), TKC_THREADS, 0, tkc_stream()>>>(
			(float *)x, cos, sin, pos, pairs, heads, hd, dir);
	else if (dt == TK_BF16)
		rope_kernel<tkc_bf16>
		    <<<tkc_blocks(pairs), TKC_THREADS, 0, tkc_stream()>>>(
			(tkc_bf16 *)x, cos, sin, pos, pairs, heads, hd, dir);
	else {
		tkc_bad_dtype(what, dt);
		return;
	}
	tkc_check_launch(what);
}

void tkc_rope_fwd(int dt, void *x, const float *cos, const float *sin,
		  const int32_t *pos, int n, int heads, int hd)
{
	rope(dt, x, cos, sin, pos, n, heads, hd, 1.0f, "rope_fwd");
}

void tkc_rope_bwd(int dt, void *dx, const float *cos, const float *sin,
		  const int32_t *pos, int n, int heads, int hd)
{
	rope(dt, dx, cos, sin, pos, n, heads, hd, -1.0f, "rope_bwd");
}
