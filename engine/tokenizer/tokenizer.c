/* tokenizer.c: loading a tokenizer.json (and tokenizer_config.json) into a
 * taco_tok, refusing by name whatever is not implemented. */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tokenizer_internal.h"

int tok_merges_put(struct tok_merges *m, int32_t a, int32_t b, uint32_t rank,
		   int32_t id);

#define MAX_DEPTH 8
#define MAX_STEPS 64

static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
    "\\s+(?!\\S)|\\s+";

struct loader {
	taco_tok *tok;
	const char *name;
	taco_err *err;
	int n_norm_cap, n_pt_cap, n_dec_cap;
	int has_normalized_added;
	int metaspace_first_pos; /* step index of a Metaspace(first), or -1 */
};

/* ------------------------------------------------------------ helpers */

static int fail(struct loader *L, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct loader *L, int code, const char *fmt, ...)
{
	char msg[900];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return taco_err_set(L->err, code, "%s: %s", L->name, msg);
}

static int oom(struct loader *L)
{
	return fail(L, -ENOMEM, "out of memory");
}

/* Refuses keys of o outside allowed (NULL-terminated). */
static int check_keys(struct loader *L, json_t *o, const char *where,
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
			return fail(L, -ENOTSUP,
				    "%s field '%s' is not supported", where, k);
	}
	return 0;
}

static int get_bool(struct loader *L, json_t *o, const char *where,
		    const char *key, int dflt, int *out)
{
	json_t *v = json_object_get(o, key);

	if (!v || json_is_null(v)) {
		*out = dflt;
		return 0;
	}
	if (!json_is_boolean(v))
		return fail(L, -EINVAL, "%s.%s must be true or false", where,
			    key);
	*out = json_is_true(v);
	return 0;
}

/* A string field; NULL allowed when nullable (then *out = NULL). */
static int get_str(struct loader *L, json_t *o, const char *where,
		   const char *key, int nullable, const char **out, size_t *len)
{
	json_t *v = json_object_get(o, key);

	*out = NULL;
	*len = 0;
	if (!v || json_is_null(v)) {
		if (nullable)
			return 0;
		return fail(L, -EINVAL, "%s.%s is required", where, key);
	}
	if (!json_is_string(v))
		return fail(L, -EINVAL, "%s.%s must be a string", where, key);
	*out = json_string_value(v);
	*len = json_string_length(v);
	if (*len > TACO_TOK_MAX_TOKEN_LEN)
		return fail(L, -EFBIG, "%s.%s is longer than %d bytes", where,
			    key, TACO_TOK_MAX_TOKEN_LEN);
	if (memchr(*out, 0, *len))
		return fail(L, -EINVAL, "%s.%s contains a NUL character", where,
			    key);
	return 0;
}

static char *dupn(const char *s, size_t n)
{
	char *p = malloc(n + 1);

	if (p) {
		memcpy(p, s, n);
		p[n] = 0;
	}
	return p;
}

/* One char (code point) string, as Rust's char fields. */
static int get_char(struct loader *L, json_t *o, const char *where,
		    const char *key, char *utf8, int *ulen, uint32_t *cp)
{
	const char *s;
	size_t n, bad;
	int r;

	if ((r = get_str(L, o, where, key, 0, &s, &n)))
		return r;
	if (!n || tok_utf8_valid_prefix((const unsigned char *)s, n, &bad) != n)
		return fail(L, -EINVAL, "%s.%s must be a single character",
			    where, key);
	memcpy(utf8, s, n);
	utf8[n] = 0;
	*ulen = (int)n;
	if (cp)
		tok_utf8_next((const unsigned char *)s, n, cp);
	return 0;
}

/* {"String": s} or {"Regex": r}. */
static int get_pattern(struct loader *L, json_t *o, const char *where,
		       struct tok_regex *re, int allow_regex)
{
	json_t *p = json_object_get(o, "pattern"), *v;
	char w[256];
	int literal;

	snprintf(w, sizeof(w), "%s.pattern", where);
	if (!json_is_object(p) || json_object_size(p) != 1)
		return fail(L, -EINVAL,
			    "%s must be {\"String\": ...} or {\"Regex\": ...}",
			    w);
	if ((v = json_object_get(p, "String")))
		literal = 1;
	else if ((v = json_object_get(p, "Regex")))
		literal = 0;
	else
		return fail(L, -ENOTSUP, "%s kind '%s' is not supported", w,
			    json_object_iter_key(json_object_iter(p)));
	if (!json_is_string(v))
		return fail(L, -EINVAL, "%s must hold a string", w);
	if (!literal && !allow_regex)
		return fail(L, -ENOTSUP,
			    "%s: Regex patterns are not supported "
			    "here",
			    w);
	return tok_regex_compile(re, json_string_value(v),
				 json_string_length(v), literal, L->name, w,
				 L->err);
}

static const char *type_of(struct loader *L, json_t *o, const char *where,
			   int *r)
{
	json_t *t;

	*r = 0;
	if (!json_is_object(o)) {
		*r = fail(L, -EINVAL, "%s must be an object or null", where);
		return NULL;
	}
	t = json_object_get(o, "type");
	if (!json_is_string(t)) {
		*r = fail(L, -EINVAL, "%s.type is required", where);
		return NULL;
	}
	return json_string_value(t);
}

static int prepend_scheme(struct loader *L, json_t *o, const char *where,
			  int *out)
{
	json_t *v = json_object_get(o, "prepend_scheme");
	int aps = 1, r;

	if (v && !json_is_null(v)) {
		const char *s = json_string_value(v);
		if (!s)
			return fail(L, -EINVAL,
				    "%s.prepend_scheme must be a string",
				    where);
		if (!strcmp(s, "always"))
			*out = PREPEND_ALWAYS;
		else if (!strcmp(s, "never"))
			*out = PREPEND_NEVER;
		else if (!strcmp(s, "first"))
			*out = PREPEND_FIRST;
		else
			return fail(L, -ENOTSUP,
				    "%s.prepend_scheme '%s' is not supported",
				    where, s);
		return 0;
	}
	/* older files: add_prefix_space */
	if ((r = get_bool(L, o, where, "add_prefix_space", 1, &aps)))
		return r;
	*out = aps ? PREPEND_ALWAYS : PREPEND_NEVER;
	return 0;
}

/* The next zeroed element of a growable array of pipeline steps (at most
 * MAX_STEPS), or NULL. */
static void *new_step(void **arr, int *n, int *cap, size_t esize)
{
	char *p;

	if (*n >= MAX_STEPS)
		return NULL;
	if (*n == *cap) {
		int c = *cap ? *cap * 2 : 4;
		void *g = realloc(*arr, esize * (size_t)c);
		if (!g)
			return NULL;
		*arr = g;
		*cap = c;
	}
	p = (char *)*arr + esize * (size_t)*n;
	memset(p, 0, esize);
	(*n)++;
	return p;
}

/* ------------------------------------------------------------ normalizer */

static struct tok_norm *new_norm(struct loader *L)
{
	return new_step((void **)&L->tok->norms, &L->tok->n_norms,
			&L->n_norm_cap, sizeof(struct tok_norm));
}

