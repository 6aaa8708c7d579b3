#include "http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "api/objects.h"

#define THREADS 4		  /* MHD polling threads per listener */
#define CONN_TIMEOUT_S 300	  /* idle connections are closed */
#define CONN_MEMORY (128u << 10)  /* MHD's per-connection pool */
#define MAX_SEGMENTS 32		  /* path segments */
#define MAX_QUERY 64		  /* query parameters kept */
#define MAX_FIELDS 32		  /* multipart fields kept */
#define MAX_REPLY_HEADERS 16	  /* tacod_http_add_header */
#define DISCARD_MAX (16ull << 20) /* body read past an error, then drop */
#define FORM_SLACK (64u << 10)	  /* multipart framing beyond the file */
#define STREAM_CHUNK (32u << 10)  /* bytes per stream read callback */

/* ---- server, listeners, compiled routes ---- */

typedef struct listener {
	struct tacod_http_server *srv;
	struct MHD_Daemon *d;
	int is_unix;
	int quiesced_fd; /* the listen socket after MHD_quiesce_daemon */
} listener;

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

	uint64_t stats_requests, stats_status[TACOD_HTTP_STATUS_MAX];
	uint64_t stats_streams, stats_open, stats_dropped; /* atomic */
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
};

/* ---- small helpers ---- */

static void count_status(tacod_http_server *s, unsigned status)
{
	__atomic_fetch_add(&s->stats_requests, 1, __ATOMIC_RELAXED);
	if (status < TACOD_HTTP_STATUS_MAX)
		__atomic_fetch_add(&s->stats_status[status], 1,
				   __ATOMIC_RELAXED);
}

/* Replaces bytes that are not valid UTF-8 with '?', in place. */
static void utf8_fix(char *s)
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

static int hexval(int ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* Percent-decodes [s, s+n) into out (room for n + 1). plus: '+' is a
 * space (query strings). Returns -1 on a bad escape or a %00 when strict,
 * else the length. */
static long pct_decode(const char *s, size_t n, char *out, int plus, int strict)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		int hi, lo;
		if (s[i] == '%' && i + 2 < n && (hi = hexval(s[i + 1])) >= 0 &&
		    (lo = hexval(s[i + 2])) >= 0) {
			char ch = (char)(hi << 4 | lo);
			if (ch == 0 && strict)
				return -1;
			out[o++] = ch ? ch : '?';
			i += 2;
		} else if (s[i] == '%' && strict) {
			return -1;
		} else {
			out[o++] = plus && s[i] == '+' ? ' ' : s[i];
		}
	}
	out[o] = 0;
	return (long)o;
}

static const char *kv_get(const kv *a, int n, const char *k)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(a[i].k, k))
			return a[i].v;
	return NULL;
}

static void kv_free(kv *a, int n)
{
	for (int i = 0; i < n; i++) {
		free(a[i].k);
		free(a[i].v);
	}
}

/* ---- replies ---- */

static int queue(tacod_http_req *r, unsigned status, struct MHD_Response *resp)
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
	return queue(r, (unsigned)status, resp);
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
	utf8_fix(msg);
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
	utf8_fix(name);
	snprintf(cd, sizeof(cd), "attachment; filename=\"%s\"", name);
	MHD_add_response_header(resp, "Content-Disposition", cd);
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
	if (content_type)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
					content_type);
	if (download_name)
		add_download_name(resp, download_name);
	return queue(r, (unsigned)status, resp);
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
	if (content_type)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
					content_type);
	if (download_name)
		add_download_name(resp, download_name);
	return queue(r, (unsigned)status, resp);
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

/* ---- request accessors ---- */

const char *tacod_http_method(const tacod_http_req *r)
{
	return r->method;
}

const char *tacod_http_path(const tacod_http_req *r)
{
	return r->path;
}

const char *tacod_http_param(const tacod_http_req *r, const char *name)
{
	for (int i = 0; i < r->nparams; i++)
		if (!strcmp(r->pname[i], name))
			return r->pval[i];
	return NULL;
}

const char *tacod_http_query(const tacod_http_req *r, const char *name)
{
	return kv_get(r->query, r->nquery, name);
}

