/* test_chat_request.c: POST /v1/chat/completions' request
 * (api/chat_request.h): a full request and the worker's JSON made of it,
 * defaults and null as absent, every limit at and past its bound, the
 * parameters accepted only with their neutral value, and the errors: their
 * param (the field's path), code and message. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/chat_request.h"
#include "testutil.h"

/* A user's "hi" and the given top-level fields (", ..." or ""). */
#define REQ(more)                                                              \
	"{\"model\": \"llama_gqa\", \"messages\": [{\"role\": \"user\", "      \
	"\"content\": \"hi\"}]" more "}"

static int parse(const char *body, tacod_chat_request *r,
		 tacod_request_error *e)
{
	json_error_t jerr;
	json_t *req = json_loads(body, 0, &jerr);
	int rc;

	ck_assert_msg(req != NULL, "bad test JSON: %s: %s", jerr.text, body);
	rc = tacod_chat_request_parse(req, r, e);
	json_decref(req);
	return rc;
}

static int parse_json(json_t *req, tacod_chat_request *r,
		      tacod_request_error *e)
{
	int rc = tacod_chat_request_parse(req, r, e);

	json_decref(req);
	return rc;
}

static void expect_err_json(json_t *req, const char *param, const char *code)
{
	tacod_chat_request r;
	tacod_request_error e;
	char *s = json_dumps(req, JSON_COMPACT);
	int rc = parse_json(req, &r, &e);

	ck_assert_msg(rc == -EINVAL && !strcmp(e.param, param) &&
			  !strcmp(e.code, code),
		      "%.200s: rc %d, param '%s' code '%s' (%s); want '%s' "
		      "'%s'",
		      s, rc, e.param, e.code, e.message, param, code);
	ck_assert_ptr_null(r.worker);
	ck_assert(e.message[0]);
	free(s);
}

static void expect_ok_json(json_t *req)
{
	tacod_chat_request r;
	tacod_request_error e;
	int rc = parse_json(req, &r, &e);

	ck_assert_msg(rc == 0, "refused (%s, %s: %s)", e.param, e.code,
		      e.message);
	tacod_chat_request_free(&r);
}

static json_t *base_request(void)
{
	return json_pack("{ss s[{ss ss}]}", "model", "llama_gqa", "messages",
			 "role", "user", "content", "hi");
}

/* A string of n bytes of c. */
static json_t *str_n(size_t n, char c)
{
	char *s = malloc(n + 1);
	json_t *v;

	memset(s, c, n);
	s[n] = 0;
	v = json_stringn(s, n);
	free(s);
	return v;
}

START_TEST(test_full_request)
{
	static const char body[] =
	    "{\"model\": \"ft:llama_gqa:demo:abc\","
	    " \"messages\": ["
	    "  {\"role\": \"system\", \"content\": \"Be brief.\", \"name\": "
	    "\"sys\"},"
	    "  {\"role\": \"developer\", \"content\": [{\"type\": \"text\", "
	    "\"text\": \"Use tools.\"}]},"
	    "  {\"role\": \"user\", \"content\": [{\"type\": \"text\", "
	    "\"text\": "
	    "\"Weather in \"}, {\"type\": \"text\", \"text\": \"Paris?\"}]},"
	    "  {\"role\": \"assistant\", \"content\": null, "
	    "\"reasoning_content\": \"Call the tool.\", \"refusal\": null, "
	    "\"annotations\": [], \"audio\": null, \"function_call\": null, "
	    "\"tool_calls\": ["
	    "   {\"id\": \"call_1\", \"type\": \"function\", \"function\": "
	    "{\"name\": \"get_weather\", \"arguments\": "
	    "\"{\\\"city\\\": \\\"Paris\\\"}\"}},"
	    "   {\"id\": \"call_2\", \"type\": \"function\", \"function\": "
	    "{\"name\": \"get_weather\", \"arguments\": \"not json\"}},"
	    "   {\"id\": \"call_3\", \"type\": \"function\", \"function\": "
	    "{\"name\": \"get_weather\", \"arguments\": \"[1]\"}}]},"
	    "  {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": "
	    "\"18C\"},"
	    "  {\"role\": \"assistant\", \"content\": \"18C.\", \"reasoning\": "
	    "\"Done.\", \"name\": null, \"tool_calls\": []},"
	    "  {\"role\": \"user\", \"content\": \"Thanks\"}],"
	    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
	    "\"get_weather\", \"description\": \"Weather of a city\", "
	    "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
	    "{\"type\": \"string\", \"default\": null}}}, \"strict\": null}}],"
	    " \"tool_choice\": \"auto\", \"parallel_tool_calls\": true,"
	    " \"max_completion_tokens\": 64, \"max_tokens\": 64,"
	    " \"temperature\": 0.5, \"top_p\": 0.9, \"n\": 2, \"seed\": "
	    "-9223372036854775808,"
	    " \"stream\": true, \"stream_options\": {\"include_usage\": true},"
	    " \"stop\": \"###\", \"reasoning_effort\": \"low\","
	    " \"frequency_penalty\": 0, \"presence_penalty\": 0.0, "
	    "\"logit_bias\": {}, \"logprobs\": false, \"top_logprobs\": 0,"
	    " \"response_format\": {\"type\": \"text\"}, \"modalities\": "
	    "[\"text\"], \"audio\": null, \"prediction\": null,"
	    " \"service_tier\": \"auto\", \"store\": false,"
	    " \"metadata\": {\"team\": \"a\"}, \"user\": \"u-1\"}";
	static const char want[] =
	    "{\"messages\": ["
	    "  {\"role\": \"system\", \"content\": \"Be brief.\", \"name\": "
	    "\"sys\"},"
	    "  {\"role\": \"developer\", \"content\": [{\"type\": \"text\", "
	    "\"text\": \"Use tools.\"}]},"
	    "  {\"role\": \"user\", \"content\": [{\"type\": \"text\", "
	    "\"text\": "
	    "\"Weather in \"}, {\"type\": \"text\", \"text\": \"Paris?\"}]},"
	    "  {\"role\": \"assistant\", \"reasoning_content\": \"Call the "
	    "tool.\", \"tool_calls\": ["
	    "   {\"id\": \"call_1\", \"type\": \"function\", \"function\": "
	    "{\"name\": \"get_weather\", \"arguments\": {\"city\": "
	    "\"Paris\"}}},"
	    "   {\"id\": \"call_2\", \"type\": \"function\", \"function\": "
	    "{\"name\": \"get_weather\", \"arguments\": \"not json\"}},"
	    "   {\"id\": \"call_3\", \"type\": \"function\", \"function\": "
	    "{\"name\": \"get_weather\", \"arguments\": \"[1]\"}}]},"
	    "  {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": "
	    "\"18C\"},"
	    "  {\"role\": \"assistant\", \"content\": \"18C.\", \"reasoning\": "
	    "\"Done.\"},"
	    "  {\"role\": \"user\", \"content\": \"Thanks\"}],"
	    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
	    "\"get_weather\", \"description\": \"Weather of a city\", "
	    "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
	    "{\"type\": \"string\", \"default\": null}}}}}],"
	    " \"max_tokens\": 64, \"temperature\": 0.5, \"top_p\": 0.9, \"n\": "
	    "2, \"seed\": -9223372036854775808, \"stop\": [\"###\"], "
	    "\"stream\": true, \"reasoning_effort\": \"low\"}";
	tacod_chat_request r;
	tacod_request_error e;
	json_t *w = json_loads(want, 0, NULL);
	char *got;

	ck_assert_ptr_nonnull(w);
	ck_assert_msg(parse(body, &r, &e) == 0, "%s %s: %s", e.param, e.code,
		      e.message);
	ck_assert_str_eq(r.model, "ft:llama_gqa:demo:abc");
	ck_assert_int_eq(r.max_tokens, 64);
	ck_assert(r.temperature == 0.5);
	ck_assert(r.top_p == 0.9);
	ck_assert_int_eq(r.n, 2);
	ck_assert(r.has_seed);
	ck_assert(r.seed == INT64_MIN);
	ck_assert(r.stream);
	ck_assert(r.include_usage);
	got = json_dumps(r.worker, JSON_COMPACT);
	ck_assert_msg(json_equal(r.worker, w), "worker: %s", got);
	/* exactly these keys, in this order (the daemon adds "id") */
	{
		static const char *const order[] = {
		    "messages",	  "tools",
		    "max_tokens", "temperature",
		    "top_p",	  "n",
		    "seed",	  "stop",
		    "stream",	  "reasoning_effort"};
		const char *k;
		json_t *v;
		size_t i = 0;

		json_object_foreach(r.worker, k, v)
		{
			ck_assert_uint_lt(i, sizeof(order) / sizeof(order[0]));
			ck_assert_str_eq(k, order[i]);
			i++;
		}
		ck_assert_uint_eq(i, sizeof(order) / sizeof(order[0]));
	}
	ck_assert(json_is_object(json_object_get(
	    json_object_get(
		json_array_get(
		    json_object_get(
			json_array_get(json_object_get(r.worker, "messages"),
				       3),
			"tool_calls"),
		    0),
		"function"),
	    "arguments")));
	free(got);
	json_decref(w);
	tacod_chat_request_free(&r);
	tacod_chat_request_free(&r); /* twice is harmless */
}
END_TEST

