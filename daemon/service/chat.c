/* service/chat.c: OpenAI's chat completions, POST /v1/chat/completions
 * (docs/generation.md): for trying and evaluating models, not for
 * high-throughput serving.
 *
 * A model is served by a worker, a `taco-train --serve` child
 * (runner/worker.c, engine/serve.h) that stays up while requests come and
 * exits after chat.idle_s without one. Its memory is a plan
 * (taco_plan_serve_dir) admitted on the devices beside the running jobs,
 * never in their place: the job scheduler counts the workers' plans too
 * (tacod_chat_held), and a worker starts only where its plan fits. A
 * request that cannot start waits chat.wait_s, then gets 503 with
 * Retry-After; an idle worker of another model is stopped to make room.
 *
 * Requests wait in one FIFO queue; a worker answers one at a time. The
 * HTTP handler checks the request and queues it, its reply left for later
 * (tacod_http_later_begin); everything else runs on the service's loop
 * thread, under the service lock: starting workers, handing them
 * requests, their answers (a JSON reply, or the chat.completion.chunk
 * events of a stream), their exits. A client that leaves a stream cancels
 * its request; a worker that dies fails its request with a clear error,
 * and the next request of that model starts another. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api/chat_request.h"
#include "daemon/runner/worker.h"
#include "daemon/service/internal.h"
#include "util/fsutil.h"

#define CHAT_QUEUE_MAX 256 /* requests waiting, of all users */
#define CHAT_TICK_MS 250
#define CHAT_RETRY_AFTER_S 10

typedef struct chat_worker chat_worker;

typedef struct chat_req {
	struct chat_req *next; /* in the queue */
	char id[TACOD_ID_MAX]; /* chatcmpl-... */
	char user[128];
	char model[256];
	tacod_http_later *later;   /* until answered, or its stream begun */
	tacod_http_stream *stream; /* a stream, once started */
	int stream_mode, include_usage, n;
	json_t *work; /* what the worker is sent */
	int64_t created;
	uint64_t queued_ms, started_ms;
	chat_worker *w; /* running on it */
	int cancelled;
	int timed_out; /* its cancel for request_timeout_s is written */
	unsigned char role_sent[TACOD_CHAT_MAX_N];
} chat_req;

struct chat_worker {
	chat_worker *next;
	tacod_service *s;
	char model[256];
	char dir[TACOD_PATH_MAX + 320];
	char own[TACOD_PATH_MAX + 64]; /* assembled there ("": none) */
	tacod_worker *proc;
	int ready, closing;
	char failed[512]; /* why it could not load */
	chat_req *busy;
	uint64_t idle_since_ms;
	uint64_t planned;
	int device; /* position in the device list */
};

typedef struct tacod_chat {
	chat_req *head, *tail;
	int n_queued;
	chat_worker *workers;
	int n_workers, n_alive; /* n_alive: processes not yet exited */
	uv_timer_t timer;
	int closed;
	uint64_t seq;
} tacod_chat;

static uint64_t now_ms(tacod_service *s)
{
	return uv_now(s->loop);
}

/* ---- replies ---------------------------------------------------------- */

static json_t *error_object(const char *type, const char *code,
			    const char *param, const char *msg)
{
	return json_pack("{s{ss ss? ss? ss}}", "error", "message", msg, "type",
			 type, "param", param, "code", code);
}

/* The request's end: a JSON reply (status and body consumed), or in a
 * stream an error event; frees the request. */
static void req_free(chat_req *q)
{
	json_decref(q->work);
	free(q);
}

static void req_fail(chat_req *q, int status, const char *code,
		     const char *param, const char *msg, int retry_after)
{
	const char *type = status >= 500   ? "server_error"
			   : status == 429 ? "rate_limit_error"
					   : "invalid_request_error";

	if (q->stream) {
		char *t = json_dumps(error_object(type, code, param, msg),
				     JSON_COMPACT);
		if (t)
			tacod_http_stream_event(q->stream, NULL, t);
		free(t);
		tacod_http_stream_end(q->stream);
	} else if (q->later) {
		tacod_http_later_json(q->later, status,
				      error_object(type, code, param, msg),
				      retry_after);
	}
	req_free(q);
}

