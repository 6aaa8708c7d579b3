/* model_work.c: the step buffers, allocated from one list that the planner
 * walks too. */
#include <stdlib.h>
#include <string.h>

#include "mem_terms.h"
#include "model_work.h"

/* R_LAYER_M and R_LAYER_A: the MLP's and the attention's backward, which
 * share one place inside the layer's part of the region. */
enum { R_PERSIST = 0, R_LAYER, R_LAYER_M, R_LAYER_A, R_LOSS, R_HOST };

#define REGION_ALIGN 256

/* One buffer of struct taco_work: where its pointer goes, its size, the plan
 * term it is counted in and where it lives. */
typedef struct work_buf {
	void **slot;
	size_t bytes;
	int term; /* enum taco_plan_term */
	int region;
} work_buf;

/* fixed buffers + per-layer activation sets */
#define WB_FIXED (83 + TACO_L_COUNT)
#define WB_PER_SET 31

static size_t work_list_cap(int n_acts)
{
	return WB_FIXED + (size_t)WB_PER_SET * (size_t)n_acts;
}

static size_t max_sz(size_t a, size_t b)
{
	return a > b ? a : b;
}

/* The shape of a B x T batch's buffers under schedule sc. */
static void shape_of(const taco_model *m, const taco_step_opts *sc, int B,
		     int T, taco_work_shape *s)
{
	const taco_config *c = &m->cfg;
	size_t need = 1, largest = 1, g, le;
	int chunks;

	memset(s, 0, sizeof(*s));
	s->B = B;
	s->T = T;
	s->N = B * T;
	s->dt = m->act_dtype == TK_BF16 ? TK_BF16 : TK_F32;
	s->keep = sc->keep_activations != 0;
	s->offload = sc->offload && !s->keep;
	s->pref = sc->pref != 0;
	s->ranks = sc->ranks > 1 ? sc->ranks : 1;
	s->M = c->experts > 0 ? s->N * c->top_k : 0;
	if (s->keep)
		chunks = 1;
	else if (sc->mlp_chunks > 0)
		chunks = sc->mlp_chunks;
	else /* auto: the blocks of [N, Ic] within TACO_MLP_BLOCK_BYTES */
		chunks = (int)(((size_t)s->N * c->intermediate *
				    tk_dtype_size(s->dt) +
				TACO_MLP_BLOCK_BYTES - 1) /
			       TACO_MLP_BLOCK_BYTES);
	if (chunks < 1)
		chunks = 1;
	if (chunks > c->intermediate)
		chunks = c->intermediate;
	s->Ic = taco_gemm_up((c->intermediate + chunks - 1) / chunks,
			     c->intermediate);
	s->chunks = (c->intermediate + s->Ic - 1) / s->Ic;
	/* The block holds at least one column (column blocks), one row
	 * (row streams) and any 1-D tensor whole; never more than the
	 * largest tensor. */
	for (int i = 0; i < m->n_tensors; i++) {
		const taco_tensor *t = &m->tensors[i];
		need = max_sz(need, t->ndim == 2 ? max_sz((size_t)t->shape[0],
							  (size_t)t->shape[1])
						 : t->numel);
		largest = max_sz(largest, t->numel);
	}
	s->overlap = sc->overlap != 0;
	s->stream = c->layers - taco_stream_first(m);
	s->slots = s->stream < TACO_RING_SLOTS ? s->stream : TACO_RING_SLOTS;
	/* a LayerNorm's weight and bias share one block */
	need = max_sz(need, 2 * (size_t)c->hidden);
	g = sc->grad_block_elems ? sc->grad_block_elems
	    : s->overlap	 ? TACO_GRAD_BLOCK_ELEMS / 2
				 : TACO_GRAD_BLOCK_ELEMS;
	g = g < largest ? g : largest;
	s->gblock = max_sz(g, need);
	s->Vc = (int)(s->gblock / (size_t)c->hidden);
	if (s->Vc > c->vocab)
		s->Vc = c->vocab;
	s->Vc = taco_gemm_down(s->Vc);
	if (s->Vc < 1)
		s->Vc = 1;
	le = sc->logit_elems ? sc->logit_elems : TACO_LOGIT_ELEMS;
	s->Nc = (int)(le / (size_t)s->Vc);
	if (s->Nc >= s->N)
		s->Nc = s->N;
	else
		s->Nc = taco_gemm_down(s->Nc);
	if (s->Nc < 1)
		s->Nc = 1;
}

