/* bench_tokenizer: encodes every line of a JSON-lines file (one JSON
 * string a line) with the engine's tokenizer, single thread, and prints
 * one JSON line: {"lines", "bytes", "tokens", "seconds"} with the best
 * time over --repeat passes. With --dump it prints the ids of each line
 * instead (space separated, one line each). Used by
 * bench/tokenizer_bench.py, which runs Hugging Face tokenizers beside it.
 *
 *   bench_tokenizer TOKENIZER_DIR_OR_JSON LINES.jsonl [--repeat N]
 *                   [--special] [--dump] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "tokenizer/tokenizer.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	taco_err err = {{0}};
	taco_tok *tok;
	taco_tok_ids ids = {0};
	FILE *f;
	char *line = NULL;
	size_t cap = 0, nl = 0, bytes = 0, tokens = 0;
	char **text = NULL;
	size_t *len = NULL;
	int repeat = 5, special = 0, dump = 0;
	double best = 1e30;
	ssize_t got;

	if (argc < 3) {
		fprintf(stderr,
			"usage: %s TOKENIZER LINES.jsonl [--repeat N] "
			"[--special] [--dump]\n",
			argv[0]);
		return 2;
	}
	for (int i = 3; i < argc; i++) {
		if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
			repeat = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--special"))
			special = 1;
		else if (!strcmp(argv[i], "--dump"))
			dump = 1;
	}
	if (taco_tok_load(argv[1], &tok, &err)) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	f = fopen(argv[2], "r");
	if (!f) {
		perror(argv[2]);
		return 1;
	}
	while ((got = getline(&line, &cap, f)) > 0) {
		json_error_t je;
		json_t *s =
		    json_loads(line, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
		if (!json_is_string(s)) {
			fprintf(stderr, "%s:%zu: not a JSON string\n", argv[2],
				nl + 1);
			return 1;
		}
		text = realloc(text, sizeof(*text) * (nl + 1));
		len = realloc(len, sizeof(*len) * (nl + 1));
		len[nl] = json_string_length(s);
		text[nl] = malloc(len[nl] + 1);
		memcpy(text[nl], json_string_value(s), len[nl] + 1);
		bytes += len[nl];
		nl++;
		json_decref(s);
	}
	fclose(f);
	free(line);
	if (dump) {
		for (size_t i = 0; i < nl; i++) {
			if (taco_tok_encode(tok, text[i], len[i], special, &ids,
					    &err)) {
				fprintf(stderr, "line %zu: %s\n", i + 1,
					err.msg);
				return 1;
			}
			for (size_t k = 0; k < ids.n; k++)
				printf(k ? " %d" : "%d", ids.ids[k]);
			printf("\n");
		}
		repeat = 0;
	}
	for (int r = 0; r < repeat; r++) {
		double t0 = now();
		tokens = 0;
		for (size_t i = 0; i < nl; i++) {
			if (taco_tok_encode(tok, text[i], len[i], special, &ids,
					    &err)) {
				fprintf(stderr, "line %zu: %s\n", i + 1,
					err.msg);
				return 1;
			}
			tokens += ids.n;
		}
		t0 = now() - t0;
		if (t0 < best)
			best = t0;
	}
	if (!dump)
		printf("{\"lines\": %zu, \"bytes\": %zu, \"tokens\": %zu, "
		       "\"seconds\": %.6f}\n",
		       nl, bytes, tokens, best);
	for (size_t i = 0; i < nl; i++)
		free(text[i]);
	free(text);
	free(len);
	taco_tok_ids_free(&ids);
	taco_tok_free(tok);
	return 0;
}
