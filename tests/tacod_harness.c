/* tacod_harness.c: a tacod for tests: in-process on a loopback port, or
 * the real binary on a unix socket, and a curl client for it. */
#include "tacod_harness.h"

#include "daemon/http/auth.h"

#include <check.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

tacod_service *th_svc;
static uv_loop_t loop;
static pthread_t thread;
char th_state[64];
int th_port;
char th_sock[128];

static void *run_loop(void *arg)
{
	(void)arg;
	uv_run(&loop, UV_RUN_DEFAULT);
	return NULL;
}

void th_start(uint64_t device_memory, void (*tweak)(tacod_config *))
{
	tacod_config c;
	taco_err err = {{0}};
	const char *bin = getenv("TACO_BIN_DIR");

	snprintf(th_state, sizeof(th_state), "/tmp/tacod-test-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(th_state));
	tacod_config_defaults(&c);
	snprintf(c.listen, sizeof(c.listen), "127.0.0.1:0");
	snprintf(c.state_dir, sizeof(c.state_dir), "%s", th_state);
	snprintf(c.models_dir, sizeof(c.models_dir), "%s",
		 tu_fixture("models"));
	snprintf(c.taco_train, sizeof(c.taco_train), "%s/taco-train",
		 bin ? bin : ".");
	c.device_memory = device_memory;
	c.cancel_timeout_s = 30;
	if (tweak)
		tweak(&c);
	uv_loop_init(&loop);
	ck_assert_msg(tacod_service_start(&c, &loop, &th_svc, &err) == 0, "%s",
		      err.msg);
	th_port = tacod_service_port(th_svc);
	pthread_create(&thread, NULL, run_loop, NULL);
}

static char users_tokens[128]; /* th_start_users's tokens file, or "" */
static void (*users_tweak)(tacod_config *);

static void with_users(tacod_config *c)
{
	snprintf(c->tokens_file, sizeof(c->tokens_file), "%s", users_tokens);
	if (users_tweak)
		users_tweak(c);
}

void th_start_users(uint64_t device_memory)
{
	th_start_users_x(device_memory, NULL);
}

void th_start_users_x(uint64_t device_memory, void (*tweak)(tacod_config *))
{
	FILE *f;

	snprintf(users_tokens, sizeof(users_tokens), "/tmp/tacod-tok-%d",
		 (int)getpid());
	f = fopen(users_tokens, "w");
	ck_assert_ptr_nonnull(f);
	th_token_line(f, "alice-t", "alice", "user");
	th_token_line(f, "carol-t", "carol", "user");
	th_token_line(f, "bob-t", "bob", "admin");
	fclose(f);
	users_tweak = tweak;
	th_start(device_memory, with_users);
}

void th_stop(void)
{
	char cmd[128];

	if (users_tokens[0]) {
		unlink(users_tokens);
		users_tokens[0] = 0;
	}

	tacod_service_shutdown(th_svc);
	pthread_join(thread, NULL);
	tacod_service_free(th_svc);
	uv_loop_close(&loop);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", th_state);
	ck_assert_int_eq(system(cmd), 0);
}

typedef struct buf {
	char *p;
	size_t n;
} buf;

static size_t sink(char *d, size_t sz, size_t n, void *ctx)
{
	buf *b = ctx;
	char *g = realloc(b->p, b->n + sz * n + 1);

	if (!g)
		return 0;
	b->p = g;
	memcpy(b->p + b->n, d, sz * n);
	b->n += sz * n;
	b->p[b->n] = 0;
	return sz * n;
}

/* No reply names a path of the server's: the state directory is tacod's
 * business, and a client knows its files by id. (Downloads are archives of
 * the job's own files and carry names relative to the model.) */
static void no_server_path(const char *method, const char *path,
			   const char *body, size_t n)
{
	if (!body || !th_state[0])
		return;
	ck_assert_msg(!memmem(body, n, th_state, strlen(th_state)),
		      "%s %s: the reply names the state directory %s: %.*s",
		      method, path, th_state, (int)(n < 600 ? n : 600), body);
}

/* A response header wanted by th_call_h: its value lands in v. */
typedef struct want_header {
	const char *name;
	char *v;
	size_t cap;
} want_header;

static size_t header_cb(char *line, size_t size, size_t n, void *p)
{
	want_header *w = p;
	size_t len = size * n, k = strlen(w->name);

	if (len > k + 1 && !strncasecmp(line, w->name, k) && line[k] == ':') {
		const char *v = line + k + 1;
		size_t vn = len - k - 1;
		while (vn && (*v == ' ' || *v == '\t'))
			v++, vn--;
		while (vn && (v[vn - 1] == '\r' || v[vn - 1] == '\n'))
			vn--;
		snprintf(w->v, w->cap, "%.*s", (int)vn, v);
	}
	return len;
}

static long call(const char *method, const char *path, const char *json,
		 const char *upload, const char *header, want_header *w,
		 json_t **out, char **raw, size_t *raw_len)
{
	CURL *c = curl_easy_init();
	char url[512];
	buf b = {0};
	long status = 0;
	struct curl_slist *h = NULL;
	curl_mime *mime = NULL;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", th_port, path);
	if (th_sock[0]) {
		snprintf(url, sizeof(url), "http://localhost%s", path);
		curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, th_sock);
	}
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	if (header)
		h = curl_slist_append(h, header);
	if (json) {
		h = curl_slist_append(h, "Content-Type: application/json");
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, json);
	}
	if (h)
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	if (w) {
		w->v[0] = 0;
		curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, header_cb);
		curl_easy_setopt(c, CURLOPT_HEADERDATA, w);
	}
	if (upload) {
		curl_mimepart *part;
		mime = curl_mime_init(c);
		part = curl_mime_addpart(mime);
		curl_mime_name(part, "purpose");
		curl_mime_data(part, "fine-tune", CURL_ZERO_TERMINATED);
		part = curl_mime_addpart(mime);
		curl_mime_name(part, "file");
		curl_mime_filedata(part, upload);
		curl_easy_setopt(c, CURLOPT_MIMEPOST, mime);
	}
	ck_assert_int_eq(curl_easy_perform(c), CURLE_OK);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	no_server_path(method, path, b.p, b.n);
	if (out)
		*out = b.p ? json_loads(b.p, 0, NULL) : NULL;
	if (raw) {
		*raw = b.p;
		*raw_len = b.n;
	} else {
		free(b.p);
	}
	curl_slist_free_all(h);
	curl_mime_free(mime);
	curl_easy_cleanup(c);
	return status;
}

