/* http.c: libcurl under tacoctl's commands. One easy handle, reset before
 * each request, so that keep-alive connections are reused. */
#include "http.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

volatile sig_atomic_t ctl_http_interrupted;

/* ---- buffers ------------------------------------------------------------ */

typedef struct membuf {
	char *p;
	size_t n, cap, max;
	int over; /* a write went past max */
} membuf;

static int membuf_add(membuf *b, const char *d, size_t n)
{
	if (n > b->max - b->n) {
		b->over = 1;
		return -EFBIG;
	}
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		char *g;
		while (cap < b->n + n + 1)
			cap *= 2;
		g = realloc(b->p, cap);
		if (!g)
			return -ENOMEM;
		b->p = g;
		b->cap = cap;
	}
	memcpy(b->p + b->n, d, n);
	b->n += n;
	b->p[b->n] = 0;
	return 0;
}

static size_t mem_write(char *d, size_t sz, size_t nm, void *ctx)
{
	return membuf_add(ctx, d, sz * nm) ? 0 : sz * nm;
}

static int on_progress(void *ctx, curl_off_t dt, curl_off_t dn, curl_off_t ut,
		       curl_off_t un)
{
	(void)ctx, (void)dt, (void)dn, (void)ut, (void)un;
	return ctl_http_interrupted ? 1 : 0;
}

/* Sleeps s seconds unless a signal asks us to stop first. */
static void pause_s(int s)
{
	for (int i = 0; i < s * 10 && !ctl_http_interrupted; i++)
		usleep(100000);
}

/* ---- handle ------------------------------------------------------------- */

int ctl_http_init(ctl_http *h, const char *url, const char *token, ctl_err *err)
{
	size_t n;

	memset(h, 0, sizeof(*h));
	if (!url || !url[0])
		return ctl_err_set(err, -EINVAL, "no server URL");
	if (strlen(url) >= sizeof(h->url))
		return ctl_err_set(err, -EINVAL, "the server URL is too long");
	memcpy(h->url, url, strlen(url) + 1);
	if (!strncmp(url, "unix:", 5)) {
		if (!url[5])
			return ctl_err_set(
			    err, -EINVAL,
			    "%s: no socket path after unix:", url);
		if (strlen(url + 5) >= sizeof(h->sock))
			return ctl_err_set(err, -EINVAL,
					   "%s: the socket path is too long",
					   url);
		memcpy(h->sock, url + 5, strlen(url + 5) + 1);
		snprintf(h->base, sizeof(h->base), "http://localhost");
	} else if (!strncmp(url, "http://", 7) ||
		   !strncmp(url, "https://", 8)) {
		if (strpbrk(url, "?# \t\r\n"))
			return ctl_err_set(err, -EINVAL,
					   "%s: a server URL has no query, "
					   "fragment or spaces",
					   url);
		memcpy(h->base, url, strlen(url) + 1);
		n = strlen(h->base);
		while (n > 8 && h->base[n - 1] == '/')
			h->base[--n] = 0;
	} else {
		return ctl_err_set(err, -EINVAL,
				   "%s: the server URL must start with "
				   "http://, https:// or unix:",
				   url);
	}
	if (token && token[0]) {
		if (strlen(token) > CTL_HTTP_TOKEN_MAX)
			return ctl_err_set(err, -EINVAL,
					   "the token is too long");
		/* it goes into a header line */
		for (const char *p = token; *p; p++)
			if ((unsigned char)*p <= ' ' ||
			    (unsigned char)*p >= 127)
				return ctl_err_set(err, -EINVAL,
						   "the token has a space or "
						   "control character");
		snprintf(h->auth, sizeof(h->auth), "Authorization: Bearer %s",
			 token);
	}
	h->curl = curl_easy_init();
	if (!h->curl)
		return ctl_err_set(err, -ENOMEM, "cannot start libcurl");
	return 0;
}

void ctl_http_free(ctl_http *h)
{
	if (h->curl)
		curl_easy_cleanup(h->curl);
	h->curl = NULL;
}

void ctl_resp_free(ctl_resp *r)
{
	free(r->body);
	json_decref(r->json);
	memset(r, 0, sizeof(*r));
}

static int add_header(struct curl_slist **list, const char *line)
{
	struct curl_slist *l = curl_slist_append(*list, line);

	if (!l)
		return -ENOMEM;
	*list = l;
	return 0;
}

