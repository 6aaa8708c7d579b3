/* service/jobs.c: fine-tuning jobs: a create (the request mapped onto a
 * job, planned at once, its job file written once, its data validated in
 * the background), the list, a job, cancel, pause and resume.
 *
 * Pause keeps the job's place: a queued job is set aside at once, a running
 * one is asked to checkpoint and stop at its next step boundary (the worker
 * exits 3 and service/service.c marks it paused). Resume puts it back in the
 * queue with its original queue_seq, so it goes ahead of jobs created after it.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/job_request.h"
#include "api/objects.h"
#include "daemon/service/internal.h"
#include "daemon/webhooks/delivery.h"
#include "data/dataset_kind.h"
#include "util/fsutil.h"

typedef struct file_lookup {
	tacod_service *s;
	const char *user; /* scope */
	const char *base; /* where a fine-tuned model is linked (models.c) */
} file_lookup;

static int lookup_file(void *ctx, const char *id, char *path, size_t cap)
{
	file_lookup *l = ctx;
	tacod_file f;

	/* called with the service lock held */
	if (tacod_store_file_get(l->s->store, l->user, id, &f, NULL))
		return -ENOENT;
	/* a job's result file is not training data */
	if (strcmp(f.purpose, TACOD_PURPOSE_FINE_TUNE))
		return -EINVAL;
	snprintf(path, cap, "%s", f.path);
	return 0;
}

/* A dataset named by path must resolve (symlinks and ".." followed) to a
 * regular file inside one of the configured dataset roots. */
static int dataset_path(void *ctx, const char *p, char *path, size_t cap)
{
	file_lookup *l = ctx;
	char real[PATH_MAX], root[PATH_MAX];
	struct stat st;

	if (!realpath(p, real))
		return errno == ENOENT ? -ENOENT : -EACCES;
	if (stat(real, &st) || !S_ISREG(st.st_mode))
		return -ENOENT;
	for (int i = 0; i < l->s->cfg.n_roots; i++) {
		size_t n;
		if (!realpath(l->s->cfg.roots[i], root))
			continue;
		n = strlen(root);
		if (!strncmp(real, root, n) &&
		    (real[n] == '/' || (n == 1 && root[0] == '/')) &&
		    strlen(real) < cap) {
			memcpy(path, real, strlen(real) + 1);
			return 0;
		}
	}
	return -EACCES;
}

/* A fine-tuned model or checkpoint as the job's own model directory. */
static int model_path(void *ctx, const char *name, char *path, size_t cap)
{
	file_lookup *l = ctx;
	int rc;

	if (strlen(l->base) >= cap)
		return -ENAMETOOLONG;
	/* called with the service lock held */
	rc = tacod_models_assemble(l->s, l->user, name, l->base, NULL);
	if (rc == 0)
		memcpy(path, l->base, strlen(l->base) + 1);
	return rc;
}

/* A job's data must be of its method's kind: a supervised job's files hold
 * examples, a dpo job's preference pairs. Told at once from each file's
 * first line, so that a request for the wrong kind is a 400 naming the file
 * rather than a job failing later; a file whose first line tells nothing is
 * left to the validation's report. 0, or a 400 has been sent. */