static json_t *chunk(const chat_req *q, json_t *choices)
{
	json_t *c = json_pack("{ss ss sI ss so}", "id", q->id, "object",
			      "chat.completion.chunk", "created",
			      (json_int_t)q->created, "model", q->model,
			      "choices", choices);

	json_object_set_new(c, "service_tier", json_null());
	json_object_set_new(c, "system_fingerprint", json_null());
	if (q->include_usage)
		json_object_set_new(c, "usage", json_null());
	return c;
}

/* A chunk into the stream; a client that has left cancels the request. */
static void push_chunk(chat_req *q, json_t *c)
{
	char *t = json_dumps(c, JSON_COMPACT);

	json_decref(c);
	if (!t || tacod_http_stream_event(q->stream, NULL, t)) {
		if (!q->cancelled && q->w) {
			char line[128];
			int n = snprintf(line, sizeof(line),
					 "{\"cancel\": \"%s\"}", q->id);
			q->cancelled = 1;
			tacod_worker_write(q->w->proc, line, (size_t)n);
		}
	}
	free(t);
}

static void on_delta(chat_req *q, json_t *e)
{
	int i = (int)json_integer_value(json_object_get(e, "index"));
	json_t *delta;

	if (!q->stream || q->cancelled || i < 0 || i >= q->n)
		return;
	delta = json_pack("{sO}", "content", json_object_get(e, "text"));
	if (!q->role_sent[i]) {
		json_object_set_new(delta, "role", json_string("assistant"));
		q->role_sent[i] = 1;
	}
	push_chunk(q, chunk(q, json_pack("[{si so sn sn}]", "index", i, "delta",
					 delta, "logprobs", "finish_reason")));
}

static void on_done(chat_req *q, json_t *e)
{
	json_t *choices = json_object_get(e, "choices"), *c, *out;
	json_t *usage = json_object_get(e, "usage");
	size_t i;

	if (q->stream) {
		json_array_foreach(choices, i, c)
		{
			json_t *delta = json_object();
			if (i < TACOD_CHAT_MAX_N && !q->role_sent[i])
				json_object_set_new(delta, "role",
						    json_string("assistant"));
			push_chunk(
			    q, chunk(q, json_pack("[{sI so sn sO}]", "index",
						  (json_int_t)i, "delta", delta,
						  "logprobs", "finish_reason",
						  json_object_get(
						      c, "finish_reason"))));
		}
		if (q->include_usage) {
			json_t *u = chunk(q, json_array());
			json_object_set(u, "usage", usage);
			push_chunk(q, u);
		}
		tacod_http_stream_event(q->stream, NULL, "[DONE]");
		tacod_http_stream_end(q->stream);
		req_free(q);
		return;
	}
	out = json_array();
	json_array_foreach(choices, i, c) json_array_append_new(
	    out,
	    json_pack("{sI s{ss sO sn} sn sO}", "index", (json_int_t)i,
		      "message", "role", "assistant", "content",
		      json_object_get(c, "text"), "refusal", "logprobs",
		      "finish_reason", json_object_get(c, "finish_reason")));
	tacod_http_later_json(q->later, 200,
			      json_pack("{ss ss sI ss so sO sn}", "id", q->id,
					"object", "chat.completion", "created",
					(json_int_t)q->created, "model",
					q->model, "choices", out, "usage",
					usage, "system_fingerprint"),
			      0);
	req_free(q);
}

/* ---- workers ---------------------------------------------------------- */

static void worker_event(tacod_worker *p, json_t *e, void *ctx);
static void worker_exit(tacod_worker *p, int64_t status, int sig, void *ctx);

