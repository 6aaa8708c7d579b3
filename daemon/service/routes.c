/* service/routes.c: the REST API (OpenAI's fine-tuning paths). Handlers run
 * on the HTTP server's thread and hold the service lock while they touch
 * the store. */
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
#include "util/fsutil.h"

/* The user whose rows a request sees: NULL (everything) for admins. */
const char *tacod_route_scope(tacod_http_req *r)
{
	const tacod_identity *id = tacod_http_identity(r);

	return id->role == TACOD_ROLE_ADMIN ? NULL : id->user;
}

static const char *user_of(tacod_http_req *r)
{
	return tacod_http_identity(r)->user;
}

int tacod_route_limit(tacod_http_req *r)
{
	const char *l = tacod_http_query(r, "limit");
	char *end;
	long n;

	if (!l)
		return 20;
	errno = 0;
	n = strtol(l, &end, 10);
	if (end == l || *end || errno || n < 1 || n > TACOD_LIST_MAX) {
		tacod_http_error(
		    r, 400, "invalid_request_error", "invalid_value", "limit",
		    "limit must be an integer from 1 to %d", TACOD_LIST_MAX);
		return -1;
	}
	return (int)n;
}

int tacod_route_store_error(tacod_http_req *r, int code, const taco_err *err,
			    const char *what)
{
	if (tacod_http_storage_errno(code))
		return tacod_route_write_error(r, code, err);
	if (code == -ENOENT)
		return tacod_http_error(r, 404, "invalid_request_error",
					"not_found", "id", "No such %s", what);
	if (code == -EINVAL)
		return tacod_http_error(r, 400, "invalid_request_error",
					"invalid_value", NULL, "%s", err->msg);
	return tacod_http_error(r, 500, "server_error", NULL, NULL, "%s",
				err->msg);
}

static int healthz(tacod_http_req *r, void *ctx)
{
	(void)ctx;
	return tacod_http_reply_json(r, 200, json_pack("{ss}", "status", "ok"));
}

/* ---- models ------------------------------------------------------------ */

static int models(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	json_t *items = json_array();
	DIR *d = opendir(s->cfg.models_dir);
	struct dirent *e;
	char path[TACOD_PATH_MAX + 320];
	struct stat st;

	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s/config.json",
			 s->cfg.models_dir, e->d_name);
		if (stat(path, &st))
			continue;
		json_array_append_new(items, json_pack("{ss ss sI ss}", "id",
						       e->d_name, "object",
						       "model", "created",
						       (json_int_t)st.st_mtime,
						       "owned_by", "tacod"));
	}
	if (d)
		closedir(d);
	return tacod_http_reply_json(r, 200, tacod_list_object(items, 0));
}

/* ---- files ------------------------------------------------------------- */

static int file_upload(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	const tacod_http_upload *u = tacod_http_upload_file(r);
	const char *purpose = tacod_http_form(r, "purpose");
	tacod_file f = {0};
	char dest[TACOD_PATH_MAX + 128], what[600];
	tacod_idem idem;
	json_t *obj;
	taco_err err = {{0}};
	struct stat st;
	int rc;

	if (!u)
		return tacod_http_error(r, 400, "invalid_request_error",
					"missing_file", "file",
					"a multipart field 'file' is required");
	if (!purpose || strcmp(purpose, "fine-tune"))
		return tacod_http_error(r, 400, "invalid_request_error",
					"invalid_purpose", "purpose",
					"purpose must be 'fine-tune'");
	/* a retried upload is the same content, purpose and name */
	snprintf(what, sizeof(what), "%s/%s/%s", u->sha256, purpose,
		 u->filename);
	if (tacod_idem_begin(r, s, what, strlen(what), &idem))
		return 0;
	/* stored by content hash: the same bytes are kept once */
	snprintf(dest, sizeof(dest), "%s/%s", s->files_dir, u->sha256);
	if (stat(dest, &st) && (rc = tacod_http_upload_keep(r, dest, &err)))
		return tacod_route_write_error(r, rc, &err);
	tacod_new_id("file-", f.id);
	snprintf(f.user, sizeof(f.user), "%s", user_of(r));
	snprintf(f.filename, sizeof(f.filename), "%s",
		 u->filename[0] ? u->filename : "upload.jsonl");
	snprintf(f.purpose, sizeof(f.purpose), "%s", purpose);
	snprintf(f.sha256, sizeof(f.sha256), "%s", u->sha256);
	if (strlen(dest) >= sizeof(f.path))
		return tacod_http_error(r, 500, "server_error", NULL, NULL,
					"state_dir is too long");
	memcpy(f.path, dest, strlen(dest) + 1);
	f.bytes = (int64_t)u->size;
	f.created_at = tacod_now();
	obj = tacod_file_object(&f);
	pthread_mutex_lock(&s->lock);
	rc = tacod_store_tx_begin(s->store, &err);
	if (rc == 0) {
		rc = tacod_store_file_add(s->store, &f, &err);
		if (rc == 0)
			rc = tacod_idem_store(s, f.user, &idem, 200, obj, &err);
		rc = tacod_store_tx_end(s->store, rc, &err);
	}
	pthread_mutex_unlock(&s->lock);
	if (rc == -EEXIST && idem.key[0] &&
	    tacod_idem_begin(r, s, what, strlen(what), &idem))
		rc = 0; /* a twin request won the key: its reply */
	else if (rc)
		rc = tacod_route_store_error(r, rc, &err, "file");
	else
		return tacod_http_reply_json(r, 200, obj);
	json_decref(obj);
	return rc;
}

