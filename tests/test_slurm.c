/* test_slurm.c: scheduler "slurm" against a real single-host Slurm cluster
 * (tests/slurm/cluster.sh, started by CTest's fixture slurm_cluster, whose
 * slurm.conf SLURM_CONF names): the real tacod binary submits the jobs
 * with sbatch, follows them with squeue and reads their events files. A
 * job trains to succeeded; a cancel ends the Slurm job; a taco-train
 * killed on its node is resubmitted and resumes from its checkpoint; a
 * tacod killed with -9 mid-job finds the job again, with every event
 * once. */
#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tacod_harness.h"
#include "testutil.h"

static char dir[64], cfg[128];

/* The real tacod with scheduler "slurm" in a fresh directory. */
static pid_t slurm_tacod(void)
{
	const char *bin = getenv("TACO_BIN_DIR");
	FILE *f;

	ck_assert_msg(getenv("SLURM_CONF"), "SLURM_CONF is not set");
	snprintf(dir, sizeof(dir), "/tmp/tacod-slurm-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(th_sock, sizeof(th_sock), "%s/th_sock", dir);
	snprintf(cfg, sizeof(cfg), "%s/tacod.json", dir);
	f = fopen(cfg, "w");
	fprintf(f,
		"{\"listen\": \"\", \"unix_socket\": \"%s\", \"state_dir\": "
		"\"%s/state\", \"models_dir\": \"%s\", \"taco_train\": "
		"\"%s/taco-train\", \"cancel_timeout_s\": 20, "
		"\"scheduler\": \"slurm\", \"slurm\": {\"jobs_dir\": "
		"\"%s/shared\", \"gpu_memory\": \"8GB\", \"partition\": "
		"\"gpu\", \"time_limit\": \"10:00\", \"poll_interval_s\": 1, "
		"\"sbatch_options\": [\"--cpus-per-task=1\"]}}",
		th_sock, dir, tu_fixture("models"), bin ? bin : ".", dir);
	fclose(f);
	return th_spawn_tacod(cfg);
}

static void tacod_end(pid_t pid)
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

/* A command's first line of output ("" when none). */
static void run_line(const char *cmd, char *out, size_t cap)
{
	FILE *p = popen(cmd, "r");

	ck_assert_ptr_nonnull(p);
	out[0] = 0;
	if (!fgets(out, (int)cap, p))
		out[0] = 0;
	out[strcspn(out, "\n")] = 0;
	pclose(p);
}

/* The job's events, oldest first: the list's pages (newest first, as
 * OpenAI's) read back to the first event, then reversed. */
static json_t *events_of(const char *job)
{
	char path[512], after[128] = "";
	json_t *all = json_array(), *out = json_array(), *j;
	int more = 1;

	while (more) {
		snprintf(path, sizeof(path),
			 "/v1/fine_tuning/jobs/%s/events?limit=100%s%s", job,
			 after[0] ? "&after=" : "", after);
		ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 200);
		for (size_t i = 0;
		     i < json_array_size(json_object_get(j, "data")); i++) {
			json_t *e =
			    json_array_get(json_object_get(j, "data"), i);
			json_array_append(all, e);
			snprintf(after, sizeof(after), "%s", th_str(e, "id"));
		}
		more = json_is_true(json_object_get(j, "has_more"));
		json_decref(j);
	}
	for (size_t i = json_array_size(all); i > 0; i--)
		json_array_append(out, json_array_get(all, i - 1));
	json_decref(all);
	return out;
}

static int has_message(json_t *ev, const char *needle)
{
	for (size_t i = 0; i < json_array_size(ev); i++) {
		const char *m = th_str(json_array_get(ev, i), "message");
		if (m && strstr(m, needle))
			return 1;
	}
	return 0;
}

/* The steps of the metrics events, in order; *n of them. */
static int metric_steps(json_t *ev, int *steps, int cap)
{
	int n = 0;

	for (size_t i = 0; i < json_array_size(ev); i++) {
		json_t *e = json_array_get(ev, i),
		       *d = json_object_get(e, "data");
		if (strcmp(th_str(e, "type"), "metrics") ||
		    !json_object_get(d, "train_loss"))
			continue;
		ck_assert_int_lt(n, cap);
		steps[n++] =
		    (int)json_integer_value(json_object_get(d, "step"));
	}
	return n;
}

