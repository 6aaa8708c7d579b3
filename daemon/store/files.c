/* store/files.c: uploaded files in the store: their rows, pages, deletion
 * (refused while an unfinished job uses the file) and the count of files
 * with the same content hash. */
#include "daemon/store/internal.h"
#include "daemon/store/store.h"

#include <errno.h>
#include <string.h>

#define FILE_COLS "id, user, filename, purpose, sha256, path, bytes, created_at"

static int check_sha256(const char *v, taco_err *err)
{
	int rc = st_check_str(v, 65, 0, "sha256", err);

	if (rc < 0)
		return rc;
	if (strlen(v) != 64 || strspn(v, "0123456789abcdef") != 64)
		return taco_err_set(err, -EINVAL,
				    "sha256: must be 64 lowercase hex digits");
	return 0;
}

static int check_file(const tacod_file *f, taco_err *err)
{
	int rc = st_check_str(f->id, sizeof(f->id), 0, "id", err);

	if (rc == 0)
		rc = st_check_str(f->user, sizeof(f->user), 0, "user", err);
	if (rc == 0)
		rc = st_check_str(f->filename, sizeof(f->filename), 1,
				  "filename", err);
	if (rc == 0)
		rc = st_check_str(f->purpose, sizeof(f->purpose), 0, "purpose",
				  err);
	if (rc == 0)
		rc = check_sha256(f->sha256, err);
	if (rc == 0)
		rc = st_check_str(f->path, sizeof(f->path), 0, "path", err);
	if (rc == 0 && f->bytes < 0)
		rc = taco_err_set(err, -EINVAL, "bytes: negative");
	return rc;
}

static int read_file_row(sqlite3_stmt *st, tacod_file *f, taco_err *err)
{
	int rc;

	memset(f, 0, sizeof(*f));
	rc = st_col_str(st, 0, f->id, sizeof(f->id), "file id", err);
	if (rc == 0)
		rc = st_col_str(st, 1, f->user, sizeof(f->user), "file user",
				err);
	if (rc == 0)
		rc = st_col_str(st, 2, f->filename, sizeof(f->filename),
				"filename", err);
	if (rc == 0)
		rc = st_col_str(st, 3, f->purpose, sizeof(f->purpose),
				"file purpose", err);
	if (rc == 0)
		rc = st_col_str(st, 4, f->sha256, sizeof(f->sha256),
				"file sha256", err);
	if (rc == 0)
		rc = st_col_str(st, 5, f->path, sizeof(f->path), "file path",
				err);
	f->bytes = sqlite3_column_int64(st, 6);
	f->created_at = sqlite3_column_int64(st, 7);
	return rc;
}

int tacod_store_file_add(tacod_store *s, const tacod_file *f, taco_err *err)
{
	int rc = check_file(f, err);

	if (rc < 0)
		return rc;
	rc = st_begin(s, 1, err);
	if (rc < 0)
		return rc;
	rc = st_exec(s, "add file",
		     "INSERT INTO files(" FILE_COLS ")"
		     " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
		     ST_ARGS(ST_TEXT(f->id), ST_TEXT(f->user),
			     ST_TEXT(f->filename), ST_TEXT(f->purpose),
			     ST_TEXT(f->sha256), ST_TEXT(f->path),
			     ST_INT(f->bytes), ST_INT(f->created_at)),
		     NULL, NULL, err);
	if (rc == -EEXIST)
		taco_err_set(err, rc, "file %s already exists", f->id);
	return st_end(s, rc, err);
}

static int read_file_at(sqlite3_stmt *st, void *rows, int i, taco_err *err)
{
	return read_file_row(st, &((tacod_file *)rows)[i], err);
}

static const st_page_def file_page = {"files", FILE_COLS, read_file_at, NULL};

int tacod_store_file_get(tacod_store *s, const char *user, const char *id,
			 tacod_file *out, taco_err *err)
{
	memset(out, 0, sizeof(*out));
	return st_get(s, &file_page, "file", user, id, out, err);
}

