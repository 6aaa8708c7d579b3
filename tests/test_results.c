/* test_results.c: what a job leaves of its metrics, through a real tacod
 * running taco-train on the fixture model: its checkpoints' metrics under
 * OpenAI's names (at a step with and without an evaluation), and its result
 * file, the CSV of its step metrics (header and rows against the job's
 * events; listed, downloaded, refused as data, deleted), for a job that
 * succeeded, one cancelled while it runs, one paused then cancelled, one
 * that failed after steps, and none for a job cancelled before a step. */
#include <check.h>
#include <curl/curl.h>
#include <dirent.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/http/auth.h"
#include "tacod_harness.h"
#include "testutil.h"

#define HEADER                                                                 \
	"step,train_loss,train_accuracy,valid_loss,valid_mean_token_accuracy," \
	"full_valid_loss,full_valid_mean_token_accuracy,learning_rate,"        \
	"tokens_per_s,tokens,mem_peak_bytes,valid_exact_match"

static char *upload(const char *fixture)
{
	json_t *f;
	char *id;

	ck_assert_int_eq(
	    th_call("POST", "/v1/files", NULL, tu_fixture(fixture), &f), 200);
	id = strdup(th_str(f, "id"));
	json_decref(f);
	return id;
}

/* Creates a llama_gqa job on the count data (with its validation file
 * when val) with these taco members; the job id. */
static char *create(const char *train, const char *val, const char *taco)
{
	char body[1024], v[128] = "";
	json_t *j;
	char *id;

	if (val)
		snprintf(v, sizeof(v), "\"validation_file\": \"%s\", ", val);
	snprintf(body, sizeof(body),
		 "{\"model\": \"llama_gqa\", \"training_file\": \"%s\", %s"
		 "\"suffix\": \"r\", \"taco\": {\"seq_len\": 24, %s}}",
		 train, v, taco);
	ck_assert_int_eq(
	    th_call("POST", "/v1/fine_tuning/jobs", body, NULL, &j), 200);
	id = strdup(th_str(j, "id"));
	json_decref(j);
	return id;
}

/* Every event of a job, oldest first (the API pages newest first). */
static json_t *events_of(const char *job)
{
	json_t *all = json_array(), *page;
	char path[512], after[128] = "";

	for (;;) {
		json_t *data;
		snprintf(path, sizeof(path),
			 "/v1/fine_tuning/jobs/%s/events?limit=100%s%s", job,
			 after[0] ? "&after=" : "", after);
		ck_assert_int_eq(th_call("GET", path, NULL, NULL, &page), 200);
		data = json_object_get(page, "data");
		for (size_t i = 0; i < json_array_size(data); i++)
			json_array_insert(all, 0, json_array_get(data, i));
		if (!json_is_true(json_object_get(page, "has_more")) ||
		    !json_array_size(data)) {
			json_decref(page);
			return all;
		}
		snprintf(after, sizeof(after), "%s",
			 th_str(json_array_get(data, json_array_size(data) - 1),
				"id"));
		json_decref(page);
	}
}

/* The data of the newest metrics event with a number at key and a step at
 * most step (exactly step when exact); NULL when there is none. */
static json_t *metrics_at(json_t *events, const char *key, long long step,
			  int exact)
{
	json_t *found = NULL;

	for (size_t i = 0; i < json_array_size(events); i++) {
		json_t *e = json_array_get(events, i);
		json_t *d = json_object_get(e, "data");
		long long at = json_integer_value(json_object_get(d, "step"));
		if (strcmp(th_str(e, "type"), "metrics") ||
		    !json_is_number(json_object_get(d, key)) ||
		    (exact ? at != step : at > step))
			continue;
		found = d;
	}
	return found;
}

static double num(json_t *o, const char *k)
{
	return json_number_value(json_object_get(o, k));
}

