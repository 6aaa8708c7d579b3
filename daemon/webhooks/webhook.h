/* webhooks/webhook.h: tacod's webhooks without I/O: the event payloads,
 * the Standard Webhooks signature and the retry schedule, for the
 * endpoints of config/webhooks.h. The delivery thread is
 * webhooks/delivery.c, the durable queue store/webhooks.c;
 * docs/webhooks.md describes what a receiver sees. */
#ifndef TACOD_WEBHOOKS_WEBHOOK_H
#define TACOD_WEBHOOKS_WEBHOOK_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/config/webhooks.h"
#include "util/taco_err.h"

/* "v1," and the base64 of a SHA-256 digest, with its NUL. */
#define TACOD_WEBHOOK_SIG_MAX 64

/* An event's JSON body: {"object":"event","id":..,"type":..,"created_at":
 * ..,"data":{"id":job,...data}} (data may be NULL; it is not consumed).
 * malloc'd, or NULL when out of memory. */
char *tacod_webhook_payload(const char *event_id, const char *type,
			    int64_t created_at, const char *job_id,
			    json_t *data);

/* The webhook-signature header's value: "v1," and the base64 of
 * HMAC-SHA256(key, id "." timestamp "." body). */
int tacod_webhook_sign(const unsigned char *key, int key_len, const char *id,
		       int64_t timestamp, const char *body, size_t len,
		       char out[TACOD_WEBHOOK_SIG_MAX], taco_err *err);

/* The delay before the attempt after `attempts` failed ones: retry_base_ms
 * doubled per failure, at most an hour, less a jitter of up to half of it
 * (rnd, any 32 random bits) so that receivers back from an outage are not
 * hit by every retry at once. */
int64_t tacod_webhook_backoff_ms(const tacod_webhook *w, int attempts,
				 uint32_t rnd);

#endif
