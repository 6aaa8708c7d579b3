/* model_work.h: buffers of one training step (internal to engine/).
 *
 * Shapes, with N = B * T tokens, H = hidden, D = heads * head_dim,
 * Dkv = kv_heads * head_dim, I = intermediate, V = vocab, C = loss chunk rows.
 * Every buffer is backend memory. The memory planner counts these. */
#ifndef TACO_MODEL_WORK_H
#define TACO_MODEL_WORK_H

#include "model.h"

/* Rows of the cross-entropy chunk: C = max(1, min(N, elems / V)) with
 * elems = m->ce_chunk_elems or this default, which keeps the logits of one
 * chunk to 16 MiB of fp32. */
#define TACO_CE_CHUNK_ELEMS (1 << 22)

/* What backward needs of one layer's forward. */
typedef struct taco_layer_acts {
	float *ln1, *rstd1;	/* [N, H], [N] */
	float *q, *k, *v;	/* [N, D], [N, Dkv], [N, Dkv] after norm/rope */
	float *q_pre, *k_pre;	/* [N, D], [N, Dkv] before q/k-norm (Qwen3) */
	float *rstd_q, *rstd_k; /* [N * heads], [N * kv_heads] */
	float *att, *lse;	/* [N, D], [B, heads, T] */
	float *x_mid;		/* [N, H] after the attention residual */
	float *ln2, *rstd2;	/* [N, H], [N] */
	float *gate, *up, *act; /* [N, I] */
} taco_layer_acts;

struct taco_work {
	int B, T, C;  /* batch shape and loss chunk rows of the buffers */
	size_t bytes; /* total backend bytes held */
	int32_t *tokens, *targets, *pos; /* [N] */
	float *rope_cos, *rope_sin;	 /* [T, hd/2] */
	float *xs; /* [(L+1), N, H] layer inputs, checkpointed */
	/* layer intermediates: one set, recomputed in backward, or one per
	 * layer when the model keeps activations */
	struct taco_layer_acts *acts;
	int n_acts;
	/* backward */
	float *dx, *dtmp;	   /* [N, H] */
	float *dq, *dk, *dv;	   /* [N, D], [N, Dkv], [N, Dkv] */
	float *dq2, *dk2;	   /* [N, D], [N, Dkv] (q/k-norm inputs) */
	float *datt;		   /* [N, D] */
	float *dgate, *dup, *dact; /* [N, I] */
	/* loss */
	float *hf, *rstd_f; /* [N, H], [N] final norm output */
	float *logits;	    /* [C, V] */
	/* weights as fp32 when stored in another dtype */
	float *wl[TACO_L_COUNT]; /* one layer */
	float *w_head;		 /* [V, H] */
	float *w_final;		 /* [H] */
	/* gradients */
	float *g_layer; /* largest layer tensor (and the final norm) */
	float *g_head;	/* [V, H]: the LM head, then the embedding */
};

/* Rows of one cross-entropy chunk for N tokens. */
int taco_work_chunk_rows(const taco_model *m, int N);

/* Makes sure m->work fits the batch shape. */
int taco_work_ensure(taco_model *m, int B, int T, taco_err *err);

/* Adds the bytes of the step buffers for a B x T batch to term[] (indexed by
 * enum taco_plan_term), allocating nothing. */
int taco_work_plan(const taco_model *m, int B, int T, uint64_t *term);

/* Activation sets a step needs: 1 with checkpointing, else one per layer. */
int taco_work_act_sets(const taco_model *m);

#endif
