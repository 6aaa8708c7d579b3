/* store/schema.c: opening the SQLite store (its pragmas and schema), closing
 * it, the integrity check and relaxed commits. */
#include "daemon/store/internal.h"
#include "daemon/store/store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Version 2 adds webhook_deliveries, 3 slurm_jobs, 4 two columns of jobs
 * (model_deleted_at, result_file). The steps only create what is missing,
 * so their order does not matter to a database that skipped one. */
#define SCHEMA_VERSION 4

/* Version 1. The list indexes: (user, created_at) and (created_at) serve the
 * newest-first lists (every index ends in the rowid, the tie-break), the
 * primary key (job_id, seq) serves a job's events in order, (status,
 * queue_seq) the scheduler's view and (queue_seq) the next queue_seq. */
static const char schema_v1[] =
    "CREATE TABLE IF NOT EXISTS files ("
    " id TEXT PRIMARY KEY NOT NULL,"
    " user TEXT NOT NULL,"
    " filename TEXT NOT NULL,"
    " purpose TEXT NOT NULL,"
    " sha256 TEXT NOT NULL,"
    " path TEXT NOT NULL,"
    " bytes INTEGER NOT NULL,"
    " created_at INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS files_user_created ON files(user, created_at);"
    "CREATE INDEX IF NOT EXISTS files_created ON files(created_at);"
    "CREATE INDEX IF NOT EXISTS files_sha256 ON files(sha256);"
    "CREATE TABLE IF NOT EXISTS jobs ("
    " id TEXT PRIMARY KEY NOT NULL,"
    " user TEXT NOT NULL,"
    " status INTEGER NOT NULL CHECK (status BETWEEN 0 AND 6),"
    " model TEXT NOT NULL,"
    " training_file TEXT NOT NULL,"
    " validation_file TEXT NOT NULL,"
    " suffix TEXT NOT NULL,"
    " request TEXT,"
    " error TEXT,"
    " fine_tuned_model TEXT NOT NULL,"
    " output_dir TEXT NOT NULL,"
    " trained_tokens INTEGER NOT NULL,"
    " planned_bytes INTEGER NOT NULL,"
    " measured_peak_bytes INTEGER NOT NULL,"
    " created_at INTEGER NOT NULL,"
    " started_at INTEGER NOT NULL,"
    " finished_at INTEGER NOT NULL,"
    " estimated_finish INTEGER NOT NULL,"
    " queue_seq INTEGER NOT NULL,"
    " retries INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS jobs_user_created ON jobs(user, created_at);"
    "CREATE INDEX IF NOT EXISTS jobs_created ON jobs(created_at);"
    "CREATE INDEX IF NOT EXISTS jobs_status_queue ON jobs(status, queue_seq);"
    "CREATE INDEX IF NOT EXISTS jobs_queue ON jobs(queue_seq);"
    "CREATE TABLE IF NOT EXISTS events ("
    " job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
    " seq INTEGER NOT NULL,"
    " created_at INTEGER NOT NULL,"
    " level TEXT NOT NULL,"
    " type TEXT NOT NULL,"
    " message TEXT NOT NULL,"
    " data TEXT,"
    " PRIMARY KEY (job_id, seq));"
    "CREATE TABLE IF NOT EXISTS checkpoints ("
    " job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
    " step INTEGER NOT NULL,"
    " path TEXT NOT NULL,"
    " created_at INTEGER NOT NULL,"
    " metrics TEXT,"
    " PRIMARY KEY (job_id, step));"
    "CREATE TABLE IF NOT EXISTS idempotency ("
    " user TEXT NOT NULL,"
    " idem_key TEXT NOT NULL,"
    " request_hash TEXT NOT NULL,"
    " status INTEGER NOT NULL,"
    " body TEXT NOT NULL,"
    " created_at INTEGER NOT NULL,"
    " PRIMARY KEY (user, idem_key));"
    "CREATE INDEX IF NOT EXISTS idempotency_created"
    " ON idempotency(created_at);";

/* Version 2: the webhook deliveries to make (store/webhooks.c), a durable
 * queue: (state, next_attempt_at) serves the next due delivery, (job_id,
 * type, url, created_at) the progress events' rate. */
