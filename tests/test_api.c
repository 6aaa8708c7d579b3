/* test_api.c: OpenAI-compatible objects and the create-job request. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/job_request.h"
#include "api/model_name.h"
#include "api/objects.h"
#include "testutil.h"

START_TEST(test_objects)
{
	tacod_file f = {.id = "file-abc",
			.user = "u",
			.filename = "t.jsonl",
			.purpose = "fine-tune",
			.bytes = 12,
			.created_at = 5};
	tacod_job j = {.id = "ftjob-xyz",
		       .status = TACOD_QUEUED,
		       .model = "qwen",
		       .training_file = "file-abc",
		       .created_at = 7};
	tacod_event ev = {.job_id = "ftjob-xyz",
			  .seq = 3,
			  .created_at = 9,
			  .level = "info",
			  .type = "metrics",
			  .message = "step 1",
			  .data = "{\"loss\": 1.5}"};
	json_t *o, *items;
	char *s;

	o = tacod_file_object(&f);
	ck_assert_str_eq(json_string_value(json_object_get(o, "object")),
			 "file");
	ck_assert_int_eq(json_integer_value(json_object_get(o, "bytes")), 12);
	/* every field of OpenAI's FileObject: what tacod has not, null */
	ck_assert(json_is_null(json_object_get(o, "expires_at")));
	ck_assert(json_is_null(json_object_get(o, "status_details")));
	ck_assert_str_eq(json_string_value(json_object_get(o, "status")),
			 "processed");
	json_decref(o);

	j.request = strdup("{\"hyperparameters\": {\"n_epochs\": 2}, "
			   "\"seed\": 4, \"taco\": {\"seq_len\": 24}}");
	o = tacod_job_object(&j);
	ck_assert_str_eq(json_string_value(json_object_get(o, "status")),
			 "queued");
	ck_assert(json_is_null(json_object_get(o, "fine_tuned_model")));
	ck_assert(json_is_null(json_object_get(o, "finished_at")));
	ck_assert(json_is_null(json_object_get(o, "validation_file")));
	ck_assert_int_eq(
	    json_integer_value(json_object_get(
		json_object_get(o, "hyperparameters"), "n_epochs")),
	    2);
	/* the values the job runs with, the same in method.supervised */
	ck_assert_int_eq(
	    json_integer_value(json_object_get(
		json_object_get(o, "hyperparameters"), "batch_size")),
	    TACOD_DEFAULT_BATCH);
	ck_assert(json_equal(
	    json_object_get(o, "hyperparameters"),
	    json_object_get(
		json_object_get(json_object_get(o, "method"), "supervised"),
		"hyperparameters")));
	ck_assert_str_eq(json_string_value(json_object_get(
			     json_object_get(o, "method"), "type")),
			 "supervised");
	ck_assert_int_eq(json_integer_value(json_object_get(o, "seed")), 4);
	ck_assert_int_eq(json_integer_value(json_object_get(
			     json_object_get(o, "taco"), "seq_len")),
			 24);
	free(j.request);
	json_decref(o);

	o = tacod_event_object(&ev);
	ck_assert_str_eq(json_string_value(json_object_get(o, "id")),
			 "ftevent-xyz-3");
	ck_assert_str_eq(json_string_value(json_object_get(o, "object")),
			 "fine_tuning.job.event");
	ck_assert(json_real_value(json_object_get(json_object_get(o, "data"),
						  "loss")) == 1.5);
	items = json_array();
	json_array_append_new(items, o);
	o = tacod_list_object(items, 1);
	ck_assert(json_is_true(json_object_get(o, "has_more")));
	ck_assert_str_eq(json_string_value(json_object_get(o, "first_id")),
			 "ftevent-xyz-3");
	json_decref(o);

	o = tacod_error_object("bad", "invalid_request_error", "model", NULL);
	s = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
	ck_assert_str_eq(s, "{\"error\":{\"code\":null,\"message\":\"bad\","
			    "\"param\":\"model\",\"type\":"
			    "\"invalid_request_error\"}}");
	free(s);
	json_decref(o);

	/* One rule for both error shapes: an empty param or code is null, a
	 * missing type is "error". */
	o = tacod_error_object("bad", NULL, "", "");
	s = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
	ck_assert_str_eq(s, "{\"error\":{\"code\":null,\"message\":\"bad\","
			    "\"param\":null,\"type\":\"error\"}}");
	free(s);
	json_decref(o);
	o = tacod_error_fields("worker died", "job_failed", "");
	s = json_dumps(o, JSON_COMPACT);
	ck_assert_str_eq(s, "{\"message\":\"worker died\",\"code\":"
			    "\"job_failed\",\"param\":null}");
	free(s);
	json_decref(o);
}
END_TEST

/* Files: "file-train" and "file-val" exist for this user. */
static int file_path(void *ctx, const char *id, char *path, size_t cap)
{
	(void)ctx;
	if (strcmp(id, "file-train") && strcmp(id, "file-val"))
		return -ENOENT;
	snprintf(path, cap, "/state/files/%s", id);
	return 0;
}

