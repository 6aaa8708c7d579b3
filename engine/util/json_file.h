/* json_file.h: a JSON file of the programs' own (tacod.json, a model's
 * config.json, a job file) read one way: a size limit, duplicate keys
 * refused, and errors that name the file and line: "NAME: line N: TEXT". */
#ifndef TACO_JSON_FILE_H
#define TACO_JSON_FILE_H

#include <jansson.h>
#include <stddef.h>

#include "taco_err.h"

enum taco_json_flags {
	/* The root must be an object: else "NAME: not a JSON object". */
	TACO_JSON_OBJECT = 1u << 0,
	/* Syntax errors name the column too: "NAME: line N column M: TEXT". */
	TACO_JSON_COLUMN = 1u << 1,
};

/* Parses len bytes of buf. max_bytes > 0 limits len ("NAME: larger than MAX
 * bytes", -EFBIG); a syntax error is -EINVAL. Returns 0 with *out (the
 * caller's reference), or a negative errno with *out NULL and err set. */
int taco_json_parse(const char *name, const char *buf, size_t len,
		    size_t max_bytes, unsigned flags, json_t **out,
		    taco_err *err);

/* Reads a parsed document into arg: 0, or a negative errno with err set. */
typedef int taco_json_reader(json_t *root, const char *name, void *arg,
			     taco_err *err);

/* taco_json_parse, then read(root, name, arg, err); returns the first
 * error or read's result. */
int taco_json_read(const char *name, const char *buf, size_t len,
		   size_t max_bytes, unsigned flags, taco_json_reader *read,
		   void *arg, taco_err *err);

/* The same for the file at path, which names it: at most max_bytes (> 0)
 * are read (taco_read_file's errors). */
int taco_json_read_file(const char *path, size_t max_bytes, unsigned flags,
			taco_json_reader *read, void *arg, taco_err *err);

#endif
