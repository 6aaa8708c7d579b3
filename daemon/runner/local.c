/* runner/local.c: scheduler "local": each job is a taco-train child of
 * tacod (runner/worker.c) on this machine's GPU or CPU, started when its
 * memory plan fits beside the running ones (runner/scheduler.c), its
 * events read from a pipe. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/runner/internal.h"
#include "daemon/runner/scheduler.h"
#include "daemon/runner/worker.h"
#include "plan/plan.h"

_Static_assert(TACOD_MAX_DEVICES <= TACOD_SCHED_DEVICES_MAX,
	       "a device mask holds every device of the config");

/* A worker needs a moment after its spawn to set its signal handler; a
 * stop sent before would kill it without a checkpoint. The service's 1 s
 * tick sends it then. */
#define SETTLE_MS 500
/* Queued jobs looked at per scheduling pass. */
#define QUEUE_CAP 256

/* The head of the queue and the times a later job started first: they
 * live as long as it is the head. */
typedef struct local_state {
	char head_id[TACOD_ID_MAX];
	int head_skips;
} local_state;

/* run->impl */
typedef struct local_job {
	tacod_runner *r;
	tacod_worker *w;
} local_job;

static void local_on_event(tacod_worker *w, json_t *e, void *ctx)
{
	tacod_run *run = ctx;
	tacod_runner *r = ((local_job *)run->impl)->r;

	pthread_mutex_lock(r->env.lock);
	r->env.host.event(r->env.host.ctx, run, e);
	pthread_mutex_unlock(r->env.lock);
	(void)w;
}

static void local_on_exit(tacod_worker *w, int64_t status, int sig, void *ctx)
{
	tacod_run *run = ctx;
	tacod_runner *r = ((local_job *)run->impl)->r;

	pthread_mutex_lock(r->env.lock);
	r->env.host.exit(r->env.host.ctx, run, status, sig);
	pthread_mutex_unlock(r->env.lock);
	(void)w;
}

/* The CUDA numbers of the devices of mask, "2" or "0,1", into out; ""
 * for the one unpinned device of device_memory. */
static void device_numbers(const tacod_config *cfg, uint32_t mask, char *out,
			   size_t cap)
{
	tacod_device_config d[TACOD_MAX_DEVICES];
	int n = tacod_config_device_list(cfg, d);
	size_t len = 0;

	out[0] = 0;
	for (int i = 0; i < n; i++)
		if ((mask & (1u << i)) && d[i].index >= 0 && len < cap)
			len += (size_t)snprintf(out + len, cap - len, "%s%d",
						len ? "," : "", d[i].index);
}

static void start_job(tacod_runner *r, const tacod_job *j, uint32_t devices)
{
	static const tacod_worker_cb cb = {local_on_event, local_on_exit};
	const tacod_config *cfg = r->env.cfg;
	tacod_run *run = calloc(1, sizeof(*run));
	local_job *lj = calloc(1, sizeof(*lj));
	char path[2 * TACOD_PATH_MAX], numbers[TACOD_MAX_DEVICES * 5];
	taco_err err = {{0}};

	if (!run || !lj)
		goto fail;
	snprintf(run->id, sizeof(run->id), "%s", j->id);
	run->planned = (uint64_t)j->planned_bytes;
	run->devices = devices;
	device_numbers(cfg, devices, numbers, sizeof(numbers));
	run->impl = lj;
	lj->r = r;
	snprintf(path, sizeof(path), "%s/%s/job.json", r->env.jobs_dir, j->id);
	/* the job is this runner's once it is running */
	if (tacod_store_job_transition(r->env.store, j->id, TACOD_QUEUED,
				       TACOD_RUNNING, NULL))
		goto fail;
	/* --resume starts fresh when there is no checkpoint yet */
	/* pinned: the job sees only its GPUs, so it never runs on another
	 * by accident (its GPU 0 is the first of them) */
	if (tacod_worker_start_on(
		r->env.loop, cfg->taco_train, path, 1,
		cfg->backend == TACO_BACKEND_CUDA ? "cuda" : "cpu",
		numbers[0] ? numbers : NULL, &cb, run, &lj->w, &err)) {
		r->env.host.start_failed(r->env.host.ctx, j->id, err.msg);
		goto fail;
	}
	run->started_ms = uv_now(r->env.loop);
	tacod_runs_add(r->env.runs, run); /* room checked by the caller */
	r->env.host.running(r->env.host.ctx, run);
	return;
fail:
	free(lj);
	free(run);
}