const char *tacod_http_header(const tacod_http_req *r, const char *name)
{
	return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const tacod_identity *tacod_http_identity(const tacod_http_req *r)
{
	return &r->id;
}

int tacod_http_is_unix(const tacod_http_req *r)
{
	return r->l->is_unix;
}

const char *tacod_http_body(const tacod_http_req *r, size_t *len)
{
	if (len)
		*len = r->body ? r->len : 0;
	return r->body ? r->body : "";
}

json_t *tacod_http_body_json(tacod_http_req *r)
{
	json_error_t jerr;
	json_t *j;

	if (!r->body || !r->len) {
		tacod_http_error(r, 400, "invalid_request_error", NULL, NULL,
				 "The request needs a JSON body.");
		return NULL;
	}
	j = json_loadb(r->body, r->len, JSON_REJECT_DUPLICATES, &jerr);
	if (!j) {
		tacod_http_error(r, 400, "invalid_request_error", NULL, NULL,
				 "We could not parse the JSON body of your "
				 "request: line %d: %s",
				 jerr.line, jerr.text);
		return NULL;
	}
	if (!json_is_object(j)) {
		json_decref(j);
		tacod_http_error(r, 400, "invalid_request_error", NULL, NULL,
				 "The JSON body must be an object.");
		return NULL;
	}
	return j;
}

const tacod_http_upload *tacod_http_upload_file(const tacod_http_req *r)
{
	return r->file_started ? &r->up : NULL;
}

const char *tacod_http_form(const tacod_http_req *r, const char *name)
{
	return kv_get(r->form, r->nform, name);
}

int tacod_http_upload_keep(tacod_http_req *r, const char *dest, taco_err *err)
{
	if (!r->file_started || !r->tmp_live)
		return taco_err_set(err, -ENOENT, "http: no uploaded file");
	if (rename(r->up.path, dest) < 0)
		return taco_err_set(err, -errno, "http: rename %s to %s: %s",
				    r->up.path, dest, strerror(errno));
	r->tmp_live = 0;
	snprintf(r->up.path, sizeof(r->up.path), "%s", dest);
	return 0;
}

/* ---- streams ---- */

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
static void do_resume(tacod_http_server *srv, struct MHD_Connection *c)
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

tacod_http_stream *tacod_http_stream_begin(tacod_http_req *r)
{
	tacod_http_server *srv = r->srv;
	tacod_http_stream *st;
	struct MHD_Response *resp;

	if (r->replied || r->stream)
		return NULL;
	st = calloc(1, sizeof(*st));
	if (!st)
		return NULL;
	pthread_mutex_init(&st->lock, NULL);
	st->refs = 2;
	st->srv = srv;
	st->conn = r->conn;
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_CHUNK,
						 stream_read, st, NULL);
	if (!resp) {
		pthread_mutex_destroy(&st->lock);
		free(st);
		return NULL;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
				"text/event-stream");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL,
				"no-cache");
	MHD_add_response_header(resp, "X-Accel-Buffering", "no");

	pthread_mutex_lock(&srv->lock);
	if (srv->stopping)
		st->ended = 1;
	st->next = srv->streams;
	if (srv->streams)
		srv->streams->prev = st;
	srv->streams = st;
	pthread_mutex_unlock(&srv->lock);

	if (queue(r, 200, resp)) {
		pthread_mutex_lock(&srv->lock);
		if (st->prev)
			st->prev->next = st->next;
		else
			srv->streams = st->next;
		if (st->next)
			st->next->prev = st->prev;
		pthread_mutex_unlock(&srv->lock);
		pthread_mutex_destroy(&st->lock);
		free(st);
		return NULL;
	}
	__atomic_fetch_add(&srv->stats_streams, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&srv->stats_open, 1, __ATOMIC_RELAXED);
	r->stream = st;
	return st;
}

/* The request completed: the connection lets go of the stream. */
static void stream_gone(tacod_http_stream *st)
{
	tacod_http_server *srv = st->srv;

	pthread_mutex_lock(&st->lock);
	st->gone = 1;
	st->suspended = 0;
	st->conn = NULL;
	pthread_mutex_unlock(&st->lock);
	pthread_mutex_lock(&srv->lock);
	if (st->prev)
		st->prev->next = st->next;
	else
		srv->streams = st->next;
	if (st->next)
		st->next->prev = st->prev;
	st->prev = st->next = NULL;
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
		do_resume(srv, c);
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
		do_resume(srv, c);
	stream_unref(st);
}

/* ---- parsing the request ---- */

static int parse_uri(tacod_http_req *r, const char *uri)
{
	const char *q = strchr(uri, '?');
	size_t plen = q ? (size_t)(q - uri) : strlen(uri);
	const char *hash;
	char *p;

	if (!plen || uri[0] != '/')
		return -EINVAL;
	r->path = malloc(plen + 1);
	r->segbuf = malloc(plen + 1);
	if (!r->path || !r->segbuf)
		return -ENOMEM;
	if (pct_decode(uri, plen, r->path, 0, 1) < 0)
		return -EINVAL;
	utf8_fix(r->path);
	/* Segments, each decoded on its own (so %2F stays inside one). */
	p = r->segbuf;
	for (size_t i = 1; i <= plen;) {
		size_t j = i;
		long n;
		while (j < plen && uri[j] != '/')
			j++;
		if (r->nseg == MAX_SEGMENTS)
			return -E2BIG;
		n = pct_decode(uri + i, j - i, p, 0, 1);
		if (n < 0)
			return -EINVAL;
		r->seg[r->nseg++] = p;
		p += n + 1;
		i = j + 1;
		if (j == plen)
			break;
	}
	if (!q)
		return 0;
	hash = strchr(q + 1, '#');
	for (const char *s = q + 1, *end = hash ? hash : q + strlen(q);
	     s < end;) {
		const char *amp = memchr(s, '&', (size_t)(end - s));
		const char *e = amp ? amp : end;
		const char *eq = memchr(s, '=', (size_t)(e - s));
		if (e > s && r->nquery < MAX_QUERY) {
			const char *ke = eq ? eq : e;
			kv *x = &r->query[r->nquery];
			x->k = malloc((size_t)(ke - s) + 1);
			x->v = malloc(eq ? (size_t)(e - eq) : 1);
			if (!x->k || !x->v) {
				free(x->k);
				free(x->v);
				return -ENOMEM;
			}
			pct_decode(s, (size_t)(ke - s), x->k, 1, 0);
			if (eq)
				pct_decode(eq + 1, (size_t)(e - eq - 1), x->v,
					   1, 0);
			else
				x->v[0] = 0;
			r->nquery++;
		}
		s = e + 1;
	}
	return 0;
}

