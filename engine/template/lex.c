/* lex.c: jinja2's lexer for transformers' environment: {{ }}, {% %} and
 * {# #} with whitespace control (- and +), trim_blocks (the newline after
 * a block or comment tag goes), lstrip_blocks (the blanks before a block
 * or comment tag on its line go), raw blocks, and the tokens of tags:
 * names, strings with Python's escapes, integers, floats and operators.
 * The source comes with its newlines normalized and one trailing newline
 * removed (template.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tmpl.h"
#include "util/taco_err.h"

#define TL_MAX_BALANCE 256

typedef struct tlex {
	tarena *a;
	const char *s;
	size_t len, pos;
	int line; /* line of s[lpos] */
	size_t lpos;
	int line_starting; /* the last match ended with a newline */
	ttok *toks;
	int n, cap;
	char bal[TL_MAX_BALANCE];
	int nbal;
	taco_err *err;
} tlex;

static int tl_line(tlex *l, size_t pos)
{
	while (l->lpos < pos) {
		if (l->s[l->lpos] == '\n')
			l->line++;
		l->lpos++;
	}
	return l->line;
}

static int tl_fail(tlex *l, size_t pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int tl_fail(tlex *l, size_t pos, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return taco_err_set(l->err, -EINVAL, "line %d: %s", tl_line(l, pos),
			    msg);
}

static ttok *tl_push(tlex *l, int type, size_t pos)
{
	ttok *t;

	if (l->n == l->cap) {
		int cap = l->cap ? l->cap * 2 : 256;
		ttok *p = realloc(l->toks, (size_t)cap * sizeof(*p));

		if (!p)
			return NULL;
		l->toks = p;
		l->cap = cap;
	}
	t = &l->toks[l->n++];
	memset(t, 0, sizeof(*t));
	t->type = (uint8_t)type;
	t->line = tl_line(l, pos);
	return t;
}

/* the whitespace char at s[i] (Python's \s): its length, or 0 */
static size_t tl_space(const tlex *l, size_t i)
{
	uint32_t cp;
	size_t k;

	if (i >= l->len)
		return 0;
	if ((unsigned char)l->s[i] < 0x80)
		return tu_isspace((unsigned char)l->s[i]) ? 1 : 0;
	k = tu_dec(l->s + i, l->len - i, &cp);
	return tu_isspace(cp) ? k : 0;
}

static size_t tl_skip_space(const tlex *l, size_t i)
{
	size_t k;

	while ((k = tl_space(l, i)))
		i += k;
	return i;
}

/* str.rstrip() of s[from, to): the new end */
static size_t tl_rstrip(const tlex *l, size_t from, size_t to)
{
	while (to > from) {
		size_t k = 1;
		uint32_t cp;

		while (k < 4 && to - k > from &&
		       ((unsigned char)l->s[to - k] & 0xC0) == 0x80)
			k++;
		tu_dec(l->s + to - k, k, &cp);
		if (!tu_isspace(cp))
			break;
		to -= k;
	}
	return to;
}

/* Emits the data s[from, to) before a tag opened with sign ('-', '+' or
 * 0), lstrip applying unless the tag is a variable. */
static int tl_data(tlex *l, size_t from, size_t to, char sign, int is_var)
{
	ttok *t;

	if (sign == '-') {
		to = tl_rstrip(l, from, to);
	} else if (sign != '+' && !is_var) {
		size_t lp = to;

		while (lp > from && l->s[lp - 1] != '\n')
			lp--;
		if ((lp > from || l->line_starting) && lp < to &&
		    tl_skip_space(l, lp) >= to)
			to = lp;
	}
	if (to == from)
		return 0;
	t = tl_push(l, T_DATA, from);
	if (!t)
		return -ENOMEM;
	t->s = l->s + from;
	t->n = (uint32_t)(to - from);
	return 0;
}

static int tl_hex(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Decodes the string literal s[from, to) (without its quotes) as jinja2
 * does: Python's unicode-escape of the text with non-ASCII characters
 * backslash-escaped first. */
static int tl_string(tlex *l, size_t from, size_t to, ttok *t)
{
	char *o = ta_alloc(l->a, (to - from) * 2 + 1);
	size_t n = 0, i = from;

	if (!o)
		return -ENOMEM;
	while (i < to) {
		unsigned char c = (unsigned char)l->s[i];
		uint32_t cp;
		int k, digits;

		if (c != '\\') {
			o[n++] = (char)c;
			i++;
			continue;
		}
		c = (unsigned char)l->s[i + 1];
		i += 2;
		switch (c) {
		case '\n':
			continue;
		case '\\':
		case '\'':
		case '"':
			o[n++] = (char)c;
			continue;
		case 'a':
			o[n++] = '\a';
			continue;
		case 'b':
			o[n++] = '\b';
			continue;
		case 'f':
			o[n++] = '\f';
			continue;
		case 'n':
			o[n++] = '\n';
			continue;
		case 'r':
			o[n++] = '\r';
			continue;
		case 't':
			o[n++] = '\t';
			continue;
		case 'v':
			o[n++] = '\v';
			continue;
		case 'N':
			return tl_fail(l, i,
				       "the \\N{...} escape is not "
				       "supported");
		default:
			break;
		}
		if (c >= '0' && c <= '7') {
			cp = c - '0';
			for (k = 0; k < 2 && i < to && l->s[i] >= '0' &&
				    l->s[i] <= '7';
			     k++)
				cp = cp * 8 + (uint32_t)(l->s[i++] - '0');
			n += tu_enc(cp, o + n);
			continue;
		}
		if (c == 'x' || c == 'u' || c == 'U') {
			digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
			cp = 0;
			for (k = 0; k < digits; k++) {
				int h = i < to ? tl_hex(l->s[i]) : -1;

				if (h < 0)
					return tl_fail(
					    l, i, "truncated \\%cXX escape", c);
				cp = cp * 16 + (uint32_t)h;
				i++;
			}
			if (cp > 0x10FFFF)
				return tl_fail(l, i,
					       "illegal Unicode character");
			if (cp >= 0xD800 && cp <= 0xDFFF)
				return tl_fail(
				    l, i,
				    "a surrogate (\\u%04X) in a string "
				    "is not supported",
				    (unsigned)cp);
			n += tu_enc(cp, o + n);
			continue;
		}
		if (c >= 0x80) {
			/* backslashreplace then unicode-escape: "\\" + "xe9" */
			size_t len = tu_dec(l->s + i - 1, to - (i - 1), &cp);

			i += len - 1;
			o[n++] = '\\';
			n += (size_t)sprintf(o + n,
					     cp < 0x100	    ? "x%02x"
					     : cp < 0x10000 ? "u%04x"
							    : "U%08x",
					     (unsigned)cp);
			continue;
		}
		o[n++] = '\\'; /* an unknown escape stays */
		o[n++] = (char)c;
	}
	o[n] = 0;
	t->s = o;
	t->n = (uint32_t)n;
	return 0;
}

static int tl_isdigit(char c)
{
	return c >= '0' && c <= '9';
}

/* (\d+_)*\d+ at i: its end, or i */
static size_t tl_digits(const tlex *l, size_t i)
{
	size_t j = i;

	while (j < l->len && tl_isdigit(l->s[j])) {
		j++;
		if (j + 1 < l->len && l->s[j] == '_' && tl_isdigit(l->s[j + 1]))
			j++;
	}
	return j;
}

/* float_re at i: the end of the match, or i */
static size_t tl_float(const tlex *l, size_t i)
{
	size_t j, k, m;

	if (i > 0 && l->s[i - 1] == '.')
		return i;
	j = tl_digits(l, i);
	if (j == i)
		return i;
	/* (\.digits)? e[+-]?digits */
	k = j;
	if (k < l->len && l->s[k] == '.') {
		m = tl_digits(l, k + 1);
		if (m > k + 1)
			k = m;
	}
	if (k < l->len && (l->s[k] == 'e' || l->s[k] == 'E')) {
		size_t e = k + 1;

		if (e < l->len && (l->s[e] == '+' || l->s[e] == '-'))
			e++;
		m = tl_digits(l, e);
		if (m > e)
			return m;
	}
	/* \.digits */
	if (j < l->len && l->s[j] == '.') {
		m = tl_digits(l, j + 1);
		if (m > j + 1)
			return m;
	}
	return i;
}

static int tl_number(tlex *l, size_t i, size_t *end)
{
	size_t j = tl_float(l, i);
	char buf[128];
	size_t n = 0;
	ttok *t;

	if (j > i) {
		for (size_t k = i; k < j && n < sizeof(buf) - 1; k++)
			if (l->s[k] != '_')
				buf[n++] = l->s[k];
		buf[n] = 0;
		if (j - i >= sizeof(buf) - 1)
			return tl_fail(l, i, "float literal too long");
		t = tl_push(l, T_FLOAT, i);
		if (!t)
			return -ENOMEM;
		t->d = strtod(buf, NULL);
		*end = j;
		return 0;
	}
	/* integer_re alternatives, in order */
	{
		const char *s = l->s;
		int base = 10;
		size_t k = i;
		unsigned __int128 v = 0;

		if (s[i] == '0' && i + 1 < l->len &&
		    (s[i + 1] == 'b' || s[i + 1] == 'B' || s[i + 1] == 'o' ||
		     s[i + 1] == 'O' || s[i + 1] == 'x' || s[i + 1] == 'X')) {
			char p = (char)(s[i + 1] | 0x20);
			int b = p == 'b' ? 2 : p == 'o' ? 8 : 16, ndig = 0;
			size_t q = i + 2;

			for (;;) {
				size_t r = q;
				int h;

				if (r < l->len && s[r] == '_')
					r++;
				h = r < l->len ? tl_hex(s[r]) : -1;
				if (h < 0 || h >= b)
					break;
				q = r + 1;
				ndig++;
			}
			if (ndig) {
				base = b;
				k = q;
				for (size_t z = i + 2; z < k; z++)
					if (s[z] != '_') {
						v = v * (unsigned)b +
						    (unsigned)tl_hex(s[z]);
						if (v > (unsigned __int128)
							    INT64_MAX)
							return tl_fail(
							    l, i,
							    "an integer "
							    "literal beyond 64 "
							    "bits is not "
							    "supported");
					}
			}
		}
		if (base == 10) {
			if (s[i] == '0') {
				k = i + 1;
				while (k < l->len &&
				       (s[k] == '0' ||
					(s[k] == '_' && k + 1 < l->len &&
					 s[k + 1] == '0')))
					k += s[k] == '_' ? 2 : 1;
			} else {
				k = tl_digits(l, i);
				for (size_t z = i; z < k; z++)
					if (s[z] != '_') {
						v = v * 10 +
						    (unsigned)(s[z] - '0');
						if (v > (unsigned __int128)
							    INT64_MAX)
							return tl_fail(
							    l, i,
							    "an integer "
							    "literal beyond 64 "
							    "bits is not "
							    "supported");
					}
			}
		}
		t = tl_push(l, T_INT, i);
		if (!t)
			return -ENOMEM;
		t->i = (int64_t)v;
		*end = k;
	}
	return 0;
}

/* operators, longest first */
static const struct {
	const char *s;
	int op;
} tl_ops[] = {
    {"//", TO_FLOORDIV}, {"**", TO_POW},      {"==", TO_EQ},
    {"!=", TO_NE},	 {">=", TO_GTEQ},     {"<=", TO_LTEQ},
    {"+", TO_ADD},	 {"-", TO_SUB},	      {"/", TO_DIV},
    {"*", TO_MUL},	 {"%", TO_MOD},	      {"~", TO_TILDE},
    {"[", TO_LBRACKET},	 {"]", TO_RBRACKET},  {"(", TO_LPAREN},
    {")", TO_RPAREN},	 {"{", TO_LBRACE},    {"}", TO_RBRACE},
    {">", TO_GT},	 {"<", TO_LT},	      {"=", TO_ASSIGN},
    {".", TO_DOT},	 {":", TO_COLON},     {"|", TO_PIPE},
    {",", TO_COMMA},	 {";", TO_SEMICOLON},
};

static int tl_op(tlex *l, size_t i, size_t *end)
{
	for (size_t k = 0; k < sizeof(tl_ops) / sizeof(tl_ops[0]); k++) {
		size_t n = strlen(tl_ops[k].s);
		ttok *t;
		char c;

		if (n > l->len - i || memcmp(l->s + i, tl_ops[k].s, n))
			continue;
		c = tl_ops[k].s[0];
		if (n == 1 && (c == '(' || c == '[' || c == '{')) {
			if (l->nbal == TL_MAX_BALANCE)
				return taco_err_set(l->err, -E2BIG,
						    "line %d: nesting depth "
						    "exceeded (%d levels of "
						    "brackets)",
						    tl_line(l, i),
						    TL_MAX_BALANCE);
			l->bal[l->nbal++] = c == '('   ? ')'
					    : c == '[' ? ']'
						       : '}';
		} else if (n == 1 && (c == ')' || c == ']' || c == '}')) {
			if (!l->nbal)
				return tl_fail(l, i, "unexpected '%c'", c);
			if (l->bal[l->nbal - 1] != c)
				return tl_fail(l, i,
					       "unexpected '%c', expected '%c'",
					       c, l->bal[l->nbal - 1]);
			l->nbal--;
		}
		t = tl_push(l, T_OP, i);
		if (!t)
			return -ENOMEM;
		t->op = (uint8_t)tl_ops[k].op;
		*end = i + n;
		return 0;
	}
	return tl_fail(l, i, "unexpected char '%c'", l->s[i]);
}

/* The end of a block tag at i (+%}, -%} and blanks, %} and a newline):
 * its end, or 0 */
static size_t tl_block_end(const tlex *l, size_t i)
{
	const char *s = l->s + i;
	size_t left = l->len - i;

	if (left >= 3 && s[0] == '+' && s[1] == '%' && s[2] == '}')
		return i + 3;
	if (left >= 3 && s[0] == '-' && s[1] == '%' && s[2] == '}')
		return tl_skip_space(l, i + 3);
	if (left >= 2 && s[0] == '%' && s[1] == '}')
		return i + 2 + (left > 2 && s[2] == '\n');
	return 0;
}

static size_t tl_var_end(const tlex *l, size_t i)
{
	const char *s = l->s + i;
	size_t left = l->len - i;

	if (left >= 3 && s[0] == '-' && s[1] == '}' && s[2] == '}')
		return tl_skip_space(l, i + 3);
	if (left >= 2 && s[0] == '}' && s[1] == '}')
		return i + 2;
	return 0;
}

/* the tokens of a tag from l->pos to its end */
static int tl_tag(tlex *l, int is_var, size_t open)
{
	int e;

	for (;;) {
		size_t i = l->pos, end = 0, k;
		unsigned char c;
		ttok *t;

		if (i >= l->len)
			return tl_fail(l, open,
				       "unexpected end of template: "
				       "the tag is not closed");
		if (!l->nbal &&
		    (end = is_var ? tl_var_end(l, i) : tl_block_end(l, i))) {
			t = tl_push(l, is_var ? T_VAR_END : T_BLOCK_END, i);
			if (!t)
				return -ENOMEM;
			l->line_starting = l->s[end - 1] == '\n';
			l->pos = end;
			return 0;
		}
		if ((k = tl_space(l, i))) {
			l->pos = tl_skip_space(l, i);
			continue;
		}
		c = (unsigned char)l->s[i];
		if (tl_isdigit((char)c)) {
			e = tl_number(l, i, &end);
		} else if (c == '_' ||
			   ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')) {
			end = i;
			while (end < l->len &&
			       (l->s[end] == '_' || tl_isdigit(l->s[end]) ||
				((l->s[end] | 0x20) >= 'a' &&
				 (l->s[end] | 0x20) <= 'z')))
				end++;
			if (end < l->len && (unsigned char)l->s[end] >= 0x80 &&
			    !tl_space(l, end))
				return tl_fail(l, i,
					       "names with non-ASCII "
					       "characters are not "
					       "supported");
			t = tl_push(l, T_NAME, i);
			if (!t)
				return -ENOMEM;
			t->s = l->s + i;
			t->n = (uint32_t)(end - i);
			e = 0;
		} else if (c == '\'' || c == '"') {
			end = i + 1;
			while (end < l->len && l->s[end] != (char)c)
				end += l->s[end] == '\\' && end + 1 < l->len
					   ? 2
					   : 1;
			if (end >= l->len)
				return tl_fail(l, i,
					       "unexpected char '%c' "
					       "(an unterminated string)",
					       c);
			t = tl_push(l, T_STRING, i);
			if (!t)
				return -ENOMEM;
			e = tl_string(l, i + 1, end, t);
			end++;
		} else if (c >= 0x80) {
			return tl_fail(l, i,
				       "non-ASCII characters in a tag "
				       "are not supported");
		} else {
			e = tl_op(l, i, &end);
		}
		if (e)
			return e;
		l->pos = end;
	}
}

/* `{%(-|+|)\s*raw\s*(-%}\s*|%})` at i: its end, or 0 */
static size_t tl_raw_begin(const tlex *l, size_t i)
{
	size_t j = i + 2;

	if (j < l->len && (l->s[j] == '-' || l->s[j] == '+'))
		j++;
	j = tl_skip_space(l, j);
	if (l->len - j < 3 || memcmp(l->s + j, "raw", 3))
		return 0;
	j = tl_skip_space(l, j + 3);
	if (l->len - j >= 3 && !memcmp(l->s + j, "-%}", 3))
		return tl_skip_space(l, j + 3);
	if (l->len - j >= 2 && !memcmp(l->s + j, "%}", 2))
		return j + 2;
	return 0;
}

/* the body of a raw block from l->pos to its {% endraw %} */
static int tl_raw(tlex *l, size_t open)
{
	for (size_t i = l->pos; i + 1 < l->len; i++) {
		size_t j, end;
		char sign = 0;

		if (l->s[i] != '{' || l->s[i + 1] != '%')
			continue;
		j = i + 2;
		if (j < l->len && (l->s[j] == '-' || l->s[j] == '+'))
			sign = l->s[j++];
		j = tl_skip_space(l, j);
		if (l->len - j < 6 || memcmp(l->s + j, "endraw", 6))
			continue;
		j = tl_skip_space(l, j + 6);
		end = tl_block_end(l, j);
		if (!end)
			continue;
		if (tl_data(l, l->pos, i, sign, 0))
			return -ENOMEM;
		l->line_starting = l->s[end - 1] == '\n';
		l->pos = end;
		return 0;
	}
	return tl_fail(l, open, "missing end of raw directive");
}

/* a comment from l->pos: its end */
static int tl_comment(tlex *l, size_t open)
{
	for (size_t i = l->pos; i + 1 < l->len; i++) {
		size_t end = 0;

		if (i + 2 < l->len && l->s[i] == '+' && l->s[i + 1] == '#' &&
		    l->s[i + 2] == '}')
			end = i + 3;
		else if (i + 2 < l->len && l->s[i] == '-' &&
			 l->s[i + 1] == '#' && l->s[i + 2] == '}')
			end = tl_skip_space(l, i + 3);
		else if (l->s[i] == '#' && l->s[i + 1] == '}')
			end = i + 2 + (i + 2 < l->len && l->s[i + 2] == '\n');
		if (!end)
			continue;
		l->line_starting = l->s[end - 1] == '\n';
		l->pos = end;
		return 0;
	}
	return tl_fail(l, open, "missing end of comment tag");
}

static int tl_run(tlex *l)
{
	int e;

	l->line_starting = 1;
	while (l->pos < l->len) {
		size_t o = l->pos, raw_end = 0;
		char kind, sign = 0;
		ttok *t;

		while (o + 1 < l->len &&
		       !(l->s[o] == '{' &&
			 (l->s[o + 1] == '{' || l->s[o + 1] == '%' ||
			  l->s[o + 1] == '#')))
			o++;
		if (o + 1 >= l->len) {
			t = tl_push(l, T_DATA, l->pos);
			if (!t)
				return -ENOMEM;
			t->s = l->s + l->pos;
			t->n = (uint32_t)(l->len - l->pos);
			l->pos = l->len;
			break;
		}
		kind = l->s[o + 1];
		if (o + 2 < l->len &&
		    (l->s[o + 2] == '-' || l->s[o + 2] == '+'))
			sign = l->s[o + 2];
		if (kind == '%')
			raw_end = tl_raw_begin(l, o);
		e = tl_data(l, l->pos, o, sign, kind == '{');
		if (e)
			return e;
		l->line_starting = 0;
		if (raw_end) {
			l->line_starting = l->s[raw_end - 1] == '\n';
			l->pos = raw_end;
			e = tl_raw(l, o);
		} else if (kind == '#') {
			l->pos = o + 2 + (sign != 0);
			e = tl_comment(l, o);
		} else {
			t = tl_push(
			    l, kind == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN, o);
			if (!t)
				return -ENOMEM;
			l->pos = o + 2 + (sign != 0);
			e = tl_tag(l, kind == '{', o);
		}
		if (e)
			return e;
	}
	return tl_push(l, T_EOF, l->len) ? 0 : -ENOMEM;
}

int tl_lex(tarena *a, const char *src, size_t len, ttok **toks, int *ntoks,
	   taco_err *err)
{
	tlex l;
	int e;

	memset(&l, 0, sizeof(l));
	l.a = a;
	l.s = src;
	l.len = len;
	l.line = 1;
	l.err = err;
	e = tl_run(&l);
	if (e == -ENOMEM)
		taco_err_set(err, e, "out of memory");
	if (e) {
		free(l.toks);
		return e;
	}
	*toks = l.toks;
	*ntoks = l.n;
	return 0;
}
