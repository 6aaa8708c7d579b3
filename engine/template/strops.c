/* strops.c: Python's str operations on UTF-8 strings, by code point:
 * case mappings (full, with the final sigma of lower()), strip, find,
 * replace, split, splitlines, join, concatenation (with Markup's escaping),
 * repetition, markupsafe's escape and slicing. */
#include <errno.h>
#include <string.h>

#include "tmpl.h"
#include "tmpl_unidata.h"

static int is_ascii(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] >= 0x80)
			return 0;
	return 1;
}

/* the code point before byte offset i */
static size_t prev_cp(const char *s, size_t i, uint32_t *cp)
{
	size_t k = 1;

	while (k < 4 && k < i && ((unsigned char)s[i - k] & 0xC0) == 0x80)
		k++;
	tu_dec(s + i - k, k, cp);
	return k;
}

/* CPython's handle_capital_sigma: the sigma at byte i (2 bytes) of s */
static uint32_t final_sigma(const char *s, size_t n, size_t i)
{
	size_t j = i;
	uint32_t c = 0;
	int final = 0;

	while (j > 0) {
		j -= prev_cp(s, j, &c);
		if (!(tu_flags(c) & TU_IGNORABLE)) {
			final = (tu_flags(c) & TU_CASED) != 0;
			break;
		}
		if (!j)
			c = 0;
	}
	if (final && i + 2 < n) {
		j = i + 2;
		while (j < n) {
			j += tu_dec(s + j, n - j, &c);
			if (!(tu_flags(c) & TU_IGNORABLE)) {
				final = !(tu_flags(c) & TU_CASED);
				return final ? 0x3C2 : 0x3C3;
			}
		}
	}
	return final ? 0x3C2 : 0x3C3;
}

static int lower_at(const char *s, size_t n, size_t i, uint32_t cp,
		    uint32_t *out)
{
	if (cp == 0x3A3) {
		out[0] = final_sigma(s, n, i);
		return 1;
	}
	return tu_lower1(cp, out);
}

int ps_case(trender *r, const tv *s, int how, tv *out)
{
	const char *p = s->u.s;
	size_t n = s->n, i = 0, k = 0;
	int prev_cased = 0, first = 1;
	char *o;
	int e;

	if (is_ascii(p, n)) {
		if ((e = tv_newstr(r, n, out, &o)))
			return e;
		for (i = 0; i < n; i++) {
			char c = p[i];
			int up = c >= 'A' && c <= 'Z',
			    lo = c >= 'a' && c <= 'z';
			int to_up;

			switch (how) {
			case CASE_LOWER:
				to_up = 0;
				break;
			case CASE_UPPER:
				to_up = 1;
				break;
			case CASE_TITLE:
				to_up = !prev_cased;
				break;
			case CASE_CAPITALIZE:
				to_up = first;
				break;
			default:
				to_up = lo;
				break;
			}
			if (to_up && lo)
				c = (char)(c - 32);
			else if (!to_up && up)
				c = (char)(c + 32);
			prev_cased = up || lo;
			first = 0;
			o[i] = c;
		}
		return 0;
	}
	/* a mapping may triple a code point: 3 * 4 bytes at most */
	if (n > (UINT32_MAX - 1) / 3)
		return tr_fail(r, -E2BIG, "string too long");
	o = tr_alloc(r, n * 3 + 1);
	if (!o)
		return -E2BIG;
	while (i < n) {
		uint32_t cp, m[3];
		size_t len = tu_dec(p + i, n - i, &cp);
		uint16_t f = tu_flags(cp);
		int nm;

		switch (how) {
		case CASE_LOWER:
			nm = lower_at(p, n, i, cp, m);
			break;
		case CASE_UPPER:
			nm = tu_upper1(cp, m);
			break;
		case CASE_TITLE:
			nm = prev_cased ? lower_at(p, n, i, cp, m)
					: tu_title1(cp, m);
			prev_cased = (f & TU_CASED) != 0;
			break;
		case CASE_CAPITALIZE:
			nm =
			    first ? tu_title1(cp, m) : lower_at(p, n, i, cp, m);
			break;
		default:
			if (f & TU_UPPER)
				nm = lower_at(p, n, i, cp, m);
			else if (f & TU_LOWER)
				nm = tu_upper1(cp, m);
			else
				nm = (m[0] = cp, 1);
			break;
		}
		first = 0;
		for (int j = 0; j < nm; j++)
			k += tu_enc(m[j], o + k);
		i += len;
	}
	o[k] = 0;
	*out = tv_str(o, k);
	return 0;
}

/* ---- strip --------------------------------------------------------- */

