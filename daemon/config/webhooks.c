/* config/webhooks.c: tacod.json's "webhooks" (docs/webhooks.md): each
 * endpoint's URL, secret (decoded with OpenSSL's base64, kept out of freed
 * memory) and events, and the names of the events. */
#include "daemon/config/webhooks.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/types.h"
#include "daemon/config/config.h"

/* A secret_file holds one line: the whsec_ secret. */
#define SECRET_FILE_MAX 512

static const struct {
	const char *name;
	unsigned bit;
} event_names[] = {
    {"fine_tuning.job.succeeded", TACOD_HOOK_SUCCEEDED},
    {"fine_tuning.job.failed", TACOD_HOOK_FAILED},
    {"fine_tuning.job.cancelled", TACOD_HOOK_CANCELLED},
    {"fine_tuning.job.progress", TACOD_HOOK_PROGRESS},
};

const char *tacod_webhook_status_type(int status, unsigned *bit)
{
	int i = status == TACOD_SUCCEEDED   ? 0
		: status == TACOD_FAILED    ? 1
		: status == TACOD_CANCELLED ? 2
					    : -1;

	if (i < 0)
		return NULL;
	if (bit)
		*bit = event_names[i].bit;
	return event_names[i].name;
}

int tacod_webhook_secret(const char *secret, unsigned char *key, int *len)
{
	unsigned char buf[3 * ((SECRET_FILE_MAX + 3) / 4) + 3];
	size_t n;
	int out, pad = 0;

	if (strncmp(secret, "whsec_", 6))
		return -EINVAL;
	secret += 6;
	n = strlen(secret);
	/* EVP_DecodeBlock takes unpadded groups of 4 and no whitespace */
	if (n == 0 || n % 4 || n > SECRET_FILE_MAX ||
	    strspn(secret,
		   "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
		   "0123456789+/=") != n)
		return -EINVAL;
	if (secret[n - 1] == '=')
		pad = 1 + (secret[n - 2] == '=');
	if (memchr(secret, '=', n - (size_t)pad))
		return -EINVAL;
	out = EVP_DecodeBlock(buf, (const unsigned char *)secret, (int)n);
	if (out < 0)
		return -EINVAL;
	out -= pad; /* it counts the padding's zero bytes */
	if (out < TACOD_WEBHOOK_KEY_MIN || out > TACOD_WEBHOOK_KEY_MAX)
		return -EINVAL;
	memcpy(key, buf, (size_t)out);
	*len = out;
	return 0;
}

/* secret_file: the secret out of tacod.json (which may be world-readable),
 * in a file only tacod's user reads. */
static int read_secret_file(const char *path, char *out, size_t cap,
			    const char *field, taco_err *err)
{
	FILE *f;
	size_t n;

	if (path[0] != '/')
		return taco_err_set(err, -EINVAL,
				    "%s: must be an absolute path", field);
	f = fopen(path, "re");
	if (!f)
		return taco_err_set(err, -errno, "%s: %s: %s", field, path,
				    strerror(errno));
	n = fread(out, 1, cap - 1, f);
	if (!ferror(f) && n == cap - 1 && fgetc(f) != EOF)
		n = cap; /* longer than any secret */
	if (ferror(f)) {
		fclose(f);
		return taco_err_set(err, -EIO, "%s: %s: read error", field,
				    path);
	}
	fclose(f);
	if (n >= cap)
		return taco_err_set(err, -EINVAL,
				    "%s: %s: longer than a secret (%zu bytes)",
				    field, path, cap - 1);
	out[n] = 0;
	while (n && (out[n - 1] == '\n' || out[n - 1] == '\r'))
		out[--n] = 0;
	return 0;
}

/* A URL curl is to POST to: http or https, a host, printable ASCII. */
static int url_ok(const char *u, size_t len)
{
	const char *host;

	if (!strncasecmp(u, "https://", 8))
		host = u + 8;
	else if (!strncasecmp(u, "http://", 7))
		host = u + 7;
	else
		return 0;
	if (!*host || *host == '/' || *host == ':' || *host == '?' ||
	    *host == '#')
		return 0;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)u[i] <= ' ' || (unsigned char)u[i] >= 127)
			return 0;
	return 1;
}

static int events(json_t *v, const char *name, int i, unsigned *out,
		  taco_err *err)
{
	size_t k;
	json_t *e;
	unsigned bits = 0;

	if (!json_is_array(v) || json_array_size(v) == 0 ||
	    json_array_size(v) > 16)
		return taco_err_set(err, -EINVAL,
				    "%s: 'webhooks[%d].events' must be an "
				    "array of 1 to 16 event types",
				    name, i);
	json_array_foreach(v, k, e)
	{
		const char *t = json_is_string(e) ? json_string_value(e) : "";
		unsigned bit = 0;
		for (size_t x = 0;
		     x < sizeof(event_names) / sizeof(*event_names); x++)
			if (!strcmp(t, event_names[x].name))
				bit = event_names[x].bit;
		if (!bit)
			return taco_err_set(
			    err, -EINVAL,
			    "%s: 'webhooks[%d].events[%zu]': unknown event "
			    "type '%.64s' (fine_tuning.job.succeeded, "
			    "fine_tuning.job.failed, fine_tuning.job."
			    "cancelled, fine_tuning.job.progress)",
			    name, i, k, t);
		bits |= bit;
	}
	*out = bits;
	return 0;
}

