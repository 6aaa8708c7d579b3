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

static int check_input(taco_ds_loader *L, int64_t line, json_t *root,
		       json_t **msgs, json_t **tools, int *parallel)
{
	json_t *in = json_object_get(root, "input");
	int ok;

	*msgs = *tools = NULL;
	if (!json_is_object(in)) {
		taco_ds_report(L->rep, line, TACO_P_INVALID_FIELD, 1,
			       "\"input\" must be an object with "
			       "\"messages\"");
		return 0;
	}
	if (json_object_get(in, "functions"))
		taco_ds_report(L->rep, line, TACO_P_IGNORED_FIELD, 0,
			       "\"input.functions\" is not read (OpenAI's "
			       "legacy field): give \"input.tools\"");
	*tools = taco_ds_check_tools(L, line, in, "input.", &ok);
	*parallel = !json_is_false(json_object_get(in, "parallel_tool_calls"));
	return taco_ds_check_chat(L, line, json_object_get(in, "messages"),
				  "input.messages", 1, *parallel, msgs,
				  L->trained) > 0 &&
	       ok;
}

/* Both sequences of the pair, or neither: a sequence that is dropped or
 * fails takes back the one stored before it. */
static int store_pair(taco_ds_loader *L, int64_t line, json_t *msgs,
		      json_t *tools, json_t *const *out, taco_err *err)
{
	const taco_dataset_opts *o = L->o;
	taco_dataset_report *rep = L->rep;
	size_t first = L->d->n, S = (size_t)o->seq_len;
	int64_t trained = 0;
	int truncated = 0, r = 0;

	rep->examples++;
	for (int s = 0; s < 2; s++) {
		taco_ds_render rd = {0};
		size_t len, k = 0, t, n = json_array_size(msgs);

		/* the prompt with this output, which alone is trained */
		if (json_array_append(msgs, out[s])) {
			r = taco_err_set(err, -ENOMEM, "out of memory");
			goto undo;
		}
		L->trained[n] = 1;
		r = taco_ds_render_chat(L, line, msgs, tools, L->trained, &rd,
					err);
		L->trained[n] = 0;
		json_array_remove(msgs, n);
		if (!r && rd.len)
			r = taco_ds_encode(L, &rd, 0, 0, 0, err);
		free(rd.text);
		if (r)
			goto undo;
		if (!rd.len) /* the template failed on it: reported */
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
		      taco_err *err)
{
	json_t *msgs = NULL, *tools = NULL, *out[2] = {NULL, NULL};
	int ok, parallel = 1, r;

	if ((r = taco_ds_template(L, err)))
		return r;
	/* every problem of the line is reported, not only the first */
	ok = check_input(L, line, root, &msgs, &tools, &parallel);
	for (int s = 0; s < 2; s++) {
		r = taco_ds_check_output(L, line,
					 json_object_get(root, outputs[s]),
					 outputs[s], parallel, &out[s]);
		if (r < 0)
			goto done;
		ok = r && ok;
	}
	r = ok ? store_pair(L, line, msgs, tools, out, err) : 0;
done:
	json_decref(msgs);
	json_decref(out[0]);
	json_decref(out[1]);
	return r;
}
