/* http.h: tacod's HTTP server over libmicrohttpd.
 *
 * The caller registers a route table; the server authenticates every
 * request (http/auth.h) before routing, but those of an open route (below),
 * reads its body within the configured limits, calls the route's handler
 * and counts the replies by status. Every reply says
 * X-Content-Type-Options: nosniff.
 *
 * Listeners: config.listen ("127.0.0.1:8226", "[::1]:8226",
 * "localhost:8226"; port 0 picks a free port, see tacod_http_port) and/or
 * config.unix_socket (created here, mode 0660; a stale socket file is
 * replaced, a live one is -EADDRINUSE). Each runs a small pool of MHD
 * polling threads (poll(); see http/server.c for why not epoll), so handlers
 * run on several threads at once and must be thread-safe. A handler blocks the
 * connections of its thread while it runs: it should not take long.
 *
 * Errors use OpenAI's shape: {"error": {"message", "type", "param",
 * "code"}}. Unauthenticated: 401; unknown path: 404; a known path with
 * another method: 405 (with Allow); a body over limits.max_body_bytes (or
 * an uploaded file over limits.max_upload_bytes): 413; a stopping server:
 * 503; a Transfer-Encoding other than chunked: 501. The requests that
 * libmicrohttpd refuses by itself (a bad Content-Length, a head too large,
 * an HTTP version other than 1.x, malformed lines or chunks) get the same
 * shape (http/reply.c).
 *
 * Slow clients (http/conn.c): a connection that has not sent a whole
 * request head within limits.request_head_timeout_s of its start or of
 * its previous request is closed (408 when its request line had come);
 * a client (an address, IPv6 by its /64; a uid on the unix socket) holds
 * at most limits.max_connections_per_client connections, its oldest one
 * waiting for a head giving way to a new one (429 when none waits); a
 * full listener closes its oldest connection waiting for a head. Library
 * code: no logging. */
#ifndef TACOD_HTTP_H
#define TACOD_HTTP_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/config/config.h"
#include "daemon/http/auth.h"
#include "util/taco_err.h"

#define TACOD_HTTP_MAX_PARAMS 8		 /* {name} segments in a pattern */
#define TACOD_HTTP_STREAM_MAX (4u << 20) /* bytes buffered per stream */
#define TACOD_HTTP_FORM_MAX (64u << 10)	 /* multipart fields, all values */
#define TACOD_HTTP_STOP_GRACE_MS 10000	 /* tacod_http_stop's wait */
#define TACOD_HTTP_STATUS_MAX 600

typedef struct tacod_http_server tacod_http_server;
typedef struct tacod_http_req tacod_http_req;
typedef struct tacod_http_stream tacod_http_stream;

/* A handler replies (tacod_http_reply_*, tacod_http_error or
 * tacod_http_stream_begin) before returning. One that returns without a
 * reply gets a 500 error sent for it; a negative return is noted in that
 * error's message. */
typedef int (*tacod_http_handler)(tacod_http_req *req, void *ctx);

typedef struct tacod_http_route {
	const char *method;  /* "GET", "POST", "DELETE", ... */
	const char *pattern; /* "/v1/files/{id}/content": literal segments
				and {name} segments (one whole segment each) */
	tacod_http_handler handler;
	/* Where a multipart/form-data body's file part is written (a
	 * temporary file, hashed as it arrives). NULL: multipart bodies are
	 * read like any other, within max_body_bytes. */
	const char *upload_dir;
	/* 1: served to anyone, without authentication (the dashboard's
	 * static files, which hold no data; every call of the page's API is
	 * authenticated as any other). */
	int open;
} tacod_http_route;
/* A route table ends with an entry whose method is NULL. */

/* The file part of a multipart/form-data upload, in a temporary file in
 * the route's upload_dir (written and hashed as it arrived). It is removed
 * when the handler returns unless the handler keeps it with
 * tacod_http_upload_keep. */
typedef struct tacod_http_upload {
	char path[4096];
	char field[64];	    /* the form field: "file" */
	char filename[256]; /* as the client named it */
	char content_type[128];
	uint64_t size;
	char sha256[65]; /* hex */
} tacod_http_upload;