START_TEST(test_defaults_and_nulls)
{
	static const char *const bodies[] = {
	    REQ(""),
	    /* every optional field null: as absent */
	    REQ(", \"max_tokens\": null, \"max_completion_tokens\": null, "
		"\"temperature\": null, \"top_p\": null, \"n\": null, "
		"\"seed\": null, \"stream\": null, \"stream_options\": null, "
		"\"stop\": null, \"tools\": null, \"tool_choice\": null, "
		"\"parallel_tool_calls\": null, \"frequency_penalty\": null, "
		"\"presence_penalty\": null, \"logit_bias\": null, "
		"\"logprobs\": null, \"top_logprobs\": null, "
		"\"response_format\": null, \"modalities\": null, \"audio\": "
		"null, \"prediction\": null, \"service_tier\": null, "
		"\"store\": null, \"reasoning_effort\": null, \"metadata\": "
		"null, \"user\": null"),
	    /* empty tools are none */
	    REQ(", \"tools\": []"),
	};
	const char *want = "{\"messages\": [{\"role\": \"user\", \"content\": "
			   "\"hi\"}], \"temperature\": 1.0, \"top_p\": 1.0, "
			   "\"n\": 1, \"stream\": false}";
	json_t *w = json_loads(want, 0, NULL);

	for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
		tacod_chat_request r;
		tacod_request_error e;
		char *got;

		ck_assert_msg(parse(bodies[i], &r, &e) == 0, "%zu: %s %s: %s",
			      i, e.param, e.code, e.message);
		got = json_dumps(r.worker, JSON_COMPACT);
		ck_assert_msg(json_equal(r.worker, w), "%zu: %s", i, got);
		free(got);
		ck_assert_int_eq(r.max_tokens, 0);
		ck_assert(r.temperature == 1 && r.top_p == 1);
		ck_assert_int_eq(r.n, 1);
		ck_assert(!r.has_seed && !r.stream && !r.include_usage);
		ck_assert_str_eq(r.model, "llama_gqa");
		tacod_chat_request_free(&r);
	}
	json_decref(w);
	/* stream without stream_options: no usage; a stop array stays one;
	 * max_tokens alone; include_usage false */
	{
		tacod_chat_request r;
		tacod_request_error e;

		ck_assert_int_eq(
		    parse(REQ(", \"stream\": true, \"stop\": [\"a\", \"b\"], "
			      "\"max_tokens\": 7, \"seed\": 0"),
			  &r, &e),
		    0);
		ck_assert(r.stream && !r.include_usage);
		ck_assert_int_eq(r.max_tokens, 7);
		ck_assert(r.has_seed && r.seed == 0);
		ck_assert_int_eq(
		    json_array_size(json_object_get(r.worker, "stop")), 2);
		ck_assert_int_eq(
		    json_integer_value(json_object_get(r.worker, "max_tokens")),
		    7);
		ck_assert(json_is_true(json_object_get(r.worker, "stream")));
		tacod_chat_request_free(&r);
		ck_assert_int_eq(
		    parse(REQ(", \"stream\": true, \"stream_options\": "
			      "{\"include_usage\": false}, "
			      "\"max_completion_tokens\": 9, \"temperature\": "
			      "0, \"top_p\": 1"),
			  &r, &e),
		    0);
		ck_assert(r.stream && !r.include_usage);
		ck_assert_int_eq(r.max_tokens, 9);
		ck_assert(r.temperature == 0);
		ck_assert(json_real_value(
			      json_object_get(r.worker, "temperature")) == 0);
		tacod_chat_request_free(&r);
	}
	/* the request is not changed */
	{
		json_t *req =
		    json_loads(REQ(", \"stop\": \"x\", \"temperature\": "
				   "2"),
			       0, NULL);
		char *before = json_dumps(req, JSON_COMPACT), *after;
		tacod_chat_request r;
		tacod_request_error e;

		ck_assert_int_eq(tacod_chat_request_parse(req, &r, &e), 0);
		after = json_dumps(req, JSON_COMPACT);
		ck_assert_str_eq(before, after);
		tacod_chat_request_free(&r);
		free(before);
		free(after);
		json_decref(req);
	}
}
END_TEST

