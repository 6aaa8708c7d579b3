/* model_step.c: a step's order: forward, the chunked loss, backward with
 * activation checkpointing. Forward keeps each layer's input (on the device,
 * or copied to host memory while the next layer runs); backward recomputes
 * one layer at a time (prefetching the next input) and hands every
 * gradient piece to the sink as soon as it exists. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "layer.h"

void taco_model_set_global_batch(taco_model *m, const int32_t *tokens, int n)
{
	m->global_tokens = tokens;
	m->global_n = tokens ? n : 0;
}

void taco_model_set_rank_sum(taco_model *m,
			     int (*sum)(void *ctx, double *v, int n), void *ctx)
{
	m->rank_sum = sum;
	m->rank_ctx = ctx;
}

float *taco_model_comm_block(const taco_model *m, size_t *n)
{
	if (!m->work || !m->work->comm)
		return NULL;
	*n = m->work->s.gblock;
	return m->work->comm;
}

int taco_batch_check(const taco_model *m, const taco_batch *b,
		     int64_t *n_targets, taco_err *err)
{
	int V = m->cfg.vocab;
	int64_t n = 0;

	if (b->B < 1 || b->T < 1 || (int64_t)b->B * b->T > TACO_MAX_TOKENS)
		return taco_err_set(err, -EINVAL,
				    "batch %d x %d: need 1 <= batch * "
				    "sequence length <= %d tokens",
				    b->B, b->T, TACO_MAX_TOKENS);
	if (m->global_tokens) {
		int ranks = m->sched.ranks > 1 ? m->sched.ranks : 1;
		if ((int64_t)m->global_n != (int64_t)b->B * b->T * ranks)
			return taco_err_set(err, -EINVAL,
					    "global batch of %d tokens: not %d "
					    "ranks of %d x %d",
					    m->global_n, ranks, b->B, b->T);
		for (int i = 0; i < m->global_n; i++)
			if (m->global_tokens[i] < 0 || m->global_tokens[i] >= V)
				return taco_err_set(
				    err, -EINVAL,
				    "global batch token %d: id %d outside "
				    "the vocabulary (%d)",
				    i, m->global_tokens[i], V);
	}
	for (int i = 0; i < b->B * b->T; i++) {
		int t = b->tokens[i], y = b->targets[i];
		if (t < 0 || t >= V)
			return taco_err_set(err, -EINVAL,
					    "batch row %d position %d: token "
					    "id %d outside the vocabulary (%d)",
					    i / b->T, i % b->T, t, V);
		if (y != -100 && (y < 0 || y >= V))
			return taco_err_set(err, -EINVAL,
					    "batch row %d position %d: target "
					    "id %d outside the vocabulary (%d)",
					    i / b->T, i % b->T, y, V);
		n += y != -100;
		if (m->cfg.learned_pos &&
		    (b->pos ? b->pos[i] : i % b->T) >= m->cfg.max_pos)
			return taco_err_set(err, -EINVAL,
					    "batch row %d position %d: "
					    "document position %d is past the "
					    "model's %d learned positions",
					    i / b->T, i % b->T,
					    b->pos ? b->pos[i] : i % b->T,
					    m->cfg.max_pos);
		if (b->pos) {
			int p = b->pos[i];
			int ok =
			    p == 0 || (i % b->T > 0 && p == b->pos[i - 1] + 1);
			if (!ok)
				return taco_err_set(
				    err, -EINVAL,
				    "batch row %d position %d: document "
				    "position %d must be 0 or follow %d",
				    i / b->T, i % b->T, p,
				    i % b->T ? b->pos[i - 1] : -1);
		}
	}
	*n_targets = n;
	return 0;
}

const void *step_weight_of(step_ctx *c, int id, float *scratch)
{
	const taco_tensor *t;

	if (id < 0)
		return NULL;
	t = &c->m->tensors[id];
	if (t->dtype == c->dt)
		return t->data;
	c->o->to_f32(scratch, t->data, t->dtype, t->numel);
	return scratch;
}

/* The batch's distinct tokens (the global batch's, data parallel),
 * ascending, into w->uniq, and each token's index among them into w->rows
 * (the untied embedding's gradient rows). */
