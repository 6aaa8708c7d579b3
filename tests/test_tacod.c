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

#include "tacod_harness.h"
#include "testutil.h"

START_TEST(test_lifecycle)
{
	json_t *j, *ev;
	char *file, *job, path[256];
	int done = 0;

	th_start(8ull << 30, NULL);
	ck_assert_int_eq(th_call("GET", "/healthz", NULL, NULL, &j), 200);
	json_decref(j);
	ck_assert_int_eq(th_call("GET", "/v1/models", NULL, NULL, &j), 200);
	ck_assert_int_gt(json_array_size(json_object_get(j, "data")), 3);
	json_decref(j);
	file = th_upload_count();
	job = th_create(file, "\"steps\": 4, \"lr\": 0.01", 200);
	j = th_wait_status(job, "succeeded");
	ck_assert_ptr_nonnull(
	    strstr(th_str(j, "fine_tuned_model"), "ft:llama_gqa:t:"));
	ck_assert_int_gt(
	    json_integer_value(json_object_get(j, "trained_tokens")), 0);
	json_decref(j);
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/events?limit=50",
		 job);
	ck_assert_int_eq(th_call("GET", path, NULL, NULL, &ev), 200);
	for (size_t i = 0; i < json_array_size(json_object_get(ev, "data"));
	     i++) {
		const char *m = th_str(
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
		text = th_get_text(path, NULL);
		ck_assert_ptr_nonnull(text);
		ck_assert_ptr_nonnull(strstr(text, "event: metrics\n"));
		ck_assert_ptr_nonnull(strstr(text, "successfully completed"));
		ck_assert_ptr_nonnull(
		    strstr(text, "event: done\ndata: [DONE]"));
		snprintf(last, sizeof(last), "ftevent-%s-3", job + 6);
		ck_assert_ptr_nonnull(strstr(text, last));
		free(text);
		text = th_get_text(path, last);
		ck_assert_ptr_null(strstr(text, last));
		snprintf(last, sizeof(last), "id: ftevent-%s-4\n", job + 6);
		ck_assert_msg(strncmp(text, last, strlen(last)) == 0, "%s",
			      text);
		free(text);
	}
	/* the file is in use by no unfinished job: it can be deleted */
	snprintf(path, sizeof(path), "/v1/files/%s", file);
	ck_assert_int_eq(th_call("DELETE", path, NULL, NULL, &j), 200);
	json_decref(j);
	ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 404);
	ck_assert_str_eq(th_str(json_object_get(j, "error"), "code"),
			 "not_found");
	json_decref(j);
	free(file);
	free(job);
	th_stop();
}
END_TEST

typedef struct follow_arg {
	char path[256];
	char *text;
} follow_arg;

static void *follow(void *p)
{
	follow_arg *a = p;

	a->text = th_get_text(a->path, NULL);
	return NULL;
}

