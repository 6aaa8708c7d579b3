/* model_grad.c: weight gradients, produced in bounded blocks.
 *
 * In part mode every gradient is made in the one fp32 block buffer
 * (w->gblock) and handed to the sink at once: a large tensor's gradient
 * never exists whole. A TACO column needs only its own column, so linear
 * layers go out as column blocks; tensors whose rows come from several
 * places (MLP blocks, vocabulary chunks, the rows a batch touches) go out
 * as row streams, which the optimizer merges row block by row block. In
 * dense mode (gradient accumulation) the same GEMMs add into the caller's
 * buffers instead.
 *
 * With overlap the sink runs on the backend's side stream: the optimizer
 * updates block i while the main stream fills block i + 1 in the other
 * buffer; before a buffer is filled again the main stream waits for the
 * updates that read it. A weight is updated only after its last use in
 * the step (the order of backward), and the next step waits for them all
 * (grad_drain). */
#include <string.h>

#include "step.h"

float *grad_dense(const step_ctx *c, int id)
{
	if (!c->sink || !c->sink->dense || id < 0)
		return NULL;
	if (c->sink->skip && c->sink->skip[id])
		return NULL;
	return c->sink->dense(c->sink->ctx, c->m, id);
}

int grad_wanted(const step_ctx *c, int id)
{
	if (id < 0 || !c->sink || c->err)
		return 0;
	if (c->sink->skip && c->sink->skip[id])
		return 0;
	if (c->sink->dense)
		return grad_dense(c, id) != NULL;
	return c->sink->part != NULL;
}

float *grad_block(step_ctx *c)
{
	if (!c->w->s.overlap)
		return c->w->gblock;
	c->gcur ^= 1;
	if (c->gticket[c->gcur])
		c->o->side_wait(c->gticket[c->gcur]);
	return c->gcur ? c->w->gblock2 : c->w->gblock;
}

void grad_drain(step_ctx *c)
{
	if (c->w->s.overlap)
		c->o->side_wait(0);
}

static void emit(step_ctx *c, const taco_grad_part *p)
{
	if (c->err)
		return;
	if (!c->w->s.overlap) {
		c->err = c->sink->part(c->sink->ctx, c->m, p);
		return;
	}
	c->o->side_begin();
	c->err = c->sink->part(c->sink->ctx, c->m, p);
	c->gticket[c->gcur] = c->o->side_end();
}

/* The columns a block holds of a gradient of out rows. */
static int cols_per_block(const step_ctx *c, int out, int in)
{
	int cb = (int)(c->w->s.gblock / (size_t)out);

	return taco_gemm_down(cb > in ? in : cb);
}

/* Hands columns [col0, col0 + n) of tensor id, every row, in g. */
static void emit_cols(step_ctx *c, int id, float *g, int out, int col0, int n)
{
	emit(c, &(taco_grad_part){.tensor = id,
				  .kind = TACO_PART_COLS,
				  .g = g,
				  .ld = n,
				  .row0 = 0,
				  .rows = out,
				  .col0 = col0,
				  .cols = n});
}

void grad_linear_cols(step_ctx *c, int id, const void *dy, int ldy,
		      const void *x, int ldx, int N, int out, int in, int col0)
{
	const tk_ops *o = c->o;
	float *dense;
	int cb;

	if (!grad_wanted(c, id))
		return;
	if ((dense = grad_dense(c, id))) {
		int ld = (int)c->m->tensors[id].shape[1];
		o->matmul(1, 0, out, in, N, 1.0f, c->dt, dy, ldy, x, ldx, 1.0f,
			  TK_F32, dense + col0, ld);
		return;
	}
	cb = cols_per_block(c, out, in);
	for (int j0 = 0; j0 < in && !c->err; j0 += cb) {
		int n = in - j0 < cb ? in - j0 : cb;
		float *g = grad_block(c);
		o->matmul(1, 0, out, n, N, 1.0f, c->dt, dy, ldy,
			  step_at(x, (size_t)j0, c->es), ldx, 0.0f, TK_F32, g,
			  n);
		emit_cols(c, id, g, out, col0 + j0, n);
	}
}

void grad_zero(step_ctx *c, int id)
{
	const taco_tensor *t;
	int out, in, cb;

	if (!grad_wanted(c, id) || grad_dense(c, id))
		return;
	t = &c->m->tensors[id];
	if (t->ndim == 1) { /* grad_whole_begin's block is zeroed */
		(void)grad_whole_begin(c, id);
		grad_whole_end(c, id);
		return;
	}
	/* grad_linear_cols's column blocks, so that the parts pair up with
	 * another rank's */
	out = (int)t->shape[0];
	in = (int)t->shape[1];
	cb = cols_per_block(c, out, in);
	for (int j0 = 0; j0 < in && !c->err; j0 += cb) {
		int n = in - j0 < cb ? in - j0 : cb;
		float *g = grad_block(c);
		c->o->memset0(g, (size_t)out * (size_t)n * sizeof(float));
		emit_cols(c, id, g, out, j0, n);
	}
}

