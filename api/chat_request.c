/* chat_request.c: POST /v1/chat/completions, validated field by field as
 * OpenAI's API does (the first problem returned, its path in param), and
 * the request a generation worker takes, made from it. */
#include "chat_request.h"

#include "api/job_method.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "types.h"
#include "util/text.h"

/* A field's path, "messages[1023].tool_calls[127].function.arguments", as
 * e->param holds it: a longer one (a client's long key) is cut at a
 * character's boundary (util/text.h), so that the error stays UTF-8. */
#define PATH_CAP sizeof(((tacod_request_error *)0)->param)

static int absent(json_t *v)
{
	return !v || json_is_null(v);
}

/* What v is, as OpenAI's "got a string instead" names it. */
static const char *type_name(json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return "an object";
	case JSON_ARRAY:
		return "an array";
	case JSON_STRING:
		return "a string";
	case JSON_INTEGER:
		return "an integer";
	case JSON_REAL:
		return "a decimal number";
	case JSON_TRUE:
	case JSON_FALSE:
		return "a boolean";
	default:
		return "null";
	}
}

/* v is the string s, byte for byte (a NUL inside v does not end it). */
static int is(json_t *v, const char *s)
{
	return json_is_string(v) && json_string_length(v) == strlen(s) &&
	       !memcmp(json_string_value(v), s, json_string_length(v));
}

static int wrong_type(tacod_request_error *e, const char *p, const char *want,
		      json_t *v)
{
	return tacod_request_fail(e, p, "invalid_type", "%s must be %s, not %s",
				  p, want, type_name(v));
}

static int missing(tacod_request_error *e, const char *p)
{
	return tacod_request_fail(e, p, "missing_required_parameter",
				  "%s is required", p);
}

static int unsupported(tacod_request_error *e, const char *p, const char *why)
{
	return tacod_request_fail(e, p, "unsupported_parameter",
				  "%s is not supported by tacod: %s", p, why);
}

/* A string of min..max bytes without NUL. */
static int check_str(json_t *v, const char *p, size_t min, size_t max,
		     tacod_request_error *e)
{
	size_t n;

	if (!json_is_string(v))
		return wrong_type(e, p, "a string", v);
	n = json_string_length(v);
	if (strlen(json_string_value(v)) != n)
		return tacod_request_fail(e, p, "invalid_value",
					  "%s must not contain a NUL character",
					  p);
	if (n < min)
		return tacod_request_fail(e, p, "invalid_value",
					  "%s must not be empty", p);
	if (n > max)
		return tacod_request_fail(
		    e, p, "invalid_value",
		    "%s is %zu bytes long: it must be at most %zu", p, n, max);
	return 0;
}

/* An optional string (null: absent) of at most max bytes. */
static int opt_str(json_t *v, const char *p, size_t max, tacod_request_error *e)
{
	return absent(v) ? 0 : check_str(v, p, 0, max, e);
}

/* An integer in [lo, hi]: reals (even 5.0) and strings are refused. */
static int check_int(json_t *v, const char *p, json_int_t lo, json_int_t hi,
		     json_int_t *out, tacod_request_error *e)
{
	if (!json_is_integer(v))
		return tacod_request_fail(
		    e, p, "invalid_type",
		    "%s must be an integer in [%lld, %lld], not %s", p,
		    (long long)lo, (long long)hi, type_name(v));
	if (json_integer_value(v) < lo || json_integer_value(v) > hi)
		return tacod_request_fail(
		    e, p, "invalid_value",
		    "%s must be an integer in [%lld, %lld], not %lld", p,
		    (long long)lo, (long long)hi,
		    (long long)json_integer_value(v));
	*out = json_integer_value(v);
	return 0;
}

/* An optional boolean: *out untouched when absent. */
static int opt_bool(json_t *v, const char *p, int *out, tacod_request_error *e)
{
	if (absent(v))
		return 0;
	if (!json_is_boolean(v))
		return wrong_type(e, p, "a boolean (true or false)", v);
	if (out)
		*out = json_is_true(v);
	return 0;
}

/* Every key of o is one of keys: else the first other one, as p.key. */
static int only_keys(json_t *o, const char *const *keys, const char *p,
		     const char *what, tacod_request_error *e)
{
	char q[PATH_CAP];
	const char *k;
	json_t *v;

	json_object_foreach(o, k, v)
	{
		int ok = 0;
		for (int i = 0; keys[i] && !ok; i++)
			ok = !strcmp(k, keys[i]);
		if (!ok) {
			taco_text_format(q, sizeof(q), "%s.%s", p, k);
			return tacod_request_fail(e, q, "unknown_parameter",
						  "%s: unknown field of %s", q,
						  what);
		}
	}
	return 0;
}

