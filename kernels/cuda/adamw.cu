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
#include "tk_convert.h"

/* The per-step scalars of kernels/cpu/adamw.c. */
struct adamw_scalars {
	float decay, w1, w1m1, beta2, w2, nstep, bc2s, eps;
	int small, decayed;
};

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
		tk_store_f32_rne(p, dtype, i, x);
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