static void chat_turn_locked(tacod_service *s);

static chat_worker *worker_of(tacod_chat *c, const char *model)
{
	for (chat_worker *w = c->workers; w; w = w->next)
		if (!w->closing && !strcmp(w->model, model))
			return w;
	return NULL;
}

static void worker_close(chat_worker *w)
{
	if (!w->closing) {
		w->closing = 1;
		tacod_worker_close_input(w->proc);
	}
}

/* Bytes the workers hold on each device. */
void tacod_chat_held(tacod_service *s, uint64_t *bytes, int n)
{
	for (chat_worker *w = s->chat ? s->chat->workers : NULL; w; w = w->next)
		if (w->device >= 0 && w->device < n)
			bytes[w->device] += w->planned;
}

/* The device a plan of `need` bytes fits on now, beside the jobs and the
 * workers (best fit, as the job scheduler's), or -1. */
static int device_for(tacod_service *s, uint64_t need)
{
	tacod_device_config dc[TACOD_MAX_DEVICES];
	uint64_t used[TACOD_MAX_DEVICES] = {0};
	int n = tacod_config_device_list(&s->cfg, dc), best = -1;

	for (int i = 0; i < s->runs.n; i++)
		for (int d = 0; d < n; d++)
			if (s->runs.run[i]->devices & (1u << d))
				used[d] += s->runs.run[i]->planned;
	tacod_chat_held(s, used, n);
	for (int d = 0; d < n; d++) {
		if (used[d] + need > dc[d].memory)
			continue;
		if (best < 0 ||
		    dc[d].memory - used[d] < dc[best].memory - used[best])
			best = d;
	}
	return best;
}

/* Starts a worker for q's model where its plan fits: 0 (started, or
 * failed with q answered: *gone), -EAGAIN when it must wait for room. */
static int worker_start(tacod_service *s, chat_req *q, int *gone)
{
	tacod_chat *c = s->chat;
	chat_worker *w = calloc(1, sizeof(*w));
	tacod_device_config dc[TACOD_MAX_DEVICES];
	taco_err err = {{0}};
	taco_plan p;
	char devices[16], *dev = NULL;
	int ctx, rc;

	*gone = 0;
	if (!w) {
		*gone = 1;
		return 0;
	}
	w->s = s;
	snprintf(w->model, sizeof(w->model), "%s", q->model);
	snprintf(w->own, sizeof(w->own), "%s/chat/%llu", s->cfg.state_dir,
		 (unsigned long long)++c->seq);
	rc = tacod_models_serve_dir(s, NULL, q->model, w->own, w->dir,
				    sizeof(w->dir), &err);
	if (rc == 0)
		w->own[0] = 0;
	if (rc >= 0 && (rc = taco_plan_serve_dir(
			    w->dir, s->cfg.backend, s->cfg.chat.rows,
			    s->cfg.chat.context, &p, &ctx, &err)) == 0) {
		w->planned = p.total;
		w->device = device_for(s, p.total);
		if (w->device < 0) {
			if (w->own[0])
				taco_remove_flat_dir(w->own, NULL);
			free(w);
			return -EAGAIN;
		}
		tacod_config_device_list(&s->cfg, dc);
		if (dc[w->device].index >= 0) {
			snprintf(devices, sizeof(devices), "%d",
				 dc[w->device].index);
			dev = devices;
		}
		rc = tacod_worker_start_serve(
		    s->loop, s->cfg.taco_train, w->dir,
		    s->cfg.backend == TACO_BACKEND_CUDA ? "cuda" : "cpu", dev,
		    s->cfg.chat.rows, ctx,
		    &(tacod_worker_cb){worker_event, worker_exit}, w, &w->proc,
		    &err);
	}
	if (rc < 0) {
		/* the model went (deleted meanwhile) or cannot be served */
		if (w->own[0])
			taco_remove_flat_dir(w->own, NULL);
		free(w);
		*gone = 1;
		req_fail(q, rc == -ENOENT ? 404 : 500,
			 rc == -ENOENT ? "model_not_found" : "server_error",
			 "model", err.msg, 0);
		return 0;
	}
	w->next = c->workers;
	c->workers = w;
	c->n_workers++;
	c->n_alive++;
	return 0;
}

