/* http/reply.c: replies (data, text, JSON, OpenAI's error envelope, a file
 * descriptor, a reader, a file), the headers added to them, and the count
 * of replies by status; the answers written straight to a socket before a
 * request head (http_send_canned); and libmicrohttpd's own error replies,
 * turned into the error envelope. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/objects.h"
#include "daemon/http/internal.h"
#include "util/text.h"

static void count_status(tacod_http_server *s, unsigned status)
{
	__atomic_fetch_add(&s->stats_requests, 1, __ATOMIC_RELAXED);
	if (status < TACOD_HTTP_STATUS_MAX)
		__atomic_fetch_add(&s->stats_status[status], 1,
				   __ATOMIC_RELAXED);
}

/* Replaces bytes that are not valid UTF-8 with '?', in place. */
void http_utf8_fix(char *s)
{
	unsigned char *p = (unsigned char *)s;

	while (*p) {
		int n = *p < 0x80	      ? 0
			: (*p & 0xe0) == 0xc0 ? 1
			: (*p & 0xf0) == 0xe0 ? 2
			: (*p & 0xf8) == 0xf0 ? 3
					      : -1;
		int ok =
		    n >= 0 && !(n == 1 && *p < 0xc2) && !(n == 3 && *p > 0xf4);
		for (int i = 1; ok && i <= n; i++)
			ok = (p[i] & 0xc0) == 0x80;
		if (ok && n == 2) {
			unsigned cp = (p[0] & 0x0fu) << 12 |
				      (p[1] & 0x3fu) << 6 | (p[2] & 0x3fu);
			ok = cp >= 0x800 && (cp < 0xd800 || cp > 0xdfff);
		}
		if (ok && n == 3) {
			unsigned cp = (p[0] & 0x07u) << 18 | (p[1] & 0x3fu)
								 << 12;
			ok = cp >= 0x10000 && cp <= 0x10ffff;
		}
		if (!ok) {
			*p++ = '?';
			continue;
		}
		p += n + 1;
	}
}

/* body as one line of JSON (malloc'd), dropping the reference to body;
 * NULL when it cannot be encoded. */
static char *json_line(json_t *body)
{
	char *text =
	    body ? json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
	size_t n;
	char *t2;

	json_decref(body);
	if (!text)
		return NULL;
	n = strlen(text);
	t2 = realloc(text, n + 2);
	if (!t2)
		return text;
	t2[n] = '\n';
	t2[n + 1] = 0;
	return t2;
}

static char *error_text(const char *msg, const char *type, const char *code)
{
	return json_line(tacod_error_object(msg, type, NULL, code));
}

/* ---- answers before a request head ---- */

static const struct {
	unsigned status;
	const char *code, *retry_after;
} canned[HTTP_CANNED_N] = {
    [HTTP_CANNED_TIMEOUT] = {408, "request_timeout", NULL},
    [HTTP_CANNED_TOO_MANY] = {429, "too_many_connections", "1"},
    [HTTP_CANNED_BUSY] = {503, "server_busy", "1"},
};

int http_canned_init(tacod_http_server *s)
{
	char msg[HTTP_CANNED_N][256];

	snprintf(msg[HTTP_CANNED_TIMEOUT], sizeof(msg[0]),
		 "The request head did not arrive within %lld s "
		 "(limits.request_head_timeout_s).",
		 (long long)(s->head_ms / 1000));
	snprintf(msg[HTTP_CANNED_TOO_MANY], sizeof(msg[0]),
		 "Too many connections from your address (at most %d, "
		 "limits.max_connections_per_client).",
		 s->per_client);
	snprintf(msg[HTTP_CANNED_BUSY], sizeof(msg[0]),
		 "The server has no free connection: try again.");
	for (int i = 0; i < HTTP_CANNED_N; i++)
		if (!(s->canned[i] = error_text(msg[i], "invalid_request_error",
						canned[i].code)))
			return -ENOMEM;
	return 0;
}

