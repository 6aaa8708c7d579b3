/* model_step.c: forward, chunked loss and backward with activation
 * checkpointing. Forward keeps each layer's input; backward recomputes one
 * layer at a time and hands every weight gradient to the caller as soon as it
 * is complete. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model_work.h"

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

/* fp32 view of a tensor: the tensor itself, or its conversion into scratch. */
static const float *weight(taco_model *m, int id, float *scratch)
{
	const taco_tensor *t;

	if (id < 0)
		return NULL;
	t = &m->tensors[id];
	if (t->dtype == TK_F32)
		return t->data;
	m->ops->to_f32(scratch, t->data, t->dtype, t->numel);
	return scratch;
}

/* y[N, out] = x[N, in] W[out, in]^T (+ b[out]) */
static void linear_fwd(const tk_ops *o, float *y, const float *x,
		       const float *W, const float *b, int N, int in, int out)
{
	o->matmul(0, 1, N, out, in, 1.0f, x, in, W, in, 0.0f, y, out);
	if (b)
		o->bias_fwd(y, b, N, out);
}

/* dx[N, in] = beta * dx + dy[N, out] W[out, in] */
static void linear_bwd_x(const tk_ops *o, float *dx, const float *dy,
			 const float *W, int N, int in, int out, float beta)
{
	o->matmul(0, 0, N, in, out, 1.0f, dy, out, W, in, beta, dx, in);
}

