/* llama/layer.c: the decoder layer of the Llama family (Llama, Mistral,
 * Qwen2, Qwen3): RMSNorm, GQA with RoPE (Qwen3: q/k norms), SwiGLU.
 *
 * The MLP runs in blocks of the intermediate dimension (w->s.chunks of
 * w->s.Ic columns): block b's gate and up rows, its SwiGLU and its columns
 * of the down projection. Backward's recompute of a layer stops before the
 * MLP: the MLP's backward recomputes each block just before it needs it, so
 * blocks cost no extra work, and it produces exact gradient pieces: the
 * down projection's columns of the block, the gate's and up's rows. */
#include <math.h>

#include "model/layer.h"

/* gate, up and act of MLP block b from ln2. */
static void mlp_block_fwd(step_ctx *c, taco_layer_acts *a,
			  const void *W[TACO_L_COUNT], int b)
{
	int n, j0 = lp_block(c, b, &n), N = c->w->s.N, H = c->m->cfg.hidden;
	size_t off = (size_t)j0 * H;

	c->o->matmul(0, 1, N, n, H, 1.0f, c->dt, a->ln2, H,
		     step_at(W[TACO_L_GATE], off, c->es), H, 0.0f, c->dt,
		     a->gate, n);
	c->o->matmul(0, 1, N, n, H, 1.0f, c->dt, a->ln2, H,
		     step_at(W[TACO_L_UP], off, c->es), H, 0.0f, c->dt, a->up,
		     n);
	c->o->swiglu_fwd(c->dt, a->act, a->gate, a->up, (size_t)N * n);
}

/* gpt-oss's sinks in f32, as the sink ops take them. */
static const float *attn_sinks(step_ctx *c, const void *W[TACO_L_COUNT])
{
	if (c->dt == TK_F32)
		return W[TACO_L_SINKS];
	c->o->to_f32(c->w->sinks32, W[TACO_L_SINKS], c->dt,
		     (size_t)c->m->cfg.heads);
	return c->w->sinks32;
}

/* Attention of layer l from x through ln2 = norm(x_mid) (the part the
 * Llama family and Qwen3-MoE share). */
void llama_attn_fwd(step_ctx *c, int l, const void *x, taco_layer_acts *a,
		    const void *W[TACO_L_COUNT])
{
	const tk_ops *o = c->o;
	const taco_config *cf = &c->m->cfg;
	taco_work *w = c->w;
	int B = w->s.B, T = w->s.T, N = w->s.N, H = cf->hidden;
	int hd = cf->head_dim, dt = c->dt;
	int D = cf->heads * hd, Dkv = cf->kv_heads * hd;
	void *qd = cf->qk_norm ? a->q_pre : a->q;
	void *kd = cf->qk_norm ? a->k_pre : a->k;
	const void *qn, *kn;

	/* with the q/k norms, q and k from their inputs; else RoPE in place */
	qn = cf->qk_norm ? W[TACO_L_Q_NORM] : NULL;
	kn = cf->qk_norm ? W[TACO_L_K_NORM] : NULL;
	o->rmsnorm_fwd(dt, a->ln1, a->rstd1, x, W[TACO_L_ATTN_NORM], N, H,
		       cf->rms_eps);
	lp_linear_fwd(c, qd, a->ln1, W[TACO_L_Q], W[TACO_L_Q_BIAS], N, H, D);
	lp_linear_fwd(c, kd, a->ln1, W[TACO_L_K], W[TACO_L_K_BIAS], N, H, Dkv);
	lp_linear_fwd(c, a->v, a->ln1, W[TACO_L_V], W[TACO_L_V_BIAS], N, H,
		      Dkv);
	o->qknorm_rope_fwd(dt, a->q, a->rstd_q, qd, qn, w->rope_cos,
			   w->rope_sin, w->pos, N, cf->heads, hd,
			   cf->rotary_dim, cf->rms_eps);
	o->qknorm_rope_fwd(dt, a->k, a->rstd_k, kd, kn, w->rope_cos,
			   w->rope_sin, w->pos, N, cf->kv_heads, hd,
			   cf->rotary_dim, cf->rms_eps);
	lp_attention_fwd(c, l, a, cf->heads, cf->kv_heads, hd,
			 taco_config_window(cf, l));
	if (W[TACO_L_SINKS])
		o->attn_sink_fwd(dt, a->att, a->lse, attn_sinks(c, W), B, T,
				 cf->heads, hd);
	/* x_mid = o-proj + x, ln2 = norm(x_mid) */
	lp_linear_fwd(c, a->x_mid, a->att, W[TACO_L_O], W[TACO_L_O_BIAS], N, D,
		      H);
	o->add_rmsnorm_fwd(dt, a->x_mid, x, a->ln2, a->rstd2,
			   W[TACO_L_MLP_NORM], N, H, cf->rms_eps);
}

