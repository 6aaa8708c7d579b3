/* test_http.c: tacod's HTTP layer against libcurl on loopback: routing,
 * queries, errors, limits, authentication, uploads, streams, stopping and
 * many keep-alive requests at once. */
#include <arpa/inet.h>
#include <check.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "daemon/http/auth.h"
#include "daemon/http/http.h"
#include "testutil.h"

/* ---- test fixtures: a temp dir, the server, its routes ---- */

static char tmp[256], upload_dir[300], keep_dir[300], sock_path[300];
static tacod_http_server *srv;
static int port;

static double cpu_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The stream handed from a handler to the test. */
static pthread_mutex_t st_lock = PTHREAD_MUTEX_INITIALIZER;
static tacod_http_stream *st_handle;
static int slow_started;

static tacod_http_stream *wait_stream(void)
{
	tacod_http_stream *s;
	double t0 = tu_now_s();

	pthread_mutex_lock(&st_lock);
	while (!st_handle && tu_now_s() - t0 < 10) {
		pthread_mutex_unlock(&st_lock);
		tu_sleep_ms(5);
		pthread_mutex_lock(&st_lock);
	}
	s = st_handle;
	st_handle = NULL;
	pthread_mutex_unlock(&st_lock);
	ck_assert_ptr_nonnull(s);
	return s;
}

static int h_echo(tacod_http_req *r, void *ctx)
{
	const tacod_identity *id = tacod_http_identity(r);
	const char *keys[] = {"a", "b", "q", "flag", "missing"};
	json_t *o = json_object(), *q = json_object();
	size_t len;

	ck_assert_ptr_eq(ctx, &port);
	for (int i = 0; i < 5; i++) {
		const char *v = tacod_http_query(r, keys[i]);
		json_object_set_new(q, keys[i],
				    v ? json_string(v) : json_null());
	}
	json_object_set_new(o, "query", q);
	json_object_set_new(o, "method", json_string(tacod_http_method(r)));
	json_object_set_new(o, "path", json_string(tacod_http_path(r)));
	json_object_set_new(o, "user", json_string(id->user));
	json_object_set_new(o, "role",
			    json_string(tacod_auth_role_name(id->role)));
	json_object_set_new(o, "unix", json_boolean(tacod_http_is_unix(r)));
	const char *h = tacod_http_header(r, "x-thing");
	json_object_set_new(o, "x_thing", h ? json_string(h) : json_null());
	tacod_http_body(r, &len);
	json_object_set_new(o, "body_len", json_integer((json_int_t)len));
	tacod_http_add_header(r, "X-Reply", "yes");
	return tacod_http_reply_json(r, 200, o);
}

static int h_post_json(tacod_http_req *r, void *ctx)
{
	json_t *j = tacod_http_body_json(r);
	size_t len;

	(void)ctx;
	if (!j)
		return 0;
	tacod_http_body(r, &len);
	json_object_set_new(j, "body_len", json_integer((json_int_t)len));
	return tacod_http_reply_json(r, 201, j);
}

static int h_params(tacod_http_req *r, void *ctx)
{
	const char *names[] = {"id", "x", "y"};
	json_t *o = json_object();

	(void)ctx;
	for (int i = 0; i < 3; i++) {
		const char *v = tacod_http_param(r, names[i]);
		if (v)
			json_object_set_new(o, names[i], json_string(v));
	}
	json_object_set_new(o, "method", json_string(tacod_http_method(r)));
	return tacod_http_reply_json(r, 200, o);
}

static int h_upload(tacod_http_req *r, void *ctx)
{
	const tacod_http_upload *u = tacod_http_upload_file(r);
	const char *purpose = tacod_http_form(r, "purpose");
	const char *keep = tacod_http_form(r, "keep");
	json_t *o;

	(void)ctx;
	if (!u)
		return tacod_http_error(r, 400, "invalid_request_error", NULL,
					"file", "No file was uploaded.");
	ck_assert_int_eq(strncmp(u->path, upload_dir, strlen(upload_dir)), 0);
	if (keep && !strcmp(keep, "1")) {
		char dest[600];
		taco_err err = {{0}};
		snprintf(dest, sizeof(dest), "%s/%s", keep_dir, u->sha256);
		ck_assert_int_eq(tacod_http_upload_keep(r, dest, &err), 0);
		ck_assert_str_eq(u->path, dest);
	}
	o = json_pack("{s:I, s:s, s:s, s:s, s:s, s:s?}", "bytes",
		      (json_int_t)u->size, "sha256", u->sha256, "filename",
		      u->filename, "field", u->field, "content_type",
		      u->content_type, "purpose", purpose);
	return tacod_http_reply_json(r, 200, o);
}

static int h_stream(tacod_http_req *r, void *ctx)
{
	tacod_http_stream *s;

	(void)ctx;
	s = tacod_http_stream_begin(r);
	ck_assert_ptr_nonnull(s);
	ck_assert_ptr_null(tacod_http_stream_begin(r));
	ck_assert_int_eq(tacod_http_reply_text(r, 200, "x"), -EALREADY);
	pthread_mutex_lock(&st_lock);
	st_handle = s;
	pthread_mutex_unlock(&st_lock);
	return 0;
}

static int h_slow(tacod_http_req *r, void *ctx)
{
	(void)ctx;
	pthread_mutex_lock(&st_lock);
	slow_started = 1;
	pthread_mutex_unlock(&st_lock);
	tu_sleep_ms(600);
	return tacod_http_reply_text(r, 200, "slow done");
}

static int h_noreply(tacod_http_req *r, void *ctx)
{
	(void)r;
	(void)ctx;
	return -EIO;
}

static int h_download(tacod_http_req *r, void *ctx)
{
	char path[600];

	(void)ctx;
	snprintf(path, sizeof(path), "%s/%s", keep_dir,
		 tacod_http_param(r, "name"));
	return tacod_http_reply_file(r, 200, path, "application/jsonl",
				     tacod_http_param(r, "name"));
}

/* Replies later: a thread answers after a while, as the chat completions'
 * workers do (the path says how). */
typedef struct later_job {
	tacod_http_later *l;
	char how[16];
} later_job;

static void *answer_later(void *arg)
{
	later_job *j = arg;

	tu_sleep_ms(200);
	if (!strcmp(j->how, "json")) {
		ck_assert_int_eq(
		    tacod_http_later_json(j->l, 201,
					  json_pack("{ss}", "ok", "late"), 0),
		    0);
	} else if (!strcmp(j->how, "busy")) {
		tacod_http_later_json(j->l, 503, json_pack("{ss}", "busy", "y"),
				      7);
	} else if (!strcmp(j->how, "stream")) {
		tacod_http_stream *s = tacod_http_later_stream(j->l);
		ck_assert_ptr_nonnull(s);
		tacod_http_stream_event(s, NULL, "one");
		tu_sleep_ms(50);
		tacod_http_stream_event(s, NULL, "two");
		tacod_http_stream_end(s);
	} else {
		tacod_http_later_drop(j->l);
	}
	free(j);
	return NULL;
}

/* /v1/later/hold: kept here, answered by the test */
static tacod_http_later *held;

static int h_later(tacod_http_req *r, void *ctx)
{
	later_job *j = calloc(1, sizeof(*j));
	pthread_t t;

	(void)ctx;
	j->l = tacod_http_later_begin(r);
	ck_assert_ptr_nonnull(j->l);
	ck_assert_ptr_null(tacod_http_later_begin(r));
	if (!strcmp(tacod_http_param(r, "how"), "hold")) {
		pthread_mutex_lock(&st_lock);
		held = j->l;
		pthread_mutex_unlock(&st_lock);
		free(j);
		return 0;
	}
	snprintf(j->how, sizeof(j->how), "%s", tacod_http_param(r, "how"));
	ck_assert_int_eq(pthread_create(&t, NULL, answer_later, j), 0);
	pthread_detach(t);
	return 0;
}

