/* layer.h: what the families' decoder layers share (internal to
 * engine/model): the linear layers, the norms, the MLP's blocks, the
 * gradient hand-over of small tensors. Each family's layer is one file,
 * <family>/layer.c, behind a taco_layer_ops table (step.h). */
#ifndef TACO_MODEL_LAYER_H
#define TACO_MODEL_LAYER_H

#include "step.h"

/* The layer ops of each family. */
extern const taco_layer_ops taco_llama_layer;

/* y[N, out] = x[N, in] W[out, in]^T (+ b[out], added before y is
 * rounded). */
void lp_linear_fwd(step_ctx *c, void *y, const void *x, const void *W,
		   const void *b, int N, int in, int out);
/* dx[N, in] = beta * dx + dy[N, out] W[out, in] */
void lp_linear_bwd_x(step_ctx *c, void *dx, const void *dy, const void *W,
		     int N, int in, int out, float beta);
/* Layer l's weights as the ops read them, by slot (NULL: none). */
void lp_weights(step_ctx *c, int l, const void *W[TACO_L_COUNT]);
/* Layer l's activations (one set, or one per layer when kept). */
taco_layer_acts *lp_acts(step_ctx *c, int l);
/* MLP block b: columns [j0, j0 + *n) of the intermediate dimension. */
int lp_block(step_ctx *c, int b, int *n);
/* Where a norm weight's (or bias's) gradient [H] accumulates: the sink's
 * buffer, or when not wanted a zeroed block, since the op adds it
 * somewhere; grad_whole_end(c, id) hands it over after the op. */
float *lp_norm_grad(step_ctx *c, int id, int H);
/* A bias's gradient: the column sums of dy [N, C], to the sink. */
void lp_bias_grad(step_ctx *c, int id, const void *dy, int N, int C);

#endif
