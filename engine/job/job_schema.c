/* job_schema.c: the options of the job file, one row each, and reading them.
 * Every problem is collected, so a user fixes them all in one round. */
#include "job_schema.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void taco_job_problem(taco_job_problems *p, const char *fmt, ...)
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

/* Checks across options. */

static void steps_or_epochs(json_t *o, taco_job *job, taco_job_problems *p)
{
	if (!job->steps && job->epochs == 0)
		taco_job_problem(p, "steps: set steps or epochs");
	if (json_object_get(o, "steps") && json_object_get(o, "epochs"))
		taco_job_problem(p, "epochs: set steps or epochs, not both");
}

static void tokens_per_batch(json_t *o, taco_job *job, taco_job_problems *p)
{
	if ((int64_t)job->batch_size * job->seq_len > (1 << 20))
		taco_job_problem(p,
				 "batch_size: batch_size x seq_len must be "
				 "at most %d tokens",
				 1 << 20);
}

/* Data parallel: each rank takes an equal slice of every batch, so that
 * every rank runs the same shapes and hands its sink the same parts. */
static void gpus_fit(json_t *o, taco_job *job, taco_job_problems *p)
{
	(void)o;
	if (job->gpus < 2)
		return;
	if (job->batch_size % job->gpus)
		taco_job_problem(p,
				 "gpus: batch_size (%d) must be a multiple of "
				 "gpus (%d): each GPU takes an equal slice of "
				 "every batch",
				 job->batch_size, job->gpus);
	if (job->method == TACO_METHOD_DPO)
		taco_job_problem(p, "gpus: method dpo runs on one GPU (several "
				    "are supervised fine-tuning only, for "
				    "now)");
}

/* Streamed weights take their updates inside the step, from the pieces
 * of each gradient: not from a dense gradient (accumulation, AdamW on
 * matrices), and they need the checkpointed schedule. */
static void weights_stream(json_t *o, taco_job *job, taco_job_problems *p)
{
	(void)o;
	if (job->weights != TACO_WEIGHTS_HOST)
		return;
	if (job->grad_accum > 1)
		taco_job_problem(p, "weights: host needs grad_accum 1 (the "
				    "streamed layers are updated inside the "
				    "step)");
	if (job->optim.all_adamw)
		taco_job_problem(p, "weights: host needs optimizer taco "
				    "(AdamW takes each matrix's gradient "
				    "whole)");
	if (!job->activation_checkpointing)
		taco_job_problem(p, "weights: host needs "
				    "activation_checkpointing");
}

/* A multiplier scales the auto rate: beside a rate of its own it would
 * say two things. */
static void multiplier_of_auto(json_t *o, taco_job *job, taco_job_problems *p)
{
	json_t *m = json_object_get(o, "lr_multiplier");

	if (job->lr != 0 && m && !json_is_null(m))
		taco_job_problem(p,
				 "lr_multiplier: only with lr auto (it "
				 "multiplies the auto rate; lr %g is a "
				 "rate of its own)",
				 job->lr);
}

/* DPO scores each sequence of a pair in a row of its own: packing would
 * put several pairs' sequences in one row. */
static void method_fits(json_t *o, taco_job *job, taco_job_problems *p)
{
	(void)o;
	if (job->method == TACO_METHOD_DPO && job->packing)
		taco_job_problem(p, "packing: not with method dpo (each "
				    "sequence of a pair is a row of its own)");
	/* read after batch_size and seq_len: DPO's batch is two rows a pair */
	if (job->method == TACO_METHOD_DPO &&
	    2 * (int64_t)job->batch_size * job->seq_len > (1 << 20))
		taco_job_problem(p,
				 "batch_size: with method dpo, 2 x batch_size "
				 "x seq_len must be at most %d tokens",
				 1 << 20);
	if (job->method != TACO_METHOD_DPO && json_object_get(o, "dpo"))
		taco_job_problem(p, "dpo: only with method dpo");
}