/* Stops the idle worker used least recently (not of model): 1 when one
 * was stopped, so that room may come. */
static int stop_idle_worker(tacod_chat *c, const char *model)
{
	chat_worker *lru = NULL;

	for (chat_worker *w = c->workers; w; w = w->next)
		if (w->ready && !w->busy && !w->closing &&
		    strcmp(w->model, model) &&
		    (!lru || w->idle_since_ms < lru->idle_since_ms))
			lru = w;
	if (!lru)
		return 0;
	worker_close(lru);
	return 1;
}

static void dispatch(tacod_service *s, chat_worker *w, chat_req *q)
{
	char *line;

	q->w = w;
	q->started_ms = now_ms(s);
	w->busy = q;
	if (q->stream_mode) {
		q->stream = tacod_http_later_stream(q->later);
		q->later = NULL;
		if (!q->stream)
			q->cancelled = 1; /* the client left: run, unheard */
	}
	line = json_dumps(q->work, JSON_COMPACT);
	if (!line || tacod_worker_write(w->proc, line, strlen(line))) {
		w->busy = NULL;
		req_fail(q, 500, "server_error", NULL,
			 "the model's worker cannot take the request", 0);
	}
	free(line);
}

static void worker_event(tacod_worker *p, json_t *e, void *ctx)
{
	chat_worker *w = ctx;
	tacod_service *s = w->s;
	const char *ev = json_string_value(json_object_get(e, "event"));
	const char *id = json_string_value(json_object_get(e, "id"));
	chat_req *q;

	(void)p;
	pthread_mutex_lock(&s->lock);
	q = w->busy;
	if (!ev) {
		/* nothing */
	} else if (!strcmp(ev, "ready")) {
		w->ready = 1;
		w->idle_since_ms = now_ms(s);
	} else if (!q || !id || strcmp(id, q->id)) {
		/* a worker that cannot load says why before it exits */
		if (!strcmp(ev, "error") && !w->ready)
			snprintf(
			    w->failed, sizeof(w->failed), "%s",
			    json_string_value(json_object_get(e, "message"))
				?: "");
	} else if (!strcmp(ev, "delta")) {
		on_delta(q, e);
	} else if (!strcmp(ev, "done") || !strcmp(ev, "error")) {
		w->busy = NULL;
		w->idle_since_ms = now_ms(s);
		if (q->cancelled && !q->stream && !q->later)
			req_free(q); /* its client left before it began */
		else if (!strcmp(ev, "done"))
			on_done(q, e);
		else
			req_fail(
			    q,
			    (int)json_integer_value(
				json_object_get(e, "status")) == 499
				? 504
				: (int)json_integer_value(
				      json_object_get(e, "status")),
			    json_string_value(json_object_get(e, "code")),
			    json_string_value(json_object_get(e, "param")),
			    json_string_value(json_object_get(e, "message"))
				?: "failed",
			    0);
	}
	chat_turn_locked(s);
	pthread_mutex_unlock(&s->lock);
}