/* A message's content: a string, or an array of text parts. */
static int check_content(json_t *c, const char *p, tacod_request_error *e)
{
	static const char *const part_keys[] = {"type", "text", NULL};
	char q[PATH_CAP], t[PATH_CAP];
	json_t *part, *type, *text;
	size_t j;
	int r;

	if (json_is_string(c))
		return check_str(c, p, 0, SIZE_MAX, e);
	if (!json_is_array(c))
		return wrong_type(e, p,
				  "a string or an array of text parts "
				  "({\"type\": \"text\", \"text\": ...})",
				  c);
	if (!json_array_size(c) || json_array_size(c) > TACOD_CHAT_MAX_PARTS)
		return tacod_request_fail(
		    e, p, "invalid_value",
		    "%s must hold 1 to %d content parts, not %zu", p,
		    TACOD_CHAT_MAX_PARTS, json_array_size(c));
	json_array_foreach(c, j, part)
	{
		taco_text_format(q, sizeof(q), "%s[%zu]", p, j);
		if (!json_is_object(part))
			return wrong_type(
			    e, q,
			    "a content part ({\"type\": \"text\", "
			    "\"text\": ...})",
			    part);
		type = json_object_get(part, "type");
		taco_text_format(t, sizeof(t), "%s.type", q);
		if (absent(type))
			return missing(e, t);
		if (!json_is_string(type))
			return wrong_type(e, t, "a string", type);
		if (!is(type, "text"))
			return tacod_request_fail(
			    e, t, "unsupported_content",
			    "%s: only text parts are supported, not '%s'", t,
			    json_string_value(type));
		text = json_object_get(part, "text");
		taco_text_format(t, sizeof(t), "%s.text", q);
		if (absent(text))
			return missing(e, t);
		if ((r = check_str(text, t, 0, SIZE_MAX, e)) ||
		    (r = only_keys(part, part_keys, q, "a text part", e)))
			return r;
	}
	return 0;
}

/* An assistant's tool_calls: [{"id", "type": "function", "function":
 * {"name", "arguments": a string}}]; [] is none. */
static int check_tool_calls(json_t *tc, const char *p, tacod_request_error *e)
{
	static const char *const call_keys[] = {"id", "type", "function", NULL};
	static const char *const fn_keys[] = {"name", "arguments", NULL};
	char q[PATH_CAP], t[PATH_CAP];
	json_t *c, *f, *v;
	size_t k;
	int r;

	if (!json_is_array(tc))
		return wrong_type(e, p, "an array of tool calls", tc);
	if (json_array_size(tc) > TACOD_CHAT_MAX_TOOLS)
		return tacod_request_fail(e, p, "invalid_value",
					  "%s holds %zu tool calls: at most %d",
					  p, json_array_size(tc),
					  TACOD_CHAT_MAX_TOOLS);
	json_array_foreach(tc, k, c)
	{
		taco_text_format(q, sizeof(q), "%s[%zu]", p, k);
		if (!json_is_object(c))
			return wrong_type(e, q,
					  "a tool call ({\"id\", \"type\": "
					  "\"function\", \"function\": "
					  "{\"name\", \"arguments\"}})",
					  c);
		if ((r = only_keys(c, call_keys, q, "a tool call", e)))
			return r;
		taco_text_format(t, sizeof(t), "%s.id", q);
		v = json_object_get(c, "id");
		if (absent(v))
			return missing(e, t);
		if ((r = check_str(v, t, 1, TACOD_CHAT_MAX_NAME, e)))
			return r;
		taco_text_format(t, sizeof(t), "%s.type", q);
		v = json_object_get(c, "type");
		if (absent(v))
			return missing(e, t);
		if (!is(v, "function"))
			return tacod_request_fail(e, t, "invalid_value",
						  "%s must be \"function\"", t);
		taco_text_format(t, sizeof(t), "%s.function", q);
		f = json_object_get(c, "function");
		if (absent(f))
			return missing(e, t);
		if (!json_is_object(f))
			return wrong_type(
			    e, t, "an object {\"name\", \"arguments\"}", f);
		if ((r = only_keys(f, fn_keys, t, "a tool call's function", e)))
			return r;
		taco_text_format(t, sizeof(t), "%s.function.name", q);
		v = json_object_get(f, "name");
		if (absent(v))
			return missing(e, t);
		if ((r = check_str(v, t, 1, TACOD_CHAT_MAX_NAME, e)))
			return r;
		taco_text_format(t, sizeof(t), "%s.function.arguments", q);
		v = json_object_get(f, "arguments");
		if (absent(v))
			return missing(e, t);
		if (!json_is_string(v))
			return wrong_type(e, t, "a string of JSON", v);
		if ((r = check_str(v, t, 0, SIZE_MAX, e)))
			return r;
	}
	return 0;
}

static const char *const roles[] = {"system",	 "developer", "user",
				    "assistant", "tool",      NULL};

