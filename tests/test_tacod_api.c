/* test_tacod_api.c: tacod's API beyond the lifecycle: pause and resume,
 * Idempotency-Key, the per-user queue limit, /v1/device, /metrics,
 * checkpoint and model downloads as tar, /v1/openapi.yaml, the plan's
 * limit on synchronous validation. */
#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api/types.h"
#include "daemon/http/auth.h"

#include "safetensors/safetensors.h"
#include "tacod_harness.h"
#include "testutil.h"

static void one_at_a_time(tacod_config *c)
{
	c->limits.max_running_jobs = 1;
	c->limits.max_queued_jobs_per_user = 2;
}

/* Whether o, dumped, contains text. */
static int dump_has(json_t *o, const char *text)
{
	char *d = json_dumps(o, 0);
	int has = d && strstr(d, text);

	free(d);
	return has;
}

static void job_path(char *out, size_t cap, const char *id, const char *tail)
{
	snprintf(out, cap, "/v1/fine_tuning/jobs/%s%s", id, tail);
}

static long post(const char *path, json_t **out)
{
	return th_call("POST", path, "{}", NULL, out);
}

START_TEST(test_pause_resume_and_queue_limit)
{
	char *file, *a, *b, *c, path[256];
	json_t *j;

	th_start(8ull << 30, one_at_a_time);
	file = th_upload_count();
	a = th_create(file, "\"steps\": 100000, \"checkpoint_every\": 1000",
		      200);
	json_decref(th_wait_status(a, "running"));
	b = th_create(file, "\"steps\": 3", 200);
	c = th_create(file, "\"steps\": 3", 200);
	/* a running, b and c validating or queued: the user's limit of 2
	 * waiting jobs */
	j = NULL;
	th_create(file, "\"steps\": 3", 429);
	/* once its files are validated, a queued job pauses at once and keeps
	 * its place */
	json_decref(th_wait_status(b, "queued"));
	job_path(path, sizeof(path), b, "/pause");
	ck_assert_int_eq(post(path, &j), 200);
	ck_assert_str_eq(th_str(j, "status"), "paused");
	json_decref(j);
	/* pausing a paused job is a no-op (api/openapi.yaml) */
	ck_assert_int_eq(post(path, &j), 200);
	ck_assert_str_eq(th_str(j, "status"), "paused");
	json_decref(j);
	job_path(path, sizeof(path), b, "/resume");
	ck_assert_int_eq(post(path, &j), 200);
	ck_assert_str_eq(th_str(j, "status"), "queued");
	json_decref(j);
	ck_assert_int_eq(post(path, &j), 409); /* not paused any more */
	ck_assert_str_eq(th_str(json_object_get(j, "error"), "code"),
			 "invalid_state");
	json_decref(j);
	/* the running job checkpoints and stops, then comes back */
	job_path(path, sizeof(path), a, "/pause");
	ck_assert_int_eq(post(path, &j), 200);
	json_decref(j);
	json_decref(th_wait_status(a, "paused"));
	job_path(path, sizeof(path), a, "/checkpoints");
	ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 200);
	ck_assert_int_ge(json_array_size(json_object_get(j, "data")), 1);
	json_decref(j);
	/* with a paused, b and c run (one at a time) and finish */
	json_decref(th_wait_status(b, "succeeded"));
	json_decref(th_wait_status(c, "succeeded"));
	job_path(path, sizeof(path), a, "/resume");
	ck_assert_int_eq(post(path, &j), 200);
	json_decref(j);
	json_decref(th_wait_status(a, "running"));
	job_path(path, sizeof(path), a, "/events?limit=100");
	ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 200);
	ck_assert(dump_has(j, "was paused"));
	json_decref(j);
	job_path(path, sizeof(path), a, "/cancel");
	ck_assert_int_eq(post(path, &j), 200);
	json_decref(j);
	json_decref(th_wait_status(a, "cancelled"));
	job_path(path, sizeof(path), a, "/pause");
	ck_assert_int_eq(post(path, &j), 409);
	json_decref(j);
	free(file);
	free(a);
	free(b);
	free(c);
	th_stop();
}
END_TEST