static void worker_exit(tacod_worker *p, int64_t status, int sig, void *ctx)
{
	chat_worker *w = ctx;
	tacod_service *s = w->s;
	tacod_chat *c;
	char msg[1024];

	pthread_mutex_lock(&s->lock);
	c = s->chat;
	snprintf(msg, sizeof(msg), "the worker of model %s %s%s%s (%s %lld)",
		 w->model, w->ready ? "stopped" : "could not load it",
		 w->failed[0] ? ": " : "", w->failed,
		 sig ? "signal" : "exit status",
		 (long long)(sig ? sig : status));
	if (w->busy)
		req_fail(w->busy, 500, "server_error", NULL, msg, 0);
	w->busy = NULL;
	/* a model that cannot load: the requests waiting for it are told */
	if (!w->ready && !w->closing) {
		chat_req **pp = &c->head;
		c->tail = NULL;
		while (*pp) {
			chat_req *q = *pp;
			if (!strcmp(q->model, w->model)) {
				*pp = q->next;
				c->n_queued--;
				req_fail(q, 500, "server_error", "model", msg,
					 0);
				continue;
			}
			c->tail = q;
			pp = &q->next;
		}
	}
	for (chat_worker **pp = &c->workers; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	c->n_workers--;
	c->n_alive--;
	if (w->own[0])
		taco_remove_flat_dir(w->own, NULL);
	tacod_worker_free(p);
	free(w);
	chat_turn_locked(s);
	pthread_mutex_unlock(&s->lock);
	tacod_service_wake(s);
}

/* ---- the queue -------------------------------------------------------- */

static void timer_cb(uv_timer_t *t)
{
	tacod_service *s = t->data;

	pthread_mutex_lock(&s->lock);
	chat_turn_locked(s);
	pthread_mutex_unlock(&s->lock);
}

/* Hands the waiting requests to workers, starts the workers they need,
 * answers those that waited too long, stops idle workers. Lock held, loop
 * thread. */
static void chat_turn_locked(tacod_service *s)
{
	tacod_chat *c = s->chat;
	const tacod_chat_config *cc = &s->cfg.chat;
	uint64_t now = now_ms(s);
	chat_req **pp;

	if (!c || c->closed)
		return;
	for (pp = &c->head; *pp;) {
		chat_req *q = *pp;
		chat_worker *w = worker_of(c, q->model);
		int take = 0, gone = 0;
		if (w && w->ready && !w->busy) {
			take = 1;
		} else if (!w && c->n_workers < cc->max_workers) {
			if (worker_start(s, q, &gone) == -EAGAIN)
				stop_idle_worker(c, q->model);
		} else if (!w) {
			stop_idle_worker(c, q->model);
		}
		/* waiting for room is bounded by wait_s; waiting for the
		 * model's worker (loading, or answering others) by the
		 * request's own time limit */
		uint64_t bound =
		    (uint64_t)(w ? cc->request_timeout_s : cc->wait_s) * 1000;
		if (!take && !gone && now - q->queued_ms < bound) {
			pp = &q->next;
			continue;
		}
		*pp = q->next;
		c->n_queued--;
		if (take)
			dispatch(s, w, q);
		else if (!gone && w)
			req_fail(q, 504, "timeout", NULL,
				 "The model's worker did not take the request "
				 "within chat.request_timeout_s",
				 0);
		else if (!gone)
			req_fail(q, 503, "model_busy", "model",
				 "No room to serve this model now (the "
				 "devices run jobs or other models); try "
				 "again later",
				 CHAT_RETRY_AFTER_S);
	}
	c->tail = NULL;
	for (chat_req *q = c->head; q; q = q->next)
		c->tail = q;
	for (chat_worker *w = c->workers; w; w = w->next) {
		if (w->ready && !w->busy && !w->closing &&
		    now - w->idle_since_ms >= (uint64_t)cc->idle_s * 1000)
			worker_close(w);
		if (w->busy && !w->busy->cancelled && !w->busy->timed_out &&
		    now - w->busy->started_ms >=
			(uint64_t)cc->request_timeout_s * 1000) {
			char line[128];
			int n = snprintf(line, sizeof(line),
					 "{\"cancel\": \"%s\"}", w->busy->id);
			w->busy->timed_out = 1; /* once: it answers 499 */
			tacod_worker_write(w->proc, line, (size_t)n);
		}
	}
	if (c->head || c->workers) {
		if (!uv_is_active((uv_handle_t *)&c->timer))
			uv_timer_start(&c->timer, timer_cb, CHAT_TICK_MS,
				       CHAT_TICK_MS);
	} else {
		uv_timer_stop(&c->timer);
	}
}

void tacod_chat_turn(tacod_service *s)
{
	chat_turn_locked(s);
}

static void remove_left_behind(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[TACOD_PATH_MAX + 320];

	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		taco_remove_flat_dir(path, NULL);
	}
	if (d)
		closedir(d);
}