static int file_list(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	tacod_file *rows;
	const char *after = tacod_http_query(r, "after");
	json_t *items;
	taco_err err = {{0}};
	int n = 0, more = 0, rc, limit = tacod_route_limit(r);

	if (limit < 0)
		return 0;
	if (!(rows = calloc(TACOD_LIST_MAX, sizeof(*rows))))
		return tacod_http_error(r, 500, "server_error", NULL, NULL,
					"out of memory");
	items = json_array();
	pthread_mutex_lock(&s->lock);
	rc = tacod_store_file_list(s->store, tacod_route_scope(r),
				   after ? after : "", limit, rows, &n, &more,
				   &err);
	pthread_mutex_unlock(&s->lock);
	for (int i = 0; !rc && i < n; i++)
		json_array_append_new(items, tacod_file_object(&rows[i]));
	free(rows);
	if (rc) {
		json_decref(items);
		return tacod_route_store_error(r, rc, &err, "file");
	}
	return tacod_http_reply_json(r, 200, tacod_list_object(items, more));
}

static int file_get(tacod_http_req *r, void *ctx, tacod_file *f)
{
	tacod_service *s = ctx;
	taco_err err = {{0}};
	int rc;

	pthread_mutex_lock(&s->lock);
	rc = tacod_store_file_get(s->store, tacod_route_scope(r),
				  tacod_http_param(r, "id"), f, &err);
	pthread_mutex_unlock(&s->lock);
	if (rc)
		tacod_route_store_error(r, rc, &err, "file");
	return rc;
}

static int file_show(tacod_http_req *r, void *ctx)
{
	tacod_file f;

	if (file_get(r, ctx, &f))
		return 0;
	return tacod_http_reply_json(r, 200, tacod_file_object(&f));
}

static int file_content(tacod_http_req *r, void *ctx)
{
	tacod_file f;

	if (file_get(r, ctx, &f))
		return 0;
	return tacod_http_reply_file(r, 200, f.path, "application/octet-stream",
				     f.filename);
}

static int file_delete(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	const char *id = tacod_http_param(r, "id");
	taco_err err = {{0}};
	int rc;

	pthread_mutex_lock(&s->lock);
	rc = tacod_store_file_delete(s->store, tacod_route_scope(r), id, &err);
	pthread_mutex_unlock(&s->lock);
	if (rc == -EBUSY)
		return tacod_http_error(r, 409, "invalid_request_error",
					"file_in_use", "id",
					"a job that has not finished uses "
					"this file");
	if (rc)
		return tacod_route_store_error(r, rc, &err, "file");
	return tacod_http_reply_json(
	    r, 200,
	    json_pack("{ss ss sb}", "id", id, "object", "file", "deleted", 1));
}

/* ---- jobs ---------------------------------------------------------------- */

typedef struct file_lookup {
	tacod_service *s;
	const char *user; /* scope */
} file_lookup;

