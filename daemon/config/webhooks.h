/* config/webhooks.h: the webhook endpoints of tacod.json (which URL,
 * which secret, which events), and the event names: what the delivery
 * thread (webhooks/) posts to. docs/webhooks.md describes what a receiver
 * sees. */
#ifndef TACOD_CONFIG_WEBHOOKS_H
#define TACOD_CONFIG_WEBHOOKS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "api/types.h"
#include "util/taco_err.h"

#define TACOD_WEBHOOKS_MAX 16
/* The signing key (the secret's decoded bytes), as the Standard Webhooks
 * specification bounds it. */
#define TACOD_WEBHOOK_KEY_MIN 24
#define TACOD_WEBHOOK_KEY_MAX 64

/* The longest delay between two attempts (an hour): the backoff's cap,
 * and so the largest retry_base_ms. */
#define TACOD_WEBHOOK_BACKOFF_CAP_MS (3600 * 1000LL)

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

#endif