static long long slurm_id_of(json_t *ev)
{
	for (size_t i = 0; i < json_array_size(ev); i++) {
		const char *m = th_str(json_array_get(ev, i), "message");
		const char *p =
		    m ? strstr(m, "Submitted to Slurm as job ") : NULL;
		if (p)
			return atoll(p + 26);
	}
	return 0;
}

static int checkpoints(const char *job)
{
	char path[256];
	json_t *j;
	int n;

	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/checkpoints",
		 job);
	ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 200);
	n = (int)json_array_size(json_object_get(j, "data"));
	json_decref(j);
	return n;
}

static void wait_checkpoint(const char *job)
{
	for (int i = 0; i < 1200 && checkpoints(job) == 0; i++)
		usleep(100000);
	ck_assert_int_gt(checkpoints(job), 0);
}

/* squeue lists the Slurm job no more as pending, running or completing */
static void wait_slurm_gone(long long id)
{
	char cmd[128], line[256];

	snprintf(cmd, sizeof(cmd),
		 "squeue -h -j %lld -t PENDING,RUNNING,COMPLETING -o %%T "
		 "2>/dev/null",
		 id);
	for (int i = 0; i < 300; i++) {
		run_line(cmd, line, sizeof(line));
		if (!line[0])
			return;
		usleep(100000);
	}
	ck_abort_msg("Slurm job %lld is still %s", id, line);
}

/* key of the started event in the job's events file (start_step, gpus):
 * the last run's (each run's file is new); -1 before there is one. */
static int started_int(const char *job, const char *key)
{
	char p[256], l[4096];
	int at = -1;
	FILE *f;

	snprintf(p, sizeof(p), "%s/shared/%s/events.jsonl", dir, job);
	f = fopen(p, "r");
	if (!f)
		return -1;
	while (fgets(l, sizeof(l), f)) {
		json_error_t e;
		json_t *o = json_loads(l, 0, &e);
		if (o && !strcmp(th_str(o, "event"), "started"))
			at = (int)json_integer_value(json_object_get(o, key));
		json_decref(o);
	}
	fclose(f);
	return at;
}

START_TEST(test_slurm_trains)
{
	pid_t pid = slurm_tacod();
	char *file = th_upload_count(), *job, cmd[128], line[4096];
	int steps[64], n;
	long long sid;
	json_t *j, *ev;

	/* a plan over slurm.gpu_memory is refused at create, as locally */
	th_create(file, "\"steps\": 4, \"seq_len\": 1048576", 400);
	job = th_create(
	    file, "\"steps\": 6, \"lr\": 0.01, \"checkpoint_every\": 3", 200);
	j = th_wait_status(job, "succeeded");
	ck_assert_ptr_nonnull(
	    strstr(th_str(j, "fine_tuned_model"), "ft:llama_gqa:t:"));
	ck_assert_int_gt(
	    json_integer_value(json_object_get(j, "trained_tokens")), 0);
	json_decref(j);
	ev = events_of(job);
	sid = slurm_id_of(ev);
	ck_assert_int_gt(sid, 0);
	ck_assert(has_message(ev, "The job is running"));
	ck_assert(has_message(ev, "successfully completed"));
	n = metric_steps(ev, steps, 64);
	ck_assert_int_eq(n, 6);
	for (int i = 0; i < n; i++)
		ck_assert_int_eq(steps[i], i + 1);
	json_decref(ev);
	ck_assert_int_eq(checkpoints(job), 2);
	/* Slurm ran it as asked: one GPU of the gres, its name, its
	 * comment */
	snprintf(cmd, sizeof(cmd), "scontrol show job -o %lld", sid);
	run_line(cmd, line, sizeof(line));
	ck_assert_msg(strstr(line, "gres:gpu:1"), "%s", line);
	ck_assert_msg(strstr(line, "JobName=tacod-ftjob-"), "%s", line);
	ck_assert_msg(strstr(line, "JobState=COMPLETED"), "%s", line);
	free(file);
	free(job);
	tacod_end(pid);
}
END_TEST

