/* embedding.c: token embedding lookup and its scatter-add.
 *
 * Token ids are validated by the caller (0 <= id < V); a negative id gives
 * a zero row in the forward pass and is skipped by the backward pass.
 */
#include <string.h>

#include "cpu_ops.h"

/* Columns per task in embedding_bwd. */
#define EMB_COLS 256

/* out [n, H] = table [V, H] [tokens[i], :] */
void tk_cpu_embedding_fwd(float *out, const float *table, const int32_t *tokens,
			  int n, int H)
{
	int i;

#pragma omp parallel for if ((long long)n * H >= TK_CPU_PAR_MIN)
	for (i = 0; i < n; i++) {
		float *o = out + (size_t)i * H;
		if (tokens[i] < 0)
			memset(o, 0, (size_t)H * sizeof(float));
		else
			memcpy(o, table + (size_t)tokens[i] * H,
			       (size_t)H * sizeof(float));
	}
}

/* dtable [V, H] [tokens[i], :] += dout [n, H] [i, :]. Parallel over column
 * blocks: each task adds the tokens in order i = 0..n-1 into its own
 * columns, so there are no races and the sum order is fixed. */
void tk_cpu_embedding_bwd(float *dtable, const float *dout,
			  const int32_t *tokens, int n, int H)
{
	int nblk = (H + EMB_COLS - 1) / EMB_COLS, b;

#pragma omp parallel for if ((long long)n * H >= TK_CPU_PAR_MIN)
	for (b = 0; b < nblk; b++) {
		int c0 = b * EMB_COLS;
		int nc = H - c0 < EMB_COLS ? H - c0 : EMB_COLS;

		for (int i = 0; i < n; i++) {
			const float *d = dout + (size_t)i * H + c0;
			float *t;

			if (tokens[i] < 0)
				continue;
			t = dtable + (size_t)tokens[i] * H + c0;
			for (int c = 0; c < nc; c++)
				t[c] += d[c];
		}
	}
}