/* The fields of a message of each role: OpenAI's, and the reasoning of an
 * assistant's earlier turn (reasoning_content, reasoning). refusal, audio,
 * function_call and annotations are what OpenAI's own replies carry, so an
 * assistant message a client sends back as it got it passes. */
static const char *const common_keys[] = {"role", "content", "name", NULL};
static const char *const assistant_keys[] = {
    "role",	     "content",		  "name",      "tool_calls",
    "refusal",	     "reasoning_content", "reasoning", "audio",
    "function_call", "annotations",	  NULL};
static const char *const tool_keys[] = {"role", "content", "name",
					"tool_call_id", NULL};

static int check_message(json_t *m, size_t i, tacod_request_error *e)
{
	char p[PATH_CAP], q[PATH_CAP];
	json_t *role = json_object_get(m, "role"), *content, *tc, *v;
	const char *rs;
	int r, known = 0, assistant, calls;

	taco_text_format(p, sizeof(p), "messages[%zu]", i);
	if (!json_is_object(m))
		return wrong_type(e, p, "a message object", m);
	taco_text_format(q, sizeof(q), "%s.role", p);
	if (absent(role))
		return missing(e, q);
	if (!json_is_string(role))
		return wrong_type(e, q, "a string", role);
	rs = json_string_value(role);
	for (int k = 0; roles[k]; k++)
		known |= is(role, roles[k]);
	if (!known)
		return tacod_request_fail(
		    e, q, "invalid_value",
		    "%s: '%s' is not a role: system, developer, user, "
		    "assistant or tool",
		    q, rs);
	assistant = !strcmp(rs, "assistant");
	taco_text_format(q, sizeof(q), "a%s %s message", assistant ? "n" : "",
			 rs);
	if ((r = only_keys(m,
			   assistant		 ? assistant_keys
			   : !strcmp(rs, "tool") ? tool_keys
						 : common_keys,
			   p, q, e)))
		return r;
	taco_text_format(q, sizeof(q), "%s.name", p);
	if ((r = opt_str(json_object_get(m, "name"), q, TACOD_CHAT_MAX_NAME,
			 e)))
		return r;
	tc = json_object_get(m, "tool_calls");
	calls = 0;
	if (!absent(tc)) {
		taco_text_format(q, sizeof(q), "%s.tool_calls", p);
		if ((r = check_tool_calls(tc, q, e)))
			return r;
		calls = json_array_size(tc) > 0;
	}
	content = json_object_get(m, "content");
	taco_text_format(q, sizeof(q), "%s.content", p);
	if (absent(content)) {
		if (!calls)
			return tacod_request_fail(
			    e, q, "missing_required_parameter",
			    "%s is required%s", q,
			    assistant ? " (it may be null only beside "
					"tool_calls)"
				      : "");
	} else if ((r = check_content(content, q, e)))
		return r;
	if (!strcmp(rs, "tool")) {
		taco_text_format(q, sizeof(q), "%s.tool_call_id", p);
		v = json_object_get(m, "tool_call_id");
		if (absent(v))
			return tacod_request_fail(
			    e, q, "missing_required_parameter",
			    "%s is required: the id of the tool call the "
			    "message answers",
			    q);
		if ((r = check_str(v, q, 1, TACOD_CHAT_MAX_NAME, e)))
			return r;
	}
	if (!assistant)
		return 0;
	taco_text_format(q, sizeof(q), "%s.reasoning_content", p);
	if ((r = opt_str(json_object_get(m, "reasoning_content"), q, SIZE_MAX,
			 e)))
		return r;
	taco_text_format(q, sizeof(q), "%s.reasoning", p);
	if ((r = opt_str(json_object_get(m, "reasoning"), q, SIZE_MAX, e)))
		return r;
	taco_text_format(q, sizeof(q), "%s.refusal", p);
	if ((r = opt_str(json_object_get(m, "refusal"), q, SIZE_MAX, e)))
		return r;
	v = json_object_get(m, "annotations");
	taco_text_format(q, sizeof(q), "%s.annotations", p);
	if (!absent(v) && !json_is_array(v))
		return wrong_type(e, q, "an array", v);
	taco_text_format(q, sizeof(q), "%s.function_call", p);
	if (!absent(json_object_get(m, "function_call")))
		return unsupported(e, q,
				   "OpenAI's deprecated field: give "
				   "tool_calls");
	taco_text_format(q, sizeof(q), "%s.audio", p);
	if (!absent(json_object_get(m, "audio")))
		return unsupported(e, q, "tacod's models produce text only");
	return 0;
}

