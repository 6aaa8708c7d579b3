/* http/stream.c: server-sent event streams. A stream's reply is read by
 * MHD as the client takes it; with nothing buffered the connection is
 * suspended until a push, the end of the stream or the server's stop
 * resumes it. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/http/internal.h"

#define STREAM_CHUNK (32u << 10) /* bytes per stream read callback */

static void stream_unref(tacod_http_stream *st)
{
	int left;

	pthread_mutex_lock(&st->lock);
	left = --st->refs;
	pthread_mutex_unlock(&st->lock);
	if (left)
		return;
	pthread_mutex_destroy(&st->lock);
	free(st->buf);
	free(st);
}

/* Under st->lock: takes the suspension for resuming after the unlock. */
static struct MHD_Connection *take_suspension(tacod_http_stream *st)
{
	if (!st->suspended || st->gone)
		return NULL;
	st->suspended = 0;
	__atomic_fetch_add(&st->srv->resuming, 1, __ATOMIC_SEQ_CST);
	return st->conn;
}

/* Outside every lock: the connection is suspended, so it (and the server)
 * stay until it is resumed. */
void http_do_resume(tacod_http_server *srv, struct MHD_Connection *c)
{
	MHD_resume_connection(c);
	pthread_mutex_lock(&srv->lock);
	__atomic_fetch_sub(&srv->resuming, 1, __ATOMIC_SEQ_CST);
	pthread_cond_broadcast(&srv->cond);
	pthread_mutex_unlock(&srv->lock);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	tacod_http_stream *st = cls;
	ssize_t n;

	(void)pos;
	pthread_mutex_lock(&st->lock);
	if (st->dropped) {
		n = MHD_CONTENT_READER_END_WITH_ERROR;
	} else if (st->len > st->off) {
		size_t k = st->len - st->off;
		if (k > max)
			k = max;
		if (k > STREAM_CHUNK)
			k = STREAM_CHUNK;
		memcpy(buf, st->buf + st->off, k);
		st->off += k;
		if (st->off == st->len)
			st->off = st->len = 0;
		n = (ssize_t)k;
	} else if (st->ended) {
		n = MHD_CONTENT_READER_END_OF_STREAM;
	} else {
		/* Nothing to send: wait, off MHD's event loop, for a push. */
		st->suspended = 1;
		MHD_suspend_connection(st->conn);
		n = 0;
	}
	pthread_mutex_unlock(&st->lock);
	return n;
}

/* Under srv->lock: takes st out of srv->streams. */
static void unlink_stream(tacod_http_server *srv, tacod_http_stream *st)
{
	if (st->prev)
		st->prev->next = st->next;
	else
		srv->streams = st->next;
	if (st->next)
		st->next->prev = st->prev;
	st->prev = st->next = NULL;
}

tacod_http_stream *http_stream_new(tacod_http_server *srv,
				   struct MHD_Connection *c)
{
	tacod_http_stream *st = calloc(1, sizeof(*st));

	if (!st)
		return NULL;
	pthread_mutex_init(&st->lock, NULL);
	st->refs = 2;
	st->srv = srv;
	st->conn = c;
	pthread_mutex_lock(&srv->lock);
	if (srv->stopping)
		st->ended = 1;
	st->next = srv->streams;
	if (srv->streams)
		srv->streams->prev = st;
	srv->streams = st;
	pthread_mutex_unlock(&srv->lock);
	return st;
}

int http_stream_queue(tacod_http_req *r, tacod_http_stream *st)
{
	struct MHD_Response *resp;

	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_CHUNK,
						 stream_read, st, NULL);
	if (resp) {
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
					"text/event-stream");
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL,
					"no-cache");
		MHD_add_response_header(resp, "X-Accel-Buffering", "no");
	}
	if (http_queue(r, 200, resp))
		return -1;
	__atomic_fetch_add(&r->srv->stats_streams, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&r->srv->stats_open, 1, __ATOMIC_RELAXED);
	r->stream = st;
	return 0;
}

tacod_http_stream *tacod_http_stream_begin(tacod_http_req *r)
{
	tacod_http_server *srv = r->srv;
	tacod_http_stream *st;

	if (r->replied || r->stream || r->later)
		return NULL;
	st = http_stream_new(srv, r->conn);
	if (!st)
		return NULL;
	if (http_stream_queue(r, st)) {
		pthread_mutex_lock(&srv->lock);
		unlink_stream(srv, st);
		pthread_mutex_unlock(&srv->lock);
		pthread_mutex_destroy(&st->lock);
		free(st->buf);
		free(st);
		return NULL;
	}
	return st;
}

