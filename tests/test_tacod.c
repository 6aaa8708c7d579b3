/* test_tacod.c: tacod over real HTTP on loopback: upload, create, run to
 * completion, events, validation errors, memory refusal, cancel; the
 * data's validation in the background (validating_files), cancelled, and
 * after a kill -9; a DPO job killed with tacod, in its reference pass and
 * in training, ends as the same job run straight, bit for bit. */
#include <check.h>
#include <curl/curl.h>
#include <dirent.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tacod_harness.h"
#include "testutil.h"

static long long jint(json_t *o, const char *k)
{
	return (long long)json_integer_value(json_object_get(o, k));
}

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

/* OPT and GPT-NeoX models are listed, planned and trained like the Llama
 * family. */
START_TEST(test_other_families)
{
	static const char *const names[] = {"opt_post", "neox_par"};
	json_t *j, *data;
	char *file, body[1024];

	th_start(8ull << 30, NULL);
	ck_assert_int_eq(th_call("GET", "/v1/models", NULL, NULL, &j), 200);
	data = json_object_get(j, "data");
	for (size_t k = 0; k < 2; k++) {
		int found = 0;
		for (size_t i = 0; i < json_array_size(data); i++)
			found |= !strcmp(th_str(json_array_get(data, i), "id"),
					 names[k]);
		ck_assert_msg(found, "%s not listed", names[k]);
	}
	json_decref(j);
	file = th_upload_count();
	for (size_t k = 0; k < 2; k++) {
		char *id;
		snprintf(body, sizeof(body),
			 "{\"model\": \"%s\", \"training_file\": \"%s\", "
			 "\"suffix\": \"f\", \"taco\": {\"seq_len\": 24, "
			 "\"steps\": 3, \"lr\": 0.01}}",
			 names[k], file);
		/* planned like any other: it fits, with its own terms */
		ck_assert_int_eq(
		    th_call("POST", "/v1/fine_tuning/plan", body, NULL, &j),
		    200);
		ck_assert_ptr_null(json_object_get(j, "error"));
		ck_assert(json_is_true(json_object_get(j, "fits")));
		ck_assert_int_gt(
		    json_integer_value(json_object_get(j, "total_bytes")), 0);
		json_decref(j);
		ck_assert_int_eq(
		    th_call("POST", "/v1/fine_tuning/jobs", body, NULL, &j),
		    200);
		id = strdup(th_str(j, "id"));
		json_decref(j);
		j = th_wait_status(id, "succeeded");
		ck_assert_ptr_nonnull(
		    strstr(th_str(j, "fine_tuned_model"), names[k]));
		json_decref(j);
		free(id);
	}
	free(file);
	th_stop();
}
END_TEST

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
	/* weights streamed from host memory: the plan says how many layers
	 * and what crosses the bus; on the device, nothing does */
	for (int host = 0; host < 2; host++) {
		json_t *st, *tr;
		snprintf(path, sizeof(path),
			 "{\"model\": \"llama_gqa\", \"training_file\": "
			 "\"%s\", \"taco\": {\"steps\": 2, \"weights\": "
			 "\"%s\"}}",
			 file, host ? "host" : "device");
		ck_assert_int_eq(
		    th_call("POST", "/v1/fine_tuning/plan", path, NULL, &j),
		    200);
		st = json_object_get(j, "settings");
		tr = json_object_get(j, "transfer");
		ck_assert_int_gt(jint(st, "layers"), 0);
		ck_assert_int_eq(jint(st, "streamed_layers"),
				 host ? jint(st, "layers") : 0);
		if (host) {
			ck_assert_int_gt(jint(tr, "host_weights_bytes"), 0);
			ck_assert_int_le(jint(tr, "host_weights_bytes"),
					 jint(j, "host_bytes"));
			/* every streamed matrix twice (forward, backward) */
			ck_assert_int_ge(jint(tr, "to_device_bytes_per_step"),
					 jint(tr, "host_weights_bytes"));
			ck_assert_int_gt(jint(tr, "to_host_bytes_per_step"), 0);
		} else {
			ck_assert_int_eq(jint(tr, "host_weights_bytes"), 0);
			ck_assert_int_eq(jint(tr, "to_device_bytes_per_step"),
					 0);
		}
		json_decref(j);
	}
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

