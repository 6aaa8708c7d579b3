/* model.h: a decoder-only transformer (the Llama family, OPT, GPT-NeoX)
 * and its training step on a backend (tk_ops).
 *
 * Tensors live in backend memory: in their storage dtype (F32, BF16 or F16)
 * in fp32 mode, all bf16 in bf16 mode; arithmetic is fp32 in both. Tensor
 * ids are positions in the sorted list of tensor names, which is also the
 * TACO tensor_index. */
#ifndef TACO_MODEL_H
#define TACO_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "step_opts.h"
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
	TACO_L_UP,   /* the MLP's first projection: up_proj, fc1, h_to_4h */
	TACO_L_DOWN, /* its last: down_proj, fc2, 4h_to_h */
	/* OPT and GPT-NeoX */
	TACO_L_ATTN_NORM_BIAS, /* LayerNorm biases */
	TACO_L_MLP_NORM_BIAS,
	TACO_L_QKV, /* NeoX's fused query_key_value, per head q, k, v */
	TACO_L_QKV_BIAS,
	TACO_L_UP_BIAS,
	TACO_L_DOWN_BIAS,
	TACO_L_ROUTER,	    /* a mixture of experts' router, mlp.gate [E, H] */
	TACO_L_ROUTER_BIAS, /* gpt-oss: the router's bias [E] */
	TACO_L_SINKS,	    /* gpt-oss: the attention's sinks [heads] */
	TACO_L_GATE_UP,	    /* Phi-3: gate_up_proj [2I, H], gate rows first */
	TACO_L_COUNT
};

/* An expert's tensors (taco_model.expert). Qwen3-MoE's are Linears;
 * gpt-oss's are expert e's slices of fused [E, ...] tensors, applied as
 * x @ W, named "<fused name>[e]" here (taco_expert_view). */
enum taco_expert_slot {
	TACO_X_GATE = 0,  /* [I, H] (gpt-oss: none) */
	TACO_X_UP,	  /* [I, H] (gpt-oss: gate_up_proj [H, 2 I]) */
	TACO_X_DOWN,	  /* [H, I] (gpt-oss: down_proj [I, H]) */
	TACO_X_UP_BIAS,	  /* gpt-oss: gate_up_proj_bias [2 I] */
	TACO_X_DOWN_BIAS, /* gpt-oss: down_proj_bias [H] */
	TACO_X_COUNT
};

typedef struct taco_tensor {
	char name[TACO_NAME_MAX];
	int dtype;
	int ndim;	  /* 1 or 2 */
	int64_t shape[2]; /* [rows, cols] for 2-D, [n] for 1-D */
	size_t numel;
	void *data; /* backend memory, numel elements of dtype */
	/* Streamed weights (taco_step_opts.stream_layers): the copy in host
	 * memory (ops->host_alloc), the truth that checkpoints, export and
	 * resume read; data is then a slot of the step's weight ring while
	 * the layer is there, else NULL. NULL for tensors on the device. */
	void *host;
	int layer; /* decoder layer of the tensor, -1 outside the layers */
} taco_tensor;

typedef struct taco_work taco_work;

typedef struct taco_model {
	taco_config cfg;
	const tk_ops *ops;
	taco_tensor *tensors; /* sorted by name */
	int n_tensors;
	int embed;	       /* model.embed_tokens.weight */
	int lm_head;	       /* lm_head.weight, or embed when tied */
	int final_norm;	       /* model.norm.weight; -1: none (OPT post-LN) */
	int final_norm_bias;   /* LayerNorm families; else -1 */
	int pos_embed;	       /* OPT's learned positions; else -1 */
	int proj_in, proj_out; /* OPT's word_embed_proj_dim projections */
	int (*layer)[TACO_L_COUNT];
	/* A mixture of experts: expert e of layer l's tensors are
	 * expert[(l * E + e) * TACO_X_COUNT + TACO_X_*] (-1 in a dense layer
	 * or where the family has none); NULL without experts. */
	int *expert;
	float *inv_freq;      /* host, head_dim / 2 */
	float *inv_freq_long; /* LongRoPE's long factors' (else NULL) */
	taco_work *work;      /* step buffers for the last batch shape */
	/* Precision: TK_F32 (the reference: activations fp32, weights as
	 * stored, converted to fp32 scratch on use) or TK_BF16 (weights,
	 * activations and their gradients bf16, fp32 arithmetic, GEMMs on
	 * the stored weights). Set by taco_model_load_as. */
	int act_dtype;
	/* The step's schedule (taco_model_set_step_opts; read by the work
	 * buffers, so change it only between steps). */
	taco_step_opts sched;
	/* Residual dropout while training (taco_model_set_dropout): rate 0
	 * (off) to 0.9, and the seed of its masks. */
	float dropout;
	uint64_t dropout_seed;
	/* A mixture of experts: the weight of the auxiliary load-balancing
	 * loss in training steps (0: off); the config's router_aux_loss_coef
	 * when its output_router_logits is set, as transformers trains. */
	double aux_coef;
	/* Data parallel (taco_model_set_global_batch): the tokens of the
	 * global batch the steps' batches are slices of; not owned. */
	const int32_t *global_tokens;
	int global_n;
	/* Data parallel with experts (taco_model_set_rank_sum): sums n host
	 * values over the ranks in place, 0 or a negative errno. */
	int (*rank_sum)(void *ctx, double *v, int n);
	void *rank_ctx;
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
	/* Which draw of the dropout masks this micro-batch takes (the
	 * trainer: the optimizer step times the accumulation count plus the
	 * micro-batch), so that a resumed run repeats them. */
	uint64_t rng;
} taco_batch;

