/* json_file.c: JSON files read one way (json_file.h). */
#include "json_file.h"

#include <stdlib.h>

#include "fsutil.h"

int taco_json_parse(const char *name, const char *buf, size_t len,
		    size_t max_bytes, unsigned flags, json_t **out,
		    taco_err *err)
{
	json_error_t jerr;
	json_t *root;

	*out = NULL;
	if (max_bytes && len > max_bytes)
		return taco_err_set(err, -EFBIG, "%s: larger than %zu bytes",
				    name, max_bytes);
	root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root && (flags & TACO_JSON_COLUMN))
		return taco_err_set(err, -EINVAL, "%s: line %d column %d: %s",
				    name, jerr.line, jerr.column, jerr.text);
	if (!root)
		return taco_err_set(err, -EINVAL, "%s: line %d: %s", name,
				    jerr.line, jerr.text);
	if ((flags & TACO_JSON_OBJECT) && !json_is_object(root)) {
		json_decref(root);
		return taco_err_set(err, -EINVAL, "%s: not a JSON object",
				    name);
	}
	*out = root;
	return 0;
}

int taco_json_read(const char *name, const char *buf, size_t len,
		   size_t max_bytes, unsigned flags, taco_json_reader *read,
		   void *arg, taco_err *err)
{
	json_t *root;
	int r = taco_json_parse(name, buf, len, max_bytes, flags, &root, err);

	if (r)
		return r;
	r = read(root, name, arg, err);
	json_decref(root);
	return r;
}

int taco_json_read_file(const char *path, size_t max_bytes, unsigned flags,
			taco_json_reader *read, void *arg, taco_err *err)
{
	char *buf = NULL;
	size_t n = 0;
	int r = taco_read_file(path, max_bytes, &buf, &n, err);

	if (r)
		return r;
	r = taco_json_read(path, buf, n, max_bytes, flags, read, arg, err);
	free(buf);
	return r;
}
