/* store/jobs.c: jobs in the store: their rows, pages, the scheduler's views
 * (by status, counts) and the compare-and-set updates. Their events are in
 * store/events.c, their checkpoints in store/checkpoints.c. */
#include "daemon/store/internal.h"
#include "daemon/store/store.h"

#include <errno.h>
#include <string.h>

/* Column order of every job statement: ?1 is id, ?2..?22 the rest. */
#define JOB_COLS                                                               \
	"id, user, status, model, training_file, validation_file, suffix,"     \
	" request, error, fine_tuned_model, output_dir, trained_tokens,"       \
	" planned_bytes, measured_peak_bytes, created_at, started_at,"         \
	" finished_at, estimated_finish, queue_seq, retries,"                  \
	" model_deleted_at, result_file"

#define JOB_SET                                                                \
	"user = ?2, status = ?3, model = ?4, training_file = ?5,"              \
	" validation_file = ?6, suffix = ?7, request = ?8, error = ?9,"        \
	" fine_tuned_model = ?10, output_dir = ?11, trained_tokens = ?12,"     \
	" planned_bytes = ?13, measured_peak_bytes = ?14, created_at = ?15,"   \
	" started_at = ?16, finished_at = ?17, estimated_finish = ?18,"        \
	" queue_seq = ?19, retries = ?20, model_deleted_at = ?21,"             \
	" result_file = ?22"

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
	if (rc == 0)
		rc = st_check_str(j->result_file, sizeof(j->result_file), 1,
				  "result_file", err);
	if (rc == 0 && j->retries < 0)
		rc = taco_err_set(err, -EINVAL, "retries: negative");
	return rc;
}

/* The binds of a job statement: the fields as ?1..?22 with queue_seq as
 * ?19, and from as ?23 when from >= 0; ST_ARG_END after the last. */
typedef struct job_args {
	st_arg v[24];
} job_args;

static job_args bind_job(const tacod_job *j, int64_t queue_seq, int from)
{
	job_args a = {{
	    ST_TEXT(j->id),
	    ST_TEXT(j->user),
	    ST_INT(j->status),
	    ST_TEXT(j->model),
	    ST_TEXT(j->training_file),
	    ST_TEXT(j->validation_file),
	    ST_TEXT(j->suffix),
	    ST_TEXT(j->request),
	    ST_TEXT(j->error),
	    ST_TEXT(j->fine_tuned_model),
	    ST_TEXT(j->output_dir),
	    ST_INT(j->trained_tokens),
	    ST_INT(j->planned_bytes),
	    ST_INT(j->measured_peak_bytes),
	    ST_INT(j->created_at),
	    ST_INT(j->started_at),
	    ST_INT(j->finished_at),
	    ST_INT(j->estimated_finish),
	    ST_INT(queue_seq),
	    ST_INT(j->retries),
	    ST_INT(j->model_deleted_at),
	    ST_TEXT(j->result_file),
	}};

	if (from >= 0)
		a.v[22] = ST_INT(from);
	return a;
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
	j->model_deleted_at = sqlite3_column_int64(st, 20);
	if (rc == 0)
		rc = st_col_str(st, 21, j->result_file, sizeof(j->result_file),
				"result_file", err);
	if (rc < 0)
		tacod_job_clear(j);
	return rc;
}

int st_job_exists(tacod_store *s, const char *id, taco_err *err)
{
	int rc = st_exec(s, "find job", "SELECT 1 FROM jobs WHERE id = ?1",
			 ST_ARGS(ST_TEXT(id)), NULL, NULL, err);

	if (rc == 0)
		return taco_err_set(err, -ENOENT, "no such job: %s", id);
	return rc < 0 ? rc : 0;
}

