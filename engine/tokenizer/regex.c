/* regex.c: the patterns of Split, Replace and ByteLevel: an Oniguruma-style
 * pattern (as tokenizers' regex engine reads it) translated into one that
 * PCRE2 reads the same way, compiled (with JIT) and run with the
 * empty-match rule of the onig crate. tokenizer.h says what is refused. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

/* Oniguruma's \s: Unicode White_Space, as a class body. */
#define WS_BODY                                                                \
	"\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}"    \
	"\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* One translation: the pattern p[0..n) read from i, written to o; bad says
 * what was refused. */
struct xlate {
	const char *p;
	size_t n, i;
	struct tok_buf *o;
	const char *bad;
	struct tok_class_adds *x;
	int in_class;
};

static int refuse(struct xlate *t, const char *what)
{
	t->bad = what;
	return -EINVAL;
}

/* \p{NAME}, \p{^NAME}, \P{..} at p[i] (p[i + 2] is '{'). */
static int xl_property(struct xlate *t)
{
	const char *p = t->p, *nm = p + t->i + 3;
	const char *e = memchr(nm, '}', t->n - t->i - 3);
	int neg = p[t->i + 1] == 'P', r;
	uint32_t mask;

	if (!e)
		return refuse(t, "an unclosed \\p{");
	while (nm < e && *nm == ' ')
		nm++;
	if (nm < e && *nm == '^') {
		neg = !neg;
		nm++;
	}
	mask = tok_gc_mask(nm, (size_t)(e - nm));
	if (mask)
		r = tok_gc_class(t->o, mask, neg, t->in_class, t->x);
	else /* not a category: PCRE2's meaning */
		r = tok_buf_put(t->o, p + t->i, (size_t)(e - (p + t->i)) + 1);
	t->i = (size_t)(e - p) + 1;
	return r;
}

/* Oniguruma \uHHHH at p[i]. */
static int xl_unicode_escape(struct xlate *t)
{
	const char *p = t->p;
	size_t i = t->i, k = 0;
	int r;

	while (k < 4 && i + 2 + k < t->n &&
	       strchr("0123456789abcdefABCDEF", p[i + 2 + k]) && p[i + 2 + k])
		k++;
	if (k != 4)
		return refuse(t, "a malformed \\u escape");
	r = tok_buf_put(t->o, "\\x{", 3);
	r = r ? r : tok_buf_put(t->o, p + i + 2, 4);
	r = r ? r : tok_buf_put(t->o, "}", 1);
	t->i += 6;
	return r;
}

/* The escapes whose meaning differs between the two engines: refused. */
static int xl_refused_escape(struct xlate *t, char d)
{
	static const char letters[] = "wWbBhHXQEKNCgk";
	static const char *const names[] = {"\\w", "\\W", "\\b", "\\B", "\\h",
					    "\\H", "\\X", "\\Q", "\\E", "\\K",
					    "\\N", "\\C", "\\g", "\\k"};

	return refuse(t, names[strchr(letters, d) - letters]);
}

/* An escape at p[i]. */
static int xl_escape(struct xlate *t)
{
	const char *p = t->p;
	size_t i = t->i, k;
	char d;
	int r;

	if (i + 1 >= t->n)
		return refuse(t, "a trailing backslash");
	d = p[i + 1];
	if ((d == 'p' || d == 'P') && i + 2 < t->n && p[i + 2] == '{')
		return xl_property(t);
	if (d && strchr("wWbBhHXQEKNCgk", d))
		return xl_refused_escape(t, d);
	if (d == 'u')
		return xl_unicode_escape(t);
	if (d == 'p' || d == 'P') {
		/* Oniguruma: \p without { is the letter */
		r = tok_buf_put(t->o, &d, 1);
	} else if (d == 'd' || d == 'D') {
		/* Oniguruma's \d: \p{Nd} */
		r = tok_gc_class(t->o, tok_gc_mask("Nd", 2), d == 'D',
				 t->in_class, t->x);
	} else if (d == 's') {
		r = t->in_class ? tok_buf_put(t->o, WS_BODY, strlen(WS_BODY))
				: tok_buf_put(t->o, "[" WS_BODY "]",
					      strlen(WS_BODY) + 2);
	} else if (d == 'S') {
		if (t->in_class)
			return refuse(t, "\\S inside a character class");
		r = tok_buf_put(t->o, "[^" WS_BODY "]", strlen(WS_BODY) + 3);
	} else {
		/* copy the escape and the whole next char */
		k = 2;
		while (i + k < t->n && ((unsigned char)p[i + k] & 0xC0) == 0x80)
			k++;
		t->i += k;
		return tok_buf_put(t->o, p + i, k);
	}
	t->i += 2;
	return r;
}

