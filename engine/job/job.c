/* job.c: JOB.json parsing and validation. Every problem is collected, so a
 * user fixes them all in one round. */
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "util/fsutil.h"

static void problem(taco_job_problems *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void problem(taco_job_problems *p, const char *fmt, ...)
{
	va_list ap;
	int cap = (int)(sizeof(p->msg) / sizeof(p->msg[0]));

	if (p->n < cap) {
		va_start(ap, fmt);
		vsnprintf(p->msg[p->n], sizeof(p->msg[0]), fmt, ap);
		va_end(ap);
	}
	p->n++;
}

/* Known keys of an object; anything else is a problem. */
static void check_keys(json_t *obj, const char *where, const char *const *known,
		       taco_job_problems *p)
{
	const char *key;
	json_t *v;

	json_object_foreach(obj, key, v)
	{
		int ok = 0;
		for (const char *const *k = known; *k; k++)
			ok |= strcmp(key, *k) == 0;
		if (!ok)
			problem(p, "%s%s: unknown option", where, key);
	}
}

static void get_path(json_t *o, const char *key, const char *dir, int required,
		     char *out, taco_job_problems *p)
{
	json_t *v = json_object_get(o, key);
	const char *s;
	int n;

	out[0] = 0;
	if (!v || json_is_null(v)) {
		if (required)
			problem(p, "%s: required (a path)", key);
		return;
	}
	if (!json_is_string(v) || !json_string_length(v)) {
		problem(p, "%s: must be a non-empty string", key);
		return;
	}
	s = json_string_value(v);
	if (s[0] == '/' || !dir)
		n = snprintf(out, TACO_PATH_MAX, "%s", s);
	else
		n = snprintf(out, TACO_PATH_MAX, "%s/%s", dir, s);
	if (n >= TACO_PATH_MAX) {
		problem(p, "%s: path longer than %d bytes", key,
			TACO_PATH_MAX - 1);
		out[0] = 0;
	}
}

static void get_i64(json_t *o, const char *where, const char *key, int64_t lo,
		    int64_t hi, int64_t *out, taco_job_problems *p)
{
	json_t *v = json_object_get(o, key);

	if (!v || json_is_null(v))
		return;
	if (!json_is_integer(v) || json_integer_value(v) < lo ||
	    json_integer_value(v) > hi) {
		problem(p, "%s%s: must be an integer in [%lld, %lld]", where,
			key, (long long)lo, (long long)hi);
		return;
	}
	*out = json_integer_value(v);
}

static void get_int(json_t *o, const char *where, const char *key, int lo,
		    int hi, int *out, taco_job_problems *p)
{
	int64_t x = *out;

	get_i64(o, where, key, lo, hi, &x, p);
	*out = (int)x;
}

/* A number in (lo, hi] or [lo, hi] depending on open_lo. */
static void get_num(json_t *o, const char *where, const char *key, double lo,
		    double hi, int open_lo, double *out, taco_job_problems *p)
{
	json_t *v = json_object_get(o, key);
	double x;

	if (!v || json_is_null(v))
		return;
	x = json_is_number(v) ? json_number_value(v) : NAN;
	if (!(x <= hi && (open_lo ? x > lo : x >= lo))) {
		problem(p, "%s%s: must be a number in %s%g, %g]", where, key,
			open_lo ? "(" : "[", lo, hi);
		return;
	}
	*out = x;
}

static void get_float(json_t *o, const char *where, const char *key, double lo,
		      double hi, int open_lo, float *out, taco_job_problems *p)
{
	double x = *out;

	get_num(o, where, key, lo, hi, open_lo, &x, p);
	*out = (float)x;
}

static void get_bool(json_t *o, const char *key, int *out, taco_job_problems *p)
{
	json_t *v = json_object_get(o, key);

	if (!v || json_is_null(v))
		return;
	if (json_is_boolean(v))
		*out = json_is_true(v);
	else
		problem(p, "%s: must be true or false", key);
}

static void get_enum(json_t *o, const char *where, const char *key,
		     const char *const *names, int *out, taco_job_problems *p)
{
	json_t *v = json_object_get(o, key);
	char list[256] = "";

	if (!v || json_is_null(v))
		return;
	for (int i = 0; names[i]; i++) {
		if (json_is_string(v) &&
		    strcmp(json_string_value(v), names[i]) == 0) {
			*out = i;
			return;
		}
		snprintf(list + strlen(list), sizeof(list) - strlen(list),
			 "%s%s", i ? ", " : "", names[i]);
	}
	problem(p, "%s%s: must be one of %s", where, key, list);
}

static const char *const schedules[] = {"constant", "linear", "cosine", NULL};

const char *taco_schedule_name(int s)
{
	return s >= 0 && s <= 2 ? schedules[s] : "?";
}

static void parse_taco(json_t *o, taco_job *job, taco_job_problems *p)
{
	static const char *const keys[] = {"k", "beta", "weight_decay",
					   "rounding", NULL};
	static const char *const rounding[] = {"nearest", "stochastic", NULL};

	if (!json_is_object(o)) {
		problem(p, "taco: must be an object");
		return;
	}
	check_keys(o, "taco.", keys, p);
	get_int(o, "taco.", "k", 1, 16, &job->optim.k, p);
	get_float(o, "taco.", "beta", 0, 0.999999, 0, &job->optim.beta, p);
	get_float(o, "taco.", "weight_decay", 0, 1, 0, &job->optim.weight_decay,
		  p);
	get_enum(o, "taco.", "rounding", rounding, &job->optim.stochastic, p);
}

static void parse_adamw(json_t *o, taco_job *job, taco_job_problems *p)
{
	static const char *const keys[] = {"beta1", "beta2", "eps",
					   "weight_decay", NULL};

	if (!json_is_object(o)) {
		problem(p, "adamw: must be an object");
		return;
	}
	check_keys(o, "adamw.", keys, p);
	get_float(o, "adamw.", "beta1", 0, 0.999999, 0, &job->optim.adam_beta1,
		  p);
	get_float(o, "adamw.", "beta2", 0, 0.99999999, 0,
		  &job->optim.adam_beta2, p);
	get_float(o, "adamw.", "eps", 0, 1, 1, &job->optim.adam_eps, p);
	get_float(o, "adamw.", "weight_decay", 0, 1, 0,
		  &job->optim.adam_weight_decay, p);
}

static void parse_freeze(json_t *o, taco_job *job, taco_job_problems *p)
{
	size_t i;
	json_t *v;

	if (!json_is_array(o) || json_array_size(o) > TACO_JOB_MAX_FREEZE) {
		problem(p,
			"freeze: must be an array of at most %d tensor-name "
			"prefixes",
			TACO_JOB_MAX_FREEZE);
		return;
	}
	job->freeze = calloc(json_array_size(o) + 1, sizeof(char *));
	if (!job->freeze) {
		problem(p, "freeze: out of memory");
		return;
	}
	json_array_foreach(o, i, v)
	{
		if (!json_is_string(v) || !json_string_length(v) ||
		    json_string_length(v) >= 256) {
			problem(p,
				"freeze[%zu]: must be a non-empty string "
				"under 256 bytes",
				i);
			continue;
		}
		job->freeze[job->n_freeze++] = strdup(json_string_value(v));
	}
}

static void defaults(taco_job *job)
{
	memset(job, 0, sizeof(*job));
	job->batch_size = 4;
	job->seq_len = 1024;
	job->grad_accum = 1;
	job->lr = 1e-5;
	job->schedule = TACO_SCHED_LINEAR;
	job->min_lr_ratio = 0.0;
	taco_optim_defaults(&job->optim);
	job->keep_checkpoints = 2;
	job->export_shard_bytes = 5000000000ull;
	job->log_every = 1;
	job->max_examples = 10000000;
	job->activation_checkpointing = 1;
}

int taco_job_parse(const char *json, size_t len, const char *dir, taco_job *job,
		   taco_job_problems *p)
{
	static const char *const keys[] = {"model",
					   "train",
					   "validation",
					   "output_dir",
					   "steps",
					   "epochs",
					   "batch_size",
					   "seq_len",
					   "grad_accum",
					   "lr",
					   "schedule",
					   "warmup_steps",
					   "min_lr_ratio",
					   "optimizer",
					   "taco",
					   "adamw",
					   "freeze",
					   "seed",
					   "eval_every",
					   "checkpoint_every",
					   "keep_checkpoints",
					   "export_shard_bytes",
					   "log_every",
					   "max_examples",
					   "activation_checkpointing",
					   "packing",
					   "chat_template",
					   "train_on",
					   "overlength",
					   "eval_multiple_choice",
					   NULL};
	static const char *const optimizers[] = {"taco", "adamw", NULL};
	/* in the order of enum taco_template and enum taco_overlength */
	static const char *const templates[] = {"auto", "chatml", "llama3",
						"mistral", NULL};
	static const char *const train_on[] = {"answers", "all", NULL};
	static const char *const overlength[] = {"truncate", "drop", "error",
						 NULL};
	json_error_t jerr;
	json_t *root;
	int64_t seed = 0, shard = (int64_t)5000000000ll;
	json_t *v;

	defaults(job);
	memset(p, 0, sizeof(*p));
	if (len > TACO_JOB_MAX_BYTES) {
		problem(p, "job file: larger than %u bytes",
			TACO_JOB_MAX_BYTES);
		return -EINVAL;
	}
	root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		problem(p, "job file: line %d column %d: %s", jerr.line,
			jerr.column, jerr.text);
		return -EINVAL;
	}
	if (!json_is_object(root)) {
		problem(p, "job file: must be a JSON object");
		json_decref(root);
		return -EINVAL;
	}
	check_keys(root, "", keys, p);
	get_path(root, "model", dir, 1, job->model, p);
	get_path(root, "train", dir, 1, job->train, p);
	get_path(root, "validation", dir, 0, job->validation, p);
	get_path(root, "output_dir", dir, 1, job->output_dir, p);
	get_i64(root, "", "steps", 1, 1000000000, &job->steps, p);
	get_num(root, "", "epochs", 0, 100000, 1, &job->epochs, p);
	if (!job->steps && job->epochs == 0)
		problem(p, "steps: set steps or epochs");
	if (json_object_get(root, "steps") && json_object_get(root, "epochs"))
		problem(p, "epochs: set steps or epochs, not both");
	get_int(root, "", "batch_size", 1, 4096, &job->batch_size, p);
	get_int(root, "", "seq_len", 2, 1 << 17, &job->seq_len, p);
	get_int(root, "", "grad_accum", 1, 4096, &job->grad_accum, p);
	if ((int64_t)job->batch_size * job->seq_len > (1 << 20))
		problem(p,
			"batch_size: batch_size x seq_len must be at most "
			"%d tokens",
			1 << 20);
	get_num(root, "", "lr", 0, 10, 1, &job->lr, p);
	get_enum(root, "", "schedule", schedules, &job->schedule, p);
	get_i64(root, "", "warmup_steps", 0, 1000000000, &job->warmup_steps, p);
	get_num(root, "", "min_lr_ratio", 0, 1, 0, &job->min_lr_ratio, p);
	get_enum(root, "", "optimizer", optimizers, &job->optim.all_adamw, p);
	if ((v = json_object_get(root, "taco")))
		parse_taco(v, job, p);
	if ((v = json_object_get(root, "adamw")))
		parse_adamw(v, job, p);
	if ((v = json_object_get(root, "freeze")))
		parse_freeze(v, job, p);
	get_i64(root, "", "seed", 0, INT64_MAX, &seed, p);
	job->optim.seed = (uint64_t)seed;
	get_i64(root, "", "eval_every", 0, 1000000000, &job->eval_every, p);
	get_i64(root, "", "checkpoint_every", 0, 1000000000,
		&job->checkpoint_every, p);
	get_int(root, "", "keep_checkpoints", 1, 1000, &job->keep_checkpoints,
		p);
	get_i64(root, "", "export_shard_bytes", 4096, INT64_MAX, &shard, p);
	job->export_shard_bytes = (uint64_t)shard;
	get_i64(root, "", "log_every", 1, 1000000000, &job->log_every, p);
	get_i64(root, "", "max_examples", 1, 100000000, &job->max_examples, p);
	get_bool(root, "activation_checkpointing",
		 &job->activation_checkpointing, p);
	get_bool(root, "packing", &job->packing, p);
	get_enum(root, "", "chat_template", templates, &job->chat_template, p);
	get_enum(root, "", "train_on", train_on, &job->train_on_all, p);
	get_enum(root, "", "overlength", overlength, &job->overlength, p);
	get_path(root, "eval_multiple_choice", dir, 0,
		 job->eval_multiple_choice, p);
	json_decref(root);
	return p->n ? -EINVAL : 0;
}

