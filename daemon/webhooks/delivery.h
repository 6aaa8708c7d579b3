/* webhooks/delivery.h: tacod's webhook deliveries (delivery.c):
 * events of finished jobs (and, when subscribed, progress) are queued in
 * the store in the transaction that writes the job's status, and a
 * thread of their own posts them, signed, to the endpoints of tacod.json,
 * retrying with exponential backoff; pending deliveries survive a
 * restart. docs/webhooks.md. */
#ifndef TACOD_WEBHOOKS_DELIVERY_H
#define TACOD_WEBHOOKS_DELIVERY_H

#include <jansson.h>
#include <pthread.h>

#include "api/types.h"
#include "daemon/config/webhooks.h"
#include "daemon/store/store.h"

/* Deliveries queued at once, past which new events are dropped (and
 * counted): a receiver down for long cannot grow the store without end. */
#define TACOD_WEBHOOK_MAX_PENDING 10000
/* Delivered and given-up deliveries are kept this long, then purged. */
#define TACOD_WEBHOOK_KEEP_S (7 * 24 * 3600)

/* The delivery thread and its counters. */
typedef struct tacod_hooks tacod_hooks;

/* Starts the delivery thread; it picks up the deliveries a previous tacod
 * left pending. store, lock (which guards the store, and which the
 * callers below hold where they say so) and endpoints are the service's
 * and must outlive the thread. *out is set only on success. */
int tacod_webhooks_start(tacod_store *store, pthread_mutex_t *lock,
			 const tacod_webhooks *endpoints, tacod_hooks **out,
			 taco_err *err);
/* (lock not held) Stops the thread (an attempt in flight is cut short
 * and stays pending), waits for its end and frees h (NULL: nothing).
 * tacod_service_free calls it once the loop has ended, so that
 * deliveries go on while running jobs drain. */
void tacod_webhooks_join(tacod_hooks *h);

/* (lock held) Queues the event of j's status, when terminal, for every
 * endpoint subscribed to it. Call it inside the transaction that writes
 * the status, so that both are committed or neither. h NULL: nothing. */
int tacod_webhooks_job_status(tacod_hooks *h, const tacod_job *j,
			      taco_err *err);
/* (lock held) A progress event of a running job (the worker's progress
 * object: step, total_steps, loss), queued for each endpoint subscribed to
 * progress whose progress_interval_s has passed for this job. */
void tacod_webhooks_job_progress(tacod_hooks *h, const char *job,
				 json_t *progress);

/* (lock not held) The /metrics lines of the deliveries: malloc'd text,
 * or NULL on failure (or h NULL). */
char *tacod_webhooks_metrics(tacod_hooks *h);

#endif
