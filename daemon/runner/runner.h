/* runner/runner.h: where a job's taco-train runs, behind one table of
 * operations (runner/internal.h): local children of tacod
 * (runner/local.c) or Slurm batch jobs (runner/slurm.c), picked by the
 * configuration's scheduler. The service keeps the set of runs and
 * decides every job status; a runner starts the queued jobs it can, sends
 * the stops asked of its runs, follows them, and reports their events and
 * their ends to the service through the host's callbacks, so that the
 * service never asks which runner it has. Everything is called on the
 * loop thread with the service lock held, but open, attach and free (at
 * the start and the end, before and after any other thread). */
#ifndef TACOD_RUNNER_H
#define TACOD_RUNNER_H

#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <uv.h>

#include "api/types.h"
#include "daemon/config/config.h"
#include "daemon/store/store.h"
#include "util/taco_err.h"

#define TACOD_MAX_RUNNING 64
#define TACOD_RUN_ERROR_MAX 1024

/* Why a run is asked to stop. */
enum {
	TACOD_STOP_NONE = 0,
	TACOD_STOP_CANCEL,
	TACOD_STOP_PAUSE,
	TACOD_STOP_SHUTDOWN, /* tacod stops; the job resumes later */
};

/* One job being run (local) or submitted (Slurm). */
typedef struct tacod_run {
	char id[TACOD_ID_MAX];
	uint64_t planned;    /* bytes on each of its devices */
	uint32_t devices;    /* the devices it runs on: a bit per position
				in tacod_config_device_list's list */
	uint64_t peak;	     /* the last reported peak */
	double tokens_per_s; /* its last progress event's */
	int stop, stop_sent; /* TACOD_STOP_*, asked and sent */
	uint64_t started_ms; /* uv_now when it was started */
	char exported[TACOD_PATH_MAX];
	char error[TACOD_RUN_ERROR_MAX]; /* the last error event */
	/* out of storage (the worker's error, or its events' rows): it
	 * fails with insufficient_storage */
	int no_space;
	void *impl; /* the runner's: a child, a Slurm job */
} tacod_run;

/* The runs of this tacod: the service's one table of them. */
typedef struct tacod_runs {
	tacod_run *run[TACOD_MAX_RUNNING];
	int n;
} tacod_runs;

/* The run of this id, or NULL. */
tacod_run *tacod_runs_find(tacod_runs *rs, const char *id);
/* Adds r; -ENOSPC when TACOD_MAX_RUNNING run. */
int tacod_runs_add(tacod_runs *rs, tacod_run *r);
/* Removes r (not freed); another run may take its place in run[]. */
void tacod_runs_remove(tacod_runs *rs, tacod_run *r);

/* What a runner tells the service (lock held). */
typedef struct tacod_runner_host {
	void *ctx;
	/* the job runs: its started_at and its event */
	void (*running)(void *ctx, tacod_run *run);
	/* one of taco-train's events (docs/events.md) */
	void (*event)(void *ctx, tacod_run *run, json_t *e);
	/* the run's end as a local worker's exit status or signal: the
	 * service decides the job's status, removes the run and releases
	 * it (tacod_runner_release) */
	void (*exit)(void *ctx, tacod_run *run, int64_t status, int sig);
	/* a line of the job's event log (data consumed, may be NULL) */
	void (*log)(void *ctx, const char *job, const char *level,
		    const char *type, const char *msg, json_t *data);
	/* a job that could not be started at all: failed with msg */
	void (*start_failed)(void *ctx, const char *job, const char *msg);
	/* at the start: running jobs that nobody runs are queued again */
	int (*requeue_running)(void *ctx, taco_err *err);
	/* memory held outside the jobs (the chat workers), added into
	 * bytes[d] for device d of n (may be NULL: none) */
	void (*held)(void *ctx, uint64_t *bytes, int n);
} tacod_runner_host;

/* The service's state a runner works with; all of it outlives the
 * runner. */
typedef struct tacod_runner_env {
	uv_loop_t *loop;
	pthread_mutex_t *lock;
	tacod_store *store;
	const tacod_config *cfg;
	const char *jobs_dir; /* <jobs_dir>/<id>/job.json */
	tacod_runs *runs;
	uv_async_t *wake; /* the service's loop turn: stops, schedule */
	const int *closed;
	tacod_runner_host host;
} tacod_runner_env;

typedef struct tacod_runner tacod_runner;

/* The runner of env->cfg->scheduler; *out set only on success. */
int tacod_runner_open(const tacod_runner_env *env, tacod_runner **out,
		      taco_err *err);
/* After a restart: follows again what a previous tacod left running. */
int tacod_runner_attach(tacod_runner *r, taco_err *err);
/* Starts the runner's timers, once the loop runs. */
void tacod_runner_arm(tacod_runner *r);
/* Starts the queued jobs that may start now. */
void tacod_runner_schedule(tacod_runner *r);
/* Sends the stops asked of the runs (run->stop); a shutdown may detach a
 * run from the set (it goes on without tacod). */
void tacod_runner_apply_stops(tacod_runner *r);
/* What the run said on stderr, for an error message ("" when nothing). */
const char *tacod_runner_stderr(tacod_runner *r, tacod_run *run);
/* Frees an ended run (removed from the set by the host). */
void tacod_runner_release(tacod_runner *r, tacod_run *run);
/* Stops the runner's timers (the drain has ended). */
void tacod_runner_close(tacod_runner *r);
/* Frees the runner (NULL: nothing), and the runs it attached but never
 * followed. */
void tacod_runner_free(tacod_runner *r);

#endif
