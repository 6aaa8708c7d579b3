/* pyfmt.c: values written as Python writes them: str() and repr() (the
 * shortest repr of floats, the quotes and escapes of a string's repr),
 * json.dumps with transformers' arguments, printf-style % formatting and
 * str.format, and Python's float() and int() of strings. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tmpl.h"
#include "tmpl_unidata.h"

/* ---- floats -------------------------------------------------------- */

/* The shortest digits that read back as d (> 0), as Python's repr picks
 * them: value = 0.DIGITS * 10^decpt. */
static int shortest(double d, char *dig, int *decpt)
{
	char buf[64];

	for (int p = 1; p <= 17; p++) {
		char *e;
		int exp, nd = 0;

		snprintf(buf, sizeof(buf), "%.*e", p - 1, d);
		e = strchr(buf, 'e');
		exp = atoi(e + 1);
		for (char *c = buf; c < e; c++)
			if (*c >= '0' && *c <= '9')
				dig[nd++] = *c;
		dig[nd] = 0;
		if (strtod(buf, NULL) == d) {
			*decpt = exp + 1;
			return nd;
		}
		/* the nearest p digits miss; a neighbour may not (the
		 * interval of d is lopsided at powers of two) */
		for (int delta = -1; delta <= 1; delta += 2) {
			char cand[32], alt[64];
			int k = nd - 1, cexp = exp;

			memcpy(cand, dig, (size_t)nd + 1);
			if (delta > 0) {
				while (k >= 0 && cand[k] == '9')
					cand[k--] = '0';
				if (k < 0) {
					memmove(cand + 1, cand, (size_t)nd);
					cand[0] = '1';
					cand[nd] = 0;
					cexp++;
				} else {
					cand[k]++;
				}
			} else {
				while (k >= 0 && cand[k] == '0')
					cand[k--] = '9';
				if (k < 0 ||
				    (k == 0 && cand[0] == '1' && nd > 1))
					continue;
				cand[k]--;
				if (cand[0] == '0')
					continue;
			}
			snprintf(alt, sizeof(alt), "%c.%se%d", cand[0],
				 cand + 1, cexp);
			if (nd == 1)
				snprintf(alt, sizeof(alt), "%ce%d", cand[0],
					 cexp);
			if (strtod(alt, NULL) == d) {
				memcpy(dig, cand, (size_t)nd + 1);
				*decpt = cexp + 1;
				return nd;
			}
		}
	}
	snprintf(buf, sizeof(buf), "%.16e", d);
	{
		char *e = strchr(buf, 'e');
		int nd = 0;

		for (char *c = buf; c < e; c++)
			if (*c >= '0' && *c <= '9')
				dig[nd++] = *c;
		dig[nd] = 0;
		*decpt = atoi(e + 1) + 1;
		return nd;
	}
}