/* The job's one result file: its id (the job object names it). */
static char *result_file(const char *job)
{
	char path[256];
	json_t *j, *r;
	char *id;

	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s", job);
	ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 200);
	r = json_object_get(j, "result_files");
	ck_assert_msg(json_array_size(r) == 1, "%s: result_files %s", job,
		      json_dumps(r, 0));
	id = strdup(json_string_value(json_array_get(r, 0)));
	json_decref(j);
	return id;
}

static void no_result_file(const char *job)
{
	char path[256];
	json_t *j;

	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s", job);
	ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 200);
	ck_assert_int_eq(json_array_size(json_object_get(j, "result_files")),
			 0);
	json_decref(j);
}

/* The file's content, and its File object checked: the job's results. */
static char *content(const char *file, size_t *len)
{
	char path[256], *raw = NULL;
	json_t *f;

	snprintf(path, sizeof(path), "/v1/files/%s", file);
	ck_assert_int_eq(th_call("GET", path, NULL, NULL, &f), 200);
	ck_assert_str_eq(th_str(f, "purpose"), "fine-tune-results");
	ck_assert_str_eq(th_str(f, "filename"), "step_metrics.csv");
	ck_assert_str_eq(th_str(f, "status"), "processed");
	snprintf(path, sizeof(path), "/v1/files/%s/content", file);
	ck_assert_int_eq(
	    th_call_x("GET", path, NULL, NULL, NULL, NULL, &raw, len), 200);
	ck_assert_int_eq((long long)*len,
			 json_integer_value(json_object_get(f, "bytes")));
	json_decref(f);
	return raw;
}

/* One CSV cell as a number: it must read back whole; "" is NAN-free 0
 * with *empty set. */
static double csv_num(const char *cell, size_t n, int *empty)
{
	char tmp[64], *end;
	double d;

	*empty = n == 0;
	if (!n)
		return 0;
	ck_assert_uint_lt(n, sizeof(tmp));
	memcpy(tmp, cell, n);
	tmp[n] = 0;
	d = strtod(tmp, &end);
	ck_assert_msg(*end == 0, "cell '%s' is not a number", tmp);
	return d;
}

/* A cell against an event's value: equal, or both absent. */
static void cell_is(const char *cell, size_t n, json_t *data, const char *key)
{
	json_t *v = json_object_get(data, key);
	int empty;
	double d = csv_num(cell, n, &empty);

	if (!json_is_number(v)) {
		ck_assert_msg(empty, "cell %.*s: the events have no %s", (int)n,
			      cell, key);
		return;
	}
	ck_assert_msg(!empty, "an empty cell for %s", key);
	/* printed to read back as the same double */
	ck_assert_msg(d == json_number_value(v), "%s: %.*s != %.17g", key,
		      (int)n, cell, json_number_value(v));
}

/* The CSV against the job's events: the header, then one row per step with
 * a metrics event, in step order, its cells those of the step's training
 * metrics and evaluation. Returns the rows. */
