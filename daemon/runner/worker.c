#include "daemon/runner/worker.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/text.h"

struct tacod_worker {
	uv_loop_t *loop;
	uv_process_t proc;
	uv_pipe_t events, err;
	uv_pipe_t input; /* a --serve worker's stdin */
	int has_input, input_closed;
	uv_timer_t kill_timer;
	tacod_worker_cb cb;
	void *ctx;
	char *line; /* partial event line */
	size_t line_len, line_cap;
	char tail[TACOD_STDERR_TAIL];
	size_t tail_len;
	int tail_cut;			   /* older output was dropped */
	char shown[TACOD_STDERR_TAIL + 8]; /* the tail as tacod shows it */
	int open_handles;		   /* freed when the last one closes */
	int exited, events_eof, err_eof, freed, delivered;
	int64_t status;
	int signal;
};

static void maybe_exit(tacod_worker *w)
{
	/* deliver exit only after both pipes have drained */
	if (w->exited && w->events_eof && w->err_eof && !w->delivered) {
		w->delivered = 1;
		w->cb.on_exit(w, w->status, w->signal, w->ctx);
	}
}

static void on_close(uv_handle_t *h)
{
	tacod_worker *w = h->data;

	if (--w->open_handles == 0) {
		free(w->line);
		free(w);
	}
}

static void close_handle(tacod_worker *w, uv_handle_t *h)
{
	if (!uv_is_closing(h))
		uv_close(h, on_close);
	(void)w;
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)h;
	buf->base = malloc(suggested);
	buf->len = buf->base ? suggested : 0;
}

static void line_done(tacod_worker *w)
{
	json_error_t jerr;
	json_t *e = json_loadb(w->line, w->line_len, 0, &jerr);

	if (e && json_is_object(e) &&
	    json_is_string(json_object_get(e, "event")))
		w->cb.on_event(w, e, w->ctx);
	json_decref(e);
	w->line_len = 0;
}

static void on_events(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	tacod_worker *w = s->data;

	for (ssize_t i = 0; i < n; i++) {
		char c = buf->base[i];
		if (c == '\n') {
			line_done(w);
			continue;
		}
		if (w->line_len + 1 > TACOD_EVENT_LINE_MAX) {
			/* a worker that breaks the protocol is stopped */
			tacod_worker_kill(w);
			w->line_len = 0;
			break;
		}
		if (w->line_len + 1 > w->line_cap) {
			size_t cap = w->line_cap ? 2 * w->line_cap : 4096;
			char *g = realloc(w->line, cap);
			if (!g) {
				tacod_worker_kill(w);
				break;
			}
			w->line = g;
			w->line_cap = cap;
		}
		w->line[w->line_len++] = c;
	}
	free(buf->base);
	if (n < 0) {
		if (w->line_len)
			line_done(w);
		uv_read_stop(s);
		w->events_eof = 1;
		maybe_exit(w);
	}
}

static void on_stderr(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	tacod_worker *w = s->data;

	for (ssize_t i = 0; i < n; i++) {
		if (w->tail_len + 1 >= sizeof(w->tail)) {
			/* keep the newest half */
			size_t half = sizeof(w->tail) / 2;
			memmove(w->tail, w->tail + w->tail_len - half, half);
			w->tail_len = half;
			w->tail_cut = 1;
		}
		w->tail[w->tail_len++] = buf->base[i];
	}
	w->tail[w->tail_len] = 0;
	free(buf->base);
	if (n < 0) {
		uv_read_stop(s);
		w->err_eof = 1;
		maybe_exit(w);
	}
}

static void on_proc_exit(uv_process_t *p, int64_t status, int sig)
{
	tacod_worker *w = p->data;

	w->exited = 1;
	w->status = status;
	w->signal = sig;
	uv_timer_stop(&w->kill_timer);
	maybe_exit(w);
}

/* environ with CUDA_VISIBLE_DEVICES=devices in place of any it has (the
 * array malloc'd, its strings environ's but the one, which is *own). */
