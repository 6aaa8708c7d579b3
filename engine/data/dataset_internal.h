/* dataset_internal.h: what the dataset reader's files share (dataset.c:
 * the loop, the SFT formats, the report; pref.c: preference pairs). Only
 * engine/data's own files include it. */
#ifndef TACO_DATASET_INTERNAL_H
#define TACO_DATASET_INTERNAL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "chat.h"
#include "dataset.h"

/* A rendered example: text, and the byte spans whose tokens are trained. */
typedef struct taco_ds_render {
	char *text;
	size_t len, cap;
	size_t span[2 * TACO_DATASET_MAX_MESSAGES + 4];
	int n_span;
} taco_ds_render;

/* The reader's state while it reads one file. */
typedef struct taco_ds_loader {
	const taco_tok *tok;
	const taco_dataset_opts *o;
	taco_dataset_report *rep;
	taco_data *d;
	size_t offcap;
	taco_tok_ids ids, tmp;
	int32_t *labels;
	size_t labels_cap;
	taco_chat *chat; /* opened on the first chat line */
	unsigned char *trained; /* [TACO_DATASET_MAX_MESSAGES + 1] */
	int preview_done;	/* the report's preview is set */
	int32_t eos_id;
} taco_ds_loader;

/* Records a problem of line in the report. */
void taco_ds_report(taco_dataset_report *rep, int64_t line, int code, int error,
		    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Opens the job's chat template, on the first chat line. */
int taco_ds_template(taco_ds_loader *L, taco_err *err);

/* dataset_chat.c. The tools of a line (root's "tools", checked; NULL when
 * there are none or they are invalid: *ok says which) and
 * parallel_tool_calls checked; field is the prefix of their names in
 * problems ("" or "input."). */
json_t *taco_ds_check_tools(taco_ds_loader *L, int64_t line, json_t *root,
			    const char *field, int *ok);

/* Checks the chat messages msgs (the field named `field`) into *out, the
 * messages as the template sees them, and trained[i] (an assistant message
 * of weight 1). As a prompt (prompt = 1): no assistant message is needed,
 * the last must not be one and no message may have a weight. parallel 0:
 * at most one tool call a message. Returns 1 when it may be rendered, 0
 * after reporting its problems, or -ENOMEM. */
int taco_ds_check_chat(taco_ds_loader *L, int64_t line, json_t *msgs,
		       const char *field, int prompt, int parallel,
		       json_t **out, unsigned char *trained);

/* A preference pair's output a (field: its name): one assistant message,
 * into *out as the template sees it. Returns as taco_ds_check_chat. */
int taco_ds_check_output(taco_ds_loader *L, int64_t line, json_t *a,
			 const char *field, int parallel, json_t **out);

/* Renders a checked chat into rd, its trained spans those of the messages
 * with trained[i]; a template failure is reported on the line (returns 0
 * with rd->len 0). Sets the report's preview from the first chat. */
int taco_ds_render_chat(taco_ds_loader *L, int64_t line, json_t *messages,
			json_t *tools, const unsigned char *trained,
			taco_ds_render *rd, taco_err *err);

/* Encodes rd into L->ids; L->labels are the ids of the tokens that start
 * inside a trained span (every id when train_all), -100 elsewhere. */
int taco_ds_encode(taco_ds_loader *L, const taco_ds_render *rd, int add_special,
		   int append_eos, int train_all, taco_err *err);

/* Targets among the first n labels (label 0 is never one). */
size_t taco_ds_count_trained(const taco_ds_loader *L, size_t n);

/* Stores the first n tokens of L->ids and L->labels as the next example. */
int taco_ds_keep(taco_ds_loader *L, size_t n, taco_err *err);

/* pref.c: whether root is a preference line, and reading one (its two
 * examples stored, or none). */
int taco_ds_is_pref(json_t *root);
int taco_ds_pref_line(taco_ds_loader *L, int64_t line, json_t *root,
		      taco_err *err);

#endif