/* Fine-tuned models: "ft:llama_gqa:s:abc" is the user's (its directory
 * the fixture's llama_gqa), "ft:llama_gqa:s:full" fails for want of room. */
static int model_path(void *ctx, const char *name, char *path, size_t cap)
{
	(void)ctx;
	if (!strcmp(name, "ft:llama_gqa:s:full"))
		return -ENOSPC;
	if (strcmp(name, "ft:llama_gqa:s:abc"))
		return -ENOENT;
	snprintf(path, cap, "%s", tu_fixture("models/llama_gqa"));
	return 0;
}

static int request_spec(const char *text, tacod_job_spec *spec,
			tacod_request_error *e)
{
	static char models[4096];
	tacod_request_ctx ctx = {.models_dir = models,
				 .output_dir = "/state/jobs/j1/out",
				 .file_path = file_path,
				 .model_path = model_path};
	json_t *req = json_loads(text, 0, NULL);
	int r;

	/* the fixture models directory: llama_gqa is a model there */
	snprintf(models, sizeof(models), "%s", tu_fixture("models"));
	ck_assert_ptr_nonnull(req);
	r = tacod_job_request(req, &ctx, spec, e);
	json_decref(req);
	return r;
}

/* The job file's text as a JSON object (NULL on a refusal). */
static int request(const char *text, json_t **job, tacod_request_error *e)
{
	tacod_job_spec spec;
	int r = request_spec(text, &spec, e);

	if (r == 0) {
		*job = json_loads(spec.text, JSON_REJECT_DUPLICATES, NULL);
		ck_assert_ptr_nonnull(*job);
		tacod_job_spec_free(&spec);
	}
	return r;
}

/* Model names (api/model_name.h): parsed, formed with the root of the
 * chain, and refused when malformed. */
START_TEST(test_model_names)
{
	static const char *const bad[] = {
	    "",
	    "ft:",
	    "ft:a",
	    "ft:a:s",
	    "ft:a:s:",
	    "ft::s:abc",
	    "ft:a:s:abc:",
	    "ft:a:s:abc:ckpt-step-",
	    "ft:a:s:abc:ckpt-step-01",
	    "ft:a:s:abc:ckpt-step--1",
	    "ft:a:s:abc:step-1",
	    "ft:a:s:abc:ckpt-step-1:x",
	    "ft:a/b:s:abc",
	    "ft:a:s/t:abc",
	    "..",
	    "a b",
	    "ft:a:s:abc:ckpt-step-1234567890123456789",
	};
	tacod_model_name m;
	char out[TACOD_MODEL_NAME_MAX], big[300];

	ck_assert_int_eq(tacod_model_name_parse("llama_gqa", &m), 0);
	ck_assert_int_eq(m.kind, TACOD_MODEL_BASE);
	ck_assert_str_eq(m.root, "llama_gqa");
	ck_assert_int_eq(tacod_model_name_parse("ft:llama_gqa:sdk:0a1b", &m),
			 0);
	ck_assert_int_eq(m.kind, TACOD_MODEL_FINE_TUNED);
	ck_assert_str_eq(m.root, "llama_gqa");
	ck_assert_str_eq(m.suffix, "sdk");
	ck_assert_str_eq(m.job_id, "ftjob-0a1b");
	ck_assert_int_eq(
	    tacod_model_name_parse("ft:llama_gqa::0a1b:ckpt-step-30", &m), 0);
	ck_assert_int_eq(m.kind, TACOD_MODEL_CHECKPOINT);
	ck_assert_str_eq(m.suffix, "");
	ck_assert_int_eq(m.step, 30);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(tacod_model_name_parse(bad[i], &m) == -EINVAL,
			      "'%s' parsed", bad[i]);
	/* a job from a base, from a fine-tuned model, from a checkpoint: the
	 * root stays the base */
	ck_assert_int_eq(tacod_model_name_format("llama_gqa", "a", "ftjob-01",
						 -1, out, sizeof(out)),
			 0);
	ck_assert_str_eq(out, "ft:llama_gqa:a:01");
	ck_assert_int_eq(tacod_model_name_format("ft:llama_gqa:a:01", "b",
						 "ftjob-02", -1, out,
						 sizeof(out)),
			 0);
	ck_assert_str_eq(out, "ft:llama_gqa:b:02");
	ck_assert_int_eq(
	    tacod_model_name_format("ft:llama_gqa:b:02:ckpt-step-4", "",
				    "ftjob-03", 7, out, sizeof(out)),
	    0);
	ck_assert_str_eq(out, "ft:llama_gqa::03:ckpt-step-7");
	ck_assert_int_eq(tacod_model_name_root(out, big, sizeof(big)), 0);
	ck_assert_str_eq(big, "llama_gqa");
	/* the longest names fit the store's columns */
	memset(big, 'm', TACOD_BASE_NAME_MAX);
	big[TACOD_BASE_NAME_MAX] = 0;
	ck_assert_int_eq(
	    tacod_model_name_format(
		big,
		"ssssssssssssssssssssssssssssssssssssssssssssssssssss"
		"ssssssssssss",
		"ftjob-0123456789abcdef01234567", 999999999999999999, out,
		sizeof(out)),
	    0);
	ck_assert_int_eq(tacod_model_name_parse(out, &m), 0);
	ck_assert_int_eq(m.step, 999999999999999999);
	ck_assert_int_eq(tacod_model_name_format("ft:bad", "", "ftjob-1", -1,
						 out, sizeof(out)),
			 -EINVAL);
	ck_assert_int_eq(
	    tacod_model_name_format("llama_gqa", "s", "ftjob-1", -1, out, 8),
	    -ENAMETOOLONG);
}
END_TEST

