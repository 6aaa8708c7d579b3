/* test_tacod_gguf.c: GGUF files on demand through tacod (docs/gguf.md,
 * "From tacod"): a succeeded job's model and a checkpoint are converted by
 * a taco-train child, listed, shown, downloaded (the same bytes as
 * `taco-train --export-gguf` writes itself) and deleted; a conversion
 * that fails says why; bad requests and other users' jobs are refused.
 * Against a real in-process tacod with taco-train, on the demo model
 * (a byte-level BPE tokenizer, as GGUF needs) and the fixture llama_gqa
 * (no tokenizer.json: its conversion fails). */
#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tacod_harness.h"
#include "testutil.h"

static char models[64];

/* models_dir: the demo model beside the fixture llama_gqa */
static void with_demo(tacod_config *c)
{
	char from[PATH_MAX], to[128];

	snprintf(models, sizeof(models), "/tmp/tacod-gguf-models-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(models));
	ck_assert_ptr_nonnull(
	    realpath(tu_fixture("../../examples/demo/model"), from));
	snprintf(to, sizeof(to), "%s/tacod-demo", models);
	ck_assert_int_eq(symlink(from, to), 0);
	ck_assert_ptr_nonnull(realpath(tu_fixture("models/llama_gqa"), from));
	snprintf(to, sizeof(to), "%s/llama_gqa", models);
	ck_assert_int_eq(symlink(from, to), 0);
	snprintf(c->models_dir, sizeof(c->models_dir), "%s", models);
}

static long call(const char *token, const char *method, const char *path,
		 const char *body, json_t **out)
{
	return th_as(token, method, path, body, NULL, out);
}

/* Polls one GGUF object until it is no longer queued or running. */
static json_t *wait_gguf(const char *job, const char *name)
{
	char path[256];
	json_t *o = NULL;

	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/gguf/%s", job,
		 name);
	for (int i = 0; i < TH_WAIT_TICKS; i++) {
		json_decref(o);
		ck_assert_int_eq(call("alice-t", "GET", path, NULL, &o), 200);
		if (strcmp(th_str(o, "status"), "queued") &&
		    strcmp(th_str(o, "status"), "running"))
			return o;
		usleep(100000);
	}
	ck_abort_msg("%s of %s never finished", name, job);
	return NULL;
}

static json_t *wait_job(const char *id, const char *status)
{
	char path[256];
	json_t *j = NULL;

	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s", id);
	for (int i = 0; i < TH_WAIT_TICKS; i++) {
		json_decref(j);
		ck_assert_int_eq(call("alice-t", "GET", path, NULL, &j), 200);
		if (!strcmp(th_str(j, "status"), status))
			return j;
		ck_assert_msg(strcmp(th_str(j, "status"), "failed"), "%s: %s",
			      id, json_dumps(json_object_get(j, "error"), 0));
		usleep(100000);
	}
	ck_abort_msg("%s never reached %s", id, status);
	return NULL;
}

static char *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *b;
	long n;

	ck_assert_ptr_nonnull(f);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	b = malloc((size_t)n + 1);
	ck_assert_int_eq(fread(b, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return b;
}

/* alice's job: its id. */
static char *create(const char *body)
{
	json_t *j;
	char *id;

	long rc = call("alice-t", "POST", "/v1/fine_tuning/jobs", body, &j);

	ck_assert_msg(rc == 200, "%ld: %s", rc, json_dumps(j, 0));
	id = strdup(th_str(j, "id"));
	json_decref(j);
	return id;
}

static char *upload(const char *path)
{
	json_t *f;
	char *id;

	ck_assert_int_eq(th_call_x("POST", "/v1/files", NULL, path,
				   "Authorization: Bearer alice-t", &f, NULL,
				   NULL),
			 200);
	id = strdup(th_str(f, "id"));
	json_decref(f);
	return id;
}

/* a GGUF's events of the job: how many messages start with prefix */
static int events_with(const char *job, const char *prefix)
{
	char path[256];
	json_t *j, *e;
	size_t i;
	int n = 0;

	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/events?limit=100",
		 job);
	ck_assert_int_eq(call("alice-t", "GET", path, NULL, &j), 200);
	json_array_foreach(json_object_get(j, "data"), i, e)
	{
		n += !strncmp(th_str(e, "message"), prefix, strlen(prefix));
	}
	json_decref(j);
	return n;
}

/* tacoctl ARGS (a shell line) as alice against the test's tacod: its exit
 * status, its stdout and stderr into out. */
