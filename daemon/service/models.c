/* service/models.c: the models a user can fine-tune (api/model_name.h): the
 * base models of models_dir, and the user's fine-tuned models and
 * checkpoints. GET /v1/models, GET and DELETE /v1/models/{model}, and the
 * model directory a job starts from when its model is a fine-tuned one.
 *
 * Such a job gets its own model directory, JOBDIR/base: hard links to the
 * weights it starts from (a fine-tuned model's export, or a checkpoint's
 * model.safetensors) beside the base model's config, tokenizer and chat
 * template. taco-train reads it as it reads a base model; the links keep
 * the weights for as long as the job needs them, so deleting the model it
 * started from (or keep_checkpoints removing the checkpoint) does not pull
 * them from under it. */
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/model_name.h"
#include "api/objects.h"
#include "daemon/service/internal.h"
#include "job/job_export.h"
#include "util/fsutil.h"

/* Fine-tuned models in one GET /v1/models (OpenAI's list has no pages):
 * the newest of them. */
#define MODELS_LIST_MAX 1000

/* A fine-tuned model or checkpoint that a user may use. */
typedef struct found_model {
	tacod_model_name name;
	tacod_job job; /* the job that made it (owned: tacod_job_clear) */
	char weights[TACOD_PATH_MAX + 320];  /* the directory of its weights */
	char sidecars[TACOD_PATH_MAX + 320]; /* of its config, tokenizer */
	int64_t created;
} found_model;

/* Finds a fine-tuned model or checkpoint named name that scope (NULL:
 * anyone) may use: 0 with *out set, -ENOENT when there is none (another
 * user's, a deleted one and a checkpoint no longer kept alike), -EINVAL for
 * a base model's name. Lock held. */
static int find_model(tacod_service *s, const char *scope, const char *name,
		      found_model *out, taco_err *err)
{
	found_model f = {0};
	char want[TACOD_MODEL_NAME_MAX], w[TACOD_PATH_MAX + 400];
	struct stat st;
	int rc;

	if (tacod_model_name_parse(name, &f.name))
		return taco_err_set(err, -ENOENT, "no such model");
	if (f.name.kind == TACOD_MODEL_BASE)
		return taco_err_set(err, -EINVAL, "a base model");
	if ((rc = tacod_store_job_get(s->store, scope, f.name.job_id, &f.job,
				      err)))
		return rc == -ENOENT
			   ? taco_err_set(err, -ENOENT, "no such model")
			   : rc;
	/* the name as tacod formed it, its root and suffix included */
	if (tacod_model_name_format(
		f.job.model, f.job.suffix, f.job.id,
		f.name.kind == TACOD_MODEL_CHECKPOINT ? f.name.step : -1, want,
		sizeof(want)) ||
	    strcmp(want, name)) {
		rc = taco_err_set(err, -ENOENT, "no such model");
	} else if (f.name.kind == TACOD_MODEL_FINE_TUNED) {
		if (f.job.status != TACOD_SUCCEEDED ||
		    strcmp(f.job.fine_tuned_model, name) ||
		    f.job.model_deleted_at)
			rc = taco_err_set(err, -ENOENT, "no such model");
		snprintf(f.weights, sizeof(f.weights), "%s/model",
			 f.job.output_dir);
		memcpy(f.sidecars, f.weights, sizeof(f.weights));
		f.created = f.job.finished_at;
	} else {
		tacod_checkpoint c;
		rc = tacod_store_checkpoint_get(s->store, f.job.id, f.name.step,
						&c, err);
		if (rc == 0) {
			snprintf(f.weights, sizeof(f.weights), "%s", c.path);
			f.created = c.created_at;
			free(c.metrics);
		} else if (rc == -ENOENT) {
			taco_err_set(err, -ENOENT, "no such model");
		}
		snprintf(f.sidecars, sizeof(f.sidecars), "%s/%s",
			 s->cfg.models_dir, f.name.root);
	}
	/* the weights must still be there: keep_checkpoints removes old
	 * checkpoints */
	snprintf(w, sizeof(w), "%s/config.json", f.sidecars);
	if (rc == 0 && stat(w, &st))
		rc = taco_err_set(err, -ENOENT, "no such model");
	snprintf(w, sizeof(w), "%s/model.safetensors", f.weights);
	if (rc == 0 && stat(w, &st)) {
		snprintf(w, sizeof(w), "%s/model.safetensors.index.json",
			 f.weights);
		if (stat(w, &st))
			rc = taco_err_set(err, -ENOENT, "no such model");
	}
	if (rc) {
		tacod_job_clear(&f.job);
		return rc;
	}
	*out = f;
	return 0;
}

/* dir/name as dst/name: a hard link, or with may_copy a copy where a link
 * cannot be made (models_dir on another file system). Missing is -ENOENT. */