/* recompute: stop at ln2, for backward (which runs the MLP block by block
 * itself); else the whole layer into out. */
void llama_layer_fwd_w(step_ctx *c, int l, const void *x, void *out,
		       int recompute, const void *W[TACO_L_COUNT])
{
	const tk_ops *o = c->o;
	const taco_config *cf = &c->m->cfg;
	taco_work *w = c->w;
	taco_layer_acts *a = lp_acts(c, l);
	int N = w->s.N, H = cf->hidden, I = cf->intermediate, dt = c->dt;

	llama_attn_fwd(c, l, x, a, W);
	if (recompute)
		return;
	for (int b = 0; b < w->s.chunks; b++) {
		int n, j0 = lp_block(c, b, &n);
		mlp_block_fwd(c, a, W, b);
		/* out (+)= act W_down[:, j0 : j0 + n]^T */
		o->matmul(0, 1, N, H, n, 1.0f, dt, a->act, n,
			  step_at(W[TACO_L_DOWN], (size_t)j0, c->es), I,
			  b ? 1.0f : 0.0f, dt, out, H);
	}
	o->add(dt, out, a->x_mid, (size_t)N * H);
}

static void llama_fwd(step_ctx *c, int l, const void *x, void *out)
{
	const void *W[TACO_L_COUNT];

	lp_weights(c, l, W);
	llama_layer_fwd_w(c, l, x, out, 0, W);
}

static void llama_recompute(step_ctx *c, int l, const void *x)
{
	const void *W[TACO_L_COUNT];

	lp_weights(c, l, W);
	llama_layer_fwd_w(c, l, x, NULL, 1, W);
}

/* RMSNorm backward: dres[n, H] += the input gradient from dout (the
 * residual's), the weight's gradient to the sink. */
static void norm_bwd_add(step_ctx *c, int id, void *dres, const void *dout,
			 const void *x, const void *wt, const float *rstd,
			 int n, int H)
{
	float *g = lp_norm_grad(c, id, H);

	c->o->rmsnorm_bwd_add(c->dt, dres, g, dout, x, wt, rstd, n, H);
	grad_whole_end(c, id);
}

/* The q (or k) norm and RoPE backward: dx[N, heads * hd] from dout, the
 * norm weight's gradient to the sink. */
static void qknorm_bwd(step_ctx *c, int id, void *dx, const void *dout,
		       const void *x, const void *wt, const float *rstd,
		       int heads)
{
	const taco_work *w = c->w;
	int hd = c->m->cfg.head_dim;
	float *g = lp_norm_grad(c, id, hd);

	c->o->qknorm_rope_bwd(c->dt, dx, g, dout, x, wt, rstd, w->rope_cos,
			      w->rope_sin, w->pos, w->s.N, heads, hd,
			      c->m->cfg.rotary_dim);
	grad_whole_end(c, id);
}

/* The MLP of layer l: w->dx is the gradient of its output; the gradient of
 * its input (ln2) ends in w->dtmp. */
