/* webhook.h: tacod's webhooks without I/O: the endpoints of tacod.json
 * (which URL, which secret, which events), the event payloads, the
 * Standard Webhooks signature and the retry schedule. The delivery thread
 * is service_webhooks.c, the durable queue store_webhooks.c;
 * docs/webhooks.md describes what a receiver sees. */
#ifndef TACOD_WEBHOOK_H
#define TACOD_WEBHOOK_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "util/taco_err.h"

#define TACOD_WEBHOOKS_MAX 16
#define TACOD_WEBHOOK_URL_MAX 2048
/* The signing key (the secret's decoded bytes), as the Standard Webhooks
 * specification bounds it. */
#define TACOD_WEBHOOK_KEY_MIN 24
#define TACOD_WEBHOOK_KEY_MAX 64
/* "v1," and the base64 of a SHA-256 digest, with its NUL. */
#define TACOD_WEBHOOK_SIG_MAX 64
#define TACOD_WEBHOOK_TYPE_MAX 48

/* The events an endpoint subscribes to (a bit set). */
enum {
	TACOD_HOOK_SUCCEEDED = 1,
	TACOD_HOOK_FAILED = 2,
	TACOD_HOOK_CANCELLED = 4,
	TACOD_HOOK_PROGRESS = 8,
};

typedef struct tacod_webhook {
	char url[TACOD_WEBHOOK_URL_MAX];
	unsigned char key[TACOD_WEBHOOK_KEY_MAX];
	int key_len;
	unsigned events;	 /* TACOD_HOOK_* */
	int max_attempts;	 /* then the delivery is given up */
	int timeout_s;		 /* one attempt, connecting included */
	int64_t retry_base_ms;	 /* the first retry's delay; doubles */
	int progress_interval_s; /* progress of a job at most this often */
} tacod_webhook;

typedef struct tacod_webhooks {
	int n;
	tacod_webhook ep[TACOD_WEBHOOKS_MAX];
} tacod_webhooks;

/* tacod.json's "webhooks" array (docs/tacod.md) into out, which is set
 * only on success. name is the config file's, for the messages, which
 * name the field ("webhooks[1].events[0]"). A secret_file is read here. */
int tacod_webhooks_parse(json_t *v, const char *name, tacod_webhooks *out,
			 taco_err *err);

/* A "whsec_<base64>" secret's key bytes (TACOD_WEBHOOK_KEY_MIN to _MAX of
 * them); -EINVAL otherwise. */
int tacod_webhook_secret(const char *secret, unsigned char *key, int *len);

/* The event type of a finished job's status ("fine_tuning.job.succeeded")
 * and its TACOD_HOOK_* bit, or NULL for a status that is not terminal. */
const char *tacod_webhook_status_type(int status, unsigned *bit);

/* The endpoint with this exact URL, or NULL: a queued delivery goes only
 * to an endpoint that is still configured. */
const tacod_webhook *tacod_webhooks_find(const tacod_webhooks *w,
					 const char *url);

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
