/* test_webhooks.c: tacod's signed webhooks: the signature against the
 * Standard Webhooks specification's example, the config's checks, the
 * store's queue (and a version 1 store upgraded), and real deliveries to
 * receivers on loopback that check every signature: subscribed events
 * only, retries with backoff, a tacod killed during the retries that
 * delivers after its restart, once, and nothing sent to a URL the config
 * no longer lists. */
#include <check.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <jansson.h>
#include <microhttpd.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon/config/config.h"
#include "daemon/store/webhooks.h"
#include "daemon/webhooks/webhook.h"
#include "tacod_harness.h"
#include "testutil.h"

/* The Standard Webhooks specification's example secret; the second is the
 * base64 of "0123456789abcdef0123456789abcdef". */
#define SECRET_A "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
#define SECRET_B "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="

static double mono_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* ---- signing, payloads, backoff ---------------------------------------- */

START_TEST(test_sign_known_vector)
{
	/* The example of the Standard Webhooks specification
	 * (github.com/standard-webhooks/standard-webhooks, spec): checked
	 * against Python's hmac/hashlib/base64 before it was committed:
	 * base64(hmac.new(b64decode(secret), b"msg_p5jXN8AQM9LWM0D4loKWxJek."
	 * b"1614265330." b'{"test": 2432232314}', sha256).digest()). */
	static const char body[] = "{\"test\": 2432232314}";
	unsigned char key[TACOD_WEBHOOK_KEY_MAX];
	char sig[TACOD_WEBHOOK_SIG_MAX];
	taco_err err = {{0}};
	int len = 0;

	ck_assert_int_eq(tacod_webhook_secret(SECRET_A, key, &len), 0);
	ck_assert_int_eq(len, 24);
	ck_assert_int_eq(
	    tacod_webhook_sign(key, len, "msg_p5jXN8AQM9LWM0D4loKWxJek",
			       1614265330, body, strlen(body), sig, &err),
	    0);
	ck_assert_str_eq(sig,
			 "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
	/* another timestamp, another signature */
	ck_assert_int_eq(
	    tacod_webhook_sign(key, len, "msg_p5jXN8AQM9LWM0D4loKWxJek",
			       1614265331, body, strlen(body), sig, &err),
	    0);
	ck_assert_str_ne(sig,
			 "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
	/* a padded secret decodes to its 32 bytes */
	ck_assert_int_eq(tacod_webhook_secret(SECRET_B, key, &len), 0);
	ck_assert_int_eq(len, 32);
	ck_assert_int_eq(memcmp(key, "0123456789abcdef0123456789abcdef", 32),
			 0);
	/* not whsec_, not base64, too short (8 bytes), too long (66) */
	ck_assert_int_eq(
	    tacod_webhook_secret("MfKQ9r8GKYqrTwjUPD8ILPZIo2La", key, &len),
	    -EINVAL);
	ck_assert_int_eq(
	    tacod_webhook_secret("whsec_MfKQ9r8G!YqrTwjUPD8I", key, &len),
	    -EINVAL);
	ck_assert_int_eq(tacod_webhook_secret("whsec_MDEyMzQ1Njc=", key, &len),
			 -EINVAL);
	ck_assert_int_eq(
	    tacod_webhook_secret(
		"whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWYwMTIzNDU2Nzg5"
		"YWJjZGVmMDEyMzQ1Njc4OWFiY2RlZjAx",
		key, &len),
	    -EINVAL);
	ck_assert_int_eq(tacod_webhook_secret("whsec_", key, &len), -EINVAL);
}
END_TEST

START_TEST(test_payload_and_backoff)
{
	char *p = tacod_webhook_payload("evt_1", "fine_tuning.job.succeeded",
					1700000000, "ftjob-abc", NULL);
	json_t *data = json_pack("{si sf}", "step", 3, "train_loss", 0.5);
	tacod_webhook w = {.retry_base_ms = 1000};

	ck_assert_str_eq(p, "{\"object\":\"event\",\"id\":\"evt_1\",\"type\":"
			    "\"fine_tuning.job.succeeded\",\"created_at\":"
			    "1700000000,\"data\":{\"id\":\"ftjob-abc\"}}");
	free(p);
	p = tacod_webhook_payload("evt_2", "fine_tuning.job.progress", 1,
				  "ftjob-abc", data);
	ck_assert_ptr_nonnull(strstr(p, "\"step\":3"));
	ck_assert_ptr_nonnull(strstr(p, "\"id\":\"ftjob-abc\""));
	free(p);
	json_decref(data);
	/* doubling from the base, jittered down by at most half, capped at
	 * an hour */
	ck_assert_int_eq(tacod_webhook_backoff_ms(&w, 1, 0), 1000);
	ck_assert_int_eq(tacod_webhook_backoff_ms(&w, 3, 0), 4000);
	for (uint32_t r = 0; r < 5000; r += 7) {
		int64_t d = tacod_webhook_backoff_ms(&w, 2, r * 2654435761u);
		ck_assert(d >= 1000 && d <= 2000);
	}
	ck_assert_int_eq(tacod_webhook_backoff_ms(&w, 30, 0), 3600000);
	ck_assert_int_ge(tacod_webhook_backoff_ms(&w, 30, 0xffffffffu),
			 1800000);
	ck_assert_ptr_null(tacod_webhook_status_type(TACOD_RUNNING, NULL));
	ck_assert_str_eq(tacod_webhook_status_type(TACOD_CANCELLED, NULL),
			 "fine_tuning.job.cancelled");
}
END_TEST

/* ---- config ------------------------------------------------------------ */

/* Parses {"webhooks": hooks}: 0, or the error with its message. */
static int parse_hooks(const char *hooks, tacod_config *c, taco_err *err)
{
	char json[8192];

	snprintf(json, sizeof(json), "{\"webhooks\": %s}", hooks);
	tacod_config_defaults(c);
	return tacod_config_parse(json, strlen(json), "tacod.json", c, err);
}

static void config_error(const char *hooks, const char *want)
{
	tacod_config *c = malloc(sizeof(*c));
	taco_err err = {{0}};

	ck_assert_int_lt(parse_hooks(hooks, c, &err), 0);
	ck_assert_msg(strstr(err.msg, want), "%s: got '%s', wanted '%s'", hooks,
		      err.msg, want);
	ck_assert_ptr_null(strstr(err.msg, "MfKQ9r8G")); /* no secret shown */
	free(c);
}

START_TEST(test_config)
{
	tacod_config *c = malloc(sizeof(*c));
	taco_err err = {{0}};
	char path[] = "/tmp/tacod-whsec-XXXXXX", hooks[512], many[8192];
	unsigned char key[64];
	int len, fd;

	/* a valid pair: defaults and overrides */
	ck_assert_int_eq(
	    parse_hooks("[{\"url\": \"https://example.com/hook\", \"secret\": "
			"\"" SECRET_A "\", \"events\": "
			"[\"fine_tuning.job.succeeded\"]}, {\"url\": "
			"\"http://127.0.0.1:9/x\", \"secret\": \"" SECRET_B
			"\", \"events\": [\"fine_tuning.job.failed\", "
			"\"fine_tuning.job.cancelled\", "
			"\"fine_tuning.job.progress\"], \"max_attempts\": 3, "
			"\"timeout_s\": 2, \"retry_base_ms\": 100, "
			"\"progress_interval_s\": 5}]",
			c, &err),
	    0);
	ck_assert_int_eq(c->webhooks.n, 2);
	ck_assert_str_eq(c->webhooks.ep[0].url, "https://example.com/hook");
	ck_assert_uint_eq(c->webhooks.ep[0].events, TACOD_HOOK_SUCCEEDED);
	ck_assert_int_eq(c->webhooks.ep[0].max_attempts, 8);
	ck_assert_int_eq(c->webhooks.ep[0].timeout_s, 10);
	ck_assert_int_eq(c->webhooks.ep[0].key_len, 24);
	ck_assert_uint_eq(c->webhooks.ep[1].events, TACOD_HOOK_FAILED |
							TACOD_HOOK_CANCELLED |
							TACOD_HOOK_PROGRESS);
	ck_assert_int_eq(c->webhooks.ep[1].max_attempts, 3);
	ck_assert_int_eq(c->webhooks.ep[1].retry_base_ms, 100);
	ck_assert_int_eq(c->webhooks.ep[1].progress_interval_s, 5);
	/* none configured by default */
	tacod_config_defaults(c);
	ck_assert_int_eq(c->webhooks.n, 0);

	/* every problem names its field */
	config_error("{}", "'webhooks' must be an array");
	config_error("[{\"url\": \"https://a/\", \"secret\": \"" SECRET_A
		     "\", \"events\": [\"fine_tuning.job.succeeded\"]}, "
		     "{\"url\": \"https://b/\", \"secret\": \"" SECRET_A
		     "\", \"events\": [\"fine_tuning.job.done\"]}]",
		     "'webhooks[1].events[0]'");
	config_error("[{\"url\": \"https://a/\", \"secret\": \"" SECRET_A
		     "\", \"events\": [\"fine_tuning.job.succeeded\"], "
		     "\"headers\": {}}]",
		     "unknown field 'webhooks[0].headers'");
	config_error("[{\"url\": \"ftp://a/\", \"secret\": \"" SECRET_A
		     "\", \"events\": [\"fine_tuning.job.succeeded\"]}]",
		     "'webhooks[0].url'");
	config_error("[{\"url\": \"https://a b/\", \"secret\": \"" SECRET_A
		     "\", \"events\": [\"fine_tuning.job.succeeded\"]}]",
		     "'webhooks[0].url'");
	config_error("[{\"url\": \"https://\", \"secret\": \"" SECRET_A
		     "\", \"events\": [\"fine_tuning.job.succeeded\"]}]",
		     "'webhooks[0].url'");
	config_error("[{\"url\": \"https://a/\", \"secret\": \"MfKQ9r8GKYqrTw"
		     "jUPD8ILPZIo2LaLaSw\", \"events\": "
		     "[\"fine_tuning.job.succeeded\"]}]",
		     "'webhooks[0].secret' must be \"whsec_\"");
	config_error("[{\"url\": \"https://a/\", \"secret\": "
		     "\"whsec_MDEyMzQ1Njc=\", \"events\": "
		     "[\"fine_tuning.job.succeeded\"]}]",
		     "'webhooks[0].secret'");
	config_error("[{\"url\": \"https://a/\", \"events\": "
		     "[\"fine_tuning.job.succeeded\"]}]",
		     "'webhooks[0]' needs one of 'secret' and 'secret_file'");
	config_error("[{\"url\": \"https://a/\", \"secret\": \"" SECRET_A
		     "\", \"secret_file\": \"/x\", \"events\": "
		     "[\"fine_tuning.job.succeeded\"]}]",
		     "needs one of 'secret' and 'secret_file'");
	config_error("[{\"url\": \"https://a/\", \"secret\": \"" SECRET_A
		     "\"}]",
		     "'webhooks[0].events' is missing");
	config_error("[{\"url\": \"https://a/\", \"secret\": \"" SECRET_A
		     "\", \"events\": []}]",
		     "'webhooks[0].events' must be");
	config_error(
	    "[{\"url\": \"https://a/\", \"secret\": \"" SECRET_A
	    "\", \"events\": [\"fine_tuning.job.succeeded\"], "
	    "\"max_attempts\": 0}]",
	    "'webhooks[0].max_attempts' must be an integer in [1, 30]");
	config_error("[{\"url\": \"https://a/\", \"secret\": \"" SECRET_A
		     "\", \"events\": [\"fine_tuning.job.succeeded\"], "
		     "\"timeout_s\": 61}]",
		     "'webhooks[0].timeout_s'");
	config_error("[{\"url\": \"https://a/\", \"secret\": \"" SECRET_A
		     "\", \"events\": [\"fine_tuning.job.succeeded\"], "
		     "\"retry_base_ms\": 5}]",
		     "'webhooks[0].retry_base_ms'");
	config_error("[{\"url\": \"https://a/\", \"secret\": \"" SECRET_A
		     "\", \"events\": [\"fine_tuning.job.succeeded\"]}, "
		     "{\"url\": \"https://a/\", \"secret\": \"" SECRET_B
		     "\", \"events\": [\"fine_tuning.job.failed\"]}]",
		     "'webhooks[1].url' is also webhooks[0]'s");
	config_error("[{\"url\": \"https://a/\", \"secret_file\": "
		     "\"relative/path\", \"events\": "
		     "[\"fine_tuning.job.succeeded\"]}]",
		     "'webhooks[0].secret_file': must be an absolute path");
	config_error("[{\"url\": \"https://a/\", \"secret_file\": "
		     "\"/nonexistent/whsec\", \"events\": "
		     "[\"fine_tuning.job.succeeded\"]}]",
		     "'webhooks[0].secret_file': /nonexistent/whsec");
	/* at most 16 endpoints */
	snprintf(many, sizeof(many), "[");
	for (int i = 0; i < 17; i++)
		snprintf(many + strlen(many), sizeof(many) - strlen(many),
			 "%s{\"url\": \"https://h%d/\", \"secret\": \"" SECRET_A
			 "\", \"events\": [\"fine_tuning.job.failed\"]}",
			 i ? "," : "", i);
	strcat(many, "]");
	config_error(many, "at most 16 endpoints");

	/* the secret from a file (tacod.json may be world-readable), its
	 * newline dropped */
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, SECRET_B "\n", strlen(SECRET_B) + 1),
			 (ssize_t)strlen(SECRET_B) + 1);
	close(fd);
	snprintf(hooks, sizeof(hooks),
		 "[{\"url\": \"https://a/\", \"secret_file\": \"%s\", "
		 "\"events\": [\"fine_tuning.job.succeeded\"]}]",
		 path);
	ck_assert_msg(parse_hooks(hooks, c, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(tacod_webhook_secret(SECRET_B, key, &len), 0);
	ck_assert_int_eq(c->webhooks.ep[0].key_len, len);
	ck_assert_int_eq(memcmp(c->webhooks.ep[0].key, key, (size_t)len), 0);
	/* a file of something else */
	fd = open(path, O_WRONLY | O_TRUNC);
	ck_assert_int_eq(write(fd, "password\n", 9), 9);
	close(fd);
	config_error(hooks, "'webhooks[0].secret_file' must be \"whsec_\"");
	unlink(path);
	free(c);
}
END_TEST

/* ---- the store's queue ----------------------------------------------- */

static void delivery(tacod_delivery *d, const char *url, const char *job,
		     int64_t at)
{
	memset(d, 0, sizeof(*d));
	snprintf(d->url, sizeof(d->url), "%s", url);
	tacod_new_id("evt_", d->event_id);
	snprintf(d->type, sizeof(d->type), "fine_tuning.job.succeeded");
	snprintf(d->job_id, sizeof(d->job_id), "%s", job);
	d->payload = strdup("{}");
	d->next_attempt_at = at;
	d->created_at = 1000;
}

START_TEST(test_store_queue)
{
	char dir[] = "/tmp/tacod-whstore-XXXXXX", db[128], cmd[160];
	tacod_store *s;
	tacod_delivery a, b, got;
	taco_err err = {{0}};
	int64_t id_a, id_b, next, counts[3], last;
	int found;
	sqlite3 *raw;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(db, sizeof(db), "%s/tacod.db", dir);
	ck_assert_int_eq(tacod_store_open(db, &s, &err), 0);
	delivery(&a, "https://a/", "ftjob-1", 5000);
	delivery(&b, "https://b/", "ftjob-1", 3000);
	ck_assert_int_eq(tacod_store_delivery_add(s, &a, &id_a, &err), 0);
	ck_assert_int_eq(tacod_store_delivery_add(s, &b, &id_b, &err), 0);
	/* nothing due before 3000; then b (due first), then a */
	ck_assert_int_eq(
	    tacod_store_delivery_due(s, 2999, &got, &found, &next, &err), 0);
	ck_assert_int_eq(found, 0);
	ck_assert_int_eq(next, 3000);
	ck_assert_int_eq(
	    tacod_store_delivery_due(s, 10000, &got, &found, &next, &err), 0);
	ck_assert_int_eq(found, 1);
	ck_assert_int_eq(got.id, id_b);
	ck_assert_str_eq(got.url, "https://b/");
	ck_assert_str_eq(got.event_id, b.event_id);
	ck_assert_str_eq(got.payload, "{}");
	tacod_delivery_clear(&got);
	/* b failed once: due again at 20000 */
	ck_assert_int_eq(tacod_store_delivery_record(s, id_b,
						     TACOD_DELIVERY_PENDING, 1,
						     20000, "HTTP 500", &err),
			 0);
	ck_assert_int_eq(
	    tacod_store_delivery_due(s, 10000, &got, &found, &next, &err), 0);
	ck_assert_int_eq(got.id, id_a);
	tacod_delivery_clear(&got);
	ck_assert_int_eq(tacod_store_delivery_record(s, id_a,
						     TACOD_DELIVERY_DELIVERED,
						     1, 10000, NULL, &err),
			 0);
	ck_assert_int_eq(tacod_store_delivery_count(s, counts, &err), 0);
	ck_assert_int_eq(counts[TACOD_DELIVERY_PENDING], 1);
	ck_assert_int_eq(counts[TACOD_DELIVERY_DELIVERED], 1);
	ck_assert_int_eq(tacod_store_delivery_last(s, "ftjob-1",
						   "fine_tuning.job.succeeded",
						   "https://a/", &last, &err),
			 0);
	ck_assert_int_eq(last, 1000);
	ck_assert_int_eq(tacod_store_delivery_last(s, "ftjob-2",
						   "fine_tuning.job.succeeded",
						   "https://a/", &last, &err),
			 0);
	ck_assert_int_eq(last, 0);
	ck_assert_int_eq(tacod_store_delivery_record(
			     s, 999, TACOD_DELIVERY_FAILED, 1, 0, NULL, &err),
			 -ENOENT);
	ck_assert_int_eq(
	    tacod_store_delivery_record(s, id_a, 7, 1, 0, NULL, &err), -EINVAL);
	/* purge: finished rows go, pending ones stay */
	ck_assert_int_eq(
	    tacod_store_delivery_purge(s, (int64_t)time(NULL) + 10, &err), 0);
	ck_assert_int_eq(tacod_store_delivery_count(s, counts, &err), 0);
	ck_assert_int_eq(counts[TACOD_DELIVERY_PENDING], 1);
	ck_assert_int_eq(counts[TACOD_DELIVERY_DELIVERED], 0);
	tacod_store_close(s);
	tacod_delivery_clear(&a);
	tacod_delivery_clear(&b);

	/* a version 1 store (no webhook table) gains it on open */
	ck_assert_int_eq(sqlite3_open(db, &raw), SQLITE_OK);
	ck_assert_int_eq(sqlite3_exec(raw,
				      "DROP TABLE webhook_deliveries;"
				      "UPDATE schema_version SET version = 1",
				      NULL, NULL, NULL),
			 SQLITE_OK);
	sqlite3_close(raw);
	ck_assert_int_eq(tacod_store_open(db, &s, &err), 0);
	ck_assert_int_eq(tacod_store_delivery_count(s, counts, &err), 0);
	ck_assert_int_eq(counts[TACOD_DELIVERY_PENDING], 0);
	delivery(&a, "https://a/", "ftjob-1", 5000);
	ck_assert_int_eq(tacod_store_delivery_add(s, &a, &id_a, &err), 0);
	tacod_delivery_clear(&a);
	ck_assert_int_eq(tacod_store_integrity_check(s, &err), 0);
	tacod_store_close(s);
	ck_assert_int_eq(sqlite3_open(db, &raw), SQLITE_OK);
	{
		sqlite3_stmt *q;
		ck_assert_int_eq(sqlite3_prepare_v2(
				     raw,
				     "SELECT max(version) FROM schema_version",
				     -1, &q, NULL),
				 SQLITE_OK);
		ck_assert_int_eq(sqlite3_step(q), SQLITE_ROW);
		ck_assert_int_eq(sqlite3_column_int(q, 0), 4);
		sqlite3_finalize(q);
	}
	sqlite3_close(raw);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* ---- a receiver on loopback ------------------------------------------ */

#define HITS_MAX 256

typedef struct hit {
	char id[80], type[48], job[64];
	long long ts;
	double at;  /* monotonic seconds */
	int status; /* what the receiver answered */
} hit;

typedef struct receiver {
	struct MHD_Daemon *d;
	int port;
	unsigned char key[64];
	int key_len;
	pthread_mutex_t mu;
	int fail_first; /* answer 500 to this many requests */
	int fail_all;	/* answer 500 while set */
	hit hits[HITS_MAX];
	int n;
	char bad[512]; /* the first check that failed, "" if none */
} receiver;

typedef struct body {
	char *p;
	size_t n;
} body;

static const char *jstr(json_t *o, const char *k)
{
	const char *v = json_string_value(json_object_get(o, k));

	return v ? v : "";
}

/* Checks one delivery as a receiver must (Standard Webhooks): the three
 * headers, the signature over id.timestamp.body with the receiver's key,
 * a timestamp within 5 minutes, and the payload's id equal to the
 * webhook-id. "" when all hold, else what failed. */
static void verify(receiver *rc, struct MHD_Connection *c, const body *b,
		   hit *h, char *why, size_t cap)
{
	const char *id =
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, "webhook-id");
	const char *ts = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						     "webhook-timestamp");
	const char *sig = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						      "webhook-signature");
	const char *ct =
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
	const char *ua =
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, "User-Agent");
	unsigned char mac[EVP_MAX_MD_SIZE];
	unsigned int mac_len = 0;
	char want[80], *signed_content;
	json_t *o;
	long long t;
	size_t n;

	why[0] = 0;
	if (!id || !ts || !sig) {
		snprintf(why, cap, "a webhook header is missing");
		return;
	}
	if (!ct || strcmp(ct, "application/json") || !ua ||
	    !strstr(ua, "tacod")) {
		snprintf(why, cap, "content type %s, user agent %s",
			 ct ? ct : "-", ua ? ua : "-");
		return;
	}
	t = atoll(ts);
	if (llabs((long long)time(NULL) - t) > 300) {
		snprintf(why, cap, "timestamp %s is not now", ts);
		return;
	}
	n = strlen(id) + strlen(ts) + b->n + 3;
	signed_content = malloc(n);
	snprintf(signed_content, n, "%s.%s.", id, ts);
	memcpy(signed_content + strlen(signed_content), b->p, b->n);
	HMAC(EVP_sha256(), rc->key, rc->key_len,
	     (unsigned char *)signed_content, n - 1, mac, &mac_len);
	free(signed_content);
	memcpy(want, "v1,", 3);
	EVP_EncodeBlock((unsigned char *)want + 3, mac, (int)mac_len);
	if (mac_len != 32 || strcmp(sig, want)) {
		snprintf(why, cap, "signature %s, wanted %s", sig, want);
		return;
	}
	o = json_loadb(b->p, b->n, 0, NULL);
	if (!o || strcmp(jstr(o, "id"), id) ||
	    strcmp(jstr(o, "object"), "event") ||
	    !json_is_integer(json_object_get(o, "created_at")) ||
	    !json_is_string(json_object_get(o, "type")) ||
	    !json_is_string(
		json_object_get(json_object_get(o, "data"), "id"))) {
		snprintf(why, cap, "payload %.*s", (int)b->n, b->p);
		json_decref(o);
		return;
	}
	snprintf(h->id, sizeof(h->id), "%s", id);
	snprintf(h->type, sizeof(h->type), "%s",
		 json_string_value(json_object_get(o, "type")));
	snprintf(h->job, sizeof(h->job), "%s",
		 json_string_value(
		     json_object_get(json_object_get(o, "data"), "id")));
	h->ts = t;
	json_decref(o);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
				  const char *url, const char *method,
				  const char *version, const char *data,
				  size_t *data_len, void **con_cls)
{
	receiver *rc = cls;
	body *b = *con_cls;
	struct MHD_Response *r;
	enum MHD_Result ret;
	hit h;
	char why[512];
	int status;

	(void)url, (void)version;
	memset(&h, 0, sizeof(h));
	if (!b) {
		*con_cls = calloc(1, sizeof(body));
		return MHD_YES;
	}
	if (*data_len) {
		b->p = realloc(b->p, b->n + *data_len + 1);
		memcpy(b->p + b->n, data, *data_len);
		b->n += *data_len;
		b->p[b->n] = 0;
		*data_len = 0;
		return MHD_YES;
	}
	if (strcmp(method, "POST"))
		snprintf(why, sizeof(why), "method %s", method);
	else
		verify(rc, c, b, &h, why, sizeof(why));
	pthread_mutex_lock(&rc->mu);
	status = rc->fail_all || rc->fail_first > 0 ? 500 : 200;
	if (rc->fail_first > 0)
		rc->fail_first--;
	if (why[0] && !rc->bad[0])
		snprintf(rc->bad, sizeof(rc->bad), "%s", why);
	h.at = mono_s();
	h.status = status;
	if (rc->n < HITS_MAX)
		rc->hits[rc->n++] = h;
	pthread_mutex_unlock(&rc->mu);
	r = MHD_create_response_from_buffer(2, (void *)"ok",
					    MHD_RESPMEM_PERSISTENT);
	ret = MHD_queue_response(c, (unsigned)status, r);
	MHD_destroy_response(r);
	return ret;
}