START_TEST(test_idempotency)
{
	char *file, body[512], *raw = NULL;
	const char *key = "Idempotency-Key: create-1";
	json_t *j1, *j2;
	size_t n;

	th_start(8ull << 30, NULL);
	file = th_upload_count();
	snprintf(body, sizeof(body),
		 "{\"model\": \"llama_gqa\", \"training_file\": \"%s\", "
		 "\"taco\": {\"steps\": 2, \"seq_len\": 24}}",
		 file);
	ck_assert_int_eq(th_call_x("POST", "/v1/fine_tuning/jobs", body, NULL,
				   key, &j1, NULL, NULL),
			 200);
	ck_assert_int_eq(th_call_x("POST", "/v1/fine_tuning/jobs", body, NULL,
				   key, &j2, &raw, &n),
			 200);
	ck_assert_str_eq(th_str(j1, "id"), th_str(j2, "id"));
	free(raw);
	json_decref(j1);
	json_decref(j2);
	/* one job, not two */
	ck_assert_int_eq(
	    th_call("GET", "/v1/fine_tuning/jobs", NULL, NULL, &j2), 200);
	ck_assert_int_eq(json_array_size(json_object_get(j2, "data")), 1);
	json_decref(j2);
	/* the same key for another request */
	body[strlen(body) - 3] = '3';
	ck_assert_int_eq(th_call_x("POST", "/v1/fine_tuning/jobs", body, NULL,
				   key, &j2, NULL, NULL),
			 409);
	ck_assert_str_eq(th_str(json_object_get(j2, "error"), "code"),
			 "idempotency_key_reused");
	json_decref(j2);
	/* uploads too */
	ck_assert_int_eq(th_call_x("POST", "/v1/files", NULL,
				   tu_fixture("data/count_train.jsonl"),
				   "Idempotency-Key: up-1", &j2, NULL, NULL),
			 200);
	ck_assert_int_eq(th_call_x("POST", "/v1/files", NULL,
				   tu_fixture("data/count_train.jsonl"),
				   "Idempotency-Key: up-1", &j1, NULL, NULL),
			 200);
	ck_assert_str_eq(th_str(j1, "id"), th_str(j2, "id"));
	/* deleting the file forgets its key: the same key uploads anew and
	 * the new id is there */
	snprintf(body, sizeof(body), "/v1/files/%s", th_str(j1, "id"));
	ck_assert_int_eq(th_call("DELETE", body, NULL, NULL, NULL), 200);
	json_decref(j2);
	ck_assert_int_eq(th_call_x("POST", "/v1/files", NULL,
				   tu_fixture("data/count_train.jsonl"),
				   "Idempotency-Key: up-1", &j2, &raw, &n),
			 200);
	free(raw);
	ck_assert_str_ne(th_str(j1, "id"), th_str(j2, "id"));
	snprintf(body, sizeof(body), "/v1/files/%s", th_str(j2, "id"));
	ck_assert_int_eq(th_call("GET", body, NULL, NULL, NULL), 200);
	json_decref(j1);
	/* ... and a retry of that upload replays it */
	ck_assert_int_eq(th_call_x("POST", "/v1/files", NULL,
				   tu_fixture("data/count_train.jsonl"),
				   "Idempotency-Key: up-1", &j1, NULL, NULL),
			 200);
	ck_assert_str_eq(th_str(j1, "id"), th_str(j2, "id"));
	json_decref(j1);
	json_decref(j2);
	free(file);
	th_stop();
}
END_TEST

/* ustar members: checks each header's checksum, returns the offset of the
 * member whose name ends with suffix (its data) and its size. */
static int tar_find(const char *t, size_t len, const char *suffix, size_t *off,
		    size_t *size, int *count)
{
	size_t pos = 0;
	int found = 0;

	*count = 0;
	while (pos + 512 <= len && t[pos]) {
		unsigned sum = 0, want = (unsigned)strtoul(t + pos + 148, 0, 8);
		size_t sz = strtoull(t + pos + 124, NULL, 8);
		char name[101];
		for (int i = 0; i < 512; i++)
			sum += i >= 148 && i < 156 ? ' '
						   : (unsigned char)t[pos + i];
		ck_assert_uint_eq(sum, want);
		ck_assert(!memcmp(t + pos + 257, "ustar", 5));
		memcpy(name, t + pos, 100);
		name[100] = 0;
		(*count)++;
		if (strlen(name) >= strlen(suffix) &&
		    !strcmp(name + strlen(name) - strlen(suffix), suffix)) {
			*off = pos + 512;
			*size = sz;
			found = 1;
		}
		pos += 512 + (sz + 511) / 512 * 512;
	}
	ck_assert_uint_eq(len, pos + 1024); /* two zero blocks end it */
	return found;
}

static void check_weights(const char *t, size_t off, size_t size)
{
	taco_st_file *f = NULL;
	taco_err err = {{0}};

	ck_assert_msg(taco_st_parse(t + off, size, "download", &f, &err) == 0,
		      "%s", err.msg);
	ck_assert_int_gt(taco_st_count(f), 5);
	taco_st_close(f);
}