static int route_matches_path(const croute *cr, tacod_http_req *r, int bind)
{
	int np = 0;

	if (cr->nseg != r->nseg)
		return 0;
	for (int i = 0; i < cr->nseg; i++) {
		if (cr->is_param[i]) {
			if (!r->seg[i][0])
				return 0;
			if (bind && np < TACOD_HTTP_MAX_PARAMS) {
				r->pname[np] = cr->seg[i];
				r->pval[np] = r->seg[i];
			}
			np++;
		} else if (strcmp(cr->seg[i], r->seg[i])) {
			return 0;
		}
	}
	if (bind)
		r->nparams = np;
	return 1;
}

static int method_is(const char *route_method, const char *m)
{
	return !strcmp(route_method, m) ||
	       (!strcmp(m, "HEAD") && !strcmp(route_method, "GET"));
}

static int is_loopback(const struct sockaddr *sa)
{
	if (!sa)
		return 0;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;
		return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)sa;
		const uint8_t *b = in6->sin6_addr.s6_addr;
		static const uint8_t v4map[12] = {0, 0, 0, 0, 0,    0,
						  0, 0, 0, 0, 0xff, 0xff};
		if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr))
			return 1;
		return !memcmp(b, v4map, 12) && b[12] == 127;
	}
	return 0;
}

static void vset_fail(tacod_http_req *r, int status, const char *code,
		      const char *param, const char *fmt, va_list ap)
{
	if (r->fail_status)
		return;
	r->fail_status = status;
	r->fail_code = code;
	snprintf(r->fail_param, sizeof(r->fail_param), "%s",
		 param ? param : "");
	utf8_fix(r->fail_param);
	vsnprintf(r->fail_msg, sizeof(r->fail_msg), fmt, ap);
	utf8_fix(r->fail_msg);
}

/* Fails the request once its body has been read (the rest is
 * discarded). */
static void defer_fail(tacod_http_req *r, int status, const char *code,
		       const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void defer_fail(tacod_http_req *r, int status, const char *code,
		       const char *param, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vset_fail(r, status, code, param, fmt, ap);
	va_end(ap);
}

static int send_fail(tacod_http_req *r)
{
	return tacod_http_error(
	    r, r->fail_status,
	    r->fail_status >= 500 ? "server_error" : "invalid_request_error",
	    r->fail_code, r->fail_param[0] ? r->fail_param : NULL, "%s",
	    r->fail_msg);
}

static void drop_temp(tacod_http_req *r)
{
	if (r->file_fd >= 0) {
		close(r->file_fd);
		r->file_fd = -1;
	}
	if (r->tmp_live) {
		unlink(r->up.path);
		r->tmp_live = 0;
	}
}

/* The multipart iterator: the file part goes to a temporary file, the
 * other fields to memory. */
static enum MHD_Result on_part(void *cls, enum MHD_ValueKind kind,
			       const char *key, const char *filename,
			       const char *content_type,
			       const char *transfer_encoding, const char *data,
			       uint64_t off, size_t size)
{
	tacod_http_req *r = cls;
	tacod_http_server *srv = r->srv;

	(void)kind;
	(void)transfer_encoding;
	if (r->fail_status)
		return MHD_NO;
	if (!key)
		key = "";
	if (filename) {
		if (!r->file_started) {
			r->file_started = 1;
			snprintf(r->up.field, sizeof(r->up.field), "%s", key);
			snprintf(r->up.filename, sizeof(r->up.filename), "%s",
				 filename);
			utf8_fix(r->up.filename);
			snprintf(r->up.content_type, sizeof(r->up.content_type),
				 "%s", content_type ? content_type : "");
			snprintf(r->up.path, sizeof(r->up.path),
				 "%s/.upload-XXXXXX", r->route->r->upload_dir);
			r->file_fd = mkostemp(r->up.path, O_CLOEXEC);
			if (r->file_fd < 0) {
				defer_fail(r, 500, NULL, NULL,
					   "cannot store the upload: %s",
					   strerror(errno));
				return MHD_NO;
			}
			r->tmp_live = 1;
			tacod_auth_sha256_init(&r->sha);
		} else if (strcmp(key, r->up.field) ||
			   strncmp(filename, r->up.filename,
				   sizeof(r->up.filename) - 1) ||
			   (off == 0 && r->up.size > 0) || r->file_fd < 0) {
			defer_fail(r, 400, NULL, key,
				   "Only one file may be uploaded per "
				   "request.");
			drop_temp(r);
			return MHD_NO;
		}
		if (r->up.size + size > srv->max_upload) {
			defer_fail(r, 413, "file_too_large", key,
				   "The file is larger than the limit of "
				   "%llu bytes.",
				   (unsigned long long)srv->max_upload);
			drop_temp(r);
			return MHD_NO;
		}
		for (size_t done = 0; done < size;) {
			ssize_t w = write(r->file_fd, data + done, size - done);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				defer_fail(r, 500, NULL, NULL,
					   "cannot store the upload: %s",
					   w < 0 ? strerror(errno)
						 : "short write");
				drop_temp(r);
				return MHD_NO;
			}
			done += (size_t)w;
		}
		tacod_auth_sha256_update(&r->sha, data, size);
		r->up.size += size;
		return MHD_YES;
	}
	/* A plain field: a continuation of the last one, or a new one. */
	kv *last = r->nform ? &r->form[r->nform - 1] : NULL;
	if (!(last && !strcmp(last->k, key) && off == last->vlen)) {
		if (r->nform == MAX_FIELDS) {
			defer_fail(r, 400, NULL, key,
				   "Too many form fields (at most %d).",
				   MAX_FIELDS);
			return MHD_NO;
		}
		last = &r->form[r->nform];
		last->k = strdup(key);
		last->v = calloc(1, 1);
		last->vlen = 0;
		if (!last->k || !last->v) {
			free(last->k);
			free(last->v);
			defer_fail(r, 500, NULL, NULL, "out of memory");
			return MHD_NO;
		}
		r->nform++;
		r->form_bytes += strlen(key);
	}
	r->form_bytes += size;
	if (r->form_bytes > TACOD_HTTP_FORM_MAX) {
		defer_fail(r, 413, "request_too_large", key,
			   "The form fields are larger than %u bytes.",
			   TACOD_HTTP_FORM_MAX);
		return MHD_NO;
	}
	if (size) {
		char *nv = realloc(last->v, last->vlen + size + 1);
		if (!nv) {
			defer_fail(r, 500, NULL, NULL, "out of memory");
			return MHD_NO;
		}
		memcpy(nv + last->vlen, data, size);
		last->vlen += size;
		nv[last->vlen] = 0;
		last->v = nv;
	}
	return MHD_YES;
}

