/* layer_parts.c: the pieces the families' layers share (layer.h). */
#include "layer.h"

const taco_layer_ops *step_layer_ops(const taco_model *m)
{
	(void)m; /* OPT and GPT-NeoX: planned, not trained yet */
	return &taco_llama_layer;
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

void lp_weights(step_ctx *c, int l, const void *W[TACO_L_COUNT])
{
	for (int s = 0; s < TACO_L_COUNT; s++)
		W[s] = step_weight(c, c->m->layer[l][s], c->w->wl[s]);
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
