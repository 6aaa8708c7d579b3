/* runner/slurm.c: scheduler "slurm" (docs/slurm.md). Each queued job is
 * submitted to Slurm as a batch job running taco-train on one GPU; Slurm
 * queues it across the nodes. tacod follows it with one squeue call for
 * all its jobs every slurm.poll_interval_s, and reads the events
 * taco-train appends to a file in the job directory (on the filesystem
 * the nodes share) every TACOD_SLURM_READ_MS, adding them to the store in
 * the transaction that moves the file's saved offset, so a tacod killed
 * at any point neither loses nor repeats an event. A job's end becomes
 * the exit status a local worker would have had, and the service decides
 * tacod's status from it as for a local worker (the host's exit).
 * Everything runs on the loop thread, with the service lock held. */

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/runner/internal.h"
#include "daemon/runner/slurm_files.h"
#include "daemon/runner/worker.h"
#include "daemon/store/slurm.h"
#include "plan/plan.h"
#include "util/text.h"

#define TACOD_SLURM_READ_MS 500
/* Bytes of an events file read at once: a whole line of the longest
 * allowed, and then some. */
#define TACOD_SLURM_READ_MAX (TACOD_EVENT_LINE_MAX + 65536)

struct tacod_sjob {
	int64_t slurm_id;      /* 0: not known yet */
	int64_t offset;	       /* of the events file, consumed */
	int submitting;	       /* sbatch has not answered */
	int started;	       /* Slurm has started it */
	uint64_t submitted_ms; /* when sbatch answered (uv_now) */
	uint64_t kill_at_ms;   /* scancel then (after a TERM), or 0 */
	int killed;	       /* scancel sent */
	char dir[TACOD_PATH_MAX + 96];
};

struct tacod_slurm_state {
	uv_timer_t timer;
	int armed, closing;
	int squeue_busy;
	uint64_t squeue_started_ms;
	uint64_t last_poll_ms;
};

#define ST(r) ((struct tacod_slurm_state *)(r)->state)
#define SJ(run) ((struct tacod_sjob *)(run)->impl)
#define LOG(r, ...) (r)->env.host.log((r)->env.host.ctx, __VA_ARGS__)

static int64_t slurm_now_s(void)
{
	return (int64_t)time(NULL);
}

typedef struct cmd_ctx {
	tacod_runner *s;
	char id[TACOD_ID_MAX];
} cmd_ctx;

static uint64_t cmd_timeout_ms(const tacod_runner *s)
{
	return (uint64_t)s->env.cfg->slurm.command_timeout_s * 1000;
}

static tacod_run *new_running(tacod_runner *s, const char *id)
{
	tacod_run *rj = calloc(1, sizeof(*rj));
	struct tacod_sjob *sj = calloc(1, sizeof(*sj));

	if (!rj || !sj || s->env.runs->n >= TACOD_MAX_RUNNING) {
		free(rj);
		free(sj);
		return NULL;
	}
	snprintf(rj->id, sizeof(rj->id), "%s", id);
	rj->impl = sj;
	rj->started_ms = uv_now(s->env.loop);
	snprintf(sj->dir, sizeof(sj->dir), "%s/%s", s->env.jobs_dir, id);
	tacod_runs_add(s->env.runs, rj);
	return rj;
}

/* Drops a job from the running set without touching the store (tacod
 * stops; the Slurm job goes on and the next tacod follows it again). */
static void detach(tacod_runner *s, tacod_run *rj)
{
	tacod_runs_remove(s->env.runs, rj);
	free(SJ(rj));
	free(rj);
}

/* ---- scancel ------------------------------------------------------------ */

static void scancel_done(const tacod_slurm_result *r, void *ctx)
{
	/* a job that is gone already is no error; one that is not gone is
	 * seen again by the next squeue */
	(void)r;
	free(ctx);
}

/* scancel [--signal=TERM --batch] <id>: signal only the batch script,
 * which forwards it to taco-train (a checkpoint request); without signal,
 * Slurm's cancel (TERM to every process, KILL after its KillWait). */