START_TEST(test_slurm_cancel)
{
	pid_t pid = slurm_tacod();
	char *file = th_upload_count(), *job, path[256];
	json_t *j, *ev;
	long long sid;

	job = th_create(file, "\"steps\": 100000, \"lr\": 0.01", 200);
	json_decref(th_wait_status(job, "running"));
	usleep(1500000);
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/cancel", job);
	ck_assert_int_eq(th_call("POST", path, "{}", NULL, &j), 200);
	json_decref(j);
	json_decref(th_wait_status(job, "cancelled"));
	ev = events_of(job);
	sid = slurm_id_of(ev);
	ck_assert_int_gt(sid, 0);
	ck_assert(has_message(ev, "training loss="));
	ck_assert(has_message(ev, "The job was cancelled"));
	json_decref(ev);
	wait_slurm_gone(sid);
	free(file);
	free(job);
	tacod_end(pid);
}
END_TEST

START_TEST(test_slurm_killed_step_requeued)
{
	pid_t pid = slurm_tacod();
	char *file = th_upload_count(), *job, path[256], line[64];
	int steps[256], n, resumed_at = 0;
	json_t *ev;

	job = th_create(file,
			"\"steps\": 40, \"lr\": 0.01, \"checkpoint_every\": 5, "
			"\"seq_len\": 768",
			200);
	json_decref(th_wait_status(job, "running"));
	wait_checkpoint(job);
	/* taco-train dies on its node (as at an out-of-memory kill): the
	 * batch script records the signal, Slurm says FAILED */
	snprintf(path, sizeof(path), "cat %s/shared/%s/train.pid", dir, job);
	run_line(path, line, sizeof(line));
	ck_assert_int_gt(atoi(line), 1);
	ck_assert_int_eq(kill(atoi(line), SIGKILL), 0);
	json_decref(th_wait_status(job, "succeeded"));
	ev = events_of(job);
	ck_assert(has_message(ev, "resumes from its newest checkpoint"));
	/* every step trained at least once (some twice: those after the
	 * checkpoint the second run resumed from) */
	n = metric_steps(ev, steps, 256);
	ck_assert_int_ge(n, 40);
	for (int want = 1; want <= 40; want++) {
		int seen = 0;
		for (int i = 0; i < n; i++)
			seen |= steps[i] == want;
		ck_assert_msg(seen, "no metrics of step %d", want);
	}
	ck_assert_int_eq(steps[n - 1], 40);
	/* the second run's own events file: it started from a checkpoint,
	 * not at step 0 */
	resumed_at = started_int(job, "start_step");
	ck_assert_int_ge(resumed_at, 5);
	json_decref(ev);
	free(file);
	free(job);
	tacod_end(pid);
}
END_TEST

START_TEST(test_slurm_tacod_restart)
{
	pid_t pid = slurm_tacod();
	char *file = th_upload_count(), *job;
	int steps[256], n, st;
	json_t *ev;

	job =
	    th_create(file,
		      "\"steps\": 40, \"lr\": 0.01, \"checkpoint_every\": 10, "
		      "\"seq_len\": 768",
		      200);
	json_decref(th_wait_status(job, "running"));
	wait_checkpoint(job);
	/* kill -9 mid-job: the Slurm job trains on meanwhile */
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	unlink(th_sock);
	sleep(2);
	pid = th_spawn_tacod(cfg);
	json_decref(th_wait_status(job, "succeeded"));
	ev = events_of(job);
	ck_assert(has_message(ev, "follows Slurm job"));
	ck_assert(!has_message(ev, "resumes from its newest checkpoint"));
	/* every step's metrics once, in order: none lost, none twice */
	n = metric_steps(ev, steps, 256);
	ck_assert_int_eq(n, 40);
	for (int i = 0; i < n; i++)
		ck_assert_int_eq(steps[i], i + 1);
	json_decref(ev);
	free(file);
	free(job);
	tacod_end(pid);
}
END_TEST

/* Two GPUs in the cluster, both taken by a job of two ranks (srun starts
 * them, one task a GPU): a second job waits in Slurm's queue (PENDING),
 * queued in tacod, and a cancel removes it there; a pause reaches both
 * ranks, which checkpoint and give the GPUs back; a resume submits the
 * job again with --resume, and its two ranks finish it. */
