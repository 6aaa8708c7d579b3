/* tmpl_render.c: renders a chat template with a context, for the
 * differential test against jinja2 (tests/template_diff.py) and by hand.
 *
 *   tmpl_render TEMPLATE.jinja CONTEXT.json [--now EPOCH] [--json]
 *   tmpl_render TEMPLATE.jinja --batch CONTEXTS.jsonl [--now EPOCH]
 *
 * One context: the text on stdout, the {% generation %} spans on stderr
 * ("generation START END", byte offsets), or with --json one JSON object
 * {"text": ..., "gen": [[start, end], ...]} on stdout; an error is
 * "error: MESSAGE" on stderr and exit status 1. --batch renders each line
 * of CONTEXTS.jsonl and writes one such JSON object a line, an error as
 * {"error": MESSAGE}. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/template.h"
#include "util/taco_err.h"

static char *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t cap = 0, n = 0, got;

	if (!f)
		return NULL;
	for (;;) {
		if (n + 4096 + 1 > cap) {
			char *nb;

			cap = cap ? cap * 2 : 65536;
			nb = realloc(buf, cap);
			if (!nb) {
				free(buf);
				fclose(f);
				return NULL;
			}
			buf = nb;
		}
		got = fread(buf + n, 1, cap - n - 1, f);
		n += got;
		if (!got)
			break;
	}
	fclose(f);
	buf[n] = 0;
	*len = n;
	return buf;
}

static json_t *result_json(int e, const taco_tmpl_out *o, const taco_err *err)
{
	json_t *res = json_object(), *gen;

	if (e) {
		json_object_set_new(res, "error", json_string(err->msg));
		return res;
	}
	json_object_set_new(res, "text", json_stringn(o->text, o->len));
	gen = json_array();
	for (int i = 0; i < o->n_gen; i++)
		json_array_append_new(
		    gen, json_pack("[I, I]", (json_int_t)o->gen[2 * i],
				   (json_int_t)o->gen[2 * i + 1]));
	json_object_set_new(res, "gen", gen);
	return res;
}

int main(int argc, char **argv)
{
	const char *tpath = NULL, *cpath = NULL, *batch = NULL;
	taco_tmpl_opts opts = {0};
	taco_tmpl *t = NULL;
	taco_tmpl_out out = {0};
	taco_err err = {{0}};
	json_error_t jerr;
	int as_json = 0, rc = 1, e;
	char *src;
	size_t len;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--now") && i + 1 < argc)
			opts.now = strtoll(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--json"))
			as_json = 1;
		else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
			batch = argv[++i];
		else if (!tpath)
			tpath = argv[i];
		else if (!cpath)
			cpath = argv[i];
		else
			tpath = NULL;
	}
	if (!tpath || (!cpath && !batch)) {
		fprintf(stderr,
			"usage: tmpl_render TEMPLATE CONTEXT.json [--now "
			"EPOCH] [--json]\n"
			"       tmpl_render TEMPLATE --batch CONTEXTS.jsonl "
			"[--now EPOCH]\n");
		return 2;
	}
	src = read_all(tpath, &len);
	if (!src) {
		fprintf(stderr, "error: %s: %s\n", tpath, strerror(errno));
		return 1;
	}
	e = taco_tmpl_compile(src, len, &t, &err);
	free(src);
	if (e && !batch) {
		fprintf(stderr, "error: %s\n", err.msg);
		return 1;
	}
	if (batch) {
		FILE *f = fopen(batch, "r");
		char *line = NULL;
		size_t cap = 0;
		ssize_t n;

		if (!f) {
			fprintf(stderr, "error: %s: %s\n", batch,
				strerror(errno));
			taco_tmpl_free(t);
			return 1;
		}
		while ((n = getline(&line, &cap, f)) > 0) {
			json_t *ctx, *res;
			char *dump;

			if (e) { /* the compile error, for every context */
				res = result_json(e, NULL, &err);
			} else {
				ctx = json_loadb(line, (size_t)n,
						 JSON_ALLOW_NUL, &jerr);
				if (!ctx) {
					fprintf(stderr, "error: %s: %s\n",
						batch, jerr.text);
					break;
				}
				memset(&err, 0, sizeof(err));
				e = taco_tmpl_render(t, ctx, &opts, &out, &err);
				res = result_json(e, &out, &err);
				if (!e)
					taco_tmpl_out_free(&out);
				e = 0;
				json_decref(ctx);
			}
			dump =
			    json_dumps(res, JSON_COMPACT | JSON_ENSURE_ASCII);
			if (dump)
				printf("%s\n", dump);
			free(dump);
			json_decref(res);
		}
		free(line);
		fclose(f);
		taco_tmpl_free(t);
		return 0;
	}
	{
		json_t *ctx = json_load_file(cpath, JSON_ALLOW_NUL, &jerr);

		if (!ctx) {
			fprintf(stderr, "error: %s: %s\n", cpath, jerr.text);
			taco_tmpl_free(t);
			return 1;
		}
		e = taco_tmpl_render(t, ctx, &opts, &out, &err);
		json_decref(ctx);
	}
	if (e) {
		if (as_json) {
			json_t *res = result_json(e, &out, &err);

			json_dumpf(res, stdout,
				   JSON_COMPACT | JSON_ENSURE_ASCII);
			json_decref(res);
			printf("\n");
		}
		fprintf(stderr, "error: %s\n", err.msg);
		goto done;
	}
	if (as_json) {
		json_t *res = result_json(0, &out, &err);

		json_dumpf(res, stdout, JSON_COMPACT | JSON_ENSURE_ASCII);
		json_decref(res);
		printf("\n");
	} else {
		fwrite(out.text, 1, out.len, stdout);
		for (int i = 0; i < out.n_gen; i++)
			fprintf(stderr, "generation %zu %zu\n", out.gen[2 * i],
				out.gen[2 * i + 1]);
	}
	taco_tmpl_out_free(&out);
	rc = 0;
done:
	taco_tmpl_free(t);
	return rc;
}
