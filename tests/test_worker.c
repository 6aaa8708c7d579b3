/* test_worker.c: taco-train children under a libuv loop: events in order,
 * exit statuses, stop with a checkpoint, kill. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/runner/worker.h"
#include "testutil.h"

typedef struct seen {
	uv_loop_t *loop;
	char names[256][16];
	int n;
	int64_t status;
	int signal, exited;
	int stop_after_progress; /* 1: stop on the first progress */
	int kill_after_progress;
	int keep; /* the exit callback leaves the worker to the test */
	tacod_worker *w;
} seen;

static void on_event(tacod_worker *w, json_t *e, void *ctx)
{
	seen *s = ctx;
	const char *name = json_string_value(json_object_get(e, "event"));

	if (s->n < 256)
		snprintf(s->names[s->n++], sizeof(s->names[0]), "%s", name);
	if (!strcmp(name, "progress") && s->stop_after_progress) {
		s->stop_after_progress = 0;
		tacod_worker_stop(w, 30000);
	}
	if (!strcmp(name, "progress") && s->kill_after_progress) {
		s->kill_after_progress = 0;
		tacod_worker_kill(w);
	}
}

static void on_exit_cb(tacod_worker *w, int64_t status, int sig, void *ctx)
{
	seen *s = ctx;

	s->status = status;
	s->signal = sig;
	s->exited = 1;
	if (s->keep)
		return;
	if (status && status != 3 && status != 2)
		fprintf(stderr, "worker stderr: %s\n", tacod_worker_stderr(w));
	tacod_worker_free(w);
}

static const char *job_file(char *dir, const char *extra)
{
	static char path[512];
	char model[4096], train[4096];
	FILE *f;

	snprintf(dir, 64, "/tmp/taco-worker-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/job.json", dir);
	/* tu_fixture returns one static buffer: copy each result */
	snprintf(model, sizeof(model), "%s", tu_fixture("models/llama_gqa"));
	snprintf(train, sizeof(train), "%s",
		 tu_fixture("data/count_train.jsonl"));
	f = fopen(path, "w");
	fprintf(f,
		"{\"model\": \"%s\", \"train\": \"%s\", \"output_dir\": "
		"\"%s/out\", \"seq_len\": 24, \"batch_size\": 4, \"lr\": "
		"0.01, %s}",
		model, train, dir, extra);
	fclose(f);
	return path;
}

static void run(seen *s, const char *job)
{
	const tacod_worker_cb cb = {on_event, on_exit_cb};
	taco_err err = {{0}};
	char bin[4096];
	const char *d = getenv("TACO_BIN_DIR");

	snprintf(bin, sizeof(bin), "%s/taco-train", d ? d : ".");
	s->loop = uv_default_loop();
	ck_assert_msg(tacod_worker_start(s->loop, bin, job, 0, NULL, &cb, s,
					 &s->w, &err) == 0,
		      "%s", err.msg);
	uv_run(s->loop, UV_RUN_DEFAULT);
	ck_assert(s->exited);
}

static void rm(const char *dir)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_events_and_success)
{
	seen s = {0};
	char dir[64];

	run(&s, job_file(dir, "\"steps\": 3"));
	ck_assert_int_eq(s.status, 0);
	ck_assert_int_eq(s.signal, 0);
	ck_assert_str_eq(s.names[0], "started");
	ck_assert_str_eq(s.names[1], "progress");
	ck_assert_str_eq(s.names[3], "progress");
	ck_assert_str_eq(s.names[4], "exported");
	ck_assert_str_eq(s.names[s.n - 1], "finished");
	rm(dir);
}
END_TEST

START_TEST(test_stop_checkpoints)
{
	seen s = {0};
	char dir[64];

	s.stop_after_progress = 1;
	run(&s, job_file(dir, "\"steps\": 100000"));
	ck_assert_int_eq(s.status, 3);
	ck_assert_str_eq(s.names[s.n - 2], "checkpoint");
	ck_assert_str_eq(s.names[s.n - 1], "finished");
	rm(dir);
}
END_TEST

START_TEST(test_kill_and_bad_job)
{
	seen s = {0}, t = {0};
	char dir[64], dir2[64];

	s.kill_after_progress = 1;
	run(&s, job_file(dir, "\"steps\": 100000"));
	ck_assert_int_eq(s.signal, SIGKILL);
	rm(dir);
	run(&t, job_file(dir2, "\"stepz\": 3"));
	ck_assert_int_eq(t.status, 2);
	ck_assert_int_eq(t.n, 0);
	rm(dir2);
}
END_TEST

START_TEST(test_missing_binary)
{
	const tacod_worker_cb cb = {on_event, on_exit_cb};
	seen s = {0};
	taco_err err = {{0}};
	tacod_worker *w = NULL;

	ck_assert_int_lt(
	    tacod_worker_start(uv_default_loop(), "/nonexistent/taco-train",
			       "job.json", 0, NULL, &cb, &s, &w, &err),
	    0);
	ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/taco-train"));
	uv_run(uv_default_loop(), UV_RUN_DEFAULT); /* closes the handles */
}
END_TEST

/* A child that writes more to stderr than the tail keeps, in characters of
 * two bytes after one odd byte, so that the half kept starts inside one:
 * the tail shown starts at a character, says it was cut, and ends with the
 * child's last words. */
START_TEST(test_stderr_tail_cut)
{
	const tacod_worker_cb cb = {on_event, on_exit_cb};
	seen s = {0};
	taco_err err = {{0}};
	char dir[64], bin[128];
	const char *tail;
	json_t *j;
	FILE *f;

	snprintf(dir, sizeof(dir), "/tmp/taco-worker-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(bin, sizeof(bin), "%s/noisy", dir);
	f = fopen(bin, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "#!/bin/sh\nprintf x >&2\ni=0\nwhile [ $i -lt %d ]; do "
		   "printf '\\303\\251' >&2; i=$((i+1)); done\n"
		   "echo ' the end' >&2\nexit 1\n",
		TACOD_STDERR_TAIL);
	fclose(f);
	ck_assert_int_eq(chmod(bin, 0755), 0);
	s.loop = uv_default_loop();
	ck_assert_msg(tacod_worker_start(s.loop, bin, "job.json", 0, NULL,
					 &cb, &s, &s.w, &err) == 0,
		      "%s", err.msg);
	s.keep = 1;
	uv_run(s.loop, UV_RUN_DEFAULT);
	ck_assert_int_eq(s.status, 1);
	tail = tacod_worker_stderr(s.w);
	ck_assert_msg(!strncmp(tail, "[cut] \xc3\xa9", 8), "%.40s", tail);
	ck_assert_ptr_nonnull(strstr(tail, "\xc3\xa9 the end\n"));
	j = json_string(tail); /* valid UTF-8 */
	ck_assert_ptr_nonnull(j);
	json_decref(j);
	tacod_worker_free(s.w);
	uv_run(s.loop, UV_RUN_DEFAULT);
	rm(dir);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("worker");
	TCase *tc = tcase_create("worker");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_events_and_success);
	tcase_add_test(tc, test_stop_checkpoints);
	tcase_add_test(tc, test_kill_and_bad_job);
	tcase_add_test(tc, test_missing_binary);
	tcase_add_test(tc, test_stderr_tail_cut);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