int taco_job_load(const char *path, taco_job *job, taco_job_problems *p)
{
	char *buf = NULL, dir[TACO_PATH_MAX];
	const char *slash;
	taco_err err;
	size_t n = 0;
	int r = taco_read_file(path, TACO_JOB_MAX_BYTES, &buf, &n, &err);

	if (r) {
		defaults(job);
		memset(p, 0, sizeof(*p));
		problem(p, "%s", err.msg);
		return r;
	}
	slash = strrchr(path, '/');
	snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path) : 1,
		 slash ? path : ".");
	r = taco_job_parse(buf, n, dir, job, p);
	free(buf);
	return r;
}

void taco_job_free(taco_job *job)
{
	for (int i = 0; job->freeze && i < job->n_freeze; i++)
		free(job->freeze[i]);
	free(job->freeze);
	job->freeze = NULL;
	job->n_freeze = 0;
}

double taco_job_lr(const taco_job *job, int64_t step, int64_t total)
{
	double lr = job->lr, floor_lr = job->lr * job->min_lr_ratio, frac;
	int64_t w = job->warmup_steps, span;

	if (w > 0 && step <= w)
		return lr * (double)step / (double)w;
	if (job->schedule == TACO_SCHED_CONSTANT)
		return lr;
	span = total - w;
	/* 0-based progress: the first step after warmup has the full rate */
	frac = span > 0 ? (double)(step - 1 - w) / (double)span : 1.0;
	if (frac > 1)
		frac = 1;
	if (job->schedule == TACO_SCHED_LINEAR)
		return floor_lr + (lr - floor_lr) * (1.0 - frac);
	return floor_lr + (lr - floor_lr) * 0.5 * (1.0 + cos(M_PI * frac));
}