static void on_done(void *cls, struct MHD_Connection *c, void **con_cls,
		    enum MHD_RequestTerminationCode t)
{
	body *b = *con_cls;

	(void)cls, (void)c, (void)t;
	if (b) {
		free(b->p);
		free(b);
	}
	*con_cls = NULL;
}

static void receiver_start(receiver *rc, const char *secret)
{
	const union MHD_DaemonInfo *i;

	memset(rc, 0, sizeof(*rc));
	pthread_mutex_init(&rc->mu, NULL);
	ck_assert_int_eq(tacod_webhook_secret(secret, rc->key, &rc->key_len),
			 0);
	rc->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL,
				 on_request, rc, MHD_OPTION_NOTIFY_COMPLETED,
				 on_done, NULL, MHD_OPTION_END);
	ck_assert_ptr_nonnull(rc->d);
	i = MHD_get_daemon_info(rc->d, MHD_DAEMON_INFO_BIND_PORT);
	ck_assert_ptr_nonnull(i);
	rc->port = i->port;
}

static void receiver_stop(receiver *rc)
{
	MHD_stop_daemon(rc->d);
	pthread_mutex_destroy(&rc->mu);
}

/* Hits of this type and answer (status 0: any), counted under the lock;
 * every check failure fails the test. */
static int count(receiver *rc, const char *type, int status)
{
	int k = 0;

	pthread_mutex_lock(&rc->mu);
	ck_assert_msg(!rc->bad[0], "a delivery failed its checks: %s", rc->bad);
	for (int i = 0; i < rc->n; i++)
		k += (!type || !strcmp(rc->hits[i].type, type)) &&
		     (!status || rc->hits[i].status == status);
	pthread_mutex_unlock(&rc->mu);
	return k;
}