START_TEST(test_limits)
{
	json_t *req, *a, *m;
	char key[32];

	/* messages: 1024 and 1025 */
	req = base_request();
	a = json_object_get(req, "messages");
	while (json_array_size(a) < TACOD_CHAT_MAX_MESSAGES)
		json_array_append_new(
		    a, json_pack("{ss ss}", "role", "user", "content", "x"));
	expect_ok_json(json_deep_copy(req));
	json_array_append_new(
	    a, json_pack("{ss ss}", "role", "user", "content", "x"));
	expect_err_json(req, "messages", "invalid_value");
	req = base_request();
	json_array_clear(json_object_get(req, "messages"));
	expect_err_json(req, "messages", "invalid_value");

	/* model: 255 bytes and 256; empty */
	req = base_request();
	json_object_set_new(req, "model", str_n(255, 'm'));
	expect_ok_json(req);
	req = base_request();
	json_object_set_new(req, "model", str_n(256, 'm'));
	expect_err_json(req, "model", "invalid_value");
	expect_err_json(
	    json_loads("{\"model\": \"\", \"messages\": []}", 0, NULL), "model",
	    "invalid_value");

	/* content parts: 256 and 257 */
	req = base_request();
	m = json_array_get(json_object_get(req, "messages"), 0);
	a = json_array();
	json_object_set_new(m, "content", a);
	while (json_array_size(a) < TACOD_CHAT_MAX_PARTS)
		json_array_append_new(
		    a, json_pack("{ss ss}", "type", "text", "text", "x"));
	expect_ok_json(json_deep_copy(req));
	json_array_append_new(
	    a, json_pack("{ss ss}", "type", "text", "text", "x"));
	expect_err_json(req, "messages[0].content", "invalid_value");

	/* tools: 128 and 129; a tool's name: 64 and 65 */
	req = base_request();
	a = json_array();
	json_object_set_new(req, "tools", a);
	while (json_array_size(a) < TACOD_CHAT_MAX_TOOLS) {
		snprintf(key, sizeof(key), "f%zu", json_array_size(a));
		json_array_append_new(a, json_pack("{ss s{ss}}", "type",
						   "function", "function",
						   "name", key));
	}
	expect_ok_json(json_deep_copy(req));
	json_array_append_new(a, json_pack("{ss s{ss}}", "type", "function",
					   "function", "name", "g"));
	expect_err_json(req, "tools", "invalid_value");
	req = base_request();
	json_object_set_new(req, "tools",
			    json_pack("[{ss s{so}}]", "type", "function",
				      "function", "name",
				      str_n(TACOD_CHAT_MAX_TOOL_NAME, 'f')));
	expect_ok_json(req);
	req = base_request();
	json_object_set_new(
	    req, "tools",
	    json_pack("[{ss s{so}}]", "type", "function", "function", "name",
		      str_n(TACOD_CHAT_MAX_TOOL_NAME + 1, 'f')));
	expect_err_json(req, "tools[0].function.name", "invalid_value");

	/* tool calls of a message: 128 and 129 */
	req = base_request();
	a = json_array();
	json_array_append_new(
	    json_object_get(req, "messages"),
	    json_pack("{ss so}", "role", "assistant", "tool_calls", a));
	while (json_array_size(a) < TACOD_CHAT_MAX_TOOLS)
		json_array_append_new(a, json_pack("{ss ss s{ss ss}}", "id",
						   "c", "type", "function",
						   "function", "name", "f",
						   "arguments", "{}"));
	expect_ok_json(json_deep_copy(req));
	json_array_append_new(a, json_pack("{ss ss s{ss ss}}", "id", "c",
					   "type", "function", "function",
					   "name", "f", "arguments", "{}"));
	expect_err_json(req, "messages[1].tool_calls", "invalid_value");

	/* a message's name and a tool call's id: 256 bytes and 257 */
	req = base_request();
	m = json_array_get(json_object_get(req, "messages"), 0);
	json_object_set_new(m, "name", str_n(TACOD_CHAT_MAX_NAME, 'n'));
	expect_ok_json(json_deep_copy(req));
	json_object_set_new(m, "name", str_n(TACOD_CHAT_MAX_NAME + 1, 'n'));
	expect_err_json(req, "messages[0].name", "invalid_value");
	req = base_request();
	json_array_append_new(json_object_get(req, "messages"),
			      json_pack("{ss so}", "role", "tool",
					"tool_call_id",
					str_n(TACOD_CHAT_MAX_NAME + 1, 'i')));
	json_object_set_new(json_array_get(json_object_get(req, "messages"), 1),
			    "content", json_string("r"));
	expect_err_json(req, "messages[1].tool_call_id", "invalid_value");

	/* stop: 4 strings and 5, 256 bytes and 257, empty */
	req = base_request();
	json_object_set_new(req, "stop",
			    json_pack("[ssss]", "a", "b", "c", "d"));
	expect_ok_json(req);
	req = base_request();
	json_object_set_new(req, "stop",
			    json_pack("[sssss]", "a", "b", "c", "d", "e"));
	expect_err_json(req, "stop", "invalid_value");
	req = base_request();
	json_object_set_new(req, "stop", json_array());
	expect_err_json(req, "stop", "invalid_value");
	req = base_request();
	json_object_set_new(req, "stop", str_n(TACOD_CHAT_MAX_STOP_LEN, 's'));
	expect_ok_json(req);
	req = base_request();
	json_object_set_new(req, "stop",
			    str_n(TACOD_CHAT_MAX_STOP_LEN + 1, 's'));
	expect_err_json(req, "stop", "invalid_value");
	req = base_request();
	json_object_set_new(
	    req, "stop",
	    json_pack("[so]", "a", str_n(TACOD_CHAT_MAX_STOP_LEN + 1, 's')));
	expect_err_json(req, "stop[1]", "invalid_value");
	req = base_request();
	json_object_set_new(req, "stop", json_pack("[ss]", "a", ""));
	expect_err_json(req, "stop[1]", "invalid_value");
	req = base_request();
	json_object_set_new(req, "stop", json_string(""));
	expect_err_json(req, "stop", "invalid_value");

	/* metadata: 16 pairs and 17; a key of 64 characters and 65 */
	req = base_request();
	a = json_object();
	json_object_set_new(req, "metadata", a);
	while (json_object_size(a) < 16) {
		snprintf(key, sizeof(key), "k%zu", json_object_size(a));
		json_object_set_new(a, key, json_string("v"));
	}
	expect_ok_json(json_deep_copy(req));
	json_object_set_new(a, "k16", json_string("v"));
	expect_err_json(req, "metadata", "invalid_value");
	req = base_request();
	json_object_set_new(req, "metadata",
			    json_pack("{so}", "k", str_n(513, 'v')));
	expect_err_json(req, "metadata.k", "invalid_value");

	/* user: 256 bytes and 257 */
	req = base_request();
	json_object_set_new(req, "user", str_n(TACOD_CHAT_MAX_USER, 'u'));
	expect_ok_json(req);
	req = base_request();
	json_object_set_new(req, "user", str_n(TACOD_CHAT_MAX_USER + 1, 'u'));
	expect_err_json(req, "user", "invalid_value");

	/* the whole request: TACOD_CHAT_MAX_BODY bytes of compact JSON and
	 * one more */
	req = base_request();
	m = json_array_get(json_object_get(req, "messages"), 0);
	{
		size_t base;

		json_object_set_new(m, "content", json_string(""));
		base = json_dumpb(req, NULL, 0, JSON_COMPACT);
		json_object_set_new(m, "content",
				    str_n(TACOD_CHAT_MAX_BODY - base, 'c'));
		ck_assert_uint_eq(json_dumpb(req, NULL, 0, JSON_COMPACT),
				  TACOD_CHAT_MAX_BODY);
		expect_ok_json(json_deep_copy(req));
		json_object_set_new(m, "content",
				    str_n(TACOD_CHAT_MAX_BODY - base + 1, 'c'));
		expect_err_json(req, "", "request_too_large");
	}
}
END_TEST

