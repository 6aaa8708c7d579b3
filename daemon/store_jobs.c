/* store_jobs.c: jobs, their events and their checkpoints in the store. */
#include "store.h"
#include "store_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Column order of every job statement: ?1 is id, ?2..?20 the rest. */
#define JOB_COLS                                                               \
	"id, user, status, model, training_file, validation_file, suffix,"     \
	" request, error, fine_tuned_model, output_dir, trained_tokens,"       \
	" planned_bytes, measured_peak_bytes, created_at, started_at,"         \
	" finished_at, estimated_finish, queue_seq, retries"

#define JOB_SET                                                                \
	"user = ?2, status = ?3, model = ?4, training_file = ?5,"              \
	" validation_file = ?6, suffix = ?7, request = ?8, error = ?9,"        \
	" fine_tuned_model = ?10, output_dir = ?11, trained_tokens = ?12,"     \
	" planned_bytes = ?13, measured_peak_bytes = ?14, created_at = ?15,"   \
	" started_at = ?16, finished_at = ?17, estimated_finish = ?18,"        \
	" queue_seq = ?19, retries = ?20"

static int check_job(const tacod_job *j, taco_err *err)
{
	int rc = st_check_str(j->id, sizeof(j->id), 0, "id", err);

	if (rc == 0)
		rc = st_check_str(j->user, sizeof(j->user), 0, "user", err);
	if (rc == 0)
		rc = st_check_status(j->status, "status", err);
	if (rc == 0)
		rc = st_check_str(j->model, sizeof(j->model), 0, "model", err);
	if (rc == 0)
		/* "" for a dataset read by path (the request names it) */
		rc = st_check_str(j->training_file, sizeof(j->training_file), 1,
				  "training_file", err);
	if (rc == 0)
		rc =
		    st_check_str(j->validation_file, sizeof(j->validation_file),
				 1, "validation_file", err);
	if (rc == 0)
		rc = st_check_str(j->suffix, sizeof(j->suffix), 1, "suffix",
				  err);
	if (rc == 0)
		rc = st_check_text(j->request, 1, "request", err);
	if (rc == 0)
		rc = st_check_text(j->error, 1, "error", err);
	if (rc == 0)
		rc = st_check_str(j->fine_tuned_model,
				  sizeof(j->fine_tuned_model), 1,
				  "fine_tuned_model", err);
	if (rc == 0)
		rc = st_check_str(j->output_dir, sizeof(j->output_dir), 1,
				  "output_dir", err);
	if (rc == 0 && j->retries < 0)
		rc = taco_err_set(err, -EINVAL, "retries: negative");
	return rc;
}

static void bind_job(st_query *q, const tacod_job *j, int64_t queue_seq)
{
	st_text(q, 1, j->id);
	st_text(q, 2, j->user);
	st_int(q, 3, j->status);
	st_text(q, 4, j->model);
	st_text(q, 5, j->training_file);
	st_text(q, 6, j->validation_file);
	st_text(q, 7, j->suffix);
	st_text(q, 8, j->request);
	st_text(q, 9, j->error);
	st_text(q, 10, j->fine_tuned_model);
	st_text(q, 11, j->output_dir);
	st_int(q, 12, j->trained_tokens);
	st_int(q, 13, j->planned_bytes);
	st_int(q, 14, j->measured_peak_bytes);
	st_int(q, 15, j->created_at);
	st_int(q, 16, j->started_at);
	st_int(q, 17, j->finished_at);
	st_int(q, 18, j->estimated_finish);
	st_int(q, 19, queue_seq);
	st_int(q, 20, j->retries);
}