/* The real tacod binary on a unix socket in a fresh directory dir (64
 * bytes) with its config file cfg (128 bytes); limits is the JSON of
 * "limits". */
static pid_t real_tacod(char *dir, char *cfg, const char *limits)
{
	const char *bin = getenv("TACO_BIN_DIR");
	FILE *f;

	snprintf(dir, 64, "/tmp/tacod-k9-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(th_sock, sizeof(th_sock), "%s/th_sock", dir);
	snprintf(cfg, 128, "%s/tacod.json", dir);
	f = fopen(cfg, "w");
	fprintf(f,
		"{\"listen\": \"\", \"unix_socket\": \"%s\", \"state_dir\": "
		"\"%s/state\", \"models_dir\": \"%s\", \"taco_train\": "
		"\"%s/taco-train\", \"limits\": %s}",
		th_sock, dir, tu_fixture("models"), bin ? bin : ".", limits);
	fclose(f);
	return th_spawn_tacod(cfg);
}

/* The taco-train that tacod pid runs (its one child of that name): found
 * in /proc by parent pid; 0 when there is none. */
static pid_t worker_of(pid_t pid)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	pid_t found = 0;

	ck_assert_ptr_nonnull(d);
	while (!found && (e = readdir(d))) {
		char path[300], buf[512], *p;
		int ppid;
		FILE *f;
		size_t n;

		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
		if (!(f = fopen(path, "r")))
			continue; /* gone since */
		n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = 0;
		/* "pid (comm) state ppid ...": comm may hold spaces */
		p = strrchr(buf, ')');
		if (p && sscanf(p + 1, " %*c %d", &ppid) == 1 && ppid == pid &&
		    strstr(buf, "(taco-train)"))
			found = (pid_t)atoi(e->d_name);
	}
	closedir(d);
	return found;
}

/* kill -9, and the binary again on the same state. With worker, its
 * running taco-train is killed too (as when the whole machine goes):
 * stopped first, so that it writes nothing once tacod is gone (it would
 * checkpoint on the SIGTERM a dead parent sends it), then killed. */
static pid_t kill9_restart_x(pid_t pid, const char *cfg, int worker)
{
	pid_t w = worker ? worker_of(pid) : 0;
	int st;

	if (worker) {
		ck_assert_int_gt(w, 0);
		ck_assert_int_eq(kill(w, SIGSTOP), 0);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	if (worker)
		ck_assert_int_eq(kill(w, SIGKILL), 0);
	unlink(th_sock);
	return th_spawn_tacod(cfg);
}

static pid_t kill9_restart(pid_t pid, const char *cfg)
{
	return kill9_restart_x(pid, cfg, 0);
}

/* The job is in status now. */
static void expect_status(const char *id, const char *status)
{
	char path[256];
	json_t *j;

	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s", id);
	ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 200);
	ck_assert_str_eq(th_str(j, "status"), status);
	json_decref(j);
}

/* The job's events (newest first), at most 100. */
static json_t *events_of(const char *job)
{
	char path[256];
	json_t *ev;

	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/events?limit=100",
		 job);
	ck_assert_int_eq(th_call("GET", path, NULL, NULL, &ev), 200);
	return ev;
}

/* The same, dumped. */
static char *events_dump(const char *job)
{
	json_t *ev = events_of(job);
	char *d = json_dumps(ev, 0);

	json_decref(ev);
	return d;
}

/* The index in the job's events (newest first) of the newest one whose
 * message holds text; -1 when none does. */
static int event_index(json_t *ev, const char *text)
{
	json_t *data = json_object_get(ev, "data");

	for (size_t i = 0; i < json_array_size(data); i++)
		if (strstr(th_str(json_array_get(data, i), "message"), text))
			return (int)i;
	return -1;
}