static int check_csv(const char *csv, size_t len, json_t *events)
{
	static const char *const train_keys[] = {"train_loss",
						 "train_mean_token_accuracy",
						 NULL,
						 NULL,
						 NULL,
						 NULL,
						 "learning_rate",
						 "tokens_per_s",
						 "tokens",
						 "mem_peak_bytes",
						 NULL};
	static const char *const eval_keys[] = {NULL,
						NULL,
						"val_loss",
						"val_token_accuracy",
						"val_loss",
						"val_token_accuracy",
						NULL,
						NULL,
						NULL,
						NULL,
						"val_exact_match"};
	const char *p = csv, *end = csv + len, *nl;
	long long last = -1;
	int rows = 0;

	nl = memchr(p, '\n', (size_t)(end - p));
	ck_assert_ptr_nonnull(nl);
	ck_assert_msg((size_t)(nl - p) == strlen(HEADER) &&
			  !memcmp(p, HEADER, strlen(HEADER)),
		      "header: %.*s", (int)(nl - p), p);
	for (p = nl + 1; p < end; p = nl + 1) {
		const char *cell = p;
		long long step;
		json_t *train, *eval;
		int col = 0, empty;

		nl = memchr(p, '\n', (size_t)(end - p));
		ck_assert_ptr_nonnull(nl);
		step = (long long)csv_num(p, strcspn(p, ","), &empty);
		ck_assert(!empty && step > last);
		last = step;
		train = metrics_at(events, "train_loss", step, 1);
		eval = metrics_at(events, "val_loss", step, 1);
		ck_assert_msg(train || eval, "row of step %lld: no metrics",
			      step);
		cell += strcspn(cell, ",");
		while (cell < nl) {
			size_t n;
			cell++;
			n = strcspn(cell, ",\n");
			ck_assert_int_lt(col, 11);
			if (train_keys[col])
				cell_is(cell, n, train, train_keys[col]);
			else
				cell_is(cell, n, eval, eval_keys[col]);
			cell += n;
			col++;
		}
		ck_assert_int_eq(col, 11);
		rows++;
	}
	/* and every step with metrics has its row */
	for (size_t i = 0; i < json_array_size(events); i++) {
		json_t *e = json_array_get(events, i);
		json_t *d = json_object_get(e, "data");
		char at[32];
		if (strcmp(th_str(e, "type"), "metrics") ||
		    !(json_is_number(json_object_get(d, "train_loss")) ||
		      json_is_number(json_object_get(d, "val_loss"))))
			continue;
		snprintf(
		    at, sizeof(at), "\n%lld,",
		    (long long)json_integer_value(json_object_get(d, "step")));
		ck_assert_msg(memmem(csv, len, at, strlen(at)),
			      "no row of step %s", at + 1);
	}
	return rows;
}

/* A checkpoint's metrics against the job's events. */
static void check_checkpoint(json_t *c, json_t *events, long long eval_step)
{
	json_t *m = json_object_get(c, "metrics");
	long long step = json_integer_value(json_object_get(c, "step_number"));
	json_t *train = metrics_at(events, "train_loss", step, 1);
	json_t *eval = metrics_at(events, "val_loss", step, 0);

	ck_assert_int_eq(json_integer_value(json_object_get(m, "step")), step);
	ck_assert_ptr_nonnull(train);
	ck_assert_ptr_nonnull(eval);
	/* the last evaluation at or before the step */
	ck_assert_int_eq(json_integer_value(json_object_get(eval, "step")),
			 eval_step);
	ck_assert(num(m, "train_loss") == num(train, "train_loss"));
	ck_assert(num(m, "train_mean_token_accuracy") ==
		  num(train, "train_mean_token_accuracy"));
	ck_assert(num(m, "valid_loss") == num(eval, "val_loss"));
	ck_assert(num(m, "valid_mean_token_accuracy") ==
		  num(eval, "val_token_accuracy"));
	/* tacod evaluates the whole validation set */
	ck_assert(num(m, "full_valid_loss") == num(eval, "val_loss"));
	ck_assert(num(m, "full_valid_mean_token_accuracy") ==
		  num(eval, "val_token_accuracy"));
	ck_assert(num(m, "train_loss") > 0 && num(m, "valid_loss") > 0);
}

static void sha256_hex(const char *p, size_t n, char hex[65])
{
	tacod_auth_sha256 c;
	uint8_t d[32];

	tacod_auth_sha256_init(&c);
	tacod_auth_sha256_update(&c, p, n);
	tacod_auth_sha256_final(&c, d);
	tacod_auth_hex(d, hex);
}

