/* test_tacod_devices.c: one tacod, several devices (tacod.json "devices",
 * docs/tacod.md "Several GPUs"). On the CPU backend the devices are memory
 * budgets, so the admission is the GPUs': three devices that hold one job
 * each run three jobs at once, one a device, each worker pinned with
 * CUDA_VISIBLE_DEVICES to its own; a fourth waits, and takes the device a
 * cancelled job leaves; /v1/device and /metrics show each device and its
 * job. Against a real in-process tacod, with taco-train behind a wrapper
 * that records the CUDA_VISIBLE_DEVICES it was given. And "devices":
 * "auto": the usable GPUs of taco-train --list-devices (a stand-in that
 * lists three, one too old; one that fails; one that hangs; the real one,
 * which finds none here), in tacod --check-config and /v1/device. */
#include <check.h>
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/runner/discover.h"
#include "plan/plan.h"
#include "tacod_harness.h"
#include "testutil.h"

static const int indexes[3] = {0, 3, 5};
static uint64_t budget;
static char wrapper[128];

/* taco-train behind a script that writes its CUDA_VISIBLE_DEVICES beside
 * the job file (its last argument), whole or not at all (a rename) */
static void make_wrapper(void)
{
	const char *bin = getenv("TACO_BIN_DIR");
	FILE *f;

	snprintf(wrapper, sizeof(wrapper), "/tmp/tacod-devices-%d.sh",
		 (int)getpid());
	f = fopen(wrapper, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f,
		"#!/bin/sh\n"
		"for last; do :; done\n"
		"d=$(dirname \"$last\")\n"
		"printf '%%s' \"${CUDA_VISIBLE_DEVICES-unset}\" "
		">\"$d/devices.tmp\"\n"
		"mv \"$d/devices.tmp\" \"$d/devices\"\n"
		"exec '%s/taco-train' \"$@\"\n",
		bin ? bin : ".");
	fclose(f);
	ck_assert_int_eq(chmod(wrapper, 0755), 0);
}

static void three_devices(tacod_config *c)
{
	c->n_devices = 3;
	for (int d = 0; d < 3; d++) {
		c->devices[d].index = indexes[d];
		c->devices[d].memory = budget;
	}
	snprintf(c->taco_train, sizeof(c->taco_train), "%s", wrapper);
}

static long post(const char *path, json_t **out)
{
	return th_call("POST", path, "{}", NULL, out);
}

/* The CUDA numbers job runs on, as /v1/device lists them, one digit
 * each, into out (""); and the device entries' job counts. */
static void device_of(const char *job, char *out, int *jobs)
{
	json_t *d, *e, *r;
	size_t i, k;

	ck_assert_int_eq(th_call("GET", "/v1/device", NULL, NULL, &d), 200);
	out[0] = 0;
	json_array_foreach(json_object_get(d, "running_jobs"), i, r)
	{
		if (strcmp(th_str(r, "id"), job))
			continue;
		json_array_foreach(json_object_get(r, "devices"), k, e)
		    sprintf(out + strlen(out), "%lld",
			    (long long)json_integer_value(e));
	}
	ck_assert_int_eq(json_array_size(json_object_get(d, "devices")), 3);
	json_array_foreach(json_object_get(d, "devices"), i, e)
	{
		ck_assert_int_eq(
		    json_integer_value(json_object_get(e, "index")),
		    indexes[i]);
		ck_assert_int_eq(
		    json_integer_value(json_object_get(e, "memory_total")),
		    (json_int_t)budget);
		jobs[i] =
		    (int)json_array_size(json_object_get(e, "running_jobs"));
	}
	ck_assert_int_eq(json_integer_value(json_object_get(d, "memory_total")),
			 (json_int_t)(3 * budget));
	json_decref(d);
}

/* The job is "running" once tacod has spawned the wrapper, which may not
 * have written its file yet (a busy machine): wait for it, as for a job. */
static void pinned_to(const char *job, char *out, size_t cap)
{
	char path[512];
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "%s/jobs/%s/devices", th_state, job);
	for (int i = 0; i < TH_WAIT_TICKS && access(path, F_OK); i++)
		usleep(100000);
	f = fopen(path, "r");
	ck_assert_msg(f != NULL, "no %s", path);
	n = fread(out, 1, cap - 1, f);
	out[n] = 0;
	fclose(f);
}

