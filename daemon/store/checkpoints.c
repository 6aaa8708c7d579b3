/* store/checkpoints.c: a job's checkpoints in the store, one a step: added
 * (or replaced), listed in pages newest step first, deleted. */
#include "daemon/store/internal.h"
#include "daemon/store/store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int tacod_store_checkpoint_add(tacod_store *s, const tacod_checkpoint *c,
			       taco_err *err)
{
	int rc = st_check_str(c->job_id, sizeof(c->job_id), 0, "job_id", err);

	if (rc == 0)
		rc = st_check_str(c->path, sizeof(c->path), 0, "path", err);
	if (rc == 0)
		rc = st_check_text(c->metrics, 1, "metrics", err);
	if (rc == 0 && c->step < 0)
		rc = taco_err_set(err, -EINVAL, "step: negative");
	if (rc < 0)
		return rc;
	rc = st_begin(s, 1, err);
	if (rc < 0)
		return rc;
	rc = st_job_exists(s, c->job_id, err);
	if (rc == 0)
		rc = st_exec(s, "add checkpoint",
			     "INSERT INTO checkpoints(job_id, step, path,"
			     " created_at, metrics)"
			     " VALUES (?1, ?2, ?3, ?4, ?5)"
			     " ON CONFLICT (job_id, step) DO UPDATE SET"
			     " path = excluded.path,"
			     " created_at = excluded.created_at,"
			     " metrics = excluded.metrics",
			     ST_ARGS(ST_TEXT(c->job_id), ST_INT(c->step),
				     ST_TEXT(c->path), ST_INT(c->created_at),
				     ST_TEXT(c->metrics)),
			     NULL, NULL, err);
	return st_end(s, rc, err);
}

int tacod_store_checkpoint_list(tacod_store *s, const char *job_id,
				int64_t before_step, int limit,
				tacod_checkpoint *out, int *n, int *has_more,
				taco_err *err)
{
	st_query q;
	int rc;

	*n = 0;
	*has_more = 0;
	limit = st_clamp_limit(limit);
	rc = st_check_str(job_id, TACOD_ID_MAX, 0, "job_id", err);
	if (rc < 0)
		return rc;
	/* one row past the page tells whether older ones follow */
	rc = st_prep(s, &q, "list checkpoints",
		     "SELECT job_id, step, path, created_at, metrics"
		     " FROM checkpoints WHERE job_id = ?1 AND step < ?2"
		     " ORDER BY step DESC LIMIT ?3",
		     err);
	if (rc < 0)
		return rc;
	st_text(&q, 1, job_id);
	st_int(&q, 2, before_step);
	st_int(&q, 3, limit + 1);
	while ((rc = st_step(&q, err)) == 1) {
		tacod_checkpoint *c = &out[*n];

		if (*n == limit) {
			*has_more = 1;
			rc = 0;
			break;
		}
		memset(c, 0, sizeof(*c));
		rc = st_col_str(q.st, 0, c->job_id, sizeof(c->job_id),
				"checkpoint job_id", err);
		c->step = sqlite3_column_int64(q.st, 1);
		if (rc == 0)
			rc = st_col_str(q.st, 2, c->path, sizeof(c->path),
					"checkpoint path", err);
		c->created_at = sqlite3_column_int64(q.st, 3);
		if (rc == 0)
			rc = st_col_dup(q.st, 4, &c->metrics,
					"checkpoint metrics", err);
		if (rc < 0)
			break;
		(*n)++;
	}
	st_done(&q);
	if (rc < 0) {
		for (int i = 0; i < *n; i++) {
			free(out[i].metrics);
			out[i].metrics = NULL;
		}
		*n = 0;
		*has_more = 0;
	}
	return rc;
}

int tacod_store_checkpoint_delete(tacod_store *s, const char *job_id,
				  int64_t step, taco_err *err)
{
	int rc = st_check_str(job_id, TACOD_ID_MAX, 0, "job_id", err);

	if (rc < 0)
		return rc;
	rc = st_begin(s, 1, err);
	if (rc < 0)
		return rc;
	rc = st_exec(s, "delete checkpoint",
		     "DELETE FROM checkpoints WHERE job_id = ?1 AND step = ?2",
		     ST_ARGS(ST_TEXT(job_id), ST_INT(step)), NULL, NULL, err);
	if (rc == 0 && st_changes(s) == 0)
		rc = taco_err_set(err, -ENOENT,
				  "no checkpoint of job %s at step %lld",
				  job_id, (long long)step);
	return st_end(s, rc, err);
}

static int read_one_checkpoint(sqlite3_stmt *st, void *ctx, taco_err *err)
{
	tacod_checkpoint *c = ctx;
	int rc =
	    st_col_str(st, 0, c->path, sizeof(c->path), "checkpoint path", err);

	c->created_at = sqlite3_column_int64(st, 1);
	if (rc == 0)
		rc = st_col_dup(st, 2, &c->metrics, "checkpoint metrics", err);
	return rc;
}

int tacod_store_checkpoint_get(tacod_store *s, const char *job_id, int64_t step,
			       tacod_checkpoint *out, taco_err *err)
{
	tacod_checkpoint c = {0};
	int rc = st_check_str(job_id, sizeof(c.job_id), 0, "job_id", err);

	if (rc < 0)
		return rc;
	memcpy(c.job_id, job_id, strlen(job_id) + 1);
	c.step = step;
	rc = st_exec(s, "get checkpoint",
		     "SELECT path, created_at, metrics FROM checkpoints"
		     " WHERE job_id = ?1 AND step = ?2",
		     ST_ARGS(ST_TEXT(job_id), ST_INT(step)),
		     read_one_checkpoint, &c, err);
	if (rc == 0)
		return taco_err_set(err, -ENOENT,
				    "no checkpoint of job %s at step %lld",
				    job_id, (long long)step);
	if (rc < 0) {
		free(c.metrics);
		return rc;
	}
	*out = c;
	return 0;
}
