/* http_reply.c: replies (data, text, JSON, OpenAI's error envelope, a file
 * descriptor, a reader, a file), the headers added to them, and the count
 * of replies by status. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/objects.h"
#include "http_internal.h"

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

int http_queue(tacod_http_req *r, unsigned status, struct MHD_Response *resp)
{
	enum MHD_Result ok;

	if (!resp)
		return -ENOMEM;
	if (status < 100 || status >= TACOD_HTTP_STATUS_MAX)
		status = 500;
	for (int i = 0; i < r->nhdr; i++)
		MHD_add_response_header(resp, r->hdr[i].k, r->hdr[i].v);
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
	resp = MHD_create_response_from_buffer(len, (void *)data,
					       MHD_RESPMEM_MUST_COPY);
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
	char *text =
	    body ? json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
	int rc;

	json_decref(body);
	if (!text) {
		static const char fallback[] =
		    "{\"error\":{\"message\":\"internal error: could not "
		    "encode the reply\",\"type\":\"server_error\",\"param\":"
		    "null,\"code\":null}}\n";
		return tacod_http_reply_data(r, 500, "application/json",
					     fallback, sizeof(fallback) - 1);
	}
	size_t n = strlen(text);
	char *t2 = realloc(text, n + 2);
	if (t2) {
		text = t2;
		text[n++] = '\n';
		text[n] = 0;
	}
	rc = tacod_http_reply_data(r, status, "application/json", text, n);
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
	vsnprintf(msg, sizeof(msg), fmt, ap);
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