static int read_job(sqlite3_stmt *st, tacod_job *j, taco_err *err)
{
	int rc;

	memset(j, 0, sizeof(*j));
	rc = st_col_str(st, 0, j->id, sizeof(j->id), "job id", err);
	if (rc == 0)
		rc = st_col_str(st, 1, j->user, sizeof(j->user), "job user",
				err);
	j->status = sqlite3_column_int(st, 2);
	if (rc == 0)
		rc = st_col_str(st, 3, j->model, sizeof(j->model), "job model",
				err);
	if (rc == 0)
		rc = st_col_str(st, 4, j->training_file,
				sizeof(j->training_file), "training_file", err);
	if (rc == 0)
		rc = st_col_str(st, 5, j->validation_file,
				sizeof(j->validation_file), "validation_file",
				err);
	if (rc == 0)
		rc = st_col_str(st, 6, j->suffix, sizeof(j->suffix), "suffix",
				err);
	if (rc == 0)
		rc = st_col_dup(st, 7, &j->request, "job request", err);
	if (rc == 0)
		rc = st_col_dup(st, 8, &j->error, "job error", err);
	if (rc == 0)
		rc = st_col_str(st, 9, j->fine_tuned_model,
				sizeof(j->fine_tuned_model), "fine_tuned_model",
				err);
	if (rc == 0)
		rc = st_col_str(st, 10, j->output_dir, sizeof(j->output_dir),
				"output_dir", err);
	j->trained_tokens = sqlite3_column_int64(st, 11);
	j->planned_bytes = sqlite3_column_int64(st, 12);
	j->measured_peak_bytes = sqlite3_column_int64(st, 13);
	j->created_at = sqlite3_column_int64(st, 14);
	j->started_at = sqlite3_column_int64(st, 15);
	j->finished_at = sqlite3_column_int64(st, 16);
	j->estimated_finish = sqlite3_column_int64(st, 17);
	j->queue_seq = sqlite3_column_int64(st, 18);
	j->retries = sqlite3_column_int(st, 19);
	if (rc < 0)
		tacod_job_clear(j);
	return rc;
}

/* 0 when the job exists, -ENOENT when not. */
static int job_exists(tacod_store *s, const char *id, taco_err *err)
{
	st_query q;
	int rc =
	    st_prep(s, &q, "find job", "SELECT 1 FROM jobs WHERE id = ?1", err);

	if (rc < 0)
		return rc;
	st_text(&q, 1, id);
	rc = st_step(&q, err);
	st_done(&q);
	if (rc == 0)
		return taco_err_set(err, -ENOENT, "no such job: %s", id);
	return rc < 0 ? rc : 0;
}

int tacod_store_job_add(tacod_store *s, tacod_job *j, taco_err *err)
{
	int64_t seq = 0;
	st_query q;
	int rc = check_job(j, err);

	if (rc < 0)
		return rc;
	rc = st_begin(s, 1, err);
	if (rc < 0)
		return rc;
	rc = st_prep(s, &q, "next queue_seq",
		     "SELECT coalesce(max(queue_seq), 0) + 1 FROM jobs", err);
	if (rc == 0) {
		rc = st_step(&q, err);
		if (rc == 1) {
			seq = sqlite3_column_int64(q.st, 0);
			rc = 0;
		}
		st_done(&q);
	}
	if (rc == 0)
		rc =
		    st_prep(s, &q, "add job",
			    "INSERT INTO jobs(" JOB_COLS ") VALUES (?1, ?2, ?3,"
			    " ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,"
			    " ?15, ?16, ?17, ?18, ?19, ?20)",
			    err);
	if (rc == 0) {
		bind_job(&q, j, seq);
		rc = st_step(&q, err);
		st_done(&q);
		if (rc == -EEXIST)
			taco_err_set(err, rc, "job %s already exists", j->id);
	}
	rc = st_end(s, rc, err);
	if (rc == 0)
		j->queue_seq = seq;
	return rc;
}

static int read_job_at(sqlite3_stmt *st, void *rows, int i, taco_err *err);

int tacod_store_job_get(tacod_store *s, const char *user, const char *id,
			tacod_job *out, taco_err *err)
{
	static const st_page_def def = {"jobs", JOB_COLS, read_job_at, NULL};

	memset(out, 0, sizeof(*out));
	return st_get(s, &def, "job", user, id, out, err);
}

/* Steps q, reading up to cap jobs into out; *more when a row was left. */
static int read_jobs(st_query *q, tacod_job *out, int cap, int *n, int *more,
		     taco_err *err)
{
	int rc;

	while ((rc = st_step(q, err)) == 1) {
		if (*n == cap) {
			if (more)
				*more = 1;
			return 0;
		}
		rc = read_job(q->st, &out[*n], err);
		if (rc < 0)
			break;
		(*n)++;
	}
	if (rc < 0) {
		for (int i = 0; i < *n; i++)
			tacod_job_clear(&out[i]);
		*n = 0;
		if (more)
			*more = 0;
	}
	return rc;
}

static int read_job_at(sqlite3_stmt *st, void *rows, int i, taco_err *err)
{
	return read_job(st, &((tacod_job *)rows)[i], err);
}

static void clear_job_at(void *rows, int i)
{
	tacod_job_clear(&((tacod_job *)rows)[i]);
}

int tacod_store_job_list(tacod_store *s, const char *user, const char *after,
			 int limit, tacod_job *out, int *n, int *has_more,
			 taco_err *err)
{
	static const st_page_def def = {"jobs", JOB_COLS, read_job_at,
					clear_job_at};

	return st_page(s, &def, user, after, limit, out, n, has_more, err);
}

