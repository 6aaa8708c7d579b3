/* dataset_chat.c: chat lines in OpenAI's format (messages, tools, tool
 * calls, tool results, reasoning) checked and turned into what the chat
 * template sees, as vLLM and transformers give it: each tool call's
 * arguments parsed from their JSON string, None-valued keys dropped,
 * reasoning under all of its names, tacod's weight left out. */
#include <stdlib.h>
#include <string.h>

#include "dataset_internal.h"

#define MAX_TOOLS 512	   /* tool definitions of one chat */
#define MAX_TOOL_CALLS 128 /* calls of one message */

static const char *const roles[] = {"system",	 "developer", "user",
				    "assistant", "tool",      NULL};

/* transformers' names of a message's reasoning, the first the standard */
static const char *const reasoning_names[] = {"reasoning_content", "thinking",
					      "reasoning", NULL};

static int bad(taco_ds_loader *L, int64_t line, int code, const char *fmt,
	       const char *field, size_t i)
{
	taco_ds_report(L->rep, line, code, 1, fmt, field, i);
	return 0;
}

/* A message's weight, when it is valid: 0 or 1, on an assistant message;
 * no prompt message has one (none of them is trained). */
static int check_weight(taco_ds_loader *L, int64_t line, json_t *w,
			const char *field, size_t i, int prompt,
			const char *role, unsigned char *trained)
{
	int assistant = !strcmp(role, "assistant");

	*trained = assistant && !prompt;
	if (prompt && w) {
		taco_ds_report(L->rep, line, TACO_P_INVALID_WEIGHT, 1,
			       "%s[%zu].weight is not allowed: a preference "
			       "pair trains its outputs only",
			       field, i);
		return 0;
	}
	if (!w || json_is_null(w))
		return 1;
	if (!assistant || !json_is_integer(w) ||
	    (json_integer_value(w) != 0 && json_integer_value(w) != 1)) {
		taco_ds_report(L->rep, line, TACO_P_INVALID_WEIGHT, 1,
			       "%s[%zu].weight must be 0 or 1, on assistant "
			       "messages only",
			       field, i);
		return 0;
	}
	*trained = (unsigned char)json_integer_value(w);
	return 1;
}

/* tool_calls: [{"id", "type": "function", "function": {"name",
 * "arguments": JSON text}}], the arguments parsed as vLLM does. */
