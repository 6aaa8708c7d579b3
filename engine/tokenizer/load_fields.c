/* load_fields.c: what every stage's part of the tokenizer.json loader
 * uses: "name: message" errors, and readers of the fields of an object
 * that name the field when it is wrong. */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

int tok_fail(struct tok_loader *L, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	taco_err_vat(L->err, code, L->name, fmt, ap);
	va_end(ap);
	return code;
}

int tok_oom(struct tok_loader *L)
{
	return tok_fail(L, -ENOMEM, "out of memory");
}

char *tok_dupn(const char *s, size_t n)
{
	char *p = malloc(n + 1);

	if (p) {
		memcpy(p, s, n);
		p[n] = 0;
	}
	return p;
}

int tok_check_keys(struct tok_loader *L, json_t *o, const char *where,
		   const char *const *allowed)
{
	const char *k;
	json_t *v;

	json_object_foreach(o, k, v)
	{
		int ok = 0;
		for (int i = 0; allowed[i]; i++)
			if (!strcmp(k, allowed[i]))
				ok = 1;
		if (!ok)
			return tok_fail(L, -ENOTSUP,
					"%s field '%s' is not supported", where,
					k);
	}
	return 0;
}

int tok_get_bool(struct tok_loader *L, json_t *o, const char *where,
		 const char *key, int dflt, int *out)
{
	json_t *v = json_object_get(o, key);

	if (!v || json_is_null(v)) {
		*out = dflt;
		return 0;
	}
	if (!json_is_boolean(v))
		return tok_fail(L, -EINVAL, "%s.%s must be true or false",
				where, key);
	*out = json_is_true(v);
	return 0;
}

int tok_get_str(struct tok_loader *L, json_t *o, const char *where,
		const char *key, int nullable, const char **out, size_t *len)
{
	json_t *v = json_object_get(o, key);

	*out = NULL;
	*len = 0;
	if (!v || json_is_null(v)) {
		if (nullable)
			return 0;
		return tok_fail(L, -EINVAL, "%s.%s is required", where, key);
	}
	if (!json_is_string(v))
		return tok_fail(L, -EINVAL, "%s.%s must be a string", where,
				key);
	*out = json_string_value(v);
	*len = json_string_length(v);
	if (*len > TACO_TOK_MAX_TOKEN_LEN)
		return tok_fail(L, -EFBIG, "%s.%s is longer than %d bytes",
				where, key, TACO_TOK_MAX_TOKEN_LEN);
	if (memchr(*out, 0, *len))
		return tok_fail(L, -EINVAL, "%s.%s contains a NUL character",
				where, key);
	return 0;
}

int tok_get_char(struct tok_loader *L, json_t *o, const char *where,
		 const char *key, char *utf8, int *ulen, uint32_t *cp)
{
	const char *s;
	size_t n, bad;
	int r;

	if ((r = tok_get_str(L, o, where, key, 0, &s, &n)))
		return r;
	if (!n || tok_utf8_valid_prefix((const unsigned char *)s, n, &bad) != n)
		return tok_fail(L, -EINVAL, "%s.%s must be a single character",
				where, key);
	memcpy(utf8, s, n);
	utf8[n] = 0;
	*ulen = (int)n;
	if (cp)
		tok_utf8_next((const unsigned char *)s, n, cp);
	return 0;
}

int tok_get_pattern(struct tok_loader *L, json_t *o, const char *where,
		    struct tok_regex *re, int allow_regex)
{
	json_t *p = json_object_get(o, "pattern"), *v;
	char w[256];
	int literal;

	snprintf(w, sizeof(w), "%s.pattern", where);
	if (!json_is_object(p) || json_object_size(p) != 1)
		return tok_fail(
		    L, -EINVAL,
		    "%s must be {\"String\": ...} or {\"Regex\": ...}", w);
	if ((v = json_object_get(p, "String")))
		literal = 1;
	else if ((v = json_object_get(p, "Regex")))
		literal = 0;
	else
		return tok_fail(L, -ENOTSUP, "%s kind '%s' is not supported", w,
				json_object_iter_key(json_object_iter(p)));
	if (!json_is_string(v))
		return tok_fail(L, -EINVAL, "%s must hold a string", w);
	if (!literal && !allow_regex)
		return tok_fail(L, -ENOTSUP,
				"%s: Regex patterns are not supported here", w);
	return tok_regex_compile(re, json_string_value(v),
				 json_string_length(v), literal, L->name, w,
				 L->err);
}

