/* gen.h: generation, from prompts' token ids to completions: the
 * prefill, decode steps over a KV cache (model/decode.h), sampling on the
 * host, stop tokens and stop strings, and the text as the tokenizer
 * decodes it, streamed as it grows.
 *
 * Sampling follows transformers' generate(): temperature 0 is greedy (the
 * first largest logit, as torch.argmax); otherwise the logits are divided
 * by the temperature, then top-k keeps the k largest (ties with the k-th
 * kept), then top-p keeps the smallest set of most likely tokens whose
 * probability reaches top_p (at least one), and a token is drawn from the
 * softmax of what is kept with a generator seeded per completion
 * (taco_gen_rng): the same seed gives the same completions. */
#ifndef TACO_GEN_H
#define TACO_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "model/decode.h"
#include "tokenizer/tokenizer.h"
#include "util/taco_err.h"

/* Limits a caller's request is held to (tacod documents them). */
#define TACO_GEN_MAX_STOP 4	  /* stop strings */
#define TACO_GEN_MAX_STOP_LEN 256 /* bytes of one */
#define TACO_GEN_MAX_STOP_IDS 16  /* stop tokens */

typedef struct taco_sampling {
	int max_tokens;	   /* >= 1: tokens generated at most */
	float temperature; /* 0: greedy; else > 0 */
	float top_p;	   /* (0, 1]; 1: off */
	int top_k;	   /* 0: off */
	uint64_t seed;
	/* tokens that end a completion (not part of it): the model's EOS */
	const int32_t *stop_ids;
	int n_stop_ids;
	/* strings that end it, the text cut before the first one found */
	const char *const *stop;
	int n_stop;
} taco_sampling;

enum taco_finish {
	TACO_FINISH_STOP = 0, /* a stop token or string */
	TACO_FINISH_LENGTH,   /* max_tokens, or the cache's context */
};

/* One completion. */
typedef struct taco_completion {
	int32_t *ids; /* the tokens generated (a stop token excluded) */
	int n_ids;
	/* their text, cut at a stop string; NUL-terminated: a decoded NUL
	 * is U+FFFD here (JSON lines and stores take no U+0000) */
	char *text;
	size_t len;
	int finish; /* enum taco_finish */
} taco_completion;

void taco_completion_clear(taco_completion *c);

/* What a caller sees while completions grow: text (len bytes, not
 * NUL-terminated) added to completion i. The text held back is what may
 * still turn out to be a stop string or an unfinished UTF-8 sequence. A
 * non-zero return stops the generation (taco_generate returns
 * -ECANCELED). */
typedef int (*taco_gen_delta)(void *ctx, int i, const char *text, size_t len);

/* Generates n completions, completion i of prompt[i] (plen[i] tokens),
 * in rows 0 .. n - 1 of kv (n <= its rows; those rows are cleared
 * first). A completion ends at a stop token or string, at max_tokens, or
 * when its row of the cache is full. on_delta may be NULL. Errors: a
 * prompt that leaves no room in the context (-E2BIG), a bad sampling
 * (-EINVAL), the model's (taco_model_decode). out[0 .. n) is set on
 * success only. */
int taco_generate(taco_model *m, taco_kv *kv, const taco_tok *tok,
		  const int32_t *const *prompt, const int *plen, int n,
		  const taco_sampling *s, taco_gen_delta on_delta, void *ctx,
		  taco_completion *out, taco_err *err);

/* The checks taco_generate makes of s: 0, or -EINVAL naming the field. */
int taco_sampling_check(const taco_sampling *s, taco_err *err);

/* stop.c: the tokens that end a model's turn, at most cap into ids
 * (returns how many): generation_config.json's eos_token_id (a chat
 * model's end-of-turn tokens, as transformers' generate() stops at them),
 * config.json's, and the tokenizer's EOS (tok may be NULL). */
int taco_gen_stop_ids(const char *model_dir, const taco_tok *tok, int32_t *ids,
		      int cap);

/* sample.c: the generator of completion i under seed, and one draw from
 * logits (f32 [V], scratch: V floats and V ints) under s. */
typedef struct taco_gen_rng {
	uint64_t s;
} taco_gen_rng;

taco_gen_rng taco_gen_rng_of(uint64_t seed, int i);
/* The first largest of x[0 .. n): torch.argmax's choice, greedy's. */
int32_t taco_gen_argmax(const float *x, int n);
int32_t taco_gen_sample(const float *logits, int V, const taco_sampling *s,
			taco_gen_rng *rng, float *pf, int32_t *pi);

#endif
