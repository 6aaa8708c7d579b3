/* service/service.c: the job lifecycle on the loop thread: scheduling, workers,
 * their events into the store. The HTTP routes are in service/routes.c. */
#include "daemon/service/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "api/model_name.h"
#include "api/objects.h"
#include "daemon/runner/scheduler.h"
#include "daemon/webhooks/delivery.h"
#include "plan/plan.h"
#include "util/fsutil.h"
#include "util/text.h"

int64_t tacod_now(void)
{
	return (int64_t)time(NULL);
}

int tacod_service_event(tacod_service *s, const char *job, const char *level,
			const char *type, const char *msg, json_t *data)
{
	char *text = data ? json_dumps(data, JSON_COMPACT) : NULL;
	int rc;

	rc = tacod_store_event_add(s->store, job, level, type, msg, text, NULL,
				   NULL);
	free(text);
	json_decref(data);
	/* followers get it on the next pump (at most TACOD_PUMP_MS later):
	 * one push of several events to each stream, not one per event */
	return rc;
}

static int terminal(int status)
{
	return status == TACOD_SUCCEEDED || status == TACOD_FAILED ||
	       status == TACOD_CANCELLED;
}

/* ---- what the runners tell (runner.h's host; lock held) ---------------- */

/* A running job's row or event could not be written for lack of room
 * (rc): its record would have holes, so it stops and fails with
 * insufficient_storage, recorded in the room of the reserve. The reserve
 * is freed only when that record needs it (finish_job), once the worker
 * has exited: freed now, the worker's checkpoint on its way out could fill
 * the room (a small model's fits in it), and the end would go unrecorded,
 * the job left running in the store. */
static void storage_failed(tacod_service *s, tacod_run *rj, int rc)
{
	if (!tacod_http_storage_errno(rc) || rj->no_space)
		return;
	rj->no_space = 1;
	fprintf(stderr,
		"tacod: %s: its events cannot be stored (%s): it stops\n",
		rj->id, strerror(-rc));
	tacod_service_request_stop(s, rj->id, TACOD_STOP_CANCEL);
}

/* The job runs: the one place it is said, whichever runner runs it. */
static void job_running(void *ctx, tacod_run *run)
{
	tacod_service *s = ctx;

	tacod_store_job_started(s->store, run->id, tacod_now(), NULL);
	tacod_service_event(s, run->id, "info", "status", "The job is running",
			    json_pack("{ss}", "status", "running"));
}

static void job_log(void *ctx, const char *job, const char *level,
		    const char *type, const char *msg, json_t *data)
{
	tacod_service_event(ctx, job, level, type, msg, data);
}

/* A DPO step's metrics (docs/events.md), under TRL's names, beside the
 * OpenAI-named ones. */
static void add_pref_metrics(json_t *data, json_t *e)
{
	const char *k;
	json_t *v;

	json_object_foreach(e, k, v)
	{
		if (!strncmp(k, "rewards/", 8) || !strncmp(k, "logps/", 6))
			json_object_set(data, k, v);
	}
}

