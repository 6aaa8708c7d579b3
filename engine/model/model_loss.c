/* model_loss.c: the LM head and the loss in vocabulary chunks, and the
 * embedding's gradient.
 *
 * Pass 1 runs the logits chunk by chunk (Vc vocabulary rows x Nc tokens)
 * into each token's running max, sum of exponentials, target logit and
 * argmax: the log-sum-exp over the whole vocabulary, without the [N, V]
 * logits. Pass 2 recomputes each chunk's logits, forms its gradient from
 * the log-sum-exp, adds its share of the hidden-state gradient (in fp32)
 * and, for an untied head, produces the chunk's rows of the head's
 * gradient (one row stream, so neither the logits nor the [V, H] gradient
 * ever exists whole). A tied head shares its tensor with the embedding,
 * whose gradient exists only after backward: pass 3 then recomputes the
 * chunks once more and adds the embedding's rows to each. An untied
 * embedding's gradient is made only for the rows the batch holds: the other
 * rows' gradient is 0, which is what the optimizer assumes of rows it is not
 * given. */
#include <stdlib.h>
#include <string.h>

#include "layer.h"

static tk_ce_rows rows_at(const step_ctx *c, int r0)
{
	taco_work *w = c->w;

	return (tk_ce_rows){
	    w->ce_mx + r0,  w->ce_se + r0,
	    w->ce_tl + r0,  w->ce_am + r0,
	    w->ce_lse + r0, c->row_scale ? c->row_scale + r0 : NULL};
}

static const void *head_weight(step_ctx *c)
{
	return step_weight_of(c, c->m->lm_head, c->w->w_head);
}

/* logits[n, vc] (f32) = hf[r0 .., H] head[v0 .., H]^T */
static void chunk_logits(step_ctx *c, const void *head, int v0, int vc, int r0,
			 int n)
{
	int H = c->m->cfg.proj_dim;

	c->o->matmul(0, 1, n, vc, H, 1.0f, c->dt,
		     step_at(c->w->hf, (size_t)r0 * H, c->es), H,
		     step_at(head, (size_t)v0 * H, c->es), H, 0.0f, TK_F32,
		     c->w->logits, vc);
}

/* The chunk's gradient of the logits, in the activation dtype. */
static void *chunk_dlogits(step_ctx *c, int v0, int vc, int r0, int n,
			   float grad_scale)
{
	taco_work *w = c->w;
	void *dl = c->dt == TK_F32 ? (void *)w->logits : w->dlogits;
	tk_ce_rows s = rows_at(c, r0);

	c->o->ce_grad(c->dt, dl, vc, w->logits, vc, &s, w->targets + r0, n, v0,
		      vc, grad_scale);
	return dl;
}

static void download_logits(step_ctx *c, float *host, int v0, int vc, int r0,
			    int n)
{
	int V = c->m->cfg.vocab;

	for (int i = 0; i < n; i++)
		c->o->download(host + (size_t)(r0 + i) * V + v0,
			       c->w->logits + (size_t)i * vc,
			       (size_t)vc * sizeof(float));
}

/* x_last [N, hidden] -> hf [N, proj_dim]: the final norm (RMSNorm,
 * LayerNorm, or none: OPT's post-LN) and OPT's project_out. */
void step_final_fwd(step_ctx *c, const void *x_last, int N)
{
	const taco_model *m = c->m;
	taco_work *w = c->w;
	int H = m->cfg.hidden, P = m->cfg.proj_dim;
	void *normed = m->proj_out >= 0 ? w->hn : w->hf;

	if (m->final_norm >= 0)
		lp_norm_fwd(c, normed, w->mean_f, w->rstd_f, x_last,
			    step_weight_of(c, m->final_norm, w->w_final),
			    step_weight_of(c, m->final_norm_bias, w->w_top), N,
			    H);
	else if (m->proj_out >= 0)
		normed = (void *)x_last;
	else
		c->o->convert(w->hf, c->dt, x_last, c->dt, (size_t)N * H);
	if (m->proj_out >= 0)
		lp_linear_fwd(c, w->hf, normed,
			      step_weight_of(c, m->proj_out, w->w_top), NULL, N,
			      H, P);
}