static void mlp_bwd(step_ctx *c, int l, taco_layer_acts *a,
		    const void *W[TACO_L_COUNT])
{
	const tk_ops *o = c->o;
	const int *id = c->m->layer[l];
	taco_work *w = c->w;
	int N = w->s.N, H = c->m->cfg.hidden, I = c->m->cfg.intermediate;
	int nb = w->s.chunks, dt = c->dt;

	for (int b = 0; b < nb && !c->err; b++) {
		int n, j0 = lp_block(c, b, &n);
		/* kept activations hold the (one) block from forward */
		if (!w->s.keep)
			mlp_block_fwd(c, a, W, b);
		/* d(act) = dx W_down[:, block]; the block's columns of
		 * W_down are final once used */
		o->matmul(0, 0, N, n, H, 1.0f, dt, w->dx, H,
			  step_at(W[TACO_L_DOWN], (size_t)j0, c->es), I, 0.0f,
			  dt, w->dact, n);
		grad_linear_cols(c, id[TACO_L_DOWN], w->dx, H, a->act, n, N, H,
				 n, j0);
		o->swiglu_bwd(dt, a->gate, a->up, w->dact, a->gate, a->up,
			      (size_t)N * n);
		o->matmul(0, 0, N, H, n, 1.0f, dt, a->gate, n,
			  step_at(W[TACO_L_GATE], (size_t)j0 * H, c->es), H,
			  b ? 1.0f : 0.0f, dt, w->dtmp, H);
		o->matmul(0, 0, N, H, n, 1.0f, dt, a->up, n,
			  step_at(W[TACO_L_UP], (size_t)j0 * H, c->es), H, 1.0f,
			  dt, w->dtmp, H);
		if (id[TACO_L_GATE_UP] >= 0) {
			/* one tensor [gate; up]: its rows as they come,
			 * gate's block first, the last up block last */
			grad_linear_rows(c, id[TACO_L_GATE_UP], a->gate, n,
					 a->ln2, H, N, n, H, j0, b == 0, 0);
			grad_linear_rows(c, id[TACO_L_GATE_UP], a->up, n,
					 a->ln2, H, N, n, H, I + j0, 0,
					 b == nb - 1);
			continue;
		}
		grad_linear_rows(c, id[TACO_L_GATE], a->gate, n, a->ln2, H, N,
				 n, H, j0, b == 0, b == nb - 1);
		grad_linear_rows(c, id[TACO_L_UP], a->up, n, a->ln2, H, N, n, H,
				 j0, b == 0, b == nb - 1);
	}
}

/* The attention's backward of layer l, from w->dtmp, the gradient of
 * ln2 (the MLP's input), and w->dx, the layer output's: w->dx ends as the
 * gradient of the layer's input x. */