static void job_event(void *ctx, tacod_run *rj, json_t *e)
{
	tacod_service *s = ctx;
	const char *name = json_string_value(json_object_get(e, "event"));
	tacod_job j = {0};
	char msg[512];
	int rc = 0;

	/* out of room: what is left of the reserve records its end */
	if (rj->no_space && strcmp(name, "error"))
		return;
	if (!strcmp(name, "progress")) {
		/* many a second: written without an fsync each (store.h) */
		tacod_store_relaxed(s->store, 1, NULL);
		json_int_t step =
		    json_integer_value(json_object_get(e, "step"));
		json_int_t total =
		    json_integer_value(json_object_get(e, "total_steps"));
		double eta = json_real_value(json_object_get(e, "eta_s"));
		json_t *acc = json_object_get(e, "token_accuracy");
		json_t *tokens = json_object_get(e, "tokens");
		json_t *data = json_pack(
		    "{sI sI sO sO sO sO sO sO}", "step", step, "total_steps",
		    total, "train_loss", json_object_get(e, "loss"),
		    "train_mean_token_accuracy", acc ? acc : json_null(),
		    "learning_rate", json_object_get(e, "lr"), "tokens_per_s",
		    json_object_get(e, "tokens_per_s"), "tokens",
		    tokens ? tokens : json_null(), "mem_peak_bytes",
		    json_object_get(e, "mem_peak_bytes"));
		add_pref_metrics(data, e);
		snprintf(msg, sizeof(msg), "Step %lld/%lld: training loss=%.4f",
			 (long long)step, (long long)total,
			 json_real_value(json_object_get(e, "loss")));
		rc = tacod_service_event(s, rj->id, "info", "metrics", msg,
					 data);
		rj->tokens_per_s =
		    json_number_value(json_object_get(e, "tokens_per_s"));
		rj->peak = (uint64_t)json_integer_value(
		    json_object_get(e, "mem_peak_bytes"));
		if (tacod_store_job_get(s->store, NULL, rj->id, &j, NULL) ==
		    0) {
			int u;
			j.trained_tokens =
			    json_integer_value(json_object_get(e, "tokens"));
			j.estimated_finish = tacod_now() + (int64_t)eta;
			j.measured_peak_bytes = json_integer_value(
			    json_object_get(e, "mem_peak_bytes"));
			u = tacod_store_job_update(s->store, &j, NULL);
			rc = rc ? rc : u;
			tacod_job_clear(&j);
		}
		tacod_webhooks_job_progress(s->hooks, rj->id, e);
		tacod_store_relaxed(s->store, 0, NULL);
	} else if (!strcmp(name, "reference")) {
		/* DPO's reference pass: minutes on a big model */
		snprintf(
		    msg, sizeof(msg),
		    "Reference log-probs (%s): %lld/%lld pairs",
		    json_string_value(json_object_get(e, "set")) ?: "?",
		    (long long)json_integer_value(json_object_get(e, "pairs")),
		    (long long)json_integer_value(
			json_object_get(e, "total_pairs")));
		rc = tacod_service_event(s, rj->id, "info", "message", msg,
					 json_deep_copy(e));
		/* the pass's time left and its estimate of the training's,
		 * until the first progress event measures it */
		if (!rc && tacod_store_job_get(s->store, NULL, rj->id, &j,
					       NULL) == 0) {
			j.estimated_finish =
			    tacod_now() +
			    (int64_t)(json_number_value(
					  json_object_get(e, "eta_s")) +
				      json_number_value(
					  json_object_get(e, "train_eta_s")));
			rc = tacod_store_job_update(s->store, &j, NULL);
			tacod_job_clear(&j);
		}
	} else if (!strcmp(name, "eval")) {
		rc = tacod_service_event(s, rj->id, "info", "metrics",
					 "Evaluation", json_deep_copy(e));
	} else if (!strcmp(name, "checkpoint")) {
		tacod_checkpoint c = {0};
		int u;
		snprintf(c.job_id, sizeof(c.job_id), "%s", rj->id);
		c.step = json_integer_value(json_object_get(e, "step"));
		snprintf(c.path, sizeof(c.path), "%s",
			 json_string_value(json_object_get(e, "path")));
		c.created_at = tacod_now();
		/* taco-train evaluates a step before it checkpoints it: the
		 * step's evaluation is stored already */
		c.metrics = tacod_checkpoint_metrics(s, rj->id, c.step);
		rc = tacod_store_checkpoint_add(s->store, &c, NULL);
		free(c.metrics);
		snprintf(msg, sizeof(msg), "Checkpoint at step %lld",
			 (long long)c.step);
		u = tacod_service_event(s, rj->id, "info", "checkpoint", msg,
					NULL);
		rc = rc ? rc : u;
	} else if (!strcmp(name, "exported")) {
		snprintf(rj->exported, sizeof(rj->exported), "%s",
			 json_string_value(json_object_get(e, "path")));
	} else if (!strcmp(name, "exported_gguf")) {
		/* the file stays in the job's output (gguf/); a download route
		 * is docs/gguf.md's next step */
		snprintf(
		    msg, sizeof(msg), "Exported GGUF %s (%lld bytes)",
		    json_string_value(json_object_get(e, "type")) ?: "?",
		    (long long)json_integer_value(json_object_get(e, "bytes")));
		rc = tacod_service_event(s, rj->id, "info", "message", msg,
					 NULL);
	} else if (!strcmp(name, "error")) {
		const char *m =
		    json_string_value(json_object_get(e, "message"));
		int no = (int)json_integer_value(json_object_get(e, "errno"));
		/* taco-train names the files it writes by their paths */
		taco_text_copy(rj->error, sizeof(rj->error), m ? m : "");
		tacod_name_job_paths(s, rj->id, rj->error, sizeof(rj->error));
		if (no > 0 && tacod_http_storage_errno(-no))
			rj->no_space = 1;
		tacod_service_event(s, rj->id, "error", "message", rj->error,
				    NULL);
	} else if (!strcmp(name, "started")) {
		rc = tacod_service_event(s, rj->id, "info", "message",
					 "Fine-tuning job started", NULL);
	}
	storage_failed(s, rj, rc);
}