typedef struct tacod_http_stats {
	uint64_t requests;			   /* replies sent (queued) */
	uint64_t by_status[TACOD_HTTP_STATUS_MAX]; /* index: status code */
	uint64_t streams;			   /* streams begun */
	uint64_t streams_open;
	uint64_t streams_dropped;     /* clients too slow (buffer full) */
	uint64_t connections_open;    /* not given up (below) */
	uint64_t heads_timed_out;     /* closed at the head deadline */
	uint64_t connections_evicted; /* waiting for a head, closed to make
					 room for a new connection */
	uint64_t connections_refused; /* a client at its limit, none of its
					 connections waiting (429) */
} tacod_http_stats;

/* Starts the listeners of the config, loading config->tokens_file when
 * set. routes (and the strings in it) and ctx must outlive the server. */
int tacod_http_start(const tacod_config *config, const tacod_http_route *routes,
		     void *ctx, tacod_http_server **out, taco_err *err);
/* Graceful stop: stop accepting, end every stream (its buffered data is
 * still sent), answer new requests on open connections with 503, wait up
 * to grace_ms for requests in flight, then close everything. Streams
 * whose pusher still holds them return -EPIPE from then on. */
void tacod_http_stop_grace(tacod_http_server *s, int grace_ms);
void tacod_http_stop(tacod_http_server *s); /* TACOD_HTTP_STOP_GRACE_MS */

/* The TCP port listened on (0 when there is no TCP listener). */
int tacod_http_port(const tacod_http_server *s);
void tacod_http_get_stats(tacod_http_server *s, tacod_http_stats *out);
/* Reads config->tokens_file again; the old tokens stay on error. */
int tacod_http_reload_tokens(tacod_http_server *s, taco_err *err);

/* ---- the request (valid during the handler call only) ---- */

const char *tacod_http_method(const tacod_http_req *r);
const char *tacod_http_path(const tacod_http_req *r); /* decoded */
/* A {name} segment of the route's pattern, percent-decoded. */
const char *tacod_http_param(const tacod_http_req *r, const char *name);
/* A query parameter (the first when repeated), decoded; NULL when
 * absent. */
const char *tacod_http_query(const tacod_http_req *r, const char *name);
/* The i-th query parameter in the order sent (0 <= i < count), decoded:
 * for names that are families, such as metadata[key]. */
int tacod_http_query_count(const tacod_http_req *r);
void tacod_http_query_at(const tacod_http_req *r, int i, const char **name,
			 const char **value);
/* A request header, names compared case-insensitively. */
const char *tacod_http_header(const tacod_http_req *r, const char *name);
const tacod_identity *tacod_http_identity(const tacod_http_req *r);
int tacod_http_is_unix(const tacod_http_req *r); /* came over the socket */
/* The body (NUL-terminated; len may be NULL). "" when there was none or
 * when it was a multipart upload. */
const char *tacod_http_body(const tacod_http_req *r, size_t *len);
/* The body parsed as a JSON object; on failure a 400 error has been sent
 * and NULL is returned (the handler just returns). The caller owns it. */
json_t *tacod_http_body_json(tacod_http_req *r);
/* The uploaded file (NULL when the request had no file part) and the
 * other fields of a multipart/form-data body. */
const tacod_http_upload *tacod_http_upload_file(const tacod_http_req *r);
const char *tacod_http_form(const tacod_http_req *r, const char *name);
/* Renames the uploaded file to dest (same file system as upload_dir) and
 * leaves it there; tacod_http_upload_file's path is dest afterwards. */
int tacod_http_upload_keep(tacod_http_req *r, const char *dest, taco_err *err);

/* ---- replies: one per request; 0, -EALREADY after another reply,
 * -ENOMEM ---- */

/* Adds a header to the reply to come (e.g. "Location", "Retry-After"). */
int tacod_http_add_header(tacod_http_req *r, const char *name,
			  const char *value);
/* Sends body as JSON and drops the reference to it (like
 * json_object_set_new), also on failure. */
