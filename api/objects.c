#include "objects.h"

#include "api/model_name.h"

#include <stdio.h>
#include <string.h>

#include "job_request.h"

static json_t *str_or_null(const char *s)
{
	return s && s[0] ? json_string(s) : json_null();
}

static json_t *time_or_null(int64_t t)
{
	return t > 0 ? json_integer(t) : json_null();
}

json_t *tacod_file_object(const tacod_file *f)
{
	/* tacod's files never expire, and the (deprecated) status_details
	 * has nothing to say: a file's problems fail the job that uses it */
	return json_pack("{ss ss sI sI ss ss ss sn sn}", "id", f->id, "object",
			 "file", "bytes", (json_int_t)f->bytes, "created_at",
			 (json_int_t)f->created_at, "filename", f->filename,
			 "purpose", f->purpose, "status", "processed",
			 "expires_at", "status_details");
}

/* A field of the stored request, or a default when it is absent or null
 * (OpenAI's clients type seed, hyperparameters and method as non-null). */
static json_t *from_request(json_t *req, const char *key, json_t *dflt)
{
	json_t *v = req ? json_object_get(req, key) : NULL;

	if (v && !json_is_null(v)) {
		json_decref(dflt);
		return json_incref(v);
	}
	return dflt;
}

json_t *tacod_job_object(const tacod_job *j)
{
	json_t *req = j->request ? json_loads(j->request, 0, NULL) : NULL;
	json_t *err = j->error ? json_loads(j->error, 0, NULL) : NULL;
	json_t *o = json_object(), *hp, *method;

	json_object_set_new(o, "id", json_string(j->id));
	json_object_set_new(o, "object", json_string("fine_tuning.job"));
	json_object_set_new(o, "model", json_string(j->model));
	json_object_set_new(o, "created_at", json_integer(j->created_at));
	json_object_set_new(o, "finished_at", time_or_null(j->finished_at));
	json_object_set_new(o, "fine_tuned_model",
			    str_or_null(j->fine_tuned_model));
	json_object_set_new(o, "organization_id", json_string("org-tacod"));
	json_object_set_new(o, "result_files",
			    j->result_file[0] ? json_pack("[s]", j->result_file)
					      : json_array());
	json_object_set_new(o, "status",
			    json_string(tacod_status_name(j->status)));
	/* from the request: a dataset path does not fit the id column */
	json_object_set_new(
	    o, "training_file",
	    from_request(req, "training_file", json_string(j->training_file)));
	json_object_set_new(o, "validation_file",
			    from_request(req, "validation_file",
					 str_or_null(j->validation_file)));
	json_object_set_new(o, "trained_tokens",
			    j->trained_tokens ? json_integer(j->trained_tokens)
					      : json_null());
	json_object_set_new(o, "error", err ? err : json_null());
	json_object_set_new(o, "estimated_finish",
			    time_or_null(j->estimated_finish));
	json_object_set_new(o, "user_provided_suffix", str_or_null(j->suffix));
	json_object_set_new(o, "integrations", json_array());
	/* the values the job runs with, in both places, as OpenAI's job
	 * object has them (the request's own, should it be no request
	 * tacod accepts): hyperparameters as OpenAI fills it for either
	 * method, and method with its type's own (dpo's beta too) */
	hp = tacod_job_hyperparameters(req);
	if (!hp)
		hp = from_request(req, "hyperparameters", json_object());
	json_object_set_new(o, "hyperparameters", hp);
	json_object_set_new(o, "seed",
			    from_request(req, "seed", json_integer(0)));
	json_object_set_new(o, "metadata",
			    from_request(req, "metadata", json_null()));
	method = tacod_job_method(req);
	if (!method)
		method = json_pack("{ss s{sO}}", "type", "supervised",
				   "supervised", "hyperparameters", hp);
	json_object_set_new(o, "method", method);
	json_object_set_new(o, "taco",
			    from_request(req, "taco", json_object()));
	/* tacod's extension: the memory plan admission used, and the peak the
	 * worker measured (null before its first progress report) */
	json_object_set_new(o, "planned_memory_bytes",
			    json_integer(j->planned_bytes));
	json_object_set_new(o, "measured_peak_memory_bytes",
			    j->measured_peak_bytes
				? json_integer(j->measured_peak_bytes)
				: json_null());
	json_decref(req);
	return o;
}

