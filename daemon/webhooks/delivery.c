/* webhooks/delivery.c: the webhook delivery thread and the queueing of
 * events. The store is the queue: the thread takes the pending delivery
 * due first under the service lock, posts it (libcurl) without the lock,
 * and records the outcome under it again. A delivery whose post was cut
 * short by a kill is posted again after the restart, with the same
 * webhook-id: at least once, and receivers dedupe by that id. */
#include "daemon/webhooks/delivery.h"

#include <curl/curl.h>
#include <openssl/crypto.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "daemon/store/webhooks.h"
#include "daemon/webhooks/webhook.h"

/* A receiver's reply is read and thrown away; past this it is cut off. */
#define REPLY_MAX (64 * 1024)
#define USER_AGENT "tacod-webhooks/1"
#define PURGE_EVERY_S 3600

struct tacod_hooks {
	pthread_t thread;
	pthread_cond_t cond; /* signalled on a new delivery and on stop */
	int started, curl_ready;
	atomic_int stop; /* read by curl's progress callback, lock-free */
	/* since this tacod started (lock held) */
	unsigned long long delivered, failed_attempt, gave_up, dropped;
	int64_t purged_at;
	/* the service's: its store, the lock that guards it (and every
	 * field above), and the endpoints of its configuration, which
	 * outlive the thread */
	tacod_store *store;
	pthread_mutex_t *lock;
	const tacod_webhooks *endpoints;
};

static int64_t delivery_now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static uint32_t random32(void)
{
	uint32_t r = 0;

	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r))
		r = (uint32_t)delivery_now_ms() * 2654435761u;
	return r;
}

/* Waits (lock held) for a signal or ms milliseconds. */
static void wait_ms(tacod_hooks *h, int64_t ms)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	if (ms < 1)
		ms = 1;
	t.tv_sec += ms / 1000;
	t.tv_nsec += (ms % 1000) * 1000000;
	if (t.tv_nsec >= 1000000000) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000;
	}
	pthread_cond_timedwait(&h->cond, h->lock, &t);
}

static size_t discard(char *d, size_t sz, size_t n, void *ctx)
{
	size_t *got = ctx;

	(void)d;
	*got += sz * n;
	return *got > REPLY_MAX ? 0 : sz * n;
}

static int stopping(void *ctx, curl_off_t a, curl_off_t b, curl_off_t c,
		    curl_off_t d)
{
	tacod_hooks *h = ctx;

	(void)a, (void)b, (void)c, (void)d;
	return atomic_load(&h->stop);
}

/* One attempt (lock not held): 1 on a 2xx, 0 on a failure (why says
 * which), -1 when cut short by a stop. */
static int post(tacod_hooks *h, const tacod_webhook *w, const tacod_delivery *d,
		char *why, size_t cap)
{
	char sig[TACOD_WEBHOOK_SIG_MAX], line[TACOD_WEBHOOK_SIG_MAX + 64];
	char detail[CURL_ERROR_SIZE] = "";
	struct curl_slist *hd = NULL, *t;
	int64_t ts = (int64_t)time(NULL);
	size_t got = 0;
	long code = 0;
	taco_err err = {{0}};
	CURL *c;
	CURLcode rc;
	int ok = 0, i;

	if (tacod_webhook_sign(w->key, w->key_len, d->event_id, ts, d->payload,
			       strlen(d->payload), sig, &err)) {
		snprintf(why, cap, "%.200s", err.msg);
		return 0;
	}
	c = curl_easy_init();
	for (i = 0; i < 5; i++) {
		switch (i) {
		case 0:
			snprintf(line, sizeof(line),
				 "Content-Type: application/json");
			break;
		case 1:
			snprintf(line, sizeof(line), "webhook-id: %s",
				 d->event_id);
			break;
		case 2:
			snprintf(line, sizeof(line), "webhook-timestamp: %lld",
				 (long long)ts);
			break;
		case 3:
			snprintf(line, sizeof(line), "webhook-signature: %s",
				 sig);
			break;
		default:
			/* no 100-continue round trip for a small body */
			snprintf(line, sizeof(line), "Expect:");
		}
		t = curl_slist_append(hd, line);
		if (!t)
			break;
		hd = t;
	}
	if (!c || i < 5) {
		snprintf(why, cap, "out of memory");
		goto out;
	}
	curl_easy_setopt(c, CURLOPT_URL, w->url);
	/* only the admin's URL, and only over HTTP(S): no redirect is
	 * followed, no other scheme is spoken */
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, (long)w->timeout_s);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, (long)w->timeout_s);
	curl_easy_setopt(c, CURLOPT_USERAGENT, USER_AGENT);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hd);
	curl_easy_setopt(c, CURLOPT_POST, 1L);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, d->payload);
	curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(d->payload));
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &got);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, stopping);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, h);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, detail);
	rc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	if (rc == CURLE_ABORTED_BY_CALLBACK && atomic_load(&h->stop))
		ok = -1;
	else if (code >= 200 && code < 300)
		ok = 1; /* a reply cut off past REPLY_MAX is still a 2xx */
	else if (code)
		snprintf(why, cap, "HTTP %ld", code);
	else /* the store keeps it, for the admin */
		snprintf(why, cap, "%.200s",
			 detail[0] ? detail : curl_easy_strerror(rc));
