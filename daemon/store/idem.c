/* store/idem.c: idempotency keys in the store: the stored answer of a request
 * by (user, key), checked against the request's hash, and their purge. */
#include "daemon/store/internal.h"
#include "daemon/store/store.h"

#include <errno.h>
#include <string.h>
#include <time.h>

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

/* idem_get's row: the stored answer when the request hash matches. */
typedef struct idem_row {
	const char *request_hash;
	int *status;
	char **body;
} idem_row;

static int read_idem(sqlite3_stmt *st, void *ctx, taco_err *err)
{
	idem_row *r = ctx;
	const char *h = (const char *)sqlite3_column_text(st, 0);

	if (!h || strcmp(h, r->request_hash) != 0)
		return taco_err_set(err, -EEXIST,
				    "idempotency key was used with a "
				    "different request");
	*r->status = sqlite3_column_int(st, 1);
	return st_col_dup(st, 2, r->body, "idempotency body", err);
}

int tacod_store_idem_get(tacod_store *s, const char *user, const char *key,
			 const char *request_hash, int *status, char **body,
			 taco_err *err)
{
	idem_row row = {request_hash, status, body};
	int rc;

	*status = 0;
	*body = NULL;
	rc = check_idem(user, key, request_hash, err);
	if (rc < 0)
		return rc;
	rc =
	    st_exec(s, "get idempotency key",
		    "SELECT request_hash, status, body FROM idempotency"
		    " WHERE user = ?1 AND idem_key = ?2",
		    ST_ARGS(ST_TEXT(user), ST_TEXT(key)), read_idem, &row, err);
	if (rc == 0)
		rc = taco_err_set(err, -ENOENT, "idempotency key is new");
	else if (rc == 1)
		rc = 0;
	return rc;
}

int tacod_store_idem_put(tacod_store *s, const char *user, const char *key,
			 const char *request_hash, int status, const char *body,
			 taco_err *err)
{
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
	rc = st_exec(s, "put idempotency key",
		     "INSERT INTO idempotency(user, idem_key, request_hash,"
		     " status, body, created_at)"
		     " VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
		     ST_ARGS(ST_TEXT(user), ST_TEXT(key), ST_TEXT(request_hash),
			     ST_INT(status), ST_TEXT(body),
			     ST_INT((int64_t)time(NULL))),
		     NULL, NULL, err);
	if (rc == -EEXIST)
		taco_err_set(err, rc, "idempotency key already used");
	return st_end(s, rc, err);
}

int tacod_store_idem_purge(tacod_store *s, int64_t before, int64_t *deleted,
			   taco_err *err)
{
	int rc;

	if (deleted)
		*deleted = 0;
	rc = st_begin(s, 1, err);
	if (rc < 0)
		return rc;
	rc = st_exec(s, "purge idempotency keys",
		     "DELETE FROM idempotency WHERE created_at < ?1",
		     ST_ARGS(ST_INT(before)), NULL, NULL, err);
	if (rc == 0 && deleted)
		*deleted = st_changes(s);
	return st_end(s, rc, err);
}
