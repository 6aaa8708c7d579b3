/* http/internal.h: what the parts of tacod's HTTP server (daemon/http_*.c)
 * share: the server, its listeners and compiled routes, the request and
 * the stream, and the few functions one part calls in another. Not
 * installed; no file outside daemon/http_*.c includes it.
 *
 *   http/server.c  start and stop, listeners, MHD callbacks, stats, tokens
 *   http/conn.c    connections waiting for a head: the head deadline, the
 *                  connection limit per client
 *   http/route.c   compiled routes, the URI, who calls, the request head
 *   http/body.c    the body (memory, multipart upload), deferred errors,
 *                  running the handler
 *   http/reply.c   replies and the error envelope (libmicrohttpd's own
 *                  error replies included)
 *   http/stream.c  server-sent event streams, suspension and resumption */
#ifndef TACOD_HTTP_INTERNAL_H
#define TACOD_HTTP_INTERNAL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "daemon/http/http.h"

#define MAX_SEGMENTS 32	     /* path segments */
#define MAX_QUERY 64	     /* query parameters kept */
#define MAX_FIELDS 32	     /* multipart fields kept */
#define MAX_REPLY_HEADERS 16 /* tacod_http_add_header */

/* ---- server, listeners, compiled routes ---- */

typedef struct http_conn http_conn; /* http/conn.c */
typedef struct http_client http_client;

typedef struct listener {
	struct tacod_http_server *srv;
	struct MHD_Daemon *d;
	int is_unix;
	int quiesced_fd; /* the listen socket after MHD_quiesce_daemon */
	int max_conn;
	/* under srv->conn_lock: */
	int live;			  /* connections not given up */
	http_conn *wait_head, *wait_tail; /* waiting for a head, oldest
					     first */
} listener;

/* The answers written straight to a socket, before or without a request
 * head (http_send_canned). */
enum {
	HTTP_CANNED_TIMEOUT,
	HTTP_CANNED_TOO_MANY,
	HTTP_CANNED_BUSY,
	HTTP_CANNED_N
};

typedef struct croute {
	const tacod_http_route *r;
	int nseg;
	char *seg[MAX_SEGMENTS]; /* literal, or the name of a {param} */
	int is_param[MAX_SEGMENTS];
	char *buf;
} croute;

struct tacod_http_server {
	croute *routes;
	int n_routes;
	void *ctx;
	listener tcp, unx;
	int unix_fd; /* ours until MHD has it */
	char unix_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char tokens_file[4096];
	uint64_t max_body, max_upload;

	pthread_rwlock_t auth_lock;
	tacod_auth *auth; /* NULL: no tokens file */

	pthread_mutex_t lock; /* stopping, active, streams */
	pthread_cond_t cond;
	int stopping;
	int active;   /* requests begun and not completed */
	int resuming; /* pushers between taking a suspension and resuming
			 (atomic; decremented under lock) */
	struct tacod_http_stream *streams;
	struct tacod_http_later *laters; /* requests answered later */

	uint64_t stats_requests, stats_status[TACOD_HTTP_STATUS_MAX];
	uint64_t stats_streams, stats_open, stats_dropped; /* atomic */

	/* http/conn.c: connections waiting for a head, clients */
	pthread_mutex_t conn_lock;
	pthread_cond_t conn_cond; /* CLOCK_MONOTONIC; wakes the sweeper */
	int conns_ready, sweeper_on, sweeper_stop;
	pthread_t sweeper;
	int64_t head_ms; /* limits.request_head_timeout_s */
	int per_client;	 /* limits.max_connections_per_client */
	http_client **clients;
	size_t n_buckets;
	char *canned[HTTP_CANNED_N]; /* JSON bodies */
	uint64_t stats_conns, stats_timed_out, stats_evicted,
	    stats_refused; /* atomic */
};

/* ---- streams ---- */