static int parse_normalizer(struct loader *L, json_t *o, const char *where,
			    int depth)
{
	static const char *const none[] = {"type", NULL};
	static const char *const seq[] = {"type", "normalizers", NULL};
	static const char *const prep[] = {"type", "prepend", NULL};
	static const char *const repl[] = {"type", "pattern", "content", NULL};
	static const char *const strip[] = {"type", "strip_left", "strip_right",
					    NULL};
	struct tok_norm *nm;
	const char *type, *s;
	size_t n;
	int r;

	if (depth > MAX_DEPTH)
		return fail(L, -EINVAL, "%s: nested too deeply", where);
	if (!(type = type_of(L, o, where, &r)))
		return r;
	if (!strcmp(type, "Sequence")) {
		json_t *a = json_object_get(o, "normalizers"), *v;
		size_t i;
		if ((r = check_keys(L, o, where, seq)))
			return r;
		if (!json_is_array(a))
			return fail(L, -EINVAL,
				    "%s.normalizers must be an array", where);
		json_array_foreach(a, i, v)
		{
			char w[256];
			snprintf(w, sizeof(w), "%s.normalizers[%zu]", where, i);
			if ((r = parse_normalizer(L, v, w, depth + 1)))
				return r;
		}
		return 0;
	}
	if (!(nm = new_norm(L)))
		return L->tok->n_norms >= MAX_STEPS
			   ? fail(L, -EFBIG, "%s: more than %d normalizers",
				  where, MAX_STEPS)
			   : oom(L);
	if (!strcmp(type, "NFC") || !strcmp(type, "NFD") ||
	    !strcmp(type, "NFKC") || !strcmp(type, "NFKD")) {
		nm->type = !strcmp(type, "NFC")	   ? NORM_NFC
			   : !strcmp(type, "NFD")  ? NORM_NFD
			   : !strcmp(type, "NFKC") ? NORM_NFKC
						   : NORM_NFKD;
		return check_keys(L, o, where, none);
	}
	if (!strcmp(type, "Prepend")) {
		nm->type = NORM_PREPEND;
		if ((r = check_keys(L, o, where, prep)) ||
		    (r = get_str(L, o, where, "prepend", 0, &s, &n)))
			return r;
		if (!(nm->str = dupn(s, n)))
			return oom(L);
		nm->str_len = n;
		return 0;
	}
	if (!strcmp(type, "Replace")) {
		nm->type = NORM_REPLACE;
		if ((r = check_keys(L, o, where, repl)) ||
		    (r = get_str(L, o, where, "content", 0, &s, &n)))
			return r;
		if (!(nm->str = dupn(s, n)))
			return oom(L);
		nm->str_len = n;
		return get_pattern(L, o, where, &nm->re, 1);
	}
	if (!strcmp(type, "Strip")) {
		nm->type = NORM_STRIP;
		if ((r = check_keys(L, o, where, strip)) ||
		    (r = get_bool(L, o, where, "strip_left", 1, &nm->left)) ||
		    (r = get_bool(L, o, where, "strip_right", 1, &nm->right)))
			return r;
		return 0;
	}
	L->tok->n_norms--;
	return fail(L, -ENOTSUP, "%s type '%s' is not supported", where, type);
}

/* ------------------------------------------------------------ pre-tok */

static struct tok_pt *new_pt(struct loader *L)
{
	return new_step((void **)&L->tok->pts, &L->tok->n_pts, &L->n_pt_cap,
			sizeof(struct tok_pt));
}

static int parse_pretok(struct loader *L, json_t *o, const char *where,
			int depth)
{
	static const char *const seq[] = {"type", "pretokenizers", NULL};
	static const char *const bl[] = {"type", "add_prefix_space",
					 "trim_offsets", "use_regex", NULL};
	static const char *const split[] = {"type", "pattern", "behavior",
					    "invert", NULL};
	static const char *const ms[] = {
	    "type",  "replacement",	 "prepend_scheme",
	    "split", "add_prefix_space", "str_rep",
	    NULL};
	static const char *const dig[] = {"type", "individual_digits", NULL};
	struct tok_pt *pt;
	const char *type;
	int r;

	if (depth > MAX_DEPTH)
		return fail(L, -EINVAL, "%s: nested too deeply", where);
	if (!(type = type_of(L, o, where, &r)))
		return r;
	if (!strcmp(type, "Sequence")) {
		json_t *a = json_object_get(o, "pretokenizers"), *v;
		size_t i;
		if ((r = check_keys(L, o, where, seq)))
			return r;
		if (!json_is_array(a))
			return fail(L, -EINVAL,
				    "%s.pretokenizers must be an array", where);
		json_array_foreach(a, i, v)
		{
			char w[256];
			snprintf(w, sizeof(w), "%s.pretokenizers[%zu]", where,
				 i);
			if ((r = parse_pretok(L, v, w, depth + 1)))
				return r;
		}
		return 0;
	}
	if (strcmp(type, "ByteLevel") && strcmp(type, "Split") &&
	    strcmp(type, "Metaspace") && strcmp(type, "Digits"))
		return fail(L, -ENOTSUP, "%s type '%s' is not supported", where,
			    type);
	if (!(pt = new_pt(L)))
		return L->tok->n_pts >= MAX_STEPS
			   ? fail(L, -EFBIG, "%s: more than %d pre-tokenizers",
				  where, MAX_STEPS)
			   : oom(L);
	if (!strcmp(type, "ByteLevel")) {
		pt->type = PT_BYTELEVEL;
		if ((r = check_keys(L, o, where, bl)) ||
		    (r = get_bool(L, o, where, "add_prefix_space", 1,
				  &pt->add_prefix_space)) ||
		    (r = get_bool(L, o, where, "use_regex", 1, &pt->use_regex)))
			return r;
		return 0;
	}
	if (!strcmp(type, "Split")) {
		static const char *const names[] = {
		    "Removed", "Isolated", "MergedWithPrevious",
		    "MergedWithNext", "Contiguous"};
		json_t *b = json_object_get(o, "behavior");
		pt->type = PT_SPLIT;
		if ((r = check_keys(L, o, where, split)) ||
		    (r = get_bool(L, o, where, "invert", 0, &pt->invert)))
			return r;
		if (!json_is_string(b))
			return fail(L, -EINVAL, "%s.behavior is required",
				    where);
		pt->behavior = -1;
		for (int i = 0; i < 5; i++)
			if (!strcmp(json_string_value(b), names[i]))
				pt->behavior = i;
		if (pt->behavior < 0)
			return fail(L, -ENOTSUP,
				    "%s.behavior '%s' is not supported", where,
				    json_string_value(b));
		return get_pattern(L, o, where, &pt->re, 1);
	}
	if (!strcmp(type, "Digits")) {
		int ind = 0;
		pt->type = PT_SPLIT;
		pt->behavior = SPLIT_ISOLATED;
		if ((r = check_keys(L, o, where, dig)) ||
		    (r = get_bool(L, o, where, "individual_digits", 0, &ind)))
			return r;
		/* char::is_numeric (Rust's tables); grouped digits are
		 * contiguous runs */
		{
			struct tok_buf pat = {0};
			if (tok_numeric_pattern(&pat, !ind))
				r = oom(L);
			else
				r = tok_regex_compile(&pt->re, pat.p, pat.n, 0,
						      L->name, where, L->err);
			tok_buf_free(&pat);
			return r;
		}
	}
	/* Metaspace */
	pt->type = PT_METASPACE;
	if ((r = check_keys(L, o, where, ms)) ||
	    (r = get_char(L, o, where, "replacement", pt->repl, &pt->repl_len,
			  NULL)) ||
	    (r = prepend_scheme(L, o, where, &pt->prepend_scheme)) ||
	    (r = get_bool(L, o, where, "split", 1, &pt->split)))
		return r;
	if (pt->prepend_scheme == PREPEND_FIRST && L->metaspace_first_pos < 0)
		L->metaspace_first_pos = L->tok->n_pts - 1;
	return tok_regex_compile(&pt->re, pt->repl, (size_t)pt->repl_len, 1,
				 L->name, where, L->err);
}