static int check_messages(json_t *msgs, tacod_request_error *e)
{
	json_t *m;
	size_t i;
	int r;

	if (absent(msgs))
		return missing(e, "messages");
	if (!json_is_array(msgs))
		return wrong_type(e, "messages", "an array of messages", msgs);
	if (!json_array_size(msgs) ||
	    json_array_size(msgs) > TACOD_CHAT_MAX_MESSAGES)
		return tacod_request_fail(
		    e, "messages", "invalid_value",
		    "messages must hold 1 to %d messages, not %zu",
		    TACOD_CHAT_MAX_MESSAGES, json_array_size(msgs));
	json_array_foreach(msgs, i, m)
	{
		if ((r = check_message(m, i, e)))
			return r;
	}
	return 0;
}

/* A tool's name, as OpenAI takes it: ^[a-zA-Z0-9_-]{1,64}$. */
static int tool_name_ok(const char *s)
{
	size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyz"
			     "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-");

	return n && !s[n] && n <= TACOD_CHAT_MAX_TOOL_NAME;
}

/* tools: [{"type": "function", "function": {"name", "description"?,
 * "parameters"?: {...}, "strict"?: bool}}]; [] is none. */
static int check_tools(json_t *tools, tacod_request_error *e)
{
	static const char *const tool_keys_[] = {"type", "function", NULL};
	static const char *const fn_keys[] = {"name", "description",
					      "parameters", "strict", NULL};
	char q[PATH_CAP], t[PATH_CAP];
	json_t *tool, *f, *v;
	size_t i;
	int r;

	if (absent(tools))
		return 0;
	if (!json_is_array(tools))
		return wrong_type(e, "tools", "an array of tools", tools);
	if (json_array_size(tools) > TACOD_CHAT_MAX_TOOLS)
		return tacod_request_fail(e, "tools", "invalid_value",
					  "tools holds %zu tools: at most %d",
					  json_array_size(tools),
					  TACOD_CHAT_MAX_TOOLS);
	json_array_foreach(tools, i, tool)
	{
		taco_text_format(q, sizeof(q), "tools[%zu]", i);
		if (!json_is_object(tool))
			return wrong_type(e, q,
					  "a tool ({\"type\": \"function\", "
					  "\"function\": {\"name\", ...}})",
					  tool);
		if ((r = only_keys(tool, tool_keys_, q, "a tool", e)))
			return r;
		taco_text_format(t, sizeof(t), "%s.type", q);
		v = json_object_get(tool, "type");
		if (absent(v))
			return missing(e, t);
		if (!json_is_string(v))
			return wrong_type(e, t, "a string", v);
		if (!is(v, "function"))
			return tacod_request_fail(
			    e, t, "invalid_value",
			    "%s must be \"function\": tacod takes function "
			    "tools only",
			    t);
		taco_text_format(t, sizeof(t), "%s.function", q);
		f = json_object_get(tool, "function");
		if (absent(f))
			return missing(e, t);
		if (!json_is_object(f))
			return wrong_type(e, t, "an object {\"name\", ...}", f);
		if ((r = only_keys(f, fn_keys, t, "a function", e)))
			return r;
		taco_text_format(t, sizeof(t), "%s.function.name", q);
		v = json_object_get(f, "name");
		if (absent(v))
			return missing(e, t);
		if (!json_is_string(v))
			return wrong_type(e, t, "a string", v);
		if (!tool_name_ok(json_string_value(v)) ||
		    strlen(json_string_value(v)) != json_string_length(v))
			return tacod_request_fail(
			    e, t, "invalid_value",
			    "%s must be 1 to %d letters, digits, '_' or '-'", t,
			    TACOD_CHAT_MAX_TOOL_NAME);
		taco_text_format(t, sizeof(t), "%s.function.description", q);
		if ((r = opt_str(json_object_get(f, "description"), t, SIZE_MAX,
				 e)))
			return r;
		taco_text_format(t, sizeof(t), "%s.function.parameters", q);
		v = json_object_get(f, "parameters");
		if (!absent(v) && !json_is_object(v))
			return wrong_type(e, t, "an object (a JSON Schema)", v);
		taco_text_format(t, sizeof(t), "%s.function.strict", q);
		if ((r = opt_bool(json_object_get(f, "strict"), t, NULL, e)))
			return r;
	}
	return 0;
}

/* tool_choice: "auto" or "none"; "required" and a named function would
 * need constrained decoding. */
static int check_tool_choice(json_t *v, json_t *tools, tacod_request_error *e)
{
	if (absent(v))
		return 0;
	if (json_is_string(v)) {
		if (is(v, "required"))
			return unsupported(
			    e, "tool_choice",
			    "\"required\" (tacod renders the tools but does "
			    "not constrain decoding): give \"auto\" or "
			    "\"none\"");
		if (!is(v, "auto") && !is(v, "none"))
			return tacod_request_fail(
			    e, "tool_choice", "invalid_value",
			    "tool_choice must be \"none\", \"auto\" or "
			    "\"required\", or an object naming a tool");
	} else if (json_is_object(v)) {
		return unsupported(e, "tool_choice",
				   "a named tool (tacod renders the tools but "
				   "does not constrain decoding): give "
				   "\"auto\" or \"none\"");
	} else {
		return wrong_type(e, "tool_choice",
				  "\"none\", \"auto\", \"required\" or an "
				  "object",
				  v);
	}
	if (absent(tools))
		return tacod_request_fail(
		    e, "tool_choice", "invalid_value",
		    "tool_choice is only allowed when tools are specified");
	return 0;
}

