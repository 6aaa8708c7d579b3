/* service/files.c: the files of the API (OpenAI's /v1/files): uploads,
 * their list, their rows and content, and their deletion. */
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

int tacod_route_file_upload(tacod_http_req *r, void *ctx)
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
	if (!purpose || strcmp(purpose, TACOD_PURPOSE_FINE_TUNE))
		return tacod_http_error(
		    r, 400, "invalid_request_error", "invalid_purpose",
		    "purpose",
		    "purpose must be '" TACOD_PURPOSE_FINE_TUNE
		    "' (a '" TACOD_PURPOSE_RESULTS "' file is made by tacod "
		    "when a job ends)");
	/* a retried upload is the same content, purpose and name */
	snprintf(what, sizeof(what), "%s/%s/%s", u->sha256, purpose,
		 u->filename);
	if (tacod_idem_begin(r, s, what, strlen(what), &idem))
		return 0;
	snprintf(dest, sizeof(dest), "%s/%s", s->files_dir, u->sha256);
	tacod_new_id("file-", f.id);
	snprintf(f.user, sizeof(f.user), "%s", tacod_route_user(r));
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
	/* stored by content hash: the same bytes are kept once. Under the
	 * lock, as a delete removes the bytes no file has any more */
	if (stat(dest, &st) && (rc = tacod_http_upload_keep(r, dest, &err))) {
		pthread_mutex_unlock(&s->lock);
		json_decref(obj);
		return tacod_route_write_error(r, rc, &err);
	}
	rc = tacod_store_tx_begin(s->store, &err);
	if (rc == 0) {
		rc = tacod_store_file_add(s->store, &f, &err);
		if (rc == 0)
			rc = tacod_idem_store(s, f.user, &idem, 200, obj, &err);
		rc = tacod_store_tx_end(s->store, rc, &err);
	}
	if (rc)
		tacod_file_bytes_release(s, f.sha256);
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

/* The purposes of OpenAI's FileObject, the values its `purpose` filter
 * takes (tacod's files are fine-tune and fine-tune-results). */
static const char *const openai_purposes[] = {
    "assistants", "assistants_output", "batch",	 "batch_output",
    "fine-tune",  "fine-tune-results", "vision", "user_data"};

#define N_PURPOSES (sizeof(openai_purposes) / sizeof(openai_purposes[0]))

/* 1 when p is one of them; else 0 with them listed in list. */
static int openai_purpose(const char *p, char *list, size_t cap)
{
	size_t n = 0;

	for (size_t i = 0; i < N_PURPOSES; i++)
		if (!strcmp(p, openai_purposes[i]))
			return 1;
	list[0] = 0;
	for (size_t i = 0; i < N_PURPOSES && n < cap; i++)
		n += (size_t)snprintf(list + n, cap - n, "%s%s", i ? ", " : "",
				      openai_purposes[i]);
	return 0;
}

/* GET /v1/files: OpenAI's `order` (desc, newest first, by default),
 * `purpose` and `after`; `limit` takes OpenAI's range (1 to 10000, 10000
 * by default) and a page holds at most TACOD_LIST_MAX (has_more says the
 * rest follows). */
int tacod_route_file_list(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	tacod_file *rows;
	const char *after = tacod_http_query(r, "after");
	const char *order = tacod_http_query(r, "order");
	const char *purpose = tacod_http_query(r, "purpose");
	char list[256];
	json_t *items;
	taco_err err = {{0}};
	int n = 0, more = 0, rc;
	int limit = tacod_route_page_limit(r, 10000, 10000);

	if (limit < 0)
		return 0;
	if (order && strcmp(order, "asc") && strcmp(order, "desc"))
		return tacod_http_error(r, 400, "invalid_request_error",
					"invalid_value", "order",
					"order must be asc or desc");
	if (purpose && !openai_purpose(purpose, list, sizeof(list)))
		return tacod_http_error(r, 400, "invalid_request_error",
					"invalid_value", "purpose",
					"purpose must be one of OpenAI's file "
					"purposes: %s",
					list);
	if (!(rows = calloc(TACOD_LIST_MAX, sizeof(*rows))))
		return tacod_http_error(r, 500, "server_error", NULL, NULL,
					"out of memory");
	items = json_array();
	pthread_mutex_lock(&s->lock);
	rc = tacod_store_file_list(
	    s->store, tacod_route_scope(r), purpose,
	    order && !strcmp(order, "asc"), after ? after : "",
	    limit < TACOD_LIST_MAX ? limit : TACOD_LIST_MAX, rows, &n, &more,
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

int tacod_route_file_show(tacod_http_req *r, void *ctx)
{
	tacod_file f;

	if (file_get(r, ctx, &f))
		return 0;
	return tacod_http_reply_json(r, 200, tacod_file_object(&f));
}

int tacod_route_file_content(tacod_http_req *r, void *ctx)
{
	tacod_file f;

	if (file_get(r, ctx, &f))
		return 0;
	return tacod_http_reply_file(r, 200, f.path, "application/octet-stream",
				     f.filename);
}

void tacod_file_bytes_release(tacod_service *s, const char *sha256)
{
	char path[TACOD_PATH_MAX + 128];
	int64_t n = 1;

	/* a store that cannot tell keeps the bytes */
	if (tacod_store_file_count_sha256(s->store, sha256, &n, NULL) || n)
		return;
	snprintf(path, sizeof(path), "%s/%s", s->files_dir, sha256);
	if (unlink(path) && errno != ENOENT)
		fprintf(stderr, "tacod: cannot remove %s: %s\n", path,
			strerror(errno));
}

int tacod_route_file_delete(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	const char *id = tacod_http_param(r, "id");
	tacod_file f;
	taco_err err = {{0}};
	int rc;

	pthread_mutex_lock(&s->lock);
	rc = tacod_store_file_get(s->store, tacod_route_scope(r), id, &f, &err);
	if (!rc)
		rc = tacod_store_file_delete(s->store, tacod_route_scope(r), id,
					     &err);
	if (!rc)
		tacod_file_bytes_release(s, f.sha256);
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
