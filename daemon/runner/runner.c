/* runner/runner.c: the set of runs, and the runner's operations through
 * its table (runner/internal.h). */
#include "daemon/runner/runner.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/runner/internal.h"

tacod_run *tacod_runs_find(tacod_runs *rs, const char *id)
{
	for (int i = 0; i < rs->n; i++)
		if (!strcmp(rs->run[i]->id, id))
			return rs->run[i];
	return NULL;
}

int tacod_runs_add(tacod_runs *rs, tacod_run *r)
{
	if (rs->n >= TACOD_MAX_RUNNING)
		return -ENOSPC;
	rs->run[rs->n++] = r;
	return 0;
}

void tacod_runs_remove(tacod_runs *rs, tacod_run *r)
{
	for (int i = 0; i < rs->n; i++) {
		if (rs->run[i] == r) {
			rs->run[i] = rs->run[--rs->n];
			return;
		}
	}
}

int tacod_request_gpus(const char *request, int max)
{
	json_t *o = request ? json_loads(request, 0, NULL) : NULL;
	json_int_t n = json_integer_value(
	    json_object_get(json_object_get(o, "taco"), "gpus"));

	json_decref(o);
	return n > 1 && n <= max ? (int)n : 1;
}

int tacod_runner_open(const tacod_runner_env *env, tacod_runner **out,
		      taco_err *err)
{
	tacod_runner *r = calloc(1, sizeof(*r));
	int rc;

	if (!r)
		return taco_err_set(err, -ENOMEM, "out of memory");
	r->env = *env;
	r->ops = env->cfg->scheduler == TACOD_SCHED_SLURM ? &tacod_runner_slurm
							  : &tacod_runner_local;
	rc = r->ops->open(r, err);
	if (rc) {
		free(r);
		return rc;
	}
	*out = r;
	return 0;
}

int tacod_runner_attach(tacod_runner *r, taco_err *err)
{
	return r->ops->attach(r, err);
}

void tacod_runner_arm(tacod_runner *r)
{
	r->ops->arm(r);
}

void tacod_runner_schedule(tacod_runner *r)
{
	r->ops->schedule(r);
}

void tacod_runner_apply_stops(tacod_runner *r)
{
	r->ops->apply_stops(r);
}

const char *tacod_runner_stderr(tacod_runner *r, tacod_run *run)
{
	return r->ops->stderr_tail(r, run);
}

void tacod_runner_release(tacod_runner *r, tacod_run *run)
{
	r->ops->release(r, run);
	free(run);
}

void tacod_runner_close(tacod_runner *r)
{
	if (r)
		r->ops->close(r);
}

void tacod_runner_free(tacod_runner *r)
{
	if (!r)
		return;
	r->ops->free(r);
	free(r);
}
