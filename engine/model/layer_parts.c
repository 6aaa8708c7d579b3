/* layer_parts.c: the pieces the families' layers share (layer.h). */
#include <math.h>

#include "layer.h"

const taco_layer_ops *step_layer_ops(const taco_model *m)
{
	switch (m->cfg.family) {
	case TACO_FAMILY_OPT:
		return &taco_opt_layer;
	case TACO_FAMILY_NEOX:
		return &taco_neox_layer;
	case TACO_FAMILY_QWEN3_MOE:
		return &taco_qwen3_moe_layer;
	case TACO_FAMILY_GPT_OSS:
		return &taco_gpt_oss_layer;
	case TACO_FAMILY_PHI3:
		return &taco_phi3_layer;
	default:
		return &taco_llama_layer;
	}
}

void lp_linear_fwd(step_ctx *c, void *y, const void *x, const void *W,
		   const void *b, int N, int in, int out)
{
	if (b)
		c->o->linear_bias(N, out, in, c->dt, x, in, W, in, b, c->dt, y,
				  out);
	else
		c->o->matmul(0, 1, N, out, in, 1.0f, c->dt, x, in, W, in, 0.0f,
			     c->dt, y, out);
}

void lp_linear_bwd_x(step_ctx *c, void *dx, const void *dy, const void *W,
		     int N, int in, int out, float beta)
{
	c->o->matmul(0, 0, N, in, out, 1.0f, c->dt, dy, out, W, in, beta, c->dt,
		     dx, in);
}

void lp_attention_fwd(step_ctx *c, int l, taco_layer_acts *a, int nh, int nkv,
		      int hd, int window)
{
	const taco_work *w = c->w;
	float scale = 1.0f / sqrtf((float)hd);
	size_t es = c->es, at;

	if (!w->s.gen) {
		c->o->attention_fwd(c->dt, a->att, a->lse, a->q, a->k, a->v,
				    w->pos, w->s.B, w->s.T, nh, nkv, hd, window,
				    scale);
		return;
	}
	/* layer l's part of the cache */
	at = (size_t)l * w->s.rows * w->s.ctx * nkv * hd * es;
	c->o->kv_store(c->dt, (char *)w->kv_k + at, (char *)w->kv_v + at, a->k,
		       a->v, w->seq, w->pos, w->s.N, nkv, hd, w->s.ctx);
	c->o->attention_decode(c->dt, a->att, a->lse, a->q,
			       (char *)w->kv_k + at, (char *)w->kv_v + at,
			       w->seq, w->pos, w->s.N, nh, nkv, hd, w->s.ctx,
			       window, scale);
}

void lp_weights(step_ctx *c, int l, const void *W[TACO_L_COUNT])
{
	for (int s = 0; s < TACO_L_COUNT; s++)
		W[s] = step_weight_of(c, c->m->layer[l][s], c->w->wl[s]);
}

taco_layer_acts *lp_acts(step_ctx *c, int l)
{
	return &c->w->acts[c->w->n_acts > 1 ? l : 0];
}

int lp_block(step_ctx *c, int b, int *n)
{
	int j0 = b * c->w->s.Ic, I = c->m->cfg.intermediate;

	*n = I - j0 < c->w->s.Ic ? I - j0 : c->w->s.Ic;
	return j0;
}

float *lp_norm_grad(step_ctx *c, int id, int H)
{
	float *g = grad_whole_begin(c, id);

	if (!g) {
		g = grad_block(c);
		c->o->memset0(g, (size_t)H * sizeof(float));
	}
	return g;
}

void lp_bias_grad(step_ctx *c, int id, const void *dy, int N, int C)
{
	float *g = grad_whole_begin(c, id);

	if (g)
		c->o->bias_bwd(c->dt, g, dy, N, C);
	grad_whole_end(c, id);
}

void lp_norm_fwd(step_ctx *c, void *out, float *mean, float *rstd,
		 const void *x, const void *w, const void *b, int n, int H)
{
	const taco_config *cf = &c->m->cfg;

	if (cf->layer_norm)
		c->o->layernorm_fwd(c->dt, out, mean, rstd, x, w, b, n, H,
				    cf->rms_eps);
	else
		c->o->rmsnorm_fwd(c->dt, out, rstd, x, w, n, H, cf->rms_eps);
}

void lp_norm_bwd(step_ctx *c, int wid, int bid, void *dres, void *tmp,
		 const void *dout, const void *x, const void *w,
		 const float *mean, const float *rstd, int n, int H)
{
	float *gw, *gb;

	grad_pair_begin(c, wid, c->m->cfg.layer_norm ? bid : -1, (size_t)H, &gw,
			&gb);
	if (!c->m->cfg.layer_norm) {
		if (dres)
			c->o->rmsnorm_bwd_add(c->dt, dres, gw, dout, x, w, rstd,
					      n, H);
		else
			c->o->rmsnorm_bwd(c->dt, tmp, gw, dout, x, w, rstd, n,
					  H);
	} else {
		c->o->layernorm_bwd(c->dt, tmp, gw, gb, dout, x, w, mean, rstd,
				    n, H);
		if (dres)
			c->o->add(c->dt, dres, tmp, (size_t)n * H);
	}
	grad_pair_end(c, wid, c->m->cfg.layer_norm ? bid : -1, gw, gb);
}