int tacod_store_file_list(tacod_store *s, const char *user, const char *purpose,
			  int ascending, const char *after, int limit,
			  tacod_file *out, int *n, int *has_more, taco_err *err)
{
	int rc = purpose ? st_check_str(purpose, sizeof(out->purpose), 0,
					"purpose", err)
			 : 0;

	if (rc < 0)
		return rc;
	return st_page_order(s, &file_page, user,
			     purpose ? "purpose = ?5" : NULL, purpose, after,
			     ascending, limit, out, n, has_more, err);
}

/* The row of a job that still uses the file: the refusal. */
static int file_in_use(sqlite3_stmt *st, void *id, taco_err *err)
{
	return taco_err_set(err, -EBUSY, "file %s is in use by job %s",
			    (const char *)id,
			    (const char *)sqlite3_column_text(st, 0));
}

int tacod_store_file_delete(tacod_store *s, const char *user, const char *id,
			    taco_err *err)
{
	int rc;

	rc = st_check_user(user, 1, err);
	if (rc == 0)
		rc = st_check_str(id, TACOD_ID_MAX, 0, "id", err);
	if (rc < 0)
		return rc;
	rc = st_begin(s, 1, err);
	if (rc < 0)
		return rc;
	rc = st_exec(s, "find file",
		     "SELECT 1 FROM files"
		     " WHERE id = ?1 AND (?2 IS NULL OR user = ?2)",
		     ST_ARGS(ST_TEXT(id), ST_TEXT(user)), NULL, NULL, err);
	if (rc == 0)
		rc = taco_err_set(err, -ENOENT, "no such file: %s", id);
	else if (rc == 1)
		rc = 0;
	if (rc == 0)
		rc = st_exec(s, "find jobs using the file",
			     "SELECT id FROM jobs WHERE status < ?2"
			     " AND (training_file = ?1 OR validation_file = ?1)"
			     " LIMIT 1",
			     /* TACOD_SUCCEEDED: the first finished state */
			     ST_ARGS(ST_TEXT(id), ST_INT(TACOD_SUCCEEDED)),
			     file_in_use, (void *)id, err);
	/* The upload's Idempotency-Key goes with the file: a retry that comes
	 * after the delete is a new upload, not the replay of an id that no
	 * longer exists (docs/tacod.md, "Idempotency-Key"). */
	if (rc == 0)
		rc = st_exec(s, "forget the file's idempotency key",
			     "DELETE FROM idempotency WHERE user ="
			     " (SELECT user FROM files WHERE id = ?1)"
			     " AND json_valid(body)"
			     " AND json_extract(body, '$.object') = 'file'"
			     " AND json_extract(body, '$.id') = ?1",
			     ST_ARGS(ST_TEXT(id)), NULL, NULL, err);
	/* a deleted result file is no longer one of its job's */
	if (rc == 0)
		rc = st_exec(s, "forget the job's result file",
			     "UPDATE jobs SET result_file = '' WHERE"
			     " result_file = ?1",
			     ST_ARGS(ST_TEXT(id)), NULL, NULL, err);
	if (rc == 0)
		rc =
		    st_exec(s, "delete file", "DELETE FROM files WHERE id = ?1",
			    ST_ARGS(ST_TEXT(id)), NULL, NULL, err);
	return st_end(s, rc, err);
}

int tacod_store_file_count_sha256(tacod_store *s, const char *sha256,
				  int64_t *count, taco_err *err)
{
	int rc;

	*count = 0;
	rc = check_sha256(sha256, err);
	if (rc < 0)
		return rc;
	rc = st_exec(s, "count files",
		     "SELECT count(*) FROM files WHERE sha256 = ?1",
		     ST_ARGS(ST_TEXT(sha256)), st_read_int64, count, err);
	return rc == 1 ? 0 : rc;
}