static uint64_t content_length(struct MHD_Connection *c, int *have)
{
	const char *v =
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
	char *end;
	unsigned long long n;

	*have = 0;
	if (!v)
		return 0;
	n = strtoull(v, &end, 10);
	if (end == v || *end)
		return 0;
	*have = 1;
	return n;
}

/* The first call of a request: authentication, routing, body limits.
 * Returns 0, or -1 to drop the connection. */
/* Refuses the request before its body is read. Without a body the answer
 * waits for the request's last call, which keeps the connection alive; with
 * one it goes now and MHD closes the connection instead of reading on. */
static int reject(tacod_http_req *r, int status, const char *code,
		  const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int reject(tacod_http_req *r, int status, const char *code,
		  const char *param, const char *fmt, ...)
{
	va_list ap;

	if (r->fail_status)
		return 0;
	va_start(ap, fmt);
	vset_fail(r, status, code, param, fmt, ap);
	va_end(ap);
	r->mode = BODY_DISCARD;
	if (!r->has_body)
		return 0;
	return send_fail(r) ? -1 : 0;
}

static int begin(tacod_http_req *r, struct MHD_Connection *c,
		 const char *method, const char *url)
{
	tacod_http_server *srv = r->srv;
	const union MHD_ConnectionInfo *ci;
	int rc, have_len, path_known = 0;
	uint64_t clen;
	char allow[256] = "";

	r->conn = c;
	r->method = strdup(method);
	if (!r->method)
		return -1;
	clen = content_length(c, &have_len);
	r->has_body = (have_len && clen > 0) ||
		      MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						  "Transfer-Encoding");
	pthread_mutex_lock(&srv->lock);
	srv->active++;
	r->counted = 1;
	rc = srv->stopping;
	pthread_mutex_unlock(&srv->lock);
	if (rc)
		return reject(r, 503, "server_shutting_down", NULL,
			      "The server is shutting down.");

	/* Who is calling. */
	if (r->l->is_unix) {
		taco_err err = {{0}};
		ci = MHD_get_connection_info(c,
					     MHD_CONNECTION_INFO_CONNECTION_FD);
		if (!ci || tacod_auth_peer(ci->connect_fd, &r->id, NULL, &err))
			return reject(r, 401, "unauthenticated", NULL,
				      "Cannot identify the socket's "
				      "peer: %s",
				      err.msg);
	} else {
		pthread_rwlock_rdlock(&srv->auth_lock);
		if (srv->auth)
			rc = tacod_auth_header(
			    srv->auth,
			    MHD_lookup_connection_value(
				c, MHD_HEADER_KIND,
				MHD_HTTP_HEADER_AUTHORIZATION),
			    &r->id);
		else
			rc = 1;
		pthread_rwlock_unlock(&srv->auth_lock);
		if (rc == 1) {
			ci = MHD_get_connection_info(
			    c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
			if (!ci || !is_loopback(ci->client_addr))
				return reject(r, 403, "forbidden", NULL,
					      "Without a tokens file only "
					      "loopback clients are served.");
			tacod_auth_local(&r->id);
		} else if (rc) {
			const char *h = MHD_lookup_connection_value(
			    c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
			tacod_http_add_header(r, "WWW-Authenticate",
					      "Bearer realm=\"tacod\"");
			return reject(r, 401, "invalid_api_key", NULL,
				      h ? "Incorrect API key provided."
					: "You didn't provide an API key. Send "
					  "it as 'Authorization: Bearer "
					  "<token>'.");
		}
	}

	/* Which route. */
	rc = parse_uri(r, r->raw_uri ? r->raw_uri : url);
	if (rc == -ENOMEM)
		return -1;
	if (rc == -EINVAL)
		return reject(r, 400, "invalid_url", NULL,
			      "The request URL is malformed.");
	for (int i = 0; !rc && i < srv->n_routes; i++) {
		const croute *cr = &srv->routes[i];
		if (!route_matches_path(cr, r, 0))
			continue;
		path_known = 1;
		if (method_is(cr->r->method, method) && !r->route) {
			r->route = cr;
			route_matches_path(cr, r, 1);
		}
		if (strlen(allow) + strlen(cr->r->method) + 3 < sizeof(allow) &&
		    !strstr(allow, cr->r->method)) {
			if (allow[0])
				strcat(allow, ", ");
			strcat(allow, cr->r->method);
		}
	}
	if (!r->route && path_known) {
		tacod_http_add_header(r, MHD_HTTP_HEADER_ALLOW, allow);
		return reject(r, 405, "method_not_allowed", NULL,
			      "Method %s is not allowed for %s "
			      "(allowed: %s).",
			      method, r->path, allow);
	}
	if (!r->route)
		return reject(r, 404, "unknown_url", NULL,
			      "Unknown request URL: %s %s.", method,
			      r->path ? r->path : "");

	/* How the body is read. */
	const char *ct = MHD_lookup_connection_value(
	    c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
	if (r->route->r->upload_dir && ct &&
	    !strncasecmp(ct, "multipart/form-data", 19)) {
		if (have_len &&
		    clen > srv->max_upload + TACOD_HTTP_FORM_MAX + FORM_SLACK)
			return reject(r, 413, "file_too_large", "file",
				      "The upload is larger than the limit of "
				      "%llu bytes.",
				      (unsigned long long)srv->max_upload);
		r->pp = MHD_create_post_processor(c, 64 * 1024, on_part, r);
		if (!r->pp)
			return reject(r, 400, NULL, NULL,
				      "The multipart/form-data body "
				      "has no usable boundary.");
		r->mode = BODY_FORM;
	} else {
		if (have_len && clen > srv->max_body)
			return reject(
			    r, 413, "request_too_large", NULL,
			    "The request body is larger than the limit "
			    "of %llu bytes.",
			    (unsigned long long)srv->max_body);
		r->mode = BODY_MEM;
	}
	return 0;
}

/* A piece of the body. Returns 0, or -1 to drop the connection. */
static int consume(tacod_http_req *r, const char *data, size_t n)
{
	tacod_http_server *srv = r->srv;

	if (r->replied)
		return 0;
	if (r->fail_status)
		r->mode = BODY_DISCARD;
	switch (r->mode) {
	case BODY_MEM:
		if (r->len + n > srv->max_body) {
			defer_fail(r, 413, "request_too_large", NULL,
				   "The request body is larger than the limit "
				   "of %llu bytes.",
				   (unsigned long long)srv->max_body);
			free(r->body);
			r->body = NULL;
			r->len = r->cap = 0;
			r->mode = BODY_DISCARD;
			break;
		}
		if (r->len + n + 1 > r->cap) {
			size_t cap = r->cap ? r->cap : 4096;
			char *nb;
			while (cap < r->len + n + 1)
				cap *= 2;
			nb = realloc(r->body, cap);
			if (!nb)
				return -1;
			r->body = nb;
			r->cap = cap;
		}
		memcpy(r->body + r->len, data, n);
		r->len += n;
		r->body[r->len] = 0;
		return 0;
	case BODY_FORM:
		if (MHD_post_process(r->pp, data, n) != MHD_YES) {
			defer_fail(r, 400, NULL, NULL,
				   "The multipart/form-data body is "
				   "malformed.");
			r->mode = BODY_DISCARD;
			drop_temp(r);
		}
		return 0;
	default:
		break;
	}
	r->discarded += n;
	return r->discarded > DISCARD_MAX ? -1 : 0;
}

/* The body is complete: run the handler. Returns 0, or -1 to drop the
 * connection. */
static int finish(tacod_http_req *r)
{
	tacod_http_server *srv = r->srv;
	int rc;

	if (r->replied)
		return 0;
	if (r->pp) {
		if (MHD_destroy_post_processor(r->pp) != MHD_YES)
			defer_fail(r, 400, NULL, NULL,
				   "The multipart/form-data body is "
				   "incomplete.");
		r->pp = NULL;
	}
	if (r->file_started && r->file_fd >= 0) {
		uint8_t d[32];
		close(r->file_fd);
		r->file_fd = -1;
		tacod_auth_sha256_final(&r->sha, d);
		tacod_auth_hex(d, r->up.sha256);
	}
	if (r->fail_status) {
		drop_temp(r);
		return send_fail(r) ? -1 : 0;
	}
	rc = r->route->r->handler(r, srv->ctx);
	drop_temp(r); /* unless the handler kept it */
	if (!r->replied &&
	    tacod_http_error(r, 500, "server_error", NULL, NULL,
			     "The server failed to answer the request%s%s.",
			     rc < 0 ? ": " : "", rc < 0 ? strerror(-rc) : ""))
		return -1;
	return 0;
}

/* ---- MHD callbacks ---- */

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
	listener *l = cls;
	tacod_http_req *r = calloc(1, sizeof(*r));

	(void)c;
	if (!r)
		return NULL;
	r->srv = l->srv;
	r->l = l;
	r->file_fd = -1;
	r->raw_uri = strdup(uri ? uri : "/");
	return r;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c,
				 const char *url, const char *method,
				 const char *version, const char *data,
				 size_t *size, void **con_cls)
{
	tacod_http_req *r = *con_cls;

	(void)cls;
	(void)version;
	if (!r)
		return MHD_NO;
	if (!r->started) {
		r->started = 1;
		return begin(r, c, method, url) ? MHD_NO : MHD_YES;
	}
	if (*size) {
		int rc = consume(r, data, *size);
		*size = 0;
		return rc ? MHD_NO : MHD_YES;
	}
	return finish(r) ? MHD_NO : MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	tacod_http_req *r = *con_cls;

	(void)cls;
	(void)c;
	(void)toe;
	*con_cls = NULL;
	if (!r)
		return;
	if (r->pp)
		MHD_destroy_post_processor(r->pp);
	drop_temp(r);
	if (r->stream)
		stream_gone(r->stream);
	if (r->counted) {
		pthread_mutex_lock(&r->srv->lock);
		r->srv->active--;
		pthread_cond_broadcast(&r->srv->cond);
		pthread_mutex_unlock(&r->srv->lock);
	}
	kv_free(r->query, r->nquery);
	kv_free(r->form, r->nform);
	kv_free(r->hdr, r->nhdr);
	free(r->raw_uri);
	free(r->method);
	free(r->path);
	free(r->segbuf);
	free(r->body);
	free(r);
}

/* ---- starting and stopping ---- */

static int compile_routes(tacod_http_server *s, const tacod_http_route *rt,
			  taco_err *err)
{
	int n = 0;

	while (rt && rt[n].method)
		n++;
	s->routes = calloc((size_t)n + 1, sizeof(*s->routes));
	if (!s->routes)
		return taco_err_set(err, -ENOMEM, "http: out of memory");
	for (int i = 0; i < n; i++) {
		croute *cr = &s->routes[i];
		const char *pat = rt[i].pattern;
		char *p;
		int np = 0;

		cr->r = &rt[i];
		if (!pat || pat[0] != '/' || !rt[i].handler)
			return taco_err_set(err, -EINVAL,
					    "http: route %d (%s %s): the "
					    "pattern must start with '/' and "
					    "a handler is needed",
					    i, rt[i].method, pat ? pat : "");
		cr->buf = strdup(pat + 1);
		if (!cr->buf)
			return taco_err_set(err, -ENOMEM,
					    "http: out of memory");
		s->n_routes = i + 1;
		for (p = cr->buf;;) {
			char *slash = strchr(p, '/');
			size_t len;
			if (slash)
				*slash = 0;
			len = strlen(p);
			if (cr->nseg == MAX_SEGMENTS)
				return taco_err_set(err, -EINVAL,
						    "http: route '%s' has too "
						    "many segments",
						    pat);
			cr->is_param[cr->nseg] =
			    len >= 3 && p[0] == '{' && p[len - 1] == '}';
			if (cr->is_param[cr->nseg]) {
				p[len - 1] = 0;
				p++;
				if (++np > TACOD_HTTP_MAX_PARAMS)
					return taco_err_set(
					    err, -EINVAL,
					    "http: route '%s' has more than "
					    "%d parameters",
					    pat, TACOD_HTTP_MAX_PARAMS);
			} else if (strchr(p, '{') || strchr(p, '}')) {
				return taco_err_set(err, -EINVAL,
						    "http: route '%s': a "
						    "{param} must be a whole "
						    "segment",
						    pat);
			}
			cr->seg[cr->nseg++] = p;
			if (!slash)
				break;
			p = slash + 1;
		}
	}
	return 0;
}

static int parse_listen(const char *spec, struct sockaddr_storage *ss, int *v6,
			taco_err *err)
{
	char host[256];
	const char *colon, *port_s;
	char *end;
	long port;

	memset(ss, 0, sizeof(*ss));
	if (spec[0] == '[') {
		const char *rb = strchr(spec, ']');
		if (!rb || rb[1] != ':' ||
		    (size_t)(rb - spec - 1) >= sizeof(host))
			goto bad;
		memcpy(host, spec + 1, (size_t)(rb - spec - 1));
		host[rb - spec - 1] = 0;
		port_s = rb + 2;
		*v6 = 1;
	} else {
		colon = strrchr(spec, ':');
		if (!colon || (size_t)(colon - spec) >= sizeof(host))
			goto bad;
		memcpy(host, spec, (size_t)(colon - spec));
		host[colon - spec] = 0;
		port_s = colon + 1;
		*v6 = 0;
	}
	errno = 0;
	port = strtol(port_s, &end, 10);
	if (!*port_s || *end || errno || port < 0 || port > 65535)
		goto bad;
	if (*v6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1)
			goto bad;
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)ss;
		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)port);
		if (!strcmp(host, "localhost"))
			snprintf(host, sizeof(host), "127.0.0.1");
		if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
			goto bad;
	}
	return 0;
