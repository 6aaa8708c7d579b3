/* store/internal.h: what the store's files share: the store handle, a
 * prepared-statement wrapper that remembers the first binding error, st_exec
 * for a statement run once, the transaction helpers, the column readers, the
 * checks on caller-supplied strings and newest-first pagination. They are
 * defined in store/sql.c; store/schema.c opens and closes the store, and
 * store/files.c, store/jobs.c, store/events.c, store/checkpoints.c and
 * store/idem.c hold one table each. */
#ifndef TACOD_STORE_INTERNAL_H
#define TACOD_STORE_INTERNAL_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/store/store.h"

/* Prepared statements kept for reuse, by SQL text: tacod runs the same
 * few dozen statements thousands of times a second under load, and
 * compiling one costs more than running it. */
#define ST_CACHE_MAX 64

typedef struct st_cached {
	char *sql;
	sqlite3_stmt *st;
	int busy; /* handed out by st_prep, not yet given back by st_done */
} st_cached;

struct tacod_store {
	sqlite3 *db;
	st_cached cache[ST_CACHE_MAX];
	int n_cache;
	int tx_depth;  /* open st_begin calls: only the outermost is real */
	int tx_failed; /* an inner call failed: the outermost rolls back */
};

/* One prepared statement. Binding errors are kept in rc and reported by the
 * next st_step, so a run of binds needs no checks of its own. */
typedef struct st_query {
	tacod_store *s;
	sqlite3_stmt *st;
	const char *what; /* what the statement does, for messages */
	int rc;
	st_cached *cached; /* the cache entry st lives in, or NULL */
} st_query;

int st_prep(tacod_store *s, st_query *q, const char *what, const char *sql,
	    taco_err *err);
void st_text(st_query *q, int i, const char *v); /* NULL binds NULL */
void st_int(st_query *q, int i, int64_t v);
/* 1 for a row, 0 when done, negative errno on failure. */
int st_step(st_query *q, taco_err *err);
void st_done(st_query *q);

/* A SQLite result code as a negative errno, with the message in err. */
int st_fail(tacod_store *s, int rc, const char *what, taco_err *err);

/* One value bound by st_exec: ST_TEXT(v) (NULL binds NULL; the string must
 * outlive the call) or ST_INT(v). ST_ARGS(...) lists them in the order of
 * ?1, ?2, ...; a zero type (ST_ARG_END) ends a list. */
enum { ST_ARG_END, ST_ARG_TEXT, ST_ARG_INT };
typedef struct st_arg {
	int type;
	const char *text;
	int64_t num;
} st_arg;
#define ST_TEXT(v) ((st_arg){.type = ST_ARG_TEXT, .text = (v)})
#define ST_INT(v) ((st_arg){.type = ST_ARG_INT, .num = (v)})
#define ST_ARGS(...) ((const st_arg[]){__VA_ARGS__, {.type = ST_ARG_END}})

/* Reads the row st_exec stepped to (0, or a negative errno). */
typedef int (*st_row_fn)(sqlite3_stmt *st, void *ctx, taco_err *err);

/* One statement run once: st_prep, the binds of args (NULL: none), one
 * st_step and st_done. On a row, row(st, ctx) reads it first when row is
 * not NULL; later rows are not read. 1 for a row (or row's negative errno),
 * 0 for none, negative errno on failure, with "store: <what>: ..." in err
 * as from st_step. */
int st_exec(tacod_store *s, const char *what, const char *sql,
	    const st_arg *args, st_row_fn row, void *ctx, taco_err *err);
/* A row reader for st_exec: column 0 into the int64_t at ctx. */
int st_read_int64(sqlite3_stmt *st, void *ctx, taco_err *err);
/* Rows changed by the last INSERT, UPDATE or DELETE (sqlite3_changes). */
int64_t st_changes(tacod_store *s);
/* SQL text without parameters, one statement or several (sqlite3_exec). */
int st_exec_sql(tacod_store *s, const char *what, const char *sql,
		taco_err *err);

/* BEGIN IMMEDIATE (write) or BEGIN (read); st_end commits when rc is 0 and
 * rolls back otherwise, returning rc or the COMMIT failure. Calls nest:
 * inside tacod_store_tx_begin only the outermost pair talks to SQLite, and
 * a failure anywhere rolls the whole transaction back at its end. */
int st_begin(tacod_store *s, int write, taco_err *err);
int st_end(tacod_store *s, int rc, taco_err *err);

/* Column readers: a string copied into buf (-EIO when the stored value does
 * not fit: the database was changed behind our back), or a malloc'd copy
 * (NULL for SQL NULL). */
int st_col_str(sqlite3_stmt *st, int col, char *buf, size_t size,
	       const char *field, taco_err *err);
int st_col_dup(sqlite3_stmt *st, int col, char **out, const char *field,
	       taco_err *err);

/* Caller-supplied strings: v must fit a buffer of size bytes with its NUL
 * (and be non-empty unless allow_empty). -EINVAL names the field. */
int st_check_str(const char *v, size_t size, int allow_empty, const char *field,
		 taco_err *err);
/* Text (JSON, messages): NULL when allow_null, at most TACOD_TEXT_MAX. */
int st_check_text(const char *v, int allow_null, const char *field,
		  taco_err *err);
/* A user filter: NULL (admin) or a valid user name. */
int st_check_user(const char *user, int allow_null, taco_err *err);
int st_check_status(int status, const char *field, taco_err *err);
/* A list limit clamped to [1, TACOD_LIST_MAX]. */
int st_clamp_limit(int limit);

/* Newest-first pagination: the (created_at, rowid) of the row `after` in
 * table ("files" or "jobs"), or INT64_MAX for both when after is "" or
 * NULL. -ENOENT when the row is missing or the user may not see it. */
int st_anchor(tacod_store *s, const char *table, const char *user,
	      const char *after, int64_t *created_at, int64_t *rowid,
	      taco_err *err);

/* One newest-first page of a table with id, user and created_at columns
 * (files, jobs): rows after the id `after`, at most limit of them read with
 * read(stmt, out, i) into out; on failure, clear(out, i) (may be NULL)
 * undoes each row read and *n is 0. */
typedef struct st_page_def {
	const char *table, *cols;
	int (*read)(sqlite3_stmt *st, void *out, int i, taco_err *err);
	void (*clear)(void *out, int i);
} st_page_def;
int st_page(tacod_store *s, const st_page_def *d, const char *user,
	    const char *after, int limit, void *out, int *n, int *has_more,
	    taco_err *err);
/* The same, of the rows that also satisfy cond, an SQL condition on the
 * table's columns whose one parameter ?5 is bound to cond_arg. */
int st_page_where(tacod_store *s, const st_page_def *d, const char *user,
		  const char *cond, const char *cond_arg, const char *after,
		  int limit, void *out, int *n, int *has_more, taco_err *err);
/* The same, oldest first when ascending (the page starts after `after` in
 * that order). */
int st_page_order(tacod_store *s, const st_page_def *d, const char *user,
		  const char *cond, const char *cond_arg, const char *after,
		  int ascending, int limit, void *out, int *n, int *has_more,
		  taco_err *err);
/* The row with this id read into out (d->read at index 0); -ENOENT "no
 * such <what>" when there is none or user (NULL: anyone) may not see it. */
int st_get(tacod_store *s, const st_page_def *d, const char *what,
	   const char *user, const char *id, void *out, taco_err *err);

/* 0 when the job exists, -ENOENT "no such job" when not (store/jobs.c). */
int st_job_exists(tacod_store *s, const char *id, taco_err *err);

#endif
