/* eval.c: multiple-choice scoring. */
#include "eval.h"

#include <stdlib.h>
#include <string.h>

/* Row i into a T-token slot: the last T tokens (the prompt loses its start
 * when too long); targets only on the candidate's tokens. */
static void fill_row(const taco_mc_set *s, size_t i, int T, int32_t *tok,
		     int32_t *tgt)
{
	size_t o = s->row_off[i], n = s->row_off[i + 1] - o;
	size_t drop = n > (size_t)T ? n - (size_t)T : 0;
	size_t split = s->row_split[i];

	for (int t = 0; t < T; t++) {
		size_t k = drop + (size_t)t; /* token index within the row */
		tok[t] = k < n ? s->tokens[o + k] : 0;
		/* position t predicts token k + 1 */
		tgt[t] =
		    k + 1 < n && k + 1 >= split ? s->tokens[o + k + 1] : -100;
	}
}

int taco_mc_eval(taco_model *m, const taco_mc_set *s, int B, int T,
		 double *accuracy, double *row_scores, taco_err *err)
{
	int32_t *tok = malloc(sizeof(int32_t) * (size_t)B * (size_t)T);
	int32_t *tgt = malloc(sizeof(int32_t) * (size_t)B * (size_t)T);
	double *scores = malloc(sizeof(double) * (s->n_rows ? s->n_rows : 1));
	double *sums = malloc(sizeof(double) * (size_t)B);
	size_t right = 0;
	int r = 0;

	if (!tok || !tgt || !scores || !sums) {
		r = taco_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	for (size_t r0 = 0; r0 < s->n_rows; r0 += (size_t)B) {
		for (int b = 0; b < B; b++) {
			if (r0 + (size_t)b < s->n_rows) {
				fill_row(s, r0 + (size_t)b, T,
					 tok + (size_t)b * T,
					 tgt + (size_t)b * T);
			} else {
				for (int t = 0; t < T; t++)
					tok[(size_t)b * T + t] = 0,
							    tgt[(size_t)b * T +
								t] = -100;
			}
		}
		if ((r = taco_model_score(
			 m, &(taco_batch){B, T, tok, tgt, NULL, 0}, sums, err)))
			goto out;
		for (int b = 0; b < B && r0 + (size_t)b < s->n_rows; b++)
			scores[r0 + (size_t)b] = sums[b];
	}
	for (size_t e = 0; e < s->n; e++) {
		size_t best = s->first_row[e];
		for (size_t i = best + 1; i < s->first_row[e + 1]; i++)
			if (scores[i] > scores[best])
				best = i;
		right += (int)(best - s->first_row[e]) == s->answer[e];
	}
	*accuracy = s->n ? (double)right / (double)s->n : 0.0;
	if (row_scores)
		memcpy(row_scores, scores, s->n_rows * sizeof(double));
out:
	free(tok);
	free(tgt);
	free(scores);
	free(sums);
	return r;
}
