/* jobspec.c: the body of POST /v1/fine_tuning/jobs (and /plan) from a job
 * file and flags. Training and validation files given as local paths are
 * uploaded first; "file-..." ids are used as they are. The hyperparameter
 * flags go where OpenAI puts them now, method.<type>.hyperparameters, when
 * the body has a method, and to the deprecated top level otherwise (what
 * tacod reads alike). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ctl.h"

struct ctl_jobspec {
	json_t *flags;	    /* what the flags set, as a partial body */
	json_t *hp;	    /* --epochs, --batch-size, --lr-multiplier */
	json_t *beta;	    /* --beta, or NULL */
	const char *method; /* --method, or NULL */
	const char *train, *validation;
};

enum {
	OPT_MODEL = CTL_OPT_OWN + 0x40,
	OPT_TRAIN,
	OPT_VALIDATION,
	OPT_EPOCHS,
	OPT_BATCH,
	OPT_LR_MULT,
	OPT_SEED,
	OPT_SUFFIX,
	OPT_STEPS,
	OPT_SEQ_LEN,
	OPT_LR,
	OPT_GRAD_ACCUM,
	OPT_SCHEDULE,
	OPT_WARMUP,
	OPT_CKPT_EVERY,
	OPT_KEEP_CKPT,
	OPT_EVAL_EVERY,
	OPT_LOG_EVERY,
	OPT_OPTIMIZER,
	OPT_PACKING,
	OPT_TACO,
	OPT_METADATA,
	OPT_METHOD,
	OPT_BETA,
};

const struct option ctl_jobspec_options[] = {
    {"model", required_argument, NULL, OPT_MODEL},
    {"train", required_argument, NULL, OPT_TRAIN},
    {"validation", required_argument, NULL, OPT_VALIDATION},
    {"epochs", required_argument, NULL, OPT_EPOCHS},
    {"batch-size", required_argument, NULL, OPT_BATCH},
    {"lr-multiplier", required_argument, NULL, OPT_LR_MULT},
    {"seed", required_argument, NULL, OPT_SEED},
    {"suffix", required_argument, NULL, OPT_SUFFIX},
    {"steps", required_argument, NULL, OPT_STEPS},
    {"seq-len", required_argument, NULL, OPT_SEQ_LEN},
    {"lr", required_argument, NULL, OPT_LR},
    {"grad-accum", required_argument, NULL, OPT_GRAD_ACCUM},
    {"schedule", required_argument, NULL, OPT_SCHEDULE},
    {"warmup-steps", required_argument, NULL, OPT_WARMUP},
    {"checkpoint-every", required_argument, NULL, OPT_CKPT_EVERY},
    {"keep-checkpoints", required_argument, NULL, OPT_KEEP_CKPT},
    {"eval-every", required_argument, NULL, OPT_EVAL_EVERY},
    {"log-every", required_argument, NULL, OPT_LOG_EVERY},
    {"optimizer", required_argument, NULL, OPT_OPTIMIZER},
    {"packing", no_argument, NULL, OPT_PACKING},
    {"taco", required_argument, NULL, OPT_TACO},
    {"metadata", required_argument, NULL, OPT_METADATA},
    {"method", required_argument, NULL, OPT_METHOD},
    {"beta", required_argument, NULL, OPT_BETA},
    {0},
};

const char ctl_jobspec_help[] =
    "  JOB.json                 the request body as a JSON file; the "
    "options below\n"
    "                           override its fields\n"
    "  --model NAME             base model (tacoctl models)\n"
    "  --train FILE|ID          training data: a local file (uploaded) or "
    "a file id\n"
    "  --validation FILE|ID     validation data, the same way\n"
    "  --method supervised|dpo  method.type: supervised fine-tuning on "
    "examples, or\n"
    "                           DPO on preference pairs\n"
    "  --beta X|auto            method.dpo.hyperparameters.beta (DPO's; "
    "0.1 for auto)\n"
    "  --epochs N|auto          n_epochs\n"
    "  --batch-size N|auto      batch_size (preference pairs for dpo)\n"
    "  --lr-multiplier X|auto   learning_rate_multiplier (of the auto lr)\n"
    "                           these three go in method.<type>."
    "hyperparameters with a\n"
    "                           method, else in hyperparameters\n"
    "  --seed N                 seed\n"
    "  --suffix TEXT            suffix of the fine-tuned model's name\n"
    "  --steps N                taco.steps (instead of epochs)\n"
    "  --seq-len N              taco.seq_len\n"
    "  --lr X                   taco.lr, the peak learning rate\n"
    "  --grad-accum N           taco.grad_accum\n"
    "  --schedule NAME          taco.schedule: constant, linear, cosine\n"
    "  --warmup-steps N         taco.warmup_steps\n"
    "  --checkpoint-every N     taco.checkpoint_every\n"
    "  --keep-checkpoints N     taco.keep_checkpoints\n"
    "  --eval-every N           taco.eval_every\n"
    "  --log-every N            taco.log_every\n"
    "  --optimizer NAME         taco.optimizer: taco, adamw\n"
    "  --packing                taco.packing = true\n"
    "  --taco KEY=VALUE         any other taco option (docs/job.md); "
    "VALUE is JSON\n"
    "                           or else a string; dots nest: "
    "taco.k=8\n"
    "  --metadata KEY=VALUE     a metadata entry (a string)\n";

