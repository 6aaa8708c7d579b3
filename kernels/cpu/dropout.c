/* dropout.c: inverted dropout in place, x[i] = keep(i) ? x[i] * s : +0 with
 * s = 1.0f / (1.0f - p). The mask is the counter-based one of tk_dropout.h,
 * decided per element from (seed, stream, i), so spans can run on any
 * thread and the CUDA backend draws the same mask; the product is one fp32
 * multiply, rounded once to dt: the same bits as kernels/cuda/dropout.cu.
 */
#include "cpu_ops.h"
#include "tk_convert.h"
#include "tk_dropout.h"

TK_CPU_INLINE void dropout_span(int dt, void *x, uint64_t key, uint64_t thr,
				float s, size_t i0, size_t i1)
{
	for (size_t i = i0; i < i1; i++)
		tk_store_f32_rne(x, dt, i,
				 tk_dropout_keep(key, thr, i)
				     ? tk_load_f32(x, dt, i) * s
				     : 0.0f);
}

/* x [n], in place */
void tk_cpu_dropout(int dt, void *x, size_t n, float p, uint64_t seed,
		    uint64_t stream)
{
	long long b, nblk = (long long)((n + TK_CPU_SPAN - 1) / TK_CPU_SPAN);
	uint64_t key, thr;
	float s;

	if (dt != TK_F32 && dt != TK_BF16)
		return;
	/* p == 0 keeps everything unscaled: nothing to write. !(p <= 1) also
	 * rejects a NaN. */
	if (!(p > 0.0f) || !(p <= 1.0f))
		return;
	key = tk_dropout_key(seed, stream);
	thr = tk_dropout_threshold(p);
	s = 1.0f / (1.0f - p); /* inf at p == 1, where nothing is kept */
#pragma omp parallel for if (n >= TK_CPU_PAR_MIN)
	for (b = 0; b < nblk; b++) {
		size_t i0 = (size_t)b * TK_CPU_SPAN;
		size_t i1 = n - i0 < TK_CPU_SPAN ? n : i0 + TK_CPU_SPAN;

		if (dt == TK_F32)
			dropout_span(TK_F32, x, key, thr, s, i0, i1);
		else
			dropout_span(TK_BF16, x, key, thr, s, i0, i1);
	}
}