static tacod_http_route routes[] = {
    {"GET", "/v1/later/{how}", h_later, NULL, 0},
    {"GET", "/v1/echo", h_echo, NULL, 0},
    {"POST", "/v1/echo", h_post_json, NULL, 0},
    {"GET", "/v1/files/{id}/content", h_params, NULL, 0},
    {"DELETE", "/v1/files/{id}", h_params, NULL, 0},
    {"GET", "/v1/files/{id}", h_params, NULL, 0},
    {"GET", "/v1/a/{x}/b/{y}", h_params, NULL, 0},
    {"POST", "/v1/files", h_upload, upload_dir, 0},
    {"GET", "/v1/stream", h_stream, NULL, 0},
    {"GET", "/v1/slow", h_slow, NULL, 0},
    {"GET", "/v1/noreply", h_noreply, NULL, 0},
    {"GET", "/v1/download/{name}", h_download, NULL, 0},
    /* open for GET only: a POST is authenticated as any other */
    {"GET", "/v1/open", h_echo, NULL, 1},
    {"POST", "/v1/open", h_echo, NULL, 0},
    {NULL, NULL, NULL, NULL, 0},
};

static void config(tacod_config *c)
{
	tacod_config_defaults(c);
	snprintf(c->listen, sizeof(c->listen), "127.0.0.1:0");
	c->limits.max_body_bytes = 4096;
	c->limits.max_upload_bytes = 4u << 20;
	c->limits.max_connections = 512;
	/* every client here is 127.0.0.1 (test_http_slow.c tests the
	 * limit) */
	c->limits.max_connections_per_client = 512;
}

static void start(const tacod_config *c)
{
	taco_err err = {{0}};
	int rc = tacod_http_start(c, routes, &port, &srv, &err);

	ck_assert_msg(rc == 0, "start: %s", err.msg);
	port = tacod_http_port(srv);
	ck_assert_int_gt(port, 0);
}

static void setup(void)
{
	signal(SIGPIPE, SIG_IGN);
	snprintf(tmp, sizeof(tmp), "/tmp/tacod-http-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmp));
	snprintf(upload_dir, sizeof(upload_dir), "%s/uploads", tmp);
	snprintf(keep_dir, sizeof(keep_dir), "%s/keep", tmp);
	snprintf(sock_path, sizeof(sock_path), "%s/tacod.sock", tmp);
	ck_assert_int_eq(mkdir(upload_dir, 0700), 0);
	ck_assert_int_eq(mkdir(keep_dir, 0700), 0);
	srv = NULL;
	st_handle = NULL;
	slow_started = 0;
}

static void teardown(void)
{
	char cmd[400];

	if (srv)
		tacod_http_stop(srv);
	srv = NULL;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmp);
}

static int dir_entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(d);
	return n;
}

/* ---- a small libcurl client ---- */

typedef struct resp {
	long status;
	char *body;
	size_t len;
	char headers[8192];
	size_t hlen;
	CURLcode cc;
} resp;

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
	resp *r = ud;
	char *nb = realloc(r->body, r->len + sz * n + 1);

	ck_assert_ptr_nonnull(nb);
	r->body = nb;
	memcpy(r->body + r->len, p, sz * n);
	r->len += sz * n;
	r->body[r->len] = 0;
	return sz * n;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud)
{
	resp *r = ud;
	size_t k = sz * n;

	if (r->hlen + k < sizeof(r->headers)) {
		memcpy(r->headers + r->hlen, p, k);
		r->hlen += k;
		r->headers[r->hlen] = 0;
	}
	return k;
}

static void resp_free(resp *r)
{
	free(r->body);
	memset(r, 0, sizeof(*r));
}

typedef struct call {
	const char *method, *path, *token, *body, *unix_path;
	long body_len; /* -1: strlen(body) */
	const char *headers[4];
	curl_mime *(*mime)(CURL *, void *);
	void *mime_arg;
} call;

static CURL *easy_for(const call *c, resp *out, struct curl_slist **hl,
		      curl_mime **mime)
{
	CURL *e = curl_easy_init();
	char url[1024], auth[512];

	ck_assert_ptr_nonnull(e);
	snprintf(url, sizeof(url), "http://%s:%d%s",
		 c->unix_path ? "localhost" : "127.0.0.1", port, c->path);
	curl_easy_setopt(e, CURLOPT_URL, url);
	if (c->unix_path)
		curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH, c->unix_path);
	curl_easy_setopt(e, CURLOPT_TIMEOUT, 60L);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, out);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, out);
	*hl = NULL;
	if (c->token) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s",
			 c->token);
		*hl = curl_slist_append(*hl, auth);
	}
	for (int i = 0; i < 4 && c->headers[i]; i++)
		*hl = curl_slist_append(*hl, c->headers[i]);
	if (c->body) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, c->body);
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE,
				 c->body_len >= 0 ? c->body_len
						  : (long)strlen(c->body));
		*hl = curl_slist_append(*hl, "Content-Type: application/json");
	}
	*mime = NULL;
	if (c->mime) {
		*mime = c->mime(e, c->mime_arg);
		curl_easy_setopt(e, CURLOPT_MIMEPOST, *mime);
	}
	if (c->method)
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, c->method);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, *hl);
	return e;
}

static long do_call(const call *c, resp *out)
{
	struct curl_slist *hl;
	curl_mime *mime;
	CURL *e;

	memset(out, 0, sizeof(*out));
	e = easy_for(c, out, &hl, &mime);
	out->cc = curl_easy_perform(e);
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &out->status);
	curl_easy_cleanup(e);
	curl_slist_free_all(hl);
	curl_mime_free(mime);
	return out->cc == CURLE_OK ? out->status : -1;
}

static long get(const char *path, resp *out)
{
	call c = {0};

	c.path = path;
	return do_call(&c, out);
}

static json_t *body_json(const resp *r)
{
	json_error_t e;
	json_t *j = json_loadb(r->body ? r->body : "", r->len, 0, &e);

	ck_assert_msg(j != NULL, "not JSON (%s): %.300s", e.text,
		      r->body ? r->body : "");
	return j;
}

static const char *jstr(json_t *o, const char *path)
{
	char buf[128], *save = NULL, *tok;
	json_t *v = o;

	snprintf(buf, sizeof(buf), "%s", path);
	for (tok = strtok_r(buf, ".", &save); tok && v;
	     tok = strtok_r(NULL, ".", &save))
		v = json_object_get(v, tok);
	return json_is_string(v) ? json_string_value(v) : NULL;
}

/* The OpenAI error shape: {"error": {message, type, param, code}}. */
static void check_error(const resp *r, long status, const char *code)
{
	json_t *j = body_json(r), *e = json_object_get(j, "error");

	ck_assert_int_eq(r->status, status);
	ck_assert_msg(strstr(r->headers, "application/json") != NULL, "%s",
		      r->headers);
	ck_assert(json_is_object(e));
	ck_assert_int_eq(json_object_size(e), 4);
	ck_assert(json_is_string(json_object_get(e, "message")));
	ck_assert(strlen(jstr(e, "message")) > 0);
	ck_assert(json_is_string(json_object_get(e, "type")));
	ck_assert(json_object_get(e, "param") != NULL);
	if (code)
		ck_assert_str_eq(jstr(e, "code"), code);
	else
		ck_assert(json_is_null(json_object_get(e, "code")));
	json_decref(j);
}

/* ---- routing, queries, headers, errors ---- */

START_TEST(test_routing_and_params)
{
	tacod_config c;
	resp r;
	json_t *j;

	config(&c);
	start(&c);
	ck_assert_int_eq(get("/v1/files/file-abc/content", &r), 200);
	j = body_json(&r);
	ck_assert_str_eq(jstr(j, "id"), "file-abc");
	ck_assert_str_eq(jstr(j, "method"), "GET");
	json_decref(j);
	resp_free(&r);

	ck_assert_int_eq(get("/v1/files/file-xyz", &r), 200);
	j = body_json(&r);
	ck_assert_str_eq(jstr(j, "id"), "file-xyz");
	json_decref(j);
	resp_free(&r);

	/* Segments are decoded one by one: %2F stays inside its segment. */
	ck_assert_int_eq(get("/v1/a/hello%20world/b/%2Fslash%3F", &r), 200);
	j = body_json(&r);
	ck_assert_str_eq(jstr(j, "x"), "hello world");
	ck_assert_str_eq(jstr(j, "y"), "/slash?");
	json_decref(j);
	resp_free(&r);

	call d = {.method = "DELETE", .path = "/v1/files/f1"};
	ck_assert_int_eq(do_call(&d, &r), 200);
	j = body_json(&r);
	ck_assert_str_eq(jstr(j, "id"), "f1");
	ck_assert_str_eq(jstr(j, "method"), "DELETE");
	json_decref(j);
	resp_free(&r);

	/* An empty {param} does not match. */
	ck_assert_int_eq(get("/v1/files//content", &r), 404);
	resp_free(&r);
}
END_TEST