START_TEST(test_downloads_device_metrics)
{
	char *file, *job, path[256], *raw, cid[128];
	json_t *j, *c;
	size_t n, off, size;
	int count;

	th_start(8ull << 30, NULL);
	ck_assert_int_eq(th_call_x("GET", "/v1/openapi.yaml", NULL, NULL, NULL,
				   NULL, &raw, &n),
			 200);
	ck_assert(!strncmp(raw, "openapi:", 8));
	free(raw);
	file = th_upload_count();
	job = th_create(file, "\"steps\": 4, \"checkpoint_every\": 2", 200);
	/* not finished yet: no model */
	job_path(path, sizeof(path), job, "/model/content");
	ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 404);
	json_decref(j);
	json_decref(th_wait_status(job, "succeeded"));
	job_path(path, sizeof(path), job, "/checkpoints");
	ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 200);
	c = json_array_get(json_object_get(j, "data"), 0);
	ck_assert_ptr_nonnull(c);
	ck_assert_ptr_nonnull(
	    strstr(th_str(c, "fine_tuned_model_checkpoint"), ":ckpt-step-"));
	snprintf(cid, sizeof(cid), "%s", th_str(c, "id"));
	json_decref(j);
	snprintf(path, sizeof(path),
		 "/v1/fine_tuning/jobs/%s/checkpoints/%s/content", job, cid);
	ck_assert_int_eq(
	    th_call_x("GET", path, NULL, NULL, NULL, NULL, &raw, &n), 200);
	ck_assert(tar_find(raw, n, "/config.json", &off, &size, &count));
	ck_assert(
	    tar_find(raw, n, "/generation_config.json", &off, &size, &count));
	ck_assert(tar_find(raw, n, "/model.safetensors", &off, &size, &count));
	check_weights(raw, off, size);
	free(raw);
	snprintf(path, sizeof(path),
		 "/v1/fine_tuning/jobs/%s/checkpoints/ftckpt-x-999/content",
		 job);
	ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 404);
	json_decref(j);
	job_path(path, sizeof(path), job, "/model/content");
	ck_assert_int_eq(
	    th_call_x("GET", path, NULL, NULL, NULL, NULL, &raw, &n), 200);
	ck_assert(tar_find(raw, n, "/config.json", &off, &size, &count));
	ck_assert(tar_find(raw, n, "/model.safetensors", &off, &size, &count));
	check_weights(raw, off, size);
	free(raw);
	/* events page newest first; `after` continues below the last one */
	{
		json_t *p1, *p2;
		char last[128];
		job_path(path, sizeof(path), job, "/events?limit=2");
		ck_assert_int_eq(th_call("GET", path, NULL, NULL, &p1), 200);
		ck_assert(json_is_true(json_object_get(p1, "has_more")));
		snprintf(last, sizeof(last), "%s", th_str(p1, "last_id"));
		snprintf(path, sizeof(path),
			 "/v1/fine_tuning/jobs/%s/events?limit=2&after=%s", job,
			 last);
		ck_assert_int_eq(th_call("GET", path, NULL, NULL, &p2), 200);
		ck_assert_int_eq(json_array_size(json_object_get(p2, "data")),
				 2);
		ck_assert_int_eq(
		    strtoll(strrchr(th_str(p2, "first_id"), '-') + 1, NULL, 10),
		    strtoll(strrchr(last, '-') + 1, NULL, 10) - 1);
		json_decref(p1);
		json_decref(p2);
	}
	/* the device and the metrics */
	ck_assert_int_eq(th_call("GET", "/v1/device", NULL, NULL, &j), 200);
	ck_assert_str_eq(th_str(j, "object"), "device");
	ck_assert_str_eq(th_str(j, "backend"), "cpu");
	ck_assert_int_eq(json_integer_value(json_object_get(j, "memory_total")),
			 8ll << 30);
	ck_assert(json_is_array(json_object_get(j, "running_jobs")));
	ck_assert_uint_gt(strlen(th_str(j, "name")), 0);
	json_decref(j);
	ck_assert_int_eq(
	    th_call_x("GET", "/metrics", NULL, NULL, NULL, NULL, &raw, &n),
	    200);
	ck_assert_ptr_nonnull(
	    strstr(raw, "tacod_jobs{status=\"succeeded\"} 1\n"));
	ck_assert_ptr_nonnull(strstr(raw, "tacod_queue_depth 0\n"));
	ck_assert_ptr_nonnull(
	    strstr(raw, "tacod_http_requests_total{code=\"200\"}"));
	ck_assert_ptr_nonnull(
	    strstr(raw, "tacod_http_requests_total{code=\"404\"} 2\n"));
	free(raw);
	/* keep_checkpoints 2 of 5 written: the list shows the 2 kept, and
	 * each of them downloads */
	free(job);
	job = th_create(file,
			"\"steps\": 10, \"checkpoint_every\": 2, "
			"\"keep_checkpoints\": 2",
			200);
	json_decref(th_wait_status(job, "succeeded"));
	job_path(path, sizeof(path), job, "/checkpoints");
	ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 200);
	ck_assert_int_eq(json_array_size(json_object_get(j, "data")), 2);
	for (size_t i = 0; i < 2; i++) {
		c = json_array_get(json_object_get(j, "data"), i);
		snprintf(path, sizeof(path),
			 "/v1/fine_tuning/jobs/%s/checkpoints/%s/content", job,
			 th_str(c, "id"));
		ck_assert_int_eq(
		    th_call_x("GET", path, NULL, NULL, NULL, NULL, &raw, &n),
		    200);
		free(raw);
	}
	json_decref(j);
	free(file);
	free(job);
	th_stop();
}
END_TEST