bad:
	return taco_err_set(err, -EINVAL,
			    "http: listen '%s' must be IPv4:port, "
			    "[IPv6]:port or localhost:port",
			    spec);
}

static int unix_listen(tacod_http_server *s, const char *path, int backlog,
		       taco_err *err)
{
	struct sockaddr_un sa;
	struct stat st;
	int fd;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sa.sun_path))
		return taco_err_set(err, -ENAMETOOLONG,
				    "http: unix socket path '%s' is too long",
				    path);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (lstat(path, &st) == 0) {
		int probe;
		if (!S_ISSOCK(st.st_mode))
			return taco_err_set(err, -EEXIST,
					    "http: %s exists and is not a "
					    "socket",
					    path);
		probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (probe >= 0 &&
		    connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(probe);
			return taco_err_set(err, -EADDRINUSE,
					    "http: %s: another server is "
					    "listening there",
					    path);
		}
		if (probe >= 0)
			close(probe);
		unlink(path); /* stale */
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return taco_err_set(err, -errno, "http: socket: %s",
				    strerror(errno));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		close(fd);
		return taco_err_set(err, -e, "http: bind %s: %s", path,
				    strerror(e));
	}
	if (chmod(path, 0660) < 0 || listen(fd, backlog) < 0) {
		int e = errno;
		close(fd);
		unlink(path);
		return taco_err_set(err, -e, "http: %s: %s", path, strerror(e));
	}
	s->unix_fd = fd;
	memcpy(s->unix_path, sa.sun_path, sizeof(s->unix_path));
	return 0;
}