START_TEST(test_query_and_headers)
{
	tacod_config c;
	resp r;
	json_t *j;
	call q = {.path = "/v1/echo?a=1&b=x%20y&q=a+b%2Bc&flag&a=2",
		  .headers = {"X-Thing: Hello There"}};

	config(&c);
	start(&c);
	ck_assert_int_eq(do_call(&q, &r), 200);
	j = body_json(&r);
	ck_assert_str_eq(jstr(j, "query.a"), "1");
	ck_assert_str_eq(jstr(j, "query.b"), "x y");
	ck_assert_str_eq(jstr(j, "query.q"), "a b+c");
	ck_assert_str_eq(jstr(j, "query.flag"), "");
	ck_assert(json_is_null(
	    json_object_get(json_object_get(j, "query"), "missing")));
	ck_assert_str_eq(jstr(j, "path"), "/v1/echo");
	ck_assert_str_eq(jstr(j, "x_thing"), "Hello There");
	/* No tokens file: loopback clients are "local", admin. */
	ck_assert_str_eq(jstr(j, "user"), "local");
	ck_assert_str_eq(jstr(j, "role"), "admin");
	ck_assert(json_is_false(json_object_get(j, "unix")));
	ck_assert_msg(strstr(r.headers, "X-Reply: yes") != NULL, "%s",
		      r.headers);
	json_decref(j);
	resp_free(&r);
}
END_TEST

START_TEST(test_not_found_and_method)
{
	tacod_config c;
	resp r;
	call post = {.method = "POST",
		     .path = "/v1/files/f1/content",
		     .body = "{}",
		     .body_len = -1};
	call put = {.method = "PUT", .path = "/v1/files/f1"};

	config(&c);
	start(&c);
	ck_assert_int_eq(get("/v1/nope", &r), 404);
	check_error(&r, 404, "unknown_url");
	ck_assert(strstr(r.body, "/v1/nope") != NULL);
	resp_free(&r);

	ck_assert_int_eq(get("/v1/files/a/b/c/d", &r), 404);
	check_error(&r, 404, "unknown_url");
	resp_free(&r);

	ck_assert_int_eq(do_call(&post, &r), 405);
	check_error(&r, 405, "method_not_allowed");
	ck_assert_msg(strstr(r.headers, "Allow: GET") != NULL, "%s", r.headers);
	resp_free(&r);

	ck_assert_int_eq(do_call(&put, &r), 405);
	ck_assert_msg(strstr(r.headers, "Allow: DELETE, GET") != NULL, "%s",
		      r.headers);
	resp_free(&r);

	/* A handler that does not answer gets a 500 answered for it. */
	ck_assert_int_eq(get("/v1/noreply", &r), 500);
	check_error(&r, 500, NULL);
	resp_free(&r);
}
END_TEST

START_TEST(test_json_bodies_and_limit)
{
	tacod_config c;
	resp r;
	json_t *j;
	char *big = malloc(8192);
	call ok = {.method = "POST",
		   .path = "/v1/echo",
		   .body = "{\"n\": 3, \"s\": \"\\u00e9\"}",
		   .body_len = -1};
	call badj = {.method = "POST",
		     .path = "/v1/echo",
		     .body = "{\"n\": ",
		     .body_len = -1};
	call arr = {.method = "POST",
		    .path = "/v1/echo",
		    .body = "[1]",
		    .body_len = -1};
	call over = {.method = "POST",
		     .path = "/v1/echo",
		     .body = big,
		     .body_len = 5000};
	call chunked = {.method = "POST",
			.path = "/v1/echo",
			.body = big,
			.body_len = 5000,
			.headers = {"Transfer-Encoding: chunked"}};

	memset(big, ' ', 8192);
	big[0] = '{';
	big[4998] = '}';
	big[5000] = 0;
	config(&c);
	start(&c);
	ck_assert_int_eq(do_call(&ok, &r), 201);
	j = body_json(&r);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "n")), 3);
	ck_assert_str_eq(jstr(j, "s"), "\xc3\xa9");
	json_decref(j);
	resp_free(&r);

	ck_assert_int_eq(do_call(&badj, &r), 400);
	check_error(&r, 400, NULL);
	resp_free(&r);
	ck_assert_int_eq(do_call(&arr, &r), 400);
	check_error(&r, 400, NULL);
	resp_free(&r);

	/* Over max_body_bytes (4096) by Content-Length: refused before the
	 * body is read. */
	ck_assert_int_eq(do_call(&over, &r), 413);
	check_error(&r, 413, "request_too_large");
	resp_free(&r);
	/* Chunked, no length: refused once the limit is crossed. */
	ck_assert_int_eq(do_call(&chunked, &r), 413);
	check_error(&r, 413, "request_too_large");
	resp_free(&r);

	/* Exactly the limit is fine. */
	big[4095] = '}';
	over.body_len = 4096;
	ck_assert_int_eq(do_call(&over, &r), 201);
	j = body_json(&r);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "body_len")),
			 4096);
	json_decref(j);
	resp_free(&r);
	free(big);
}
END_TEST

/* ---- authentication ---- */

static void write_tokens(const char *path, const char *tok_user,
			 const char *tok_admin)
{
	char h1[65], h2[65];
	FILE *f = fopen(path, "w");

	ck_assert_ptr_nonnull(f);
	tacod_auth_hash_token(tok_user, h1);
	tacod_auth_hash_token(tok_admin, h2);
	fprintf(f, "# test tokens\n%s alice user\n%s bob admin\n", h1, h2);
	fclose(f);
}

START_TEST(test_bearer_tokens)
{
	tacod_config c;
	resp r;
	json_t *j;
	char path[400];
	taco_err err = {{0}};
	call none = {.path = "/v1/echo"};
	call bad = {.path = "/v1/echo", .token = "nope"};
	call good = {.path = "/v1/echo", .token = "alice-secret"};
	call admin = {.path = "/v1/echo", .token = "bob-secret"};
	call missing = {.path = "/v1/nope"};
	call basic = {.path = "/v1/echo",
		      .headers = {"Authorization: Basic YWxpY2U6eA=="}};

	snprintf(path, sizeof(path), "%s/tokens", tmp);
	write_tokens(path, "alice-secret", "bob-secret");
	config(&c);
	snprintf(c.tokens_file, sizeof(c.tokens_file), "%s", path);
	start(&c);

	ck_assert_int_eq(do_call(&none, &r), 401);
	check_error(&r, 401, "invalid_api_key");
	ck_assert_msg(strstr(r.headers, "WWW-Authenticate: Bearer") != NULL,
		      "%s", r.headers);
	resp_free(&r);
	ck_assert_int_eq(do_call(&bad, &r), 401);
	check_error(&r, 401, "invalid_api_key");
	resp_free(&r);
	ck_assert_int_eq(do_call(&basic, &r), 401);
	resp_free(&r);
	/* Authentication comes before routing. */
	ck_assert_int_eq(do_call(&missing, &r), 401);
	resp_free(&r);

	ck_assert_int_eq(do_call(&good, &r), 200);
	j = body_json(&r);
	ck_assert_str_eq(jstr(j, "user"), "alice");
	ck_assert_str_eq(jstr(j, "role"), "user");
	json_decref(j);
	resp_free(&r);
	ck_assert_int_eq(do_call(&admin, &r), 200);
	j = body_json(&r);
	ck_assert_str_eq(jstr(j, "user"), "bob");
	ck_assert_str_eq(jstr(j, "role"), "admin");
	json_decref(j);
	resp_free(&r);

	/* Tokens are read again on request; the old ones stop working. */
	write_tokens(path, "carol-secret", "dave-secret");
	ck_assert_int_eq(tacod_http_reload_tokens(srv, &err), 0);
	ck_assert_int_eq(do_call(&good, &r), 401);
	resp_free(&r);
	good.token = "carol-secret";
	ck_assert_int_eq(do_call(&good, &r), 200);
	j = body_json(&r);
	ck_assert_str_eq(jstr(j, "user"), "alice");
	json_decref(j);
	resp_free(&r);
	/* A broken file keeps the tokens in force. */
	FILE *f = fopen(path, "w");
	fputs("broken\n", f);
	fclose(f);
	ck_assert_int_eq(tacod_http_reload_tokens(srv, &err), -EINVAL);
	ck_assert_int_eq(do_call(&good, &r), 200);
	resp_free(&r);
}
END_TEST