static int in_chars(uint32_t cp, const tv *chars)
{
	size_t i = 0;
	uint32_t c;

	if (!chars)
		return tu_isspace(cp);
	while (i < chars->n) {
		i += tu_dec(chars->u.s + i, chars->n - i, &c);
		if (c == cp)
			return 1;
	}
	return 0;
}

tv ps_strip(const tv *s, const tv *chars, int which)
{
	size_t a = 0, b = s->n;
	uint32_t cp;
	tv out;

	if (chars && chars->k != TV_STR)
		chars = NULL;
	if (which & 1)
		while (a < b) {
			size_t len = tu_dec(s->u.s + a, b - a, &cp);

			if (!in_chars(cp, chars))
				break;
			a += len;
		}
	if (which & 2)
		while (b > a) {
			size_t len = prev_cp(s->u.s, b, &cp);

			if (!in_chars(cp, chars))
				break;
			b -= len;
		}
	out = tv_str(s->u.s + a, b - a);
	return out;
}

/* ---- find, replace, split ------------------------------------------ */

int ps_find(const char *h, size_t hn, const char *nd, size_t nn, size_t from)
{
	const char *p;

	if (from > hn)
		return -1;
	if (!nn)
		return (int)from;
	p = memmem(h + from, hn - from, nd, nn);
	return p ? (int)(p - h) : -1;
}

static size_t find_from(const char *h, size_t hn, const char *nd, size_t nn,
			size_t from)
{
	const char *p;

	if (!nn)
		return from;
	if (from >= hn || hn - from < nn)
		return (size_t)-1;
	p = memmem(h + from, hn - from, nd, nn);
	return p ? (size_t)(p - h) : (size_t)-1;
}

int ps_replace(trender *r, const tv *s, const tv *old, const tv *new_,
	       int64_t count, tv *out)
{
	tbuf b = {0};
	size_t i = 0, at;
	int64_t done = 0;
	int e = 0;

	if (count < 0)
		count = INT64_MAX;
	if (!old->n) {
		/* new before every code point and at the end */
		while (!e && done < count) {
			uint32_t cp;

			e = tb_put(r, &b, new_->u.s, new_->n);
			done++;
			if (e || i >= s->n)
				break;
			at = tu_dec(s->u.s + i, s->n - i, &cp);
			e = tb_put(r, &b, s->u.s + i, at);
			i += at;
		}
		if (!e)
			e = tb_put(r, &b, s->u.s + i, s->n - i);
	} else {
		while (!e && done < count &&
		       (at = find_from(s->u.s, s->n, old->u.s, old->n, i)) !=
			   (size_t)-1) {
			if (!(e = tb_put(r, &b, s->u.s + i, at - i)))
				e = tb_put(r, &b, new_->u.s, new_->n);
			i = at + old->n;
			done++;
			if (!e)
				e = tr_step(r);
		}
		if (!e)
			e = tb_put(r, &b, s->u.s + i, s->n - i);
	}
	if (!e)
		e = tb_take(r, &b, out);
	tb_free(r, &b);
	return e;
}

/* a list being built in the arena */
typedef struct tlb {
	tv *items;
	size_t n, cap;
} tlb;

static int tlb_push(trender *r, tlb *l, const tv *v)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 8;
		tv *ni = tr_alloc(r, cap * sizeof(tv));

		if (!ni)
			return -E2BIG;
		if (l->n)
			memcpy(ni, l->items, l->n * sizeof(tv));
		l->items = ni;
		l->cap = cap;
	}
	l->items[l->n++] = *v;
	return tr_step(r);
}

static int tlb_done(trender *r, tlb *l, int reverse, tv *out)
{
	if (l->n > UINT32_MAX)
		return tr_fail(r, -E2BIG, "list too long");
	if (reverse)
		for (size_t i = 0; i < l->n / 2; i++) {
			tv t = l->items[i];

			l->items[i] = l->items[l->n - 1 - i];
			l->items[l->n - 1 - i] = t;
		}
	memset(out, 0, sizeof(*out));
	out->k = TV_LIST;
	out->n = (uint32_t)l->n;
	out->u.items = l->items;
	return 0;
}

static size_t space_at(const char *s, size_t n, size_t i)
{
	uint32_t cp;
	size_t len;

	if ((unsigned char)s[i] < 0x80)
		return tu_isspace((unsigned char)s[i]) ? 1 : 0;
	len = tu_dec(s + i, n - i, &cp);
	return tu_isspace(cp) ? len : 0;
}

static size_t space_before(const char *s, size_t i)
{
	uint32_t cp;
	size_t len = prev_cp(s, i, &cp);

	return tu_isspace(cp) ? len : 0;
}

