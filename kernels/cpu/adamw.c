/* adamw.c: AdamW for the tensors TACO does not update (docs/taco.md,
 * "AdamW, for the other tensors").
 *
 * Semantics: torch.optim.AdamW (single-tensor path, foreach=False,
 * amsgrad=False, maximize=False) on an fp32 master copy, the model copy being
 * the master rounded to nearest even in its dtype. The spec's formula
 *   p = p - lr * (wd * p + (m / bc1) / (sqrt(v / bc2) + eps))
 * is evaluated in PyTorch's order of operations, not literally:
 *
 *   scalars, in double from the float arguments (as Python does):
 *     decay  = (float)(1 - lr * wd)
 *     w1     = (float)(1 - beta1)          lerp weight
 *     w2     = (float)(1 - beta2)
 *     bc1    = 1 - pow(beta1, t),  bc2 = 1 - pow(beta2, t)
 *     nstep  = (float)(-(lr / bc1))
 *     bc2s   = (float)pow(bc2, 0.5)        Python's bc2 ** 0.5
 *   per element, fp32:
 *     p = p * decay                         (skipped when wd == 0)
 *     m = fma(w1, g - m, m)                 torch lerp, |w1| < 0.5
 *       = fma(w1 - 1, g - m, g)             torch lerp, |w1| >= 0.5
 *     v = fma(w2 * g, g, v * beta2)         mul_(beta2).addcmul_(g, g, w2)
 *     d = sqrtf(v) / bc2s + eps
 *     p = p + (nstep * m) / d               addcdiv_(m, d, value=-step)
 *
 * i.e. the decay is applied first (p *= 1 - lr*wd), then the Adam step.
 * The two fma are those PyTorch's vectorized CPU kernels execute (AVX2 /
 * AVX-512 builds: lerp is vec::fmadd, addcmul compiles to an fma); fmaf is
 * correctly rounded everywhere (__fmaf_rn in CUDA), so the result does not
 * depend on the machine. sqrtf is the correctly rounded IEEE square root;
 * PyTorch's CPU sqrt (MKL VML) is not always, so results may differ from
 * PyTorch's by an ulp where its sqrt is off (tests/fixtures/optim measures
 * this). NaN and infinities propagate as in PyTorch (no special case).
 */
#include <math.h>
#include <stdint.h>

#include "cpu_ops.h"
#include "tk_convert.h"

void tk_cpu_adamw_update(void *p, int dtype, float *master, float *m, float *v,
			 const float *g, size_t n, const tk_adamw_args *a)
{
	const double lr = a->lr, b1 = a->beta1, b2 = a->beta2;
	const double t = (double)a->step;
	const double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
	const float decay = (float)(1.0 - lr * (double)a->weight_decay);
	const float w1 = (float)(1.0 - b1), w1m1 = w1 - 1.0f;
	const int small = fabsf(w1) < 0.5f;
	const float beta2 = a->beta2, w2 = (float)(1.0 - b2);
	const float nstep = (float)(-(lr / bc1));
	const float bc2s = (float)pow(bc2, 0.5);
	const float eps = a->eps;
	const int decayed = a->weight_decay != 0.0f;
	long long i, nn = (long long)n;

	if (dtype != TK_F32 && dtype != TK_BF16 && dtype != TK_F16)
		return;
#pragma omp parallel for schedule(static) if (nn >= TK_CPU_PAR_MIN)
	for (i = 0; i < nn; i++) {
		float x = master[i], gi = g[i], mi = m[i], vi = v[i];
		float dm, gg, d, num;

		if (decayed)
			x = x * decay;
		dm = gi - mi;
		mi = small ? fmaf(w1, dm, mi) : fmaf(w1m1, dm, gi);
		gg = w2 * gi;
		vi = vi * beta2;
		vi = fmaf(gg, gi, vi);
		d = sqrtf(vi) / bc2s;
		d = d + eps;
		num = nstep * mi;
		x = x + num / d;
		master[i] = x;
		m[i] = mi;
		v[i] = vi;
		tk_store_f32_rne(p, dtype, (size_t)i, x);
	}
}
