/* mc.h: multiple-choice evaluation sets, the way the TACO preprint scores
 * SST-2, RTE and BoolQ: each candidate completion's log-likelihood given
 * the prompt, the highest wins (train/eval.h scores them). One JSON object
 * per line: {"prompt": "...", "choices": ["...", ...], "answer": i}, or
 * with "messages" (a chat) in place of "prompt": the prompt is then the
 * chat rendered by the job's chat template with its generation prompt,
 * what the model answers after when served. */
#ifndef TACO_MC_H
#define TACO_MC_H

#include <stddef.h>
#include <stdint.h>

#include "chat.h"
#include "tokenizer/tokenizer.h"
#include "util/taco_err.h"

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
 * special tokens (BOS; a chat's are its template's); candidates are scored
 * on their own tokens. chat: the job's template, NULL where there is none
 * (then a chat line is an error). */
int taco_mc_load(const char *path, const taco_tok *tok, const taco_chat *chat,
		 int64_t max_examples, taco_mc_set **out, taco_err *err);
void taco_mc_free(taco_mc_set *s);

#endif
