/* discover.c: tacod.json's "devices": "auto" (docs/tacod.md "Several
 * GPUs"). tacod never loads the CUDA backend itself (the daemon calls no
 * kernel), so it asks taco-train: `taco-train --list-devices` prints the
 * GPUs the CUDA runtime sees, and the usable ones (compute capability 8.0
 * or newer, as the backend needs) become the config's devices, each with
 * its total memory as the budget its jobs' plans share (the plans count
 * the CUDA context themselves). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "daemon/config/config.h"
#include "daemon/runner/discover.h"
#include "daemon/runner/slurm_files.h"

#define LIST_OUT_MAX (64u << 10) /* 64 GPUs' JSON is far less */

/* One entry of the list: usable ones into d. */
static int entry_at(json_t *e, size_t i, tacod_device_config *d, int *usable,
		    taco_err *err)
{
	json_t *idx = json_object_get(e, "index");
	json_t *mem = json_object_get(e, "memory");
	json_t *name = json_object_get(e, "name");
	json_t *ok = json_object_get(e, "usable");

	if (!json_is_integer(idx) || json_integer_value(idx) < 0 ||
	    json_integer_value(idx) > TACOD_DEVICE_INDEX_MAX ||
	    !json_is_integer(mem) || json_integer_value(mem) <= 0 ||
	    !json_is_string(name) || !json_is_boolean(ok))
		return taco_err_set(err, -EINVAL,
				    "taco-train --list-devices: devices[%zu] "
				    "is not {index, name, memory, usable}",
				    i);
	d->index = (int)json_integer_value(idx);
	d->memory = (uint64_t)json_integer_value(mem);
	snprintf(d->name, sizeof(d->name), "%s", json_string_value(name));
	*usable = json_is_true(ok);
	return 0;
}

int tacod_devices_parse_list(const char *out, size_t len,
			     tacod_device_config *d, int cap, int *n,
			     int *unusable, taco_err *err)
{
	json_error_t je;
	json_t *root = json_loadb(out, len, 0, &je), *list, *e;
	tacod_device_config x;
	int k = 0, skipped = 0, usable = 0, r = 0;
	size_t i;

	list = json_object_get(root, "devices");
	if (!json_is_array(list)) {
		r = taco_err_set(err, -EINVAL,
				 "taco-train --list-devices: its output is "
				 "not {\"devices\": [...]}");
		goto out;
	}
	json_array_foreach(list, i, e)
	{
		memset(&x, 0, sizeof(x));
		if ((r = entry_at(e, i, &x, &usable, err)))
			goto out;
		if (!usable) {
			skipped++;
			continue;
		}
		if (k == cap) {
			r = taco_err_set(err, -E2BIG,
					 "taco-train --list-devices: more "
					 "than %d usable GPUs: list the ones "
					 "to use in 'devices'",
					 cap);
			goto out;
		}
		d[k++] = x;
	}
	*n = k;
	*unusable = skipped;
out:
	json_decref(root);
	return r;
}

typedef struct query {
	int finished;
	tacod_config *c;
	taco_err *err;
	int r;
} query;

/* The runner's own stderr tail without its "taco-train: " prefix and
 * trailing newline, for an error that reads as one sentence. */
static void reason_of(const char *tail, char *buf, size_t cap)
{
	const char *p = strstr(tail, "--list-devices: ");
	size_t n;

	p = p ? p + strlen("--list-devices: ") : tail;
	snprintf(buf, cap, "%s", p);
	n = strlen(buf);
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		buf[--n] = 0;
}

static void on_listed(const tacod_slurm_result *res, void *ctx)
{
	query *q = ctx;
	tacod_device_config d[TACOD_MAX_DEVICES];
	char why[TACOD_SLURM_ERR_MAX];
	int n = 0, skipped = 0;

	q->finished = 1;
	if (res->rc == -ETIMEDOUT) {
		q->r = taco_err_set(q->err, -ETIMEDOUT,
				    "'devices': \"auto\": %s --list-devices "
				    "did not answer in time",
				    q->c->taco_train);
		return;
	}
	reason_of(res->err ? res->err : "", why, sizeof(why));
	if (res->rc || res->signal || res->status) {
		q->r = taco_err_set(q->err, -ENODEV,
				    "'devices': \"auto\" found no GPU: %s",
				    why[0] ? why : "taco-train failed");
		return;
	}
	if ((q->r = tacod_devices_parse_list(res->out, res->len, d,
					     TACOD_MAX_DEVICES, &n, &skipped,
					     q->err)))
		return;
	if (!n) {
		q->r = taco_err_set(q->err, -ENODEV,
				    "'devices': \"auto\" found no usable GPU "
				    "(%d below compute capability 8.0)",
				    skipped);
		return;
	}
	memcpy(q->c->devices, d, (size_t)n * sizeof(d[0]));
	q->c->n_devices = n;
}

int tacod_devices_discover(tacod_config *c, uint64_t timeout_ms, taco_err *err)
{
	char *argv[] = {c->taco_train, "--list-devices", NULL};
	query q = {.c = c, .err = err};
	uv_loop_t loop;
	int r;

	if (!c->devices_auto || c->n_devices)
		return 0;
	if ((r = uv_loop_init(&loop)))
		return taco_err_set(err, r, "uv_loop_init: %s", uv_strerror(r));
	r = tacod_slurm_run(&loop, argv, timeout_ms, LIST_OUT_MAX, on_listed,
			    &q, err);
	if (!r) {
		uv_run(&loop, UV_RUN_DEFAULT);
		r = q.finished ? q.r : taco_err_set(err, -EIO, "no answer");
	}
	uv_loop_close(&loop);
	return r;
}
