/* store/webhooks.c: the webhook_deliveries table: queued, the next due one
 * taken, each attempt's outcome recorded, counted and purged. */
#include "daemon/store/webhooks.h"

#include "daemon/store/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void tacod_delivery_clear(tacod_delivery *d)
{
	free(d->payload);
	d->payload = NULL;
}

static int check_state(int state, taco_err *err)
{
	if (state < TACOD_DELIVERY_PENDING || state > TACOD_DELIVERY_FAILED)
		return taco_err_set(err, -EINVAL, "delivery state: %d", state);
	return 0;
}

int tacod_store_delivery_add(tacod_store *s, const tacod_delivery *d,
			     int64_t *id, taco_err *err)
{
	int rc = st_check_str(d->url, sizeof(d->url), 0, "url", err);

	if (rc == 0)
		rc = st_check_str(d->event_id, sizeof(d->event_id), 0,
				  "event_id", err);
	if (rc == 0)
		rc = st_check_str(d->type, sizeof(d->type), 0, "type", err);
	if (rc == 0)
		rc = st_check_str(d->job_id, sizeof(d->job_id), 0, "job_id",
				  err);
	if (rc == 0)
		rc = st_check_text(d->payload, 0, "payload", err);
	if (rc == 0)
		rc = st_check_str(d->last_error, sizeof(d->last_error), 1,
				  "last_error", err);
	if (rc == 0)
		rc = check_state(d->state, err);
	if (rc < 0)
		return rc;
	rc = st_begin(s, 1, err);
	if (rc < 0)
		return rc;
	rc = st_exec(s, "add webhook delivery",
		     "INSERT INTO webhook_deliveries(url, event_id, type,"
		     " job_id, payload, attempts, next_attempt_at, state,"
		     " last_error, created_at, finished_at)"
		     " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 0)",
		     ST_ARGS(ST_TEXT(d->url), ST_TEXT(d->event_id),
			     ST_TEXT(d->type), ST_TEXT(d->job_id),
			     ST_TEXT(d->payload), ST_INT(d->attempts),
			     ST_INT(d->next_attempt_at), ST_INT(d->state),
			     ST_TEXT(d->last_error), ST_INT(d->created_at)),
		     NULL, NULL, err);
	if (rc == 0 && id)
		*id = sqlite3_last_insert_rowid(s->db);
	return st_end(s, rc, err);
}

static int read_delivery(sqlite3_stmt *st, void *ctx, taco_err *err)
{
	tacod_delivery *d = ctx;
	int rc;

	memset(d, 0, sizeof(*d));
	d->id = sqlite3_column_int64(st, 0);
	if ((rc = st_col_str(st, 1, d->url, sizeof(d->url), "url", err)) ||
	    (rc = st_col_str(st, 2, d->event_id, sizeof(d->event_id),
			     "event_id", err)) ||
	    (rc = st_col_str(st, 3, d->type, sizeof(d->type), "type", err)) ||
	    (rc = st_col_str(st, 4, d->job_id, sizeof(d->job_id), "job_id",
			     err)) ||
	    (rc = st_col_str(st, 9, d->last_error, sizeof(d->last_error),
			     "last_error", err)) ||
	    (rc = st_col_dup(st, 5, &d->payload, "payload", err)))
		return rc;
	d->attempts = sqlite3_column_int(st, 6);
	d->next_attempt_at = sqlite3_column_int64(st, 7);
	d->state = sqlite3_column_int(st, 8);
	d->created_at = sqlite3_column_int64(st, 10);
	if (!d->payload)
		return taco_err_set(err, -EIO,
				    "store: delivery without a "
				    "payload");
	return 0;
}

int tacod_store_delivery_due(tacod_store *s, int64_t now_ms,
			     tacod_delivery *out, int *found, int64_t *next_at,
			     taco_err *err)
{
	tacod_delivery d = {0};
	int64_t at = INT64_MAX;
	int rc;

	*found = 0;
	rc = st_exec(s, "next webhook delivery",
		     "SELECT id, url, event_id, type, job_id, payload,"
		     " attempts, next_attempt_at, state, last_error,"
		     " created_at FROM webhook_deliveries"
		     " WHERE state = 0 ORDER BY next_attempt_at, id LIMIT 1",
		     NULL, read_delivery, &d, err);
	if (rc < 0) {
		tacod_delivery_clear(&d);
		return rc;
	}
	if (rc == 1) {
		at = d.next_attempt_at;
		if (at <= now_ms) {
			*out = d;
			*found = 1;
		} else {
			tacod_delivery_clear(&d);
		}
	}
	*next_at = at;
	return 0;
}

int tacod_store_delivery_record(tacod_store *s, int64_t id, int state,
				int attempts, int64_t next_at,
				const char *error, taco_err *err)
{
	int rc = check_state(state, err);

	if (rc == 0)
		rc = st_check_str(error ? error : "", TACOD_DELIVERY_ERROR_MAX,
				  1, "error", err);
	if (rc < 0)
		return rc;
	rc = st_begin(s, 1, err);
	if (rc < 0)
		return rc;
	rc = st_exec(s, "record webhook delivery",
		     "UPDATE webhook_deliveries SET state = ?2, attempts = ?3,"
		     " next_attempt_at = ?4, last_error = ?5,"
		     " finished_at = ?6 WHERE id = ?1",
		     ST_ARGS(ST_INT(id), ST_INT(state), ST_INT(attempts),
			     ST_INT(next_at), ST_TEXT(error ? error : ""),
			     ST_INT(state == TACOD_DELIVERY_PENDING
					? 0
					: (int64_t)time(NULL))),
		     NULL, NULL, err);
	if (rc == 0 && st_changes(s) == 0)
		rc = taco_err_set(err, -ENOENT, "no such webhook delivery");
	return st_end(s, rc, err);
}

int tacod_store_delivery_count(tacod_store *s, int64_t counts[3], taco_err *err)
{
	int64_t c[3] = {0};
	st_query q;
	int rc = st_prep(s, &q, "count webhook deliveries",
			 "SELECT state, count(*) FROM webhook_deliveries"
			 " GROUP BY state",
			 err);

	if (rc < 0)
		return rc;
	while ((rc = st_step(&q, err)) == 1) {
		int st = sqlite3_column_int(q.st, 0);
		if (st >= 0 && st < 3)
			c[st] = sqlite3_column_int64(q.st, 1);
	}
	st_done(&q);
	if (rc == 0)
		memcpy(counts, c, sizeof(c));
	return rc;
}

int tacod_store_delivery_last(tacod_store *s, const char *job_id,
			      const char *type, const char *url,
			      int64_t *created_at, taco_err *err)
{
	int64_t at = 0;
	int rc = st_exec(s, "last webhook delivery",
			 "SELECT coalesce(max(created_at), 0) FROM"
			 " webhook_deliveries WHERE job_id = ?1 AND"
			 " type = ?2 AND url = ?3",
			 ST_ARGS(ST_TEXT(job_id), ST_TEXT(type), ST_TEXT(url)),
			 st_read_int64, &at, err);

	if (rc < 0)
		return rc;
	*created_at = at;
	return 0;
}

int tacod_store_delivery_purge(tacod_store *s, int64_t before, taco_err *err)
{
	int rc = st_begin(s, 1, err);

	if (rc < 0)
		return rc;
	rc = st_exec(s, "purge webhook deliveries",
		     "DELETE FROM webhook_deliveries WHERE state != 0 AND"
		     " finished_at < ?1",
		     ST_ARGS(ST_INT(before)), NULL, NULL, err);
	return st_end(s, rc, err);
}
