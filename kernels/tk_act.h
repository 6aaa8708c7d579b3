/* tk_act.h: the MLP activations of OPT (ReLU) and GPT-NeoX (exact GELU) and
 * their derivatives, one definition for the CPU backend (kernels/cpu/act.c)
 * and (TK_HD) the CUDA kernels (kernels/cuda/act.cu), element-wise in fp32:
 *   relu(x) = x > 0 ? x : 0,  relu'(x) = x > 0 (0 at 0, as torch);
 *   gelu(x) = x * 0.5 * (1 + erf(x / sqrt 2)),
 *   gelu'(x) = 0.5 * (1 + erf(x / sqrt 2)) + x * exp(-x^2 / 2) / sqrt(2 pi).
 * A NaN input propagates (torch's relu and threshold_backward let it
 * through). The expressions are the same operations on both backends (no
 * FMA: -ffp-contract=off, nvcc -fmad=false), so ReLU gives the same bits;
 * libm's and CUDA's erff and expf may differ in the last ulp, so GELU may
 * too. act is TK_ACT_RELU or TK_ACT_GELU, a constant where the callers
 * inline these, so the branch folds.
 */
#ifndef TK_ACT_H
#define TK_ACT_H

#include <math.h>

#include "tk_hd.h"
#include "tk_ops.h"

/* 1 / sqrt(2) and 1 / sqrt(2 pi), rounded to fp32 */
#define TK_ACT_SQRT1_2 0.70710678118654752f
#define TK_ACT_INV_SQRT_2PI 0.39894228040143268f

/* act(x) */
static inline TK_HD float tk_act_f(int act, float x)
{
	if (act == TK_ACT_RELU)
		return x > 0.0f || x != x ? x : 0.0f;
	return x * 0.5f * (1.0f + erff(x * TK_ACT_SQRT1_2));
}

/* d * act'(x): the gradient through act of d, the output's gradient */
static inline TK_HD float tk_act_df(int act, float d, float x)
{
	if (act == TK_ACT_RELU)
		return x > 0.0f || x != x ? d : 0.0f;
	return d * (0.5f * (1.0f + erff(x * TK_ACT_SQRT1_2)) +
		    x * (expf(-0.5f * x * x) * TK_ACT_INV_SQRT_2PI));
}

#endif