/* An open route (the dashboard's static files) is served without a
 * token, a wrong one included, and without an identity; the same path
 * with another method, and every other route, still need one. Every reply
 * says nosniff. */
START_TEST(test_open_routes)
{
	tacod_config c;
	resp r;
	json_t *j;
	char path[400];
	call open_get = {.path = "/v1/open?a=1"};
	call open_bad_token = {.path = "/v1/open", .token = "nope"};
	call open_post = {.method = "POST", .path = "/v1/open"};
	call closed = {.path = "/v1/echo"};
	call good_post = {
	    .method = "POST", .path = "/v1/open", .token = "alice-secret"};

	snprintf(path, sizeof(path), "%s/tokens", tmp);
	write_tokens(path, "alice-secret", "bob-secret");
	config(&c);
	snprintf(c.tokens_file, sizeof(c.tokens_file), "%s", path);
	start(&c);

	ck_assert_int_eq(do_call(&open_get, &r), 200);
	j = body_json(&r);
	ck_assert_str_eq(jstr(j, "user"), "");
	ck_assert_str_eq(jstr(j, "query.a"), "1");
	json_decref(j);
	ck_assert_msg(strstr(r.headers, "X-Content-Type-Options: nosniff"),
		      "%s", r.headers);
	resp_free(&r);
	ck_assert_int_eq(do_call(&open_bad_token, &r), 200);
	resp_free(&r);
	ck_assert_int_eq(do_call(&open_post, &r), 401);
	check_error(&r, 401, "invalid_api_key");
	ck_assert_msg(strstr(r.headers, "X-Content-Type-Options: nosniff"),
		      "%s", r.headers);
	resp_free(&r);
	ck_assert_int_eq(do_call(&closed, &r), 401);
	resp_free(&r);
	ck_assert_int_eq(do_call(&good_post, &r), 200);
	j = body_json(&r);
	ck_assert_str_eq(jstr(j, "user"), "alice");
	json_decref(j);
	resp_free(&r);
}
END_TEST

START_TEST(test_bad_tokens_file_refuses_start)
{
	tacod_config c;
	taco_err err = {{0}};
	char path[400];
	FILE *f;

	snprintf(path, sizeof(path), "%s/tokens", tmp);
	f = fopen(path, "w");
	fputs("abc alice user\n", f);
	fclose(f);
	config(&c);
	snprintf(c.tokens_file, sizeof(c.tokens_file), "%s", path);
	ck_assert_int_eq(tacod_http_start(&c, routes, NULL, &srv, &err),
			 -EINVAL);
	ck_assert_ptr_null(srv);
	ck_assert_msg(strstr(err.msg, path) != NULL, "%s", err.msg);
}
END_TEST

START_TEST(test_unix_socket_peer)
{
	tacod_config c;
	resp r;
	json_t *j;
	struct stat st;
	struct passwd *pw = getpwuid(getuid());
	char path[400];
	call q = {.path = "/v1/echo?a=u", .unix_path = sock_path};
	tacod_http_server *second = NULL;
	taco_err err = {{0}};

	/* With a tokens file too: socket peers need no token. */
	snprintf(path, sizeof(path), "%s/tokens", tmp);
	write_tokens(path, "alice-secret", "bob-secret");
	config(&c);
	snprintf(c.unix_socket, sizeof(c.unix_socket), "%s", sock_path);
	snprintf(c.tokens_file, sizeof(c.tokens_file), "%s", path);
	start(&c);
	ck_assert_int_eq(stat(sock_path, &st), 0);
	ck_assert(S_ISSOCK(st.st_mode));
	ck_assert_int_eq(st.st_mode & 0777, 0660);

	ck_assert_int_eq(do_call(&q, &r), 200);
	j = body_json(&r);
	ck_assert_ptr_nonnull(pw);
	ck_assert_str_eq(jstr(j, "user"), pw->pw_name);
	ck_assert_str_eq(jstr(j, "role"), getuid() == 0 ? "admin" : "user");
	ck_assert(json_is_true(json_object_get(j, "unix")));
	ck_assert_str_eq(jstr(j, "query.a"), "u");
	json_decref(j);
	resp_free(&r);

	/* A second server on the same socket is refused. */
	c.listen[0] = 0;
	ck_assert_int_eq(tacod_http_start(&c, routes, NULL, &second, &err),
			 -EADDRINUSE);
	ck_assert_msg(strstr(err.msg, sock_path) != NULL, "%s", err.msg);

	/* The socket goes with the server. */
	tacod_http_stop(srv);
	srv = NULL;
	ck_assert_int_ne(stat(sock_path, &st), 0);

	/* A stale socket file is replaced. */
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	ck_assert_uint_lt(strlen(sock_path), sizeof(sa.sun_path));
	memcpy(sa.sun_path, sock_path, strlen(sock_path) + 1);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	ck_assert_int_eq(tacod_http_start(&c, routes, &port, &srv, &err), 0);
	ck_assert_int_eq(tacod_http_port(srv), 0);
	ck_assert_int_eq(do_call(&q, &r), 200);
	resp_free(&r);
}
END_TEST

/* ---- uploads ---- */

static void make_file(const char *path, size_t n, uint64_t seed)
{
	FILE *f = fopen(path, "wb");
	char buf[65536];
	uint64_t x = seed;

	ck_assert_ptr_nonnull(f);
	while (n) {
		size_t k = n < sizeof(buf) ? n : sizeof(buf);
		for (size_t i = 0; i < k; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			buf[i] = (char)(x >> 24);
		}
		ck_assert_uint_eq(fwrite(buf, 1, k, f), k);
		n -= k;
	}
	fclose(f);
}

/* The hash by coreutils' sha256sum: independent of the server's. */
static void sha256sum(const char *path, char hex[65])
{
	char cmd[700];
	FILE *p;

	snprintf(cmd, sizeof(cmd), "sha256sum '%s'", path);
	p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(fscanf(p, "%64s", hex), 1);
	pclose(p);
}

typedef struct form {
	const char *file, *purpose, *keep;
} form;

static curl_mime *make_form(CURL *e, void *arg)
{
	form *f = arg;
	curl_mime *m = curl_mime_init(e);
	curl_mimepart *p;

	if (f->purpose) {
		p = curl_mime_addpart(m);
		curl_mime_name(p, "purpose");
		curl_mime_data(p, f->purpose, CURL_ZERO_TERMINATED);
	}
	if (f->keep) {
		p = curl_mime_addpart(m);
		curl_mime_name(p, "keep");
		curl_mime_data(p, f->keep, CURL_ZERO_TERMINATED);
	}
	if (f->file) {
		p = curl_mime_addpart(m);
		curl_mime_name(p, "file");
		curl_mime_filedata(p, f->file);
		curl_mime_filename(p, "train data.jsonl");
	}
	return m;
}

