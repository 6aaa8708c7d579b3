/* dataset.c: JSONL examples to token ids and labels, with a report. */
#include "dataset_internal.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fsutil.h"
#include "util/text.h"

static const char *const template_names[] = {"auto", "chatml", "llama3",
					     "mistral"};

const char *taco_template_name(int t)
{
	return t >= 0 && t <= TACO_TEMPLATE_MISTRAL ? template_names[t] : "?";
}

void taco_dataset_defaults(taco_dataset_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->template_id = TACO_TEMPLATE_AUTO;
	o->seq_len = 1024;
	o->overlength = TACO_OVERLENGTH_TRUNCATE;
	o->max_examples = 10000000;
}

void taco_ds_report(taco_dataset_report *rep, int64_t line, int code, int error,
		    const char *fmt, ...)
{
	va_list ap;
	taco_problem p = {line, code, error, ""};
	int64_t *count = error ? &rep->errors : &rep->warnings;

	rep->by_code[code]++;
	va_start(ap, fmt);
	taco_text_vformat(p.detail, sizeof(p.detail), fmt, ap);
	va_end(ap);
	if (!(*count)++)
		*(error ? &rep->first_error : &rep->first_warning) = p;
	if (rep->n_listed < TACO_DATASET_MAX_LISTED)
		rep->listed[rep->n_listed++] = p;
}

/* Byte offset of the first invalid UTF-8 sequence, or -1. */
static long utf8_invalid_at(const unsigned char *s, size_t n)
{
	size_t i = 0;

	while (i < n) {
		unsigned c = s[i];
		size_t len = c < 0x80	      ? 1
			     : (c >> 5) == 6  ? 2
			     : (c >> 4) == 14 ? 3
			     : (c >> 3) == 30 ? 4
					      : 0;
		uint32_t cp;

		if (!len || i + len > n)
			return (long)i;
		cp = len == 1 ? c : c & (0x7F >> len);
		for (size_t k = 1; k < len; k++) {
			if ((s[i + k] & 0xC0) != 0x80)
				return (long)i;
			cp = (cp << 6) | (s[i + k] & 0x3F);
		}
		if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) ||
		    (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
		    (cp >= 0xD800 && cp <= 0xDFFF))
			return (long)i;
		i += len;
	}
	return -1;
}

static int put(taco_ds_render *r, const char *s, size_t n)
{
	if (r->len + n + 1 > r->cap) {
		size_t cap = r->cap ? r->cap : 256;
		char *t;
		while (cap < r->len + n + 1)
			cap *= 2;
		t = realloc(r->text, cap);
		if (!t)
			return -ENOMEM;
		r->text = t;
		r->cap = cap;
	}
	memcpy(r->text + r->len, s, n);
	r->len += n;
	r->text[r->len] = 0;
	return 0;
}

/* Appends s; when trained, its bytes become a trained span. */
static int put_span(taco_ds_render *r, const char *s, size_t n, int trained)
{
	size_t start = r->len;
	int e = put(r, s, n);

	if (!e && trained && n &&
	    r->n_span + 2 <= (int)(sizeof(r->span) / sizeof(r->span[0]))) {
		r->span[r->n_span++] = start;
		r->span[r->n_span++] = r->len;
	}
	return e;
}

/* ---- tokens and labels ------------------------------------------------- */

int taco_tokens_before(const taco_tok *tok, const char *text, size_t b,
		       int add_special, const taco_tok_ids *full,
		       taco_tok_ids *tmp, size_t *k, taco_err *err)
{
	size_t i = 0;
	int r = taco_tok_encode(tok, text, b, add_special, tmp, err);

	if (r)
		return r;
	while (i < tmp->n && i < full->n && tmp->ids[i] == full->ids[i])
		i++;
	*k = i;
	return 0;
}

/* An example's ids and labels, appended to d. */
static int append(taco_data *d, const int32_t *ids, const int32_t *labels,
		  size_t n)
{
	if (taco_data_reserve(d, d->n_tokens + n))
		return -ENOMEM;
	memcpy(d->tokens + d->n_tokens, ids, n * sizeof(*ids));
	memcpy(d->labels + d->n_tokens, labels, n * sizeof(*labels));
	d->n_tokens += n;
	return 0;
}

static int grow_labels(taco_ds_loader *L, size_t n, taco_err *err)
{
	if (n > L->labels_cap) {
		int32_t *g = realloc(L->labels, n * sizeof(int32_t));
		if (!g)
			return taco_err_set(err, -ENOMEM, "out of memory");
		L->labels = g;
		L->labels_cap = n;
	}
	return 0;
}

