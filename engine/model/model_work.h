/* model_work.h: buffers of one training step (internal to engine/).
 *
 * Shapes, with N = B * T tokens, H = hidden, D = heads * head_dim,
 * Dkv = kv_heads * head_dim, I = intermediate, Ic = one MLP block of it,
 * V = vocab, Vc = one vocabulary chunk, Nc = the tokens of one chunk of
 * logits. Every buffer is backend memory in the model's activation dtype
 * ("dt") unless it says f32. The memory planner counts these: it walks the
 * same list (work_list in model_work.c).
 *
 * Buffers live in one of three places: persistent ones are allocated one by
 * one; the layer buffers (one layer's recompute and backward) and the loss
 * buffers (one chunk of logits and the head's gradient) are never live at
 * the same time, so they share one region, carved at 256-byte offsets.
 * Inside the layer's part, the MLP's backward (d(act)) and the attention's
 * (dq, dk, dv, datt) come one after the other and share their place too. */
#ifndef TACO_MODEL_WORK_H
#define TACO_MODEL_WORK_H

#include "model.h"

#define TACO_GRAD_BLOCK_ELEMS ((size_t)1 << 24) /* 64 MiB of fp32 */
/* with overlap: two blocks of half that, the same bytes */
#define TACO_LOGIT_ELEMS ((size_t)1 << 22) /* 16 MiB of fp32 */
#define TACO_OFFLOAD_SLOTS 3 /* layer inputs on the device with offload */
/* Layer slots of the weight ring (streamed weights): the layer computing,
 * the one whose updates may still run on the side stream, and the one
 * being written back and refilled (model_stream.c). */
#define TACO_RING_SLOTS 3
/* mlp_chunks 0 (auto): blocks of at most this many bytes of [N, Ic] */
#define TACO_MLP_BLOCK_BYTES ((size_t)32 << 20)

/* GEMM dimensions the engine chooses (MLP blocks, vocabulary chunks,
 * tokens per chunk, gradient column and row blocks) are multiples of this
 * when they are at least this: tensor-core tiles are 64 or 128 wide, and a
 * ragged edge costs a whole tile. */
#define TACO_GEMM_ALIGN 64

static inline int taco_gemm_down(int n)
{
	return n >= TACO_GEMM_ALIGN ? n / TACO_GEMM_ALIGN * TACO_GEMM_ALIGN : n;
}

static inline int taco_gemm_up(int n, int cap)
{
	int u = (n + TACO_GEMM_ALIGN - 1) / TACO_GEMM_ALIGN * TACO_GEMM_ALIGN;

	return n > TACO_GEMM_ALIGN && u <= cap ? u : n;
}

/* What backward needs of one layer's forward. */
typedef struct taco_layer_acts {
	void *ln1;		/* [N, H] */
	float *rstd1;		/* f32 [N] */
	void *q, *k, *v;	/* [N, D], [N, Dkv], [N, Dkv] after norm/rope */
	void *q_pre, *k_pre;	/* [N, D], [N, Dkv] before q/k-norm (Qwen3) */
	float *rstd_q, *rstd_k; /* f32 [N * heads], [N * kv_heads] */
	void *att;		/* [N, D] */
	float *lse;		/* f32 [B, heads, T] */
	void *x_mid;		/* [N, H] after the attention residual */
	void *ln2;		/* [N, H] */
	float *rstd2;		/* f32 [N] */
	void *gate, *up, *act;	/* [N, Ic]; backward writes d(gate), d(up)
				   over gate and up (no gate: fc1's output
				   in up, before the activation) */
	/* OPT and GPT-NeoX */
	float *mean1, *mean2; /* f32 [N]: LayerNorm means */
	void *qkv;	      /* [N, D + 2 Dkv]: NeoX's fused projection */
	void *x_pre;	      /* [N, H]: post-LN's sum before its last norm */
	/* A mixture of experts, M = N * k routed slots (tk_ops.h's moe_*) */
	float *rlog;	      /* f32 [N, E] the router's logits */
	int32_t *topi;	      /* [N, k] each token's experts */
	float *topw;	      /* f32 [N, k] their weights */
	int32_t *order, *inv; /* [M] the slots by expert, and back */
	void *xg;	      /* [M, H] the MLP input of each slot */
	void *eg, *eu, *ea;   /* [M, Im] gate, up, act of each slot; backward
				 writes d(gate), d(up) over gate and up */
	void *ey;	      /* [M, H] each slot's expert output */
} taco_layer_acts;