static char root_dir[64];

static void with_root(tacod_config *c)
{
	c->n_roots = 1;
	snprintf(c->roots[0], sizeof(c->roots[0]), "%s", root_dir);
}

static long create_path(const char *train, json_t **j)
{
	char body[1024];

	snprintf(body, sizeof(body),
		 "{\"model\": \"llama_gqa\", \"training_file\": \"%s\", "
		 "\"taco\": {\"steps\": 2, \"seq_len\": 24}}",
		 train);
	return th_call("POST", "/v1/fine_tuning/jobs", body, NULL, j);
}

/* Datasets by path: only inside dataset_roots, symlinks and ".." resolved
 * before the check. */
START_TEST(test_dataset_roots)
{
	char cmd[512], path[256];
	json_t *j;

	snprintf(root_dir, sizeof(root_dir), "/tmp/tacod-root-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(root_dir));
	snprintf(cmd, sizeof(cmd),
		 "cp '%s' %s/train.jsonl && ln -s /etc/hostname %s/escape",
		 tu_fixture("data/count_train.jsonl"), root_dir, root_dir);
	ck_assert_int_eq(system(cmd), 0);
	th_start(8ull << 30, with_root);
	snprintf(path, sizeof(path), "%s/train.jsonl", root_dir);
	ck_assert_msg(create_path(path, &j) == 200, "%s", json_dumps(j, 0));
	ck_assert_str_eq(th_str(j, "training_file"), path);
	json_decref(th_wait_status(th_str(j, "id"), "succeeded"));
	json_decref(j);
	snprintf(path, sizeof(path), "%s/escape", root_dir);
	ck_assert_int_eq(create_path(path, &j), 400);
	ck_assert_str_eq(th_str(json_object_get(j, "error"), "code"),
			 "path_not_allowed");
	json_decref(j);
	snprintf(path, sizeof(path), "%s/../../etc/hostname", root_dir);
	ck_assert_int_eq(create_path(path, &j), 400);
	ck_assert_str_eq(th_str(json_object_get(j, "error"), "code"),
			 "path_not_allowed");
	json_decref(j);
	snprintf(path, sizeof(path), "%s/missing.jsonl", root_dir);
	ck_assert_int_eq(create_path(path, &j), 400);
	ck_assert_str_eq(th_str(json_object_get(j, "error"), "code"),
			 "file_not_found");
	json_decref(j);
	th_stop();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root_dir);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* A plan or create whose training file is empty or malformed names the
 * file by its id in every message, never by where tacod keeps it (and the
 * harness fails any reply that names the state directory). The create is
 * accepted (its data is validated in the background) and the job fails:
 * its error and its events name the file by id. */
START_TEST(test_bad_training_file_named_by_id)
{
	static const char *const bodies[] = {"", "not json\n",
					     "{\"messages\": 3}\n"};
	char local[] = "/tmp/tacod-bad-XXXXXX", body[512], job[64];
	char path[256];
	json_t *j, *f;
	int fd;

	th_start(8ull << 30, NULL);
	for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
		const char *id, *msg;
		long st;

		snprintf(local, sizeof(local), "/tmp/tacod-bad-XXXXXX");
		ck_assert_int_ge(fd = mkstemp(local), 0);
		ck_assert_int_eq(write(fd, bodies[i], strlen(bodies[i])),
				 (ssize_t)strlen(bodies[i]));
		close(fd);
		st = th_call("POST", "/v1/files", NULL, local, &f);
		unlink(local);
		if (st != 200) { /* an empty upload may be refused at once */
			ck_assert_int_eq(st, 400);
			json_decref(f);
			continue;
		}
		id = th_str(f, "id");
		snprintf(body, sizeof(body),
			 "{\"model\": \"llama_gqa\", \"training_file\": "
			 "\"%s\", \"taco\": {\"seq_len\": 24}}",
			 id);
		ck_assert_int_eq(
		    th_call("POST", "/v1/fine_tuning/plan", body, NULL, &j),
		    200);
		msg = th_str(json_object_get(j, "error"), "message");
		ck_assert_msg(msg && strstr(msg, id), "plan: %s", msg);
		json_decref(j);
		ck_assert_int_eq(
		    th_call("POST", "/v1/fine_tuning/jobs", body, NULL, &j),
		    200);
		ck_assert_str_eq(th_str(j, "status"), "validating_files");
		snprintf(job, sizeof(job), "%s", th_str(j, "id"));
		json_decref(j);
		j = th_wait_status(job, "failed");
		ck_assert_str_eq(th_str(json_object_get(j, "error"), "code"),
				 "invalid_training_file");
		msg = th_str(json_object_get(j, "error"), "message");
		ck_assert_msg(msg && strstr(msg, id), "create: %s", msg);
		json_decref(j);
		job_path(path, sizeof(path), job, "/events?limit=100");
		ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 200);
		ck_assert(dump_has(j, id));
		json_decref(j);
		json_decref(f);
	}
	th_stop();
}
END_TEST