void taco_work_shape_of(const taco_model *m, int B, int T, taco_work_shape *s)
{
	shape_of(m, &m->sched, B, T, s);
}

void taco_gen_shape_of(const taco_model *m, int rows, int ctx, int chunk,
		       taco_work_shape *s)
{
	/* the schedule's MLP blocks and streamed layers; what only training
	 * has (kept or offloaded activations, preference buffers, ranks,
	 * overlapped updates) off */
	taco_step_opts sc = m->sched;

	sc.keep_activations = 0;
	sc.offload = 0;
	sc.pref = 0;
	sc.ranks = 1;
	sc.overlap = 0;
	shape_of(m, &sc, 1, chunk, s);
	s->gen = 1;
	s->rows = rows;
	s->ctx = ctx;
}

/* Elements of the fp32 scratch of the tensors outside the layers used one
 * at a time (positions, projections, the final norm's bias): the largest
 * stored in another dtype, in fp32 precision. */
static size_t top_scratch(const taco_model *m, int f32)
{
	const int ids[] = {m->final_norm_bias, m->pos_embed, m->proj_in,
			   m->proj_out};
	size_t e = 0;

	for (size_t i = 0; f32 && i < sizeof(ids) / sizeof(ids[0]); i++)
		if (ids[i] >= 0 && m->tensors[ids[i]].dtype != TK_F32)
			e = max_sz(e, m->tensors[ids[i]].numel);
	return e;
}

/* The largest expert matrix, and whether one is stored in another dtype
 * than fp32 (its fp32 scratch in fp32 precision). */
static size_t expert_scratch(const taco_model *m, int f32)
{
	size_t n = (size_t)m->cfg.layers * m->cfg.experts * TACO_X_COUNT, e = 0;

	for (size_t i = 0; f32 && i < n; i++) {
		int id = m->expert[i];
		if (id >= 0 && m->tensors[id].dtype != TK_F32)
			e = max_sz(e, m->tensors[id].numel);
	}
	return e;
}