static void scancel(tacod_runner *s, int64_t id, int term)
{
	char sid[32], *argv[6];
	int n = 0;

	snprintf(sid, sizeof(sid), "%lld", (long long)id);
	argv[n++] = (char *)s->env.cfg->slurm.scancel;
	if (term) {
		argv[n++] = "--signal=TERM";
		argv[n++] = "--batch";
	}
	argv[n++] = sid;
	argv[n] = NULL;
	tacod_slurm_run(s->env.loop, argv, cmd_timeout_ms(s), 4096,
			scancel_done, NULL, NULL);
}

/* ---- events ------------------------------------------------------------- */

typedef struct line_ctx {
	tacod_runner *s;
	tacod_run *rj;
} line_ctx;

/* An event of taco-train's; its "started" is when the job runs: queued
 * in tacod until then. */
static void slurm_job_event(tacod_runner *s, tacod_run *rj, json_t *e)
{
	const char *name = json_string_value(json_object_get(e, "event"));

	if (!strcmp(name, "started") &&
	    !tacod_store_job_transition(s->env.store, rj->id, TACOD_QUEUED,
					TACOD_RUNNING, NULL))
		s->env.host.running(s->env.host.ctx, rj);
	s->env.host.event(s->env.host.ctx, rj, e);
}

static void on_line(const char *text, size_t len, void *p)
{
	line_ctx *c = p;
	json_error_t jerr;
	json_t *e = json_loadb(text, len, 0, &jerr);

	/* what is not an event is skipped, as from a local worker's pipe */
	if (e && json_is_object(e) &&
	    json_is_string(json_object_get(e, "event")))
		slurm_job_event(c->s, c->rj, e);
	json_decref(e);
}

/* Reads the job's new complete event lines into the store, with the new
 * offset, in one transaction. 1 when there were some, 0 when none, -1
 * when taco-train broke the protocol (the job is being stopped). */
static int read_events(tacod_runner *s, tacod_run *rj)
{
	struct tacod_sjob *sj = SJ(rj);
	char path[TACOD_PATH_MAX + 160];
	line_ctx c = {s, rj};
	int64_t off = sj->offset;
	taco_err err = {{0}};
	int rc;

	snprintf(path, sizeof(path), "%s/" TACOD_SLURM_EVENTS, sj->dir);
	if (tacod_store_tx_begin(s->env.store, NULL))
		return 0;
	rc = tacod_slurm_read_lines(path, &off, TACOD_SLURM_READ_MAX,
				    TACOD_EVENT_LINE_MAX, on_line, &c, &err);
	if (off != sj->offset &&
	    tacod_store_slurm_offset(s->env.store, rj->id, off, NULL) < 0)
		rc = -EIO;
	if (tacod_store_tx_end(s->env.store, rc == -E2BIG ? 0 : rc, NULL) ==
	    0) {
		int more = off != sj->offset;
		sj->offset = off;
		if (more)
			uv_async_send(s->env.wake); /* followers get them */
		if (rc == -E2BIG && !rj->error[0]) {
			/* a worker that breaks the protocol is stopped */
			taco_text_copy(rj->error, sizeof(rj->error), err.msg);
			if (sj->slurm_id && !sj->killed) {
				sj->killed = 1;
				scancel(s, sj->slurm_id, 0);
			}
			return -1;
		}
		return more;
	}
	return 0;
}

/* ---- the end of a Slurm job -------------------------------------------- */

static int state_is(const char *st, const char *const *names)
{
	for (int i = 0; names[i]; i++)
		if (!strcmp(st, names[i]))
			return 1;
	return 0;
}

/* The job's Slurm job has ended (final: its last state in squeue, or
 * NULL when squeue no longer knows it): the events left are read, and the
 * end becomes a worker's exit status for finish_job. */