/* A fine-tuned model as the model: the directory model_path gives; one
 * the user does not have is model_not_found, a server failure is that
 * failure. */
START_TEST(test_request_fine_tuned_model)
{
	tacod_request_error e;
	tacod_job_spec spec;

	ck_assert_int_eq(request_spec("{\"model\": \"ft:llama_gqa:s:abc\", "
				      "\"training_file\": \"file-train\"}",
				      &spec, &e),
			 0);
	ck_assert_str_eq(spec.job.model, tu_fixture("models/llama_gqa"));
	tacod_job_spec_free(&spec);
	ck_assert_int_eq(request_spec("{\"model\": \"ft:llama_gqa:s:other\", "
				      "\"training_file\": \"file-train\"}",
				      &spec, &e),
			 -EINVAL);
	ck_assert_str_eq(e.code, "model_not_found");
	ck_assert_str_eq(e.param, "model");
	ck_assert_int_eq(request_spec("{\"model\": \"ft:llama_gqa:s:full\", "
				      "\"training_file\": \"file-train\"}",
				      &spec, &e),
			 -ENOSPC);
	ck_assert_ptr_nonnull(strstr(e.message, "ft:llama_gqa:s:full"));
	ck_assert_int_eq(request_spec("{\"model\": \"ft:llama_gqa\", "
				      "\"training_file\": \"file-train\"}",
				      &spec, &e),
			 -EINVAL);
	ck_assert_str_eq(e.code, "invalid_model");
}
END_TEST

START_TEST(test_request_defaults_and_mapping)
{
	json_t *job = NULL;
	tacod_request_error e;

	ck_assert_int_eq(
	    request("{\"model\": \"llama_gqa\", \"training_file\": "
		    "\"file-train\"}",
		    &job, &e),
	    0);
	ck_assert_int_eq(json_integer_value(json_object_get(job, "epochs")),
			 TACOD_DEFAULT_EPOCHS);
	ck_assert_int_eq(json_integer_value(json_object_get(job, "batch_size")),
			 TACOD_DEFAULT_BATCH);
	/* the auto rate, which taco-train picks for the model */
	ck_assert_ptr_null(json_object_get(job, "lr"));
	ck_assert(json_real_value(json_object_get(job, "lr_multiplier")) == 1);
	/* the chat template's clock, fixed at the create */
	ck_assert_int_ge(
	    json_integer_value(json_object_get(job, "chat_template_time")),
	    (json_int_t)time(NULL) - 60);
	ck_assert_str_eq(json_string_value(json_object_get(job, "train")),
			 "/state/files/file-train");
	ck_assert_str_eq(json_string_value(json_object_get(job, "output_dir")),
			 "/state/jobs/j1/out");
	json_decref(job);

	ck_assert_int_eq(
	    request("{\"model\": \"llama_gqa\", \"training_file\": "
		    "\"file-train\", \"validation_file\": \"file-val\", "
		    "\"method\": {\"type\": \"supervised\", \"supervised\": "
		    "{\"hyperparameters\": {\"n_epochs\": 2, "
		    "\"batch_size\": 8, \"learning_rate_multiplier\": "
		    "10}}}, \"seed\": 9, \"suffix\": \"run-1\", "
		    "\"metadata\": {\"team\": \"nlp\"}, \"taco\": {"
		    "\"seq_len\": 24, \"steps\": 5, \"taco\": {\"k\": 4}}}",
		    &job, &e),
	    0);
	ck_assert_int_eq(json_integer_value(json_object_get(job, "batch_size")),
			 8);
	ck_assert(json_real_value(json_object_get(job, "lr_multiplier")) == 10);
	ck_assert_int_eq(json_integer_value(json_object_get(job, "steps")), 5);
	ck_assert_ptr_null(json_object_get(job, "epochs"));
	ck_assert_str_eq(json_string_value(json_object_get(job, "validation")),
			 "/state/files/file-val");
	ck_assert_int_eq(json_integer_value(json_object_get(job, "seed")), 9);
	json_decref(job);
}
END_TEST