/* A char inside a character class (not an escape). */
static int xl_class_char(struct xlate *t)
{
	const char *p = t->p;
	size_t i = t->i, n = t->n;
	char c = p[i];

	if (c == '[') {
		const char *e;
		if (i + 1 >= n || p[i + 1] != ':')
			return refuse(t, "a nested character class");
		e = memchr(p + i + 2, ']', n - i - 2);
		if (!e)
			return refuse(t, "an unclosed [:class:]");
		t->i = (size_t)(e - p) + 1;
		return tok_buf_put(t->o, p + i, (size_t)(e - (p + i)) + 1);
	}
	if (c == '&' && i + 1 < n && p[i + 1] == '&')
		return refuse(t, "class intersection &&");
	if (c == ']')
		t->in_class = 0;
	t->i++;
	return tok_buf_put(t->o, &c, 1);
}

/* The '[' that opens a class, with a leading ^ and ] (a literal ']'). */
static int xl_class_open(struct xlate *t)
{
	const char *p = t->p;
	int r;

	t->in_class = 1;
	r = tok_buf_put(t->o, "[", 1);
	t->i++;
	if (t->i < t->n && p[t->i] == '^') {
		r = r ? r : tok_buf_put(t->o, "^", 1);
		t->i++;
	}
	if (t->i < t->n && p[t->i] == ']') {
		r = r ? r : tok_buf_put(t->o, "\\]", 2);
		t->i++;
	}
	return r;
}

static int translate(const char *p, size_t n, struct tok_buf *o,
		     const char **bad, struct tok_class_adds *x)
{
	struct xlate t = {.p = p, .n = n, .o = o, .x = x};
	int r = 0;

	while (t.i < n && !r) {
		char c = p[t.i];
		if (c == '\\')
			r = xl_escape(&t);
		else if (t.in_class)
			r = xl_class_char(&t);
		else if (c == '[')
			r = xl_class_open(&t);
		else {
			r = tok_buf_put(o, &c, 1);
			t.i++;
		}
	}
	if (!r && t.in_class)
		r = refuse(&t, "an unclosed character class");
	*bad = t.bad;
	return r;
}

/* The pattern PCRE2 compiles into b: a literal as it is, else translated
 * (x then says where its added code points are). Messages as
 * tok_regex_compile's. */
static int pattern_text(const char *pat, size_t len, int literal,
			struct tok_buf *b, struct tok_class_adds **x,
			const char *name, const char *what, taco_err *err)
{
	const char *bad = NULL;
	int r;

	if (literal) {
		r = tok_buf_put(b, pat, len);
	} else {
		*x = calloc(1, sizeof(**x));
		r = *x ? translate(pat, len, b, &bad, *x) : -ENOMEM;
	}
	if (r == -EINVAL)
		return taco_err_set(err, -EINVAL,
				    "%s: %s pattern uses %s, which Oniguruma "
				    "and PCRE2 read differently; not supported",
				    name, what, bad);
	if (r)
		return taco_err_set(err, -ENOMEM, "%s: out of memory", name);
	return 0;
}

/* The pattern must be valid UTF-8 (PCRE2_NO_UTF_CHECK), and only a
 * literal may hold a NUL. */
static int check_utf8(const struct tok_buf *b, int literal, const char *name,
		      const char *what, taco_err *err)
{
	size_t i = 0, bl;

	while (i < b->n) {
		size_t k = tok_utf8_valid_prefix(
		    (const unsigned char *)b->p + i, b->n - i, &bl);
		if (!k || (memchr(b->p + i, 0, k) && !literal))
			return taco_err_set(err, -EINVAL,
					    "%s: %s pattern is not valid "
					    "UTF-8 text",
					    name, what);
		i += k;
	}
	return 0;
}

/* re->fast: the pattern without the added code points, PCRE2's own \p{..}
 * alone, for texts that have none of them. b is reused. */
static int compile_fast(struct tok_regex *re, const char *pat, size_t len,
			uint32_t opts, struct tok_class_adds *x,
			struct tok_buf *b)
{
	const char *bad;
	PCRE2_SIZE eoff;
	int ec;

	x->no_adds = 1;
	b->n = 0;
	re->fast =
	    translate(pat, len, b, &bad, x)
		? NULL
		: pcre2_compile((PCRE2_SPTR)b->p, b->n, opts, &ec, &eoff, NULL);
	re->add_blocks = malloc(sizeof(x->blocks));
	if (!re->fast || !re->add_blocks)
		return -ENOMEM;
	memcpy(re->add_blocks, x->blocks, sizeof(x->blocks));
	re->fast_jit = pcre2_jit_compile(re->fast, PCRE2_JIT_COMPLETE) == 0;
	/* the lead byte of the smallest added code point: a text without a
	 * byte at or above it has none */
	re->add_lead =
	    (unsigned char)(x->min_add < 0x800	   ? 0xC0 | (x->min_add >> 6)
			    : x->min_add < 0x10000 ? 0xE0 | (x->min_add >> 12)
						   : 0xF0 | (x->min_add >> 18));
	return 0;
}

