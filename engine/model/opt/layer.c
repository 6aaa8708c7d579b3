/* opt/layer.c: the decoder layer of OPTForCausalLM (modeling_opt.py):
 * LayerNorm with bias, multi-head attention without rotary (positions are
 * learned, added to the embeddings), biases everywhere, fc1 / ReLU (or
 * GELU) / fc2, residual dropout after both branches.
 *
 * Pre-LN (do_layer_norm_before):
 *   x_mid = x + drop(attn(LN1(x)));  out = x_mid + drop(mlp(LN2(x_mid)))
 * Post-LN (opt-350m):
 *   x_mid = x + drop(attn(x));  b = LN1(x_mid)  (in ln2, the MLP's input)
 *   x_pre = b + drop(mlp(b));   out = LN2(x_pre)
 * Post-LN's backward needs x_pre, so its recompute runs the whole layer. */
#include <math.h>

#include "model/layer.h"

/* q, k, v from h [N, H], attention, the output projection into x_mid. */
static void opt_attn_fwd(step_ctx *c, int l, taco_layer_acts *a,
			 const void *W[TACO_L_COUNT], const void *h)
{
	const taco_config *cf = &c->m->cfg;
	const taco_work *w = c->w;
	int N = w->s.N, H = cf->hidden, hd = cf->head_dim;

	lp_linear_fwd(c, a->q, h, W[TACO_L_Q], W[TACO_L_Q_BIAS], N, H, H);
	lp_linear_fwd(c, a->k, h, W[TACO_L_K], W[TACO_L_K_BIAS], N, H, H);
	lp_linear_fwd(c, a->v, h, W[TACO_L_V], W[TACO_L_V_BIAS], N, H, H);
	lp_attention_fwd(c, l, a, cf->heads, cf->heads, hd, 0);
	lp_linear_fwd(c, a->x_mid, a->att, W[TACO_L_O], W[TACO_L_O_BIAS], N, H,
		      H);
}

/* full: the whole layer into out (out NULL: a recompute, which for post-LN
 * still needs x_pre and LN2's statistics); else stop at the MLP's input. */
static void opt_layer_fwd(step_ctx *c, int l, const void *x, void *out,
			  int full)
{
	const taco_config *cf = &c->m->cfg;
	taco_work *w = c->w;
	taco_layer_acts *a = lp_acts(c, l);
	const void *W[TACO_L_COUNT];
	int N = w->s.N, H = cf->hidden;
	size_t NH = (size_t)N * H;

	lp_weights(c, l, W);
	if (cf->norm_before) {
		lp_norm_fwd(c, a->ln1, a->mean1, a->rstd1, x,
			    W[TACO_L_ATTN_NORM], W[TACO_L_ATTN_NORM_BIAS], N,
			    H);
		opt_attn_fwd(c, l, a, W, a->ln1);
	} else {
		opt_attn_fwd(c, l, a, W, x);
	}
	lp_dropout(c, a->x_mid, NH, l, 0);
	c->o->add(c->dt, a->x_mid, x, NH);
	if (cf->norm_before) {
		lp_norm_fwd(c, a->ln2, a->mean2, a->rstd2, a->x_mid,
			    W[TACO_L_MLP_NORM], W[TACO_L_MLP_NORM_BIAS], N, H);
		if (!full)
			return;
		lp_mlp_fwd(c, a, W, a->ln2, out);
		lp_dropout(c, out, NH, l, 1);
		c->o->add(c->dt, out, a->x_mid, NH);
		return;
	}
	/* post-LN: the attention's norm after its residual */
	lp_norm_fwd(c, a->ln2, a->mean1, a->rstd1, a->x_mid,
		    W[TACO_L_ATTN_NORM], W[TACO_L_ATTN_NORM_BIAS], N, H);
	lp_mlp_fwd(c, a, W, a->ln2, a->x_pre);
	lp_dropout(c, a->x_pre, NH, l, 1);
	c->o->add(c->dt, a->x_pre, a->ln2, NH);
	/* a recompute keeps LN2's statistics; its output is layer l + 1's
	 * input, already there: dtmp takes it */
	lp_norm_fwd(c, out ? out : w->dtmp, a->mean2, a->rstd2, a->x_pre,
		    W[TACO_L_MLP_NORM], W[TACO_L_MLP_NORM_BIAS], N, H);
}

static void opt_fwd(step_ctx *c, int l, const void *x, void *out)
{
	opt_layer_fwd(c, l, x, out, 1);
}

static void opt_recompute(step_ctx *c, int l, const void *x)
{
	opt_layer_fwd(c, l, x, NULL, !c->m->cfg.norm_before);
}