struct tacod_http_stream {
	pthread_mutex_t lock;
	int refs;		/* the pusher's handle and the connection */
	tacod_http_server *srv; /* valid while !gone */
	struct MHD_Connection *conn;
	char *buf;
	size_t off, len, cap;
	int suspended; /* the connection waits for data */
	int ended;     /* no more data: stream_end or the server stops */
	int gone;      /* the request completed: client gone or done */
	int dropped;   /* the client fell too far behind */
	struct tacod_http_stream *prev, *next; /* srv->streams */
};

/* ---- replies later ---- */

struct tacod_http_later {
	pthread_mutex_t lock;
	int refs; /* the holder's handle and the request */
	tacod_http_server *srv;
	struct MHD_Connection *conn; /* while !gone */
	int suspended;		     /* the connection waits for the answer */
	int answered; /* the answer is there (or the server stops) */
	int gone;     /* the request completed */
	int status, retry_after;
	json_t *body;
	tacod_http_stream *stream;	      /* or a stream to begin */
	struct tacod_http_later *prev, *next; /* srv->laters */
};

/* In the request's handler call, after the handler: waits for the answer
 * (suspends), or sends it when it is there. Returns 0, or -1 to drop the
 * connection. */
int http_later_finish(tacod_http_req *r);
/* The request completed: the connection lets go of it. */
void http_later_gone(tacod_http_later *l);
/* The server stops: every waiting request gets its 503. */
void http_laters_stop(tacod_http_server *s);
/* stream.c: resuming suspended connections, outside every lock (the
 * connection, and the server, stay until resumed); a list of them taken
 * under locks and resumed after (NULLs are skipped). */
void http_do_resume(tacod_http_server *srv, struct MHD_Connection *c);
typedef struct http_resumes {
	struct MHD_Connection **c;
	size_t n, cap;
} http_resumes;
void http_resumes_add(http_resumes *r, struct MHD_Connection *c);
void http_resumes_run(tacod_http_server *s, http_resumes *r);
/* stream.c: a stream for the request of connection c, not queued yet;
 * http_stream_queue queues it on r (0, or -1). */
tacod_http_stream *http_stream_new(tacod_http_server *srv,
				   struct MHD_Connection *c);
int http_stream_queue(tacod_http_req *r, tacod_http_stream *st);

/* ---- requests ---- */

typedef struct kv {
	char *k, *v;
	size_t vlen;
} kv;

enum body_mode { BODY_MEM = 0, BODY_FORM, BODY_DISCARD };

struct tacod_http_req {
	tacod_http_server *srv;
	listener *l;
	struct MHD_Connection *conn;
	char *raw_uri;
	char *method;
	char *path; /* decoded */
	char *segbuf;
	char *seg[MAX_SEGMENTS];
	int nseg;
	const croute *route;
	const char *pname[TACOD_HTTP_MAX_PARAMS], *pval[TACOD_HTTP_MAX_PARAMS];
	int nparams;
	kv query[MAX_QUERY];
	int nquery;
	tacod_identity id;
	int started, counted, replied, has_body;

	int mode;
	int fail_status;       /* deferred error, sent after the body is read */
	const char *fail_code; /* static strings */
	char fail_param[64];
	char fail_msg[512];
	uint64_t discarded;

	char *body;
	size_t len, cap;

	struct MHD_PostProcessor *pp;
	int file_started, file_fd, tmp_live;
	tacod_http_upload up;
	tacod_auth_sha256 sha;
	kv form[MAX_FIELDS];
	int nform;
	size_t form_bytes;

	kv hdr[MAX_REPLY_HEADERS];
	int nhdr;
	tacod_http_stream *stream;
	tacod_http_later *later;
};

static inline const char *http_kv_get(const kv *a, int n, const char *k)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(a[i].k, k))
			return a[i].v;
	return NULL;
}

static inline void http_kv_free(kv *a, int n)
{
	for (int i = 0; i < n; i++) {
		free(a[i].k);
		free(a[i].v);
	}
}

/* ---- http/conn.c ---- */

/* Starts tracking connections (and the sweeper thread); stops after the
 * listeners have stopped. */
int http_conns_init(tacod_http_server *s, const tacod_config *cfg,
		    taco_err *err);