/* ------------------------------------------------------------ decoder */

static struct tok_dec *new_dec(struct loader *L)
{
	return new_step((void **)&L->tok->decs, &L->tok->n_decs, &L->n_dec_cap,
			sizeof(struct tok_dec));
}

static int get_count(struct loader *L, json_t *o, const char *where,
		     const char *key, size_t *out)
{
	json_t *v = json_object_get(o, key);

	*out = 0;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) > 1000000)
		return fail(L, -EINVAL,
			    "%s.%s must be an integer in [0, 1000000]", where,
			    key);
	*out = (size_t)json_integer_value(v);
	return 0;
}

static int parse_decoder(struct loader *L, json_t *o, const char *where,
			 int depth)
{
	static const char *const none[] = {"type", NULL};
	static const char *const seq[] = {"type", "decoders", NULL};
	static const char *const bl[] = {"type", "add_prefix_space",
					 "trim_offsets", "use_regex", NULL};
	static const char *const ms[] = {
	    "type",  "replacement",	 "prepend_scheme",
	    "split", "add_prefix_space", "str_rep",
	    NULL};
	static const char *const repl[] = {"type", "pattern", "content", NULL};
	static const char *const strip[] = {"type", "content", "start", "stop",
					    NULL};
	struct tok_dec *d;
	const char *type, *s;
	size_t n;
	int r;

	if (depth > MAX_DEPTH)
		return fail(L, -EINVAL, "%s: nested too deeply", where);
	if (!(type = type_of(L, o, where, &r)))
		return r;
	if (!strcmp(type, "Sequence")) {
		json_t *a = json_object_get(o, "decoders"), *v;
		size_t i;
		if ((r = check_keys(L, o, where, seq)))
			return r;
		if (!json_is_array(a))
			return fail(L, -EINVAL, "%s.decoders must be an array",
				    where);
		json_array_foreach(a, i, v)
		{
			char w[256];
			snprintf(w, sizeof(w), "%s.decoders[%zu]", where, i);
			if ((r = parse_decoder(L, v, w, depth + 1)))
				return r;
		}
		return 0;
	}
	if (strcmp(type, "ByteLevel") && strcmp(type, "Metaspace") &&
	    strcmp(type, "Replace") && strcmp(type, "ByteFallback") &&
	    strcmp(type, "Fuse") && strcmp(type, "Strip"))
		return fail(L, -ENOTSUP, "%s type '%s' is not supported", where,
			    type);
	if (!(d = new_dec(L)))
		return L->tok->n_decs >= MAX_STEPS
			   ? fail(L, -EFBIG, "%s: more than %d decoders", where,
				  MAX_STEPS)
			   : oom(L);
	if (!strcmp(type, "ByteLevel")) {
		d->type = DEC_BYTELEVEL;
		return check_keys(L, o, where, bl);
	}
	if (!strcmp(type, "ByteFallback") || !strcmp(type, "Fuse")) {
		d->type = !strcmp(type, "Fuse") ? DEC_FUSE : DEC_BYTEFALLBACK;
		return check_keys(L, o, where, none);
	}
	if (!strcmp(type, "Strip")) {
		char u[8];
		int ul;
		d->type = DEC_STRIP;
		if ((r = check_keys(L, o, where, strip)) ||
		    (r = get_char(L, o, where, "content", u, &ul,
				  &d->strip_char)) ||
		    (r = get_count(L, o, where, "start", &d->start)) ||
		    (r = get_count(L, o, where, "stop", &d->stop)))
			return r;
		return 0;
	}
	if (!strcmp(type, "Metaspace")) {
		char u[8];
		int ul;
		d->type = DEC_METASPACE;
		if ((r = check_keys(L, o, where, ms)) ||
		    (r = get_char(L, o, where, "replacement", u, &ul, NULL)) ||
		    (r = prepend_scheme(L, o, where, &d->prepend_scheme)))
			return r;
		if (!(d->pat = dupn(u, (size_t)ul)))
			return oom(L);
		d->pat_len = (size_t)ul;
		return 0;
	}
	/* Replace: String patterns only */
	{
		json_t *p = json_object_get(o, "pattern"), *v;
		d->type = DEC_REPLACE;
		if ((r = check_keys(L, o, where, repl)) ||
		    (r = get_str(L, o, where, "content", 0, &s, &n)))
			return r;
		if (!(d->content = dupn(s, n)))
			return oom(L);
		d->content_len = n;
		if (!json_is_object(p) || json_object_size(p) != 1)
			return fail(L, -EINVAL,
				    "%s.pattern must be {\"String\": ...}",
				    where);
		v = json_object_get(p, "String");
		if (!v)
			return fail(L, -ENOTSUP,
				    "%s.pattern: only String patterns are "
				    "supported in decoders",
				    where);
		if (!json_is_string(v))
			return fail(L, -EINVAL,
				    "%s.pattern.String must be a string",
				    where);
		if (!(d->pat =
			  dupn(json_string_value(v), json_string_length(v))))
			return oom(L);
		d->pat_len = json_string_length(v);
		return 0;
	}
}

/* ------------------------------------------------------------ post */

static int push_ids(struct loader *L, int32_t **v, int *n, const int32_t *add,
		    int k, int front)
{
	int32_t *p;

	if (k == 0)
		return 0;
	if (*n + k > 4096)
		return fail(L, -EFBIG,
			    "post_processor adds more than 4096 tokens");
	p = realloc(*v, sizeof(int32_t) * (size_t)(*n + k + 1));
	if (!p)
		return oom(L);
	if (front) {
		memmove(p + k, p, sizeof(int32_t) * (size_t)*n);
		memcpy(p, add, sizeof(int32_t) * (size_t)k);
	} else {
		memcpy(p + *n, add, sizeof(int32_t) * (size_t)k);
	}
	*v = p;
	*n += k;
	return 0;
}