static int upload_distinct(taco_model *m, const taco_batch *b, taco_err *err)
{
	taco_work *w = m->work;
	int N = b->B * b->T, V = m->cfg.vocab, U = 0;
	const int32_t *all = m->global_tokens ? m->global_tokens : b->tokens;
	int n_all = m->global_tokens ? m->global_n : N;
	int32_t *uniq = malloc((size_t)n_all * 4), *map = malloc((size_t)N * 4);
	int32_t *seen = malloc((size_t)V * 4);
	int r = 0;

	if (!uniq || !map || !seen) {
		r = taco_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	for (int v = 0; v < V; v++)
		seen[v] = -1;
	for (int i = 0; i < n_all; i++)
		seen[all[i]] = 0;
	for (int v = 0; v < V; v++)
		if (seen[v] == 0) {
			seen[v] = U;
			uniq[U++] = v;
		}
	for (int i = 0; i < N; i++)
		map[i] = seen[b->tokens[i]];
	m->ops->upload(w->uniq, uniq, (size_t)U * 4);
	m->ops->upload(w->rows, map, (size_t)N * 4);
	w->n_uniq = U;
out:
	free(uniq);
	free(map);
	free(seen);
	return r;
}

/* Upload tokens, targets, positions, the distinct tokens and the rope
 * tables for this batch: every upload of a step happens here, before its
 * first op, so that nothing inside the step waits for the host. */
static int prepare_batch(taco_model *m, const taco_batch *b, taco_err *err)
{
	taco_work *w = m->work;
	int N = b->B * b->T, half = m->cfg.rotary_dim / 2, r;
	int32_t *pos = NULL;
	float *cs = NULL;
	const float *inv_freq = m->inv_freq;
	int last = 0;

	if ((r = upload_distinct(m, b, err)))
		return r;
	m->ops->upload(w->tokens, b->tokens, (size_t)N * 4);
	m->ops->upload(w->targets, b->targets, (size_t)N * 4);
	pos = malloc((size_t)N * 4);
	if (!pos)
		return taco_err_set(err, -ENOMEM, "out of memory");
	for (int i = 0; i < N; i++) {
		pos[i] = b->pos ? b->pos[i] : i % b->T;
		last = pos[i] > last ? pos[i] : last;
	}
	m->ops->upload(w->pos, pos, (size_t)N * 4);
	/* LongRoPE: the batch's last position picks the factors */
	if (taco_config_rope_long(&m->cfg, last))
		inv_freq = m->inv_freq_long;
	if (w->pos_ids) { /* OPT: the table's rows carry an offset of 2 */
		for (int i = 0; i < N; i++)
			pos[i] += 2;
		m->ops->upload(w->pos_ids, pos, (size_t)N * 4);
	}
	if (w->emb_rows) { /* OPT: padding_idx gets no gradient */
		for (int i = 0; i < N; i++)
			pos[i] = b->tokens[i] == m->cfg.pad_embed
				     ? -1
				     : b->tokens[i];
		m->ops->upload(w->emb_rows, pos, (size_t)N * 4);
	}
	free(pos);
	if (!half)
		return 0;
	cs = malloc((size_t)b->T * half * 2 * sizeof(float));
	if (!cs)
		return taco_err_set(err, -ENOMEM, "out of memory");
	/* As Hugging Face: the angle is an fp32 product, then cos/sin, times
	 * the attention factor (YaRN's; 1 otherwise) in fp32. */
	for (int p = 0; p < b->T; p++) {
		for (int i = 0; i < half; i++) {
			float a = (float)p * inv_freq[i];
			float f = (float)m->cfg.rope_attn_factor;
			cs[(size_t)p * half + i] = (float)cos((double)a) * f;
			cs[(size_t)(b->T + p) * half + i] =
			    (float)sin((double)a) * f;
		}
	}
	m->ops->upload(w->rope_cos, cs, (size_t)b->T * half * sizeof(float));
	m->ops->upload(w->rope_sin, cs + (size_t)b->T * half,
		       (size_t)b->T * half * sizeof(float));
	free(cs);
	return 0;
}

/* Layer l's input, fetched from host memory (offload) by then. */
static void *layer_x(step_ctx *c, int l)
{
	return taco_work_x(c->m, l);
}

static void *host_x(step_ctx *c, int l)
{
	size_t NH = (size_t)c->w->s.N * c->m->cfg.hidden;

	return step_at(c->w->xs_host, (size_t)l * NH, c->es);
}

void step_embed_fwd(step_ctx *c, void *x0)
{
	const taco_model *m = c->m;
	taco_work *w = c->w;
	int N = w->s.N, H = m->cfg.hidden, P = m->cfg.proj_dim;
	const void *emb = step_weight_of(c, m->embed, w->w_head);

	if (m->proj_in >= 0) {
		c->o->embedding_fwd(c->dt, w->emb_tmp, emb, w->tokens, N, P);
		lp_linear_fwd(c, x0, w->emb_tmp,
			      step_weight_of(c, m->proj_in, w->w_top), NULL, N,
			      P, H);
	} else {
		c->o->embedding_fwd(c->dt, x0, emb, w->tokens, N, H);
	}
	if (m->pos_embed >= 0) {
		c->o->embedding_fwd(c->dt, w->emb_tmp,
				    step_weight_of(c, m->pos_embed, w->w_top),
				    w->pos_ids, N, H);
		c->o->add(c->dt, x0, w->emb_tmp, (size_t)N * H);
	}
}

const int32_t *step_emb_ids(const step_ctx *c)
{
	return c->w->emb_rows ? c->w->emb_rows : c->w->tokens;
}

/* After backward (w->dx: the gradient of x0): the learned positions' and
 * project_in's gradients, and c->de, the token embedding output's. */
static void embed_bwd(step_ctx *c)
{
	const taco_model *m = c->m;
	taco_work *w = c->w;
	int N = w->s.N, H = m->cfg.hidden, P = m->cfg.proj_dim;
	int id = m->pos_embed;

	c->de = w->dx;
	if (id >= 0 && grad_wanted(c, id)) {
		float *dense = grad_dense(c, id);
		/* rows 2 .. T + 1 at most are used: the others get 0 */
		int R = (int)m->tensors[id].shape[0];
		int used = w->s.T + 2 < R ? w->s.T + 2 : R;
		int rb = taco_gemm_down((int)(w->s.gblock / (size_t)H));
		if (dense)
			c->o->embedding_bwd(c->dt, dense, w->dx, w->pos_ids, N,
					    H, 0, R);
		for (int r0 = 0; !dense && r0 < used && !c->err; r0 += rb) {
			int n = used - r0 < rb ? used - r0 : rb;
			float *g = grad_block(c);
			c->o->memset0(g, (size_t)n * H * sizeof(float));
			c->o->embedding_bwd(c->dt, g, w->dx, w->pos_ids, N, H,
					    r0, n);
			grad_emit_rows(c, id, g, H, r0, n, NULL, r0 == 0,
				       r0 + n >= used);
		}
	}
	if (m->proj_in < 0)
		return;
	/* de = dx W_in (W_in's last use), then dW_in [H, P] = dx^T e with e
	 * the lookup again */
	lp_linear_bwd_x(c, w->dembed, w->dx,
			step_weight_of(c, m->proj_in, w->w_top), N, P, H, 0.0f);
	c->o->embedding_fwd(c->dt, w->emb_tmp,
			    step_weight_of(c, m->embed, w->w_head), w->tokens,
			    N, P);
	grad_linear_cols(c, m->proj_in, w->dx, H, w->emb_tmp, P, N, H, P, 0);
	c->de = w->dembed;
}

/* Embedding and every layer; the last layer's output is layer_x(L). With
 * offload, input l goes to host memory while layer l runs: the wait before
 * it covers the copies up to l - 1, so the slot layer l writes (that of
 * input l - 2) is free. */
static void forward_all(step_ctx *c)
{
	const taco_config *cf = &c->m->cfg;
	taco_work *w = c->w;
	size_t NH = (size_t)w->s.N * cf->hidden;

	/* layer 0's weights, when streamed, come while the embedding runs */
	stream_begin(c);
	stream_prefetch(c, 0);
	step_embed_fwd(c, layer_x(c, 0));
	for (int l = 0; l < cf->layers; l++) {
		/* the copies of input l - 1 and of layer l's weights */
		if (w->s.offload || stream_active(c))
			c->o->copy_wait();
		stream_ready(c, l);
		if (w->s.offload)
			c->o->copy_async(host_x(c, l), layer_x(c, l),
					 NH * c->es, 1);
		stream_prefetch(c, l + 1);
		c->layer->fwd(c, l, layer_x(c, l), layer_x(c, l + 1));
	}
	if (w->s.offload)
		c->o->copy_wait();
}

static int begin(taco_model *m, const taco_batch *b, step_ctx *c,
		 taco_step_stats *st, taco_err *err)
{
	int64_t n;
	int r;

	memset(st, 0, sizeof(*st));
	if ((r = taco_batch_check(m, b, &n, err)))
		return r;
	if ((r = taco_work_ensure(m, b->B, b->T, err)))
		return r;
	if ((r = prepare_batch(m, b, err)))
		return r;
	memset(c, 0, sizeof(*c));
	c->m = m;
	c->o = m->ops;
	c->w = m->work;
	c->b = b;
	c->dt = m->work->s.dt;
	c->es = tk_dtype_size(c->dt);
	c->layer = step_layer_ops(m);
	st->n_targets = n;
	return 0;
}

/* After the step's last op: the loss sums, read back once (the step's
 * one wait for the device). */
static void finish_stats(step_ctx *c, taco_step_stats *st)
{
	double sums[2];

	c->o->download(sums, c->w->ce_sums, sizeof(sums));
	st->loss_sum = sums[0];
	st->n_correct = (int64_t)sums[1];
	st->loss = st->n_targets ? st->loss_sum / (double)st->n_targets : 0.0;
}

/* Backward through the layers, last to first. With offload, input l - 1 is
 * fetched while layer l runs (into the slot of input l + 2, spent by
 * then); the last three inputs are still on the device from forward. */
static void backward_all(step_ctx *c)
{
	const taco_config *cf = &c->m->cfg;
	taco_work *w = c->w;
	size_t NH = (size_t)w->s.N * cf->hidden;
	int L = cf->layers;

	for (int l = L - 1; l >= 0 && !c->err; l--) {
		const void *x = layer_x(c, l);
		if (w->s.offload || stream_active(c))
			c->o->copy_wait();
		stream_ready(c, l);
		if (w->s.offload && l - 1 >= 0 &&
		    l - 1 <= L - TACO_OFFLOAD_SLOTS)
			c->o->copy_async(layer_x(c, l - 1), host_x(c, l - 1),
					 NH * c->es, 0);
		if (l - 1 >= 0)
			stream_prefetch(c, l - 1);
		if (!w->s.keep)
			c->layer->recompute(c, l, x);
		c->layer->bwd(c, l, x);
		stream_updated(c, l);
	}
	/* the last layers' write-backs overlap the embedding's gradient;
	 * the step's end waits for them */
	stream_end(c);
}

/* From the loss's gradient on: backward, the embedding's gradient, the
 * step's one wait, the streamed weights' host copies. */
static int step_rest(step_ctx *c, taco_step_stats *st, float scale,
		     taco_err *err)
{
	const taco_config *cf = &c->m->cfg;

	step_final_bwd(c, layer_x(c, cf->layers));
	backward_all(c);
	if (!c->err)
		embed_bwd(c);
	if (!c->err)
		step_embedding_grad(c, scale);
	grad_drain(c);
	if (stream_active(c))
		c->o->copy_wait();
	/* the step's one wait; then the host copies of streamed weights
	 * take their updates, also after a failed consumer's partial ones */
	finish_stats(c, st);
	if (stream_active(c))
		stream_scatter(c);
	if (c->err)
		return taco_err_set(err, c->err,
				    "gradient consumer failed (%d)", c->err);
	return 0;
}

int taco_model_step(taco_model *m, const taco_batch *b, int64_t norm_targets,
		    const taco_grad_sink *sink, taco_step_stats *stats,
		    taco_err *err)
{
	taco_step_stats st;
	step_ctx c;
	int64_t norm;
	float scale;
	int r;

	if (sink && m->sched.ranks > 1 && m->cfg.experts > 0 && !m->rank_sum)
		return taco_err_set(err, -EINVAL,
				    "data parallel with experts: no sum over "
				    "the ranks (taco_model_set_rank_sum)");
	if ((r = begin(m, b, &c, &st, err)))
		return r;
	c.sink = sink;
	norm = norm_targets > 0 ? norm_targets : st.n_targets;
	scale = norm ? 1.0f / (float)norm : 0.0f;
	/* the auxiliary loss, in a batch's share of the step's targets
	 * (gradient accumulation) */
	if (sink && m->aux_coef > 0 && norm)
		c.aux_w = m->aux_coef * (double)st.n_targets / (double)norm;
	forward_all(&c);
	/* data parallel: which experts the global batch reached, before
	 * their gradients go to the sums */
	if (sink && c.w->s.ranks > 1 && m->cfg.experts > 0 &&
	    (r = moe_rank_sums(&c, st.n_targets, norm, err)))
		return r;
	if (c.aux_w > 0)
		st.aux_loss = moe_aux_finish(&c);
	step_loss(&c, layer_x(&c, m->cfg.layers), scale, 1, NULL, NULL);
	if ((r = step_rest(&c, &st, scale, err)))
		return r;
	*stats = st;
	return 0;
}

static int pref_check(const taco_model *m, const taco_batch *b,
		      const taco_pref *p, taco_err *err)
{
	if (!m->sched.pref)
		return taco_err_set(err, -EINVAL,
				    "a preference step needs the schedule's "
				    "pref set");
	if (b->B % 2)
		return taco_err_set(err, -EINVAL,
				    "a preference batch has two rows a pair, "
				    "not %d rows",
				    b->B);
	if (!p || !p->ref || p->norm_pairs < 1 || !(p->beta > 0) ||
	    !isfinite(p->beta))
		return taco_err_set(err, -EINVAL,
				    "a preference step needs beta > 0, the "
				    "reference log-probabilities and the "
				    "step's pair count");
	return 0;
}

/* After the log-sum-exp: the rows' log-probabilities from the tokens'
 * losses (read back: the step waits here once more), the pairs' losses,
 * and each token's factor on the gradient uploaded. Returns the summed
 * loss of the pairs (in pair order). */
static double pref_weigh(step_ctx *c, const taco_pref *p, double *logp,
			 double *pair)
{
	taco_work *w = c->w;
	int B = w->s.B, T = w->s.T, P = B / 2;
	double *dlogp = pair + P, sum = 0;

	c->o->download(w->ce_row_host, w->ce_row,
		       (size_t)w->s.N * sizeof(double));
	for (int row = 0; row < B; row++) {
		double l = 0;
		for (int t = 0; t < T; t++)
			l += w->ce_row_host[(size_t)row * T + t];
		logp[row] = -l;
	}
	taco_pref_loss(p->beta, logp, p->ref, P, p->norm_pairs, pair, dlogp);
	/* ce_grad's softmax - onehot is -d(logp)/d(logits) */
	for (int row = 0; row < B; row++)
		for (int t = 0; t < T; t++)
			w->ce_scale_host[(size_t)row * T + t] =
			    (float)-dlogp[row];
	c->o->upload(w->ce_scale, w->ce_scale_host,
		     (size_t)w->s.N * sizeof(float));
	for (int i = 0; i < P; i++)
		sum += pair[i];
	return sum;
}

int taco_model_step_pref(taco_model *m, const taco_batch *b, const taco_pref *p,
			 const taco_grad_sink *sink, taco_step_stats *stats,
			 double *logp, taco_err *err)
{
	taco_step_stats st;
	step_ctx c;
	double *rows = NULL, loss_sum;
	int r;

	if ((r = pref_check(m, b, p, err)))
		return r;
	/* the rows' log-probabilities [B], then the pairs' losses [B / 2] and
	 * the derivatives by the rows' log-probabilities [B] */
	rows = malloc((size_t)b->B * 3 * sizeof(double));
	if (!rows)
		return taco_err_set(err, -ENOMEM, "out of memory");
	if ((r = begin(m, b, &c, &st, err)))
		goto out;
	c.sink = sink;
	forward_all(&c);
	step_loss_lse(&c, layer_x(&c, m->cfg.layers), NULL, c.w->ce_row);
	loss_sum = pref_weigh(&c, p, rows, rows + b->B);
	c.row_scale = c.w->ce_scale;
	step_loss_grad(&c, 1.0f);
	if ((r = step_rest(&c, &st, 1.0f, err)))
		goto out;
	st.loss_sum = loss_sum;
	st.loss = loss_sum / (double)(b->B / 2);
	if (logp)
		memcpy(logp, rows, (size_t)b->B * sizeof(double));
	*stats = st;
out:
	free(rows);
	return r;
}

/* Forward only, with the loss statistics (and logits or row losses: with
 * work_rows the step buffers' own, w->ce_row, of a preference schedule). */
static int forward_loss(taco_model *m, const taco_batch *b, taco_step_stats *st,
			float *host_logits, double *row_loss, int work_rows,
			taco_err *err)
{
	step_ctx c;
	int r;

	if ((r = begin(m, b, &c, st, err)))
		return r;
	if (work_rows)
		row_loss = c.w->ce_row;
	forward_all(&c);
	stream_end(&c);
	step_loss(&c, layer_x(&c, m->cfg.layers), 0.0f, 0, host_logits,
		  row_loss);
	finish_stats(&c, st);
	return 0;
}

int taco_model_eval(taco_model *m, const taco_batch *b, taco_step_stats *stats,
		    taco_err *err)
{
	taco_step_stats st;
	int r;

	if ((r = forward_loss(m, b, &st, NULL, NULL, 0, err)))
		return r;
	*stats = st;
	return 0;
}

int taco_model_logits(taco_model *m, const taco_batch *b, float *logits,
		      taco_err *err)
{
	taco_step_stats st;

	return forward_loss(m, b, &st, logits, NULL, 0, err);
}

int taco_model_score(taco_model *m, const taco_batch *b, double *row_sums,
		     taco_err *err)
{
	taco_step_stats st;
	size_t N = (size_t)b->B * b->T;
	/* a preference schedule has the buffers (the reference pass and
	 * DPO's evaluations: nothing the plan does not count) */
	int own = !m->sched.pref;
	double *dev = NULL, *host = NULL;
	int r;

	if (own) {
		dev = m->ops->alloc(N * sizeof(double));
		host = malloc(N * sizeof(double));
		if (!dev || !host) {
			r = taco_err_set(err, -ENOMEM, "out of memory");
			goto out;
		}
	}
	if ((r = forward_loss(m, b, &st, NULL, dev, !own, err)))
		goto out;
	if (!own) {
		dev = m->work->ce_row;
		host = m->work->ce_row_host;
	}
	m->ops->download(host, dev, N * sizeof(double));
	for (int row = 0; row < b->B; row++) {
		double sum = 0;
		for (int t = 0; t < b->T; t++)
			sum += host[(size_t)row * b->T + t];
		row_sums[row] = -sum;
	}
	r = 0;
out:
	if (own && dev)
		m->ops->free(dev, N * sizeof(double));
	if (own)
		free(host);
	return r;
}