static void settle(tacod_runner *s, tacod_run *rj, const char *final)
{
	static const char *const lost[] = {"NODE_FAIL", "PREEMPTED",
					   "BOOT_FAIL", NULL};
	struct tacod_sjob *sj = SJ(rj);
	int64_t status = 0;
	int sig = 0, have, n = 0;
	taco_err err = {{0}};
	char m[512];

	while (read_events(s, rj) == 1 && n++ < 1000)
		;
	have = tacod_slurm_read_status(sj->dir, &status, &sig, &err) == 0;
	if (final && state_is(final, lost)) {
		/* the node went, or a higher priority job took it: like a
		 * crashed worker, again from the newest checkpoint (as
		 * often as max_retries allows) */
		snprintf(m, sizeof(m),
			 "Slurm job %lld ended %s: the job resumes from its "
			 "newest checkpoint",
			 (long long)sj->slurm_id, final);
		LOG(s, rj->id, "warn", "message", m, NULL);
		status = 0;
		sig = SIGKILL;
	} else if (final && !strcmp(final, "TIMEOUT")) {
		snprintf(rj->error, sizeof(rj->error),
			 "the Slurm job %lld reached its time limit (%s%s)",
			 (long long)sj->slurm_id,
			 s->env.cfg->slurm.time_limit[0] ? "slurm.time_limit "
							 : "the partition's",
			 s->env.cfg->slurm.time_limit);
		status = 1;
		sig = 0;
	} else if (!rj->stop && ((final && !strcmp(final, "CANCELLED")) ||
				 (have && status == 3 && !sig))) {
		/* not tacod's cancel: an administrator's scancel */
		snprintf(rj->error, sizeof(rj->error),
			 "the Slurm job %lld was cancelled outside tacod",
			 (long long)sj->slurm_id);
		status = 1;
		sig = 0;
	} else if (!have) {
		/* no exit status: killed before taco-train ended (a cancel
		 * past its timeout, a pending job cancelled, the node lost) */
		if (!rj->stop && !rj->error[0]) {
			snprintf(m, sizeof(m),
				 "Slurm job %lld ended%s%s without an exit "
				 "status",
				 (long long)sj->slurm_id, final ? " " : "",
				 final ? final : "");
			LOG(s, rj->id, "warn", "message", m, NULL);
		}
		status = 0;
		sig = SIGKILL;
	}
	if (rj->error[0] && !(status == 0 && sig)) {
		/* the error decides, whatever taco-train's status was */
		status = status ? status : 1;
		sig = 0;
	}
	if (!rj->error[0] && !(status == 0 && !sig))
		tacod_slurm_stderr_tail(sj->dir, rj->error, sizeof(rj->error));
	tacod_store_tx_begin(s->env.store, NULL);
	tacod_store_slurm_delete(s->env.store, rj->id, NULL);
	s->env.host.exit(s->env.host.ctx, rj, status, sig);
	tacod_store_tx_end(s->env.store, 0, NULL);
}

/* ---- sbatch ------------------------------------------------------------- */

static void fail_now(tacod_runner *s, tacod_run *rj, const char *msg)
{
	taco_text_copy(rj->error, sizeof(rj->error), msg);
	tacod_store_tx_begin(s->env.store, NULL);
	tacod_store_slurm_delete(s->env.store, rj->id, NULL);
	s->env.host.exit(s->env.host.ctx, rj, 1, 0);
	tacod_store_tx_end(s->env.store, 0, NULL);
}

static void sbatch_done(const tacod_slurm_result *r, void *p)
{
	cmd_ctx *c = p;
	tacod_runner *s = c->s;
	tacod_run *rj;
	taco_err err = {{0}};
	int64_t id = 0;
	char m[1400];

	pthread_mutex_lock(s->env.lock);
	rj = *s->env.closed ? NULL : tacod_runs_find(s->env.runs, c->id);
	if (!rj || !SJ(rj)) {
		/* tacod stopped meanwhile: the next one finds the Slurm job
		 * by its name */
		goto out;
	}
	SJ(rj)->submitting = 0;
	if (r->rc || r->status || r->signal ||
	    tacod_slurm_parse_sbatch(r->out, r->len, &id, &err)) {
		snprintf(m, sizeof(m), "sbatch failed%s: %s",
			 r->rc == -ETIMEDOUT ? " (timed out)" : "",
			 r->err[0] ? r->err : err.msg);
		fail_now(s, rj, m);
		goto out;
	}
	{
		tacod_slurm_row row;
		memset(&row, 0, sizeof(row));
		snprintf(row.job_id, sizeof(row.job_id), "%s", rj->id);
		row.slurm_id = id;
		row.submitted_at = slurm_now_s();
		SJ(rj)->slurm_id = id;
		SJ(rj)->submitted_ms = uv_now(s->env.loop);
		tacod_store_slurm_put(s->env.store, &row, NULL);
		snprintf(m, sizeof(m), "Submitted to Slurm as job %lld",
			 (long long)id);
		LOG(s, rj->id, "info", "message", m,
		    json_pack("{sI}", "slurm_job_id", (json_int_t)id));
	}
	uv_async_send(s->env.wake); /* a stop asked meanwhile goes out */
out:
	pthread_mutex_unlock(s->env.lock);
	free(c);
}