static int tacoctl(const char *args, char *out, size_t cap)
{
	char cmd[2048];
	const char *bin = getenv("TACO_BIN_DIR");
	FILE *p;
	size_t n;
	int st;

	snprintf(cmd, sizeof(cmd),
		 "cd %s && TACOD_URL=http://127.0.0.1:%d TACOD_TOKEN=alice-t "
		 "%s/tacoctl %s 2>&1",
		 th_state, th_port, bin ? bin : ".", args);
	p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	n = fread(out, 1, cap - 1, p);
	out[n] = 0;
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(test_gguf_on_demand)
{
	char body[1024], path[512], cmd[2048], file[512], out[8192];
	char stale[512];
	char *train, *job, *bad, *got, *want;
	size_t got_len, want_len;
	json_t *o, *l;

	th_start_users_x(8ull << 30, with_demo);
	train = upload(tu_fixture("../../examples/demo/train.jsonl"));
	snprintf(body, sizeof(body),
		 "{\"model\": \"tacod-demo\", \"training_file\": \"%s\", "
		 "\"hyperparameters\": {\"batch_size\": 4}, \"taco\": "
		 "{\"steps\": 4, \"seq_len\": 32, \"checkpoint_every\": 2}}",
		 train);
	job = create(body);
	json_decref(wait_job(job, "succeeded"));

	/* the final model, q8_0: queued, then converted by taco-train */
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/gguf", job);
	ck_assert_int_eq(
	    call("alice-t", "POST", path, "{\"type\": \"q8_0\"}", &o), 202);
	ck_assert_str_eq(th_str(o, "object"), "fine_tuning.job.gguf");
	ck_assert_str_eq(th_str(o, "id"), "model-q8_0.gguf");
	ck_assert_str_eq(th_str(o, "job_id"), job);
	ck_assert(json_is_null(json_object_get(o, "checkpoint")));
	ck_assert(json_is_null(json_object_get(o, "download_url")));
	json_decref(o);
	o = wait_gguf(job, "model-q8_0.gguf");
	ck_assert_str_eq(th_str(o, "status"), "succeeded");
	ck_assert_str_eq(th_str(o, "type"), "q8_0");
	snprintf(file, sizeof(file),
		 "/v1/fine_tuning/jobs/%s/gguf/model-q8_0.gguf/content", job);
	ck_assert_str_eq(th_str(o, "download_url"), file);
	/* the download is what taco-train --export-gguf writes itself */
	ck_assert_int_eq(th_call_x("GET", file, NULL, NULL,
				   "Authorization: Bearer alice-t", NULL, &got,
				   &got_len),
			 200);
	ck_assert_int_eq(json_integer_value(json_object_get(o, "bytes")),
			 (json_int_t)got_len);
	ck_assert_mem_eq(got, "GGUF", 4);
	json_decref(o);
	snprintf(cmd, sizeof(cmd),
		 "%s/taco-train --export-gguf q8_0 --output %s/direct.gguf "
		 "%s/jobs/%s/job.json >/dev/null",
		 getenv("TACO_BIN_DIR") ? getenv("TACO_BIN_DIR") : ".",
		 th_state, th_state, job);
	ck_assert_int_eq(system(cmd), 0);
	snprintf(path, sizeof(path), "%s/direct.gguf", th_state);
	want = read_all(path, &want_len);
	ck_assert_int_eq(got_len, want_len);
	ck_assert(memcmp(got, want, got_len) == 0);
	free(got);
	free(want);
	ck_assert_int_eq(events_with(job, "Converted to GGUF: model-q8_0.gguf"),
			 1);
	/* asked again: the file, at once */
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/gguf", job);
	ck_assert_int_eq(
	    call("alice-t", "POST", path, "{\"type\": \"q8_0\"}", &o), 200);
	ck_assert_str_eq(th_str(o, "status"), "succeeded");
	json_decref(o);

	/* a checkpoint, by id, in f16; what a conversion of that name left
	 * when tacod was killed goes first */
	snprintf(stale, sizeof(stale),
		 "%s/jobs/%s/out/gguf/step-00000002-f16.gguf.tmp-99999",
		 th_state, job);
	fclose(fopen(stale, "w"));
	snprintf(body, sizeof(body),
		 "{\"type\": \"f16\", \"checkpoint\": \"ftckpt-%s-2\"}",
		 job + 6);
	ck_assert_int_eq(call("alice-t", "POST", path, body, &o), 202);
	json_decref(o);
	o = wait_gguf(job, "step-00000002-f16.gguf");
	ck_assert_str_eq(th_str(o, "status"), "succeeded");
	snprintf(body, sizeof(body), "ftckpt-%s-2", job + 6);
	ck_assert_str_eq(th_str(o, "checkpoint"), body);
	ck_assert_int_eq(json_integer_value(json_object_get(o, "step")), 2);
	json_decref(o);
	ck_assert_int_ne(access(stale, F_OK), 0);

	/* the list: sorted by name, paged */
	ck_assert_int_eq(call("alice-t", "GET", path, NULL, &l), 200);
	ck_assert_int_eq(json_array_size(json_object_get(l, "data")), 2);
	ck_assert_str_eq(
	    th_str(json_array_get(json_object_get(l, "data"), 0), "id"),
	    "model-q8_0.gguf");
	ck_assert_str_eq(
	    th_str(json_array_get(json_object_get(l, "data"), 1), "id"),
	    "step-00000002-f16.gguf");
	ck_assert(json_is_false(json_object_get(l, "has_more")));
	json_decref(l);
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/gguf?limit=1",
		 job);
	ck_assert_int_eq(call("alice-t", "GET", path, NULL, &l), 200);
	ck_assert_int_eq(json_array_size(json_object_get(l, "data")), 1);
	ck_assert(json_is_true(json_object_get(l, "has_more")));
	json_decref(l);
	snprintf(path, sizeof(path),
		 "/v1/fine_tuning/jobs/%s/gguf?after=model-q8_0.gguf", job);
	ck_assert_int_eq(call("alice-t", "GET", path, NULL, &l), 200);
	ck_assert_int_eq(json_array_size(json_object_get(l, "data")), 1);
	ck_assert_str_eq(
	    th_str(json_array_get(json_object_get(l, "data"), 0), "id"),
	    "step-00000002-f16.gguf");
	json_decref(l);

	/* what is refused: an after with a character no file name has
	 * (U+1D4E3, 4 bytes), or longer than a name */
	snprintf(path, sizeof(path),
		 "/v1/fine_tuning/jobs/%s/gguf?after=%%F0%%9D%%93%%A3", job);
	th_expect_error(call("alice-t", "GET", path, NULL, &o), 400, o,
			"invalid_value");
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/gguf?after=%064d",
		 job, 0);
	th_expect_error(call("alice-t", "GET", path, NULL, &o), 400, o,
			"invalid_value");
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/gguf", job);
	th_expect_error(
	    call("alice-t", "POST", path, "{\"type\": \"q4_0\"}", &o), 400, o,
	    "invalid_value");
	th_expect_error(call("alice-t", "POST", path, "{}", &o), 400, o,
			"invalid_value");
	th_expect_error(call("alice-t", "POST", path,
			     "{\"type\": \"f16\", \"quant\": 1}", &o),
			400, o, "unknown_parameter");
	th_expect_error(call("alice-t", "POST", path,
			     "{\"type\": \"f16\", \"checkpoint\": "
			     "\"ftckpt-000000000000000000000000-2\"}",
			     &o),
			404, o, "not_found");
	th_expect_error(call("alice-t", "POST", path,
			     "{\"type\": \"f16\", \"checkpoint\": -1}", &o),
			400, o, "invalid_value");
	th_expect_error(call("alice-t", "POST", path,
			     "{\"type\": \"f16\", \"checkpoint\": 3.0}", &o),
			404, o, "not_found");
	th_expect_error(
	    call("carol-t", "POST", path, "{\"type\": \"f16\"}", &o), 404, o,
	    "not_found");
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/gguf", job);
	th_expect_error(call("carol-t", "GET", path, NULL, &o), 404, o,
			"not_found");
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/gguf/%s", job,
		 "model-bf16.gguf");
	th_expect_error(call("alice-t", "GET", path, NULL, &o), 404, o,
			"not_found");
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/gguf/%s/content",
		 job, "job.json");
	th_expect_error(call("alice-t", "GET", path, NULL, &o), 404, o,
			"not_found");
	th_expect_error(call("carol-t", "GET", file, NULL, &o), 404, o,
			"not_found");

	/* deleted: gone from the disk and the list */
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/gguf/%s", job,
		 "step-00000002-f16.gguf");
	ck_assert_int_eq(call("alice-t", "DELETE", path, NULL, &o), 200);
	ck_assert(json_is_true(json_object_get(o, "deleted")));
	json_decref(o);
	th_expect_error(call("alice-t", "GET", path, NULL, &o), 404, o,
			"not_found");
	snprintf(path, sizeof(path),
		 "%s/jobs/%s/out/gguf/step-00000002-f16.gguf", th_state, job);
	ck_assert_int_ne(access(path, F_OK), 0);

	/* a conversion that fails says why: llama_gqa has no tokenizer.json
	 * (GGUF carries the tokenizer) */
	free(train);
	train = upload(tu_fixture("data/count_train.jsonl"));
	snprintf(body, sizeof(body),
		 "{\"model\": \"llama_gqa\", \"training_file\": \"%s\", "
		 "\"taco\": {\"steps\": 1, \"seq_len\": 24}}",
		 train);
	bad = create(body);
	json_decref(wait_job(bad, "succeeded"));
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/gguf", bad);
	ck_assert_int_eq(
	    call("alice-t", "POST", path, "{\"type\": \"bf16\"}", &o), 202);
	json_decref(o);
	o = wait_gguf(bad, "model-bf16.gguf");
	ck_assert_str_eq(th_str(o, "status"), "failed");
	ck_assert_str_eq(th_str(json_object_get(o, "error"), "code"),
			 "conversion_failed");
	ck_assert_msg(strstr(th_str(json_object_get(o, "error"), "message"),
			     "tokenizer.json"),
		      "%s", th_str(json_object_get(o, "error"), "message"));
	/* no server path in it */
	ck_assert_ptr_null(
	    strstr(th_str(json_object_get(o, "error"), "message"), th_state));
	json_decref(o);
	ck_assert_int_eq(events_with(bad, "GGUF conversion model-bf16.gguf "
					  "failed"),
			 1);
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/gguf/%s", bad,
		 "model-bf16.gguf");
	ck_assert_int_eq(call("alice-t", "DELETE", path, NULL, &o), 200);
	json_decref(o);
	th_expect_error(call("alice-t", "GET", path, NULL, &o), 404, o,
			"not_found");
	/* tacoctl gguf as docs/gguf.md shows it: export (converts, waits,
	 * downloads) a checkpoint and the final model, list, rm */
	snprintf(cmd, sizeof(cmd), "gguf export --type f16 -o ft.gguf %s 4",
		 job);
	ck_assert_int_eq(tacoctl(cmd, out, sizeof(out)), 0);
	ck_assert_msg(!strncmp(out, "ft.gguf: ", 9), "%s", out);
	snprintf(path, sizeof(path),
		 "%s/jobs/%s/out/gguf/step-00000004-f16.gguf", th_state, job);
	want = read_all(path, &want_len);
	snprintf(path, sizeof(path), "%s/ft.gguf", th_state);
	got = read_all(path, &got_len);
	ck_assert(got_len == want_len && !memcmp(got, want, got_len));
	free(got);
	free(want);
	snprintf(cmd, sizeof(cmd), "gguf export %s", job);
	ck_assert_int_eq(tacoctl(cmd, out, sizeof(out)), 0);
	snprintf(path, sizeof(path), "%s/%s-model-q8_0.gguf", th_state,
		 job + 6);
	ck_assert_msg(access(path, F_OK) == 0, "%s", out);
	snprintf(cmd, sizeof(cmd), "gguf export --type bf16 --no-download %s",
		 job);
	ck_assert_int_eq(tacoctl(cmd, out, sizeof(out)), 0);
	ck_assert_msg(!strncmp(out, "model-bf16.gguf: ", 17), "%s", out);
	snprintf(cmd, sizeof(cmd), "gguf list %s", job);
	ck_assert_msg(tacoctl(cmd, out, sizeof(out)) == 0, "%s", out);
	ck_assert_msg(strstr(out, "NAME") && strstr(out, "model-bf16.gguf") &&
			  strstr(out, "model-q8_0.gguf") &&
			  strstr(out, "step-00000004-f16.gguf"),
		      "%s", out);
	snprintf(cmd, sizeof(cmd), "gguf rm %s step-00000004-f16.gguf", job);
	ck_assert_int_eq(tacoctl(cmd, out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "deleted step-00000004-f16.gguf"), "%s", out);
	snprintf(cmd, sizeof(cmd), "gguf list %s", job);
	ck_assert_int_eq(tacoctl(cmd, out, sizeof(out)), 0);
	ck_assert_ptr_null(strstr(out, "step-00000004"));
	/* a conversion that fails: exit status 1, the reason */
	snprintf(cmd, sizeof(cmd), "gguf export --type bf16 %s", bad);
	ck_assert_int_eq(tacoctl(cmd, out, sizeof(out)), 1);
	ck_assert_msg(strstr(out, "failed") && strstr(out, "tokenizer.json"),
		      "%s", out);
	snprintf(cmd, sizeof(cmd), "gguf export --type q4 %s", job);
	ck_assert_int_eq(tacoctl(cmd, out, sizeof(out)), 2);

	free(train);
	free(job);
	free(bad);
	th_stop();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", models);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tacod_gguf");
	TCase *tc = tcase_create("tacod_gguf");

	curl_global_init(CURL_GLOBAL_DEFAULT);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_gguf_on_demand);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