out:
	curl_slist_free_all(hd);
	curl_easy_cleanup(c);
	OPENSSL_cleanse(sig, sizeof(sig));
	return ok;
}

/* One due delivery (lock held on entry and on return, released while it
 * is posted): 0, or a store error. */
static int deliver(tacod_hooks *h, tacod_delivery *d)
{
	const tacod_webhook *ep = tacod_webhooks_find(h->endpoints, d->url);
	tacod_webhook w;
	char why[TACOD_DELIVERY_ERROR_MAX] = "";
	int ok, attempts = d->attempts + 1, rc;

	if (!ep) {
		/* queued by a tacod whose config had this URL: deliveries
		 * go only where the admin says now */
		h->gave_up++;
		return tacod_store_delivery_record(
		    h->store, d->id, TACOD_DELIVERY_FAILED, d->attempts,
		    d->next_attempt_at, "the endpoint is no longer configured",
		    NULL);
	}
	w = *ep;
	pthread_mutex_unlock(h->lock);
	ok = post(h, &w, d, why, sizeof(why));
	OPENSSL_cleanse(w.key, sizeof(w.key));
	pthread_mutex_lock(h->lock);
	if (ok < 0)
		return 0; /* stays pending, as it was */
	if (ok) {
		h->delivered++;
		rc = tacod_store_delivery_record(
		    h->store, d->id, TACOD_DELIVERY_DELIVERED, attempts,
		    delivery_now_ms(), NULL, NULL);
	} else if (attempts >= w.max_attempts) {
		h->gave_up++;
		rc = tacod_store_delivery_record(
		    h->store, d->id, TACOD_DELIVERY_FAILED, attempts,
		    delivery_now_ms(), why, NULL);
	} else {
		h->failed_attempt++;
		rc = tacod_store_delivery_record(
		    h->store, d->id, TACOD_DELIVERY_PENDING, attempts,
		    delivery_now_ms() +
			tacod_webhook_backoff_ms(&w, attempts, random32()),
		    why, NULL);
	}
	return rc;
}

static void purge(tacod_hooks *h)
{
	int64_t now = (int64_t)time(NULL);

	if (now - h->purged_at < PURGE_EVERY_S)
		return;
	h->purged_at = now;
	tacod_store_delivery_purge(h->store, now - TACOD_WEBHOOK_KEEP_S, NULL);
}

static void *deliverer(void *arg)
{
	tacod_hooks *h = arg;

	pthread_mutex_lock(h->lock);
	while (!atomic_load(&h->stop)) {
		tacod_delivery d = {0};
		int64_t now = delivery_now_ms(), next = INT64_MAX;
		int found = 0, rc;

		purge(h);
		rc = tacod_store_delivery_due(h->store, now, &d, &found, &next,
					      NULL);
		if (rc == 0 && found)
			rc = deliver(h, &d);
		tacod_delivery_clear(&d);
		if (rc) /* a store error: again in a second */
			wait_ms(h, 1000);
		else if (!found)
			wait_ms(h, next - now < PURGE_EVERY_S * 1000LL
				       ? next - now
				       : PURGE_EVERY_S * 1000LL);
	}
	pthread_mutex_unlock(h->lock);
	return NULL;
}

int tacod_webhooks_start(tacod_store *store, pthread_mutex_t *lock,
			 const tacod_webhooks *endpoints, tacod_hooks **out,
			 taco_err *err)
{
	tacod_hooks *h = calloc(1, sizeof(*h));
	pthread_condattr_t ca;
	int rc;

	if (!h)
		return taco_err_set(err, -ENOMEM, "out of memory");
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		free(h);
		return taco_err_set(err, -EIO,
				    "webhooks: cannot set up "
				    "libcurl");
	}
	h->curl_ready = 1;
	h->store = store;
	h->lock = lock;
	h->endpoints = endpoints;
	atomic_init(&h->stop, 0);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	rc = pthread_cond_init(&h->cond, &ca);
	pthread_condattr_destroy(&ca);
	if (rc) {
		curl_global_cleanup();
		free(h);
		return taco_err_set(err, -rc, "cannot make a condition: %s",
				    strerror(rc));
	}
	rc = pthread_create(&h->thread, NULL, deliverer, h);
	if (rc) {
		tacod_webhooks_join(h);
		return taco_err_set(err, -rc,
				    "cannot start the webhook thread: %s",
				    strerror(rc));
	}
	h->started = 1;
	*out = h;
	return 0;
}

void tacod_webhooks_join(tacod_hooks *h)
{
	if (!h)
		return;
	pthread_mutex_lock(h->lock);
	atomic_store(&h->stop, 1);
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(h->lock);
	if (h->started)
		pthread_join(h->thread, NULL);
	pthread_cond_destroy(&h->cond);
	if (h->curl_ready)
		curl_global_cleanup();
	free(h);
}