static void submit(tacod_runner *s, const tacod_job *j)
{
	const tacod_slurm_config *sc = &s->env.cfg->slurm;
	char name[TACOD_ID_MAX + 32], comment[TACOD_ID_MAX + 32];
	char chdir_[TACOD_PATH_MAX + 128], output[TACOD_PATH_MAX + 128];
	char script[TACOD_PATH_MAX + 128], gres[160], part[160], acct[160];
	char tl[96], ntasks[32], *argv[TACOD_SLURM_ARGS_MAX];
	tacod_slurm_row row;
	memset(&row, 0, sizeof(row));
	taco_err err = {{0}};
	tacod_run *rj = new_running(s, j->id);
	cmd_ctx *c;
	int n = 0, gpus;

	if (!rj)
		return;
	rj->planned = (uint64_t)j->planned_bytes;
	SJ(rj)->submitting = 1;
	snprintf(row.job_id, sizeof(row.job_id), "%s", j->id);
	row.submitted_at = slurm_now_s();
	if (tacod_slurm_clean(SJ(rj)->dir, &err) ||
	    tacod_slurm_write_script(
		SJ(rj)->dir, s->env.cfg->taco_train,
		s->env.cfg->backend == TACO_BACKEND_CUDA ? "cuda" : "cpu",
		&err) ||
	    tacod_store_slurm_put(s->env.store, &row, &err)) {
		fail_now(s, rj, err.msg);
		return;
	}
	snprintf(name, sizeof(name), "--job-name=tacod-%s", j->id);
	snprintf(comment, sizeof(comment), "--comment=%s", j->id);
	snprintf(chdir_, sizeof(chdir_), "--chdir=%s", SJ(rj)->dir);
	snprintf(output, sizeof(output), "--output=%s/" TACOD_SLURM_OUTPUT,
		 SJ(rj)->dir);
	snprintf(script, sizeof(script), "%s/" TACOD_SLURM_SCRIPT, SJ(rj)->dir);
	/* a job of gpus N: N tasks, a GPU each, that taco-train's launcher
	 * starts with srun (engine/launch.c) */
	gpus = tacod_request_gpus(j->request,
				  TACO_JOB_MAX_GPUS); /* plan.h's job.h */
	memcpy(gres, "--gres=", 7);
	if (tacod_slurm_gres(sc->gres, gpus, gres + 7, sizeof(gres) - 7)) {
		fail_now(s, rj, "slurm.gres: too long for the job's GPUs");
		return;
	}
	snprintf(ntasks, sizeof(ntasks), "--ntasks=%d", gpus);
	argv[n++] = (char *)sc->sbatch;
	argv[n++] = "--parsable";
	argv[n++] = name;
	argv[n++] = comment;
	argv[n++] = gres;
	argv[n++] = "--nodes=1";
	argv[n++] = ntasks;
	/* tacod resubmits a job whose node failed, with --resume and
	 * within max_retries; Slurm's own requeue would bypass both */
	argv[n++] = "--no-requeue";
	argv[n++] = chdir_;
	argv[n++] = output;
	argv[n++] = "--open-mode=append";
	if (sc->partition[0]) {
		snprintf(part, sizeof(part), "--partition=%s", sc->partition);
		argv[n++] = part;
	}
	if (sc->account[0]) {
		snprintf(acct, sizeof(acct), "--account=%s", sc->account);
		argv[n++] = acct;
	}
	if (sc->time_limit[0]) {
		snprintf(tl, sizeof(tl), "--time=%s", sc->time_limit);
		argv[n++] = tl;
	}
	for (int i = 0; i < sc->n_options; i++)
		argv[n++] = (char *)sc->options[i];
	argv[n++] = script;
	argv[n] = NULL;
	c = calloc(1, sizeof(*c));
	if (!c) {
		fail_now(s, rj, "out of memory");
		return;
	}
	c->s = s;
	snprintf(c->id, sizeof(c->id), "%s", j->id);
	if (tacod_slurm_run(s->env.loop, argv, cmd_timeout_ms(s), 4096,
			    sbatch_done, c, &err)) {
		free(c);
		fail_now(s, rj, err.msg);
	}
}