/* The attention branch backward from d (the gradient of its output, after
 * the dropout's mask) with h its input: the gradient of h into w->dtmp. */
static void opt_attn_bwd(step_ctx *c, int l, taco_layer_acts *a,
			 const void *W[TACO_L_COUNT], const void *d,
			 const void *h)
{
	const taco_config *cf = &c->m->cfg;
	taco_work *w = c->w;
	const int *id = c->m->layer[l];
	int N = w->s.N, H = cf->hidden, hd = cf->head_dim;

	lp_linear_bwd_x(c, w->datt, d, W[TACO_L_O], N, H, H, 0.0f);
	grad_linear_cols(c, id[TACO_L_O], d, H, a->att, H, N, H, H, 0);
	lp_bias_grad(c, id[TACO_L_O_BIAS], d, N, H);
	c->o->attention_bwd(c->dt, w->dq, w->dk, w->dv, w->datt, a->att, a->lse,
			    a->q, a->k, a->v, w->pos, w->s.B, w->s.T, cf->heads,
			    cf->heads, hd, 0, 1.0f / sqrtf((float)hd));
	lp_linear_bwd_x(c, w->dtmp, w->dq, W[TACO_L_Q], N, H, H, 0.0f);
	lp_linear_bwd_x(c, w->dtmp, w->dk, W[TACO_L_K], N, H, H, 1.0f);
	lp_linear_bwd_x(c, w->dtmp, w->dv, W[TACO_L_V], N, H, H, 1.0f);
	grad_linear_cols(c, id[TACO_L_Q], w->dq, H, h, H, N, H, H, 0);
	lp_bias_grad(c, id[TACO_L_Q_BIAS], w->dq, N, H);
	grad_linear_cols(c, id[TACO_L_K], w->dk, H, h, H, N, H, H, 0);
	lp_bias_grad(c, id[TACO_L_K_BIAS], w->dk, N, H);
	grad_linear_cols(c, id[TACO_L_V], w->dv, H, h, H, N, H, H, 0);
	lp_bias_grad(c, id[TACO_L_V_BIAS], w->dv, N, H);
}

static void opt_bwd(step_ctx *c, int l, const void *x)
{
	const taco_config *cf = &c->m->cfg;
	taco_work *w = c->w;
	taco_layer_acts *a = lp_acts(c, l);
	const int *id = c->m->layer[l];
	const void *W[TACO_L_COUNT];
	int N = w->s.N, H = cf->hidden;
	size_t NH = (size_t)N * H;

	lp_weights(c, l, W);
	if (cf->norm_before) {
		lp_mlp_bwd(c, l, a, W, a->ln2, lp_dropped(c, w->dx, l, 1),
			   w->dtmp);
		/* ln2 is spent: it takes LN2's input gradient */
		lp_norm_bwd(c, id[TACO_L_MLP_NORM], id[TACO_L_MLP_NORM_BIAS],
			    w->dx, a->ln2, w->dtmp, a->x_mid,
			    W[TACO_L_MLP_NORM], a->mean2, a->rstd2, N, H);
		opt_attn_bwd(c, l, a, W, lp_dropped(c, w->dx, l, 0), a->ln1);
		lp_norm_bwd(c, id[TACO_L_ATTN_NORM], id[TACO_L_ATTN_NORM_BIAS],
			    w->dx, a->ln1, w->dtmp, x, W[TACO_L_ATTN_NORM],
			    a->mean1, a->rstd1, N, H);
		return;
	}
	/* post-LN: through LN2 in place, the MLP and its residual, LN1 in
	 * place, then the attention and its residual */
	lp_norm_bwd(c, id[TACO_L_MLP_NORM], id[TACO_L_MLP_NORM_BIAS], NULL,
		    w->dx, w->dx, a->x_pre, W[TACO_L_MLP_NORM], a->mean2,
		    a->rstd2, N, H);
	lp_mlp_bwd(c, l, a, W, a->ln2, lp_dropped(c, w->dx, l, 1), w->dtmp);
	c->o->add(c->dt, w->dx, w->dtmp, NH);
	lp_norm_bwd(c, id[TACO_L_ATTN_NORM], id[TACO_L_ATTN_NORM_BIAS], NULL,
		    w->dx, w->dx, a->x_mid, W[TACO_L_ATTN_NORM], a->mean1,
		    a->rstd1, N, H);
	opt_attn_bwd(c, l, a, W, lp_dropped(c, w->dx, l, 0), x);
	c->o->add(c->dt, w->dx, w->dtmp, NH);
}

const taco_layer_ops taco_opt_layer = {opt_fwd, opt_recompute, opt_bwd};