START_TEST(test_three_devices)
{
	char body[512], path[256], where[4][16], env[16], *file, *job[4];
	int jobs[3], used = 0;
	json_t *j;
	char *m;
	int64_t plan;

	/* one job's plan, then devices that hold one each (1.5 plans) */
	th_start(8ull << 30, NULL);
	file = th_upload_count();
	snprintf(body, sizeof(body),
		 "{\"model\": \"llama_gqa\", \"training_file\": \"%s\", "
		 "\"suffix\": \"t\", \"taco\": {\"steps\": 100000, "
		 "\"seq_len\": 24}}",
		 file);
	ck_assert_int_eq(
	    th_call("POST", "/v1/fine_tuning/plan", body, NULL, &j), 200);
	plan = json_integer_value(json_object_get(j, "total_bytes"));
	ck_assert_int_gt(plan, 0);
	json_decref(j);
	free(file);
	th_stop();
	budget = (uint64_t)plan * 3 / 2;
	make_wrapper();
	th_start(0, three_devices);
	file = th_upload_count();
	for (int i = 0; i < 4; i++)
		job[i] = th_create(file, "\"steps\": 100000", 200);
	for (int i = 0; i < 3; i++)
		json_decref(th_wait_status(job[i], "running"));
	usleep(1500000); /* a few scheduler ticks: the fourth still waits */
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s", job[3]);
	ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 200);
	ck_assert_str_eq(th_str(j, "status"), "queued");
	json_decref(j);
	/* one job a device, each pinned to its own */
	for (int i = 0; i < 3; i++) {
		device_of(job[i], where[i], jobs);
		ck_assert_int_eq(strlen(where[i]), 1);
		pinned_to(job[i], env, sizeof(env));
		ck_assert_str_eq(env, where[i]);
		used |= 1 << (where[i][0] - '0');
	}
	ck_assert_int_eq(used, (1 << 0) | (1 << 3) | (1 << 5));
	ck_assert(jobs[0] == 1 && jobs[1] == 1 && jobs[2] == 1);
	m = th_get_text("/metrics", NULL);
	ck_assert_ptr_nonnull(strstr(m, "tacod_gpu_jobs{device=\"3\"} 1"));
	ck_assert_ptr_nonnull(
	    strstr(m, "tacod_gpu_memory_bytes{device=\"5\"}"));
	free(m);
	/* tacoctl device: a row a GPU, each running job with its GPU */
	{
		char cmd[512], out[8192];
		const char *bin = getenv("TACO_BIN_DIR");
		FILE *p;
		size_t n;

		snprintf(cmd, sizeof(cmd),
			 "TACOD_URL=http://127.0.0.1:%d %s/tacoctl device",
			 th_port, bin ? bin : ".");
		p = popen(cmd, "r");
		ck_assert_ptr_nonnull(p);
		n = fread(out, 1, sizeof(out) - 1, p);
		out[n] = 0;
		ck_assert_int_eq(pclose(p), 0);
		ck_assert_msg(strstr(out, "GPU") && strstr(out, "MEMORY") &&
				  strstr(out, job[0]),
			      "%s", out);
	}
	/* the second job's device goes to the fourth */
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/cancel", job[1]);
	ck_assert_int_eq(post(path, &j), 200);
	json_decref(j);
	json_decref(th_wait_status(job[1], "cancelled"));
	json_decref(th_wait_status(job[3], "running"));
	device_of(job[3], where[3], jobs);
	ck_assert_str_eq(where[3], where[1]);
	pinned_to(job[3], env, sizeof(env));
	ck_assert_str_eq(env, where[1]);
	for (int i = 0; i < 4; i++) {
		if (i != 1) {
			snprintf(path, sizeof(path),
				 "/v1/fine_tuning/jobs/%s/cancel", job[i]);
			ck_assert_int_eq(post(path, &j), 200);
			json_decref(j);
			json_decref(th_wait_status(job[i], "cancelled"));
		}
		free(job[i]);
	}
	free(file);
	th_stop();
	unlink(wrapper);
}
END_TEST