START_TEST(test_succeeded_job)
{
	char *train, *val, *job, *file, *csv, path[512], body[512], hex[65];
	json_t *j, *events, *list, *ck;
	size_t len;
	struct stat st;
	int found = 0;

	th_start(8ull << 30, NULL);
	train = upload("data/count_train.jsonl");
	val = upload("data/count_val.jsonl");
	/* evaluations at 2, 4 and 6 (the last step), checkpoints at 3 and 6 */
	job = create(train, val,
		     "\"steps\": 6, \"eval_every\": 2, \"checkpoint_every\": "
		     "3, \"keep_checkpoints\": 4, \"log_every\": 1, \"lr\": "
		     "0.01");
	json_decref(th_wait_status(job, "succeeded"));
	events = events_of(job);

	/* ---- checkpoint metrics: without an evaluation at its step (3:
	 * step 2's), and with one (6: its own, emitted before the
	 * checkpoint) */
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/checkpoints",
		 job);
	ck_assert_int_eq(th_call("GET", path, NULL, NULL, &ck), 200);
	ck_assert_int_eq(json_array_size(json_object_get(ck, "data")), 2);
	for (size_t i = 0; i < 2; i++) {
		json_t *c = json_array_get(json_object_get(ck, "data"), i);
		long long step =
		    json_integer_value(json_object_get(c, "step_number"));
		ck_assert(step == 3 || step == 6);
		check_checkpoint(c, events, step == 3 ? 2 : 6);
	}
	json_decref(ck);

	/* ---- the result file: its CSV against the events */
	file = result_file(job);
	csv = content(file, &len);
	/* the even steps' rows have their evaluation's cells, the others
	 * empty ones (check_csv compares each with the step's events) */
	for (long long step = 1; step <= 6; step++)
		ck_assert(!metrics_at(events, "val_loss", step, 1) ==
			  (step % 2 == 1));
	ck_assert_int_eq(check_csv(csv, len, events), 6);
	json_decref(events);

	/* listed among the owner's files */
	ck_assert_int_eq(th_call("GET", "/v1/files", NULL, NULL, &list), 200);
	for (size_t i = 0; i < json_array_size(json_object_get(list, "data"));
	     i++) {
		json_t *f = json_array_get(json_object_get(list, "data"), i);
		if (!strcmp(th_str(f, "id"), file)) {
			ck_assert_str_eq(th_str(f, "purpose"),
					 "fine-tune-results");
			found = 1;
		}
	}
	ck_assert(found);
	json_decref(list);

	/* not data: refused as a training or validation file, naming it */
	for (int k = 0; k < 2; k++) {
		snprintf(body, sizeof(body),
			 "{\"model\": \"llama_gqa\", \"training_file\": "
			 "\"%s\", \"validation_file\": \"%s\"}",
			 k ? train : file, k ? file : val);
		ck_assert_int_eq(
		    th_call("POST", "/v1/fine_tuning/jobs", body, NULL, &j),
		    400);
		ck_assert_str_eq(th_str(json_object_get(j, "error"), "param"),
				 k ? "validation_file" : "training_file");
		ck_assert_str_eq(th_str(json_object_get(j, "error"), "code"),
				 "invalid_file_purpose");
		json_decref(j);
	}

	/* deleted: gone from the files, from the job, and its bytes too */
	sha256_hex(csv, len, hex);
	snprintf(path, sizeof(path), "%s/files/%s", th_state, hex);
	ck_assert_int_eq(stat(path, &st), 0);
	snprintf(body, sizeof(body), "/v1/files/%s", file);
	ck_assert_int_eq(th_call("DELETE", body, NULL, NULL, &j), 200);
	ck_assert(json_is_true(json_object_get(j, "deleted")));
	json_decref(j);
	ck_assert_int_eq(th_call("GET", body, NULL, NULL, &j), 404);
	json_decref(j);
	snprintf(body, sizeof(body), "/v1/files/%s/content", file);
	ck_assert_int_eq(th_call("GET", body, NULL, NULL, &j), 404);
	json_decref(j);
	no_result_file(job);
	ck_assert_int_eq(stat(path, &st), -1);
	free(csv);
	free(file);
	free(job);
	free(val);
	free(train);
	th_stop();
}
END_TEST