int taco_ds_encode(taco_ds_loader *L, const taco_ds_render *rd, int add_special,
		   int append_eos, int train_all, taco_err *err)
{
	size_t n;
	int r;

	r = taco_tok_encode(L->tok, rd->text, rd->len, add_special, &L->ids,
			    err);
	if (r)
		return r;
	if (append_eos && L->eos_id >= 0 &&
	    (L->ids.n == 0 || L->ids.ids[L->ids.n - 1] != L->eos_id)) {
		if (L->ids.n + 1 > L->ids.cap) {
			int32_t *g = realloc(L->ids.ids,
					     (L->ids.n + 1) * sizeof(int32_t));
			if (!g)
				return taco_err_set(err, -ENOMEM,
						    "out of memory");
			L->ids.ids = g;
			L->ids.cap = L->ids.n + 1;
		}
		L->ids.ids[L->ids.n++] = L->eos_id;
	}
	n = L->ids.n;
	if ((r = grow_labels(L, n, err)))
		return r;
	for (size_t i = 0; i < n; i++)
		L->labels[i] = train_all ? L->ids.ids[i] : -100;
	for (int s = 0; !train_all && n && s < rd->n_span; s += 2) {
		size_t k0, k1;
		if ((r = taco_tokens_before(L->tok, rd->text, rd->span[s],
					    add_special, &L->ids, &L->tmp, &k0,
					    err)) ||
		    (r = taco_tokens_before(L->tok, rd->text, rd->span[s + 1],
					    add_special, &L->ids, &L->tmp, &k1,
					    err)))
			return r;
		/* a token the span's end falls inside overlaps the span, so
		 * it is trained, as transformers' assistant mask has it */
		if (L->tmp.n > k1 && k1 < n)
			k1++;
		/* a span ending the text includes what follows (EOS) */
		if (rd->span[s + 1] == rd->len)
			k1 = n;
		for (size_t i = k0; i < k1 && i < n; i++)
			L->labels[i] = L->ids.ids[i];
	}
	return 0;
}

size_t taco_ds_count_trained(const taco_ds_loader *L, size_t n)
{
	size_t trained = 0;

	/* position t predicts label t + 1: label 0 is never a target */
	for (size_t i = 1; i < n; i++)
		trained += L->labels[i] != -100;
	return trained;
}

int taco_ds_keep(taco_ds_loader *L, size_t n, taco_err *err)
{
	if (L->d->n + 2 > L->offcap) {
		size_t nc = L->offcap ? 2 * L->offcap : 1024;
		size_t *g = realloc(L->d->off, nc * sizeof(*g));
		if (!g)
			return taco_err_set(err, -ENOMEM, "out of memory");
		if (!L->d->off)
			g[0] = 0; /* the first example starts at 0 */
		L->d->off = g;
		L->offcap = nc;
	}
	if (append(L->d, L->ids.ids, L->labels, n))
		return taco_err_set(err, -ENOMEM, "out of memory");
	L->d->n++;
	L->d->off[L->d->n] = L->d->n_tokens;
	return 0;
}

/* The over-length policy, then the example (L->ids, L->labels) is kept. */
static int store_example(taco_ds_loader *L, int64_t line, taco_err *err)
{
	const taco_dataset_opts *o = L->o;
	size_t n = L->ids.n, trained;
	int r;

	L->rep->examples++;
	L->rep->tokens += (int64_t)n;
	if (n > (size_t)o->seq_len) {
		if (o->overlength == TACO_OVERLENGTH_ERROR) {
			taco_ds_report(L->rep, line, TACO_P_TOO_LONG, 1,
				       "%zu tokens, seq_len is %d", n,
				       o->seq_len);
			return 0;
		}
		if (o->overlength == TACO_OVERLENGTH_DROP) {
			taco_ds_report(L->rep, line, TACO_P_TOO_LONG, 0,
				       "%zu tokens, seq_len is %d: dropped", n,
				       o->seq_len);
			L->rep->dropped++;
			return 0;
		}
		taco_ds_report(L->rep, line, TACO_P_TOO_LONG, 0,
			       "%zu tokens, seq_len is %d: truncated", n,
			       o->seq_len);
		L->rep->truncated++;
		n = (size_t)o->seq_len;
	}
	trained = taco_ds_count_trained(L, n);
	if (!trained) {
		taco_ds_report(L->rep, line, TACO_P_ALL_LABELS_MASKED, 0,
			       "no token carries a loss: dropped");
		L->rep->dropped++;
		return 0;
	}
	if ((r = taco_ds_keep(L, n, err)))
		return r;
	L->rep->kept++;
	L->rep->trainable_tokens += (int64_t)trained;
	return 0;
}