static const char schema_v2[] =
    "CREATE TABLE IF NOT EXISTS webhook_deliveries ("
    " id INTEGER PRIMARY KEY,"
    " url TEXT NOT NULL,"
    " event_id TEXT NOT NULL,"
    " type TEXT NOT NULL,"
    " job_id TEXT NOT NULL,"
    " payload TEXT NOT NULL,"
    " attempts INTEGER NOT NULL,"
    " next_attempt_at INTEGER NOT NULL,"
    " state INTEGER NOT NULL CHECK (state BETWEEN 0 AND 2),"
    " last_error TEXT NOT NULL,"
    " created_at INTEGER NOT NULL,"
    " finished_at INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS webhook_deliveries_due"
    " ON webhook_deliveries(state, next_attempt_at);"
    "CREATE INDEX IF NOT EXISTS webhook_deliveries_job"
    " ON webhook_deliveries(job_id, type, url, created_at);";
/* Version 3: the Slurm batch job of each tacod job submitted to a Slurm
 * cluster (store/slurm.c). */
static const char schema_v3_slurm[] =
    "CREATE TABLE IF NOT EXISTS slurm_jobs ("
    " job_id TEXT PRIMARY KEY NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
    " slurm_id INTEGER NOT NULL,"
    " events_offset INTEGER NOT NULL,"
    " submitted_at INTEGER NOT NULL);";

/* Version 4: the columns jobs gained, each added when it is missing (SQLite
 * has no ADD COLUMN IF NOT EXISTS). */
static const struct {
	const char *name, *sql;
} schema_v4_jobs[] = {
    {"model_deleted_at", "ALTER TABLE jobs ADD COLUMN model_deleted_at"
			 " INTEGER NOT NULL DEFAULT 0"},
    {"result_file", "ALTER TABLE jobs ADD COLUMN result_file"
		    " TEXT NOT NULL DEFAULT ''"},
};

static int add_job_columns(tacod_store *s, taco_err *err)
{
	int rc = 0;

	for (size_t i = 0;
	     rc == 0 && i < sizeof(schema_v4_jobs) / sizeof(*schema_v4_jobs);
	     i++) {
		int64_t have = 0;
		rc = st_exec(s, "read jobs columns",
			     "SELECT count(*) FROM pragma_table_info('jobs')"
			     " WHERE name = ?1",
			     ST_ARGS(ST_TEXT(schema_v4_jobs[i].name)),
			     st_read_int64, &have, err);
		if (rc == 1)
			rc = 0;
		if (rc == 0 && !have)
			rc = st_exec_sql(s, "create schema v4",
					 schema_v4_jobs[i].sql, err);
	}
	return rc;
}

static int pragma(tacod_store *s, const char *sql, const char *expect,
		  taco_err *err)
{
	st_query q;
	int rc = st_prep(s, &q, sql, sql, err);

	if (rc < 0)
		return rc;
	rc = st_step(&q, err);
	if (rc == 1 && expect) {
		const char *v = (const char *)sqlite3_column_text(q.st, 0);
		if (!v || strcmp(v, expect) != 0)
			rc = taco_err_set(err, -EIO,
					  "store: %s: got %s, wanted %s", sql,
					  v ? v : "nothing", expect);
	}
	while (rc == 1)
		rc = st_step(&q, err);
	st_done(&q);
	return rc;
}

int tacod_store_relaxed(tacod_store *s, int on, taco_err *err)
{
	return pragma(
	    s, on ? "PRAGMA synchronous = NORMAL" : "PRAGMA synchronous = FULL",
	    NULL, err);
}