START_TEST(test_upload)
{
	tacod_config c;
	resp r;
	json_t *j;
	char src[400], kept[700], want[65], got[65];
	size_t n = (3u << 20) + 123;
	form f = {.purpose = "fine-tune", .keep = "1"};
	call up = {.method = "POST",
		   .path = "/v1/files",
		   .mime = make_form,
		   .mime_arg = &f};

	snprintf(src, sizeof(src), "%s/src.jsonl", tmp);
	make_file(src, n, 0x9e3779b97f4a7c15ull);
	sha256sum(src, want);
	f.file = src;
	config(&c);
	start(&c);

	ck_assert_int_eq(do_call(&up, &r), 200);
	j = body_json(&r);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "bytes")),
			 (json_int_t)n);
	ck_assert_str_eq(jstr(j, "sha256"), want);
	ck_assert_str_eq(jstr(j, "filename"), "train data.jsonl");
	ck_assert_str_eq(jstr(j, "field"), "file");
	ck_assert_str_eq(jstr(j, "purpose"), "fine-tune");
	json_decref(j);
	resp_free(&r);
	/* Kept where the handler put it, with the same bytes; no temporary
	 * file is left. */
	snprintf(kept, sizeof(kept), "%s/%s", keep_dir, want);
	sha256sum(kept, got);
	ck_assert_str_eq(got, want);
	ck_assert_int_eq(dir_entries(upload_dir), 0);

	/* Not kept: removed after the handler. */
	f.keep = NULL;
	ck_assert_int_eq(do_call(&up, &r), 200);
	resp_free(&r);
	ck_assert_int_eq(dir_entries(upload_dir), 0);

	/* No file part: the handler sees none. */
	f.file = NULL;
	ck_assert_int_eq(do_call(&up, &r), 400);
	check_error(&r, 400, NULL);
	resp_free(&r);

	/* The kept file downloads by fd. */
	char dl[200];
	snprintf(dl, sizeof(dl), "/v1/download/%s", want);
	ck_assert_int_eq(get(dl, &r), 200);
	ck_assert_uint_eq(r.len, n);
	ck_assert_msg(strstr(r.headers, "attachment; filename=") != NULL, "%s",
		      r.headers);
	char *orig = tu_read_file(src, NULL);
	ck_assert_int_eq(memcmp(orig, r.body, n), 0);
	free(orig);
	resp_free(&r);
	ck_assert_int_eq(get("/v1/download/none", &r), 404);
	check_error(&r, 404, NULL);
	resp_free(&r);
}
END_TEST

START_TEST(test_upload_over_limit)
{
	tacod_config c;
	resp r;
	char src[400];
	form f = {.purpose = "fine-tune"};
	call up = {.method = "POST",
		   .path = "/v1/files",
		   .mime = make_form,
		   .mime_arg = &f};
	tacod_http_stats s;

	config(&c); /* max_upload_bytes: 4 MiB */
	start(&c);
	snprintf(src, sizeof(src), "%s/big.bin", tmp);
	f.file = src;

	/* One byte over: noticed while streaming to disk. */
	make_file(src, (4u << 20) + 1, 7);
	ck_assert_int_eq(do_call(&up, &r), 413);
	check_error(&r, 413, "file_too_large");
	resp_free(&r);
	ck_assert_int_eq(dir_entries(upload_dir), 0);

	/* Far over: refused by its Content-Length. */
	make_file(src, 12u << 20, 8);
	ck_assert_int_eq(do_call(&up, &r), 413);
	check_error(&r, 413, "file_too_large");
	resp_free(&r);
	ck_assert_int_eq(dir_entries(upload_dir), 0);

	/* Exactly the limit is accepted. */
	make_file(src, 4u << 20, 9);
	ck_assert_int_eq(do_call(&up, &r), 200);
	resp_free(&r);
	ck_assert_int_eq(dir_entries(upload_dir), 0);

	tacod_http_get_stats(srv, &s);
	ck_assert_uint_eq(s.by_status[413], 2);
	ck_assert_uint_eq(s.by_status[200], 1);
}
END_TEST

START_TEST(test_upload_malformed)
{
	tacod_config c;
	resp r;
	const char *body = "--XYZ\r\nContent-Disposition: form-data; "
			   "name=\"file\"; filename=\"a.jsonl\"\r\n\r\nabc";
	call up = {.method = "POST",
		   .path = "/v1/files",
		   .body = body,
		   .body_len = -1,
		   .headers = {"Content-Type: multipart/form-data; "
			       "boundary=XYZ"}};

	config(&c);
	start(&c);
	/* curl adds its own Content-Type for .body; ours comes later and
	 * wins. The body ends before its closing boundary. */
	long st = do_call(&up, &r);
	ck_assert_msg(st == 400, "status %ld: %s", st, r.body);
	check_error(&r, 400, NULL);
	resp_free(&r);
	ck_assert_int_eq(dir_entries(upload_dir), 0);
}
END_TEST

/* ---- streams ---- */

typedef struct reader {
	resp r;
	long status;
} reader;

static void *read_stream(void *arg)
{
	reader *rd = arg;

	rd->status = get("/v1/stream", &rd->r);
	return NULL;
}

START_TEST(test_stream_events_in_order)
{
	tacod_config c;
	pthread_t t;
	reader rd;
	tacod_http_stream *s;
	tacod_http_stats stats;
	char data[64];
	const char *p;

	config(&c);
	start(&c);
	ck_assert_int_eq(pthread_create(&t, NULL, read_stream, &rd), 0);
	s = wait_stream();
	/* An idle stream waits without spinning. */
	double cpu0 = cpu_s();
	tu_sleep_ms(500);
	ck_assert_msg(cpu_s() - cpu0 < 0.1, "idle stream used %.3f s CPU",
		      cpu_s() - cpu0);
	for (int i = 0; i < 100; i++) {
		snprintf(data, sizeof(data), "{\"i\": %d}", i);
		ck_assert_int_eq(tacod_http_stream_event(s, "tick", data), 0);
		if (i % 10 == 0)
			tu_sleep_ms(2); /* let some go out alone */
	}
	tacod_http_get_stats(srv, &stats);
	ck_assert_uint_eq(stats.streams_open, 1);
	tacod_http_stream_end(s);
	pthread_join(t, NULL);
	ck_assert_int_eq(rd.status, 200);
	ck_assert_msg(strstr(rd.r.headers, "text/event-stream") != NULL, "%s",
		      rd.r.headers);
	p = rd.r.body;
	for (int i = 0; i < 100; i++) {
		char want[64];
		snprintf(want, sizeof(want),
			 "event: tick\ndata: {\"i\": %d}\n\n", i);
		ck_assert_msg(p && !strncmp(p, want, strlen(want)),
			      "event %d: %.60s", i, p ? p : "(null)");
		p += strlen(want);
	}
	ck_assert_str_eq(p, "");
	resp_free(&rd.r);
	tu_sleep_ms(50);
	tacod_http_get_stats(srv, &stats);
	ck_assert_uint_eq(stats.streams, 1);
	ck_assert_uint_eq(stats.streams_open, 0);
}
END_TEST

typedef struct later_get {
	char path[64];
	resp r;
	long status;
} later_get;

static void *later_getter(void *arg)
{
	later_get *g = arg;

	g->status = get(g->path, &g->r);
	return NULL;
}

/* Requests answered later: each kind of answer, and many waiting at once
 * (more than the server's threads) while other requests go on. */
START_TEST(test_later_replies)
{
	tacod_config c;
	later_get g[24];
	pthread_t t[24];
	resp r = {0};
	double t0;

	config(&c);
	start(&c);
	ck_assert_int_eq(get("/v1/later/json", &r), 201);
	ck_assert_ptr_nonnull(strstr(r.body, "late"));
	resp_free(&r);
	memset(&r, 0, sizeof(r));
	ck_assert_int_eq(get("/v1/later/busy", &r), 503);
	ck_assert_ptr_nonnull(strstr(r.headers, "Retry-After: 7"));
	resp_free(&r);
	memset(&r, 0, sizeof(r));
	ck_assert_int_eq(get("/v1/later/stream", &r), 200);
	ck_assert_str_eq(r.body, "data: one\n\ndata: two\n\n");
	resp_free(&r);
	memset(&r, 0, sizeof(r));
	ck_assert_int_eq(get("/v1/later/drop", &r), 500);
	resp_free(&r);
	for (int i = 0; i < 24; i++) {
		memset(&g[i], 0, sizeof(g[i]));
		snprintf(g[i].path, sizeof(g[i].path), "/v1/later/%s",
			 i % 2 ? "json" : "stream");
		ck_assert_int_eq(
		    pthread_create(&t[i], NULL, later_getter, &g[i]), 0);
	}
	tu_sleep_ms(50);
	/* 24 waiting hold no thread: an echo goes through at once */
	t0 = tu_now_s();
	memset(&r, 0, sizeof(r));
	ck_assert_int_eq(get("/v1/echo", &r), 200);
	ck_assert_msg(tu_now_s() - t0 < 0.15, "echo took %.3f s",
		      tu_now_s() - t0);
	resp_free(&r);
	for (int i = 0; i < 24; i++) {
		pthread_join(t[i], NULL);
		ck_assert_int_eq(g[i].status, i % 2 ? 201 : 200);
		resp_free(&g[i].r);
	}
}
END_TEST

