/* optim.h: the optimizer of a model: TACO for every trainable 2-D tensor,
 * AdamW for the rest (docs/taco.md), or AdamW for all; frozen tensors
 * get nothing. State lives in backend memory; updates run as backend ops. */
#ifndef TACO_OPTIM_H
#define TACO_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "job/job_opts.h" /* taco_optim_opts, taco_optim_defaults */
#include "model/model.h"
#include "util/taco_err.h"

enum taco_optim_kind {
	TACO_OPT_FROZEN = 0,
	TACO_OPT_TACO,
	TACO_OPT_ADAMW,
};

typedef struct taco_optim_tensor {
	int kind;
	size_t state_bytes;
	/* TACO: idx [C * k] (uint16 or uint32), q [C * k], scale [C] */
	void *idx;
	uint8_t *q;
	float *scale;
	int idx_bytes;
	/* AdamW: fp32 master, m, v, numel each */
	float *master, *m, *v;
} taco_optim_tensor;

/* A TACO update fed in row blocks (taco_optim_apply_part). */
typedef struct taco_optim_stream {
	int tensor; /* -1: free */
	void *scan; /* tk_ops taco_scan_bytes of the widest TACO tensor */
} taco_optim_stream;

typedef struct taco_optim {
	taco_model *model;
	taco_optim_opts opts;
	taco_optim_tensor *t; /* one per model tensor */
	uint64_t step;	      /* optimizer steps taken */
	size_t state_bytes;   /* the tensors' state */
	taco_optim_stream streams[TACO_MAX_ROW_STREAMS];
	size_t scan_bytes; /* each stream's scan */
} taco_optim;

/* Bytes of optimizer state for one tensor of the given shape and kind:
 * TACO C * (k * idx_bytes + k + 4), idx_bytes 2 when R <= 65535 else 4;
 * AdamW 12 per element. */
size_t taco_optim_tensor_bytes(int kind, int ndim, int64_t R, int64_t C, int k);

/* Which optimizer a tensor gets. */
int taco_optim_kind_of(const taco_tensor *t, const taco_optim_opts *o,
		       int frozen);

/* frozen: NULL or one flag per model tensor. */
int taco_optim_create(taco_model *m, const taco_optim_opts *opts,
		      const uint8_t *frozen, taco_optim **out, taco_err *err);
void taco_optim_free(taco_optim *o);

/* Updates tensor id from its fp32 gradient (backend memory) with learning
 * rate lr, as optimizer step o->step (call taco_optim_begin_step first).
 * -EINVAL for a streamed matrix outside the step (it is in host memory):
 * those take their updates through the step's sink only. */
int taco_optim_apply(taco_optim *o, int id, const float *grad, float lr);

/* Updates a tensor from one piece of its gradient (a taco_grad_part of the
 * model step, with learning rate lr, as optimizer step o->step): whole
 * tensors and column blocks at once, row streams through one of the
 * streams (the update lands with the last part). -EINVAL for a piece the
 * tensor's optimizer cannot take (AdamW needs the whole gradient), -EBUSY
 * when more row streams are open than there are streams. */
int taco_optim_apply_part(taco_optim *o, const taco_grad_part *p, float lr);

/* The rows where tensor id's update may have changed it: its TACO slot
 * rows (a taco_grad_sink's changed_rows), k through *k; NULL for other
 * optimizers (anywhere). */
const void *taco_optim_changed_rows(const taco_optim *o, int id, int *k);

/* Bytes of the row-stream scans a model's optimizer allocates (the
 * planner's count; scan_bytes(C) the backend's taco_scan_bytes). */
size_t taco_optim_scan_total(const taco_model *m, const taco_optim_opts *opts,
			     const uint8_t *frozen,
			     size_t (*scan_bytes)(int C));

/* Starts the next optimizer step: o->step += 1. */
void taco_optim_begin_step(taco_optim *o);

/* The state as named tensors for a checkpoint, and back. Host copies are
 * made through the backend. names: "taco.idx.<tensor>", "taco.q.<tensor>",
 * "taco.scale.<tensor>", "adamw.master.<tensor>", "adamw.m.<tensor>",
 * "adamw.v.<tensor>". */
int taco_optim_save(const taco_optim *o, const char *path, taco_err *err);
int taco_optim_load(taco_optim *o, const char *path, taco_err *err);

#endif