/* GET /v1/fine_tuning/jobs?metadata[key]=value lists the jobs whose
 * metadata holds every pair given (OpenAI's filter), paging included. */
START_TEST(test_list_by_metadata)
{
	static const char *const meta[] = {
	    "{\"team\": \"nlp\", \"run\": \"a\"}",
	    "{\"team\": \"nlp\", \"run\": \"b\"}",
	    "{\"team\": \"vision\"}",
	    "null",
	};
	char *file, body[512], ids[4][TACOD_ID_MAX];
	json_t *j, *d;

	th_start(8ull << 30, NULL);
	file = th_upload_count();
	for (int i = 0; i < 4; i++) {
		snprintf(body, sizeof(body),
			 "{\"model\": \"llama_gqa\", \"training_file\": "
			 "\"%s\", \"metadata\": %s, \"taco\": {\"steps\": 1, "
			 "\"seq_len\": 24}}",
			 file, meta[i]);
		ck_assert_int_eq(
		    th_call("POST", "/v1/fine_tuning/jobs", body, NULL, &j),
		    200);
		snprintf(ids[i], sizeof(ids[i]), "%s", th_str(j, "id"));
		json_decref(j);
	}
	ck_assert_int_eq(th_call("GET",
				 "/v1/fine_tuning/jobs?metadata[team]=nlp",
				 NULL, NULL, &j),
			 200);
	d = json_object_get(j, "data");
	ck_assert_int_eq(json_array_size(d), 2); /* newest first */
	ck_assert_str_eq(th_str(json_array_get(d, 0), "id"), ids[1]);
	ck_assert_str_eq(th_str(json_array_get(d, 1), "id"), ids[0]);
	json_decref(j);
	/* every pair must match; pages of one */
	ck_assert_int_eq(
	    th_call("GET",
		    "/v1/fine_tuning/jobs?metadata[team]=nlp&metadata[run]=a",
		    NULL, NULL, &j),
	    200);
	d = json_object_get(j, "data");
	ck_assert_int_eq(json_array_size(d), 1);
	ck_assert_str_eq(th_str(json_array_get(d, 0), "id"), ids[0]);
	json_decref(j);
	ck_assert_int_eq(th_call("GET",
				 "/v1/fine_tuning/jobs?metadata[team]=nlp"
				 "&limit=1",
				 NULL, NULL, &j),
			 200);
	ck_assert(json_is_true(json_object_get(j, "has_more")));
	ck_assert_str_eq(
	    th_str(json_array_get(json_object_get(j, "data"), 0), "id"),
	    ids[1]);
	json_decref(j);
	snprintf(body, sizeof(body),
		 "/v1/fine_tuning/jobs?metadata[team]=nlp&limit=1&after=%s",
		 ids[1]);
	ck_assert_int_eq(th_call("GET", body, NULL, NULL, &j), 200);
	ck_assert(json_is_false(json_object_get(j, "has_more")));
	ck_assert_str_eq(
	    th_str(json_array_get(json_object_get(j, "data"), 0), "id"),
	    ids[0]);
	json_decref(j);
	ck_assert_int_eq(th_call("GET",
				 "/v1/fine_tuning/jobs?metadata[team]=none",
				 NULL, NULL, &j),
			 200);
	ck_assert_int_eq(json_array_size(json_object_get(j, "data")), 0);
	json_decref(j);
	/* limit is 1 to 100, as the spec says, not clamped */
	ck_assert_int_eq(
	    th_call("GET", "/v1/fine_tuning/jobs?limit=101", NULL, NULL, &j),
	    400);
	ck_assert_str_eq(th_str(json_object_get(j, "error"), "param"), "limit");
	json_decref(j);
	ck_assert_int_eq(th_call("GET", "/v1/files?limit=0", NULL, NULL, &j),
			 400);
	json_decref(j);
	snprintf(body, sizeof(body), "/v1/fine_tuning/jobs/%s/events?limit=x",
		 ids[0]);
	ck_assert_int_eq(th_call("GET", body, NULL, NULL, &j), 400);
	json_decref(j);
	ck_assert_int_eq(
	    th_call("GET", "/v1/fine_tuning/jobs?limit=100", NULL, NULL, &j),
	    200);
	json_decref(j);
	/* no filter: all four; a malformed filter is refused */
	ck_assert_int_eq(th_call("GET", "/v1/fine_tuning/jobs", NULL, NULL, &j),
			 200);
	ck_assert_int_eq(json_array_size(json_object_get(j, "data")), 4);
	json_decref(j);
	ck_assert_int_eq(th_call("GET", "/v1/fine_tuning/jobs?metadata[team=x",
				 NULL, NULL, &j),
			 400);
	ck_assert_str_eq(th_str(json_object_get(j, "error"), "code"),
			 "invalid_metadata");
	json_decref(j);
	for (int i = 0; i < 4; i++) {
		snprintf(body, sizeof(body), "/v1/fine_tuning/jobs/%s/cancel",
			 ids[i]);
		th_call("POST", body, NULL, NULL, NULL);
	}
	free(file);
	th_stop();
}
END_TEST