void step_final_bwd(step_ctx *c, const void *x_last)
{
	const taco_model *m = c->m;
	taco_work *w = c->w;
	int N = w->s.N, H = m->cfg.hidden, P = m->cfg.proj_dim;
	const void *dy = m->cfg.tie_embeddings ? w->dtie : w->hf;

	if (m->proj_out >= 0) {
		/* d(normed) = dy W_out, the weight's last use, into dx (free
		 * till the norm's backward writes it); then W_out's gradient
		 * from dy and normed */
		const void *normed = m->final_norm >= 0 ? w->hn : x_last;
		lp_linear_bwd_x(c, w->dx, dy,
				step_weight_of(c, m->proj_out, w->w_top), N, H,
				P, 0.0f);
		grad_linear_cols(c, m->proj_out, dy, P, normed, H, N, P, H, 0);
		dy = w->dx;
	}
	if (m->final_norm >= 0)
		lp_norm_bwd(c, m->final_norm, m->final_norm_bias, NULL, w->dx,
			    dy, x_last,
			    step_weight_of(c, m->final_norm, w->w_final),
			    w->mean_f, w->rstd_f, N, H);
	else if (m->proj_out < 0)
		c->o->convert(w->dx, c->dt, dy, c->dt, (size_t)N * H);
}

void step_loss_lse(step_ctx *c, const void *x_last, float *host_logits,
		   double *row_loss)
{
	const tk_ops *o = c->o;
	const taco_config *cf = &c->m->cfg;
	taco_work *w = c->w;
	int N = w->s.N, V = cf->vocab;
	int Vc = w->s.Vc, Nc = w->s.Nc;
	const void *head;
	tk_ce_rows s = rows_at(c, 0);

	step_final_fwd(c, x_last, N);
	head = head_weight(c);
	for (int v0 = 0; v0 < V; v0 += Vc) {
		int vc = V - v0 < Vc ? V - v0 : Vc;
		for (int r0 = 0; r0 < N; r0 += Nc) {
			int n = N - r0 < Nc ? N - r0 : Nc;
			tk_ce_rows sr = rows_at(c, r0);
			chunk_logits(c, head, v0, vc, r0, n);
			if (host_logits)
				download_logits(c, host_logits, v0, vc, r0, n);
			o->ce_stats(&sr, w->logits, vc, w->targets + r0, n, v0,
				    vc);
		}
	}
	/* the sums stay on the backend until the step ends (step_read_sums) */
	o->ce_finish(&s, w->targets, N, w->ce_sums, row_loss);
}

void step_loss_grad(step_ctx *c, float grad_scale)
{
	const tk_ops *o = c->o;
	const taco_config *cf = &c->m->cfg;
	taco_work *w = c->w;
	int N = w->s.N, H = cf->proj_dim, V = cf->vocab;
	int Vc = w->s.Vc, Nc = w->s.Nc, head_id = c->m->lm_head;
	int untied = !cf->tie_embeddings && grad_wanted(c, head_id);
	const void *head = head_weight(c);

	/* the hidden state's gradient (f32, summed over the chunks), and an
	 * untied head's rows */
	for (int v0 = 0; v0 < V && !c->err; v0 += Vc) {
		int vc = V - v0 < Vc ? V - v0 : Vc;
		float *dense = untied ? grad_dense(c, head_id) : NULL;
		float *g = dense    ? dense + (size_t)v0 * H
			   : untied ? grad_block(c)
				    : NULL;
		for (int r0 = 0; r0 < N; r0 += Nc) {
			int n = N - r0 < Nc ? N - r0 : Nc;
			void *dl;
			chunk_logits(c, head, v0, vc, r0, n);
			dl = chunk_dlogits(c, v0, vc, r0, n, grad_scale);
			o->matmul(0, 0, n, H, vc, 1.0f, c->dt, dl, vc,
				  step_at(head, (size_t)v0 * H, c->es), H,
				  v0 ? 1.0f : 0.0f, TK_F32,
				  w->dh + (size_t)r0 * H, H);
			if (untied)
				o->matmul(1, 0, vc, H, n, 1.0f, c->dt, dl, vc,
					  step_at(w->hf, (size_t)r0 * H, c->es),
					  H, dense || r0 ? 1.0f : 0.0f, TK_F32,
					  g, H);
		}
		if (untied && !dense)
			grad_emit_rows(c, head_id, g, H, v0, vc, NULL, v0 == 0,
				       v0 + vc >= V);
	}
	/* the hidden state's gradient in the activation dtype; hf is spent
	 * unless a tied head needs it again (then dtie takes it) */
	o->convert(cf->tie_embeddings ? w->dtie : w->hf, c->dt, w->dh, TK_F32,
		   (size_t)N * H);
}

