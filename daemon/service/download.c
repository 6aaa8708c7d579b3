/* service/download.c: a checkpoint or the final model as a tar stream of a
 * Hugging Face model directory.
 *
 * A checkpoint directory holds model.safetensors beside the optimizer
 * state; the archive pairs those weights with the base model's config and
 * tokenizer files (the ones an export carries over), so that what a client
 * unpacks loads with from_pretrained. The archive is laid out up front and
 * read from disk as the client drains it (tar.h). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api/model_name.h"
#include "daemon/service/internal.h"
#include "daemon/service/tar.h"
#include "job/job_export.h"

static ssize_t tar_read(void *ctx, uint64_t pos, char *buf, size_t max)
{
	return tacod_tar_read(ctx, pos, buf, max);
}

static void tar_release(void *ctx)
{
	tacod_tar_free(ctx);
}

static int download_add(tacod_tar *t, const char *top, const char *name,
			const char *dir, taco_err *err)
{
	char member[2 * TACOD_NAME_MAX + 8], path[3 * TACOD_PATH_MAX];

	snprintf(member, sizeof(member), "%s/%s", top, name);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return tacod_tar_add(t, member, path, err);
}

static int send_tar(tacod_http_req *r, tacod_tar *t, const char *top)
{
	char name[TACOD_NAME_MAX + 8];

	snprintf(name, sizeof(name), "%s.tar", top);
	return tacod_http_reply_reader(r, 200, tacod_tar_size(t),
				       "application/x-tar", name, tar_read,
				       tar_release, t);
}

/* The base model's config and tokenizer files, when present. */
static int add_base_files(tacod_tar *t, const char *top, const char *base,
			  taco_err *err)
{
	char path[3 * TACOD_PATH_MAX];
	struct stat st;
	int rc = 0;

	for (int i = 0; !rc && taco_job_export_files[i]; i++) {
		snprintf(path, sizeof(path), "%s/%s", base,
			 taco_job_export_files[i]);
		if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
			rc = download_add(t, top, taco_job_export_files[i],
					  base, err);
	}
	return rc;
}

/* "ftckpt-<job>-<step>" or a bare step number. */
static int64_t step_of(const char *ckpt)
{
	const char *dash = strrchr(ckpt, '-');
	char *end;
	long long v = strtoll(dash ? dash + 1 : ckpt, &end, 10);

	return *end || v < 0 ? -1 : (int64_t)v;
}

int tacod_route_checkpoint_content(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	const char *id = tacod_http_param(r, "id");
	int64_t step = step_of(tacod_http_param(r, "checkpoint"));
	tacod_checkpoint c[2];
	char top[TACOD_ID_MAX + 32], dir[TACOD_PATH_MAX] = "";
	char base[2 * TACOD_PATH_MAX], root[TACOD_MODEL_NAME_MAX];
	tacod_job j = {0};
	taco_err err = {{0}};
	tacod_tar *t = NULL;
	int n = 0, more, rc;

	/* the newest kept checkpoint at or below the step: the one asked
	 * for, or none */
	rc = tacod_route_checkpoints(
	    r, s, id, step < 0 || step == INT64_MAX ? 0 : step + 1, 1, &j, c,
	    &n, &more, &err);
	for (int i = 0; i < n; i++) {
		if (c[i].step == step)
			snprintf(dir, sizeof(dir), "%s", c[i].path);
		free(c[i].metrics);
	}
	if (rc) {
		tacod_job_clear(&j);
		return tacod_route_store_error(r, rc, &err, "job");
	}
	snprintf(top, sizeof(top), "ftckpt-%s-%lld", id + 6, (long long)step);
	/* the config and tokenizer of the base at the root of the job's
	 * chain (api/model_name.h) */
	if (tacod_model_name_root(j.model, root, sizeof(root)))
		root[0] = 0;
	snprintf(base, sizeof(base), "%s/%s", s->cfg.models_dir, root);
	tacod_job_clear(&j);
	if (!dir[0])
		return tacod_http_error(r, 404, "invalid_request_error",
					"not_found", "checkpoint",
					"No such checkpoint");
	if ((rc = tacod_tar_new(&t, &err)) ||
	    (rc = add_base_files(t, top, base, &err)) ||
	    (rc = download_add(t, top, "model.safetensors", dir, &err))) {
		tacod_tar_free(t);
		/* keep_checkpoints removed it, or the job's files are gone;
		 * the message names no server path */
		if (rc == -ENOENT)
			return tacod_http_error(r, 404, "invalid_request_error",
						"not_found", "checkpoint",
						"checkpoint %s is no longer "
						"kept (keep_checkpoints)",
						top);
		return tacod_http_error(r, 500, "server_error", NULL, NULL,
					"cannot read checkpoint %s", top);
	}
	return send_tar(r, t, top);
}

