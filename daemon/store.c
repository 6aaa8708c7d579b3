/* store.c: opening the SQLite store, its schema, the shared helpers, ids,
 * files and idempotency keys. Jobs, events and checkpoints are in
 * store_jobs.c. Every statement is a constant SQL text with bound
 * parameters; every write is one BEGIN IMMEDIATE ... COMMIT. */
#include "store.h"
#include "store_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define SCHEMA_VERSION 1

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

/* ---- helpers shared with store_jobs.c ---- */

int st_fail(tacod_store *s, int rc, const char *what, taco_err *err)
{
	const char *msg = s && s->db ? sqlite3_errmsg(s->db) : "";
	int code;

	switch (rc & 0xff) {
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		code = -ETIMEDOUT; /* busy_timeout ran out */
		break;
	case SQLITE_NOMEM:
		code = -ENOMEM;
		break;
	case SQLITE_READONLY:
		code = -EROFS;
		break;
	case SQLITE_FULL:
		code = -ENOSPC;
		break;
	case SQLITE_TOOBIG:
		code = -E2BIG;
		break;
	case SQLITE_PERM:
	case SQLITE_AUTH:
		code = -EACCES;
		break;
	case SQLITE_CONSTRAINT:
		if (rc == SQLITE_CONSTRAINT_PRIMARYKEY ||
		    rc == SQLITE_CONSTRAINT_UNIQUE)
			code = -EEXIST;
		else if (rc == SQLITE_CONSTRAINT_FOREIGNKEY)
			code = -ENOENT;
		else
			code = -EINVAL;
		break;
	case SQLITE_IOERR:
	case SQLITE_CANTOPEN: {
		int e = s && s->db ? sqlite3_system_errno(s->db) : 0;
		code = e > 0 ? -e : -EIO;
		break;
	}
	default: /* CORRUPT, NOTADB, ... */
		code = -EIO;
		break;
	}
	return taco_err_set(err, code, "store: %s: %s", what, msg);
}

int st_prep(tacod_store *s, st_query *q, const char *what, const char *sql,
	    taco_err *err)
{
	int rc;

	st_cached *c = NULL;

	q->s = s;
	q->st = NULL;
	q->what = what;
	q->rc = SQLITE_OK;
	q->cached = NULL;
	for (int i = 0; i < s->n_cache; i++)
		if (!strcmp(s->cache[i].sql, sql)) {
			c = &s->cache[i];
			break;
		}
	if (c && !c->busy) {
		c->busy = 1;
		q->st = c->st;
		q->cached = c;
		return 0;
	}
	rc = sqlite3_prepare_v3(
	    s->db, sql, -1, c ? 0 : SQLITE_PREPARE_PERSISTENT, &q->st, NULL);
	if (rc != SQLITE_OK) {
		sqlite3_finalize(q->st);
		q->st = NULL;
		return st_fail(s, rc, what, err);
	}
	/* a statement in use (nested calls) gets a private copy */
	if (!c && s->n_cache < ST_CACHE_MAX) {
		c = &s->cache[s->n_cache];
		if ((c->sql = strdup(sql))) {
			c->st = q->st;
			c->busy = 1;
			q->cached = c;
			s->n_cache++;
		}
	}
	return 0;
}

void st_text(st_query *q, int i, const char *v)
{
	int rc;

	if (q->rc != SQLITE_OK)
		return;
	/* SQLITE_STATIC: every value outlives the statement's last step. */
	rc = v ? sqlite3_bind_text(q->st, i, v, -1, SQLITE_STATIC)
	       : sqlite3_bind_null(q->st, i);
	if (rc != SQLITE_OK)
		q->rc = rc;
}

void st_int(st_query *q, int i, int64_t v)
{
	int rc;

	if (q->rc != SQLITE_OK)
		return;
	rc = sqlite3_bind_int64(q->st, i, (sqlite3_int64)v);
	if (rc != SQLITE_OK)
		q->rc = rc;
}

int st_step(st_query *q, taco_err *err)
{
	int rc;

	if (q->rc != SQLITE_OK)
		return st_fail(q->s, q->rc, q->what, err);
	rc = sqlite3_step(q->st);
	if (rc == SQLITE_ROW)
		return 1;
	if (rc == SQLITE_DONE)
		return 0;
	q->rc = rc;
	return st_fail(q->s, rc, q->what, err);
}