/* Upload tokens, targets, positions and the rope tables for this batch. */
static int prepare_batch(taco_model *m, const taco_batch *b, taco_err *err)
{
	taco_work *w = m->work;
	int N = b->B * b->T, half = m->cfg.head_dim / 2;
	int32_t *pos = NULL;
	float *cs = NULL;

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

static void layer_weights(taco_model *m, int l, const float *W[TACO_L_COUNT])
{
	for (int s = 0; s < TACO_L_COUNT; s++)
		W[s] = weight(m, m->layer[l][s], m->work->wl[s]);
}

/* One decoder layer: out[N, H] from x[N, H], keeping the intermediates of
 * the work buffers for backward. */
static void forward_layer(taco_model *m, int l, const float *x, float *out,
			  const float *W[TACO_L_COUNT])
{
	const tk_ops *o = m->ops;
	const taco_config *c = &m->cfg;
	taco_work *w = m->work;
	taco_layer_acts *a = &w->acts[w->n_acts > 1 ? l : 0];
	int B = w->B, T = w->T, N = B * T, H = c->hidden, I = c->intermediate;
	int hd = c->head_dim, D = c->heads * hd, Dkv = c->kv_heads * hd;
	float *qd = c->qk_norm ? a->q_pre : a->q;
	float *kd = c->qk_norm ? a->k_pre : a->k;

	layer_weights(m, l, W);
	o->rmsnorm_fwd(a->ln1, a->rstd1, x, W[TACO_L_ATTN_NORM], N, H,
		       c->rms_eps);
	linear_fwd(o, qd, a->ln1, W[TACO_L_Q], W[TACO_L_Q_BIAS], N, H, D);
	linear_fwd(o, kd, a->ln1, W[TACO_L_K], W[TACO_L_K_BIAS], N, H, Dkv);
	linear_fwd(o, a->v, a->ln1, W[TACO_L_V], W[TACO_L_V_BIAS], N, H, Dkv);
	if (c->qk_norm) {
		o->rmsnorm_fwd(a->q, a->rstd_q, a->q_pre, W[TACO_L_Q_NORM],
			       N * c->heads, hd, c->rms_eps);
		o->rmsnorm_fwd(a->k, a->rstd_k, a->k_pre, W[TACO_L_K_NORM],
			       N * c->kv_heads, hd, c->rms_eps);
	}
	o->rope_fwd(a->q, w->rope_cos, w->rope_sin, w->pos, N, c->heads, hd);
	o->rope_fwd(a->k, w->rope_cos, w->rope_sin, w->pos, N, c->kv_heads, hd);
	o->attention_fwd(a->att, a->lse, a->q, a->k, a->v, w->pos, B, T,
			 c->heads, c->kv_heads, hd, c->sliding_window,
			 1.0f / sqrtf((float)hd));
	linear_fwd(o, a->x_mid, a->att, W[TACO_L_O], W[TACO_L_O_BIAS], N, D, H);
	o->add(a->x_mid, x, (size_t)N * H);
	o->rmsnorm_fwd(a->ln2, a->rstd2, a->x_mid, W[TACO_L_MLP_NORM], N, H,
		       c->rms_eps);
	linear_fwd(o, a->gate, a->ln2, W[TACO_L_GATE], NULL, N, H, I);
	linear_fwd(o, a->up, a->ln2, W[TACO_L_UP], NULL, N, H, I);
	o->swiglu_fwd(a->act, a->gate, a->up, (size_t)N * I);
	linear_fwd(o, out, a->act, W[TACO_L_DOWN], NULL, N, I, H);
	o->add(out, a->x_mid, (size_t)N * H);
}

typedef struct grad_sink {
	taco_grad_fn fn;
	void *ctx;
	int err;
} grad_sink;

static void emit(taco_model *m, grad_sink *g, int id, float *grad)
{
	if (g->err || !g->fn || id < 0)
		return;
	g->err = g->fn(g->ctx, m, id, grad);
}

/* dW[out, in] = dy[N, out]^T x[N, in], handed to the sink. */
static void weight_grad(taco_model *m, grad_sink *g, int id, const float *dy,
			const float *x, int N, int in, int out)
{
	float *gw = m->work->g_layer;

	if (id < 0)
		return;
	m->ops->matmul(1, 0, out, in, N, 1.0f, dy, out, x, in, 0.0f, gw, in);
	emit(m, g, id, gw);
}

static void bias_grad(taco_model *m, grad_sink *g, int id, const float *dy,
		      int N, int C)
{
	float *gw = m->work->g_layer;

	if (id < 0)
		return;
	m->ops->memset0(gw, (size_t)C * sizeof(float));
	m->ops->bias_bwd(gw, dy, N, C);
	emit(m, g, id, gw);
}

/* RMSNorm backward: dx[n, H] from dout; the weight gradient goes to the
 * sink. */
static void norm_bwd(taco_model *m, grad_sink *g, int id, float *dx,
		     const float *dout, const float *x, const float *wt,
		     const float *rstd, int n, int H)
{
	float *gw = m->work->g_layer;

	m->ops->memset0(gw, (size_t)H * sizeof(float));
	m->ops->rmsnorm_bwd(dx, gw, dout, x, wt, rstd, n, H);
	emit(m, g, id, gw);
}

/* Backward of layer l after its recompute; w->dx holds the gradient of the
 * layer output on entry and of its input on return. Each weight is used for
 * the input gradient before its own gradient is emitted. */
static void backward_layer(taco_model *m, int l, const float *x,
			   const float *W[TACO_L_COUNT], grad_sink *g)
{
	const tk_ops *o = m->ops;
	const taco_config *c = &m->cfg;
	taco_work *w = m->work;
	taco_layer_acts *a = &w->acts[w->n_acts > 1 ? l : 0];
	const int *id = m->layer[l];
	int B = w->B, T = w->T, N = B * T, H = c->hidden, I = c->intermediate;
	int hd = c->head_dim, D = c->heads * hd, Dkv = c->kv_heads * hd;
	float *dqf = w->dq, *dkf = w->dk;

	/* MLP */
	linear_bwd_x(o, w->dact, w->dx, W[TACO_L_DOWN], N, I, H, 0.0f);
	weight_grad(m, g, id[TACO_L_DOWN], w->dx, a->act, N, I, H);
	o->swiglu_bwd(w->dgate, w->dup, w->dact, a->gate, a->up, (size_t)N * I);
	linear_bwd_x(o, w->dtmp, w->dgate, W[TACO_L_GATE], N, H, I, 0.0f);
	linear_bwd_x(o, w->dtmp, w->dup, W[TACO_L_UP], N, H, I, 1.0f);
	weight_grad(m, g, id[TACO_L_GATE], w->dgate, a->ln2, N, H, I);
	weight_grad(m, g, id[TACO_L_UP], w->dup, a->ln2, N, H, I);
	/* ln2 is free now: it takes the norm's input gradient. */
	norm_bwd(m, g, id[TACO_L_MLP_NORM], a->ln2, w->dtmp, a->x_mid,
		 W[TACO_L_MLP_NORM], a->rstd2, N, H);
	o->add(w->dx, a->ln2, (size_t)N * H);

	/* attention */
	linear_bwd_x(o, w->datt, w->dx, W[TACO_L_O], N, D, H, 0.0f);
	weight_grad(m, g, id[TACO_L_O], w->dx, a->att, N, D, H);
	bias_grad(m, g, id[TACO_L_O_BIAS], w->dx, N, H);
	o->attention_bwd(w->dq, w->dk, w->dv, w->datt, a->att, a->lse, a->q,
			 a->k, a->v, w->pos, B, T, c->heads, c->kv_heads, hd,
			 c->sliding_window, 1.0f / sqrtf((float)hd));
	o->rope_bwd(w->dq, w->rope_cos, w->rope_sin, w->pos, N, c->heads, hd);
	o->rope_bwd(w->dk, w->rope_cos, w->rope_sin, w->pos, N, c->kv_heads,
		    hd);
	if (c->qk_norm) {
		norm_bwd(m, g, id[TACO_L_Q_NORM], w->dq2, w->dq, a->q_pre,
			 W[TACO_L_Q_NORM], a->rstd_q, N * c->heads, hd);
		norm_bwd(m, g, id[TACO_L_K_NORM], w->dk2, w->dk, a->k_pre,
			 W[TACO_L_K_NORM], a->rstd_k, N * c->kv_heads, hd);
		dqf = w->dq2;
		dkf = w->dk2;
	}
	linear_bwd_x(o, w->dtmp, dqf, W[TACO_L_Q], N, H, D, 0.0f);
	linear_bwd_x(o, w->dtmp, dkf, W[TACO_L_K], N, H, Dkv, 1.0f);
	linear_bwd_x(o, w->dtmp, w->dv, W[TACO_L_V], N, H, Dkv, 1.0f);
	weight_grad(m, g, id[TACO_L_Q], dqf, a->ln1, N, H, D);
	bias_grad(m, g, id[TACO_L_Q_BIAS], dqf, N, D);
	weight_grad(m, g, id[TACO_L_K], dkf, a->ln1, N, H, Dkv);
	bias_grad(m, g, id[TACO_L_K_BIAS], dkf, N, Dkv);
	weight_grad(m, g, id[TACO_L_V], w->dv, a->ln1, N, H, Dkv);
	bias_grad(m, g, id[TACO_L_V_BIAS], w->dv, N, Dkv);
	norm_bwd(m, g, id[TACO_L_ATTN_NORM], a->ln1, w->dtmp, x,
		 W[TACO_L_ATTN_NORM], a->rstd1, N, H);
	o->add(w->dx, a->ln1, (size_t)N * H);
}

/* Embedding and every layer; the last layer's output is xs[L]. */
static void forward_all(taco_model *m)
{
	const taco_config *c = &m->cfg;
	taco_work *w = m->work;
	size_t NH = (size_t)w->B * w->T * c->hidden;
	const float *W[TACO_L_COUNT];
	const float *emb = weight(m, m->embed, m->work->w_head);

	/* A tied head shares w_head with the embedding: convert it once. */
	m->ops->embedding_fwd(w->xs, emb, w->tokens, w->B * w->T, c->hidden);
	for (int l = 0; l < c->layers; l++)
		forward_layer(m, l, w->xs + l * NH, w->xs + (l + 1) * NH, W);
}

/* Final norm, then logits chunk by chunk: loss statistics, and when
 * want_grad the head gradient (into g_head) and the gradient of the final
 * norm output (into dtmp). host_logits, if set, receives all logits;
 * row_loss, if set (backend memory, one double per token), each token's
 * loss. */
static void loss_chunks(taco_model *m, float grad_scale, int want_grad,
			taco_step_stats *st, float *host_logits,
			double *row_loss)
{
	const tk_ops *o = m->ops;
	const taco_config *c = &m->cfg;
	taco_work *w = m->work;
	int N = w->B * w->T, H = c->hidden, V = c->vocab;
	int C = taco_work_chunk_rows(m, N);
	const float *wf = weight(m, m->final_norm, w->w_final);
	const float *wh = weight(m, m->lm_head, w->w_head);
	double loss = 0;
	int64_t correct = 0;

	o->rmsnorm_fwd(w->hf, w->rstd_f, w->xs + (size_t)c->layers * N * H, wf,
		       N, H, c->rms_eps);
	if (want_grad)
		o->memset0(w->g_head, (size_t)V * H * sizeof(float));
	for (int r0 = 0; r0 < N; r0 += C) {
		int n = N - r0 < C ? N - r0 : C, nc = 0;
		double part = 0;
		float *hrows = w->hf + (size_t)r0 * H;

		o->matmul(0, 1, n, V, H, 1.0f, hrows, H, wh, H, 0.0f, w->logits,
			  V);
		if (host_logits)
			o->download(host_logits + (size_t)r0 * V, w->logits,
				    (size_t)n * V * sizeof(float));
		o->cross_entropy(w->logits, w->targets + r0, n, V,
				 want_grad ? grad_scale : 0.0f, &part, &nc,
				 row_loss ? row_loss + r0 : NULL);
		loss += part;
		correct += nc;
		if (!want_grad)
			continue;
		if (grad_scale == 0.0f) /* no targets: zero gradient */
			o->memset0(w->logits, (size_t)n * V * sizeof(float));
		o->matmul(0, 0, n, H, V, 1.0f, w->logits, V, wh, H, 0.0f,
			  w->dtmp + (size_t)r0 * H, H);
		o->matmul(1, 0, V, H, n, 1.0f, w->logits, V, hrows, H, 1.0f,
			  w->g_head, H);
	}
	st->loss_sum = loss;
	st->n_correct = correct;
}

static int begin(taco_model *m, const taco_batch *b, taco_step_stats *st,
		 taco_err *err)
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
	st->n_targets = n;
	return 0;
}