/* The create hands back the job parsed from the very text it would write:
 * the daemon plans and validates from it and reads no file back. */
START_TEST(test_request_parsed_job)
{
	tacod_job_spec spec;
	tacod_request_error e;
	taco_job_problems probs;
	taco_job again;

	ck_assert_int_eq(
	    request_spec("{\"model\": \"llama_gqa\", \"training_file\": "
			 "\"file-train\", \"validation_file\": \"file-val\", "
			 "\"hyperparameters\": {\"batch_size\": 8}, "
			 "\"seed\": 9, \"taco\": {\"seq_len\": 24, "
			 "\"steps\": 5, \"taco\": {\"k\": 4}, "
			 "\"freeze\": [\"model.embed_tokens\"]}}",
			 &spec, &e),
	    0);
	ck_assert_int_eq(spec.job.batch_size, 8);
	ck_assert_int_eq(spec.job.seq_len, 24);
	ck_assert_int_eq(spec.job.steps, 5);
	ck_assert_int_eq(spec.job.optim.k, 4);
	ck_assert_uint_eq(spec.job.optim.seed, 9);
	ck_assert_int_eq(spec.job.n_freeze, 1);
	ck_assert_str_eq(spec.job.freeze[0], "model.embed_tokens");
	ck_assert_str_eq(spec.job.train, "/state/files/file-train");
	ck_assert_str_eq(spec.job.validation, "/state/files/file-val");
	ck_assert_str_eq(spec.job.output_dir, "/state/jobs/j1/out");
	ck_assert(strstr(spec.job.model, "/llama_gqa"));
	/* the text parses to the same job, as taco-train will parse it */
	ck_assert_int_eq(
	    taco_job_parse(spec.text, strlen(spec.text), NULL, &again, &probs),
	    0);
	ck_assert_str_eq(again.model, spec.job.model);
	ck_assert_int_eq(again.seq_len, spec.job.seq_len);
	ck_assert_int_eq(again.n_freeze, spec.job.n_freeze);
	taco_job_free(&again);
	tacod_job_spec_free(&spec);
	ck_assert_ptr_null(spec.text);
	ck_assert_ptr_null(spec.job.freeze);
}
END_TEST

/* OpenAI's method.supervised.hyperparameters and the deprecated top-level
 * hyperparameters: both are read, and given in both places they agree. */
START_TEST(test_request_hyperparameters_both)
{
	json_t *job = NULL;
	tacod_request_error e;

	/* disjoint fields from each place; the same value in both (2.0 is
	 * the integer 2) */
	ck_assert_int_eq(
	    request("{\"model\": \"llama_gqa\", \"training_file\": "
		    "\"file-train\", \"hyperparameters\": {\"n_epochs\": 2, "
		    "\"learning_rate_multiplier\": 0.5}, \"method\": "
		    "{\"type\": \"supervised\", \"supervised\": "
		    "{\"hyperparameters\": {\"n_epochs\": 2.0, "
		    "\"batch_size\": 16}}}}",
		    &job, &e),
	    0);
	ck_assert_int_eq(json_integer_value(json_object_get(job, "epochs")), 2);
	ck_assert_int_eq(json_integer_value(json_object_get(job, "batch_size")),
			 16);
	ck_assert(json_real_value(json_object_get(job, "lr_multiplier")) ==
		  0.5);
	json_decref(job);
	/* disagreeing: refused, naming method's field */
	ck_assert_int_eq(
	    request("{\"model\": \"llama_gqa\", \"training_file\": "
		    "\"file-train\", \"hyperparameters\": {\"batch_size\": "
		    "8}, \"method\": {\"type\": \"supervised\", "
		    "\"supervised\": {\"hyperparameters\": {\"batch_size\": "
		    "16}}}}",
		    &job, &e),
	    -EINVAL);
	ck_assert_str_eq(e.param,
			 "method.supervised.hyperparameters.batch_size");
	ck_assert_str_eq(e.code, "conflicting_hyperparameters");
	ck_assert_ptr_nonnull(strstr(e.message, "hyperparameters.batch_size"));
	/* "auto" in one place and a value in the other disagree too */
	ck_assert_int_eq(
	    request("{\"model\": \"llama_gqa\", \"training_file\": "
		    "\"file-train\", \"hyperparameters\": "
		    "{\"learning_rate_multiplier\": \"auto\"}, \"method\": "
		    "{\"type\": \"supervised\", \"supervised\": "
		    "{\"hyperparameters\": {\"learning_rate_multiplier\": "
		    "2}}}}",
		    &job, &e),
	    -EINVAL);
	ck_assert_str_eq(
	    e.param,
	    "method.supervised.hyperparameters.learning_rate_multiplier");
}
END_TEST

/* OpenAI's method dpo: the job file's method and dpo.beta, the
 * hyperparameters mapped as a supervised job's (batch_size counting pairs),
 * and the taco options a supervised job takes. */