static void small_sync_limit(tacod_config *c)
{
	c->limits.max_sync_validate_bytes = 1000;
}

/* The plan reads the data only up to limits.max_sync_validate_bytes, and
 * says so: above it, the memory plan without a validation, and a note. */
START_TEST(test_plan_sync_validation_limit)
{
	char body[512], *file;
	json_t *j;

	for (int small = 0; small < 2; small++) {
		th_start(8ull << 30, small ? small_sync_limit : NULL);
		file = th_upload_count();
		snprintf(body, sizeof(body),
			 "{\"model\": \"llama_gqa\", \"training_file\": "
			 "\"%s\", \"taco\": {\"seq_len\": 24}}",
			 file);
		ck_assert_int_eq(
		    th_call("POST", "/v1/fine_tuning/plan", body, NULL, &j),
		    200);
		ck_assert(json_is_true(json_object_get(j, "fits")));
		ck_assert_ptr_null(json_object_get(j, "error"));
		ck_assert_int_eq(
		    json_integer_value(json_object_get(j, "data_bytes")),
		    103137);
		ck_assert_int_eq(json_integer_value(json_object_get(
				     j, "max_sync_validate_bytes")),
				 small ? 1000 : 64 << 20);
		/* a pre-tokenized file is checked without a report */
		ck_assert(json_is_null(json_object_get(j, "validation")));
		ck_assert(json_is_boolean(json_object_get(j, "validated")));
		ck_assert_int_eq(json_is_true(json_object_get(j, "validated")),
				 !small);
		if (small)
			ck_assert(
			    dump_has(j, "max_sync_validate_bytes (1000)"));
		else
			ck_assert_ptr_null(json_object_get(j, "note"));
		json_decref(j);
		free(file);
		th_stop();
	}
}
END_TEST