static int get_id(struct loader *L, json_t *v, const char *where, int32_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) >= (json_int_t)TACO_TOK_MAX_VOCAB)
		return fail(L, -EINVAL, "%s must be an id in [0, %u)", where,
			    TACO_TOK_MAX_VOCAB);
	*out = (int32_t)json_integer_value(v);
	return 0;
}

/* [token, id] of Bert/RobertaProcessing */
static int pair_id(struct loader *L, json_t *o, const char *where,
		   const char *key, int32_t *out)
{
	json_t *a = json_object_get(o, key);
	char w[256];

	snprintf(w, sizeof(w), "%s.%s", where, key);
	if (!json_is_array(a) || json_array_size(a) != 2 ||
	    !json_is_string(json_array_get(a, 0)))
		return fail(L, -EINVAL, "%s must be [token, id]", w);
	return get_id(L, json_array_get(a, 1), w, out);
}

static int parse_template(struct loader *L, json_t *o, const char *where,
			  int32_t **pre, int *npre, int32_t **suf, int *nsuf)
{
	json_t *single = json_object_get(o, "single");
	json_t *sp = json_object_get(o, "special_tokens"), *item;
	int seen = 0, r;
	size_t i;

	if (!json_is_array(single))
		return fail(L, -EINVAL, "%s.single must be an array", where);
	if (sp && !json_is_null(sp) && !json_is_object(sp))
		return fail(L, -EINVAL, "%s.special_tokens must be an object",
			    where);
	json_array_foreach(single, i, item)
	{
		json_t *s = json_object_get(item, "SpecialToken");
		json_t *q = json_object_get(item, "Sequence");
		char w[256];

		snprintf(w, sizeof(w), "%s.single[%zu]", where, i);
		if (!json_is_object(item) || json_object_size(item) != 1 ||
		    (!s && !q))
			return fail(L, -EINVAL,
				    "%s must be {\"SpecialToken\": ...} or "
				    "{\"Sequence\": ...}",
				    w);
		if (q) {
			json_t *id = json_object_get(q, "id");
			if (!json_is_string(id) ||
			    strcmp(json_string_value(id), "A"))
				return fail(L, -ENOTSUP,
					    "%s: only sequence A is supported "
					    "in the single template",
					    w);
			if (seen++)
				return fail(L, -ENOTSUP,
					    "%s: sequence A appears twice", w);
			continue;
		}
		{
			json_t *name = json_object_get(s, "id"), *ent, *ids, *v;
			size_t k;
			if (!json_is_string(name))
				return fail(L, -EINVAL,
					    "%s.SpecialToken.id "
					    "must be a string",
					    w);
			ent = sp ? json_object_get(sp, json_string_value(name))
				 : NULL;
			if (!json_is_object(ent))
				return fail(L, -EINVAL,
					    "%s: special token '%s' is missing "
					    "from special_tokens",
					    w, json_string_value(name));
			ids = json_object_get(ent, "ids");
			if (!json_is_array(ids))
				return fail(L, -EINVAL,
					    "%s.special_tokens['%s'].ids must "
					    "be an array",
					    where, json_string_value(name));
			json_array_foreach(ids, k, v)
			{
				int32_t id = -1;
				if ((r = get_id(L, v, w, &id)))
					return r;
				if (seen ? (r = push_ids(L, suf, nsuf, &id, 1,
							 0))
					 : (r = push_ids(L, pre, npre, &id, 1,
							 0)))
					return r;
			}
		}
	}
	if (!seen)
		return fail(L, -EINVAL, "%s.single lacks the sequence $A",
			    where);
	return 0;
}

static int parse_post(struct loader *L, json_t *o, const char *where, int depth)
{
	static const char *const seq[] = {"type", "processors", NULL};
	static const char *const bl[] = {"type", "add_prefix_space",
					 "trim_offsets", "use_regex", NULL};
	static const char *const tp[] = {"type", "single", "pair",
					 "special_tokens", NULL};
	static const char *const bert[] = {"type", "sep", "cls", NULL};
	static const char *const rob[] = {
	    "type", "sep", "cls", "trim_offsets", "add_prefix_space", NULL};
	taco_tok *t = L->tok;
	const char *type;
	int32_t *pre = NULL, *suf = NULL;
	int npre = 0, nsuf = 0, r;

	if (depth > MAX_DEPTH)
		return fail(L, -EINVAL, "%s: nested too deeply", where);
	if (!(type = type_of(L, o, where, &r)))
		return r;
	if (!strcmp(type, "Sequence")) {
		json_t *a = json_object_get(o, "processors"), *v;
		size_t i;
		if ((r = check_keys(L, o, where, seq)))
			return r;
		if (!json_is_array(a))
			return fail(L, -EINVAL,
				    "%s.processors must be an array", where);
		json_array_foreach(a, i, v)
		{
			char w[256];
			snprintf(w, sizeof(w), "%s.processors[%zu]", where, i);
			if ((r = parse_post(L, v, w, depth + 1)))
				return r;
		}
		return 0;
	}
	if (!strcmp(type, "ByteLevel"))
		return check_keys(L, o, where, bl);
	if (!strcmp(type, "TemplateProcessing")) {
		if ((r = check_keys(L, o, where, tp)) ||
		    (r = parse_template(L, o, where, &pre, &npre, &suf, &nsuf)))
			goto out;
	} else if (!strcmp(type, "BertProcessing") ||
		   !strcmp(type, "RobertaProcessing")) {
		int32_t cls, sep;
		if ((r = check_keys(L, o, where,
				    type[0] == 'B' ? bert : rob)) ||
		    (r = pair_id(L, o, where, "cls", &cls)) ||
		    (r = pair_id(L, o, where, "sep", &sep)) ||
		    (r = push_ids(L, &pre, &npre, &cls, 1, 0)) ||
		    (r = push_ids(L, &suf, &nsuf, &sep, 1, 0)))
			goto out;
	} else {
		return fail(L, -ENOTSUP, "%s type '%s' is not supported", where,
			    type);
	}
	/* wraps what the earlier processors made */
	if ((r = push_ids(L, &t->post_pre, &t->n_post_pre, pre, npre, 1)) ||
	    (r = push_ids(L, &t->post_suf, &t->n_post_suf, suf, nsuf, 0)))
		goto out;
out:
	free(pre);
	free(suf);
	return r;
}

/* ------------------------------------------------------------ model */