int ps_split(trender *r, const tv *s, const tv *sep, int64_t maxsplit,
	     int right, tv *out)
{
	const char *p = s->u.s;
	size_t n = s->n;
	tlb l = {0};
	tv part;
	int e;

	if (maxsplit < 0)
		maxsplit = INT64_MAX;
	if (!sep || sep->k == TV_NONE) {
		if (!right) {
			size_t i = 0, k;

			for (;;) {
				size_t start;

				while (i < n && (k = space_at(p, n, i)))
					i += k;
				if (i >= n)
					break;
				if (!maxsplit) {
					part = tv_str(p + i, n - i);
					if ((e = tlb_push(r, &l, &part)))
						return e;
					break;
				}
				start = i;
				while (i < n && !space_at(p, n, i))
					i += tu_dec(p + i, n - i,
						    &(uint32_t){0});
				part = tv_str(p + start, i - start);
				if ((e = tlb_push(r, &l, &part)))
					return e;
				maxsplit--;
			}
		} else {
			size_t i = n, k;

			for (;;) {
				size_t end;

				while (i > 0 && (k = space_before(p, i)))
					i -= k;
				if (!i)
					break;
				if (!maxsplit) {
					part = tv_str(p, i);
					if ((e = tlb_push(r, &l, &part)))
						return e;
					break;
				}
				end = i;
				while (i > 0 && !space_before(p, i))
					i -= prev_cp(p, i, &(uint32_t){0});
				part = tv_str(p + i, end - i);
				if ((e = tlb_push(r, &l, &part)))
					return e;
				maxsplit--;
			}
		}
		return tlb_done(r, &l, right, out);
	}
	if (!sep->n)
		return tr_fail(r, -EINVAL, "ValueError: empty separator");
	if (!right) {
		size_t i = 0, at;

		while (maxsplit > 0 && (at = find_from(p, n, sep->u.s, sep->n,
						       i)) != (size_t)-1) {
			part = tv_str(p + i, at - i);
			if ((e = tlb_push(r, &l, &part)))
				return e;
			i = at + sep->n;
			maxsplit--;
		}
		part = tv_str(p + i, n - i);
		if ((e = tlb_push(r, &l, &part)))
			return e;
		return tlb_done(r, &l, 0, out);
	}
	{
		size_t end = n;

		while (maxsplit > 0 && end >= sep->n) {
			size_t at = (size_t)-1;

			for (size_t k = end - sep->n + 1; k-- > 0;)
				if (!memcmp(p + k, sep->u.s, sep->n)) {
					at = k;
					break;
				}
			if (at == (size_t)-1)
				break;
			part = tv_str(p + at + sep->n, end - at - sep->n);
			if ((e = tlb_push(r, &l, &part)))
				return e;
			end = at;
			maxsplit--;
		}
		part = tv_str(p, end);
		if ((e = tlb_push(r, &l, &part)))
			return e;
		return tlb_done(r, &l, 1, out);
	}
}

/* a line boundary of str.splitlines at i: its length (\r\n is 2) */
static size_t line_break(const char *s, size_t n, size_t i)
{
	unsigned char c = (unsigned char)s[i];
	uint32_t cp;
	size_t len;

	if (c == '\r')
		return i + 1 < n && s[i + 1] == '\n' ? 2 : 1;
	if (c == '\n' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d ||
	    c == 0x1e)
		return 1;
	if (c < 0x80)
		return 0;
	len = tu_dec(s + i, n - i, &cp);
	return cp == 0x85 || cp == 0x2028 || cp == 0x2029 ? len : 0;
}

int ps_splitlines(trender *r, const tv *s, int keepends, tv *out)
{
	const char *p = s->u.s;
	size_t n = s->n, i = 0, start = 0;
	tlb l = {0};
	tv part;
	int e;

	while (i < n) {
		size_t k = line_break(p, n, i);
		uint32_t cp;

		if (!k) {
			i += tu_dec(p + i, n - i, &cp);
			continue;
		}
		part = tv_str(p + start, (keepends ? i + k : i) - start);
		if ((e = tlb_push(r, &l, &part)))
			return e;
		i += k;
		start = i;
	}
	if (start < n) {
		part = tv_str(p + start, n - start);
		if ((e = tlb_push(r, &l, &part)))
			return e;
	}
	return tlb_done(r, &l, 0, out);
}

int ps_join(trender *r, const tv *sep, const tv *items, tv *out)
{
	tbuf b = {0};
	tcur c;
	tv item;
	int e, got, first = 1;
	size_t idx = 0;

	if ((e = tc_open(r, items, &c)))
		return e;
	while ((got = tc_next(r, &c, &item)) == 1) {
		if (item.k != TV_STR) {
			e = tr_fail(
			    r, -EINVAL,
			    "TypeError: sequence item %zu: expected str "
			    "instance, %s found",
			    idx, tv_typename(&item));
			break;
		}
		if (!first && (e = tb_put(r, &b, sep->u.s, sep->n)))
			break;
		if ((e = tb_put(r, &b, item.u.s, item.n)))
			break;
		first = 0;
		idx++;
	}
	if (!e && got < 0)
		e = got;
	if (!e)
		e = tb_take(r, &b, out);
	tb_free(r, &b);
	return e;
}