static void finish_job(tacod_service *s, tacod_run *rj, int64_t status, int sig)
{
	tacod_job j = {0};
	int to = TACOD_FAILED;
	const char *msg = "Fine-tuning job failed";
	char err[1200];

	if (tacod_store_job_get(s->store, NULL, rj->id, &j, NULL))
		return;
	if (rj->no_space && (status || sig)) {
		/* out of storage: failed, whatever a stop asked for */
	} else if (status == 0 && !sig) {
		to = TACOD_SUCCEEDED;
		msg = "The job has successfully completed";
		/* ft:<root>:<suffix>:<job>, as OpenAI's (api/model_name.h);
		 * the request was refused if it could not fit */
		tacod_model_name_format(j.model, j.suffix, j.id, -1,
					j.fine_tuned_model,
					sizeof(j.fine_tuned_model));
	} else if (status == 3 && !sig) {
		to = rj->stop == TACOD_STOP_CANCEL  ? TACOD_CANCELLED
		     : rj->stop == TACOD_STOP_PAUSE ? TACOD_PAUSED
						    : TACOD_QUEUED;
		msg = to == TACOD_CANCELLED ? "The job was cancelled"
		      : to == TACOD_PAUSED  ? "The job was paused"
					    : "The job was requeued";
	} else if (rj->stop == TACOD_STOP_CANCEL) {
		to = TACOD_CANCELLED; /* killed after the timeout */
		msg = "The job was cancelled";
	} else if (sig && rj->stop == TACOD_STOP_PAUSE) {
		/* stopped before its handler was set (or killed after the
		 * timeout): paused all the same, it resumes from its newest
		 * checkpoint */
		to = TACOD_PAUSED;
		msg = "The job was paused";
	} else if (sig && rj->stop == TACOD_STOP_SHUTDOWN) {
		to = TACOD_QUEUED;
		msg = "The job was requeued";
	} else if (sig && j.retries < s->cfg.max_retries &&
		   rj->stop == TACOD_STOP_NONE) {
		/* a crashed worker: again from its newest checkpoint */
		j.retries++;
		to = TACOD_QUEUED;
		msg = "The worker died; the job resumes from its newest "
		      "checkpoint";
	}
	if (to == TACOD_FAILED) {
		const char *why = rj->error[0]
				      ? rj->error
				      : tacod_runner_stderr(s->runner, rj);
		if (rj->no_space)
			taco_text_format(err, sizeof(err),
					 "the server ran out of storage "
					 "space: %s",
					 why[0] ? why
						: "the job's events could not "
						  "be stored");
		else
			taco_text_copy(err, sizeof(err), why);
		tacod_name_job_paths(s, rj->id, err, sizeof(err));
		free(j.error);
		j.error = NULL;
		{
			json_t *e = tacod_error_fields(
			    err[0] ? err : "the worker failed",
			    rj->no_space ? "insufficient_storage"
					 : "job_failed",
			    NULL);
			j.error = json_dumps(e, JSON_COMPACT);
			json_decref(e);
		}
	}
	j.status = to;
	if (to == TACOD_SUCCEEDED || to == TACOD_FAILED ||
	    to == TACOD_CANCELLED)
		j.finished_at = tacod_now();
	if (j.measured_peak_bytes > 0 && j.planned_bytes > 0) {
		char m[256];
		double d = 100.0 *
			   (double)(j.measured_peak_bytes - j.planned_bytes) /
			   (double)j.planned_bytes;
		snprintf(m, sizeof(m),
			 "Peak memory %.1f MB measured, %.1f MB planned "
			 "(%+.2f%%)",
			 (double)j.measured_peak_bytes / 1e6,
			 (double)j.planned_bytes / 1e6, d);
		tacod_service_event(s, rj->id, "info", "memory", m,
				    json_pack("{sI sI sf}", "planned_bytes",
					      (json_int_t)j.planned_bytes,
					      "measured_peak_bytes",
					      (json_int_t)j.measured_peak_bytes,
					      "error_percent", d));
	}
	/* the status and its webhook deliveries: both or neither; on a
	 * full disk in the room the reserve leaves */
	for (;;) {
		taco_err e = {{0}};
		int rc = tacod_store_tx_begin(s->store, &e);
		if (!rc) {
			rc = tacod_store_job_update(s->store, &j, &e);
			if (!rc)
				rc =
				    tacod_webhooks_job_status(s->hooks, &j, &e);
			rc = tacod_store_tx_end(s->store, rc, &e);
		}
		if (!rc && terminal(to)) {
			tacod_results_attach(s, &j);
			tacod_models_release(s, j.id);
		}
		if (!rc || !tacod_http_storage_errno(rc) ||
		    !tacod_reserve_release(s)) {
			if (rc)
				fprintf(stderr,
					"tacod: %s: cannot record its end: "
					"%s\n",
					rj->id, e.msg);
			break;
		}
	}
	tacod_service_event(s, rj->id, to == TACOD_FAILED ? "error" : "info",
			    "status", msg,
			    json_pack("{ss}", "status", tacod_status_name(to)));
	tacod_job_clear(&j);
}

