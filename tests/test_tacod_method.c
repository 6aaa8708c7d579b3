/* test_tacod_method.c: OpenAI's method through tacod's API: a create or a
 * plan whose data is not of its method's kind (preference pairs for dpo,
 * examples for supervised) is a 400 naming the file and its param, at once;
 * a dpo create with preference pairs is accepted and echoes its method;
 * the plan takes the method as the create does. Against a real in-process
 * tacod on the fixture llama_gqa. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tacod_harness.h"
#include "testutil.h"

/* OpenAI's preference format: a prompt, the answer preferred and the one
 * not. */
static const char pairs[] =
    "{\"input\": {\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}, "
    "\"preferred_output\": [{\"role\": \"assistant\", \"content\": "
    "\"Hello!\"}], \"non_preferred_output\": [{\"role\": \"assistant\", "
    "\"content\": \"Go away.\"}]}\n"
    "{\"input\": {\"messages\": [{\"role\": \"user\", \"content\": "
    "\"2+2?\"}]}, "
    "\"preferred_output\": [{\"role\": \"assistant\", \"content\": \"4\"}], "
    "\"non_preferred_output\": [{\"role\": \"assistant\", \"content\": "
    "\"5\"}]}\n";

/* Uploads text as a file: its id. */
static char *upload(const char *text)
{
	char local[] = "/tmp/tacod-method-XXXXXX";
	json_t *f;
	char *id;
	int fd;

	ck_assert_int_ge(fd = mkstemp(local), 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	ck_assert_int_eq(th_call("POST", "/v1/files", NULL, local, &f), 200);
	unlink(local);
	id = strdup(th_str(f, "id"));
	json_decref(f);
	return id;
}

/* POST path with training_file train, validation_file val (NULL: none)
 * and method (NULL: none): the status, the reply in *j. */
static long post_req(const char *path, const char *train, const char *val,
		     const char *method, const char *taco, json_t **j)
{
	char body[2048], v[128] = "", m[512] = "";

	if (val)
		snprintf(v, sizeof(v), "\"validation_file\": \"%s\", ", val);
	if (method)
		snprintf(m, sizeof(m), "\"method\": %s, ", method);
	snprintf(body, sizeof(body),
		 "{\"model\": \"llama_gqa\", \"training_file\": \"%s\", %s%s"
		 "\"taco\": {\"seq_len\": 24%s%s}}",
		 train, v, m, taco ? ", " : "", taco ? taco : "");
	return th_call("POST", path, body, NULL, j);
}

/* A 400 naming param with code, its message naming the file by id and
 * saying what. */
static void refused(json_t *j, const char *param, const char *code,
		    const char *id, const char *what)
{
	json_t *e = json_object_get(j, "error");
	const char *msg = th_str(e, "message");

	ck_assert_str_eq(th_str(e, "type"), "invalid_request_error");
	ck_assert_str_eq(th_str(e, "param"), param);
	ck_assert_str_eq(th_str(e, "code"), code);
	ck_assert_msg(msg && strstr(msg, id) && strstr(msg, what), "%s", msg);
}

static void cancel(const char *id)
{
	char path[256];
	long st;

	/* validating or queued: cancelled; already failed (this branch's
	 * loader may not read pairs yet): refused; either way it is over */
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/cancel", id);
	st = th_call("POST", path, "{}", NULL, NULL);
	ck_assert_msg(st == 200 || (st >= 400 && st < 500), "cancel: %ld", st);
}

#define JOBS "/v1/fine_tuning/jobs"
#define PLAN "/v1/fine_tuning/plan"
#define DPO "{\"type\": \"dpo\"}"

START_TEST(test_wrong_data_kind)
{
	char *sft, *pref;
	json_t *j;
	const char *const paths[] = {JOBS, PLAN};

	th_start(8ull << 30, NULL);
	sft = th_upload_count(); /* pre-tokenized: supervised */
	pref = upload(pairs);
	for (int p = 0; p < 2; p++) {
		/* a supervised job on pairs, in either file */
		ck_assert_int_eq(post_req(paths[p], pref, NULL, NULL, NULL, &j),
				 400);
		refused(j, "training_file", "invalid_training_file", pref,
			"preference pairs");
		json_decref(j);
		ck_assert_int_eq(post_req(paths[p], sft, pref,
					  "{\"type\": \"supervised\"}", NULL,
					  &j),
				 400);
		refused(j, "validation_file", "invalid_validation_file", pref,
			"method.type dpo");
		json_decref(j);
		/* a dpo job on examples, in either file */
		ck_assert_int_eq(post_req(paths[p], sft, NULL, DPO, NULL, &j),
				 400);
		refused(j, "training_file", "invalid_training_file", sft,
			"supervised examples");
		json_decref(j);
		ck_assert_int_eq(post_req(paths[p], pref, sft, DPO, NULL, &j),
				 400);
		refused(j, "validation_file", "invalid_validation_file", sft,
			"preference pairs");
		json_decref(j);
	}
	/* nothing was created */
	ck_assert_int_eq(th_call("GET", JOBS, NULL, NULL, &j), 200);
	ck_assert_int_eq(json_array_size(json_object_get(j, "data")), 0);
	json_decref(j);
	free(sft);
	free(pref);
	th_stop();
}
END_TEST

/* A dpo create on pairs is accepted (validating_files) and its job object,
 * created and retrieved, echoes the method with the values it runs with;
 * hyperparameters stays OpenAI's three. */
START_TEST(test_dpo_create_echo)
{
	char *pref, *bad, path[256], id[64];
	json_t *j, *m, *h;

	th_start(8ull << 30, NULL);
	pref = upload(pairs);
	ck_assert_int_eq(
	    post_req(
		JOBS, pref, pref,
		"{\"type\": \"dpo\", \"dpo\": {\"hyperparameters\": {\"beta\": "
		"0.25, \"batch_size\": 2, \"n_epochs\": \"auto\"}}}",
		NULL, &j),
	    200);
	ck_assert_str_eq(th_str(j, "status"), "validating_files");
	snprintf(id, sizeof(id), "%s", th_str(j, "id"));
	for (int pass = 0; pass < 2; pass++) {
		m = json_object_get(j, "method");
		ck_assert_str_eq(th_str(m, "type"), "dpo");
		ck_assert_ptr_null(json_object_get(m, "supervised"));
		h = json_object_get(json_object_get(m, "dpo"),
				    "hyperparameters");
		ck_assert(json_real_value(json_object_get(h, "beta")) == 0.25);
		ck_assert_int_eq(
		    json_integer_value(json_object_get(h, "batch_size")), 2);
		ck_assert_int_eq(
		    json_integer_value(json_object_get(h, "n_epochs")), 3);
		ck_assert(json_real_value(json_object_get(
			      h, "learning_rate_multiplier")) == 1.0);
		h = json_object_get(j, "hyperparameters");
		ck_assert_ptr_null(json_object_get(h, "beta"));
		ck_assert_int_eq(
		    json_integer_value(json_object_get(h, "batch_size")), 2);
		ck_assert_str_eq(th_str(j, "validation_file"), pref);
		json_decref(j);
		if (pass)
			break;
		snprintf(path, sizeof(path), JOBS "/%s", id);
		ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 200);
	}
	cancel(id);

	/* a first line that tells nothing: the validation reports it, not
	 * the create */
	bad = upload("not json\n");
	ck_assert_int_eq(post_req(JOBS, bad, NULL, DPO, NULL, &j), 200);
	snprintf(id, sizeof(id), "%s", th_str(j, "id"));
	json_decref(j);
	json_decref(th_wait_status(id, "failed"));
	free(bad);
	free(pref);
	th_stop();
}
END_TEST