static void slurm_schedule(tacod_runner *s)
{
	enum { CAP = 256 };
	tacod_job *q;
	int n = 0, cap = s->env.cfg->limits.max_running_jobs;

	if (cap > TACOD_MAX_RUNNING)
		cap = TACOD_MAX_RUNNING;
	if (s->env.runs->n >= cap || !(q = calloc(CAP, sizeof(*q))))
		return;
	/* no memory admission here: Slurm queues the jobs on its nodes;
	 * the create refused what can never fit slurm.gpu_memory */
	if (!tacod_store_job_by_status(s->env.store, TACOD_QUEUED, q, CAP, &n,
				       NULL))
		for (int i = 0; i < n && s->env.runs->n < cap; i++)
			if (!tacod_runs_find(s->env.runs, q[i].id))
				submit(s, &q[i]);
	for (int i = 0; i < n; i++)
		tacod_job_clear(&q[i]);
	free(q);
}

/* ---- stops -------------------------------------------------------------- */

static void apply_stop(tacod_runner *s, tacod_run *rj)
{
	struct tacod_sjob *sj = SJ(rj);

	if (rj->stop == TACOD_STOP_SHUTDOWN) {
		detach(s, rj);
		return;
	}
	/* not before sbatch has answered or squeue named the job */
	if (!rj->stop || rj->stop_sent || sj->submitting || !sj->slurm_id)
		return;
	rj->stop_sent = 1;
	if (!sj->started) {
		/* pending: nothing to checkpoint */
		sj->killed = 1;
		scancel(s, sj->slurm_id, 0);
		return;
	}
	scancel(s, sj->slurm_id, 1);
	sj->kill_at_ms =
	    uv_now(s->env.loop) + (uint64_t)s->env.cfg->cancel_timeout_s * 1000;
}

/* ---- squeue ------------------------------------------------------------- */

/* By the stored Slurm id; else by the name, the newest of that name (an
 * earlier attempt's may still be listed as ended). */
static const tacod_slurm_entry *slurm_lookup(const tacod_slurm_entry *e, int n,
					     const tacod_run *rj)
{
	const tacod_slurm_entry *best = NULL;

	for (int i = 0; i < n; i++) {
		if (SJ(rj)->slurm_id) {
			if (e[i].id == SJ(rj)->slurm_id)
				return &e[i];
		} else if (!strcmp(e[i].job_id, rj->id) &&
			   (!best || e[i].id > best->id)) {
			best = &e[i];
		}
	}
	return best;
}

