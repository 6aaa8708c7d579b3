/* store/webhooks.h: the webhook deliveries in the store, tacod's durable
 * queue of them (store/webhooks.c). A delivery is one event for one
 * endpoint (by URL): pending until a 2xx (delivered) or its last attempt
 * (failed). The same rules as store.h: one transaction a call (or the
 * caller's, inside tacod_store_tx_begin), negative errno with err. */
#ifndef TACOD_STORE_WEBHOOKS_H
#define TACOD_STORE_WEBHOOKS_H

#include "api/types.h"
#include "daemon/store/store.h"

enum {
	TACOD_DELIVERY_PENDING = 0,
	TACOD_DELIVERY_DELIVERED = 1,
	TACOD_DELIVERY_FAILED = 2,
};
#define TACOD_DELIVERY_ERROR_MAX 256

typedef struct tacod_delivery {
	int64_t id; /* assigned by add */
	char url[TACOD_WEBHOOK_URL_MAX];
	char event_id[TACOD_ID_MAX];
	char type[TACOD_WEBHOOK_TYPE_MAX];
	char job_id[TACOD_ID_MAX];
	char *payload; /* the JSON body, the same on every attempt */
	int attempts;
	int64_t next_attempt_at; /* unix milliseconds */
	int state;		 /* TACOD_DELIVERY_* */
	char last_error[TACOD_DELIVERY_ERROR_MAX];
	int64_t created_at; /* unix seconds */
} tacod_delivery;

void tacod_delivery_clear(tacod_delivery *d);

/* Queues d (pending, attempts and last_error as given); *id may be NULL. */
int tacod_store_delivery_add(tacod_store *s, const tacod_delivery *d,
			     int64_t *id, taco_err *err);
/* The pending delivery due first: *found is 1 with it in out when its
 * next_attempt_at is at most now_ms; otherwise 0, and *next_at is when the
 * earliest pending one is due (INT64_MAX when none is pending). */
int tacod_store_delivery_due(tacod_store *s, int64_t now_ms,
			     tacod_delivery *out, int *found, int64_t *next_at,
			     taco_err *err);
/* An attempt's outcome: the new state, attempts, next_attempt_at and
 * error (NULL: ""). -ENOENT when there is no such delivery. */
int tacod_store_delivery_record(tacod_store *s, int64_t id, int state,
				int attempts, int64_t next_at,
				const char *error, taco_err *err);
/* Deliveries in each state, indexed by state. */
int tacod_store_delivery_count(tacod_store *s, int64_t counts[3],
			       taco_err *err);
/* When (unix seconds) the newest delivery of this job, type and URL was
 * queued: 0 when there is none. */
int tacod_store_delivery_last(tacod_store *s, const char *job_id,
			      const char *type, const char *url,
			      int64_t *created_at, taco_err *err);
/* Forgets delivered and failed deliveries finished before the unix time
 * `before`. */
int tacod_store_delivery_purge(tacod_store *s, int64_t before, taco_err *err);

#endif