/* stop: a string or an array of strings, each 1..TACOD_CHAT_MAX_STOP_LEN
 * bytes. */
static int check_stop(json_t *v, tacod_request_error *e)
{
	char q[PATH_CAP];
	json_t *s;
	size_t j;
	int r;

	if (absent(v))
		return 0;
	if (json_is_string(v))
		return check_str(v, "stop", 1, TACOD_CHAT_MAX_STOP_LEN, e);
	if (!json_is_array(v))
		return wrong_type(e, "stop", "a string or an array of strings",
				  v);
	if (!json_array_size(v) || json_array_size(v) > TACOD_CHAT_MAX_STOP)
		return tacod_request_fail(
		    e, "stop", "invalid_value",
		    "stop must hold 1 to %d strings, not %zu",
		    TACOD_CHAT_MAX_STOP, json_array_size(v));
	json_array_foreach(v, j, s)
	{
		taco_text_format(q, sizeof(q), "stop[%zu]", j);
		if ((r = check_str(s, q, 1, TACOD_CHAT_MAX_STOP_LEN, e)))
			return r;
	}
	return 0;
}

static int check_stream_options(json_t *v, int stream, int *include_usage,
				tacod_request_error *e)
{
	static const char *const keys[] = {"include_usage",
					   "include_obfuscation", NULL};
	int r;

	if (absent(v))
		return 0;
	if (!stream)
		return tacod_request_fail(
		    e, "stream_options", "invalid_value",
		    "stream_options is only allowed when stream is true");
	if (!json_is_object(v))
		return wrong_type(e, "stream_options",
				  "an object {\"include_usage\": bool}", v);
	if ((r = only_keys(v, keys, "stream_options", "stream_options", e)) ||
	    (r = opt_bool(json_object_get(v, "include_usage"),
			  "stream_options.include_usage", include_usage, e)))
		return r;
	return opt_bool(json_object_get(v, "include_obfuscation"),
			"stream_options.include_obfuscation", NULL, e);
}

/* A number that must be 0 (a penalty tacod does not apply). */
static int zero_number(json_t *req, const char *k, tacod_request_error *e)
{
	json_t *v = json_object_get(req, k);

	if (absent(v))
		return 0;
	if (!json_is_number(v))
		return wrong_type(e, k, "a number", v);
	if (json_number_value(v) != 0)
		return unsupported(e, k, "only 0 is accepted");
	return 0;
}

/* The parameters tacod accepts only with their neutral value. */
static int check_neutral(json_t *req, tacod_request_error *e)
{
	json_t *v, *t;
	int r;

	if ((r = zero_number(req, "frequency_penalty", e)) ||
	    (r = zero_number(req, "presence_penalty", e)))
		return r;
	v = json_object_get(req, "logit_bias");
	if (!absent(v) && !json_is_object(v))
		return wrong_type(e, "logit_bias",
				  "an object of token ids to biases", v);
	if (json_object_size(v))
		return unsupported(e, "logit_bias", "only {} is accepted");
	v = json_object_get(req, "logprobs");
	if ((r = opt_bool(v, "logprobs", NULL, e)))
		return r;
	if (json_is_true(v))
		return unsupported(e, "logprobs", "only false is accepted");
	v = json_object_get(req, "top_logprobs");
	if (!absent(v) && !json_is_integer(v))
		return wrong_type(e, "top_logprobs", "an integer", v);
	if (json_integer_value(v))
		return unsupported(e, "top_logprobs", "only 0 is accepted");
	v = json_object_get(req, "response_format");
	if (!absent(v)) {
		if (!json_is_object(v))
			return wrong_type(e, "response_format",
					  "an object {\"type\": \"text\"}", v);
		t = json_object_get(v, "type");
		if (absent(t))
			return missing(e, "response_format.type");
		if (!json_is_string(t))
			return wrong_type(e, "response_format.type", "a string",
					  t);
		if (!is(t, "text"))
			return unsupported(e, "response_format",
					   "only {\"type\": \"text\"} is "
					   "accepted");
		if (json_object_size(v) != 1)
			return unsupported(e, "response_format",
					   "only {\"type\": \"text\"} is "
					   "accepted");
	}
	v = json_object_get(req, "modalities");
	if (!absent(v)) {
		json_t *m;
		size_t i;

		if (!json_is_array(v))
			return wrong_type(e, "modalities",
					  "an array of strings", v);
		json_array_foreach(v, i, m)
		{
			if (!json_is_string(m))
				return wrong_type(e, "modalities",
						  "an array of strings", v);
		}
		if (json_array_size(v) != 1 ||
		    !is(json_array_get(v, 0), "text"))
			return unsupported(e, "modalities",
					   "only [\"text\"] is accepted");
	}
	v = json_object_get(req, "audio");
	if (!absent(v))
		return unsupported(e, "audio",
				   "tacod's models produce text "
				   "only (audio must be null)");
	v = json_object_get(req, "prediction");
	if (!absent(v))
		return unsupported(e, "prediction",
				   "predicted outputs (prediction must be "
				   "null)");
	v = json_object_get(req, "service_tier");
	if (!absent(v)) {
		if (!json_is_string(v))
			return wrong_type(e, "service_tier", "a string", v);
		if (!is(v, "auto") && !is(v, "default"))
			return unsupported(e, "service_tier",
					   "only \"auto\" and \"default\" are "
					   "accepted");
	}
	v = json_object_get(req, "store");
	if ((r = opt_bool(v, "store", NULL, e)))
		return r;
	if (json_is_true(v))
		return unsupported(e, "store",
				   "completions are not stored (store must be "
				   "false)");
	return 0;
}

