/* http.h: tacoctl's HTTP client (libcurl): one connection to tacod, JSON
 * requests, multipart uploads, streamed downloads and server-sent events.
 *
 * The server is "http://host:port[/prefix]", "https://..." or
 * "unix:/path/to.sock" (HTTP over a unix socket). Every request carries
 * "Authorization: Bearer TOKEN" when a token is set.
 *
 * Errors: a transport failure names the server URL ("cannot connect to
 * tacod at URL: ..."); an HTTP error is the server's error.message, with
 * err->status and err->code set. Bodies read into memory are capped at
 * CTL_HTTP_BODY_MAX; downloads go to a sink as they arrive. */
#ifndef CTL_HTTP_H
#define CTL_HTTP_H

#include <jansson.h>
#include <signal.h>
#include <stddef.h>

#include "err.h"

#define CTL_HTTP_BODY_MAX (64u << 20) /* a response read into memory */
#define CTL_HTTP_ERROR_MAX (1u << 20) /* an error body of a download */
#define CTL_HTTP_URL_MAX 2048	      /* the server URL */
#define CTL_HTTP_TOKEN_MAX 4096	      /* tacod's own limit */
#define CTL_HTTP_LINE_MAX (8u << 20)  /* one line of an event stream */
#define CTL_HTTP_CONNECT_S 10L	      /* connect timeout */
#define CTL_HTTP_REQUEST_S                                                     \
	900L			   /* a JSON request (create validates         \
				      the data before it answers) */
#define CTL_HTTP_CREATE_TRIES 3	   /* a create with an Idempotency-Key */
#define CTL_HTTP_STREAM_RETRIES 10 /* reconnects without a new event */

typedef struct ctl_http {
	void *curl;		     /* CURL * */
	char url[CTL_HTTP_URL_MAX];  /* as given: for messages */
	char base[CTL_HTTP_URL_MAX]; /* what request paths are appended to */
	char sock[108];		     /* unix socket path, or "" */
	char auth[CTL_HTTP_TOKEN_MAX + 32]; /* the Authorization header */
	char errbuf[256];		    /* CURLOPT_ERRORBUFFER */
} ctl_http;

typedef struct ctl_resp {
	long status;
	char *body; /* the raw body, NUL-terminated */
	size_t len;
	json_t *json; /* the body parsed, or NULL when it is not JSON */
} ctl_resp;

/* Set by a signal handler: transfers stop at the next progress tick. */
extern volatile sig_atomic_t ctl_http_interrupted;

/* Validates url and token and opens a curl handle. */
int ctl_http_init(ctl_http *h, const char *url, const char *token,
		  ctl_err *err);
void ctl_http_free(ctl_http *h);
void ctl_resp_free(ctl_resp *r);

enum {
	/* a create: send an Idempotency-Key (a random UUID) and retry with
	 * the same key when the connection broke or the server was
	 * unavailable, so that the retry returns the first result */
	CTL_HTTP_CREATE = 1,
};

/* METHOD path (escaped, with its query) with an optional JSON body. 0 and
 * *out on a 2xx status; else an error, and *out untouched. */
int ctl_http_json(ctl_http *h, const char *method, const char *path,
		  json_t *body, unsigned flags, ctl_resp *out, ctl_err *err);

/* POST path as multipart/form-data: the fields (name, value pairs, NULL
 * terminated) and `file` as the part "file". A create. */
int ctl_http_upload(ctl_http *h, const char *path, const char *const *fields,
		    const char *file, ctl_resp *out, ctl_err *err);

/* GET path; a 2xx body goes to sink as it arrives. The sink returns 0, or a
 * negative code with its own message in err, which stops the transfer. */
typedef int (*ctl_http_sink)(void *ctx, const void *data, size_t n,
			     ctl_err *err);
int ctl_http_download(ctl_http *h, const char *path, ctl_http_sink sink,
		      void *ctx, ctl_err *err);

/* One server-sent event. */
typedef struct ctl_sse_event {
	const char *id;	   /* the event's id, or "" */
	const char *event; /* its type, or "" */
	const char *data;  /* its data lines joined with '\n' */
} ctl_sse_event;

/* Returns 0 to go on, 1 to stop reading, or a negative code (with err).
 * ev is NULL after the events of one read from the connection were
 * delivered: a moment to show what they changed. */
typedef int (*ctl_sse_fn)(void *ctx, const ctl_sse_event *ev, ctl_err *err);

/* Reads the event stream at path until its "done" event: fn gets every
 * other event. When the connection drops, reconnects with Last-Event-ID
 * (the last id seen) and goes on, giving up after CTL_HTTP_STREAM_RETRIES
 * attempts in a row that brought no event. */
int ctl_http_sse(ctl_http *h, const char *path, ctl_sse_fn fn, void *ctx,
		 ctl_err *err);

/* POST path with a JSON body, its reply read as one event stream (no
 * reconnecting: a chat's answer cannot be resumed): fn gets every event
 * until it returns 1 or the stream ends. A non-2xx reply is an error. */
int ctl_http_sse_post(ctl_http *h, const char *path, json_t *body,
		      ctl_sse_fn fn, void *ctx, ctl_err *err);

/* Percent-escapes one path segment into out (cap bytes). */
int ctl_http_escape(const char *segment, char *out, size_t cap, ctl_err *err);

/* A random (version 4) UUID, 36 characters and a NUL. */
int ctl_uuid(char out[37]);

#endif