int ctl_jobspec_new(ctl_jobspec **out)
{
	ctl_jobspec *s = calloc(1, sizeof(*s));

	if (!s || !(s->flags = json_object()) || !(s->hp = json_object())) {
		if (s)
			json_decref(s->flags);
		free(s);
		return -ENOMEM;
	}
	*out = s;
	return 0;
}

void ctl_jobspec_free(ctl_jobspec *s)
{
	if (!s)
		return;
	json_decref(s->flags);
	json_decref(s->hp);
	json_decref(s->beta);
	free(s);
}

/* Sets o[a][b]... for the dotted key under `under` (may be NULL). */
static int set_path(json_t *o, const char *under, const char *key, json_t *v)
{
	char buf[256], *p, *dot;

	if (!v)
		return -ENOMEM;
	if (under) {
		json_t *sub = json_object_get(o, under);
		if (!json_is_object(sub)) {
			sub = json_object();
			if (json_object_set_new(o, under, sub)) {
				json_decref(v);
				return -ENOMEM;
			}
		}
		o = sub;
	}
	snprintf(buf, sizeof(buf), "%s", key);
	for (p = buf; (dot = strchr(p, '.')); p = dot + 1) {
		json_t *sub;
		*dot = 0;
		sub = json_object_get(o, p);
		if (!json_is_object(sub)) {
			sub = json_object();
			if (json_object_set_new(o, p, sub)) {
				json_decref(v);
				return -ENOMEM;
			}
		}
		o = sub;
	}
	return json_object_set_new(o, p, v) ? -ENOMEM : 0;
}

/* An integer option, or "auto" where allowed. */
static json_t *int_or_auto(const char *arg, long long lo, long long hi,
			   int auto_ok)
{
	long long v;

	if (auto_ok && !strcmp(arg, "auto"))
		return json_string("auto");
	return ctl_parse_int(arg, lo, hi, &v) ? NULL : json_integer(v);
}