static int endpoint(json_t *o, const char *name, int i, tacod_webhook *w,
		    taco_err *err)
{
	static const char *const keys[] = {"url",
					   "secret",
					   "secret_file",
					   "events",
					   "max_attempts",
					   "timeout_s",
					   "retry_base_ms",
					   "progress_interval_s",
					   NULL};
	char secret[SECRET_FILE_MAX + 1], field[64];
	json_t *url = json_object_get(o, "url");
	json_t *sec = json_object_get(o, "secret");
	json_t *sf = json_object_get(o, "secret_file");
	const char *k;
	json_t *v;
	int base, r;

	if (!json_is_object(o))
		return taco_err_set(err, -EINVAL,
				    "%s: 'webhooks[%d]' must be an object",
				    name, i);
	json_object_foreach(o, k, v)
	{
		int ok = 0;
		for (int n = 0; keys[n]; n++)
			ok |= !strcmp(k, keys[n]);
		if (!ok)
			return taco_err_set(err, -EINVAL,
					    "%s: unknown field "
					    "'webhooks[%d].%.64s'",
					    name, i, k);
	}
	memset(w, 0, sizeof(*w));
	w->max_attempts = 8;
	w->timeout_s = 10;
	w->retry_base_ms = 10000;
	w->progress_interval_s = 60;
	if (!json_is_string(url) || json_string_length(url) >= sizeof(w->url) ||
	    !url_ok(json_string_value(url), json_string_length(url)))
		return taco_err_set(err, -EINVAL,
				    "%s: 'webhooks[%d].url' must be an http:// "
				    "or https:// URL shorter than %zu bytes",
				    name, i, sizeof(w->url));
	memcpy(w->url, json_string_value(url), json_string_length(url) + 1);
	if (!sec == !sf)
		return taco_err_set(err, -EINVAL,
				    "%s: 'webhooks[%d]' needs one of 'secret' "
				    "and 'secret_file'",
				    name, i);
	snprintf(field, sizeof(field), "%s: 'webhooks[%d].%s'", name, i,
		 sec ? "secret" : "secret_file");
	if (sec) {
		if (!json_is_string(sec) ||
		    json_string_length(sec) >= sizeof(secret))
			return taco_err_set(
			    err, -EINVAL, "%s must be a whsec_ secret", field);
		snprintf(secret, sizeof(secret), "%s", json_string_value(sec));
	} else {
		if (!json_is_string(sf) ||
		    json_string_length(sf) >= TACOD_PATH_MAX)
			return taco_err_set(err, -EINVAL, "%s must be a path",
					    field);
		if ((r = read_secret_file(json_string_value(sf), secret,
					  sizeof(secret), field, err)))
			return r;
	}
	if (tacod_webhook_secret(secret, w->key, &w->key_len))
		return taco_err_set(err, -EINVAL,
				    "%s must be \"whsec_\" and the base64 of "
				    "%d to %d random bytes",
				    field, TACOD_WEBHOOK_KEY_MIN,
				    TACOD_WEBHOOK_KEY_MAX);
	if (!(v = json_object_get(o, "events")))
		return taco_err_set(err, -EINVAL,
				    "%s: 'webhooks[%d].events' is missing",
				    name, i);
	if ((r = events(v, name, i, &w->events, err)))
		return r;
	snprintf(field, sizeof(field), "webhooks[%d].", i);
	base = (int)w->retry_base_ms;
	if ((r = tacod_config_int(o, field, "max_attempts", 1, 30,
				  &w->max_attempts, name, err)) ||
	    (r = tacod_config_int(o, field, "timeout_s", 1, 60, &w->timeout_s,
				  name, err)) ||
	    (r = tacod_config_int(o, field, "retry_base_ms", 100,
				  (int)TACOD_WEBHOOK_BACKOFF_CAP_MS, &base,
				  name, err)) ||
	    (r = tacod_config_int(o, field, "progress_interval_s", 1, 86400,
				  &w->progress_interval_s, name, err)))
		return r;
	w->retry_base_ms = base;
	return 0;
}

int tacod_webhooks_parse(json_t *v, const char *name, tacod_webhooks *out,
			 taco_err *err)
{
	tacod_webhooks *w = calloc(1, sizeof(*w));
	size_t i;
	json_t *e;
	int r = 0;

	if (!w)
		return taco_err_set(err, -ENOMEM, "out of memory");
	if (!json_is_array(v) || json_array_size(v) > TACOD_WEBHOOKS_MAX)
		r = taco_err_set(err, -EINVAL,
				 "%s: 'webhooks' must be an array of at most "
				 "%d endpoints",
				 name, TACOD_WEBHOOKS_MAX);
	json_array_foreach(v, i, e)
	{
		if (r)
			break;
		r = endpoint(e, name, (int)i, &w->ep[i], err);
		/* a queued delivery names its endpoint by URL */
		for (size_t k = 0; !r && k < i; k++)
			if (!strcmp(w->ep[k].url, w->ep[i].url))
				r = taco_err_set(err, -EINVAL,
						 "%s: 'webhooks[%zu].url' is "
						 "also webhooks[%zu]'s",
						 name, i, k);
		w->n = (int)i + 1;
	}
	if (!r)
		*out = *w;
	/* the keys are secrets: no copy lingers in freed memory */
	OPENSSL_cleanse(w, sizeof(*w));
	free(w);
	return r;
}

const tacod_webhook *tacod_webhooks_find(const tacod_webhooks *w,
					 const char *url)
{
	for (int i = 0; i < w->n; i++)
		if (!strcmp(w->ep[i].url, url))
			return &w->ep[i];
	return NULL;
}
