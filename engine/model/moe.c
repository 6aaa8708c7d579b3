/* moe.c: a mixture of experts' MLP (layer.h), the part the families with
 * experts share: the router, the dispatch of each token to its k experts,
 * one GEMM per expert over its tokens, and the weighted sum back.
 *
 * Shapes: N tokens, H hidden, E experts, k a token, M = N * k slots,
 * Im = moe_intermediate. The slots are laid out by expert (a->order), so
 * that expert e's rows are a contiguous run [off_e, off_e + n_e) of xg,
 * eg, eu, ea and ey. The engine sizes the GEMMs from the counts n_e, which
 * it reads back once per routing (E integers): the one wait for the device
 * inside a step that a mixture of experts adds. */
#include "model/layer.h"

int moe_expert_id(const step_ctx *c, int l, int e, int x)
{
	return c->m
	    ->expert[((size_t)l * c->m->cfg.experts + e) * TACO_X_COUNT + x];
}

const int32_t *moe_counts(const step_ctx *c, int l)
{
	return c->w->moe_count + (size_t)l * c->m->cfg.experts;
}

void moe_idle_grad(step_ctx *c, int l, int e, int x)
{
	const taco_work *w = c->w;

	if (w->s.ranks > 1 &&
	    w->moe_gcount[(size_t)l * c->m->cfg.experts + e] > 0)
		grad_zero(c, moe_expert_id(c, l, e, x));
}

/* The router: Qwen3-MoE's softmax then top k, or with a bias (gpt-oss)
 * the top k logits then their softmax. */
static int router_mode(const taco_config *cf)
{
	return cf->router_bias ? TK_MOE_TOPK_SOFTMAX : TK_MOE_SOFTMAX_TOPK;
}

/* Router, routing, sort and gather; the counts into layer l's row of
 * w->moe_count. */
static void moe_route(step_ctx *c, int l, taco_layer_acts *a,
		      const void *W[TACO_L_COUNT], const void *in)
{
	const tk_ops *o = c->o;
	const taco_config *cf = &c->m->cfg;
	taco_work *w = c->w;
	int N = w->s.N, H = cf->hidden, E = cf->experts, k = cf->top_k;

	/* logits in the model's dtype (a bf16 model's router rounds them,
	 * as transformers' Linear does, its bias added first), then f32 */
	void *lg = c->dt == TK_F32 ? (void *)a->rlog : (void *)w->moe_dlog;

	if (W[TACO_L_ROUTER_BIAS])
		o->linear_bias(N, E, H, c->dt, in, H, W[TACO_L_ROUTER], H,
			       W[TACO_L_ROUTER_BIAS], c->dt, lg, E);
	else
		o->matmul(0, 1, N, E, H, 1.0f, c->dt, in, H, W[TACO_L_ROUTER],
			  H, 0.0f, c->dt, lg, E);
	if (c->dt != TK_F32)
		o->to_f32(a->rlog, w->moe_dlog, c->dt, (size_t)N * E);
	o->moe_route(router_mode(cf), cf->norm_topk, c->dt, a->rlog, N, E, k,
		     a->topi, a->topw);
	o->moe_sort(a->topi, N, E, k, a->order, a->inv, w->moe_cnt);
	o->download(w->moe_count + (size_t)l * E, w->moe_cnt,
		    (size_t)E * sizeof(int32_t));
	o->moe_gather(c->dt, a->xg, in, a->order, w->s.M, k, H);
}

/* Qwen3-MoE's experts: each expert's gate and up over its slots, SwiGLU,
 * then its down projection into ey. */
static void swiglu_experts_fwd(step_ctx *c, int l, taco_layer_acts *a)
{
	const tk_ops *o = c->o;
	const taco_config *cf = &c->m->cfg;
	taco_work *w = c->w;
	int H = cf->hidden, Im = cf->moe_intermediate, dt = c->dt;
	size_t es = c->es, off = 0;
	const int32_t *cnt = moe_counts(c, l);

	for (int e = 0; e < cf->experts; e++) {
		int n = cnt[e];
		if (!n)
			continue;
		o->matmul(0, 1, n, Im, H, 1.0f, dt, step_at(a->xg, off * H, es),
			  H,
			  step_weight_of(c, moe_expert_id(c, l, e, TACO_X_GATE),
					 w->w_exp),
			  H, 0.0f, dt, step_at(a->eg, off * Im, es), Im);
		o->matmul(0, 1, n, Im, H, 1.0f, dt, step_at(a->xg, off * H, es),
			  H,
			  step_weight_of(c, moe_expert_id(c, l, e, TACO_X_UP),
					 w->w_exp),
			  H, 0.0f, dt, step_at(a->eu, off * Im, es), Im);
		off += (size_t)n;
	}
	o->swiglu_fwd(dt, a->ea, a->eg, a->eu, (size_t)w->s.M * Im);
	off = 0;
	for (int e = 0; e < cf->experts; e++) {
		int n = cnt[e];
		if (!n)
			continue;
		o->matmul(0, 1, n, H, Im, 1.0f, dt,
			  step_at(a->ea, off * Im, es), Im,
			  step_weight_of(c, moe_expert_id(c, l, e, TACO_X_DOWN),
					 w->w_exp),
			  Im, 0.0f, dt, step_at(a->ey, off * H, es), H);
		off += (size_t)n;
	}
}