void lp_dropout(step_ctx *c, void *x, size_t n, int l, int site)
{
	const taco_model *m = c->m;
	uint64_t stream;

	/* training only: evaluation and scoring run without a sink */
	if (!(m->dropout > 0) || !c->sink)
		return;
	stream = (c->b->rng * (uint64_t)m->cfg.layers + (uint64_t)l) * 2u +
		 (uint64_t)site;
	c->o->dropout(c->dt, x, n, m->dropout, m->dropout_seed, stream);
}

const void *lp_dropped(step_ctx *c, const void *dy, int l, int site)
{
	size_t n = (size_t)c->w->s.N * c->m->cfg.hidden;

	if (!(c->m->dropout > 0) || !c->sink)
		return dy;
	c->o->convert(c->w->ddrop, c->dt, dy, c->dt, n);
	lp_dropout(c, c->w->ddrop, n, l, site);
	return c->w->ddrop;
}

static int act_of(const taco_config *cf)
{
	return cf->act == TACO_ACT_RELU ? TK_ACT_RELU : TK_ACT_GELU;
}

/* fc1 rows and the activation of block b, from in. */
static void fc1_block(step_ctx *c, taco_layer_acts *a,
		      const void *W[TACO_L_COUNT], const void *in, int b)
{
	int n, j0 = lp_block(c, b, &n), N = c->w->s.N, H = c->m->cfg.hidden;
	const void *bias = W[TACO_L_UP_BIAS];

	lp_linear_fwd(c, a->up, in,
		      step_at(W[TACO_L_UP], (size_t)j0 * H, c->es),
		      bias ? step_at(bias, (size_t)j0, c->es) : NULL, N, H, n);
	c->o->act_fwd(c->dt, act_of(&c->m->cfg), a->act, a->up, (size_t)N * n);
}

void lp_mlp_fwd(step_ctx *c, taco_layer_acts *a, const void *W[TACO_L_COUNT],
		const void *in, void *out)
{
	int N = c->w->s.N, H = c->m->cfg.hidden, I = c->m->cfg.intermediate;

	for (int b = 0; b < c->w->s.chunks; b++) {
		int n, j0 = lp_block(c, b, &n);
		const void *Wd = step_at(W[TACO_L_DOWN], (size_t)j0, c->es);
		fc1_block(c, a, W, in, b);
		/* out (+)= act W_down[:, j0 : j0 + n]^T, fc2's bias with the
		 * first block */
		if (b == 0 && W[TACO_L_DOWN_BIAS])
			c->o->linear_bias(N, H, n, c->dt, a->act, n, Wd, I,
					  W[TACO_L_DOWN_BIAS], c->dt, out, H);
		else
			c->o->matmul(0, 1, N, H, n, 1.0f, c->dt, a->act, n, Wd,
				     I, b ? 1.0f : 0.0f, c->dt, out, H);
	}
}

void lp_mlp_bwd(step_ctx *c, int l, taco_layer_acts *a,
		const void *W[TACO_L_COUNT], const void *in, const void *dout,
		void *din)
{
	const tk_ops *o = c->o;
	const int *id = c->m->layer[l];
	taco_work *w = c->w;
	int N = w->s.N, H = c->m->cfg.hidden, I = c->m->cfg.intermediate;
	int nb = w->s.chunks, dt = c->dt, ub = id[TACO_L_UP_BIAS];
	float *gub = NULL;

	if (ub >= 0 && grad_wanted(c, ub)) {
		/* fc1's bias [I] sums over every block: its dense buffer, or
		 * the work's, handed over after the last block */
		gub = grad_dense(c, ub);
		if (!gub) {
			gub = w->gbias;
			o->memset0(gub, (size_t)I * sizeof(float));
		}
	}
	for (int b = 0; b < nb && !c->err; b++) {
		int n, j0 = lp_block(c, b, &n);
		if (!w->s.keep)
			fc1_block(c, a, W, in, b);
		/* d(act) = dout W_down[:, block] */
		o->matmul(0, 0, N, n, H, 1.0f, dt, dout, H,
			  step_at(W[TACO_L_DOWN], (size_t)j0, c->es), I, 0.0f,
			  dt, w->dact, n);
		grad_linear_cols(c, id[TACO_L_DOWN], dout, H, a->act, n, N, H,
				 n, j0);
		/* d(fc1 output) over the pre-activation in up */
		o->act_bwd(dt, act_of(&c->m->cfg), a->up, w->dact, a->up,
			   (size_t)N * n);
		o->matmul(0, 0, N, H, n, 1.0f, dt, a->up, n,
			  step_at(W[TACO_L_UP], (size_t)j0 * H, c->es), H,
			  b ? 1.0f : 0.0f, dt, din, H);
		if (gub)
			o->bias_bwd(dt, gub + j0, a->up, N, n);
		grad_linear_rows(c, id[TACO_L_UP], a->up, n, in, H, N, n, H, j0,
				 b == 0, b == nb - 1);
	}
	if (gub && gub == w->gbias && !c->err) {
		float *g = grad_block(c);
		o->convert(g, TK_F32, gub, TK_F32, (size_t)I);
		grad_pair_end(c, ub, -1, g, NULL);
	}
	lp_bias_grad(c, id[TACO_L_DOWN_BIAS], dout, N, H);
}
