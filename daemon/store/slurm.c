/* store/slurm.c: the slurm_jobs table (store/slurm.h). */
#include "daemon/store/slurm.h"

#include <errno.h>
#include <string.h>

#include "daemon/store/internal.h"

static int read_row(sqlite3_stmt *st, void *ctx, taco_err *err)
{
	tacod_slurm_row *r = ctx;
	int rc = st_col_str(st, 0, r->job_id, sizeof(r->job_id), "job_id", err);

	r->slurm_id = sqlite3_column_int64(st, 1);
	r->events_offset = sqlite3_column_int64(st, 2);
	r->submitted_at = sqlite3_column_int64(st, 3);
	return rc;
}

int tacod_store_slurm_put(tacod_store *s, const tacod_slurm_row *r,
			  taco_err *err)
{
	int rc = st_check_str(r->job_id, sizeof(r->job_id), 0, "job_id", err);

	if (rc == 0 && (r->slurm_id < 0 || r->events_offset < 0))
		rc = taco_err_set(err, -EINVAL,
				  "slurm_id, events_offset: negative");
	if (rc < 0)
		return rc;
	rc = st_begin(s, 1, err);
	if (rc < 0)
		return rc;
	rc = st_job_exists(s, r->job_id, err);
	if (rc == 0)
		rc = st_exec(s, "put slurm job",
			     "INSERT INTO slurm_jobs(job_id, slurm_id,"
			     " events_offset, submitted_at)"
			     " VALUES (?1, ?2, ?3, ?4)"
			     " ON CONFLICT (job_id) DO UPDATE SET"
			     " slurm_id = excluded.slurm_id,"
			     " events_offset = excluded.events_offset,"
			     " submitted_at = excluded.submitted_at",
			     ST_ARGS(ST_TEXT(r->job_id), ST_INT(r->slurm_id),
				     ST_INT(r->events_offset),
				     ST_INT(r->submitted_at)),
			     NULL, NULL, err);
	return st_end(s, rc, err);
}

int tacod_store_slurm_get(tacod_store *s, const char *job_id,
			  tacod_slurm_row *out, taco_err *err)
{
	tacod_slurm_row r;
	int rc = st_check_str(job_id, TACOD_ID_MAX, 0, "job_id", err);

	memset(&r, 0, sizeof(r));
	if (rc < 0)
		return rc;
	rc = st_exec(s, "get slurm job",
		     "SELECT job_id, slurm_id, events_offset, submitted_at"
		     " FROM slurm_jobs WHERE job_id = ?1",
		     ST_ARGS(ST_TEXT(job_id)), read_row, &r, err);
	if (rc == 0)
		return taco_err_set(err, -ENOENT, "no Slurm job for %s",
				    job_id);
	if (rc < 0)
		return rc;
	*out = r;
	return 0;
}

int tacod_store_slurm_list(tacod_store *s, tacod_slurm_row *out, int cap,
			   int *n, taco_err *err)
{
	st_query q;
	int rc, k = 0;

	*n = 0;
	if (cap <= 0)
		return cap == 0 ? 0
				: taco_err_set(err, -EINVAL, "cap: negative");
	rc = st_prep(s, &q, "list slurm jobs",
		     "SELECT job_id, slurm_id, events_offset, submitted_at"
		     " FROM slurm_jobs ORDER BY submitted_at, rowid LIMIT ?1",
		     err);
	if (rc < 0)
		return rc;
	st_int(&q, 1, cap);
	while ((rc = st_step(&q, err)) == 1 && k < cap) {
		rc = read_row(q.st, &out[k], err);
		if (rc < 0)
			break;
		k++;
	}
	st_done(&q);
	if (rc < 0)
		return rc;
	*n = k;
	return 0;
}

int tacod_store_slurm_offset(tacod_store *s, const char *job_id,
			     int64_t events_offset, taco_err *err)
{
	int rc = st_exec(s, "set events offset",
			 "UPDATE slurm_jobs SET events_offset = ?2"
			 " WHERE job_id = ?1",
			 ST_ARGS(ST_TEXT(job_id), ST_INT(events_offset)), NULL,
			 NULL, err);

	if (rc == 0 && st_changes(s) == 0)
		rc = taco_err_set(err, -ENOENT, "no Slurm job for %s", job_id);
	return rc < 0 ? rc : 0;
}

int tacod_store_slurm_delete(tacod_store *s, const char *job_id, taco_err *err)
{
	int rc = st_exec(s, "delete slurm job",
			 "DELETE FROM slurm_jobs WHERE job_id = ?1",
			 ST_ARGS(ST_TEXT(job_id)), NULL, NULL, err);

	return rc < 0 ? rc : 0;
}
