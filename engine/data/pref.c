/* pref.c: preference pairs (DPO), OpenAI's preference format:
 *   {"input": {"messages": [...]}, "preferred_output": [{assistant}],
 *    "non_preferred_output": [{assistant}]}
 * Each pair is two examples, stored one after the other: the prompt
 * (input.messages) with the preferred output, then with the other. The
 * chat template renders the prompt, the output's header (the generation
 * prompt) and the output with its end of turn; only the output's tokens
 * carry labels, since DPO compares the two outputs' log-likelihoods. */
#include <stdlib.h>
#include <string.h>

#include "dataset_internal.h"

static const char *const outputs[2] = {"preferred_output",
				       "non_preferred_output"};

int taco_ds_is_pref(json_t *root)
{
	return json_object_get(root, "preferred_output") ||
	       json_object_get(root, "non_preferred_output");
}

/* Tool fields are fine when they hold nothing to render. */
static int no_tools(json_t *v)
{
	return !v || json_is_null(v) ||
	       (json_is_array(v) && json_array_size(v) == 0);
}

static int check_input(taco_ds_loader *L, int64_t line, json_t *root,
		       taco_ds_message *m, int *n)
{
	static const char *const tool_fields[] = {"tools", "functions", NULL};
	json_t *in = json_object_get(root, "input");
	int ok = 1;

	if (!json_is_object(in)) {
		taco_ds_report(L->rep, line, TACO_P_INVALID_FIELD, 1,
			       "\"input\" must be an object with "
			       "\"messages\"");
		return 0;
	}
	for (int k = 0; tool_fields[k]; k++)
		if (!no_tools(json_object_get(in, tool_fields[k]))) {
			taco_ds_report(L->rep, line, TACO_P_INVALID_FIELD, 1,
				       "input.%s: tacod's chat templates do "
				       "not render tools",
				       tool_fields[k]);
			ok = 0;
		}
	if (json_object_get(in, "parallel_tool_calls"))
		taco_ds_report(L->rep, line, TACO_P_IGNORED_FIELD, 0,
			       "\"input.parallel_tool_calls\" is not read: "
			       "the pair trains without it");
	return taco_ds_check_chat(L, line, json_object_get(in, "messages"),
				  "input.messages", 1, m, n) &&
	       ok;
}

/* Output s: one assistant message with string content. */
static int check_output(taco_ds_loader *L, int64_t line, json_t *root, int s,
			taco_ds_message *out)
{
	const char *f = outputs[s];
	json_t *a = json_object_get(root, f), *e = json_array_get(a, 0);
	json_t *role = json_object_get(e, "role");
	json_t *content = json_object_get(e, "content");
	int ok = 1;

	if (!json_is_array(a) || json_array_size(a) != 1 ||
	    !json_is_object(e)) {
		taco_ds_report(L->rep, line, TACO_P_INVALID_MESSAGE, 1,
			       "%s must hold one assistant message", f);
		return 0;
	}
	if (!json_is_string(role) ||
	    strcmp(json_string_value(role), "assistant")) {
		taco_ds_report(L->rep, line, TACO_P_INVALID_MESSAGE, 1,
			       "%s[0].role must be \"assistant\"", f);
		ok = 0;
	}
	if (!no_tools(json_object_get(e, "tool_calls")) ||
	    !no_tools(json_object_get(e, "function_call"))) {
		taco_ds_report(L->rep, line, TACO_P_INVALID_FIELD, 1,
			       "%s[0].%s: tacod's chat templates do not "
			       "render tools",
			       f,
			       no_tools(json_object_get(e, "tool_calls"))
				   ? "function_call"
				   : "tool_calls");
		ok = 0;
	}
	if (!json_is_string(content)) {
		taco_ds_report(L->rep, line, TACO_P_MISSING_CONTENT, 1,
			       "%s[0].content must be a string", f);
		ok = 0;
	}
	if (json_object_get(e, "weight")) {
		taco_ds_report(L->rep, line, TACO_P_INVALID_WEIGHT, 1,
			       "%s[0].weight is not allowed: every output is "
			       "trained",
			       f);
		ok = 0;
	}
	if (!ok)
		return 0;
	if (json_object_get(e, "name"))
		taco_ds_report(L->rep, line, TACO_P_IGNORED_FIELD, 0,
			       "%s[0].name is not read: the message is "
			       "rendered without it",
			       f);
	out->role = "assistant";
	out->content = json_string_value(content);
	out->content_len = json_string_length(content);
	out->weight = 1;
	return 1;
}

