/* service/validate.c: the data of a created job is validated off the
 * request threads and off the loop, by one thread of its own.
 *
 * A create answers at once with the job in validating_files; the store is
 * the queue: this thread takes the oldest job in validating_files
 * (queue_seq order), reads and tokenizes its data without the service
 * lock (tacod_assess touches no store), then, with the lock, moves it
 * validating_files -> queued, or -> failed with the first problem in its
 * error, by compare-and-set: a job cancelled meanwhile stays cancelled and
 * the result is dropped. One validation at a time, so a large file costs
 * one core; the queue holds at most TACOD_MAX_VALIDATING jobs (a create
 * past it gets 429). A job left in validating_files by a tacod that died is
 * still in the store, and is validated again after the restart.
 *
 * The job is the one its create parsed (tacod_validate_keep), with the
 * create's request: the validation reads no file back. Only a job
 * validated after a restart (the parsed job did not survive the process;
 * the store, the queue, holds the request) or one pushed out of the kept
 * list by newer ones has its job.json, written once by the create, parsed:
 * once, here, and its stored request parsed for the names it gives.
 *
 * A dedicated thread, not uv_queue_work: the work is queued from HTTP
 * threads (uv_queue_work is loop-thread only), libuv's pool is shared and
 * small, and a drain must know whether a validation is in progress (the
 * loop stays up until it is recorded; its handles close after). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/objects.h"
#include "daemon/service/internal.h"
#include "daemon/webhooks/delivery.h"

/* The event data of the outcome: the status and the report (null without
 * one: pre-tokenized data is checked without a report). */
static char *outcome_data(const char *status, json_t *report)
{
	json_t *d = json_pack("{ss sO}", "status", status, "validation",
			      report ? report : json_null());
	char *text = d ? json_dumps(d, JSON_COMPACT) : NULL;

	json_decref(d);
	return text;
}

/* Records the outcome (lock held): 0, or a store error (tried again
 * later). A job that is no longer validating (cancelled) is left alone. */
static int validate_record(tacod_service *s, const char *id,
			   const tacod_assessment *a)
{
	taco_err err = {{0}};
	tacod_job f = {0};
	char *data = outcome_data(a->code[0] ? "failed" : "queued", a->report);
	int rc = tacod_store_tx_begin(s->store, &err);

	if (rc == 0 && !a->code[0]) {
		rc = tacod_store_job_transition(s->store, id, TACOD_VALIDATING,
						TACOD_QUEUED, &err);
		if (rc == 0)
			rc = tacod_store_event_add(
			    s->store, id, "info", "status",
			    "Files validated, moving job to queued state", data,
			    NULL, &err);
	} else if (rc == 0) {
		rc = tacod_store_job_get(s->store, NULL, id, &f, &err);
		if (rc == 0 && f.status != TACOD_VALIDATING)
			rc = -EAGAIN;
		if (rc == 0) {
			json_t *e = tacod_error_fields(
			    a->msg, a->code, a->param[0] ? a->param : NULL);
			f.status = TACOD_FAILED;
			f.finished_at = tacod_now();
			free(f.error);
			f.error = json_dumps(e, JSON_COMPACT);
			json_decref(e);
			rc = tacod_store_job_update_from(
			    s->store, &f, TACOD_VALIDATING, &err);
		}
		if (rc == 0)
			rc = tacod_webhooks_job_status(s->hooks, &f, &err);
		if (rc == 0)
			rc = tacod_store_event_add(s->store, id, "error",
						   "status", a->msg, data, NULL,
						   &err);
	}
	rc = tacod_store_tx_end(s->store, rc, &err);
	if (rc == 0 && f.status == TACOD_FAILED)
		tacod_models_release(s, id);
	tacod_job_clear(&f);
	free(data);
	if (rc == -EAGAIN || rc == -ENOENT)
		return 0; /* cancelled (or gone) meanwhile: the result is
			     dropped */
	if (rc)
		fprintf(stderr, "tacod: %s: recording its validation: %s\n", id,
			err.msg);
	return rc;
}

/* A job its create parsed, with the create's request. */
typedef struct tacod_kept_job {
	char id[TACOD_ID_MAX];
	taco_job job;
	json_t *req;
} tacod_kept_job;

static void kept_free(tacod_kept_job *k)
{
	if (!k)
		return;
	taco_job_free(&k->job);
	json_decref(k->req);
	free(k);
}

/* At most TACOD_MAX_VALIDATING, as many as may wait: past it the oldest
 * goes, and its job is parsed from its file when its turn comes. */
static void put_kept(tacod_service *s, tacod_kept_job *k)
{
	if (s->n_val_kept == TACOD_MAX_VALIDATING) {
		kept_free(s->val_kept[0]);
		memmove(s->val_kept, s->val_kept + 1,
			(size_t)(--s->n_val_kept) * sizeof(s->val_kept[0]));
	}
	s->val_kept[s->n_val_kept++] = k;
}

