/* chat.h: a job's chat template, and chats rendered with it for training,
 * exactly as transformers' apply_chat_template renders them (the Jinja of
 * engine/template). docs/datasets.md, "Chat templates", is the user's
 * side of it.
 *
 * The template is the model's own (tokenizer_config.json's chat_template,
 * or chat_template.jinja and additional_chat_templates/ beside it, as
 * transformers reads them: `default`, and `tool_use` for a chat with tools
 * when there is one), the job's own Jinja, or a built-in one (chatml,
 * llama3, mistral) for a model that has none.
 *
 * Of a render, the trained spans are what the model writes when served:
 * for each trained assistant message, the text after the generation prompt
 * through its end-of-turn marker. A template with {% generation %} blocks
 * marks them itself, as for transformers' return_assistant_tokens_mask. */
#ifndef TACO_CHAT_H
#define TACO_CHAT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"
#include "util/taco_err.h"

#define TACO_CHAT_MAX_JINJA (256u << 10) /* the job's own template */
#define TACO_CHAT_MAX_KWARGS (64u << 10) /* chat_template_kwargs, as JSON */
#define TACO_CHAT_MAX_RENDER (32u << 20) /* bytes of one rendered chat */
#define TACO_CHAT_MAX_SPANS 8192	 /* trained spans of one chat */

typedef struct taco_chat taco_chat;

typedef struct taco_chat_opts {
	const char *model_dir; /* its template files, for TACO_TEMPLATE_AUTO */
	int template_id;       /* enum taco_template */
	const char *jinja;     /* the job's own template text, or NULL */
	/* chat_template_kwargs: a JSON object's text, or NULL; its names are
	 * template variables beside the special tokens (bos_token, ...) */
	const char *kwargs;
	int64_t now; /* strftime_now()'s clock, fixed for the job */
} taco_chat_opts;

/* Loads and compiles the template; tok gives the special tokens' text.
 * Errors name the file (or option) and line. *out set only on success. */
int taco_chat_open(const taco_chat_opts *o, const taco_tok *tok,
		   taco_chat **out, taco_err *err);
void taco_chat_free(taco_chat *c);

/* Where the template came from: "tokenizer_config.json",
 * "chat_template.jinja", "chat_template_jinja" (the job's), or the
 * built-in's name ("chatml", "llama3", "mistral"). */
const char *taco_chat_source(const taco_chat *c);

/* The Jinja text of the template used without tools (the one a model
 * exported from the job serves with), and whether it is the model's own
 * (then its files are carried over as they are). */
const char *taco_chat_jinja(const taco_chat *c);
int taco_chat_is_models(const taco_chat *c);

/* The Jinja a job trained with when it is not the model's own (the job's
 * chat_template_jinja, or a built-in's), for the export to serve with;
 * NULL when it is the model's. */
const char *taco_chat_trained_jinja(int template_id, const char *jinja);

/* A rendered chat: text, and the trained byte spans [span[2k],
 * span[2k+1]). */
typedef struct taco_chat_out {
	char *text;
	size_t len;
	size_t *span;
	int n_span;
} taco_chat_out;

/* Renders messages (the template's input: OpenAI's messages with each tool
 * call's arguments an object and weight left out) with tools (an array,
 * or NULL) and finds the spans of the assistant messages whose trained[i]
 * is 1. Returns 0; -EINVAL with the line's problem in why when the
 * template fails on the chat or a trained message cannot be located in
 * its render (*code is TACO_P_TEMPLATE_ERROR or TACO_P_ANSWER_NOT_LOCATED);
 * or another negative code in err (out of memory). *out set on success
 * only; free it with taco_chat_out_free. */
int taco_chat_render(const taco_chat *c, json_t *messages, json_t *tools,
		     const unsigned char *trained, taco_chat_out *out,
		     int *code, char *why, size_t why_cap, taco_err *err);

/* The text only, with or without the generation prompt (a prompt for
 * generation or scoring). Same returns. */
int taco_chat_render_text(const taco_chat *c, json_t *messages, json_t *tools,
			  int add_generation_prompt, taco_chat_out *out,
			  char *why, size_t why_cap, taco_err *err);

void taco_chat_out_free(taco_chat_out *out);

#endif