static int link_into(const char *dir, const char *name, const char *dst,
		     int may_copy, taco_err *err)
{
	char from[2 * TACOD_PATH_MAX], to[2 * TACOD_PATH_MAX];
	int nf = snprintf(from, sizeof(from), "%s/%s", dir, name);
	int nt = snprintf(to, sizeof(to), "%s/%s", dst, name);

	if (nf < 0 || nt < 0 || (size_t)nf >= sizeof(from) ||
	    (size_t)nt >= sizeof(to))
		return taco_err_set(err, -ENAMETOOLONG, "%s: path too long",
				    name);
	if (link(from, to) == 0)
		return 0;
	if (errno == ENOENT)
		return -ENOENT;
	if (!may_copy)
		return taco_err_set(err, -errno, "cannot link %s: %s", name,
				    strerror(errno));
	return taco_copy_file(from, to, err);
}

/* The weights files of dir (model.safetensors, or its shards and index)
 * linked into dst: how many, or a negative errno. */
static int link_weights(const char *dir, const char *dst, taco_err *err)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0, rc = 0;

	if (!d)
		return taco_err_set(err, -errno, "cannot read the weights: %s",
				    strerror(errno));
	while (rc == 0 && (e = readdir(d))) {
		if (strcmp(e->d_name, "model.safetensors") &&
		    strcmp(e->d_name, "model.safetensors.index.json") &&
		    fnmatch("model-*.safetensors", e->d_name, 0))
			continue;
		if ((rc = link_into(dir, e->d_name, dst, 0, err)) == 0)
			n++;
	}
	closedir(d);
	return rc < 0 ? rc : n;
}

/* The model directory dst for a job that starts from f. */
static int assemble(const found_model *f, const char *dst, taco_err *err)
{
	int rc = taco_mkdir_p(dst, err);

	if (rc == 0)
		rc = link_weights(f->weights, dst, err);
	if (rc == 0)
		rc = taco_err_set(err, -ENOENT, "no weights");
	if (rc > 0)
		rc = 0;
	for (int i = 0; rc == 0 && taco_job_export_files[i]; i++) {
		rc = link_into(f->sidecars, taco_job_export_files[i], dst, 1,
			       err);
		if (rc == -ENOENT &&
		    strcmp(taco_job_export_files[i], "config.json"))
			rc = 0; /* not every model has every file */
	}
	if (rc == 0)
		rc = taco_fsync_dir(dst, err);
	return rc;
}

int tacod_models_assemble(tacod_service *s, const char *scope, const char *name,
			  const char *dst, taco_err *err)
{
	found_model f;
	int rc = find_model(s, scope, name, &f, err);

	if (rc)
		return rc == -EINVAL ? -ENOENT : rc;
	rc = assemble(&f, dst, err);
	tacod_job_clear(&f.job);
	if (rc)
		taco_remove_flat_dir(dst, NULL);
	return rc;
}

static int base_object(tacod_service *s, const char *name, json_t **out);

int tacod_models_serve_dir(tacod_service *s, const char *scope,
			   const char *name, const char *dst, char *dir,
			   size_t cap, taco_err *err)
{
	found_model f;
	json_t *o;
	int rc;

	if (base_object(s, name, &o) == 0) {
		json_decref(o);
		snprintf(dir, cap, "%s/%s", s->cfg.models_dir, name);
		return 0;
	}
	rc = find_model(s, scope, name, &f, err);
	if (rc)
		return rc == -EINVAL ? -ENOENT : rc;
	if (!dst) { /* where its tokenizer and template are */
		snprintf(dir, cap, "%s", f.sidecars);
		tacod_job_clear(&f.job);
		return 0;
	}
	rc = assemble(&f, dst, err);
	tacod_job_clear(&f.job);
	if (rc) {
		taco_remove_flat_dir(dst, NULL);
		return rc;
	}
	snprintf(dir, cap, "%s", dst);
	return 1;
}

/* A base model's object: created is its config's mtime. 0, or -ENOENT. */
static int base_object(tacod_service *s, const char *name, json_t **out)
{
	char path[TACOD_PATH_MAX + 320];
	struct stat st;

	if (!tacod_model_name_plain(name, TACOD_BASE_NAME_MAX))
		return -ENOENT;
	snprintf(path, sizeof(path), "%s/%s/config.json", s->cfg.models_dir,
		 name);
	if (stat(path, &st))
		return -ENOENT;
	*out =
	    tacod_model_object(name, (int64_t)st.st_mtime, "tacod", name, NULL);
	return 0;
}

static void list_base(tacod_service *s, json_t *items)
{
	DIR *d = opendir(s->cfg.models_dir);
	struct dirent *e;
	json_t *o;

	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.' && base_object(s, e->d_name, &o) == 0)
			json_array_append_new(items, o);
	if (d)
		closedir(d);
}