static void job_exit(void *ctx, tacod_run *rj, int64_t status, int sig)
{
	tacod_service *s = ctx;
	tacod_job j = {0};
	int rc = tacod_store_job_get(s->store, NULL, rj->id, &j, NULL);

	/* a job no longer queued or running has its status already (a
	 * pending Slurm job that the API cancelled or paused) */
	if (rc || j.status == TACOD_QUEUED || j.status == TACOD_RUNNING)
		finish_job(s, rj, status, sig);
	tacod_job_clear(&j);
	tacod_runs_remove(&s->runs, rj);
	tacod_runner_release(s->runner, rj);
	uv_async_send(&s->wake);
}

/* A job that no runner could start: failed, naming why. */
static void job_start_failed(void *ctx, const char *id, const char *msg)
{
	tacod_service *s = ctx;
	tacod_job f = {0};
	json_t *e;

	if (tacod_store_job_get(s->store, NULL, id, &f, NULL))
		return;
	e = tacod_error_fields(msg, "worker_start_failed", NULL);
	f.status = TACOD_FAILED;
	f.finished_at = tacod_now();
	f.error = json_dumps(e, JSON_COMPACT);
	json_decref(e);
	if (!tacod_store_tx_begin(s->store, NULL)) {
		int rc = tacod_store_job_update(s->store, &f, NULL);
		if (!rc)
			rc = tacod_webhooks_job_status(s->hooks, &f, NULL);
		/* one queued again after steps (a restart, a crash) */
		if (!tacod_store_tx_end(s->store, rc, NULL)) {
			tacod_results_attach(s, &f);
			tacod_models_release(s, f.id);
		}
	}
	tacod_job_clear(&f);
}