long th_call_x(const char *method, const char *path, const char *json,
	       const char *upload, const char *header, json_t **out, char **raw,
	       size_t *raw_len)
{
	return call(method, path, json, upload, header, NULL, out, raw,
		    raw_len);
}

long th_call_h(const char *method, const char *path, const char *json,
	       const char *name, char *value, size_t cap, json_t **out)
{
	want_header w = {name, value, cap};

	return call(method, path, json, NULL, NULL, &w, out, NULL, NULL);
}

void th_token_line(FILE *f, const char *token, const char *user,
		   const char *role)
{
	tacod_auth_sha256 c;
	uint8_t d[32];

	tacod_auth_sha256_init(&c);
	tacod_auth_sha256_update(&c, token, strlen(token));
	tacod_auth_sha256_final(&c, d);
	for (int i = 0; i < 32; i++)
		fprintf(f, "%02x", d[i]);
	fprintf(f, " %s %s\n", user, role);
}

long th_as(const char *token, const char *method, const char *path,
	   const char *json, const char *upload, json_t **out)
{
	char h[128];

	snprintf(h, sizeof(h), "Authorization: Bearer %s", token);
	return th_call_x(method, path, json, upload, h, out, NULL, NULL);
}

long th_call(const char *method, const char *path, const char *json,
	     const char *upload, json_t **out)
{
	return th_call_x(method, path, json, upload, NULL, out, NULL, NULL);
}

