/* service_slurm.c: scheduler "slurm" (docs/slurm.md). Each queued job is
 * submitted to Slurm as a batch job running taco-train on one GPU; Slurm
 * queues it across the nodes. tacod follows it with one squeue call for
 * all its jobs every slurm.poll_interval_s, and reads the events
 * taco-train appends to a file in the job directory (on the filesystem
 * the nodes share) every TACOD_SLURM_READ_MS, adding them to the store in
 * the transaction that moves the file's saved offset, so a tacod killed
 * at any point neither loses nor repeats an event. A job's end becomes
 * the exit status a local worker would have had, and service.c's
 * finish_job decides tacod's status from it as for a local worker.
 * Everything runs on the loop thread, with the service lock held. */
#include "service_internal.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "slurm.h"
#include "store_slurm.h"
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

typedef struct cmd_ctx {
	tacod_service *s;
	char id[TACOD_ID_MAX];
} cmd_ctx;

static uint64_t cmd_timeout_ms(const tacod_service *s)
{
	return (uint64_t)s->cfg.slurm.command_timeout_s * 1000;
}

static tacod_running *new_running(tacod_service *s, const char *id)
{
	tacod_running *rj = calloc(1, sizeof(*rj));
	struct tacod_sjob *sj = calloc(1, sizeof(*sj));

	if (!rj || !sj || s->n_run >= TACOD_MAX_RUNNING) {
		free(rj);
		free(sj);
		return NULL;
	}
	snprintf(rj->id, sizeof(rj->id), "%s", id);
	rj->svc = s;
	rj->sj = sj;
	rj->started_ms = uv_now(s->loop);
	snprintf(sj->dir, sizeof(sj->dir), "%s/%s", s->jobs_dir, id);
	s->run[s->n_run++] = rj;
	return rj;
}

/* Drops a job from the running set without touching the store (tacod
 * stops; the Slurm job goes on and the next tacod follows it again). */