static int job_requeue_running(void *ctx, taco_err *err)
{
	return tacod_service_requeue_running(ctx, err);
}

static void closed(uv_handle_t *h)
{
	(void)h;
}

int tacod_service_follow(tacod_service *s, const char *job,
			 tacod_http_stream *stream, int64_t after_seq)
{
	tacod_follower *f;

	if (s->n_follow >= TACOD_MAX_STREAMS || s->shutting_down)
		return -EBUSY;
	f = &s->follow[s->n_follow++];
	snprintf(f->job, sizeof(f->job), "%s", job);
	f->stream = stream;
	f->last_seq = after_seq;
	return 0;
}

/* One event as server-sent-event bytes: id, event type, data (compact
 * JSON has no newline, so one data line). */
static char *sse_bytes(const tacod_event *e, size_t *len)
{
	json_t *o = tacod_event_object(e);
	char *text = json_dumps(o, JSON_COMPACT), *out = NULL;
	int n;

	if (text)
		n = asprintf(&out, "id: %s\nevent: %s\ndata: %s\n\n",
			     json_string_value(json_object_get(o, "id")),
			     e->type, text);
	else
		n = -1;
	free(text);
	json_decref(o);
	if (n < 0)
		return NULL;
	*len = (size_t)n;
	return out;
}

/* Sends the followers of one job (from index first on) the events they
 * have not seen: the events are read and formatted once for all of them,
 * since hundreds may follow one job. */
static void pump_job(tacod_service *s, int first, unsigned char *gone,
		     unsigned char *seen)
{
	enum { BATCH = 64 };
	tacod_event ev[BATCH];
	const char *job = s->follow[first].job;
	int64_t from = s->follow[first].last_seq;
	int n = 0, more = 1;

	for (int i = first; i < s->n_follow; i++)
		if (!strcmp(s->follow[i].job, job)) {
			seen[i] = 1;
			if (s->follow[i].last_seq < from)
				from = s->follow[i].last_seq;
		}
	while (more &&
	       !tacod_store_event_list(s->store, job, from, BATCH, ev, &n,
				       &more, NULL) &&
	       n > 0) {
		for (int k = 0; k < n; k++) {
			size_t len = 0;
			char *b = sse_bytes(&ev[k], &len);
			for (int i = first; i < s->n_follow; i++) {
				tacod_follower *f = &s->follow[i];
				if (gone[i] || strcmp(f->job, job) ||
				    f->last_seq >= ev[k].seq)
					continue;
				if (!b ||
				    tacod_http_stream_push(f->stream, b, len))
					gone[i] = 1;
				f->last_seq = ev[k].seq;
			}
			from = ev[k].seq;
			free(b);
			tacod_event_clear(&ev[k]);
		}
	}
}

/* Sends each follower the events it has not seen; a stream ends when its
 * job has finished and everything is sent, or when its client is gone. */