static int data_kind_fits(tacod_http_req *r, json_t *req,
			  const tacod_job_spec *spec)
{
	const struct {
		const char *path, *param, *code;
	} files[] = {
	    {spec->job.train, "training_file", "invalid_training_file"},
	    {spec->job.validation, "validation_file",
	     "invalid_validation_file"},
	};
	int dpo = spec->job.method == TACO_METHOD_DPO;
	int want =
	    dpo ? TACO_DATASET_KIND_PREFERENCE : TACO_DATASET_KIND_SUPERVISED;

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		const char *name =
		    json_string_value(json_object_get(req, files[i].param));
		taco_err err = {{0}};
		int kind;

		/* a file that cannot be read: the validation says so */
		if (!files[i].path[0] ||
		    taco_dataset_kind(files[i].path, &kind, &err) ||
		    kind == TACO_DATASET_KIND_UNKNOWN || kind == want)
			continue;
		if (dpo)
			return tacod_http_error(
				   r, 400, "invalid_request_error",
				   files[i].code, files[i].param,
				   "%s %s holds supervised examples, and "
				   "method.type dpo trains on preference "
				   "pairs: lines of \"input\", "
				   "\"preferred_output\" and "
				   "\"non_preferred_output\" "
				   "(docs/datasets.md)",
				   files[i].param, name ? name : ""),
			       -EINVAL;
		return tacod_http_error(
			   r, 400, "invalid_request_error", files[i].code,
			   files[i].param,
			   "%s %s holds preference pairs (\"input\", "
			   "\"preferred_output\", \"non_preferred_output\"), "
			   "which train with method.type dpo; a supervised job "
			   "reads chat, prompt and completion, text or "
			   "input_ids lines (docs/datasets.md)",
			   files[i].param, name ? name : ""),
		       -EINVAL;
	}
	return 0;
}

int tacod_route_map_job(tacod_http_req *r, tacod_service *s, json_t *req,
			const char *dir, tacod_job_spec *spec)
{
	char out[TACOD_PATH_MAX + 160], base[TACOD_PATH_MAX + 160];
	tacod_request_error e;
	file_lookup fl = {s, tacod_route_scope(r), base};
	tacod_request_ctx c = {s->cfg.models_dir, out,	      lookup_file,
			       dataset_path,	  model_path, &fl};
	int rc;

	snprintf(out, sizeof(out), "%s/out", dir);
	snprintf(base, sizeof(base), "%s/base", dir);
	pthread_mutex_lock(&s->lock);
	rc = tacod_job_request(req, &c, spec, &e);
	pthread_mutex_unlock(&s->lock);
	/* a model the caller has not: 404, as GET /v1/models/{model} says
	 * it, another user's fine-tuned model alike */
	if (rc == -EINVAL)
		return tacod_http_error(
			   r, strcmp(e.code, "model_not_found") ? 400 : 404,
			   "invalid_request_error", e.code,
			   e.param[0] ? e.param : NULL, "%s", e.message),
		       -EINVAL;
	if (rc) {
		taco_err err = {{0}};
		taco_err_set(&err, rc, "%s", e.message);
		return tacod_route_write_error(r, rc, &err), rc;
	}
	/* the files' first lines, read without the lock */
	if (data_kind_fits(r, req, spec)) {
		tacod_job_spec_free(spec);
		return -EINVAL;
	}
	return 0;
}

void tacod_route_remove_job_dir(const char *dir)
{
	char base[TACOD_PATH_MAX + 160];

	snprintf(base, sizeof(base), "%s/base", dir);
	taco_remove_flat_dir(base, NULL);
	taco_remove_flat_dir(dir, NULL);
}

/* Writes the job file into dir, once: the text the job was parsed from,
 * which taco-train reads. 0, or a 500 or 507 (no server path in it) has been
 * sent, and dir may hold a part of it: the caller removes it. */
static int write_job(tacod_http_req *r, const char *dir,
		     const tacod_job_spec *spec)
{
	char path[TACOD_PATH_MAX + 192];
	taco_err err = {{0}};
	int rc;

	snprintf(path, sizeof(path), "%s/job.json", dir);
	if ((rc = taco_mkdir_p(dir, &err)) ||
	    (rc = taco_write_file_atomic(path, spec->text, strlen(spec->text),
					 &err)))
		return tacod_route_write_error(r, rc, &err), rc;
	return 0;
}

/* "Validating training file: file-a[ and validation file: file-b]", as
 * OpenAI's event says it. */
static void validating_message(json_t *req, char *msg, size_t cap)
{
	const char *t =
	    json_string_value(json_object_get(req, "training_file"));
	const char *v =
	    json_string_value(json_object_get(req, "validation_file"));
	int n = snprintf(msg, cap, "Validating training file: %s", t ? t : "");

	if (v && n >= 0 && (size_t)n < cap)
		snprintf(msg + n, cap - (size_t)n, " and validation file: %s",
			 v);
}