void grad_emit_rows(step_ctx *c, int id, const float *g, int ld, int row0,
		    int rows, const int32_t *row_ids, int first, int last)
{
	int C = (int)c->m->tensors[id].shape[1];

	emit(c, &(taco_grad_part){.tensor = id,
				  .kind = TACO_PART_ROWS,
				  .g = g,
				  .ld = ld,
				  .row0 = row0,
				  .rows = rows,
				  .col0 = 0,
				  .cols = C,
				  .row_ids = row_ids,
				  .first = first,
				  .last = last});
}

void grad_linear_rows(step_ctx *c, int id, const void *dy, int ldy,
		      const void *x, int ldx, int N, int rows, int in, int row0,
		      int first, int last)
{
	const tk_ops *o = c->o;
	float *dense;
	int rb;

	if (!grad_wanted(c, id))
		return;
	if ((dense = grad_dense(c, id))) {
		o->matmul(1, 0, rows, in, N, 1.0f, c->dt, dy, ldy, x, ldx, 1.0f,
			  TK_F32, dense + (size_t)row0 * in, in);
		return;
	}
	rb = (int)(c->w->s.gblock / (size_t)in);
	if (rb > rows)
		rb = rows;
	rb = taco_gemm_down(rb);
	for (int i0 = 0; i0 < rows && !c->err; i0 += rb) {
		int n = rows - i0 < rb ? rows - i0 : rb;
		float *g = grad_block(c);
		o->matmul(1, 0, n, in, N, 1.0f, c->dt,
			  step_at(dy, (size_t)i0, c->es), ldy, x, ldx, 0.0f,
			  TK_F32, g, in);
		grad_emit_rows(c, id, g, in, row0 + i0, n, NULL,
			       first && i0 == 0, last && i0 + n == rows);
	}
}

float *grad_whole_begin(step_ctx *c, int id)
{
	float *dense, *g;

	if (!grad_wanted(c, id))
		return NULL;
	if ((dense = grad_dense(c, id)))
		return dense;
	g = grad_block(c);
	c->o->memset0(g, c->m->tensors[id].numel * sizeof(float));
	return g;
}

void grad_whole_end(step_ctx *c, int id)
{
	const taco_tensor *t;

	if (!grad_wanted(c, id) || c->sink->dense)
		return;
	t = &c->m->tensors[id];
	emit(c, &(taco_grad_part){
		    .tensor = id,
		    .kind = TACO_PART_WHOLE,
		    .g = c->gcur ? c->w->gblock2 : c->w->gblock,
		    .ld = t->ndim == 2 ? (int)t->shape[1] : (int)t->numel,
		    .row0 = 0,
		    .rows = t->ndim == 2 ? (int)t->shape[0] : 1,
		    .col0 = 0,
		    .cols = t->ndim == 2 ? (int)t->shape[1] : (int)t->numel});
}

/* A whole gradient at g (in the current block) to the sink. */
static void whole_at(step_ctx *c, int id, float *g)
{
	const taco_tensor *t = &c->m->tensors[id];

	emit(c, &(taco_grad_part){
		    .tensor = id,
		    .kind = TACO_PART_WHOLE,
		    .g = g,
		    .ld = t->ndim == 2 ? (int)t->shape[1] : (int)t->numel,
		    .row0 = 0,
		    .rows = t->ndim == 2 ? (int)t->shape[0] : 1,
		    .col0 = 0,
		    .cols = t->ndim == 2 ? (int)t->shape[1] : (int)t->numel});
}

void grad_pair_begin(step_ctx *c, int wid, int bid, size_t n, float **gw,
		     float **gb)
{
	float *dw = grad_wanted(c, wid) ? grad_dense(c, wid) : NULL;
	float *db = bid >= 0 && grad_wanted(c, bid) ? grad_dense(c, bid) : NULL;
	float *blk = NULL;

	/* a block for whatever is not a dense buffer: the weight's first,
	 * the bias's after it (a block holds 2 n, model_work.c) */
	if (!dw || (bid >= 0 && !db)) {
		blk = grad_block(c);
		c->o->memset0(blk, 2 * n * sizeof(float));
	}
	*gw = dw ? dw : blk;
	*gb = bid < 0 ? NULL : db ? db : blk + n;
}

void grad_pair_end(step_ctx *c, int wid, int bid, float *gw, float *gb)
{
	if (c->sink && c->sink->dense)
		return;
	if (grad_wanted(c, wid))
		whole_at(c, wid, gw);
	if (bid >= 0 && grad_wanted(c, bid))
		whole_at(c, bid, gb);
}