static void pump_followers(tacod_service *s)
{
	unsigned char gone[TACOD_MAX_STREAMS] = {0};
	unsigned char seen[TACOD_MAX_STREAMS] = {0};
	unsigned char done[TACOD_MAX_STREAMS] = {0};

	/* finished before its events are read: none can follow them */
	for (int i = 0; i < s->n_follow; i++) {
		tacod_job j = {0};
		done[i] = tacod_store_job_get(s->store, NULL, s->follow[i].job,
					      &j, NULL) ||
			  terminal(j.status);
		tacod_job_clear(&j);
	}
	for (int i = 0; i < s->n_follow; i++)
		if (!seen[i])
			pump_job(s, i, gone, seen);
	for (int i = 0; i < s->n_follow; i++) {
		tacod_follower *f = &s->follow[i];
		if (done[i] && !gone[i])
			tacod_http_stream_event(f->stream, "done", "[DONE]");
		if (gone[i] || done[i] || s->shutting_down) {
			int last = s->n_follow - 1;
			tacod_http_stream_end(f->stream);
			gone[i] = gone[last];
			done[i] = done[last];
			s->follow[i--] = s->follow[--s->n_follow];
		}
	}
}

/* While anyone follows a job: new events go out every TACOD_PUMP_MS. */
static void on_pump(uv_timer_t *t)
{
	tacod_service *s = t->data;

	pthread_mutex_lock(&s->lock);
	pump_followers(s);
	if (!s->n_follow)
		uv_timer_stop(t);
	pthread_mutex_unlock(&s->lock);
}

static void on_wake(uv_async_t *a)
{
	tacod_service *s = a->data;

	pthread_mutex_lock(&s->lock);
	tacod_runner_apply_stops(s->runner);
	if (!s->shutting_down) {
		tacod_runner_schedule(s->runner);
		tacod_chat_turn(s);
	}
	pump_followers(s);
	if (s->n_follow && !s->closed && !uv_is_active((uv_handle_t *)&s->pump))
		uv_timer_start(&s->pump, on_pump, TACOD_PUMP_MS, TACOD_PUMP_MS);
	/* a drain ends when no worker runs and no validation is in progress
	 * (whose outcome is recorded first) */
	if (s->shutting_down && s->runs.n == 0 && !s->val_job[0] &&
	    !s->closed && tacod_chat_close(s)) {
		s->closed = 1;
		uv_close((uv_handle_t *)&s->wake, closed);
		uv_close((uv_handle_t *)&s->tick, closed);
		uv_close((uv_handle_t *)&s->pump, closed);
		tacod_runner_close(s->runner);
	}
	pthread_mutex_unlock(&s->lock);
}

/* Idempotency keys are kept for a day (as Stripe does): long enough for
 * any retry of a lost reply, and the table stays bounded. Purged once an
 * hour. */
#define TACOD_IDEM_TTL_S (24 * 3600)

static void purge_idempotency_keys(tacod_service *s)
{
	int64_t now = tacod_now();

	if (now - s->idem_purged_at < 3600)
		return;
	s->idem_purged_at = now;
	pthread_mutex_lock(&s->lock);
	tacod_store_idem_purge(s->store, now - TACOD_IDEM_TTL_S, NULL, NULL);
	pthread_mutex_unlock(&s->lock);
}

/* The storage reserve, freed on a full disk, is made again once there is
 * room: tried once a minute. */
static void keep_reserve(tacod_service *s)
{
	pthread_mutex_lock(&s->lock);
	if (!s->reserve_live && tacod_now() - s->reserve_checked_at >= 60)
		tacod_reserve_make(s);
	pthread_mutex_unlock(&s->lock);
}

static void on_tick(uv_timer_t *t)
{
	tacod_service *s = t->data;

	purge_idempotency_keys(s);
	keep_reserve(s);
	uv_async_send(&s->wake);
}

void tacod_service_request_stop(tacod_service *s, const char *id, int why)
{
	tacod_run *rj = tacod_runs_find(&s->runs, id);

	/* a cancel overrides a pause or shutdown still in progress: the
	 * worker's exit is then read as cancelled */
	if (rj && (!rj->stop || why == TACOD_STOP_CANCEL))
		rj->stop = why;
	uv_async_send(&s->wake);
}

void tacod_service_wake(tacod_service *s)
{
	uv_async_send(&s->wake);
}