/* Resets the handle for path with tacoctl's options; *headers gets the
 * common headers (the caller adds its own, sets them and frees them). */
static int prepare(ctl_http *h, const char *path, const char *idem_key,
		   struct curl_slist **headers, ctl_err *err)
{
	CURL *c = h->curl;
	char url[CTL_HTTP_URL_MAX + 4096], line[96];

	if (strlen(h->base) + strlen(path) >= sizeof(url))
		return ctl_err_set(err, -EINVAL, "the request URL is too long");
	memcpy(url, h->base, strlen(h->base));
	memcpy(url + strlen(h->base), path, strlen(path) + 1);
	curl_easy_reset(c);
	h->errbuf[0] = 0;
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, h->errbuf);
	if (h->sock[0])
		curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, h->sock);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, CTL_HTTP_CONNECT_S);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "tacoctl/0.1");
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
	*headers = NULL;
	if (h->auth[0] && add_header(headers, h->auth))
		goto oom;
	if (idem_key && idem_key[0]) {
		snprintf(line, sizeof(line), "Idempotency-Key: %s", idem_key);
		if (add_header(headers, line))
			goto oom;
	}
	/* tacod answers at once: the 100-continue round trip only delays */
	if (add_header(headers, "Expect:"))
		goto oom;
	return 0;
oom:
	curl_slist_free_all(*headers);
	*headers = NULL;
	return ctl_err_set(err, -ENOMEM, "out of memory");
}

static int transport_error(ctl_http *h, CURLcode rc, ctl_err *err)
{
	const char *why = h->errbuf[0] ? h->errbuf : curl_easy_strerror(rc);

	if (rc == CURLE_ABORTED_BY_CALLBACK && ctl_http_interrupted)
		return ctl_err_set(err, -EINTR, "interrupted");
	long os = 0;

	/* "Connection refused" or "No such file or directory" (a socket)
	 * says more than curl's "Failed to connect to localhost port 80" */
	if (rc == CURLE_COULDNT_CONNECT &&
	    !curl_easy_getinfo(h->curl, CURLINFO_OS_ERRNO, &os) && os > 0)
		why = strerror((int)os);
	if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
	    rc == CURLE_COULDNT_RESOLVE_PROXY)
		return ctl_err_set(err, -ECONNREFUSED,
				   "cannot connect to tacod at %s: %s", h->url,
				   why);
	return ctl_err_set(err, -EIO, "request to tacod at %s failed: %s",
			   h->url, why);
}

/* The server's {"error": {"message", "code"}}, or what the body says. */
static int http_error(long status, const char *body, ctl_err *err)
{
	json_t *j = body && body[0] ? json_loads(body, 0, NULL) : NULL;
	json_t *e = json_object_get(j, "error");
	const char *msg = json_string_value(json_object_get(e, "message"));
	const char *code = json_string_value(json_object_get(e, "code"));

	if (msg)
		ctl_err_set(err, -EPROTO, "%s", msg);
	else
		ctl_err_set(err, -EPROTO, "HTTP %ld from tacod%s%.200s", status,
			    body && body[0] ? ": " : "", body ? body : "");
	if (err) {
		err->status = status;
		snprintf(err->code, sizeof(err->code), "%s", code ? code : "");
	}
	json_decref(j);
	return -EPROTO;
}

/* Whether a failed create may be sent again with the same key: the
 * request may not have arrived, or its answer was lost. */
static int may_retry(unsigned flags, CURLcode cr, long status, int attempt)
{
	if (!(flags & CTL_HTTP_CREATE) || attempt >= CTL_HTTP_CREATE_TRIES ||
	    ctl_http_interrupted)
		return 0;
	if (cr == CURLE_OK)
		return status == 502 || status == 503 || status == 504;
	return cr == CURLE_SEND_ERROR || cr == CURLE_RECV_ERROR ||
	       cr == CURLE_GOT_NOTHING || cr == CURLE_PARTIAL_FILE;
}