/* The plan maps the method as a create does: dpo refuses packing, and a
 * dpo plan on pairs is planned. */
START_TEST(test_plan_takes_method)
{
	char *pref;
	json_t *j;

	th_start(8ull << 30, NULL);
	pref = upload(pairs);
	ck_assert_int_eq(
	    post_req(PLAN, pref, NULL, DPO, "\"packing\": true", &j), 400);
	ck_assert_str_eq(th_str(json_object_get(j, "error"), "param"),
			 "taco.packing");
	ck_assert_str_eq(th_str(json_object_get(j, "error"), "code"),
			 "invalid_option");
	json_decref(j);
	ck_assert_int_eq(post_req(PLAN, pref, NULL,
				  "{\"type\": \"reinforcement\"}", NULL, &j),
			 400);
	ck_assert_str_eq(th_str(json_object_get(j, "error"), "param"),
			 "method.type");
	json_decref(j);
	ck_assert_int_eq(
	    post_req(PLAN, pref, NULL,
		     "{\"type\": \"dpo\", \"dpo\": {\"hyperparameters\": "
		     "{\"beta\": 0.5}}}",
		     NULL, &j),
	    200);
	ck_assert_str_eq(th_str(j, "object"), "fine_tuning.plan");
	ck_assert(json_is_boolean(json_object_get(j, "fits")));
	ck_assert_int_gt(json_integer_value(json_object_get(j, "total_bytes")),
			 0);
	json_decref(j);
	free(pref);
	th_stop();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tacod_method");
	TCase *tc = tcase_create("tacod_method");

	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_wrong_data_kind);
	tcase_add_test(tc, test_dpo_create_echo);
	tcase_add_test(tc, test_plan_takes_method);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
