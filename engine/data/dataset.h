/* dataset.h: JSONL training files (chat, prompt/completion, text,
 * pre-tokenized) turned into token ids and labels, with a validation report
 * of every problem by line and code. docs/datasets.md documents the formats.
 *
 * Chat examples are rendered whole with the job's chat template (chat.h:
 * the model's own, as transformers renders it) and encoded once; the
 * tokens of each trained assistant message's span carry labels.
 *
 * With method dpo the lines are preference pairs (OpenAI's format, pref.c),
 * each stored as two examples (the prompt with each output, only the
 * outputs labelled). */
#ifndef TACO_DATASET_H
#define TACO_DATASET_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "data.h"
#include "job/job_opts.h" /* enum taco_template, taco_overlength */
#include "tokenizer/tokenizer.h"
#include "util/taco_err.h"

#define TACO_DATASET_MAX_LINE (8u << 20)    /* bytes in one line */
#define TACO_DATASET_MAX_FILE (16ull << 30) /* bytes in one file */
#define TACO_DATASET_MAX_MESSAGES 4096	    /* messages in one example */
#define TACO_DATASET_MAX_LISTED 100	    /* problems listed in full */
#define TACO_DATASET_PREVIEW 4096	    /* bytes of the rendered preview */
#define TACO_DATASET_PREVIEW_SPANS 64	    /* its trained spans */

/* Problem codes; docs/datasets.md says what each means. */
enum taco_problem_code {
	TACO_P_INVALID_JSON = 0,
	TACO_P_INVALID_UTF8,
	TACO_P_UNKNOWN_FORMAT,
	TACO_P_MISSING_MESSAGES,
	TACO_P_INVALID_MESSAGE,
	TACO_P_UNRECOGNIZED_ROLE,
	TACO_P_MISSING_CONTENT,
	TACO_P_NO_ASSISTANT_MESSAGE,
	TACO_P_INVALID_WEIGHT,
	TACO_P_INVALID_FIELD,
	TACO_P_EMPTY_EXAMPLE,
	TACO_P_TOO_LONG,
	TACO_P_ALL_LABELS_MASKED,
	TACO_P_LINE_TOO_LONG,
	TACO_P_INVALID_TOKEN,
	TACO_P_IGNORED_FIELD,  /* a warning: an OpenAI field tacod does not read
				*/
	TACO_P_NOT_PREFERENCE, /* method dpo, a line that is not a pair */
	TACO_P_PREFERENCE_PAIR, /* method sft, a preference pair */
	TACO_P_TEMPLATE_ERROR,	/* the chat template fails on the chat */
	TACO_P_ANSWER_NOT_LOCATED, /* an assistant message's span is not
				      found in the render */
	TACO_P_TOOLS_UNSUPPORTED,  /* tools, on a template without them */
	TACO_P_COUNT
};

const char *taco_problem_name(int code);

typedef struct taco_dataset_opts {
	const char *model_dir; /* tokenizer_config.json for TEMPLATE_AUTO */
	int template_id;       /* enum taco_template */
	/* the job's chat_template_jinja, chat_template_kwargs (a JSON
	 * object's text) and chat_template_time (strftime_now's clock): NULL,
	 * NULL, 0 when not set */
	const char *chat_jinja, *chat_kwargs;
	int64_t chat_now;
	int train_on_all;      /* 1: every token is trained, not only answers */
	int seq_len;
	int overlength;	      /* enum taco_overlength */
	int64_t max_examples; /* with method dpo: pairs */
	/* enum taco_method: with TACO_METHOD_DPO every line is a preference
	 * pair (two examples, their outputs trained only, whatever
	 * train_on_all says), without it none may be */
	int method;
	/* the first keep_prompts chats that end in an assistant message
	 * with text content, kept as prompts with their reference
	 * (taco_data.prompts): evaluation's generated answers */
	int keep_prompts;
} taco_dataset_opts;

void taco_dataset_defaults(taco_dataset_opts *o);

typedef struct taco_problem {
	int64_t line;
	int code;
	int error; /* 1 error, 0 warning */
	char detail[192];
} taco_problem;

/* With method dpo, examples, kept and dropped count pairs, truncated the
 * pairs with a truncated sequence, tokens and trainable_tokens both
 * sequences of each. */
typedef struct taco_dataset_report {
	int64_t lines, examples, kept;
	int64_t pairs; /* method dpo: the pairs kept */
	int64_t tokens, trainable_tokens;
	int64_t truncated, dropped;
	int64_t errors, warnings;
	int64_t by_code[TACO_P_COUNT];
	int n_listed;
	taco_problem listed[TACO_DATASET_MAX_LISTED];
	/* the first error and the first warning, listed or not (set when
	 * errors, warnings > 0) */
	taco_problem first_error, first_warning;
	int template_id; /* the template option the file was read with */
	int method;	 /* enum taco_method the file was read for */
	/* where the chat template came from (taco_chat_source), "" before a
	 * chat line */
	char chat_template[32];
	int64_t chat_time; /* strftime_now()'s clock it rendered with */
	/* The first chat as rendered, for the user to see what the model
	 * will: its line (0: none), its first TACO_DATASET_PREVIEW bytes and
	 * the trained byte spans within them. */
	int64_t preview_line;
	char preview[TACO_DATASET_PREVIEW + 1];
	size_t preview_len;
	int preview_cut; /* the render was longer */
	uint32_t preview_span[2 * TACO_DATASET_PREVIEW_SPANS];
	int preview_n_span;
} taco_dataset_report;

/* Reads a JSONL file. Every line is checked; the report lists every
 * problem (the first TACO_DATASET_MAX_LISTED in full, all counted). Returns
 * 0 with the examples when there is no error (warnings allowed), -EINVAL
 * when some line has an error (report filled, *out untouched), or another
 * negative code when the file cannot be read at all. */
int taco_dataset_load(const char *path, const taco_tok *tok,
		      const taco_dataset_opts *o, taco_data **out,
		      taco_dataset_report *rep, taco_err *err);

const char *taco_template_name(int template_id);

/* The report in one line: with errors, their count and the first error
 * (never a warning); with warnings only, that there is no error, their
 * count and the first warning; else that there is no problem. */
void taco_dataset_report_summary(const taco_dataset_report *rep,
				 const char *file, char *buf, size_t cap);

/* The report as a JSON object (events, tacod; "summary" is the line
 * above) and as text. */
json_t *taco_dataset_report_json(const taco_dataset_report *rep,
				 const char *file);
void taco_dataset_report_print(const taco_dataset_report *rep, const char *file,
			       FILE *f);

/* Of full = encode(text), the tokens that encode(text[0..b)) shares: the
 * index of the first token at or after byte b. Where b falls inside a
 * token the common prefix ends before it, so that token counts as after b.
 * tmp is scratch. */
int taco_tokens_before(const taco_tok *tok, const char *text, size_t b,
		       int add_special, const taco_tok_ids *full,
		       taco_tok_ids *tmp, size_t *k, taco_err *err);

#endif