/* The job's own template takes the place of the model's: with it,
 * chat_template names no other. */
static void one_template(json_t *o, taco_job *job, taco_job_problems *p)
{
	(void)o;
	if (job->chat_template_jinja &&
	    job->chat_template != TACO_TEMPLATE_AUTO)
		taco_job_problem(p, "chat_template_jinja: give it or "
				    "chat_template, not both");
}

/* What tacod gives every render itself is no template variable of the
 * job's. */
static void kwargs_names(json_t *o, taco_job *job, taco_job_problems *p)
{
	static const char *const own[] = {"messages", "tools", "documents",
					  "add_generation_prompt", NULL};
	json_t *kw = json_object_get(o, "chat_template_kwargs");

	(void)job;
	for (int i = 0; json_is_object(kw) && own[i]; i++)
		if (json_object_get(kw, own[i]))
			taco_job_problem(p,
					 "chat_template_kwargs.%s: tacod sets "
					 "it for each chat",
					 own[i]);
}

/* The rows: name, setter, type, then the value's place and limits. */

#define AT(field) .offset = offsetof(taco_job, field)
#define INTS(lo, hi) .imin = (lo), .imax = (hi)
#define NUMS(lo, hi) .min = (lo), .max = (hi)

enum { DAEMON = TACO_JOB_BY_DAEMON, REQUEST = TACO_JOB_BY_REQUEST };

static const char *const schedules[] = {"constant", "linear", "cosine", NULL};
/* engine/gguf/gguf_export.h's enum taco_gguf_type, in its order */
static const char *const gguf_types[] = {"bf16", "f16", "q8_0", NULL};
static const char *const optimizers[] = {"taco", "adamw", NULL};
static const char *const roundings[] = {"nearest", "stochastic", NULL};
/* in the order of enum taco_template and enum taco_overlength */
static const char *const templates[] = {"auto", "chatml", "llama3", "mistral",
					NULL};
static const char *const train_on[] = {"answers", "all", NULL};
static const char *const overlength[] = {"truncate", "drop", "error", NULL};
/* in the order of enum taco_precision and enum taco_choice */
static const char *const precisions[] = {"auto", "fp32", "bf16", NULL};
static const char *const choices[] = {"auto", "off", "on", NULL};
static const char *const residencies[] = {"auto", "device", "host", NULL};
/* in the order of enum taco_method */
static const char *const methods[] = {"sft", "dpo", NULL};

static const taco_job_key taco_fields[] = {
    {"k", REQUEST, TACO_JOB_INT, AT(optim.k), INTS(1, 16)},
    {"beta", REQUEST, TACO_JOB_FLOAT, AT(optim.beta), NUMS(0, 0.999999)},
    {"weight_decay", REQUEST, TACO_JOB_FLOAT, AT(optim.weight_decay),
     NUMS(0, 1)},
    {"rounding", REQUEST, TACO_JOB_ENUM, AT(optim.stochastic),
     .names = roundings},
    {.name = NULL},
};

static const taco_job_key adamw_fields[] = {
    {"beta1", REQUEST, TACO_JOB_FLOAT, AT(optim.adam_beta1), NUMS(0, 0.999999)},
    {"beta2", REQUEST, TACO_JOB_FLOAT, AT(optim.adam_beta2),
     NUMS(0, 0.99999999)},
    {"eps", REQUEST, TACO_JOB_FLOAT, AT(optim.adam_eps), NUMS(0, 1),
     .open_min = 1},
    {"weight_decay", REQUEST, TACO_JOB_FLOAT, AT(optim.adam_weight_decay),
     NUMS(0, 1)},
    {.name = NULL},
};

static const taco_job_key dpo_fields[] = {
    {"beta", DAEMON, TACO_JOB_NUM, AT(dpo_beta), NUMS(0, 100), .open_min = 1},
    {.name = NULL},
};

