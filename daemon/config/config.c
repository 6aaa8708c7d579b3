#include "daemon/config/config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "util/json_file.h"

void tacod_config_defaults(tacod_config *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->listen, sizeof(c->listen), "127.0.0.1:8226");
	snprintf(c->state_dir, sizeof(c->state_dir), "/var/lib/tacod");
	snprintf(c->models_dir, sizeof(c->models_dir), "/var/lib/tacod/models");
	snprintf(c->taco_train, sizeof(c->taco_train), "taco-train");
	c->device_memory = taco_plan_host_memory();
	c->backend = TACO_BACKEND_CPU;
	c->max_retries = 2;
	c->cancel_timeout_s = 60;
	c->limits.max_body_bytes = 1u << 20;
	c->limits.max_upload_bytes = 8ull << 30;
	c->limits.max_connections = 256;
	c->limits.max_connections_per_client = 32;
	c->limits.request_head_timeout_s = 10;
	c->limits.max_queued_jobs_per_user = 100;
	c->limits.max_running_jobs = 8;
	c->limits.max_sync_validate_bytes = 64ull << 20;
	tacod_config_slurm_defaults(&c->slurm);
	c->chat.idle_s = 300;
	c->chat.wait_s = 30;
	c->chat.max_workers = 2;
	c->chat.rows = 4;
	c->chat.max_requests_per_user = 4;
	c->chat.request_timeout_s = 600;
}

