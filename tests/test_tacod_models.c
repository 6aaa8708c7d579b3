/* test_tacod_models.c: fine-tuning a fine-tuned model (issue 31's first
 * part, docs/tacod.md "Models"): a job from a succeeded job's
 * fine_tuned_model and one from a checkpoint start from those weights; the
 * models list and retrieve show the user's fine-tuned models; another user
 * gets 404s; DELETE removes the weights and refuses the name while a job
 * already running from the model keeps working; the plan takes such a
 * model like a base one. Against a real in-process tacod with taco-train on
 * the fixture llama_gqa. */
#include <check.h>
#include <curl/curl.h>
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/http/auth.h"
#include "tacod_harness.h"
#include "testutil.h"

/* alice's job from model with these taco options: its id. The
 * multiplier makes the fixtures' auto rate (TACO at width <= 256: 1e-2)
 * 3e-3. */
static char *create(const char *model, const char *file, const char *suffix,
		    const char *taco)
{
	char body[1024];
	json_t *j;
	char *id;

	snprintf(body, sizeof(body),
		 "{\"model\": \"%s\", \"training_file\": \"%s\", "
		 "\"suffix\": \"%s\", \"seed\": 3, \"hyperparameters\": "
		 "{\"learning_rate_multiplier\": 0.3}, \"taco\": {\"seq_len\": "
		 "24, %s}}",
		 model, file, suffix, taco);
	ck_assert_int_eq(
	    th_as("alice-t", "POST", "/v1/fine_tuning/jobs", body, NULL, &j),
	    200);
	ck_assert_str_eq(th_str(j, "model"), model);
	id = strdup(th_str(j, "id"));
	json_decref(j);
	return id;
}

static json_t *wait_for(const char *id, const char *status)
{
	char path[256];
	json_t *j = NULL;

	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s", id);
	for (int i = 0; i < TH_WAIT_TICKS; i++) {
		json_decref(j);
		ck_assert_int_eq(th_as("alice-t", "GET", path, NULL, NULL, &j),
				 200);
		if (!strcmp(th_str(j, "status"), status))
			return j;
		ck_assert_msg(strcmp(th_str(j, "status"), "failed"),
			      "%s failed: %s", id,
			      json_dumps(json_object_get(j, "error"), 0));
		usleep(100000);
	}
	ck_abort_msg("%s never reached %s", id, status);
	return NULL;
}

/* Polls until the job has trained a step. */
static void wait_trained(const char *id)
{
	char path[256];
	json_t *j;

	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s", id);
	for (int i = 0;; i++) {
		ck_assert_int_eq(th_as("alice-t", "GET", path, NULL, NULL, &j),
				 200);
		if (json_integer_value(json_object_get(j, "trained_tokens"))) {
			json_decref(j);
			return;
		}
		json_decref(j);
		ck_assert_int_lt(i, TH_WAIT_TICKS);
		usleep(100000);
	}
}

/* The training loss of a job's first step. */
static double first_loss(const char *id)
{
	char path[256];
	json_t *j, *e;
	size_t i;
	double loss = -1;

	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/events?limit=100",
		 id);
	ck_assert_int_eq(th_as("alice-t", "GET", path, NULL, NULL, &j), 200);
	json_array_foreach(json_object_get(j, "data"), i, e)
	{
		json_t *d = json_object_get(e, "data");
		if (json_integer_value(json_object_get(d, "step")) == 1 &&
		    json_object_get(d, "train_loss"))
			loss =
			    json_number_value(json_object_get(d, "train_loss"));
	}
	json_decref(j);
	ck_assert_double_ge(loss, 0);
	return loss;
}

static ino_t inode(const char *path)
{
	struct stat st;

	ck_assert_msg(stat(path, &st) == 0, "no %s", path);
	return st.st_ino;
}