void moe_fwd(step_ctx *c, const moe_experts_ops *x, int l, taco_layer_acts *a,
	     const void *W[TACO_L_COUNT], const void *in, void *out)
{
	const taco_config *cf = &c->m->cfg;

	moe_route(c, l, a, W, in);
	if (c->aux_w > 0) {
		c->o->moe_prob_sum(a->rlog, c->w->s.N, cf->experts,
				   c->w->moe_psum);
		c->o->download(c->w->moe_psum_h + (size_t)l * cf->experts,
			       c->w->moe_psum,
			       (size_t)cf->experts * sizeof(float));
	}
	x->fwd(c, l, a);
	c->o->moe_combine(c->dt, out, a->ey, a->inv, a->topw, c->w->s.N,
			  cf->top_k, cf->hidden);
}

/* Qwen3-MoE's experts' backward: from w->moe_dy, the slots' output
 * gradient, to their input gradient (over it), the down, gate and up
 * projections' gradients to the sink. */
static void swiglu_experts_bwd(step_ctx *c, int l, taco_layer_acts *a)
{
	const tk_ops *o = c->o;
	const taco_config *cf = &c->m->cfg;
	taco_work *w = c->w;
	int H = cf->hidden, Im = cf->moe_intermediate, E = cf->experts;
	int dt = c->dt;
	size_t es = c->es, off = 0;
	const int32_t *cnt = moe_counts(c, l);

	/* down: d(act) of each slot, the down projections' gradients */
	for (int e = 0; e < E && !c->err; e++) {
		int n = cnt[e];
		const void *dy = step_at(w->moe_dy, off * H, es);
		if (!n) {
			moe_idle_grad(c, l, e, TACO_X_DOWN);
			continue;
		}
		o->matmul(0, 0, n, Im, H, 1.0f, dt, dy, H,
			  step_weight_of(c, moe_expert_id(c, l, e, TACO_X_DOWN),
					 w->w_exp),
			  Im, 0.0f, dt, step_at(w->moe_dact, off * Im, es), Im);
		grad_linear_cols(c, moe_expert_id(c, l, e, TACO_X_DOWN), dy, H,
				 step_at(a->ea, off * Im, es), Im, n, H, Im, 0);
		off += (size_t)n;
	}
	o->swiglu_bwd(dt, a->eg, a->eu, w->moe_dact, a->eg, a->eu,
		      (size_t)w->s.M * Im);
	/* gate and up: the slots' input gradient (over moe_dy, spent) and
	 * the projections' gradients */
	off = 0;
	for (int e = 0; e < E && !c->err; e++) {
		int n = cnt[e];
		void *dxg = step_at(w->moe_dy, off * H, es);
		const void *dg = step_at(a->eg, off * Im, es);
		const void *du = step_at(a->eu, off * Im, es);
		const void *xg = step_at(a->xg, off * H, es);
		if (!n) {
			moe_idle_grad(c, l, e, TACO_X_GATE);
			moe_idle_grad(c, l, e, TACO_X_UP);
			continue;
		}
		o->matmul(0, 0, n, H, Im, 1.0f, dt, dg, Im,
			  step_weight_of(c, moe_expert_id(c, l, e, TACO_X_GATE),
					 w->w_exp),
			  H, 0.0f, dt, dxg, H);
		o->matmul(0, 0, n, H, Im, 1.0f, dt, du, Im,
			  step_weight_of(c, moe_expert_id(c, l, e, TACO_X_UP),
					 w->w_exp),
			  H, 1.0f, dt, dxg, H);
		grad_linear_cols(c, moe_expert_id(c, l, e, TACO_X_GATE), dg, Im,
				 xg, H, n, Im, H, 0);
		grad_linear_cols(c, moe_expert_id(c, l, e, TACO_X_UP), du, Im,
				 xg, H, n, Im, H, 0);
		off += (size_t)n;
	}
}

const moe_experts_ops moe_swiglu_experts = {swiglu_experts_fwd,
					    swiglu_experts_bwd};