/* SIGTERM: a clean exit; then the directory goes. */
static void real_tacod_end(pid_t pid, const char *dir)
{
	char cmd[128];
	int st;

	kill(pid, SIGTERM);
	waitpid(pid, &st, 0);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	th_sock[0] = 0;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* kill -9 of tacod with a job running and one queued: after a restart both
 * finish, the running one from its checkpoint. */
START_TEST(test_kill9_recovery)
{
	char cfg[128], dir[64], path[512];
	pid_t pid;
	json_t *j, *ev;
	char *file, *a, *b;
	int st;

	pid = real_tacod(dir, cfg, "{\"max_running_jobs\": 1}");
	file = th_upload_count();
	a = th_create(file,
		      "\"steps\": 60, \"lr\": 0.01, \"checkpoint_every\": 10, "
		      "\"seq_len\": 768",
		      200);
	b = th_create(file, "\"steps\": 3", 200);
	json_decref(th_wait_status(a, "running"));
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/checkpoints", a);
	for (int i = 0; i < TH_WAIT_TICKS; i++) {
		ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 200);
		st = (int)json_array_size(json_object_get(j, "data"));
		json_decref(j);
		if (st > 0)
			break;
		usleep(100000);
	}
	ck_assert_int_gt(st, 0);
	expect_status(b, "queued");
	pid = kill9_restart(pid, cfg);
	json_decref(th_wait_status(a, "succeeded"));
	json_decref(th_wait_status(b, "succeeded"));
	ev = events_of(a);
	ck_assert_int_ge(event_index(ev, "tacod restarted"), 0);
	json_decref(ev);
	real_tacod_end(pid, dir);
	free(file);
	free(a);
	free(b);
}
END_TEST

/* ---- DPO under kill -9 -------------------------------------------------- */

/* Uploads n of the counting task's preference pairs: the file id. */
static char *upload_pairs(int n, unsigned seed)
{
	char local[] = "/tmp/tacod-pairs-XXXXXX";
	json_t *f;
	char *id;
	int fd;

	ck_assert_int_ge(fd = mkstemp(local), 0);
	close(fd);
	tu_write_count_pairs(local, n, seed);
	ck_assert_int_eq(th_call("POST", "/v1/files", NULL, local, &f), 200);
	unlink(local);
	id = strdup(th_str(f, "id"));
	json_decref(f);
	return id;
}

/* A DPO job on chat_llama (its tokenizer renders the pairs): 40 steps of
 * 4 pairs of 48 tokens, about 15 ms each on a core; the validation pairs
 * make the reference pass's second set last long enough to be killed in
 * (about 1 ms a pair). Every job made so is the same job: the same seed. */
static char *dpo_create(const char *train, const char *val)
{
	char body[1024];
	json_t *j;
	char *id;

	snprintf(body, sizeof(body),
		 "{\"model\": \"chat_llama\", \"training_file\": \"%s\", "
		 "\"validation_file\": \"%s\", \"seed\": 7, \"method\": "
		 "{\"type\": \"dpo\", \"dpo\": {\"hyperparameters\": "
		 "{\"beta\": 0.1, \"batch_size\": 4}}}, \"taco\": {\"steps\": "
		 "40, \"lr\": 0.003, \"seq_len\": 48, \"log_every\": 5, "
		 "\"checkpoint_every\": 10}}",
		 train, val);
	ck_assert_int_eq(
	    th_call("POST", "/v1/fine_tuning/jobs", body, NULL, &j), 200);
	id = strdup(th_str(j, "id"));
	json_decref(j);
	return id;
}

/* A reference event (its data's "event") or, with step > 0, a metrics
 * event of a training step at or past it. */
static int is_event(json_t *e, int step)
{
	json_t *d = json_object_get(e, "data");

	if (!step)
		return !strcmp(th_str(e, "type"), "message") &&
		       json_is_string(json_object_get(d, "event")) &&
		       !strcmp(th_str(d, "event"), "reference");
	return !strcmp(th_str(e, "type"), "metrics") &&
	       !json_object_get(d, "event") && jint(d, "step") >= step;
}