int tacod_chat_start(tacod_service *s, taco_err *err)
{
	tacod_chat *c = calloc(1, sizeof(*c));
	char dir[TACOD_PATH_MAX + 16];
	int r;

	if (!c)
		return taco_err_set(err, -ENOMEM, "out of memory");
	/* assembled models of workers a previous tacod left behind */
	snprintf(dir, sizeof(dir), "%s/chat", s->cfg.state_dir);
	remove_left_behind(dir);
	if ((r = taco_mkdir_p(dir, err))) {
		free(c);
		return r;
	}
	uv_timer_init(s->loop, &c->timer);
	c->timer.data = s;
	s->chat = c;
	return 0;
}

/* Shutdown (lock held): the waiting requests get 503, the workers end. */
void tacod_chat_shutdown(tacod_service *s)
{
	tacod_chat *c = s->chat;

	if (!c)
		return;
	while (c->head) {
		chat_req *q = c->head;
		c->head = q->next;
		req_fail(q, 503, "server_shutting_down", NULL,
			 "tacod is stopping", 0);
	}
	c->tail = NULL;
	c->n_queued = 0;
	for (chat_worker *w = c->workers; w; w = w->next) {
		worker_close(w);
		tacod_worker_kill(w->proc);
	}
}

/* Whether every worker has exited (the drain may end), and then closes
 * the timer (on_close frees the state). */
static void chat_closed(uv_handle_t *h)
{
	free(h->data);
}

int tacod_chat_close(tacod_service *s)
{
	tacod_chat *c = s->chat;

	if (!c)
		return 1;
	if (c->n_alive > 0)
		return 0;
	if (!c->closed) {
		c->closed = 1;
		c->timer.data = c;
		uv_close((uv_handle_t *)&c->timer, chat_closed);
		s->chat = NULL;
	}
	return 1;
}

/* ---- the route -------------------------------------------------------- */

/* What taco-train --serve reads a tokenizer from (taco_tok_load). */
static int has_tokenizer(const char *dir)
{
	char p[TACOD_PATH_MAX + 400];
	struct stat st;

	snprintf(p, sizeof(p), "%s/tokenizer.json", dir);
	if (!stat(p, &st))
		return 1;
	snprintf(p, sizeof(p), "%s/vocab.json", dir);
	return !stat(p, &st);
}

static int user_requests(tacod_chat *c, const char *user)
{
	int n = 0;

	for (chat_req *q = c->head; q; q = q->next)
		n += !strcmp(q->user, user);
	for (chat_worker *w = c->workers; w; w = w->next)
		n += w->busy && !strcmp(w->busy->user, user);
	return n;
}

