/* test_tacod.c: tacod over real HTTP on loopback: upload, create, run to
 * completion, events, validation errors, memory refusal, cancel. */
#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "service.h"
#include "testutil.h"

static tacod_service *svc;
static uv_loop_t loop;
static pthread_t thread;
static char state[64];
static int port;
static char sock[128]; /* set: requests go over this unix socket */

static void *run_loop(void *arg)
{
	(void)arg;
	uv_run(&loop, UV_RUN_DEFAULT);
	return NULL;
}

static void start(uint64_t device_memory)
{
	tacod_config c;
	taco_err err = {{0}};
	const char *bin = getenv("TACO_BIN_DIR");

	snprintf(state, sizeof(state), "/tmp/tacod-test-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(state));
	tacod_config_defaults(&c);
	snprintf(c.listen, sizeof(c.listen), "127.0.0.1:0");
	snprintf(c.state_dir, sizeof(c.state_dir), "%s", state);
	snprintf(c.models_dir, sizeof(c.models_dir), "%s",
		 tu_fixture("models"));
	snprintf(c.taco_train, sizeof(c.taco_train), "%s/taco-train",
		 bin ? bin : ".");
	c.device_memory = device_memory;
	c.cancel_timeout_s = 30;
	uv_loop_init(&loop);
	ck_assert_msg(tacod_service_start(&c, &loop, &svc, &err) == 0, "%s",
		      err.msg);
	port = tacod_service_port(svc);
	pthread_create(&thread, NULL, run_loop, NULL);
}

static void stop(void)
{
	char cmd[128];

	tacod_service_shutdown(svc);
	pthread_join(thread, NULL);
	tacod_service_free(svc);
	uv_loop_close(&loop);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", state);
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

/* One request; returns the status and the parsed JSON body. */
static long call(const char *method, const char *path, const char *json,
		 const char *upload, json_t **out)
{
	CURL *c = curl_easy_init();
	char url[512];
	buf b = {0};
	long status = 0;
	struct curl_slist *h = NULL;
	curl_mime *mime = NULL;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
	if (sock[0]) {
		snprintf(url, sizeof(url), "http://localhost%s", path);
		curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, sock);
	}
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	if (json) {
		h = curl_slist_append(h, "Content-Type: application/json");
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, json);
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
	*out = b.p ? json_loads(b.p, 0, NULL) : NULL;
	free(b.p);
	curl_slist_free_all(h);
	curl_mime_free(mime);
	curl_easy_cleanup(c);
	return status;
}

/* A GET whose body is returned as text (streams), with an optional
 * Last-Event-ID. */
static char *get_text(const char *path, const char *last_id)
{
	CURL *c = curl_easy_init();
	char url[512], hdr[160];
	buf b = {0};
	struct curl_slist *h = NULL;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
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
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return b.p;
}

static const char *str(json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

static char *upload_count(void)
{
	json_t *f;
	char *id;

	ck_assert_int_eq(call("POST", "/v1/files", NULL,
			      tu_fixture("data/count_train.jsonl"), &f),
			 200);
	ck_assert_str_eq(str(f, "object"), "file");
	id = strdup(str(f, "id"));
	json_decref(f);
	return id;
}

static char *create(const char *file, const char *taco, long want)
{
	char body[1024];
	json_t *j;
	char *id = NULL;

	snprintf(body, sizeof(body),
		 "{\"model\": \"llama_gqa\", \"training_file\": \"%s\", "
		 "\"suffix\": \"t\", \"taco\": {%s%s}}",
		 file, strstr(taco, "seq_len") ? "" : "\"seq_len\": 24, ",
		 taco);
	ck_assert_int_eq(call("POST", "/v1/fine_tuning/jobs", body, NULL, &j),
			 want);
	if (want == 200)
		id = strdup(str(j, "id"));
	json_decref(j);
	return id;
}

/* Polls a job until it is in status (or 120 s pass). */
static json_t *wait_status(const char *id, const char *status)
{
	char path[256];
	json_t *j = NULL;

	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s", id);
	for (int i = 0; i < 1200; i++) {
		json_decref(j);
		ck_assert_int_eq(call("GET", path, NULL, NULL, &j), 200);
		if (!strcmp(str(j, "status"), status))
			return j;
		usleep(100000);
	}
	ck_abort_msg("job %s never reached %s (is %s)", id, status,
		     str(j, "status"));
	return NULL;
}

START_TEST(test_lifecycle)
{
	json_t *j, *ev;
	char *file, *job, path[256];
	int done = 0;

	start(8ull << 30);
	ck_assert_int_eq(call("GET", "/healthz", NULL, NULL, &j), 200);
	json_decref(j);
	ck_assert_int_eq(call("GET", "/v1/models", NULL, NULL, &j), 200);
	ck_assert_int_gt(json_array_size(json_object_get(j, "data")), 3);
	json_decref(j);
	file = upload_count();
	job = create(file, "\"steps\": 4, \"lr\": 0.01", 200);
	j = wait_status(job, "succeeded");
	ck_assert_ptr_nonnull(
	    strstr(str(j, "fine_tuned_model"), "ft:llama_gqa:t:"));
	ck_assert_int_gt(
	    json_integer_value(json_object_get(j, "trained_tokens")), 0);
	json_decref(j);
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/events?limit=50",
		 job);
	ck_assert_int_eq(call("GET", path, NULL, NULL, &ev), 200);
	for (size_t i = 0; i < json_array_size(json_object_get(ev, "data"));
	     i++) {
		const char *m = str(
		    json_array_get(json_object_get(ev, "data"), i), "message");
		done |= strstr(m, "successfully completed") != NULL;
	}
	ck_assert(done);
	json_decref(ev);
	/* the same events as a stream, which ends with the job; and resumed
	 * after an event id */
	{
		char *text, last[128];
		snprintf(path, sizeof(path),
			 "/v1/fine_tuning/jobs/%s/events?stream=true", job);
		text = get_text(path, NULL);
		ck_assert_ptr_nonnull(text);
		ck_assert_ptr_nonnull(strstr(text, "event: metrics\n"));
		ck_assert_ptr_nonnull(strstr(text, "successfully completed"));
		ck_assert_ptr_nonnull(
		    strstr(text, "event: done\ndata: [DONE]"));
		snprintf(last, sizeof(last), "ftevent-%s-3", job + 6);
		ck_assert_ptr_nonnull(strstr(text, last));
		free(text);
		text = get_text(path, last);
		ck_assert_ptr_null(strstr(text, last));
		snprintf(last, sizeof(last), "id: ftevent-%s-4\n", job + 6);
		ck_assert_msg(strncmp(text, last, strlen(last)) == 0, "%s",
			      text);
		free(text);
	}
	/* the file is in use by no unfinished job: it can be deleted */
	snprintf(path, sizeof(path), "/v1/files/%s", file);
	ck_assert_int_eq(call("DELETE", path, NULL, NULL, &j), 200);
	json_decref(j);
	ck_assert_int_eq(call("GET", path, NULL, NULL, &j), 404);
	ck_assert_str_eq(str(json_object_get(j, "error"), "code"), "not_found");
	json_decref(j);
	free(file);
	free(job);
	stop();
}
END_TEST

typedef struct follow_arg {
	char path[256];
	char *text;
} follow_arg;

static void *follow(void *p)
{
	follow_arg *a = p;

	a->text = get_text(a->path, NULL);
	return NULL;
}

START_TEST(test_rejections_and_cancel)
{
	json_t *j;
	char *file, *job, path[256];

	start(64ull << 20); /* 64 MB of "device" */
	file = upload_count();
	/* unknown file */
	ck_assert_int_eq(call("POST", "/v1/fine_tuning/jobs",
			      "{\"model\": \"llama_gqa\", \"training_file\": "
			      "\"file-nope\"}",
			      NULL, &j),
			 400);
	ck_assert_str_eq(str(json_object_get(j, "error"), "param"),
			 "training_file");
	json_decref(j);
	/* a plan that can never fit */
	create(file, "\"steps\": 2, \"batch_size\": 256, \"seq_len\": 4096",
	       400);
	snprintf(path, sizeof(path),
		 "{\"model\": \"llama_gqa\", \"training_file\": \"%s\", "
		 "\"taco\": {\"colour\": 1}}",
		 file);
	ck_assert_int_eq(call("POST", "/v1/fine_tuning/jobs", path, NULL, &j),
			 400);
	ck_assert_str_eq(str(json_object_get(j, "error"), "param"),
			 "taco.colour");
	json_decref(j);
	/* the plan endpoint: the same request, nothing created */
	snprintf(path, sizeof(path),
		 "{\"model\": \"llama_gqa\", \"training_file\": \"%s\", "
		 "\"taco\": {\"seq_len\": 4096, \"steps\": 2}, "
		 "\"hyperparameters\": {\"batch_size\": 256}}",
		 file);
	ck_assert_int_eq(call("POST", "/v1/fine_tuning/plan", path, NULL, &j),
			 200);
	ck_assert(json_is_false(json_object_get(j, "fits")));
	ck_assert_int_gt(json_integer_value(json_object_get(j, "total_bytes")),
			 64 << 20);
	ck_assert_int_gt(json_integer_value(json_object_get(
			     json_object_get(j, "terms"), "weights")),
			 0);
	ck_assert_int_gt(json_integer_value(json_object_get(
			     json_object_get(j, "advice"), "max_batch_size")),
			 0);
	ck_assert_str_eq(str(json_object_get(j, "error"), "code"),
			 "insufficient_memory");
	json_decref(j);
	ck_assert_int_eq(call("GET", "/v1/fine_tuning/jobs", NULL, NULL, &j),
			 200);
	ck_assert_int_eq(json_array_size(json_object_get(j, "data")), 0);
	json_decref(j);
	/* a long job, cancelled while it runs */
	job = create(file, "\"steps\": 100000, \"lr\": 0.01", 200);
	json_decref(wait_status(job, "running"));
	{
		/* a client follows the running job live, until it ends */
		follow_arg fa;
		pthread_t t;
		snprintf(fa.path, sizeof(fa.path),
			 "/v1/fine_tuning/jobs/%s/events?stream=true", job);
		pthread_create(&t, NULL, follow, &fa);
		usleep(1500000);
		snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/cancel",
			 job);
		ck_assert_int_eq(call("POST", path, "{}", NULL, &j), 200);
		json_decref(j);
		pthread_join(t, NULL);
		ck_assert_ptr_nonnull(fa.text);
		ck_assert_ptr_nonnull(strstr(fa.text, "training loss="));
		ck_assert_ptr_nonnull(strstr(fa.text, "was cancelled"));
		ck_assert_ptr_nonnull(strstr(fa.text, "data: [DONE]"));
		free(fa.text);
	}
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/cancel", job);
	json_decref(wait_status(job, "cancelled"));
	ck_assert_int_eq(call("POST", path, "{}", NULL, &j), 400);
	json_decref(j);
	free(file);
	free(job);
	stop();
}
END_TEST