static int parse_model(struct loader *L, json_t *m)
{
	static const char *const keys[] = {"type",
					   "dropout",
					   "unk_token",
					   "continuing_subword_prefix",
					   "end_of_word_suffix",
					   "fuse_unk",
					   "byte_fallback",
					   "ignore_merges",
					   "vocab",
					   "merges",
					   NULL};
	taco_tok *t = L->tok;
	json_t *vocab, *merges, *v, *dropout;
	const char *type, *key, *s;
	size_t n, i;
	int64_t max_id = -1;
	int r;

	if (!json_is_object(m))
		return fail(L, -EINVAL, "model is required (an object)");
	if (!json_is_string(json_object_get(m, "type")))
		return fail(L, -EINVAL, "model.type is required");
	type = json_string_value(json_object_get(m, "type"));
	if (strcmp(type, "BPE"))
		return fail(L, -ENOTSUP, "model type '%s' is not supported",
			    type);
	if ((r = check_keys(L, m, "model", keys)))
		return r;
	dropout = json_object_get(m, "dropout");
	if (dropout && !json_is_null(dropout) &&
	    !(json_is_number(dropout) && json_number_value(dropout) == 0))
		return fail(L, -ENOTSUP,
			    "model.dropout is not supported (must be null)");
	if ((r = get_bool(L, m, "model", "fuse_unk", 0, &t->fuse_unk)) ||
	    (r = get_bool(L, m, "model", "byte_fallback", 0,
			  &t->byte_fallback)) ||
	    (r = get_bool(L, m, "model", "ignore_merges", 0,
			  &t->ignore_merges)))
		return r;
	if ((r = get_str(L, m, "model", "continuing_subword_prefix", 1, &s,
			 &n)))
		return r;
	if (s && n && !(t->cont_prefix = dupn(s, n)))
		return oom(L);
	t->cont_prefix_len = n;
	if ((r = get_str(L, m, "model", "end_of_word_suffix", 1, &s, &n)))
		return r;
	if (s && n && !(t->word_suffix = dupn(s, n)))
		return oom(L);
	t->word_suffix_len = n;

	vocab = json_object_get(m, "vocab");
	if (!json_is_object(vocab))
		return fail(L, -EINVAL,
			    "model.vocab is required (an object of "
			    "token: id)");
	if (json_object_size(vocab) > TACO_TOK_MAX_VOCAB)
		return fail(L, -EFBIG,
			    "model.vocab has %zu tokens, over the "
			    "limit of %u",
			    json_object_size(vocab), TACO_TOK_MAX_VOCAB);
	json_object_foreach(vocab, key, v)
	{
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) >= (json_int_t)TACO_TOK_MAX_VOCAB)
			return fail(L, -EINVAL,
				    "model.vocab['%.200s'] must be an id in "
				    "[0, %u)",
				    key, TACO_TOK_MAX_VOCAB);
		if (json_integer_value(v) > max_id)
			max_id = json_integer_value(v);
	}
	if ((r = tok_vocab_init(&t->vocab, (uint32_t)(max_id + 1),
				(uint32_t)json_object_size(vocab))))
		return oom(L);
	json_object_foreach(vocab, key, v)
	{
		size_t kl = strlen(key);
		int32_t other;
		int32_t id = (int32_t)json_integer_value(v);
		if (kl > TACO_TOK_MAX_TOKEN_LEN)
			return fail(L, -EFBIG,
				    "model.vocab: token '%.40s...' is longer "
				    "than %d bytes",
				    key, TACO_TOK_MAX_TOKEN_LEN);
		if (t->vocab.off[id] != TOK_NONE)
			return fail(L, -EINVAL,
				    "model.vocab: id %d is used by '%.200s' "
				    "and '%.200s'",
				    id, t->vocab.pool + t->vocab.off[id], key);
		r = tok_vocab_add(&t->vocab, id, key, kl, &other);
		if (r)
			return r == -ENOMEM ? oom(L)
					    : fail(L, -EINVAL,
						   "model.vocab: duplicate "
						   "token '%.200s'",
						   key);
	}
	/* unk, byte fallback */
	if ((r = get_str(L, m, "model", "unk_token", 1, &s, &n)))
		return r;
	t->unk_id = -1;
	if (s) {
		t->unk_id = tok_vocab_find(&t->vocab, s, n);
		if (t->unk_id < 0)
			return fail(L, -EINVAL,
				    "model.unk_token '%.200s' is not in the "
				    "vocab",
				    s);
	}
	for (int b = 0; b < 256; b++) {
		char name[8];
		snprintf(name, sizeof(name), "<0x%02X>", b);
		t->fallback_id[b] = tok_vocab_find(&t->vocab, name, 6);
	}
	/* merges */
	merges = json_object_get(m, "merges");
	if (!merges || json_is_null(merges))
		merges = NULL;
	else if (!json_is_array(merges))
		return fail(L, -EINVAL, "model.merges must be an array");
	n = merges ? json_array_size(merges) : 0;
	if (n > TACO_TOK_MAX_MERGES)
		return fail(L, -EFBIG,
			    "model.merges has %zu entries, over the limit of "
			    "%u",
			    n, TACO_TOK_MAX_MERGES);
	{
		uint32_t cap = 16;
		while (cap < n * 2 + 16)
			cap *= 2;
		t->merges.slots = malloc(sizeof(struct tok_merge) * cap);
		if (!t->merges.slots)
			return oom(L);
		for (uint32_t k = 0; k < cap; k++)
			t->merges.slots[k].key = UINT64_MAX;
		t->merges.mask = cap - 1;
	}
	for (i = 0; i < n; i++) {
		json_t *e = json_array_get(merges, i);
		const char *a, *b;
		size_t al, bl;
		char *buf;
		int32_t ia, ib, im;

		if (json_is_string(e)) {
			const char *sp, *x = json_string_value(e);
			size_t xl = json_string_length(e);
			sp = memchr(x, ' ', xl);
			if (!sp ||
			    memchr(sp + 1, ' ', xl - (size_t)(sp - x) - 1))
				return fail(L, -EINVAL,
					    "model.merges[%zu] '%.200s' must "
					    "be two tokens separated by one "
					    "space",
					    i, x);
			a = x;
			al = (size_t)(sp - x);
			b = sp + 1;
			bl = xl - al - 1;
		} else if (json_is_array(e) && json_array_size(e) == 2 &&
			   json_is_string(json_array_get(e, 0)) &&
			   json_is_string(json_array_get(e, 1))) {
			a = json_string_value(json_array_get(e, 0));
			al = json_string_length(json_array_get(e, 0));
			b = json_string_value(json_array_get(e, 1));
			bl = json_string_length(json_array_get(e, 1));
		} else {
			return fail(L, -EINVAL,
				    "model.merges[%zu] must be \"a b\" or "
				    "[\"a\", \"b\"]",
				    i);
		}
		ia = tok_vocab_find(&t->vocab, a, al);
		ib = tok_vocab_find(&t->vocab, b, bl);
		if (ia < 0 || ib < 0)
			return fail(L, -EINVAL,
				    "model.merges[%zu]: token '%.*s' is not "
				    "in the vocab",
				    i,
				    (int)(ia < 0 ? (al < 200 ? al : 200)
						 : (bl < 200 ? bl : 200)),
				    ia < 0 ? a : b);
		if (bl < t->cont_prefix_len ||
		    (t->cont_prefix_len &&
		     ((unsigned char)b[t->cont_prefix_len] & 0xC0) == 0x80))
			return fail(L, -EINVAL,
				    "model.merges[%zu]: '%.200s' is shorter "
				    "than continuing_subword_prefix",
				    i, b);
		buf = malloc(al + bl + 1);
		if (!buf)
			return oom(L);
		memcpy(buf, a, al);
		memcpy(buf + al, b + t->cont_prefix_len,
		       bl - t->cont_prefix_len);
		im = tok_vocab_find(&t->vocab, buf,
				    al + bl - t->cont_prefix_len);
		if (im < 0) {
			buf[al + bl - t->cont_prefix_len] = 0;
			r = fail(L, -EINVAL,
				 "model.merges[%zu]: the merged token "
				 "'%.200s' is not in the vocab",
				 i, buf);
			free(buf);
			return r;
		}
		free(buf);
		tok_merges_put(&t->merges, ia, ib, (uint32_t)i, im);
	}
	return 0;
}