static char **env_with_devices(const char *devices, char **own)
{
	size_t n = 0, k = 0;
	char **env;

	while (environ[n])
		n++;
	env = calloc(n + 2, sizeof(*env));
	if (!env || asprintf(own, "CUDA_VISIBLE_DEVICES=%s", devices) < 0) {
		free(env);
		*own = NULL;
		return NULL;
	}
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "CUDA_VISIBLE_DEVICES=", 21))
			env[k++] = environ[i];
	env[k] = *own;
	return env;
}

int tacod_worker_start(uv_loop_t *loop, const char *taco_train,
		       const char *job_path, int resume, const char *backend,
		       const tacod_worker_cb *cb, void *ctx, tacod_worker **out,
		       taco_err *err)
{
	return tacod_worker_start_on(loop, taco_train, job_path, resume,
				     backend, NULL, cb, ctx, out, err);
}

/* Spawns args with its stderr kept and its event lines read from a pipe:
 * fd 3 (a job's --events-fd), or with serve its stdout, its stdin then a
 * pipe of ours (tacod_worker_write). */
static int spawn(uv_loop_t *loop, char **args, int serve, const char *devices,
		 const tacod_worker_cb *cb, void *ctx, tacod_worker **out,
		 taco_err *err)
{
	char **env = NULL, *own = NULL;
	tacod_worker *w = calloc(1, sizeof(*w));
	uv_process_options_t o;
	uv_stdio_container_t stdio[4];
	int r;

	if (!w || (devices && !(env = env_with_devices(devices, &own)))) {
		free(w);
		return taco_err_set(err, -ENOMEM, "out of memory");
	}
	w->loop = loop;
	w->cb = *cb;
	w->ctx = ctx;
	w->has_input = serve;
	uv_pipe_init(loop, &w->events, 0);
	uv_pipe_init(loop, &w->err, 0);
	uv_pipe_init(loop, &w->input, 0);
	uv_timer_init(loop, &w->kill_timer);
	w->events.data = w->err.data = w->kill_timer.data = w->proc.data = w;
	w->input.data = w;
	memset(&o, 0, sizeof(o));
	o.file = args[0];
	o.args = args;
	o.exit_cb = on_proc_exit;
	stdio[0].flags = serve ? UV_CREATE_PIPE | UV_READABLE_PIPE : UV_IGNORE;
	stdio[0].data.stream = (uv_stream_t *)&w->input;
	stdio[1].flags = serve ? UV_CREATE_PIPE | UV_WRITABLE_PIPE : UV_IGNORE;
	stdio[1].data.stream = (uv_stream_t *)&w->events;
	stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	stdio[2].data.stream = (uv_stream_t *)&w->err;
	stdio[3].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	stdio[3].data.stream = (uv_stream_t *)&w->events;
	o.stdio = stdio;
	o.stdio_count = serve ? 3 : 4;
	o.env = env;
	r = uv_spawn(loop, &w->proc, &o);
	free(env);
	free(own);
	w->open_handles = 5;
	if (r) {
		/* libuv wants even a failed process handle closed */
		w->freed = 1;
		uv_close((uv_handle_t *)&w->proc, on_close);
		uv_close((uv_handle_t *)&w->events, on_close);
		uv_close((uv_handle_t *)&w->err, on_close);
		uv_close((uv_handle_t *)&w->input, on_close);
		uv_close((uv_handle_t *)&w->kill_timer, on_close);
		return taco_err_set(err, r, "cannot start %s: %s", args[0],
				    uv_strerror(r));
	}
	uv_read_start((uv_stream_t *)&w->events, alloc_cb, on_events);
	uv_read_start((uv_stream_t *)&w->err, alloc_cb, on_stderr);
	*out = w;
	return 0;
}

