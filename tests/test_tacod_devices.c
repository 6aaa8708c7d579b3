/* test_tacod_devices.c: one tacod, several devices (tacod.json "devices",
 * docs/tacod.md "Several GPUs"). On the CPU backend the devices are memory
 * budgets, so the admission is the GPUs': three devices that hold one job
 * each run three jobs at once, one a device, each worker pinned with
 * CUDA_VISIBLE_DEVICES to its own; a fourth waits, and takes the device a
 * cancelled job leaves; /v1/device and /metrics show each device and its
 * job. Against a real in-process tacod, with taco-train behind a wrapper
 * that records the CUDA_VISIBLE_DEVICES it was given. */
#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tacod_harness.h"
#include "testutil.h"

static const int indexes[3] = {0, 3, 5};
static uint64_t budget;
static char wrapper[128];

/* taco-train behind a script that writes its CUDA_VISIBLE_DEVICES beside
 * the job file (its last argument) */
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
		"printf '%%s' \"${CUDA_VISIBLE_DEVICES-unset}\" "
		">\"$(dirname \"$last\")/devices\"\n"
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

static void pinned_to(const char *job, char *out, size_t cap)
{
	char path[512];
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "%s/jobs/%s/devices", th_state, job);
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

int main(void)
{
	Suite *s = suite_create("tacod_devices");
	TCase *tc = tcase_create("tacod_devices");

	curl_global_init(CURL_GLOBAL_DEFAULT);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_three_devices);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