void http_canned_free(tacod_http_server *s)
{
	for (int i = 0; i < HTTP_CANNED_N; i++) {
		free(s->canned[i]);
		s->canned[i] = NULL;
	}
}

void http_send_raw(tacod_http_server *s, int fd, unsigned status,
		   const char *retry_after, const char *body)
{
	char buf[2048], date[64];
	struct tm tm;
	time_t now = time(NULL);
	int n;

	if (!body || !gmtime_r(&now, &tm) ||
	    !strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm))
		return;
	n = snprintf(buf, sizeof(buf),
		     "HTTP/1.1 %u %s\r\nDate: %s\r\nConnection: close\r\n"
		     "Content-Type: application/json\r\n%s%s%s"
		     "Content-Length: %zu\r\n\r\n%s",
		     status, MHD_get_reason_phrase_for(status), date,
		     retry_after ? "Retry-After: " : "",
		     retry_after ? retry_after : "", retry_after ? "\r\n" : "",
		     strlen(body), body);
	if (n > 0 && (size_t)n < sizeof(buf) &&
	    send(fd, buf, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) == n)
		count_status(s, status);
}

void http_send_canned(tacod_http_server *s, int fd, int which)
{
	http_send_raw(s, fd, canned[which].status, canned[which].retry_after,
		      s->canned[which]);
}

/* ---- libmicrohttpd's own error replies ----
 *
 * libmicrohttpd 0.9.75 refuses some requests by itself, before the access
 * handler is called for them or in the middle of their body
 * (connection.c: transmit_error_response_len and its callers): a request
 * line or headers that do not fit the connection's memory (414, 431), a
 * Content-Length that is not a number (400) or does not fit 64 bits
 * (413), an HTTP version other than 1.x (505), a request line without a
 * version or a header line without a colon (400), broken chunked
 * encoding (400), a chunk size over 64 bits (413), a footer line without
 * a colon (400), and body data the application leaves unread (500, which
 * tacod never does). Each answer is an HTML page, a static string given
 * to MHD_create_response_from_buffer(MHD_RESPMEM_PERSISTENT), without a
 * Content-Type; no option or callback lets an application change it or
 * answer first. That is the library's only call of the function, and it
 * goes through the library's PLT, so the definition below, in the
 * program, takes its place (ELF symbol interposition, the way malloc can
 * be replaced): a persistent buffer holding one of those pages (tacod
 * itself never makes a persistent response) becomes the error envelope,
 * sent with the status libmicrohttpd chose. Every other call is passed to
 * MHD_create_response_from_buffer_with_free_callback_cls, which does what
 * the library's own definition does.
 *
 * The Content-Length refusals (and a missing Host, which only strict
 * mode refuses) come from parse_connection_headers, whose caller then
 * goes on as if nothing had been queued and builds the reply head a
 * second time: the client gets the head twice, the second one as the
 * body. There no response is returned, which libmicrohttpd takes for a
 * lack of memory and closes the connection without a word, and the
 * envelope is written to the socket when the connection closes, after
 * libmicrohttpd is done with it (http_conn_refused finds the connection:
 * it is the one of this thread whose head is complete but not yet
 * handled; NOTIFY_CONNECTION CLOSED writes). Writing at once would let
 * the client go on, and a daemon being stopped meanwhile makes
 * libmicrohttpd 0.9.75 crash in transmit_error_response_len, whose
 * MHD_queue_response then queues nothing; for the same reason, once the
 * server is stopping, its refusals get no response at all.
 *
 * Not answerable: a request line without a space ("GARBAGE\r\n") makes
 * libmicrohttpd close the connection at once, before any callback; a
 * Cookie header too large to be parsed in the connection's memory gets
 * its 431 head twice (the connection cannot be found for sure then:
 * "Request too big" is also sent from the header reader). A libmicrohttpd
 * that binds the call inside itself (built with -Bsymbolic-functions,
 * linked statically, or a later version calling another function) would
 * send its HTML again: tests/test_http_slow.c checks each case. */

