/* chat.c: tacoctl chat MODEL [PROMPT]: a model's answer, streamed as it
 * is written (POST /v1/chat/completions with stream). Without a prompt,
 * a conversation: each line read is the next user message, the answers
 * kept in the chat, until end of input or an empty line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"

typedef struct chat_opts {
	const ctl_cmd *cmd;
	const char *system;
	long long max_tokens;
	double temperature;
	int has_temperature;
	long long seed;
	int has_seed;
} chat_opts;

enum {
	OPT_SYSTEM = CTL_OPT_OWN,
	OPT_MAX_TOKENS,
	OPT_TEMPERATURE,
	OPT_SEED,
};

static int chat_opt(void *ctx, int id, const char *arg)
{
	chat_opts *o = ctx;

	switch (id) {
	case OPT_SYSTEM:
		o->system = arg;
		return CTL_GO_ON;
	case OPT_MAX_TOKENS:
		if (ctl_parse_int(arg, 1, 4096, &o->max_tokens))
			return ctl_usage(o->cmd, "--max-tokens must be 1 to "
						 "4096");
		return CTL_GO_ON;
	case OPT_TEMPERATURE:
		if (ctl_parse_num(arg, &o->temperature) || o->temperature < 0 ||
		    o->temperature > 2)
			return ctl_usage(o->cmd,
					 "--temperature must be 0 to 2");
		o->has_temperature = 1;
		return CTL_GO_ON;
	default:
		if (ctl_parse_int(arg, -(1ll << 62), 1ll << 62, &o->seed))
			return ctl_usage(o->cmd, "--seed must be an integer");
		o->has_seed = 1;
		return CTL_GO_ON;
	}
}

/* The answer as it streams: printed, and kept for the conversation. */
typedef struct answer {
	char *text;
	size_t len;
	int json;
} answer;

static int on_chunk(void *ctx, const ctl_sse_event *ev, ctl_err *err)
{
	answer *a = ctx;
	json_t *o, *c, *e;
	const char *t;
	size_t n;

	if (!ev) {
		fflush(stdout);
		return 0;
	}
	if (!strcmp(ev->data, "[DONE]"))
		return 1;
	if (a->json) {
		printf("%s\n", ev->data);
		return 0;
	}
	o = json_loads(ev->data, 0, NULL);
	if ((e = json_object_get(o, "error"))) {
		int rc = ctl_err_set(err, -EIO, "%s", ctl_str(e, "message"));
		json_decref(o);
		return rc;
	}
	c = json_object_get(json_array_get(json_object_get(o, "choices"), 0),
			    "delta");
	t = json_string_value(json_object_get(c, "content"));
	n = t ? strlen(t) : 0;
	if (n) {
		char *g = realloc(a->text, a->len + n + 1);
		if (g) {
			memcpy(g + a->len, t, n + 1);
			a->text = g;
			a->len += n;
		}
		fwrite(t, 1, n, stdout);
	}
	json_decref(o);
	return 0;
}

static int ask(ctl *c, const chat_opts *o, const char *model, json_t *msgs,
	       answer *a)
{
	json_t *body = json_pack("{ss sO sb}", "model", model, "messages", msgs,
				 "stream", 1);
	ctl_err err = {0};
	int rc;

	if (o->max_tokens)
		json_object_set_new(body, "max_tokens",
				    json_integer(o->max_tokens));
	if (o->has_temperature)
		json_object_set_new(body, "temperature",
				    json_real(o->temperature));
	if (o->has_seed)
		json_object_set_new(body, "seed", json_integer(o->seed));
	rc = ctl_http_sse_post(&c->http, "/v1/chat/completions", body, on_chunk,
			       a, &err);
	json_decref(body);
	/* the answer's line ends, also an empty one; an error before any
	 * text prints nothing on stdout */
	if (!a->json && (!rc || a->len))
		putchar('\n');
	fflush(stdout);
	if (rc)
		return ctl_fail("%s", err.msg);
	return CTL_OK;
}

int ctl_cmd_chat(ctl *c, const ctl_cmd *cmd, int argc, char **argv)
{
	static const struct option own[] = {
	    {"system", required_argument, NULL, OPT_SYSTEM},
	    {"max-tokens", required_argument, NULL, OPT_MAX_TOKENS},
	    {"temperature", required_argument, NULL, OPT_TEMPERATURE},
	    {"seed", required_argument, NULL, OPT_SEED},
	    {0},
	};
	chat_opts o = {.cmd = cmd};
	json_t *msgs = json_array();
	char *line = NULL;
	size_t cap = 0;
	int first, rc;

	rc = ctl_parse(c, cmd, argc, argv, own, "", chat_opt, &o, &first);
	if (rc != CTL_GO_ON || argc - first < 1 || argc - first > 2) {
		json_decref(msgs);
		return rc != CTL_GO_ON
			   ? rc
			   : ctl_usage(cmd, "expected a model and at most "
					    "one prompt");
	}
	if ((rc = ctl_connect(c))) {
		json_decref(msgs);
		return rc;
	}
	if (o.system)
		json_array_append_new(msgs,
				      json_pack("{ss ss}", "role", "system",
						"content", o.system));
	for (;;) {
		answer a = {.json = c->json};
		ssize_t n;
		if (argc - first == 2) {
			json_array_append_new(msgs, json_pack("{ss ss}", "role",
							      "user", "content",
							      argv[first + 1]));
		} else {
			if (isatty(STDIN_FILENO))
				fputs("> ", stderr);
			n = getline(&line, &cap, stdin);
			if (n <= 0 || line[0] == '\n')
				break;
			if (line[n - 1] == '\n')
				line[n - 1] = 0;
			json_array_append_new(msgs, json_pack("{ss ss}", "role",
							      "user", "content",
							      line));
		}
		rc = ask(c, &o, argv[first], msgs, &a);
		json_array_append_new(msgs, json_pack("{ss ss}", "role",
						      "assistant", "content",
						      a.text ? a.text : ""));
		free(a.text);
		if (rc || argc - first == 2)
			break;
	}
	free(line);
	json_decref(msgs);
	return rc;
}