/* ------------------------------------------------------------ added */

static int parse_added(struct loader *L, json_t *a)
{
	static const char *const keys[] = {"id",      "content", "single_word",
					   "lstrip",  "rstrip",	 "normalized",
					   "special", NULL};
	taco_tok *t = L->tok;
	json_t *e;
	size_t i;
	int64_t max_added = -1;
	int r;

	if (!a || json_is_null(a))
		return 0;
	if (!json_is_array(a))
		return fail(L, -EINVAL, "added_tokens must be an array");
	if (json_array_size(a) > TACO_TOK_MAX_ADDED)
		return fail(L, -EFBIG,
			    "added_tokens has %zu entries, over the limit of "
			    "%d",
			    json_array_size(a), TACO_TOK_MAX_ADDED);
	t->added = calloc(json_array_size(a) + 1, sizeof(struct tok_added));
	if (!t->added)
		return oom(L);
	json_array_foreach(a, i, e)
	{
		struct tok_added *x = &t->added[t->n_added];
		char w[64];
		const char *s;
		size_t n;
		int32_t id = -1, expect = -1;
		int b = 0;

		snprintf(w, sizeof(w), "added_tokens[%zu]", i);
		if (!json_is_object(e))
			return fail(L, -EINVAL, "%s must be an object", w);
		if ((r = check_keys(L, e, w, keys)) ||
		    (r = get_str(L, e, w, "content", 0, &s, &n)))
			return r;
		if (!n)
			return fail(L, -EINVAL, "%s.content is empty", w);
		if ((r = get_id(L, json_object_get(e, "id"), w, &id)))
			return r;
		/* the id tokenizers' add_tokens gives it */
		for (int k = 0; k < t->n_added; k++)
			if (t->added[k].len == n &&
			    !memcmp(t->added[k].content, s, n)) {
				if (t->added[k].id != id)
					return fail(L, -EINVAL,
						    "%s: '%.200s' appears "
						    "twice with ids %d and %d",
						    w, s, t->added[k].id, id);
				expect = -2;
			}
		if (expect == -2)
			continue;
		expect = tok_vocab_find(&t->vocab, s, n);
		if (expect < 0) {
			int64_t next = t->vocab.count;
			if (max_added + 1 > next)
				next = max_added + 1;
			expect = (int32_t)next;
		}
		if (id != expect)
			return fail(L, -EINVAL,
				    "%s: id %d of '%.200s' differs from the id "
				    "tokenizers assigns it (%d)",
				    w, id, s, expect);
		if (id > max_added)
			max_added = id;
		x->id = id;
		x->len = (uint32_t)n;
		if (!(x->content = dupn(s, n)))
			return oom(L);
		if ((r = get_bool(L, e, w, "special", 0, &b)))
			return r;
		x->special = (uint8_t)b;
		if ((r = get_bool(L, e, w, "single_word", 0, &b)))
			return r;
		x->single_word = (uint8_t)b;
		if ((r = get_bool(L, e, w, "lstrip", 0, &b)))
			return r;
		x->lstrip = (uint8_t)b;
		if ((r = get_bool(L, e, w, "rstrip", 0, &b)))
			return r;
		x->rstrip = (uint8_t)b;
		if ((r = get_bool(L, e, w, "normalized", !x->special, &b)))
			return r;
		x->normalized = (uint8_t)b;
		t->n_added++;
	}
	return 0;
}

/* Tries and lookups of the added tokens, after the normalizer is known. */
static int build_added(struct loader *L)
{
	taco_tok *t = L->tok;
	struct tok_buf nb = {0}, tmp = {0};
	struct tok_matcher m = {0};
	int r = 0;

	t->trie_raw.empty = t->trie_norm.empty = 1;
	m.md = pcre2_match_data_create(1, NULL);
	m.mc = t->mctx;
	if (!m.md)
		return oom(L);
	for (int i = 0; i < t->n_added && !r; i++) {
		struct tok_added *x = &t->added[i];
		if (x->normalized && t->n_norms) {
			taco_err e2;
			L->has_normalized_added = 1;
			if ((r = tok_normalize(t, &m, x->content, x->len, &nb,
					       &tmp, &e2))) {
				r = fail(L, r,
					 "added_tokens: normalizing "
					 "'%.200s': %s",
					 x->content, e2.msg);
				break;
			}
			x->match_len = (uint32_t)nb.n;
			if (!(x->match = dupn(nb.p ? nb.p : "", nb.n))) {
				r = oom(L);
				break;
			}
		} else {
			x->match = x->content;
			x->match_len = x->len;
		}
		if (x->normalized)
			L->has_normalized_added = 1;
		if (x->match_len &&
		    tok_trie_add(x->normalized ? &t->trie_norm : &t->trie_raw,
				 x->match, x->match_len, i))
			r = oom(L);
	}
	pcre2_match_data_free(m.md);
	tok_buf_free(&nb);
	tok_buf_free(&tmp);
	if (r)
		return r;
	for (int i = 0; i < t->n_added; i++) {
		struct tok_added *x = &t->added[i];
		if (x->match == x->content) {
			x->skip = x->special;
			continue;
		}
		for (int k = 0; k < t->n_added && !x->skip; k++)
			x->skip = t->added[k].special &&
				  t->added[k].len == x->match_len &&
				  !memcmp(t->added[k].content, x->match,
					  x->match_len);
	}
	/* by id */
	t->n_added_by_id = (uint32_t)t->vocab_size;
	t->added_by_id = malloc(sizeof(int32_t) * (t->n_added_by_id + 1));
	if (!t->added_by_id)
		return oom(L);
	for (uint32_t i = 0; i < t->n_added_by_id; i++)
		t->added_by_id[i] = -1;
	for (int i = 0; i < t->n_added; i++)
		if (t->added_by_id[t->added[i].id] < 0)
			t->added_by_id[t->added[i].id] = i;
	return 0;
}

