/* attention_decode.c: generation's attention, n queries against the KV
 * cache (tk_ops.h's kv_store and attention_decode).
 *
 * kc, vc [rows, ctx, nkv * hd]; q, out [n, nh * hd]; lse (f32) [nh, n].
 * Query i attends row seq[i]'s keys lo .. pos[i] (lo: the window's first,
 * else 0). The same loop serves a prompt (many queries of a row, each at
 * its position: causal by construction) and a decode step (one query a
 * row at its end).
 *
 * Each (query, head) pair is one task: the scores of its keys (fp32 dot
 * products in index order) into per-thread scratch, their max and sum of
 * exponentials, then the value rows weighed in key order, rounded once.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"
#include "tk_convert.h"

TK_CPU_INLINE void store_rows(int dt, void *kc, void *vc, const void *k,
			      const void *v, const int32_t *seq,
			      const int32_t *pos, int n, int dkv, int ctx)
{
	size_t es = dt == TK_F32 ? 4 : 2;

	for (int i = 0; i < n; i++) {
		size_t dst = ((size_t)seq[i] * ctx + (size_t)pos[i]) * dkv;
		memcpy((char *)kc + dst * es,
		       (const char *)k + (size_t)i * dkv * es, dkv * es);
		memcpy((char *)vc + dst * es,
		       (const char *)v + (size_t)i * dkv * es, dkv * es);
	}
}

void tk_cpu_kv_store(int dt, void *kc, void *vc, const void *k, const void *v,
		     const int32_t *seq, const int32_t *pos, int n, int nkv,
		     int hd, int ctx)
{
	if (dt == TK_F32 || dt == TK_BF16)
		store_rows(dt, kc, vc, k, v, seq, pos, n, nkv * hd, ctx);
}

/* Scratch of the scores; the op table has no error channel, and a skipped
 * query would generate garbage, so failing to get a few KiB is fatal. */
static float *score_scratch(int ctx)
{
	float *p = malloc((size_t)ctx * sizeof(float));

	if (!p) {
		fprintf(stderr, "tk_cpu attention_decode: out of memory\n");
		abort();
	}
	return p;
}

TK_CPU_INLINE void decode_rows(int dt, void *out, float *lse, const void *q,
			       const void *kc, const void *vc,
			       const int32_t *seq, const int32_t *pos, int n,
			       int nh, int nkv, int hd, int ctx, int window,
			       float scale)
{
	size_t dq = (size_t)nh * hd, dkv = (size_t)nkv * hd;
	int group = nh / nkv;

#pragma omp parallel if ((size_t)n * nh * hd * 64 >= TK_CPU_PAR_MIN)
	{
		float *s = score_scratch(ctx);
		float acc[TK_ATT_DEC_MAX_HD];
		int task;
#pragma omp for schedule(static)
		for (task = 0; task < n * nh; task++) {
			int i = task / nh, h = task % nh, p = pos[i];
			int lo = window > 0 && p - window + 1 > 0
				     ? p - window + 1
				     : 0;
			size_t qo = (size_t)i * dq + (size_t)h * hd;
			size_t base = (size_t)seq[i] * ctx * dkv +
				      (size_t)(h / group) * hd;
			float mx = -INFINITY, sum = 0.0f;
			for (int j = lo; j <= p; j++) {
				size_t ko = base + (size_t)j * dkv;
				float d = 0.0f;
				for (int e = 0; e < hd; e++)
					d += tk_load_f32(q, dt, qo + e) *
					     tk_load_f32(kc, dt, ko + e);
				s[j - lo] = d * scale;
				if (s[j - lo] > mx)
					mx = s[j - lo];
			}
			for (int j = lo; j <= p; j++) {
				s[j - lo] = expf(s[j - lo] - mx);
				sum += s[j - lo];
			}
			for (int e = 0; e < hd; e++)
				acc[e] = 0.0f;
			for (int j = lo; j <= p; j++) {
				size_t vo = base + (size_t)j * dkv;
				float wgt = s[j - lo];
				for (int e = 0; e < hd; e++)
					acc[e] +=
					    wgt * tk_load_f32(vc, dt, vo + e);
			}
			for (int e = 0; e < hd; e++)
				tk_store_f32_rne(out, dt, qo + e, acc[e] / sum);
			lse[(size_t)h * n + i] = mx + logf(sum);
		}
		free(s);
	}
}

void tk_cpu_attention_decode(int dt, void *out, float *lse, const void *q,
			     const void *kc, const void *vc, const int32_t *seq,
			     const int32_t *pos, int n, int nh, int nkv, int hd,
			     int ctx, int window, float scale)
{
	if (hd > TK_ATT_DEC_MAX_HD)
		return;
	if (dt == TK_F32)
		decode_rows(TK_F32, out, lse, q, kc, vc, seq, pos, n, nh, nkv,
			    hd, ctx, window, scale);
	else if (dt == TK_BF16)
		decode_rows(TK_BF16, out, lse, q, kc, vc, seq, pos, n, nh, nkv,
			    hd, ctx, window, scale);
}