/* A request of a long job of gpus n (the default batch of 4). */
static void body_of(const char *file, int n, char *body, size_t cap)
{
	snprintf(body, cap,
		 "{\"model\": \"llama_gqa\", \"training_file\": \"%s\", "
		 "\"suffix\": \"t\", \"taco\": {\"steps\": 100000, "
		 "\"seq_len\": 24, \"gpus\": %d}}",
		 file, n);
}

/* The per-GPU plan of a job of gpus n. */
static int64_t plan_of(const char *file, int n)
{
	char body[512];
	json_t *j;
	int64_t plan;

	body_of(file, n, body, sizeof(body));
	ck_assert_int_eq(
	    th_call("POST", "/v1/fine_tuning/plan", body, NULL, &j), 200);
	plan = json_integer_value(json_object_get(j, "total_bytes"));
	ck_assert_int_gt(plan, 0);
	json_decref(j);
	return plan;
}

static void cancel(const char *job)
{
	char path[256];
	json_t *j;

	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/cancel", job);
	ck_assert_int_eq(post(path, &j), 200);
	json_decref(j);
	json_decref(th_wait_status(job, "cancelled"));
}

/* A job of gpus 2 beside jobs of one: it takes two devices at once, its
 * worker sees both, and its two ranks (taco-train under mpirun) train;
 * the third device takes a one-GPU job, a fourth job waits for a device
 * the two-GPU job leaves. */
START_TEST(test_two_gpu_job)
{
	char *file, *job[3], where[3][16], env[16], path[256], body[512];
	int jobs[3], used = 0;
	int64_t p1, p2;
	json_t *j;

	budget = 8ull << 30;
	make_wrapper();
	th_start(0, three_devices);
	file = th_upload_count();
	p1 = plan_of(file, 1);
	p2 = plan_of(file, 2);
	ck_assert_int_lt(p2, p1); /* a rank's slice is half the batch */
	/* four GPUs of three: never */
	body_of(file, 4, body, sizeof(body));
	th_expect_error(th_call("POST", "/v1/fine_tuning/jobs", body, NULL, &j),
			400, j, "insufficient_gpus");
	free(file);
	th_stop();
	/* each device holds one job, whichever kind */
	budget = (uint64_t)(p1 + p2 / 2);
	th_start(0, three_devices);
	file = th_upload_count();
	job[0] = th_create(file, "\"steps\": 100000, \"gpus\": 2", 200);
	job[1] = th_create(file, "\"steps\": 100000", 200);
	job[2] = th_create(file, "\"steps\": 100000", 200);
	for (int i = 0; i < 2; i++)
		json_decref(th_wait_status(job[i], "running"));
	usleep(1500000);
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s", job[2]);
	ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 200);
	ck_assert_str_eq(th_str(j, "status"), "queued");
	json_decref(j);
	for (int i = 0; i < 2; i++) {
		device_of(job[i], where[i], jobs);
		pinned_to(job[i], env, sizeof(env));
		for (char *c = where[i]; *c; c++)
			used |= 1 << (*c - '0');
		/* "3,5": the worker's CUDA_VISIBLE_DEVICES, /v1/device's "35"
		 */
		ck_assert_int_eq(strlen(where[i]), i == 0 ? 2 : 1);
		ck_assert_int_eq(strlen(env), i == 0 ? 3 : 1);
		ck_assert_int_eq(env[0], where[i][0]);
		ck_assert_int_eq(env[strlen(env) - 1],
				 where[i][strlen(where[i]) - 1]);
	}
	ck_assert_int_eq(used, (1 << 0) | (1 << 3) | (1 << 5));
	/* both ranks train: the job's steps come in */
	for (int i = 0;; i++) {
		ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 200);
		json_decref(j);
		snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s", job[0]);
		ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 200);
		if (json_integer_value(json_object_get(j, "trained_tokens"))) {
			json_decref(j);
			break;
		}
		ck_assert_msg(strcmp(th_str(j, "status"), "failed"), "%s",
			      json_dumps(json_object_get(j, "error"), 0));
		json_decref(j);
		ck_assert_int_lt(i, TH_WAIT_TICKS);
		usleep(100000);
	}
	/* the two-GPU job's devices free, the waiting job takes one */
	cancel(job[0]);
	json_decref(th_wait_status(job[2], "running"));
	device_of(job[2], where[2], jobs);
	ck_assert_ptr_nonnull(strchr(where[0], where[2][0]));
	cancel(job[1]);
	cancel(job[2]);
	for (int i = 0; i < 3; i++)
		free(job[i]);
	free(file);
	th_stop();
	unlink(wrapper);
}
END_TEST