int tacod_route_chat_completions(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	tacod_chat_request cr;
	tacod_request_error e;
	taco_err err = {{0}};
	json_t *body;
	chat_req *q;
	char dir[TACOD_PATH_MAX + 320], model[256];
	int rc;

	memset(&e, 0, sizeof(e));
	if (s->cfg.scheduler != TACOD_SCHED_LOCAL)
		return tacod_http_error(r, 501, "invalid_request_error",
					"not_supported", NULL,
					"Chat completions run on tacod's own "
					"devices: not with the Slurm "
					"scheduler.");
	if (s->cfg.chat.max_workers < 1)
		return tacod_http_error(r, 501, "invalid_request_error",
					"not_supported", NULL,
					"Chat completions are off on this "
					"server (chat.max_workers 0).");
	if (!(body = tacod_http_body_json(r)))
		return 0;
	rc = tacod_chat_request_parse(body, &cr, &e);
	json_decref(body);
	if (rc)
		return tacod_http_error(
		    r, rc == -ENOMEM ? 500 : 400,
		    rc == -ENOMEM ? "server_error" : "invalid_request_error",
		    e.code[0] ? e.code : NULL, e.param[0] ? e.param : NULL,
		    "%s", e.message);
	if (cr.n > s->cfg.chat.rows) {
		tacod_chat_request_free(&cr);
		return tacod_http_error(
		    r, 400, "invalid_request_error", "invalid_value", "n",
		    "n %d: this server answers at most %d completions a "
		    "request (chat.rows)",
		    cr.n, s->cfg.chat.rows);
	}
	q = calloc(1, sizeof(*q));
	if (!q) {
		tacod_chat_request_free(&cr);
		return tacod_http_error(r, 500, "server_error", NULL, NULL,
					"out of memory");
	}
	tacod_new_id("chatcmpl-", q->id);
	snprintf(q->user, sizeof(q->user), "%s", tacod_route_user(r));
	snprintf(q->model, sizeof(q->model), "%s", cr.model);
	q->stream_mode = cr.stream;
	q->include_usage = cr.include_usage;
	q->n = cr.n;
	q->work = cr.worker;
	cr.worker = NULL;
	tacod_chat_request_free(&cr);
	json_object_set_new(q->work, "id", json_string(q->id));
	q->created = tacod_now();
	memcpy(model, q->model, sizeof(model));

	pthread_mutex_lock(&s->lock);
	rc = s->chat && !s->shutting_down
		 ? tacod_models_serve_dir(s, tacod_route_scope(r), q->model,
					  NULL, dir, sizeof(dir), &err)
		 : -ESHUTDOWN;
	if (rc == 0 && !has_tokenizer(dir))
		rc = -ENOTSUP;
	if (rc == 0 && user_requests(s->chat, q->user) >=
			   s->cfg.chat.max_requests_per_user)
		rc = -EUSERS;
	else if (rc == 0 && s->chat->n_queued >= CHAT_QUEUE_MAX)
		rc = -EBUSY;
	if (rc == 0) {
		q->later = tacod_http_later_begin(r);
		if (!q->later)
			rc = -ENOMEM;
	}
	if (rc == 0) {
		q->queued_ms = now_ms(s);
		if (s->chat->tail)
			s->chat->tail->next = q;
		else
			s->chat->head = q;
		s->chat->tail = q;
		s->chat->n_queued++;
	}
	pthread_mutex_unlock(&s->lock);
	if (rc == 0) {
		tacod_service_wake(s);
		return 0;
	}
	req_free(q);
	switch (rc) {
	case -ENOENT:
		return tacod_http_error(r, 404, "invalid_request_error",
					"model_not_found", "model",
					"The model '%s' does not exist", model);
	case -ENOTSUP:
		return tacod_http_error(r, 400, "invalid_request_error",
					"model_not_supported", "model",
					"The model '%s' has no tokenizer: it "
					"cannot answer chats",
					model);
	case -EUSERS:
		return tacod_http_error(r, 429, "rate_limit_error",
					"too_many_requests", NULL,
					"At most %d chat requests of one user "
					"at once (chat.max_requests_per_user)",
					s->cfg.chat.max_requests_per_user);
	case -EBUSY:
		tacod_http_add_header(r, "Retry-After", "10");
		return tacod_http_error(r, 429, "rate_limit_error",
					"queue_full", NULL,
					"%d chat requests wait already; try "
					"again later",
					CHAT_QUEUE_MAX);
	case -ESHUTDOWN:
		return tacod_http_error(r, 503, "server_error",
					"server_shutting_down", NULL,
					"tacod is stopping");
	default:
		return tacod_route_store_error(r, rc, &err, "model");
	}
}
