/* http/later.c: requests answered later, by another thread (http.h). The
 * handler's call ends with the connection suspended (MHD polls it no
 * more); the answer, from whichever thread, is stored and the connection
 * resumed, and libmicrohttpd's next call of the request (the access
 * handler again, http_finish) sends it. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "daemon/http/internal.h"

static void later_unref(tacod_http_later *l)
{
	int left;

	pthread_mutex_lock(&l->lock);
	left = --l->refs;
	pthread_mutex_unlock(&l->lock);
	if (left)
		return;
	json_decref(l->body);
	pthread_mutex_destroy(&l->lock);
	free(l);
}

/* Under srv->lock. */
static void unlink_later(tacod_http_server *srv, tacod_http_later *l)
{
	if (l->prev)
		l->prev->next = l->next;
	else if (srv->laters == l)
		srv->laters = l->next;
	if (l->next)
		l->next->prev = l->prev;
	l->prev = l->next = NULL;
}

/* Under l->lock: the suspension to resume after the unlock. */
static struct MHD_Connection *take_suspension(tacod_http_later *l)
{
	if (!l->suspended || l->gone)
		return NULL;
	l->suspended = 0;
	__atomic_fetch_add(&l->srv->resuming, 1, __ATOMIC_SEQ_CST);
	return l->conn;
}

tacod_http_later *tacod_http_later_begin(tacod_http_req *r)
{
	tacod_http_server *srv = r->srv;
	tacod_http_later *l;

	if (r->replied || r->stream || r->later)
		return NULL;
	l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	pthread_mutex_init(&l->lock, NULL);
	l->refs = 2;
	l->srv = srv;
	l->conn = r->conn;
	pthread_mutex_lock(&srv->lock);
	if (srv->stopping) { /* answered now: the server stops */
		l->answered = 1;
		l->status = 503;
	}
	l->next = srv->laters;
	if (srv->laters)
		srv->laters->prev = l;
	srv->laters = l;
	pthread_mutex_unlock(&srv->lock);
	r->later = l;
	return l;
}

/* Sends the stored answer from the request's own call. */
static int send_answer(tacod_http_req *r, tacod_http_later *l)
{
	json_t *body;
	int status, retry;
	tacod_http_stream *st;
	char ra[24];

	pthread_mutex_lock(&l->lock);
	body = l->body;
	l->body = NULL;
	status = l->status;
	retry = l->retry_after;
	st = l->stream;
	l->stream = NULL;
	pthread_mutex_unlock(&l->lock);
	if (st) {
		if (http_stream_queue(r, st)) {
			/* the connection drops: the pusher sees -EPIPE */
			__atomic_fetch_add(&r->srv->stats_open, 1,
					   __ATOMIC_RELAXED);
			http_stream_gone(st);
			return -1;
		}
		return 0;
	}
	if (retry > 0) {
		snprintf(ra, sizeof(ra), "%d", retry);
		tacod_http_add_header(r, "Retry-After", ra);
	}
	if (!body)
		return tacod_http_error(
			   r, status ? status : 500, "server_error", NULL, NULL,
			   status == 503 ? "The server is stopping."
					 : "The server failed to answer "
					   "the request.")
			   ? -1
			   : 0;
	return tacod_http_reply_json(r, status, body) ? -1 : 0;
}

int http_later_finish(tacod_http_req *r)
{
	tacod_http_later *l = r->later;
	int answered;

	pthread_mutex_lock(&l->lock);
	answered = l->answered;
	if (!answered) {
		/* no thread resumes it before this unlock */
		l->suspended = 1;
		MHD_suspend_connection(r->conn);
	}
	pthread_mutex_unlock(&l->lock);
	return answered ? send_answer(r, l) : 0;
}

void http_later_gone(tacod_http_later *l)
{
	tacod_http_server *srv = l->srv;
	tacod_http_stream *st;

	pthread_mutex_lock(&l->lock);
	l->gone = 1;
	l->suspended = 0;
	l->conn = NULL;
	st = l->stream; /* answered with a stream it never took */
	l->stream = NULL;
	pthread_mutex_unlock(&l->lock);
	if (st) {
		__atomic_fetch_add(&srv->stats_open, 1, __ATOMIC_RELAXED);
		http_stream_gone(st);
	}
	pthread_mutex_lock(&srv->lock);
	unlink_later(srv, l);
	pthread_mutex_unlock(&srv->lock);
	later_unref(l);
}

/* Stores an answer and wakes the request: 0, or -EPIPE when it is gone
 * or answered already (the server stopping). */
static int answer(tacod_http_later *l, int status, json_t *body, int retry,
		  tacod_http_stream *st)
{
	struct MHD_Connection *c = NULL;
	tacod_http_server *srv = l->srv;
	int rc = 0;

	pthread_mutex_lock(&l->lock);
	if (l->gone || l->answered) {
		rc = -EPIPE;
	} else {
		l->answered = 1;
		l->status = status;
		l->body = body;
		body = NULL;
		l->retry_after = retry;
		l->stream = st;
		st = NULL;
		c = take_suspension(l);
	}
	pthread_mutex_unlock(&l->lock);
	json_decref(body);
	if (c)
		http_do_resume(srv, c);
	return rc;
}

int tacod_http_later_json(tacod_http_later *l, int status, json_t *body,
			  int retry_after)
{
	int rc;

	if (!l) {
		json_decref(body);
		return -EINVAL;
	}
	rc = answer(l, status, body, retry_after, NULL);
	later_unref(l);
	return rc;
}

tacod_http_stream *tacod_http_later_stream(tacod_http_later *l)
{
	tacod_http_stream *st;
	struct MHD_Connection *c;

	if (!l)
		return NULL;
	pthread_mutex_lock(&l->lock);
	c = l->gone ? NULL : l->conn;
	pthread_mutex_unlock(&l->lock);
	st = c ? http_stream_new(l->srv, c) : NULL;
	if (st && answer(l, 200, NULL, 0, st)) {
		/* gone meanwhile: the connection's reference goes with it */
		__atomic_fetch_add(&l->srv->stats_open, 1, __ATOMIC_RELAXED);
		http_stream_gone(st);
		tacod_http_stream_end(st);
		st = NULL;
	}
	later_unref(l);
	return st;
}

void tacod_http_later_drop(tacod_http_later *l)
{
	if (!l)
		return;
	(void)answer(l, 500, NULL, 0, NULL);
	later_unref(l);
}

void http_laters_stop(tacod_http_server *s)
{
	http_resumes r = {0};

	pthread_mutex_lock(&s->lock);
	for (tacod_http_later *l = s->laters; l; l = l->next) {
		pthread_mutex_lock(&l->lock);
		if (!l->answered) {
			l->answered = 1;
			l->status = 503;
		}
		http_resumes_add(&r, take_suspension(l));
		pthread_mutex_unlock(&l->lock);
	}
	pthread_mutex_unlock(&s->lock);
	http_resumes_run(s, &r);
}