static void finish_stats(taco_step_stats *st)
{
	st->loss = st->n_targets ? st->loss_sum / (double)st->n_targets : 0.0;
}

int taco_model_step(taco_model *m, const taco_batch *b, int64_t norm_targets,
		    taco_grad_fn fn, void *ctx, taco_step_stats *stats,
		    taco_err *err)
{
	const taco_config *c = &m->cfg;
	taco_step_stats st;
	grad_sink g = {fn, ctx, 0};
	const float *W[TACO_L_COUNT];
	taco_work *w;
	size_t NH;
	int64_t norm;
	int r, N, H = c->hidden;

	if ((r = begin(m, b, &st, err)))
		return r;
	w = m->work;
	N = b->B * b->T;
	NH = (size_t)N * H;
	norm = norm_targets > 0 ? norm_targets : st.n_targets;
	forward_all(m);
	loss_chunks(m, norm ? 1.0f / (float)norm : 0.0f, 1, &st, NULL, NULL);
	if (!c->tie_embeddings)
		emit(m, &g, m->lm_head, w->g_head);
	norm_bwd(m, &g, m->final_norm, w->dx, w->dtmp,
		 w->xs + (size_t)c->layers * NH,
		 weight(m, m->final_norm, w->w_final), w->rstd_f, N, H);
	for (int l = c->layers - 1; l >= 0 && !g.err; l--) {
		const float *x = w->xs + (size_t)l * NH;
		/* The last layer's intermediates are still in place from the
		 * forward pass; kept activations need no recompute at all. */
		if (w->n_acts > 1 || l == c->layers - 1)
			layer_weights(m, l, W);
		else
			forward_layer(m, l, x, w->xs + (size_t)(l + 1) * NH, W);
		backward_layer(m, l, x, W, &g);
	}
	if (!g.err) {
		if (!c->tie_embeddings)
			m->ops->memset0(w->g_head,
					(size_t)c->vocab * H * sizeof(float));
		m->ops->embedding_bwd(w->g_head, w->dx, w->tokens, N, H);
		emit(m, &g, m->embed, w->g_head);
	}
	if (g.err)
		return taco_err_set(err, g.err, "gradient consumer failed (%d)",
				    g.err);
	finish_stats(&st);
	*stats = st;
	return 0;
}

int taco_model_eval(taco_model *m, const taco_batch *b, taco_step_stats *stats,
		    taco_err *err)
{
	taco_step_stats st;
	int r;

	if ((r = begin(m, b, &st, err)))
		return r;
	forward_all(m);
	loss_chunks(m, 0.0f, 0, &st, NULL, NULL);
	finish_stats(&st);
	*stats = st;
	return 0;
}

int taco_model_logits(taco_model *m, const taco_batch *b, float *logits,
		      taco_err *err)
{
	taco_step_stats st;
	int r;

	if ((r = begin(m, b, &st, err)))
		return r;
	forward_all(m);
	loss_chunks(m, 0.0f, 0, &st, logits, NULL);
	return 0;
}

int taco_model_score(taco_model *m, const taco_batch *b, double *row_sums,
		     taco_err *err)
{
	taco_step_stats st;
	size_t N = (size_t)b->B * b->T;
	double *dev = NULL, *host = NULL;
	int r;

	if ((r = begin(m, b, &st, err)))
		return r;
	dev = m->ops->alloc(N * sizeof(double));
	host = malloc(N * sizeof(double));
	if (!dev || !host) {
		r = taco_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	forward_all(m);
	loss_chunks(m, 0.0f, 0, &st, NULL, dev);
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
