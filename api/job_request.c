#include "job_request.h"

#include "api/job_method.h"
#include "api/model_name.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>

#include "job/job.h"
#include "job/job_schema.h"
#include "types.h"

static int metadata(json_t *m, tacod_request_error *e)
{
	const char *k;
	json_t *v;

	if (!m || json_is_null(m))
		return 0;
	if (!json_is_object(m) ||
	    json_object_size(m) > TACOD_METADATA_PAIRS_MAX)
		return tacod_request_fail(
		    e, "metadata", "invalid_metadata",
		    "metadata must be an object of at most %d pairs",
		    TACOD_METADATA_PAIRS_MAX);
	json_object_foreach(m, k, v)
	{
		if (tacod_utf8_chars(k, strlen(k)) > TACOD_METADATA_KEY_MAX ||
		    !json_is_string(v) ||
		    tacod_utf8_chars(json_string_value(v),
				     json_string_length(v)) >
			TACOD_METADATA_VALUE_MAX)
			return tacod_request_fail(
			    e, "metadata", "invalid_metadata",
			    "metadata keys are at most %d characters, "
			    "values strings of at most %d",
			    TACOD_METADATA_KEY_MAX, TACOD_METADATA_VALUE_MAX);
	}
	return 0;
}

static int file_arg(json_t *req, const char *key, int required,
		    const tacod_request_ctx *ctx, char *path, size_t cap,
		    tacod_request_error *e)
{
	json_t *v = json_object_get(req, key);
	int r;

	path[0] = 0;
	if (!v || json_is_null(v)) {
		if (required)
			return tacod_request_fail(e, key,
						  "missing_required_parameter",
						  "%s is required", key);
		return 0;
	}
	if (json_is_string(v) && json_string_value(v)[0] == '/') {
		/* a server path: only under the configured dataset roots */
		if (json_string_length(v) >= cap)
			return tacod_request_fail(e, key, "invalid_path",
						  "%s is too long", key);
		r = ctx->dataset_path
			? ctx->dataset_path(ctx->file_ctx, json_string_value(v),
					    path, cap)
			: -EACCES;
		if (r == -ENOENT)
			return tacod_request_fail(e, key, "file_not_found",
						  "no such file: %s",
						  json_string_value(v));
		if (r)
			return tacod_request_fail(
			    e, key, "path_not_allowed",
			    "%s is not under a dataset root of this "
			    "server (dataset_roots)",
			    json_string_value(v));
		return 0;
	}
	if (!json_is_string(v) || json_string_length(v) > 63)
		return tacod_request_fail(
		    e, key, "invalid_type",
		    "%s must be a file id or an absolute path under "
		    "a dataset root",
		    key);
	r = ctx->file_path(ctx->file_ctx, json_string_value(v), path, cap);
	if (r == -EINVAL)
		return tacod_request_fail(
		    e, key, "invalid_file_purpose",
		    "%s: %s is not a file of purpose "
		    "'fine-tune' (a job's result file is not "
		    "training data)",
		    key, json_string_value(v));
	if (r)
		return tacod_request_fail(e, key, "file_not_found",
					  "no such file: %s",
					  json_string_value(v));
	return 0;
}

/* A number with no fraction is an integer, as JSON Schema counts it (5.0
 * is an integer there, and a client's JSON encoder may write one so):
 * every such real in v becomes the integer, in place, before the request
 * is read. A fraction or a value out of the int64 range stays a real, and
 * an integer option refuses it. */
static json_t *as_integer(json_t *x)
{
	double d = json_real_value(x);

	return json_is_real(x) && d == floor(d) && fabs(d) <= 9.2e18
		   ? json_integer((json_int_t)d)
		   : NULL;
}

static void integral_reals(json_t *v)
{
	const char *k;
	json_t *x, *n;
	size_t i;

	json_object_foreach(v, k, x)
	{
		if ((n = as_integer(x)))
			json_object_set_new(v, k, n);
		else
			integral_reals(x);
	}
	json_array_foreach(v, i, x)
	{
		if ((n = as_integer(x)))
			json_array_set_new(v, i, n);
		else
			integral_reals(x);
	}
}