/* ---- start and stop ---------------------------------------------------- */

int tacod_service_requeue_running(tacod_service *s, taco_err *err)
{
	enum { CAP = 256 };
	tacod_job *r = calloc(CAP, sizeof(*r));
	int n = 0, rc;

	if (!r)
		return taco_err_set(err, -ENOMEM, "out of memory");
	rc =
	    tacod_store_job_by_status(s->store, TACOD_RUNNING, r, CAP, &n, err);
	for (int i = 0; !rc && i < n; i++) {
		if (tacod_runs_find(&s->runs, r[i].id))
			continue; /* a Slurm job tacod re-attached to */
		tacod_store_job_transition(s->store, r[i].id, TACOD_RUNNING,
					   TACOD_QUEUED, NULL);
		tacod_service_event(
		    s, r[i].id, "warn", "status",
		    "tacod restarted: the job resumes from its newest "
		    "checkpoint",
		    json_pack("{ss}", "status", "queued"));
	}
	for (int i = 0; i < n; i++)
		tacod_job_clear(&r[i]);
	free(r);
	return rc;
}

/* Jobs that were validating when the last tacod stopped are still in
 * validating_files: the validation thread takes them again. */
static int revalidate(tacod_service *s, taco_err *err)
{
	tacod_job *v = calloc(TACOD_MAX_VALIDATING, sizeof(*v));
	int n = 0, rc;

	if (!v)
		return taco_err_set(err, -ENOMEM, "out of memory");
	rc = tacod_store_job_by_status(s->store, TACOD_VALIDATING, v,
				       TACOD_MAX_VALIDATING, &n, err);
	for (int i = 0; i < n; i++) {
		if (!rc)
			tacod_service_event(
			    s, v[i].id, "warn", "status",
			    "tacod restarted: the files are validated again",
			    json_pack("{ss}", "status", "validating_files"));
		tacod_job_clear(&v[i]);
	}
	free(v);
	return rc;
}

static void job_held(void *ctx, uint64_t *bytes, int n)
{
	tacod_chat_held(ctx, bytes, n);
}

static int open_runner(tacod_service *s, taco_err *err)
{
	const tacod_runner_env env = {
	    .loop = s->loop,
	    .lock = &s->lock,
	    .store = s->store,
	    .cfg = &s->cfg,
	    .jobs_dir = s->jobs_dir,
	    .runs = &s->runs,
	    .wake = &s->wake,
	    .closed = &s->closed,
	    .host = {.ctx = s,
		     .running = job_running,
		     .event = job_event,
		     .exit = job_exit,
		     .log = job_log,
		     .start_failed = job_start_failed,
		     .requeue_running = job_requeue_running,
		     .held = job_held},
	};

	return tacod_runner_open(&env, &s->runner, err);
}