/* Encodes a rendered example (its labels: the ids inside trained spans, or
 * everywhere with train_on_all, -100 elsewhere), applies the over-length
 * policy and stores it. */
static int finish_example(taco_ds_loader *L, int64_t line,
			  const taco_ds_render *rd, int add_special,
			  int append_eos, taco_err *err)
{
	int r = taco_ds_encode(L, rd, add_special, append_eos,
			       L->o->train_on_all, err);

	if (r)
		return r;
	if (L->ids.n == 0) {
		taco_ds_report(L->rep, line, TACO_P_EMPTY_EXAMPLE, 1,
			       "the example has no tokens");
		return 0;
	}
	return store_example(L, line, err);
}

/* ---- formats ----------------------------------------------------------- */

/* OpenAI's legacy function-calling field, which no template renders. */
static const char *const ignored_chat_fields[] = {"functions", NULL};

static int string_field(taco_ds_loader *L, int64_t line, json_t *root,
			const char *key, const char **s, size_t *n)
{
	json_t *v = json_object_get(root, key);

	if (!json_is_string(v)) {
		taco_ds_report(L->rep, line, TACO_P_INVALID_FIELD, 1,
			       "\"%s\" must be a string", key);
		return 0;
	}
	*s = json_string_value(v);
	*n = json_string_length(v);
	return 1;
}

/* Pre-tokenized: {"input_ids": [...], "labels": [...]?} */
static int pretokenized(taco_ds_loader *L, int64_t line, json_t *root,
			taco_err *err)
{
	json_t *ids = json_object_get(root, "input_ids");
	json_t *lab = json_object_get(root, "labels");
	int32_t vocab = taco_tok_vocab_size(L->tok);
	size_t i, n = json_array_size(ids);
	json_t *v;

	if (!json_is_array(ids) || n == 0 ||
	    (lab && (!json_is_array(lab) || json_array_size(lab) != n))) {
		taco_ds_report(L->rep, line, TACO_P_INVALID_FIELD, 1,
			       "\"input_ids\" must be a non-empty array, and "
			       "\"labels\" as long");
		return 0;
	}
	L->ids.n = 0;
	if (grow_labels(L, n, err))
		return -ENOMEM;
	if (n > L->ids.cap) {
		int32_t *g = realloc(L->ids.ids, n * sizeof(int32_t));
		if (!g)
			return taco_err_set(err, -ENOMEM, "out of memory");
		L->ids.ids = g;
		L->ids.cap = n;
	}
	json_array_foreach(ids, i, v)
	{
		json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
		json_int_t y =
		    lab ? (json_is_integer(json_array_get(lab, i))
			       ? json_integer_value(json_array_get(lab, i))
			       : -2)
			: x;
		if (x < 0 || x >= vocab ||
		    !(y == -100 || (y >= 0 && y < vocab))) {
			taco_ds_report(
			    L->rep, line, TACO_P_INVALID_TOKEN, 1,
			    "input_ids[%zu] or labels[%zu] is not a token "
			    "id in [0, %d)%s",
			    i, i, vocab, lab ? " or -100" : "");
			return 0;
		}
		L->ids.ids[L->ids.n] = (int32_t)x;
		L->labels[L->ids.n++] =
		    L->o->train_on_all ? (int32_t)x : (int32_t)y;
	}
	return store_example(L, line, err);
}

int taco_ds_template(taco_ds_loader *L, taco_err *err)
{
	const taco_dataset_opts *o = L->o;
	taco_chat_opts co = {o->model_dir, o->template_id, o->chat_jinja,
			     o->chat_kwargs, o->chat_now};
	int r;

	if (L->chat)
		return 0;
	if ((r = taco_chat_open(&co, L->tok, &L->chat, err)))
		return r;
	taco_text_copy(L->rep->chat_template, sizeof(L->rep->chat_template),
		       taco_chat_source(L->chat));
	L->rep->chat_time = o->chat_now;
	return 0;
}

/* The report's preview: the first chat's render, cut at a character
 * boundary, and its trained spans within the cut. */