static int str(json_t *o, const char *key, char *out, size_t cap,
	       const char *name, taco_err *err)
{
	json_t *v = json_object_get(o, key);

	if (!v)
		return 0;
	if (!json_is_string(v) || json_string_length(v) >= cap)
		return taco_err_set(err, -EINVAL,
				    "%s: '%s' must be a string shorter than "
				    "%zu bytes",
				    name, key, cap);
	memcpy(out, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

int tacod_config_int(json_t *o, const char *where, const char *key, int lo,
		     int hi, int *out, const char *name, taco_err *err)
{
	json_t *v = json_object_get(o, key);

	if (!v)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < lo ||
	    json_integer_value(v) > hi)
		return taco_err_set(err, -EINVAL,
				    "%s: '%s%s' must be an integer in [%d, %d]",
				    name, where, key, lo, hi);
	*out = (int)json_integer_value(v);
	return 0;
}

/* A size: bytes as an integer, or a string like "80GB". */
static int size(json_t *o, const char *key, uint64_t *out, const char *name,
		taco_err *err)
{
	json_t *v = json_object_get(o, key);

	if (!v)
		return 0;
	if (json_is_integer(v) && json_integer_value(v) > 0) {
		*out = (uint64_t)json_integer_value(v);
		return 0;
	}
	if (json_is_string(v) && !taco_parse_bytes(json_string_value(v), out) &&
	    *out > 0)
		return 0;
	return taco_err_set(err, -EINVAL,
			    "%s: '%s' must be a size: bytes, or \"80GB\", "
			    "\"512MiB\"",
			    name, key);
}

static int known(json_t *o, const char *const *keys, const char *where,
		 const char *name, taco_err *err)
{
	const char *k;
	json_t *v;

	json_object_foreach(o, k, v)
	{
		int ok = 0;
		for (int i = 0; keys[i]; i++)
			ok |= !strcmp(k, keys[i]);
		if (!ok)
			return taco_err_set(err, -EINVAL,
					    "%s: unknown field '%s%s'", name,
					    where, k);
	}
	return 0;
}

static int limits(json_t *o, tacod_limits *l, const char *name, taco_err *err)
{
	static const char *const keys[] = {"max_body_bytes",
					   "max_upload_bytes",
					   "max_connections",
					   "max_connections_per_client",
					   "request_head_timeout_s",
					   "max_queued_jobs_per_user",
					   "max_running_jobs",
					   "max_sync_validate_bytes",
					   NULL};
	int r;

	if (!json_is_object(o))
		return taco_err_set(err, -EINVAL,
				    "%s: 'limits' must be an object", name);
	if ((r = known(o, keys, "limits.", name, err)) ||
	    (r = size(o, "max_body_bytes", &l->max_body_bytes, name, err)) ||
	    (r = size(o, "max_upload_bytes", &l->max_upload_bytes, name, err)))
		return r;
	if ((r = size(o, "max_sync_validate_bytes", &l->max_sync_validate_bytes,
		      name, err)))
		return r;
	if ((r = tacod_config_int(o, "limits.", "max_connections", 1, 100000,
				  &l->max_connections, name, err)))
		return r;
	if ((r = tacod_config_int(o, "limits.", "max_connections_per_client", 1,
				  100000, &l->max_connections_per_client, name,
				  err)))
		return r;
	if ((r = tacod_config_int(o, "limits.", "request_head_timeout_s", 1,
				  3600, &l->request_head_timeout_s, name, err)))
		return r;
	if ((r = tacod_config_int(o, "limits.", "max_queued_jobs_per_user", 1,
				  1000000, &l->max_queued_jobs_per_user, name,
				  err)))
		return r;
	if ((r = tacod_config_int(o, "limits.", "max_running_jobs", 1, 1024,
				  &l->max_running_jobs, name, err)))
		return r;
	return 0;
}

static int chat(json_t *o, tacod_chat_config *c, const char *name,
		taco_err *err)
{
	static const char *const keys[] = {"idle_s",
					   "wait_s",
					   "max_workers",
					   "rows",
					   "context",
					   "max_requests_per_user",
					   "request_timeout_s",
					   NULL};
	int r;

	if (!json_is_object(o))
		return taco_err_set(err, -EINVAL,
				    "%s: 'chat' must be an object", name);
	if ((r = known(o, keys, "chat.", name, err)) ||
	    (r = tacod_config_int(o, "chat.", "idle_s", 1, 86400, &c->idle_s,
				  name, err)) ||
	    (r = tacod_config_int(o, "chat.", "wait_s", 0, 3600, &c->wait_s,
				  name, err)) ||
	    (r = tacod_config_int(o, "chat.", "max_workers", 0, 64,
				  &c->max_workers, name, err)) ||
	    (r = tacod_config_int(o, "chat.", "rows", 1, 8, &c->rows, name,
				  err)) ||
	    (r = tacod_config_int(o, "chat.", "context", 0, 1 << 20,
				  &c->context, name, err)) ||
	    (r = tacod_config_int(o, "chat.", "max_requests_per_user", 1, 1024,
				  &c->max_requests_per_user, name, err)))
		return r;
	return tacod_config_int(o, "chat.", "request_timeout_s", 1, 86400,
				&c->request_timeout_s, name, err);
}

/* The fields of the object root, over what the tacod_config arg holds. */
static int config_from_json(json_t *root, const char *name, void *arg,
			    taco_err *err)
{
	static const char *const keys[] = {
	    "listen",	   "unix_socket", "state_dir",	   "models_dir",
	    "tokens_file", "taco_train",  "dataset_roots", "device_memory",
	    "devices",	   "backend",	  "max_retries",   "cancel_timeout_s",
	    "limits",	   "webhooks",	  "scheduler",	   "slurm",
	    "chat",	   NULL};
	tacod_config *c = arg;
	json_t *v;
	int r;

	if ((r = known(root, keys, "", name, err)) ||
	    (r = str(root, "listen", c->listen, sizeof(c->listen), name,
		     err)) ||
	    (r = str(root, "unix_socket", c->unix_socket,
		     sizeof(c->unix_socket), name, err)) ||
	    (r = str(root, "state_dir", c->state_dir, sizeof(c->state_dir),
		     name, err)) ||
	    (r = str(root, "models_dir", c->models_dir, sizeof(c->models_dir),
		     name, err)) ||
	    (r = str(root, "tokens_file", c->tokens_file,
		     sizeof(c->tokens_file), name, err)) ||
	    (r = str(root, "taco_train", c->taco_train, sizeof(c->taco_train),
		     name, err)) ||
	    (r = size(root, "device_memory", &c->device_memory, name, err)))
		return r;
	if ((v = json_object_get(root, "dataset_roots"))) {
		size_t i;
		json_t *e;
		if (!json_is_array(v) || json_array_size(v) > TACOD_MAX_ROOTS)
			return taco_err_set(err, -EINVAL,
					    "%s: 'dataset_roots' must be an "
					    "array of at most %d paths",
					    name, TACOD_MAX_ROOTS);
		c->n_roots = 0;
		json_array_foreach(v, i, e)
		{
			if (!json_is_string(e) || json_string_length(e) == 0 ||
			    json_string_length(e) >= sizeof(c->roots[0]))
				return taco_err_set(err, -EINVAL,
						    "%s: dataset_roots[%zu] "
						    "must be a path",
						    name, i);
			memcpy(c->roots[c->n_roots++], json_string_value(e),
			       json_string_length(e) + 1);
		}
	}
	if ((v = json_object_get(root, "devices"))) {
		/* each device has its own memory: device_memory besides
		 * would say one of two things */
		if (json_object_get(root, "device_memory"))
			return taco_err_set(err, -EINVAL,
					    "%s: 'devices' and 'device_memory' "
					    "both given: each device has its "
					    "memory; keep 'devices'",
					    name);
		if ((r = tacod_config_devices(v, c, name, err)))
			return r;
	}
	if ((v = json_object_get(root, "backend"))) {
		const char *b = json_is_string(v) ? json_string_value(v) : "";
		if (strcmp(b, "cpu") && strcmp(b, "cuda"))
			return taco_err_set(err, -EINVAL,
					    "%s: 'backend' must be \"cpu\" or "
					    "\"cuda\"",
					    name);
		c->backend =
		    strcmp(b, "cpu") ? TACO_BACKEND_CUDA : TACO_BACKEND_CPU;
	}
	if ((r = tacod_config_int(root, "", "max_retries", 0, 100,
				  &c->max_retries, name, err)))
		return r;
	if ((r = tacod_config_int(root, "", "cancel_timeout_s", 1, 86400,
				  &c->cancel_timeout_s, name, err)))
		return r;
	if ((v = json_object_get(root, "webhooks")) &&
	    (r = tacod_webhooks_parse(v, name, &c->webhooks, err)))
		return r;
	if ((v = json_object_get(root, "scheduler"))) {
		const char *b = json_is_string(v) ? json_string_value(v) : "";
		if (strcmp(b, "local") && strcmp(b, "slurm"))
			return taco_err_set(err, -EINVAL,
					    "%s: 'scheduler' must be \"local\" "
					    "or \"slurm\"",
					    name);
		c->scheduler =
		    strcmp(b, "slurm") ? TACOD_SCHED_LOCAL : TACOD_SCHED_SLURM;
	}
	if ((v = json_object_get(root, "slurm")) &&
	    (r = tacod_config_slurm(v, &c->slurm, name, err)))
		return r;
	if ((v = json_object_get(root, "chat")) &&
	    (r = chat(v, &c->chat, name, err)))
		return r;
	if ((v = json_object_get(root, "limits")))
		return limits(v, &c->limits, name, err);
	return 0;
}

int tacod_config_parse(const char *json, size_t len, const char *name,
		       tacod_config *c, taco_err *err)
{
	return taco_json_read(name, json, len, 0, TACO_JSON_OBJECT,
			      config_from_json, c, err);
}

int tacod_config_load(const char *path, tacod_config *c, taco_err *err)
{
	return taco_json_read_file(path, TACOD_CONFIG_MAX_BYTES,
				   TACO_JSON_OBJECT, config_from_json, c, err);
}

int tacod_config_loopback(const tacod_config *c)
{
	return !strncmp(c->listen, "127.", 4) ||
	       !strncmp(c->listen, "localhost:", 10) ||
	       !strncmp(c->listen, "[::1]:", 6);
}

int tacod_config_check(const tacod_config *c, taco_err *err)
{
	const char *colon = strrchr(c->listen, ':');
	char *end;
	long port;

	if (!c->listen[0] && !c->unix_socket[0])
		return taco_err_set(err, -EINVAL,
				    "config: set 'listen' or 'unix_socket'");
	if (c->listen[0]) {
		port = colon ? strtol(colon + 1, &end, 10) : -1;
		if (!colon || colon == c->listen || *end || port < 1 ||
		    port > 65535)
			return taco_err_set(err, -EINVAL,
					    "config: 'listen' must be "
					    "host:port, got '%s'",
					    c->listen);
	}
	if (c->state_dir[0] != '/' || c->models_dir[0] != '/')
		return taco_err_set(err, -EINVAL,
				    "config: 'state_dir' and 'models_dir' must "
				    "be absolute paths");
	for (int i = 0; i < c->n_roots; i++)
		if (c->roots[i][0] != '/')
			return taco_err_set(err, -EINVAL,
					    "config: dataset_roots[%d] must be "
					    "an absolute path",
					    i);
	if (c->devices_auto && c->backend != TACO_BACKEND_CUDA)
		return taco_err_set(err, -EINVAL,
				    "config: 'devices': \"auto\" asks the "
				    "CUDA backend for its GPUs: it needs "
				    "backend \"cuda\" (on the cpu backend "
				    "devices are memory budgets: list them)");
	if (c->scheduler == TACOD_SCHED_SLURM) {
		if (c->n_devices || c->devices_auto)
			return taco_err_set(err, -EINVAL,
					    "config: 'devices' are the GPUs "
					    "of this machine; with scheduler "
					    "\"slurm\" Slurm places jobs on "
					    "its nodes' GPUs");
		if (c->slurm.jobs_dir[0] != '/')
			return taco_err_set(
			    err, -EINVAL,
			    "config: scheduler \"slurm\" needs "
			    "'slurm.jobs_dir', an absolute path "
			    "on the filesystem the nodes share");
		if (!c->slurm.gpu_memory)
			return taco_err_set(err, -EINVAL,
					    "config: scheduler \"slurm\" needs "
					    "'slurm.gpu_memory', the memory of "
					    "one GPU of the partition");
	}
	if (c->listen[0] && !c->tokens_file[0] && !tacod_config_loopback(c))
		return taco_err_set(err, -EINVAL,
				    "config: listening on '%s' needs "
				    "'tokens_file': without tokens tacod "
				    "listens on loopback only",
				    c->listen);
	return 0;
}