int tacod_store_job_by_status(tacod_store *s, int status, tacod_job *out,
			      int cap, int *n, taco_err *err)
{
	st_query q;
	int rc;

	*n = 0;
	rc = st_check_status(status, "status", err);
	if (rc < 0)
		return rc;
	if (cap <= 0)
		return cap == 0 ? 0
				: taco_err_set(err, -EINVAL, "cap: negative");
	rc = st_prep(s, &q, "list jobs by status",
		     "SELECT " JOB_COLS " FROM jobs WHERE status = ?1"
		     " ORDER BY queue_seq LIMIT ?2",
		     err);
	if (rc < 0)
		return rc;
	st_int(&q, 1, status);
	st_int(&q, 2, cap);
	rc = read_jobs(&q, out, cap, n, NULL, err);
	st_done(&q);
	return rc;
}

int tacod_store_job_count(tacod_store *s, const char *user,
			  int64_t counts[TACOD_CANCELLED + 1], taco_err *err)
{
	int64_t c[TACOD_CANCELLED + 1] = {0};
	st_query q;
	int rc = st_check_user(user, 1, err);

	if (rc == 0)
		rc = st_prep(s, &q, "count jobs by status",
			     "SELECT status, count(*) FROM jobs"
			     " WHERE ?1 IS NULL OR user = ?1 GROUP BY status",
			     err);
	if (rc < 0)
		return rc;
	st_text(&q, 1, user);
	while ((rc = st_step(&q, err)) == 1) {
		int64_t st = sqlite3_column_int64(q.st, 0);
		if (st >= 0 && st <= TACOD_CANCELLED)
			c[st] = sqlite3_column_int64(q.st, 1);
	}
	st_done(&q);
	if (rc < 0)
		return rc;
	memcpy(counts, c, sizeof(c));
	return 0;
}

/* UPDATE of every field, only while in status `from` when from >= 0. */
static int job_update(tacod_store *s, const tacod_job *j, int from,
		      taco_err *err)
{
	st_query q;
	int rc = check_job(j, err);

	if (rc == 0 && from >= 0)
		rc = st_check_status(from, "from", err);
	if (rc < 0)
		return rc;
	rc = st_begin(s, 1, err);
	if (rc < 0)
		return rc;
	rc = st_prep(s, &q, "update job",
		     from >= 0 ? "UPDATE jobs SET " JOB_SET
				 " WHERE id = ?1 AND status = ?21"
			       : "UPDATE jobs SET " JOB_SET " WHERE id = ?1",
		     err);
	if (rc == 0) {
		bind_job(&q, j, j->queue_seq);
		if (from >= 0)
			st_int(&q, 21, from);
		rc = st_step(&q, err);
		st_done(&q);
	}
	if (rc == 0 && sqlite3_changes(s->db) == 0) {
		rc = job_exists(s, j->id, err);
		if (rc == 0)
			rc = taco_err_set(err, -EAGAIN, "job %s is not %s",
					  j->id, tacod_status_name(from));
	}
	return st_end(s, rc, err);
}

int tacod_store_job_update(tacod_store *s, const tacod_job *j, taco_err *err)
{
	return job_update(s, j, -1, err);
}

int tacod_store_job_update_from(tacod_store *s, const tacod_job *j, int from,
				taco_err *err)
{
	if (from < 0)
		return st_check_status(from, "from", err);
	return job_update(s, j, from, err);
}

int tacod_store_job_transition(tacod_store *s, const char *id, int from, int to,
			       taco_err *err)
{
	st_query q;
	int rc = st_check_str(id, TACOD_ID_MAX, 0, "id", err);

	if (rc == 0)
		rc = st_check_status(from, "from", err);
	if (rc == 0)
		rc = st_check_status(to, "to", err);
	if (rc < 0)
		return rc;
	rc = st_begin(s, 1, err);
	if (rc < 0)
		return rc;
	rc = st_prep(
	    s, &q, "move job",
	    "UPDATE jobs SET status = ?3 WHERE id = ?1 AND status = ?2", err);
	if (rc == 0) {
		st_text(&q, 1, id);
		st_int(&q, 2, from);
		st_int(&q, 3, to);
		rc = st_step(&q, err);
		st_done(&q);
	}
	if (rc == 0 && sqlite3_changes(s->db) == 0) {
		rc = job_exists(s, id, err);
		if (rc == 0)
			rc = taco_err_set(err, -EAGAIN, "job %s is not %s", id,
					  tacod_status_name(from));
	}
	return st_end(s, rc, err);
}