int ctl_jobspec_option(ctl_jobspec *s, const ctl_cmd *cmd, int id,
		       const char *arg)
{
	static const struct {
		int id;
		const char *key; /* under "taco" */
	} taco_ints[] = {
	    {OPT_STEPS, "steps"},
	    {OPT_SEQ_LEN, "seq_len"},
	    {OPT_GRAD_ACCUM, "grad_accum"},
	    {OPT_WARMUP, "warmup_steps"},
	    {OPT_CKPT_EVERY, "checkpoint_every"},
	    {OPT_KEEP_CKPT, "keep_checkpoints"},
	    {OPT_EVAL_EVERY, "eval_every"},
	    {OPT_LOG_EVERY, "log_every"},
	};
	const char *name = "?";
	json_t *v = NULL;
	double x;
	int rc = 0;

	for (int i = 0; ctl_jobspec_options[i].name; i++)
		if (ctl_jobspec_options[i].val == id)
			name = ctl_jobspec_options[i].name;
	for (size_t i = 0; i < sizeof(taco_ints) / sizeof(taco_ints[0]); i++) {
		if (taco_ints[i].id != id)
			continue;
		if (!(v = int_or_auto(arg, 0, 1000000000, 0)))
			return ctl_usage(cmd, "--%s must be an integer", name);
		rc = set_path(s->flags, "taco", taco_ints[i].key, v);
		return rc ? ctl_fail("out of memory") : CTL_GO_ON;
	}
	switch (id) {
	case OPT_MODEL:
		rc = set_path(s->flags, NULL, "model", json_string(arg));
		break;
	case OPT_TRAIN:
		s->train = arg;
		break;
	case OPT_VALIDATION:
		s->validation = arg;
		break;
	case OPT_EPOCHS:
	case OPT_BATCH:
		if (!(v = int_or_auto(arg, 1, 1000000, 1)))
			return ctl_usage(cmd, "--%s must be an integer or auto",
					 name);
		rc = set_path(s->hp, NULL,
			      id == OPT_EPOCHS ? "n_epochs" : "batch_size", v);
		break;
	case OPT_LR_MULT:
	case OPT_BETA:
		if (!strcmp(arg, "auto"))
			v = json_string("auto");
		else if (!ctl_parse_num(arg, &x))
			v = json_real(x);
		else
			return ctl_usage(cmd, "--%s must be a number or auto",
					 name);
		if (id == OPT_BETA) {
			json_decref(s->beta);
			s->beta = v;
			break;
		}
		rc = set_path(s->hp, NULL, "learning_rate_multiplier", v);
		break;
	case OPT_METHOD:
		if (strcmp(arg, "supervised") && strcmp(arg, "dpo"))
			return ctl_usage(cmd, "--method is supervised or dpo");
		s->method = arg;
		break;
	case OPT_SEED:
		if (!(v = int_or_auto(arg, 0, (1ll << 53), 0)))
			return ctl_usage(cmd, "--seed must be an integer");
		rc = set_path(s->flags, NULL, "seed", v);
		break;
	case OPT_SUFFIX:
		rc = set_path(s->flags, NULL, "suffix", json_string(arg));
		break;
	case OPT_LR:
		if (ctl_parse_num(arg, &x))
			return ctl_usage(cmd, "--lr must be a number");
		rc = set_path(s->flags, "taco", "lr", json_real(x));
		break;
	case OPT_SCHEDULE:
	case OPT_OPTIMIZER:
		rc = set_path(s->flags, "taco", name, json_string(arg));
		break;
	case OPT_PACKING:
		rc = set_path(s->flags, "taco", "packing", json_true());
		break;
	case OPT_TACO:
	case OPT_METADATA: {
		const char *eq = strchr(arg, '=');
		char key[256];
		if (!eq || eq == arg || (size_t)(eq - arg) >= sizeof(key) ||
		    eq[-1] == '.' || arg[0] == '.' || strstr(arg, ".."))
			return ctl_usage(cmd, "--%s takes KEY=VALUE", name);
		memcpy(key, arg, (size_t)(eq - arg));
		key[eq - arg] = 0;
		if (id == OPT_METADATA)
			v = json_string(eq + 1);
		else if (!(v = json_loads(eq + 1, JSON_DECODE_ANY, NULL)))
			v = json_string(eq + 1);
		if (id == OPT_METADATA && strchr(key, '.'))
			return json_decref(v),
			       ctl_usage(cmd, "a metadata key has no dots");
		rc = set_path(s->flags, id == OPT_TACO ? "taco" : "metadata",
			      key, v);
		break;
	}
	default:
		return ctl_usage(cmd, "unknown option");
	}
	return rc ? ctl_fail("out of memory") : CTL_GO_ON;
}

/* Copies src's fields into dst, merging objects. */
static int merge(json_t *dst, json_t *src)
{
	const char *k;
	json_t *v;

	json_object_foreach(src, k, v)
	{
		json_t *d = json_object_get(dst, k);
		if (json_is_object(d) && json_is_object(v)) {
			if (merge(d, v))
				return -ENOMEM;
		} else if (json_object_set(dst, k, v)) {
			return -ENOMEM;
		}
	}
	return 0;
}

/* o[key] as an object, made (over any other value) when it is not one;
 * NULL when out of memory. */
static json_t *sub_object(json_t *o, const char *key)
{
	json_t *sub = json_object_get(o, key);

	if (json_is_object(sub))
		return sub;
	sub = json_object();
	return sub && !json_object_set_new(o, key, sub) ? sub : NULL;
}

/* --method: the body's method.type, and the hyperparameters the body gave
 * another type go with it (beta only to dpo), so that the file's values
 * stay and no object of another type is left. */
static int set_method(json_t *body, const char *type)
{
	json_t *m = sub_object(body, "method"), *own, *from, *to = NULL, *v;
	const char *k, *old;

	if (!m)
		return -ENOMEM;
	old = json_string_value(json_object_get(m, "type"));
	if (old && strcmp(old, type)) {
		own = json_object_get(m, old);
		from = json_object_get(own, "hyperparameters");
		if (json_object_size(from) &&
		    (!(to = sub_object(m, type)) ||
		     !(to = sub_object(to, "hyperparameters"))))
			return -ENOMEM;
		json_object_foreach(from, k, v)
		{
			if ((strcmp(k, "beta") || !strcmp(type, "dpo")) &&
			    !json_object_get(to, k) &&
			    json_object_set(to, k, v))
				return -ENOMEM;
		}
		json_object_del(m, old);
	}
	return json_object_set_new(m, "type", json_string(type)) ? -ENOMEM : 0;
}

/* The hyperparameter flags into the body: method.<type>.hyperparameters
 * when the body has a method type (and out of the deprecated top level,
 * which the flag overrides), else the top level; --beta into dpo's. 0,
 * -EINVAL (--beta without method dpo), or -ENOMEM. */