/* Raw-byte vocab for byte-level models. */
static int build_rvocab(struct loader *L)
{
	taco_tok *t = L->tok;
	char *raw = malloc(TACO_TOK_MAX_TOKEN_LEN + 1);

	if (!raw ||
	    tok_vocab_init(&t->rvocab, t->vocab.n_ids, t->vocab.count)) {
		free(raw);
		return oom(L);
	}
	for (uint32_t id = 0; id < t->vocab.n_ids; id++) {
		const unsigned char *s;
		size_t n, k = 0, i = 0;
		int32_t other;

		if (t->vocab.off[id] == TOK_NONE)
			continue;
		s = (const unsigned char *)t->vocab.pool + t->vocab.off[id];
		n = t->vocab.len[id];
		int all = 1;
		while (i < n) {
			uint32_t cp;
			int b;
			i += (size_t)tok_utf8_next(s + i, n - i, &cp);
			b = tok_char_byte(cp);
			if (b < 0) {
				all = 0;
				break;
			}
			raw[k++] = (char)b;
		}
		if (!all)
			continue;
		if (tok_vocab_add(&t->rvocab, (int32_t)id, raw, k, &other) ==
		    -ENOMEM) {
			free(raw);
			return oom(L);
		}
	}
	free(raw);
	for (int b = 0; b < 256; b++) {
		char u[4];
		int l = tok_utf8_put(tok_byte_char[b], u);
		t->byte_id[b] = tok_vocab_find(&t->vocab, u, (size_t)l);
	}
	t->has_rvocab = 1;
	return 0;
}

/* ------------------------------------------------------------ load */

void taco_tok_free(taco_tok *t)
{
	if (!t)
		return;
	free(t->name);
	tok_vocab_free(&t->vocab);
	tok_vocab_free(&t->rvocab);
	free(t->merges.slots);
	free(t->cont_prefix);
	free(t->word_suffix);
	for (int i = 0; i < t->n_norms; i++) {
		free(t->norms[i].str);
		tok_regex_free(&t->norms[i].re);
	}
	free(t->norms);
	for (int i = 0; i < t->n_pts; i++)
		tok_regex_free(&t->pts[i].re);
	free(t->pts);
	tok_regex_free(&t->gpt2_re);
	free(t->post_pre);
	free(t->post_suf);
	for (int i = 0; i < t->n_decs; i++) {
		free(t->decs[i].pat);
		free(t->decs[i].content);
	}
	free(t->decs);
	for (int i = 0; i < t->n_added; i++) {
		if (t->added[i].match != t->added[i].content)
			free(t->added[i].match);
		free(t->added[i].content);
	}
	free(t->added);
	free(t->added_by_id);
	tok_trie_free(&t->trie_raw);
	tok_trie_free(&t->trie_norm);
	for (int i = 0; i < 4; i++)
		free(t->qc[i]);
	if (t->mctx)
		pcre2_match_context_free(t->mctx);
	tok_work_pool_free(t);
	if (t->cache)
		pthread_mutex_destroy(&t->cache_lock);
	free(t->cache);
	free(t);
}

static int parse_root(struct loader *L, json_t *root)
{
	static const char *const keys[] = {"version",	     "truncation",
					   "padding",	     "added_tokens",
					   "normalizer",     "pre_tokenizer",
					   "post_processor", "decoder",
					   "model",	     NULL};
	taco_tok *t = L->tok;
	json_t *v;
	int r, need_nf[4] = {0};

	if (!json_is_object(root))
		return fail(L, -EINVAL, "the top level must be an object");
	if ((r = check_keys(L, root, "tokenizer", keys)))
		return r;
	v = json_object_get(root, "truncation");
	if (v && !json_is_null(v))
		return fail(L, -ENOTSUP,
			    "truncation is not supported (must be null)");
	v = json_object_get(root, "padding");
	if (v && !json_is_null(v))
		return fail(L, -ENOTSUP,
			    "padding is not supported (must be null)");
	if ((r = parse_model(L, json_object_get(root, "model"))))
		return r;
	if ((r = parse_added(L, json_object_get(root, "added_tokens"))))
		return r;
	v = json_object_get(root, "normalizer");
	if (v && !json_is_null(v) &&
	    (r = parse_normalizer(L, v, "normalizer", 0)))
		return r;
	v = json_object_get(root, "pre_tokenizer");
	if (v && !json_is_null(v) &&
	    (r = parse_pretok(L, v, "pre_tokenizer", 0)))
		return r;
	v = json_object_get(root, "post_processor");
	if (v && !json_is_null(v) &&
	    (r = parse_post(L, v, "post_processor", 0)))
		return r;
	v = json_object_get(root, "decoder");
	if (v && !json_is_null(v)) {
		t->has_decoder = 1;
		if ((r = parse_decoder(L, v, "decoder", 0)))
			return r;
	}
	for (int i = 0; i < t->n_norms; i++)
		if (t->norms[i].type >= NORM_NFC &&
		    t->norms[i].type <= NORM_NFKD)
			need_nf[t->norms[i].type] = 1;
	if (tok_unicode_init(t, need_nf))
		return oom(L);
	t->mctx = pcre2_match_context_create(NULL);
	if (!t->mctx)
		return oom(L);
	/* bound the work of one regex match (the patterns come from the
	 * file) */
	pcre2_set_match_limit(t->mctx, 10000000);
	pcre2_set_depth_limit(t->mctx, 100000);
	pcre2_set_heap_limit(t->mctx, 64 * 1024);
	for (int i = 0; i < t->n_pts; i++)
		if (t->pts[i].type == PT_BYTELEVEL && t->pts[i].use_regex &&
		    !t->gpt2_re.code &&
		    (r = tok_regex_compile(&t->gpt2_re, GPT2_PATTERN,
					   strlen(GPT2_PATTERN), 0, L->name,
					   "ByteLevel", L->err)))
			return r;
	/* vocab size: highest id + 1 */
	t->vocab_size = (int32_t)t->vocab.n_ids;
	for (int i = 0; i < t->n_added; i++)
		if (t->added[i].id + 1 > t->vocab_size)
			t->vocab_size = t->added[i].id + 1;
	for (int i = 0; i < t->n_post_pre; i++)
		if (t->post_pre[i] >= t->vocab_size)
			return fail(L, -EINVAL,
				    "post_processor: id %d is outside the "
				    "vocab",
				    t->post_pre[i]);
	for (int i = 0; i < t->n_post_suf; i++)
		if (t->post_suf[i] >= t->vocab_size)
			return fail(L, -EINVAL,
				    "post_processor: id %d is outside the "
				    "vocab",
				    t->post_suf[i]);
	if ((r = build_added(L)))
		return r;
	if (L->metaspace_first_pos > 0)
		return fail(L, -ENOTSUP,
			    "pre_tokenizer: Metaspace with prepend_scheme "
			    "'first' is only supported as the first "
			    "pre-tokenizer");
	if (L->metaspace_first_pos == 0 && t->n_norms &&
	    L->has_normalized_added)
		return fail(L, -ENOTSUP,
			    "pre_tokenizer: Metaspace with prepend_scheme "
			    "'first' together with a normalizer and "
			    "normalized added tokens is not supported");
	/* byte-level model read from raw bytes */
	if (t->n_pts && t->pts[t->n_pts - 1].type == PT_BYTELEVEL &&
	    !t->cont_prefix && !t->word_suffix) {
		if ((r = build_rvocab(L)))
			return r;
		t->bytelevel_last = 1;
	}
	/* special ids from the post-processor */
	t->special.bos = t->n_post_pre == 1 ? t->post_pre[0] : -1;
	t->special.eos =
	    t->n_post_suf >= 1 ? t->post_suf[t->n_post_suf - 1] : -1;
	t->special.pad = -1;
	t->special.unk = t->unk_id;
	t->cache = calloc(TOK_CACHE_SLOTS, sizeof(struct tok_cache_entry));
	if (!t->cache || pthread_mutex_init(&t->cache_lock, NULL)) {
		free(t->cache);
		t->cache = NULL;
		return oom(L);
	}
	return 0;
}

