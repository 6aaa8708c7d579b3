/* decode.h: a model's forward pass for generation, with a KV cache.
 *
 * A taco_kv holds the keys and values of up to `rows` sequences of at most
 * `ctx` tokens each (every layer's, in the model's activation dtype), and
 * the buffers of one forward call of at most `chunk` tokens. Each call
 * appends tokens to rows: a prompt (many tokens of a row, the prefill) and
 * a decode step (one token of each row) are the same call. The layers are
 * the training step's own (the family's taco_layer_ops), with the
 * attention reading the cache (tk_ops' kv_store and attention_decode).
 *
 * Memory: taco_kv_plan counts what taco_kv_new allocates, term by term,
 * from the same buffer list (model_work.c). */
#ifndef TACO_DECODE_H
#define TACO_DECODE_H

#include "model.h"

typedef struct taco_kv taco_kv;

/* Positions a cache may hold at most, and rows. */
#define TACO_KV_MAX_CTX (1 << 20)
#define TACO_KV_MAX_ROWS 1024

/* A cache of rows x ctx with calls of at most chunk tokens (chunk >= rows:
 * a decode step of every row is one call). -EINVAL (err says why) for a
 * shape the model cannot run (ctx past learned positions, head_dim past
 * the decode kernel's), -ENOMEM. */
int taco_kv_new(taco_model *m, int rows, int ctx, int chunk, taco_kv **out,
		taco_err *err);
/* The same for generation between a training step's calls (evaluation's
 * answers): the streamed layers pass through the weight ring of the
 * model's step work (taco_work_ensure), lent at each call, rather than a
 * ring of the cache's own; a call without that work is -EINVAL. */
int taco_kv_new_beside(taco_model *m, int rows, int ctx, int chunk,
		       taco_kv **out, taco_err *err);
void taco_kv_free(taco_kv *kv);

/* Row r's length (tokens in the cache), and emptying it. */
int taco_kv_len(const taco_kv *kv, int r);
void taco_kv_clear(taco_kv *kv, int r);
int taco_kv_rows(const taco_kv *kv);
int taco_kv_ctx(const taco_kv *kv);

/* Runs n tokens: token i (tokens[i]) appended to row seq[i], at the row's
 * next position (a row's tokens in order). The logits of the tokens
 * want[0 .. n_want) (indices into the n, ascending; n_want <= rows) into
 * logits (host, f32 [n_want, vocab]). On error (a token outside the
 * vocabulary, a row out of range or full) nothing is appended. */
int taco_model_decode(taco_model *m, taco_kv *kv, const int32_t *tokens,
		      const int32_t *seq, int n, const int32_t *want,
		      int n_want, float *logits, taco_err *err);

/* The device and host bytes of taco_kv_new(m, rows, ctx, chunk) by term
 * (enum taco_plan_term, added to term[] and *host); m may be shapes
 * (taco_model_shapes). */
int taco_kv_plan(const taco_model *m, int rows, int ctx, int chunk,
		 uint64_t *term, uint64_t *host);
/* The bytes of taco_kv_new_beside: no ring of its own. */
int taco_kv_plan_beside(const taco_model *m, int rows, int ctx, int chunk,
			uint64_t *term, uint64_t *host);

#endif
