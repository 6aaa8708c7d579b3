/* service/gguf.c: GGUF files of a job's model and checkpoints
 * (docs/gguf.md "From tacod"): POST asks for a conversion
 * (service/gguf_queue.c runs it), GET lists and shows the files and
 * conversions and downloads a file, DELETE removes one. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/objects.h"
#include "daemon/service/gguf.h"
#include "util/fsutil.h"

static void name_make(char *out, size_t cap, int64_t step, int type)
{
	if (step < 0)
		snprintf(out, cap, "model-%s.gguf", tacod_gguf_types[type]);
	else
		snprintf(out, cap, "step-%08lld-%s.gguf", (long long)step,
			 tacod_gguf_types[type]);
}

/* ---- the objects ------------------------------------------------------ */

static tacod_gguf_task *task_find(struct tacod_gguf *g, const char *job,
				  const char *name)
{
	for (int i = 0; i < TACOD_GGUF_TASKS; i++)
		if (g->task[i].state != TACOD_GGUF_FREE &&
		    !strcmp(g->task[i].job, job) &&
		    !strcmp(g->task[i].name, name))
			return &g->task[i];
	return NULL;
}

/* The object of a file or a conversion: t NULL for a file of st. */
static json_t *gguf_object(const char *job, const char *name,
			   const tacod_gguf_task *t, const struct stat *st)
{
	static const char *const states[] = {"", "queued", "running", "failed"};
	char ckpt[TACOD_ID_MAX + 32], url[TACOD_ID_MAX + 128];
	int64_t step;
	int type;
	json_t *o;

	tacod_gguf_name_parse(name, &step, &type);
	snprintf(ckpt, sizeof(ckpt), "ftckpt-%s-%lld", job + 6,
		 (long long)step);
	snprintf(url, sizeof(url), "/v1/fine_tuning/jobs/%s/gguf/%s/content",
		 job, name);
	o = json_pack("{ss ss ss ss so so}", "object", "fine_tuning.job.gguf",
		      "id", name, "job_id", job, "type", tacod_gguf_types[type],
		      "checkpoint", step < 0 ? json_null() : json_string(ckpt),
		      "step", step < 0 ? json_null() : json_integer(step));
	if (!o)
		return NULL;
	if (t) {
		json_object_set_new(o, "status", json_string(states[t->state]));
		json_object_set_new(o, "bytes", json_null());
		json_object_set_new(o, "created_at",
				    json_integer(t->created_at));
		json_object_set_new(o, "error",
				    t->state == TACOD_GGUF_FAILED
					? json_pack("{ss ss}", "code",
						    "conversion_failed",
						    "message", t->error)
					: json_null());
		json_object_set_new(o, "download_url", json_null());
	} else {
		json_object_set_new(o, "status", json_string("succeeded"));
		json_object_set_new(o, "bytes",
				    json_integer((json_int_t)st->st_size));
		json_object_set_new(o, "created_at",
				    json_integer((json_int_t)st->st_mtime));
		json_object_set_new(o, "error", json_null());
		json_object_set_new(o, "download_url", json_string(url));
	}
	return o;
}

/* The job as the request's user may see it, with its output directory:
 * 0, or a reply has been sent. */
static int job_for(tacod_http_req *r, tacod_service *s, tacod_job *j)
{
	const char *id = tacod_http_param(r, "id");
	taco_err err = {{0}};
	int rc;

	pthread_mutex_lock(&s->lock);
	rc = tacod_store_job_get(s->store, tacod_route_scope(r), id, j, &err);
	pthread_mutex_unlock(&s->lock);
	if (rc) {
		tacod_route_store_error(r, rc, &err, "job");
		return -1;
	}
	return 0;
}

static int no_such_file(tacod_http_req *r, const char *name)
{
	return tacod_http_error(r, 404, "invalid_request_error", "not_found",
				"name", "No such GGUF file: %s", name);
}

/* The {name} of the path, checked: 0, or a 404 has been sent. */
static int name_param(tacod_http_req *r, const char **name)
{
	int64_t step;
	int type;

	*name = tacod_http_param(r, "name");
	if (tacod_gguf_name_parse(*name, &step, &type))
		return tacod_http_error(r, 404, "invalid_request_error",
					"not_found", "name",
					"No such GGUF file: '%.64s' is not a "
					"name like model-q8_0.gguf or "
					"step-00000100-f16.gguf",
					*name),
		       -1;
	return 0;
}

/* ---- POST /v1/fine_tuning/jobs/{id}/gguf ------------------------------ */

/* A step in a request: JSON's exact integers (2^53 - 1, the spec's
 * maximum) */
#define TACOD_GGUF_STEP_MAX 9007199254740991ll

/* The request {"type": ..., "checkpoint": ...}: 0 with *type and *step
 * (-1: the final model) set, or a 400 has been sent. */