int tok_load_json(struct json_t *root, const char *name, taco_tok **out,
		  taco_err *err)
{
	struct loader L = {0};
	int r;

	*out = NULL;
	L.tok = calloc(1, sizeof(taco_tok));
	L.name = name;
	L.err = err;
	L.metaspace_first_pos = -1;
	if (!L.tok || !(L.tok->name = strdup(name))) {
		taco_tok_free(L.tok);
		return taco_err_set(err, -ENOMEM, "%s: out of memory", name);
	}
	L.tok->unk_id = -1;
	if ((r = parse_root(&L, root))) {
		taco_tok_free(L.tok);
		return r;
	}
	*out = L.tok;
	return 0;
}

int taco_tok_load_buffer(const char *json, size_t len, const char *name,
			 taco_tok **out, taco_err *err)
{
	json_error_t je;
	json_t *root;
	int r;

	*out = NULL;
	if (!name)
		name = "tokenizer.json";
	if (len > TACO_TOK_MAX_FILE)
		return taco_err_set(err, -EFBIG,
				    "%s: %zu bytes, over the limit of %u", name,
				    len, TACO_TOK_MAX_FILE);
	root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return taco_err_set(err, -EINVAL,
				    "%s: malformed JSON at line %d column %d: "
				    "%s",
				    name, je.line, je.column, je.text);
	r = tok_load_json(root, name, out, err);
	json_decref(root);
	return r;
}

int tok_read_all(const char *path, char **out, size_t *len, taco_err *err)
{
	struct stat st;
	FILE *f;
	char *buf;

	*out = NULL;
	if (stat(path, &st))
		return taco_err_set(err, -errno, "%s: %s", path,
				    strerror(errno));
	if ((uint64_t)st.st_size > TACO_TOK_MAX_FILE)
		return taco_err_set(err, -EFBIG,
				    "%s: %lld bytes, over the limit of %u "
				    "bytes",
				    path, (long long)st.st_size,
				    TACO_TOK_MAX_FILE);
	f = fopen(path, "rb");
	if (!f)
		return taco_err_set(err, -errno, "%s: %s", path,
				    strerror(errno));
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		fclose(f);
		return taco_err_set(err, -ENOMEM, "%s: out of memory", path);
	}
	*len = fread(buf, 1, (size_t)st.st_size, f);
	if (ferror(f) || *len != (size_t)st.st_size) {
		fclose(f);
		free(buf);
		return taco_err_set(err, -EIO, "%s: read error", path);
	}
	fclose(f);
	buf[*len] = 0;
	*out = buf;
	return 0;
}

/* bos_token etc. of tokenizer_config.json: a string, {"content": ...} or
 * null. */
static int config_token(taco_tok *t, json_t *root, const char *path,
			const char *key, int32_t *out, taco_err *err)
{
	json_t *v = json_object_get(root, key);

	if (!v || json_is_null(v))
		return 0;
	if (json_is_object(v))
		v = json_object_get(v, "content");
	if (!json_is_string(v))
		return taco_err_set(err, -EINVAL,
				    "%s: %s must be a string, "
				    "{\"content\": ...} or null",
				    path, key);
	*out = taco_tok_token_to_id(t, json_string_value(v),
				    json_string_length(v));
	if (*out < 0)
		return taco_err_set(err, -EINVAL,
				    "%s: %s '%.200s' is not in the vocabulary",
				    path, key, json_string_value(v));
	return 0;
}

static int load_config(taco_tok *t, const char *path, taco_err *err)
{
	json_error_t je;
	json_t *root;
	size_t len;
	char *buf;
	taco_tok_special s = {-1, -1, -1, t->unk_id};
	int r;

	if ((r = tok_read_all(path, &buf, &len, err)))
		return r;
	/* model_max_length is often 1e30, too big for a json integer */
	root = json_loadb(buf, len, JSON_DECODE_INT_AS_REAL, &je);
	free(buf);
	if (!root)
		return taco_err_set(err, -EINVAL,
				    "%s: malformed JSON at line %d column %d: "
				    "%s",
				    path, je.line, je.column, je.text);
	if (!json_is_object(root))
		r = taco_err_set(err, -EINVAL, "%s: must be an object", path);
	else if (!(r = config_token(t, root, path, "bos_token", &s.bos, err)) &&
		 !(r = config_token(t, root, path, "eos_token", &s.eos, err)) &&
		 !(r = config_token(t, root, path, "pad_token", &s.pad, err)) &&
		 !(r = config_token(t, root, path, "unk_token", &s.unk, err)))
		t->special = s;
	json_decref(root);
	return r;
}

int taco_tok_dir_has_tokenizer(const char *dir)
{
	char file[4200];
	struct stat st;

	snprintf(file, sizeof(file), "%s/tokenizer.json", dir);
	if (stat(file, &st) == 0)
		return 1;
	snprintf(file, sizeof(file), "%s/vocab.json", dir);
	return stat(file, &st) == 0;
}

int taco_tok_load(const char *path, taco_tok **out, taco_err *err)
{
	struct stat st;
	char file[4096], cfg[4096];
	size_t len;
	char *buf;
	int r;

	*out = NULL;
	if (stat(path, &st))
		return taco_err_set(err, -errno, "%s: %s", path,
				    strerror(errno));
	if (S_ISDIR(st.st_mode)) {
		snprintf(file, sizeof(file), "%s/tokenizer.json", path);
		snprintf(cfg, sizeof(cfg), "%s/tokenizer_config.json", path);
		/* GPT-2 style files (OPT ships no tokenizer.json) */
		if (stat(file, &st) && errno == ENOENT) {
			snprintf(file, sizeof(file), "%s/vocab.json", path);
			if (stat(file, &st) == 0)
				return tok_load_gpt2_dir(path, out, err);
			return taco_err_set(err, -ENOENT,
					    "%s: no tokenizer.json, nor "
					    "vocab.json and merges.txt",
					    path);
		}
	} else {
		const char *slash = strrchr(path, '/');
		snprintf(file, sizeof(file), "%s", path);
		if (slash)
			snprintf(cfg, sizeof(cfg), "%.*s/tokenizer_config.json",
				 (int)(slash - path), path);
		else
			snprintf(cfg, sizeof(cfg), "tokenizer_config.json");
	}
	if ((r = tok_read_all(file, &buf, &len, err)))
		return r;
	r = taco_tok_load_buffer(buf, len, file, out, err);
	free(buf);
	if (r)
		return r;
	if (stat(cfg, &st) == 0 && S_ISREG(st.st_mode) &&
	    (r = load_config(*out, cfg, err))) {
		taco_tok_free(*out);
		*out = NULL;
		return r;
	}
	return 0;
}
