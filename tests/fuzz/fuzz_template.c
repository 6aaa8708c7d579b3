/* fuzz_template.c: chat templates (engine/template): the input is a
 * template, then, after a NUL byte, a JSON object to render it with (a
 * small chat when there is none or it does not parse). Compiles and
 * renders with small limits; a render either fails or gives text whose
 * generation spans lie in it, in order. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "template/template.h"

static const char default_ctx[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, "
    "{\"role\": \"user\", \"content\": \"h\\u00e9llo\"}, {\"role\": "
    "\"assistant\", \"content\": \"<think>r</think>a\", \"tool_calls\": "
    "[{\"function\": {\"name\": \"f\", \"arguments\": {\"x\": [1, 2.5, "
    "null]}}}]}, {\"role\": \"tool\", \"content\": \"ok\"}], \"tools\": "
    "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], "
    "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": "
    "\"</s>\", \"x\": {\"a\": 1}, \"n\": 3}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *src = (const char *)data;
	const uint8_t *nul = memchr(data, 0, size);
	size_t len = nul ? (size_t)(nul - data) : size;
	taco_tmpl_opts o = {{64u << 10, 8u << 20, 200000, 16}, 1717243994};
	taco_tmpl_out out;
	taco_err err;
	taco_tmpl *t;
	json_t *ctx = NULL;

	if (taco_tmpl_compile(src, len, &t, &err))
		return 0;
	if (nul)
		ctx =
		    json_loadb((const char *)nul + 1, size - len - 1, 0, NULL);
	if (!json_is_object(ctx)) {
		json_decref(ctx);
		ctx = json_loads(default_ctx, 0, NULL);
	}
	if (!taco_tmpl_render(t, ctx, &o, &out, &err)) {
		size_t prev = 0;

		if (!out.text || out.text[out.len] ||
		    out.len > o.limits.max_output)
			abort();
		for (int i = 0; i < out.n_gen; i++) {
			size_t a = out.gen[2 * i], b = out.gen[2 * i + 1];

			if (a > b || b > out.len || a < prev)
				abort();
			prev = a;
		}
		taco_tmpl_out_free(&out);
	}
	json_decref(ctx);
	taco_tmpl_free(t);
	return 0;
}