static void local_schedule(tacod_runner *r)
{
	local_state *ls = r->state;
	tacod_runs *rs = r->env.runs;
	tacod_job *q = calloc(QUEUE_CAP, sizeof(*q));
	tacod_sched_job *sj = calloc(QUEUE_CAP, sizeof(*sj));
	int start[QUEUE_CAP], n = 0, k;
	uint32_t devs[QUEUE_CAP];
	tacod_device_config dc[TACOD_MAX_DEVICES];
	tacod_sched_state st = {
	    {{0}}, 0, 0, r->env.cfg->limits.max_running_jobs, 2};

	if (!q || !sj)
		goto out;
	st.n_dev = tacod_config_device_list(r->env.cfg, dc);
	for (int d = 0; d < st.n_dev; d++)
		st.dev[d].budget = dc[d].memory;
	/* the chat workers' models: a job fits beside them, never in
	 * their place */
	if (r->env.host.held) {
		uint64_t held[TACOD_SCHED_DEVICES_MAX] = {0};
		r->env.host.held(r->env.host.ctx, held, st.n_dev);
		for (int d = 0; d < st.n_dev; d++)
			st.dev[d].running_bytes += held[d];
	}
	for (int i = 0; i < rs->n; i++) {
		for (int d = 0; d < st.n_dev; d++)
			if (rs->run[i]->devices & (1u << d)) {
				st.dev[d].running_bytes += rs->run[i]->planned;
				st.dev[d].running++;
			}
		st.running++;
	}
	if (st.running >= TACOD_MAX_RUNNING)
		goto out;
	if (tacod_store_job_by_status(r->env.store, TACOD_QUEUED, q, QUEUE_CAP,
				      &n, NULL))
		goto out;
	for (int i = 0; i < n; i++) {
		sj[i].planned = (uint64_t)q[i].planned_bytes;
		sj[i].gpus =
		    tacod_request_gpus(q[i].request, TACOD_MAX_DEVICES);
	}
	if (n && !strcmp(q[0].id, ls->head_id))
		sj[0].skips = ls->head_skips;
	k = tacod_sched_pick(&st, sj, n, start, devs);
	if (n) {
		snprintf(ls->head_id, sizeof(ls->head_id), "%s", q[0].id);
		ls->head_skips = sj[0].skips;
	}
	for (int i = 0; i < k && rs->n < TACOD_MAX_RUNNING; i++)
		start_job(r, &q[start[i]], devs[i]);
out:
	for (int i = 0; q && i < n; i++)
		tacod_job_clear(&q[i]);
	free(q);
	free(sj);
}

static void local_apply_stops(tacod_runner *r)
{
	tacod_runs *rs = r->env.runs;

	for (int i = 0; i < rs->n; i++) {
		tacod_run *run = rs->run[i];
		if (uv_now(r->env.loop) - run->started_ms < SETTLE_MS)
			continue;
		if (run->stop && !run->stop_sent) {
			run->stop_sent = 1;
			tacod_worker_stop(
			    ((local_job *)run->impl)->w,
			    (uint64_t)r->env.cfg->cancel_timeout_s * 1000);
		}
	}
}

static int local_open(tacod_runner *r, taco_err *err)
{
	r->state = calloc(1, sizeof(local_state));
	return r->state ? 0 : taco_err_set(err, -ENOMEM, "out of memory");
}

/* Nothing outlives a local tacod but its jobs' checkpoints: the running
 * jobs of the store are queued again, and resume from them. */
static int local_attach(tacod_runner *r, taco_err *err)
{
	return r->env.host.requeue_running(r->env.host.ctx, err);
}

static void local_nothing(tacod_runner *r)
{
	(void)r;
}

static const char *local_stderr(tacod_runner *r, tacod_run *run)
{
	local_job *lj = run->impl;

	(void)r;
	return lj && lj->w ? tacod_worker_stderr(lj->w) : "";
}

static void local_release(tacod_runner *r, tacod_run *run)
{
	local_job *lj = run->impl;

	(void)r;
	if (lj && lj->w)
		tacod_worker_free(lj->w);
	free(lj);
	run->impl = NULL;
}

static void local_free(tacod_runner *r)
{
	free(r->state);
}

const tacod_runner_ops tacod_runner_local = {
    .name = "local",
    .open = local_open,
    .attach = local_attach,
    .arm = local_nothing,
    .schedule = local_schedule,
    .apply_stops = local_apply_stops,
    .stderr_tail = local_stderr,
    .release = local_release,
    .close = local_nothing,
    .free = local_free,
};
