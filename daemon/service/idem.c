/* service/idem.c: Idempotency-Key on the POSTs that create something.
 *
 * A key names one create of one user. Its first successful reply is stored
 * in the same transaction as what it created, so a client that retries
 * after a lost reply (or after tacod died) gets that reply again instead
 * of a second job. The key is bound to a hash of the request: the same key
 * with another request is refused. */
#include <stdio.h>
#include <string.h>

#include "daemon/http/auth.h"
#include "daemon/service/internal.h"

static void request_hash(tacod_http_req *r, const void *data, size_t len,
			 char out[TACOD_HASH_MAX])
{
	tacod_auth_sha256 c;
	uint8_t d[32];
	const char *m = tacod_http_method(r), *p = tacod_http_path(r);

	tacod_auth_sha256_init(&c);
	tacod_auth_sha256_update(&c, m, strlen(m) + 1);
	tacod_auth_sha256_update(&c, p, strlen(p) + 1);
	tacod_auth_sha256_update(&c, data, len);
	tacod_auth_sha256_final(&c, d);
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static int replay(tacod_http_req *r, int status, const char *body)
{
	tacod_http_add_header(r, "Idempotent-Replayed", "true");
	return tacod_http_reply_data(r, status, "application/json", body,
				     strlen(body));
}

int tacod_idem_begin(tacod_http_req *r, tacod_service *s, const void *data,
		     size_t len, tacod_idem *out)
{
	const char *key = tacod_http_header(r, "Idempotency-Key");
	const char *user = tacod_http_identity(r)->user;
	taco_err err = {{0}};
	char *body = NULL;
	int status = 0, rc;

	memset(out, 0, sizeof(*out));
	if (!key)
		return 0;
	if (!key[0] || strlen(key) >= TACOD_IDEM_KEY_MAX) {
		tacod_http_error(r, 400, "invalid_request_error",
				 "invalid_idempotency_key", "Idempotency-Key",
				 "Idempotency-Key must be 1 to %d bytes",
				 TACOD_IDEM_KEY_MAX - 1);
		return 1;
	}
	snprintf(out->key, sizeof(out->key), "%s", key);
	request_hash(r, data, len, out->hash);
	pthread_mutex_lock(&s->lock);
	rc = tacod_store_idem_get(s->store, user, out->key, out->hash, &status,
				  &body, &err);
	pthread_mutex_unlock(&s->lock);
	if (rc == -ENOENT)
		return 0;
	if (rc == 0)
		replay(r, status, body ? body : "{}");
	else if (rc == -EEXIST)
		tacod_http_error(r, 409, "invalid_request_error",
				 "idempotency_key_reused", "Idempotency-Key",
				 "this Idempotency-Key was used with a "
				 "different request");
	else
		tacod_route_store_error(r, rc, &err, "idempotency key");
	free(body);
	return 1;
}

int tacod_idem_store(tacod_service *s, const char *user, const tacod_idem *k,
		     int status, json_t *body, taco_err *err)
{
	char *text;
	int rc;

	if (!k->key[0])
		return 0;
	if (!(text = json_dumps(body, JSON_COMPACT)))
		return taco_err_set(err, -ENOMEM, "out of memory");
	rc = tacod_store_idem_put(s->store, user, k->key, k->hash, status, text,
				  err);
	free(text);
	return rc;
}