/* Both sequences of the pair, or neither: a sequence that is dropped or
 * fails takes back the one stored before it. */
static int store_pair(taco_ds_loader *L, int64_t line, taco_ds_message *m,
		      int n, const taco_ds_message *out, taco_err *err)
{
	const taco_dataset_opts *o = L->o;
	taco_dataset_report *rep = L->rep;
	size_t first = L->d->n, S = (size_t)o->seq_len;
	int64_t trained = 0;
	int truncated = 0, r = 0;

	rep->examples++;
	for (int s = 0; s < 2; s++) {
		taco_ds_render rd = {0};
		size_t len, k = 0, t;

		m[n] = out[s];
		r = taco_ds_render_chat(L->tmpl, m, n + 1, L->bos, L->eos, 0,
					&rd);
		if (!r)
			r = taco_ds_encode(L, &rd, 0, 0, 0, err);
		free(rd.text);
		if (r)
			goto undo;
		len = L->ids.n;
		rep->tokens += (int64_t)len;
		while (k < len && L->labels[k] == -100)
			k++; /* the prompt: what comes before the output */
		if (k < len && k >= S) {
			taco_ds_report(rep, line, TACO_P_TOO_LONG, 1,
				       "input.messages: the prompt is %zu "
				       "tokens, seq_len is %zu: no room for "
				       "an output",
				       k, S);
			goto undo;
		}
		if (len > S) {
			if (o->overlength == TACO_OVERLENGTH_ERROR) {
				taco_ds_report(rep, line, TACO_P_TOO_LONG, 1,
					       "%s: %zu tokens, seq_len is %zu",
					       outputs[s], len, S);
				goto undo;
			}
			if (o->overlength == TACO_OVERLENGTH_DROP) {
				taco_ds_report(rep, line, TACO_P_TOO_LONG, 0,
					       "%s: %zu tokens, seq_len is "
					       "%zu: the pair is dropped",
					       outputs[s], len, S);
				rep->dropped++;
				goto undo;
			}
			taco_ds_report(rep, line, TACO_P_TOO_LONG, 0,
				       "%s: %zu tokens, seq_len is %zu: "
				       "truncated",
				       outputs[s], len, S);
			truncated = 1;
			len = S; /* the prompt fits: some output stays */
		}
		if (!(t = taco_ds_count_trained(L, len))) {
			taco_ds_report(rep, line, TACO_P_ALL_LABELS_MASKED, 0,
				       "%s: no token carries a loss: the pair "
				       "is dropped",
				       outputs[s]);
			rep->dropped++;
			goto undo;
		}
		if ((r = taco_ds_keep(L, len, err)))
			goto undo;
		trained += (int64_t)t;
	}
	rep->kept++;
	rep->pairs++;
	rep->truncated += truncated;
	rep->trainable_tokens += trained;
	return 0;
undo:
	L->d->n = first;
	L->d->n_tokens = L->d->off ? L->d->off[first] : 0;
	return r;
}

int taco_ds_pref_line(taco_ds_loader *L, int64_t line, json_t *root,
		      taco_ds_message *m, taco_err *err)
{
	taco_ds_message out[2];
	int n = 0, ok, r;

	if ((r = taco_ds_template(L, err)))
		return r;
	/* every problem of the line is reported, not only the first */
	ok = check_input(L, line, root, m, &n);
	ok = check_output(L, line, root, 0, &out[0]) && ok;
	ok = check_output(L, line, root, 1, &out[1]) && ok;
	if (!ok)
		return 0;
	return store_pair(L, line, m, n, out, err);
}