/* The job row (validating_files), its first events and the idempotency key
 * in one transaction; -EDQUOT when the user has too many jobs waiting,
 * -ENOBUFS when the validation queue is full. Lock held. */
static int add_job(tacod_service *s, tacod_job *j, json_t *req,
		   const tacod_idem *idem, taco_err *err)
{
	int64_t counts[TACOD_CANCELLED + 1] = {0}, waiting;
	json_t *body = NULL;
	char msg[2 * TACOD_PATH_MAX];
	int rc;

	rc = tacod_store_job_count(s->store, j->user, counts, err);
	waiting = counts[TACOD_VALIDATING] + counts[TACOD_QUEUED] +
		  counts[TACOD_PAUSED];
	if (rc == 0 && waiting >= s->cfg.limits.max_queued_jobs_per_user)
		return taco_err_set(err, -EDQUOT,
				    "you have %lld jobs validating, queued or "
				    "paused, the most allowed "
				    "(max_queued_jobs_per_user)",
				    (long long)waiting);
	if (rc == 0)
		rc = tacod_store_job_count(s->store, NULL, counts, err);
	if (rc == 0 && counts[TACOD_VALIDATING] >= TACOD_MAX_VALIDATING)
		return taco_err_set(err, -ENOBUFS,
				    "%lld jobs are waiting for their files to "
				    "be validated, the most tacod holds: try "
				    "again later",
				    (long long)counts[TACOD_VALIDATING]);
	if (rc == 0)
		rc = tacod_store_tx_begin(s->store, err);
	if (rc < 0)
		return rc;
	rc = tacod_store_job_add(s->store, j, err);
	if (rc == 0)
		rc = tacod_store_event_add(s->store, j->id, "info", "status",
					   "Created fine-tuning job", NULL,
					   NULL, err);
	validating_message(req, msg, sizeof(msg));
	if (rc == 0)
		rc = tacod_store_event_add(
		    s->store, j->id, "info", "status", msg,
		    "{\"status\":\"validating_files\"}", NULL, err);
	if (rc == 0 && !(body = tacod_job_object(j)))
		rc = taco_err_set(err, -ENOMEM, "out of memory");
	if (rc == 0)
		rc = tacod_idem_store(s, j->user, idem, 200, body, err);
	json_decref(body);
	return tacod_store_tx_end(s->store, rc, err);
}

/* 429: the validation queue is full; a client may try again later. */
static int queue_full(tacod_http_req *r, const taco_err *err)
{
	tacod_http_add_header(r, "Retry-After", "10");
	return tacod_http_error(r, 429, "rate_limit_error",
				"validation_queue_full", NULL, "%s", err->msg);
}