/* ---- events ---- */

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
	st_query q;
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
	rc = job_exists(s, job_id, err);
	if (rc == 0)
		rc = st_prep(s, &q, "next event seq",
			     "SELECT coalesce(max(seq), 0) + 1 FROM events"
			     " WHERE job_id = ?1",
			     err);
	if (rc == 0) {
		st_text(&q, 1, job_id);
		rc = st_step(&q, err);
		if (rc == 1) {
			next = sqlite3_column_int64(q.st, 0);
			rc = 0;
		}
		st_done(&q);
	}
	if (rc == 0)
		rc =
		    st_prep(s, &q, "add event",
			    "INSERT INTO events(job_id, seq, created_at, level,"
			    " type, message, data)"
			    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
			    err);
	if (rc == 0) {
		st_text(&q, 1, job_id);
		st_int(&q, 2, next);
		st_int(&q, 3, (int64_t)time(NULL));
		st_text(&q, 4, level);
		st_text(&q, 5, type);
		st_text(&q, 6, message ? message : "");
		st_text(&q, 7, data_json);
		rc = st_step(&q, err);
		st_done(&q);
	}
	rc = st_end(s, rc, err);
	if (rc == 0 && seq)
		*seq = next;
	return rc;
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

/* ---- checkpoints ---- */

int tacod_store_checkpoint_add(tacod_store *s, const tacod_checkpoint *c,
			       taco_err *err)
{
	st_query q;
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
	rc = job_exists(s, c->job_id, err);
	if (rc == 0)
		rc = st_prep(s, &q, "add checkpoint",
			     "INSERT INTO checkpoints(job_id, step, path,"
			     " created_at, metrics)"
			     " VALUES (?1, ?2, ?3, ?4, ?5)"
			     " ON CONFLICT (job_id, step) DO UPDATE SET"
			     " path = excluded.path,"
			     " created_at = excluded.created_at,"
			     " metrics = excluded.metrics",
			     err);
	if (rc == 0) {
		st_text(&q, 1, c->job_id);
		st_int(&q, 2, c->step);
		st_text(&q, 3, c->path);
		st_int(&q, 4, c->created_at);
		st_text(&q, 5, c->metrics);
		rc = st_step(&q, err);
		st_done(&q);
	}
	return st_end(s, rc, err);
}

int tacod_store_checkpoint_list(tacod_store *s, const char *job_id,
				tacod_checkpoint *out, int cap, int *n,
				taco_err *err)
{
	st_query q;
	int rc;

	*n = 0;
	rc = st_check_str(job_id, TACOD_ID_MAX, 0, "job_id", err);
	if (rc < 0)
		return rc;
	if (cap <= 0)
		return cap == 0 ? 0
				: taco_err_set(err, -EINVAL, "cap: negative");
	rc = st_prep(s, &q, "list checkpoints",
		     "SELECT job_id, step, path, created_at, metrics FROM"
		     " (SELECT * FROM checkpoints WHERE job_id = ?1"
		     " ORDER BY step DESC LIMIT ?2) ORDER BY step",
		     err);
	if (rc < 0)
		return rc;
	st_text(&q, 1, job_id);
	st_int(&q, 2, cap);
	while ((rc = st_step(&q, err)) == 1 && *n < cap) {
		tacod_checkpoint *c = &out[*n];

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
	if (rc == 1)
		rc = 0;
	if (rc < 0) {
		for (int i = 0; i < *n; i++) {
			free(out[i].metrics);
			out[i].metrics = NULL;
		}
		*n = 0;
	}
	return rc;
}

int tacod_store_checkpoint_delete(tacod_store *s, const char *job_id,
				  int64_t step, taco_err *err)
{
	st_query q;
	int rc = st_check_str(job_id, TACOD_ID_MAX, 0, "job_id", err);

	if (rc < 0)
		return rc;
	rc = st_begin(s, 1, err);
	if (rc < 0)
		return rc;
	rc = st_prep(s, &q, "delete checkpoint",
		     "DELETE FROM checkpoints WHERE job_id = ?1 AND step = ?2",
		     err);
	if (rc == 0) {
		st_text(&q, 1, job_id);
		st_int(&q, 2, step);
		rc = st_step(&q, err);
		st_done(&q);
	}
	if (rc == 0 && sqlite3_changes(s->db) == 0)
		rc = taco_err_set(err, -ENOENT,
				  "no checkpoint of job %s at step %lld",
				  job_id, (long long)step);
	return st_end(s, rc, err);
}