/* The real binary: SIGHUP reads the tokens file again. */
START_TEST(test_sighup_reloads_tokens)
{
	char dir[64], cfg[128], tokens[128], cmd[160];
	const char *bin = getenv("TACO_BIN_DIR");
	int listen_port, st;
	json_t *j;
	pid_t pid;
	FILE *f;

	snprintf(dir, sizeof(dir), "/tmp/tacod-hup-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(th_sock, sizeof(th_sock), "%s/sock", dir);
	snprintf(cfg, sizeof(cfg), "%s/tacod.json", dir);
	snprintf(tokens, sizeof(tokens), "%s/tokens", dir);
	f = fopen(tokens, "w");
	th_token_line(f, "token-a", "alice", "user");
	fclose(f);
	/* a port picked free can be taken before tacod binds it (by another
	 * test's server): then tacod exits, and another port is tried */
	for (int attempt = 0;; attempt++) {
		ck_assert_int_lt(attempt, 5);
		listen_port = th_free_port();
		f = fopen(cfg, "w");
		fprintf(
		    f,
		    "{\"listen\": \"127.0.0.1:%d\", \"unix_socket\": \"%s\", "
		    "\"state_dir\": \"%s/state\", \"models_dir\": \"%s\", "
		    "\"tokens_file\": \"%s\", \"taco_train\": "
		    "\"%s/taco-train\"}",
		    listen_port, th_sock, dir, tu_fixture("models"), tokens,
		    bin ? bin : ".");
		fclose(f);
		if ((pid = th_try_spawn_tacod(cfg)) > 0)
			break;
	}
	th_sock[0] = 0;
	th_port = listen_port;
	ck_assert_int_eq(th_call_x("GET", "/v1/models", NULL, NULL,
				   "Authorization: Bearer token-a", &j, NULL,
				   NULL),
			 200);
	json_decref(j);
	ck_assert_int_eq(th_call_x("GET", "/v1/models", NULL, NULL,
				   "Authorization: Bearer token-b", &j, NULL,
				   NULL),
			 401);
	json_decref(j);
	f = fopen(tokens, "w");
	th_token_line(f, "token-b", "bob", "user");
	fclose(f);
	kill(pid, SIGHUP);
	for (int i = 0; i < 50; i++) { /* the signal is handled on the loop */
		long code =
		    th_call_x("GET", "/v1/models", NULL, NULL,
			      "Authorization: Bearer token-b", &j, NULL, NULL);
		json_decref(j);
		if (code == 200)
			break;
		ck_assert_int_lt(i, 49);
		usleep(100000);
	}
	ck_assert_int_eq(th_call_x("GET", "/v1/models", NULL, NULL,
				   "Authorization: Bearer token-a", &j, NULL,
				   NULL),
			 401);
	json_decref(j);
	kill(pid, SIGTERM);
	waitpid(pid, &st, 0);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static uint64_t device_bytes;

static void device_of(tacod_config *c)
{
	c->device_memory = device_bytes;
}

static int count_running(void)
{
	json_t *j;
	int n;

	ck_assert_int_eq(th_call("GET", "/v1/device", NULL, NULL, &j), 200);
	n = (int)json_array_size(json_object_get(j, "running_jobs"));
	json_decref(j);
	return n;
}

/* Two jobs run side by side when their plans fit together, and the second
 * waits when they do not; the measured peak is compared with the plan. */
START_TEST(test_parallel_when_memory_allows)
{
	char *file, *a, *b, body[512], path[256];
	json_t *j;
	int64_t plan;
	int both = 0;

	th_start(8ull << 30, NULL);
	file = th_upload_count();
	snprintf(body, sizeof(body),
		 "{\"model\": \"llama_gqa\", \"training_file\": \"%s\", "
		 "\"taco\": {\"steps\": 100000, \"seq_len\": 24}}",
		 file);
	ck_assert_int_eq(
	    th_call("POST", "/v1/fine_tuning/plan", body, NULL, &j), 200);
	plan = json_integer_value(json_object_get(j, "total_bytes"));
	ck_assert_int_gt(plan, 0);
	json_decref(j);
	free(file);
	th_stop();
	for (int fits = 1; fits >= 0; fits--) {
		device_bytes = (uint64_t)plan * (fits ? 5 : 3) / 2;
		th_start(device_bytes, device_of);
		file = th_upload_count();
		a = th_create(file, "\"steps\": 100000", 200);
		b = th_create(file, "\"steps\": 100000", 200);
		json_decref(th_wait_status(a, "running"));
		if (fits) {
			json_decref(th_wait_status(b, "running"));
			both = count_running();
			ck_assert_int_eq(both, 2);
		} else {
			usleep(1500000); /* a few scheduler ticks */
			job_path(path, sizeof(path), b, "");
			ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j),
					 200);
			ck_assert_str_eq(th_str(j, "status"), "queued");
			json_decref(j);
			ck_assert_int_eq(count_running(), 1);
		}
		job_path(path, sizeof(path), a, "/cancel");
		ck_assert_int_eq(post(path, &j), 200);
		json_decref(j);
		json_decref(th_wait_status(a, "cancelled"));
		if (!fits) /* then b gets the memory */
			json_decref(th_wait_status(b, "running"));
		job_path(path, sizeof(path), b, "");
		for (int i = 0;; i++) { /* until it reported a peak */
			ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j),
					 200);
			if (json_integer_value(json_object_get(
				j, "measured_peak_memory_bytes")) > 0)
				break;
			json_decref(j);
			ck_assert_int_lt(i, 600);
			usleep(100000);
		}
		json_decref(j);
		job_path(path, sizeof(path), b, "/cancel");
		ck_assert_int_eq(post(path, &j), 200);
		json_decref(j);
		j = th_wait_status(b, "cancelled");
		ck_assert_int_eq(json_integer_value(json_object_get(
				     j, "planned_memory_bytes")),
				 plan);
		ck_assert_int_gt(json_integer_value(json_object_get(
				     j, "measured_peak_memory_bytes")),
				 0);
		json_decref(j);
		job_path(path, sizeof(path), b, "/events?limit=100");
		ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 200);
		ck_assert(dump_has(j, "MB planned"));
		json_decref(j);
		free(file);
		free(a);
		free(b);
		th_stop();
	}
}
END_TEST

/* Users see and touch only their own files and jobs (another user's are
 * 404, as if they did not exist); an admin sees everyone's. */