static void squeue_done(const tacod_slurm_result *r, void *p)
{
	static const char *const waiting[] = {
	    "PENDING",	   "CONFIGURING",   "REQUEUED",	    "REQUEUE_HOLD",
	    "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT", NULL};
	static const char *const active[] = {
	    "RUNNING",	 "COMPLETING", "SUSPENDED", "STOPPED",
	    "SIGNALING", "STAGE_OUT",  "RESIZING",  NULL};
	tacod_runner *s = p;
	tacod_slurm_entry *e = NULL;
	char ids[TACOD_MAX_RUNNING][TACOD_ID_MAX];
	int n = 0, k = 0;

	pthread_mutex_lock(s->env.lock);
	ST(s)->squeue_busy = 0;
	if (*s->env.closed || ST(s)->closing || r->rc || r->status ||
	    r->signal || r->truncated)
		goto out; /* the next poll tries again */
	e = calloc(TACOD_MAX_RUNNING * 4, sizeof(*e));
	if (!e || tacod_slurm_parse_squeue(r->out, r->len, e,
					   TACOD_MAX_RUNNING * 4, &n, NULL))
		goto out;
	if (n > TACOD_MAX_RUNNING * 4)
		goto out; /* not all of them seen: decide nothing */
	/* settling removes jobs from run[]: walk a copy of the ids */
	for (int i = 0; i < s->env.runs->n; i++)
		if (s->env.runs->run[i]->impl)
			snprintf(ids[k++], TACOD_ID_MAX, "%s",
				 s->env.runs->run[i]->id);
	for (int i = 0; i < k; i++) {
		tacod_run *rj = tacod_runs_find(s->env.runs, ids[i]);
		const tacod_slurm_entry *x;
		if (!rj || !SJ(rj) || SJ(rj)->submitting)
			continue;
		x = slurm_lookup(e, n, rj);
		if (x && !SJ(rj)->slurm_id) {
			/* submitted by a tacod that stopped before sbatch's
			 * answer: found by its name */
			tacod_slurm_row row;
			memset(&row, 0, sizeof(row));
			snprintf(row.job_id, sizeof(row.job_id), "%s", rj->id);
			row.slurm_id = x->id;
			row.events_offset = SJ(rj)->offset;
			row.submitted_at = slurm_now_s();
			SJ(rj)->slurm_id = x->id;
			tacod_store_slurm_put(s->env.store, &row, NULL);
		}
		if (x && state_is(x->state, waiting))
			continue;
		if (x && state_is(x->state, active)) {
			SJ(rj)->started = 1;
			continue;
		}
		/* a job sbatch took after this squeue began may not be in
		 * its answer yet */
		if (!x && SJ(rj)->submitted_ms >= ST(s)->squeue_started_ms)
			continue;
		settle(s, rj, x ? x->state : NULL);
	}
out:
	free(e);
	pthread_mutex_unlock(s->env.lock);
}

static void poll_squeue(tacod_runner *s)
{
	char user[48];
	/* --user=<uid> rather than --me, which Slurm before 20.11 lacks */
	char *argv[] = {(char *)s->env.cfg->slurm.squeue,
			user,
			"--noheader",
			"--states=all",
			"--format=%i|%T|%j",
			NULL};

	snprintf(user, sizeof(user), "--user=%u", (unsigned)getuid());

	ST(s)->squeue_busy = 1;
	ST(s)->squeue_started_ms = uv_now(s->env.loop);
	ST(s)->last_poll_ms = ST(s)->squeue_started_ms;
	if (tacod_slurm_run(s->env.loop, argv, cmd_timeout_ms(s),
			    TACOD_SLURM_OUT_MAX, squeue_done, s, NULL))
		ST(s)->squeue_busy = 0;
}

static void on_timer(uv_timer_t *t)
{
	tacod_runner *s = t->data;
	uint64_t now = uv_now(s->env.loop);
	int any = 0;

	pthread_mutex_lock(s->env.lock);
	for (int i = 0; i < s->env.runs->n; i++) {
		tacod_run *rj = s->env.runs->run[i];
		struct tacod_sjob *sj = SJ(rj);
		if (!sj)
			continue;
		any = 1;
		read_events(s, rj);
		if (sj->kill_at_ms && now >= sj->kill_at_ms && !sj->killed) {
			/* the checkpoint took too long: Slurm's cancel */
			sj->killed = 1;
			scancel(s, sj->slurm_id, 0);
		}
	}
	if (any && !ST(s)->squeue_busy && !ST(s)->closing &&
	    now - ST(s)->last_poll_ms >=
		(uint64_t)s->env.cfg->slurm.poll_interval_s * 1000)
		poll_squeue(s);
	pthread_mutex_unlock(s->env.lock);
}

