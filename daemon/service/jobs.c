/* service/jobs.c: pause and resume.
 *
 * Pause keeps the job's place: a queued job is set aside at once, a running
 * one is asked to checkpoint and stop at its next step boundary (the worker
 * exits 3 and service/service.c marks it paused). Resume puts it back in the queue
 * with its original queue_seq, so it goes ahead of jobs created after it. */
#include <errno.h>
#include <stdio.h>

#include "api/objects.h"
#include "daemon/service/internal.h"

static int reply_job(tacod_http_req *r, tacod_job *j)
{
	int rc = tacod_http_reply_json(r, 200, tacod_job_object(j));

	tacod_job_clear(j);
	return rc;
}

static int invalid_state(tacod_http_req *r, tacod_job *j, const char *what)
{
	int rc = tacod_http_error(
	    r, 409, "invalid_request_error", "invalid_state", "id",
	    "a %s job cannot be %s", tacod_status_name(j->status), what);

	tacod_job_clear(j);
	return rc;
}

int tacod_route_job_pause(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	const char *id = tacod_http_param(r, "id");
	tacod_job j = {0};
	taco_err err = {{0}};
	int rc, ok = 1, t;

	pthread_mutex_lock(&s->lock);
	rc = tacod_store_job_get(s->store, tacod_route_scope(r), id, &j, &err);
	if (rc == 0 && j.status == TACOD_QUEUED) {
		t = tacod_store_job_transition(s->store, id, TACOD_QUEUED,
					       TACOD_PAUSED, &err);
		if (tacod_http_storage_errno(t)) {
			rc = t; /* nothing changed: 507 */
		} else if (t == 0) {
			j.status = TACOD_PAUSED;
			tacod_store_event_add(s->store, id, "info", "status",
					      "The job was paused",
					      "{\"status\":\"paused\"}", NULL,
					      NULL);
			/* one submitted to Slurm: its Slurm job goes */
			tacod_service_request_stop(s, id, TACOD_STOP_PAUSE);
		} else {
			ok = 0; /* it just started: ask again */
		}
	} else if (rc == 0 && j.status == TACOD_RUNNING) {
		tacod_service_request_stop(s, id, TACOD_STOP_PAUSE);
	} else if (rc == 0 && j.status != TACOD_PAUSED) {
		ok = 0; /* finished: a paused job's pause is a no-op */
	}
	pthread_mutex_unlock(&s->lock);
	if (rc) {
		tacod_job_clear(&j);
		return tacod_route_store_error(r, rc, &err, "job");
	}
	return ok ? reply_job(r, &j) : invalid_state(r, &j, "paused");
}

int tacod_route_job_resume(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	const char *id = tacod_http_param(r, "id");
	tacod_job j = {0};
	taco_err err = {{0}};
	int rc, ok = 0, t = -EAGAIN;

	pthread_mutex_lock(&s->lock);
	rc = tacod_store_job_get(s->store, tacod_route_scope(r), id, &j, &err);
	if (rc == 0 && j.status == TACOD_PAUSED)
		t = tacod_store_job_transition(s->store, id, TACOD_PAUSED,
					       TACOD_QUEUED, &err);
	if (tacod_http_storage_errno(t))
		rc = t; /* nothing changed: 507 */
	if (rc == 0 && t == 0) {
		ok = 1;
		j.status = TACOD_QUEUED;
		tacod_store_event_add(s->store, id, "info", "status",
				      "The job was resumed and is queued",
				      "{\"status\":\"queued\"}", NULL, NULL);
		tacod_service_wake(s);
	}
	pthread_mutex_unlock(&s->lock);
	if (rc) {
		tacod_job_clear(&j);
		return tacod_route_store_error(r, rc, &err, "job");
	}
	return ok ? reply_job(r, &j) : invalid_state(r, &j, "resumed");
}