void st_done(st_query *q)
{
	if (q->cached) {
		/* ready for the next use; bound strings are the caller's */
		sqlite3_reset(q->st);
		sqlite3_clear_bindings(q->st);
		q->cached->busy = 0;
		q->cached = NULL;
	} else {
		sqlite3_finalize(q->st);
	}
	q->st = NULL;
}

static int st_exec_sql(tacod_store *s, const char *what, const char *sql,
		       taco_err *err)
{
	int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);

	return rc == SQLITE_OK ? 0 : st_fail(s, rc, what, err);
}

int st_begin(tacod_store *s, int write, taco_err *err)
{
	int rc = 0;

	if (s->tx_depth == 0)
		rc = st_exec_sql(s, "begin",
				 write ? "BEGIN IMMEDIATE" : "BEGIN", err);
	if (rc == 0)
		s->tx_depth++;
	return rc;
}

int st_end(tacod_store *s, int rc, taco_err *err)
{
	if (--s->tx_depth > 0) {
		if (rc < 0)
			s->tx_failed = 1;
		return rc;
	}
	if (rc == 0 && s->tx_failed)
		rc = taco_err_set(err, -EIO,
				  "store: an earlier step of the "
				  "transaction failed");
	s->tx_failed = 0;
	if (rc == 0)
		rc = st_exec_sql(s, "commit", "COMMIT", err);
	if (rc < 0 && !sqlite3_get_autocommit(s->db))
		sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
	return rc;
}

static int pragma(tacod_store *s, const char *sql, const char *expect,
		  taco_err *err);

int tacod_store_relaxed(tacod_store *s, int on, taco_err *err)
{
	return pragma(
	    s, on ? "PRAGMA synchronous = NORMAL" : "PRAGMA synchronous = FULL",
	    NULL, err);
}

int tacod_store_tx_begin(tacod_store *s, taco_err *err)
{
	return st_begin(s, 1, err);
}

int tacod_store_tx_end(tacod_store *s, int rc, taco_err *err)
{
	return st_end(s, rc, err);
}

int st_col_str(sqlite3_stmt *st, int col, char *buf, size_t size,
	       const char *field, taco_err *err)
{
	const unsigned char *v = sqlite3_column_text(st, col);
	size_t n = (size_t)sqlite3_column_bytes(st, col);

	if (!v) {
		buf[0] = 0;
		return 0;
	}
	if (n >= size)
		return taco_err_set(err, -EIO,
				    "store: stored %s is %zu bytes, longer "
				    "than %zu",
				    field, n, size - 1);
	memcpy(buf, v, n);
	buf[n] = 0;
	return 0;
}

int st_col_dup(sqlite3_stmt *st, int col, char **out, const char *field,
	       taco_err *err)
{
	const unsigned char *v = sqlite3_column_text(st, col);
	size_t n = (size_t)sqlite3_column_bytes(st, col);

	*out = NULL;
	if (!v) {
		if (sqlite3_column_type(st, col) == SQLITE_NULL)
			return 0;
		return taco_err_set(err, -ENOMEM, "store: reading %s", field);
	}
	*out = malloc(n + 1);
	if (!*out)
		return taco_err_set(err, -ENOMEM, "store: reading %s", field);
	memcpy(*out, v, n);
	(*out)[n] = 0;
	return 0;
}

int st_check_str(const char *v, size_t size, int allow_empty, const char *field,
		 taco_err *err)
{
	size_t n;

	if (!v)
		return taco_err_set(err, -EINVAL, "%s: missing", field);
	n = strnlen(v, size);
	if (n >= size)
		return taco_err_set(err, -EINVAL, "%s: longer than %zu bytes",
				    field, size - 1);
	if (n == 0 && !allow_empty)
		return taco_err_set(err, -EINVAL, "%s: empty", field);
	return 0;
}

int st_check_text(const char *v, int allow_null, const char *field,
		  taco_err *err)
{
	if (!v)
		return allow_null
			   ? 0
			   : taco_err_set(err, -EINVAL, "%s: missing", field);
	if (strnlen(v, (size_t)TACOD_TEXT_MAX + 1) > (size_t)TACOD_TEXT_MAX)
		return taco_err_set(err, -EINVAL, "%s: longer than %d bytes",
				    field, TACOD_TEXT_MAX);
	return 0;
}