/* The model object of name in the list as token sees it, or NULL. */
static json_t *listed(const char *token, const char *name)
{
	json_t *j, *m, *found = NULL;
	size_t i;

	ck_assert_int_eq(th_as(token, "GET", "/v1/models", NULL, NULL, &j),
			 200);
	json_array_foreach(json_object_get(j, "data"), i, m)
	{
		if (!strcmp(th_str(m, "id"), name))
			found = json_incref(m);
	}
	json_decref(j);
	return found;
}

static long model_call(const char *token, const char *method, const char *name,
		       json_t **out)
{
	char path[512];
	char *esc = curl_easy_escape(NULL, name, 0);

	/* as the SDK sends it: the colons escaped */
	snprintf(path, sizeof(path), "/v1/models/%s", esc);
	curl_free(esc);
	return th_as(token, method, path, NULL, NULL, out);
}

START_TEST(test_fine_tune_a_fine_tuned_model)
{
	char path[1024], body[1024], ft[400], ckpt[512], *file, *a, *b, *c, *d,
	    *e;
	json_t *j, *m;

	th_start_users(8ull << 30);
	ck_assert_int_eq(th_as("alice-t", "POST", "/v1/files", NULL,
			       tu_fixture("data/count_train.jsonl"), &j),
			 200);
	file = strdup(th_str(j, "id"));
	json_decref(j);

	/* job a from the base, checkpoints at steps 2 and 4 */
	a = create("llama_gqa", file, "one",
		   "\"steps\": 4, \"checkpoint_every\": 2, "
		   "\"keep_checkpoints\": 5");
	j = wait_for(a, "succeeded");
	snprintf(ft, sizeof(ft), "%s", th_str(j, "fine_tuned_model"));
	json_decref(j);
	snprintf(body, sizeof(body), "ft:llama_gqa:one:%s", a + 6);
	ck_assert_str_eq(ft, body);
	snprintf(ckpt, sizeof(ckpt), "%s:ckpt-step-2", ft);

	/* the models: alice's fine-tuned one beside the base ones */
	m = listed("alice-t", "llama_gqa");
	ck_assert_ptr_nonnull(m);
	ck_assert_str_eq(th_str(m, "owned_by"), "tacod");
	ck_assert(json_is_null(json_object_get(m, "parent")));
	json_decref(m);
	m = listed("alice-t", ft);
	ck_assert_ptr_nonnull(m);
	ck_assert_str_eq(th_str(m, "object"), "model");
	ck_assert_str_eq(th_str(m, "owned_by"), "alice");
	ck_assert_str_eq(th_str(m, "root"), "llama_gqa");
	ck_assert_str_eq(th_str(m, "parent"), "llama_gqa");
	ck_assert_int_gt(json_integer_value(json_object_get(m, "created")), 0);
	json_decref(m);
	ck_assert_ptr_null(listed("carol-t", ft));
	m = listed("bob-t", ft); /* an admin sees everyone's */
	ck_assert_ptr_nonnull(m);
	json_decref(m);
	ck_assert_int_eq(model_call("alice-t", "GET", ft, &j), 200);
	ck_assert_str_eq(th_str(j, "id"), ft);
	ck_assert_str_eq(th_str(j, "owned_by"), "alice");
	json_decref(j);
	ck_assert_int_eq(model_call("alice-t", "GET", ckpt, &j), 200);
	ck_assert_str_eq(th_str(j, "parent"), "llama_gqa");
	json_decref(j);
	ck_assert_int_eq(model_call("alice-t", "GET", "llama_gqa", &j), 200);
	ck_assert_str_eq(th_str(j, "owned_by"), "tacod");
	json_decref(j);

	/* another user: the same 404 as for a model that does not exist */
	th_expect_error(model_call("carol-t", "GET", ft, &j), 404, j,
			"model_not_found");
	snprintf(body, sizeof(body), "ft:llama_gqa:one:%s", "0123456789ab");
	th_expect_error(model_call("carol-t", "GET", body, &j), 404, j,
			"model_not_found");
	th_expect_error(model_call("carol-t", "DELETE", ft, &j), 404, j,
			"model_not_found");
	snprintf(body, sizeof(body),
		 "{\"model\": \"%s\", \"training_file\": \"%s\"}", ft, file);
	th_expect_error(
	    th_as("carol-t", "POST", "/v1/fine_tuning/jobs", body, NULL, &j),
	    404, j, "model_not_found");
	/* a name tacod did not form (another root) is no model either */
	snprintf(body, sizeof(body), "ft:llama_mha:one:%s", a + 6);
	th_expect_error(model_call("alice-t", "GET", body, &j), 404, j,
			"model_not_found");

	/* the plan of a job from the fine-tuned model; it leaves nothing */
	snprintf(body, sizeof(body),
		 "{\"model\": \"%s\", \"training_file\": \"%s\", \"taco\": "
		 "{\"steps\": 2, \"seq_len\": 24}}",
		 ft, file);
	ck_assert_int_eq(
	    th_as("alice-t", "POST", "/v1/fine_tuning/plan", body, NULL, &j),
	    200);
	ck_assert(json_is_true(json_object_get(j, "fits")));
	ck_assert_int_gt(json_integer_value(json_object_get(j, "total_bytes")),
			 0);
	json_decref(j);
	{
		DIR *dir;
		struct dirent *de;
		snprintf(path, sizeof(path), "%s/jobs", th_state);
		dir = opendir(path);
		ck_assert_ptr_nonnull(dir);
		while ((de = readdir(dir)))
			ck_assert_msg(strncmp(de->d_name, "plan-", 5),
				      "the plan left %s", de->d_name);
		closedir(dir);
	}

	/* job b from a's fine-tuned model: a's weights, so its first step is
	 * already better than a's on the same batch; its name keeps the
	 * root; once it has ended its model directory is gone */
	b = create(ft, file, "two", "\"steps\": 2");
	j = wait_for(b, "succeeded");
	snprintf(body, sizeof(body), "ft:llama_gqa:two:%s", b + 6);
	ck_assert_str_eq(th_str(j, "fine_tuned_model"), body);
	json_decref(j);
	ck_assert_double_lt(first_loss(b), first_loss(a) - 0.05);
	snprintf(path, sizeof(path), "%s/jobs/%s/base", th_state, b);
	ck_assert_int_ne(access(path, F_OK), 0);
	m = listed("alice-t", body);
	ck_assert_ptr_nonnull(m);
	ck_assert_str_eq(th_str(m, "parent"), ft);
	ck_assert_str_eq(th_str(m, "root"), "llama_gqa");
	json_decref(m);

	/* job c from a's checkpoint at step 2: its weights linked, not
	 * copied, beside the base's other files */
	c = create(ckpt, file, "three", "\"steps\": 100000");
	json_decref(wait_for(c, "running"));
	snprintf(path, sizeof(path), "%s/jobs/%s/base/model.safetensors",
		 th_state, c);
	snprintf(body, sizeof(body),
		 "%s/jobs/%s/out/checkpoints/step-00000002/model.safetensors",
		 th_state, a);
	ck_assert(inode(path) == inode(body));
	snprintf(path, sizeof(path), "%s/jobs/%s/base/generation_config.json",
		 th_state, c);
	ck_assert_int_eq(access(path, F_OK), 0);
	wait_trained(c);
	ck_assert_double_lt(first_loss(c), first_loss(a) - 0.02);
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/cancel", c);
	ck_assert_int_eq(th_as("alice-t", "POST", path, "{}", NULL, &j), 200);
	json_decref(j);
	json_decref(wait_for(c, "cancelled"));
	snprintf(path, sizeof(path), "%s/jobs/%s/base", th_state, c);
	ck_assert_int_ne(access(path, F_OK), 0);

	/* job d runs from the fine-tuned model while it is deleted */
	d = create(ft, file, "four", "\"steps\": 100000");
	j = wait_for(d, "running");
	json_decref(j);
	snprintf(path, sizeof(path), "%s/jobs/%s/base/model.safetensors",
		 th_state, d);
	snprintf(body, sizeof(body), "%s/jobs/%s/out/model/model.safetensors",
		 th_state, a);
	ck_assert(inode(path) == inode(body));
	/* a GGUF file of its export_gguf (docs/gguf.md) goes with it */
	snprintf(path, sizeof(path), "%s/jobs/%s/out/gguf", th_state, a);
	ck_assert_int_eq(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/jobs/%s/out/gguf/model-q8_0.gguf",
		 th_state, a);
	fclose(fopen(path, "w"));
	ck_assert_int_eq(model_call("alice-t", "DELETE", ft, &j), 200);
	ck_assert_str_eq(th_str(j, "id"), ft);
	ck_assert(json_is_true(json_object_get(j, "deleted")));
	json_decref(j);
	snprintf(path, sizeof(path), "%s/jobs/%s/out/model", th_state, a);
	ck_assert_int_ne(access(path, F_OK), 0);
	snprintf(path, sizeof(path), "%s/jobs/%s/out/gguf", th_state, a);
	ck_assert_int_ne(access(path, F_OK), 0);
	ck_assert_ptr_null(listed("alice-t", ft));
	th_expect_error(model_call("alice-t", "GET", ft, &j), 404, j,
			"model_not_found");
	th_expect_error(model_call("alice-t", "DELETE", ft, &j), 404, j,
			"model_not_found");
	snprintf(body, sizeof(body),
		 "{\"model\": \"%s\", \"training_file\": \"%s\"}", ft, file);
	th_expect_error(
	    th_as("alice-t", "POST", "/v1/fine_tuning/jobs", body, NULL, &j),
	    404, j, "model_not_found");
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/model/content",
		 a);
	th_expect_error(th_as("alice-t", "GET", path, NULL, NULL, &j), 404, j,
			"not_found");
	/* the job record stays, and so do the checkpoints as models */
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s", a);
	ck_assert_int_eq(th_as("alice-t", "GET", path, NULL, NULL, &j), 200);
	ck_assert_str_eq(th_str(j, "fine_tuned_model"), ft);
	json_decref(j);
	ck_assert_int_eq(model_call("alice-t", "GET", ckpt, &j), 200);
	json_decref(j);
	/* d keeps working: it steps, pauses, resumes from its checkpoint
	 * and steps again */
	wait_trained(d);
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/pause", d);
	ck_assert_int_eq(th_as("alice-t", "POST", path, "{}", NULL, &j), 200);
	json_decref(j);
	json_decref(wait_for(d, "paused"));
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/resume", d);
	ck_assert_int_eq(th_as("alice-t", "POST", path, "{}", NULL, &j), 200);
	json_decref(j);
	json_decref(wait_for(d, "running"));
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/cancel", d);
	ck_assert_int_eq(th_as("alice-t", "POST", path, "{}", NULL, &j), 200);
	json_decref(j);
	json_decref(wait_for(d, "cancelled"));

	/* what cannot be deleted */
	th_expect_error(model_call("alice-t", "DELETE", "llama_gqa", &j), 403,
			j, "model_not_deletable");
	th_expect_error(model_call("alice-t", "DELETE", ckpt, &j), 400, j,
			"model_not_deletable");
	/* a job from a fine-tuned model b made works as well: the chain */
	snprintf(body, sizeof(body), "ft:llama_gqa:two:%s", b + 6);
	e = create(body, file, "five", "\"steps\": 1");
	j = wait_for(e, "succeeded");
	snprintf(path, sizeof(path), "ft:llama_gqa:five:%s", e + 6);
	ck_assert_str_eq(th_str(j, "fine_tuned_model"), path);
	json_decref(j);
	free(file);
	free(a);
	free(b);
	free(c);
	free(d);
	free(e);
	th_stop();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tacod_models");
	TCase *tc = tcase_create("tacod_models");

	curl_global_init(CURL_GLOBAL_DEFAULT);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_fine_tune_a_fine_tuned_model);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