static int download_cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file of dir, in name order (a stable archive). */
static int add_dir(tacod_tar *t, const char *top, const char *dir,
		   taco_err *err)
{
	DIR *d = opendir(dir);
	char *names[TACOD_TAR_MAX_ENTRIES], path[2 * TACOD_PATH_MAX];
	struct dirent *e;
	struct stat st;
	int n = 0, rc = 0;

	if (!d)
		return taco_err_set(err, -errno, "%s: %s", dir,
				    strerror(errno));
	while ((e = readdir(d)) && !rc) {
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (e->d_name[0] == '.' || stat(path, &st) ||
		    !S_ISREG(st.st_mode))
			continue;
		if (n == TACOD_TAR_MAX_ENTRIES)
			rc = taco_err_set(err, -E2BIG, "%s: too many files",
					  dir);
		else if (!(names[n++] = strdup(e->d_name)))
			rc = taco_err_set(err, -ENOMEM, "out of memory");
	}
	closedir(d);
	if (!rc)
		qsort(names, (size_t)n, sizeof(names[0]), download_cmp_str);
	for (int i = 0; i < n; i++) {
		if (!rc && names[i])
			rc = download_add(t, top, names[i], dir, err);
		free(names[i]);
	}
	return rc;
}

int tacod_route_model_content(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	const char *id = tacod_http_param(r, "id");
	char top[TACOD_NAME_MAX], dir[TACOD_PATH_MAX + 16];
	tacod_job j = {0};
	taco_err err = {{0}};
	tacod_tar *t = NULL;
	int rc, done, deleted;

	pthread_mutex_lock(&s->lock);
	rc = tacod_store_job_get(s->store, tacod_route_scope(r), id, &j, &err);
	pthread_mutex_unlock(&s->lock);
	if (rc)
		return tacod_route_store_error(r, rc, &err, "job");
	done = j.status == TACOD_SUCCEEDED;
	deleted = j.model_deleted_at != 0;
	snprintf(dir, sizeof(dir), "%s/model", j.output_dir);
	/* the model's name without its colons, as a directory name */
	snprintf(top, sizeof(top), "%.60s", j.fine_tuned_model);
	for (char *p = top; *p; p++)
		if (*p == ':' || *p == '/')
			*p = '-';
	tacod_job_clear(&j);
	if (!done)
		return tacod_http_error(r, 404, "invalid_request_error",
					"not_found", "id",
					"the job has no model yet: it has not "
					"succeeded");
	if (deleted)
		return tacod_http_error(r, 404, "invalid_request_error",
					"not_found", "id",
					"the job's fine-tuned model was "
					"deleted (DELETE /v1/models)");
	if ((rc = tacod_tar_new(&t, &err)) ||
	    (rc = add_dir(t, top, dir, &err))) {
		tacod_tar_free(t);
		return tacod_http_error(r, 500, "server_error", NULL, NULL,
					"%s", err.msg);
	}
	return send_tar(r, t, top);
}