/* Polls the job's newest events every 5 ms until one is_event(step). */
static void wait_event(const char *job, int step)
{
	char path[256];
	json_t *ev, *e;
	size_t i;

	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/events?limit=20",
		 job);
	for (int k = 0; k < 24000; k++) {
		int hit = 0;
		ck_assert_int_eq(th_call("GET", path, NULL, NULL, &ev), 200);
		json_array_foreach(json_object_get(ev, "data"), i, e)
		{
			hit |= is_event(e, step);
		}
		json_decref(ev);
		if (hit)
			return;
		usleep(5000);
	}
	ck_abort_msg("%s: no %s event", job, step ? "metrics" : "reference");
}

/* The job's exported model.safetensors, read from tacod's state. */
static char *final_weights(const char *dir, const char *job, size_t *len)
{
	char path[512], *w;

	snprintf(path, sizeof(path),
		 "%s/state/jobs/%s/out/model/model.safetensors", dir, job);
	w = tu_read_file(path, len);
	ck_assert_msg(w != NULL, "%s: not readable", path);
	return w;
}

/* The events of job after its restart (the newest first, up to the
 * "tacod restarted" one): how many are reference events, and the lowest
 * training step of their metrics events (INT_MAX: none). */
static void after_restart(const char *job, int *refs, int *low_step)
{
	json_t *ev = events_of(job), *data = json_object_get(ev, "data");
	int r = event_index(ev, "tacod restarted");

	ck_assert_msg(r > 0, "%s: no restart, or nothing after it", job);
	*refs = 0;
	*low_step = INT_MAX;
	for (int i = 0; i < r; i++) {
		json_t *e = json_array_get(data, (size_t)i);
		if (is_event(e, 0))
			(*refs)++;
		else if (is_event(e, 1) &&
			 jint(json_object_get(e, "data"), "step") < *low_step)
			*low_step =
			    (int)jint(json_object_get(e, "data"), "step");
	}
	json_decref(ev);
}

/* A DPO job under tacod, killed by kill -9 of tacod: during the reference
 * pass (with its taco-train killed too, so that nothing of the pass is
 * kept: the restarted job computes it again from step 0) and during the
 * training steps (its taco-train checkpoints on its parent's death: the
 * restarted job resumes from that step and reads the reference back).
 * Both end with the final weights of the same job run straight, bit for
 * bit. */
START_TEST(test_kill9_dpo)
{
	char cfg[128], dir[64], *train, *val, *straight, *ids[2];
	size_t n0, n;
	char *w0, *w;
	int refs, low;
	pid_t pid;

	pid = real_tacod(dir, cfg, "{}");
	train = upload_pairs(64, 7);
	val = upload_pairs(400, 99);
	straight = dpo_create(train, val);
	json_decref(th_wait_status(straight, "succeeded"));
	w0 = final_weights(dir, straight, &n0);
	for (int k = 0; k < 2; k++) {
		ids[k] = dpo_create(train, val);
		/* k 0: the first reference event is the training set's end;
		 * the validation set's pass follows. k 1: step 5 of 40. */
		wait_event(ids[k], k ? 5 : 0);
		pid = kill9_restart_x(pid, cfg, !k);
		json_decref(th_wait_status(ids[k], "succeeded"));
		after_restart(ids[k], &refs, &low);
		if (!k) { /* computed again, and trained from step 0 */
			ck_assert_int_gt(refs, 0);
			ck_assert_int_eq(low, 5);
		} else { /* read back, and resumed past step 5 */
			ck_assert_int_eq(refs, 0);
			ck_assert_int_gt(low, 5);
			ck_assert_int_lt(low, INT_MAX);
		}
		w = final_weights(dir, ids[k], &n);
		ck_assert_uint_eq(n, n0);
		ck_assert_msg(!memcmp(w, w0, n),
			      "%s (killed %s) differs from %s, run straight",
			      ids[k], k ? "training" : "in the reference pass",
			      straight);
		free(w);
	}
	real_tacod_end(pid, dir);
	free(w0);
	free(train);
	free(val);
	free(straight);
	free(ids[0]);
	free(ids[1]);
}
END_TEST