/* Waits (up to 60 s) for n hits of type with that answer. */
static void wait_hits(receiver *rc, const char *type, int status, int n)
{
	for (int i = 0; i < 600 && count(rc, type, status) < n; i++)
		usleep(100000);
	ck_assert_int_ge(count(rc, type, status), n);
}

/* One line's value of /metrics (the in-process tacod), or -1. */
static long long metric(const char *line)
{
	char *text = NULL, *p;
	size_t len = 0;
	long long v = -1;

	/* over TCP, or the real tacod's unix socket */
	ck_assert_int_eq(
	    th_call_x("GET", "/metrics", NULL, NULL, NULL, NULL, &text, &len),
	    200);
	ck_assert_ptr_nonnull(text);
	p = strstr(text, line);
	if (p && p[strlen(line)] == ' ')
		v = atoll(p + strlen(line) + 1);
	free(text);
	return v;
}

/* Waits (up to 10 s) for a metric to reach want; asserts it did. */
static void wait_metric(const char *line, long long want)
{
	for (int i = 0; i < 100 && metric(line) != want; i++)
		usleep(100000);
	ck_assert_int_eq(metric(line), want);
}

/* ---- deliveries by a running tacod ----------------------------------- */

static char hooks_json[4096];

static void with_hooks(tacod_config *c)
{
	char json[4200];
	taco_err err = {{0}};

	snprintf(json, sizeof(json), "{\"webhooks\": %s}", hooks_json);
	ck_assert_msg(tacod_config_parse(json, strlen(json), "test", c, &err) ==
			  0,
		      "%s", err.msg);
	c->limits.max_running_jobs = 1;
}