/* Runs the prepared request into memory; 0 with *out on 2xx. */
static int perform_mem(ctl_http *h, unsigned flags, int attempt, ctl_resp *out,
		       int *retry, ctl_err *err)
{
	membuf b = {.max = CTL_HTTP_BODY_MAX};
	long status = 0;
	CURLcode cr;
	int rc;

	curl_easy_setopt(h->curl, CURLOPT_WRITEFUNCTION, mem_write);
	curl_easy_setopt(h->curl, CURLOPT_WRITEDATA, &b);
	cr = curl_easy_perform(h->curl);
	curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &status);
	*retry = may_retry(flags, cr, status, attempt);
	if (cr == CURLE_WRITE_ERROR && b.over)
		rc = ctl_err_set(err, -EFBIG,
				 "the response of tacod at %s is larger than "
				 "%u MiB",
				 h->url, CTL_HTTP_BODY_MAX >> 20);
	else if (cr != CURLE_OK)
		rc = transport_error(h, cr, err);
	else if (status / 100 != 2)
		rc = http_error(status, b.p, err);
	else if (!b.p && membuf_add(&b, "", 0))
		rc = ctl_err_set(err, -ENOMEM, "out of memory");
	else {
		out->status = status;
		out->body = b.p;
		out->len = b.n;
		out->json = json_loadb(b.p, b.n, 0, NULL);
		return 0;
	}
	free(b.p);
	return rc;
}

int ctl_http_json(ctl_http *h, const char *method, const char *path,
		  json_t *body, unsigned flags, ctl_resp *out, ctl_err *err)
{
	char *text = NULL, key[37] = "";
	struct curl_slist *hd = NULL;
	ctl_resp r = {0};
	int rc, retry = 0;

	if (body && !(text = json_dumps(body, JSON_COMPACT)))
		return ctl_err_set(err, -ENOMEM, "out of memory");
	if ((flags & CTL_HTTP_CREATE) && (rc = ctl_uuid(key))) {
		free(text);
		return ctl_err_set(err, rc, "no random bytes for a key");
	}
	for (int attempt = 1;; attempt++) {
		if ((rc = prepare(h, path, key, &hd, err)))
			break;
		if (text && add_header(&hd, "Content-Type: application/json")) {
			rc = ctl_err_set(err, -ENOMEM, "out of memory");
			break;
		}
		curl_easy_setopt(h->curl, CURLOPT_HTTPHEADER, hd);
		curl_easy_setopt(h->curl, CURLOPT_TIMEOUT, CTL_HTTP_REQUEST_S);
		if (!strcmp(method, "GET")) {
			curl_easy_setopt(h->curl, CURLOPT_HTTPGET, 1L);
		} else {
			if (text || !strcmp(method, "POST")) {
				curl_easy_setopt(h->curl, CURLOPT_POSTFIELDS,
						 text ? text : "");
				curl_easy_setopt(
				    h->curl, CURLOPT_POSTFIELDSIZE_LARGE,
				    (curl_off_t)(text ? strlen(text) : 0));
			}
			curl_easy_setopt(h->curl, CURLOPT_CUSTOMREQUEST,
					 method);
		}
		rc = perform_mem(h, flags, attempt, &r, &retry, err);
		curl_slist_free_all(hd);
		hd = NULL;
		if (!rc || !retry)
			break;
		pause_s(attempt);
	}
	curl_slist_free_all(hd);
	free(text);
	if (!rc)
		*out = r;
	return rc;
}