void http_conns_stop(tacod_http_server *s);
/* MHD_OPTION_NOTIFY_CONNECTION (cls: the listener). */
void http_conn_notify(void *cls, struct MHD_Connection *c,
		      void **socket_context,
		      enum MHD_ConnectionNotificationCode code);
/* The request line has arrived (the URI callback) and r is its request,
 * which the connection frees if it closes without the request's
 * completion (http_req_free). */
void http_conn_line(struct MHD_Connection *c, tacod_http_req *r);
/* The head is complete (the access handler's first call): no deadline any
 * more. Returns -1 when the connection has been given up already. */
int http_conn_head(struct MHD_Connection *c);
/* The request is done (it has been freed): the connection waits for its
 * next head. */
void http_conn_idle(struct MHD_Connection *c);
/* Called while libmicrohttpd refuses a request head by itself (from its
 * thread, see http/reply.c): finds the connection, which then waits no
 * more. With a status, the connection keeps body (the error envelope) and
 * sends it when it closes: the caller then lets libmicrohttpd close it
 * without an answer of its own. Returns 0, or -1 when the connection is
 * not known for sure (or, with a status, out of memory). */
int http_conn_refused(unsigned status, const char *body);
/* 1 when the server of this MHD thread is stopping. */
int http_conn_stopping(void);

/* ---- http/server.c ---- */

/* Frees a request (its upload, stream, counts) once MHD is done with it. */
void http_req_free(tacod_http_req *r);

/* ---- http/route.c ---- */

/* Compiles the route table into s->routes (s->n_routes as far as it got,
 * for http_routes_free on failure). */
int http_routes_compile(tacod_http_server *s, const tacod_http_route *rt,
			taco_err *err);
void http_routes_free(tacod_http_server *s);
/* The first call of a request: authentication, routing, body limits.
 * Returns 0, or -1 to drop the connection. */
int http_begin(tacod_http_req *r, struct MHD_Connection *c, const char *method,
	       const char *url);

/* ---- http/body.c ---- */

/* How the body is read, once the route is known; have_len: clen is the
 * Content-Length. Returns 0, or -1 to drop the connection. */
int http_body_mode(tacod_http_req *r, int have_len, uint64_t clen);
/* A piece of the body. Returns 0, or -1 to drop the connection. */
int http_consume(tacod_http_req *r, const char *data, size_t n);
/* The body is complete: run the handler. Returns 0, or -1 to drop the
 * connection. */
int http_finish(tacod_http_req *r);
/* Refuses the request before its body is read. Without a body the answer
 * waits for the request's last call, which keeps the connection alive; with
 * one it goes now and MHD closes the connection instead of reading on. */
int http_reject(tacod_http_req *r, int status, const char *code,
		const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Closes and removes the temporary file of an upload (unless kept). */
void http_drop_temp(tacod_http_req *r);

/* ---- http/reply.c ---- */

/* Queues resp (NULL: -ENOMEM) with the headers added so far; counts the
 * reply by status. */
int http_queue(tacod_http_req *r, unsigned status, struct MHD_Response *resp);
/* Replaces bytes that are not valid UTF-8 with '?', in place. */
void http_utf8_fix(char *s);
/* Builds the bodies of the canned answers (s->canned); frees them. */
int http_canned_init(tacod_http_server *s);
void http_canned_free(tacod_http_server *s);
/* Writes an answer straight to fd, if the socket takes all of it at once:
 * the status, Connection: close (the caller closes), a JSON body. */
void http_send_raw(tacod_http_server *s, int fd, unsigned status,
		   const char *retry_after, const char *body);
/* The same for a canned answer (HTTP_CANNED_*). */
void http_send_canned(tacod_http_server *s, int fd, int which);

/* ---- http/stream.c ---- */

/* The request completed: the connection lets go of the stream. */
void http_stream_gone(tacod_http_stream *st);
/* The server stops: marks it stopping and ends every stream (the
 * suspended ones are woken to finish), under the lock that
 * tacod_http_stream_begin takes to see it. */
void http_streams_stop(tacod_http_server *s);

#endif