int st_check_user(const char *user, int allow_null, taco_err *err)
{
	if (!user && allow_null)
		return 0;
	return st_check_str(user, TACOD_USER_MAX, 0, "user", err);
}

int st_check_status(int status, const char *field, taco_err *err)
{
	if (status < TACOD_VALIDATING || status > TACOD_CANCELLED)
		return taco_err_set(err, -EINVAL, "%s: no such status %d",
				    field, status);
	return 0;
}

int st_clamp_limit(int limit)
{
	if (limit < 1)
		return 1;
	return limit > TACOD_LIST_MAX ? TACOD_LIST_MAX : limit;
}

int st_anchor(tacod_store *s, const char *table, const char *user,
	      const char *after, int64_t *created_at, int64_t *rowid,
	      taco_err *err)
{
	int is_files = strcmp(table, "files") == 0;
	st_query q;
	int rc;

	*created_at = INT64_MAX;
	*rowid = INT64_MAX;
	if (!after || !*after)
		return 0;
	rc = st_check_str(after, TACOD_ID_MAX, 0, "after", err);
	if (rc < 0)
		return rc;
	rc = st_prep(s, &q, "find the list's start",
		     is_files ? "SELECT created_at, rowid FROM files"
				" WHERE id = ?1 AND (?2 IS NULL OR user = ?2)"
			      : "SELECT created_at, rowid FROM jobs"
				" WHERE id = ?1 AND (?2 IS NULL OR user = ?2)",
		     err);
	if (rc < 0)
		return rc;
	st_text(&q, 1, after);
	st_text(&q, 2, user);
	rc = st_step(&q, err);
	if (rc == 1) {
		*created_at = sqlite3_column_int64(q.st, 0);
		*rowid = sqlite3_column_int64(q.st, 1);
		rc = 0;
	} else if (rc == 0) {
		rc = taco_err_set(err, -ENOENT, "after: no such %s: %s",
				  is_files ? "file" : "job", after);
	}
	st_done(&q);
	return rc;
}

/* ---- ids ---- */