static const struct {
	const char *needle; /* in libmicrohttpd's page */
	unsigned status;    /* answered directly (the head would go twice) */
	const char *code, *msg;
} mhd_pages[] = {
    {"HTTP header was too big", 0, "request_head_too_large",
     "The request line or headers are too large."},
    {"chunked encoding was syntactically incorrect", 0,
     "invalid_chunked_encoding",
     "The chunked encoding of the request body is malformed."},
    {"chunk size used", 0, "request_too_large",
     "A chunk of the request body is too large."},
    {"too large value for <b>Content-Length", 413, "request_too_large",
     "The Content-Length is too large."},
    {"wrong value for <b>Content-Length", 400, "invalid_content_length",
     "The Content-Length header is not a number of bytes."},
    {"Host:", 400, "missing_host", "An HTTP/1.1 request needs a Host header."},
    {"syntactically incorrect", 0, "malformed_request",
     "The request is malformed: a request line is 'METHOD target "
     "HTTP/1.1', a header line 'Name: value'."},
    {"HTTP version", 0, "http_version_not_supported",
     "This HTTP version is not supported: use HTTP/1.1 or HTTP/1.0."},
    {"Internal server error", 0, NULL,
     "The server failed to read the request."},
};

static struct MHD_Response *from_buffer(size_t size, void *buffer,
					enum MHD_ResponseMemoryMode mode)
{
	struct MHD_Response *resp;
	void *copy;

	switch (mode) {
	case MHD_RESPMEM_MUST_FREE:
		return MHD_create_response_from_buffer_with_free_callback_cls(
		    size, buffer, free, buffer);
	case MHD_RESPMEM_MUST_COPY:
		if (!(copy = malloc(size ? size : 1)))
			return NULL;
		if (size)
			memcpy(copy, buffer, size);
		resp = MHD_create_response_from_buffer_with_free_callback_cls(
		    size, copy, free, copy);
		if (!resp)
			free(copy);
		return resp;
	default:
		return MHD_create_response_from_buffer_with_free_callback_cls(
		    size, buffer, NULL, NULL);
	}
}

/* libmicrohttpd's error page as the error envelope: the response to
 * queue, or NULL when the page is to go as it is (out of memory). *direct:
 * the connection answers when it closes, and the library is to close it
 * without an answer (NULL is returned). */
static struct MHD_Response *page_as_json(const char *page, size_t size,
					 int *direct)
{
	size_t k = 0, n = sizeof(mhd_pages) / sizeof(mhd_pages[0]);
	struct MHD_Response *resp;
	const char *code = "malformed_request", *msg = "The request is "
						       "malformed.";
	unsigned status = 0;
	char *text;

	for (; size && k < n; k++)
		if (memmem(page, size, mhd_pages[k].needle,
			   strlen(mhd_pages[k].needle))) {
			code = mhd_pages[k].code;
			msg = mhd_pages[k].msg;
			status = mhd_pages[k].status;
			break;
		}
	if (!(text = error_text(
		  msg, code ? "invalid_request_error" : "server_error", code)))
		return NULL;
	*direct = !http_conn_refused(status, text) && status;
	if (*direct) {
		free(text);
		return NULL;
	}
	resp = MHD_create_response_from_buffer_with_free_callback_cls(
	    strlen(text), text, free, text);
	if (!resp) {
		free(text);
		return NULL;
	}
	if (MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
				    "application/json") != MHD_YES) {
		MHD_destroy_response(resp);
		return NULL;
	}
	return resp;
}

struct MHD_Response *
MHD_create_response_from_buffer(size_t size, void *buffer,
				enum MHD_ResponseMemoryMode mode)
    __attribute__((visibility("default")));
