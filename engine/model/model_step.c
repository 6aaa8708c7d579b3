/* model_step.c: a step's order: forward, the chunked loss, backward with
 * activation checkpointing. Forward keeps each layer's input (on the device,
 * or copied to host memory while the next layer runs); backward recomputes
 * one layer at a time (prefetching the next input) and hands every
 * gradient piece to the sink as soon as it exists. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "step.h"

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

const void *step_weight(step_ctx *c, int id, float *scratch)
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

/* The batch's distinct tokens, ascending, into w->uniq, and each token's
 * index among them into w->rows (the untied embedding's gradient rows). */
static int upload_distinct(taco_model *m, const taco_batch *b, taco_err *err)
{
	taco_work *w = m->work;
	int N = b->B * b->T, V = m->cfg.vocab, U = 0;
	int32_t *uniq = malloc((size_t)N * 4), *map = malloc((size_t)N * 4);
	int32_t *seen = malloc((size_t)V * 4);
	int r = 0;

	if (!uniq || !map || !seen) {
		r = taco_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	for (int v = 0; v < V; v++)
		seen[v] = -1;
	for (int i = 0; i < N; i++)
		seen[b->tokens[i]] = 0;
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
	int N = b->B * b->T, half = m->cfg.head_dim / 2, r;
	int32_t *pos = NULL;
	float *cs = NULL;

	if ((r = upload_distinct(m, b, err)))
		return r;
	m->ops->upload(w->tokens, b->tokens, (size_t)N * 4);
	m->ops->upload(w->targets, b->targets, (size_t)N * 4);
	if (b->pos) {
		m->ops->upload(w->pos, b->pos, (size_t)N * 4);
	} else {
		pos = malloc((size_t)N * 4);
		if (!pos)
			return taco_err_set(err, -ENOMEM, "out of memory");
		for (int i = 0; i < N; i++)
			pos[i] = i % b->T;
		m->ops->upload(w->pos, pos, (size_t)N * 4);
		free(pos);
	}
	cs = malloc((size_t)b->T * half * 2 * sizeof(float));
	if (!cs)
		return taco_err_set(err, -ENOMEM, "out of memory");
	/* As Hugging Face: the angle is an fp32 product, then cos/sin. */
	for (int p = 0; p < b->T; p++) {
		for (int i = 0; i < half; i++) {
			float a = (float)p * m->inv_freq[i];
			cs[(size_t)p * half + i] = (float)cos((double)a);
			cs[(size_t)(b->T + p) * half + i] =
			    (float)sin((double)a);
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

/* Embedding and every layer; the last layer's output is layer_x(L). With
 * offload, input l goes to host memory while layer l runs: the wait before
 * it covers the copies up to l - 1, so the slot layer l writes (that of
 * input l - 2) is free. */
static void forward_all(step_ctx *c)
{
	const taco_config *cf = &c->m->cfg;
	taco_work *w = c->w;
	size_t NH = (size_t)w->s.N * cf->hidden;
	const void *emb = step_weight(c, c->m->embed, w->w_head);

	c->o->embedding_fwd(c->dt, layer_x(c, 0), emb, w->tokens, w->s.N,
			    cf->hidden);
	for (int l = 0; l < cf->layers; l++) {
		if (w->s.offload) {
			c->o->copy_wait();
			c->o->copy_async(host_x(c, l), layer_x(c, l),
					 NH * c->es, 1);
		}
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
		if (w->s.offload) {
			c->o->copy_wait();
			if (l - 1 >= 0 && l - 1 <= L - TACO_OFFLOAD_SLOTS)
				c->o->copy_async(layer_x(c, l - 1),
						 host_x(c, l - 1), NH * c->es,
						 0);
		}
		if (!w->s.keep)
			c->layer->recompute(c, l, x);
		c->layer->bwd(c, l, x);
	}
}

int taco_model_step(taco_model *m, const taco_batch *b, int64_t norm_targets,
		    const taco_grad_sink *sink, taco_step_stats *stats,
		    taco_err *err)
{
	const taco_config *cf = &m->cfg;
	taco_step_stats st;
	step_ctx c;
	taco_work *w;
	int64_t norm;
	float scale;
	int r, fid = m->final_norm;
	float *g;

	if ((r = begin(m, b, &c, &st, err)))
		return r;
	c.sink = sink;
	w = c.w;
	norm = norm_targets > 0 ? norm_targets : st.n_targets;
	scale = norm ? 1.0f / (float)norm : 0.0f;
	forward_all(&c);
	step_loss(&c, layer_x(&c, cf->layers), scale, 1, NULL, NULL);
	g = grad_whole_begin(&c, fid);
	if (!g) {
		g = grad_block(&c);
		m->ops->memset0(g, (size_t)cf->hidden * sizeof(float));
	}
	m->ops->rmsnorm_bwd(
	    c.dt, w->dx, g, cf->tie_embeddings ? w->dtie : w->hf,
	    layer_x(&c, cf->layers), step_weight(&c, fid, w->w_final),
	    w->rstd_f, w->s.N, cf->hidden);
	grad_whole_end(&c, fid);
	backward_all(&c);
	if (!c.err)
		step_embedding_grad(&c, scale);
	grad_drain(&c);
	if (c.err)
		return taco_err_set(err, c.err, "gradient consumer failed (%d)",
				    c.err);
	finish_stats(&c, &st);
	*stats = st;
	return 0;
}

/* Forward only, with the loss statistics (and logits or row losses). */
static int forward_loss(taco_model *m, const taco_batch *b, taco_step_stats *st,
			float *host_logits, double *row_loss, taco_err *err)
{
	step_ctx c;
	int r;

	if ((r = begin(m, b, &c, st, err)))
		return r;
	forward_all(&c);
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

	if ((r = forward_loss(m, b, &st, NULL, NULL, err)))
		return r;
	*stats = st;
	return 0;
}

int taco_model_logits(taco_model *m, const taco_batch *b, float *logits,
		      taco_err *err)
{
	taco_step_stats st;

	return forward_loss(m, b, &st, logits, NULL, err);
}

int taco_model_score(taco_model *m, const taco_batch *b, double *row_sums,
		     taco_err *err)
{
	taco_step_stats st;
	size_t N = (size_t)b->B * b->T;
	double *dev = NULL, *host = NULL;
	int r;

	dev = m->ops->alloc(N * sizeof(double));
	host = malloc(N * sizeof(double));
	if (!dev || !host) {
		r = taco_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	if ((r = forward_loss(m, b, &st, NULL, dev, err)))
		goto out;
	m->ops->download(host, dev, N * sizeof(double));
	for (int row = 0; row < b->B; row++) {
		double sum = 0;
		for (int t = 0; t < b->T; t++)
			sum += host[(size_t)row * b->T + t];
		row_sums[row] = -sum;
	}
	r = 0;
out:
	if (dev)
		m->ops->free(dev, N * sizeof(double));
	free(host);
	return r;
}