/* metadata (at most TACOD_METADATA_PAIRS_MAX strings, as OpenAI limits
 * them) and user: accepted, and not used. */
static int check_ignored(json_t *req, tacod_request_error *e)
{
	json_t *m = json_object_get(req, "metadata"), *v;
	char q[PATH_CAP];
	const char *k;

	if (!absent(m)) {
		if (!json_is_object(m))
			return wrong_type(e, "metadata", "an object of strings",
					  m);
		if (json_object_size(m) > TACOD_METADATA_PAIRS_MAX)
			return tacod_request_fail(
			    e, "metadata", "invalid_value",
			    "metadata holds %zu pairs: at most %d",
			    json_object_size(m), TACOD_METADATA_PAIRS_MAX);
		json_object_foreach(m, k, v)
		{
			taco_text_format(q, sizeof(q), "metadata.%s", k);
			if (!json_is_string(v))
				return wrong_type(e, q, "a string", v);
			if (tacod_utf8_chars(k, strlen(k)) >
				TACOD_METADATA_KEY_MAX ||
			    tacod_utf8_chars(json_string_value(v),
					     json_string_length(v)) >
				TACOD_METADATA_VALUE_MAX)
				return tacod_request_fail(
				    e, q, "invalid_value",
				    "metadata keys are at most %d characters, "
				    "values at most %d",
				    TACOD_METADATA_KEY_MAX,
				    TACOD_METADATA_VALUE_MAX);
		}
	}
	return opt_str(json_object_get(req, "user"), "user",
		       TACOD_CHAT_MAX_USER, e);
}

static const char *const efforts[] = {"minimal", "low", "medium", "high", NULL};

/* The sampling and length fields, into out. */
static int check_sampling(json_t *req, tacod_chat_request *out,
			  tacod_request_error *e)
{
	json_t *mt = json_object_get(req, "max_tokens");
	json_t *mct = json_object_get(req, "max_completion_tokens");
	json_t *v;
	json_int_t a = 0, b = 0, x;
	int r;

	if (!absent(mt) &&
	    (r = check_int(mt, "max_tokens", 1, TACOD_CHAT_MAX_TOKENS, &a, e)))
		return r;
	if (!absent(mct) && (r = check_int(mct, "max_completion_tokens", 1,
					   TACOD_CHAT_MAX_TOKENS, &b, e)))
		return r;
	if (a && b && a != b)
		return tacod_request_fail(
		    e, "max_completion_tokens", "invalid_value",
		    "max_completion_tokens (%lld) and max_tokens (%lld) "
		    "differ: give one of them",
		    (long long)b, (long long)a);
	out->max_tokens = (int)(a ? a : b);
	v = json_object_get(req, "temperature");
	if (!absent(v)) {
		if (!json_is_number(v))
			return wrong_type(e, "temperature", "a number", v);
		if (!(json_number_value(v) >= 0 && json_number_value(v) <= 2))
			return tacod_request_fail(
			    e, "temperature", "invalid_value",
			    "temperature must be in [0, 2], not %g",
			    json_number_value(v));
		out->temperature = json_number_value(v);
	}
	v = json_object_get(req, "top_p");
	if (!absent(v)) {
		if (!json_is_number(v))
			return wrong_type(e, "top_p", "a number", v);
		if (!(json_number_value(v) > 0 && json_number_value(v) <= 1))
			return tacod_request_fail(
			    e, "top_p", "invalid_value",
			    "top_p must be in (0, 1], not %g",
			    json_number_value(v));
		out->top_p = json_number_value(v);
	}
	v = json_object_get(req, "n");
	if (!absent(v)) {
		if ((r = check_int(v, "n", 1, TACOD_CHAT_MAX_N, &x, e)))
			return r;
		out->n = (int)x;
	}
	v = json_object_get(req, "seed");
	if (!absent(v)) {
		if (!json_is_integer(v))
			return wrong_type(e, "seed", "an integer", v);
		out->has_seed = 1;
		out->seed = json_integer_value(v);
	}
	if ((r = opt_bool(json_object_get(req, "stream"), "stream",
			  &out->stream, e)) ||
	    (r = check_stream_options(json_object_get(req, "stream_options"),
				      out->stream, &out->include_usage, e)) ||
	    (r = check_stop(json_object_get(req, "stop"), e)))
		return r;
	v = json_object_get(req, "reasoning_effort");
	if (!absent(v)) {
		int known = 0;

		if (!json_is_string(v))
			return wrong_type(e, "reasoning_effort", "a string", v);
		for (int i = 0; efforts[i]; i++)
			known |= is(v, efforts[i]);
		if (!known)
			return tacod_request_fail(
			    e, "reasoning_effort", "invalid_value",
			    "reasoning_effort must be \"minimal\", \"low\", "
			    "\"medium\" or \"high\"");
	}
	return 0;
}