START_TEST(test_users_are_isolated)
{
	char body[512], path[256], *file, *job;
	json_t *j;

	th_start_users(8ull << 30);
	ck_assert_int_eq(th_as("alice-t", "POST", "/v1/files", NULL,
			       tu_fixture("data/count_train.jsonl"), &j),
			 200);
	file = strdup(th_str(j, "id"));
	json_decref(j);
	snprintf(body, sizeof(body),
		 "{\"model\": \"llama_gqa\", \"training_file\": \"%s\", "
		 "\"taco\": {\"steps\": 100000, \"seq_len\": 24}}",
		 file);
	ck_assert_int_eq(
	    th_as("alice-t", "POST", "/v1/fine_tuning/jobs", body, NULL, &j),
	    200);
	job = strdup(th_str(j, "id"));
	json_decref(j);
	/* carol: nothing of alice's exists */
	ck_assert_int_eq(
	    th_as("carol-t", "POST", "/v1/fine_tuning/jobs", body, NULL, &j),
	    400);
	ck_assert_str_eq(th_str(json_object_get(j, "error"), "code"),
			 "file_not_found");
	json_decref(j);
	const char *paths[][2] = {
	    {"GET", "/v1/fine_tuning/jobs/%s"},
	    {"POST", "/v1/fine_tuning/jobs/%s/cancel"},
	    {"POST", "/v1/fine_tuning/jobs/%s/pause"},
	    {"GET", "/v1/fine_tuning/jobs/%s/events"},
	    {"GET", "/v1/fine_tuning/jobs/%s/checkpoints"},
	    {"GET", "/v1/fine_tuning/jobs/%s/model/content"},
	};
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		snprintf(path, sizeof(path), paths[i][1], job);
		ck_assert_int_eq(
		    th_as("carol-t", paths[i][0], path,
			  strcmp(paths[i][0], "POST") ? NULL : "{}", NULL, &j),
		    404);
		json_decref(j);
	}
	snprintf(path, sizeof(path), "/v1/files/%s/content", file);
	ck_assert_int_eq(th_as("carol-t", "GET", path, NULL, NULL, &j), 404);
	json_decref(j);
	snprintf(path, sizeof(path), "/v1/files/%s", file);
	ck_assert_int_eq(th_as("carol-t", "DELETE", path, NULL, NULL, &j), 404);
	json_decref(j);
	ck_assert_int_eq(
	    th_as("carol-t", "GET", "/v1/fine_tuning/jobs", NULL, NULL, &j),
	    200);
	ck_assert_int_eq(json_array_size(json_object_get(j, "data")), 0);
	json_decref(j);
	ck_assert_int_eq(th_as("carol-t", "GET", "/v1/files", NULL, NULL, &j),
			 200);
	ck_assert_int_eq(json_array_size(json_object_get(j, "data")), 0);
	json_decref(j);
	/* no token, a wrong one */
	ck_assert_int_eq(th_call("GET", "/v1/fine_tuning/jobs", NULL, NULL, &j),
			 401);
	json_decref(j);
	ck_assert_int_eq(
	    th_as("mallory", "GET", "/v1/fine_tuning/jobs", NULL, NULL, &j),
	    401);
	json_decref(j);
	/* bob, an admin, sees and stops alice's job */
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s", job);
	ck_assert_int_eq(th_as("bob-t", "GET", path, NULL, NULL, &j), 200);
	json_decref(j);
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/cancel", job);
	ck_assert_int_eq(th_as("bob-t", "POST", path, "{}", NULL, &j), 200);
	json_decref(j);
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s", job);
	for (int i = 0;; i++) {
		ck_assert_int_eq(th_as("alice-t", "GET", path, NULL, NULL, &j),
				 200);
		if (!strcmp(th_str(j, "status"), "cancelled"))
			break;
		json_decref(j);
		ck_assert_int_lt(i, 600);
		usleep(100000);
	}
	json_decref(j);
	free(file);
	free(job);
	th_stop();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tacod_api");
	TCase *tc = tcase_create("tacod_api");

	curl_global_init(CURL_GLOBAL_DEFAULT);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_pause_resume_and_queue_limit);
	tcase_add_test(tc, test_idempotency);
	tcase_add_test(tc, test_downloads_device_metrics);
	tcase_add_test(tc, test_dataset_roots);
	tcase_add_test(tc, test_list_by_metadata);
	tcase_add_test(tc, test_bad_training_file_named_by_id);
	tcase_add_test(tc, test_plan_sync_validation_limit);
	tcase_add_test(tc, test_parallel_when_memory_allows);
	tcase_add_test(tc, test_sighup_reloads_tokens);
	tcase_add_test(tc, test_users_are_isolated);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
