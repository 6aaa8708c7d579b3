/* store/sql.c: the store's SQL helpers (store/internal.h): result codes as
 * errnos, the statement cache, binds and steps, st_exec for a statement run
 * once, transactions, column readers, checks on caller-supplied strings and
 * pagination (newest or oldest first). Every statement is a constant SQL text
 * with bound parameters; every write is one BEGIN IMMEDIATE ... COMMIT. */
#include "daemon/store/internal.h"
#include "daemon/store/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- statements ---- */

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
		/* a quota is as full as a disk (the service's -EDQUOT is a
		 * user's quota of jobs) */
		code = e == EDQUOT ? -ENOSPC : e > 0 ? -e : -EIO;
		break;
	}
	default: /* CORRUPT, NOTADB, ...: not the storage's failure (EIO) */
		code = -EBADMSG;
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

int st_exec(tacod_store *s, const char *what, const char *sql,
	    const st_arg *args, st_row_fn row, void *ctx, taco_err *err)
{
	st_query q;
	int rc = st_prep(s, &q, what, sql, err);

	if (rc < 0)
		return rc;
	for (int i = 0; args && args[i].type != ST_ARG_END; i++) {
		if (args[i].type == ST_ARG_TEXT)
			st_text(&q, i + 1, args[i].text);
		else
			st_int(&q, i + 1, args[i].num);
	}
	rc = st_step(&q, err);
	if (rc == 1 && row) {
		int r = row(q.st, ctx, err);
		if (r < 0)
			rc = r;
	}
	st_done(&q);
	return rc;
}

int st_read_int64(sqlite3_stmt *st, void *ctx, taco_err *err)
{
	*(int64_t *)ctx = sqlite3_column_int64(st, 0);
	return 0;
}

int64_t st_changes(tacod_store *s)
{
	return sqlite3_changes(s->db);
}

/* ---- transactions ---- */

int st_exec_sql(tacod_store *s, const char *what, const char *sql,
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

int tacod_store_tx_begin(tacod_store *s, taco_err *err)
{
	return st_begin(s, 1, err);
}

int tacod_store_tx_end(tacod_store *s, int rc, taco_err *err)
{
	return st_end(s, rc, err);
}

/* ---- column readers and checks ---- */

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

/* ---- pages, newest or oldest first ---- */

/* st_anchor's row: created_at and rowid. */
static int read_anchor(sqlite3_stmt *st, void *ctx, taco_err *err)
{
	int64_t *v = ctx;

	v[0] = sqlite3_column_int64(st, 0);
	v[1] = sqlite3_column_int64(st, 1);
	return 0;
}

int st_anchor(tacod_store *s, const char *table, const char *user,
	      const char *after, int64_t *created_at, int64_t *rowid,
	      taco_err *err)
{
	int is_files = strcmp(table, "files") == 0;
	int64_t v[2] = {0, 0}; /* read_anchor sets both when rc is 1 */
	int rc;

	*created_at = INT64_MAX;
	*rowid = INT64_MAX;
	if (!after || !*after)
		return 0;
	rc = st_check_str(after, TACOD_ID_MAX, 0, "after", err);
	if (rc < 0)
		return rc;
	rc = st_exec(s, "find the list's start",
		     is_files ? "SELECT created_at, rowid FROM files"
				" WHERE id = ?1 AND (?2 IS NULL OR user = ?2)"
			      : "SELECT created_at, rowid FROM jobs"
				" WHERE id = ?1 AND (?2 IS NULL OR user = ?2)",
		     ST_ARGS(ST_TEXT(after), ST_TEXT(user)), read_anchor, v,
		     err);
	if (rc == 1) {
		*created_at = v[0];
		*rowid = v[1];
		rc = 0;
	} else if (rc == 0) {
		rc = taco_err_set(err, -ENOENT, "after: no such %s: %s",
				  is_files ? "file" : "job", after);
	}
	return rc;
}

/* st_get's row: d->read into out at index 0. */
typedef struct get_ctx {
	const st_page_def *d;
	void *out;
} get_ctx;

static int read_get(sqlite3_stmt *st, void *ctx, taco_err *err)
{
	get_ctx *g = ctx;

	return g->d->read(st, g->out, 0, err);
}

int st_get(tacod_store *s, const st_page_def *d, const char *what,
	   const char *user, const char *id, void *out, taco_err *err)
{
	get_ctx g = {d, out};
	char sql[512];
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
	rc = st_exec(s, what, sql, ST_ARGS(ST_TEXT(id), ST_TEXT(user)),
		     read_get, &g, err);
	if (rc == 1)
		rc = 0;
	else if (rc == 0)
		rc = taco_err_set(err, -ENOENT, "no such %s: %s", what, id);
	return rc;
}

int st_page(tacod_store *s, const st_page_def *d, const char *user,
	    const char *after, int limit, void *out, int *n, int *has_more,
	    taco_err *err)
{
	return st_page_where(s, d, user, NULL, NULL, after, limit, out, n,
			     has_more, err);
}

int st_page_where(tacod_store *s, const st_page_def *d, const char *user,
		  const char *cond, const char *cond_arg, const char *after,
		  int limit, void *out, int *n, int *has_more, taco_err *err)
{
	return st_page_order(s, d, user, cond, cond_arg, after, 0, limit, out,
			     n, has_more, err);
}

int st_page_order(tacod_store *s, const st_page_def *d, const char *user,
		  const char *cond, const char *cond_arg, const char *after,
		  int ascending, int limit, void *out, int *n, int *has_more,
		  taco_err *err)
{
	char sql[2048];
	int64_t at, row;
	st_query q;
	int rc;

	*n = 0;
	*has_more = 0;
	limit = st_clamp_limit(limit);
	rc = st_check_user(user, 1, err);
	if (rc < 0)
		return rc;
	/* created_at bounds the index range; the rest breaks ties. */
	if (snprintf(sql, sizeof(sql),
		     ascending
			 ? "SELECT %s FROM %s WHERE %s created_at >= ?1"
			   " AND (created_at > ?1 OR rowid > ?2)%s%s%s"
			   " ORDER BY created_at, rowid LIMIT ?3"
			 : "SELECT %s FROM %s WHERE %s created_at <= ?1"
			   " AND (created_at < ?1 OR rowid < ?2)%s%s%s"
			   " ORDER BY created_at DESC, rowid DESC LIMIT ?3",
		     d->cols, d->table, user ? "user = ?4 AND" : "",
		     cond ? " AND (" : "", cond ? cond : "",
		     cond ? ")" : "") >= (int)sizeof(sql))
		return taco_err_set(err, -EINVAL, "store: %s: query too long",
				    d->table);
	rc = st_begin(s, 0, err);
	if (rc < 0)
		return rc;
	rc = st_anchor(s, d->table, user, after, &at, &row, err);
	/* oldest first from the start: below every row */
	if (rc == 0 && ascending && (!after || !*after))
		at = row = INT64_MIN;
	if (rc == 0)
		rc = st_prep(s, &q, d->table, sql, err);
	if (rc == 0) {
		st_int(&q, 1, at);
		st_int(&q, 2, row);
		st_int(&q, 3, limit + 1);
		if (user)
			st_text(&q, 4, user);
		if (cond)
			st_text(&q, 5, cond_arg);
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