void step_loss(step_ctx *c, const void *x_last, float grad_scale, int want_grad,
	       float *host_logits, double *row_loss)
{
	step_loss_lse(c, x_last, host_logits, row_loss);
	if (want_grad)
		step_loss_grad(c, grad_scale);
}

/* Untied embedding, part mode: row blocks of the rows the batch holds
 * (w->uniq, with token i's index among them in w->rows: made when the
 * batch was uploaded, so nothing waits for the host here). */
static int embedding_rows(step_ctx *c, int id)
{
	taco_work *w = c->w;
	int N = w->s.N, H = c->m->cfg.proj_dim, U = w->n_uniq;
	int rb = taco_gemm_down((int)(w->s.gblock / (size_t)H));

	for (int u0 = 0; u0 < U && !c->err; u0 += rb) {
		int n = U - u0 < rb ? U - u0 : rb;
		float *g = grad_block(c);
		c->o->memset0(g, (size_t)n * H * sizeof(float));
		c->o->embedding_bwd(c->dt, g, c->de, w->rows, N, H, u0, n);
		grad_emit_rows(c, id, g, H, 0, n, w->uniq + u0, u0 == 0,
			       u0 + n >= U);
	}
	return 0;
}

/* Rows [v0, v0 + vc) of a tied head's gradient into g [vc, H]: added to g
 * (dense) or overwriting it, over every chunk of tokens. */
static void head_rows(step_ctx *c, const void *head, int v0, int vc, float *g,
		      int add, float grad_scale)
{
	taco_work *w = c->w;
	int N = w->s.N, Nc = w->s.Nc, H = c->m->cfg.proj_dim;

	for (int r0 = 0; r0 < N; r0 += Nc) {
		int n = N - r0 < Nc ? N - r0 : Nc;
		void *dl;
		chunk_logits(c, head, v0, vc, r0, n);
		dl = chunk_dlogits(c, v0, vc, r0, n, grad_scale);
		c->o->matmul(1, 0, vc, H, n, 1.0f, c->dt, dl, vc,
			     step_at(w->hf, (size_t)r0 * H, c->es), H,
			     add || r0 ? 1.0f : 0.0f, TK_F32, g, H);
	}
}

/* Tied head and embedding, part mode: pass 3, one row block per chunk. */
static int tied_rows(step_ctx *c, int id, float grad_scale)
{
	const taco_config *cf = &c->m->cfg;
	taco_work *w = c->w;
	int N = w->s.N, H = cf->proj_dim, V = cf->vocab, Vc = w->s.Vc;
	const void *head = head_weight(c);

	for (int v0 = 0; v0 < V && !c->err; v0 += Vc) {
		int vc = V - v0 < Vc ? V - v0 : Vc;
		float *g = grad_block(c);
		head_rows(c, head, v0, vc, g, 0, grad_scale);
		/* the embedding's share: the tokens in [v0, v0 + vc) */
		c->o->embedding_bwd(c->dt, g, c->de, step_emb_ids(c), N, H, v0,
				    vc);
		grad_emit_rows(c, id, g, H, v0, vc, NULL, v0 == 0,
			       v0 + vc >= V);
	}
	return 0;
}

/* Tied, dense mode: the head's rows into the dense buffer. */
static void tied_dense(step_ctx *c, float *dense, float grad_scale)
{
	int V = c->m->cfg.vocab, Vc = c->w->s.Vc, H = c->m->cfg.proj_dim;
	const void *head = head_weight(c);

	for (int v0 = 0; v0 < V; v0 += Vc)
		head_rows(c, head, v0, V - v0 < Vc ? V - v0 : Vc,
			  dense + (size_t)v0 * H, 1, grad_scale);
}

void step_embedding_grad(step_ctx *c, float grad_scale)
{
	const taco_config *cf = &c->m->cfg;
	taco_work *w = c->w;
	int id = c->m->embed, N = w->s.N, H = cf->proj_dim, r = 0;
	float *dense;

	if (!grad_wanted(c, id))
		return;
	if ((dense = grad_dense(c, id))) {
		if (cf->tie_embeddings)
			tied_dense(c, dense, grad_scale);
		c->o->embedding_bwd(c->dt, dense, c->de, step_emb_ids(c), N, H,
				    0, cf->vocab);
		return;
	}
	r = cf->tie_embeddings ? tied_rows(c, id, grad_scale)
			       : embedding_rows(c, id);
	if (r && !c->err)
		c->err = r;
}
