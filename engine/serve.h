/* serve.h: taco-train --serve: a model loaded once, answering chat
 * requests read as JSON lines, one at a time (tacod's chat completions
 * run it as their worker; docs/generation.md, "The worker").
 *
 * In (one object a line): {"id": S, "messages": [...], "tools": [...]?,
 * "max_tokens": N, "temperature": X, "top_p": X, "top_k": N, "seed": N,
 * "stop": [S, ...], "n": N, "stream": B}; while a request runs, a line
 * {"cancel": S} ends it (-> error 499 "cancelled").
 * Out: {"event": "ready", "context", "rows", "device_bytes"} once loaded;
 * per request with stream: {"id", "event": "delta", "index", "text"} as
 * the text grows; then {"id", "event": "done", "choices": [{"index",
 * "text", "finish_reason"}], "usage": {"prompt_tokens",
 * "completion_tokens", "total_tokens"}} or {"id", "event": "error",
 * "status", "code", "param", "message"}. End of input: exit 0. */
#ifndef TACO_SERVE_H
#define TACO_SERVE_H

#include "tk_ops.h"
#include "util/taco_err.h"

#define TACO_SERVE_LINE_MAX (8u << 20) /* bytes of one request line */
#define TACO_SERVE_MAX_TOKENS 4096     /* an answer's, max_tokens not given */

typedef struct taco_serve_opts {
	const char *model_dir;
	const tk_ops *ops;
	int act_dtype; /* TK_F32 or TK_BF16 */
	int rows;      /* completions of one request at most (its n) */
	int context;   /* tokens of a prompt and its answer; 0: the model's
			  max_position_embeddings, at most 8192 */
	int in_fd, out_fd;
} taco_serve_opts;

/* Serves until in_fd ends: 0, or a negative errno when the model cannot
 * be loaded (err says why; an error line was written). */
int taco_serve(const taco_serve_opts *o, taco_err *err);

#endif