int tacod_route_model_list(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	tacod_model_row *rows = calloc(MODELS_LIST_MAX, sizeof(*rows));
	json_t *items = json_array();
	taco_err err = {{0}};
	int n = 0, more = 0, rc;

	if (!rows) {
		json_decref(items);
		return tacod_http_error(r, 500, "server_error", NULL, NULL,
					"out of memory");
	}
	list_base(s, items);
	pthread_mutex_lock(&s->lock);
	rc = tacod_store_model_list(s->store, tacod_route_scope(r), rows,
				    MODELS_LIST_MAX, &n, &more, &err);
	pthread_mutex_unlock(&s->lock);
	for (int i = 0; !rc && i < n; i++) {
		char root[TACOD_MODEL_NAME_MAX];
		if (tacod_model_name_root(rows[i].name, root, sizeof(root)))
			continue;
		json_array_append_new(
		    items,
		    tacod_model_object(rows[i].name, rows[i].created,
				       rows[i].user, root, rows[i].parent));
	}
	free(rows);
	if (rc) {
		json_decref(items);
		return tacod_route_store_error(r, rc, &err, "model");
	}
	return tacod_http_reply_json(r, 200, tacod_list_object(items, 0));
}

static int no_model(tacod_http_req *r, const char *name)
{
	return tacod_http_error(r, 404, "invalid_request_error",
				"model_not_found", "model",
				"The model '%s' does not exist", name);
}

int tacod_route_model_show(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	const char *name = tacod_http_param(r, "model");
	taco_err err = {{0}};
	found_model f;
	json_t *o;
	int rc;

	if (base_object(s, name, &o) == 0)
		return tacod_http_reply_json(r, 200, o);
	pthread_mutex_lock(&s->lock);
	rc = find_model(s, tacod_route_scope(r), name, &f, &err);
	pthread_mutex_unlock(&s->lock);
	if (rc == -ENOENT || rc == -EINVAL)
		return no_model(r, name);
	if (rc)
		return tacod_route_store_error(r, rc, &err, "model");
	o = tacod_model_object(name, f.created, f.job.user, f.name.root,
			       f.job.model);
	tacod_job_clear(&f.job);
	return tacod_http_reply_json(r, 200, o);
}

/* DELETE /v1/models/{model}: a fine-tuned model, as OpenAI's. Its name is
 * refused from then on and its exported weights are removed; the job keeps
 * its record and checkpoints, and a job that started from the model keeps
 * its own links to the weights. */
int tacod_route_model_delete(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	const char *name = tacod_http_param(r, "model");
	char dir[TACOD_PATH_MAX + 320], gguf[TACOD_PATH_MAX + 16] = "";
	taco_err err = {{0}};
	tacod_model_name m;
	found_model f;
	json_t *o;
	int rc;

	if (base_object(s, name, &o) == 0) {
		json_decref(o);
		return tacod_http_error(r, 403, "invalid_request_error",
					"model_not_deletable", "model",
					"'%s' is a base model (a directory of "
					"models_dir): only fine-tuned models "
					"are deleted through the API",
					name);
	}
	if (tacod_model_name_parse(name, &m) == 0 &&
	    m.kind == TACOD_MODEL_CHECKPOINT)
		return tacod_http_error(r, 400, "invalid_request_error",
					"model_not_deletable", "model",
					"'%s' is a checkpoint: checkpoints are "
					"kept with their job "
					"(keep_checkpoints), not deleted one "
					"by one",
					name);
	pthread_mutex_lock(&s->lock);
	rc = find_model(s, tacod_route_scope(r), name, &f, &err);
	if (rc == 0) {
		f.job.model_deleted_at = tacod_now();
		rc = tacod_store_job_update(s->store, &f.job, &err);
		snprintf(dir, sizeof(dir), "%s", f.weights);
		/* its GGUF files (export_gguf, service/gguf.c) go with
		 * it, and so do the conversions of its job */
		snprintf(gguf, sizeof(gguf), "%s/gguf", f.job.output_dir);
		tacod_gguf_forget_job(s, f.job.id);
		tacod_job_clear(&f.job);
	}
	pthread_mutex_unlock(&s->lock);
	if (rc == -ENOENT || rc == -EINVAL)
		return no_model(r, name);
	if (rc)
		return tacod_route_store_error(r, rc, &err, "model");
	/* the name is refused already: what stays behind is only space */
	if (taco_remove_flat_dir(dir, &err))
		fprintf(stderr, "tacod: deleting %s: %s\n", name, err.msg);
	if (gguf[0] && taco_remove_flat_dir(gguf, &err))
		fprintf(stderr, "tacod: deleting %s: %s\n", gguf, err.msg);
	return tacod_http_reply_json(r, 200,
				     json_pack("{ss ss sb}", "id", name,
					       "object", "model", "deleted",
					       1));
}

void tacod_models_release(tacod_service *s, const char *job_id)
{
	char dir[TACOD_PATH_MAX + 160];

	/* a job that has ended runs no more: the links it started from go,
	 * so deleting its parent model frees the space */
	snprintf(dir, sizeof(dir), "%s/%s/base", s->jobs_dir, job_id);
	taco_remove_flat_dir(dir, NULL);
}
