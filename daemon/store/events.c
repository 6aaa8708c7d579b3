/* store/events.c: a job's events in the store (docs/events.md): appended
 * with the next seq, read in seq order after a given seq; the newest's seq
 * (where a newest-first page starts). */
#include "daemon/store/internal.h"
#include "daemon/store/store.h"

#include <errno.h>
#include <string.h>
#include <time.h>

static int check_level(const char *level, taco_err *err)
{
	if (!level ||
	    (strcmp(level, "info") != 0 && strcmp(level, "warn") != 0 &&
	     strcmp(level, "error") != 0))
		return taco_err_set(err, -EINVAL,
				    "level: must be info, warn or error");
	return 0;
}

int tacod_store_event_add(tacod_store *s, const char *job_id, const char *level,
			  const char *type, const char *message,
			  const char *data_json, int64_t *seq, taco_err *err)
{
	int64_t next = 0;
	int rc;

	if (seq)
		*seq = 0;
	rc = st_check_str(job_id, TACOD_ID_MAX, 0, "job_id", err);
	if (rc == 0)
		rc = check_level(level, err);
	if (rc == 0)
		rc = st_check_str(type, sizeof(((tacod_event *)0)->type), 0,
				  "type", err);
	if (rc == 0)
		rc = st_check_text(message ? message : "", 0, "message", err);
	if (rc == 0)
		rc = st_check_text(data_json, 1, "data", err);
	if (rc < 0)
		return rc;
	rc = st_begin(s, 1, err);
	if (rc < 0)
		return rc;
	rc = st_job_exists(s, job_id, err);
	if (rc == 0)
		rc = st_exec(s, "next event seq",
			     "SELECT coalesce(max(seq), 0) + 1 FROM events"
			     " WHERE job_id = ?1",
			     ST_ARGS(ST_TEXT(job_id)), st_read_int64, &next,
			     err);
	if (rc == 1)
		rc = 0;
	if (rc == 0)
		rc = st_exec(
		    s, "add event",
		    "INSERT INTO events(job_id, seq, created_at, level,"
		    " type, message, data)"
		    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
		    ST_ARGS(ST_TEXT(job_id), ST_INT(next),
			    ST_INT((int64_t)time(NULL)), ST_TEXT(level),
			    ST_TEXT(type), ST_TEXT(message ? message : ""),
			    ST_TEXT(data_json)),
		    NULL, NULL, err);
	rc = st_end(s, rc, err);
	if (rc == 0 && seq)
		*seq = next;
	return rc;
}

int tacod_store_event_newest(tacod_store *s, const char *job_id, int64_t *seq,
			     taco_err *err)
{
	int64_t v = 0;
	int rc = st_check_str(job_id, TACOD_ID_MAX, 0, "job_id", err);

	if (rc == 0)
		rc = st_exec(s, "newest event",
			     "SELECT coalesce(max(seq), 0) FROM events"
			     " WHERE job_id = ?1",
			     ST_ARGS(ST_TEXT(job_id)), st_read_int64, &v, err);
	if (rc < 0)
		return rc;
	*seq = v;
	return 0;
}

static int read_event(sqlite3_stmt *st, tacod_event *e, taco_err *err)
{
	int rc;

	memset(e, 0, sizeof(*e));
	rc = st_col_str(st, 0, e->job_id, sizeof(e->job_id), "event job_id",
			err);
	e->seq = sqlite3_column_int64(st, 1);
	e->created_at = sqlite3_column_int64(st, 2);
	if (rc == 0)
		rc = st_col_str(st, 3, e->level, sizeof(e->level),
				"event level", err);
	if (rc == 0)
		rc = st_col_str(st, 4, e->type, sizeof(e->type), "event type",
				err);
	if (rc == 0)
		rc = st_col_dup(st, 5, &e->message, "event message", err);
	if (rc == 0)
		rc = st_col_dup(st, 6, &e->data, "event data", err);
	if (rc < 0)
		tacod_event_clear(e);
	return rc;
}

