/* config/slurm.c: the "slurm" object of tacod.json (docs/tacod.md,
 * docs/slurm.md). Every string reaches sbatch as one argv element, never
 * through a shell; none may hold a control character (a newline would end
 * a line of squeue's output or of the batch script's comments). */
#include "daemon/config/config.h"

#include <stdio.h>
#include <string.h>

#include "plan/plan.h"

void tacod_config_slurm_defaults(tacod_slurm_config *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->gres, sizeof(c->gres), "gpu:1");
	c->poll_interval_s = 5;
	c->command_timeout_s = 30;
	snprintf(c->sbatch, sizeof(c->sbatch), "sbatch");
	snprintf(c->squeue, sizeof(c->squeue), "squeue");
	snprintf(c->scancel, sizeof(c->scancel), "scancel");
}

static int plain(const char *v)
{
	for (; *v; v++)
		if ((unsigned char)*v < 0x20 || *v == 0x7f)
			return 0;
	return 1;
}

static int text(json_t *o, const char *key, char *out, size_t cap, int nonempty,
		const char *name, taco_err *err)
{
	json_t *v = json_object_get(o, key);

	if (!v)
		return 0;
	if (!json_is_string(v) || json_string_length(v) >= cap ||
	    !plain(json_string_value(v)) ||
	    (nonempty && !json_string_length(v)))
		return taco_err_set(err, -EINVAL,
				    "%s: 'slurm.%s' must be a%s string of at "
				    "most %zu bytes without control "
				    "characters",
				    name, key, nonempty ? " non-empty" : "",
				    cap - 1);
	memcpy(out, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

static int options(json_t *v, tacod_slurm_config *c, const char *name,
		   taco_err *err)
{
	size_t i;
	json_t *e;

	if (!json_is_array(v) || json_array_size(v) > TACOD_SLURM_MAX_OPTIONS)
		return taco_err_set(err, -EINVAL,
				    "%s: 'slurm.sbatch_options' must be an "
				    "array of at most %d strings",
				    name, TACOD_SLURM_MAX_OPTIONS);
	c->n_options = 0;
	json_array_foreach(v, i, e)
	{
		const char *s = json_is_string(e) ? json_string_value(e) : "";
		/* an option, never a script path or an argument of tacod's
		 * own options: it must start with "--" and carry its value
		 * after "=" */
		if (strncmp(s, "--", 2) || strlen(s) < 3 ||
		    json_string_length(e) >= TACOD_SLURM_OPTION_MAX ||
		    !plain(s))
			return taco_err_set(
			    err, -EINVAL,
			    "%s: slurm.sbatch_options[%zu] must "
			    "be one long option such as "
			    "\"--qos=normal\" (at most %d bytes, "
			    "no control characters)",
			    name, i, TACOD_SLURM_OPTION_MAX - 1);
		memcpy(c->options[c->n_options++], s, strlen(s) + 1);
	}
	return 0;
}

int tacod_config_slurm(json_t *o, tacod_slurm_config *c, const char *name,
		       taco_err *err)
{
	static const char *const keys[] = {
	    "partition", "account",	    "time_limit",
	    "gres",	 "sbatch_options",  "gpu_memory",
	    "jobs_dir",	 "poll_interval_s", "command_timeout_s",
	    "sbatch",	 "squeue",	    "scancel",
	    NULL};
	const char *k;
	json_t *v;
	int r;

	if (!json_is_object(o))
		return taco_err_set(err, -EINVAL,
				    "%s: 'slurm' must be an object", name);
	json_object_foreach(o, k, v)
	{
		int ok = 0;
		for (int i = 0; keys[i]; i++)
			ok |= !strcmp(k, keys[i]);
		if (!ok)
			return taco_err_set(err, -EINVAL,
					    "%s: unknown field 'slurm.%s'",
					    name, k);
	}
	if ((r = text(o, "partition", c->partition, sizeof(c->partition), 0,
		      name, err)) ||
	    (r = text(o, "account", c->account, sizeof(c->account), 0, name,
		      err)) ||
	    (r = text(o, "time_limit", c->time_limit, sizeof(c->time_limit), 0,
		      name, err)) ||
	    (r = text(o, "gres", c->gres, sizeof(c->gres), 1, name, err)) ||
	    (r = text(o, "jobs_dir", c->jobs_dir, sizeof(c->jobs_dir), 1, name,
		      err)) ||
	    (r = text(o, "sbatch", c->sbatch, sizeof(c->sbatch), 1, name,
		      err)) ||
	    (r = text(o, "squeue", c->squeue, sizeof(c->squeue), 1, name,
		      err)) ||
	    (r = text(o, "scancel", c->scancel, sizeof(c->scancel), 1, name,
		      err)) ||
	    (r = tacod_config_int(o, "slurm.", "poll_interval_s", 1, 3600,
				  &c->poll_interval_s, name, err)) ||
	    (r = tacod_config_int(o, "slurm.", "command_timeout_s", 1, 600,
				  &c->command_timeout_s, name, err)))
		return r;
	/* the jobs_dir's paths go into the batch script between single
	 * quotes: one there could end the quoting */
	if (strchr(c->jobs_dir, '\''))
		return taco_err_set(err, -EINVAL,
				    "%s: 'slurm.jobs_dir' must not contain a "
				    "single quote",
				    name);
	if ((v = json_object_get(o, "sbatch_options")) &&
	    (r = options(v, c, name, err)))
		return r;
	if ((v = json_object_get(o, "gpu_memory"))) {
		if (json_is_integer(v) && json_integer_value(v) > 0)
			c->gpu_memory = (uint64_t)json_integer_value(v);
		else if (!json_is_string(v) ||
			 taco_parse_bytes(json_string_value(v),
					  &c->gpu_memory) ||
			 !c->gpu_memory)
			return taco_err_set(err, -EINVAL,
					    "%s: 'slurm.gpu_memory' must be a "
					    "size: bytes, or \"80GB\", "
					    "\"141GB\"",
					    name);
	}
	return 0;
}

void tacod_config_jobs_dir(const tacod_config *c, char *out, size_t cap)
{
	if (c->scheduler == TACOD_SCHED_SLURM)
		snprintf(out, cap, "%s", c->slurm.jobs_dir);
	else
		snprintf(out, cap, "%s/jobs", c->state_dir);
}

uint64_t tacod_config_plan_memory(const tacod_config *c)
{
	uint64_t m = 0;

	if (c->scheduler == TACOD_SCHED_SLURM)
		return c->slurm.gpu_memory;
	if (!c->n_devices)
		return c->device_memory;
	for (int i = 0; i < c->n_devices; i++)
		if (c->devices[i].memory > m)
			m = c->devices[i].memory;
	return m;
}