/* ---- validation in the background ------------------------------------- */

/* The count training data, repeated to at least 48 MB: a plan validates it
 * synchronously in about 1.5 s on this machine's cores (a RelWithDebInfo
 * build; several times that under ASan); a create must not wait for that.
 * The path is the caller's to unlink and free. */
static char *big_train(void)
{
	char *path = strdup("/tmp/tacod-big-XXXXXX");
	FILE *in = fopen(tu_fixture("data/count_train.jsonl"), "rb");
	static char chunk[1 << 17];
	size_t n = in ? fread(chunk, 1, sizeof(chunk), in) : 0;
	int fd = mkstemp(path);
	FILE *out = fdopen(fd, "wb");
	long long total = 0;

	ck_assert(in && out && n > 1000 && n < sizeof(chunk));
	fclose(in);
	while (total < 48ll << 20) {
		ck_assert_uint_eq(fwrite(chunk, 1, n, out), n);
		total += (long long)n;
	}
	ck_assert_int_eq(fclose(out), 0);
	return path;
}

static char *upload(const char *local)
{
	json_t *f;
	char *id;

	ck_assert_int_eq(th_call("POST", "/v1/files", NULL, local, &f), 200);
	id = strdup(th_str(f, "id"));
	json_decref(f);
	return id;
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static long job_post(const char *job, const char *action, json_t **out)
{
	char path[256];

	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/%s", job, action);
	return th_call("POST", path, "{}", NULL, out);
}

/* A create answers at once, in validating_files, while the data (too
 * large to tokenize on a request thread) is validated in the background;
 * the plan endpoint, which validates it synchronously, shows how long that
 * takes. */
START_TEST(test_create_validates_in_background)
{
	char *big = big_train(), *file, body[512], *ev;
	double t0, t_plan, t_create;
	json_t *j;

	th_start(8ull << 30, NULL);
	file = upload(big);
	snprintf(body, sizeof(body),
		 "{\"model\": \"llama_gqa\", \"training_file\": \"%s\", "
		 "\"suffix\": \"t\", \"taco\": {\"seq_len\": 24, \"steps\": "
		 "2}}",
		 file);
	t0 = now_s();
	ck_assert_int_eq(
	    th_call("POST", "/v1/fine_tuning/plan", body, NULL, &j), 200);
	t_plan = now_s() - t0;
	ck_assert_ptr_null(json_object_get(j, "error"));
	json_decref(j);
	t0 = now_s();
	ck_assert_int_eq(
	    th_call("POST", "/v1/fine_tuning/jobs", body, NULL, &j), 200);
	t_create = now_s() - t0;
	fprintf(stderr,
		"validating %s synchronously (plan): %.3f s; create: %.3f s\n",
		big, t_plan, t_create);
	ck_assert_msg(t_create < 1.0 && t_create * 4 < t_plan,
		      "the create took %.3f s, a synchronous validation %.3f s",
		      t_create, t_plan);
	ck_assert_str_eq(th_str(j, "status"), "validating_files");
	ck_assert(json_is_null(json_object_get(j, "error")));
	{
		char *id = strdup(th_str(j, "id"));
		json_decref(j);
		json_decref(th_wait_status(id, "succeeded"));
		ev = events_dump(id);
		ck_assert_ptr_nonnull(strstr(ev, "Validating training file: "));
		ck_assert_ptr_nonnull(strstr(ev, file));
		ck_assert_ptr_nonnull(
		    strstr(ev, "Files validated, moving job to queued state"));
		free(ev);
		free(id);
	}
	unlink(big);
	free(big);
	free(file);
	th_stop();
}
END_TEST

/* Malformed data: the create is accepted (200, validating_files), then the
 * job fails with the first problem naming the file by its id, and an error
 * event carries the validation report. */
START_TEST(test_bad_data_fails_in_background)
{
	char local[] = "/tmp/tacod-badchat-XXXXXX", body[512], *file, *job;
	const char *lines =
	    "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, "
	    "{\"role\": \"assistant\", \"content\": \"hello\"}]}\n"
	    "not json\n"
	    "{\"messages\": 3}\n";
	json_t *j, *e, *ev, *report = NULL;
	size_t i;
	int fd;

	th_start(8ull << 30, NULL);
	ck_assert_int_ge(fd = mkstemp(local), 0);
	ck_assert_int_eq(write(fd, lines, strlen(lines)),
			 (ssize_t)strlen(lines));
	close(fd);
	file = upload(local);
	unlink(local);
	snprintf(body, sizeof(body),
		 "{\"model\": \"chat_llama\", \"training_file\": \"%s\", "
		 "\"taco\": {\"seq_len\": 64, \"steps\": 2}}",
		 file);
	ck_assert_int_eq(
	    th_call("POST", "/v1/fine_tuning/jobs", body, NULL, &j), 200);
	ck_assert_str_eq(th_str(j, "status"), "validating_files");
	job = strdup(th_str(j, "id"));
	json_decref(j);
	j = th_wait_status(job, "failed");
	e = json_object_get(j, "error");
	ck_assert_str_eq(th_str(e, "code"), "invalid_training_file");
	ck_assert_str_eq(th_str(e, "param"), "training_file");
	ck_assert_msg(strstr(th_str(e, "message"), file), "%s",
		      th_str(e, "message"));
	ck_assert(json_is_integer(json_object_get(j, "finished_at")));
	json_decref(j);
	snprintf(body, sizeof(body), "/v1/fine_tuning/jobs/%s/events?limit=100",
		 job);
	ck_assert_int_eq(th_call("GET", body, NULL, NULL, &ev), 200);
	json_array_foreach(json_object_get(ev, "data"), i, e)
	{
		if (!strcmp(th_str(e, "level"), "error"))
			report = json_object_get(json_object_get(e, "data"),
						 "validation");
		if (report) {
			ck_assert(strstr(th_str(e, "message"), file));
			break;
		}
	}
	ck_assert_msg(json_is_object(report), "no error event with a report");
	ck_assert_str_eq(th_str(report, "file"), file);
	ck_assert_int_ge(json_integer_value(json_object_get(report, "errors")),
			 2);
	ck_assert_int_ge(json_array_size(json_object_get(report, "problems")),
			 2);
	json_decref(ev);
	free(job);
	free(file);
	th_stop();
}
END_TEST

/* A job whose files are being validated cannot be paused (409) and is
 * cancelled at once; the validation in progress is dropped, and one still
 * waiting never runs. */
START_TEST(test_cancel_while_validating)
{
	char *big = big_train(), *file, *small, *a, *b, *c, *ev;
	json_t *j;

	th_start(8ull << 30, NULL);
	file = upload(big);
	small = th_upload_count();
	a = th_create(file, "\"steps\": 2", 200); /* validating now */
	b = th_create(file, "\"steps\": 2", 200); /* waiting behind a */
	ck_assert_int_eq(job_post(a, "pause", &j), 409);
	ck_assert_str_eq(th_str(json_object_get(j, "error"), "code"),
			 "invalid_state");
	json_decref(j);
	ck_assert_int_eq(job_post(b, "resume", &j), 409);
	json_decref(j);
	ck_assert_int_eq(job_post(a, "cancel", &j), 200);
	ck_assert_str_eq(th_str(j, "status"), "cancelled");
	/* ended: when, as for a job cancelled while it runs */
	ck_assert_int_gt(json_integer_value(json_object_get(j, "finished_at")),
			 0);
	json_decref(j);
	ck_assert_int_eq(job_post(b, "cancel", &j), 200);
	ck_assert_str_eq(th_str(j, "status"), "cancelled");
	json_decref(j);
	/* one validation at a time, oldest first: c's comes after a's */
	c = th_create(small, "\"steps\": 2", 200);
	json_decref(th_wait_status(c, "succeeded"));
	for (int k = 0; k < 2; k++) {
		const char *id = k ? b : a;
		j = th_wait_status(id, "cancelled");
		ck_assert_int_gt(
		    json_integer_value(json_object_get(j, "finished_at")), 0);
		json_decref(j);
		ev = events_dump(id);
		ck_assert_ptr_nonnull(strstr(ev, "was cancelled"));
		ck_assert_ptr_null(strstr(ev, "Files validated"));
		free(ev);
	}
	unlink(big);
	free(big);
	free(file);
	free(small);
	free(a);
	free(b);
	free(c);
	th_stop();
}
END_TEST

/* Starts no job: a validated job waits in queued. */
static void run_nothing(tacod_config *c)
{
	c->limits.max_running_jobs = 0;
}

/* A create parses its job once and writes its file once: the validation
 * works from the job the create parsed, not from the file, which is
 * replaced here, while the job waits behind a long validation, by one
 * that does not parse; and nothing rewrites the file after. (No job
 * runs: taco-train would refuse the replacement.) */
START_TEST(test_create_reads_no_job_file)
{
	static const char garbage[] = "{\"not a job\": ";
	char *big = big_train(), *file, *small, *a, *b, *ev, path[512];
	char back[64] = "";
	json_t *j;
	FILE *f;

	th_start(8ull << 30, run_nothing);
	file = upload(big);
	small = th_upload_count();
	a = th_create(file, "\"steps\": 2", 200);  /* validating: seconds */
	b = th_create(small, "\"steps\": 2", 200); /* waiting behind a */
	snprintf(path, sizeof(path), "%s/jobs/%s/job.json", th_state, b);
	ck_assert_ptr_nonnull(f = fopen(path, "w"));
	ck_assert_int_ge(fputs(garbage, f), 0);
	ck_assert_int_eq(fclose(f), 0);
	expect_status(b, "validating_files");
	json_decref(th_wait_status(b, "queued"));
	ev = events_dump(b);
	ck_assert_msg(strstr(ev, "Files validated, moving job to queued state"),
		      "the validation read the job file back: %s", ev);
	free(ev);
	ck_assert_ptr_nonnull(f = fopen(path, "r"));
	ck_assert_ptr_nonnull(fgets(back, sizeof(back), f));
	fclose(f);
	ck_assert_str_eq(back, garbage);
	for (int k = 0; k < 2; k++) {
		ck_assert_int_eq(job_post(k ? b : a, "cancel", &j), 200);
		json_decref(j);
	}
	unlink(big);
	free(big);
	free(file);
	free(small);
	free(a);
	free(b);
	th_stop();
}
END_TEST

/* kill -9 while jobs wait for their files to be validated: a restarted
 * tacod validates them again, and they run. */
START_TEST(test_kill9_while_validating)
{
	char cfg[128], dir[64], *big = big_train(), *ev;
	char *file, *a, *b;
	pid_t pid;

	pid = real_tacod(dir, cfg, "{}");
	file = upload(big);
	a = th_create(file, "\"steps\": 2", 200);
	b = th_create(file, "\"steps\": 2", 200);
	expect_status(b, "validating_files");
	pid = kill9_restart(pid, cfg);
	json_decref(th_wait_status(a, "succeeded"));
	json_decref(th_wait_status(b, "succeeded"));
	ev = events_dump(b);
	ck_assert_ptr_nonnull(
	    strstr(ev, "tacod restarted: the files are validated again"));
	ck_assert_ptr_nonnull(strstr(ev, "Files validated"));
	free(ev);
	real_tacod_end(pid, dir);
	unlink(big);
	free(big);
	free(file);
	free(a);
	free(b);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tacod");
	TCase *tc = tcase_create("tacod");

	curl_global_init(CURL_GLOBAL_DEFAULT);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_lifecycle);
	tcase_add_test(tc, test_other_families);
	tcase_add_test(tc, test_rejections_and_cancel);
	tcase_add_test(tc, test_kill9_recovery);
	tcase_add_test(tc, test_kill9_dpo);
	tcase_add_test(tc, test_create_validates_in_background);
	tcase_add_test(tc, test_bad_data_fails_in_background);
	tcase_add_test(tc, test_cancel_while_validating);
	tcase_add_test(tc, test_create_reads_no_job_file);
	tcase_add_test(tc, test_kill9_while_validating);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