char *th_get_text(const char *path, const char *last_id)
{
	CURL *c = curl_easy_init();
	char url[512], hdr[160];
	buf b = {0};
	struct curl_slist *h = NULL;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", th_port, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
	if (last_id) {
		snprintf(hdr, sizeof(hdr), "Last-Event-ID: %s", last_id);
		h = curl_slist_append(h, hdr);
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	}
	ck_assert_int_eq(curl_easy_perform(c), CURLE_OK);
	no_server_path("GET", path, b.p, b.n);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return b.p;
}

const char *th_str(json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

char *th_upload_count(void)
{
	json_t *f;
	char *id;

	ck_assert_int_eq(th_call("POST", "/v1/files", NULL,
				 tu_fixture("data/count_train.jsonl"), &f),
			 200);
	ck_assert_str_eq(th_str(f, "object"), "file");
	id = strdup(th_str(f, "id"));
	json_decref(f);
	return id;
}

char *th_create(const char *file, const char *taco, long want)
{
	char body[1024];
	json_t *j;
	char *id = NULL;

	snprintf(body, sizeof(body),
		 "{\"model\": \"llama_gqa\", \"training_file\": \"%s\", "
		 "\"suffix\": \"t\", \"taco\": {%s%s}}",
		 file, strstr(taco, "seq_len") ? "" : "\"seq_len\": 24, ",
		 taco);
	ck_assert_int_eq(
	    th_call("POST", "/v1/fine_tuning/jobs", body, NULL, &j), want);
	if (want == 200)
		id = strdup(th_str(j, "id"));
	json_decref(j);
	return id;
}

json_t *th_wait_status(const char *id, const char *status)
{
	char path[256];
	json_t *j = NULL;

	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s", id);
	for (int i = 0; i < TH_WAIT_TICKS; i++) {
		json_decref(j);
		ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 200);
		if (!strcmp(th_str(j, "status"), status))
			return j;
		usleep(100000);
	}
	ck_abort_msg("job %s never reached %s (is %s)", id, status,
		     th_str(j, "status"));
	return NULL;
}

int th_free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), p;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	p = ntohs(a.sin_port);
	close(fd);
	return p;
}

static int answers(void)
{
	CURL *c = curl_easy_init();
	char url[] = "http://localhost/healthz";
	int ok;

	curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, th_sock);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	ok = curl_easy_perform(c) == CURLE_OK;
	curl_easy_cleanup(c);
	return ok;
}

pid_t th_try_spawn_tacod(const char *cfg)
{
	char bin[4096];
	const char *d = getenv("TACO_BIN_DIR");
	pid_t pid;
	int st;

	snprintf(bin, sizeof(bin), "%s/tacod", d ? d : ".");
	pid = fork();
	if (pid == 0) {
		execl(bin, "tacod", "--config", cfg, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 100; i++) { /* until it answers */
		if (access(th_sock, F_OK) == 0 && answers())
			return pid;
		if (waitpid(pid, &st, WNOHANG) == pid)
			return -1; /* it exited: a port taken, say */
		usleep(100000);
	}
	ck_abort_msg("tacod did not start");
	return pid;
}

pid_t th_spawn_tacod(const char *cfg)
{
	pid_t pid = th_try_spawn_tacod(cfg);

	ck_assert_msg(pid > 0, "tacod did not start");
	return pid;
}

void th_expect_error_at(int line, long got, long want, json_t *j,
			const char *code)
{
	char *d = json_dumps(j, 0);

	ck_assert_msg(got == want && j &&
			  th_str(json_object_get(j, "error"), "code"),
		      "line %d: %ld (wanted %ld): %s", line, got, want,
		      d ? d : "no JSON");
	free(d);
	ck_assert_str_eq(th_str(json_object_get(j, "error"), "code"), code);
	json_decref(j);
}
