/* chat_request.h: OpenAI's POST /v1/chat/completions request, validated
 * (every field, exact JSON types, the first problem returned as OpenAI's
 * error fields) and turned into the request a generation worker takes.
 *
 * What tacod samples with: max_tokens (or max_completion_tokens), temperature,
 * top_p, n, seed, stop, stream; tools are rendered by the chat template, and
 * tool_choice may only be "auto" or "none" (decoding is not constrained). The
 * parameters tacod does not implement are accepted with their neutral value
 * (frequency_penalty 0, logprobs false, response_format {"type": "text"},
 * ...) and refused with code "unsupported_parameter" otherwise. null is
 * absent for every optional field. */
#ifndef TACOD_CHAT_REQUEST_H
#define TACOD_CHAT_REQUEST_H

#include <jansson.h>
#include <stdint.h>

#include "job_request.h" /* tacod_request_error */

#define TACOD_CHAT_MAX_MESSAGES 1024
/* completions of one request */
#define TACOD_CHAT_MAX_N 8
/* max_tokens / max_completion_tokens at most */
#define TACOD_CHAT_MAX_TOKENS 4096
/* stop strings, and the bytes of one */
#define TACOD_CHAT_MAX_STOP 4
#define TACOD_CHAT_MAX_STOP_LEN 256
/* bytes of a request (messages' text included), as compact JSON */
#define TACOD_CHAT_MAX_BODY (4u << 20)
/* tools, and tool calls of one message */
#define TACOD_CHAT_MAX_TOOLS 128
/* content parts of one message */
#define TACOD_CHAT_MAX_PARTS 256
/* bytes of a message's name, of a tool call's id and function name, of a
 * tool message's tool_call_id */
#define TACOD_CHAT_MAX_NAME 256
/* a tool's name: 1 to 64 of [a-zA-Z0-9_-], as OpenAI takes it */
#define TACOD_CHAT_MAX_TOOL_NAME 64
/* bytes of user */
#define TACOD_CHAT_MAX_USER 256

typedef struct tacod_chat_request {
	char model[256];
	/* 0: not given (the worker's default: the room left in the context) */
	int max_tokens;
	double temperature; /* default 1 */
	double top_p;	    /* default 1 */
	int n;		    /* default 1 */
	int has_seed;
	int64_t seed;
	int stream;	   /* stream: true */
	int include_usage; /* stream_options.include_usage */
	json_t *worker; /* the request as the worker takes it (below); owned */
} tacod_chat_request;

/* Validates req (it is not changed) and fills *out. Returns 0 (the caller
 * frees *out with tacod_chat_request_free), -EINVAL with e filled (a bad
 * request: e->param the field's path, "messages[2].content[0].text"), or
 * -ENOMEM (e filled too). *out holds nothing to free unless 0 is returned.
 *
 * out->worker is a new object with exactly:
 *   "messages"          a deep copy of messages, null-valued keys left out
 *                       (null is absent), each tool call's "arguments"
 *                       parsed into an object when its string is the JSON
 *                       of an object (the chat templates want objects, as
 *                       transformers passes them), else kept as the string
 *   "tools"             the tools, null-valued keys of a tool and of its
 *                       function left out (when given and not empty)
 *   "max_tokens"        (when given, as either name)
 *   "temperature", "top_p", "n"
 *   "seed"              (when given)
 *   "stop"              an array of strings (when given)
 *   "stream"            true or false
 *   "reasoning_effort"  "minimal", "low", "medium" or "high" (when given)
 * The daemon adds "id" itself. */
int tacod_chat_request_parse(json_t *req, tacod_chat_request *out,
			     tacod_request_error *e);
void tacod_chat_request_free(tacod_chat_request *r);

#endif