static void cancel(const char *job)
{
	char path[256];
	json_t *j;

	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/cancel", job);
	ck_assert_int_eq(th_call("POST", path, "{}", NULL, &j), 200);
	json_decref(j);
}

/* The hit of this type for job, asserting there is exactly one. */
static hit one_hit(receiver *rc, const char *type, const char *job)
{
	hit h;

	memset(&h, 0, sizeof(h));
	int k = 0;

	pthread_mutex_lock(&rc->mu);
	for (int i = 0; i < rc->n; i++)
		if (!strcmp(rc->hits[i].type, type) &&
		    !strcmp(rc->hits[i].job, job)) {
			h = rc->hits[i];
			k++;
		}
	pthread_mutex_unlock(&rc->mu);
	ck_assert_msg(k == 1, "%d deliveries of %s for %s", k, type, job);
	return h;
}

/* A succeeded job and two cancelled ones (one while it ran, one while it
 * waited) each reach the endpoint subscribed to their event, signed with
 * its key, and a job whose data fails validation reaches the other one,
 * subscribed to failures only: neither gets the other's events. */
static char *failing_job(void)
{
	char local[] = "/tmp/tacod-whbad-XXXXXX", req[512], *job;
	const char *lines = "not json\n{\"messages\": 3}\n";
	json_t *j;
	int fd;

	ck_assert_int_ge(fd = mkstemp(local), 0);
	ck_assert_int_eq(write(fd, lines, strlen(lines)),
			 (ssize_t)strlen(lines));
	close(fd);
	ck_assert_int_eq(th_call("POST", "/v1/files", NULL, local, &j), 200);
	unlink(local);
	snprintf(req, sizeof(req),
		 "{\"model\": \"chat_llama\", \"training_file\": \"%s\", "
		 "\"taco\": {\"seq_len\": 64, \"steps\": 2}}",
		 th_str(j, "id"));
	json_decref(j);
	ck_assert_int_eq(th_call("POST", "/v1/fine_tuning/jobs", req, NULL, &j),
			 200);
	job = strdup(th_str(j, "id"));
	json_decref(j);
	json_decref(th_wait_status(job, "failed"));
	return job;
}