/* Queues one event for the endpoints in mask (lock held). */
static int enqueue(tacod_hooks *h, const char *job, const char *type,
		   json_t *data, unsigned mask, taco_err *err)
{
	tacod_delivery d = {0};
	int64_t counts[3];
	int rc = 0;

	if (!mask)
		return 0;
	rc = tacod_store_delivery_count(h->store, counts, err);
	if (rc)
		return rc;
	tacod_new_id("evt_", d.event_id);
	snprintf(d.type, sizeof(d.type), "%s", type);
	snprintf(d.job_id, sizeof(d.job_id), "%s", job);
	d.created_at = (int64_t)time(NULL);
	d.next_attempt_at = delivery_now_ms();
	d.payload =
	    tacod_webhook_payload(d.event_id, type, d.created_at, job, data);
	if (!d.payload)
		return taco_err_set(err, -ENOMEM, "out of memory");
	for (int i = 0; !rc && i < h->endpoints->n; i++) {
		if (!(mask & (1u << i)))
			continue;
		if (counts[TACOD_DELIVERY_PENDING]++ >=
		    TACOD_WEBHOOK_MAX_PENDING) {
			h->dropped++;
			continue;
		}
		snprintf(d.url, sizeof(d.url), "%s", h->endpoints->ep[i].url);
		rc = tacod_store_delivery_add(h->store, &d, NULL, err);
	}
	tacod_delivery_clear(&d);
	/* the thread takes the lock, so it reads the rows once committed */
	pthread_cond_signal(&h->cond);
	return rc;
}

int tacod_webhooks_job_status(tacod_hooks *h, const tacod_job *j, taco_err *err)
{
	unsigned bit = 0, mask = 0;
	const char *type = tacod_webhook_status_type(j->status, &bit);

	if (!h || !type)
		return 0;
	for (int i = 0; i < h->endpoints->n; i++)
		if (h->endpoints->ep[i].events & bit)
			mask |= 1u << i;
	return enqueue(h, j->id, type, NULL, mask, err);
}

void tacod_webhooks_job_progress(tacod_hooks *h, const char *job,
				 json_t *progress)
{
	static const char type[] = "fine_tuning.job.progress";
	int64_t now = (int64_t)time(NULL);
	json_t *data = NULL;

	for (int i = 0; h && i < h->endpoints->n; i++) {
		const tacod_webhook *w = &h->endpoints->ep[i];
		int64_t last = 0;
		if (!(w->events & TACOD_HOOK_PROGRESS) ||
		    tacod_store_delivery_last(h->store, job, type, w->url,
					      &last, NULL) ||
		    now - last < w->progress_interval_s)
			continue;
		if (!data)
			data = json_pack(
			    "{sO sO sO}", "step",
			    json_object_get(progress, "step"), "total_steps",
			    json_object_get(progress, "total_steps"),
			    "train_loss", json_object_get(progress, "loss"));
		/* each endpoint its own event: their intervals differ */
		if (data)
			enqueue(h, job, type, data, 1u << i, NULL);
	}
	json_decref(data);
}

char *tacod_webhooks_metrics(tacod_hooks *h)
{
	int64_t counts[3] = {0};
	unsigned long long del, fa, gu, dr;
	char *out = NULL;

	if (!h)
		return NULL;
	pthread_mutex_lock(h->lock);
	del = h->delivered;
	fa = h->failed_attempt;
	gu = h->gave_up;
	dr = h->dropped;
	if (tacod_store_delivery_count(h->store, counts, NULL)) {
		pthread_mutex_unlock(h->lock);
		return NULL;
	}
	pthread_mutex_unlock(h->lock);
	if (asprintf(&out,
		     "# HELP tacod_webhook_deliveries_total Webhook delivery "
		     "attempts by outcome since tacod started.\n"
		     "# TYPE tacod_webhook_deliveries_total counter\n"
		     "tacod_webhook_deliveries_total{result=\"delivered\"} "
		     "%llu\n"
		     "tacod_webhook_deliveries_total{result=\"failed_attempt\"}"
		     " %llu\n"
		     "tacod_webhook_deliveries_total{result=\"gave_up\"} %llu\n"
		     "# HELP tacod_webhook_events_dropped_total Webhook events "
		     "not queued because the queue was full.\n"
		     "# TYPE tacod_webhook_events_dropped_total counter\n"
		     "tacod_webhook_events_dropped_total %llu\n"
		     "# HELP tacod_webhook_deliveries_pending Webhook "
		     "deliveries queued in the store, waiting for an attempt."
		     "\n"
		     "# TYPE tacod_webhook_deliveries_pending gauge\n"
		     "tacod_webhook_deliveries_pending %lld\n",
		     del, fa, gu, dr,
		     (long long)counts[TACOD_DELIVERY_PENDING]) < 0)
		return NULL;
	return out;
}
