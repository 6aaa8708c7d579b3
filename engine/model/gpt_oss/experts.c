/* gpt_oss/experts.c: gpt-oss's experts (GptOssExperts), applied as x @ W
 * to each expert's run of slots (moe.c sorts them):
 *   gu [n, 2 I] = xg [n, H] @ gate_up[e] [H, 2 I] + gate_up_bias[e]
 *   ea [n, I]   = glu_clamp(gu) (gate the even columns, up the odd)
 *   ey [n, H]   = ea @ down[e] [I, H] + down_bias[e]
 * Shapes: M slots, H hidden, I = moe_intermediate. gu lives in a->eg
 * ([M, 2 I] for this family); a bf16 model adds each bias after the
 * product is rounded, as transformers' `x @ W + b` does. */
#include "model/layer.h"

/* The weight (or bias) of expert e as the ops read it: its storage, or
 * an fp32 copy in w->w_exp (fp32 precision over a bf16 checkpoint). One
 * scratch serves both: each is used before the next is converted. */
static const void *expert_w(step_ctx *c, int l, int e, int x)
{
	return step_weight_of(c, moe_expert_id(c, l, e, x), c->w->w_exp);
}

static void goss_experts_fwd(step_ctx *c, int l, taco_layer_acts *a)
{
	const tk_ops *o = c->o;
	const taco_config *cf = &c->m->cfg;
	int H = cf->hidden, I = cf->moe_intermediate, dt = c->dt;
	size_t es = c->es, off = 0;
	const int32_t *cnt = moe_counts(c, l);

	for (int e = 0; e < cf->experts; e++) {
		int n = cnt[e];
		void *gu = step_at(a->eg, off * 2 * I, es);
		if (!n)
			continue;
		o->matmul(
		    0, 0, n, 2 * I, H, 1.0f, dt, step_at(a->xg, off * H, es), H,
		    expert_w(c, l, e, TACO_X_UP), 2 * I, 0.0f, dt, gu, 2 * I);
		o->bias_fwd(dt, gu, expert_w(c, l, e, TACO_X_UP_BIAS), n,
			    2 * I);
		off += (size_t)n;
	}
	o->glu_clamp_fwd(dt, a->ea, a->eg, (size_t)c->w->s.M, I, cf->glu_alpha,
			 cf->glu_limit);
	off = 0;
	for (int e = 0; e < cf->experts; e++) {
		int n = cnt[e];
		void *ey = step_at(a->ey, off * H, es);
		if (!n)
			continue;
		o->matmul(0, 0, n, H, I, 1.0f, dt, step_at(a->ea, off * I, es),
			  I, expert_w(c, l, e, TACO_X_DOWN), H, 0.0f, dt, ey,
			  H);
		o->bias_fwd(dt, ey, expert_w(c, l, e, TACO_X_DOWN_BIAS), n, H);
		off += (size_t)n;
	}
}

static void goss_experts_bwd(step_ctx *c, int l, taco_layer_acts *a)
{
	const tk_ops *o = c->o;
	const taco_config *cf = &c->m->cfg;
	taco_work *w = c->w;
	int H = cf->hidden, I = cf->moe_intermediate, dt = c->dt;
	size_t es = c->es, off = 0;
	const int32_t *cnt = moe_counts(c, l);

	/* down: d(ea) = dy down[e]^T; d(down[e]) = ea^T dy, its bias the
	 * column sums of dy */
	for (int e = 0; e < cf->experts && !c->err; e++) {
		int n = cnt[e];
		const void *dy = step_at(w->moe_dy, off * H, es);
		const void *ea = step_at(a->ea, off * I, es);
		if (!n) {
			moe_idle_grad(c, l, e, TACO_X_DOWN);
			moe_idle_grad(c, l, e, TACO_X_DOWN_BIAS);
			continue;
		}
		o->matmul(0, 1, n, I, H, 1.0f, dt, dy, H,
			  expert_w(c, l, e, TACO_X_DOWN), H, 0.0f, dt,
			  step_at(w->moe_dact, off * I, es), I);
		grad_linear_cols(c, moe_expert_id(c, l, e, TACO_X_DOWN), ea, I,
				 dy, H, n, I, H, 0);
		lp_bias_grad(c, moe_expert_id(c, l, e, TACO_X_DOWN_BIAS), dy, n,
			     H);
		off += (size_t)n;
	}
	/* d(gu), over gu */
	o->glu_clamp_bwd(dt, a->eg, w->moe_dact, a->eg, (size_t)w->s.M, I,
			 cf->glu_alpha, cf->glu_limit);
	/* gate_up: the slots' input gradient (over moe_dy, spent) */
	off = 0;
	for (int e = 0; e < cf->experts && !c->err; e++) {
		int n = cnt[e];
		const void *dgu = step_at(a->eg, off * 2 * I, es);
		const void *xg = step_at(a->xg, off * H, es);
		if (!n) {
			moe_idle_grad(c, l, e, TACO_X_UP);
			moe_idle_grad(c, l, e, TACO_X_UP_BIAS);
			continue;
		}
		o->matmul(0, 1, n, H, 2 * I, 1.0f, dt, dgu, 2 * I,
			  expert_w(c, l, e, TACO_X_UP), 2 * I, 0.0f, dt,
			  step_at(w->moe_dy, off * H, es), H);
		grad_linear_cols(c, moe_expert_id(c, l, e, TACO_X_UP), xg, H,
				 dgu, 2 * I, n, H, 2 * I, 0);
		lp_bias_grad(c, moe_expert_id(c, l, e, TACO_X_UP_BIAS), dgu, n,
			     2 * I);
		off += (size_t)n;
	}
}

const moe_experts_ops gpt_oss_experts = {goss_experts_fwd, goss_experts_bwd};