START_TEST(test_deliver_subscribed)
{
	receiver a, b;
	char *file, *run, *wait, *ok, *bad;
	hit h1, h2, h3;

	receiver_start(&a, SECRET_A);
	receiver_start(&b, SECRET_B);
	snprintf(hooks_json, sizeof(hooks_json),
		 "[{\"url\": \"http://127.0.0.1:%d/a\", \"secret\": \"" SECRET_A
		 "\", \"events\": [\"fine_tuning.job.succeeded\", "
		 "\"fine_tuning.job.cancelled\", \"fine_tuning.job.progress\"],"
		 " \"progress_interval_s\": 1, \"retry_base_ms\": 200}, "
		 "{\"url\": \"http://127.0.0.1:%d/b\", \"secret\": \"" SECRET_B
		 "\", \"events\": [\"fine_tuning.job.failed\"]}]",
		 a.port, b.port);
	th_start(8ull << 30, with_hooks);
	file = th_upload_count();
	run = th_create(file, "\"steps\": 100000, \"lr\": 0.01", 200);
	json_decref(th_wait_status(run, "running"));
	/* one job at a time: this one waits behind it */
	wait = th_create(file, "\"steps\": 3", 200);
	json_decref(th_wait_status(wait, "queued"));
	cancel(wait);
	/* progress while it runs, at most one a second */
	wait_hits(&a, "fine_tuning.job.progress", 200, 2);
	cancel(run);
	json_decref(th_wait_status(run, "cancelled"));
	ok = th_create(file, "\"steps\": 3", 200);
	json_decref(th_wait_status(ok, "succeeded"));
	wait_hits(&a, "fine_tuning.job.succeeded", 200, 1);
	wait_hits(&a, "fine_tuning.job.cancelled", 200, 2);
	h1 = one_hit(&a, "fine_tuning.job.cancelled", wait);
	h2 = one_hit(&a, "fine_tuning.job.cancelled", run);
	h3 = one_hit(&a, "fine_tuning.job.succeeded", ok);
	ck_assert_str_ne(h1.id, h2.id);
	ck_assert_str_ne(h2.id, h3.id);
	ck_assert_int_eq(strncmp(h1.id, "evt_", 4), 0);
	/* progress came only for the job that ran, spaced by the interval */
	{
		int k = 0;
		pthread_mutex_lock(&a.mu);
		for (int i = 0; i < a.n; i++)
			if (!strcmp(a.hits[i].type,
				    "fine_tuning.job.progress")) {
				ck_assert_msg(!strcmp(a.hits[i].job, run) ||
						  !strcmp(a.hits[i].job, ok),
					      "progress of %s", a.hits[i].job);
				k += !strcmp(a.hits[i].job, run);
			}
		pthread_mutex_unlock(&a.mu);
		ck_assert_int_ge(k, 2);
	}
	ck_assert_int_eq(count(&b, NULL, 0), 0);
	bad = failing_job();
	wait_hits(&b, "fine_tuning.job.failed", 200, 1);
	one_hit(&b, "fine_tuning.job.failed", bad);
	ck_assert_int_eq(count(&a, "fine_tuning.job.failed", 0), 0);
	wait_metric("tacod_webhook_deliveries_total{result=\"delivered\"}",
		    count(&a, NULL, 200) + count(&b, NULL, 200));
	wait_metric("tacod_webhook_deliveries_pending", 0);
	ck_assert_int_eq(
	    metric("tacod_webhook_deliveries_total{result=\"failed_attempt\"}"),
	    0);
	th_stop();
	ck_assert_int_eq(count(&b, NULL, 0), 1);
	receiver_stop(&a);
	receiver_stop(&b);
	free(file);
	free(run);
	free(wait);
	free(ok);
	free(bad);
}
END_TEST