static int parse_request(tacod_http_req *r, const char *job, json_t *req,
			 int *type, int64_t *step)
{
	const char *k;
	json_t *v, *t = json_object_get(req, "type");
	json_t *c = json_object_get(req, "checkpoint");
	taco_err err = {{0}};

	json_object_foreach(req, k, v)
	{
		if (strcmp(k, "type") && strcmp(k, "checkpoint"))
			return tacod_http_error(
				   r, 400, "invalid_request_error",
				   "unknown_parameter", k,
				   "Unrecognized request argument supplied: "
				   "%.64s (a GGUF request has type and "
				   "checkpoint)",
				   k),
			       -1;
	}
	*type = -1;
	for (int i = 0; json_is_string(t) && tacod_gguf_types[i]; i++)
		if (!strcmp(json_string_value(t), tacod_gguf_types[i]))
			*type = i;
	if (*type < 0)
		return tacod_http_error(r, 400, "invalid_request_error",
					"invalid_value", "type",
					"type must be bf16, f16 or q8_0"),
		       -1;
	*step = -1;
	if (!c || json_is_null(c))
		return 0;
	/* a step: JSON Schema's integer, 2.0 as well as 2 */
	if (json_is_integer(c) && json_integer_value(c) >= 0 &&
	    json_integer_value(c) <= TACOD_GGUF_STEP_MAX) {
		*step = json_integer_value(c);
		return 0;
	}
	if (json_is_real(c) && json_real_value(c) >= 0 &&
	    json_real_value(c) <= (double)TACOD_GGUF_STEP_MAX &&
	    json_real_value(c) == (double)(int64_t)json_real_value(c)) {
		*step = (int64_t)json_real_value(c);
		return 0;
	}
	if (json_is_string(c)) {
		*step = tacod_route_item_number(json_string_value(c), "ftckpt-",
						job, &err);
		if (*step >= 0)
			return 0;
		if (*step == -ENOENT)
			return tacod_http_error(r, 404, "invalid_request_error",
						"not_found", "checkpoint",
						"No such checkpoint: %.64s is "
						"not a checkpoint id of this "
						"job",
						json_string_value(c)),
			       -1;
	}
	return tacod_http_error(r, 400, "invalid_request_error",
				"invalid_value", "checkpoint",
				"checkpoint must be one of this job's "
				"checkpoint ids (ftckpt-...) or a step"),
	       -1;
}

/* The directory of the job's kept checkpoint at step into dir: 0, or a
 * reply has been sent. */
static int checkpoint_dir(tacod_http_req *r, tacod_service *s, const char *id,
			  int64_t step, char *dir, size_t cap)
{
	tacod_checkpoint c[2];
	tacod_job j = {0};
	taco_err err = {{0}};
	int n = 0, more, rc;

	dir[0] = 0;
	rc = tacod_route_checkpoints(r, s, id,
				     step == INT64_MAX ? step : step + 1, 1, &j,
				     c, &n, &more, &err);
	for (int i = 0; i < n; i++) {
		if (c[i].step == step)
			snprintf(dir, cap, "%s", c[i].path);
		free(c[i].metrics);
	}
	tacod_job_clear(&j);
	if (rc)
		return tacod_route_store_error(r, rc, &err, "job"), -1;
	if (!dir[0])
		return tacod_http_error(r, 404, "invalid_request_error",
					"not_found", "checkpoint",
					"No such checkpoint: step %lld of "
					"this job is not kept",
					(long long)step),
		       -1;
	return 0;
}