void py_float_repr(double d, char *out, size_t cap)
{
	char dig[32], buf[64];
	int nd, decpt, n = 0;

	if (isnan(d)) {
		snprintf(out, cap, "nan");
		return;
	}
	if (isinf(d)) {
		snprintf(out, cap, d < 0 ? "-inf" : "inf");
		return;
	}
	if (d == 0) {
		snprintf(out, cap, signbit(d) ? "-0.0" : "0.0");
		return;
	}
	if (d < 0)
		buf[n++] = '-';
	nd = shortest(fabs(d), dig, &decpt);
	while (nd > 1 && dig[nd - 1] == '0')
		dig[--nd] = 0;
	if (decpt > -4 && decpt <= 16) {
		if (decpt <= 0) {
			buf[n++] = '0';
			buf[n++] = '.';
			for (int i = 0; i < -decpt; i++)
				buf[n++] = '0';
			memcpy(buf + n, dig, (size_t)nd);
			n += nd;
		} else if (decpt >= nd) {
			memcpy(buf + n, dig, (size_t)nd);
			n += nd;
			for (int i = nd; i < decpt; i++)
				buf[n++] = '0';
			buf[n++] = '.';
			buf[n++] = '0';
		} else {
			memcpy(buf + n, dig, (size_t)decpt);
			n += decpt;
			buf[n++] = '.';
			memcpy(buf + n, dig + decpt, (size_t)(nd - decpt));
			n += nd - decpt;
		}
		buf[n] = 0;
	} else {
		int exp = decpt - 1;

		buf[n++] = dig[0];
		if (nd > 1) {
			buf[n++] = '.';
			memcpy(buf + n, dig + 1, (size_t)(nd - 1));
			n += nd - 1;
		}
		snprintf(buf + n, sizeof(buf) - (size_t)n, "e%c%02d",
			 exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
	}
	snprintf(out, cap, "%s", buf);
}

/* ---- str and repr -------------------------------------------------- */

static int repr_str(trender *r, tbuf *b, const char *s, size_t n)
{
	char q = '\'';
	int has_sq = memchr(s, '\'', n) != NULL;
	int has_dq = memchr(s, '"', n) != NULL;
	size_t i = 0, run;
	int e;

	if (has_sq && !has_dq)
		q = '"';
	if ((e = tb_putc(r, b, q)))
		return e;
	while (i < n) {
		unsigned char c = (unsigned char)s[i];
		char esc[16];
		uint32_t cp;
		size_t len;

		/* runs of plain printable ASCII at once */
		run = i;
		while (run < n && (unsigned char)s[run] >= 0x20 &&
		       (unsigned char)s[run] < 0x7f && s[run] != q &&
		       s[run] != '\\')
			run++;
		if (run > i) {
			if ((e = tb_put(r, b, s + i, run - i)))
				return e;
			i = run;
			continue;
		}
		if (c == (unsigned char)q || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			e = tb_put(r, b, esc, 2);
			i++;
		} else if (c == '\t' || c == '\n' || c == '\r') {
			esc[0] = '\\';
			esc[1] = c == '\t' ? 't' : c == '\n' ? 'n' : 'r';
			e = tb_put(r, b, esc, 2);
			i++;
		} else if (c < 0x80) {
			snprintf(esc, sizeof(esc), "\\x%02x", c);
			e = tb_put(r, b, esc, 4);
			i++;
		} else {
			len = tu_dec(s + i, n - i, &cp);
			if (tu_flags(cp) & TU_PRINTABLE) {
				e = tb_put(r, b, s + i, len);
			} else {
				int k = snprintf(esc, sizeof(esc),
						 cp <= 0xff	? "\\x%02x"
						 : cp <= 0xffff ? "\\u%04x"
								: "\\U%08x",
						 (unsigned)cp);
				e = tb_put(r, b, esc, (size_t)k);
			}
			i += len;
		}
		if (e)
			return e;
	}
	return tb_putc(r, b, q);
}

static int repr_seq(trender *r, tbuf *b, const tv *v, const char *open,
		    const char *close)
{
	size_t n = tv_seq_len(v);
	int e;

	if ((e = tb_put(r, b, open, strlen(open))))
		return e;
	for (size_t i = 0; i < n; i++) {
		tv item = tv_seq_at(v, i);

		if (i && (e = tb_put(r, b, ", ", 2)))
			return e;
		if ((e = py_repr(r, b, &item)))
			return e;
	}
	if (v->k == TV_TUPLE && n == 1 && (e = tb_putc(r, b, ',')))
		return e;
	return tb_put(r, b, close, strlen(close));
}

static int repr_map(trender *r, tbuf *b, const tv *m)
{
	tcur c;
	tv k, val;
	int e, got, first = 1;

	if ((e = tb_putc(r, b, '{')) || (e = tc_open(r, m, &c)))
		return e;
	while ((got = tc_next(r, &c, &k)) == 1) {
		if (tv_map_get(r, m, &k, &val) != 1)
			return tr_fail(r, -EINVAL, "dict lookup failed");
		if (!first && (e = tb_put(r, b, ", ", 2)))
			return e;
		first = 0;
		if ((e = py_repr(r, b, &k)) || (e = tb_put(r, b, ": ", 2)) ||
		    (e = py_repr(r, b, &val)))
			return e;
	}
	if (got < 0)
		return got;
	return tb_putc(r, b, '}');
}

static int repr_view(trender *r, tbuf *b, const tv *v)
{
	tcur c;
	tv item;
	int e, got, first = 1;

	if ((e = tb_printf(r, b, "%s([", tv_typename(v))) ||
	    (e = tc_open(r, v, &c)))
		return e;
	while ((got = tc_next(r, &c, &item)) == 1) {
		if (!first && (e = tb_put(r, b, ", ", 2)))
			return e;
		first = 0;
		if ((e = py_repr(r, b, &item)))
			return e;
	}
	if (got < 0)
		return got;
	return tb_put(r, b, "])", 2);
}

static int str_common(trender *r, tbuf *b, const tv *v, int repr)
{
	char num[64];
	int e;

	switch (v->k) {
	case TV_UNDEF:
		return repr ? tb_put(r, b, "Undefined", 9) : 0;
	case TV_NONE:
		return tb_put(r, b, "None", 4);
	case TV_BOOL:
		return v->u.i ? tb_put(r, b, "True", 4)
			      : tb_put(r, b, "False", 5);
	case TV_INT:
		return tb_printf(r, b, "%lld", (long long)v->u.i);
	case TV_FLOAT:
		py_float_repr(v->u.d, num, sizeof(num));
		return tb_put(r, b, num, strlen(num));
	case TV_STR:
		if (!repr)
			return tb_put(r, b, v->u.s, v->n);
		if (v->f & TVF_MARKUP) {
			if ((e = tb_put(r, b, "Markup(", 7)) ||
			    (e = repr_str(r, b, v->u.s, v->n)))
				return e;
			return tb_putc(r, b, ')');
		}
		return repr_str(r, b, v->u.s, v->n);
	case TV_LIST:
	case TV_JARR:
		return repr_seq(r, b, v, "[", "]");
	case TV_TUPLE:
		return repr_seq(r, b, v, "(", ")");
	case TV_DICT:
	case TV_JOBJ:
		return repr_map(r, b, v);
	case TV_NS: {
		tv d = {0};

		d.k = TV_DICT;
		d.u.dict = &v->u.ns->attrs;
		if ((e = tb_put(r, b, "<Namespace ", 11)) ||
		    (e = repr_map(r, b, &d)))
			return e;
		return tb_putc(r, b, '>');
	}
	case TV_RANGE: {
		const struct trange *g = v->u.range;
		int64_t stop = g->stop;

		if (g->step == 1)
			return tb_printf(r, b, "range(%lld, %lld)",
					 (long long)g->start, (long long)stop);
		return tb_printf(r, b, "range(%lld, %lld, %lld)",
				 (long long)g->start, (long long)stop,
				 (long long)g->step);
	}
	case TV_VIEW:
		return repr_view(r, b, v);
	case TV_LOOP: {
		int64_t len;

		if ((e = tv_len(r, v, &len)))
			return e;
		return tb_printf(r, b, "<LoopContext %lld/%lld>",
				 (long long)(v->u.loop->index0 + 1),
				 (long long)len);
	}
	case TV_MACRO:
		if ((e = tb_put(r, b, "<Macro ", 7)) ||
		    (e = repr_str(r, b, v->u.macro->name, v->u.macro->nlen)))
			return e;
		return tb_putc(r, b, '>');
	default:
		return tr_fail(r, -EINVAL,
			       "printing a %s (Python prints its address) is "
			       "not supported",
			       tv_typename(v));
	}
}

int py_str(trender *r, tbuf *b, const tv *v)
{
	int e;

	if (v->k == TV_STR)
		return tb_put(r, b, v->u.s, v->n);
	if ((e = tr_enter(r)))
		return e;
	e = str_common(r, b, v, 0);
	tr_leave(r);
	return e;
}

int py_repr(trender *r, tbuf *b, const tv *v)
{
	int e;

	if ((e = tr_enter(r)))
		return e;
	e = str_common(r, b, v, 1);
	tr_leave(r);
	return e;
}

/* a scratch buffer for str() of non-strings */
int py_str_value(trender *r, const tv *v, tv *out)
{
	tbuf b = {0};
	int e;

	if (v->k == TV_STR) {
		*out = *v;
		out->f = 0;
		return 0;
	}
	if (v->k == TV_UNDEF) {
		*out = TV_LIT("");
		return 0;
	}
	if (v->k == TV_NONE) {
		*out = TV_LIT("None");
		return 0;
	}
	if (v->k == TV_BOOL) {
		*out = v->u.i ? TV_LIT("True") : TV_LIT("False");
		return 0;
	}
	if (!(e = py_str(r, &b, v)))
		e = tb_take(r, &b, out);
	tb_free(r, &b);
	return e;
}

/* ---- json.dumps ---------------------------------------------------- */

static int json_str(trender *r, tbuf *b, const char *s, size_t n, int ascii)
{
	size_t i = 0, run;
	int e;

	if ((e = tb_putc(r, b, '"')))
		return e;
	while (i < n) {
		unsigned char c = (unsigned char)s[i];
		char esc[16];
		uint32_t cp;
		size_t len;

		run = i;
		while (run < n && (unsigned char)s[run] >= 0x20 &&
		       s[run] != '"' && s[run] != '\\' &&
		       (!ascii || (unsigned char)s[run] < 0x7f))
			run++;
		if (run > i) {
			if ((e = tb_put(r, b, s + i, run - i)))
				return e;
			i = run;
			continue;
		}
		switch (c) {
		case '"':
			e = tb_put(r, b, "\\\"", 2);
			break;
		case '\\':
			e = tb_put(r, b, "\\\\", 2);
			break;
		case '\n':
			e = tb_put(r, b, "\\n", 2);
			break;
		case '\r':
			e = tb_put(r, b, "\\r", 2);
			break;
		case '\t':
			e = tb_put(r, b, "\\t", 2);
			break;
		case '\b':
			e = tb_put(r, b, "\\b", 2);
			break;
		case '\f':
			e = tb_put(r, b, "\\f", 2);
			break;
		default:
			if (c < 0x80) {
				snprintf(esc, sizeof(esc), "\\u%04x", c);
				e = tb_put(r, b, esc, 6);
				break;
			}
			len = tu_dec(s + i, n - i, &cp);
			if (cp < 0x10000) {
				snprintf(esc, sizeof(esc), "\\u%04x", cp);
				e = tb_put(r, b, esc, 6);
			} else {
				uint32_t v = cp - 0x10000;

				snprintf(esc, sizeof(esc), "\\u%04x\\u%04x",
					 0xD800 + (v >> 10),
					 0xDC00 + (v & 0x3FF));
				e = tb_put(r, b, esc, 12);
			}
			i += len - 1;
			break;
		}
		if (e)
			return e;
		i++;
	}
	return tb_putc(r, b, '"');
}

static int json_float(trender *r, tbuf *b, double d)
{
	char num[64];

	if (isnan(d))
		return tb_put(r, b, "NaN", 3);
	if (isinf(d))
		return d < 0 ? tb_put(r, b, "-Infinity", 9)
			     : tb_put(r, b, "Infinity", 8);
	py_float_repr(d, num, sizeof(num));
	return tb_put(r, b, num, strlen(num));
}

static int json_newline(trender *r, tbuf *b, const tjson_opts *o, int level)
{
	int e = tb_putc(r, b, '\n');

	for (int i = 0; i < level && !e; i++)
		e = tb_put(r, b, o->indent, o->indent_n);
	return e;
}

static int json_value(trender *r, tbuf *b, const tv *v, const tjson_opts *o,
		      int level);

static int json_key(trender *r, tbuf *b, const tv *k, const tjson_opts *o)
{
	char num[64];

	switch (k->k) {
	case TV_STR:
		return json_str(r, b, k->u.s, k->n, o->ensure_ascii);
	case TV_FLOAT:
		if (isnan(k->u.d))
			return tb_put(r, b, "\"NaN\"", 5);
		if (isinf(k->u.d))
			return k->u.d < 0 ? tb_put(r, b, "\"-Infinity\"", 11)
					  : tb_put(r, b, "\"Infinity\"", 10);
		py_float_repr(k->u.d, num, sizeof(num));
		return tb_printf(r, b, "\"%s\"", num);
	case TV_BOOL:
		return k->u.i ? tb_put(r, b, "\"true\"", 6)
			      : tb_put(r, b, "\"false\"", 7);
	case TV_NONE:
		return tb_put(r, b, "\"null\"", 6);
	case TV_INT:
		return tb_printf(r, b, "\"%lld\"", (long long)k->u.i);
	default:
		return tr_fail(r, -EINVAL,
			       "TypeError: keys must be str, int, float, bool "
			       "or None, not %s",
			       tv_typename(k));
	}
}

int tf_sort_values(trender *r, tv *items, size_t n, const tv *keys,
		   int reverse);

static int json_map(trender *r, tbuf *b, const tv *m, const tjson_opts *o,
		    int level)
{
	size_t n = tv_map_len(m), i = 0;
	tv *keys;
	tcur c;
	int e, got;

	if (!n)
		return tb_put(r, b, "{}", 2);
	keys = tr_alloc(r, n * sizeof(tv));
	if (!keys)
		return -E2BIG;
	if ((e = tc_open(r, m, &c)))
		return e;
	while (i < n && (got = tc_next(r, &c, &keys[i])) == 1)
		i++;
	if (o->sort_keys && (e = tf_sort_values(r, keys, n, keys, 0)))
		return e;
	if ((e = tb_putc(r, b, '{')))
		return e;
	for (i = 0; i < n; i++) {
		tv val;

		if (i && (e = tb_put(r, b, o->item_sep, o->item_sep_n)))
			return e;
		if (o->has_indent && (e = json_newline(r, b, o, level + 1)))
			return e;
		if (tv_map_get(r, m, &keys[i], &val) != 1)
			return tr_fail(r, -EINVAL, "dict lookup failed");
		if ((e = json_key(r, b, &keys[i], o)) ||
		    (e = tb_put(r, b, o->key_sep, o->key_sep_n)) ||
		    (e = json_value(r, b, &val, o, level + 1)))
			return e;
	}
	if (o->has_indent && (e = json_newline(r, b, o, level)))
		return e;
	return tb_putc(r, b, '}');
}

static int json_value(trender *r, tbuf *b, const tv *v, const tjson_opts *o,
		      int level)
{
	int e = 0;

	switch (v->k) {
	case TV_NONE:
		return tb_put(r, b, "null", 4);
	case TV_BOOL:
		return v->u.i ? tb_put(r, b, "true", 4)
			      : tb_put(r, b, "false", 5);
	case TV_INT:
		return tb_printf(r, b, "%lld", (long long)v->u.i);
	case TV_FLOAT:
		return json_float(r, b, v->u.d);
	case TV_STR:
		return json_str(r, b, v->u.s, v->n, o->ensure_ascii);
	case TV_LIST:
	case TV_TUPLE:
	case TV_JARR: {
		size_t n = tv_seq_len(v);

		if (!n)
			return tb_put(r, b, "[]", 2);
		if ((e = tr_enter(r)))
			return e;
		if ((e = tb_putc(r, b, '[')))
			goto out;
		for (size_t i = 0; i < n; i++) {
			tv item = tv_seq_at(v, i);

			if (i && (e = tb_put(r, b, o->item_sep, o->item_sep_n)))
				goto out;
			if (o->has_indent &&
			    (e = json_newline(r, b, o, level + 1)))
				goto out;
			if ((e = json_value(r, b, &item, o, level + 1)))
				goto out;
		}
		if (o->has_indent && (e = json_newline(r, b, o, level)))
			goto out;
		e = tb_putc(r, b, ']');
	out:
		tr_leave(r);
		return e;
	}
	case TV_DICT:
	case TV_JOBJ:
		if ((e = tr_enter(r)))
			return e;
		e = json_map(r, b, v, o, level);
		tr_leave(r);
		return e;
	default:
		return tr_fail(r, -EINVAL,
			       "TypeError: Object of type %s is not JSON "
			       "serializable",
			       tv_typename(v));
	}
}

int py_json(trender *r, tbuf *b, const tv *v, const tjson_opts *o)
{
	return json_value(r, b, v, o, 0);
}

/* ---- float() and int() of strings ---------------------------------- */

/* the decimal value of a Unicode decimal digit (runs of ten) */
static int tu_digit_value(uint32_t cp)
{
	uint32_t start = cp;

	if (cp >= '0' && cp <= '9')
		return (int)(cp - '0');
	while (start > 0 && cp - start < 60 &&
	       (tu_flags(start - 1) & TU_DECIMAL))
		start--;
	return (int)((cp - start) % 10);
}

/* s stripped of Python's whitespace, its Unicode digits made ASCII:
 * NUL-terminated in buf (cap bytes); -EINVAL when another non-ASCII
 * character is in it */
static int py_ascii_number(const char *s, size_t n, char *buf, size_t cap)
{
	size_t i = 0, k = 0, end = n;
	uint32_t cp;

	while (i < n) {
		size_t len = tu_dec(s + i, n - i, &cp);

		if (!tu_isspace(cp))
			break;
		i += len;
	}
	while (end > i) {
		size_t len = 1;

		while (len < 4 && end - len > i &&
		       ((unsigned char)s[end - len] & 0xC0) == 0x80)
			len++;
		tu_dec(s + end - len, len, &cp);
		if (!tu_isspace(cp))
			break;
		end -= len;
	}
	while (i < end) {
		size_t len = tu_dec(s + i, end - i, &cp);

		if (k + 2 >= cap)
			return -ERANGE;
		if (cp < 0x80)
			buf[k++] = (char)cp;
		else if (tu_flags(cp) & TU_DECIMAL)
			buf[k++] = (char)('0' + tu_digit_value(cp));
		else
			return -EINVAL;
		i += len;
	}
	buf[k] = 0;
	return (int)k;
}

static int ieq(const char *a, const char *b)
{
	for (; *a && *b; a++, b++)
		if ((*a | 0x20) != *b)
			return 0;
	return !*a && !*b;
}

static int parse_float(const char *s, size_t n, char *buf, char *clean,
		       size_t cap, double *out)
{
	char *p = buf, *end;
	int k = py_ascii_number(s, n, buf, cap), sign = 0, m = 0;

	if (k < 0)
		return -EINVAL;
	if (*p == '+' || *p == '-')
		sign = *p++ == '-';
	if (ieq(p, "inf") || ieq(p, "infinity")) {
		*out = sign ? -INFINITY : INFINITY;
		return 0;
	}
	if (ieq(p, "nan")) {
		*out = sign ? -NAN : NAN;
		return 0;
	}
	/* digits with single underscores between digits, a point, an
	 * exponent: Python's grammar of float() */
	{
		int digits = 0, prev_digit = 0;
		char *q = p;

		if (sign)
			clean[m++] = '-';
		for (; *q; q++) {
			if (*q >= '0' && *q <= '9') {
				clean[m++] = *q;
				digits++;
				prev_digit = 1;
			} else if (*q == '_') {
				if (!prev_digit || q[1] < '0' || q[1] > '9')
					return -EINVAL;
				prev_digit = 0;
			} else if (*q == '.' || *q == 'e' || *q == 'E' ||
				   *q == '+' || *q == '-') {
				clean[m++] = *q;
				prev_digit = 0;
			} else {
				return -EINVAL;
			}
		}
		clean[m] = 0;
		if (!digits)
			return -EINVAL;
	}
	*out = strtod(clean, &end);
	if (*end || end == clean)
		return -EINVAL;
	/* strtod takes hex and forms Python does not: "1e", ".e1" */
	for (char *q = clean; *q; q++)
		if (*q == 'x' || *q == 'X')
			return -EINVAL;
	return 0;
}

int py_parse_float(const char *s, size_t n, double *out)
{
	char *buf, *clean;
	int e;

	if (n > (64u << 20))
		return -EINVAL;
	buf = malloc(2 * (n + 8));
	if (!buf)
		return -ENOMEM;
	clean = buf + n + 8;
	e = parse_float(s, n, buf, clean, n + 8, out);
	free(buf);
	return e;
}

static int parse_int(const char *s, size_t n, int base, char *buf, size_t cap,
		     int64_t *out)
{
	char *p = buf;
	int k = py_ascii_number(s, n, buf, cap), neg = 0, digits = 0;
	unsigned __int128 v = 0;
	int prev_digit = 0;

	if (k < 0)
		return -EINVAL;
	if (base != 0 && (base < 2 || base > 36))
		return -EINVAL;
	if (*p == '+' || *p == '-')
		neg = *p++ == '-';
	if (p[0] == '0' && (base == 0 || base == 16) && (p[1] | 0x20) == 'x')
		base = 16, p += 2, prev_digit = 1;
	else if (p[0] == '0' && (base == 0 || base == 8) &&
		 (p[1] | 0x20) == 'o')
		base = 8, p += 2, prev_digit = 1;
	else if (p[0] == '0' && (base == 0 || base == 2) &&
		 (p[1] | 0x20) == 'b')
		base = 2, p += 2, prev_digit = 1;
	if (base == 0) {
		/* decimal: no leading zeros but for 0 itself */
		base = 10;
		if (p[0] == '0') {
			for (char *q = p; *q; q++)
				if (*q != '0' && *q != '_')
					return -EINVAL;
		}
	}
	for (; *p; p++) {
		int d;

		if (*p == '_') {
			if (!prev_digit || !p[1])
				return -EINVAL;
			prev_digit = 0;
			continue;
		}
		d = *p >= '0' && *p <= '9' ? *p - '0'
		    : (*p | 0x20) >= 'a' && (*p | 0x20) <= 'z'
			? (*p | 0x20) - 'a' + 10
			: 99;
		if (d >= base)
			return -EINVAL;
		v = v * (unsigned)base + (unsigned)d;
		if (v > (unsigned __int128)INT64_MAX + 1) {
			/* the rest decides: a number too large, or none */
			for (char *q = p + 1; *q; q++) {
				int dd =
				    *q >= '0' && *q <= '9' ? *q - '0'
				    : (*q | 0x20) >= 'a' && (*q | 0x20) <= 'z'
					? (*q | 0x20) - 'a' + 10
				    : *q == '_' ? 0
						: 99;

				if (dd >= base ||
				    (*q == '_' && (q[-1] == '_' || !q[1])))
					return -EINVAL;
			}
			return -ERANGE;
		}
		digits++;
		prev_digit = 1;
	}
	if (!digits)
		return -EINVAL;
	if (!neg && v > (unsigned __int128)INT64_MAX)
		return -ERANGE;
	*out = neg ? (int64_t)(0 - (uint64_t)v) : (int64_t)v;
	return 0;
}

int py_parse_int(const char *s, size_t n, int base, int64_t *out)
{
	char *buf;
	int e;

	if (n > (64u << 20))
		return -EINVAL;
	buf = malloc(n + 8);
	if (!buf)
		return -ENOMEM;
	e = parse_int(s, n, base, buf, n + 8, out);
	free(buf);
	return e;
}

/* ---- % formatting -------------------------------------------------- */

/* an int of %d from v: ints, bools, floats (truncated) */
static int pct_int(trender *r, const tv *v, char conv, int64_t *out)
{
	if (v->k == TV_INT || v->k == TV_BOOL) {
		*out = v->u.i;
		return 0;
	}
	if (v->k == TV_FLOAT && (conv == 'd' || conv == 'i' || conv == 'u')) {
		double d = trunc(v->u.d);

		if (isnan(d) || d >= 9223372036854775808.0 ||
		    d < -9223372036854775808.0)
			return tr_fail(r, -EINVAL,
				       "%%%c of a float beyond int64 is not "
				       "supported",
				       conv);
		*out = (int64_t)d;
		return 0;
	}
	if (v->k == TV_UNDEF)
		return tv_undef_fail(r, v);
	return tr_fail(
	    r, -EINVAL, "TypeError: %%%c format: %s is required, not %s", conv,
	    conv == 'd' || conv == 'i' || conv == 'u' ? "a real number"
						      : "an integer",
	    tv_typename(v));
}

static int pct_pad(trender *r, tbuf *b, const char *s, size_t n,
		   size_t width_cp, size_t len_cp, int left)
{
	int e = 0;

	if (!left)
		for (size_t i = len_cp; i < width_cp && !e; i++)
			e = tb_putc(r, b, ' ');
	if (!e)
		e = tb_put(r, b, s, n);
	if (left)
		for (size_t i = len_cp; i < width_cp && !e; i++)
			e = tb_putc(r, b, ' ');
	return e;
}

/* Python's formatting of %d %x %o: digits of the magnitude, the
 * precision's zeros, the prefix of #, the sign, then the width */
static int pct_intfmt(trender *r, tbuf *b, int64_t v, char conv, int left,
		      int plus, int space, int alt, int zero, int64_t width,
		      int64_t prec)
{
	uint64_t mag = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
	char digits[80], head[8];
	size_t nd, nh = 0, len;
	int e = 0;

	nd = (size_t)snprintf(digits, sizeof(digits),
			      conv == 'x'   ? "%llx"
			      : conv == 'X' ? "%llX"
			      : conv == 'o' ? "%llo"
					    : "%llu",
			      (unsigned long long)mag);
	if (v < 0)
		head[nh++] = '-';
	else if (plus)
		head[nh++] = '+';
	else if (space)
		head[nh++] = ' ';
	if (alt && (conv == 'x' || conv == 'X' || conv == 'o')) {
		head[nh++] = '0';
		head[nh++] = conv == 'o' ? 'o' : conv;
	}
	len = nh + (prec > (int64_t)nd ? (size_t)prec : nd);
	if (!left && !zero)
		for (size_t i = len; (int64_t)i < width && !e; i++)
			e = tb_putc(r, b, ' ');
	if (!e)
		e = tb_put(r, b, head, nh);
	if (!left && zero)
		for (size_t i = len; (int64_t)i < width && !e; i++)
			e = tb_putc(r, b, '0');
	for (size_t i = nd; (int64_t)i < prec && !e; i++)
		e = tb_putc(r, b, '0');
	if (!e)
		e = tb_put(r, b, digits, nd);
	if (left)
		for (size_t i = len; (int64_t)i < width && !e; i++)
			e = tb_putc(r, b, ' ');
	return e;
}

int py_percent(trender *r, const tv *fmt, const tv *args, tv *out)
{
	const char *s = fmt->u.s;
	size_t n = fmt->n, i = 0;
	tbuf b = {0};
	const tv *dict = NULL;
	int64_t argidx = 0, arglen;
	int e = 0;

	if (args->k == TV_TUPLE) {
		arglen = args->n;
	} else {
		arglen = -1;
		argidx = -2;
		/* Python: anything with __getitem__ but str and tuple */
		if (args->k == TV_DICT || args->k == TV_JOBJ ||
		    args->k == TV_LIST || args->k == TV_JARR ||
		    args->k == TV_RANGE || args->k == TV_UNDEF)
			dict = args;
	}
	while (i < n && !e) {
		const char *pct = memchr(s + i, '%', n - i);
		int left = 0, plus = 0, space = 0, alt = 0, zero = 0;
		int64_t width = -1, prec = -1;
		tv arg, keyed;
		int have_key = 0;
		char conv;

		if (!pct) {
			e = tb_put(r, &b, s + i, n - i);
			break;
		}
		if ((e = tb_put(r, &b, s + i, (size_t)(pct - s) - i)))
			break;
		i = (size_t)(pct - s) + 1;
		if (i < n && s[i] == '(') {
			size_t start = ++i;
			int depth = 1;
			tv key;

			if (dict && dict->k == TV_UNDEF) {
				e = tv_undef_fail(r, dict);
				break;
			}
			if (!dict || !tv_is_mapping(dict)) {
				e = tr_fail(
				    r, -EINVAL,
				    "TypeError: format requires a mapping");
				break;
			}
			while (i < n && depth) {
				if (s[i] == '(')
					depth++;
				else if (s[i] == ')')
					depth--;
				i++;
			}
			if (depth) {
				e = tr_fail(r, -EINVAL,
					    "ValueError: incomplete "
					    "format key");
				break;
			}
			key = tv_str(s + start, i - 1 - start);
			if (tv_map_get(r, dict, &key, &keyed) != 1) {
				e = tr_fail(r, -EINVAL, "KeyError: '%.*s'",
					    (int)(key.n > 60 ? 60 : key.n),
					    key.u.s);
				break;
			}
			have_key = 1;
			argidx = -1;
		}
		for (; i < n; i++) {
			if (s[i] == '-')
				left = 1;
			else if (s[i] == '+')
				plus = 1;
			else if (s[i] == ' ')
				space = 1;
			else if (s[i] == '#')
				alt = 1;
			else if (s[i] == '0')
				zero = 1;
			else
				break;
		}
		if (i < n && s[i] == '*') {
			e = tr_fail(r, -EINVAL,
				    "'*' widths in %% formatting are "
				    "not supported");
			break;
		}
		while (i < n && s[i] >= '0' && s[i] <= '9' && width <= 1 << 20)
			width = (width < 0 ? 0 : width) * 10 + (s[i++] - '0');
		if (i < n && s[i] == '.') {
			i++;
			prec = 0;
			while (i < n && s[i] >= '0' && s[i] <= '9' &&
			       prec <= 1 << 20)
				prec = prec * 10 + (s[i++] - '0');
			if (i < n && s[i] == '*') {
				e = tr_fail(r, -EINVAL,
					    "'*' precisions in %% formatting "
					    "are not supported");
				break;
			}
		}
		if (width > 1 << 20 || prec > 1 << 20) {
			e = tr_fail(r, -E2BIG,
				    "format width or precision too "
				    "large");
			break;
		}
		while (i < n && (s[i] == 'h' || s[i] == 'l' || s[i] == 'L'))
			i++;
		if (i >= n) {
			e = tr_fail(r, -EINVAL,
				    "ValueError: incomplete format");
			break;
		}
		conv = s[i++];
		if (conv == '%') {
			e = tb_putc(r, &b, '%');
			continue;
		}
		if (have_key) {
			arg = keyed;
		} else if (arglen < 0) {
			if (argidx != -2) {
				e = tr_fail(
				    r, -EINVAL,
				    "TypeError: not enough arguments for "
				    "format string");
				break;
			}
			arg = *args;
			argidx = -1;
		} else {
			if (argidx >= arglen) {
				e = tr_fail(
				    r, -EINVAL,
				    "TypeError: not enough arguments for "
				    "format string");
				break;
			}
			arg = args->u.items[argidx++];
		}
		switch (conv) {
		case 's':
		case 'r': {
			tbuf t = {0};
			size_t len_cp, cut;

			e = conv == 's' ? py_str(r, &t, &arg)
					: py_repr(r, &t, &arg);
			if (!e) {
				len_cp = tu_count(t.p ? t.p : "", t.n);
				cut = t.n;
				if (prec >= 0 && (size_t)prec < len_cp) {
					cut = tu_offset(t.p, t.n, (size_t)prec);
					len_cp = (size_t)prec;
				}
				e = pct_pad(r, &b, t.p ? t.p : "", cut,
					    width < 0 ? 0 : (size_t)width,
					    len_cp, left);
			}
			tb_free(r, &t);
			break;
		}
		case 'd':
		case 'i':
		case 'u':
		case 'x':
		case 'X':
		case 'o': {
			int64_t v = 0;

			if ((e = pct_int(r, &arg, conv, &v)))
				break;
			e = pct_intfmt(r, &b, v, conv, left, plus, space, alt,
				       zero, width, prec);
			break;
		}
		case 'e':
		case 'E':
		case 'f':
		case 'F':
		case 'g':
		case 'G': {
			char f[32];
			double d;
			int k = 0;

			if (arg.k == TV_FLOAT)
				d = arg.u.d;
			else if (arg.k == TV_INT || arg.k == TV_BOOL)
				d = (double)arg.u.i;
			else if (arg.k == TV_UNDEF) {
				e = tv_undef_fail(r, &arg);
				break;
			} else {
				e = tr_fail(
				    r, -EINVAL,
				    "TypeError: must be real number, not "
				    "%s",
				    tv_typename(&arg));
				break;
			}
			if (!isfinite(d) && zero)
				zero =
				    0; /* Python pads inf and nan with blanks */
			f[k++] = '%';
			if (left)
				f[k++] = '-';
			if (plus)
				f[k++] = '+';
			if (space)
				f[k++] = ' ';
			if (alt)
				f[k++] = '#';
			if (zero)
				f[k++] = '0';
			if (width >= 0)
				k += snprintf(f + k, sizeof(f) - (size_t)k,
					      "%lld", (long long)width);
			if (prec >= 0)
				k += snprintf(f + k, sizeof(f) - (size_t)k,
					      ".%lld", (long long)prec);
			f[k++] = conv;
			f[k] = 0;
			e = tb_printf(r, &b, f, d);
			break;
		}
		case 'c': {
			char enc[4];
			uint32_t cp;

			if (arg.k == TV_STR && tu_count(arg.u.s, arg.n) == 1) {
				e = pct_pad(r, &b, arg.u.s, arg.n,
					    width < 0 ? 0 : (size_t)width, 1,
					    left);
				break;
			}
			if (arg.k != TV_INT && arg.k != TV_BOOL) {
				e = tr_fail(
				    r, -EINVAL,
				    "TypeError: %%c requires int or char");
				break;
			}
			if (arg.u.i < 0 || arg.u.i > 0x10FFFF ||
			    (arg.u.i >= 0xD800 && arg.u.i <= 0xDFFF)) {
				e = tr_fail(
				    r, -EINVAL,
				    "OverflowError: %%c arg not in range");
				break;
			}
			cp = (uint32_t)arg.u.i;
			e = pct_pad(r, &b, enc, tu_enc(cp, enc),
				    width < 0 ? 0 : (size_t)width, 1, left);
			break;
		}
		default:
			e = tr_fail(r, -EINVAL,
				    "ValueError: unsupported format character "
				    "'%c'",
				    conv);
			break;
		}
	}
	if (!e && arglen >= 0 && argidx < arglen && !dict)
		e = tr_fail(r, -EINVAL,
			    "TypeError: not all arguments converted "
			    "during string formatting");
	if (!e && arglen < 0 && argidx == -2 && !dict)
		e = tr_fail(r, -EINVAL,
			    "TypeError: not all arguments converted "
			    "during string formatting");
	if (!e)
		e = tb_take(r, &b, out);
	tb_free(r, &b);
	return e;
}

/* ---- str.format ---------------------------------------------------- */

int py_format(trender *r, const tv *fmt, const tv *args, int nargs,
	      const tkw *kw, const tv *kwv, int nkw, tv *out)
{
	const char *s = fmt->u.s;
	size_t n = fmt->n, i = 0;
	tbuf b = {0};
	int autonum = -1, next = 0, e = 0;

	while (i < n && !e) {
		char c = s[i];
		size_t j;
		const tv *arg = NULL;
		char conv = 's';

		if (c == '}') {
			if (i + 1 < n && s[i + 1] == '}') {
				e = tb_putc(r, &b, '}');
				i += 2;
				continue;
			}
			e = tr_fail(r, -EINVAL,
				    "ValueError: Single '}' "
				    "encountered in format string");
			break;
		}
		if (c != '{') {
			j = i;
			while (j < n && s[j] != '{' && s[j] != '}')
				j++;
			e = tb_put(r, &b, s + i, j - i);
			i = j;
			continue;
		}
		if (i + 1 < n && s[i + 1] == '{') {
			e = tb_putc(r, &b, '{');
			i += 2;
			continue;
		}
		j = ++i;
		while (j < n && s[j] != '}' && s[j] != '!' && s[j] != ':' &&
		       s[j] != '.' && s[j] != '[' && s[j] != '{')
			j++;
		if (j >= n) {
			e = tr_fail(r, -EINVAL,
				    "ValueError: expected '}' before "
				    "end of string");
			break;
		}
		if (s[j] == '.' || s[j] == '[' || s[j] == ':' || s[j] == '{') {
			e = tr_fail(r, -EINVAL,
				    "str.format with attributes, indexes or "
				    "format specs is not supported");
			break;
		}
		if (j == i) {
			if (autonum == 0) {
				e = tr_fail(r, -EINVAL,
					    "ValueError: cannot switch from "
					    "manual field specification to "
					    "automatic field numbering");
				break;
			}
			autonum = 1;
			if (next >= nargs) {
				e = tr_fail(r, -EINVAL,
					    "IndexError: Replacement index %d "
					    "out of range for positional args "
					    "tuple",
					    next);
				break;
			}
			arg = &args[next++];
		} else if (s[i] >= '0' && s[i] <= '9') {
			int64_t idx = 0;

			for (size_t k = i; k < j; k++) {
				if (s[k] < '0' || s[k] > '9' || idx > 1 << 20) {
					idx = -1;
					break;
				}
				idx = idx * 10 + (s[k] - '0');
			}
			if (idx < 0) {
				e = tr_fail(r, -EINVAL,
					    "unsupported str.format field");
				break;
			}
			if (autonum == 1) {
				e = tr_fail(r, -EINVAL,
					    "ValueError: cannot switch from "
					    "automatic field numbering to "
					    "manual field specification");
				break;
			}
			autonum = 0;
			if (idx >= nargs) {
				e = tr_fail(
				    r, -EINVAL,
				    "IndexError: Replacement index %lld "
				    "out of range for positional args "
				    "tuple",
				    (long long)idx);
				break;
			}
			arg = &args[idx];
		} else {
			for (int k = 0; k < nkw; k++)
				if (kw[k].n == j - i &&
				    !memcmp(kw[k].name, s + i, j - i))
					arg = &kwv[k];
			if (!arg) {
				e = tr_fail(r, -EINVAL, "KeyError: '%.*s'",
					    (int)((j - i) > 60 ? 60 : j - i),
					    s + i);
				break;
			}
		}
		if (s[j] == '!') {
			if (j + 2 >= n || s[j + 2] != '}' ||
			    (s[j + 1] != 'r' && s[j + 1] != 's')) {
				e = tr_fail(
				    r, -EINVAL,
				    "unsupported str.format conversion");
				break;
			}
			conv = s[j + 1];
			j += 2;
		}
		e = conv == 'r' ? py_repr(r, &b, arg) : py_str(r, &b, arg);
		i = j + 1;
	}
	if (!e)
		e = tb_take(r, &b, out);
	tb_free(r, &b);
	return e;
}