/* A receiver that answers 500 twice gets the event on the third try:
 * the same webhook-id each time, a fresh timestamp, and the delays of the
 * backoff between them. One that always fails is given up after its
 * max_attempts. */
START_TEST(test_retry_backoff)
{
	enum { BASE_MS = 400 };
	receiver a, dead;
	char *file, *job;

	receiver_start(&a, SECRET_A);
	receiver_start(&dead, SECRET_B);
	a.fail_first = 2;
	dead.fail_all = 1;
	snprintf(hooks_json, sizeof(hooks_json),
		 "[{\"url\": \"http://127.0.0.1:%d/\", \"secret\": \"" SECRET_A
		 "\", \"events\": [\"fine_tuning.job.succeeded\"], "
		 "\"retry_base_ms\": %d}, {\"url\": \"http://127.0.0.1:%d/\", "
		 "\"secret\": \"" SECRET_B "\", \"events\": "
		 "[\"fine_tuning.job.succeeded\"], \"retry_base_ms\": 100, "
		 "\"max_attempts\": 3}]",
		 a.port, BASE_MS, dead.port);
	th_start(8ull << 30, with_hooks);
	file = th_upload_count();
	job = th_create(file, "\"steps\": 3", 200);
	json_decref(th_wait_status(job, "succeeded"));
	wait_hits(&a, NULL, 200, 1);
	wait_hits(&dead, NULL, 500, 3);
	pthread_mutex_lock(&a.mu);
	ck_assert_int_eq(a.n, 3);
	ck_assert_int_eq(a.hits[0].status, 500);
	ck_assert_int_eq(a.hits[1].status, 500);
	ck_assert_int_eq(a.hits[2].status, 200);
	for (int i = 0; i < 3; i++) {
		ck_assert_str_eq(a.hits[i].id, a.hits[0].id);
		ck_assert_str_eq(a.hits[i].job, job);
	}
	ck_assert_int_le(a.hits[0].ts, a.hits[1].ts);
	ck_assert_int_le(a.hits[1].ts, a.hits[2].ts);
	/* the first retry after base (jittered down to half of it at most),
	 * the second after twice that */
	ck_assert_msg(a.hits[1].at - a.hits[0].at >= BASE_MS / 2 / 1000.0,
		      "first retry after %.3f s", a.hits[1].at - a.hits[0].at);
	ck_assert_msg(a.hits[2].at - a.hits[1].at >= BASE_MS / 1000.0,
		      "second retry after %.3f s", a.hits[2].at - a.hits[1].at);
	ck_assert_msg(a.hits[2].at - a.hits[0].at < 10.0, "%.3f s",
		      a.hits[2].at - a.hits[0].at);
	pthread_mutex_unlock(&a.mu);
	/* the dead endpoint: three attempts, then given up */
	wait_metric("tacod_webhook_deliveries_total{result=\"gave_up\"}", 1);
	wait_metric("tacod_webhook_deliveries_total{result=\"delivered\"}", 1);
	wait_metric("tacod_webhook_deliveries_pending", 0);
	ck_assert_int_eq(
	    metric("tacod_webhook_deliveries_total{result=\"failed_attempt\"}"),
	    4);
	usleep(1000000);
	ck_assert_int_eq(count(&dead, NULL, 0), 3);
	th_stop();
	receiver_stop(&a);
	receiver_stop(&dead);
	free(file);
	free(job);
}
END_TEST