static int random_bytes(unsigned char *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = getrandom(buf + got, n - got, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		got += (size_t)r;
	}
	if (got == n)
		return 0;
	/* No getrandom (an old kernel or a seccomp filter): the device. */
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	got = 0;
	while (got < n) {
		ssize_t r = read(fd, buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	return got == n ? 0 : -1;
}

void tacod_new_id(const char *prefix, char out[TACOD_ID_MAX])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char b[12];
	char tail[2 * sizeof(b) + 1];
	size_t room, plen;

	if (random_bytes(b, sizeof(b)) < 0) {
		/* No randomness to be had: unique but guessable. Ids are
		 * names, not secrets (ownership is checked on every access). */
		static uint64_t counter;
		struct timespec ts;
		uint64_t x;

		clock_gettime(CLOCK_REALTIME, &ts);
		x = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
		x ^= (uint64_t)getpid() << 40;
		x += ++counter * 0x9e3779b97f4a7c15u;
		for (size_t i = 0; i < sizeof(b); i++) {
			x ^= x >> 31;
			x *= 0xbf58476d1ce4e5b9u;
			b[i] = (unsigned char)(x >> 56);
		}
	}
	for (size_t i = 0; i < sizeof(b); i++) {
		tail[2 * i] = hex[b[i] >> 4];
		tail[2 * i + 1] = hex[b[i] & 15];
	}
	tail[sizeof(tail) - 1] = 0;
	prefix = prefix ? prefix : "";
	plen = strlen(prefix);
	room = TACOD_ID_MAX - sizeof(tail); /* prefix bytes that fit */
	if (plen > room)
		plen = room;
	memcpy(out, prefix, plen);
	memcpy(out + plen, tail, sizeof(tail));
}

/* ---- open, schema, close ---- */

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

static int schema_update(tacod_store *s, taco_err *err)
{
	int64_t version = 0;
	st_query q;
	int rc = st_begin(s, 1, err);

	if (rc < 0)
		return rc;
	rc = st_exec_sql(s, "create schema_version",
			 "CREATE TABLE IF NOT EXISTS schema_version ("
			 " version INTEGER NOT NULL)",
			 err);
	if (rc == 0)
		rc = st_prep(s, &q, "read schema_version",
			     "SELECT max(version) FROM schema_version", err);
	if (rc == 0) {
		rc = st_step(&q, err);
		if (rc == 1) {
			version = sqlite3_column_int64(q.st, 0);
			rc = 0;
		}
		st_done(&q);
	}
	if (rc == 0 && version > SCHEMA_VERSION)
		rc = taco_err_set(err, -ENOTSUP,
				  "store: database schema version %lld is "
				  "newer than this tacod's (%d)",
				  (long long)version, SCHEMA_VERSION);
	/* Version 1 is the first: its CREATE ... IF NOT EXISTS also repairs
	 * a missing index. Later versions add their steps here. */
	if (rc == 0)
		rc = st_exec_sql(s, "create schema", schema_v1, err);
	if (rc == 0 && version != SCHEMA_VERSION) {
		rc = st_exec_sql(s, "set schema_version",
				 "DELETE FROM schema_version", err);
		if (rc == 0)
			rc = st_prep(s, &q, "set schema_version",
				     "INSERT INTO schema_version(version)"
				     " VALUES (?1)",
				     err);
		if (rc == 0) {
			st_int(&q, 1, SCHEMA_VERSION);
			rc = st_step(&q, err);
			st_done(&q);
		}
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

int tacod_store_integrity_check(tacod_store *s, taco_err *err)
{
	st_query q;
	int rc =
	    st_prep(s, &q, "integrity check", "PRAGMA integrity_check", err);

	if (rc < 0)
		return rc;
	rc = st_step(&q, err);
	if (rc == 1) {
		const char *v = (const char *)sqlite3_column_text(q.st, 0);
		rc = v && strcmp(v, "ok") == 0
			 ? 0
			 : taco_err_set(err, -EIO, "store: integrity check: %s",
					v ? v : "no answer");
	} else if (rc == 0) {
		rc = taco_err_set(err, -EIO,
				  "store: integrity check: no answer");
	}
	st_done(&q);
	return rc;
}

/* ---- files ---- */

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
	st_query q;
	int rc = check_file(f, err);

	if (rc < 0)
		return rc;
	rc = st_begin(s, 1, err);
	if (rc < 0)
		return rc;
	rc = st_prep(s, &q, "add file",
		     "INSERT INTO files(" FILE_COLS ")"
		     " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
		     err);
	if (rc == 0) {
		st_text(&q, 1, f->id);
		st_text(&q, 2, f->user);
		st_text(&q, 3, f->filename);
		st_text(&q, 4, f->purpose);
		st_text(&q, 5, f->sha256);
		st_text(&q, 6, f->path);
		st_int(&q, 7, f->bytes);
		st_int(&q, 8, f->created_at);
		rc = st_step(&q, err);
		st_done(&q);
		if (rc == -EEXIST)
			taco_err_set(err, rc, "file %s already exists", f->id);
	}
	return st_end(s, rc, err);
}

static int read_file_at(sqlite3_stmt *st, void *rows, int i, taco_err *err);

int tacod_store_file_get(tacod_store *s, const char *user, const char *id,
			 tacod_file *out, taco_err *err)
{
	static const st_page_def def = {"files", FILE_COLS, read_file_at, NULL};

	memset(out, 0, sizeof(*out));
	return st_get(s, &def, "file", user, id, out, err);
}

/* One row by id, as the user may see it (store_internal.h). */
int st_get(tacod_store *s, const st_page_def *d, const char *what,
	   const char *user, const char *id, void *out, taco_err *err)
{
	char sql[512];
	st_query q;
	int rc;

	rc = st_check_user(user, 1, err);
	if (rc == 0)
		rc = st_check_str(id, TACOD_ID_MAX, 0, "id", err);
	if (rc < 0)
		return rc;
	snprintf(
	    sql, sizeof(sql),
	    "SELECT %s FROM %s WHERE id = ?1 AND (?2 IS NULL OR user = ?2)",
	    d->cols, d->table);
	rc = st_prep(s, &q, what, sql, err);
	if (rc < 0)
		return rc;
	st_text(&q, 1, id);
	st_text(&q, 2, user);
	rc = st_step(&q, err);
	if (rc == 1)
		rc = d->read(q.st, out, 0, err);
	else if (rc == 0)
		rc = taco_err_set(err, -ENOENT, "no such %s: %s", what, id);
	st_done(&q);
	return rc;
}

static int read_file_at(sqlite3_stmt *st, void *rows, int i, taco_err *err)
{
	return read_file_row(st, &((tacod_file *)rows)[i], err);
}

int tacod_store_file_list(tacod_store *s, const char *user, const char *after,
			  int limit, tacod_file *out, int *n, int *has_more,
			  taco_err *err)
{
	static const st_page_def def = {"files", FILE_COLS, read_file_at, NULL};

	return st_page(s, &def, user, after, limit, out, n, has_more, err);
}

/* Newest-first pages of files or jobs (store_internal.h). */
int st_page(tacod_store *s, const st_page_def *d, const char *user,
	    const char *after, int limit, void *out, int *n, int *has_more,
	    taco_err *err)
{
	char sql[1024];
	int64_t at, row;
	st_query q;
	int rc;

	*n = 0;
	*has_more = 0;
	limit = st_clamp_limit(limit);
	rc = st_check_user(user, 1, err);
	if (rc < 0)
		return rc;
	/* created_at <= ?1 bounds the index range; the rest breaks ties. */
	snprintf(sql, sizeof(sql),
		 "SELECT %s FROM %s WHERE %s created_at <= ?1"
		 " AND (created_at < ?1 OR rowid < ?2)"
		 " ORDER BY created_at DESC, rowid DESC LIMIT ?3",
		 d->cols, d->table, user ? "user = ?4 AND" : "");
	rc = st_begin(s, 0, err);
	if (rc < 0)
		return rc;
	rc = st_anchor(s, d->table, user, after, &at, &row, err);
	if (rc == 0)
		rc = st_prep(s, &q, d->table, sql, err);
	if (rc == 0) {
		st_int(&q, 1, at);
		st_int(&q, 2, row);
		st_int(&q, 3, limit + 1);
		if (user)
			st_text(&q, 4, user);
		while ((rc = st_step(&q, err)) == 1) {
			if (*n == limit) {
				*has_more = 1;
				rc = 0;
				break;
			}
			if ((rc = d->read(q.st, out, *n, err)) < 0)
				break;
			(*n)++;
		}
		st_done(&q);
	}
	rc = st_end(s, rc, err);
	if (rc < 0) {
		for (int i = 0; d->clear && i < *n; i++)
			d->clear(out, i);
		*n = 0;
		*has_more = 0;
	}
	return rc;
}

int tacod_store_file_delete(tacod_store *s, const char *user, const char *id,
			    taco_err *err)
{
	st_query q;
	int rc;

	rc = st_check_user(user, 1, err);
	if (rc == 0)
		rc = st_check_str(id, TACOD_ID_MAX, 0, "id", err);
	if (rc < 0)
		return rc;
	rc = st_begin(s, 1, err);
	if (rc < 0)
		return rc;
	rc = st_prep(s, &q, "find file",
		     "SELECT 1 FROM files"
		     " WHERE id = ?1 AND (?2 IS NULL OR user = ?2)",
		     err);
	if (rc == 0) {
		st_text(&q, 1, id);
		st_text(&q, 2, user);
		rc = st_step(&q, err);
		st_done(&q);
		if (rc == 0)
			rc = taco_err_set(err, -ENOENT, "no such file: %s", id);
		else if (rc == 1)
			rc = 0;
	}
	if (rc == 0)
		rc = st_prep(s, &q, "find jobs using the file",
			     "SELECT id FROM jobs WHERE status < ?2"
			     " AND (training_file = ?1 OR validation_file = ?1)"
			     " LIMIT 1",
			     err);
	if (rc == 0) {
		st_text(&q, 1, id);
		st_int(&q, 2, TACOD_SUCCEEDED); /* the first finished state */
		rc = st_step(&q, err);
		if (rc == 1)
			rc = taco_err_set(
			    err, -EBUSY, "file %s is in use by job %s", id,
			    (const char *)sqlite3_column_text(q.st, 0));
		st_done(&q);
	}
	if (rc == 0)
		rc = st_prep(s, &q, "delete file",
			     "DELETE FROM files WHERE id = ?1", err);
	if (rc == 0) {
		st_text(&q, 1, id);
		rc = st_step(&q, err);
		st_done(&q);
	}
	return st_end(s, rc, err);
}

int tacod_store_file_count_sha256(tacod_store *s, const char *sha256,
				  int64_t *count, taco_err *err)
{
	st_query q;
	int rc;

	*count = 0;
	rc = check_sha256(sha256, err);
	if (rc < 0)
		return rc;
	rc = st_prep(s, &q, "count files",
		     "SELECT count(*) FROM files WHERE sha256 = ?1", err);
	if (rc < 0)
		return rc;
	st_text(&q, 1, sha256);
	rc = st_step(&q, err);
	if (rc == 1) {
		*count = sqlite3_column_int64(q.st, 0);
		rc = 0;
	}
	st_done(&q);
	return rc;
}

/* ---- idempotency keys ---- */

static int check_idem(const char *user, const char *key,
		      const char *request_hash, taco_err *err)
{
	int rc = st_check_user(user, 0, err);

	if (rc == 0)
		rc = st_check_str(key, TACOD_IDEM_KEY_MAX, 0, "idempotency key",
				  err);
	if (rc == 0)
		rc = st_check_str(request_hash, TACOD_HASH_MAX, 0,
				  "request hash", err);
	return rc;
}

int tacod_store_idem_get(tacod_store *s, const char *user, const char *key,
			 const char *request_hash, int *status, char **body,
			 taco_err *err)
{
	st_query q;
	int rc;

	*status = 0;
	*body = NULL;
	rc = check_idem(user, key, request_hash, err);
	if (rc < 0)
		return rc;
	rc = st_prep(s, &q, "get idempotency key",
		     "SELECT request_hash, status, body FROM idempotency"
		     " WHERE user = ?1 AND idem_key = ?2",
		     err);
	if (rc < 0)
		return rc;
	st_text(&q, 1, user);
	st_text(&q, 2, key);
	rc = st_step(&q, err);
	if (rc == 0) {
		rc = taco_err_set(err, -ENOENT, "idempotency key is new");
	} else if (rc == 1) {
		const char *h = (const char *)sqlite3_column_text(q.st, 0);
		if (!h || strcmp(h, request_hash) != 0) {
			rc = taco_err_set(err, -EEXIST,
					  "idempotency key was used with a "
					  "different request");
		} else {
			*status = sqlite3_column_int(q.st, 1);
			rc = st_col_dup(q.st, 2, body, "idempotency body", err);
		}
	}
	st_done(&q);
	return rc;
}

int tacod_store_idem_put(tacod_store *s, const char *user, const char *key,
			 const char *request_hash, int status, const char *body,
			 taco_err *err)
{
	st_query q;
	int rc = check_idem(user, key, request_hash, err);

	if (rc == 0)
		rc = st_check_text(body, 0, "idempotency body", err);
	if (rc == 0 && (status < 100 || status > 599))
		rc = taco_err_set(err, -EINVAL, "status: %d is not HTTP",
				  status);
	if (rc < 0)
		return rc;
	rc = st_begin(s, 1, err);
	if (rc < 0)
		return rc;
	rc = st_prep(s, &q, "put idempotency key",
		     "INSERT INTO idempotency(user, idem_key, request_hash,"
		     " status, body, created_at)"
		     " VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
		     err);
	if (rc == 0) {
		st_text(&q, 1, user);
		st_text(&q, 2, key);
		st_text(&q, 3, request_hash);
		st_int(&q, 4, status);
		st_text(&q, 5, body);
		st_int(&q, 6, (int64_t)time(NULL));
		rc = st_step(&q, err);
		st_done(&q);
		if (rc == -EEXIST)
			taco_err_set(err, rc, "idempotency key already used");
	}
	return st_end(s, rc, err);
}

int tacod_store_idem_purge(tacod_store *s, int64_t before, int64_t *deleted,
			   taco_err *err)
{
	st_query q;
	int rc;

	if (deleted)
		*deleted = 0;
	rc = st_begin(s, 1, err);
	if (rc < 0)
		return rc;
	rc = st_prep(s, &q, "purge idempotency keys",
		     "DELETE FROM idempotency WHERE created_at < ?1", err);
	if (rc == 0) {
		st_int(&q, 1, before);
		rc = st_step(&q, err);
		st_done(&q);
		if (rc == 0 && deleted)
			*deleted = sqlite3_changes(s->db);
	}
	return st_end(s, rc, err);
}