int tacod_route_gguf_create(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	struct tacod_gguf *g = s->gguf;
	char name[TACOD_GGUF_NAME_MAX], ckpt[TACOD_PATH_MAX] = "";
	char out[TACOD_PATH_MAX + 96], dir[TACOD_PATH_MAX + 16];
	tacod_gguf_task *t = NULL, *oldest = NULL;
	tacod_job j = {0};
	taco_err err = {{0}};
	struct stat st;
	json_t *req, *o;
	int64_t step;
	int type, rc, done, deleted;

	if (!(req = tacod_http_body_json(r)))
		return 0;
	if (job_for(r, s, &j)) {
		json_decref(req);
		return 0;
	}
	rc = parse_request(r, j.id, req, &type, &step);
	json_decref(req);
	done = j.status == TACOD_SUCCEEDED;
	deleted = j.model_deleted_at != 0;
	snprintf(dir, sizeof(dir), "%s/gguf", j.output_dir);
	tacod_job_clear(&j);
	if (rc)
		return 0;
	if (step < 0 && (!done || deleted))
		return tacod_http_error(
		    r, 409, "invalid_request_error", "no_model", "checkpoint",
		    deleted ? "the job's fine-tuned model was deleted "
			      "(DELETE /v1/models); a checkpoint can still "
			      "be converted"
			    : "the job has no model yet: it has not "
			      "succeeded; a checkpoint can be converted");
	if (step >= 0 && checkpoint_dir(r, s, tacod_http_param(r, "id"), step,
					ckpt, sizeof(ckpt)))
		return 0;
	name_make(name, sizeof(name), step, type);
	snprintf(out, sizeof(out), "%s/%s", dir, name);
	if ((rc = taco_mkdir_p(dir, &err)))
		return tacod_route_write_error(r, rc, &err);
	pthread_mutex_lock(&s->lock);
	if (stat(out, &st) == 0) {
		/* converted already: the same bytes, at once */
		o = gguf_object(tacod_http_param(r, "id"), name, NULL, &st);
		pthread_mutex_unlock(&s->lock);
		return tacod_http_reply_json(r, 200, o);
	}
	t = task_find(g, tacod_http_param(r, "id"), name);
	if (t && t->state == TACOD_GGUF_FAILED)
		t->state = TACOD_GGUF_FREE; /* asked again: try again */
	else if (t) {
		o = gguf_object(t->job, name, t, NULL);
		pthread_mutex_unlock(&s->lock);
		return tacod_http_reply_json(r, 202, o);
	}
	t = NULL;
	for (int i = 0; i < TACOD_GGUF_TASKS; i++) {
		tacod_gguf_task *c = &g->task[i];
		if (c->state == TACOD_GGUF_FREE) {
			t = c;
			break;
		}
		if (c->state == TACOD_GGUF_FAILED &&
		    (!oldest || c->finished_at < oldest->finished_at))
			oldest = c;
	}
	if (!t)
		t = oldest; /* a failure is forgotten before a request */
	if (!t) {
		pthread_mutex_unlock(&s->lock);
		tacod_http_add_header(r, "Retry-After", "60");
		return tacod_http_error(r, 429, "rate_limit_error",
					"gguf_queue_full", NULL,
					"%d GGUF conversions are waiting or "
					"running; try again later",
					TACOD_GGUF_TASKS);
	}
	memset(t, 0, sizeof(*t));
	t->state = TACOD_GGUF_QUEUED;
	snprintf(t->job, sizeof(t->job), "%s", tacod_http_param(r, "id"));
	snprintf(t->name, sizeof(t->name), "%s", name);
	snprintf(t->ckpt, sizeof(t->ckpt), "%s", ckpt);
	snprintf(t->out, sizeof(t->out), "%s", out);
	t->created_at = tacod_now();
	o = gguf_object(t->job, name, t, NULL);
	pthread_cond_signal(&g->cond);
	pthread_mutex_unlock(&s->lock);
	return tacod_http_reply_json(r, 202, o);
}

/* ---- GET: the list, one, its content; DELETE ------------------------ */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names of dir's GGUF files and of the job's conversions, sorted and
 * unique, into names (cap of them; *n may exceed cap: counted only). */
static int list_names(tacod_service *s, const char *job, const char *dir,
		      char **names, int cap, int *n)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int64_t step;
	int type, k = 0, rc = 0;

	while (d && (e = readdir(d)) && !rc) {
		if (tacod_gguf_name_parse(e->d_name, &step, &type))
			continue;
		if (k < cap && !(names[k] = strdup(e->d_name)))
			rc = -ENOMEM;
		k++;
	}
	if (d)
		closedir(d);
	for (int i = 0; !rc && i < TACOD_GGUF_TASKS; i++) {
		tacod_gguf_task *t = &s->gguf->task[i];
		int dup = 0;
		if (t->state == TACOD_GGUF_FREE || strcmp(t->job, job))
			continue;
		for (int m = 0; m < k && m < cap; m++)
			dup |= !strcmp(names[m], t->name);
		if (dup)
			continue;
		if (k < cap && !(names[k] = strdup(t->name)))
			rc = -ENOMEM;
		k++;
	}
	if (rc) {
		for (int i = 0; i < k && i < cap; i++)
			free(names[i]);
		return rc;
	}
	qsort(names, (size_t)(k < cap ? k : cap), sizeof(*names), cmp_str);
	*n = k;
	return 0;
}

/* One name's object (lock held), or NULL when it is neither a file nor a
 * conversion. */
static json_t *one_object(tacod_service *s, const char *job, const char *dir,
			  const char *name)
{
	char path[TACOD_PATH_MAX + 96];
	tacod_gguf_task *t = task_find(s->gguf, job, name);
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
		return gguf_object(job, name, NULL, &st);
	return t ? gguf_object(job, name, t, NULL) : NULL;
}

