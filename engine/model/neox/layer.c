/* neox/layer.c: the decoder layer of GPTNeoXForCausalLM
 * (modeling_gpt_neox.py): LayerNorm with bias; the fused query_key_value
 * projection, laid out per head (q, k, v of head 0, then head 1, ...),
 * split into q, k and v; rotary over the first rotary_dim dims of each
 * head (half rotation within them); exact GELU; residual dropout after
 * both branches (hidden_dropout).
 *
 * Parallel residual (use_parallel_residual, Pythia):
 *   out = x + drop(attn(LN1(x))) + drop(mlp(LN2(x)))
 *   (x_mid holds the attention branch alone)
 * Sequential:
 *   x_mid = x + drop(attn(LN1(x)));  out = x_mid + drop(mlp(LN2(x_mid))) */
#include <math.h>

#include "model/layer.h"

static void neox_layer_fwd(step_ctx *c, int l, const void *x, void *out,
			   int full)
{
	const tk_ops *o = c->o;
	const taco_config *cf = &c->m->cfg;
	taco_work *w = c->w;
	taco_layer_acts *a = lp_acts(c, l);
	const void *W[TACO_L_COUNT];
	int N = w->s.N, H = cf->hidden, hd = cf->head_dim, nh = cf->heads;
	int D = nh * hd, dt = c->dt;
	size_t NH = (size_t)N * H;

	lp_weights(c, l, W);
	lp_norm_fwd(c, a->ln1, a->mean1, a->rstd1, x, W[TACO_L_ATTN_NORM],
		    W[TACO_L_ATTN_NORM_BIAS], N, H);
	lp_linear_fwd(c, a->qkv, a->ln1, W[TACO_L_QKV], W[TACO_L_QKV_BIAS], N,
		      H, 3 * D);
	o->qkv_split(dt, a->q, a->k, a->v, a->qkv, N, nh, hd);
	o->qknorm_rope_fwd(dt, a->q, NULL, a->q, NULL, w->rope_cos, w->rope_sin,
			   w->pos, N, nh, hd, cf->rotary_dim, 0.0f);
	o->qknorm_rope_fwd(dt, a->k, NULL, a->k, NULL, w->rope_cos, w->rope_sin,
			   w->pos, N, nh, hd, cf->rotary_dim, 0.0f);
	lp_attention_fwd(c, l, a, nh, nh, hd, 0);
	lp_linear_fwd(c, a->x_mid, a->att, W[TACO_L_O], W[TACO_L_O_BIAS], N, D,
		      H);
	lp_dropout(c, a->x_mid, NH, l, 0);
	if (!cf->parallel_residual)
		o->add(dt, a->x_mid, x, NH);
	lp_norm_fwd(c, a->ln2, a->mean2, a->rstd2,
		    cf->parallel_residual ? x : a->x_mid, W[TACO_L_MLP_NORM],
		    W[TACO_L_MLP_NORM_BIAS], N, H);
	if (!full)
		return;
	lp_mlp_fwd(c, a, W, a->ln2, out);
	lp_dropout(c, out, NH, l, 1);
	o->add(dt, out, a->x_mid, NH);
	if (cf->parallel_residual)
		o->add(dt, out, x, NH);
}

static void neox_fwd(step_ctx *c, int l, const void *x, void *out)
{
	neox_layer_fwd(c, l, x, out, 1);
}

static void neox_recompute(step_ctx *c, int l, const void *x)
{
	neox_layer_fwd(c, l, x, NULL, 0);
}

/* The attention branch from d (its output's gradient, masked): weights'
 * gradients to the sink, the gradient of ln1 into w->dtmp. */
static void neox_attn_bwd(step_ctx *c, int l, taco_layer_acts *a,
			  const void *W[TACO_L_COUNT], const void *d)
{
	const tk_ops *o = c->o;
	const taco_config *cf = &c->m->cfg;
	taco_work *w = c->w;
	const int *id = c->m->layer[l];
	int N = w->s.N, H = cf->hidden, hd = cf->head_dim, nh = cf->heads;
	int D = nh * hd, dt = c->dt;

	lp_linear_bwd_x(c, w->datt, d, W[TACO_L_O], N, D, H, 0.0f);
	grad_linear_cols(c, id[TACO_L_O], d, H, a->att, D, N, H, D, 0);
	lp_bias_grad(c, id[TACO_L_O_BIAS], d, N, H);
	o->attention_bwd(dt, w->dq, w->dk, w->dv, w->datt, a->att, a->lse, a->q,
			 a->k, a->v, w->pos, w->s.B, w->s.T, nh, nh, hd, 0,
			 1.0f / sqrtf((float)hd));
	o->qknorm_rope_bwd(dt, w->dq, NULL, w->dq, NULL, NULL, NULL,
			   w->rope_cos, w->rope_sin, w->pos, N, nh, hd,
			   cf->rotary_dim);
	o->qknorm_rope_bwd(dt, w->dk, NULL, w->dk, NULL, NULL, NULL,
			   w->rope_cos, w->rope_sin, w->pos, N, nh, hd,
			   cf->rotary_dim);
	o->qkv_merge(dt, w->dqkv, w->dq, w->dk, w->dv, N, nh, hd);
	/* the weight's last use before its gradient goes out */
	lp_linear_bwd_x(c, w->dtmp, w->dqkv, W[TACO_L_QKV], N, H, 3 * D, 0.0f);
	grad_linear_cols(c, id[TACO_L_QKV], w->dqkv, 3 * D, a->ln1, H, N, 3 * D,
			 H, 0);
	lp_bias_grad(c, id[TACO_L_QKV_BIAS], w->dqkv, N, 3 * D);
}

static void neox_bwd(step_ctx *c, int l, const void *x)
{
	const taco_config *cf = &c->m->cfg;
	taco_work *w = c->w;
	taco_layer_acts *a = lp_acts(c, l);
	const int *id = c->m->layer[l];
	const void *W[TACO_L_COUNT];
	int N = w->s.N, H = cf->hidden;

	lp_weights(c, l, W);
	lp_mlp_bwd(c, l, a, W, a->ln2, lp_dropped(c, w->dx, l, 1), w->dtmp);
	if (cf->parallel_residual) {
		/* both branches read the output's gradient: LN2's share of
		 * x's gradient waits in ln2 (spent) until the attention's
		 * branch has read w->dx */
		lp_norm_bwd(c, id[TACO_L_MLP_NORM], id[TACO_L_MLP_NORM_BIAS],
			    NULL, a->ln2, w->dtmp, x, W[TACO_L_MLP_NORM],
			    a->mean2, a->rstd2, N, H);
		neox_attn_bwd(c, l, a, W, lp_dropped(c, w->dx, l, 0));
		c->o->add(c->dt, w->dx, a->ln2, (size_t)N * H);
	} else {
		lp_norm_bwd(c, id[TACO_L_MLP_NORM], id[TACO_L_MLP_NORM_BIAS],
			    w->dx, a->ln2, w->dtmp, a->x_mid,
			    W[TACO_L_MLP_NORM], a->mean2, a->rstd2, N, H);
		neox_attn_bwd(c, l, a, W, lp_dropped(c, w->dx, l, 0));
	}
	/* d(ln1) in dtmp; ln1 is spent */
	lp_norm_bwd(c, id[TACO_L_ATTN_NORM], id[TACO_L_ATTN_NORM_BIAS], w->dx,
		    a->ln1, w->dtmp, x, W[TACO_L_ATTN_NORM], a->mean1, a->rstd1,
		    N, H);
}

const taco_layer_ops taco_neox_layer = {neox_fwd, neox_recompute, neox_bwd};