int tacod_store_job_add(tacod_store *s, tacod_job *j, taco_err *err)
{
	int64_t seq = 0;
	int rc = check_job(j, err);

	if (rc < 0)
		return rc;
	rc = st_begin(s, 1, err);
	if (rc < 0)
		return rc;
	rc = st_exec(s, "next queue_seq",
		     "SELECT coalesce(max(queue_seq), 0) + 1 FROM jobs", NULL,
		     st_read_int64, &seq, err);
	if (rc == 1)
		rc = 0;
	if (rc == 0) {
		job_args a = bind_job(j, seq, -1);

		rc =
		    st_exec(s, "add job",
			    "INSERT INTO jobs(" JOB_COLS ") VALUES (?1, ?2, ?3,"
			    " ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,"
			    " ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22)",
			    a.v, NULL, NULL, err);
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

static const st_page_def job_page = {"jobs", JOB_COLS, read_job_at,
				     clear_job_at};

int tacod_store_job_list(tacod_store *s, const char *user, const char *after,
			 int limit, tacod_job *out, int *n, int *has_more,
			 taco_err *err)
{
	return st_page(s, &job_page, user, after, limit, out, n, has_more, err);
}

/* Every pair of the filter is among the request's metadata: matched pair
 * by pair with json_each, so no key is ever spliced into a JSON path. */
int tacod_store_job_list_metadata(tacod_store *s, const char *user,
				  const char *metadata_json, const char *after,
				  int limit, tacod_job *out, int *n,
				  int *has_more, taco_err *err)
{
	int rc = st_check_text(metadata_json, 1, "metadata filter", err);

	if (rc < 0)
		return rc;
	if (!metadata_json)
		return tacod_store_job_list(s, user, after, limit, out, n,
					    has_more, err);
	return st_page_where(
	    s, &job_page, user,
	    "NOT EXISTS (SELECT 1 FROM json_each(?5) AS f WHERE NOT EXISTS"
	    " (SELECT 1 FROM json_each(request, '$.metadata') AS m"
	    " WHERE m.key = f.key AND m.type = 'text' AND m.value = f.value))",
	    metadata_json, after, limit, out, n, has_more, err);
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
	job_args a;
	int rc = check_job(j, err);

	if (rc == 0 && from >= 0)
		rc = st_check_status(from, "from", err);
	if (rc < 0)
		return rc;
	rc = st_begin(s, 1, err);
	if (rc < 0)
		return rc;
	a = bind_job(j, j->queue_seq, from);
	rc = st_exec(s, "update job",
		     from >= 0 ? "UPDATE jobs SET " JOB_SET
				 " WHERE id = ?1 AND status = ?23"
			       : "UPDATE jobs SET " JOB_SET " WHERE id = ?1",
		     a.v, NULL, NULL, err);
	if (rc == 0 && st_changes(s) == 0) {
		rc = st_job_exists(s, j->id, err);
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
	rc = st_exec(
	    s, "move job",
	    "UPDATE jobs SET status = ?3 WHERE id = ?1 AND status = ?2",
	    ST_ARGS(ST_TEXT(id), ST_INT(from), ST_INT(to)), NULL, NULL, err);
	if (rc == 0 && st_changes(s) == 0) {
		rc = st_job_exists(s, id, err);
		if (rc == 0)
			rc = taco_err_set(err, -EAGAIN, "job %s is not %s", id,
					  tacod_status_name(from));
	}
	return st_end(s, rc, err);
}

int tacod_store_job_started(tacod_store *s, const char *id, int64_t t,
			    taco_err *err)
{
	int rc = st_check_str(id, TACOD_ID_MAX, 0, "id", err);

	if (rc < 0)
		return rc;
	rc = st_begin(s, 1, err);
	if (rc < 0)
		return rc;
	rc = st_exec(s, "set started_at",
		     "UPDATE jobs SET started_at = ?2"
		     " WHERE id = ?1 AND started_at = 0",
		     ST_ARGS(ST_TEXT(id), ST_INT(t)), NULL, NULL, err);
	if (rc == 0 && st_changes(s) == 0)
		rc = st_job_exists(s, id, err); /* started already: 0 */
	return st_end(s, rc, err);
}

static int read_model(sqlite3_stmt *st, tacod_model_row *m, taco_err *err)
{
	int rc = st_col_str(st, 0, m->name, sizeof(m->name), "fine_tuned_model",
			    err);

	if (rc == 0)
		rc = st_col_str(st, 1, m->parent, sizeof(m->parent),
				"job model", err);
	if (rc == 0)
		rc = st_col_str(st, 2, m->user, sizeof(m->user), "job user",
				err);
	if (rc == 0)
		rc = st_col_str(st, 3, m->job_id, sizeof(m->job_id), "job id",
				err);
	m->created = sqlite3_column_int64(st, 4);
	return rc;
}

int tacod_store_model_list(tacod_store *s, const char *user,
			   tacod_model_row *out, int cap, int *n, int *has_more,
			   taco_err *err)
{
	st_query q;
	int rc;

	*n = 0;
	*has_more = 0;
	if (cap < 0)
		return taco_err_set(err, -EINVAL, "cap: negative");
	rc = st_prep(s, &q, "list models",
		     "SELECT fine_tuned_model, model, user, id, finished_at"
		     " FROM jobs WHERE status = ?1 AND fine_tuned_model != ''"
		     " AND model_deleted_at = 0 AND (?2 IS NULL OR user = ?2)"
		     " ORDER BY finished_at DESC, rowid DESC",
		     err);
	if (rc < 0)
		return rc;
	st_int(&q, 1, TACOD_SUCCEEDED);
	st_text(&q, 2, user);
	while ((rc = st_step(&q, err)) == 1) {
		if (*n == cap) {
			*has_more = 1;
			rc = 0;
			break;
		}
		memset(&out[*n], 0, sizeof(out[*n]));
		if ((rc = read_model(q.st, &out[*n], err)) < 0)
			break;
		(*n)++;
	}
	st_done(&q);
	if (rc < 0) {
		*n = 0;
		*has_more = 0;
	}
	return rc < 0 ? rc : 0;
}

int tacod_store_job_set_result_file(tacod_store *s, const char *id,
				    const char *file_id, taco_err *err)
{
	int rc = st_check_str(id, TACOD_ID_MAX, 0, "id", err);

	if (rc == 0)
		rc = st_check_str(file_id, TACOD_ID_MAX, 1, "result_file", err);
	if (rc < 0)
		return rc;
	rc = st_begin(s, 1, err);
	if (rc < 0)
		return rc;
	rc = st_exec(s, "set result_file",
		     "UPDATE jobs SET result_file = ?2 WHERE id = ?1",
		     ST_ARGS(ST_TEXT(id), ST_TEXT(file_id)), NULL, NULL, err);
	if (rc == 0 && st_changes(s) == 0)
		rc = st_job_exists(s, id, err); /* the same name already: 0 */
	return st_end(s, rc, err);
}
