/* config/devices.c: tacod.json's "devices", the GPUs one tacod schedules
 * jobs on (docs/tacod.md "Several GPUs"): [{"index": 0, "memory":
 * "80GB"}, ...], or "auto": every usable GPU taco-train --list-devices
 * finds (runner/discover.c, at start). Without it, one device of
 * device_memory. On the CPU
 * backend the devices are memory budgets: the same admission, tested in
 * CI. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "daemon/config/config.h"
#include "plan/plan.h"

static int device_at(json_t *e, size_t i, tacod_device_config *d,
		     const char *name, taco_err *err)
{
	json_t *idx = json_object_get(e, "index"), *mem;
	const char *k;
	json_t *v;

	if (!json_is_object(e))
		return taco_err_set(err, -EINVAL,
				    "%s: devices[%zu] must be an object "
				    "{\"index\": N, \"memory\": \"80GB\"}",
				    name, i);
	json_object_foreach(e, k, v)
	{
		if (strcmp(k, "index") && strcmp(k, "memory"))
			return taco_err_set(
			    err, -EINVAL, "%s: unknown field 'devices[%zu].%s'",
			    name, i, k);
	}
	if (!json_is_integer(idx) || json_integer_value(idx) < 0 ||
	    json_integer_value(idx) > TACOD_DEVICE_INDEX_MAX)
		return taco_err_set(err, -EINVAL,
				    "%s: devices[%zu].index must be the GPU's "
				    "number, 0 to %d",
				    name, i, TACOD_DEVICE_INDEX_MAX);
	d->index = (int)json_integer_value(idx);
	mem = json_object_get(e, "memory");
	if (json_is_integer(mem) && json_integer_value(mem) > 0) {
		d->memory = (uint64_t)json_integer_value(mem);
		return 0;
	}
	if (json_is_string(mem) &&
	    !taco_parse_bytes(json_string_value(mem), &d->memory) &&
	    d->memory > 0)
		return 0;
	return taco_err_set(err, -EINVAL,
			    "%s: devices[%zu].memory must be a size: bytes, "
			    "or \"80GB\", \"512MiB\"",
			    name, i);
}

int tacod_config_devices(json_t *v, tacod_config *c, const char *name,
			 taco_err *err)
{
	tacod_device_config d[TACOD_MAX_DEVICES] = {{0}};
	size_t i, n;
	json_t *e;
	int r;

	if (json_is_string(v) && !strcmp(json_string_value(v), "auto")) {
		c->devices_auto = 1;
		c->n_devices = 0;
		return 0;
	}
	if (!json_is_array(v) || !(n = json_array_size(v)) ||
	    n > TACOD_MAX_DEVICES)
		return taco_err_set(err, -EINVAL,
				    "%s: 'devices' must be \"auto\" or a list "
				    "of 1 to %d GPUs, each {\"index\": N, "
				    "\"memory\": \"80GB\"}",
				    name, TACOD_MAX_DEVICES);
	json_array_foreach(v, i, e)
	{
		if ((r = device_at(e, i, &d[i], name, err)))
			return r;
		for (size_t j = 0; j < i; j++)
			if (d[j].index == d[i].index)
				return taco_err_set(
				    err, -EINVAL,
				    "%s: devices[%zu] and devices[%zu] are "
				    "both GPU %d: a job would run on it twice",
				    name, j, i, d[i].index);
	}
	memcpy(c->devices, d, n * sizeof(d[0]));
	c->n_devices = (int)n;
	return 0;
}

int tacod_config_device_list(const tacod_config *c, tacod_device_config *out)
{
	if (c->n_devices) {
		memcpy(out, c->devices, (size_t)c->n_devices * sizeof(*out));
		return c->n_devices;
	}
	out[0].index = -1; /* the one device: nothing to pin */
	out[0].memory = c->device_memory;
	return 1;
}