json_t *tacod_event_object(const tacod_event *e)
{
	char id[TACOD_ID_MAX + 32];
	json_t *data = e->data ? json_loads(e->data, 0, NULL) : NULL;

	snprintf(id, sizeof(id), "ftevent-%s-%lld",
		 strncmp(e->job_id, "ftjob-", 6) ? e->job_id : e->job_id + 6,
		 (long long)e->seq);
	/* OpenAI's event types are "message" and "metrics" (its SDKs refuse
	 * others); tacod's finer ones (status, checkpoint) stay in the event
	 * stream's "event:" lines */
	return json_pack("{ss ss sI ss ss ss so}", "id", id, "object",
			 "fine_tuning.job.event", "created_at",
			 (json_int_t)e->created_at, "level", e->level, "type",
			 strcmp(e->type, "metrics") ? "message" : "metrics",
			 "message", e->message ? e->message : "", "data",
			 data ? data : json_null());
}

json_t *tacod_checkpoint_object(const tacod_checkpoint *c, const tacod_job *j)
{
	const char *job =
	    strncmp(c->job_id, "ftjob-", 6) ? c->job_id : c->job_id + 6;
	json_t *m = c->metrics ? json_loads(c->metrics, 0, NULL) : NULL;
	char id[TACOD_ID_MAX + 32], name[TACOD_MODEL_NAME_MAX];

	/* OpenAI's clients require metrics; the step is always known, and a
	 * field a checkpoint recorded before tacod filled them is null */
	static const char *const fields[] = {
	    "train_loss",      "train_mean_token_accuracy",
	    "valid_loss",      "valid_mean_token_accuracy",
	    "full_valid_loss", "full_valid_mean_token_accuracy"};

	if (!json_is_object(m)) {
		json_decref(m);
		m = json_object();
	}
	json_object_set_new(m, "step", json_integer(c->step));
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		if (!json_object_get(m, fields[i]))
			json_object_set_new(m, fields[i], json_null());
	snprintf(id, sizeof(id), "ftckpt-%s-%lld", job, (long long)c->step);
	if (tacod_model_name_format(j->model, j->suffix, j->id, c->step, name,
				    sizeof(name)))
		name[0] = 0; /* a row a store check would have refused */
	return json_pack("{ss ss sI ss sI ss so}", "id", id, "object",
			 "fine_tuning.job.checkpoint", "created_at",
			 (json_int_t)c->created_at, "fine_tuning_job_id",
			 c->job_id, "step_number", (json_int_t)c->step,
			 "fine_tuned_model_checkpoint", name, "metrics", m);
}

json_t *tacod_model_object(const char *id, int64_t created,
			   const char *owned_by, const char *root,
			   const char *parent)
{
	return json_pack("{ss ss sI ss ss so}", "id", id, "object", "model",
			 "created", (json_int_t)created, "owned_by", owned_by,
			 "root", root, "parent", str_or_null(parent));
}

json_t *tacod_list_object(json_t *items, int has_more)
{
	size_t n = json_array_size(items);
	json_t *first =
	    n ? json_object_get(json_array_get(items, 0), "id") : NULL;
	json_t *last =
	    n ? json_object_get(json_array_get(items, n - 1), "id") : NULL;

	return json_pack("{ss so sb sO sO}", "object", "list", "data", items,
			 "has_more", has_more, "first_id",
			 first ? first : json_null(), "last_id",
			 last ? last : json_null());
}

json_t *tacod_error_fields(const char *message, const char *code,
			   const char *param)
{
	json_t *e = json_object();
	json_t *m = json_string(message ? message : "(no message)");

	/* a message that is not UTF-8 (json_string refuses it) still says
	 * something */
	json_object_set_new(e, "message", m ? m : json_string("(no message)"));
	json_object_set_new(e, "code", str_or_null(code));
	json_object_set_new(e, "param", str_or_null(param));
	return e;
}

json_t *tacod_error_object(const char *message, const char *type,
			   const char *param, const char *code)
{
	json_t *e = tacod_error_fields(message, code, param);

	json_object_set_new(e, "type",
			    json_string(type && type[0] ? type : "error"));
	return json_pack("{so}", "error", e);
}