/* The directory taco-train reads the model named by v from: a base model's
 * in models_dir, or what ctx->model_path makes of a fine-tuned model or a
 * checkpoint (api/model_name.h). */
static int model_arg(json_t *v, const tacod_request_ctx *ctx, char *path,
		     size_t cap, tacod_request_error *e)
{
	tacod_model_name m;
	const char *name = json_string_value(v);
	struct stat st;
	int r;

	if (!json_is_string(v))
		return tacod_request_fail(
		    e, "model", "missing_required_parameter",
		    "model is required: the name of a directory in the "
		    "models directory, or of a fine-tuned model (ft:...)");
	if (tacod_model_name_parse(name, &m))
		return tacod_request_fail(
		    e, "model", "invalid_model",
		    "model '%s' is neither a plain name nor a "
		    "fine-tuned model's name (ft:...)",
		    name);
	if (m.kind != TACOD_MODEL_BASE) {
		r = ctx->model_path
			? ctx->model_path(ctx->file_ctx, name, path, cap)
			: -ENOENT;
		if (r == -ENOENT)
			return tacod_request_fail(e, "model", "model_not_found",
						  "model '%s' does not exist",
						  name);
		if (r) {
			tacod_request_fail(e, "model", "server_error",
					   "model '%s' cannot be used: %s",
					   name, strerror(-r));
			return r == -EINVAL ? -EIO : r;
		}
		return 0;
	}
	if ((size_t)snprintf(path, cap, "%s/%s/config.json", ctx->models_dir,
			     name) >= cap ||
	    stat(path, &st))
		return tacod_request_fail(
		    e, "model", "model_not_found",
		    "model '%s' is not in the models directory", name);
	snprintf(path, cap, "%s/%s", ctx->models_dir, name);
	return 0;
}