int tacod_route_job_create(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	json_t *req, *v;
	char dir[TACOD_PATH_MAX + 128], out[TACOD_PATH_MAX + 160];
	tacod_job j = {0};
	tacod_job_spec spec = {0};
	taco_err err = {{0}};
	tacod_idem idem;
	tacod_assessment a;
	size_t blen;
	const char *body = tacod_http_body(r, &blen);
	int rc, created = 0;

	if (tacod_idem_begin(r, s, body, blen, &idem))
		return 0;
	if (!(req = tacod_http_body_json(r)))
		return 0;
	tacod_new_id("ftjob-", j.id);
	snprintf(dir, sizeof(dir), "%s/%s", s->jobs_dir, j.id);
	snprintf(out, sizeof(out), "%s/out", dir);
	if (tacod_route_map_job(r, s, req, dir, &spec)) {
		rc = 0;
		goto out;
	}
	/* the memory plan here, at once: a job that can never fit is refused
	 * now, before any file is written; the data is read by the
	 * validation thread */
	tacod_assess(s, &spec.job, req, TACOD_ASSESS_PLAN, 0, &a);
	json_decref(a.report);
	if (a.code[0]) {
		rc = tacod_http_error(r, 400, "invalid_request_error", a.code,
				      a.param[0] ? a.param : NULL, "%s", a.msg);
		goto out;
	}
	if (write_job(r, dir, &spec)) {
		rc = 0;
		goto out;
	}
	snprintf(j.user, sizeof(j.user), "%s", tacod_route_user(r));
	j.status = TACOD_VALIDATING;
	snprintf(j.model, sizeof(j.model), "%s",
		 json_string_value(json_object_get(req, "model")));
	/* the id columns hold uploaded files' ids; a path stays in the
	 * request */
	v = json_object_get(req, "training_file");
	if (json_string_value(v)[0] != '/')
		snprintf(j.training_file, sizeof(j.training_file), "%s",
			 json_string_value(v));
	v = json_object_get(req, "validation_file");
	if (json_is_string(v) && json_string_value(v)[0] != '/')
		snprintf(j.validation_file, sizeof(j.validation_file), "%s",
			 json_string_value(v));
	v = json_object_get(req, "suffix");
	if (json_is_string(v))
		snprintf(j.suffix, sizeof(j.suffix), "%s",
			 json_string_value(v));
	j.request = json_dumps(req, JSON_COMPACT);
	if (strlen(out) >= sizeof(j.output_dir)) {
		rc = tacod_http_error(r, 500, "server_error", NULL, NULL,
				      "state_dir is too long");
		goto out;
	}
	memcpy(j.output_dir, out, strlen(out) + 1);
	j.planned_bytes = (int64_t)a.plan.total;
	j.created_at = tacod_now();
	pthread_mutex_lock(&s->lock);
	rc = add_job(s, &j, req, &idem, &err);
	if (rc == 0) {
		/* with the row, under the same lock: the validation takes
		 * the job parsed here */
		tacod_validate_keep(s, j.id, &spec.job, req);
		tacod_validate_notify(s);
	}
	pthread_mutex_unlock(&s->lock);
	created = rc == 0;
	if (rc) {
		if (rc == -EEXIST && idem.key[0] &&
		    tacod_idem_begin(r, s, body, blen, &idem))
			rc = 0; /* a twin request won the key: its reply */
		else if (rc == -EDQUOT)
			rc = tacod_http_error(r, 429, "rate_limit_error",
					      "too_many_queued_jobs", NULL,
					      "%s", err.msg);
		else if (rc == -ENOBUFS)
			rc = queue_full(r, &err);
		else
			rc = tacod_route_store_error(r, rc, &err, "job");
		goto out;
	}
	rc = tacod_http_reply_json(r, 200, tacod_job_object(&j));
out:
	/* a create that failed leaves nothing: its row and events were one
	 * transaction, its directory goes here */
	if (!created)
		tacod_route_remove_job_dir(dir);
	free(j.request);
	tacod_job_spec_free(&spec);
	json_decref(req);
	return rc;
}

/* OpenAI's list filter, metadata[key]=value (every pair must match), as a
 * JSON object; NULL when there is none. A key has no brackets; lengths are
 * in characters, as a create's metadata counts them. 0, or a 400 has been
 * sent. */
static int metadata_filter(tacod_http_req *r, char **out)
{
	json_t *f = json_object();
	int count = 0;

	*out = NULL;
	for (int i = 0; i < tacod_http_query_count(r); i++) {
		const char *name, *value;
		char key[4 * TACOD_METADATA_KEY_MAX + 1];
		json_t *v = NULL;
		size_t len, n;

		tacod_http_query_at(r, i, &name, &value);
		if (strncmp(name, "metadata[", 9))
			continue;
		len = strlen(name);
		n = len > 10 && name[len - 1] == ']' ? len - 10 : 0;
		/* metadata[a][b] would be a nested object: not a filter */
		if (memchr(name + 9, '[', n) || memchr(name + 9, ']', n))
			n = 0;
		if (n && n < sizeof(key)) {
			memcpy(key, name + 9, n);
			key[n] = 0;
		}
		if (!n || n >= sizeof(key) ||
		    tacod_utf8_chars(key, n) > TACOD_METADATA_KEY_MAX ||
		    tacod_utf8_chars(value, strlen(value)) >
			TACOD_METADATA_VALUE_MAX ||
		    ++count > TACOD_METADATA_PAIRS_MAX ||
		    !(v = json_string(value)) ||
		    json_object_set_new(f, key, v)) {
			json_decref(f);
			return tacod_http_error(r, 400, "invalid_request_error",
						"invalid_metadata", "metadata",
						"a metadata filter is "
						"metadata[key]=value in UTF-8: "
						"at most %d pairs, keys of 1 "
						"to %d characters, values up "
						"to %d",
						TACOD_METADATA_PAIRS_MAX,
						TACOD_METADATA_KEY_MAX,
						TACOD_METADATA_VALUE_MAX),
			       -EINVAL;
		}
	}
	if (json_object_size(f))
		*out = json_dumps(f, JSON_COMPACT);
	json_decref(f);
	return 0;
}

