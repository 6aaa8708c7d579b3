/* worker.h: one running job: a taco-train child process started with
 * uv_spawn, its JSON events read line by line from a pipe (fd 3 in the
 * child, docs/events.md), its stderr kept for error messages. Everything
 * runs on the caller's libuv loop thread. */
#ifndef TACOD_WORKER_H
#define TACOD_WORKER_H

#include <jansson.h>
#include <stdint.h>
#include <uv.h>

#include "util/taco_err.h"

#define TACOD_EVENT_LINE_MAX (1u << 20) /* a longer line kills the worker */
#define TACOD_STDERR_TAIL 4096

typedef struct tacod_worker tacod_worker;

typedef struct tacod_worker_cb {
	/* One event (borrowed: valid during the call). */
	void (*on_event)(tacod_worker *w, json_t *event, void *ctx);
	/* The child exited (after its last event was delivered): exit status
	 * (taco-train's: 0 finished, 1 failed, 2 bad job, 3 stopped) or the
	 * signal that ended it. The worker may be freed in this callback. */
	void (*on_exit)(tacod_worker *w, int64_t status, int signal, void *ctx);
} tacod_worker_cb;

/* Starts `taco_train --no-progress --die-with-parent --events-fd 3
 * [--backend backend] [--resume] job_path` (backend NULL: taco-train's
 * default, the CPU). */
int tacod_worker_start(uv_loop_t *loop, const char *taco_train,
		       const char *job_path, int resume, const char *backend,
		       const tacod_worker_cb *cb, void *ctx, tacod_worker **out,
		       taco_err *err);

/* The same with CUDA_VISIBLE_DEVICES=devices in its environment (the
 * GPUs it is pinned to, "2" or "0,1"; NULL: tacod's environment as it
 * is). */
int tacod_worker_start_on(uv_loop_t *loop, const char *taco_train,
			  const char *job_path, int resume, const char *backend,
			  const char *devices, const tacod_worker_cb *cb,
			  void *ctx, tacod_worker **out, taco_err *err);

/* A model's chat worker: `taco_train --die-with-parent [--backend backend]
 * --rows rows [--context context] --serve model_dir` (engine/serve.h),
 * its stdout's lines the events (on_event), its stdin written with
 * tacod_worker_write (a line, the newline added; -EPIPE once closed or
 * exited); tacod_worker_close_input ends its input, and so the worker. */
int tacod_worker_start_serve(uv_loop_t *loop, const char *taco_train,
			     const char *model_dir, const char *backend,
			     const char *devices, int rows, int context,
			     const tacod_worker_cb *cb, void *ctx,
			     tacod_worker **out, taco_err *err);
int tacod_worker_write(tacod_worker *w, const char *line, size_t len);
void tacod_worker_close_input(tacod_worker *w);

/* Asks the job to stop at a step boundary (SIGTERM: it checkpoints and
 * exits 3); SIGKILL follows after timeout_ms if it has not exited. */
void tacod_worker_stop(tacod_worker *w, uint64_t timeout_ms);

/* SIGKILL now. */
void tacod_worker_kill(tacod_worker *w);

int tacod_worker_pid(const tacod_worker *w);

/* The last bytes the child wrote to stderr (NUL-terminated), starting at
 * a character boundary and marked "[cut] " when older output was dropped.
 * Valid until the next call or tacod_worker_free. */
const char *tacod_worker_stderr(tacod_worker *w);

/* Frees a worker whose on_exit has been called (closing its handles
 * asynchronously). */
void tacod_worker_free(tacod_worker *w);

#endif