/* A stand-in for taco-train: --list-devices runs body, anything else the
 * real one. */
static void make_lister(char *path, size_t cap, const char *tag,
			const char *body)
{
	FILE *f;

	snprintf(path, cap, "/tmp/tacod-lister-%s-%d.sh", tag, (int)getpid());
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "#!/bin/sh\n[ \"$1\" = --list-devices ] || exit 99\n%s\n",
		body);
	fclose(f);
	ck_assert_int_eq(chmod(path, 0755), 0);
}

static const char three_gpus[] =
    "cat <<'EOF'\n"
    "{\"devices\": [\n"
    " {\"index\": 0, \"name\": \"NVIDIA H200\", \"memory\": 150754820096, "
    "\"compute_capability\": \"9.0\", \"usable\": true},\n"
    " {\"index\": 1, \"name\": \"Tesla V100\", \"memory\": 34089926656, "
    "\"compute_capability\": \"7.0\", \"usable\": false},\n"
    " {\"index\": 2, \"name\": \"NVIDIA H100 80GB HBM3\", \"memory\": "
    "85029158912, \"compute_capability\": \"9.0\", \"usable\": true}]}\n"
    "EOF";

static tacod_config found; /* what discovery made of three_gpus */

static void use_found(tacod_config *c)
{
	c->backend = found.backend;
	c->devices_auto = 1;
	c->n_devices = found.n_devices;
	memcpy(c->devices, found.devices, sizeof(c->devices));
}

static void auto_config(tacod_config *c, const char *lister)
{
	tacod_config_defaults(c);
	c->backend = TACO_BACKEND_CUDA;
	c->devices_auto = 1;
	snprintf(c->taco_train, sizeof(c->taco_train), "%s", lister);
}