static int start_daemon(tacod_http_server *s, listener *l, int max_conn,
			const struct sockaddr *sa, int v6, int fd,
			taco_err *err)
{
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD |
			 MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC;
	unsigned threads = THREADS;

	/* poll(), not epoll: libmicrohttpd 0.9.75's epoll mode (Debian 12)
	 * misses some clients' hang-ups (a few percent of closed keep-alive
	 * connections and aborted uploads stay in CLOSE_WAIT, their temporary
	 * files with them, until the idle timeout); poll() sees every one.
	 * A pool of THREADS polling threads spreads the connections. */
	if (MHD_is_feature_supported(MHD_FEATURE_POLL) == MHD_YES)
		flags |= MHD_USE_POLL;
	if (v6)
		flags |= MHD_USE_IPv6;
	if ((unsigned)max_conn < threads)
		threads = (unsigned)max_conn;
	l->srv = s;
	l->quiesced_fd = -1;
	if (sa)
		l->d = MHD_start_daemon(
		    flags, 0, NULL, NULL, on_access, l, MHD_OPTION_SOCK_ADDR,
		    sa, MHD_OPTION_CONNECTION_LIMIT, (unsigned)max_conn,
		    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONN_TIMEOUT_S,
		    MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY,
		    MHD_OPTION_THREAD_POOL_SIZE, threads,
		    MHD_OPTION_NOTIFY_COMPLETED, on_completed, l,
		    MHD_OPTION_URI_LOG_CALLBACK, on_uri, l,
		    MHD_OPTION_LISTENING_ADDRESS_REUSE, 1, MHD_OPTION_END);
	else
		l->d = MHD_start_daemon(
		    flags, 0, NULL, NULL, on_access, l,
		    MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT,
		    (unsigned)max_conn, MHD_OPTION_CONNECTION_TIMEOUT,
		    (unsigned)CONN_TIMEOUT_S,
		    MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY,
		    MHD_OPTION_THREAD_POOL_SIZE, threads,
		    MHD_OPTION_NOTIFY_COMPLETED, on_completed, l,
		    MHD_OPTION_URI_LOG_CALLBACK, on_uri, l, MHD_OPTION_END);
	if (!l->d)
		return taco_err_set(err, -EADDRINUSE,
				    "http: cannot start listening on %s (in "
				    "use, or not an address of this machine)",
				    sa ? "the TCP address" : s->unix_path);
	return 0;
}