static int lookup_file(void *ctx, const char *id, char *path, size_t cap)
{
	file_lookup *l = ctx;
	tacod_file f;

	/* called with the service lock held */
	if (tacod_store_file_get(l->s->store, l->user, id, &f, NULL))
		return -ENOENT;
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

/* Parses and maps a create request onto a job that writes into out: 0
 * with *spec set, or a 400/500 has been sent. */
static int map_job(tacod_http_req *r, tacod_service *s, json_t *req,
		   const char *out, tacod_job_spec *spec)
{
	tacod_request_error e;
	file_lookup fl = {s, tacod_route_scope(r)};
	tacod_request_ctx c = {s->cfg.models_dir, out, lookup_file,
			       dataset_path, &fl};
	int rc;

	pthread_mutex_lock(&s->lock);
	rc = tacod_job_request(req, &c, spec, &e);
	pthread_mutex_unlock(&s->lock);
	if (rc)
		return tacod_http_error(r, 400, "invalid_request_error", e.code,
					e.param[0] ? e.param : NULL, "%s",
					e.message),
		       -EINVAL;
	return 0;
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

/* POST /v1/fine_tuning/plan: the memory plan and validation report of a
 * create request, without creating anything. The data is read on this
 * thread only up to limits.max_sync_validate_bytes; a larger one is left
 * to the validation a create does in the background. */
static int job_plan(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	json_t *req = tacod_http_body_json(r), *o, *terms;
	char id[TACOD_ID_MAX], out[TACOD_PATH_MAX + 160];
	uint64_t limit = s->cfg.limits.max_sync_validate_bytes;
	tacod_job_spec spec;
	tacod_assessment a;

	if (!req)
		return 0;
	/* a job that would write here, planned from the parsed request: no
	 * file is written */
	tacod_new_id("plan-", id);
	snprintf(out, sizeof(out), "%s/plan-%s/out", s->jobs_dir, id + 5);
	if (map_job(r, s, req, out, &spec)) {
		json_decref(req);
		return 0;
	}
	tacod_assess(s, &spec.job, req, TACOD_ASSESS_PLAN | TACOD_ASSESS_DATA,
		     limit, &a);
	tacod_job_spec_free(&spec);
	terms = json_object();
	for (int t = 0; a.planned && t < TACO_PLAN_TERMS; t++)
		json_object_set_new(terms, taco_plan_term_name(t),
				    json_integer((json_int_t)a.plan.term[t]));
	o = json_pack("{ss sb sI sI so}", "object", "fine_tuning.plan", "fits",
		      a.planned && a.fits, "device_memory_bytes",
		      (json_int_t)s->cfg.device_memory, "total_bytes",
		      (json_int_t)(a.planned ? a.plan.total : 0), "terms",
		      terms);
	if (a.planned) {
		json_object_set_new(o, "peak_phase",
				    json_string(a.plan.peak_phase));
		json_object_set_new(o, "host_bytes",
				    json_integer((json_int_t)a.plan.host));
		json_object_set_new(
		    o, "settings",
		    json_pack("{ss sb si si si}", "precision",
			      taco_plan_precision(&a.plan),
			      "activation_offload", a.plan.offload,
			      "mlp_chunks", a.plan.mlp_chunks,
			      "streamed_layers", a.plan.stream_layers, "layers",
			      a.plan.layers));
		/* weights streamed from host memory: what crosses the bus */
		json_object_set_new(o, "transfer",
				    json_pack("{sI sI sI}",
					      "host_weights_bytes",
					      (json_int_t)a.plan.host_weights,
					      "to_device_bytes_per_step",
					      (json_int_t)a.plan.to_device,
					      "to_host_bytes_per_step",
					      (json_int_t)a.plan.to_host));
	}
	if (a.planned && !a.fits)
		json_object_set_new(
		    o, "advice",
		    json_pack("{si si sb sI}", "max_batch_size",
			      a.advice.max_batch, "max_seq_len",
			      a.advice.max_seq_len, "freeze_embeddings_fits",
			      a.advice.freeze_embeddings_fits,
			      "frozen_embeddings_total_bytes",
			      (json_int_t)a.advice.frozen_embeddings_total));
	json_decref(req);
	json_object_set_new(o, "validation", a.report ? a.report : json_null());
	json_object_set_new(o, "validated", json_boolean(a.validated));
	json_object_set_new(o, "data_bytes",
			    json_integer((json_int_t)a.data_bytes));
	json_object_set_new(o, "max_sync_validate_bytes",
			    json_integer((json_int_t)limit));
	if (!a.validated && a.data_bytes > limit) {
		char note[256];
		snprintf(note, sizeof(note),
			 "the data (%llu bytes) is larger than "
			 "limits.max_sync_validate_bytes (%llu): it was not "
			 "read here; a created job validates it in the "
			 "background (status validating_files)",
			 (unsigned long long)a.data_bytes,
			 (unsigned long long)limit);
		json_object_set_new(o, "note", json_string(note));
	}
	if (a.code[0]) {
		json_t *e =
		    tacod_error_object(a.msg, "invalid_request_error",
				       a.param[0] ? a.param : NULL, a.code);
		json_object_set(o, "error", json_object_get(e, "error"));
		json_decref(e);
	}
	return tacod_http_reply_json(r, 200, o);
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

static int job_create(tacod_http_req *r, void *ctx)
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
	if (map_job(r, s, req, out, &spec)) {
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
	snprintf(j.user, sizeof(j.user), "%s", user_of(r));
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
		taco_remove_flat_dir(dir, NULL);
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

static int job_list(tacod_http_req *r, void *ctx)
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

static int job_show(tacod_http_req *r, void *ctx)
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

static int job_cancel(tacod_http_req *r, void *ctx)
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
			/* the status and its webhook deliveries together */
			t = tacod_store_tx_begin(s->store, &err);
			if (!t) {
				t = tacod_store_job_transition(
				    s->store, id, from, TACOD_CANCELLED, &err);
				if (!t)
					t = tacod_webhooks_job_status(s->hooks,
								      &j, &err);
				t = tacod_store_tx_end(s->store, t, &err);
			}
			if (tacod_http_storage_errno(t)) {
				rc = t; /* nothing changed: 507 */
			} else if (t) {
				j.status = from;
			} else {
				tacod_store_event_add(
				    s->store, id, "info", "status",
				    "The job was cancelled", NULL, NULL, NULL);
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

/* The seq of an event id "ftevent-<job>-<seq>", or 0. */
static int64_t seq_of(const char *id)
{
	const char *dash = id ? strrchr(id, '-') : NULL;

	return dash ? atoll(dash + 1) : 0;
}

/* ?stream=true: server-sent events from after Last-Event-ID (or the
 * beginning), live until the job has finished. */
static int job_follow(tacod_http_req *r, tacod_service *s, const char *id)
{
	tacod_http_stream *st;
	tacod_job j = {0};
	taco_err err = {{0}};
	int64_t after = seq_of(tacod_http_header(r, "Last-Event-ID"));
	int rc;

	pthread_mutex_lock(&s->lock);
	rc = tacod_store_job_get(s->store, tacod_route_scope(r), id, &j, &err);
	pthread_mutex_unlock(&s->lock);
	tacod_job_clear(&j);
	if (rc)
		return tacod_route_store_error(r, rc, &err, "job");
	st = tacod_http_stream_begin(r);
	if (!st)
		return tacod_http_error(r, 500, "server_error", NULL, NULL,
					"cannot start the stream");
	pthread_mutex_lock(&s->lock);
	rc = tacod_service_follow(s, id, st, after);
	pthread_mutex_unlock(&s->lock);
	if (rc) {
		tacod_http_stream_event(st, "error", "too many streams");
		tacod_http_stream_end(st);
		return 0;
	}
	tacod_service_wake(s);
	return 0;
}

/* The seq of `after`, the id of an event of job: "ftevent-<job id without
 * ftjob->-<seq>", as the files' and jobs' lists page, 400 when longer than
 * an id, 404 when it names no event of this job. */
static int64_t after_seq(const char *after, const char *job, taco_err *err)
{
	size_t n = strlen(job) > 6 ? strlen(job) - 6 : 0;
	const char *p = after + 8;
	char *end;
	long long seq;

	if (strlen(after) >= TACOD_ID_MAX)
		return taco_err_set(err, -EINVAL, "after: longer than %d bytes",
				    TACOD_ID_MAX - 1);
	if (strncmp(after, "ftevent-", 8) || strncmp(p, job + 6, n) ||
	    p[n] != '-' || p[n + 1] < '1' || p[n + 1] > '9')
		return taco_err_set(err, -ENOENT, "no such event");
	errno = 0;
	seq = strtoll(p + n + 1, &end, 10);
	if (*end || errno)
		return taco_err_set(err, -ENOENT, "no such event");
	return seq;
}

/* Events, newest first as OpenAI lists them. */
static int job_events(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	const char *id = tacod_http_param(r, "id");
	tacod_event *ev = calloc(TACOD_LIST_MAX, sizeof(*ev));
	tacod_job j = {0};
	taco_err err = {{0}};
	json_t *items = json_array();
	int n = 0, more = 0, rc, limit;
	int64_t after = 0, total = 0;
	const char *stream = tacod_http_query(r, "stream");
	const char *after_id = tacod_http_query(r, "after");

	if (stream && strcmp(stream, "true") && strcmp(stream, "false")) {
		free(ev);
		json_decref(items);
		return tacod_http_error(r, 400, "invalid_request_error",
					"invalid_value", "stream",
					"stream must be true or false");
	}
	/* limit and after page the list; a stream does not use them, but
	 * they are checked the same */
	if ((limit = tacod_route_limit(r)) < 0) {
		free(ev);
		json_decref(items);
		return 0;
	}
	if (after_id && after_id[0] &&
	    (rc = (int)after_seq(after_id, id, &err)) < 0) {
		free(ev);
		json_decref(items);
		if (rc == -ENOENT)
			return tacod_http_error(r, 404, "invalid_request_error",
						"not_found", "after",
						"after names no event of this "
						"job");
		return tacod_route_store_error(r, rc, &err, "event");
	}
	if (stream && !strcmp(stream, "true")) {
		free(ev);
		json_decref(items);
		return job_follow(r, s, id);
	}
	if (!ev) {
		json_decref(items);
		return tacod_http_error(r, 500, "server_error", NULL, NULL,
					"out of memory");
	}
	pthread_mutex_lock(&s->lock);
	rc = tacod_store_job_get(s->store, tacod_route_scope(r), id, &j, &err);
	/* Newest first, as OpenAI's: the page ends below `after` (an event
	 * id from the previous page) or at the newest event. A job's seqs run
	 * 1, 2, ... without gaps, so a page is one window of them. */
	if (after_id && !after_id[0])
		after_id = NULL; /* empty: from the newest, as none */
	total = after_id ? after_seq(after_id, id, &err) - 1 : 0;
	while (!rc && !after_id) {
		rc = tacod_store_event_list(s->store, id, after, TACOD_LIST_MAX,
					    ev, &n, &more, &err);
		for (int i = 0; i < n; i++) {
			total = ev[i].seq;
			tacod_event_clear(&ev[i]);
		}
		n = 0;
		if (rc || !more)
			break;
		after = total;
	}
	if (!rc && total > 0)
		rc = tacod_store_event_list(
		    s->store, id, total > limit ? total - limit : 0,
		    (int)(total < limit ? total : limit), ev, &n, &more, &err);
	pthread_mutex_unlock(&s->lock);
	tacod_job_clear(&j);
	for (int i = n - 1; !rc && i >= 0; i--)
		json_array_append_new(items, tacod_event_object(&ev[i]));
	for (int i = 0; !rc && i < n; i++)
		tacod_event_clear(&ev[i]);
	free(ev);
	if (rc) {
		json_decref(items);
		return tacod_route_store_error(r, rc, &err, "job");
	}
	return tacod_http_reply_json(r, 200,
				     tacod_list_object(items, total > limit));
}

int tacod_route_checkpoints(tacod_http_req *r, tacod_service *s, const char *id,
			    tacod_job *j, tacod_checkpoint **out, int *n,
			    taco_err *err)
{
	tacod_checkpoint *c = calloc(TACOD_LIST_MAX, sizeof(*c));
	int rc;

	*n = 0;
	if (!c)
		return taco_err_set(err, -ENOMEM, "out of memory");
	pthread_mutex_lock(&s->lock);
	rc = tacod_store_job_get(s->store, tacod_route_scope(r), id, j, err);
	if (!rc)
		rc = tacod_store_checkpoint_list(s->store, id, c,
						 TACOD_LIST_MAX, n, err);
	/* Only what can be downloaded: the worker removes checkpoints beyond
	 * keep_checkpoints after it has reported them, so a row whose
	 * weights are gone is forgotten here. */
	if (!rc) {
		int k = 0;
		for (int i = 0; i < *n; i++) {
			char w[TACOD_PATH_MAX + 32];
			snprintf(w, sizeof(w), "%s/model.safetensors",
				 c[i].path);
			if (access(w, F_OK) == 0) {
				c[k++] = c[i];
				continue;
			}
			tacod_store_checkpoint_delete(s->store, id, c[i].step,
						      NULL);
			free(c[i].metrics);
		}
		*n = k;
	}
	pthread_mutex_unlock(&s->lock);
	*out = c;
	return rc;
}

static int job_checkpoints(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	const char *id = tacod_http_param(r, "id");
	tacod_checkpoint *c = NULL;
	tacod_job j = {0};
	taco_err err = {{0}};
	json_t *items = json_array();
	int n = 0, rc;

	rc = tacod_route_checkpoints(r, s, id, &j, &c, &n, &err);
	for (int i = n - 1; i >= 0; i--) {
		if (!rc)
			json_array_append_new(
			    items, tacod_checkpoint_object(&c[i], &j));
		free(c[i].metrics);
	}
	free(c);
	tacod_job_clear(&j);
	if (rc) {
		json_decref(items);
		return tacod_route_store_error(r, rc, &err, "job");
	}
	return tacod_http_reply_json(r, 200, tacod_list_object(items, 0));
}

extern const unsigned char tacod_openapi_yaml[];
extern const size_t tacod_openapi_yaml_len;

/* GET /v1/openapi.yaml: the API's description, built into the binary. */
static int openapi(tacod_http_req *r, void *ctx)
{
	(void)ctx;
	return tacod_http_reply_data(r, 200, "application/yaml",
				     tacod_openapi_yaml,
				     tacod_openapi_yaml_len);
}

void tacod_service_routes(tacod_service *s)
{
	const tacod_http_route routes[] = {
	    {"GET", "/healthz", healthz, NULL, 0},
	    {"GET", "/v1/models", models, NULL, 0},
	    {"POST", "/v1/files", file_upload, s->upload_dir, 0},
	    {"GET", "/v1/files", file_list, NULL, 0},
	    {"GET", "/v1/files/{id}", file_show, NULL, 0},
	    {"DELETE", "/v1/files/{id}", file_delete, NULL, 0},
	    {"GET", "/v1/files/{id}/content", file_content, NULL, 0},
	    {"POST", "/v1/fine_tuning/jobs", job_create, NULL, 0},
	    {"POST", "/v1/fine_tuning/plan", job_plan, NULL, 0},
	    {"GET", "/v1/fine_tuning/jobs", job_list, NULL, 0},
	    {"GET", "/v1/fine_tuning/jobs/{id}", job_show, NULL, 0},
	    {"POST", "/v1/fine_tuning/jobs/{id}/cancel", job_cancel, NULL, 0},
	    {"GET", "/v1/fine_tuning/jobs/{id}/events", job_events, NULL, 0},
	    {"POST", "/v1/fine_tuning/jobs/{id}/pause", tacod_route_job_pause,
	     NULL, 0},
	    {"POST", "/v1/fine_tuning/jobs/{id}/resume", tacod_route_job_resume,
	     NULL, 0},
	    {"GET", "/v1/fine_tuning/jobs/{id}/checkpoints", job_checkpoints,
	     NULL, 0},
	    {"GET",
	     "/v1/fine_tuning/jobs/{id}/checkpoints/{checkpoint}/content",
	     tacod_route_checkpoint_content, NULL, 0},
	    {"GET", "/v1/fine_tuning/jobs/{id}/model/content",
	     tacod_route_model_content, NULL, 0},
	    {"GET", "/v1/device", tacod_route_device, NULL, 0},
	    {"GET", "/metrics", tacod_route_metrics, NULL, 0},
	    {"GET", "/v1/openapi.yaml", openapi, NULL, 0},
	    {"GET", "/", tacod_route_dashboard, NULL, 1},
	    {"GET", "/ui/{file}", tacod_route_dashboard_file, NULL, 1},
	    {NULL, NULL, NULL, NULL, 0},
	};

	memcpy(s->routes, routes, sizeof(routes));
}