struct MHD_Response *
MHD_create_response_from_buffer(size_t size, void *buffer,
				enum MHD_ResponseMemoryMode mode)
{
	if (mode == MHD_RESPMEM_PERSISTENT &&
	    (!size || (buffer && size >= 6 && !memcmp(buffer, "<html>", 6)))) {
		int direct = 0;
		struct MHD_Response *resp;
		/* A daemon being stopped makes transmit_error_response_len
		 * crash (its MHD_queue_response queues nothing then): without
		 * a response it closes the connection instead. */
		if (http_conn_stopping())
			return NULL;
		resp = page_as_json(buffer, size, &direct);
		if (resp || direct)
			return resp;
	}
	return from_buffer(size, buffer, mode);
}

/* ---- replies ---- */

int http_queue(tacod_http_req *r, unsigned status, struct MHD_Response *resp)
{
	enum MHD_Result ok;

	if (!resp)
		return -ENOMEM;
	if (status < 100 || status >= TACOD_HTTP_STATUS_MAX)
		status = 500;
	for (int i = 0; i < r->nhdr; i++)
		MHD_add_response_header(resp, r->hdr[i].k, r->hdr[i].v);
	/* a browser takes every reply for what its Content-Type says, never
	 * for the script or page it might guess from the bytes */
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	if (__atomic_load_n(&r->srv->stopping, __ATOMIC_RELAXED))
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION,
					"close");
	ok = MHD_queue_response(r->conn, status, resp);
	MHD_destroy_response(resp);
	if (ok != MHD_YES)
		return -EIO;
	r->replied = 1;
	count_status(r->srv, status);
	return 0;
}

int tacod_http_add_header(tacod_http_req *r, const char *name,
			  const char *value)
{
	if (r->replied)
		return -EALREADY;
	if (r->nhdr == MAX_REPLY_HEADERS)
		return -ENOSPC;
	r->hdr[r->nhdr].k = strdup(name);
	r->hdr[r->nhdr].v = strdup(value);
	if (!r->hdr[r->nhdr].k || !r->hdr[r->nhdr].v) {
		free(r->hdr[r->nhdr].k);
		free(r->hdr[r->nhdr].v);
		return -ENOMEM;
	}
	r->nhdr++;
	return 0;
}

int tacod_http_reply_data(tacod_http_req *r, int status,
			  const char *content_type, const void *data,
			  size_t len)
{
	struct MHD_Response *resp;

	if (r->replied)
		return -EALREADY;
	resp = from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
	if (resp && content_type)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
					content_type);
	return http_queue(r, (unsigned)status, resp);
}

int tacod_http_reply_text(tacod_http_req *r, int status, const char *text)
{
	return tacod_http_reply_data(r, status, "text/plain; charset=utf-8",
				     text, strlen(text));
}

static int reply_json_dump(tacod_http_req *r, int status, json_t *body)
{
	char *text = json_line(body);
	int rc;

	if (!text) {
		static const char fallback[] =
		    "{\"error\":{\"message\":\"internal error: could not "
		    "encode the reply\",\"type\":\"server_error\",\"param\":"
		    "null,\"code\":null}}\n";
		return tacod_http_reply_data(r, 500, "application/json",
					     fallback, sizeof(fallback) - 1);
	}
	rc = tacod_http_reply_data(r, status, "application/json", text,
				   strlen(text));
	free(text);
	return rc;
}

int tacod_http_reply_json(tacod_http_req *r, int status, json_t *body)
{
	if (r->replied) {
		json_decref(body);
		return -EALREADY;
	}
	return reply_json_dump(r, status, body);
}

static int verror(tacod_http_req *r, int status, const char *type,
		  const char *code, const char *param, const char *fmt,
		  va_list ap)
{
	char msg[2048];

	if (r->replied)
		return -EALREADY;
	taco_text_vformat(msg, sizeof(msg), fmt, ap);
	http_utf8_fix(msg);
	/* OpenAI's SDKs retry 409 and 429 by default; ours are answers (a
	 * job in the wrong state, a key reused, a full queue), not races */
	if (status == 409 || status == 429)
		tacod_http_add_header(r, "x-should-retry", "false");
	return reply_json_dump(r, status,
			       tacod_error_object(msg, type, param, code));
}