static void detach(tacod_service *s, tacod_running *rj)
{
	for (int i = 0; i < s->n_run; i++) {
		if (s->run[i] == rj) {
			s->run[i] = s->run[--s->n_run];
			break;
		}
	}
	free(rj->sj);
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
static void scancel(tacod_service *s, int64_t id, int term)
{
	char sid[32], *argv[6];
	int n = 0;

	snprintf(sid, sizeof(sid), "%lld", (long long)id);
	argv[n++] = s->cfg.slurm.scancel;
	if (term) {
		argv[n++] = "--signal=TERM";
		argv[n++] = "--batch";
	}
	argv[n++] = sid;
	argv[n] = NULL;
	tacod_slurm_run(s->loop, argv, cmd_timeout_ms(s), 4096, scancel_done,
			NULL, NULL);
}

/* ---- events ------------------------------------------------------------- */

typedef struct line_ctx {
	tacod_service *s;
	tacod_running *rj;
} line_ctx;

static void on_line(const char *text, size_t len, void *p)
{
	line_ctx *c = p;
	json_error_t jerr;
	json_t *e = json_loadb(text, len, 0, &jerr);

	/* what is not an event is skipped, as from a local worker's pipe */
	if (e && json_is_object(e) &&
	    json_is_string(json_object_get(e, "event")))
		tacod_service_job_event(c->s, c->rj, e);
	json_decref(e);
}

/* Reads the job's new complete event lines into the store, with the new
 * offset, in one transaction. 1 when there were some, 0 when none, -1
 * when taco-train broke the protocol (the job is being stopped). */
static int read_events(tacod_service *s, tacod_running *rj)
{
	struct tacod_sjob *sj = rj->sj;
	char path[TACOD_PATH_MAX + 160];
	line_ctx c = {s, rj};
	int64_t off = sj->offset;
	taco_err err = {{0}};
	int rc;

	snprintf(path, sizeof(path), "%s/" TACOD_SLURM_EVENTS, sj->dir);
	if (tacod_store_tx_begin(s->store, NULL))
		return 0;
	rc = tacod_slurm_read_lines(path, &off, TACOD_SLURM_READ_MAX,
				    TACOD_EVENT_LINE_MAX, on_line, &c, &err);
	if (off != sj->offset &&
	    tacod_store_slurm_offset(s->store, rj->id, off, NULL) < 0)
		rc = -EIO;
	if (tacod_store_tx_end(s->store, rc == -E2BIG ? 0 : rc, NULL) == 0) {
		int more = off != sj->offset;
		sj->offset = off;
		if (more)
			uv_async_send(&s->wake); /* followers get them */
		if (rc == -E2BIG && !rj->error[0]) {
			/* a worker that breaks the protocol is stopped */
			snprintf(rj->error, sizeof(rj->error), "%s", err.msg);
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
static void settle(tacod_service *s, tacod_running *rj, const char *final)
{
	static const char *const lost[] = {"NODE_FAIL", "PREEMPTED",
					   "BOOT_FAIL", NULL};
	struct tacod_sjob *sj = rj->sj;
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
		tacod_service_event(s, rj->id, "warn", "message", m, NULL);
		status = 0;
		sig = SIGKILL;
	} else if (final && !strcmp(final, "TIMEOUT")) {
		snprintf(rj->error, sizeof(rj->error),
			 "the Slurm job %lld reached its time limit (%s%s)",
			 (long long)sj->slurm_id,
			 s->cfg.slurm.time_limit[0] ? "slurm.time_limit "
						    : "the partition's",
			 s->cfg.slurm.time_limit);
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
			tacod_service_event(s, rj->id, "warn", "message", m,
					    NULL);
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
	tacod_store_tx_begin(s->store, NULL);
	tacod_store_slurm_delete(s->store, rj->id, NULL);
	tacod_service_job_exit(s, rj, status, sig);
	tacod_store_tx_end(s->store, 0, NULL);
}

/* ---- sbatch ------------------------------------------------------------- */

static void fail_now(tacod_service *s, tacod_running *rj, const char *msg)
{
	taco_text_copy(rj->error, sizeof(rj->error), msg);
	tacod_store_tx_begin(s->store, NULL);
	tacod_store_slurm_delete(s->store, rj->id, NULL);
	tacod_service_job_exit(s, rj, 1, 0);
	tacod_store_tx_end(s->store, 0, NULL);
}

static void sbatch_done(const tacod_slurm_result *r, void *p)
{
	cmd_ctx *c = p;
	tacod_service *s = c->s;
	tacod_running *rj;
	taco_err err = {{0}};
	int64_t id = 0;
	char m[1400];

	pthread_mutex_lock(&s->lock);
	rj = s->closed ? NULL : tacod_service_find_running(s, c->id);
	if (!rj || !rj->sj) {
		/* tacod stopped meanwhile: the next one finds the Slurm job
		 * by its name */
		goto out;
	}
	rj->sj->submitting = 0;
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
		row.submitted_at = tacod_now();
		rj->sj->slurm_id = id;
		rj->sj->submitted_ms = uv_now(s->loop);
		tacod_store_slurm_put(s->store, &row, NULL);
		snprintf(m, sizeof(m), "Submitted to Slurm as job %lld",
			 (long long)id);
		tacod_service_event(
		    s, rj->id, "info", "message", m,
		    json_pack("{sI}", "slurm_job_id", (json_int_t)id));
	}
	uv_async_send(&s->wake); /* a stop asked meanwhile goes out */
out:
	pthread_mutex_unlock(&s->lock);
	free(c);
}

static void submit(tacod_service *s, const tacod_job *j)
{
	const tacod_slurm_config *sc = &s->cfg.slurm;
	char name[TACOD_ID_MAX + 32], comment[TACOD_ID_MAX + 32];
	char chdir_[TACOD_PATH_MAX + 128], output[TACOD_PATH_MAX + 128];
	char script[TACOD_PATH_MAX + 128], gres[160], part[160], acct[160];
	char tl[96], *argv[TACOD_SLURM_ARGS_MAX];
	tacod_slurm_row row;
	memset(&row, 0, sizeof(row));
	taco_err err = {{0}};
	tacod_running *rj = new_running(s, j->id);
	cmd_ctx *c;
	int n = 0;

	if (!rj)
		return;
	rj->planned = (uint64_t)j->planned_bytes;
	rj->sj->submitting = 1;
	snprintf(row.job_id, sizeof(row.job_id), "%s", j->id);
	row.submitted_at = tacod_now();
	if (tacod_slurm_clean(rj->sj->dir, &err) ||
	    tacod_slurm_write_script(
		rj->sj->dir, s->cfg.taco_train,
		s->cfg.backend == TACO_BACKEND_CUDA ? "cuda" : "cpu", &err) ||
	    tacod_store_slurm_put(s->store, &row, &err)) {
		fail_now(s, rj, err.msg);
		return;
	}
	snprintf(name, sizeof(name), "--job-name=tacod-%s", j->id);
	snprintf(comment, sizeof(comment), "--comment=%s", j->id);
	snprintf(chdir_, sizeof(chdir_), "--chdir=%s", rj->sj->dir);
	snprintf(output, sizeof(output), "--output=%s/" TACOD_SLURM_OUTPUT,
		 rj->sj->dir);
	snprintf(script, sizeof(script), "%s/" TACOD_SLURM_SCRIPT, rj->sj->dir);
	snprintf(gres, sizeof(gres), "--gres=%s", sc->gres);
	argv[n++] = (char *)sc->sbatch;
	argv[n++] = "--parsable";
	argv[n++] = name;
	argv[n++] = comment;
	argv[n++] = gres;
	argv[n++] = "--nodes=1";
	argv[n++] = "--ntasks=1";
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
	if (tacod_slurm_run(s->loop, argv, cmd_timeout_ms(s), 4096, sbatch_done,
			    c, &err)) {
		free(c);
		fail_now(s, rj, err.msg);
	}
}

void tacod_slurm_schedule(tacod_service *s)
{
	enum { CAP = 256 };
	tacod_job *q;
	int n = 0, cap = s->cfg.limits.max_running_jobs;

	if (cap > TACOD_MAX_RUNNING)
		cap = TACOD_MAX_RUNNING;
	if (s->n_run >= cap || !(q = calloc(CAP, sizeof(*q))))
		return;
	/* no memory admission here: Slurm queues the jobs on its nodes;
	 * the create refused what can never fit slurm.gpu_memory */
	if (!tacod_store_job_by_status(s->store, TACOD_QUEUED, q, CAP, &n,
				       NULL))
		for (int i = 0; i < n && s->n_run < cap; i++)
			if (!tacod_service_find_running(s, q[i].id))
				submit(s, &q[i]);
	for (int i = 0; i < n; i++)
		tacod_job_clear(&q[i]);
	free(q);
}

/* ---- stops -------------------------------------------------------------- */

void tacod_slurm_apply_stop(tacod_service *s, tacod_running *rj)
{
	struct tacod_sjob *sj = rj->sj;

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
	    uv_now(s->loop) + (uint64_t)s->cfg.cancel_timeout_s * 1000;
}

/* ---- squeue ------------------------------------------------------------- */

/* By the stored Slurm id; else by the name, the newest of that name (an
 * earlier attempt's may still be listed as ended). */
static const tacod_slurm_entry *lookup(const tacod_slurm_entry *e, int n,
				       const tacod_running *rj)
{
	const tacod_slurm_entry *best = NULL;

	for (int i = 0; i < n; i++) {
		if (rj->sj->slurm_id) {
			if (e[i].id == rj->sj->slurm_id)
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
	tacod_service *s = p;
	tacod_slurm_entry *e = NULL;
	char ids[TACOD_MAX_RUNNING][TACOD_ID_MAX];
	int n = 0, k = 0;

	pthread_mutex_lock(&s->lock);
	s->slurm->squeue_busy = 0;
	if (s->closed || s->slurm->closing || r->rc || r->status || r->signal ||
	    r->truncated)
		goto out; /* the next poll tries again */
	e = calloc(TACOD_MAX_RUNNING * 4, sizeof(*e));
	if (!e || tacod_slurm_parse_squeue(r->out, r->len, e,
					   TACOD_MAX_RUNNING * 4, &n, NULL))
		goto out;
	if (n > TACOD_MAX_RUNNING * 4)
		goto out; /* not all of them seen: decide nothing */
	/* settling removes jobs from run[]: walk a copy of the ids */
	for (int i = 0; i < s->n_run; i++)
		if (s->run[i]->sj)
			snprintf(ids[k++], TACOD_ID_MAX, "%s", s->run[i]->id);
	for (int i = 0; i < k; i++) {
		tacod_running *rj = tacod_service_find_running(s, ids[i]);
		const tacod_slurm_entry *x;
		if (!rj || !rj->sj || rj->sj->submitting)
			continue;
		x = lookup(e, n, rj);
		if (x && !rj->sj->slurm_id) {
			/* submitted by a tacod that stopped before sbatch's
			 * answer: found by its name */
			tacod_slurm_row row;
			memset(&row, 0, sizeof(row));
			snprintf(row.job_id, sizeof(row.job_id), "%s", rj->id);
			row.slurm_id = x->id;
			row.events_offset = rj->sj->offset;
			row.submitted_at = tacod_now();
			rj->sj->slurm_id = x->id;
			tacod_store_slurm_put(s->store, &row, NULL);
		}
		if (x && state_is(x->state, waiting))
			continue;
		if (x && state_is(x->state, active)) {
			rj->sj->started = 1;
			continue;
		}
		/* a job sbatch took after this squeue began may not be in
		 * its answer yet */
		if (!x && rj->sj->submitted_ms >= s->slurm->squeue_started_ms)
			continue;
		settle(s, rj, x ? x->state : NULL);
	}
out:
	free(e);
	pthread_mutex_unlock(&s->lock);
}

static void poll_squeue(tacod_service *s)
{
	char user[48];
	/* --user=<uid> rather than --me, which Slurm before 20.11 lacks */
	char *argv[] = {s->cfg.slurm.squeue, user, "--noheader", "--states=all",
			"--format=%i|%T|%j", NULL};

	snprintf(user, sizeof(user), "--user=%u", (unsigned)getuid());

	s->slurm->squeue_busy = 1;
	s->slurm->squeue_started_ms = uv_now(s->loop);
	s->slurm->last_poll_ms = s->slurm->squeue_started_ms;
	if (tacod_slurm_run(s->loop, argv, cmd_timeout_ms(s),
			    TACOD_SLURM_OUT_MAX, squeue_done, s, NULL))
		s->slurm->squeue_busy = 0;
}

static void on_timer(uv_timer_t *t)
{
	tacod_service *s = t->data;
	uint64_t now = uv_now(s->loop);
	int any = 0;

	pthread_mutex_lock(&s->lock);
	for (int i = 0; i < s->n_run; i++) {
		tacod_running *rj = s->run[i];
		struct tacod_sjob *sj = rj->sj;
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
	if (any && !s->slurm->squeue_busy && !s->slurm->closing &&
	    now - s->slurm->last_poll_ms >=
		(uint64_t)s->cfg.slurm.poll_interval_s * 1000)
		poll_squeue(s);
	pthread_mutex_unlock(&s->lock);
}

/* ---- start and stop ----------------------------------------------------- */

int tacod_slurm_attach(tacod_service *s, taco_err *err)
{
	tacod_slurm_row *rows = calloc(TACOD_MAX_RUNNING, sizeof(*rows));
	int n = 0, rc;

	s->slurm = calloc(1, sizeof(*s->slurm));
	if (!rows || !s->slurm) {
		free(rows);
		return taco_err_set(err, -ENOMEM, "out of memory");
	}
	rc = tacod_store_slurm_list(s->store, rows, TACOD_MAX_RUNNING, &n, err);
	for (int i = 0; !rc && i < n; i++) {
		tacod_job j = {0};
		tacod_running *rj = NULL;
		char m[256];
		if (tacod_store_job_get(s->store, NULL, rows[i].job_id, &j,
					NULL))
			continue;
		if (j.status == TACOD_QUEUED || j.status == TACOD_RUNNING)
			rj = new_running(s, j.id);
		if (rj) {
			rj->planned = (uint64_t)j.planned_bytes;
			rj->sj->slurm_id = rows[i].slurm_id;
			rj->sj->offset = rows[i].events_offset;
			rj->sj->started = j.status == TACOD_RUNNING;
			snprintf(m, sizeof(m),
				 "tacod restarted: it follows Slurm job %lld "
				 "again",
				 (long long)rows[i].slurm_id);
			tacod_service_event(s, j.id, "info", "message", m,
					    NULL);
		} else {
			/* cancelled or paused while tacod was away from it */
			if (rows[i].slurm_id)
				scancel(s, rows[i].slurm_id, 0);
			tacod_store_slurm_delete(s->store, j.id, NULL);
		}
		tacod_job_clear(&j);
	}
	/* running without a Slurm job: queued again, as after a local
	 * tacod's restart */
	if (!rc)
		rc = tacod_service_requeue_running(s, err);
	free(rows);
	return rc;
}

void tacod_slurm_arm(tacod_service *s)
{
	uv_timer_init(s->loop, &s->slurm->timer);
	s->slurm->timer.data = s;
	s->slurm->armed = 1;
	uv_timer_start(&s->slurm->timer, on_timer, 0, TACOD_SLURM_READ_MS);
}

static void timer_closed(uv_handle_t *h)
{
	(void)h;
}

void tacod_slurm_close(tacod_service *s)
{
	if (!s->slurm || s->slurm->closing)
		return;
	s->slurm->closing = 1;
	if (s->slurm->armed)
		uv_close((uv_handle_t *)&s->slurm->timer, timer_closed);
}

void tacod_slurm_free(tacod_service *s)
{
	if (!s->slurm)
		return;
	/* after a failed start: the jobs attached but never followed */
	while (s->n_run > 0 && s->run[0]->sj)
		detach(s, s->run[0]);
	free(s->slurm);
	s->slurm = NULL;
}