START_TEST(test_request_dpo)
{
	json_t *job = NULL;
	tacod_request_error e;
	tacod_job_spec spec;

	/* every hyperparameter "auto": tacod's defaults, beta 0.1 */
	ck_assert_int_eq(
	    request(
		"{\"model\": \"llama_gqa\", \"training_file\": "
		"\"file-train\", \"method\": {\"type\": \"dpo\", \"dpo\": "
		"{\"hyperparameters\": {\"beta\": \"auto\", \"batch_size\": "
		"\"auto\", \"learning_rate_multiplier\": \"auto\", "
		"\"n_epochs\": \"auto\"}}}}",
		&job, &e),
	    0);
	ck_assert_str_eq(json_string_value(json_object_get(job, "method")),
			 "dpo");
	ck_assert(json_real_value(
		      json_object_get(json_object_get(job, "dpo"), "beta")) ==
		  TACO_DPO_BETA_DEFAULT);
	ck_assert_int_eq(json_integer_value(json_object_get(job, "batch_size")),
			 TACOD_DEFAULT_BATCH);
	ck_assert_int_eq(json_integer_value(json_object_get(job, "epochs")),
			 TACOD_DEFAULT_EPOCHS);
	/* the auto rate, which taco-train picks for the model */
	ck_assert_ptr_null(json_object_get(job, "lr"));
	ck_assert(json_real_value(json_object_get(job, "lr_multiplier")) == 1);
	json_decref(job);
	/* type dpo alone, no method.dpo: the same */
	ck_assert_int_eq(
	    request_spec("{\"model\": \"llama_gqa\", \"training_file\": "
			 "\"file-train\", \"method\": {\"type\": \"dpo\"}}",
			 &spec, &e),
	    0);
	ck_assert_int_eq(spec.job.method, TACO_METHOD_DPO);
	ck_assert(spec.job.dpo_beta == TACO_DPO_BETA_DEFAULT);
	tacod_job_spec_free(&spec);

	/* values, the top level's too; the parsed job has them */
	ck_assert_int_eq(
	    request_spec("{\"model\": \"llama_gqa\", \"training_file\": "
			 "\"file-train\", \"validation_file\": \"file-val\", "
			 "\"hyperparameters\": {\"n_epochs\": 2}, \"method\": "
			 "{\"type\": \"dpo\", \"dpo\": {\"hyperparameters\": "
			 "{\"beta\": 0.25, \"batch_size\": 2, \"n_epochs\": "
			 "2, \"learning_rate_multiplier\": 0.5}}}}",
			 &spec, &e),
	    0);
	ck_assert_int_eq(spec.job.method, TACO_METHOD_DPO);
	ck_assert(spec.job.dpo_beta == 0.25);
	ck_assert_int_eq(spec.job.batch_size, 2);
	ck_assert(spec.job.lr == 0 && spec.job.lr_multiplier == 0.5);
	ck_assert_str_eq(spec.job.validation, "/state/files/file-val");
	job = json_loads(spec.text, 0, NULL);
	ck_assert_int_eq(json_integer_value(json_object_get(job, "epochs")), 2);
	json_decref(job);
	tacod_job_spec_free(&spec);

	/* beta's limits: (0, 100]; an integer is a number */
	ck_assert_int_eq(
	    request_spec("{\"model\": \"llama_gqa\", \"training_file\": "
			 "\"file-train\", \"method\": {\"type\": \"dpo\", "
			 "\"dpo\": {\"hyperparameters\": {\"beta\": 100}}}}",
			 &spec, &e),
	    0);
	ck_assert(spec.job.dpo_beta == 100);
	tacod_job_spec_free(&spec);
	ck_assert_int_eq(
	    request_spec("{\"model\": \"llama_gqa\", \"training_file\": "
			 "\"file-train\", \"method\": {\"type\": \"dpo\", "
			 "\"dpo\": {\"hyperparameters\": {\"beta\": 1e-9}}}}",
			 &spec, &e),
	    0);
	ck_assert(spec.job.dpo_beta == 1e-9);
	tacod_job_spec_free(&spec);

	/* tacod's options, as a supervised job's */
	ck_assert_int_eq(
	    request_spec("{\"model\": \"llama_gqa\", \"training_file\": "
			 "\"file-train\", \"method\": {\"type\": \"dpo\"}, "
			 "\"taco\": {\"steps\": 7, \"lr\": 5e-7, \"seq_len\": "
			 "24, \"grad_accum\": 2, \"optimizer\": \"adamw\", "
			 "\"freeze\": [\"model.embed_tokens\"]}}",
			 &spec, &e),
	    0);
	ck_assert_int_eq(spec.job.method, TACO_METHOD_DPO);
	ck_assert_int_eq(spec.job.steps, 7);
	ck_assert(spec.job.lr == 5e-7);
	ck_assert_int_eq(spec.job.seq_len, 24);
	ck_assert_int_eq(spec.job.grad_accum, 2);
	ck_assert_int_eq(spec.job.n_freeze, 1);
	tacod_job_spec_free(&spec);

	/* a supervised job's file names no method: sft, the default */
	ck_assert_int_eq(
	    request("{\"model\": \"llama_gqa\", \"training_file\": "
		    "\"file-train\", \"method\": {\"type\": \"supervised\"}}",
		    &job, &e),
	    0);
	ck_assert_ptr_null(json_object_get(job, "method"));
	ck_assert_ptr_null(json_object_get(job, "dpo"));
	json_decref(job);
}
END_TEST