/* Bounds of the numbers, at and past them: body fragment, param ("" for
 * accepted), code. */
static const struct {
	const char *more, *param, *code;
} bounds[] = {
    {", \"max_tokens\": 1", "", ""},
    {", \"max_tokens\": 4096", "", ""},
    {", \"max_tokens\": 4097", "max_tokens", "invalid_value"},
    {", \"max_tokens\": 0", "max_tokens", "invalid_value"},
    {", \"max_tokens\": -1", "max_tokens", "invalid_value"},
    {", \"max_tokens\": 5.0", "max_tokens", "invalid_type"},
    {", \"max_tokens\": \"5\"", "max_tokens", "invalid_type"},
    {", \"max_completion_tokens\": 4096", "", ""},
    {", \"max_completion_tokens\": 4097", "max_completion_tokens",
     "invalid_value"},
    {", \"max_completion_tokens\": 0", "max_completion_tokens",
     "invalid_value"},
    {", \"max_completion_tokens\": true", "max_completion_tokens",
     "invalid_type"},
    /* both: equal, or refused naming max_completion_tokens */
    {", \"max_tokens\": 10, \"max_completion_tokens\": 10", "", ""},
    {", \"max_tokens\": 10, \"max_completion_tokens\": 11",
     "max_completion_tokens", "invalid_value"},
    {", \"max_tokens\": null, \"max_completion_tokens\": 11", "", ""},
    {", \"temperature\": 0", "", ""},
    {", \"temperature\": 2", "", ""},
    {", \"temperature\": 2.0001", "temperature", "invalid_value"},
    {", \"temperature\": -0.1", "temperature", "invalid_value"},
    {", \"temperature\": \"1\"", "temperature", "invalid_type"},
    {", \"top_p\": 1", "", ""},
    {", \"top_p\": 1e-9", "", ""},
    {", \"top_p\": 0", "top_p", "invalid_value"},
    {", \"top_p\": 1.01", "top_p", "invalid_value"},
    {", \"top_p\": false", "top_p", "invalid_type"},
    {", \"n\": 1", "", ""},
    {", \"n\": 8", "", ""},
    {", \"n\": 9", "n", "invalid_value"},
    {", \"n\": 0", "n", "invalid_value"},
    {", \"n\": 2.0", "n", "invalid_type"},
    {", \"seed\": 9223372036854775807", "", ""},
    {", \"seed\": -1", "", ""},
    {", \"seed\": 1.5", "seed", "invalid_type"},
    {", \"seed\": \"7\"", "seed", "invalid_type"},
    {", \"stream\": false", "", ""},
    {", \"stream\": 1", "stream", "invalid_type"},
    {", \"stream\": \"true\"", "stream", "invalid_type"},
    {", \"stop\": 5", "stop", "invalid_type"},
    {", \"stop\": [\"a\", 1]", "stop[1]", "invalid_type"},
    {", \"reasoning_effort\": \"minimal\"", "", ""},
    {", \"reasoning_effort\": \"high\"", "", ""},
    {", \"reasoning_effort\": \"max\"", "reasoning_effort", "invalid_value"},
    {", \"reasoning_effort\": 1", "reasoning_effort", "invalid_type"},
    {", \"parallel_tool_calls\": false", "", ""},
    {", \"parallel_tool_calls\": 0", "parallel_tool_calls", "invalid_type"},
    {", \"metadata\": []", "metadata", "invalid_type"},
    {", \"metadata\": {\"a\": 1}", "metadata.a", "invalid_type"},
    {", \"user\": 5", "user", "invalid_type"},
    /* stream_options: only with stream true */
    {", \"stream_options\": {\"include_usage\": true}", "stream_options",
     "invalid_value"},
    {", \"stream\": false, \"stream_options\": {\"include_usage\": true}",
     "stream_options", "invalid_value"},
    {", \"stream\": false, \"stream_options\": null", "", ""},
    {", \"stream\": true, \"stream_options\": {}", "", ""},
    {", \"stream\": true, \"stream_options\": {\"include_usage\": 1}",
     "stream_options.include_usage", "invalid_type"},
    {", \"stream\": true, \"stream_options\": {\"colour\": 1}",
     "stream_options.colour", "unknown_parameter"},
    {", \"stream\": true, \"stream_options\": true", "stream_options",
     "invalid_type"},
};

