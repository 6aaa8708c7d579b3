/* runner/internal.h: the table of operations of a runner (runner.h) and
 * the state every runner has. */
#ifndef TACOD_RUNNER_INTERNAL_H
#define TACOD_RUNNER_INTERNAL_H

#include "daemon/runner/runner.h"

typedef struct tacod_runner_ops {
	const char *name;
	int (*open)(tacod_runner *r, taco_err *err); /* sets r->state */
	int (*attach)(tacod_runner *r, taco_err *err);
	void (*arm)(tacod_runner *r);
	void (*schedule)(tacod_runner *r);
	void (*apply_stops)(tacod_runner *r);
	const char *(*stderr_tail)(tacod_runner *r, tacod_run *run);
	void (*release)(tacod_runner *r, tacod_run *run); /* run->impl */
	void (*close)(tacod_runner *r);
	void (*free)(tacod_runner *r); /* r->state */
} tacod_runner_ops;

struct tacod_runner {
	const tacod_runner_ops *ops;
	tacod_runner_env env;
	void *state; /* the runner's own */
};

/* The GPUs a job's request asks for (taco.gpus): 1 when it asks for none
 * or for more than max (the create's checks have refused those). */
int tacod_request_gpus(const char *request, int max);

extern const tacod_runner_ops tacod_runner_local;
extern const tacod_runner_ops tacod_runner_slurm;

#endif