START_TEST(test_rejections_and_cancel)
{
	json_t *j;
	char *file, *job, path[256];

	th_start(64ull << 20, NULL); /* 64 MB of "device" */
	file = th_upload_count();
	/* unknown file */
	ck_assert_int_eq(
	    th_call("POST", "/v1/fine_tuning/jobs",
		    "{\"model\": \"llama_gqa\", \"training_file\": "
		    "\"file-nope\"}",
		    NULL, &j),
	    400);
	ck_assert_str_eq(th_str(json_object_get(j, "error"), "param"),
			 "training_file");
	json_decref(j);
	/* a plan that can never fit */
	th_create(file, "\"steps\": 2, \"batch_size\": 256, \"seq_len\": 4096",
		  400);
	snprintf(path, sizeof(path),
		 "{\"model\": \"llama_gqa\", \"training_file\": \"%s\", "
		 "\"taco\": {\"colour\": 1}}",
		 file);
	ck_assert_int_eq(
	    th_call("POST", "/v1/fine_tuning/jobs", path, NULL, &j), 400);
	ck_assert_str_eq(th_str(json_object_get(j, "error"), "param"),
			 "taco.colour");
	json_decref(j);
	/* the plan endpoint: the same request, nothing created */
	snprintf(path, sizeof(path),
		 "{\"model\": \"llama_gqa\", \"training_file\": \"%s\", "
		 "\"taco\": {\"seq_len\": 4096, \"steps\": 2}, "
		 "\"hyperparameters\": {\"batch_size\": 256}}",
		 file);
	ck_assert_int_eq(
	    th_call("POST", "/v1/fine_tuning/plan", path, NULL, &j), 200);
	ck_assert(json_is_false(json_object_get(j, "fits")));
	ck_assert_int_gt(json_integer_value(json_object_get(j, "total_bytes")),
			 64 << 20);
	ck_assert_int_gt(json_integer_value(json_object_get(
			     json_object_get(j, "terms"), "weights")),
			 0);
	ck_assert_int_gt(json_integer_value(json_object_get(
			     json_object_get(j, "advice"), "max_batch_size")),
			 0);
	ck_assert_str_eq(th_str(json_object_get(j, "error"), "code"),
			 "insufficient_memory");
	json_decref(j);
	ck_assert_int_eq(th_call("GET", "/v1/fine_tuning/jobs", NULL, NULL, &j),
			 200);
	ck_assert_int_eq(json_array_size(json_object_get(j, "data")), 0);
	json_decref(j);
	/* a long job, cancelled while it runs */
	job = th_create(file, "\"steps\": 100000, \"lr\": 0.01", 200);
	json_decref(th_wait_status(job, "running"));
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
		ck_assert_int_eq(th_call("POST", path, "{}", NULL, &j), 200);
		json_decref(j);
		pthread_join(t, NULL);
		ck_assert_ptr_nonnull(fa.text);
		ck_assert_ptr_nonnull(strstr(fa.text, "training loss="));
		ck_assert_ptr_nonnull(strstr(fa.text, "was cancelled"));
		ck_assert_ptr_nonnull(strstr(fa.text, "data: [DONE]"));
		free(fa.text);
	}
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/cancel", job);
	json_decref(th_wait_status(job, "cancelled"));
	ck_assert_int_eq(th_call("POST", path, "{}", NULL, &j), 400);
	json_decref(j);
	free(file);
	free(job);
	th_stop();
}
END_TEST

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
	snprintf(th_sock, sizeof(th_sock), "%s/th_sock", dir);
	snprintf(cfg, sizeof(cfg), "%s/tacod.json", dir);
	f = fopen(cfg, "w");
	fprintf(f,
		"{\"listen\": \"\", \"unix_socket\": \"%s\", \"state_dir\": "
		"\"%s/state\", \"models_dir\": \"%s\", \"taco_train\": "
		"\"%s/taco-train\", \"limits\": {\"max_running_jobs\": 1}}",
		th_sock, dir, tu_fixture("models"), bin ? bin : ".");
	fclose(f);
	pid = th_spawn_tacod(cfg);
	file = th_upload_count();
	a = th_create(file,
		      "\"steps\": 60, \"lr\": 0.01, \"checkpoint_every\": 10, "
		      "\"seq_len\": 768",
		      200);
	b = th_create(file, "\"steps\": 3", 200);
	json_decref(th_wait_status(a, "running"));
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/checkpoints", a);
	for (int i = 0; i < 600; i++) {
		ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 200);
		st = (int)json_array_size(json_object_get(j, "data"));
		json_decref(j);
		if (st > 0)
			break;
		usleep(100000);
	}
	ck_assert_int_gt(st, 0);
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s", b);
	ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 200);
	ck_assert_str_eq(th_str(j, "status"), "queued");
	json_decref(j);
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	unlink(th_sock);
	pid = th_spawn_tacod(cfg);
	json_decref(th_wait_status(a, "succeeded"));
	json_decref(th_wait_status(b, "succeeded"));
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/events?limit=100",
		 a);
	ck_assert_int_eq(th_call("GET", path, NULL, NULL, &ev), 200);
	for (size_t i = 0; i < json_array_size(json_object_get(ev, "data"));
	     i++)
		restarted |=
		    strstr(
			th_str(json_array_get(json_object_get(ev, "data"), i),
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
	th_sock[0] = 0;
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