/* The request completed: the connection lets go of the stream. */
void http_stream_gone(tacod_http_stream *st)
{
	tacod_http_server *srv = st->srv;

	pthread_mutex_lock(&st->lock);
	st->gone = 1;
	st->suspended = 0;
	st->conn = NULL;
	pthread_mutex_unlock(&st->lock);
	pthread_mutex_lock(&srv->lock);
	unlink_stream(srv, st);
	pthread_mutex_unlock(&srv->lock);
	__atomic_fetch_sub(&srv->stats_open, 1, __ATOMIC_RELAXED);
	stream_unref(st);
}

int tacod_http_stream_push(tacod_http_stream *st, const void *data, size_t len)
{
	struct MHD_Connection *c = NULL;
	tacod_http_server *srv;
	int rc = 0;

	if (!st)
		return -EINVAL;
	pthread_mutex_lock(&st->lock);
	srv = st->srv;
	if (st->gone || st->ended || st->dropped) {
		rc = -EPIPE;
	} else if (st->len - st->off + len > TACOD_HTTP_STREAM_MAX) {
		/* Too far behind: the reader ends the reply with an error. */
		st->dropped = 1;
		__atomic_fetch_add(&srv->stats_dropped, 1, __ATOMIC_RELAXED);
		c = take_suspension(st);
		rc = -EPIPE;
	} else {
		if (st->len + len > st->cap && st->off) {
			memmove(st->buf, st->buf + st->off, st->len - st->off);
			st->len -= st->off;
			st->off = 0;
		}
		if (st->len + len > st->cap) {
			size_t cap = st->cap ? st->cap : 4096;
			char *nb;
			while (cap < st->len + len)
				cap *= 2;
			nb = realloc(st->buf, cap);
			if (!nb) {
				pthread_mutex_unlock(&st->lock);
				return -ENOMEM;
			}
			st->buf = nb;
			st->cap = cap;
		}
		memcpy(st->buf + st->len, data, len);
		st->len += len;
		c = take_suspension(st);
	}
	pthread_mutex_unlock(&st->lock);
	if (c)
		http_do_resume(srv, c);
	return rc;
}

int tacod_http_stream_event(tacod_http_stream *st, const char *event,
			    const char *data)
{
	size_t n = (event ? strlen(event) + 8 : 0) + 2, i = 0;
	const char *p;
	char *out;
	int rc;

	for (p = data ? data : ""; *p; p++)
		n += *p == '\n' ? 7 : 1;
	n += 7;
	out = malloc(n + 1);
	if (!out)
		return -ENOMEM;
	if (event)
		i += (size_t)sprintf(out, "event: %s\n", event);
	memcpy(out + i, "data: ", 6);
	i += 6;
	for (p = data ? data : ""; *p; p++) {
		if (*p == '\n') {
			memcpy(out + i, "\ndata: ", 7);
			i += 7;
		} else if (*p != '\r') {
			out[i++] = *p;
		}
	}
	out[i++] = '\n';
	out[i++] = '\n';
	rc = tacod_http_stream_push(st, out, i);
	free(out);
	return rc;
}

void tacod_http_stream_end(tacod_http_stream *st)
{
	struct MHD_Connection *c;
	tacod_http_server *srv;

	if (!st)
		return;
	pthread_mutex_lock(&st->lock);
	st->ended = 1;
	srv = st->srv;
	c = take_suspension(st);
	pthread_mutex_unlock(&st->lock);
	if (c)
		http_do_resume(srv, c);
	stream_unref(st);
}

void http_resumes_add(http_resumes *r, struct MHD_Connection *c)
{
	if (!c)
		return;
	if (r->n == r->cap) {
		size_t nc = r->cap ? 2 * r->cap : 16;
		struct MHD_Connection **g = realloc(r->c, nc * sizeof(*g));
		if (!g) /* it stays suspended until the server closes it */
			return;
		r->c = g;
		r->cap = nc;
	}
	r->c[r->n++] = c;
}

void http_resumes_run(tacod_http_server *s, http_resumes *r)
{
	for (size_t i = 0; i < r->n; i++)
		http_do_resume(s, r->c[i]);
	free(r->c);
	memset(r, 0, sizeof(*r));
}

/* The server stops: marks it stopping and ends every stream, under
 * srv->lock, which tacod_http_stream_begin takes to see it (so no stream
 * begins unended); the suspended ones are woken to finish. */
void http_streams_stop(tacod_http_server *s)
{
	http_resumes r = {0};

	pthread_mutex_lock(&s->lock);
	__atomic_store_n(&s->stopping, 1, __ATOMIC_SEQ_CST);
	for (tacod_http_stream *st = s->streams; st; st = st->next) {
		pthread_mutex_lock(&st->lock);
		st->ended = 1;
		http_resumes_add(&r, take_suspension(st));
		pthread_mutex_unlock(&st->lock);
	}
	pthread_mutex_unlock(&s->lock);
	http_resumes_run(s, &r);
}
