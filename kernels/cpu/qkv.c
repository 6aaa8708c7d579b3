/* qkv.c: GPT-NeoX's fused query_key_value layout. The projection's output
 * row [heads * 3 * hd] holds, per head, hd query values, then hd key values,
 * then hd value values; q, k and v rows [heads * hd] are the usual layout of
 * the attention ops. Pure copies of the stored bits (memcpy: a NaN payload
 * is kept), so any backend gives the same bytes.
 */
#include <string.h>

#include "cpu_ops.h"

/* Row t: the 3 * heads runs of hd elements, es bytes each. dir 0: split
 * (qkv -> q, k, v), 1: merge (q, k, v -> qkv). */
static void qkv_row(int dir, char *q, char *k, char *v, char *qkv, size_t t,
		    int heads, int hd, size_t es)
{
	const size_t run = (size_t)hd * es;
	char *f = qkv + t * heads * 3 * run;
	char *p[3] = {q + t * heads * run, k + t * heads * run,
		      v + t * heads * run};

	for (int h = 0; h < heads; h++)
		for (int c = 0; c < 3; c++) {
			char *fused = f + ((size_t)h * 3 + c) * run;
			char *sep = p[c] + (size_t)h * run;

			if (dir)
				memcpy(fused, sep, run);
			else
				memcpy(sep, fused, run);
		}
}

static void qkv_rows(int dir, int dt, char *q, char *k, char *v, char *qkv,
		     int n, int heads, int hd)
{
	size_t es = dt == TK_F32 || dt == TK_BF16 ? tk_dtype_size(dt) : 0;

	if (!es || n <= 0 || heads <= 0 || hd <= 0)
		return;
#pragma omp parallel for if ((long long)n * heads * hd >= TK_CPU_PAR_MIN)
	for (int t = 0; t < n; t++)
		qkv_row(dir, q, k, v, qkv, (size_t)t, heads, hd, es);
}

/* q, k, v [n, heads * hd] from qkv [n, heads * 3 * hd] */
void tk_cpu_qkv_split(int dt, void *q, void *k, void *v, const void *qkv, int n,
		      int heads, int hd)
{
	qkv_rows(0, dt, q, k, v, (char *)qkv, n, heads, hd);
}

/* dqkv [n, heads * 3 * hd] from dq, dk, dv [n, heads * hd] */
void tk_cpu_qkv_merge(int dt, void *dqkv, const void *dq, const void *dk,
		      const void *dv, int n, int heads, int hd)
{
	qkv_rows(1, dt, (char *)dq, (char *)dk, (char *)dv, dqkv, n, heads, hd);
}
