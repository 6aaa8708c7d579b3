/* train.h: one fine-tuning job, start to finish: load, train, evaluate,
 * checkpoint, export. */
#ifndef TACO_TRAIN_H
#define TACO_TRAIN_H

#include <signal.h>
#include <stdint.h>

#include "job/job.h"
#include "model/model.h"
#include "optim/optim.h"
#include "tk_ops.h"
#include "util/taco_err.h"

typedef struct taco_train_opts {
	int resume;    /* continue from the newest complete checkpoint */
	int events_fd; /* -1: no events */
	int progress;  /* on stderr: 0 none, TACO_PROGRESS_TTY a live line,
			  TACO_PROGRESS_LINES a line every log_every */
	const volatile sig_atomic_t *stop; /* set: checkpoint and stop */
	uint64_t memory_budget; /* bytes the plan must fit; 0: this machine's
				   physical memory (CPU), no check (CUDA) */
	const tk_ops *ops;	/* backend to train on; NULL: tk_cpu_ops(). Any
				   other table is the CUDA backend: planned as
				   such, tk_cuda_last_error() polled every step */
} taco_train_opts;

enum {
	TACO_PROGRESS_NONE = 0,
	TACO_PROGRESS_TTY = 1,
	TACO_PROGRESS_LINES = 2,
};

/* What a run ended with. */
enum taco_train_end {
	TACO_TRAIN_FINISHED = 0,
	TACO_TRAIN_STOPPED = 1, /* on request, after a checkpoint */
};

/* Returns TACO_TRAIN_FINISHED, TACO_TRAIN_STOPPED, or a negative error with
 * err describing it. */
int taco_train_run(const taco_job *job, const taco_train_opts *opts,
		   taco_err *err);

/* One optimizer step of accumulation 1, as taco_train_run takes it:
 * begins optimizer step o->step + 1, runs forward and backward of b and
 * applies the optimizer with lr to each trainable tensor (frozen: NULL or a
 * flag per tensor) as soon as its gradient is complete. o NULL: forward and
 * backward only. Returns 0 or a negative error (err says). */
int taco_train_step(taco_model *m, taco_optim *o, const uint8_t *frozen,
		    const taco_batch *b, float lr, taco_step_stats *stats,
		    taco_err *err);

/* Total optimizer steps of a job over n_examples examples. */
int64_t taco_train_total_steps(const taco_job *job, size_t n_examples);

#endif
