/* fuzz_chat_request.c: the body of POST /v1/chat/completions: JSON parsing
 * (duplicate keys refused, as daemon/http/body.c parses; NULs inside
 * strings allowed, so that the parser's own refusal of them runs), then
 * validation and the worker's request (api/chat_request.h). The request is
 * left as it was; an accepted one has its fields within their bounds and a
 * worker request of as many messages; a refused one says why, in UTF-8
 * (the error reply is JSON). */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/chat_request.h"

static void accepted(json_t *req, const tacod_chat_request *r)
{
	json_t *w = r->worker;
	char *text;

	if (!json_is_object(w) || !r->model[0] ||
	    strlen(r->model) >= sizeof(r->model) || r->n < 1 ||
	    r->n > TACOD_CHAT_MAX_N || r->max_tokens < 0 ||
	    r->max_tokens > TACOD_CHAT_MAX_TOKENS || !(r->temperature >= 0) ||
	    r->temperature > 2 || !(r->top_p > 0) || r->top_p > 1 ||
	    (r->include_usage && !r->stream))
		abort();
	if (json_array_size(json_object_get(w, "messages")) !=
		json_array_size(json_object_get(req, "messages")) ||
	    !json_array_size(json_object_get(w, "messages")) ||
	    json_is_true(json_object_get(w, "stream")) != !!r->stream ||
	    json_integer_value(json_object_get(w, "n")) != r->n ||
	    json_array_size(json_object_get(w, "stop")) > TACOD_CHAT_MAX_STOP ||
	    (json_object_get(w, "stop") &&
	     !json_is_array(json_object_get(w, "stop"))))
		abort();
	/* what the daemon hands the worker: serializable */
	text = json_dumps(w, JSON_COMPACT);
	if (!text)
		abort();
	free(text);
}

static void refused(const tacod_chat_request *r, const tacod_request_error *e)
{
	json_t *p = json_string(e->param), *m = json_string(e->message);

	if (r->worker || !e->code[0] || !e->message[0] || !p || !m)
		abort(); /* every refusal says why, in UTF-8 */
	json_decref(p);
	json_decref(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *req = json_loadb((const char *)data, size,
				 JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);
	json_t *copy;
	tacod_chat_request r;
	tacod_request_error e;
	int rc;

	if (!req)
		return 0;
	if (!(copy = json_deep_copy(req)))
		abort();
	rc = tacod_chat_request_parse(req, &r, &e);
	if (rc == 0) {
		accepted(req, &r);
		tacod_chat_request_free(&r);
	} else if (rc == -EINVAL) {
		refused(&r, &e);
	} else {
		abort(); /* -ENOMEM: not under the fuzzer's limits */
	}
	if (!json_equal(req, copy))
		abort(); /* the request is not changed */
	json_decref(copy);
	json_decref(req);
	return 0;
}