int tacod_worker_start_on(uv_loop_t *loop, const char *taco_train,
			  const char *job_path, int resume, const char *backend,
			  const char *devices, const tacod_worker_cb *cb,
			  void *ctx, tacod_worker **out, taco_err *err)
{
	char *args[12];
	int n = 0;

	args[n++] = (char *)taco_train;
	args[n++] = "--no-progress";
	args[n++] = "--die-with-parent";
	args[n++] = "--events-fd";
	args[n++] = "3";
	if (backend) {
		args[n++] = "--backend";
		args[n++] = (char *)backend;
	}
	if (resume)
		args[n++] = "--resume";
	args[n++] = (char *)job_path;
	args[n] = NULL;
	return spawn(loop, args, 0, devices, cb, ctx, out, err);
}

int tacod_worker_start_serve(uv_loop_t *loop, const char *taco_train,
			     const char *model_dir, const char *backend,
			     const char *devices, int rows, int context,
			     const tacod_worker_cb *cb, void *ctx,
			     tacod_worker **out, taco_err *err)
{
	char rs[16], cs[16], *args[14];
	int n = 0;

	snprintf(rs, sizeof(rs), "%d", rows);
	snprintf(cs, sizeof(cs), "%d", context);
	args[n++] = (char *)taco_train;
	args[n++] = "--die-with-parent";
	if (backend) {
		args[n++] = "--backend";
		args[n++] = (char *)backend;
	}
	args[n++] = "--rows";
	args[n++] = rs;
	if (context > 0) {
		args[n++] = "--context";
		args[n++] = cs;
	}
	args[n++] = "--serve";
	args[n++] = (char *)model_dir;
	args[n] = NULL;
	return spawn(loop, args, 1, devices, cb, ctx, out, err);
}

static void on_written(uv_write_t *req, int status)
{
	(void)status; /* a worker gone: its exit tells */
	free(req->data);
	free(req);
}

int tacod_worker_write(tacod_worker *w, const char *line, size_t len)
{
	uv_write_t *req;
	uv_buf_t b;
	char *copy;

	if (!w->has_input || w->input_closed || w->exited)
		return -EPIPE;
	req = malloc(sizeof(*req));
	copy = malloc(len + 1);
	if (!req || !copy) {
		free(req);
		free(copy);
		return -ENOMEM;
	}
	memcpy(copy, line, len);
	copy[len] = '\n';
	req->data = copy;
	b = uv_buf_init(copy, (unsigned)len + 1);
	if (uv_write(req, (uv_stream_t *)&w->input, &b, 1, on_written)) {
		free(copy);
		free(req);
		return -EPIPE;
	}
	return 0;
}

void tacod_worker_close_input(tacod_worker *w)
{
	if (w->has_input && !w->input_closed) {
		w->input_closed = 1;
		close_handle(w, (uv_handle_t *)&w->input);
	}
}

static void on_kill_timer(uv_timer_t *t)
{
	tacod_worker_kill(t->data);
}

void tacod_worker_stop(tacod_worker *w, uint64_t timeout_ms)
{
	if (w->exited)
		return;
	uv_process_kill(&w->proc, SIGTERM);
	uv_timer_start(&w->kill_timer, on_kill_timer, timeout_ms, 0);
}

void tacod_worker_kill(tacod_worker *w)
{
	if (!w->exited)
		uv_process_kill(&w->proc, SIGKILL);
}

int tacod_worker_pid(const tacod_worker *w)
{
	return w->proc.pid;
}

const char *tacod_worker_stderr(tacod_worker *w)
{
	/* the kept half may start inside a character: start after it */
	taco_text_tail(w->shown, sizeof(w->shown), w->tail, w->tail_len,
		       w->tail_cut);
	return w->shown;
}

void tacod_worker_free(tacod_worker *w)
{
	if (w->freed)
		return;
	w->freed = 1;
	close_handle(w, (uv_handle_t *)&w->events);
	close_handle(w, (uv_handle_t *)&w->err);
	close_handle(w, (uv_handle_t *)&w->input);
	close_handle(w, (uv_handle_t *)&w->kill_timer);
	close_handle(w, (uv_handle_t *)&w->proc);
}