int ctl_http_upload(ctl_http *h, const char *path, const char *const *fields,
		    const char *file, ctl_resp *out, ctl_err *err)
{
	struct curl_slist *hd = NULL;
	curl_mime *mime = NULL;
	curl_mimepart *part;
	struct stat st;
	char key[37];
	ctl_resp r = {0};
	int rc, retry = 0, fd;

	/* curl would only say "read error" */
	fd = open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ctl_err_set(err, -errno, "cannot read %s: %s", file,
				   strerror(errno));
	rc = fstat(fd, &st) ? -errno : S_ISREG(st.st_mode) ? 0 : -EINVAL;
	close(fd);
	if (rc)
		return ctl_err_set(err, rc, "%s: not a regular file", file);
	if ((rc = ctl_uuid(key)))
		return ctl_err_set(err, rc, "no random bytes for a key");
	for (int attempt = 1;; attempt++) {
		if ((rc = prepare(h, path, key, &hd, err)))
			break;
		mime = curl_mime_init(h->curl);
		for (int i = 0; mime && fields && fields[i]; i += 2) {
			part = curl_mime_addpart(mime);
			if (!part || curl_mime_name(part, fields[i]) ||
			    curl_mime_data(part, fields[i + 1],
					   CURL_ZERO_TERMINATED)) {
				curl_mime_free(mime);
				mime = NULL;
			}
		}
		part = mime ? curl_mime_addpart(mime) : NULL;
		if (!part || curl_mime_name(part, "file") ||
		    curl_mime_filedata(part, file)) {
			rc = ctl_err_set(err, -ENOMEM, "out of memory");
			break;
		}
		curl_easy_setopt(h->curl, CURLOPT_HTTPHEADER, hd);
		curl_easy_setopt(h->curl, CURLOPT_MIMEPOST, mime);
		/* a large file takes its time; a stalled one does not */
		curl_easy_setopt(h->curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
		curl_easy_setopt(h->curl, CURLOPT_LOW_SPEED_TIME, 300L);
		rc = perform_mem(h, CTL_HTTP_CREATE, attempt, &r, &retry, err);
		curl_slist_free_all(hd);
		hd = NULL;
		curl_mime_free(mime);
		mime = NULL;
		if (!rc || !retry)
			break;
		pause_s(attempt);
	}
	curl_slist_free_all(hd);
	curl_mime_free(mime);
	if (!rc)
		*out = r;
	return rc;
}

/* ---- downloads ---------------------------------------------------------- */

typedef struct dl {
	CURL *c;
	ctl_http_sink sink;
	void *ctx;
	ctl_err *err;
	int sink_rc;
	long status;
	membuf ebuf; /* the body of an error */
} dl;

static size_t dl_write(char *d, size_t sz, size_t nm, void *p)
{
	dl *x = p;

	if (!x->status)
		curl_easy_getinfo(x->c, CURLINFO_RESPONSE_CODE, &x->status);
	if (x->status / 100 != 2)
		return mem_write(d, sz, nm, &x->ebuf);
	if ((x->sink_rc = x->sink(x->ctx, d, sz * nm, x->err)))
		return 0;
	return sz * nm;
}

int ctl_http_download(ctl_http *h, const char *path, ctl_http_sink sink,
		      void *ctx, ctl_err *err)
{
	struct curl_slist *hd = NULL;
	dl x = {h->curl, sink, ctx, err, 0, 0, {.max = CTL_HTTP_ERROR_MAX}};
	CURLcode cr;
	int rc;

	if ((rc = prepare(h, path, NULL, &hd, err)))
		return rc;
	curl_easy_setopt(h->curl, CURLOPT_HTTPHEADER, hd);
	curl_easy_setopt(h->curl, CURLOPT_WRITEFUNCTION, dl_write);
	curl_easy_setopt(h->curl, CURLOPT_WRITEDATA, &x);
	curl_easy_setopt(h->curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(h->curl, CURLOPT_LOW_SPEED_TIME, 300L);
	cr = curl_easy_perform(h->curl);
	curl_slist_free_all(hd);
	curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &x.status);
	if (x.sink_rc)
		rc = x.sink_rc;
	else if (cr == CURLE_WRITE_ERROR && x.ebuf.over)
		rc = ctl_err_set(err, -EFBIG, "HTTP %ld from tacod at %s",
				 x.status, h->url);
	else if (cr != CURLE_OK)
		rc = transport_error(h, cr, err);
	else if (x.status / 100 != 2)
		rc = http_error(x.status, x.ebuf.p, err);
	free(x.ebuf.p);
	return rc;
}

/* ---- server-sent events ------------------------------------------------- */

typedef struct sse {
	CURL *c;
	ctl_sse_fn fn;
	void *ctx;
	ctl_err *err;
	long status;
	membuf ebuf;
	membuf line; /* the line being read */
	membuf data; /* the event's data lines */
	int has_data;
	char event[64];
	char id[256];	   /* the last id field */
	char last_id[256]; /* the id of the last event dispatched */
	int events;	   /* dispatched on this connection */
	int result;	   /* 1: stop, < 0: failed */
	int done;
} sse;

static int sse_dispatch(sse *s)
{
	ctl_sse_event ev;
	int rc = 0;

	memcpy(s->last_id, s->id, sizeof(s->id));
	if (!s->has_data && !s->event[0])
		return 0;
	ev.id = s->id;
	ev.event = s->event;
	ev.data = s->data.p ? s->data.p : "";
	if (!strcmp(s->event, "done")) {
		s->done = 1;
		rc = 1;
	} else if (!strcmp(s->event, "error")) {
		rc = ctl_err_set(s->err, -EIO, "the event stream failed: %s",
				 ev.data);
	} else {
		s->events++;
		rc = s->fn(s->ctx, &ev, s->err);
	}
	s->event[0] = 0;
	s->data.n = 0;
	if (s->data.p)
		s->data.p[0] = 0;
	s->has_data = 0;
	return rc;
}

static int sse_line(sse *s, char *line, size_t n)
{
	char *colon;
	const char *value = "";

	if (n && line[n - 1] == '\r')
		line[--n] = 0;
	if (!n)
		return sse_dispatch(s);
	if (line[0] == ':') /* a comment: keep-alive */
		return 0;
	colon = strchr(line, ':');
	if (colon) {
		*colon = 0;
		value = colon + 1;
		if (*value == ' ')
			value++;
	}
	if (!strcmp(line, "event")) {
		snprintf(s->event, sizeof(s->event), "%s", value);
	} else if (!strcmp(line, "id")) {
		snprintf(s->id, sizeof(s->id), "%s", value);
	} else if (!strcmp(line, "data")) {
		if ((s->has_data && membuf_add(&s->data, "\n", 1)) ||
		    membuf_add(&s->data, value, strlen(value)))
			return ctl_err_set(s->err, -EFBIG,
					   "an event is larger than %u MiB",
					   CTL_HTTP_LINE_MAX >> 20);
		s->has_data = 1;
	}
	return 0;
}

static size_t sse_write(char *d, size_t sz, size_t nm, void *p)
{
	sse *s = p;
	size_t n = sz * nm, i = 0;
	int before = s->events;

	if (!s->status)
		curl_easy_getinfo(s->c, CURLINFO_RESPONSE_CODE, &s->status);
	if (s->status / 100 != 2)
		return mem_write(d, sz, nm, &s->ebuf);
	while (i < n) {
		const char *nl = memchr(d + i, '\n', n - i);
		size_t k = nl ? (size_t)(nl - (d + i)) : n - i;
		if (membuf_add(&s->line, d + i, k)) {
			s->result = ctl_err_set(s->err, -EFBIG,
						"an event line is larger than "
						"%u MiB",
						CTL_HTTP_LINE_MAX >> 20);
			return 0;
		}
		i += k;
		if (!nl)
			break;
		i++;
		s->result = sse_line(s, s->line.p, s->line.n);
		s->line.n = 0;
		if (s->result)
			return 0;
	}
	/* events come in bursts: the caller may redraw once per read */
	if (s->events != before && (s->result = s->fn(s->ctx, NULL, s->err)))
		return 0;
	return n;
}

int ctl_http_sse(ctl_http *h, const char *path, ctl_sse_fn fn, void *ctx,
		 ctl_err *err)
{
	sse s = {.c = h->curl, .fn = fn, .ctx = ctx, .err = err};
	struct curl_slist *hd = NULL;
	char line[300];
	int rc = 0, fails = 0, connected = 0;
	CURLcode cr;

	s.line.max = CTL_HTTP_LINE_MAX;
	s.data.max = CTL_HTTP_LINE_MAX;
	for (;;) {
		s.status = 0;
		s.events = 0;
		s.result = 0;
		s.line.n = 0;
		s.data.n = 0;
		s.has_data = 0;
		s.event[0] = 0;
		free(s.ebuf.p);
		s.ebuf = (membuf){.max = CTL_HTTP_ERROR_MAX};
		if ((rc = prepare(h, path, NULL, &hd, err)))
			break;
		snprintf(line, sizeof(line), "Last-Event-ID: %s", s.last_id);
		if (add_header(&hd, "Accept: text/event-stream") ||
		    (s.last_id[0] && add_header(&hd, line))) {
			rc = ctl_err_set(err, -ENOMEM, "out of memory");
			break;
		}
		curl_easy_setopt(h->curl, CURLOPT_HTTPHEADER, hd);
		curl_easy_setopt(h->curl, CURLOPT_WRITEFUNCTION, sse_write);
		curl_easy_setopt(h->curl, CURLOPT_WRITEDATA, &s);
		cr = curl_easy_perform(h->curl);
		curl_slist_free_all(hd);
		hd = NULL;
		curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &s.status);
		if (s.result) {
			rc = s.result > 0 ? 0 : s.result;
			break;
		}
		if (ctl_http_interrupted) {
			rc = ctl_err_set(err, -EINTR, "interrupted");
			break;
		}
		if (cr == CURLE_OK && s.status / 100 != 2 &&
		    !(connected && s.status >= 502 && s.status <= 504)) {
			rc = http_error(s.status, s.ebuf.p, err);
			break;
		}
		if (s.status / 100 == 2)
			connected = 1;
		/* never reached: nothing to resume */
		if (!connected) {
			rc = transport_error(h, cr, err);
			break;
		}
		if (s.events)
			fails = 0;
		if (++fails > CTL_HTTP_STREAM_RETRIES) {
			rc = cr != CURLE_OK
				 ? transport_error(h, cr, err)
				 : ctl_err_set(err, -EIO,
					       "the event stream of tacod at "
					       "%s keeps ending early",
					       h->url);
			break;
		}
		pause_s(fails < 5 ? fails : 5);
	}
	curl_slist_free_all(hd);
	free(s.ebuf.p);
	free(s.line.p);
	free(s.data.p);
	return rc;
}