static void set_preview(taco_ds_loader *L, int64_t line,
			const taco_chat_out *co)
{
	taco_dataset_report *rep = L->rep;
	size_t n = co->len;

	if (n > TACO_DATASET_PREVIEW) {
		n = TACO_DATASET_PREVIEW;
		while (n && ((unsigned char)co->text[n] & 0xC0) == 0x80)
			n--;
		rep->preview_cut = 1;
	}
	memcpy(rep->preview, co->text, n);
	rep->preview[n] = 0;
	rep->preview_len = n;
	rep->preview_line = line;
	for (int s = 0; s + 1 < co->n_span &&
			rep->preview_n_span < 2 * TACO_DATASET_PREVIEW_SPANS;
	     s += 2) {
		if (co->span[s] >= n)
			break;
		rep->preview_span[rep->preview_n_span++] =
		    (uint32_t)co->span[s];
		rep->preview_span[rep->preview_n_span++] =
		    (uint32_t)(co->span[s + 1] < n ? co->span[s + 1] : n);
	}
	L->preview_done = 1;
}

int taco_ds_render_chat(taco_ds_loader *L, int64_t line, json_t *messages,
			json_t *tools, const unsigned char *trained,
			taco_ds_render *rd, taco_err *err)
{
	taco_chat_out co;
	char why[sizeof(((taco_problem *)0)->detail)];
	int code = TACO_P_TEMPLATE_ERROR;
	int r = taco_chat_render(L->chat, messages, tools, trained, &co, &code,
				 why, sizeof(why), err);

	rd->len = 0;
	if (r == -EINVAL) {
		taco_ds_report(L->rep, line, code, 1, "%s", why);
		return 0;
	}
	if (r)
		return r;
	if (co.n_span > (int)(sizeof(rd->span) / sizeof(rd->span[0]))) {
		taco_ds_report(L->rep, line, TACO_P_ANSWER_NOT_LOCATED, 1,
			       "more than %d trained spans",
			       TACO_DATASET_MAX_MESSAGES);
		taco_chat_out_free(&co);
		return 0;
	}
	free(rd->text);
	rd->text = co.text;
	rd->len = co.len;
	rd->cap = co.len + 1;
	memcpy(rd->span, co.span, (size_t)co.n_span * sizeof(size_t));
	rd->n_span = co.n_span;
	if (!L->preview_done)
		set_preview(L, line, &co);
	co.text = NULL;
	taco_chat_out_free(&co);
	return 0;
}

/* A message's text content: a string, or the text parts of a list. */
static char *content_text(json_t *m)
{
	json_t *c = json_object_get(m, "content"), *p;
	size_t i, n = 0;
	char *s;

	if (json_is_string(c))
		return strdup(json_string_value(c));
	json_array_foreach(c, i, p) n +=
	    json_string_length(json_object_get(p, "text"));
	s = malloc(n + 1);
	if (!s)
		return NULL;
	n = 0;
	json_array_foreach(c, i, p)
	{
		json_t *t = json_object_get(p, "text");
		memcpy(s + n, json_string_value(t) ? json_string_value(t) : "",
		       json_string_length(t));
		n += json_string_length(t);
	}
	s[n] = 0;
	return s;
}

/* Keeps a checked chat (msgs: the template's messages) as a prompt for
 * generation when it ends in an assistant message with content and no
 * tool calls, while fewer than keep_prompts are kept. A render that
 * fails is not kept (the chat's own render reports its problems). */