START_TEST(test_bounds)
{
	char body[1024];
	tacod_chat_request r;
	tacod_request_error e;
	int rc;

	snprintf(body, sizeof(body), REQ("%s"), bounds[_i].more);
	rc = parse(body, &r, &e);
	if (!bounds[_i].param[0]) {
		ck_assert_msg(rc == 0, "%s: refused: %s %s: %s", body, e.param,
			      e.code, e.message);
		tacod_chat_request_free(&r);
		return;
	}
	ck_assert_msg(rc == -EINVAL && !strcmp(e.param, bounds[_i].param) &&
			  !strcmp(e.code, bounds[_i].code),
		      "%s: rc %d param '%s' code '%s' (%s)", body, rc, e.param,
		      e.code, e.message);
	ck_assert_msg(strstr(e.message, bounds[_i].param), "%s: %s",
		      bounds[_i].param, e.message);
}
END_TEST

/* The parameters tacod accepts only with their neutral value, and the
 * unknown ones. */
static const struct {
	const char *more, *param, *code;
} neutral[] = {
    {", \"frequency_penalty\": 0.0", "", ""},
    {", \"frequency_penalty\": 0.5", "frequency_penalty",
     "unsupported_parameter"},
    {", \"frequency_penalty\": \"0\"", "frequency_penalty", "invalid_type"},
    {", \"presence_penalty\": 0", "", ""},
    {", \"presence_penalty\": -1", "presence_penalty", "unsupported_parameter"},
    {", \"logit_bias\": {}", "", ""},
    {", \"logit_bias\": {\"50256\": -100}", "logit_bias",
     "unsupported_parameter"},
    {", \"logit_bias\": []", "logit_bias", "invalid_type"},
    {", \"logprobs\": false", "", ""},
    {", \"logprobs\": true", "logprobs", "unsupported_parameter"},
    {", \"logprobs\": 0", "logprobs", "invalid_type"},
    {", \"top_logprobs\": 0", "", ""},
    {", \"top_logprobs\": 5", "top_logprobs", "unsupported_parameter"},
    {", \"top_logprobs\": 0.0", "top_logprobs", "invalid_type"},
    {", \"response_format\": {\"type\": \"text\"}", "", ""},
    {", \"response_format\": {\"type\": \"json_object\"}", "response_format",
     "unsupported_parameter"},
    {", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": "
     "{\"name\": \"x\"}}",
     "response_format", "unsupported_parameter"},
    {", \"response_format\": {\"type\": \"text\", \"x\": 1}", "response_format",
     "unsupported_parameter"},
    {", \"response_format\": \"text\"", "response_format", "invalid_type"},
    {", \"response_format\": {}", "response_format.type",
     "missing_required_parameter"},
    {", \"modalities\": [\"text\"]", "", ""},
    {", \"modalities\": [\"text\", \"audio\"]", "modalities",
     "unsupported_parameter"},
    {", \"modalities\": [\"audio\"]", "modalities", "unsupported_parameter"},
    {", \"modalities\": \"text\"", "modalities", "invalid_type"},
    {", \"modalities\": [1]", "modalities", "invalid_type"},
    {", \"audio\": {\"voice\": \"alloy\", \"format\": \"mp3\"}", "audio",
     "unsupported_parameter"},
    {", \"prediction\": {\"type\": \"content\", \"content\": \"x\"}",
     "prediction", "unsupported_parameter"},
    {", \"service_tier\": \"default\"", "", ""},
    {", \"service_tier\": \"flex\"", "service_tier", "unsupported_parameter"},
    {", \"service_tier\": 1", "service_tier", "invalid_type"},
    {", \"store\": false", "", ""},
    {", \"store\": true", "store", "unsupported_parameter"},
    {", \"store\": \"no\"", "store", "invalid_type"},
    {", \"metadata\": {}", "", ""},
    {", \"user\": \"\"", "", ""},
    /* unknown top-level parameters, even null */
    {", \"foo\": 1", "foo", "unknown_parameter"},
    {", \"functions\": null", "functions", "unknown_parameter"},
    {", \"function_call\": \"auto\"", "function_call", "unknown_parameter"},
    {", \"top_k\": 5", "top_k", "unknown_parameter"},
    /* tool_choice: auto and none, with tools */
    {", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
     "\"f\"}}], \"tool_choice\": \"none\"",
     "", ""},
    {", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
     "\"f\"}}], \"tool_choice\": \"required\"",
     "tool_choice", "unsupported_parameter"},
    {", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
     "\"f\"}}], \"tool_choice\": {\"type\": \"function\", \"function\": "
     "{\"name\": \"f\"}}",
     "tool_choice", "unsupported_parameter"},
    {", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
     "\"f\"}}], \"tool_choice\": \"any\"",
     "tool_choice", "invalid_value"},
    {", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
     "\"f\"}}], \"tool_choice\": 1",
     "tool_choice", "invalid_type"},
    {", \"tool_choice\": \"auto\"", "tool_choice", "invalid_value"},
    {", \"tools\": [], \"tool_choice\": \"none\"", "tool_choice",
     "invalid_value"},
    /* tools */
    {", \"tools\": {}", "tools", "invalid_type"},
    {", \"tools\": [1]", "tools[0]", "invalid_type"},
    {", \"tools\": [{\"function\": {\"name\": \"f\"}}]", "tools[0].type",
     "missing_required_parameter"},
    {", \"tools\": [{\"type\": \"custom\", \"function\": {\"name\": "
     "\"f\"}}]",
     "tools[0].type", "invalid_value"},
    {", \"tools\": [{\"type\": \"function\"}]", "tools[0].function",
     "missing_required_parameter"},
    {", \"tools\": [{\"type\": \"function\", \"function\": {}}]",
     "tools[0].function.name", "missing_required_parameter"},
    {", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
     "\"a.b\"}}]",
     "tools[0].function.name", "invalid_value"},
    {", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
     "\"\"}}]",
     "tools[0].function.name", "invalid_value"},
    {", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
     "\"f\", \"parameters\": []}}]",
     "tools[0].function.parameters", "invalid_type"},
    {", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
     "\"f\", \"description\": 1}}]",
     "tools[0].function.description", "invalid_type"},
    {", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
     "\"f\", \"strict\": \"yes\"}}]",
     "tools[0].function.strict", "invalid_type"},
    {", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
     "\"f\", \"returns\": {}}}]",
     "tools[0].function.returns", "unknown_parameter"},
    {", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
     "\"f\"}, \"cache\": 1}]",
     "tools[0].cache", "unknown_parameter"},
};