int ctl_http_sse_post(ctl_http *h, const char *path, json_t *body,
		      ctl_sse_fn fn, void *ctx, ctl_err *err)
{
	sse s = {.c = h->curl, .fn = fn, .ctx = ctx, .err = err};
	struct curl_slist *hd = NULL;
	char *text = json_dumps(body, JSON_COMPACT);
	int rc;
	CURLcode cr;

	s.line.max = CTL_HTTP_LINE_MAX;
	s.data.max = CTL_HTTP_LINE_MAX;
	s.ebuf = (membuf){.max = CTL_HTTP_ERROR_MAX};
	if (!text)
		return ctl_err_set(err, -ENOMEM, "out of memory");
	if ((rc = prepare(h, path, NULL, &hd, err)))
		goto out;
	if (add_header(&hd, "Accept: text/event-stream") ||
	    add_header(&hd, "Content-Type: application/json")) {
		rc = ctl_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	curl_easy_setopt(h->curl, CURLOPT_HTTPHEADER, hd);
	curl_easy_setopt(h->curl, CURLOPT_POSTFIELDS, text);
	curl_easy_setopt(h->curl, CURLOPT_WRITEFUNCTION, sse_write);
	curl_easy_setopt(h->curl, CURLOPT_WRITEDATA, &s);
	cr = curl_easy_perform(h->curl);
	curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &s.status);
	if (s.result)
		rc = s.result > 0 ? 0 : s.result;
	else if (ctl_http_interrupted)
		rc = ctl_err_set(err, -EINTR, "interrupted");
	else if (cr == CURLE_OK && s.status / 100 != 2)
		rc = http_error(s.status, s.ebuf.p, err);
	else if (cr != CURLE_OK)
		rc = transport_error(h, cr, err);
	else if (s.line.n && (rc = sse_line(&s, s.line.p, s.line.n)) > 0)
		rc = 0;
out:
	curl_slist_free_all(hd);
	free(text);
	free(s.ebuf.p);
	free(s.line.p);
	free(s.data.p);
	return rc;
}

