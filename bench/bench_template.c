/* bench_template: renders a chat template many times and prints one JSON
 * line: {"renders", "bytes", "us_per_render", "compile_us"} with the best
 * time per render over --repeat passes. The default template is
 * tests/template/tools_think.jinja (Qwen3-style: namespaces, a reverse
 * loop, tool calls, generation blocks) with a five-message chat: system,
 * user, an assistant tool call, its result, the answer.
 *
 *   bench_template [TEMPLATE.jinja [CONTEXT.json]] [--iters N]
 *                  [--repeat N] */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "template/template.h"

#ifndef TACO_BENCH_TEMPLATE
#define TACO_BENCH_TEMPLATE "tests/template/tools_think.jinja"
#endif

static const char default_ctx[] =
    "{\"messages\": ["
    "{\"role\": \"system\", \"content\": \"You are a helpful assistant.\"},"
    "{\"role\": \"user\", \"content\": \"What is the weather in Paris, in "
    "celsius?\"},"
    "{\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": "
    "\"The user wants the weather; call the tool.\", \"tool_calls\": [{\"id\": "
    "\"call_0001\", \"type\": \"function\", \"function\": {\"name\": "
    "\"get_weather\", \"arguments\": {\"location\": \"Paris\", \"unit\": "
    "\"celsius\"}}}]},"
    "{\"role\": \"tool\", \"tool_call_id\": \"call_0001\", \"content\": "
    "\"{\\\"temperature\\\": 21, \\\"sky\\\": \\\"clear\\\"}\"},"
    "{\"role\": \"assistant\", \"content\": \"It is 21 °C and clear in "
    "Paris.\"}],"
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
    "\"get_weather\", \"description\": \"The current weather of a city\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"location\": "
    "{\"type\": \"string\", \"description\": \"The city\"}, \"unit\": "
    "{\"type\": \"string\", \"enum\": [\"celsius\", \"fahrenheit\"]}}, "
    "\"required\": [\"location\"]}}}],"
    "\"add_generation_prompt\": false, \"bos_token\": \"\", \"eos_token\": "
    "\"<|end|>\"}";

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) || !(buf = malloc((size_t)n + 1))) {
		fclose(f);
		return NULL;
	}
	*len = fread(buf, 1, (size_t)n, f);
	buf[*len] = 0;
	fclose(f);
	return buf;
}

int main(int argc, char **argv)
{
	const char *tpath = TACO_BENCH_TEMPLATE, *cpath = NULL;
	int iters = 20000, repeat = 5, positional = 0, e;
	taco_tmpl_opts opts = {0};
	taco_tmpl_out out = {0};
	taco_err err = {{0}};
	taco_tmpl *t = NULL;
	json_error_t jerr;
	json_t *ctx;
	double best = 1e30, t0, compile_us;
	size_t len, bytes = 0;
	char *src;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
			repeat = atoi(argv[++i]);
		else if (positional++ == 0)
			tpath = argv[i];
		else
			cpath = argv[i];
	}
	if (iters < 1 || repeat < 1) {
		fprintf(stderr, "usage: bench_template [TEMPLATE [CONTEXT]] "
				"[--iters N] [--repeat N]\n");
		return 2;
	}
	src = read_file(tpath, &len);
	if (!src) {
		fprintf(stderr, "%s: %s\n", tpath, strerror(errno));
		return 1;
	}
	ctx = cpath ? json_load_file(cpath, 0, &jerr)
		    : json_loads(default_ctx, 0, &jerr);
	if (!ctx) {
		fprintf(stderr, "context: %s\n", jerr.text);
		free(src);
		return 1;
	}
	t0 = now();
	e = taco_tmpl_compile(src, len, &t, &err);
	compile_us = (now() - t0) * 1e6;
	free(src);
	if (e) {
		fprintf(stderr, "%s: %s\n", tpath, err.msg);
		json_decref(ctx);
		return 1;
	}
	for (int r = 0; r < repeat; r++) {
		t0 = now();
		for (int i = 0; i < iters; i++) {
			if ((e = taco_tmpl_render(t, ctx, &opts, &out, &err))) {
				fprintf(stderr, "render: %s\n", err.msg);
				goto done;
			}
			bytes = out.len;
			taco_tmpl_out_free(&out);
		}
		t0 = (now() - t0) / iters;
		if (t0 < best)
			best = t0;
	}
	printf("{\"renders\": %d, \"bytes\": %zu, \"us_per_render\": %.3f, "
	       "\"compile_us\": %.1f}\n",
	       iters * repeat, bytes, best * 1e6, compile_us);
done:
	taco_tmpl_free(t);
	json_decref(ctx);
	return e ? 1 : 0;
}