int tacod_route_gguf_list(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	const char *after = tacod_http_query(r, "after");
	char dir[TACOD_PATH_MAX + 16];
	char *names[TACOD_GGUF_LIST_MAX];
	tacod_job j = {0};
	json_t *items;
	int n = 0, limit, more = 0, rc;

	if ((limit = tacod_route_limit(r)) < 0)
		return 0;
	if (after && strlen(after) >= TACOD_GGUF_NAME_MAX)
		return tacod_http_error(
		    r, 400, "invalid_request_error", "invalid_value", "after",
		    "after: longer than %d bytes", TACOD_GGUF_NAME_MAX - 1);
	/* a name's characters, as the spec says: its 63 then count bytes */
	if (after && after[strspn(after, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghij"
					 "klmnopqrstuvwxyz0123456789._-")])
		return tacod_http_error(
		    r, 400, "invalid_request_error", "invalid_value", "after",
		    "after: a GGUF file's name has only letters, digits, '.', "
		    "'_' and '-'");
	if (job_for(r, s, &j))
		return 0;
	snprintf(dir, sizeof(dir), "%s/gguf", j.output_dir);
	pthread_mutex_lock(&s->lock);
	rc = list_names(s, j.id, dir, names, TACOD_GGUF_LIST_MAX, &n);
	if (rc) {
		pthread_mutex_unlock(&s->lock);
		tacod_job_clear(&j);
		return tacod_http_error(r, 500, "server_error", NULL, NULL,
					"out of memory");
	}
	items = json_array();
	for (int i = 0; i < n && i < TACOD_GGUF_LIST_MAX; i++) {
		json_t *o;
		if ((!after || strcmp(names[i], after) > 0) &&
		    (int)json_array_size(items) == limit)
			more = 1;
		else if ((!after || strcmp(names[i], after) > 0) &&
			 (o = one_object(s, j.id, dir, names[i])))
			json_array_append_new(items, o);
		free(names[i]);
	}
	pthread_mutex_unlock(&s->lock);
	tacod_job_clear(&j);
	/* past TACOD_GGUF_LIST_MAX files, the rest are not listed */
	more |= n > TACOD_GGUF_LIST_MAX;
	return tacod_http_reply_json(r, 200, tacod_list_object(items, more));
}

int tacod_route_gguf_show(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	char dir[TACOD_PATH_MAX + 16];
	tacod_job j = {0};
	const char *name;
	json_t *o;

	if (name_param(r, &name) || job_for(r, s, &j))
		return 0;
	snprintf(dir, sizeof(dir), "%s/gguf", j.output_dir);
	pthread_mutex_lock(&s->lock);
	o = one_object(s, j.id, dir, name);
	pthread_mutex_unlock(&s->lock);
	tacod_job_clear(&j);
	return o ? tacod_http_reply_json(r, 200, o) : no_such_file(r, name);
}

int tacod_route_gguf_content(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	char path[TACOD_PATH_MAX + 96],
	    file[TACOD_ID_MAX + TACOD_GGUF_NAME_MAX];
	tacod_job j = {0};
	const char *name;
	int fd;
	struct stat st;

	if (name_param(r, &name) || job_for(r, s, &j))
		return 0;
	snprintf(path, sizeof(path), "%s/gguf/%s", j.output_dir, name);
	/* "<job without ftjob->-model-q8_0.gguf": one name per job */
	snprintf(file, sizeof(file), "%.57s-%.63s", j.id + 6, name);
	tacod_job_clear(&j);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		if (fd >= 0)
			close(fd);
		return no_such_file(r, name);
	}
	return tacod_http_reply_fd(r, 200, fd, (uint64_t)st.st_size,
				   "application/octet-stream", file);
}

int tacod_route_gguf_delete(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	char path[TACOD_PATH_MAX + 96];
	tacod_job j = {0};
	tacod_gguf_task *t;
	const char *name;
	int rc = 0;

	if (name_param(r, &name) || job_for(r, s, &j))
		return 0;
	snprintf(path, sizeof(path), "%s/gguf/%s", j.output_dir, name);
	pthread_mutex_lock(&s->lock);
	t = task_find(s->gguf, j.id, name);
	if (t && t->state != TACOD_GGUF_FAILED) {
		pthread_mutex_unlock(&s->lock);
		tacod_job_clear(&j);
		return tacod_http_error(r, 409, "invalid_request_error",
					"conversion_in_progress", "name",
					"%s is being converted; delete it "
					"when it is done",
					name);
	}
	if (t)
		t->state = TACOD_GGUF_FREE;
	tacod_gguf_remove_stale(path);
	if (unlink(path))
		rc = errno == ENOENT && t ? 0 : -errno;
	pthread_mutex_unlock(&s->lock);
	tacod_job_clear(&j);
	if (rc == -ENOENT)
		return no_such_file(r, name);
	if (rc)
		return tacod_route_write_error(r, rc, NULL);
	return tacod_http_reply_json(
	    r, 200,
	    json_pack("{ss ss sb}", "id", name, "object",
		      "fine_tuning.job.gguf.deleted", "deleted", 1));
}