int tacod_http_reply_json(tacod_http_req *r, int status, json_t *body);
/* {"error": {"message": <fmt>, "type": type, "param": param, "code":
 * code}}; param and code may be NULL (JSON null). */
int tacod_http_error(tacod_http_req *r, int status, const char *type,
		     const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* Whether a negative errno is a storage failure: the file system is full
 * (ENOSPC, EDQUOT, EFBIG) or failing (EIO), where a write may succeed
 * later. */
int tacod_http_storage_errno(int code);
/* Such a failure as 507 {"error": {"type": "server_error", "code":
 * "insufficient_storage", "message": TACOD_HTTP_STORAGE_MSG}}: a client may
 * try again later. It names no path of the server's. */
#define TACOD_HTTP_STORAGE_MSG                                                 \
	"the server is out of storage space; try again later"
int tacod_http_storage_error(tacod_http_req *r);
int tacod_http_reply_data(tacod_http_req *r, int status,
			  const char *content_type, const void *data,
			  size_t len);
int tacod_http_reply_text(tacod_http_req *r, int status, const char *text);
/* Streams size bytes of fd from its start; the fd is the server's from now
 * on (closed after the reply, or at once on failure). download_name, when
 * not NULL, adds Content-Disposition: attachment. */
int tacod_http_reply_fd(tacod_http_req *r, int status, int fd, uint64_t size,
			const char *content_type, const char *download_name);
/* Reads size bytes of a reply produced on demand: read(ctx, pos, buf, max)
 * returns how many bytes it put in buf (> 0), or a negative errno, which
 * cuts the reply short. release(ctx) (may be NULL) runs when the reply is
 * done or could not be queued, so ctx is the server's from now on. */
typedef ssize_t (*tacod_http_read_fn)(void *ctx, uint64_t pos, char *buf,
				      size_t max);
int tacod_http_reply_reader(tacod_http_req *r, int status, uint64_t size,
			    const char *content_type, const char *download_name,
			    tacod_http_read_fn read, void (*release)(void *),
			    void *ctx);
/* The same for a path: 404 error JSON when it cannot be opened. */
int tacod_http_reply_file(tacod_http_req *r, int status, const char *path,
			  const char *content_type, const char *download_name);

/* ---- streams (server-sent events) ----
 *
 * stream_begin replies 200 text/event-stream to the request and returns a
 * handle that any thread may push to. Pushed bytes are buffered (at most
 * TACOD_HTTP_STREAM_MAX; a client that falls further behind is dropped)
 * and sent as the client reads. Once the client is gone (disconnected,
 * dropped, server stopping) push returns -EPIPE. Every handle must be
 * released with stream_end, which also ends the reply after the buffered
 * bytes. */
tacod_http_stream *tacod_http_stream_begin(tacod_http_req *r);
int tacod_http_stream_push(tacod_http_stream *s, const void *data, size_t len);
/* One event: "event: <event>\n" (when event is not NULL), a "data: " line
 * per line of data, then a blank line. */
int tacod_http_stream_event(tacod_http_stream *s, const char *event,
			    const char *data);
void tacod_http_stream_end(tacod_http_stream *s);

/* ---- replies later (a request answered by another thread) ----
 *
 * later_begin, called by a handler that then returns without a reply,
 * keeps the request waiting (its connection suspended: it costs no
 * thread) for one answer from any thread: later_json (a JSON reply,
 * Retry-After when retry_after > 0) or later_stream (a stream, as
 * stream_begin gives, whose pushes are buffered until the connection
 * takes it). Each consumes the handle; later_drop gives it up unanswered
 * (the request gets a 500). When the server stops, a request still
 * waiting gets a 503 and the handle's answer returns -EPIPE. The waiting
 * has no time limit of the server's: its holder bounds it. */
typedef struct tacod_http_later tacod_http_later;

tacod_http_later *tacod_http_later_begin(tacod_http_req *r);
int tacod_http_later_json(tacod_http_later *l, int status, json_t *body,
			  int retry_after);
tacod_http_stream *tacod_http_later_stream(tacod_http_later *l);
void tacod_http_later_drop(tacod_http_later *l);

#endif