static int schema_update(tacod_store *s, taco_err *err)
{
	int64_t version = 0;
	int rc = st_begin(s, 1, err);

	if (rc < 0)
		return rc;
	rc = st_exec_sql(s, "create schema_version",
			 "CREATE TABLE IF NOT EXISTS schema_version ("
			 " version INTEGER NOT NULL)",
			 err);
	if (rc == 0)
		rc = st_exec(s, "read schema_version",
			     "SELECT max(version) FROM schema_version", NULL,
			     st_read_int64, &version, err);
	if (rc == 1)
		rc = 0;
	if (rc == 0 && version > SCHEMA_VERSION)
		rc = taco_err_set(err, -ENOTSUP,
				  "store: database schema version %lld is "
				  "newer than this tacod's (%d)",
				  (long long)version, SCHEMA_VERSION);
	/* Version 1 is the first: its CREATE ... IF NOT EXISTS also repairs
	 * a missing index. Later versions add their steps here. */
	if (rc == 0)
		rc = st_exec_sql(s, "create schema", schema_v1, err);
	/* a version 1 store gains the table on its first open */
	if (rc == 0)
		rc = st_exec_sql(s, "create schema v2", schema_v2, err);
	if (rc == 0)
		rc = st_exec_sql(s, "create schema v3", schema_v3_slurm, err);
	if (rc == 0)
		rc = add_job_columns(s, err);
	if (rc == 0 && version != SCHEMA_VERSION) {
		rc = st_exec_sql(s, "set schema_version",
				 "DELETE FROM schema_version", err);
		if (rc == 0)
			rc = st_exec(s, "set schema_version",
				     "INSERT INTO schema_version(version)"
				     " VALUES (?1)",
				     ST_ARGS(ST_INT(SCHEMA_VERSION)), NULL,
				     NULL, err);
	}
	return st_end(s, rc, err);
}

int tacod_store_open(const char *path, tacod_store **out, taco_err *err)
{
	tacod_store *s;
	int rc;

	*out = NULL;
	if (!path || !*path)
		return taco_err_set(err, -EINVAL, "store: empty path");
	s = calloc(1, sizeof(*s));
	if (!s)
		return taco_err_set(err, -ENOMEM, "store: out of memory");
	rc = sqlite3_open_v2(path, &s->db,
			     SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
	if (rc != SQLITE_OK) {
		rc = s->db ? st_fail(s, rc, "open", err)
			   : taco_err_set(err, -ENOMEM, "store: open");
		taco_err_prefix(err, rc, "%s", path);
		tacod_store_close(s);
		return rc;
	}
	sqlite3_extended_result_codes(s->db, 1);
	sqlite3_busy_timeout(s->db, 5000);
	/* No writes to the schema or shadow tables through SQL. */
	sqlite3_db_config(s->db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
	rc = pragma(s, "PRAGMA journal_mode = WAL", "wal", err);
	if (rc == 0)
		rc = pragma(s, "PRAGMA synchronous = FULL", NULL, err);
	if (rc == 0)
		rc = pragma(s, "PRAGMA foreign_keys = ON", NULL, err);
	if (rc == 0)
		rc = pragma(s, "PRAGMA foreign_keys", "1", err);
	if (rc == 0)
		rc = pragma(s, "PRAGMA trusted_schema = OFF", NULL, err);
	if (rc == 0)
		rc = schema_update(s, err);
	if (rc < 0) {
		taco_err_prefix(err, rc, "%s", path);
		tacod_store_close(s);
		return rc;
	}
	*out = s;
	return 0;
}

void tacod_store_close(tacod_store *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->n_cache; i++) {
		sqlite3_finalize(s->cache[i].st);
		free(s->cache[i].sql);
	}
	sqlite3_close_v2(s->db);
	free(s);
}

/* The first row of PRAGMA integrity_check: "ok", or the first problem. */
static int read_integrity(sqlite3_stmt *st, void *ctx, taco_err *err)
{
	const char *v = (const char *)sqlite3_column_text(st, 0);

	return v && strcmp(v, "ok") == 0
		   ? 0
		   : taco_err_set(err, -EIO, "store: integrity check: %s",
				  v ? v : "no answer");
}

int tacod_store_integrity_check(tacod_store *s, taco_err *err)
{
	int rc = st_exec(s, "integrity check", "PRAGMA integrity_check", NULL,
			 read_integrity, NULL, err);

	if (rc == 1)
		rc = 0;
	else if (rc == 0)
		rc = taco_err_set(err, -EIO,
				  "store: integrity check: no answer");
	return rc;
}
