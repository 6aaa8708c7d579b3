/* webhooks/webhook.c: event payloads, the Standard Webhooks signature
 * (HMAC-SHA256 from OpenSSL's libcrypto) and the retry schedule; the
 * endpoints are config/webhooks.c's. */
#include "daemon/webhooks/webhook.h"

#include <errno.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *tacod_webhook_payload(const char *event_id, const char *type,
			    int64_t created_at, const char *job_id,
			    json_t *data)
{
	json_t *d = data ? json_deep_copy(data) : json_object();
	json_t *o;
	char *text;

	if (!d || json_object_set_new(d, "id", json_string(job_id)))
		o = NULL;
	else
		o = json_pack("{ss ss ss sI sO}", "object", "event", "id",
			      event_id, "type", type, "created_at",
			      (json_int_t)created_at, "data", d);
	json_decref(d);
	text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	json_decref(o);
	return text;
}

int tacod_webhook_sign(const unsigned char *key, int key_len, const char *id,
		       int64_t timestamp, const char *body, size_t len,
		       char out[TACOD_WEBHOOK_SIG_MAX], taco_err *err)
{
	unsigned char mac[EVP_MAX_MD_SIZE];
	unsigned int mac_len = 0;
	char ts[24];
	EVP_MAC *m = EVP_MAC_fetch(NULL, "HMAC", NULL);
	EVP_MAC_CTX *c = m ? EVP_MAC_CTX_new(m) : NULL;
	OSSL_PARAM params[] = {
	    OSSL_PARAM_construct_utf8_string("digest", "SHA256", 0),
	    OSSL_PARAM_construct_end()};
	size_t got = 0;
	int ok;

	snprintf(ts, sizeof(ts), "%lld", (long long)timestamp);
	/* the signed content: id "." timestamp "." body */
	ok = c && EVP_MAC_init(c, key, (size_t)key_len, params) &&
	     EVP_MAC_update(c, (const unsigned char *)id, strlen(id)) &&
	     EVP_MAC_update(c, (const unsigned char *)".", 1) &&
	     EVP_MAC_update(c, (const unsigned char *)ts, strlen(ts)) &&
	     EVP_MAC_update(c, (const unsigned char *)".", 1) &&
	     EVP_MAC_update(c, (const unsigned char *)body, len) &&
	     EVP_MAC_final(c, mac, &got, sizeof(mac)) && got == 32;
	EVP_MAC_CTX_free(c);
	EVP_MAC_free(m);
	if (!ok)
		return taco_err_set(err, -EIO, "webhook: HMAC-SHA256 failed");
	mac_len = (unsigned int)got;
	memcpy(out, "v1,", 3);
	/* 32 bytes: 44 base64 characters and a NUL */
	EVP_EncodeBlock((unsigned char *)out + 3, mac, (int)mac_len);
	return 0;
}

int64_t tacod_webhook_backoff_ms(const tacod_webhook *w, int attempts,
				 uint32_t rnd)
{
	int64_t d = w->retry_base_ms;

	for (int i = 1; i < attempts && d < TACOD_WEBHOOK_BACKOFF_CAP_MS; i++)
		d *= 2;
	if (d > TACOD_WEBHOOK_BACKOFF_CAP_MS)
		d = TACOD_WEBHOOK_BACKOFF_CAP_MS;
	return d - (int64_t)(rnd % (uint32_t)(d / 2 + 1));
}