static int raw_open(const char *path);

/* A request still waiting when the server stops gets a 503, and its
 * answer after that is refused; one whose client left is refused too. */
START_TEST(test_later_stop_and_gone)
{
	tacod_config c;
	later_get g = {.path = "/v1/later/hold"};
	pthread_t t;
	tacod_http_later *l = NULL;
	int fd;

	config(&c);
	start(&c);
	/* the client leaves: the answer is refused (the connection learns
	 * it when resumed) and nothing leaks */
	fd = raw_open("/v1/later/hold");
	for (int i = 0; i < 200 && !l; i++) {
		tu_sleep_ms(10);
		pthread_mutex_lock(&st_lock);
		l = held;
		held = NULL;
		pthread_mutex_unlock(&st_lock);
	}
	ck_assert_ptr_nonnull(l);
	close(fd);
	tu_sleep_ms(50);
	tacod_http_later_json(l, 200, json_pack("{}"), 0);
	l = NULL;
	ck_assert_int_eq(pthread_create(&t, NULL, later_getter, &g), 0);
	for (int i = 0; i < 200 && !l; i++) {
		tu_sleep_ms(10);
		pthread_mutex_lock(&st_lock);
		l = held;
		pthread_mutex_unlock(&st_lock);
	}
	ck_assert_ptr_nonnull(l);
	tacod_http_stop(srv);
	srv = NULL;
	pthread_join(t, NULL);
	ck_assert_int_eq(g.status, 503);
	ck_assert_int_eq(tacod_http_later_json(l, 200, json_pack("{}"), 0),
			 -EPIPE);
	resp_free(&g.r);
}
END_TEST

START_TEST(test_stream_multiline_event)
{
	tacod_config c;
	pthread_t t;
	reader rd;
	tacod_http_stream *s;

	config(&c);
	start(&c);
	ck_assert_int_eq(pthread_create(&t, NULL, read_stream, &rd), 0);
	s = wait_stream();
	ck_assert_int_eq(tacod_http_stream_event(s, NULL, "a\nb"), 0);
	ck_assert_int_eq(tacod_http_stream_push(s, ": ping\n\n", 8), 0);
	tacod_http_stream_end(s);
	pthread_join(t, NULL);
	ck_assert_str_eq(rd.r.body, "data: a\ndata: b\n\n: ping\n\n");
	resp_free(&rd.r);
}
END_TEST

/* A raw client connection; with a path, a GET of it is sent. */
static int raw_open(const char *path)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	char req[256];
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	ck_assert_int_ge(fd, 0);
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	if (!path)
		return fd;
	snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n",
		 path);
	ck_assert_int_eq(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	return fd;
}

START_TEST(test_stream_client_disconnects)
{
	tacod_config c;
	tacod_http_stream *s;
	char buf[4096];
	size_t got = 0;
	int fd, rc = 0;
	double t0;

	config(&c);
	start(&c);
	fd = raw_open("/v1/stream");
	s = wait_stream();
	ck_assert_int_eq(tacod_http_stream_event(s, "hello", "1"), 0);
	/* Read until the first event arrived, then hang up. */
	while (!memmem(buf, got, "data: 1", 7)) {
		ssize_t n = read(fd, buf + got, sizeof(buf) - got - 1);
		ck_assert_int_gt(n, 0);
		got += (size_t)n;
	}
	close(fd);
	t0 = tu_now_s();
	while (tu_now_s() - t0 < 10) {
		rc = tacod_http_stream_event(s, "more", "x");
		if (rc)
			break;
		tu_sleep_ms(10);
	}
	ck_assert_int_eq(rc, -EPIPE);
	ck_assert_int_eq(tacod_http_stream_push(s, "x", 1), -EPIPE);
	tacod_http_stream_end(s);
}
END_TEST

START_TEST(test_stream_slow_client_dropped)
{
	tacod_config c;
	tacod_http_stream *s;
	tacod_http_stats stats;
	char *chunk = malloc(1u << 16);
	uint64_t pushed = 0;
	int fd, rc = 0;

	config(&c);
	start(&c);
	fd = raw_open("/v1/stream"); /* and never read */
	s = wait_stream();
	memset(chunk, 'z', 1u << 16);
	while (pushed < (512ull << 20)) {
		rc = tacod_http_stream_push(s, chunk, 1u << 16);
		if (rc)
			break;
		pushed += 1u << 16;
	}
	ck_assert_int_eq(rc, -EPIPE);
	ck_assert_uint_ge(pushed, TACOD_HTTP_STREAM_MAX - (1u << 16));
	tacod_http_get_stats(srv, &stats);
	ck_assert_uint_eq(stats.streams_dropped, 1);
	tacod_http_stream_end(s);
	close(fd);
	free(chunk);
}
END_TEST

/* ---- stopping ---- */

static void *slow_get(void *arg)
{
	reader *rd = arg;

	rd->status = get("/v1/slow", &rd->r);
	return NULL;
}

START_TEST(test_graceful_stop)
{
	tacod_config c;
	pthread_t ts, tslow;
	reader rs, rslow;
	tacod_http_stream *s;
	resp r;
	int started = 0;
	double t0;

	config(&c);
	snprintf(c.unix_socket, sizeof(c.unix_socket), "%s", sock_path);
	start(&c);
	ck_assert_int_eq(pthread_create(&ts, NULL, read_stream, &rs), 0);
	s = wait_stream();
	ck_assert_int_eq(tacod_http_stream_event(s, NULL, "one"), 0);
	ck_assert_int_eq(tacod_http_stream_event(s, NULL, "two"), 0);
	ck_assert_int_eq(pthread_create(&tslow, NULL, slow_get, &rslow), 0);
	for (t0 = tu_now_s(); !started && tu_now_s() - t0 < 10;
	     tu_sleep_ms(5)) {
		pthread_mutex_lock(&st_lock);
		started = slow_started;
		pthread_mutex_unlock(&st_lock);
	}
	ck_assert(started);

	/* The slow request is in its handler; the stream is open. */
	tacod_http_stop(srv);
	srv = NULL;
	pthread_join(tslow, NULL);
	pthread_join(ts, NULL);
	ck_assert_int_eq(rslow.status, 200);
	ck_assert_str_eq(rslow.r.body, "slow done");
	ck_assert_int_eq(rs.status, 200);
	ck_assert_int_eq(rs.r.cc, CURLE_OK);
	ck_assert_str_eq(rs.r.body, "data: one\n\ndata: two\n\n");
	/* The pusher learns the stream is gone. */
	ck_assert_int_eq(tacod_http_stream_event(s, NULL, "three"), -EPIPE);
	tacod_http_stream_end(s);
	/* Nobody listens any more. */
	ck_assert_int_eq(get("/v1/echo", &r), -1);
	ck_assert_int_eq(r.cc, CURLE_COULDNT_CONNECT);
	resp_free(&r);
	ck_assert_int_ne(access(sock_path, F_OK), 0);
	resp_free(&rs.r);
	resp_free(&rslow.r);
}
END_TEST

static void *stop_thread(void *arg)
{
	tacod_http_stop_grace(arg, 10000);
	return NULL;
}