int tacod_job_request(json_t *req, const tacod_request_ctx *ctx,
		      tacod_job_spec *out, tacod_request_error *e)
{
	static const char *const keys[] = {"model",
					   "training_file",
					   "validation_file",
					   "hyperparameters",
					   "method",
					   "suffix",
					   "seed",
					   "metadata",
					   "integrations",
					   "taco",
					   NULL};
	char model[4200], train[4096], val[4096], p[96];
	tacod_request_hp hp;
	json_t *v, *job, *ext;
	const char *k;
	taco_job tj;
	taco_job_problems probs;
	char *text;
	int r;

	memset(e, 0, sizeof(*e));
	if (!json_is_object(req))
		return tacod_request_fail(e, "", "invalid_request",
					  "the body must be a JSON object");
	integral_reals(req);
	json_object_foreach(req, k, v)
	{
		int ok = 0;
		for (int i = 0; keys[i]; i++)
			ok |= !strcmp(k, keys[i]);
		if (!ok)
			return tacod_request_fail(e, k, "unknown_parameter",
						  "unknown parameter: %s", k);
	}
	if ((r = model_arg(json_object_get(req, "model"), ctx, model,
			   sizeof(model), e)))
		return r;
	if ((r = file_arg(req, "training_file", 1, ctx, train, sizeof(train),
			  e)) ||
	    (r = file_arg(req, "validation_file", 0, ctx, val, sizeof(val), e)))
		return r;
	if ((r = tacod_request_method(req, &hp, e)))
		return r;
	v = json_object_get(req, "suffix");
	if (v && !json_is_null(v) &&
	    (!json_is_string(v) ||
	     !tacod_model_name_plain(json_string_value(v), 64)))
		return tacod_request_fail(
		    e, "suffix", "invalid_suffix",
		    "suffix is at most 64 letters, digits, '-', '_' "
		    "or '.', and not . or ..");
	v = json_object_get(req, "seed");
	if (v && !json_is_null(v) &&
	    (!json_is_integer(v) || json_integer_value(v) < 0 ||
	     json_integer_value(v) > 2147483647))
		return tacod_request_fail(
		    e, "seed", "invalid_seed",
		    "seed must be an integer in [0, 2147483647]");
	if ((r = metadata(json_object_get(req, "metadata"), e)))
		return r;
	v = json_object_get(req, "integrations");
	if (v && !json_is_null(v) &&
	    !(json_is_array(v) && json_array_size(v) == 0))
		return tacod_request_fail(e, "integrations",
					  "unsupported_integration",
					  "integrations are not supported");
	ext = json_object_get(req, "taco");
	if (ext && !json_is_object(ext))
		return tacod_request_fail(
		    e, "taco", "invalid_type",
		    "taco must be an object of tacod options");
	json_object_foreach(ext, k, v)
	{
		/* the job file's options that the request may set; the rest
		 * (paths, output, what the OpenAI fields map to) are tacod's */
		const taco_job_key *jk = taco_job_key_find(k);
		if (!jk || jk->setter != TACO_JOB_BY_REQUEST) {
			snprintf(p, sizeof(p), "taco.%s", k);
			return tacod_request_fail(
			    e, p, "unknown_parameter",
			    "%s is not an option tacod takes "
			    "(docs/job.md)",
			    p);
		}
	}
	/* the multiplier scales the auto rate; a taco.lr is a rate of its
	 * own and takes its place */
	job = json_pack(
	    "{ss ss ss sI sI}", "model", model, "train", train, "output_dir",
	    ctx->output_dir, "batch_size", (json_int_t)hp.batch, "seed",
	    (json_int_t)json_integer_value(json_object_get(req, "seed")));
	if (job && !json_is_number(json_object_get(ext, "lr")))
		json_object_set_new(job, "lr_multiplier", json_real(hp.mult));
	if (!job)
		return tacod_request_fail(e, "", "server_error",
					  "out of memory");
	if (val[0])
		json_object_set_new(job, "validation", json_string(val));
	/* sft is the job file's default: a supervised job's file names no
	 * method */
	if (hp.method == TACO_METHOD_DPO) {
		json_object_set_new(job, "method", json_string("dpo"));
		json_object_set_new(job, "dpo",
				    json_pack("{sf}", "beta", hp.beta));
	}
	if (ext) {
		json_object_update(job, ext); /* tacod's options win */
		/* null is the default, as absent: the job file leaves it out */
		json_object_foreach(ext, k, v)
		{
			if (json_is_null(v))
				json_object_del(job, k);
		}
	}
	if (!json_object_get(job, "steps"))
		json_object_set_new(job, "epochs", json_integer(hp.epochs));
	/* the chat template's clock (strftime_now), fixed at the create: a
	 * revalidation after a restart and a resumed run render the same */
	json_object_set_new(job, "chat_template_time",
			    json_integer((json_int_t)time(NULL)));
	/* The engine's own validation, every option at once, of the text
	 * tacod writes: the same bytes taco-train reads, its size limit
	 * included. Every path is absolute (models_dir and state_dir must
	 * be), so no directory resolves them. */
	text = json_dumps(job, JSON_INDENT(1));
	json_decref(job);
	if (!text)
		return tacod_request_fail(e, "", "server_error",
					  "out of memory");
	r = taco_job_parse(text, strlen(text), NULL, &tj, &probs);
	if (r) {
		free(text);
		taco_job_free(&tj);
		/* messages name their option: "seq_len: must be ..." */
		snprintf(p, sizeof(p), "taco.%.*s",
			 (int)strcspn(probs.msg[0], ":"), probs.msg[0]);
		return tacod_request_fail(e, p, "invalid_option", "%s",
					  probs.msg[0]);
	}
	out->text = text;
	out->job = tj;
	return 0;
}

void tacod_job_spec_free(tacod_job_spec *spec)
{
	free(spec->text);
	spec->text = NULL;
	taco_job_free(&spec->job);
}