const taco_job_key taco_job_keys[] = {
    {"model", DAEMON, TACO_JOB_PATH, AT(model), .required = 1},
    {"train", DAEMON, TACO_JOB_PATH, AT(train), .required = 1},
    {"validation", DAEMON, TACO_JOB_PATH, AT(validation)},
    {"output_dir", DAEMON, TACO_JOB_PATH, AT(output_dir), .required = 1},
    {"steps", REQUEST, TACO_JOB_I64, AT(steps), INTS(1, 1000000000)},
    {"epochs", DAEMON, TACO_JOB_NUM, AT(epochs), NUMS(0, 100000), .open_min = 1,
     .then = steps_or_epochs},
    {"batch_size", DAEMON, TACO_JOB_INT, AT(batch_size), INTS(1, 4096)},
    {"seq_len", REQUEST, TACO_JOB_INT, AT(seq_len), INTS(2, 1 << 17)},
    {"grad_accum", REQUEST, TACO_JOB_INT, AT(grad_accum), INTS(1, 4096),
     .then = tokens_per_batch},
    {"lr", REQUEST, TACO_JOB_NUM, AT(lr), NUMS(0, 10), .open_min = 1,
     .or_auto = 1},
    {"lr_multiplier", DAEMON, TACO_JOB_NUM, AT(lr_multiplier), NUMS(0, 1000),
     .open_min = 1, .then = multiplier_of_auto},
    {"schedule", REQUEST, TACO_JOB_ENUM, AT(schedule), .names = schedules},
    {"warmup_steps", REQUEST, TACO_JOB_I64, AT(warmup_steps),
     INTS(0, 1000000000)},
    {"min_lr_ratio", REQUEST, TACO_JOB_NUM, AT(min_lr_ratio), NUMS(0, 1)},
    {"optimizer", REQUEST, TACO_JOB_ENUM, AT(optim.all_adamw),
     .names = optimizers},
    {"taco", REQUEST, TACO_JOB_OBJECT, .fields = taco_fields},
    {"adamw", REQUEST, TACO_JOB_OBJECT, .fields = adamw_fields},
    {"freeze", REQUEST, TACO_JOB_PREFIXES, AT(freeze)},
    {"seed", DAEMON, TACO_JOB_U64, AT(optim.seed), INTS(0, INT64_MAX)},
    {"eval_every", REQUEST, TACO_JOB_I64, AT(eval_every), INTS(0, 1000000000)},
    {"eval_samples", REQUEST, TACO_JOB_INT, AT(eval_samples),
     INTS(0, TACO_JOB_MAX_EVAL_SAMPLES)},
    {"checkpoint_every", REQUEST, TACO_JOB_I64, AT(checkpoint_every),
     INTS(0, 1000000000)},
    {"keep_checkpoints", REQUEST, TACO_JOB_INT, AT(keep_checkpoints),
     INTS(1, 1000)},
    {"export_shard_bytes", DAEMON, TACO_JOB_U64, AT(export_shard_bytes),
     INTS(4096, INT64_MAX)},
    {"export_gguf", REQUEST, TACO_JOB_ENUM_SET, AT(export_gguf),
     .names = gguf_types},
    {"export_gguf_max_bytes", DAEMON, TACO_JOB_U64, AT(export_gguf_max_bytes),
     INTS(4096, INT64_MAX)},
    {"log_every", REQUEST, TACO_JOB_I64, AT(log_every), INTS(1, 1000000000)},
    {"max_examples", DAEMON, TACO_JOB_I64, AT(max_examples),
     INTS(1, 100000000)},
    {"activation_checkpointing", REQUEST, TACO_JOB_BOOL,
     AT(activation_checkpointing)},
    {"precision", REQUEST, TACO_JOB_ENUM, AT(precision), .names = precisions},
    {"activation_offload", REQUEST, TACO_JOB_ENUM, AT(activation_offload),
     .names = choices},
    {"mlp_chunks", REQUEST, TACO_JOB_INT, AT(mlp_chunks), INTS(0, 1024)},
    {"weights", REQUEST, TACO_JOB_ENUM, AT(weights), .names = residencies,
     .then = weights_stream},
    {"dropout", REQUEST, TACO_JOB_NUM, AT(dropout), NUMS(0, 0.9)},
    {"router_aux_loss_coef", REQUEST, TACO_JOB_NUM, AT(router_aux_loss_coef),
     NUMS(0, 1000)},
    {"packing", REQUEST, TACO_JOB_BOOL, AT(packing)},
    {"chat_template", REQUEST, TACO_JOB_ENUM, AT(chat_template),
     .names = templates},
    {"chat_template_jinja", REQUEST, TACO_JOB_TEXT, AT(chat_template_jinja),
     INTS(0, 256 << 10), .then = one_template},
    {"chat_template_kwargs", REQUEST, TACO_JOB_JSON, AT(chat_template_kwargs),
     INTS(0, 64 << 10), .then = kwargs_names},
    {"chat_template_time", DAEMON, TACO_JOB_I64, AT(chat_template_time),
     INTS(0, INT64_C(253402300799))},
    {"train_on", REQUEST, TACO_JOB_ENUM, AT(train_on_all), .names = train_on},
    {"overlength", REQUEST, TACO_JOB_ENUM, AT(overlength), .names = overlength},
    {"eval_multiple_choice", DAEMON, TACO_JOB_PATH, AT(eval_multiple_choice)},
    /* a request's method.type and method.dpo.hyperparameters.beta */
    {"method", DAEMON, TACO_JOB_ENUM, AT(method), .names = methods,
     .then = method_fits},
    {"dpo", DAEMON, TACO_JOB_OBJECT, .fields = dpo_fields},
    /* after batch_size and method, which its check reads */
    {"gpus", REQUEST, TACO_JOB_INT, AT(gpus), INTS(1, TACO_JOB_MAX_GPUS),
     .then = gpus_fit},
    {.name = NULL},
};