int tok_regex_compile(struct tok_regex *re, const char *pat, size_t len,
		      int literal, const char *name, const char *what,
		      taco_err *err)
{
	struct tok_buf b = {0};
	struct tok_class_adds *x = NULL;
	uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK;
	PCRE2_SIZE eoff;
	int ec, r;

	memset(re, 0, sizeof(*re));
	if (len > 65536)
		return taco_err_set(err, -EFBIG,
				    "%s: %s pattern is longer than 65536 bytes",
				    name, what);
	if (literal)
		opts = (opts & ~(uint32_t)PCRE2_UCP) | PCRE2_LITERAL;
	if ((r = pattern_text(pat, len, literal, &b, &x, name, what, err)) ||
	    (r = check_utf8(&b, literal, name, what, err)))
		goto out;
	re->code = pcre2_compile((PCRE2_SPTR)(b.p ? b.p : ""), b.n, opts, &ec,
				 &eoff, NULL);
	if (!re->code) {
		PCRE2_UCHAR msg[256];
		pcre2_get_error_message(ec, msg, sizeof(msg));
		r = taco_err_set(err, -EINVAL,
				 "%s: %s pattern does not compile: %s", name,
				 what, (const char *)msg);
		goto out;
	}
	re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
	if (x && x->any_add && compile_fast(re, pat, len, opts, x, &b)) {
		tok_regex_free(re);
		r = taco_err_set(err, -ENOMEM, "%s: out of memory", name);
	}
out:
	free(x);
	tok_buf_free(&b);
	return r;
}

void tok_regex_free(struct tok_regex *re)
{
	if (re->code)
		pcre2_code_free(re->code);
	if (re->fast)
		pcre2_code_free(re->fast);
	free(re->add_blocks);
	re->code = re->fast = NULL;
	re->add_blocks = NULL;
}

/* 1 when s[0..n) has a code point of the added ranges of re (checked by
 * block of 256). */
static int has_added(const struct tok_regex *re, const unsigned char *s,
		     size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t cp;
		if (s[i] < re->add_lead)
			continue;
		i += (size_t)tok_utf8_next(s + i, n - i, &cp) - 1;
		if ((re->add_blocks[cp >> 11] >> ((cp >> 8) & 7)) & 1)
			return 1;
	}
	return 0;
}

static int regex_match(const struct tok_regex *re, struct tok_matcher *m,
		       const char *s, size_t n, size_t from, taco_err *err)
{
	int rc, fast = re->fast && !m->exact;
	const pcre2_code *code = fast ? re->fast : re->code;

	if (fast ? re->fast_jit : re->jit)
		rc = pcre2_jit_match(code, (PCRE2_SPTR)s, n, from,
				     PCRE2_NO_UTF_CHECK, m->md, m->mc);
	else
		rc = PCRE2_ERROR_JIT_STACKLIMIT;
	if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
		rc = pcre2_match(code, (PCRE2_SPTR)s, n, from,
				 PCRE2_NO_UTF_CHECK, m->md, m->mc);
	if (rc >= 0)
		return 1;
	if (rc == PCRE2_ERROR_NOMATCH)
		return 0;
	{
		PCRE2_UCHAR msg[256];
		pcre2_get_error_message(rc, msg, sizeof(msg));
		return taco_err_set(
		    err, rc == PCRE2_ERROR_NOMEMORY ? -ENOMEM : -E2BIG,
		    "regex match failed: %s", (const char *)msg);
	}
}

int tok_regex_next(const struct tok_regex *re, struct tok_matcher *m,
		   const char *s, size_t n, size_t *pos, size_t *last,
		   size_t *ms, size_t *me, taco_err *err)
{
	/* which of re's two patterns fits s: decided at the first call on
	 * s, kept for the next ones */
	if (re->fast &&
	    (*last == SIZE_MAX || m->re != re || m->s != s || m->n != n)) {
		m->re = re;
		m->s = s;
		m->n = n;
		m->exact = has_added(re, (const unsigned char *)s, n);
	}
	for (;;) {
		int r;
		PCRE2_SIZE *ov;

		if (*pos > n)
			return 0;
		r = regex_match(re, m, s, n, *pos, err);
		if (r <= 0)
			return r;
		ov = pcre2_get_ovector_pointer(m->md);
		if (ov[0] > ov[1] || ov[1] > n)
			return taco_err_set(err, -EINVAL,
					    "regex: a lookaround (\\K) made "
					    "an inverted match");
		if (ov[0] == ov[1] && *last == ov[1]) {
			/* an empty match right after the previous match:
			 * move one char on */
			if (*pos >= n) {
				*pos = n + 1;
			} else {
				uint32_t cp;
				*pos += (size_t)tok_utf8_next(
				    (const unsigned char *)s + *pos, n - *pos,
				    &cp);
			}
			continue;
		}
		*ms = ov[0];
		*me = ov[1];
		*pos = ov[1];
		*last = ov[1];
		return 1;
	}
}