/* The real tacod, killed (-9) while its delivery waits for a retry:
 * restarted on the same state, it delivers the event with the same id;
 * restarted once more, it does not deliver it again. */
static pid_t spawn(char *dir, char *cfg, int port)
{
	const char *bin = getenv("TACO_BIN_DIR");
	FILE *f;

	snprintf(th_sock, sizeof(th_sock), "%s/th_sock", dir);
	snprintf(cfg, 128, "%s/tacod.json", dir);
	f = fopen(cfg, "w");
	fprintf(f,
		"{\"listen\": \"\", \"unix_socket\": \"%s\", \"state_dir\": "
		"\"%s/state\", \"models_dir\": \"%s\", \"taco_train\": "
		"\"%s/taco-train\", \"webhooks\": [{\"url\": "
		"\"http://127.0.0.1:%d/hook\", \"secret\": \"" SECRET_A "\", "
		"\"events\": [\"fine_tuning.job.succeeded\"], "
		"\"retry_base_ms\": 300, \"max_attempts\": 30}]}",
		th_sock, dir, tu_fixture("models"), bin ? bin : ".", port);
	fclose(f);
	return th_spawn_tacod(cfg);
}

START_TEST(test_kill9_during_retries)
{
	char dir[64] = "/tmp/tacod-whk9-XXXXXX", cfg[128], cmd[128];
	receiver a;
	pid_t pid;
	char *file, *job;
	int st, before;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	receiver_start(&a, SECRET_A);
	a.fail_all = 1;
	pid = spawn(dir, cfg, a.port);
	file = th_upload_count();
	job = th_create(file, "\"steps\": 3", 200);
	json_decref(th_wait_status(job, "succeeded"));
	wait_hits(&a, NULL, 500, 2);
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	unlink(th_sock);
	pthread_mutex_lock(&a.mu);
	before = a.n;
	a.fail_all = 0;
	pthread_mutex_unlock(&a.mu);
	pid = th_spawn_tacod(cfg);
	wait_hits(&a, NULL, 200, 1);
	/* a clean stop and another start: nothing is delivered again */
	kill(pid, SIGTERM);
	waitpid(pid, &st, 0);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	unlink(th_sock);
	pid = th_spawn_tacod(cfg);
	usleep(2000000);
	ck_assert_int_eq(count(&a, NULL, 200), 1);
	pthread_mutex_lock(&a.mu);
	ck_assert_int_ge(before, 2);
	for (int i = 0; i < a.n; i++) {
		ck_assert_str_eq(a.hits[i].id, a.hits[0].id);
		ck_assert_str_eq(a.hits[i].job, job);
		ck_assert_str_eq(a.hits[i].type, "fine_tuning.job.succeeded");
	}
	/* the one success is the last: nothing came after it */
	ck_assert_int_eq(a.hits[a.n - 1].status, 200);
	pthread_mutex_unlock(&a.mu);
	kill(pid, SIGTERM);
	waitpid(pid, &st, 0);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	th_sock[0] = 0;
	receiver_stop(&a);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
	free(file);
	free(job);
}
END_TEST