static int set_hyperparameters(ctl_jobspec *s, json_t *body)
{
	json_t *m = json_object_get(body, "method");
	const char *type = json_string_value(json_object_get(m, "type"));
	json_t *top = json_object_get(body, "hyperparameters"), *to, *v;
	const char *k;

	if (s->beta && (!type || strcmp(type, "dpo")))
		return -EINVAL;
	if (!json_object_size(s->hp) && !s->beta)
		return 0;
	to = type ? sub_object(m, type) : body;
	if (!to || !(to = sub_object(to, "hyperparameters")))
		return -ENOMEM;
	json_object_foreach(s->hp, k, v)
	{
		if (json_object_set(to, k, v))
			return -ENOMEM;
		if (type && json_is_object(top))
			json_object_del(top, k);
	}
	if (type && json_is_object(top) && !json_object_size(top))
		json_object_del(body, "hyperparameters");
	return s->beta && json_object_set(to, "beta", s->beta) ? -ENOMEM : 0;
}

/* A file argument: a local file is uploaded and replaced by its id. base:
 * the directory relative paths are relative to (a job file's), or NULL. */
static int resolve_file(ctl *c, json_t *body, const char *key,
			const char *value, const char *base)
{
	static const char *const fields[] = {"purpose", "fine-tune", NULL};
	char path[4096];
	struct stat st;
	ctl_resp r = {0};
	ctl_err err = {0};
	const char *id;

	if (!value)
		return CTL_OK;
	if (base && value[0] != '/')
		snprintf(path, sizeof(path), "%s/%s", base, value);
	else
		snprintf(path, sizeof(path), "%s", value);
	if (stat(path, &st)) {
		if (!strncmp(value, "file-", 5)) /* an id */
			return json_object_set_new(body, key,
						   json_string(value))
				   ? ctl_fail("out of memory")
				   : CTL_OK;
		return ctl_fail("%s: %s", path, strerror(errno));
	}
	if (ctl_http_upload(&c->http, "/v1/files", fields, path, &r, &err))
		return strstr(err.msg, path)
			   ? ctl_fail("%s", err.msg)
			   : ctl_fail("%s: %s", path, err.msg);
	id = ctl_str(r.json, "id");
	if (!id[0] || json_object_set_new(body, key, json_string(id))) {
		ctl_resp_free(&r);
		return ctl_fail("%s: the upload returned no file id", path);
	}
	ctl_resp_free(&r);
	return CTL_OK;
}

int ctl_jobspec_body(ctl *c, ctl_jobspec *s, const ctl_cmd *cmd,
		     const char *job_file, json_t **out)
{
	json_t *body;
	json_error_t je;
	char dir[4096];
	const char *slash;
	int rc;

	if (job_file) {
		struct stat st;
		if (stat(job_file, &st) || !S_ISREG(st.st_mode) ||
		    st.st_size > (off_t)CTL_CONFIG_MAX)
			return ctl_fail("%s: not a readable JSON file of at "
					"most %u KiB",
					job_file, CTL_CONFIG_MAX >> 10);
		body = json_load_file(job_file, 0, &je);
		if (!body)
			return ctl_fail("%s: line %d: %s", job_file, je.line,
					je.text);
		if (!json_is_object(body)) {
			json_decref(body);
			return ctl_fail("%s: not a JSON object", job_file);
		}
	} else {
		body = json_object();
	}
	if (!body || merge(body, s->flags) ||
	    (s->method && set_method(body, s->method))) {
		json_decref(body);
		return ctl_fail("out of memory");
	}
	if ((rc = set_hyperparameters(s, body))) {
		json_decref(body);
		return rc == -EINVAL
			   ? ctl_usage(cmd,
				       "--beta is DPO's: give --method dpo")
			   : ctl_fail("out of memory");
	}
	if (!json_is_string(json_object_get(body, "model"))) {
		json_decref(body);
		return ctl_usage(cmd, "no model (--model)");
	}
	if (!s->train &&
	    !json_is_string(json_object_get(body, "training_file"))) {
		json_decref(body);
		return ctl_usage(cmd, "no training data (--train)");
	}
	/* the job file's own paths are relative to it */
	slash = job_file ? strrchr(job_file, '/') : NULL;
	if (slash) /* "/job.json": the root */
		snprintf(dir, sizeof(dir), "%.*s",
			 slash == job_file ? 1 : (int)(slash - job_file),
			 job_file);
	else
		snprintf(dir, sizeof(dir), ".");
	rc = resolve_file(c, body, "training_file",
			  s->train ? s->train : ctl_str(body, "training_file"),
			  s->train ? NULL : dir);
	if (!rc)
		rc = resolve_file(c, body, "validation_file",
				  s->validation
				      ? s->validation
				      : json_string_value(json_object_get(
					    body, "validation_file")),
				  s->validation ? NULL : dir);
	if (rc) {
		json_decref(body);
		return rc;
	}
	*out = body;
	return CTL_OK;
}