/* ---- helpers ------------------------------------------------------------ */

int ctl_http_escape(const char *segment, char *out, size_t cap, ctl_err *err)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = 0;

	if (!segment[0] || !strcmp(segment, ".") || !strcmp(segment, ".."))
		return ctl_err_set(err, -EINVAL, "'%s' is not a valid id",
				   segment);
	for (const unsigned char *p = (const unsigned char *)segment; *p; p++) {
		int plain = (*p >= 'a' && *p <= 'z') ||
			    (*p >= 'A' && *p <= 'Z') ||
			    (*p >= '0' && *p <= '9') || strchr("-._~", *p);
		if (n + (plain ? 1 : 3) >= cap)
			return ctl_err_set(err, -EINVAL, "the id is too long");
		if (plain) {
			out[n++] = (char)*p;
		} else {
			out[n++] = '%';
			out[n++] = hex[*p >> 4];
			out[n++] = hex[*p & 15];
		}
	}
	out[n] = 0;
	return 0;
}

int ctl_uuid(char out[37])
{
	unsigned char b[16];
	size_t got = 0;

	while (got < sizeof(b)) {
		ssize_t r = getrandom(b + got, sizeof(b) - got, 0);
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r > 0)
			got += (size_t)r;
	}
	b[6] = (unsigned char)((b[6] & 0x0f) | 0x40); /* version 4 */
	b[8] = (unsigned char)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
	snprintf(out, 37,
		 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
		 "%02x%02x%02x%02x%02x%02x",
		 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9],
		 b[10], b[11], b[12], b[13], b[14], b[15]);
	return 0;
}