int tacod_http_error(tacod_http_req *r, int status, const char *type,
		     const char *code, const char *param, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = verror(r, status, type, code, param, fmt, ap);
	va_end(ap);
	return rc;
}

int tacod_http_storage_errno(int code)
{
	return code == -ENOSPC || code == -EDQUOT || code == -EFBIG ||
	       code == -EIO;
}

int tacod_http_storage_error(tacod_http_req *r)
{
	return tacod_http_error(r, 507, "server_error", "insufficient_storage",
				NULL, "%s", TACOD_HTTP_STORAGE_MSG);
}

/* Content-Disposition: attachment, with a name that cannot break the
 * header. */
static void add_download_name(struct MHD_Response *resp, const char *name_in)
{
	char cd[600], name[256];
	size_t i = 0;

	for (; name_in[i] && i < sizeof(name) - 1; i++) {
		unsigned char ch = (unsigned char)name_in[i];
		name[i] = ch < 0x20 || ch == 0x7f || ch == '"' || ch == '\\' ||
				  ch == '/'
			      ? '_'
			      : (char)ch;
	}
	name[i] = 0;
	http_utf8_fix(name);
	snprintf(cd, sizeof(cd), "attachment; filename=\"%s\"", name);
	MHD_add_response_header(resp, "Content-Disposition", cd);
}

/* Queues the reply of a file or a reader: its Content-Type, and when
 * download_name is set its Content-Disposition. */
static int queue_download(tacod_http_req *r, int status,
			  struct MHD_Response *resp, const char *content_type,
			  const char *download_name)
{
	if (content_type)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
					content_type);
	if (download_name)
		add_download_name(resp, download_name);
	return http_queue(r, (unsigned)status, resp);
}

int tacod_http_reply_fd(tacod_http_req *r, int status, int fd, uint64_t size,
			const char *content_type, const char *download_name)
{
	struct MHD_Response *resp;

	if (r->replied) {
		close(fd);
		return -EALREADY;
	}
	resp = MHD_create_response_from_fd64(size, fd);
	if (!resp) {
		close(fd);
		return -ENOMEM;
	}
	return queue_download(r, status, resp, content_type, download_name);
}

typedef struct reader_ctx {
	tacod_http_read_fn read;
	void (*release)(void *);
	void *ctx;
} reader_ctx;

static ssize_t reader_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	reader_ctx *c = cls;
	ssize_t n = c->read(c->ctx, pos, buf, max);

	if (n < 0)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : n;
}

static void reader_free(void *cls)
{
	reader_ctx *c = cls;

	if (c->release)
		c->release(c->ctx);
	free(c);
}

int tacod_http_reply_reader(tacod_http_req *r, int status, uint64_t size,
			    const char *content_type, const char *download_name,
			    tacod_http_read_fn read, void (*release)(void *),
			    void *ctx)
{
	struct MHD_Response *resp = NULL;
	reader_ctx *c = NULL;

	if (!r->replied && (c = malloc(sizeof(*c)))) {
		c->read = read;
		c->release = release;
		c->ctx = ctx;
		resp = MHD_create_response_from_callback(
		    size, 64 * 1024, reader_read, c, reader_free);
	}
	if (!resp) {
		free(c);
		if (release)
			release(ctx);
		return r->replied ? -EALREADY : -ENOMEM;
	}
	return queue_download(r, status, resp, content_type, download_name);
}

int tacod_http_reply_file(tacod_http_req *r, int status, const char *path,
			  const char *content_type, const char *download_name)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return tacod_http_error(
		    r, errno == ENOENT ? 404 : 500,
		    errno == ENOENT ? "invalid_request_error" : "server_error",
		    NULL, NULL, "cannot open the file: %s", strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return tacod_http_error(r, 500, "server_error", NULL, NULL,
					"the file is not a regular file");
	}
	return tacod_http_reply_fd(r, status, fd, (uint64_t)st.st_size,
				   content_type, download_name);
}