static pid_t spawn_tacod(const char *cfg)
{
	char bin[4096];
	const char *d = getenv("TACO_BIN_DIR");
	pid_t pid;
	json_t *j;

	snprintf(bin, sizeof(bin), "%s/tacod", d ? d : ".");
	pid = fork();
	if (pid == 0) {
		execl(bin, "tacod", "--config", cfg, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 100; i++) { /* until it answers */
		if (access(sock, F_OK) == 0) {
			CURL *c = curl_easy_init();
			char url[] = "http://localhost/healthz";
			curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, sock);
			curl_easy_setopt(c, CURLOPT_URL, url);
			curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
			if (curl_easy_perform(c) == CURLE_OK) {
				curl_easy_cleanup(c);
				(void)j;
				return pid;
			}
			curl_easy_cleanup(c);
		}
		usleep(100000);
	}
	ck_abort_msg("tacod did not start");
	return pid;
}

/* kill -9 of tacod with a job running and one queued: after a restart both
 * finish, the running one from its checkpoint. */
START_TEST(test_kill9_recovery)
{
	char cfg[128], dir[64], path[512];
	const char *bin = getenv("TACO_BIN_DIR");
	pid_t pid;
	json_t *j, *ev;
	char *file, *a, *b;
	FILE *f;
	int restarted = 0, st;

	snprintf(dir, sizeof(dir), "/tmp/tacod-k9-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(sock, sizeof(sock), "%s/sock", dir);
	snprintf(cfg, sizeof(cfg), "%s/tacod.json", dir);
	f = fopen(cfg, "w");
	fprintf(f,
		"{\"listen\": \"\", \"unix_socket\": \"%s\", \"state_dir\": "
		"\"%s/state\", \"models_dir\": \"%s\", \"taco_train\": "
		"\"%s/taco-train\", \"limits\": {\"max_running_jobs\": 1}}",
		sock, dir, tu_fixture("models"), bin ? bin : ".");
	fclose(f);
	pid = spawn_tacod(cfg);
	file = upload_count();
	a = create(file,
		   "\"steps\": 60, \"lr\": 0.01, \"checkpoint_every\": 10, "
		   "\"seq_len\": 768",
		   200);
	b = create(file, "\"steps\": 3", 200);
	json_decref(wait_status(a, "running"));
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/checkpoints", a);
	for (int i = 0; i < 600; i++) {
		ck_assert_int_eq(call("GET", path, NULL, NULL, &j), 200);
		st = (int)json_array_size(json_object_get(j, "data"));
		json_decref(j);
		if (st > 0)
			break;
		usleep(100000);
	}
	ck_assert_int_gt(st, 0);
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s", b);
	ck_assert_int_eq(call("GET", path, NULL, NULL, &j), 200);
	ck_assert_str_eq(str(j, "status"), "queued");
	json_decref(j);
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	unlink(sock);
	pid = spawn_tacod(cfg);
	json_decref(wait_status(a, "succeeded"));
	json_decref(wait_status(b, "succeeded"));
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/events?limit=100",
		 a);
	ck_assert_int_eq(call("GET", path, NULL, NULL, &ev), 200);
	for (size_t i = 0; i < json_array_size(json_object_get(ev, "data"));
	     i++)
		restarted |=
		    strstr(str(json_array_get(json_object_get(ev, "data"), i),
			       "message"),
			   "tacod restarted") != NULL;
	ck_assert(restarted);
	json_decref(ev);
	kill(pid, SIGTERM);
	waitpid(pid, &st, 0);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	free(file);
	free(a);
	free(b);
	sock[0] = 0;
	snprintf(path, sizeof(path), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(path), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tacod");
	TCase *tc = tcase_create("tacod");

	curl_global_init(CURL_GLOBAL_DEFAULT);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_lifecycle);
	tcase_add_test(tc, test_rejections_and_cancel);
	tcase_add_test(tc, test_kill9_recovery);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
