/* template.h: chat templates, the Jinja that models ship in
 * tokenizer_config.json or chat_template.jinja, rendered exactly as Hugging
 * Face transformers renders them (jinja2's ImmutableSandboxedEnvironment
 * with trim_blocks, lstrip_blocks, the loop controls and transformers'
 * {% generation %} block, tojson and globals). docs/datasets.md, "Chat
 * templates", lists the language it accepts and its limits.
 *
 * A template is code from a model directory. It reads only the values the
 * caller gives it; nothing in the language opens a file, the network or a
 * process. Every render is bounded in steps, nesting, memory and output;
 * past a bound, or on anything the language here does not implement, the
 * render fails with an error naming the template line and the construct.
 * It never renders something other than what jinja2 would.
 *
 * A compiled template is immutable: one may be rendered from several
 * threads at once. */
#ifndef TACO_TEMPLATE_H
#define TACO_TEMPLATE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "util/taco_err.h"

#define TACO_TMPL_MAX_SOURCE (1u << 20) /* bytes of template text */

typedef struct taco_tmpl taco_tmpl;

/* Compiles src[0..len) (UTF-8). Syntax errors, and filters, tests or
 * statements the language here lacks, are -EINVAL with "line N: ..." in
 * err; a source over TACO_TMPL_MAX_SOURCE, or nested deeper than 256
 * levels (brackets, operators, statements), is -E2BIG. *out is set only
 * on success; free it with taco_tmpl_free. */
int taco_tmpl_compile(const char *src, size_t len, taco_tmpl **out,
		      taco_err *err);
void taco_tmpl_free(taco_tmpl *t);

/* Bounds of one render; 0 in a field takes its default. */
typedef struct taco_tmpl_limits {
	size_t max_output;  /* bytes of output (default 16 MiB) */
	size_t max_memory;  /* bytes of values made while rendering (256 MiB) */
	uint64_t max_steps; /* expression and statement evaluations (5e7) */
	int max_depth;	    /* nested macro calls and loops (128) */
} taco_tmpl_limits;

typedef struct taco_tmpl_opts {
	taco_tmpl_limits limits;
	/* strftime_now()'s clock: seconds since the epoch, formatted in local
	 * time as Python's datetime.now().strftime() does. The caller fixes it
	 * once per job so that every render of the job gives the same bytes. */
	int64_t now;
} taco_tmpl_opts;

/* A render: text (NUL-terminated, len bytes) and the byte spans
 * [gen[2k], gen[2k+1]) that {% generation %} blocks wrote, in order. */
typedef struct taco_tmpl_out {
	char *text;
	size_t len;
	size_t *gen;
	int n_gen;
} taco_tmpl_out;

/* Renders t with the variables of ctx, a JSON object (messages, tools,
 * add_generation_prompt, bos_token, eos_token, and any template
 * variables), read in place, never copied: it must stay unchanged during
 * the call, and its strings be valid UTF-8 (as Jansson's decoder and
 * json_string make them). JSON values are Python's: objects are dicts in
 * key order, integers int, reals float, null None. Integers are 64-bit:
 * where Python's would grow past that, the render fails (never a wrong
 * number).
 *
 * Errors, each with "line N: ..." in err: raise_exception(msg) is -EINVAL
 * and "line N: msg"; the template's own errors (an undefined value used,
 * a TypeError, ...) are -EINVAL, and so is what the language here does
 * not do ("line N: ... is not supported"); a limit exceeded is -E2BIG,
 * "line N: max_steps exceeded (50000000)" and the like (max_output,
 * max_memory, max_steps, max_depth, and "evaluation depth" for values
 * nested past 1000 levels); -ENOMEM when malloc fails. *out is set only
 * on success; free it with taco_tmpl_out_free.
 *
 * A render uses well under 1 MiB of the calling thread's stack (about
 * 400 KiB at the worst in an optimized build). Floats
 * are written and read as Python does, with snprintf and strtod: the
 * process's LC_NUMERIC must be "C" (the default). strftime_now formats
 * o->now with localtime_r (the TZ of the process). */
int taco_tmpl_render(const taco_tmpl *t, const json_t *ctx,
		     const taco_tmpl_opts *o, taco_tmpl_out *out,
		     taco_err *err);
void taco_tmpl_out_free(taco_tmpl_out *out);

#endif