int tacod_store_event_list(tacod_store *s, const char *job_id,
			   int64_t after_seq, int limit, tacod_event *out,
			   int *n, int *has_more, taco_err *err)
{
	st_query q;
	int rc;

	*n = 0;
	*has_more = 0;
	limit = st_clamp_limit(limit);
	rc = st_check_str(job_id, TACOD_ID_MAX, 0, "job_id", err);
	if (rc < 0)
		return rc;
	rc = st_prep(s, &q, "list events",
		     "SELECT job_id, seq, created_at, level, type, message,"
		     " data FROM events WHERE job_id = ?1 AND seq > ?2"
		     " ORDER BY seq LIMIT ?3",
		     err);
	if (rc < 0)
		return rc;
	st_text(&q, 1, job_id);
	st_int(&q, 2, after_seq < 0 ? 0 : after_seq);
	st_int(&q, 3, limit + 1);
	while ((rc = st_step(&q, err)) == 1) {
		if (*n == limit) {
			*has_more = 1;
			rc = 0;
			break;
		}
		rc = read_event(q.st, &out[*n], err);
		if (rc < 0)
			break;
		(*n)++;
	}
	st_done(&q);
	if (rc < 0) {
		for (int i = 0; i < *n; i++)
			tacod_event_clear(&out[i]);
		*n = 0;
		*has_more = 0;
	}
	return rc;
}

/* A key of the metrics events' data, in a JSON path: a plain name. */
static int check_data_key(const char *key, taco_err *err)
{
	size_t n = key ? strlen(key) : 0;

	if (n == 0 || n > 64 || strspn(key, "abcdefghijklmnopqrstuvwxyz_") != n)
		return taco_err_set(err, -EINVAL,
				    "key: must be 1 to 64 of a-z and _");
	return 0;
}

int tacod_store_event_metrics_last(tacod_store *s, const char *job_id,
				   const char *key, int64_t max_step,
				   char **data, taco_err *err)
{
	st_query q;
	int rc = st_check_str(job_id, TACOD_ID_MAX, 0, "job_id", err);

	if (rc == 0)
		rc = check_data_key(key, err);
	if (rc < 0)
		return rc;
	/* newest first along the (job_id, seq) key: the scan stops at the
	 * first match, a few events back from the end */
	rc = st_prep(s, &q, "find the last metrics",
		     "SELECT data FROM events WHERE job_id = ?1"
		     " AND type = 'metrics' AND json_valid(data)"
		     " AND json_type(data, '$.' || ?2) IN ('integer', 'real')"
		     " AND json_type(data, '$.step') = 'integer'"
		     " AND json_extract(data, '$.step') <= ?3"
		     " ORDER BY seq DESC LIMIT 1",
		     err);
	if (rc < 0)
		return rc;
	st_text(&q, 1, job_id);
	st_text(&q, 2, key);
	st_int(&q, 3, max_step);
	rc = st_step(&q, err);
	if (rc == 1)
		rc = st_col_dup(q.st, 0, data, "event data", err);
	else if (rc == 0)
		rc = taco_err_set(err, -ENOENT, "job %s: no metrics with %s",
				  job_id, key);
	st_done(&q);
	return rc;
}

int tacod_store_event_metrics_each(tacod_store *s, const char *job_id,
				   tacod_store_data_fn fn, void *ctx,
				   taco_err *err)
{
	st_query q;
	int rc = st_check_str(job_id, TACOD_ID_MAX, 0, "job_id", err);

	if (rc < 0)
		return rc;
	rc = st_prep(s, &q, "list metrics by step",
		     "SELECT json_extract(data, '$.step'), data FROM events"
		     " WHERE job_id = ?1 AND type = 'metrics'"
		     " AND json_valid(data)"
		     " AND json_type(data, '$.step') = 'integer'"
		     " ORDER BY json_extract(data, '$.step'), seq",
		     err);
	if (rc < 0)
		return rc;
	st_text(&q, 1, job_id);
	while ((rc = st_step(&q, err)) == 1) {
		rc = fn(ctx, sqlite3_column_int64(q.st, 0),
			(const char *)sqlite3_column_text(q.st, 1));
		if (rc)
			break;
	}
	st_done(&q);
	return rc;
}
