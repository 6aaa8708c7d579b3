/* dataset_internal.h: what the dataset reader's files share (dataset.c:
 * the loop, the SFT formats, the report; pref.c: preference pairs). Only
 * engine/data's own files include it. */
#ifndef TACO_DATASET_INTERNAL_H
#define TACO_DATASET_INTERNAL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "dataset.h"

/* A rendered example: text, and the byte spans whose tokens are trained. */
typedef struct taco_ds_render {
	char *text;
	size_t len, cap;
	size_t span[2 * TACO_DATASET_MAX_MESSAGES + 4];
	int n_span;
} taco_ds_render;

typedef struct taco_ds_message {
	const char *role, *content;
	size_t content_len;
	int weight; /* 0 or 1 */
} taco_ds_message;

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
	int tmpl;
	const char *bos, *eos; /* token strings */
	int32_t eos_id;
} taco_ds_loader;

/* Records a problem of line in the report. */
void taco_ds_report(taco_dataset_report *rep, int64_t line, int code, int error,
		    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Resolves TACO_TEMPLATE_AUTO from the model's tokenizer_config.json, on
 * the first chat line. */
int taco_ds_template(taco_ds_loader *L, taco_err *err);

/* Checks the chat messages msgs (the field named `field`) into m[0..*n).
 * As a prompt (prompt = 1): no assistant message is needed, the last must
 * not be one and no message may have a weight (every weight is 0: nothing
 * of a prompt is trained). Returns 1 when it may be rendered, 0 after
 * reporting its problems. */
int taco_ds_check_chat(taco_ds_loader *L, int64_t line, json_t *msgs,
		       const char *field, int prompt, taco_ds_message *m,
		       int *n);

/* Renders m[0..n) with template tmpl; a message is trained when `all`, or
 * when it is an assistant message of weight 1. Returns 0 or -ENOMEM. */
int taco_ds_render_chat(int tmpl, const taco_ds_message *m, int n,
			const char *bos, const char *eos, int all,
			taco_ds_render *r);

/* Encodes rd into L->ids; L->labels are the ids of the tokens that start
 * inside a trained span (every id when train_all), -100 elsewhere. */
int taco_ds_encode(taco_ds_loader *L, const taco_ds_render *rd, int add_special,
		   int append_eos, int train_all, taco_err *err);

/* Targets among the first n labels (label 0 is never one). */
size_t taco_ds_count_trained(const taco_ds_loader *L, size_t n);

/* Stores the first n tokens of L->ids and L->labels as the next example. */
int taco_ds_keep(taco_ds_loader *L, size_t n, taco_err *err);

/* pref.c: whether root is a preference line, and reading one (its two
 * examples stored, or none). m has room for TACO_DATASET_MAX_MESSAGES + 1
 * messages. */
int taco_ds_is_pref(json_t *root);
int taco_ds_pref_line(taco_ds_loader *L, int64_t line, json_t *root,
		      taco_ds_message *m, taco_err *err);

#endif