static void server_free(tacod_http_server *s)
{
	for (int i = 0; i < s->n_routes; i++)
		free(s->routes[i].buf);
	free(s->routes);
	tacod_auth_free(s->auth);
	pthread_rwlock_destroy(&s->auth_lock);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->cond);
	free(s);
}

static void close_listeners(tacod_http_server *s)
{
	listener *ls[2] = {&s->tcp, &s->unx};

	for (int i = 0; i < 2; i++) {
		if (ls[i]->d)
			MHD_stop_daemon(ls[i]->d);
		ls[i]->d = NULL;
		if (ls[i]->quiesced_fd >= 0)
			close(ls[i]->quiesced_fd);
		ls[i]->quiesced_fd = -1;
	}
	if (s->unix_fd >= 0)
		close(s->unix_fd); /* MHD never took it */
	s->unix_fd = -1;
	if (s->unix_path[0])
		unlink(s->unix_path);
	s->unix_path[0] = 0;
}

int tacod_http_start(const tacod_config *cfg, const tacod_http_route *routes,
		     void *ctx, tacod_http_server **out, taco_err *err)
{
	tacod_http_server *s = calloc(1, sizeof(*s));
	struct sockaddr_storage ss;
	pthread_condattr_t ca;
	int v6 = 0, rc, max_conn;

	*out = NULL;
	if (!s)
		return taco_err_set(err, -ENOMEM, "http: out of memory");
	pthread_rwlock_init(&s->auth_lock, NULL);
	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cond, &ca);
	pthread_condattr_destroy(&ca);
	s->unix_fd = -1;
	s->tcp.quiesced_fd = s->unx.quiesced_fd = -1;
	s->ctx = ctx;
	s->max_body = cfg->limits.max_body_bytes;
	s->max_upload = cfg->limits.max_upload_bytes;
	max_conn =
	    cfg->limits.max_connections > 0 ? cfg->limits.max_connections : 256;
	snprintf(s->tokens_file, sizeof(s->tokens_file), "%s",
		 cfg->tokens_file);
	if ((rc = compile_routes(s, routes, err)))
		goto fail;
	if (s->tokens_file[0] &&
	    (rc = tacod_auth_load(s->tokens_file, &s->auth, err)))
		goto fail;
	if (!cfg->listen[0] && !cfg->unix_socket[0]) {
		rc = taco_err_set(err, -EINVAL,
				  "http: neither 'listen' nor 'unix_socket' "
				  "is set");
		goto fail;
	}
	if (cfg->listen[0]) {
		if ((rc = parse_listen(cfg->listen, &ss, &v6, err)))
			goto fail;
		if ((rc = start_daemon(s, &s->tcp, max_conn,
				       (struct sockaddr *)&ss, v6, -1, err))) {
			taco_err_prefix(err, rc, "%s", cfg->listen);
			goto fail;
		}
	}
	if (cfg->unix_socket[0]) {
		if ((rc = unix_listen(s, cfg->unix_socket, 128, err)))
			goto fail;
		if ((rc = start_daemon(s, &s->unx, max_conn, NULL, 0,
				       s->unix_fd, err)))
			goto fail;
		s->unix_fd = -1; /* MHD's now */
		s->unx.is_unix = 1;
	}
	*out = s;
	return 0;
