/* samples.h: evaluation's answers (the job's eval_samples): greedy
 * completions of the validation set's first chats (data.h's prompts),
 * beside their reference answers, and the share that equals them. */
#ifndef TACO_SAMPLES_H
#define TACO_SAMPLES_H

#include <jansson.h>

#include "data/data.h"
#include "gen/gen.h"
#include "job/job.h"
#include "model/decode.h"

/* Bytes of a sample's prompt, reference or answer in an event (cut at a
 * character boundary beyond): 64 samples stay far inside an event line. */
#define TACO_SAMPLE_TEXT_MAX 2000

/* Tokens an answer may take at most: twice its reference's and 16, up to
 * this, and the context's room. */
#define TACO_SAMPLE_MAX_TOKENS 512

typedef struct taco_samples {
	taco_kv *kv; /* NULL: off */
	int rows;    /* the cache's rows: the job's eval_samples */
	int max_tokens;
	int32_t stop[TACO_GEN_MAX_STOP_IDS];
	int n_stop;
} taco_samples;

/* Allocates the cache when the job wants answers
 * (taco_job_sample_cache: what its plan counts) for the prompts of val
 * (none without a tokenizer, tok NULL: the cache is held unused, as
 * planned). */
int taco_samples_open(taco_samples *s, taco_model *m, const taco_job *job,
		      const taco_data *val, const taco_tok *tok, taco_err *err);
void taco_samples_close(taco_samples *s);

/* Generates the answers and adds to ev "val_exact_match" and "samples":
 * [{"line", "prompt", "reference", "answer", "match", "finish"}]. Nothing
 * when off or val holds no prompt. */
int taco_samples_run(taco_samples *s, taco_model *m, const taco_data *val,
		     const taco_tok *tok, json_t *ev, taco_err *err);

#endif
