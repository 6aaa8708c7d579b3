/* job_method.c: OpenAI's method and hyperparameters of a create request.
 * method.type is "supervised" or "dpo", each with its own object
 * (method.supervised, method.dpo) of hyperparameters; the deprecated
 * top-level hyperparameters are read too, for either type, and a value
 * given in both places must agree. DPO adds beta, and its batch_size counts
 * preference pairs. */
#include "job_method.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job/job_opts.h"
#include "util/text.h"

/* OpenAI's names of the types, in the order of enum taco_method. */
static const char *const method_types[] = {"supervised", "dpo", NULL};

/* OpenAI's one other type: named apart, since tacod refuses it. */
#define METHOD_REINFORCEMENT "reinforcement"

int tacod_request_fail(tacod_request_error *e, const char *param,
		       const char *code, const char *fmt, ...)
{
	va_list ap;

	snprintf(e->param, sizeof(e->param), "%s", param);
	snprintf(e->code, sizeof(e->code), "%s", code);
	va_start(ap, fmt);
	taco_text_vformat(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* "auto" or absent: tacod's default. */
static int is_auto(json_t *v)
{
	return !v ||
	       (json_is_string(v) && !strcmp(json_string_value(v), "auto"));
}

/* "auto" or an integer in [lo, hi]; *out untouched for "auto". */
static int auto_int(json_t *v, const char *param, json_int_t lo, json_int_t hi,
		    json_int_t *out, tacod_request_error *e)
{
	if (is_auto(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < lo ||
	    json_integer_value(v) > hi)
		return tacod_request_fail(
		    e, param, "invalid_hyperparameter",
		    "%s must be \"auto\" or an integer in [%lld, %lld]", param,
		    (long long)lo, (long long)hi);
	*out = json_integer_value(v);
	return 0;
}

/* "auto" or a number in (0, hi]; *out untouched for "auto". */
static int auto_num(json_t *v, const char *param, double hi, double *out,
		    tacod_request_error *e)
{
	if (is_auto(v))
		return 0;
	if (!json_is_number(v) || !(json_number_value(v) > 0) ||
	    json_number_value(v) > hi)
		return tacod_request_fail(
		    e, param, "invalid_hyperparameter",
		    "%s must be \"auto\" or a number in (0, %g]", param, hi);
	*out = json_number_value(v);
	return 0;
}

/* The hyperparameters object h at where; beta only for dpo's. */
static int hyperparameters(json_t *h, const char *where, int dpo,
			   tacod_request_hp *hp, tacod_request_error *e)
{
	char p[256];
	const char *k;
	json_t *v;
	int r;

	if (!h)
		return 0;
	if (!json_is_object(h))
		return tacod_request_fail(e, where, "invalid_type",
					  "%s must be an object", where);
	json_object_foreach(h, k, v)
	{
		if (strcmp(k, "n_epochs") && strcmp(k, "batch_size") &&
		    strcmp(k, "learning_rate_multiplier") &&
		    (!dpo || strcmp(k, "beta"))) {
			snprintf(p, sizeof(p), "%s.%s", where, k);
			return tacod_request_fail(
			    e, p, "unknown_parameter",
			    "%s is not a supported hyperparameter%s", p,
			    strcmp(k, "beta") ? ""
					      : " (beta is DPO's: "
						"method.dpo.hyperparameters)");
		}
	}
	snprintf(p, sizeof(p), "%s.n_epochs", where);
	if ((r = auto_int(json_object_get(h, "n_epochs"), p, 1, 100,
			  &hp->epochs, e)))
		return r;
	snprintf(p, sizeof(p), "%s.batch_size", where);
	if ((r = auto_int(json_object_get(h, "batch_size"), p, 1, 256,
			  &hp->batch, e)))
		return r;
	snprintf(p, sizeof(p), "%s.learning_rate_multiplier", where);
	if ((r = auto_num(json_object_get(h, "learning_rate_multiplier"), p,
			  1000, &hp->mult, e)))
		return r;
	snprintf(p, sizeof(p), "%s.beta", where);
	return dpo ? auto_num(json_object_get(h, "beta"), p, 100, &hp->beta, e)
		   : 0;
}

/* A hyperparameter given in both places must be the same value: the
 * deprecated top-level one cannot quietly lose to method's, nor win. */
static int hyperparameters_agree(json_t *top, json_t *own, const char *where,
				 tacod_request_error *e)
{
	static const char *const names[] = {"n_epochs", "batch_size",
					    "learning_rate_multiplier", NULL};

	for (int i = 0; top && own && names[i]; i++) {
		json_t *a = json_object_get(top, names[i]);
		json_t *b = json_object_get(own, names[i]);
		char p[256];

		if (!a || !b || json_equal(a, b))
			continue;
		snprintf(p, sizeof(p), "%s.%s", where, names[i]);
		return tacod_request_fail(
		    e, p, "conflicting_hyperparameters",
		    "%s differs from the deprecated hyperparameters.%s: give "
		    "it in one place, or the same value in both",
		    p, names[i]);
	}
	return 0;
}

static int method_index(const char *name)
{
	for (int i = 0; name && method_types[i]; i++)
		if (!strcmp(name, method_types[i]))
			return i;
	return -1;
}

/* method's keys: its type's object and nothing else. */
static int method_keys(json_t *method, const char *type, tacod_request_error *e)
{
	const char *k;
	json_t *v;
	char p[256];

	json_object_foreach(method, k, v)
	{
		if (!strcmp(k, "type") || !strcmp(k, type))
			continue;
		snprintf(p, sizeof(p), "method.%s", k);
		if (method_index(k) >= 0 || !strcmp(k, METHOD_REINFORCEMENT))
			return tacod_request_fail(
			    e, p, "invalid_method",
			    "%s goes with method.type \"%s\", and this "
			    "request's method.type is \"%s\"",
			    p, k, type);
		return tacod_request_fail(e, p, "unknown_parameter",
					  "unknown parameter: %s", p);
	}
	return 0;
}

int tacod_request_method(json_t *req, tacod_request_hp *hp,
			 tacod_request_error *e)
{
	json_t *top = json_object_get(req, "hyperparameters");
	json_t *method = json_object_get(req, "method");
	json_t *t, *own, *v;
	const char *k, *type;
	char p[256], where[128];
	int r;

	hp->method = TACO_METHOD_SFT;
	hp->epochs = TACOD_DEFAULT_EPOCHS;
	hp->batch = TACOD_DEFAULT_BATCH;
	hp->mult = 1.0;
	hp->beta = TACO_DPO_BETA_DEFAULT;
	if ((r = hyperparameters(top, "hyperparameters", 0, hp, e)))
		return r;
	if (!method)
		return 0;
	if (!json_is_object(method))
		return tacod_request_fail(e, "method", "invalid_type",
					  "method must be an object");
	t = json_object_get(method, "type");
	if (!json_is_string(t))
		return tacod_request_fail(
		    e, "method.type", "missing_required_parameter",
		    "method.type is required: \"supervised\" or \"dpo\"");
	type = json_string_value(t);
	if ((r = method_index(type)) < 0)
		return tacod_request_fail(
		    e, "method.type", "unsupported_method",
		    "method.type '%s' is not supported: tacod runs supervised "
		    "fine-tuning and dpo (preference pairs)",
		    type);
	hp->method = r;
	if ((r = method_keys(method, type, e)))
		return r;
	own = json_object_get(method, type);
	snprintf(where, sizeof(where), "method.%s", type);
	if (own && !json_is_object(own))
		return tacod_request_fail(e, where, "invalid_type",
					  "%s must be an object", where);
	json_object_foreach(own, k, v)
	{
		if (strcmp(k, "hyperparameters")) {
			snprintf(p, sizeof(p), "%s.%s", where, k);
			return tacod_request_fail(e, p, "unknown_parameter",
						  "unknown parameter: %s", p);
		}
	}
	v = json_object_get(own, "hyperparameters");
	snprintf(where, sizeof(where), "method.%s.hyperparameters", type);
	if ((r = hyperparameters(v, where, hp->method == TACO_METHOD_DPO, hp,
				 e)))
		return r;
	return hyperparameters_agree(top, v, where, e);
}

/* What the job file says: taco.lr wins over the multiplier (which is then
 * null: the rate is not a multiple of the auto one), and taco.steps sets
 * the length instead of the epochs (n_epochs null). */
static int effective(json_t *req, tacod_request_hp *hp, int *by_steps)
{
	json_t *ext = json_object_get(req, "taco");
	json_t *lr = json_object_get(ext, "lr");
	json_t *steps = json_object_get(ext, "steps");
	tacod_request_error e;

	if (tacod_request_method(req, hp, &e))
		return -EINVAL;
	if (json_is_number(lr))
		hp->mult = NAN;
	*by_steps = steps && !json_is_null(steps);
	return 0;
}

/* {"beta" (dpo's only), "batch_size", "learning_rate_multiplier",
 * "n_epochs"} */
static json_t *hp_object(const tacod_request_hp *hp, int by_steps, int beta)
{
	json_t *h = json_object();

	if (beta)
		json_object_set_new(h, "beta", json_real(hp->beta));
	json_object_set_new(h, "n_epochs",
			    by_steps ? json_null() : json_integer(hp->epochs));
	json_object_set_new(h, "batch_size", json_integer(hp->batch));
	json_object_set_new(h, "learning_rate_multiplier",
			    isnan(hp->mult) ? json_null()
					    : json_real(hp->mult));
	return h;
}

json_t *tacod_job_hyperparameters(json_t *req)
{
	tacod_request_hp hp;
	int by_steps;

	return effective(req, &hp, &by_steps) ? NULL
					      : hp_object(&hp, by_steps, 0);
}

json_t *tacod_job_method(json_t *req)
{
	tacod_request_hp hp;
	const char *type;
	int by_steps;

	if (effective(req, &hp, &by_steps))
		return NULL;
	type = method_types[hp.method];
	return json_pack(
	    "{ss s{so}}", "type", type, type, "hyperparameters",
	    hp_object(&hp, by_steps, hp.method == TACO_METHOD_DPO));
}