/* A delivery queued for a URL that the config no longer lists (tacod
 * restarted with another) is given up, and goes neither to the old URL
 * nor to the new one. */
START_TEST(test_removed_endpoint)
{
	char dir[64] = "/tmp/tacod-whrm-XXXXXX", cfg[128], cmd[128];
	receiver a, b;
	pid_t pid;
	char *file, *job;
	int st, before;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	receiver_start(&a, SECRET_A);
	receiver_start(&b, SECRET_A);
	a.fail_all = 1;
	pid = spawn(dir, cfg, a.port);
	file = th_upload_count();
	job = th_create(file, "\"steps\": 3", 200);
	json_decref(th_wait_status(job, "succeeded"));
	wait_hits(&a, NULL, 500, 1);
	kill(pid, SIGTERM);
	waitpid(pid, &st, 0);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	unlink(th_sock);
	pthread_mutex_lock(&a.mu);
	before = a.n;
	a.fail_all = 0;
	pthread_mutex_unlock(&a.mu);
	pid = spawn(dir, cfg, b.port); /* the same state, b's URL only */
	wait_metric("tacod_webhook_deliveries_total{result=\"gave_up\"}", 1);
	ck_assert_int_eq(metric("tacod_webhook_deliveries_pending"), 0);
	usleep(1000000);
	ck_assert_int_eq(count(&a, NULL, 0), before);
	ck_assert_int_eq(count(&b, NULL, 0), 0);
	kill(pid, SIGTERM);
	waitpid(pid, &st, 0);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	th_sock[0] = 0;
	receiver_stop(&a);
	receiver_stop(&b);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
	free(file);
	free(job);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("webhooks");
	TCase *tc = tcase_create("webhooks");

	curl_global_init(CURL_GLOBAL_DEFAULT);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_sign_known_vector);
	tcase_add_test(tc, test_payload_and_backoff);
	tcase_add_test(tc, test_config);
	tcase_add_test(tc, test_store_queue);
	tcase_add_test(tc, test_deliver_subscribed);
	tcase_add_test(tc, test_retry_backoff);
	tcase_add_test(tc, test_kill9_during_retries);
	tcase_add_test(tc, test_removed_endpoint);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