START_TEST(test_slurm_pending_and_pause)
{
	pid_t pid = slurm_tacod();
	char *file = th_upload_count(), *a, *b, path[256];
	long long sa, sb = 0;
	json_t *j, *ev;

	a = th_create(file,
		      "\"steps\": 40, \"lr\": 0.01, \"checkpoint_every\": 5, "
		      "\"seq_len\": 768, \"gpus\": 2",
		      200);
	json_decref(th_wait_status(a, "running"));
	for (int i = 0; i < 300 && started_int(a, "gpus") != 2; i++)
		usleep(100000);
	ck_assert_int_eq(started_int(a, "gpus"), 2);
	ev = events_of(a);
	sa = slurm_id_of(ev);
	json_decref(ev);
	snprintf(path, sizeof(path), "scontrol show job -o %lld", sa);
	{
		char line[4096];
		run_line(path, line, sizeof(line));
		ck_assert_msg(strstr(line, "gres:gpu:2") &&
				  strstr(line, "NumTasks=2"),
			      "%s", line);
	}
	b = th_create(file, "\"steps\": 3", 200);
	for (int i = 0; i < 300 && !sb; i++) {
		ev = events_of(b);
		sb = slurm_id_of(ev);
		json_decref(ev);
		if (!sb)
			usleep(100000);
	}
	ck_assert_int_gt(sb, 0);
	sleep(2);
	/* Slurm holds it for the GPU: still queued in tacod */
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s", b);
	ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 200);
	ck_assert_str_eq(th_str(j, "status"), "queued");
	json_decref(j);
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/cancel", b);
	ck_assert_int_eq(th_call("POST", path, "{}", NULL, &j), 200);
	json_decref(j);
	json_decref(th_wait_status(b, "cancelled"));
	wait_slurm_gone(sb);
	/* pause: a checkpoint, and the Slurm job ends */
	wait_checkpoint(a);
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/pause", a);
	ck_assert_int_eq(th_call("POST", path, "{}", NULL, &j), 200);
	json_decref(j);
	json_decref(th_wait_status(a, "paused"));
	ev = events_of(a);
	sa = slurm_id_of(ev);
	json_decref(ev);
	wait_slurm_gone(sa);
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/resume", a);
	ck_assert_int_eq(th_call("POST", path, "{}", NULL, &j), 200);
	json_decref(j);
	json_decref(th_wait_status(a, "succeeded"));
	ev = events_of(a);
	ck_assert(has_message(ev, "The job was paused"));
	json_decref(ev);
	free(file);
	free(a);
	free(b);
	tacod_end(pid);
}
END_TEST

/* The node fails under a running job (scontrol sets it DOWN: Slurm ends
 * the job NODE_FAIL): tacod submits it again, Slurm holds it until the
 * node is back, and it resumes from its checkpoint. */
START_TEST(test_slurm_node_fail)
{
	pid_t pid = slurm_tacod();
	char *file = th_upload_count(), *job;
	int seen = 0;
	json_t *ev;

	job = th_create(file,
			"\"steps\": 40, \"lr\": 0.01, \"checkpoint_every\": 5, "
			"\"seq_len\": 768",
			200);
	json_decref(th_wait_status(job, "running"));
	wait_checkpoint(job);
	ck_assert_int_eq(system("scontrol update nodename=localhost "
				"state=down reason=tacod-test"),
			 0);
	/* requeued: queued again in tacod, pending in Slurm */
	for (int i = 0; i < 300; i++) {
		ev = events_of(job);
		seen = has_message(ev, "ended NODE_FAIL");
		json_decref(ev);
		if (seen)
			break;
		usleep(100000);
	}
	ck_assert(seen);
	/* back: resumed by hand, unless slurmd's registration has brought it
	 * back already (ReturnToService=2), when resume is refused */
	(void)!system("scontrol update nodename=localhost state=resume "
		      "2>/dev/null");
	json_decref(th_wait_status(job, "succeeded"));
	ck_assert_int_ge(started_int(job, "start_step"), 5);
	free(file);
	free(job);
	tacod_end(pid);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("slurm");
	TCase *tc = tcase_create("cluster");

	curl_global_init(CURL_GLOBAL_DEFAULT);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_slurm_trains);
	tcase_add_test(tc, test_slurm_cancel);
	tcase_add_test(tc, test_slurm_killed_step_requeued);
	tcase_add_test(tc, test_slurm_tacod_restart);
	tcase_add_test(tc, test_slurm_pending_and_pause);
	tcase_add_test(tc, test_slurm_node_fail);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
