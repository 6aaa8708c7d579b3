/* step.h: the pieces of one training step (internal to engine/model):
 * model_step.c runs them, <family>/layer.c holds a family's decoder layer
 * (forward and backward), model_loss.c the vocabulary-chunked head and the
 * embedding's gradient, model_grad.c hands gradient pieces to the sink. */
#ifndef TACO_STEP_H
#define TACO_STEP_H

#include "model_work.h"

typedef struct step_ctx step_ctx;

/* A family's decoder layer (engine/model/<family>/layer.c). */
typedef struct taco_layer_ops {
	/* layer l from x into out, keeping what backward needs */
	void (*fwd)(step_ctx *c, int l, const void *x, void *out);
	/* what backward of layer l needs, before it runs (checkpointing) */
	void (*recompute)(step_ctx *c, int l, const void *x);
	/* backward of layer l after its forward (or with kept
	 * activations): w->dx holds the gradient of the output on entry and
	 * of the input on return */
	void (*bwd)(step_ctx *c, int l, const void *x);
} taco_layer_ops;

struct step_ctx {
	taco_model *m;
	const tk_ops *o;
	taco_work *w;
	const taco_grad_sink *sink; /* NULL: no gradients */
	const taco_batch *b;	    /* host copy of the batch */
	int dt;			    /* activation dtype */
	size_t es;		    /* its element size */
	int err;		    /* first sink error */
	/* the gradient block in use (0: gblock, 1: gblock2) and, per block,
	 * the side-stream ticket of the updates that read it last */
	int gcur;
	uint64_t gticket[2];
	const taco_layer_ops *layer; /* the family's */
	/* after backward: the gradient of the token embedding's output, [N,
	 * proj_dim] (w->dx, or OPT's through project_in) */
	const void *de;
	/* a preference step: each token's factor on the loss's gradient
	 * scale (w->ce_scale, [N]); NULL otherwise */
	const float *row_scale;
	/* a mixture of experts' auxiliary loss in this step: its weight on
	 * the gradient (0: off), and once forward is done each expert's
	 * gradient of the router probabilities (w->moe_extra), else NULL */
	double aux_w;
	const float *aux_extra;
};

/* p + i elements of size es. */
static inline void *step_at(const void *p, size_t i, size_t es)
{
	return (char *)p + i * es;
}

/* A weight as the ops read it: the tensor itself (bf16 mode, or an fp32
 * tensor), or its fp32 conversion into scratch. NULL for id < 0. */
const void *step_weight_of(step_ctx *c, int id, float *scratch);

/* model_stream.c: streamed weights. begin at the step's start; ready
 * before layer l's ops (fetches it now if no prefetch did, and waits for
 * the copy); prefetch issues layer l's copy to run during the next layer;
 * updated after layer l's backward (its slot is to be written back); end
 * after the last layer: every write-back issued (copy_wait waits for
 * them), the tensors' data NULL again. */
int stream_active(const step_ctx *c);
void stream_begin(step_ctx *c);
void stream_ready(step_ctx *c, int l);
void stream_prefetch(step_ctx *c, int l);
void stream_updated(step_ctx *c, int l);
void stream_end(step_ctx *c);
/* After the step's read of its results (the copies are done): the
 * gathered entries into the host copies. */
void stream_scatter(step_ctx *c);

/* The layer ops of m's family. */
const taco_layer_ops *step_layer_ops(const taco_model *m);

/* moe.c: after forward, the auxiliary loss (unweighted) from every
 * sparse layer's counts and probability sums, and its gradient uploaded
 * for backward (c->aux_extra). */
double moe_aux_finish(step_ctx *c);
/* Data parallel: the routing's counts, the auxiliary loss's probability
 * sums and the batch's targets summed over the ranks (w->moe_gcount,
 * w->moe_psum_h), and with them the auxiliary loss's weight in the global
 * batch's share of norm targets. */
int moe_rank_sums(step_ctx *c, int64_t n_targets, int64_t norm, taco_err *err);
/* A zero gradient for tensor id (its parts as grad_linear_cols or
 * grad_whole_* would hand them; nothing in dense mode but the tensor's
 * buffer marked as reached). */
void grad_zero(step_ctx *c, int id);