int tok_get_prepend_scheme(struct tok_loader *L, json_t *o, const char *where,
			   int *out)
{
	json_t *v = json_object_get(o, "prepend_scheme");
	int aps = 1, r;

	if (v && !json_is_null(v)) {
		const char *s = json_string_value(v);
		if (!s)
			return tok_fail(L, -EINVAL,
					"%s.prepend_scheme must be a string",
					where);
		if (!strcmp(s, "always"))
			*out = PREPEND_ALWAYS;
		else if (!strcmp(s, "never"))
			*out = PREPEND_NEVER;
		else if (!strcmp(s, "first"))
			*out = PREPEND_FIRST;
		else
			return tok_fail(
			    L, -ENOTSUP,
			    "%s.prepend_scheme '%s' is not supported", where,
			    s);
		return 0;
	}
	/* older files: add_prefix_space */
	if ((r = tok_get_bool(L, o, where, "add_prefix_space", 1, &aps)))
		return r;
	*out = aps ? PREPEND_ALWAYS : PREPEND_NEVER;
	return 0;
}

int tok_get_id(struct tok_loader *L, json_t *v, const char *where, int32_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) >= (json_int_t)TACO_TOK_MAX_VOCAB)
		return tok_fail(L, -EINVAL, "%s must be an id in [0, %u)",
				where, TACO_TOK_MAX_VOCAB);
	*out = (int32_t)json_integer_value(v);
	return 0;
}

const char *tok_step_type(struct tok_loader *L, json_t *o, const char *where,
			  int depth, int *r)
{
	json_t *t;

	*r = 0;
	if (depth > TOK_MAX_DEPTH) {
		*r = tok_fail(L, -EINVAL, "%s: nested too deeply", where);
		return NULL;
	}
	if (!json_is_object(o)) {
		*r =
		    tok_fail(L, -EINVAL, "%s must be an object or null", where);
		return NULL;
	}
	t = json_object_get(o, "type");
	if (!json_is_string(t)) {
		*r = tok_fail(L, -EINVAL, "%s.type is required", where);
		return NULL;
	}
	return json_string_value(t);
}

int tok_parse_sequence(struct tok_loader *L, json_t *o, const char *where,
		       const char *key, int depth,
		       int (*parse)(struct tok_loader *, json_t *, const char *,
				    int))
{
	const char *const keys[] = {"type", key, NULL};
	json_t *a = json_object_get(o, key), *v;
	size_t i;
	int r;

	if ((r = tok_check_keys(L, o, where, keys)))
		return r;
	if (!json_is_array(a))
		return tok_fail(L, -EINVAL, "%s.%s must be an array", where,
				key);
	json_array_foreach(a, i, v)
	{
		char w[256];
		snprintf(w, sizeof(w), "%s.%s[%zu]", where, key, i);
		if ((r = parse(L, v, w, depth + 1)))
			return r;
	}
	return 0;
}

int tok_new_step(struct tok_loader *L, void **arr, int *n, int *cap,
		 size_t esize, const char *where, const char *what, void **out)
{
	char *p;

	if (*n >= TOK_MAX_STEPS)
		return tok_fail(L, -EFBIG, "%s: more than %d %s", where,
				TOK_MAX_STEPS, what);
	if (*n == *cap) {
		int c = *cap ? *cap * 2 : 4;
		void *g = realloc(*arr, esize * (size_t)c);
		if (!g)
			return tok_oom(L);
		*arr = g;
		*cap = c;
	}
	p = (char *)*arr + esize * (size_t)*n;
	memset(p, 0, esize);
	(*n)++;
	*out = p;
	return 0;
}