/* An upload that names the results purpose: refused. */
START_TEST(test_results_purpose_not_uploaded)
{
	CURL *c;
	curl_mime *mime;
	curl_mimepart *part;
	char url[128];
	long status = 0;
	FILE *devnull = fopen("/dev/null", "w");

	th_start(8ull << 30, NULL);
	c = curl_easy_init();
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/files", th_port);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, devnull);
	mime = curl_mime_init(c);
	part = curl_mime_addpart(mime);
	curl_mime_name(part, "purpose");
	curl_mime_data(part, "fine-tune-results", CURL_ZERO_TERMINATED);
	part = curl_mime_addpart(mime);
	curl_mime_name(part, "file");
	curl_mime_filedata(part, tu_fixture("data/count_train.jsonl"));
	curl_easy_setopt(c, CURLOPT_MIMEPOST, mime);
	ck_assert_int_eq(curl_easy_perform(c), CURLE_OK);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	ck_assert_int_eq(status, 400);
	curl_mime_free(mime);
	curl_easy_cleanup(c);
	fclose(devnull);
	th_stop();
}
END_TEST

/* Polls until the job has a training step's metrics event. */
static void wait_step(const char *job)
{
	for (int i = 0; i < 1200; i++) {
		json_t *ev = events_of(job);
		json_t *m = metrics_at(ev, "train_loss", 1LL << 62, 0);
		json_decref(ev);
		if (m)
			return;
		usleep(100000);
	}
	ck_abort_msg("%s: no step", job);
}

static long post(const char *job, const char *action, json_t **out)
{
	char path[256];

	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/%s", job, action);
	return th_call("POST", path, "{}", NULL, out);
}

/* The job's result file holds a row for each of its steps. */
static void check_results(const char *job)
{
	char *file = result_file(job), *csv;
	json_t *events = events_of(job);
	size_t len;

	csv = content(file, &len);
	ck_assert_int_ge(check_csv(csv, len, events), 1);
	json_decref(events);
	free(csv);
	free(file);
}

/* The pid of the taco-train child of this process that runs job. */
static pid_t worker_of(const char *job)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	pid_t found = 0;

	ck_assert_ptr_nonnull(d);
	while (!found && (e = readdir(d))) {
		char path[300], cmd[8192], stat_line[512];
		long ppid = 0;
		size_t n;
		FILE *f;
		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
		if (!(f = fopen(path, "r")))
			continue;
		n = fread(stat_line, 1, sizeof(stat_line) - 1, f);
		fclose(f);
		stat_line[n] = 0;
		/* pid (comm) state ppid: after the last ')' */
		if (!strrchr(stat_line, ')') ||
		    sscanf(strrchr(stat_line, ')') + 2, "%*c %ld", &ppid) !=
			1 ||
		    ppid != getpid())
			continue;
		snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
		if (!(f = fopen(path, "r")))
			continue;
		n = fread(cmd, 1, sizeof(cmd) - 1, f);
		fclose(f);
		for (size_t i = 0; i < n; i++)
			cmd[i] = cmd[i] ? cmd[i] : ' ';
		cmd[n] = 0;
		if (strstr(cmd, "taco-train") && strstr(cmd, job))
			found = (pid_t)atol(e->d_name);
	}
	closedir(d);
	ck_assert_msg(found > 0, "no worker of %s", job);
	return found;
}

static void no_retries(tacod_config *c)
{
	c->max_retries = 0;
}