START_TEST(test_auto)
{
	char ok[128], fails[128], hangs[128], real[4096], cmd[8192];
	char cfg_path[128], out[4096];
	const char *bin = getenv("TACO_BIN_DIR");
	tacod_device_config d[2];
	taco_err err = {{0}};
	tacod_config c;
	json_t *j, *e;
	size_t i;
	FILE *f;
	int n, skipped, r;

	make_lister(ok, sizeof(ok), "ok", three_gpus);
	make_lister(fails, sizeof(fails), "fails",
		    "echo 'taco-train: --list-devices: no usable CUDA driver "
		    "or device: no CUDA-capable device is detected' >&2; "
		    "exit 1");
	make_lister(hangs, sizeof(hangs), "hangs", "exec sleep 30");
	/* the usable two, in order, each with its memory and name */
	auto_config(&c, ok);
	ck_assert_int_eq(tacod_devices_discover(&c, 10000, &err), 0);
	ck_assert_int_eq(c.n_devices, 2);
	ck_assert_int_eq(c.devices[0].index, 0);
	ck_assert_uint_eq(c.devices[0].memory, 150754820096ull);
	ck_assert_str_eq(c.devices[0].name, "NVIDIA H200");
	ck_assert_int_eq(c.devices[1].index, 2);
	ck_assert_str_eq(c.devices[1].name, "NVIDIA H100 80GB HBM3");
	ck_assert_uint_eq(tacod_config_plan_memory(&c), 150754820096ull);
	found = c;
	/* a list given is kept: no query */
	ck_assert_int_eq(tacod_devices_discover(&c, 10000, &err), 0);
	/* taco-train's reason, and the config unchanged */
	auto_config(&c, fails);
	ck_assert_int_eq(tacod_devices_discover(&c, 10000, &err), -ENODEV);
	ck_assert_msg(strstr(err.msg, "'devices': \"auto\" found no GPU: no "
				      "usable CUDA driver or device") != NULL,
		      "%s", err.msg);
	ck_assert_int_eq(c.n_devices, 0);
	auto_config(&c, hangs);
	ck_assert_int_eq(tacod_devices_discover(&c, 300, &err), -ETIMEDOUT);
	ck_assert_ptr_nonnull(strstr(err.msg, "did not answer in time"));
	/* the real taco-train: no GPU here (or, on a GPU machine, some) */
	snprintf(real, sizeof(real), "%s/taco-train", bin ? bin : ".");
	auto_config(&c, real);
	r = tacod_devices_discover(&c, 60000, &err);
	ck_assert_msg(r == 0
			  ? c.n_devices > 0
			  : r == -ENODEV && strstr(err.msg, "found no") != NULL,
		      "%d: %s", r, err.msg);
	/* the parser: a bad entry, too many */
	ck_assert_int_eq(
	    tacod_devices_parse_list("[]", 2, d, 2, &n, &skipped, &err),
	    -EINVAL);
	ck_assert_int_eq(
	    tacod_devices_parse_list("{\"devices\": [{\"index\": 0}]}", 27, d,
				     2, &n, &skipped, &err),
	    -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "devices[0]"));
	{
		const char *three = strstr(three_gpus, "{\"devices");
		size_t len = strstr(three, "\nEOF") - three;
		ck_assert_int_eq(tacod_devices_parse_list(three, len, d, 1, &n,
							  &skipped, &err),
				 -E2BIG);
	}
	/* tacod --check-config names what it found; with cpu it refuses */
	snprintf(cfg_path, sizeof(cfg_path), "/tmp/tacod-auto-%d.json",
		 (int)getpid());
	f = fopen(cfg_path, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f,
		"{\"backend\": \"cuda\", \"devices\": \"auto\", "
		"\"taco_train\": \"%s\"}",
		ok);
	fclose(f);
	snprintf(cmd, sizeof(cmd), "%s/tacod --config %s --check-config 2>&1",
		 bin ? bin : ".", cfg_path);
	f = popen(cmd, "r");
	out[fread(out, 1, sizeof(out) - 1, f)] = 0;
	ck_assert_int_eq(pclose(f), 0);
	ck_assert_msg(
	    strstr(out, "tacod: devices \"auto\": GPU 0, NVIDIA "
			"H200, 150.8 GB\n") &&
		strstr(out, "GPU 2, NVIDIA H100 80GB HBM3, 85.0 GB") &&
		!strstr(out, "V100") && strstr(out, "configuration is valid"),
	    "%s", out);
	f = fopen(cfg_path, "w");
	fprintf(f,
		"{\"backend\": \"cuda\", \"devices\": \"auto\", "
		"\"taco_train\": \"%s\"}",
		fails);
	fclose(f);
	f = popen(cmd, "r");
	out[fread(out, 1, sizeof(out) - 1, f)] = 0;
	ck_assert_int_eq(WEXITSTATUS(pclose(f)), 2);
	ck_assert_msg(strstr(out, "found no GPU: no usable CUDA driver"), "%s",
		      out);
	unlink(cfg_path);
	/* /v1/device: the GPUs found, with their names */
	th_start(0, use_found);
	ck_assert_int_eq(th_call("GET", "/v1/device", NULL, NULL, &j), 200);
	ck_assert_int_eq(json_array_size(json_object_get(j, "devices")), 2);
	json_array_foreach(json_object_get(j, "devices"), i, e)
	{
		ck_assert_int_eq(
		    json_integer_value(json_object_get(e, "index")),
		    (json_int_t)(2 * i));
		ck_assert_str_eq(th_str(e, "name"), found.devices[i].name);
	}
	json_decref(j);
	/* tacoctl device: a GPU's row has its name */
	snprintf(cmd, sizeof(cmd),
		 "TACOD_URL=http://127.0.0.1:%d %s/tacoctl device", th_port,
		 bin ? bin : ".");
	f = popen(cmd, "r");
	out[fread(out, 1, sizeof(out) - 1, f)] = 0;
	ck_assert_int_eq(pclose(f), 0);
	ck_assert_msg(strstr(out, "NAME") && strstr(out, "NVIDIA H200") &&
			  strstr(out, "NVIDIA H100 80GB HBM3"),
		      "%s", out);
	th_stop();
	unlink(ok);
	unlink(fails);
	unlink(hangs);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tacod_devices");
	TCase *tc = tcase_create("tacod_devices");

	curl_global_init(CURL_GLOBAL_DEFAULT);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_three_devices);
	tcase_add_test(tc, test_auto);
	tcase_add_test(tc, test_two_gpu_job);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