static int work_list(const taco_model *m, taco_work *w, work_buf *list)
{
	const taco_config *c = &m->cfg;
	const taco_work_shape *s = &w->s;
	size_t N = (size_t)s->N, H = c->hidden, Ic = (size_t)s->Ic;
	/* the dense MLP's blocks, where some layer has one */
	size_t Icd = taco_config_has_dense(c) ? Ic : 0;
	size_t D = (size_t)c->heads * c->head_dim;
	size_t Dkv = (size_t)c->kv_heads * c->head_dim;
	size_t V = c->vocab, L = c->layers, half = c->rotary_dim / 2;
	size_t P = c->proj_dim, Hf = c->proj_dim != c->hidden ? P : H;
	size_t Dqkv = c->family == TACO_FAMILY_NEOX ? D + 2 * Dkv : 0;
	size_t ln = c->layer_norm ? N : 0, I = c->intermediate;
	size_t opt = c->family == TACO_FAMILY_OPT;
	size_t es = tk_dtype_size(s->dt), f32 = s->dt == TK_F32;
	size_t logits = (size_t)s->Nc * (size_t)s->Vc;
	size_t M = (size_t)s->M, E = M ? (size_t)c->experts : 0;
	size_t K = M ? (size_t)c->top_k : 0, Im = (size_t)c->moe_intermediate;
	int n = 0, q = c->qk_norm;
	/* generation: no backward, no loss over the batch; tr zeroes what
	 * only training holds, R the rows of logits */
	size_t tr = s->gen ? 0 : 1, R = s->gen ? (size_t)s->rows : N;
	size_t ctx = s->gen ? (size_t)s->ctx : (size_t)s->T;

#define ADD(field, count, esize, term, reg)                                    \
	list[n++] = (work_buf){(void **)&w->field, (count) * (esize),          \
			       TACO_PLAN_##term, (reg)}
	ADD(tokens, N, 4, BATCH, R_PERSIST);
	ADD(targets, N * tr, 4, BATCH, R_PERSIST);
	ADD(pos, N, 4, BATCH, R_PERSIST);
	ADD(rows, N * tr, 4, BATCH, R_PERSIST);
	ADD(uniq, (s->ranks > 1 && N * s->ranks > V ? V : N * s->ranks) * tr, 4,
	    BATCH, R_PERSIST);
	ADD(pos_ids, c->learned_pos ? N : 0, 4, BATCH, R_PERSIST);
	ADD(emb_rows, opt ? N * tr : 0, 4, BATCH, R_PERSIST);
	ADD(rope_cos, ctx * half, 4, BATCH, R_PERSIST);
	ADD(rope_sin, ctx * half, 4, BATCH, R_PERSIST);
	/* generation: its cache, each token's row, the rows of logits */
	ADD(kv_k, s->gen ? L * R * ctx * Dkv : 0, es, KV_CACHE, R_PERSIST);
	ADD(kv_v, s->gen ? L * R * ctx * Dkv : 0, es, KV_CACHE, R_PERSIST);
	ADD(seq, s->gen ? N : 0, 4, BATCH, R_PERSIST);
	ADD(want, s->gen ? R : 0, 4, BATCH, R_PERSIST);
	ADD(gen_logits, s->gen ? R * V : 0, 4, LOSS_CHUNK, R_PERSIST);
	if (s->gen) { /* each layer's input and output, in turn */
		ADD(xs, 2 * N * H, es, LAYER_INPUTS, R_PERSIST);
	} else if (s->offload) {
		ADD(xs, TACO_OFFLOAD_SLOTS * N * H, es, LAYER_INPUTS,
		    R_PERSIST);
		ADD(xs_host, (L + 1) * N * H, es, LAYER_INPUTS, R_HOST);
	} else {
		ADD(xs, (L + 1) * N * H, es, LAYER_INPUTS, R_PERSIST);
	}
	for (int a = 0; a < w->n_acts; a++) {
		taco_layer_acts *x = &w->acts[a];
		int reg = s->keep ? R_PERSIST : R_LAYER;
#define ADDA(field, count, esize, term)                                        \
	list[n++] = (work_buf){                                                \
	    (void **)&x->field, (count) * (esize),                             \
	    s->keep ? TACO_PLAN_LAYER_INPUTS : TACO_PLAN_##term, reg}
		ADDA(ln1, N * H, es, LAYER_WORK);
		ADDA(rstd1, N, 4, LAYER_WORK);
		ADDA(q, N * D, es, LAYER_WORK);
		ADDA(k, N * Dkv, es, LAYER_WORK);
		ADDA(v, N * Dkv, es, LAYER_WORK);
		ADDA(q_pre, q ? N * D : 0, es, LAYER_WORK);
		ADDA(k_pre, q ? N * Dkv : 0, es, LAYER_WORK);
		ADDA(rstd_q, q ? N * c->heads : 0, 4, LAYER_WORK);
		ADDA(rstd_k, q ? N * c->kv_heads : 0, 4, LAYER_WORK);
		ADDA(att, N * D, es, LAYER_WORK);
		ADDA(lse, N * c->heads, 4, ATTENTION);
		ADDA(x_mid, N * H, es, LAYER_WORK);
		ADDA(ln2, N * H, es, LAYER_WORK);
		ADDA(rstd2, N, 4, LAYER_WORK);
		ADDA(gate, c->gated_mlp ? N * Icd : 0, es, LAYER_WORK);
		ADDA(up, N * Icd, es, LAYER_WORK);
		ADDA(act, N * Icd, es, LAYER_WORK);
		ADDA(mean1, ln, 4, LAYER_WORK);
		ADDA(mean2, ln, 4, LAYER_WORK);
		ADDA(qkv, N * Dqkv, es, LAYER_WORK);
		ADDA(x_pre, c->norm_before ? 0 : N * H, es, LAYER_WORK);
		ADDA(rlog, N * E, 4, LAYER_WORK);
		ADDA(topi, N * K, 4, LAYER_WORK);
		ADDA(topw, N * K, 4, LAYER_WORK);
		ADDA(order, M, 4, LAYER_WORK);
		ADDA(inv, M, 4, LAYER_WORK);
		ADDA(xg, M * H, es, LAYER_WORK);
		/* gpt-oss: eg holds gate and up, interleaved */
		ADDA(eg, M * Im * (c->fused_experts ? 2 : 1), es, LAYER_WORK);
		ADDA(eu, c->fused_experts ? 0 : M * Im, es, LAYER_WORK);
		ADDA(ea, M * Im, es, LAYER_WORK);
		ADDA(ey, M * H, es, LAYER_WORK);
#undef ADDA
	}
	ADD(dx, N * H * tr, es, LAYER_WORK, R_PERSIST);
	ADD(dtmp, N * H * tr, es, LAYER_WORK, R_LAYER);
	/* OPT with project_in: the gradient of the token embeddings, read
	 * by the tied head's pass over the vocabulary (the loss region) */
	ADD(dembed, Hf != H ? N * P * tr : 0, es, LAYER_WORK, R_PERSIST);
	ADD(dq, N * D * tr, es, LAYER_WORK, R_LAYER_A);
	ADD(dk, N * Dkv * tr, es, LAYER_WORK, R_LAYER_A);
	ADD(dv, N * Dkv * tr, es, LAYER_WORK, R_LAYER_A);
	ADD(datt, N * D * tr, es, LAYER_WORK, R_LAYER_A);
	ADD(dact, N * Icd * tr, es, LAYER_WORK, R_LAYER_M);
	ADD(dqkv, N * Dqkv * tr, es, LAYER_WORK, R_LAYER_A);
	/* the experts' backward comes before the attention's */
	ADD(moe_dy, M * H * tr, es, LAYER_WORK, R_LAYER_M);
	ADD(moe_dact, M * Im * tr, es, LAYER_WORK, R_LAYER_M);
	ADD(moe_dw, N * K * tr, 4, LAYER_WORK, R_LAYER_M);
	/* (forward too: a bf16 router's logits) */
	ADD(moe_dlog, N * E, 4, LAYER_WORK, R_LAYER);
	ADD(moe_dlog_dt, f32 ? 0 : N * E * tr, es, LAYER_WORK, R_LAYER_M);
	ADD(moe_cnt, E, 4, BATCH, R_PERSIST);
	ADD(moe_count, L * E, 4, BATCH, R_HOST);
	ADD(moe_gcount, s->ranks > 1 ? L * E : 0, 4, BATCH, R_HOST);
	ADD(moe_rsum, s->ranks > 1 && E ? 2 * L * E + 1 : 0, 8, BATCH, R_HOST);
	ADD(moe_psum, E, 4, BATCH, R_PERSIST);
	ADD(moe_psum_h, L * E, 4, BATCH, R_HOST);
	ADD(moe_extra, E, 4, BATCH, R_PERSIST);
	ADD(moe_extra_h, E, 4, BATCH, R_HOST);
	ADD(sinks32, c->attn_sinks && !f32 ? c->heads : 0, 4, WEIGHT_SCRATCH,
	    R_PERSIST);
	ADD(w_exp, M ? expert_scratch(m, f32) : 0, 4, WEIGHT_SCRATCH,
	    R_PERSIST);
	/* families with dropout sites: always (the rate is the job's) */
	ADD(ddrop,
	    c->family == TACO_FAMILY_OPT || c->family == TACO_FAMILY_NEOX
		? N * H * tr
		: 0,
	    es, LAYER_WORK, R_LAYER);
	ADD(gbias, c->mlp_bias ? I * tr : 0, 4, GRAD_BUFFER, R_PERSIST);
	ADD(emb_tmp, opt ? N * (P > H ? P : H) : 0, es, LAYER_WORK, R_LAYER);
	/* a tied head needs hf again after backward */
	/* generation: the head's input, the final norm's, of the R rows */
	ADD(hf, R * Hf, es, LOSS_CHUNK, c->tie_embeddings ? R_PERSIST : R_LOSS);
	ADD(hn, Hf != H ? R * H : 0, es, LOSS_CHUNK, R_LOSS);
	ADD(rstd_f, R, 4, LOSS_CHUNK, R_PERSIST);
	ADD(mean_f, ln ? R : 0, 4, LOSS_CHUNK, R_PERSIST);
	ADD(ce_mx, N * tr, 4, LOSS_CHUNK, R_PERSIST);
	ADD(ce_tl, N * tr, 4, LOSS_CHUNK, R_PERSIST);
	ADD(ce_lse, N * tr, 4, LOSS_CHUNK, R_PERSIST);
	ADD(ce_se, N * tr, 8, LOSS_CHUNK, R_PERSIST);
	ADD(ce_am, N * tr, 4, LOSS_CHUNK, R_PERSIST);
	ADD(ce_sums, 2 * tr, 8, LOSS_CHUNK, R_PERSIST);
	ADD(ce_row, s->pref ? N : 0, 8, LOSS_CHUNK, R_PERSIST);
	ADD(ce_scale, s->pref ? N : 0, 4, LOSS_CHUNK, R_PERSIST);
	ADD(ce_row_host, s->pref ? N : 0, 8, LOSS_CHUNK, R_HOST);
	ADD(ce_scale_host, s->pref ? N : 0, 4, LOSS_CHUNK, R_HOST);
	ADD(logits, logits * tr, 4, LOSS_CHUNK, R_LOSS);
	ADD(dlogits, f32 ? 0 : logits * tr, es, LOSS_CHUNK, R_LOSS);
	ADD(dh, N * Hf * tr, 4, LOSS_CHUNK, R_LOSS);
	ADD(dtie, c->tie_embeddings ? N * Hf * tr : 0, es, LOSS_CHUNK,
	    R_PERSIST);
	for (int sl = 0; sl < TACO_L_COUNT; sl++) {
		size_t e = 0;
		/* Checkpoints may mix dtypes across layers, and a mixture of
		 * experts mixes dense and sparse layers. */
		for (size_t l = 0; f32 && l < L; l++) {
			int id = m->layer[l][sl];
			if (id >= 0 && m->tensors[id].dtype != TK_F32)
				e = max_sz(e, m->tensors[id].numel);
		}
		ADD(wl[sl], e, 4, WEIGHT_SCRATCH, R_PERSIST);
	}
	ADD(w_head,
	    f32 && (m->tensors[m->lm_head].dtype != TK_F32 ||
		    m->tensors[m->embed].dtype != TK_F32)
		? V * H
		: 0,
	    4, WEIGHT_SCRATCH, R_PERSIST);
	ADD(w_final,
	    f32 && m->final_norm >= 0 &&
		    m->tensors[m->final_norm].dtype != TK_F32
		? H
		: 0,
	    4, WEIGHT_SCRATCH, R_PERSIST);
	ADD(w_top, top_scratch(m, f32), 4, WEIGHT_SCRATCH, R_PERSIST);
	ADD(gblock, s->gblock * tr, 4, GRAD_BUFFER, R_PERSIST);
	ADD(gblock2, s->overlap ? s->gblock : 0, 4, GRAD_BUFFER, R_PERSIST);
	ADD(comm, s->ranks > 1 ? s->gblock : 0, 4, COMM, R_PERSIST);
	ADD(ring, s->ring_lent ? 0 : (size_t)s->slots * w->slot_bytes, 1,
	    WEIGHT_RING, R_PERSIST);
	/* the write-back of updates (none in generation) */
	ADD(wb_dev, (size_t)s->slots * w->wb_slot * tr, 1, WEIGHT_RING,
	    R_PERSIST);
	ADD(wb_host, (size_t)s->stream * w->wb_layer * tr, 1, WEIGHT_RING,
	    R_HOST);
#undef ADD
	return n;
}

static size_t align_up(size_t b)
{
	return (b + REGION_ALIGN - 1) / REGION_ALIGN * REGION_ALIGN;
}

/* Bytes of each part of the shared region: sum[r] for r < R_HOST; the
 * layer's is R_LAYER then the larger of R_LAYER_M and R_LAYER_A. */
static void part_bytes(const work_buf *list, int n, size_t sum[R_HOST])
{
	memset(sum, 0, R_HOST * sizeof(sum[0]));
	for (int i = 0; i < n; i++)
		if (list[i].region != R_PERSIST && list[i].region != R_HOST)
			sum[list[i].region] += align_up(list[i].bytes);
}

/* Bytes of the shared region: the larger of the layer and loss buffers. */
static size_t region_bytes(const work_buf *list, int n, size_t *layer,
			   size_t *loss)
{
	size_t sum[R_HOST];

	part_bytes(list, n, sum);
	*layer = sum[R_LAYER] + max_sz(sum[R_LAYER_M], sum[R_LAYER_A]);
	*loss = sum[R_LOSS];
	return *layer > *loss ? *layer : *loss;
}

/* The host arrays of w (not its buffers). */
static void work_free_arrays(taco_work *w)
{
	free(w->wb_k);
	free(w->ring_off);
	free(w->wb_voff);
	free(w->wb_ioff);
	free(w->acts);
}

static taco_work *work_new(const taco_model *m, const taco_work_shape *s,
			   work_buf **list, int *n)
{
	taco_work *w = calloc(1, sizeof(*w));
	size_t ns;

	if (!w)
		return NULL;
	w->s = *s;
	w->n_acts = w->s.keep ? m->cfg.layers : 1;
	ns = (size_t)taco_stream_count(m);
	w->ring_off = calloc(ns, sizeof(size_t));
	w->wb_voff = calloc(ns, sizeof(size_t));
	w->wb_ioff = calloc(ns, sizeof(size_t));
	w->wb_k = calloc((size_t)w->s.stream * ns + 1, sizeof(int));
	w->acts = calloc((size_t)w->n_acts, sizeof(*w->acts));
	*list = calloc(work_list_cap(w->n_acts), sizeof(**list));
	if (!w->acts || !*list || !w->wb_k || !w->ring_off || !w->wb_voff ||
	    !w->wb_ioff) {
		work_free_arrays(w);
		free(*list);
		free(w);
		return NULL;
	}
	w->slot_bytes = taco_ring_layout(m, w->s.stream, w->ring_off);
	taco_wb_layout(m, w->s.stream, w->wb_voff, w->wb_ioff, &w->wb_slot,
		       &w->wb_layer);
	for (int i = 0; i < TACO_RING_SLOTS; i++)
		w->slot_layer[i] = -1;
	*n = work_list(m, w, *list);
	return w;
}

int taco_work_plan(const taco_model *m, int B, int T, uint64_t *term,
		   uint64_t *host)
{
	taco_work_shape s;

	taco_work_shape_of(m, B, T, &s);
	return taco_work_plan_shape(m, &s, term, host);
}

int taco_work_plan_shape(const taco_model *m, const taco_work_shape *s,
			 uint64_t *term, uint64_t *host)
{
	work_buf *list;
	taco_work *w = work_new(m, s, &list, &(int){0});
	size_t layer, loss;
	int n;

	if (!w)
		return -ENOMEM;
	n = work_list(m, w, list);
	for (int i = 0; i < n; i++) {
		if (list[i].region == R_PERSIST)
			term[list[i].term] += list[i].bytes;
		else if (list[i].region == R_HOST)
			*host += list[i].bytes;
	}
	/* The region: the layer's buffers under their terms, the loss's
	 * only as far as they exceed them. */
	region_bytes(list, n, &layer, &loss);
	term[TACO_PLAN_LAYER_WORK] += layer;
	if (loss > layer)
		term[TACO_PLAN_LOSS_CHUNK] += loss - layer;
	free(list);
	work_free_arrays(w);
	free(w);
	return 0;
}

static void work_destroy(taco_model *m, taco_work *w)
{
	work_buf *list = calloc(work_list_cap(w->n_acts), sizeof(*list));
	int n;

	if (list) { /* without the list the buffers leak, never corrupt */
		n = work_list(m, w, list);
		for (int i = 0; i < n; i++) {
			/* (none allocated: also a lent ring) */
			if (!*list[i].slot || !list[i].bytes)
				continue;
			if (list[i].region == R_PERSIST)
				m->ops->free(*list[i].slot, list[i].bytes);
			else if (list[i].region == R_HOST)
				m->ops->host_free(*list[i].slot, list[i].bytes);
		}
	}
	if (w->region)
		m->ops->free(w->region, w->region_bytes);
	free(list);
	work_free_arrays(w);
	free(w);
}

void taco_model_release_work(taco_model *m)
{
	if (m && m->work) {
		work_destroy(m, m->work);
		m->work = NULL;
	}
}

static int same_shape(const taco_work_shape *a, const taco_work_shape *b)
{
	return memcmp(a, b, sizeof(*a)) == 0;
}

taco_work *taco_work_alloc(taco_model *m, const taco_work_shape *s)
{
	work_buf *list;
	taco_work *w;
	size_t layer, loss, sum[R_HOST], off[R_HOST] = {0};
	int n;

	w = work_new(m, s, &list, &n);
	if (!w)
		return NULL;
	w->region_bytes = region_bytes(list, n, &layer, &loss);
	/* the two backward sets start where the layer's own buffers end */
	part_bytes(list, n, sum);
	off[R_LAYER_M] = off[R_LAYER_A] = sum[R_LAYER];
	if (w->region_bytes) {
		w->region = m->ops->alloc(w->region_bytes);
		if (!w->region)
			goto nomem;
		w->bytes += w->region_bytes;
	}
	for (int i = 0; i < n; i++) {
		size_t bytes = list[i].bytes;
		int r = list[i].region;
		if (!bytes)
			continue;
		if (r != R_PERSIST && r != R_HOST) {
			*list[i].slot = (char *)w->region + off[r];
			off[r] += align_up(bytes);
			continue;
		}
		*list[i].slot = r == R_HOST ? m->ops->host_alloc(bytes)
					    : m->ops->alloc(bytes);
		if (!*list[i].slot)
			goto nomem;
		if (r == R_HOST)
			w->host_bytes += bytes;
		else
			w->bytes += bytes;
	}
	free(list);
	return w;
nomem:
	free(list);
	work_destroy(m, w);
	return NULL;
}

void taco_work_free(taco_model *m, taco_work *w)
{
	if (w)
		work_destroy(m, w);
}

int taco_work_ensure(taco_model *m, int B, int T, taco_err *err)
{
	taco_work_shape want;

	taco_work_shape_of(m, B, T, &want);
	if (m->work && same_shape(&m->work->s, &want))
		return 0;
	taco_model_release_work(m);
	m->work = taco_work_alloc(m, &want);
	if (!m->work)
		return taco_err_set(err, -ENOMEM,
				    "cannot allocate the step buffers for "
				    "batch %d x %d",
				    B, T);
	return 0;
}

void *taco_work_x(const taco_model *m, int l)
{
	const taco_work *w = m->work;
	size_t NH = (size_t)w->s.N * m->cfg.hidden * tk_dtype_size(w->s.dt);

	if (w->s.offload)
		l %= TACO_OFFLOAD_SLOTS;
	return (char *)w->xs + (size_t)l * NH;
}

int taco_model_set_step_opts(taco_model *m, const taco_step_opts *s,
			     taco_err *err)
{
	int r;

	if (s->keep_activations && s->offload)
		return taco_err_set(err, -EINVAL,
				    "kept activations exclude offload (it "
				    "moves checkpointed layer inputs)");
	if (s->stream_layers < 0 || s->stream_layers > m->cfg.layers)
		return taco_err_set(err, -EINVAL,
				    "stream_layers %d: must be 0 to %d (the "
				    "layer count)",
				    s->stream_layers, m->cfg.layers);
	if (s->stream_layers && s->keep_activations)
		return taco_err_set(err, -EINVAL,
				    "streamed weights need activation "
				    "checkpointing (kept activations of "
				    "every layer would outweigh the saving)");
	if (s->mlp_chunks < 0 || s->mlp_chunks > m->cfg.intermediate)
		return taco_err_set(err, -EINVAL,
				    "mlp_chunks %d: must be 1 to %d (the "
				    "intermediate size)",
				    s->mlp_chunks, m->cfg.intermediate);
	if (memcmp(&m->sched, s, sizeof(*s)) != 0) {
		taco_model_release_work(m);
		if ((r = taco_model_move_weights(m, s->stream_layers, err)))
			return r;
		m->sched = *s;
	}
	return 0;
}

int taco_model_set_aux_loss(taco_model *m, double coef, taco_err *err)
{
	if (coef < 0)
		return 0;
	if (coef > 0 && m->cfg.experts <= 0)
		return taco_err_set(err, -EINVAL,
				    "router_aux_loss_coef %g: %s has no "
				    "experts",
				    coef, taco_arch_name(m->cfg.arch));
	m->aux_coef = coef;
	return 0;
}

int taco_model_set_dropout(taco_model *m, float p, uint64_t seed, taco_err *err)
{
	if (!(p >= 0.0f && p <= 0.9f))
		return taco_err_set(err, -EINVAL,
				    "dropout %g: must be 0 to 0.9", (double)p);
	if (p > 0 && m->cfg.family != TACO_FAMILY_OPT &&
	    m->cfg.family != TACO_FAMILY_NEOX)
		return taco_err_set(err, -EINVAL,
				    "dropout %g: %s has no residual dropout",
				    (double)p, taco_arch_name(m->cfg.arch));
	m->dropout = p;
	m->dropout_seed = seed;
	return 0;
}