static int keep_prompt(taco_ds_loader *L, int64_t line, json_t *msgs,
		       json_t *tools, taco_err *err)
{
	taco_data *d = L->d;
	size_t n = json_array_size(msgs);
	json_t *last = json_array_get(msgs, n - 1), *head = NULL, *m;
	taco_chat_out co = {0};
	taco_tok_ids ids = {0};
	taco_data_prompt *p, *grown;
	char why[256];
	int r;

	if (d->n_prompts >= L->o->keep_prompts || n < 2 ||
	    strcmp(json_string_value(json_object_get(last, "role")) ?: "",
		   "assistant") ||
	    json_object_get(last, "tool_calls") ||
	    (!json_is_string(json_object_get(last, "content")) &&
	     !json_is_array(json_object_get(last, "content"))))
		return 0;
	head = json_array();
	if (!head)
		return -ENOMEM;
	for (size_t i = 0; i + 1 < n; i++)
		json_array_append(head, json_array_get(msgs, i));
	r = taco_chat_render_text(L->chat, head, tools, 1, &co, why,
				  sizeof(why), err);
	if (r == -EINVAL)
		r = 0;
	if (r || !co.text)
		goto out;
	/* the template writes its special tokens (BOS) itself */
	if ((r = taco_tok_encode(L->tok, co.text, co.len, 0, &ids, err)))
		goto out;
	grown = realloc(d->prompts, (size_t)(d->n_prompts + 1) * sizeof(*p));
	if (!grown) {
		r = -ENOMEM;
		goto out;
	}
	d->prompts = grown;
	p = &d->prompts[d->n_prompts];
	memset(p, 0, sizeof(*p));
	p->ids = ids.ids;
	p->n = ids.n;
	ids.ids = NULL;
	p->line = line;
	p->reference = content_text(last);
	for (size_t i = n - 1; i-- > 0;)
		if (!strcmp(json_string_value(json_object_get(
				(m = json_array_get(msgs, i)), "role"))
				?: "",
			    "user")) {
			p->user = content_text(m);
			break;
		}
	if (!p->user)
		p->user = strdup("");
	d->n_prompts++;
	if (!p->reference || !p->user)
		r = -ENOMEM;
out:
	taco_tok_ids_free(&ids);
	taco_chat_out_free(&co);
	json_decref(head);
	return r;
}

/* A chat line: {"messages": [...], "tools": [...]?,
 * "parallel_tool_calls": bool?} */
static int chat_line(taco_ds_loader *L, int64_t line, json_t *root,
		     taco_ds_render *rd, taco_err *err)
{
	json_t *msgs = NULL, *tools;
	int ok, r;

	for (int k = 0; ignored_chat_fields[k]; k++)
		if (json_object_get(root, ignored_chat_fields[k]))
			taco_ds_report(L->rep, line, TACO_P_IGNORED_FIELD, 0,
				       "\"%s\" is not read (OpenAI's legacy "
				       "field): give \"tools\"",
				       ignored_chat_fields[k]);
	if ((r = taco_ds_template(L, err)))
		return r;
	tools = taco_ds_check_tools(L, line, root, "", &ok);
	r = taco_ds_check_chat(
	    L, line, json_object_get(root, "messages"), "messages", 0,
	    !json_is_false(json_object_get(root, "parallel_tool_calls")), &msgs,
	    L->trained);
	if (r <= 0 || !ok) {
		json_decref(msgs);
		return r < 0 ? r : 0;
	}
	r = taco_ds_render_chat(L, line, msgs, tools, L->trained, rd, err);
	if (!r && rd->len)
		r = keep_prompt(L, line, msgs, tools, err);
	json_decref(msgs);
	if (r || !rd->len)
		return r;
	return finish_example(L, line, rd, 0, 0, err);
}

/* One line of the file. */
static int do_line(taco_ds_loader *L, int64_t line, const char *buf, size_t len,
		   taco_err *err)
{
	json_error_t jerr;
	json_t *root;
	long bad;
	taco_ds_render rd = {0};
	int r = 0;
	const char *a, *b;
	size_t an, bn;

	if ((bad = utf8_invalid_at((const unsigned char *)buf, len)) >= 0) {
		taco_ds_report(L->rep, line, TACO_P_INVALID_UTF8, 1,
			       "invalid UTF-8 at byte %ld", bad);
		return 0;
	}
	root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root || !json_is_object(root)) {
		taco_ds_report(L->rep, line, TACO_P_INVALID_JSON, 1, "%s",
			       root ? "not a JSON object" : jerr.text);
		json_decref(root);
		return 0;
	}
	if (taco_ds_is_pref(root)) {
		if (L->o->method == TACO_METHOD_DPO)
			r = taco_ds_pref_line(L, line, root, err);
		else
			taco_ds_report(L->rep, line, TACO_P_PREFERENCE_PAIR, 1,
				       "a preference pair needs method dpo");
	} else if (L->o->method == TACO_METHOD_DPO) {
		taco_ds_report(L->rep, line, TACO_P_NOT_PREFERENCE, 1,
			       "method dpo needs preference pairs: input, "
			       "preferred_output, non_preferred_output");
	} else if (json_object_get(root, "messages")) {
		r = chat_line(L, line, root, &rd, err);
	} else if (json_object_get(root, "completion")) {
		if (string_field(L, line, root, "prompt", &a, &an) &&
		    string_field(L, line, root, "completion", &b, &bn)) {
			if (!an && !bn)
				taco_ds_report(
				    L->rep, line, TACO_P_EMPTY_EXAMPLE, 1,
				    "prompt and completion are empty");
			else if (!(r = put(&rd, a, an)) &&
				 !(r = put_span(&rd, b, bn, 1)))
				r = finish_example(L, line, &rd, 1, 1, err);
		}
	} else if (json_object_get(root, "text")) {
		if (string_field(L, line, root, "text", &a, &an)) {
			if (!an)
				taco_ds_report(L->rep, line,
					       TACO_P_EMPTY_EXAMPLE, 1,
					       "\"text\" is empty");
			else if (!(r = put_span(&rd, a, an, 1)))
				r = finish_example(L, line, &rd, 1, 1, err);
		}
	} else if (json_object_get(root, "input_ids")) {
		r = pretokenized(L, line, root, err);
	} else {
		taco_ds_report(L->rep, line, TACO_P_UNKNOWN_FORMAT, 1,
			       "expected \"messages\", \"prompt\" and "
			       "\"completion\", \"text\", or \"input_ids\"");
	}
	if (r == -ENOMEM)
		r = taco_err_set(err, r, "line %lld: out of memory",
				 (long long)line);
	free(rd.text);
	json_decref(root);
	return r;
}

