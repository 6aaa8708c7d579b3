/* test_tacod_chat.c: chat completions under tacod's memory admission
 * (docs/generation.md "In tacod"), against a real in-process tacod whose
 * workers are taco-train --serve on the fixture chat_llama:
 * - a device with room for one worker: a request for a second model stops
 *   the idle worker of the first and is answered;
 * - a device a running job fills: the request waits chat.wait_s, then gets
 *   503 model_busy with Retry-After; the job keeps running (a chat never
 *   evicts a job); once the job ends the same request is answered.
 * The plans are exact on the CPU, so the devices are sized to the byte
 * from the worker's plan (taco_plan_serve_dir) and the job's (POST
 * /v1/fine_tuning/plan). */
#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "plan/plan.h"
#include "tacod_harness.h"
#include "testutil.h"

#define ASK                                                                    \
	"\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], "          \
	"\"max_tokens\": 8, \"temperature\": 0"

/* models_dir: chat_llama twice, as a and b, and llama_gqa for the job */
static char models[64];
static uint64_t device; /* device_memory of the next tacod */
static int chat_wait_s; /* chat.wait_s */
static int chat_idle_s; /* chat.idle_s */

static void tweak(tacod_config *c)
{
	snprintf(c->models_dir, sizeof(c->models_dir), "%s", models);
	c->device_memory = device;
	c->chat.wait_s = chat_wait_s;
	c->chat.idle_s = chat_idle_s;
}

static const char *const links[3][2] = {{"a", "models/chat_llama"},
					{"b", "models/chat_llama"},
					{"llama_gqa", "models/llama_gqa"}};

static void make_models(void)
{
	char link[128];

	snprintf(models, sizeof(models), "/tmp/tacod-chat-models-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(models));
	for (int i = 0; i < 3; i++) {
		snprintf(link, sizeof(link), "%s/%s", models, links[i][0]);
		ck_assert_int_eq(symlink(tu_fixture(links[i][1]), link), 0);
	}
}

static void remove_models(void)
{
	char link[128];

	for (int i = 0; i < 3; i++) {
		snprintf(link, sizeof(link), "%s/%s", models, links[i][0]);
		unlink(link);
	}
	rmdir(models);
}

/* The bytes one worker of chat_llama plans with tacod's defaults. */
static uint64_t serve_plan(void)
{
	taco_plan p;
	taco_err err = {{0}};
	tacod_config c;
	int ctx;

	tacod_config_defaults(&c);
	ck_assert_msg(taco_plan_serve_dir(tu_fixture("models/chat_llama"),
					  TACO_BACKEND_CPU, c.chat.rows,
					  c.chat.context, &p, &ctx, &err) == 0,
		      "%s", err.msg);
	return p.total;
}

/* A chat request: its status, Retry-After ("" for none), the answer's
 * content (on 200) or the error's code in out, and its seconds. */
static long ask(const char *model, char *retry, size_t retry_cap, char *out,
		size_t out_cap, double *seconds)
{
	char body[512];
	json_t *j = NULL;
	struct timespec a, b;
	long st;

	snprintf(body, sizeof(body), "{\"model\": \"%s\", " ASK "}", model);
	clock_gettime(CLOCK_MONOTONIC, &a);
	st = th_call_h("POST", "/v1/chat/completions", body, "Retry-After",
		       retry, retry_cap, &j);
	clock_gettime(CLOCK_MONOTONIC, &b);
	*seconds = (double)(b.tv_sec - a.tv_sec) +
		   (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
	ck_assert_ptr_nonnull(j);
	if (st == 200)
		snprintf(
		    out, out_cap, "%s",
		    json_string_value(json_object_get(
			json_object_get(
			    json_array_get(json_object_get(j, "choices"), 0),
			    "message"),
			"content")));
	else
		snprintf(out, out_cap, "%s",
			 th_str(json_object_get(j, "error"), "code"));
	json_decref(j);
	return st;
}

START_TEST(test_chat_admission)
{
	char retry[32], got[512], first[512], body[512], *file, *job;
	uint64_t serve = serve_plan(), train;
	double secs;
	json_t *j;

	make_models();
	/* room for one worker and not two: b's request stops a's idle
	 * worker, and the same weights give the same greedy answer */
	device = 2 * serve - 1;
	chat_wait_s = 20;
	chat_idle_s = 300;
	th_start(device, tweak);
	ck_assert_int_eq(
	    ask("a", retry, sizeof(retry), first, sizeof(first), &secs), 200);
	ck_assert_int_eq(
	    ask("b", retry, sizeof(retry), got, sizeof(got), &secs), 200);
	ck_assert_str_eq(got, first);
	ck_assert_int_eq(
	    ask("a", retry, sizeof(retry), got, sizeof(got), &secs), 200);
	ck_assert_str_eq(got, first);

	/* the job's plan, asked of the same tacod */
	file = th_upload_count();
	snprintf(body, sizeof(body),
		 "{\"model\": \"llama_gqa\", \"training_file\": \"%s\", "
		 "\"suffix\": \"t\", \"taco\": {\"seq_len\": 24, \"steps\": "
		 "100000}}",
		 file);
	ck_assert_int_eq(
	    th_call("POST", "/v1/fine_tuning/plan", body, NULL, &j), 200);
	train = (uint64_t)json_integer_value(json_object_get(j, "total_bytes"));
	json_decref(j);
	ck_assert_uint_gt(train, 0);
	th_stop();

	/* a device the job fills: the chat waits chat.wait_s, then 503 with
	 * Retry-After, and the job goes on */
	device = train + serve - 1;
	chat_wait_s = 1;
	th_start(device, tweak);
	free(file);
	file = th_upload_count();
	job = th_create(file, "\"steps\": 100000", 200);
	json_decref(th_wait_status(job, "running"));
	ck_assert_int_eq(
	    ask("a", retry, sizeof(retry), got, sizeof(got), &secs), 503);
	ck_assert_str_eq(got, "model_busy");
	ck_assert_msg(atoi(retry) > 0, "Retry-After: '%s'", retry);
	ck_assert_msg(secs >= 0.9, "answered after %.2f s, before chat.wait_s",
		      secs);
	snprintf(body, sizeof(body), "/v1/fine_tuning/jobs/%s", job);
	ck_assert_int_eq(th_call("GET", body, NULL, NULL, &j), 200);
	ck_assert_str_eq(th_str(j, "status"), "running");
	json_decref(j);
	/* the job ends: the same request is answered */
	snprintf(body, sizeof(body), "/v1/fine_tuning/jobs/%s/cancel", job);
	ck_assert_int_eq(th_call("POST", body, NULL, NULL, NULL), 200);
	json_decref(th_wait_status(job, "cancelled"));
	ck_assert_int_eq(
	    ask("a", retry, sizeof(retry), got, sizeof(got), &secs), 200);
	ck_assert_str_eq(got, first);
	ck_assert_str_eq(retry, "");
	free(job);
	free(file);
	th_stop();
	remove_models();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tacod_chat");
	TCase *tc = tcase_create("tacod_chat");

	curl_global_init(CURL_GLOBAL_DEFAULT);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_chat_admission);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