/* model_step.c: the token embedding into x0 [N, hidden] (w->tokens);
 * OPT: through project_in, plus the learned positions (w->pos_ids). */
void step_embed_fwd(step_ctx *c, void *x0);

/* layer_parts.c: the attention of layer l from a->q, a->k, a->v into
 * a->att and a->lse: over the batch, or in generation (w->s.gen) over
 * the KV cache, which takes the tokens' keys and values first. */
void lp_attention_fwd(step_ctx *c, int l, taco_layer_acts *a, int nh, int nkv,
		      int hd, int window);

/* model_loss.c */
/* The head's input of n rows of x_last [n, hidden] into w->hf: the final
 * norm and OPT's project_out. */
void step_final_fwd(step_ctx *c, const void *x_last, int n);
/* Final norm, log-sum-exp and the loss statistics into w->ce_sums (read
 * once the step's work is issued); with want_grad the gradient of the last
 * layer's output into w->dx, and the head's gradient (untied). host_logits
 * / row_loss as for taco_model_logits / score. */
void step_loss(step_ctx *c, const void *x_last, float grad_scale, int want_grad,
	       float *host_logits, double *row_loss);
/* Its two halves: the final norm and the log-sum-exp (pass 1), then the
 * gradients (pass 2), so that a preference step can weigh each sequence
 * by its pair's loss between them (c->row_scale). */
void step_loss_lse(step_ctx *c, const void *x_last, float *host_logits,
		   double *row_loss);
void step_loss_grad(step_ctx *c, float grad_scale);
/* The gradient of x_last from the head's input's (in hf, or dtie when
 * tied) into w->dx: through project_out and the final norm. */
void step_final_bwd(step_ctx *c, const void *x_last);
/* The token ids the embedding's gradient takes (OPT's padding id -1). */
const int32_t *step_emb_ids(const step_ctx *c);
/* After backward: the embedding's gradient (and a tied head's). */
void step_embedding_grad(step_ctx *c, float grad_scale);

/* model_grad.c */
/* Is tensor id's gradient wanted? */
int grad_wanted(const step_ctx *c, int id);
/* dW[out, in] (+)= dy[N, out]^T x[N, in] (leading dimensions ldy, ldx):
 * into the dense buffer, or column blocks to the sink. W's columns
 * [col0, col0 + in) (a block of a wider tensor). */
void grad_linear_cols(step_ctx *c, int id, const void *dy, int ldy,
		      const void *x, int ldx, int N, int out, int in, int col0);
/* Rows [row0, row0 + rows) of dW[., in] = dy[N, rows]^T x[N, in]: into the
 * dense buffer, or row blocks to the sink (first: the first rows of the
 * tensor this step, last: its last). */
void grad_linear_rows(step_ctx *c, int id, const void *dy, int ldy,
		      const void *x, int ldx, int N, int rows, int in, int row0,
		      int first, int last);
/* A gradient built by accumulating ops: begin gives the buffer to add into
 * (dense, or the zeroed block; NULL when not wanted), end hands it over. */
float *grad_whole_begin(step_ctx *c, int id);
void grad_whole_end(step_ctx *c, int id);
/* A weight and a bias (bid -1: none) of n elements each that one op
 * fills by accumulating (a LayerNorm's): their dense buffers, or one
 * zeroed block holding both (or a dump when not wanted); end hands them
 * over. */
void grad_pair_begin(step_ctx *c, int wid, int bid, size_t n, float **gw,
		     float **gb);
void grad_pair_end(step_ctx *c, int wid, int bid, float *gw, float *gb);
/* Hands rows of a ROWS stream to the sink (part mode only). */
void grad_emit_rows(step_ctx *c, int id, const float *g, int ld, int row0,
		    int rows, const int32_t *row_ids, int first, int last);
/* The dense buffer of id, or NULL (part mode, or not wanted). */
float *grad_dense(const step_ctx *c, int id);
/* The next gradient block to fill: with overlap the other one, once the
 * updates that read it are done. Every piece handed to the sink is in the
 * block grad_block returned last. */
float *grad_block(step_ctx *c);
/* End of the step's gradients: the main stream waits for every update. */
void grad_drain(step_ctx *c);

#endif