/* ---- building strings ---------------------------------------------- */

int ps_escape(trender *r, const tv *s, tv *out)
{
	size_t extra = 0, k = 0;
	char *o;
	int e;

	if (s->f & TVF_MARKUP) {
		*out = *s;
		return 0;
	}
	for (size_t i = 0; i < s->n; i++) {
		char c = s->u.s[i];

		extra += c == '&'		 ? 4
			 : c == '<' || c == '>'	 ? 3
			 : c == '"' || c == '\'' ? 4
						 : 0;
	}
	if ((e = tv_newstr(r, s->n + extra, out, &o)))
		return e;
	for (size_t i = 0; i < s->n; i++) {
		const char *rep = NULL;

		switch (s->u.s[i]) {
		case '&':
			rep = "&amp;";
			break;
		case '<':
			rep = "&lt;";
			break;
		case '>':
			rep = "&gt;";
			break;
		case '"':
			rep = "&#34;";
			break;
		case '\'':
			rep = "&#39;";
			break;
		default:
			o[k++] = s->u.s[i];
			continue;
		}
		memcpy(o + k, rep, strlen(rep));
		k += strlen(rep);
	}
	out->f = TVF_MARKUP;
	return 0;
}

int ps_concat(trender *r, const tv *a, const tv *b, tv *out)
{
	tv x = *a, y = *b;
	int markup = (a->f | b->f) & TVF_MARKUP, e;
	char *o;

	if (markup) {
		/* Markup + str escapes the str; str + Markup likewise */
		if (!(x.f & TVF_MARKUP) && (e = ps_escape(r, a, &x)))
			return e;
		if (!(y.f & TVF_MARKUP) && (e = ps_escape(r, b, &y)))
			return e;
	}
	if (!y.n && !markup) {
		*out = x;
		return 0;
	}
	if (!x.n && !markup) {
		*out = y;
		return 0;
	}
	if ((size_t)x.n + y.n > UINT32_MAX - 1)
		return tr_fail(r, -E2BIG, "string too long");
	if ((e = tv_newstr(r, (size_t)x.n + y.n, out, &o)))
		return e;
	memcpy(o, x.u.s, x.n);
	memcpy(o + x.n, y.u.s, y.n);
	out->f = (uint8_t)markup;
	return 0;
}

int ps_repeat(trender *r, const tv *s, int64_t n, tv *out)
{
	char *o;
	int e;

	if (n <= 0 || !s->n) {
		*out = TV_LIT("");
		out->f = s->f;
		return 0;
	}
	if ((uint64_t)n > (UINT32_MAX - 1) / s->n ||
	    (size_t)n * s->n > r->lim.max_memory)
		return tr_fail(r, -E2BIG,
			       "max_memory exceeded (%zu bytes): a "
			       "string of %lld times %u bytes",
			       r->lim.max_memory, (long long)n, s->n);
	if ((e = tv_newstr(r, (size_t)n * s->n, out, &o)))
		return e;
	for (int64_t i = 0; i < n; i++)
		memcpy(o + (size_t)i * s->n, s->u.s, s->n);
	out->f = s->f;
	return 0;
}

/* ---- slices -------------------------------------------------------- */

int ps_slice(trender *r, const tv *s, int64_t start, int64_t stop, int64_t step,
	     tv *out)
{
	size_t *offs = NULL, ncp, k = 0;
	char *o;
	int e;

	if (step == 1) {
		size_t a, b;

		if (stop <= start) {
			*out = TV_LIT("");
			return 0;
		}
		if (is_ascii(s->u.s, s->n)) {
			a = (size_t)start;
			b = (size_t)stop;
		} else {
			a = tu_offset(s->u.s, s->n, (size_t)start);
			b = a + tu_offset(s->u.s + a, s->n - a,
					  (size_t)(stop - start));
		}
		*out = tv_str(s->u.s + a, b - a);
		return 0;
	}
	ncp = tu_count(s->u.s, s->n);
	offs = tr_alloc(r, (ncp + 1) * sizeof(size_t));
	if (!offs)
		return -E2BIG;
	for (size_t i = 0, c = 0; i <= s->n; i++)
		if (i == s->n || ((unsigned char)s->u.s[i] & 0xC0) != 0x80)
			offs[c++] = i;
	if ((e = tv_newstr(r, s->n, out, &o)))
		return e;
	for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
		size_t a = offs[i], len = offs[i + 1] - a;

		memcpy(o + k, s->u.s + a, len);
		k += len;
	}
	o[k] = 0;
	out->n = (uint32_t)k;
	return 0;
}