/* ---- the worker's request ---- */

/* An object's members with null values left out, deep copies. */
static json_t *copy_present(json_t *o)
{
	json_t *out = json_object(), *v;
	const char *k;

	json_object_foreach(o, k, v)
	{
		if (!out)
			return NULL;
		if (!json_is_null(v) &&
		    json_object_set_new(out, k, json_deep_copy(v))) {
			json_decref(out);
			return NULL;
		}
	}
	return out;
}

/* A tool call with its arguments parsed, when they are an object's JSON. */
static json_t *worker_call(json_t *c)
{
	json_t *f = json_object_get(c, "function");
	json_t *a = json_object_get(f, "arguments");
	json_t *name = json_deep_copy(json_object_get(f, "name"));
	json_t *id = json_deep_copy(json_object_get(c, "id"));
	json_t *out = json_object(), *fo = json_object(), *args;
	int bad;

	args = json_loadb(json_string_value(a), json_string_length(a),
			  JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(args)) {
		json_decref(args);
		args = json_deep_copy(a);
	}
	bad = !name || !id || !out || !fo || !args ||
	      json_object_set(fo, "name", name) ||
	      json_object_set(fo, "arguments", args) ||
	      json_object_set(out, "id", id) ||
	      json_object_set_new(out, "type", json_string("function")) ||
	      json_object_set(out, "function", fo);
	json_decref(name);
	json_decref(id);
	json_decref(args);
	json_decref(fo);
	if (bad) {
		json_decref(out);
		return NULL;
	}
	return out;
}

static json_t *worker_message(json_t *m)
{
	json_t *out = json_object(), *v, *c, *call;
	const char *k;
	size_t i;

	json_object_foreach(m, k, v)
	{
		if (!out)
			return NULL;
		if (json_is_null(v) || !strcmp(k, "annotations"))
			continue;
		if (!strcmp(k, "tool_calls")) {
			if (!json_array_size(v))
				continue; /* [] is none */
			c = json_array();
			json_array_foreach(v, i, call)
			{
				if (!c ||
				    json_array_append_new(c, worker_call(call)))
					break;
			}
			if (c && json_array_size(c) != json_array_size(v)) {
				json_decref(c);
				c = NULL;
			}
		} else {
			c = json_deep_copy(v);
		}
		if (json_object_set_new(out, k, c)) {
			json_decref(out);
			return NULL;
		}
	}
	return out;
}

static json_t *worker_tools(json_t *tools)
{
	json_t *out = json_array(), *t, *w;
	size_t i;

	json_array_foreach(tools, i, t)
	{
		if (!out)
			return NULL;
		w = json_object();
		if (json_object_set_new(w, "type", json_string("function")) ||
		    json_object_set_new(
			w, "function",
			copy_present(json_object_get(t, "function")))) {
			json_decref(w);
			json_decref(out);
			return NULL;
		}
		if (json_array_append_new(out, w)) { /* w is taken */
			json_decref(out);
			return NULL;
		}
	}
	return out;
}