static size_t read_reply(int fd, char *buf, size_t cap)
{
	size_t got = 0;

	while (got < cap - 1 && !memmem(buf, got, "\r\n\r\n", 4)) {
		ssize_t n = read(fd, buf + got, cap - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	buf[got] = 0;
	return got;
}

/* Reads one whole reply (head and Content-Length body) into buf. */
static size_t read_full_reply(int fd, char *buf, size_t cap)
{
	size_t got = read_reply(fd, buf, cap), head, want;
	const char *cl, *end = memmem(buf, got, "\r\n\r\n", 4);

	if (!end)
		return got;
	head = (size_t)(end - buf) + 4;
	cl = strcasestr(buf, "Content-Length:");
	want = cl && cl < end ? head + strtoul(cl + 15, NULL, 10) : head;
	while (got < want && got < cap - 1) {
		ssize_t n = read(fd, buf + got, cap - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	buf[got] = 0;
	return got;
}

START_TEST(test_stopping_answers_503)
{
	tacod_config c;
	pthread_t tstop;
	char buf[4096];
	const char *get_req = "GET /v1/echo HTTP/1.1\r\nHost: x\r\n\r\n";
	const char *post_head = "POST /v1/echo HTTP/1.1\r\nHost: x\r\n"
				"Content-Type: application/json\r\n"
				"Content-Length: 20\r\n\r\n";
	const char *post_body = "{\"a\": 1}            "; /* 20 bytes */
	int fd, up;

	config(&c);
	start(&c);
	/* A keep-alive connection with one request done. */
	fd = raw_open("/v1/files/f1");
	read_full_reply(fd, buf, sizeof(buf));
	ck_assert_msg(!strncmp(buf, "HTTP/1.1 200", 12), "%s", buf);
	ck_assert_msg(!strcasestr(buf, "Connection: close"), "%s", buf);
	/* A request in flight: its body is still coming. */
	up = raw_open(NULL);
	ck_assert_int_eq(write(up, post_head, strlen(post_head)),
			 (ssize_t)strlen(post_head));
	ck_assert_int_eq(write(up, post_body, 6), 6);
	tu_sleep_ms(100);
	ck_assert_int_eq(pthread_create(&tstop, NULL, stop_thread, srv), 0);
	srv = NULL;
	tu_sleep_ms(100);
	/* A new request on the open connection: 503, and the connection
	 * closes. */
	ck_assert_int_eq(write(fd, get_req, strlen(get_req)),
			 (ssize_t)strlen(get_req));
	read_full_reply(fd, buf, sizeof(buf));
	ck_assert_msg(!strncmp(buf, "HTTP/1.1 503", 12), "%s", buf);
	ck_assert_msg(strcasestr(buf, "Connection: close") != NULL, "%s", buf);
	ck_assert_msg(strstr(buf, "server_shutting_down") != NULL, "%s", buf);
	close(fd);
	/* The request in flight is still served. */
	ck_assert_int_eq(write(up, post_body + 6, 14), 14);
	read_full_reply(up, buf, sizeof(buf));
	ck_assert_msg(!strncmp(buf, "HTTP/1.1 201", 12), "%s", buf);
	close(up);
	pthread_join(tstop, NULL);
}
END_TEST

START_TEST(test_upload_client_disconnects)
{
	tacod_config c;
	struct sockaddr_in sa = {.sin_family = AF_INET};
	char head[512], *part = malloc(256u << 10);
	const char *pre = "--B0undary\r\nContent-Disposition: form-data; "
			  "name=\"file\"; filename=\"x.jsonl\"\r\n"
			  "Content-Type: application/octet-stream\r\n\r\n";
	int fd, n;
	double t0;

	config(&c);
	start(&c);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	n = snprintf(head, sizeof(head),
		     "POST /v1/files HTTP/1.1\r\nHost: x\r\n"
		     "Content-Type: multipart/form-data; boundary=B0undary\r\n"
		     "Content-Length: %u\r\n\r\n%s",
		     3u << 20, pre);
	ck_assert_int_eq(write(fd, head, (size_t)n), n);
	memset(part, 'q', 256u << 10);
	ck_assert_int_eq(write(fd, part, 256u << 10), 256 << 10);
	/* The temporary file exists while the upload goes on... */
	for (t0 = tu_now_s(); !dir_entries(upload_dir) && tu_now_s() - t0 < 10;)
		tu_sleep_ms(5);
	ck_assert_int_eq(dir_entries(upload_dir), 1);
	/* ...and goes when the client does. */
	close(fd);
	for (t0 = tu_now_s(); dir_entries(upload_dir) && tu_now_s() - t0 < 10;)
		tu_sleep_ms(5);
	ck_assert_int_eq(dir_entries(upload_dir), 0);
	free(part);
}
END_TEST

START_TEST(test_malformed_requests)
{
	tacod_config c;
	char buf[4096];
	char *huge = malloc(300u << 10);
	resp r;
	int fd;
	size_t n;
	static const char *bad[] = {
	    "GET v1/echo HTTP/1.1\r\nHost: x\r\n\r\n",
	    "GET /v1/echo%zz HTTP/1.1\r\nHost: x\r\n\r\n",
	    "GET /v1/files/a%00b HTTP/1.1\r\nHost: x\r\n\r\n",
	    "BREW /v1/echo HTTP/1.1\r\nHost: x\r\n\r\n",
	};

	config(&c);
	start(&c);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		fd = raw_open("/");
		/* raw_open sent a complete GET /; answer it, then ours. */
		read_full_reply(fd, buf, sizeof(buf));
		ck_assert_msg(!strncmp(buf, "HTTP/1.1 404", 12), "%s", buf);
		/* Errors before the body keep the connection. */
		ck_assert_msg(!strcasestr(buf, "Connection: close"), "%s", buf);
		tu_sleep_ms(20);
		ck_assert_int_eq(write(fd, bad[i], strlen(bad[i])),
				 (ssize_t)strlen(bad[i]));
		memset(buf, 0, sizeof(buf));
		read_full_reply(fd, buf, sizeof(buf));
		ck_assert_msg(!strncmp(buf, "HTTP/1.1 4", 10), "case %zu: %s",
			      i, buf);
		close(fd);
	}
	/* A header larger than a connection's memory. */
	fd = raw_open("/");
	read_full_reply(fd, buf, sizeof(buf));
	n = (size_t)sprintf(huge,
			    "GET /v1/echo HTTP/1.1\r\nHost: x\r\nX-Big: ");
	memset(huge + n, 'b', (300u << 10) - n - 4);
	memcpy(huge + (300u << 10) - 4, "\r\n\r\n", 4);
	ck_assert_int_gt(write(fd, huge, 300u << 10), 0);
	memset(buf, 0, sizeof(buf));
	read_full_reply(fd, buf, sizeof(buf));
	ck_assert_msg(!strncmp(buf, "HTTP/1.1 4", 10) || !buf[0], "%s", buf);
	close(fd);
	free(huge);
	/* Still serving. */
	ck_assert_int_eq(get("/v1/echo", &r), 200);
	resp_free(&r);
}
END_TEST

START_TEST(test_closed_connections_free_slots)
{
	/* Few connection slots, many short connections: every hang-up must
	 * be noticed, or the slots run out. */
	tacod_config c;
	int ok = 0;
	char url[128];
	CURL *e;

	config(&c);
	c.limits.max_connections = 8;
	start(&c);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/nope", port);
	for (int i = 0; i < 300; i++) {
		resp r;
		memset(&r, 0, sizeof(r));
		e = curl_easy_init();
		curl_easy_setopt(e, CURLOPT_URL, url);
		curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L);
		curl_easy_setopt(e, CURLOPT_TIMEOUT, 10L);
		curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
		curl_easy_setopt(e, CURLOPT_WRITEDATA, &r);
		if (curl_easy_perform(e) == CURLE_OK) {
			curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r.status);
			ok += r.status == 404;
		}
		curl_easy_cleanup(e);
		resp_free(&r);
	}
	ck_assert_int_eq(ok, 300);
}
END_TEST

START_TEST(test_random_requests)
{
	/* Random paths, queries and tokens (high bytes, escapes, NULs
	 * escaped) against a server with tokens: always an answer, never a
	 * crash (this is what the sanitizer builds watch). */
	static const char alpha[] = "/%+&=?#.{}-_aZ09\x80\xff\xc3\xa9 \t";
	tacod_config c;
	char path[400], buf[4096], req[1200], tok[80];
	uint64_t x = 0x2545f4914f6cdd1dull;
	struct timeval tv = {5, 0};
	int answered = 0;

	snprintf(path, sizeof(path), "%s/tokens", tmp);
	write_tokens(path, "alice-secret", "bob-secret");
	config(&c);
	snprintf(c.tokens_file, sizeof(c.tokens_file), "%s", path);
	start(&c);
	for (int i = 0; i < 400; i++) {
		char raw[256], uri[300];
		size_t n = 1 + (x % 60), k;
		int fd;
		raw[0] = '/';
		for (k = 1; k < n; k++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			raw[k] = alpha[x % (sizeof(alpha) - 1)];
			if (raw[k] == ' ' || raw[k] == '\t')
				raw[k] = '%';
		}
		raw[k] = 0;
		if (i % 3 == 0)
			snprintf(uri, sizeof(uri), "/v1/echo?%s", raw + 1);
		else if (i % 3 == 1)
			snprintf(uri, sizeof(uri), "/v1/files/%s", raw + 1);
		else
			snprintf(uri, sizeof(uri), "%s", raw);
		for (k = 0; k < sizeof(tok) - 1; k++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			tok[k] = alpha[x % (sizeof(alpha) - 1)];
			if (tok[k] == '\t')
				tok[k] = 'x';
		}
		tok[i % (int)sizeof(tok)] = 0;
		snprintf(req, sizeof(req),
			 "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: %s "
			 "%s\r\n\r\n",
			 uri, i % 2 ? "Bearer" : "bearer",
			 i % 5 ? tok : "alice-secret");
		fd = raw_open(NULL);
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		ck_assert_int_eq(write(fd, req, strlen(req)),
				 (ssize_t)strlen(req));
		read_full_reply(fd, buf, sizeof(buf));
		ck_assert_msg(!strncmp(buf, "HTTP/1.1 ", 9), "%s -> %s", req,
			      buf);
		answered++;
		close(fd);
	}
	ck_assert_int_eq(answered, 400);
	/* Still serving. */
	call ok = {.path = "/v1/echo", .token = "bob-secret"};
	resp r;
	ck_assert_int_eq(do_call(&ok, &r), 200);
	resp_free(&r);
}
END_TEST

/* ---- many requests at once ---- */

enum { N_THREADS = 4, PER_THREAD = 50, ROUNDS = 2 };

static void *many_gets(void *arg)
{
	int *ok = arg;
	CURLM *m = curl_multi_init();
	CURL *e[PER_THREAD];
	resp r[PER_THREAD];
	char url[128];

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/files/f%d", port,
		 PER_THREAD);
	curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)PER_THREAD);
	for (int i = 0; i < PER_THREAD; i++) {
		e[i] = curl_easy_init();
		curl_easy_setopt(e[i], CURLOPT_URL, url);
		curl_easy_setopt(e[i], CURLOPT_TIMEOUT, 60L);
		curl_easy_setopt(e[i], CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(e[i], CURLOPT_WRITEFUNCTION, on_body);
		curl_easy_setopt(e[i], CURLOPT_WRITEDATA, &r[i]);
	}
	for (int round = 0; round < ROUNDS; round++) {
		int running = 1;
		CURLMsg *msg;
		int left;
		memset(r, 0, sizeof(r));
		for (int i = 0; i < PER_THREAD; i++)
			curl_multi_add_handle(m, e[i]);
		while (running) {
			curl_multi_perform(m, &running);
			if (running)
				curl_multi_poll(m, NULL, 0, 100, NULL);
		}
		while ((msg = curl_multi_info_read(m, &left)))
			if (msg->msg == CURLMSG_DONE &&
			    msg->data.result == CURLE_OK) {
				long st = 0;
				curl_easy_getinfo(msg->easy_handle,
						  CURLINFO_RESPONSE_CODE, &st);
				*ok += st == 200;
			}
		for (int i = 0; i < PER_THREAD; i++) {
			curl_multi_remove_handle(m, e[i]);
			free(r[i].body);
		}
	}
	for (int i = 0; i < PER_THREAD; i++)
		curl_easy_cleanup(e[i]);
	curl_multi_cleanup(m);
	return NULL;
}