START_TEST(test_neutral_and_unknown)
{
	char body[1024];
	tacod_chat_request r;
	tacod_request_error e;
	int rc;

	snprintf(body, sizeof(body), REQ("%s"), neutral[_i].more);
	rc = parse(body, &r, &e);
	if (!neutral[_i].param[0]) {
		ck_assert_msg(rc == 0, "%s: refused: %s %s: %s", body, e.param,
			      e.code, e.message);
		tacod_chat_request_free(&r);
		return;
	}
	ck_assert_msg(rc == -EINVAL && !strcmp(e.param, neutral[_i].param) &&
			  !strcmp(e.code, neutral[_i].code),
		      "%s: rc %d param '%s' code '%s' (%s)", body, rc, e.param,
		      e.code, e.message);
	ck_assert_msg(strstr(e.message, neutral[_i].param), "%s: %s",
		      neutral[_i].param, e.message);
}
END_TEST

/* Requests refused for their messages: body, param, code, and what the
 * message says. */
static const struct {
	const char *body, *param, *code, *says;
} bad_messages[] = {
    {"[]", "", "invalid_type", "JSON object"},
    {"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", "model",
     "missing_required_parameter", "model is required"},
    {"{\"model\": null, \"messages\": []}", "model",
     "missing_required_parameter", "model is required"},
    {"{\"model\": 5, \"messages\": []}", "model", "invalid_type",
     "must be a string, not an integer"},
    {"{\"model\": \"m\"}", "messages", "missing_required_parameter",
     "messages is required"},
    {"{\"model\": \"m\", \"messages\": null}", "messages",
     "missing_required_parameter", "messages is required"},
    {"{\"model\": \"m\", \"messages\": {}}", "messages", "invalid_type",
     "an array"},
    {"{\"model\": \"m\", \"messages\": [\"hi\"]}", "messages[0]",
     "invalid_type", "messages[0] must be a message object, not a string"},
    {"{\"model\": \"m\", \"messages\": [{\"content\": \"hi\"}]}",
     "messages[0].role", "missing_required_parameter",
     "messages[0].role is required"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"bot\", \"content\": "
     "\"hi\"}]}",
     "messages[0].role", "invalid_value", "'bot' is not a role"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"function\", "
     "\"content\": \"hi\", \"name\": \"f\"}]}",
     "messages[0].role", "invalid_value", "is not a role"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": 1, \"content\": "
     "\"hi\"}]}",
     "messages[0].role", "invalid_type", "must be a string"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"user\"}]}",
     "messages[0].content", "missing_required_parameter",
     "messages[0].content is required"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": "
     "null}]}",
     "messages[0].content", "missing_required_parameter",
     "messages[0].content is required"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": "
     "5}]}",
     "messages[0].content", "invalid_type", "array of text parts"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": "
     "[]}]}",
     "messages[0].content", "invalid_value", "1 to 256 content parts"},
    /* image parts are refused, naming the part's type */
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": "
     "\"a\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", "
     "\"text\": \"see\"}, {\"type\": \"image_url\", \"image_url\": {\"url\": "
     "\"https://x/y.png\"}}]}]}",
     "messages[1].content[1].type", "unsupported_content",
     "only text parts are supported, not 'image_url'"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": "
     "[{\"type\": \"input_audio\", \"input_audio\": {}}]}]}",
     "messages[0].content[0].type", "unsupported_content", "input_audio"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": "
     "[{\"text\": \"x\"}]}]}",
     "messages[0].content[0].type", "missing_required_parameter",
     "messages[0].content[0].type is required"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": "
     "[\"x\"]}]}",
     "messages[0].content[0]", "invalid_type", "content part"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": "
     "\"a\"}, {\"role\": \"user\", \"content\": \"b\"}, {\"role\": \"user\", "
     "\"content\": [{\"type\": \"text\", \"text\": 3}]}]}",
     "messages[2].content[0].text", "invalid_type",
     "messages[2].content[0].text must be a string, not an integer"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": "
     "[{\"type\": \"text\"}]}]}",
     "messages[0].content[0].text", "missing_required_parameter",
     "is required"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": "
     "[{\"type\": \"text\", \"text\": \"x\", \"cache_control\": {}}]}]}",
     "messages[0].content[0].cache_control", "unknown_parameter",
     "unknown field of a text part"},
    /* unknown keys of a message, and keys of another role's */
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": "
     "\"a\"}, {\"role\": \"user\", \"content\": \"b\"}, {\"role\": "
     "\"system\", \"content\": \"c\"}, {\"role\": \"user\", \"content\": "
     "\"d\", \"foo\": 1}]}",
     "messages[3].foo", "unknown_parameter",
     "messages[3].foo: unknown field of a user message"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": "
     "\"a\", \"tool_calls\": []}]}",
     "messages[0].tool_calls", "unknown_parameter", "a user message"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": "
     "\"a\", \"reasoning_content\": \"r\"}]}",
     "messages[0].reasoning_content", "unknown_parameter", "user message"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"system\", \"content\": "
     "\"a\", \"tool_call_id\": \"c\"}]}",
     "messages[0].tool_call_id", "unknown_parameter", "a system message"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": "
     "\"a\", \"name\": 1}]}",
     "messages[0].name", "invalid_type", "must be a string"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": "
     "\"a\", \"name\": \"\"}]}",
     "", "", ""},
    /* tool messages: tool_call_id required */
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": "
     "\"a\"}, {\"role\": \"tool\", \"content\": \"18C\"}]}",
     "messages[1].tool_call_id", "missing_required_parameter",
     "messages[1].tool_call_id is required"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"tool\", \"content\": "
     "\"18C\", \"tool_call_id\": null}]}",
     "messages[0].tool_call_id", "missing_required_parameter", "is required"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"tool\", \"content\": "
     "\"18C\", \"tool_call_id\": 7}]}",
     "messages[0].tool_call_id", "invalid_type", "must be a string"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"tool\", "
     "\"tool_call_id\": \"c\"}]}",
     "messages[0].content", "missing_required_parameter", "is required"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"tool\", \"content\": "
     "[{\"type\": \"text\", \"text\": \"18C\"}], \"tool_call_id\": "
     "\"c\"}]}",
     "", "", ""},
    /* assistant: content null only beside tool calls */
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"assistant\", "
     "\"content\": null}]}",
     "messages[0].content", "missing_required_parameter", "tool_calls"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"assistant\", "
     "\"tool_calls\": []}]}",
     "messages[0].content", "missing_required_parameter", "tool_calls"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"assistant\", "
     "\"tool_calls\": {}}]}",
     "messages[0].tool_calls", "invalid_type", "an array of tool calls"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"assistant\", "
     "\"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": "
     "\"f\", \"arguments\": \"{}\"}}]}]}",
     "messages[0].tool_calls[0].id", "missing_required_parameter",
     "messages[0].tool_calls[0].id is required"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"assistant\", "
     "\"tool_calls\": [{\"id\": \"c\", \"type\": \"code\", \"function\": "
     "{\"name\": \"f\", \"arguments\": \"{}\"}}]}]}",
     "messages[0].tool_calls[0].type", "invalid_value", "\"function\""},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"assistant\", "
     "\"tool_calls\": [{\"id\": \"c\", \"function\": {\"name\": \"f\", "
     "\"arguments\": \"{}\"}}]}]}",
     "messages[0].tool_calls[0].type", "missing_required_parameter",
     "is required"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"assistant\", "
     "\"tool_calls\": [{\"id\": \"c\", \"type\": \"function\"}]}]}",
     "messages[0].tool_calls[0].function", "missing_required_parameter",
     "is required"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"assistant\", "
     "\"tool_calls\": [{\"id\": \"c\", \"type\": \"function\", "
     "\"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]}]}",
     "messages[0].tool_calls[0].function.arguments", "invalid_type",
     "must be a string of JSON, not an object"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"assistant\", "
     "\"tool_calls\": [{\"id\": \"c\", \"type\": \"function\", "
     "\"function\": {\"name\": \"f\"}}]}]}",
     "messages[0].tool_calls[0].function.arguments",
     "missing_required_parameter", "is required"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"assistant\", "
     "\"tool_calls\": [{\"id\": \"c\", \"type\": \"function\", "
     "\"function\": {\"name\": \"\", \"arguments\": \"{}\"}}]}]}",
     "messages[0].tool_calls[0].function.name", "invalid_value",
     "must not be empty"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"assistant\", "
     "\"tool_calls\": [{\"id\": \"c\", \"type\": \"function\", "
     "\"function\": {\"name\": \"f\", \"arguments\": \"{}\", \"x\": "
     "1}}]}]}",
     "messages[0].tool_calls[0].function.x", "unknown_parameter",
     "a tool call's function"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"assistant\", "
     "\"tool_calls\": [{\"id\": \"c\", \"type\": \"function\", "
     "\"function\": {\"name\": \"f\", \"arguments\": \"{}\"}, \"index\": "
     "0}]}]}",
     "messages[0].tool_calls[0].index", "unknown_parameter", "a tool call"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"assistant\", "
     "\"content\": \"a\", \"reasoning_content\": 1}]}",
     "messages[0].reasoning_content", "invalid_type", "must be a string"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"assistant\", "
     "\"content\": \"a\", \"reasoning\": []}]}",
     "messages[0].reasoning", "invalid_type", "must be a string"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"assistant\", "
     "\"content\": \"a\", \"function_call\": {\"name\": \"f\", "
     "\"arguments\": \"{}\"}}]}",
     "messages[0].function_call", "unsupported_parameter", "tool_calls"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"assistant\", "
     "\"content\": \"a\", \"audio\": {\"id\": \"x\"}}]}",
     "messages[0].audio", "unsupported_parameter", "text only"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"assistant\", "
     "\"content\": \"a\", \"annotations\": 1}]}",
     "messages[0].annotations", "invalid_type", "an array"},
    {"{\"model\": \"m\", \"messages\": [{\"role\": \"assistant\", "
     "\"content\": \"a\", \"thinking\": \"t\"}]}",
     "messages[0].thinking", "unknown_parameter", "an assistant message"},
    /* the first problem is the one returned: unknown top-level keys,
     * then the model, then the messages */
    {"{\"model\": 5, \"messages\": 5, \"bar\": 1}", "bar", "unknown_parameter",
     "Unrecognized request argument supplied: bar"},
    {"{\"model\": 5, \"messages\": 5}", "model", "invalid_type",
     "model must be"},
};