/* A piece of one tensor's fp32 gradient, backend memory, valid during the
 * call only. g[i * ld + c] is the gradient of element (row i, column
 * col0 + c) for i < rows, c < cols, where row i is row0 + i, or row_ids[i]
 * when row_ids (backend memory, ascending) is set. */
typedef struct taco_grad_part {
	int tensor;
	int kind; /* enum taco_part_kind */
	const float *g;
	int ld;
	int row0, rows;
	int col0, cols;
	const int32_t *row_ids;
	int first, last; /* ROWS: the first and the last part of the tensor */
} taco_grad_part;

enum taco_part_kind {
	TACO_PART_WHOLE = 0, /* the whole tensor */
	TACO_PART_COLS,	     /* every row of columns [col0, col0 + cols) */
	TACO_PART_ROWS,	     /* every column of some rows; more may follow
				until last (rows not given have gradient 0) */
};

/* Where a step's gradients go. part mode (dense NULL): every piece is
 * handed to part as soon as it exists, each element exactly once; parts of
 * two ROWS tensors may interleave (at most TACO_MAX_ROW_STREAMS at once).
 * dense mode: dense(ctx, m, id) gives tensor id's fp32 buffer, and every
 * piece is added into it (+=). skip (NULL or a flag per tensor): gradients
 * not wanted (frozen tensors), never computed. */
typedef struct taco_grad_sink {
	int (*part)(void *ctx, taco_model *m, const taco_grad_part *p);
	float *(*dense)(void *ctx, taco_model *m, int tensor);
	const uint8_t *skip;
	void *ctx;
	/* Streamed weights' write-back (NULL: every streamed tensor goes
	 * back whole): after tensor's update, the rows where it may have
	 * changed, per column, as TACO's slot rows (backend memory, [C * k],
	 * tk_ops.h's taco_gather layout), *k set to k; NULL: anywhere (the
	 * tensor goes back whole). */
	const void *(*changed_rows)(void *ctx, taco_model *m, int tensor,
				    int *k);
} taco_grad_sink;

/* Slots per column at most (docs/taco.md): sizes the write-back. */
#define TACO_MAX_SLOTS 16

#define TACO_MAX_ROW_STREAMS 2

typedef struct taco_step_stats {
	double loss_sum;   /* sum of token losses */
	int64_t n_targets; /* tokens with a target */
	int64_t n_correct; /* targets that are the argmax */
	double loss;	   /* loss_sum / n_targets */
	/* A mixture of experts trained with the auxiliary load-balancing
	 * loss (taco_model.aux_coef > 0): that loss, unweighted, as
	 * transformers' aux_loss (0 otherwise); the step's objective is loss +
	 * aux_coef * aux_loss. */
	double aux_loss;
} taco_step_stats;

/* Loads config.json and the safetensors weights of a Hugging Face model
 * directory. Every expected tensor must be present with the right shape;
 * unexpected tensors are an error. */
int taco_model_load(const char *dir, const tk_ops *ops, taco_model **out,
		    taco_err *err);
/* The same in a precision (TK_F32: weights kept as stored; TK_BF16: every
 * weight converted to bf16, rounded to nearest even). */
int taco_model_load_as(const char *dir, const tk_ops *ops, int act_dtype,
		       taco_model **out, taco_err *err);

/* Sets the schedule: -EINVAL (err says why) for one the model cannot run
 * (mlp_chunks with kept activations, or more chunks than intermediate
 * columns, stream_layers out of range or with kept activations). Releases
 * the step buffers when it changes; a new stream_layers moves the layers'
 * matrices between device and host memory (-ENOMEM: nothing moved). */
int taco_model_set_step_opts(taco_model *m, const taco_step_opts *s,
			     taco_err *err);

/* Loads as taco_model_load_as with the schedule s set first, so that the
 * streamed layers' weights go straight to host memory (a model larger than
 * the device). s may be NULL (the defaults). */
int taco_model_load_sched(const char *dir, const tk_ops *ops, int act_dtype,
			  const taco_step_opts *s, taco_model **out,
			  taco_err *err);