int taco_dataset_load(const char *path, const taco_tok *tok,
		      const taco_dataset_opts *o, taco_data **out,
		      taco_dataset_report *rep, taco_err *err)
{
	FILE *f = fopen(path, "rb");
	taco_ds_loader L = {0};
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int64_t lineno = 0;
	uint64_t bytes = 0;
	taco_tok_special sp = taco_tok_special_ids(tok);
	int r = 0;

	memset(rep, 0, sizeof(*rep));
	if (!f)
		return taco_err_set(err, -errno, "%s: %s", path,
				    strerror(errno));
	L.tok = tok;
	L.o = o;
	L.rep = rep;
	rep->template_id = o->template_id;
	rep->method = o->method;
	L.eos_id = sp.eos;
	L.d = calloc(1, sizeof(*L.d));
	/* a preference pair's prompt and one output */
	L.trained = calloc(TACO_DATASET_MAX_MESSAGES + 1, 1);
	if (!L.d || !L.trained) {
		r = taco_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	while ((len = getline(&line, &cap, f)) >= 0) {
		lineno++;
		bytes += (uint64_t)len;
		if (bytes > TACO_DATASET_MAX_FILE) {
			r = taco_err_set(
			    err, -EFBIG, "%s: larger than %llu bytes", path,
			    (unsigned long long)TACO_DATASET_MAX_FILE);
			goto out;
		}
		while (len > 0 &&
		       (line[len - 1] == '\n' || line[len - 1] == '\r'))
			len--;
		if (strspn(line, " \t") == (size_t)len)
			continue;
		if ((size_t)len > TACO_DATASET_MAX_LINE) {
			taco_ds_report(rep, lineno, TACO_P_LINE_TOO_LONG, 1,
				       "%zd bytes, the limit is %u", len,
				       TACO_DATASET_MAX_LINE);
			continue;
		}
		if (rep->examples >= o->max_examples) {
			taco_ds_report(rep, lineno, TACO_P_INVALID_FIELD, 1,
				       "more than %lld examples",
				       (long long)o->max_examples);
			break;
		}
		if ((r = do_line(&L, lineno, line, (size_t)len, err))) {
			taco_err_prefix(err, r, "%s:%lld", path,
					(long long)lineno);
			goto out;
		}
	}
	rep->lines = lineno;
	if (ferror(f)) {
		r = taco_err_set(err, -EIO, "%s: read error", path);
		goto out;
	}
	if (rep->errors) {
		char sum[sizeof(err->msg)];
		taco_dataset_report_summary(rep, path, sum, sizeof(sum));
		r = taco_err_set(err, -EINVAL, "%s", sum);
		goto out;
	}
	if (!L.d->n) {
		r = taco_err_set(err, -EINVAL, "%s: no usable %s", path,
				 o->method == TACO_METHOD_DPO ? "pairs"
							      : "examples");
		goto out;
	}
	L.d->pairs = o->method == TACO_METHOD_DPO;
	*out = L.d;
	L.d = NULL;
out:
	taco_data_free(L.d);
	taco_tok_ids_free(&L.ids);
	taco_tok_ids_free(&L.tmp);
	free(L.labels);
	free(L.trained);
	taco_chat_free(L.chat);
	free(line);
	fclose(f);
	return r;
}