void moe_bwd(step_ctx *c, const moe_experts_ops *x, int l, taco_layer_acts *a,
	     const void *W[TACO_L_COUNT], const void *in, const void *dout,
	     void *din)
{
	const tk_ops *o = c->o;
	const taco_config *cf = &c->m->cfg;
	const int *id = c->m->layer[l];
	taco_work *w = c->w;
	int N = w->s.N, H = cf->hidden, E = cf->experts, k = cf->top_k;
	int dt = c->dt;
	void *dlog = dt == TK_F32 ? (void *)w->moe_dlog : w->moe_dlog_dt;

	if (!w->s.keep) {
		moe_route(c, l, a, W, in);
		x->fwd(c, l, a);
	}
	/* the slots' output gradient, and the routing weights' */
	o->moe_combine_bwd(dt, w->moe_dy, w->moe_dw, dout, a->ey, a->inv,
			   a->topw, N, k, H);
	x->bwd(c, l, a);
	o->moe_scatter(dt, din, w->moe_dy, a->inv, N, k, H);
	/* the router */
	o->moe_route_bwd(router_mode(cf), cf->norm_topk, a->rlog, a->topi,
			 w->moe_dw, c->aux_extra, N, E, k, w->moe_dlog);
	if (dt != TK_F32)
		o->convert(dlog, dt, w->moe_dlog, TK_F32, (size_t)N * E);
	o->matmul(0, 0, N, H, E, 1.0f, dt, dlog, E, W[TACO_L_ROUTER], H, 1.0f,
		  dt, din, H);
	grad_linear_cols(c, id[TACO_L_ROUTER], dlog, E, in, H, N, E, H, 0);
	lp_bias_grad(c, id[TACO_L_ROUTER_BIAS], dlog, N, E);
}

/* transformers' load_balancing_loss_func without an attention mask: over
 * the R = N * (sparse layers) rows, f_e = (slots of e) / R and P_e = (sum of
 * e's probabilities) / R, summed over the layers; aux = E sum_e f_e P_e.
 * Only P carries a gradient: d(aux) / d(p[t, e]) = E f_e / R in every row
 * of every sparse layer. */
double moe_aux_finish(step_ctx *c)
{
	const taco_config *cf = &c->m->cfg;
	taco_work *w = c->w;
	int E = cf->experts, sparse = 0;
	double R, aux = 0;

	/* data parallel: over the global batch (moe_rank_sums) */
	const int32_t *cnt = w->s.ranks > 1 ? w->moe_gcount : w->moe_count;

	for (int l = 0; l < cf->layers; l++)
		sparse += taco_config_moe_layer(cf, l);
	R = (double)w->s.N * w->s.ranks * sparse;
	for (int e = 0; e < E; e++) {
		double f = 0, p = 0;
		for (int l = 0; l < cf->layers; l++) {
			if (!taco_config_moe_layer(cf, l))
				continue;
			f += cnt[(size_t)l * E + e];
			p += w->moe_psum_h[(size_t)l * E + e];
		}
		f /= R;
		aux += f * (p / R);
		w->moe_extra_h[e] = (float)(c->aux_w * E * f / R);
	}
	c->o->upload(w->moe_extra, w->moe_extra_h, (size_t)E * sizeof(float));
	c->aux_extra = w->moe_extra;
	return aux * E;
}

int moe_rank_sums(step_ctx *c, int64_t n_targets, int64_t norm, taco_err *err)
{
	const taco_model *m = c->m;
	taco_work *w = c->w;
	size_t LE = (size_t)m->cfg.layers * (size_t)m->cfg.experts;
	double *v = w->moe_rsum;
	int aux = c->aux_w > 0, r;

	if (!m->rank_sum)
		return taco_err_set(err, -EINVAL,
				    "data parallel with experts: no sum over "
				    "the ranks (taco_model_set_rank_sum)");
	for (size_t i = 0; i < LE; i++) {
		v[i] = w->moe_count[i];
		v[LE + i] = aux ? w->moe_psum_h[i] : 0.0;
	}
	v[2 * LE] = (double)n_targets;
	if ((r = m->rank_sum(m->rank_ctx, v, (int)(2 * LE + 1))))
		return taco_err_set(err, r,
				    "data parallel: the routing's sum over "
				    "the ranks failed (%d)",
				    r);
	for (size_t i = 0; i < LE; i++) {
		w->moe_gcount[i] = (int32_t)v[i];
		if (aux)
			w->moe_psum_h[i] = (float)v[LE + i];
	}
	/* the auxiliary loss is the global batch's, in its share of the
	 * step's targets */
	if (aux)
		c->aux_w = m->aux_coef * v[2 * LE] / (double)norm;
	return 0;
}

void moe_layer_fwd(step_ctx *c, const moe_experts_ops *x, int l, const void *in,
		   void *out)
{
	taco_layer_acts *a = lp_acts(c, l);
	const void *W[TACO_L_COUNT];

	lp_weights(c, l, W);
	llama_attn_fwd(c, l, in, a, W);
	moe_fwd(c, x, l, a, W, a->ln2, out);
	c->o->add(c->dt, out, a->x_mid, (size_t)c->w->s.N * c->m->cfg.hidden);
}

void moe_layer_recompute(step_ctx *c, int l, const void *in)
{
	const void *W[TACO_L_COUNT];

	lp_weights(c, l, W);
	llama_attn_fwd(c, l, in, lp_acts(c, l), W);
}

void moe_layer_bwd(step_ctx *c, const moe_experts_ops *x, int l, const void *in)
{
	taco_layer_acts *a = lp_acts(c, l);
	const void *W[TACO_L_COUNT];

	lp_weights(c, l, W);
	moe_bwd(c, x, l, a, W, a->ln2, c->w->dx, c->w->dtmp);
	llama_attn_bwd(c, l, in, a, W);
}