/* The sizes a step's buffers are made for. */
typedef struct taco_work_shape {
	int B, T, N;
	int dt;	       /* activation dtype */
	int keep;      /* one activation set per layer */
	int offload;   /* layer inputs in host memory */
	int pref;      /* preference steps: the buffers of each token's loss */
	int chunks;    /* MLP blocks */
	int Ic;	       /* intermediate columns per MLP block */
	int Vc, Nc;    /* vocabulary chunk, tokens per chunk of logits */
	size_t gblock; /* elements of the gradient block */
	int overlap;   /* two gradient blocks, updates on the side stream */
	int stream;    /* the last `stream` layers' matrices streamed */
	int slots;     /* slots of the weight ring: min(stream, 3) */
	int ranks;     /* data-parallel ranks (1: one) */
	int M;	       /* a mixture of experts' routed slots, N * k (0:
			  none) */
	/* Generation (model_decode.c): forward only, N tokens a call at
	 * most, a KV cache of `rows` sequences of `ctx` positions, the
	 * logits of at most `rows` tokens a call; 0: a training step's */
	int gen, rows, ctx;
	/* Generation between a training step's calls: streamed layers pass
	 * through the step work's weight ring, lent at each call, instead
	 * of a ring of its own (model_decode.c) */
	int ring_lent;
} taco_work_shape;

struct taco_work {
	taco_work_shape s;
	size_t bytes;	   /* backend bytes held */
	size_t host_bytes; /* host bytes held (offload) */
	void *region;	   /* the shared layer / loss region */
	size_t region_bytes;
	int32_t *tokens, *targets, *pos; /* [N] */
	/* [N]: token i's index among the batch's distinct tokens */
	int32_t *rows;
	/* [N] the batch's distinct tokens, ascending; with ranks, the
	 * global batch's (at most min(ranks * N, vocab)) */
	int32_t *uniq;
	int n_uniq;		    /* how many */
	float *rope_cos, *rope_sin; /* f32 [T, hd/2] */
	/* layer inputs: [(L+1), N, H], or TACO_OFFLOAD_SLOTS of [N, H] with
	 * the whole [(L+1), N, H] in host memory */
	void *xs;
	void *xs_host;
	/* one set, recomputed in backward, or one per layer when kept */
	taco_layer_acts *acts;
	int n_acts;
	/* backward (dx persistent: it carries the gradient between layers
	 * and into the embedding) */
	void *dx, *dtmp;    /* [N, H] */
	void *dq, *dk, *dv; /* [N, D], [N, Dkv], [N, Dkv] */
	void *datt;	    /* [N, D]; then d(q) before q-norm */
	void *dact;	    /* [N, Ic] */
	void *dqkv;	    /* [N, D + 2 Dkv]: NeoX */
	void *ddrop;	    /* [N, H]: a residual branch's masked gradient */
	float *gbias;	    /* f32 [I]: fc1's bias gradient over the blocks */
	/* a mixture of experts' backward (M slots) */
	void *moe_dy;	     /* [M, H] the slots' output gradient, then
				their input's */
	void *moe_dact;	     /* [M, Im] */
	float *moe_dw;	     /* f32 [N, k] the routing weights' gradient */
	float *moe_dlog;     /* f32 [N, E] the router logits' gradient (the
				forward's logits in dt before that) */
	void *moe_dlog_dt;   /* [N, E] that gradient in dt (bf16 mode) */
	int32_t *moe_cnt;    /* [E] the slots of each expert, the layer last
				routed */
	int32_t *moe_count;  /* host [L, E]: its copy, by layer */
	int32_t *moe_gcount; /* host [L, E]: summed over the ranks */
	double *moe_rsum;    /* host: the values those sums pack */
	float *moe_psum;     /* [E] the router probabilities' sums (the
				auxiliary loss) */
	float *moe_psum_h;   /* host [L, E]: their copy, by layer */
	float *moe_extra;    /* [E] the auxiliary loss's gradient of every
				token's probabilities */
	float *moe_extra_h;  /* host [E] */
	float *sinks32;	     /* f32 [heads]: a bf16 model's sinks */
	float *w_exp;	     /* f32 one expert matrix (fp32 mode, stored
				in another dtype) */
	int32_t *pos_ids;    /* [N] OPT: rows of the position table */
	int32_t *emb_rows;   /* [N] OPT: tokens, its padding id as -1 */
	void *emb_tmp;	     /* [N, max(H, P)]: OPT's embedding sums */
	void *dembed;	     /* [N, P]: OPT, with project_in */
	/* loss */
	void *hf;      /* [N, Hf] the head's input (Hf: OPT's
			  word_embed_proj_dim, else H) */
	void *hn;      /* [N, H] the final norm's output before project_out */
	float *rstd_f; /* f32 [N] */
	float *mean_f; /* f32 [N]: LayerNorm */
	float *ce_mx, *ce_tl, *ce_lse; /* f32 [N] */
	double *ce_se;		       /* [N] */
	int32_t *ce_am;		       /* [N] */
	double *ce_sums; /* [2] loss sum, correct rows: read at step end */
	/* preference steps (s.pref): each token's loss [N], read back to
	 * the host copy after the log-sum-exp, and each token's gradient
	 * factor [N] (its pair's), uploaded from the host's */
	double *ce_row, *ce_row_host;
	float *ce_scale, *ce_scale_host;
	float *logits; /* f32 [Nc, Vc] */
	void *dlogits; /* [Nc, Vc] (the logits when dt is f32) */
	float *dh;     /* f32 [N, Hf]: gradient of hf */
	void *dtie;    /* [N, Hf]: that gradient, tied models (hf is kept) */
	/* fp32 mode only: weights stored in another dtype, as fp32 */
	float *wl[TACO_L_COUNT]; /* one layer */
	float *w_head;		 /* [V, H]: the head, or the embedding */
	float *w_final;		 /* [H] */
	float *w_top; /* positions, projections, final bias: one at a time */
	/* gradients: one block of any tensor, f32; with overlap a second
	 * one, the two used in turn */
	float *gblock, *gblock2;
	/* data parallel (ranks > 1): a gradient part made contiguous and
	 * summed over the ranks, at most a block (train/dist.c) */
	float *comm;
	/* streamed weights: `slots` slots of slot_bytes, a layer's tensor of
	 * stream index si (taco_stream_tensor) at ring_off[si] in its slot
	 * (taco_stream_count entries); which layer each slot holds
	 * (-1: none), whether its updates are still to be written back, and
	 * the side-stream ticket of its last update */
	void *ring;
	size_t slot_bytes;
	size_t *ring_off;
	/* the sparse write-back: per slot, the gathered entries of its
	 * layer's tensors (wb_dev, tensor si's at wb_voff[si], wb_slot bytes
	 * a slot); per streamed layer, their host copies and the slot rows
	 * (wb_host, wb_layer bytes a layer: the values as on the device,
	 * then the rows, si's at wb_slot + wb_ioff[si]), scattered into the
	 * host copy once the step's copies are done; wb_k: the slots per
	 * column of each gathered tensor (0: none), host memory */
	void *wb_dev, *wb_host;
	size_t wb_slot, wb_layer;
	size_t *wb_voff, *wb_ioff;
	int *wb_k; /* [stream layers * taco_stream_count] */
	/* generation (s.gen): the KV cache, [L, rows, ctx, Dkv] each
	 * (layer l's at l * rows * ctx * Dkv), each token's cache row [N],
	 * the tokens whose logits are wanted [rows], and those logits (f32
	 * [rows, V]) */
	void *kv_k, *kv_v;
	int32_t *seq, *want;
	float *gen_logits;
	int slot_layer[TACO_RING_SLOTS];
	int slot_dirty[TACO_RING_SLOTS];
	uint64_t slot_ticket[TACO_RING_SLOTS];
};