START_TEST(test_bad_messages)
{
	tacod_chat_request r;
	tacod_request_error e;
	int rc = parse(bad_messages[_i].body, &r, &e);

	if (!bad_messages[_i].param[0] && !bad_messages[_i].code[0]) {
		ck_assert_msg(rc == 0, "%s: refused: %s %s: %s",
			      bad_messages[_i].body, e.param, e.code,
			      e.message);
		tacod_chat_request_free(&r);
		return;
	}
	ck_assert_msg(rc == -EINVAL &&
			  !strcmp(e.param, bad_messages[_i].param) &&
			  !strcmp(e.code, bad_messages[_i].code),
		      "%s: rc %d param '%s' code '%s' (%s)",
		      bad_messages[_i].body, rc, e.param, e.code, e.message);
	ck_assert_ptr_null(r.worker);
	ck_assert_msg(strstr(e.message, bad_messages[_i].says),
		      "%s: message '%s' lacks '%s'", bad_messages[_i].body,
		      e.message, bad_messages[_i].says);
}
END_TEST

/* NULs inside strings (a body parsed with JSON_ALLOW_NUL) and long keys:
 * the error's param stays UTF-8 and within its field. */
START_TEST(test_nul_and_long_keys)
{
	json_t *req;
	char key[400];
	tacod_chat_request r;
	tacod_request_error e;

	req = base_request();
	json_object_set_new(req, "model", json_stringn("ab\0c", 4));
	expect_err_json(req, "model", "invalid_value");
	req = base_request();
	json_object_set_new(json_array_get(json_object_get(req, "messages"), 0),
			    "role", json_stringn("user\0x", 6));
	expect_err_json(req, "messages[0].role", "invalid_value");
	req = base_request();
	json_object_set_new(req, "stop", json_stringn("a\0", 2));
	expect_err_json(req, "stop", "invalid_value");
	req = base_request();
	json_object_set_new(json_array_get(json_object_get(req, "messages"), 0),
			    "content", json_stringn("h\0i", 3));
	expect_err_json(req, "messages[0].content", "invalid_value");

	/* a key of 300 bytes of two-byte characters: cut whole */
	for (size_t i = 0; i + 2 < sizeof(key) && i < 300; i += 2)
		memcpy(key + i, "\xc3\xa9", 2);
	key[300] = 0;
	req = base_request();
	json_object_set_new(json_array_get(json_object_get(req, "messages"), 0),
			    key, json_true());
	ck_assert_int_eq(parse_json(req, &r, &e), -EINVAL);
	ck_assert_str_eq(e.code, "unknown_parameter");
	ck_assert(strlen(e.param) < sizeof(e.param));
	ck_assert_ptr_nonnull(strstr(e.param, "messages[0]."));
	{
		json_t *s = json_string(e.param), *mm = json_string(e.message);

		ck_assert_msg(s && mm, "not UTF-8: %s / %s", e.param,
			      e.message);
		json_decref(s);
		json_decref(mm);
	}
	req = base_request();
	json_object_set_new(req, key, json_true());
	ck_assert_int_eq(parse_json(req, &r, &e), -EINVAL);
	ck_assert_str_eq(e.code, "unknown_parameter");
	{
		json_t *s = json_string(e.param), *mm = json_string(e.message);

		ck_assert_msg(s && mm, "not UTF-8: %s / %s", e.param,
			      e.message);
		json_decref(s);
		json_decref(mm);
	}
}
END_TEST

