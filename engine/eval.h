/* eval.h: multiple-choice evaluation, the way the TACO preprint scores
 * SST-2, RTE and BoolQ: each candidate completion's log-likelihood given
 * the prompt, the highest wins. One JSON object per line:
 * {"prompt": "...", "choices": ["...", ...], "answer": i}. */
#ifndef TACO_EVAL_H
#define TACO_EVAL_H

#include <stdint.h>

#include "model.h"
#include "taco_err.h"
#include "tokenizer.h"

#define TACO_MC_MAX_CHOICES 64

typedef struct taco_mc_set {
	size_t n;	   /* examples */
	size_t n_rows;	   /* candidates over all examples */
	int *answer;	   /* [n] */
	size_t *first_row; /* [n + 1]: rows of example i */
	size_t *row_off;   /* [n_rows + 1] into tokens */
	size_t *row_split; /* [n_rows]: tokens of the prompt in each row */
	int32_t *tokens;
} taco_mc_set;

/* Reads the file; errors name the line. Prompts keep their tokenizer's
 * special tokens (BOS); candidates are scored on their own tokens. */
int taco_mc_load(const char *path, const taco_tok *tok, int64_t max_examples,
		 taco_mc_set **out, taco_err *err);
void taco_mc_free(taco_mc_set *s);

/* Scores every candidate in batches of B rows of T tokens (rows longer
 * than T lose prompt tokens from the left) and returns the accuracy, and
 * when row_scores is set (n_rows entries) each candidate's log-likelihood. */
int taco_mc_eval(taco_model *m, const taco_mc_set *s, int B, int T,
		 double *accuracy, double *row_scores, taco_err *err);

#endif