START_TEST(test_ended_after_steps)
{
	char *train, *run, *paused, *crashed;
	json_t *j;
	const char *taco = "\"steps\": 100000, \"log_every\": 1, \"lr\": 0.01";

	th_start(8ull << 30, no_retries);
	train = upload("data/count_train.jsonl");

	/* cancelled while it runs, after steps */
	run = create(train, NULL, taco);
	wait_step(run);
	ck_assert_int_eq(post(run, "cancel", &j), 200);
	json_decref(j);
	json_decref(th_wait_status(run, "cancelled"));
	check_results(run);

	/* paused after steps, then cancelled: the cancel's reply names it */
	paused = create(train, NULL, taco);
	wait_step(paused);
	ck_assert_int_eq(post(paused, "pause", &j), 200);
	json_decref(j);
	json_decref(th_wait_status(paused, "paused"));
	no_result_file(paused);
	ck_assert_int_eq(post(paused, "cancel", &j), 200);
	ck_assert_str_eq(th_str(j, "status"), "cancelled");
	ck_assert_int_eq(json_array_size(json_object_get(j, "result_files")),
			 1);
	json_decref(j);
	check_results(paused);

	/* failed after steps: its worker killed, with no retry left */
	crashed = create(train, NULL, taco);
	wait_step(crashed);
	ck_assert_int_eq(kill(worker_of(crashed), SIGKILL), 0);
	json_decref(th_wait_status(crashed, "failed"));
	check_results(crashed);

	free(crashed);
	free(paused);
	free(run);
	free(train);
	th_stop();
}
END_TEST

/* A result file that cannot be written (its temporary file's directory is
 * a plain file): the job succeeds all the same, and an event says so. */
START_TEST(test_results_not_written)
{
	char *train, *job, dir[128];
	json_t *j, *ev;
	int told = 0;
	FILE *f;

	th_start(8ull << 30, NULL);
	train = upload("data/count_train.jsonl");
	snprintf(dir, sizeof(dir), "%s/uploads", th_state);
	ck_assert_int_eq(rmdir(dir), 0);
	ck_assert_ptr_nonnull(f = fopen(dir, "w"));
	fclose(f);
	job = create(train, NULL, "\"steps\": 3, \"log_every\": 1");
	j = th_wait_status(job, "succeeded");
	ck_assert_int_eq(json_array_size(json_object_get(j, "result_files")),
			 0);
	ck_assert_ptr_nonnull(json_object_get(j, "fine_tuned_model"));
	json_decref(j);
	ev = events_of(job);
	for (size_t i = 0; i < json_array_size(ev); i++)
		told |= !strncmp(th_str(json_array_get(ev, i), "message"),
				 "The result file could not be written", 36);
	ck_assert(told);
	/* the job's end is its last event still */
	ck_assert_str_eq(
	    th_str(json_array_get(ev, json_array_size(ev) - 1), "message"),
	    "The job has successfully completed");
	json_decref(ev);
	ck_assert_int_eq(unlink(dir), 0);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	free(job);
	free(train);
	th_stop();
}
END_TEST

/* Starts no job: a validated job waits in queued. */
static void run_nothing(tacod_config *c)
{
	c->limits.max_running_jobs = 0;
}

/* Cancelled before any step (queued): no result file. */
START_TEST(test_cancelled_before_steps)
{
	char *train, *job;
	json_t *j, *ev;

	th_start(8ull << 30, run_nothing);
	train = upload("data/count_train.jsonl");
	job = create(train, NULL, "\"steps\": 4");
	json_decref(th_wait_status(job, "queued"));
	ck_assert_int_eq(post(job, "cancel", &j), 200);
	ck_assert_str_eq(th_str(j, "status"), "cancelled");
	json_decref(j);
	ev = events_of(job);
	ck_assert_ptr_null(metrics_at(ev, "train_loss", 1LL << 62, 0));
	json_decref(ev);
	no_result_file(job);
	ck_assert_int_eq(th_call("GET", "/v1/files", NULL, NULL, &j), 200);
	ck_assert_int_eq(json_array_size(json_object_get(j, "data")), 1);
	json_decref(j);
	free(job);
	free(train);
	th_stop();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("results");
	TCase *tc = tcase_create("results");

	curl_global_init(CURL_GLOBAL_DEFAULT);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_succeeded_job);
	tcase_add_test(tc, test_results_purpose_not_uploaded);
	tcase_add_test(tc, test_ended_after_steps);
	tcase_add_test(tc, test_cancelled_before_steps);
	tcase_add_test(tc, test_results_not_written);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