void tacod_validate_keep(tacod_service *s, const char *id, taco_job *job,
			 json_t *req)
{
	tacod_kept_job *k = malloc(sizeof(*k));

	/* a copy of the request: the request thread goes on with its own */
	if (!k || !(k->req = json_deep_copy(req))) {
		free(k);
		return; /* validated from its file */
	}
	snprintf(k->id, sizeof(k->id), "%s", id);
	k->job = *job;
	memset(job, 0, sizeof(*job)); /* its freeze list is ours now */
	put_kept(s, k);
}

/* The kept job of id, taken out of the list; NULL when there is none. */
static tacod_kept_job *take_kept(tacod_service *s, const char *id)
{
	for (int i = 0; i < s->n_val_kept; i++) {
		tacod_kept_job *k = s->val_kept[i];
		if (strcmp(k->id, id))
			continue;
		memmove(s->val_kept + i, s->val_kept + i + 1,
			(size_t)(--s->n_val_kept - i) * sizeof(s->val_kept[0]));
		return k;
	}
	return NULL;
}

static void drop_kept(tacod_service *s)
{
	for (int i = 0; i < s->n_val_kept; i++)
		kept_free(s->val_kept[i]);
	s->n_val_kept = 0;
}

/* Validates one job (lock held on entry and on return, released while
 * the data is read). */
static int validate_job(tacod_service *s, const tacod_job *j)
{
	char path[TACOD_PATH_MAX + 192];
	tacod_kept_job *k = take_kept(s, j->id);
	json_t *req = k		   ? json_incref(k->req)
		      : j->request ? json_loads(j->request, 0, NULL)
				   : NULL;
	tacod_assessment a;
	int rc;

	snprintf(path, sizeof(path), "%s/%s/job.json", s->jobs_dir, j->id);
	snprintf(s->val_job, sizeof(s->val_job), "%s", j->id);
	pthread_mutex_unlock(&s->lock);
	if (k)
		tacod_assess(s, &k->job, req, TACOD_ASSESS_DATA, UINT64_MAX,
			     &a);
	else
		tacod_assess_file(s, path, req, TACOD_ASSESS_DATA, UINT64_MAX,
				  &a);
	pthread_mutex_lock(&s->lock);
	s->val_job[0] = 0;
	rc = validate_record(s, j->id, &a);
	if (rc && k)
		put_kept(s, k); /* for the retry */
	else
		kept_free(k);
	json_decref(a.report);
	json_decref(req);
	/* the scheduler may start it; a drain may end */
	if (s->armed && !s->closed)
		uv_async_send(&s->wake);
	return rc;
}

/* Waits for a notify, or (after a store error) at most a second. */
static void wait_for_work(tacod_service *s, int retry)
{
	struct timespec t;

	if (!retry) {
		pthread_cond_wait(&s->val_cond, &s->lock);
		return;
	}
	clock_gettime(CLOCK_MONOTONIC, &t);
	t.tv_sec += 1;
	pthread_cond_timedwait(&s->val_cond, &s->lock, &t);
}

static void *validator(void *arg)
{
	tacod_service *s = arg;
	int retry = 0;

	pthread_mutex_lock(&s->lock);
	while (!s->val_stop) {
		tacod_job j = {0};
		int n = 0, rc;

		rc = retry ? -EAGAIN
			   : tacod_store_job_by_status(
				 s->store, TACOD_VALIDATING, &j, 1, &n, NULL);
		if (rc == 0 && n == 0)
			drop_kept(s); /* of jobs cancelled while waiting */
		if (rc || n == 0) {
			wait_for_work(s, rc != 0);
			retry = 0;
			continue;
		}
		retry = validate_job(s, &j) != 0;
		tacod_job_clear(&j);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

int tacod_validate_start(tacod_service *s, taco_err *err)
{
	pthread_condattr_t ca;
	int rc;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	rc = pthread_cond_init(&s->val_cond, &ca);
	pthread_condattr_destroy(&ca);
	if (rc)
		return taco_err_set(err, -rc, "cannot make a condition: %s",
				    strerror(rc));
	rc = pthread_create(&s->val_thread, NULL, validator, s);
	if (rc) {
		pthread_cond_destroy(&s->val_cond);
		return taco_err_set(err, -rc,
				    "cannot start the validation thread: %s",
				    strerror(rc));
	}
	s->val_started = 1;
	return 0;
}

void tacod_validate_notify(tacod_service *s)
{
	if (s->val_started)
		pthread_cond_signal(&s->val_cond);
}

void tacod_validate_stop(tacod_service *s)
{
	s->val_stop = 1;
	if (s->val_started)
		pthread_cond_broadcast(&s->val_cond);
}

void tacod_validate_join(tacod_service *s)
{
	if (s->val_started) {
		pthread_mutex_lock(&s->lock);
		tacod_validate_stop(s);
		pthread_mutex_unlock(&s->lock);
		pthread_join(s->val_thread, NULL);
		pthread_cond_destroy(&s->val_cond);
		s->val_started = 0;
	}
	/* the jobs still waiting are parsed from their files at the next
	 * start */
	drop_kept(s);
}
