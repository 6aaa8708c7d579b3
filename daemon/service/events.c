/* service/events.c: a job's events: their pages, and their live stream
 * (server-sent events, resumed with Last-Event-ID). */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/job_request.h"
#include "api/objects.h"
#include "daemon/service/internal.h"
#include "daemon/webhooks/delivery.h"
#include "util/fsutil.h"

/* The seq of an event id "ftevent-<job>-<seq>", or 0. */
static int64_t seq_of(const char *id)
{
	const char *dash = id ? strrchr(id, '-') : NULL;

	return dash ? atoll(dash + 1) : 0;
}

/* ?stream=true: server-sent events from after Last-Event-ID (or the
 * beginning), live until the job has finished. */
static int job_follow(tacod_http_req *r, tacod_service *s, const char *id)
{
	tacod_http_stream *st;
	tacod_job j = {0};
	taco_err err = {{0}};
	int64_t after = seq_of(tacod_http_header(r, "Last-Event-ID"));
	int rc;

	pthread_mutex_lock(&s->lock);
	rc = tacod_store_job_get(s->store, tacod_route_scope(r), id, &j, &err);
	pthread_mutex_unlock(&s->lock);
	tacod_job_clear(&j);
	if (rc)
		return tacod_route_store_error(r, rc, &err, "job");
	st = tacod_http_stream_begin(r);
	if (!st)
		return tacod_http_error(r, 500, "server_error", NULL, NULL,
					"cannot start the stream");
	pthread_mutex_lock(&s->lock);
	rc = tacod_service_follow(s, id, st, after);
	pthread_mutex_unlock(&s->lock);
	if (rc) {
		tacod_http_stream_event(st, "error", "too many streams");
		tacod_http_stream_end(st);
		return 0;
	}
	tacod_service_wake(s);
	return 0;
}

/* Events, newest first as OpenAI lists them. */
int tacod_route_job_events(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	const char *id = tacod_http_param(r, "id");
	tacod_event *ev = calloc(TACOD_LIST_MAX, sizeof(*ev));
	tacod_job j = {0};
	taco_err err = {{0}};
	json_t *items = json_array();
	int n = 0, more = 0, rc, limit;
	int64_t after = 0, newest = 0;
	const char *stream = tacod_http_query(r, "stream");
	const char *after_id = tacod_http_query(r, "after");

	if (stream && strcmp(stream, "true") && strcmp(stream, "false")) {
		free(ev);
		json_decref(items);
		return tacod_http_error(r, 400, "invalid_request_error",
					"invalid_value", "stream",
					"stream must be true or false");
	}
	/* limit and after page the list; a stream does not use them, but
	 * they are checked the same: after is an event id of this job
	 * ("ftevent-<job id without ftjob->-<seq>"), as the files' and jobs'
	 * lists page */
	if ((limit = tacod_route_limit(r)) < 0) {
		free(ev);
		json_decref(items);
		return 0;
	}
	if (after_id && after_id[0]) {
		after = tacod_route_item_number(after_id, "ftevent-", id, &err);
		if (after == 0)
			after = taco_err_set(&err, -ENOENT, "no such event");
	}
	if (after < 0) {
		free(ev);
		json_decref(items);
		if (after == -ENOENT)
			return tacod_http_error(r, 404, "invalid_request_error",
						"not_found", "after",
						"after names no event of this "
						"job");
		return tacod_route_store_error(r, (int)after, &err, "event");
	}
	if (stream && !strcmp(stream, "true")) {
		free(ev);
		json_decref(items);
		return job_follow(r, s, id);
	}
	if (!ev) {
		json_decref(items);
		return tacod_http_error(r, 500, "server_error", NULL, NULL,
					"out of memory");
	}
	pthread_mutex_lock(&s->lock);
	rc = tacod_store_job_get(s->store, tacod_route_scope(r), id, &j, &err);
	if (!rc)
		rc = tacod_store_event_newest(s->store, id, &newest, &err);
	/* Newest first, as OpenAI's: the page ends below `after` (an event
	 * id from the previous page) or at the newest event. A job's seqs run
	 * 1, 2, ... without gaps, so a page is one window of them, and older
	 * ones follow when the window does not reach seq 1. */
	if (after > 0 && after - 1 < newest)
		newest = after - 1;
	if (!rc && newest > 0)
		rc = tacod_store_event_list(
		    s->store, id, newest > limit ? newest - limit : 0,
		    (int)(newest < limit ? newest : limit), ev, &n, &more,
		    &err);
	pthread_mutex_unlock(&s->lock);
	tacod_job_clear(&j);
	for (int i = n - 1; !rc && i >= 0; i--)
		json_array_append_new(items, tacod_event_object(&ev[i]));
	for (int i = 0; !rc && i < n; i++)
		tacod_event_clear(&ev[i]);
	free(ev);
	if (rc) {
		json_decref(items);
		return tacod_route_store_error(r, rc, &err, "job");
	}
	return tacod_http_reply_json(r, 200,
				     tacod_list_object(items, newest > limit));
}