/* Jansson's allocations counted, failing from the fail_at-th on. */
static long live, allocs, fail_at = -1;

static void *counting_malloc(size_t n)
{
	void *p;

	if (fail_at >= 0 && allocs++ >= fail_at)
		return NULL;
	if ((p = malloc(n)))
		live++;
	return p;
}

static void counting_free(void *p)
{
	if (p)
		live--;
	free(p);
}

/* Out of memory at every allocation of the full request's parse in turn:
 * -ENOMEM (or success once nothing fails), and nothing leaked. */
START_TEST(test_out_of_memory)
{
	static const char body[] =
	    "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", "
	    "\"content\": [{\"type\": \"text\", \"text\": \"a\"}]}, "
	    "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": "
	    "[{\"id\": \"c\", \"type\": \"function\", \"function\": "
	    "{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": [1, 2]}\"}}, "
	    "{\"id\": \"d\", \"type\": \"function\", \"function\": "
	    "{\"name\": \"f\", \"arguments\": \"x\"}}]}, {\"role\": "
	    "\"tool\", \"tool_call_id\": \"c\", \"content\": \"r\"}], "
	    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
	    "\"f\", \"description\": null, \"parameters\": {\"type\": "
	    "\"object\"}}}], \"max_tokens\": 5, \"seed\": 1, \"stop\": \"s\", "
	    "\"stream\": true, \"reasoning_effort\": \"high\"}";
	json_t *req;
	tacod_chat_request r;
	tacod_request_error e;
	long before;
	int rc, ok = 0;

	json_set_alloc_funcs(counting_malloc, counting_free);
	req = json_loads(body, 0, NULL);
	ck_assert_ptr_nonnull(req);
	for (long k = 0; k < 100000 && !ok; k++) {
		before = live;
		allocs = 0;
		fail_at = k;
		rc = tacod_chat_request_parse(req, &r, &e);
		fail_at = -1;
		ck_assert_msg(rc == 0 || rc == -ENOMEM, "at %ld: %d (%s)", k,
			      rc, e.message);
		if (rc == 0) {
			ck_assert_ptr_nonnull(r.worker);
			tacod_chat_request_free(&r);
			ok = allocs <= k; /* nothing failed */
		} else {
			ck_assert_ptr_null(r.worker);
			ck_assert_str_eq(e.code, "server_error");
		}
		ck_assert_msg(live == before, "at %ld: %ld allocations leaked",
			      k, live - before);
	}
	ck_assert(ok);
	json_decref(req);
	ck_assert_int_eq(live, 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("chat_request");
	TCase *tc = tcase_create("chat_request");

	tcase_add_test(tc, test_full_request);
	tcase_add_test(tc, test_defaults_and_nulls);
	tcase_add_test(tc, test_limits);
	tcase_add_loop_test(tc, test_bounds, 0,
			    sizeof(bounds) / sizeof(bounds[0]));
	tcase_add_loop_test(tc, test_neutral_and_unknown, 0,
			    sizeof(neutral) / sizeof(neutral[0]));
	tcase_add_loop_test(tc, test_bad_messages, 0,
			    sizeof(bad_messages) / sizeof(bad_messages[0]));
	tcase_add_test(tc, test_nul_and_long_keys);
	tcase_add_test(tc, test_out_of_memory);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