int tacod_service_start(const tacod_config *config, uv_loop_t *loop,
			tacod_service **out, taco_err *err)
{
	tacod_service *s = calloc(1, sizeof(*s));
	char db[TACOD_PATH_MAX + 32];
	int r;

	if (!s)
		return taco_err_set(err, -ENOMEM, "out of memory");
	s->cfg = *config;
	s->loop = loop;
	pthread_mutex_init(&s->lock, NULL);
	snprintf(s->files_dir, sizeof(s->files_dir), "%s/files",
		 config->state_dir);
	tacod_config_jobs_dir(config, s->jobs_dir, sizeof(s->jobs_dir));
	s->cfg.device_memory = tacod_config_plan_memory(config);
	snprintf(s->upload_dir, sizeof(s->upload_dir), "%s/uploads",
		 config->state_dir);
	snprintf(db, sizeof(db), "%s/tacod.db", config->state_dir);
	if ((r = taco_mkdir_p(s->files_dir, err)) ||
	    (r = taco_mkdir_p(s->jobs_dir, err)) ||
	    (r = taco_mkdir_p(s->upload_dir, err)) ||
	    (r = tacod_store_open(db, &s->store, err)) ||
	    (r = open_runner(s, err)) ||
	    (r = tacod_runner_attach(s->runner, err)) ||
	    (r = revalidate(s, err)) ||
	    (r = tacod_webhooks_start(s->store, &s->lock, &s->cfg.webhooks,
				      &s->hooks, err)) ||
	    (r = tacod_validate_start(s, err)) ||
	    (r = tacod_gguf_start(s, err)) || (r = tacod_chat_start(s, err)))
		goto fail;
	tacod_reserve_make(s); /* no room for it is no reason not to start */
	tacod_service_routes(s);
	if ((r = tacod_http_start(&s->cfg, s->routes, s, &s->http, err)))
		goto fail;
	uv_async_init(loop, &s->wake, on_wake);
	uv_timer_init(loop, &s->tick);
	uv_timer_init(loop, &s->pump);
	s->wake.data = s->tick.data = s->pump.data = s;
	uv_timer_start(&s->tick, on_tick, 0, 1000);
	tacod_runner_arm(s->runner);
	pthread_mutex_lock(&s->lock);
	s->armed = 1; /* the validation thread may wake the loop */
	pthread_mutex_unlock(&s->lock);
	*out = s;
	return 0;
fail:
	/* what was made so far, as a stop would free it (no HTTP yet, or
	 * none that started) */
	tacod_service_free(s);
	return r;
}

int tacod_service_port(const tacod_service *s)
{
	return tacod_http_port(s->http);
}

void tacod_service_shutdown(tacod_service *s)
{
	pthread_mutex_lock(&s->lock);
	s->shutting_down = 1;
	/* the validation in progress is recorded; the jobs still waiting
	 * stay in validating_files for the next start */
	tacod_validate_stop(s);
	tacod_gguf_stop(s);
	tacod_chat_shutdown(s);
	for (int i = 0; i < s->runs.n; i++)
		if (!s->runs.run[i]->stop)
			s->runs.run[i]->stop = TACOD_STOP_SHUTDOWN;
	/* streams end before their server goes */
	for (int i = 0; i < s->n_follow; i++)
		tacod_http_stream_end(s->follow[i].stream);
	s->n_follow = 0;
	pthread_mutex_unlock(&s->lock);
	/* requests in flight may still take the lock: stop HTTP outside */
	tacod_http_stop(s->http);
	s->http = NULL;
	uv_async_send(&s->wake);
}

/* systemd integration (main_tacod.c): the watchdog's health check. */
int tacod_service_stats_get(tacod_service *s, tacod_service_stats *out)
{
	int64_t counts[TACOD_CANCELLED + 1];
	int r;

	pthread_mutex_lock(&s->lock);
	r = tacod_store_job_count(s->store, NULL, counts, NULL);
	if (r == 0) {
		out->running = s->runs.n;
		out->draining = s->shutting_down;
		out->queued = (long long)counts[TACOD_QUEUED];
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

int tacod_service_reload(tacod_service *s, taco_err *err)
{
	if (!s->http)
		return taco_err_set(err, -ESHUTDOWN, "tacod is stopping");
	if (!s->cfg.tokens_file[0])
		return 0;
	return tacod_http_reload_tokens(s->http, err);
}

void tacod_service_free(tacod_service *s)
{
	if (!s)
		return;
	if (s->http)
		tacod_http_stop(s->http);
	tacod_validate_join(s);
	tacod_gguf_join(s);
	/* a start that failed: the timer never ran (it closes with the
	 * loop's next turn, if any) */
	if (s->chat && !tacod_chat_close(s))
		free(s->chat);
	tacod_webhooks_join(s->hooks);
	s->hooks = NULL;
	tacod_runner_free(s->runner);
	s->runner = NULL;
	tacod_store_close(s->store);
	pthread_mutex_destroy(&s->lock);
	free(s);
}