START_TEST(test_many_concurrent_keepalive)
{
	tacod_config c;
	pthread_t t[N_THREADS];
	int ok[N_THREADS] = {0}, total = 0;
	tacod_http_stats s;
	double t0 = tu_now_s();

	config(&c);
	start(&c);
	for (int i = 0; i < N_THREADS; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, many_gets, &ok[i]),
				 0);
	for (int i = 0; i < N_THREADS; i++) {
		pthread_join(t[i], NULL);
		total += ok[i];
	}
	ck_assert_int_eq(total, N_THREADS * PER_THREAD * ROUNDS);
	ck_assert_msg(tu_now_s() - t0 < 30, "took %.1f s", tu_now_s() - t0);
	tacod_http_get_stats(srv, &s);
	ck_assert_uint_eq(s.by_status[200],
			  (uint64_t)N_THREADS * PER_THREAD * ROUNDS);
	ck_assert_uint_eq(s.requests,
			  (uint64_t)N_THREADS * PER_THREAD * ROUNDS);
}
END_TEST

/* ---- configuration errors ---- */

START_TEST(test_bad_listen)
{
	static const char *bad[] = {"nohost",	       "127.0.0.1:x",
				    "1.2.3:80",	       "[::1:80",
				    "127.0.0.1:70000", "example.com:80"};
	tacod_config c;
	taco_err err = {{0}};
	tacod_http_route bad_routes[] = {{"GET", "v1/x", h_echo, NULL, 0},
					 {NULL, NULL, NULL, NULL, 0}};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		config(&c);
		snprintf(c.listen, sizeof(c.listen), "%s", bad[i]);
		ck_assert_int_eq(tacod_http_start(&c, routes, NULL, &srv, &err),
				 -EINVAL);
		ck_assert_msg(strstr(err.msg, "listen") != NULL, "%s", err.msg);
	}
	config(&c);
	ck_assert_int_eq(tacod_http_start(&c, bad_routes, NULL, &srv, &err),
			 -EINVAL);
	srv = NULL;
}
END_TEST

START_TEST(test_ipv6_loopback)
{
	tacod_config c;
	resp r;
	char url[128];
	CURL *e;

	config(&c);
	snprintf(c.listen, sizeof(c.listen), "[::1]:0");
	if (tacod_http_start(&c, routes, &port, &srv, NULL)) {
		/* No IPv6 on this machine: nothing to test. */
		srv = NULL;
		return;
	}
	port = tacod_http_port(srv);
	memset(&r, 0, sizeof(r));
	snprintf(url, sizeof(url), "http://[::1]:%d/v1/echo", port);
	e = curl_easy_init();
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, &r);
	curl_easy_setopt(e, CURLOPT_TIMEOUT, 30L);
	ck_assert_int_eq(curl_easy_perform(e), CURLE_OK);
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r.status);
	curl_easy_cleanup(e);
	ck_assert_int_eq(r.status, 200);
	json_t *j = body_json(&r);
	ck_assert_str_eq(jstr(j, "user"), "local");
	json_decref(j);
	resp_free(&r);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("http");
	TCase *tc = tcase_create("http");
	int rc;

	signal(SIGPIPE, SIG_IGN);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_routing_and_params);
	tcase_add_test(tc, test_query_and_headers);
	tcase_add_test(tc, test_not_found_and_method);
	tcase_add_test(tc, test_json_bodies_and_limit);
	tcase_add_test(tc, test_bearer_tokens);
	tcase_add_test(tc, test_open_routes);
	tcase_add_test(tc, test_bad_tokens_file_refuses_start);
	tcase_add_test(tc, test_unix_socket_peer);
	tcase_add_test(tc, test_upload);
	tcase_add_test(tc, test_upload_over_limit);
	tcase_add_test(tc, test_upload_malformed);
	tcase_add_test(tc, test_stream_events_in_order);
	tcase_add_test(tc, test_stream_multiline_event);
	tcase_add_test(tc, test_stream_client_disconnects);
	tcase_add_test(tc, test_stream_slow_client_dropped);
	tcase_add_test(tc, test_graceful_stop);
	tcase_add_test(tc, test_stopping_answers_503);
	tcase_add_test(tc, test_upload_client_disconnects);
	tcase_add_test(tc, test_malformed_requests);
	tcase_add_test(tc, test_later_replies);
	tcase_add_test(tc, test_later_stop_and_gone);
	tcase_add_test(tc, test_closed_connections_free_slots);
	tcase_add_test(tc, test_random_requests);
	tcase_add_test(tc, test_many_concurrent_keepalive);
	tcase_add_test(tc, test_bad_listen);
	tcase_add_test(tc, test_ipv6_loopback);
	suite_add_tcase(s, tc);
	rc = tu_run(s, 0);
	curl_global_cleanup();
	return rc;
}
