/* train.h: one fine-tuning job, start to finish: load, train, evaluate,
 * checkpoint, export. */
#ifndef TACO_TRAIN_H
#define TACO_TRAIN_H

#include <signal.h>
#include <stdint.h>

#include "job.h"
#include "taco_err.h"

typedef struct taco_train_opts {
	int resume;    /* continue from the newest complete checkpoint */
	int events_fd; /* -1: no events */
	int progress;  /* on stderr: 0 none, TACO_PROGRESS_TTY a live line,
			  TACO_PROGRESS_LINES a line every log_every */
	const volatile sig_atomic_t *stop; /* set: checkpoint and stop */
	uint64_t memory_budget; /* bytes the plan must fit; 0: this machine's
				   physical memory */
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

/* Total optimizer steps of a job over n_examples examples. */
int64_t taco_train_total_steps(const taco_job *job, size_t n_examples);

#endif
