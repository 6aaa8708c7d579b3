/* embedding.c: token embedding lookup and its scatter-add.
 *
 * Token ids are validated by the caller (0 <= id < V); a negative id gives
 * a zero row in the forward pass and is skipped by the backward pass. out
 * and table are in dt (the lookup copies bits: no rounding); dout is in dt,
 * dtable is fp32.
 */
#include <string.h>

#include "cpu_ops.h"
#include "tk_convert.h"

/* Columns per task in embedding_bwd. */
#define EMB_COLS 256

/* out [n, H] = table [V, H] [tokens[i], :] */
void tk_cpu_embedding_fwd(int dt, void *out, const void *table,
			  const int32_t *tokens, int n, int H)
{
	const size_t es = dt == TK_F32 || dt == TK_BF16 ? tk_dtype_size(dt) : 0;
	const size_t row = (size_t)(H > 0 ? H : 0) * es;
	int i;

	if (!es)
		return;
#pragma omp parallel for if ((long long)n * H >= TK_CPU_PAR_MIN)
	for (i = 0; i < n; i++) {
		char *o = (char *)out + (size_t)i * row;
		if (tokens[i] < 0)
			memset(o, 0, row);
		else
			memcpy(o, (const char *)table + (size_t)tokens[i] * row,
			       row);
	}
}

TK_CPU_INLINE void emb_cols(int dt, float *dtable, const void *dout,
			    const int32_t *rows, int n, int H, int r0, int nr,
			    int c0, int nc)
{
	for (int i = 0; i < n; i++) {
		size_t o = (size_t)i * H + c0;
		float *t;

		/* r0 <= rows[i] < r0 + nr, without overflow */
		if (rows[i] < r0 || rows[i] - r0 >= nr)
			continue;
		t = dtable + (size_t)(rows[i] - r0) * H + c0;
		for (int c = 0; c < nc; c++)
			t[c] += tk_load_f32(dout, dt, o + c);
	}
}

/* dtable [nr, H] [rows[i] - r0, :] += dout [n, H] [i, :]. Parallel over column
 * blocks: each task adds the tokens in order i = 0..n-1 into its own
 * columns, so there are no races and the sum order is fixed. */
void tk_cpu_embedding_bwd(int dt, float *dtable, const void *dout,
			  const int32_t *rows, int n, int H, int r0, int nr)
{
	int nblk = (H + EMB_COLS - 1) / EMB_COLS, b;

	if (dt != TK_F32 && dt != TK_BF16)
		return;
#pragma omp parallel for if ((long long)n * H >= TK_CPU_PAR_MIN)
	for (b = 0; b < nblk; b++) {
		int c0 = b * EMB_COLS;
		int nc = H - c0 < EMB_COLS ? H - c0 : EMB_COLS;

		if (dt == TK_F32)
			emb_cols(TK_F32, dtable, dout, rows, n, H, r0, nr, c0,
				 nc);
		else
			emb_cols(TK_BF16, dtable, dout, rows, n, H, r0, nr, c0,
				 nc);
	}
}
