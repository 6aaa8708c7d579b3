/* model.h: a decoder-only transformer (Llama, Mistral, Qwen2, Qwen3) and its
 * training step on a backend (tk_ops).
 *
 * Tensors are kept in their storage dtype (F32, BF16 or F16) in backend
 * memory; compute is fp32. Tensor ids are positions in the sorted list of
 * tensor names, which is also the TACO tensor_index. */
#ifndef TACO_MODEL_H
#define TACO_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "tk_ops.h"
#include "util/taco_err.h"

#define TACO_NAME_MAX 96
#define TACO_MAX_TOKENS (1 << 20) /* tokens in one micro-batch */

/* Slots of one decoder layer's tensors; -1 when the model has none. */
enum taco_layer_slot {
	TACO_L_ATTN_NORM = 0,
	TACO_L_Q,
	TACO_L_K,
	TACO_L_V,
	TACO_L_O,
	TACO_L_Q_BIAS,
	TACO_L_K_BIAS,
	TACO_L_V_BIAS,
	TACO_L_O_BIAS,
	TACO_L_Q_NORM,
	TACO_L_K_NORM,
	TACO_L_MLP_NORM,
	TACO_L_GATE,
	TACO_L_UP,
	TACO_L_DOWN,
	TACO_L_COUNT
};

typedef struct taco_tensor {
	char name[TACO_NAME_MAX];
	int dtype;
	int ndim;	  /* 1 or 2 */
	int64_t shape[2]; /* [rows, cols] for 2-D, [n] for 1-D */
	size_t numel;
	void *data; /* backend memory, numel elements of dtype */
} taco_tensor;

typedef struct taco_work taco_work;

typedef struct taco_model {
	taco_config cfg;
	const tk_ops *ops;
	taco_tensor *tensors; /* sorted by name */
	int n_tensors;
	int embed;	/* model.embed_tokens.weight */
	int lm_head;	/* lm_head.weight, or embed when tied */
	int final_norm; /* model.norm.weight */
	int (*layer)[TACO_L_COUNT];
	float *inv_freq; /* host, head_dim / 2 */
	taco_work *work; /* step buffers for the last batch shape */
	/* Logit elements per cross-entropy chunk; 0 = the default (4 Mi).
	 * Set it before a step (or release the work) to change it. */
	size_t ce_chunk_elems;
	/* 0 (default): activation checkpointing, forward keeps each layer's
	 * input and backward recomputes one layer at a time. 1: every layer's
	 * intermediates are kept, trading memory for the recompute (about a
	 * quarter of the step's work). */
	int keep_activations;
} taco_model;

/* One micro-batch. targets[i] is the token that position i must predict
 * (already shifted), or -100 when position i carries no loss. pos may be
 * NULL (positions 0..T-1 in every row); otherwise pos[i] is the position of
 * token i inside its document: 0 starts a new document. Host memory. */
typedef struct taco_batch {
	int B, T;
	const int32_t *tokens;
	const int32_t *targets;
	const int32_t *pos;
} taco_batch;

/* Called once per trainable tensor as soon as its gradient is complete.
 * grad is backend memory, fp32, numel elements, valid only during the call.
 * A non-zero return aborts the step with that code. */
typedef int (*taco_grad_fn)(void *ctx, taco_model *m, int tensor_id,
			    float *grad);

typedef struct taco_step_stats {
	double loss_sum;   /* sum of token losses */
	int64_t n_targets; /* tokens with a target */
	int64_t n_correct; /* targets that are the argmax */
	double loss;	   /* loss_sum / n_targets */
} taco_step_stats;

/* Loads config.json and the safetensors weights of a Hugging Face model
 * directory. Every expected tensor must be present with the right shape;
 * unexpected tensors are an error. */
int taco_model_load(const char *dir, const tk_ops *ops, taco_model **out,
		    taco_err *err);

/* The tensor list and shapes of cfg without weights (every data NULL, ops
 * NULL): what the planner and parameter counts need, at any model size. */
int taco_model_shapes(const taco_config *cfg, taco_model **out, taco_err *err);

void taco_model_free(taco_model *m);

int taco_model_find(const taco_model *m, const char *name);
size_t taco_model_param_count(const taco_model *m);

/* Checks a batch against the model (token ids, targets, positions, limits).
 * Returns the number of targets through n_targets. */
int taco_batch_check(const taco_model *m, const taco_batch *b,
		     int64_t *n_targets, taco_err *err);

/* Forward and backward with activation checkpointing. The loss is the mean
 * over targets, normalised by norm_targets when > 0 (gradient accumulation:
 * the token count of the whole optimizer step), else by this batch's count.
 * fn receives each gradient as soon as it is complete. */
int taco_model_step(taco_model *m, const taco_batch *b, int64_t norm_targets,
		    taco_grad_fn fn, void *ctx, taco_step_stats *stats,
		    taco_err *err);

/* Forward only: loss statistics, chunked (no logits kept). */
int taco_model_eval(taco_model *m, const taco_batch *b, taco_step_stats *stats,
		    taco_err *err);

/* Forward only: the log-likelihood of each row's targets, summed
 * (row_sums[B], <= 0): how candidate completions are scored. */
int taco_model_score(taco_model *m, const taco_batch *b, double *row_sums,
		     taco_err *err);

/* Forward only: all logits [B*T, V] into host memory (small models, tests). */
int taco_model_logits(taco_model *m, const taco_batch *b, float *logits,
		      taco_err *err);

/* Releases the step buffers (they are re-made on the next step). */
void taco_model_release_work(taco_model *m);

/* Internal to engine/ (model_load.c, shared with model_init.c). */

/* The sorted tensor list of cfg, every data NULL, on ops (may be NULL). */
int taco_model_skeleton(const taco_config *cfg, const tk_ops *ops,
			taco_model **out, taco_err *err);
/* Allocates t's data on m->ops in dtype (sets t->dtype). */
int taco_model_alloc_tensor(taco_model *m, taco_tensor *t, int dtype,
			    taco_err *err);
/* -ENOTSUP for a config that can be planned but not trained. */
int taco_model_refuse_shapes_only(const taco_config *c, const char *where,
				  taco_err *err);

#endif
