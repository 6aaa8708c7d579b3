/* dataset_kind.c: supervised examples or preference pairs, by a file's
 * first non-blank line. A request is answered from it at once, so the
 * read is bounded: that one line (at most TACO_DATASET_MAX_LINE bytes, as
 * the loader allows) after at most as many bytes of blank lines. */
#include "dataset_kind.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset.h"

#define KIND_CHUNK 65536

int taco_dataset_kind_of(const json_t *line)
{
	if (!json_is_object(line))
		return TACO_DATASET_KIND_UNKNOWN;
	/* before the supervised fields: a pair's input may hold messages,
	 * and a line with both is not a supervised example */
	if (json_object_get(line, "input") &&
	    (json_object_get(line, "preferred_output") ||
	     json_object_get(line, "non_preferred_output")))
		return TACO_DATASET_KIND_PREFERENCE;
	/* the fields taco_dataset_load tells its formats by */
	if (json_object_get(line, "messages") ||
	    json_object_get(line, "completion") ||
	    json_object_get(line, "text") || json_object_get(line, "input_ids"))
		return TACO_DATASET_KIND_SUPERVISED;
	return TACO_DATASET_KIND_UNKNOWN;
}

const char *taco_dataset_kind_name(int kind)
{
	switch (kind) {
	case TACO_DATASET_KIND_SUPERVISED:
		return "supervised";
	case TACO_DATASET_KIND_PREFERENCE:
		return "preference";
	default:
		return "unknown";
	}
}

/* The line less its trailing CRs; blank as the loader counts it (spaces
 * and tabs only). */
static size_t trim_cr(const char *s, size_t n)
{
	while (n > 0 && s[n - 1] == '\r')
		n--;
	return n;
}

static int is_blank(const char *s, size_t n)
{
	n = trim_cr(s, n);
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t')
			return 0;
	return 1;
}

/* Appends c to the line, growing it up to TACO_DATASET_MAX_LINE bytes:
 * 0, 1 when the line is longer, or -ENOMEM. */
static int put(char **line, size_t *n, size_t *cap, char c)
{
	if (*n == TACO_DATASET_MAX_LINE)
		return 1;
	if (*n == *cap) {
		size_t c2 = *cap ? *cap * 2 : 4096;
		char *p;

		if (c2 > TACO_DATASET_MAX_LINE)
			c2 = TACO_DATASET_MAX_LINE;
		if (!(p = realloc(*line, c2)))
			return -ENOMEM;
		*line = p;
		*cap = c2;
	}
	(*line)[(*n)++] = c;
	return 0;
}

/* Reads the first non-blank line into *line (*n bytes, no newline): 0, 1
 * when there is none to tell by (none at all, too long, or past too many
 * blank bytes), or a negative errno. */
static int first_line(FILE *f, char **line, size_t *n)
{
	char *buf = malloc(KIND_CHUNK);
	size_t cap = 0, blank = 0, got;
	int r = 0, done = 0;

	*n = 0;
	if (!buf)
		return -ENOMEM;
	while (!done && (got = fread(buf, 1, KIND_CHUNK, f)) > 0) {
		for (size_t i = 0; i < got && !done; i++) {
			if (buf[i] != '\n') {
				r = put(line, n, &cap, buf[i]);
				done = r != 0;
			} else if (!is_blank(*line, *n)) {
				done = 1;
			} else {
				blank += *n + 1;
				*n = 0;
				done = r = blank > TACO_DATASET_MAX_LINE;
			}
		}
	}
	free(buf);
	if (r == 0 && ferror(f))
		r = -EIO;
	if (r == 0 && is_blank(*line, *n))
		r = 1; /* the end of the file, and no line */
	return r;
}

int taco_dataset_kind(const char *path, int *kind, taco_err *err)
{
	FILE *f = fopen(path, "rb");
	char *line = NULL;
	json_t *root;
	size_t n;
	int r;

	*kind = TACO_DATASET_KIND_UNKNOWN;
	if (!f)
		return taco_err_set(err, -errno, "%s: %s", path,
				    strerror(errno));
	r = first_line(f, &line, &n);
	fclose(f);
	if (r < 0) {
		free(line);
		return taco_err_set(err, r, "%s: %s", path,
				    r == -ENOMEM ? "out of memory"
						 : "read error");
	}
	if (r == 0) {
		/* duplicate keys as the loader refuses them: unknown, so
		 * that its report says so */
		root = json_loadb(line, trim_cr(line, n),
				  JSON_REJECT_DUPLICATES, NULL);
		*kind = taco_dataset_kind_of(root);
		json_decref(root);
	}
	free(line);
	return 0;
}