fail:
	close_listeners(s);
	server_free(s);
	return rc;
}

int tacod_http_port(const tacod_http_server *s)
{
	const union MHD_DaemonInfo *i;

	if (!s || !s->tcp.d)
		return 0;
	i = MHD_get_daemon_info(s->tcp.d, MHD_DAEMON_INFO_BIND_PORT);
	return i ? i->port : 0;
}

void tacod_http_get_stats(tacod_http_server *s, tacod_http_stats *out)
{
	memset(out, 0, sizeof(*out));
	out->requests = __atomic_load_n(&s->stats_requests, __ATOMIC_RELAXED);
	for (int i = 0; i < TACOD_HTTP_STATUS_MAX; i++)
		out->by_status[i] =
		    __atomic_load_n(&s->stats_status[i], __ATOMIC_RELAXED);
	out->streams = __atomic_load_n(&s->stats_streams, __ATOMIC_RELAXED);
	out->streams_open = __atomic_load_n(&s->stats_open, __ATOMIC_RELAXED);
	out->streams_dropped =
	    __atomic_load_n(&s->stats_dropped, __ATOMIC_RELAXED);
}

int tacod_http_reload_tokens(tacod_http_server *s, taco_err *err)
{
	tacod_auth *a = NULL, *old;
	int rc;

	if (!s->tokens_file[0])
		return 0;
	if ((rc = tacod_auth_load(s->tokens_file, &a, err)))
		return rc;
	pthread_rwlock_wrlock(&s->auth_lock);
	old = s->auth;
	s->auth = a;
	pthread_rwlock_unlock(&s->auth_lock);
	tacod_auth_free(old);
	return 0;
}

static void deadline_after(struct timespec *ts, int ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

void tacod_http_stop_grace(tacod_http_server *s, int grace_ms)
{
	listener *ls[2];
	struct MHD_Connection **resume = NULL;
	struct timespec deadline;
	size_t n = 0, cap = 0;

	if (!s)
		return;
	ls[0] = &s->tcp;
	ls[1] = &s->unx;
	/* No new connections. */
	for (int i = 0; i < 2; i++)
		if (ls[i]->d)
			ls[i]->quiesced_fd = MHD_quiesce_daemon(ls[i]->d);

	/* End every stream; the suspended ones are woken to finish. */
	pthread_mutex_lock(&s->lock);
	__atomic_store_n(&s->stopping, 1, __ATOMIC_SEQ_CST);
	for (tacod_http_stream *st = s->streams; st; st = st->next) {
		pthread_mutex_lock(&st->lock);
		st->ended = 1;
		if (n == cap) {
			size_t nc = cap ? 2 * cap : 16;
			struct MHD_Connection **nr =
			    realloc(resume, nc * sizeof(*nr));
			if (nr)
				resume = nr, cap = nc;
		}
		if (n < cap) {
			struct MHD_Connection *c = take_suspension(st);
			if (c)
				resume[n++] = c;
		}
		pthread_mutex_unlock(&st->lock);
	}
	pthread_mutex_unlock(&s->lock);
	for (size_t i = 0; i < n; i++)
		do_resume(s, resume[i]);
	free(resume);

	/* Requests in flight finish (for at most grace_ms). */
	deadline_after(&deadline, grace_ms);
	pthread_mutex_lock(&s->lock);
	while (s->active > 0 && pthread_cond_timedwait(&s->cond, &s->lock,
						       &deadline) != ETIMEDOUT)
		;
	while (__atomic_load_n(&s->resuming, __ATOMIC_SEQ_CST) > 0)
		pthread_cond_wait(&s->cond, &s->lock);
	pthread_mutex_unlock(&s->lock);

	close_listeners(s);
	server_free(s);
}

void tacod_http_stop(tacod_http_server *s)
{
	tacod_http_stop_grace(s, TACOD_HTTP_STOP_GRACE_MS);
}