int tacod_route_job_list(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	tacod_job *rows = calloc(TACOD_LIST_MAX, sizeof(*rows));
	const char *after = tacod_http_query(r, "after");
	json_t *items = json_array();
	taco_err err = {{0}};
	char *filter = NULL;
	int n = 0, more = 0, rc, limit;

	if (!rows)
		return tacod_http_error(r, 500, "server_error", NULL, NULL,
					"out of memory");
	if ((limit = tacod_route_limit(r)) < 0 || metadata_filter(r, &filter)) {
		free(rows);
		json_decref(items);
		return 0;
	}
	pthread_mutex_lock(&s->lock);
	rc = tacod_store_job_list_metadata(s->store, tacod_route_scope(r),
					   filter, after ? after : "", limit,
					   rows, &n, &more, &err);
	pthread_mutex_unlock(&s->lock);
	free(filter);
	for (int i = 0; i < n; i++) {
		if (!rc)
			json_array_append_new(items,
					      tacod_job_object(&rows[i]));
		tacod_job_clear(&rows[i]);
	}
	free(rows);
	if (rc) {
		json_decref(items);
		return tacod_route_store_error(r, rc, &err, "job");
	}
	return tacod_http_reply_json(r, 200, tacod_list_object(items, more));
}

int tacod_route_job_show(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	tacod_job j = {0};
	taco_err err = {{0}};
	int rc;

	pthread_mutex_lock(&s->lock);
	rc = tacod_store_job_get(s->store, tacod_route_scope(r),
				 tacod_http_param(r, "id"), &j, &err);
	pthread_mutex_unlock(&s->lock);
	if (rc)
		return tacod_route_store_error(r, rc, &err, "job");
	rc = tacod_http_reply_json(r, 200, tacod_job_object(&j));
	tacod_job_clear(&j);
	return rc;
}

int tacod_route_job_cancel(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	const char *id = tacod_http_param(r, "id");
	tacod_job j = {0};
	taco_err err = {{0}};
	int rc;

	pthread_mutex_lock(&s->lock);
	rc = tacod_store_job_get(s->store, tacod_route_scope(r), id, &j, &err);
	if (!rc) {
		if (j.status == TACOD_QUEUED || j.status == TACOD_PAUSED ||
		    j.status == TACOD_VALIDATING) {
			int from = j.status, t;
			j.status = TACOD_CANCELLED;
			j.finished_at = tacod_now();
			/* the status, its end and its webhook deliveries
			 * together; only while the job is still in `from` */
			t = tacod_store_tx_begin(s->store, &err);
			if (!t) {
				t = tacod_store_job_update_from(s->store, &j,
								from, &err);
				if (!t)
					t = tacod_webhooks_job_status(s->hooks,
								      &j, &err);
				t = tacod_store_tx_end(s->store, t, &err);
			}
			if (tacod_http_storage_errno(t)) {
				rc = t; /* nothing changed: 507 */
			} else if (t) {
				j.status = from;
				j.finished_at = 0;
			} else {
				tacod_store_event_add(
				    s->store, id, "info", "status",
				    "The job was cancelled", NULL, NULL, NULL);
				/* one paused, or queued again, after steps */
				tacod_results_attach(s, &j);
				tacod_models_release(s, id);
				/* one submitted to Slurm: its Slurm job goes */
				tacod_service_request_stop(s, id,
							   TACOD_STOP_CANCEL);
			}
		} else if (j.status == TACOD_RUNNING) {
			tacod_service_request_stop(s, id, TACOD_STOP_CANCEL);
		} else {
			rc = -EALREADY;
		}
	}
	pthread_mutex_unlock(&s->lock);
	if (rc == -EALREADY) {
		rc = tacod_http_error(r, 400, "invalid_request_error",
				      "job_finished", "id",
				      "the job has already finished (%s)",
				      tacod_status_name(j.status));
		tacod_job_clear(&j);
		return rc;
	}
	if (rc) {
		tacod_job_clear(&j);
		return tacod_route_store_error(r, rc, &err, "job");
	}
	rc = tacod_http_reply_json(r, 200, tacod_job_object(&j));
	tacod_job_clear(&j);
	return rc;
}