static json_t *tool_calls(taco_ds_loader *L, int64_t line, json_t *v,
			  const char *field, size_t i, int *ok)
{
	json_t *out, *c;
	size_t k;

	if (!json_is_array(v) || json_array_size(v) > MAX_TOOL_CALLS) {
		taco_ds_report(L->rep, line, TACO_P_INVALID_FIELD, 1,
			       "%s[%zu].tool_calls must be an array of at most "
			       "%d calls",
			       field, i, MAX_TOOL_CALLS);
		return *ok = 0, NULL;
	}
	if (!(out = json_array()))
		return NULL;
	json_array_foreach(v, k, c)
	{
		json_t *f = json_object_get(c, "function"), *cc, *fc, *args;
		json_t *a = json_object_get(f, "arguments");
		json_t *type = json_object_get(c, "type");
		json_error_t jerr;

		if (!json_is_object(c) || !json_is_object(f) ||
		    !json_is_string(json_object_get(f, "name")) ||
		    !json_string_length(json_object_get(f, "name")) ||
		    (type && !json_is_null(type) &&
		     (!json_is_string(type) ||
		      strcmp(json_string_value(type), "function")))) {
			taco_ds_report(L->rep, line, TACO_P_INVALID_FIELD, 1,
				       "%s[%zu].tool_calls[%zu] must be "
				       "{\"type\": \"function\", \"function\": "
				       "{\"name\", \"arguments\"}}",
				       field, i, k);
			*ok = 0;
			continue;
		}
		if (json_is_string(a)) {
			args = json_loadb(
			    json_string_value(a), json_string_length(a),
			    JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
			if (!args) {
				taco_ds_report(L->rep, line,
					       TACO_P_INVALID_FIELD, 1,
					       "%s[%zu].tool_calls[%zu]."
					       "function.arguments is not "
					       "JSON: %s",
					       field, i, k, jerr.text);
				*ok = 0;
				continue;
			}
		} else if (json_is_object(a)) {
			args = json_incref(a);
		} else {
			taco_ds_report(L->rep, line, TACO_P_INVALID_FIELD, 1,
				       "%s[%zu].tool_calls[%zu].function."
				       "arguments must be a string of JSON",
				       field, i, k);
			*ok = 0;
			continue;
		}
		cc = json_copy(c);
		fc = json_copy(f);
		if (!cc || !fc || json_object_set_new(fc, "arguments", args) ||
		    json_object_set_new(cc, "function", fc) ||
		    json_array_append_new(out, cc)) {
			json_decref(out);
			return NULL;
		}
	}
	return out;
}

/* The message as the template sees it: None-valued keys dropped, weight
 * left out, tool calls converted, reasoning aliased as transformers does
 * ({"thinking": r, **message, "reasoning_content": r}). */
static json_t *template_message(json_t *e, json_t *calls)
{
	json_t *m = json_object(), *r = NULL, *v;
	const char *k;

	for (int i = 0; reasoning_names[i] && !r; i++) {
		r = json_object_get(e, reasoning_names[i]);
		if (json_is_null(r))
			r = NULL;
	}
	if (!m || (r && json_object_set(m, "thinking", r)))
		goto fail;
	json_object_foreach(e, k, v)
	{
		if (json_is_null(v) || !strcmp(k, "weight"))
			continue;
		if (json_object_set(m, k, !strcmp(k, "tool_calls") ? calls : v))
			goto fail;
	}
	if (r && json_object_set(m, "reasoning_content", r))
		goto fail;
	return m;
fail:
	json_decref(m);
	return NULL;
}

static int known_role(json_t *role)
{
	for (int k = 0; roles[k] && json_is_string(role); k++)
		if (!strcmp(json_string_value(role), roles[k]))
			return 1;
	return 0;
}

/* One message: its problems reported, or its template form in *out. */
static int check_message(taco_ds_loader *L, int64_t line, json_t *e,
			 const char *field, size_t i, int prompt,
			 unsigned char *trained, int *calls_n, json_t **out)
{
	json_t *role = json_object_get(e, "role");
	json_t *content = json_object_get(e, "content");
	json_t *tc = json_object_get(e, "tool_calls"), *calls = NULL;
	const char *r;
	int ok = 1;

	*out = NULL;
	if (!json_is_object(e))
		return bad(L, line, TACO_P_INVALID_MESSAGE,
			   "%s[%zu] is not an object", field, i);
	if (!known_role(role)) {
		taco_ds_report(L->rep, line, TACO_P_UNRECOGNIZED_ROLE, 1,
			       "%s[%zu].role %s%s%s (system, developer, user, "
			       "assistant, tool)",
			       field, i, json_is_string(role) ? "'" : "",
			       json_is_string(role) ? json_string_value(role)
						    : "is missing",
			       json_is_string(role) ? "' is not known" : "");
		return 0;
	}
	r = json_string_value(role);
	if (json_object_get(e, "function_call") &&
	    !json_is_null(json_object_get(e, "function_call")))
		return bad(L, line, TACO_P_INVALID_FIELD,
			   "%s[%zu].function_call: OpenAI's legacy field, "
			   "which no template renders: give tool_calls",
			   field, i);
	if (json_is_null(tc) || (json_is_array(tc) && !json_array_size(tc)))
		tc = NULL;
	if (tc && strcmp(r, "assistant"))
		return bad(L, line, TACO_P_INVALID_MESSAGE,
			   "%s[%zu].tool_calls: only on assistant messages",
			   field, i);
	/* an assistant's content may be null or left out beside its calls */
	if (!json_is_string(content) &&
	    !(tc && (!content || json_is_null(content))))
		return bad(L, line, TACO_P_MISSING_CONTENT,
			   tc ? "%s[%zu].content must be a string or null"
			      : "%s[%zu].content must be a string",
			   field, i);
	if (!strcmp(r, "tool") &&
	    !json_is_string(json_object_get(e, "tool_call_id")))
		return bad(L, line, TACO_P_INVALID_MESSAGE,
			   "%s[%zu].tool_call_id must be a string: the id of "
			   "the call it answers",
			   field, i);
	if (!check_weight(L, line, json_object_get(e, "weight"), field, i,
			  prompt, r, trained))
		return 0;
	if (tc && !(calls = tool_calls(L, line, tc, field, i, &ok)) && ok)
		return -ENOMEM;
	*calls_n = tc ? (int)json_array_size(tc) : 0;
	if (ok && !(*out = template_message(e, calls))) {
		json_decref(calls);
		return -ENOMEM;
	}
	json_decref(calls);
	return ok;
}

json_t *taco_ds_check_tools(taco_ds_loader *L, int64_t line, json_t *root,
			    const char *field, int *ok)
{
	json_t *t = json_object_get(root, "tools"), *e;
	json_t *p = json_object_get(root, "parallel_tool_calls");
	size_t i;

	*ok = 1;
	if (p && !json_is_null(p) && !json_is_boolean(p)) {
		taco_ds_report(L->rep, line, TACO_P_INVALID_FIELD, 1,
			       "%sparallel_tool_calls must be true or false",
			       field);
		*ok = 0;
	}
	if (!t || json_is_null(t))
		return NULL;
	if (!json_is_array(t) || json_array_size(t) > MAX_TOOLS) {
		taco_ds_report(L->rep, line, TACO_P_INVALID_FIELD, 1,
			       "%stools must be an array of at most %d tool "
			       "definitions",
			       field, MAX_TOOLS);
		*ok = 0;
		return NULL;
	}
	json_array_foreach(t, i, e)
	{
		json_t *f = json_object_get(e, "function");
		json_t *params = json_object_get(f, "parameters");
		if (!json_is_object(e) || !json_is_object(f) ||
		    !json_is_string(json_object_get(f, "name")) ||
		    !json_string_length(json_object_get(f, "name")) ||
		    (params && !json_is_null(params) &&
		     !json_is_object(params))) {
			taco_ds_report(L->rep, line, TACO_P_INVALID_FIELD, 1,
				       "%stools[%zu] must be {\"type\": "
				       "\"function\", \"function\": {\"name\", "
				       "\"description\", \"parameters\": "
				       "{...}}}",
				       field, i);
			*ok = 0;
		}
	}
	return *ok ? t : NULL;
}

int taco_ds_check_chat(taco_ds_loader *L, int64_t line, json_t *msgs,
		       const char *field, int prompt, int parallel,
		       json_t **out, unsigned char *trained)
{
	size_t i, n = json_array_size(msgs);
	json_t *e, *conv;
	int ok = 1, assistants = 0, n_trained = 0, r;

	*out = NULL;
	if (!json_is_array(msgs) || n == 0) {
		taco_ds_report(L->rep, line, TACO_P_MISSING_MESSAGES, 1,
			       "\"%s\" must be a non-empty array", field);
		return 0;
	}
	if (n > TACO_DATASET_MAX_MESSAGES) {
		taco_ds_report(L->rep, line, TACO_P_INVALID_FIELD, 1,
			       "%s: more than %d messages", field,
			       TACO_DATASET_MAX_MESSAGES);
		return 0;
	}
	if (!(conv = json_array()))
		return -ENOMEM;
	json_array_foreach(msgs, i, e)
	{
		json_t *m = NULL;
		int calls = 0;
		r = check_message(L, line, e, field, i, prompt, &trained[i],
				  &calls, &m);
		if (r < 0) {
			json_decref(conv);
			return r;
		}
		if (r && calls > 1 && !parallel) {
			taco_ds_report(L->rep, line, TACO_P_INVALID_FIELD, 1,
				       "%s[%zu]: %d tool calls, and "
				       "parallel_tool_calls is false",
				       field, i, calls);
			r = 0;
		}
		if (!r) {
			json_decref(m);
			ok = 0;
			continue;
		}
		if (json_array_append_new(conv, m)) {
			json_decref(conv);
			return -ENOMEM;
		}
		if (!strcmp(json_string_value(json_object_get(e, "role")),
			    "assistant")) {
			assistants++;
			n_trained += trained[i];
		}
	}
	if (ok && prompt &&
	    !strcmp(json_string_value(
			json_object_get(json_array_get(msgs, n - 1), "role")),
		    "assistant")) {
		taco_ds_report(L->rep, line, TACO_P_INVALID_MESSAGE, 1,
			       "%s[%zu]: the last message must not be an "
			       "assistant's: the outputs answer it",
			       field, n - 1);
		ok = 0;
	}
	if (ok && !prompt && !assistants) {
		taco_ds_report(L->rep, line, TACO_P_NO_ASSISTANT_MESSAGE, 1,
			       "no assistant message to learn from");
		ok = 0;
	}
	if (ok && !prompt && !n_trained && !L->o->train_on_all) {
		taco_ds_report(L->rep, line, TACO_P_ALL_LABELS_MASKED, 0,
			       "every assistant message has weight 0: dropped");
		L->rep->dropped++;
		ok = 0;
	}
	if (!ok) {
		json_decref(conv);
		return 0;
	}
	*out = conv;
	return 1;
}

int taco_ds_check_output(taco_ds_loader *L, int64_t line, json_t *a,
			 const char *field, int parallel, json_t **out)
{
	json_t *e = json_array_get(a, 0), *role = json_object_get(e, "role");
	unsigned char tr;
	int calls = 0, r;

	*out = NULL;
	if (!json_is_array(a) || json_array_size(a) != 1 ||
	    !json_is_object(e)) {
		taco_ds_report(L->rep, line, TACO_P_INVALID_MESSAGE, 1,
			       "%s must hold one assistant message", field);
		return 0;
	}
	if (!json_is_string(role) ||
	    strcmp(json_string_value(role), "assistant"))
		return bad(L, line, TACO_P_INVALID_MESSAGE,
			   "%s[%zu].role must be \"assistant\"", field, 0);
	if (json_object_get(e, "weight"))
		return bad(L, line, TACO_P_INVALID_WEIGHT,
			   "%s[%zu].weight is not allowed: every output is "
			   "trained",
			   field, 0);
	r = check_message(L, line, e, field, 0, 0, &tr, &calls, out);
	if (r > 0 && calls > 1 && !parallel) {
		json_decref(*out);
		*out = NULL;
		return bad(L, line, TACO_P_INVALID_FIELD,
			   "%s[%zu]: several tool calls, and "
			   "parallel_tool_calls is false",
			   field, 0);
	}
	return r;
}