/* The request as the worker takes it (chat_request.h). */
static json_t *worker_request(json_t *req, const tacod_chat_request *r)
{
	json_t *w = json_object(), *msgs = json_array(), *m, *v, *stop;
	json_t *tools = json_object_get(req, "tools");
	size_t i;

	if (!w || !msgs)
		goto fail_msgs;
	json_array_foreach(json_object_get(req, "messages"), i, m)
	{
		if (json_array_append_new(msgs, worker_message(m)))
			goto fail_msgs;
	}
	if (json_object_set_new(w, "messages", msgs)) /* msgs is taken */
		goto fail;
	if (json_array_size(tools) &&
	    json_object_set_new(w, "tools", worker_tools(tools)))
		goto fail;
	if (r->max_tokens &&
	    json_object_set_new(w, "max_tokens", json_integer(r->max_tokens)))
		goto fail;
	if (json_object_set_new(w, "temperature", json_real(r->temperature)) ||
	    json_object_set_new(w, "top_p", json_real(r->top_p)) ||
	    json_object_set_new(w, "n", json_integer(r->n)))
		goto fail;
	if (r->has_seed &&
	    json_object_set_new(w, "seed", json_integer(r->seed)))
		goto fail;
	v = json_object_get(req, "stop");
	if (!absent(v)) {
		stop = json_is_array(v) ? json_deep_copy(v) : json_array();
		if (!json_is_array(v) &&
		    json_array_append_new(stop, json_deep_copy(v))) {
			json_decref(stop);
			stop = NULL;
		}
		if (json_object_set_new(w, "stop", stop))
			goto fail;
	}
	if (json_object_set_new(w, "stream", json_boolean(r->stream)))
		goto fail;
	v = json_object_get(req, "reasoning_effort");
	if (!absent(v) &&
	    json_object_set_new(w, "reasoning_effort", json_deep_copy(v)))
		goto fail;
	return w;
fail_msgs:
	json_decref(msgs);
fail:
	json_decref(w);
	return NULL;
}

/* jansson's dump into no buffer: the size of the compact JSON, counted. */
static size_t compact_size(json_t *v)
{
	return json_dumpb(v, NULL, 0, JSON_COMPACT);
}

int tacod_chat_request_parse(json_t *req, tacod_chat_request *out,
			     tacod_request_error *e)
{
	static const char *const keys[] = {"model",
					   "messages",
					   "max_tokens",
					   "max_completion_tokens",
					   "temperature",
					   "top_p",
					   "n",
					   "seed",
					   "stream",
					   "stream_options",
					   "stop",
					   "tools",
					   "tool_choice",
					   "parallel_tool_calls",
					   "frequency_penalty",
					   "presence_penalty",
					   "logit_bias",
					   "logprobs",
					   "top_logprobs",
					   "response_format",
					   "modalities",
					   "audio",
					   "prediction",
					   "service_tier",
					   "store",
					   "reasoning_effort",
					   "metadata",
					   "user",
					   NULL};
	json_t *model, *tools, *v;
	char p[PATH_CAP];
	const char *k;
	size_t size;
	int r;

	memset(e, 0, sizeof(*e));
	memset(out, 0, sizeof(*out));
	out->temperature = 1;
	out->top_p = 1;
	out->n = 1;
	if (!json_is_object(req))
		return tacod_request_fail(e, "", "invalid_type",
					  "the body must be a JSON object, not "
					  "%s",
					  type_name(req));
	size = compact_size(req);
	if (size > TACOD_CHAT_MAX_BODY)
		return tacod_request_fail(
		    e, "", "request_too_large",
		    "the request is %zu bytes of JSON: at most %u", size,
		    TACOD_CHAT_MAX_BODY);
	json_object_foreach(req, k, v)
	{
		int ok = 0;
		for (int i = 0; keys[i] && !ok; i++)
			ok = !strcmp(k, keys[i]);
		if (!ok) {
			taco_text_copy(p, sizeof(p), k);
			return tacod_request_fail(
			    e, p, "unknown_parameter",
			    "Unrecognized request argument supplied: %s", k);
		}
	}
	model = json_object_get(req, "model");
	if (absent(model))
		return tacod_request_fail(e, "model",
					  "missing_required_parameter",
					  "model is required: the name of a "
					  "base or fine-tuned model");
	if ((r = check_str(model, "model", 1, sizeof(out->model) - 1, e)))
		return r;
	if ((r = check_messages(json_object_get(req, "messages"), e)))
		return r;
	tools = json_object_get(req, "tools");
	if ((r = check_sampling(req, out, e)) || (r = check_tools(tools, e)) ||
	    (r = check_tool_choice(json_object_get(req, "tool_choice"),
				   json_array_size(tools) ? tools : NULL, e)) ||
	    (r = opt_bool(json_object_get(req, "parallel_tool_calls"),
			  "parallel_tool_calls", NULL, e)) ||
	    (r = check_neutral(req, e)) || (r = check_ignored(req, e)))
		return r;
	memcpy(out->model, json_string_value(model),
	       json_string_length(model) + 1);
	if (!(out->worker = worker_request(req, out))) {
		tacod_request_fail(e, "", "server_error", "out of memory");
		return -ENOMEM;
	}
	return 0;
}

void tacod_chat_request_free(tacod_chat_request *r)
{
	json_decref(r->worker);
	r->worker = NULL;
}
