/* serve.c: taco-train --serve (serve.h). */
#include "serve.h"

#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "data/chat.h"
#include "gen/gen.h"
#include "job/job_opts.h"
#include "model/decode.h"
#include "plan/plan.h"
#include "tokenizer/tokenizer.h"

typedef struct server {
	const taco_serve_opts *o;
	taco_model *m;
	taco_tok *tok;
	taco_chat *chat;
	taco_kv *kv;
	int32_t stop_ids[TACO_GEN_MAX_STOP_IDS];
	int n_stop_ids;
	/* the input: bytes read but not yet taken as lines */
	char *buf;
	size_t len, cap;
	int eof;
	/* the request running */
	const char *id;
	int cancelled;
} server;

/* One line to out_fd, whole (the reader splits on newlines). */
static void emit(server *s, json_t *o)
{
	char *t = json_dumps(o, JSON_COMPACT);
	size_t n, off = 0;

	json_decref(o);
	if (!t)
		return;
	n = strlen(t);
	t[n++] = '\n'; /* over the NUL: not a string from here on */
	while (off < n) {
		ssize_t w = write(s->o->out_fd, t + off, n - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break; /* the reader is gone: in_fd ends soon too */
		off += (size_t)w;
	}
	free(t);
}

static void reply_error(server *s, const char *id, int status, const char *code,
			const char *param, const char *msg)
{
	emit(s, json_pack("{ss? ss si ss? ss? ss}", "id", id, "event", "error",
			  "status", status, "code", code, "param", param,
			  "message", msg));
}

/* Reads more input (blocking when wait): 1 when bytes came, 0 at end or
 * when none are there, -1 on error. */
static int fill(server *s, int wait)
{
	struct pollfd p = {s->o->in_fd, POLLIN, 0};
	ssize_t r;

	if (s->eof || (!wait && poll(&p, 1, 0) <= 0))
		return 0;
	if (s->cap - s->len < 65536) {
		size_t cap = s->cap ? 2 * s->cap : 131072;
		char *b;
		if (cap > TACO_SERVE_LINE_MAX + 131072)
			cap = TACO_SERVE_LINE_MAX + 131072;
		if (cap <= s->len + 1)
			return -1;
		b = realloc(s->buf, cap);
		if (!b)
			return -1;
		s->buf = b;
		s->cap = cap;
	}
	do
		r = read(s->o->in_fd, s->buf + s->len, s->cap - s->len - 1);
	while (r < 0 && errno == EINTR);
	if (r <= 0) {
		s->eof = 1;
		return r < 0 ? -1 : 0;
	}
	s->len += (size_t)r;
	return 1;
}

/* The next whole line parsed (NULL: none yet, or *bad set for a line that
 * is not a JSON object or too long). */
static json_t *take_line(server *s, int *bad)
{
	char *nl = s->len ? memchr(s->buf, '\n', s->len) : NULL;
	json_t *o;
	size_t n;

	*bad = 0;
	if (!nl) {
		if (s->len > TACO_SERVE_LINE_MAX) { /* drop it */
			s->len = 0;
			*bad = 1;
		}
		return NULL;
	}
	n = (size_t)(nl - s->buf);
	o = json_loadb(s->buf, n, JSON_REJECT_DUPLICATES, NULL);
	memmove(s->buf, nl + 1, s->len - n - 1);
	s->len -= n + 1;
	if (!json_is_object(o)) {
		json_decref(o);
		*bad = 1;
		return NULL;
	}
	return o;
}

/* Between tokens: a {"cancel": id} line for the running request stops it;
 * the other lines (requests sent meanwhile) stay for their turn. */
static void take_cancels(server *s)
{
	size_t at = 0;

	while (fill(s, 0) > 0)
		;
	while (at < s->len) {
		char *nl = memchr(s->buf + at, '\n', s->len - at);
		size_t n;
		json_t *o;
		const char *c;
		if (!nl)
			break;
		n = (size_t)(nl - (s->buf + at));
		o = json_loadb(s->buf + at, n, 0, NULL);
		c = json_string_value(json_object_get(o, "cancel"));
		if (c) {
			if (!strcmp(c, s->id))
				s->cancelled = 1;
			memmove(s->buf + at, nl + 1,
				s->len - (size_t)(nl + 1 - s->buf));
			s->len -= n + 1;
		} else {
			at += n + 1;
		}
		json_decref(o);
	}
}

static int on_delta(void *ctx, int i, const char *text, size_t len)
{
	server *s = ctx;

	take_cancels(s);
	if (s->cancelled)
		return 1;
	if (text)
		emit(s, json_pack("{ss ss si ss%}", "id", s->id, "event",
				  "delta", "index", i, "text", text, len));
	return 0;
}

static int on_delta_quiet(void *ctx, int i, const char *text, size_t len)
{
	(void)text;
	(void)len;
	return on_delta(ctx, i, NULL, 0);
}

/* The request's sampling; -EINVAL with why for a field of the wrong type
 * or range (tacod checks them first: this is the worker's own guard). */
static int sampling_of(server *s, json_t *q, taco_sampling *sp,
		       const char **stop, int *n, char *why, size_t cap)
{
	json_t *v, *st = json_object_get(q, "stop");
	size_t i;

	memset(sp, 0, sizeof(*sp));
	sp->max_tokens = 0; /* not given: the room left (answer) */
	sp->temperature = 1.0f;
	sp->top_p = 1.0f;
	*n = 1;
	if ((v = json_object_get(q, "max_tokens")) && json_is_integer(v))
		sp->max_tokens = (int)json_integer_value(v);
	if ((v = json_object_get(q, "temperature")) && json_is_number(v))
		sp->temperature = (float)json_number_value(v);
	if ((v = json_object_get(q, "top_p")) && json_is_number(v))
		sp->top_p = (float)json_number_value(v);
	if ((v = json_object_get(q, "top_k")) && json_is_integer(v))
		sp->top_k = (int)json_integer_value(v);
	if ((v = json_object_get(q, "seed")) && json_is_integer(v))
		sp->seed = (uint64_t)json_integer_value(v);
	else
		sp->seed = (uint64_t)time(NULL) ^ (uint64_t)getpid();
	if ((v = json_object_get(q, "n")) && json_is_integer(v))
		*n = (int)json_integer_value(v);
	if (*n < 1 || *n > taco_kv_rows(s->kv)) {
		snprintf(why, cap, "n %d: this worker answers 1 to %d", *n,
			 taco_kv_rows(s->kv));
		return -EINVAL;
	}
	json_array_foreach(st, i, v)
	{
		if (i >= TACO_GEN_MAX_STOP || !json_is_string(v)) {
			snprintf(why, cap, "stop: at most %d strings",
				 TACO_GEN_MAX_STOP);
			return -EINVAL;
		}
		stop[i] = json_string_value(v);
		sp->n_stop = (int)i + 1;
	}
	sp->stop = stop;
	sp->stop_ids = s->stop_ids;
	sp->n_stop_ids = s->n_stop_ids;
	return 0;
}

/* A message's reasoning under transformers' names, as the training data
 * gives it to the template (engine/data/dataset_chat.c): "thinking" and
 * "reasoning_content" alike, from any of reasoning_content, thinking or
 * reasoning. */
static void alias_reasoning(json_t *msgs)
{
	static const char *const names[] = {"reasoning_content", "thinking",
					    "reasoning"};
	json_t *m, *r;
	size_t i;

	json_array_foreach(msgs, i, m)
	{
		r = NULL;
		for (int k = 0; k < 3 && !r; k++)
			if (json_is_string(json_object_get(m, names[k])))
				r = json_object_get(m, names[k]);
		if (r) {
			json_incref(r);
			json_object_set(m, "thinking", r);
			json_object_set_new(m, "reasoning_content", r);
		}
	}
}

static void answer(server *s, json_t *q)
{
	const char *id = json_string_value(json_object_get(q, "id"));
	json_t *msgs = json_object_get(q, "messages");
	json_t *tools = json_object_get(q, "tools"), *choices, *ev;
	const char *stop[TACO_GEN_MAX_STOP];
	const int32_t *prompts[TACO_KV_MAX_ROWS];
	int plen[TACO_KV_MAX_ROWS], n, r, completion = 0;
	taco_completion out[64];
	taco_chat_out co = {0};
	taco_tok_ids ids = {0};
	taco_sampling sp;
	taco_err err = {{0}};
	char why[512];
	int stream = json_is_true(json_object_get(q, "stream"));

	if (!id) {
		reply_error(s, NULL, 400, "invalid_request", "id",
			    "a request needs its \"id\"");
		return;
	}
	if (!s->chat) {
		reply_error(s, id, 400, "no_chat_template", "model",
			    "the model has no chat template to render "
			    "messages with");
		return;
	}
	if (!json_is_array(msgs) || !json_array_size(msgs)) {
		reply_error(s, id, 400, "invalid_request", "messages",
			    "\"messages\" must be a non-empty array");
		return;
	}
	if (sampling_of(s, q, &sp, stop, &n, why, sizeof(why)) || n > 64) {
		reply_error(s, id, 400, "invalid_request", NULL,
			    err.msg[0] ? err.msg : why);
		return;
	}
	alias_reasoning(msgs);
	r = taco_chat_render_text(s->chat, msgs,
				  json_is_array(tools) ? tools : NULL, 1, &co,
				  why, sizeof(why), &err);
	if (r) {
		reply_error(s, id, r == -EINVAL ? 400 : 500,
			    r == -EINVAL ? "template_error" : "server_error",
			    "messages", r == -EINVAL ? why : err.msg);
		goto out;
	}
	/* the template writes its special tokens itself */
	if ((r = taco_tok_encode(s->tok, co.text, co.len, 0, &ids, &err))) {
		reply_error(s, id, 400, "invalid_request", "messages", err.msg);
		goto out;
	}
	if (sp.max_tokens <= 0) { /* OpenAI's: up to the context's end */
		sp.max_tokens = taco_kv_ctx(s->kv) - (int)ids.n;
		if (sp.max_tokens > TACO_SERVE_MAX_TOKENS)
			sp.max_tokens = TACO_SERVE_MAX_TOKENS;
	}
	if (sp.max_tokens < 1 ||
	    (int)ids.n + sp.max_tokens > taco_kv_ctx(s->kv)) {
		snprintf(why, sizeof(why),
			 "the prompt's %zu tokens and max_tokens %d exceed "
			 "the context of %d tokens",
			 ids.n, sp.max_tokens, taco_kv_ctx(s->kv));
		reply_error(s, id, 400, "context_length_exceeded", "messages",
			    why);
		goto out;
	}
	if (taco_sampling_check(&sp, &err)) {
		reply_error(s, id, 400, "invalid_request", NULL, err.msg);
		goto out;
	}
	for (int i = 0; i < n; i++) {
		prompts[i] = ids.ids;
		plen[i] = (int)ids.n;
	}
	s->id = id;
	s->cancelled = 0;
	r = taco_generate(s->m, s->kv, s->tok, prompts, plen, n, &sp,
			  stream ? on_delta : on_delta_quiet, s, out, &err);
	if (r == -ECANCELED) {
		reply_error(s, id, 499, "cancelled", NULL,
			    "the request was cancelled");
		goto out;
	}
	if (r) {
		reply_error(s, id, 500, "server_error", NULL, err.msg);
		goto out;
	}
	choices = json_array();
	for (int i = 0; i < n; i++) {
		completion += out[i].n_ids;
		json_array_append_new(
		    choices,
		    json_pack("{si ss% ss}", "index", i, "text", out[i].text,
			      out[i].len, "finish_reason",
			      out[i].finish == TACO_FINISH_STOP ? "stop"
								: "length"));
		taco_completion_clear(&out[i]);
	}
	ev = json_pack("{ss ss so s{si si si}}", "id", id, "event", "done",
		       "choices", choices, "usage", "prompt_tokens", (int)ids.n,
		       "completion_tokens", completion, "total_tokens",
		       (int)ids.n + completion);
	emit(s, ev);
out:
	s->id = NULL;
	taco_tok_ids_free(&ids);
	taco_chat_out_free(&co);
}

static int setup(server *s, taco_err *err)
{
	const taco_serve_opts *o = s->o;
	taco_chat_opts co = {o->model_dir, TACO_TEMPLATE_AUTO, NULL, NULL,
			     (int64_t)time(NULL)};
	int ctx = o->context, chunk, r;

	if ((r = taco_model_load_as(o->model_dir, o->ops, o->act_dtype, &s->m,
				    err)) ||
	    (r = taco_tok_load(o->model_dir, &s->tok, err)))
		return r;
	taco_plan_serve_shape(s->m, ctx, &ctx, &chunk);
	if (chunk < o->rows)
		chunk = o->rows;
	/* a model without a template still loads: its requests are told */
	if (taco_chat_open(&co, s->tok, &s->chat, NULL))
		s->chat = NULL;
	s->n_stop_ids = taco_gen_stop_ids(o->model_dir, s->tok, s->stop_ids,
					  TACO_GEN_MAX_STOP_IDS);
	return taco_kv_new(s->m, o->rows, ctx, chunk, &s->kv, err);
}

int taco_serve(const taco_serve_opts *o, taco_err *err)
{
	server s = {.o = o};
	json_t *q;
	int r, bad;

	if ((r = setup(&s, err))) {
		reply_error(&s, NULL, 500, "load_failed", "model", err->msg);
		goto out;
	}
	emit(&s, json_pack("{ss si si sI}", "event", "ready", "context",
			   taco_kv_ctx(s.kv), "rows", taco_kv_rows(s.kv),
			   "device_bytes", (json_int_t)o->ops->mem_current()));
	for (;;) {
		q = take_line(&s, &bad);
		if (bad)
			reply_error(&s, NULL, 400, "invalid_request", NULL,
				    "a request is one JSON object a line");
		if (q) {
			if (!json_object_get(q, "cancel")) /* a late one */
				answer(&s, q);
			json_decref(q);
			continue;
		}
		if (bad)
			continue;
		if (fill(&s, 1) <= 0)
			break;
	}
	r = 0;
out:
	taco_kv_free(s.kv);
	taco_chat_free(s.chat);
	taco_tok_free(s.tok);
	taco_model_free(s.m);
	free(s.buf);
	return r;
}