/* ---- start and stop ----------------------------------------------------- */

static int slurm_open(tacod_runner *s, taco_err *err)
{
	s->state = calloc(1, sizeof(struct tacod_slurm_state));
	return s->state ? 0 : taco_err_set(err, -ENOMEM, "out of memory");
}

static int slurm_attach(tacod_runner *s, taco_err *err)
{
	tacod_slurm_row *rows = calloc(TACOD_MAX_RUNNING, sizeof(*rows));
	int n = 0, rc;

	if (!rows)
		return taco_err_set(err, -ENOMEM, "out of memory");
	rc = tacod_store_slurm_list(s->env.store, rows, TACOD_MAX_RUNNING, &n,
				    err);
	for (int i = 0; !rc && i < n; i++) {
		tacod_job j = {0};
		tacod_run *rj = NULL;
		char m[256];
		if (tacod_store_job_get(s->env.store, NULL, rows[i].job_id, &j,
					NULL))
			continue;
		if (j.status == TACOD_QUEUED || j.status == TACOD_RUNNING)
			rj = new_running(s, j.id);
		if (rj) {
			rj->planned = (uint64_t)j.planned_bytes;
			SJ(rj)->slurm_id = rows[i].slurm_id;
			SJ(rj)->offset = rows[i].events_offset;
			SJ(rj)->started = j.status == TACOD_RUNNING;
			snprintf(m, sizeof(m),
				 "tacod restarted: it follows Slurm job %lld "
				 "again",
				 (long long)rows[i].slurm_id);
			LOG(s, j.id, "info", "message", m, NULL);
		} else {
			/* cancelled or paused while tacod was away from it */
			if (rows[i].slurm_id)
				scancel(s, rows[i].slurm_id, 0);
			tacod_store_slurm_delete(s->env.store, j.id, NULL);
		}
		tacod_job_clear(&j);
	}
	/* running without a Slurm job: queued again, as after a local
	 * tacod's restart */
	if (!rc)
		rc = s->env.host.requeue_running(s->env.host.ctx, err);
	free(rows);
	return rc;
}

static void slurm_arm(tacod_runner *s)
{
	uv_timer_init(s->env.loop, &ST(s)->timer);
	ST(s)->timer.data = s;
	ST(s)->armed = 1;
	uv_timer_start(&ST(s)->timer, on_timer, 0, TACOD_SLURM_READ_MS);
}

static void timer_closed(uv_handle_t *h)
{
	(void)h;
}

static void slurm_close(tacod_runner *s)
{
	if (ST(s)->closing)
		return;
	ST(s)->closing = 1;
	if (ST(s)->armed)
		uv_close((uv_handle_t *)&ST(s)->timer, timer_closed);
}

static void slurm_free(tacod_runner *s)
{
	/* after a failed start: the jobs attached but never followed */
	while (s->env.runs->n > 0)
		detach(s, s->env.runs->run[0]);
	free(s->state);
}

static const char *slurm_stderr(tacod_runner *s, tacod_run *rj)
{
	/* the tail of its stderr file is in rj->error already (settle) */
	(void)s;
	(void)rj;
	return "";
}

static void slurm_release(tacod_runner *s, tacod_run *rj)
{
	(void)s;
	free(SJ(rj));
	rj->impl = NULL;
}

/* Stops requested by the API: each run's, in turn; a shutdown detaches
 * the run (its Slurm job goes on, and the next tacod follows it). */
static void slurm_apply_stops(tacod_runner *s)
{
	for (int i = 0; i < s->env.runs->n; i++) {
		int n = s->env.runs->n;
		apply_stop(s, s->env.runs->run[i]);
		if (s->env.runs->n < n)
			i--; /* detached: another took its place */
	}
}

const tacod_runner_ops tacod_runner_slurm = {
    .name = "slurm",
    .open = slurm_open,
    .attach = slurm_attach,
    .arm = slurm_arm,
    .schedule = slurm_schedule,
    .apply_stops = slurm_apply_stops,
    .stderr_tail = slurm_stderr,
    .release = slurm_release,
    .close = slurm_close,
    .free = slurm_free,
};