/* The method the job object echoes: its type's hyperparameters, resolved,
 * dpo's with beta. */
START_TEST(test_job_method)
{
	static const struct {
		const char *req, *want;
	} cases[] = {
	    {"{}", "{\"type\":\"supervised\",\"supervised\":{"
		   "\"hyperparameters\":{\"n_epochs\":3,\"batch_size\":4,"
		   "\"learning_rate_multiplier\":1.0}}}"},
	    {"{\"method\": {\"type\": \"dpo\"}}",
	     "{\"type\":\"dpo\",\"dpo\":{\"hyperparameters\":{\"beta\":0.1,"
	     "\"n_epochs\":3,\"batch_size\":4,"
	     "\"learning_rate_multiplier\":1.0}}}"},
	    {"{\"hyperparameters\": {\"batch_size\": 8}, \"method\": "
	     "{\"type\": \"dpo\", \"dpo\": {\"hyperparameters\": {\"beta\": "
	     "0.5, \"n_epochs\": 1, \"learning_rate_multiplier\": \"auto\"}}}}",
	     "{\"type\":\"dpo\",\"dpo\":{\"hyperparameters\":{\"beta\":0.5,"
	     "\"n_epochs\":1,\"batch_size\":8,"
	     "\"learning_rate_multiplier\":1.0}}}"},
	    /* taco.steps and taco.lr, as for supervised */
	    {"{\"method\": {\"type\": \"dpo\", \"dpo\": {\"hyperparameters\": "
	     "{\"beta\": 2}}}, \"taco\": {\"steps\": 4, \"lr\": 2e-6}}",
	     "{\"type\":\"dpo\",\"dpo\":{\"hyperparameters\":{\"beta\":2.0,"
	     "\"n_epochs\":null,\"batch_size\":4,"
	     "\"learning_rate_multiplier\":null}}}"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *req = json_loads(cases[i].req, 0, NULL);
		json_t *m = tacod_job_method(req);
		json_t *want = json_loads(cases[i].want, 0, NULL);
		char *got;

		/* as a client reads it: jansson writes 0.1 in 17 digits */
		ck_assert_ptr_nonnull(m);
		got = json_dumps(m, JSON_COMPACT | JSON_PRESERVE_ORDER);
		ck_assert_msg(json_equal(m, want), "case %zu: %s", i, got);
		free(got);
		json_decref(want);
		json_decref(m);
		json_decref(req);
	}
	{
		json_t *req =
		    json_loads("{\"method\": {\"type\": \"dpo\", \"dpo\": "
			       "{\"hyperparameters\": {\"beta\": 0}}}}",
			       0, NULL);
		ck_assert_ptr_null(tacod_job_method(req));
		json_decref(req);
	}
}
END_TEST

/* A DPO job's object: method as above, hyperparameters as OpenAI fills
 * it (no beta), the same values. */
START_TEST(test_job_object_dpo)
{
	tacod_job j = {.id = "ftjob-dpo",
		       .status = TACOD_VALIDATING,
		       .model = "llama_gqa",
		       .training_file = "file-train",
		       .created_at = 7};
	json_t *o, *m, *mh, *hp;

	j.request = strdup(
	    "{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
	    "\"method\": {\"type\": \"dpo\", \"dpo\": {\"hyperparameters\": "
	    "{\"beta\": 0.3, \"batch_size\": 2}}}}");
	o = tacod_job_object(&j);
	m = json_object_get(o, "method");
	ck_assert_str_eq(json_string_value(json_object_get(m, "type")), "dpo");
	ck_assert_ptr_null(json_object_get(m, "supervised"));
	mh = json_object_get(json_object_get(m, "dpo"), "hyperparameters");
	ck_assert(json_real_value(json_object_get(mh, "beta")) == 0.3);
	hp = json_object_get(o, "hyperparameters");
	ck_assert_ptr_null(json_object_get(hp, "beta"));
	ck_assert_int_eq(json_integer_value(json_object_get(hp, "batch_size")),
			 2);
	json_object_del(mh, "beta");
	ck_assert(json_equal(mh, hp));
	free(j.request);
	json_decref(o);
}
END_TEST

/* The effective hyperparameters, as the job object shows them. */
START_TEST(test_job_hyperparameters)
{
	static const struct {
		const char *req, *want;
	} cases[] = {
	    {"{}", "{\"n_epochs\":3,\"batch_size\":4,"
		   "\"learning_rate_multiplier\":1.0}"},
	    {"{\"hyperparameters\": {\"n_epochs\": \"auto\", "
	     "\"batch_size\": 2}}",
	     "{\"n_epochs\":3,\"batch_size\":2,"
	     "\"learning_rate_multiplier\":1.0}"},
	    {"{\"method\": {\"type\": \"supervised\", \"supervised\": "
	     "{\"hyperparameters\": {\"n_epochs\": 5, "
	     "\"learning_rate_multiplier\": 0.25}}}}",
	     "{\"n_epochs\":5,\"batch_size\":4,"
	     "\"learning_rate_multiplier\":0.25}"},
	    /* taco.lr wins over the multiplier (null: the rate is not a
	     * multiple of the auto one); taco.steps over the epochs */
	    {"{\"hyperparameters\": {\"n_epochs\": 2, "
	     "\"learning_rate_multiplier\": 7}, \"taco\": {\"lr\": 3e-5, "
	     "\"steps\": 10}}",
	     "{\"n_epochs\":null,\"batch_size\":4,"
	     "\"learning_rate_multiplier\":null}"},
	    {"{\"taco\": {\"steps\": null}}",
	     "{\"n_epochs\":3,\"batch_size\":4,"
	     "\"learning_rate_multiplier\":1.0}"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *req = json_loads(cases[i].req, 0, NULL);
		json_t *hp = tacod_job_hyperparameters(req);
		char *got;

		ck_assert_ptr_nonnull(hp);
		got = json_dumps(hp, JSON_COMPACT | JSON_PRESERVE_ORDER);
		ck_assert_msg(!strcmp(got, cases[i].want), "case %zu: %s", i,
			      got);
		free(got);
		json_decref(hp);
		json_decref(req);
	}
	/* not a request tacod accepts: none */
	{
		json_t *req = json_loads(
		    "{\"hyperparameters\": {\"n_epochs\": 0}}", 0, NULL);
		ck_assert_ptr_null(tacod_job_hyperparameters(req));
		json_decref(req);
	}
}
END_TEST

static const struct {
	const char *body, *param, *code;
} bad[] = {
    {"[]", "", "invalid_request"},
    {"{\"training_file\": \"file-train\"}", "model",
     "missing_required_parameter"},
    {"{\"model\": \"../etc\", \"training_file\": \"file-train\"}", "model",
     "invalid_model"},
    {"{\"model\": \"nope\", \"training_file\": \"file-train\"}", "model",
     "model_not_found"},
    {"{\"model\": \"llama_gqa\"}", "training_file",
     "missing_required_parameter"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-other\"}",
     "training_file", "file_not_found"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"colour\": 1}",
     "colour", "unknown_parameter"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"hyperparameters\": {\"n_epochs\": 0}}",
     "hyperparameters.n_epochs", "invalid_hyperparameter"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"hyperparameters\": {\"momentum\": 1}}",
     "hyperparameters.momentum", "unknown_parameter"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"method\": {\"type\": \"reinforcement\", \"reinforcement\": {}}}",
     "method.type", "unsupported_method"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"method\": {\"type\": \"ppo\"}}",
     "method.type", "unsupported_method"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"method\": {\"type\": 1}}",
     "method.type", "missing_required_parameter"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"method\": {\"type\": \"dpo\", \"supervised\": {}}}",
     "method.supervised", "invalid_method"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"method\": {\"type\": \"dpo\", \"reinforcement\": {}}}",
     "method.reinforcement", "invalid_method"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"method\": {\"type\": \"dpo\", \"colour\": 1}}",
     "method.colour", "unknown_parameter"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"method\": {\"type\": \"dpo\", \"dpo\": []}}",
     "method.dpo", "invalid_type"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"method\": {\"type\": \"dpo\", \"dpo\": {\"beta\": 1}}}",
     "method.dpo.beta", "unknown_parameter"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"method\": {\"type\": \"dpo\", \"dpo\": {\"hyperparameters\": "
     "{\"beta\": 0}}}}",
     "method.dpo.hyperparameters.beta", "invalid_hyperparameter"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"method\": {\"type\": \"dpo\", \"dpo\": {\"hyperparameters\": "
     "{\"beta\": -0.5}}}}",
     "method.dpo.hyperparameters.beta", "invalid_hyperparameter"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"method\": {\"type\": \"dpo\", \"dpo\": {\"hyperparameters\": "
     "{\"beta\": 100.5}}}}",
     "method.dpo.hyperparameters.beta", "invalid_hyperparameter"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"method\": {\"type\": \"dpo\", \"dpo\": {\"hyperparameters\": "
     "{\"beta\": \"high\"}}}}",
     "method.dpo.hyperparameters.beta", "invalid_hyperparameter"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"method\": {\"type\": \"dpo\", \"dpo\": {\"hyperparameters\": "
     "{\"beta\": true}}}}",
     "method.dpo.hyperparameters.beta", "invalid_hyperparameter"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"method\": {\"type\": \"dpo\", \"dpo\": {\"hyperparameters\": "
     "{\"beta\": null}}}}",
     "method.dpo.hyperparameters.beta", "invalid_hyperparameter"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"method\": {\"type\": \"dpo\", \"dpo\": {\"hyperparameters\": "
     "{\"batch_size\": 0}}}}",
     "method.dpo.hyperparameters.batch_size", "invalid_hyperparameter"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"method\": {\"type\": \"dpo\", \"dpo\": {\"hyperparameters\": "
     "{\"n_epochs\": 1.5}}}}",
     "method.dpo.hyperparameters.n_epochs", "invalid_hyperparameter"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"method\": {\"type\": \"dpo\", \"dpo\": {\"hyperparameters\": "
     "{\"learning_rate_multiplier\": 0}}}}",
     "method.dpo.hyperparameters.learning_rate_multiplier",
     "invalid_hyperparameter"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"method\": {\"type\": \"dpo\", \"dpo\": {\"hyperparameters\": "
     "{\"momentum\": 0.9}}}}",
     "method.dpo.hyperparameters.momentum", "unknown_parameter"},
    /* beta is DPO's alone */
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"method\": {\"type\": \"supervised\", \"supervised\": "
     "{\"hyperparameters\": {\"beta\": 0.1}}}}",
     "method.supervised.hyperparameters.beta", "unknown_parameter"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"hyperparameters\": {\"beta\": 0.1}, \"method\": {\"type\": "
     "\"dpo\"}}",
     "hyperparameters.beta", "unknown_parameter"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"hyperparameters\": {\"n_epochs\": 1}, \"method\": {\"type\": "
     "\"dpo\", \"dpo\": {\"hyperparameters\": {\"n_epochs\": 2}}}}",
     "method.dpo.hyperparameters.n_epochs", "conflicting_hyperparameters"},
    /* the method is OpenAI's field: taco cannot set it behind method */
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"taco\": {\"method\": \"dpo\"}}",
     "taco.method", "unknown_parameter"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"method\": {\"type\": \"dpo\"}, \"taco\": {\"dpo\": {\"beta\": "
     "0.5}}}",
     "taco.dpo", "unknown_parameter"},
    /* a pair's two sequences are rows of their own */
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"method\": {\"type\": \"dpo\"}, \"taco\": {\"packing\": "
     "true}}",
     "taco.packing", "invalid_option"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"method\": {\"supervised\": {}}}",
     "method.type", "missing_required_parameter"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"method\": \"supervised\"}",
     "method", "invalid_type"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"method\": {\"type\": \"supervised\", \"dpo\": {}}}",
     "method.dpo", "invalid_method"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"method\": {\"type\": \"supervised\", \"supervised\": "
     "{\"hyperparameters\": {\"n_epochs\": \"many\"}}}}",
     "method.supervised.hyperparameters.n_epochs", "invalid_hyperparameter"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"hyperparameters\": {\"n_epochs\": 1}, \"method\": {\"type\": "
     "\"supervised\", \"supervised\": {\"hyperparameters\": "
     "{\"n_epochs\": 2}}}}",
     "method.supervised.hyperparameters.n_epochs",
     "conflicting_hyperparameters"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"suffix\": \"a b\"}",
     "suffix", "invalid_suffix"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"seed\": -1}",
     "seed", "invalid_seed"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"integrations\": [{\"type\": \"wandb\"}]}",
     "integrations", "unsupported_integration"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"taco\": {\"output_dir\": \"/tmp\"}}",
     "taco.output_dir", "unknown_parameter"},
    {"{\"model\": \"llama_gqa\", \"training_file\": \"file-train\", "
     "\"taco\": {\"seq_len\": 1}}",
     "taco.seq_len", "invalid_option"},
};

START_TEST(test_request_errors)
{
	json_t *job = NULL;
	tacod_request_error e;

	ck_assert_int_eq(request(bad[_i].body, &job, &e), -EINVAL);
	ck_assert_ptr_null(job);
	ck_assert_msg(!strcmp(e.param, bad[_i].param) &&
			  !strcmp(e.code, bad[_i].code),
		      "case %d: param '%s' code '%s' (%s)", _i, e.param, e.code,
		      e.message);
	ck_assert(e.message[0]);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("api");
	TCase *tc = tcase_create("api");

	tcase_add_test(tc, test_objects);
	tcase_add_test(tc, test_model_names);
	tcase_add_test(tc, test_request_fine_tuned_model);
	tcase_add_test(tc, test_request_defaults_and_mapping);
	tcase_add_test(tc, test_request_parsed_job);
	tcase_add_test(tc, test_request_hyperparameters_both);
	tcase_add_test(tc, test_job_hyperparameters);
	tcase_add_test(tc, test_request_dpo);
	tcase_add_test(tc, test_job_method);
	tcase_add_test(tc, test_job_object_dpo);
	tcase_add_loop_test(tc, test_request_errors, 0,
			    sizeof(bad) / sizeof(bad[0]));
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