void llama_attn_bwd(step_ctx *c, int l, const void *x, taco_layer_acts *a,
		    const void *W[TACO_L_COUNT])
{
	const tk_ops *o = c->o;
	const taco_config *cf = &c->m->cfg;
	taco_work *w = c->w;
	const int *id = c->m->layer[l];
	int B = w->s.B, T = w->s.T, N = w->s.N, H = cf->hidden;
	int hd = cf->head_dim, D = cf->heads * hd, Dkv = cf->kv_heads * hd;
	int dt = c->dt;
	void *dqf = w->dq, *dkf = w->dk;

	norm_bwd_add(c, id[TACO_L_MLP_NORM], w->dx, w->dtmp, a->x_mid,
		     W[TACO_L_MLP_NORM], a->rstd2, N, H);

	/* attention */
	lp_linear_bwd_x(c, w->datt, w->dx, W[TACO_L_O], N, D, H, 0.0f);
	grad_linear_cols(c, id[TACO_L_O], w->dx, H, a->att, D, N, H, D, 0);
	lp_bias_grad(c, id[TACO_L_O_BIAS], w->dx, N, H);
	if (W[TACO_L_SINKS]) {
		float *g = lp_norm_grad(c, id[TACO_L_SINKS], cf->heads);
		o->attn_sink_bwd(dt, g, w->datt, a->att, a->lse,
				 attn_sinks(c, W), B, T, cf->heads, hd);
		grad_whole_end(c, id[TACO_L_SINKS]);
	}
	o->attention_bwd(dt, w->dq, w->dk, w->dv, w->datt, a->att, a->lse, a->q,
			 a->k, a->v, w->pos, B, T, cf->heads, cf->kv_heads, hd,
			 taco_config_window(cf, l), 1.0f / sqrtf((float)hd));
	if (cf->qk_norm) {
		/* datt and v are spent: they take the gradients before the
		 * q/k norms. */
		qknorm_bwd(c, id[TACO_L_Q_NORM], w->datt, w->dq, a->q_pre,
			   W[TACO_L_Q_NORM], a->rstd_q, cf->heads);
		qknorm_bwd(c, id[TACO_L_K_NORM], a->v, w->dk, a->k_pre,
			   W[TACO_L_K_NORM], a->rstd_k, cf->kv_heads);
		dqf = w->datt;
		dkf = a->v;
	} else {
		o->qknorm_rope_bwd(dt, w->dq, NULL, w->dq, NULL, NULL, NULL,
				   w->rope_cos, w->rope_sin, w->pos, N,
				   cf->heads, hd, cf->rotary_dim);
		o->qknorm_rope_bwd(dt, w->dk, NULL, w->dk, NULL, NULL, NULL,
				   w->rope_cos, w->rope_sin, w->pos, N,
				   cf->kv_heads, hd, cf->rotary_dim);
	}
	lp_linear_bwd_x(c, w->dtmp, dqf, W[TACO_L_Q], N, H, D, 0.0f);
	lp_linear_bwd_x(c, w->dtmp, dkf, W[TACO_L_K], N, H, Dkv, 1.0f);
	lp_linear_bwd_x(c, w->dtmp, w->dv, W[TACO_L_V], N, H, Dkv, 1.0f);
	if (id[TACO_L_QKV] >= 0) {
		/* one tensor [q; k; v] (Phi-3): its three row blocks */
		grad_linear_rows(c, id[TACO_L_QKV], dqf, D, a->ln1, H, N, D, H,
				 0, 1, 0);
		grad_linear_rows(c, id[TACO_L_QKV], dkf, Dkv, a->ln1, H, N, Dkv,
				 H, D, 0, 0);
		grad_linear_rows(c, id[TACO_L_QKV], w->dv, Dkv, a->ln1, H, N,
				 Dkv, H, D + Dkv, 0, 1);
		norm_bwd_add(c, id[TACO_L_ATTN_NORM], w->dx, w->dtmp, x,
			     W[TACO_L_ATTN_NORM], a->rstd1, N, H);
		return;
	}
	grad_linear_cols(c, id[TACO_L_Q], dqf, D, a->ln1, H, N, D, H, 0);
	lp_bias_grad(c, id[TACO_L_Q_BIAS], dqf, N, D);
	grad_linear_cols(c, id[TACO_L_K], dkf, Dkv, a->ln1, H, N, Dkv, H, 0);
	lp_bias_grad(c, id[TACO_L_K_BIAS], dkf, N, Dkv);
	grad_linear_cols(c, id[TACO_L_V], w->dv, Dkv, a->ln1, H, N, Dkv, H, 0);
	lp_bias_grad(c, id[TACO_L_V_BIAS], w->dv, N, Dkv);
	norm_bwd_add(c, id[TACO_L_ATTN_NORM], w->dx, w->dtmp, x,
		     W[TACO_L_ATTN_NORM], a->rstd1, N, H);
}

void llama_layer_bwd_w(step_ctx *c, int l, const void *x,
		       const void *W[TACO_L_COUNT])
{
	taco_layer_acts *a = lp_acts(c, l);

	mlp_bwd(c, l, a, W);
	llama_attn_bwd(c, l, x, a, W);
}

static void llama_bwd(step_ctx *c, int l, const void *x)
{
	const void *W[TACO_L_COUNT];

	lp_weights(c, l, W);
	llama_layer_bwd_w(c, l, x, W);
}

const taco_layer_ops taco_llama_layer = {llama_fwd, llama_recompute, llama_bwd};