static int reply_job(tacod_http_req *r, tacod_job *j)
{
	int rc = tacod_http_reply_json(r, 200, tacod_job_object(j));

	tacod_job_clear(j);
	return rc;
}

static int invalid_state(tacod_http_req *r, tacod_job *j, const char *what)
{
	int rc = tacod_http_error(
	    r, 409, "invalid_request_error", "invalid_state", "id",
	    "a %s job cannot be %s", tacod_status_name(j->status), what);

	tacod_job_clear(j);
	return rc;
}

int tacod_route_job_pause(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	const char *id = tacod_http_param(r, "id");
	tacod_job j = {0};
	taco_err err = {{0}};
	int rc, ok = 1, t;

	pthread_mutex_lock(&s->lock);
	rc = tacod_store_job_get(s->store, tacod_route_scope(r), id, &j, &err);
	if (rc == 0 && j.status == TACOD_QUEUED) {
		t = tacod_store_job_transition(s->store, id, TACOD_QUEUED,
					       TACOD_PAUSED, &err);
		if (tacod_http_storage_errno(t)) {
			rc = t; /* nothing changed: 507 */
		} else if (t == 0) {
			j.status = TACOD_PAUSED;
			tacod_store_event_add(s->store, id, "info", "status",
					      "The job was paused",
					      "{\"status\":\"paused\"}", NULL,
					      NULL);
			/* one submitted to Slurm: its Slurm job goes */
			tacod_service_request_stop(s, id, TACOD_STOP_PAUSE);
		} else {
			ok = 0; /* it just started: ask again */
		}
	} else if (rc == 0 && j.status == TACOD_RUNNING) {
		tacod_service_request_stop(s, id, TACOD_STOP_PAUSE);
	} else if (rc == 0 && j.status != TACOD_PAUSED) {
		ok = 0; /* finished: a paused job's pause is a no-op */
	}
	pthread_mutex_unlock(&s->lock);
	if (rc) {
		tacod_job_clear(&j);
		return tacod_route_store_error(r, rc, &err, "job");
	}
	return ok ? reply_job(r, &j) : invalid_state(r, &j, "paused");
}

int tacod_route_job_resume(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	const char *id = tacod_http_param(r, "id");
	tacod_job j = {0};
	taco_err err = {{0}};
	int rc, ok = 0, t = -EAGAIN;

	pthread_mutex_lock(&s->lock);
	rc = tacod_store_job_get(s->store, tacod_route_scope(r), id, &j, &err);
	if (rc == 0 && j.status == TACOD_PAUSED)
		t = tacod_store_job_transition(s->store, id, TACOD_PAUSED,
					       TACOD_QUEUED, &err);
	if (tacod_http_storage_errno(t))
		rc = t; /* nothing changed: 507 */
	if (rc == 0 && t == 0) {
		ok = 1;
		j.status = TACOD_QUEUED;
		tacod_store_event_add(s->store, id, "info", "status",
				      "The job was resumed and is queued",
				      "{\"status\":\"queued\"}", NULL, NULL);
		tacod_service_wake(s);
	}
	pthread_mutex_unlock(&s->lock);
	if (rc) {
		tacod_job_clear(&j);
		return tacod_route_store_error(r, rc, &err, "job");
	}
	return ok ? reply_job(r, &j) : invalid_state(r, &j, "resumed");
}