/* Tensor id's bytes from wherever it lives (device or host copy) into
 * host memory, and back. Only between steps. */
void taco_tensor_read(const taco_model *m, int id, void *host_dst);
void taco_tensor_write(const taco_model *m, int id, size_t offset,
		       const void *src, size_t bytes);

/* Residual dropout while training: rate p in [0, 0.9] after each layer's
 * attention and MLP branches (OPT, GPT-NeoX: where transformers applies
 * the config's dropout / hidden_dropout), masks drawn from seed and the
 * batch's rng; evaluation never drops. -EINVAL for a rate out of range or
 * a family without those sites (Llama's). */
int taco_model_set_dropout(taco_model *m, float p, uint64_t seed,
			   taco_err *err);

/* A mixture of experts' auxiliary load-balancing loss in training steps:
 * weight coef (0: off), or coef < 0 for the config's (m->aux_coef as
 * loaded). -EINVAL for a weight above 0 on a model without experts. */
int taco_model_set_aux_loss(taco_model *m, double coef, taco_err *err);

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

/* Data parallel (the schedule's ranks > 1): the next steps' batches are
 * each one of ranks equal slices of a global batch of n tokens (ranks times
 * the batch's B * T), all of them at tokens (kept by the caller until it
 * sets another or NULL). An untied embedding's gradient then covers the
 * global batch's distinct tokens, so that every rank hands its sink the
 * same parts, to be summed. NULL: a batch alone. */
void taco_model_set_global_batch(taco_model *m, const int32_t *tokens, int n);

/* Data parallel with a mixture of experts: how a step sums, over the
 * ranks, the routing's counts (which experts the global batch reached,
 * and so which hand their gradients to the sums on every rank, zero where
 * a rank's slice sent them no token), the auxiliary loss's inputs and the
 * batch's targets; once a step, after the forward pass. NULL: none (a
 * step with ranks > 1 and experts then fails). */
void taco_model_set_rank_sum(taco_model *m,
			     int (*sum)(void *ctx, double *v, int n),
			     void *ctx);

/* Data parallel: the backend buffer a sink sums a gradient part in, made
 * contiguous (*n floats: at most a part), planned with the step's buffers
 * (the plan's term "gradient sums across GPUs"); NULL with one rank, or
 * before the first step. */
float *taco_model_comm_block(const taco_model *m, size_t *n);

/* Forward and backward with activation checkpointing. The loss is the mean
 * over targets, normalised by norm_targets when > 0 (gradient accumulation:
 * the token count of the whole optimizer step), else by this batch's count.
 * sink receives the gradients (may be NULL: none). A sink's non-zero return
 * aborts the step with that code. */
int taco_model_step(taco_model *m, const taco_batch *b, int64_t norm_targets,
		    const taco_grad_sink *sink, taco_step_stats *stats,
		    taco_err *err);

/* A preference (DPO) step. Rows 2i and 2i + 1 of b are pair i's chosen
 * and rejected sequences, their targets the output's tokens only;
 * ref[2i], ref[2i + 1] their reference log-probabilities (the starting
 * model's, summed over the targets). With logp the policy's, the loss is
 *   sum_i -log sigmoid(beta ((logp_c - ref_c) - (logp_r - ref_r))) / norm_pairs
 * (norm_pairs: the pairs of the optimizer step, > 0). The sched's pref must
 * be set. stats: loss_sum the pairs' summed loss, loss loss_sum / pairs,
 * n_targets and n_correct over the tokens as for taco_model_step; logp
 * (may be NULL) [B] the rows' log-probabilities. */
typedef struct taco_pref {
	double beta;
	int64_t norm_pairs;
	const double *ref; /* [B], host memory */
} taco_pref;

int taco_model_step_pref(taco_model *m, const taco_batch *b, const taco_pref *p,
			 const taco_grad_sink *sink, taco_step_stats *stats,
			 double *logp, taco_err *err);

/* The DPO loss of n pairs (host, double): logp and ref [2n] as above.
 * loss[n] each pair's loss; dlogp[2n] (may be NULL) the derivative of
 * sum(loss) / norm_pairs by each logp. */
void taco_pref_loss(double beta, const double *logp, const double *ref, int n,
		    int64_t norm_pairs, double *loss, double *dlogp);

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
/* Moves the layers' matrices so that the last stream_layers layers' live in
 * host memory and the others' on the device (model_stream.c); -ENOMEM:
 * none moved. The step buffers must be released. */
int taco_model_move_weights(taco_model *m, int stream_layers, taco_err *err);
/* Allocates t on m->ops in dtype (sets t->dtype): device memory, or host
 * memory (t->host) when m->sched streams its layer's matrices. */
int taco_model_alloc_tensor(taco_model *m, taco_tensor *t, int dtype,
			    taco_err *err);

#endif
