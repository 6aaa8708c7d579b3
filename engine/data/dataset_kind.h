/* dataset_kind.h: what a JSONL data file holds, told from its first
 * non-blank line: supervised examples or preference pairs (DPO). It is a
 * quick look, for a request's answer: the file's full validation is
 * taco_dataset_load's (and the preference loader's). */
#ifndef TACO_DATASET_KIND_H
#define TACO_DATASET_KIND_H

#include <jansson.h>

#include "util/taco_err.h"

enum taco_dataset_kind {
	/* nothing to tell by: no line, a line that is not a JSON object or
	 * longer than TACO_DATASET_MAX_LINE, or none of the fields below;
	 * the full validation reports it */
	TACO_DATASET_KIND_UNKNOWN = 0,
	/* "messages", "prompt" and "completion", "text" or "input_ids" */
	TACO_DATASET_KIND_SUPERVISED,
	/* "input" with "preferred_output" or "non_preferred_output" */
	TACO_DATASET_KIND_PREFERENCE,
};

/* The kind of one line's object (any JSON value; not an object is
 * unknown). */
int taco_dataset_kind_of(const json_t *line);

/* The kind of the file at path by its first non-blank line, reading at
 * most that line and TACO_DATASET_MAX_LINE bytes of blank lines before it.
 * 0 with *kind set, or a negative errno (err names the file) when it
 * cannot be read. */
int taco_dataset_kind(const char *path, int *kind, taco_err *err);

/* "unknown", "supervised" or "preference". */
const char *taco_dataset_kind_name(int kind);

#endif
