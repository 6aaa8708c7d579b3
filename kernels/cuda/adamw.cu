/* adamw.cu: AdamW on the GPU, bit for bit kernels/cpu/adamw.c.
 *
 * The scalars are computed on the host by the same C expressions as the
 * CPU (double, then rounded to float); each element then runs the CPU's
 * operations in the CPU's order with the correctly rounded intrinsics:
 * the two fmaf of PyTorch's lerp and addcmul are __fmaf_rn, sqrtf is
 * __fsqrt_rn, the divisions __fdiv_rn, everything else one __fmul_rn /
 * __fadd_rn / __fsub_rn (the file is built with -fmad=false as well).
 */
#include <math.h>
#include <stdint.h>

#include "cuda_ops.h"

/* The per-step scalars of kernels/cpu/adamw.c. */
struct adamw_scalars {
	float decay, w1, w1m1, beta2, w2, nstep, bc2s, eps;
	int small, decayed;
};

static __device__ uint16_t bf16_rne(float f)
{
	uint32_t b = __float_as_uint(f);

	if ((b & 0x7FFFFFFFu) > 0x7F800000u)
		return (uint16_t)((b >> 16) | 0x40);
	b += 0x7FFFu + ((b >> 16) & 1u);
	return (uint16_t)(b >> 16);
}

/* kernels/cpu/fp8.h tk_f32_f16_rne. */
static __device__ uint16_t f16_rne(float f)
{
	uint32_t x = __float_as_uint(f);
	uint32_t sign = (x >> 16) & 0x8000u;
	uint32_t a = x & 0x7FFFFFFFu;

	if (a > 0x7F800000u)
		return (uint16_t)(sign | 0x7E00u);
	if (a >= 0x477FF000u)
		return (uint16_t)(sign | 0x7C00u);
	if (a < 0x38800000u) {
		uint32_t e = a >> 23, man, q, rem, half;
		int shift;

		if (e < 102)
			return (uint16_t)sign;
		man = (a & 0x7FFFFFu) | 0x800000u;
		shift = 126 - (int)e;
		q = man >> shift;
		rem = man & ((1u << shift) - 1u);
		half = 1u << (shift - 1);
		if (rem > half || (rem == half && (q & 1u)))
			q++;
		return (uint16_t)(sign | q);
	}
	a -= 0x38000000u;
	a += 0xFFFu + ((a >> 13) & 1u);
	return (uint16_t)(sign | (a >> 13));
}

/* Grid-stride over n elements. */
static __global__ void adamw_kernel(void *p, int dtype, float *master, float *m,
				    float *v, const float *g, size_t n,
				    adamw_scalars s)
{
	const size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		float x = master[i], gi = g[i], mi = m[i], vi = v[i];
		float dm, gg, d, num;

		if (s.decayed)
			x = __fmul_rn(x, s.decay);
		dm = __fsub_rn(gi, mi);
		mi = s.small ? __fmaf_rn(s.w1, dm, mi)
			     : __fmaf_rn(s.w1m1, dm, gi);
		gg = __fmul_rn(s.w2, gi);
		vi = __fmul_rn(vi, s.beta2);
		vi = __fmaf_rn(gg, gi, vi);
		d = __fdiv_rn(__fsqrt_rn(vi), s.bc2s);
		d = __fadd_rn(d, s.eps);
		num = __fmul_rn(s.nstep, mi);
		x = __fadd_rn(x, __fdiv_rn(num, d));
		master[i] = x;
		m[i] = mi;
		v[i] = vi;
		switch (dtype) {
		case TK_F32:
			((float *)p)[i] = x;
			break;
		case TK_BF16:
			((uint16_t *)p)[i] = bf16_rne(x);
			break;
		default:
			((uint16_t *)p)[i] = f16_rne(x);
			break;
		}
	}
}

extern "C" void tkc_adamw_update(void *p, int dtype, float *master, float *m,
				 float *v, const float *g, size_t n,
				 const tk_adamw_args *a)
{
	const double lr = a->lr, b1 = a->beta1, b2 = a->beta2;
	const double t = (double)a->step;
	const double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
	adamw_scalars s;

	if (dtype != TK_F32 && dtype != TK_BF16 && dtype != TK_F16)
		return;
	if (n == 0)
		return;
	s.decay = (float)(1.0 - lr * (double)a->weight_decay);
	s.w1 = (float)(1.0 - b1);
	s.w1m1 = s.w1 - 1.0f;
	s.small = fabsf(s.w1) < 0.5f;
	s.beta2 = a->beta2;
	s.w2 = (float)(1.0 - b2);
	s.nstep = (float)(-(lr / bc1));
	s.bc2s = (float)pow(bc2, 0.5);
	s.eps = a->eps;
	s.decayed = a->weight_decay != 0.0f;
	adamw_kernel<<<tkc_blocks(n), TKC_THREADS, 0, tkc_stream()>>>(
	    p, dtype, master, m, v, g, n, s);
	tkc_check_launch("adamw_update");
}