/* The first streamed layer under m->sched (the layer count: none). */
int taco_stream_first(const taco_model *m);

/* Whether tensor t lives in host memory under m->sched. */
int taco_tensor_wants_host(const taco_model *m, const taco_tensor *t);

/* A layer's tensors as streaming walks them: its slots (TACO_L_COUNT),
 * then a mixture of experts' tensors (E * TACO_X_COUNT). The count of
 * stream indices, and layer l's tensor at index si (-1: none). */
int taco_stream_count(const taco_model *m);
int taco_stream_tensor(const taco_model *m, int l, int si);

/* The ring's layout for the last `stream` layers: each stream index's
 * offset in off[] (taco_stream_count) and the bytes of one slot (0:
 * nothing streamed). */
size_t taco_ring_layout(const taco_model *m, int stream, size_t *off);

/* The write-back's layout for the last `stream` layers (sizes for k up to
 * TACO_MAX_SLOTS): the values' offsets in voff[] and their bytes per slot
 * in *slot, the rows' offsets in ioff[] and the values and rows of one
 * layer in *layer. */
void taco_wb_layout(const taco_model *m, int stream, size_t *voff, size_t *ioff,
		    size_t *slot, size_t *layer);

/* The shape m's step buffers take for a B x T batch (m->sched). */
void taco_work_shape_of(const taco_model *m, int B, int T, taco_work_shape *s);

/* The shape of generation's buffers (s.gen): calls of at most `chunk`
 * tokens, a cache of rows x ctx. */
void taco_gen_shape_of(const taco_model *m, int rows, int ctx, int chunk,
		       taco_work_shape *s);
/* Allocates step buffers of shape s apart from m->work (generation's);
 * NULL when out of memory. taco_work_free releases them. */
taco_work *taco_work_alloc(taco_model *m, const taco_work_shape *s);
void taco_work_free(taco_model *m, taco_work *w);
/* Adds the bytes of buffers of shape s to term[] and *host (as
 * taco_work_plan). */
int taco_work_plan_shape(const taco_model *m, const taco_work_shape *s,
			 uint64_t *term, uint64_t *host);

/* Makes sure m->work fits the batch shape. */
int taco_work_ensure(taco_model *m, int B, int T, taco_err *err);

/* Adds the bytes of the step buffers for a B x T batch to term[] (indexed by
 * enum taco_plan_term) and the host bytes to *host, allocating nothing. */
int taco_work_plan(const taco_model *m, int B, int T, uint64_t *term,
		   uint64_t *host);

/* Layer input l on the device (the right offload slot). */
void *taco_work_x(const taco_model *m, int l);

#endif