const char *taco_schedule_name(int s)
{
	return s >= 0 && s <= 2 ? schedules[s] : "?";
}

static const taco_job_key *find(const taco_job_key *keys, const char *name)
{
	for (const taco_job_key *k = keys; k->name; k++)
		if (!strcmp(k->name, name))
			return k;
	return NULL;
}

const taco_job_key *taco_job_key_find(const char *name)
{
	return find(taco_job_keys, name);
}

/* Reading a value. Absent or null: the default stays. */

static void get_path(json_t *o, const char *key, const char *dir, int required,
		     char *out, taco_job_problems *p)
{
	json_t *v = json_object_get(o, key);
	const char *s;
	int n;

	out[0] = 0;
	if (!v || json_is_null(v)) {
		if (required)
			taco_job_problem(p, "%s: required (a path)", key);
		return;
	}
	if (!json_is_string(v) || !json_string_length(v)) {
		taco_job_problem(p, "%s: must be a non-empty string", key);
		return;
	}
	s = json_string_value(v);
	if (s[0] == '/' || !dir)
		n = snprintf(out, TACO_PATH_MAX, "%s", s);
	else
		n = snprintf(out, TACO_PATH_MAX, "%s/%s", dir, s);
	if (n >= TACO_PATH_MAX) {
		taco_job_problem(p, "%s: path longer than %d bytes", key,
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
		taco_job_problem(p, "%s%s: must be an integer in [%lld, %lld]",
				 where, key, (long long)lo, (long long)hi);
		return;
	}
	*out = json_integer_value(v);
}

/* A number in (lo, hi] or [lo, hi] depending on open_lo; with or_auto,
 * also "auto", which leaves the default (auto). */
static void get_num(json_t *o, const char *where, const char *key, double lo,
		    double hi, int open_lo, int or_auto, double *out,
		    taco_job_problems *p)
{
	json_t *v = json_object_get(o, key);
	double x;

	if (!v || json_is_null(v))
		return;
	if (or_auto && json_is_string(v) &&
	    !strcmp(json_string_value(v), "auto"))
		return;
	x = json_is_number(v) ? json_number_value(v) : NAN;
	if (!(x <= hi && (open_lo ? x > lo : x >= lo))) {
		taco_job_problem(p, "%s%s: must be %sa number in %s%g, %g]",
				 where, key, or_auto ? "\"auto\" or " : "",
				 open_lo ? "(" : "[", lo, hi);
		return;
	}
	*out = x;
}

static void get_bool(json_t *o, const char *where, const char *key, int *out,
		     taco_job_problems *p)
{
	json_t *v = json_object_get(o, key);

	if (!v || json_is_null(v))
		return;
	if (json_is_boolean(v))
		*out = json_is_true(v);
	else
		taco_job_problem(p, "%s%s: must be true or false", where, key);
}

/* "a, b, c": the names, for a problem's text. */
static const char *names_list(const char *const *names, char *list, size_t len)
{
	list[0] = 0;
	for (int i = 0; names[i]; i++)
		snprintf(list + strlen(list), len - strlen(list), "%s%s",
			 i ? ", " : "", names[i]);
	return list;
}

static void get_enum(json_t *o, const char *where, const char *key,
		     const char *const *names, int *out, taco_job_problems *p)
{
	json_t *v = json_object_get(o, key);
	char list[256] = "";

	if (!v || json_is_null(v))
		return;
	for (int i = 0; names[i]; i++)
		if (json_is_string(v) &&
		    strcmp(json_string_value(v), names[i]) == 0) {
			*out = i;
			return;
		}
	taco_job_problem(p, "%s%s: must be one of %s", where, key,
			 names_list(names, list, sizeof(list)));
}

/* A list of distinct names: their bits. */
static void get_enum_set(json_t *o, const char *where, const char *key,
			 const char *const *names, unsigned *out,
			 taco_job_problems *p)
{
	json_t *v = json_object_get(o, key), *e;
	unsigned set = 0;
	size_t i;
	int k;

	if (!v || json_is_null(v))
		return;
	if (!json_is_array(v)) {
		taco_job_problem(p, "%s%s: must be a list", where, key);
		return;
	}
	json_array_foreach(v, i, e)
	{
		for (k = 0; names[k]; k++)
			if (json_is_string(e) &&
			    !strcmp(json_string_value(e), names[k]))
				break;
		if (!names[k]) {
			char list[256];
			taco_job_problem(p, "%s%s[%zu]: must be one of %s",
					 where, key, i,
					 names_list(names, list, sizeof(list)));
			return;
		}
		if (set & (1u << k)) {
			taco_job_problem(p, "%s%s[%zu]: %s is listed twice",
					 where, key, i, names[k]);
			return;
		}
		set |= 1u << k;
	}
	*out = set;
}

static void get_prefixes(json_t *v, const char *key, taco_job *job,
			 taco_job_problems *p)
{
	size_t i;
	json_t *e;

	if (!json_is_array(v) || json_array_size(v) > TACO_JOB_MAX_FREEZE) {
		taco_job_problem(p,
				 "%s: must be an array of at most %d "
				 "tensor-name prefixes",
				 key, TACO_JOB_MAX_FREEZE);
		return;
	}
	job->freeze = calloc(json_array_size(v) + 1, sizeof(char *));
	if (!job->freeze) {
		taco_job_problem(p, "%s: out of memory", key);
		return;
	}
	json_array_foreach(v, i, e)
	{
		if (!json_is_string(e) || !json_string_length(e) ||
		    json_string_length(e) >= 256) {
			taco_job_problem(p,
					 "%s[%zu]: must be a non-empty string "
					 "under 256 bytes",
					 key, i);
			continue;
		}
		job->freeze[job->n_freeze++] = strdup(json_string_value(e));
	}
}

/* TEXT and JSON: a string, or an object kept as its compact text. */
static void get_text(json_t *v, const char *where, const taco_job_key *k,
		     char **out, taco_job_problems *p)
{
	char *t;

	if (!v || json_is_null(v))
		return;
	if (k->type == TACO_JOB_TEXT ? !json_is_string(v)
				     : !json_is_object(v)) {
		taco_job_problem(p, "%s%s: must be %s", where, k->name,
				 k->type == TACO_JOB_TEXT ? "a string"
							  : "an object");
		return;
	}
	t = k->type == TACO_JOB_TEXT
		? strdup(json_string_value(v))
		: json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	if (!t) {
		taco_job_problem(p, "%s%s: out of memory", where, k->name);
		return;
	}
	if (strlen(t) > (size_t)k->imax) {
		taco_job_problem(p, "%s%s: more than %lld bytes", where,
				 k->name, (long long)k->imax);
		free(t);
		return;
	}
	free(*out);
	*out = t;
}

/* The options of obj, where: "" or the enclosing option and a dot. */
static void read_keys(json_t *obj, const char *where, const taco_job_key *keys,
		      const char *dir, taco_job *job, taco_job_problems *p);

static void read_key(json_t *o, const char *where, const taco_job_key *k,
		     const char *dir, taco_job *job, taco_job_problems *p)
{
	void *at = (char *)job + k->offset;
	json_t *v = json_object_get(o, k->name);
	char sub[64];
	uint64_t *u;
	int64_t x;
	double d;

	switch (k->type) {
	case TACO_JOB_PATH:
		get_path(o, k->name, dir, k->required, at, p);
		break;
	case TACO_JOB_INT:
		x = *(int *)at;
		get_i64(o, where, k->name, k->imin, k->imax, &x, p);
		*(int *)at = (int)x;
		break;
	case TACO_JOB_I64:
		get_i64(o, where, k->name, k->imin, k->imax, at, p);
		break;
	case TACO_JOB_U64:
		u = at;
		x = (int64_t)*u;
		get_i64(o, where, k->name, k->imin, k->imax, &x, p);
		*u = (uint64_t)x;
		break;
	case TACO_JOB_NUM:
		get_num(o, where, k->name, k->min, k->max, k->open_min,
			k->or_auto, at, p);
		break;
	case TACO_JOB_FLOAT:
		d = *(float *)at;
		get_num(o, where, k->name, k->min, k->max, k->open_min,
			k->or_auto, &d, p);
		*(float *)at = (float)d;
		break;
	case TACO_JOB_BOOL:
		get_bool(o, where, k->name, at, p);
		break;
	case TACO_JOB_ENUM:
		get_enum(o, where, k->name, k->names, at, p);
		break;
	case TACO_JOB_ENUM_SET:
		get_enum_set(o, where, k->name, k->names, at, p);
		break;
	case TACO_JOB_OBJECT:
		if (!v)
			break;
		if (!json_is_object(v)) {
			taco_job_problem(p, "%s%s: must be an object", where,
					 k->name);
			break;
		}
		snprintf(sub, sizeof(sub), "%s%s.", where, k->name);
		read_keys(v, sub, k->fields, dir, job, p);
		break;
	case TACO_JOB_PREFIXES:
		if (v)
			get_prefixes(v, k->name, job, p);
		break;
	case TACO_JOB_TEXT:
	case TACO_JOB_JSON:
		get_text(v, where, k, at, p);
		break;
	}
	if (k->then)
		k->then(o, job, p);
}

static void read_keys(json_t *obj, const char *where, const taco_job_key *keys,
		      const char *dir, taco_job *job, taco_job_problems *p)
{
	const char *name;
	json_t *v;

	json_object_foreach(obj, name, v)
	{
		if (!find(keys, name))
			taco_job_problem(p, "%s%s: unknown option", where,
					 name);
	}
	for (const taco_job_key *k = keys; k->name; k++)
		read_key(obj, where, k, dir, job, p);
}

void taco_job_read(json_t *root, const char *dir, taco_job *job,
		   taco_job_problems *p)
{
	read_keys(root, "", taco_job_keys, dir, job, p);
}
