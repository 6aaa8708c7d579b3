/* data.h: training examples in memory and the batches made of them.
 *
 * An example is a token sequence with per-token labels (the Hugging Face
 * convention: labels[t] is the token at t, -100 where no loss is taken; the
 * model predicts labels[t + 1] at position t). Pre-tokenized JSONL reads
 * {"input_ids": [...], "labels": [...]?} per line. */
#ifndef TACO_DATA_H
#define TACO_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "util/taco_err.h"

#define TACO_DATA_MAX_LINE (64u << 20)	/* bytes in one JSONL line */
#define TACO_DATA_MAX_TOKENS (1u << 20) /* tokens in one example */

/* A chat kept for generation (taco_dataset_opts.keep_prompts): the chat
 * without its last assistant message, rendered with the generation
 * prompt, as token ids; the text of its last user message (for people)
 * and the assistant message's content, the reference answer. */
typedef struct taco_data_prompt {
	int32_t *ids;
	size_t n;
	char *user;
	char *reference;
	int64_t line;
} taco_data_prompt;

typedef struct taco_data {
	size_t n;	 /* examples */
	size_t *off;	 /* [n + 1] offsets into tokens/labels */
	int32_t *tokens; /* all examples, concatenated */
	int32_t *labels;
	size_t n_tokens, cap;
	/* 1: preference pairs (DPO): examples 2i and 2i + 1 are pair i's
	 * chosen and rejected sequences, the prompt's labels -100, so n is
	 * even and an epoch's order shuffles pairs, never splitting one. */
	int pairs;
	/* the chats kept for generation, in file order */
	taco_data_prompt *prompts;
	int n_prompts;
} taco_data;

/* The position of a run in its data: epoch and index into that epoch's
 * order. Stored in checkpoints. */
typedef struct taco_cursor {
	uint64_t epoch;
	uint64_t index;
} taco_cursor;

/* Reads pre-tokenized JSONL. Errors name the file and line. Token ids must
 * lie in [0, vocab); at most max_examples examples. */
int taco_data_load_pretok(const char *path, int vocab, int64_t max_examples,
			  taco_data **out, taco_err *err);
void taco_data_free(taco_data *d);

/* Room for need tokens (and labels) in all. Returns 0 or -ENOMEM. */
int taco_data_reserve(taco_data *d, size_t need);

/* Targets (shifted labels) of the whole data set. */
int64_t taco_data_count_targets(const taco_data *d, int seq_len);

/* Example order of an epoch: a Fisher-Yates shuffle driven by splitmix64
 * of (seed, epoch), the same on every machine. order has d->n entries. */
void taco_data_epoch_order(const taco_data *d, uint64_t seed, uint64_t epoch,
			   size_t *order);

/* Fills one micro-batch of B rows x T tokens from the cursor (advancing it,
 * wrapping into the next epoch). Without packing each row is one example,
 * truncated to T tokens; with packing a row takes examples while they fit
 * whole (positions restart at each, so attention never crosses them). The
 * rest of a row is padding: token 0, target -100. targets[t] is the label
 * of t + 1 inside the same example. order caches the current epoch's order
 * (d->n entries; *order_epoch says which epoch it holds, UINT64_MAX for
 * none). */
void taco_data_next_batch(const taco_data *d, uint64_t seed, taco_cursor *cur,
			  size_t *order, uint64_t *order_epoch, int B, int T,
			  int packing, int32_t *tokens, int32_t *targets,
			  int32_t *pos);

/* The pair order of an epoch (d->pairs): the same shuffle over the
 * d->n / 2 pairs, so that a pair's two sequences stay together. order has
 * d->n / 2 entries. */
void taco_data_pair_order(const taco_data *d, uint64_t seed, uint64_t epoch,
			  size_t *order);

/* Preference pairs (d->pairs): P pairs from the cursor (which counts
 * pairs; the epoch order is taco_data_pair_order, so order has d->n / 2
 * entries) into 2P rows of T tokens: row 2i is pair
 * i's chosen sequence, row 2i + 1 its rejected one, each truncated to T
 * and padded (token 0, target -100), positions from 0. ids (may be NULL)
 * [P] the pairs' indices in file order (their reference log-probs). */
void taco_data_next_pairs(const taco_data *d, uint64_t seed, taco_cursor *cur,
			  size_t *order, uint64_t *order_epoch, int P, int T,
			  int32_t *tokens, int32_t *targets, int32_t *pos,
			  size_t *ids);

/* Pairs [first, first + P) in file order into 2P rows as above
 * (evaluation, the reference pass); rows of pairs past the end are fully
 * masked. */
void taco_data_pair_rows(const taco_data *d, size_t first, int P, int T,
			 int32_t *tokens, int32_t *targets, int32_t *pos);

/* Rows [first, first + B) of the data in file order, one example a row
 * (evaluation); rows past the end are fully masked. */
void taco_data_rows(const taco_data *d, size_t first, int B, int T,
		    int32_t *tokens, int32_t *targets, int32_t *pos);

#endif
