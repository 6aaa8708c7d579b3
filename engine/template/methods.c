/* methods.c: the methods of Python's str, dict, list and tuple that
 * templates call, and the loop's cycle() and changed(). Every attribute
 * name that Python's types have is listed, so that one the language here
 * lacks fails when called, and the sandbox's unsafe ones (the mutating
 * methods of lists and dicts) are undefined, as jinja2 makes them. */
#include <errno.h>
#include <string.h>

#include "tmpl.h"
#include "tmpl_unidata.h"

enum {
	M_STR = 1,
	M_DICT = 2,
	M_LIST = 4,
	M_TUPLE = 8,
	M_INT = 16,
	M_FLOAT = 32,
	M_RANGE = 64,
	M_LOOP = 128,
	M_VIEW = 256
};

/* name, types having it, types where it is unsafe, types where it is
 * implemented, types where it is a plain attribute (not supported) */
#define TM_LIST(X)                                                             \
	X(as_integer_ratio, M_INT | M_FLOAT, 0, 0, 0)                          \
	X(bit_count, M_INT, 0, 0, 0)                                           \
	X(bit_length, M_INT, 0, 0, 0)                                          \
	X(conjugate, M_INT | M_FLOAT, 0, 0, 0)                                 \
	X(denominator, M_INT, 0, 0, M_INT)                                     \
	X(from_bytes, M_INT, 0, 0, 0)                                          \
	X(imag, M_INT | M_FLOAT, 0, 0, M_INT | M_FLOAT)                        \
	X(numerator, M_INT, 0, 0, M_INT)                                       \
	X(real, M_INT | M_FLOAT, 0, 0, M_INT | M_FLOAT)                        \
	X(to_bytes, M_INT, 0, 0, 0)                                            \
	X(fromhex, M_FLOAT, 0, 0, 0)                                           \
	X(hex, M_FLOAT, 0, 0, 0)                                               \
	X(is_integer, M_FLOAT, 0, 0, 0)                                        \
	X(capitalize, M_STR, 0, M_STR, 0)                                      \
	X(casefold, M_STR, 0, M_STR, 0)                                        \
	X(center, M_STR, 0, M_STR, 0)                                          \
	X(count, M_STR | M_LIST | M_TUPLE | M_RANGE, 0,                        \
	  M_STR | M_LIST | M_TUPLE, 0)                                         \
	X(encode, M_STR, 0, 0, 0)                                              \
	X(endswith, M_STR, 0, M_STR, 0)                                        \
	X(expandtabs, M_STR, 0, 0, 0)                                          \
	X(find, M_STR, 0, M_STR, 0)                                            \
	X(format, M_STR, 0, M_STR, 0)                                          \
	X(format_map, M_STR, 0, 0, 0)                                          \
	X(index, M_STR | M_LIST | M_TUPLE | M_RANGE, 0,                        \
	  M_STR | M_LIST | M_TUPLE, 0)                                         \
	X(isalnum, M_STR, 0, M_STR, 0)                                         \
	X(isalpha, M_STR, 0, M_STR, 0)                                         \
	X(isascii, M_STR, 0, M_STR, 0)                                         \
	X(isdecimal, M_STR, 0, M_STR, 0)                                       \
	X(isdigit, M_STR, 0, M_STR, 0)                                         \
	X(isidentifier, M_STR, 0, 0, 0)                                        \
	X(islower, M_STR, 0, M_STR, 0)                                         \
	X(isnumeric, M_STR, 0, M_STR, 0)                                       \
	X(isprintable, M_STR, 0, M_STR, 0)                                     \
	X(isspace, M_STR, 0, M_STR, 0)                                         \
	X(istitle, M_STR, 0, M_STR, 0)                                         \
	X(isupper, M_STR, 0, M_STR, 0)                                         \
	X(join, M_STR, 0, M_STR, 0)                                            \
	X(ljust, M_STR, 0, M_STR, 0)                                           \
	X(lower, M_STR, 0, M_STR, 0)                                           \
	X(lstrip, M_STR, 0, M_STR, 0)                                          \
	X(maketrans, M_STR, 0, 0, 0)                                           \
	X(partition, M_STR, 0, M_STR, 0)                                       \
	X(removeprefix, M_STR, 0, M_STR, 0)                                    \
	X(removesuffix, M_STR, 0, M_STR, 0)                                    \
	X(replace, M_STR, 0, M_STR, 0)                                         \
	X(rfind, M_STR, 0, M_STR, 0)                                           \
	X(rindex, M_STR, 0, M_STR, 0)                                          \
	X(rjust, M_STR, 0, M_STR, 0)                                           \
	X(rpartition, M_STR, 0, M_STR, 0)                                      \
	X(rsplit, M_STR, 0, M_STR, 0)                                          \
	X(rstrip, M_STR, 0, M_STR, 0)                                          \
	X(split, M_STR, 0, M_STR, 0)                                           \
	X(splitlines, M_STR, 0, M_STR, 0)                                      \
	X(startswith, M_STR, 0, M_STR, 0)                                      \
	X(strip, M_STR, 0, M_STR, 0)                                           \
	X(swapcase, M_STR, 0, M_STR, 0)                                        \
	X(title, M_STR, 0, M_STR, 0)                                           \
	X(translate, M_STR, 0, 0, 0)                                           \
	X(upper, M_STR, 0, M_STR, 0)                                           \
	X(zfill, M_STR, 0, M_STR, 0)                                           \
	X(clear, M_DICT | M_LIST, M_DICT | M_LIST, 0, 0)                       \
	X(copy, M_DICT | M_LIST, 0, M_DICT | M_LIST, 0)                        \
	X(fromkeys, M_DICT, 0, 0, 0)                                           \
	X(get, M_DICT, 0, M_DICT, 0)                                           \
	X(items, M_DICT, 0, M_DICT, 0)                                         \
	X(keys, M_DICT, 0, M_DICT, 0)                                          \
	X(pop, M_DICT | M_LIST, M_DICT | M_LIST, 0, 0)                         \
	X(popitem, M_DICT, M_DICT, 0, 0)                                       \
	X(setdefault, M_DICT, M_DICT, 0, 0)                                    \
	X(update, M_DICT, M_DICT, 0, 0)                                        \
	X(values, M_DICT, 0, M_DICT, 0)                                        \
	X(append, M_LIST, M_LIST, 0, 0)                                        \
	X(extend, M_LIST, M_LIST, 0, 0)                                        \
	X(insert, M_LIST, M_LIST, 0, 0)                                        \
	X(remove, M_LIST, M_LIST, 0, 0)                                        \
	X(reverse, M_LIST, M_LIST, 0, 0)                                       \
	X(sort, M_LIST, M_LIST, 0, 0)                                          \
	X(start, M_RANGE, 0, 0, 0)                                             \
	X(stop, M_RANGE, 0, 0, 0)                                              \
	X(step, M_RANGE, 0, 0, 0)                                              \
	X(isdisjoint, M_VIEW, 0, 0, 0)                                         \
	X(mapping, M_VIEW, 0, 0, M_VIEW)                                       \
	X(cycle, M_LOOP, 0, M_LOOP, 0)                                         \
	X(changed, M_LOOP, 0, M_LOOP, 0)

#define TM_ENUM(name, has, unsafe, impl, attr) TM_##name,
enum { TM_LIST(TM_ENUM) TM_COUNT };

static const struct tm_entry {
	const char *name;
	uint16_t has, unsafe, impl, attr;
} tm_table[] = {
#define TM_ROW(name, has, unsafe, impl, attr) {#name, has, unsafe, impl, attr},
    TM_LIST(TM_ROW)};

int tm_lookup(const char *name, size_t n)
{
	for (int i = 0; i < TM_COUNT; i++)
		if (strlen(tm_table[i].name) == n &&
		    !memcmp(tm_table[i].name, name, n))
			return i;
	return -1;
}

const char *tm_name(int id)
{
	return id >= 0 && id < TM_COUNT ? tm_table[id].name : "?";
}

static int type_bit(const tv *v)
{
	switch (v->k) {
	case TV_STR:
		return M_STR;
	case TV_DICT:
	case TV_JOBJ:
		return M_DICT;
	case TV_LIST:
	case TV_JARR:
		return M_LIST;
	case TV_TUPLE:
		return M_TUPLE;
	case TV_INT:
	case TV_BOOL:
		return M_INT;
	case TV_FLOAT:
		return M_FLOAT;
	case TV_RANGE:
		return M_RANGE;
	case TV_LOOP:
		return M_LOOP;
	case TV_VIEW:
		return M_VIEW;
	default:
		return 0;
	}
}

/* 0: not an attribute of obj; 1: a method here; 2: unsafe; 3: a method
 * the language here lacks; 4: a plain attribute it lacks */
int tm_has(const tv *obj, int id)
{
	int bit = type_bit(obj);
	const struct tm_entry *m;

	if (id < 0 || id >= TM_COUNT || !bit)
		return 0;
	m = &tm_table[id];
	if (!(m->has & bit))
		return 0;
	if (m->unsafe & bit)
		return 2;
	if (m->impl & bit)
		return 1;
	if (obj->k == TV_RANGE)
		return 4;
	return m->attr & bit ? 4 : 3;
}

/* ---- arguments ----------------------------------------------------- */

int targs_bind(trender *r, const char *what, const char *const *spec, tv *args,
	       int nargs, const tkw *kw, tv *kwv, int nkw, tv *vals, int *has)
{
	int n = 0;

	while (spec[n])
		n++;
	if (nargs > n)
		return tr_fail(r, -EINVAL,
			       "TypeError: %s takes at most %d arguments (%d "
			       "given)",
			       what, n, nargs);
	for (int i = 0; i < n; i++) {
		has[i] = i < nargs;
		vals[i] = i < nargs ? args[i] : tv_undef();
	}
	for (int k = 0; k < nkw; k++) {
		int i;

		for (i = 0; i < n; i++)
			if (strlen(spec[i]) == kw[k].n &&
			    !memcmp(spec[i], kw[k].name, kw[k].n))
				break;
		if (i == n)
			return tr_fail(
			    r, -EINVAL,
			    "TypeError: %s got an unexpected keyword "
			    "argument '%.*s'",
			    what, (int)(kw[k].n > 60 ? 60 : kw[k].n),
			    kw[k].name);
		if (has[i])
			return tr_fail(r, -EINVAL,
				       "TypeError: %s got multiple values for "
				       "argument '%s'",
				       what, spec[i]);
		has[i] = 1;
		vals[i] = kwv[k];
	}
	return 0;
}

int targ_int(trender *r, const char *what, const tv *v, int64_t *out)
{
	if (v->k == TV_INT || v->k == TV_BOOL) {
		*out = v->u.i;
		return 0;
	}
	if (v->k == TV_UNDEF)
		return tv_undef_fail(r, v);
	return tr_fail(r, -EINVAL,
		       "TypeError: %s: '%s' object cannot be interpreted as an "
		       "integer",
		       what, tv_typename(v));
}

static int need_str(trender *r, const char *what, const tv *v)
{
	if (v->k == TV_STR)
		return 0;
	if (v->k == TV_UNDEF)
		return tv_undef_fail(r, v);
	return tr_fail(r, -EINVAL, "TypeError: %s: must be str, not %s", what,
		       tv_typename(v));
}

static int no_kw(trender *r, const char *what, int nkw)
{
	if (nkw)
		return tr_fail(r, -EINVAL,
			       "TypeError: %s() takes no keyword arguments",
			       what);
	return 0;
}

static int nargs_range(trender *r, const char *what, int nargs, int lo, int hi)
{
	if (nargs < lo || nargs > hi)
		return tr_fail(r, -EINVAL,
			       "TypeError: %s() takes %d to %d arguments (%d "
			       "given)",
			       what, lo, hi, nargs);
	return 0;
}

/* ---- str ----------------------------------------------------------- */

/* the code points [start, end) of s as Python's s[start:end] picks them
 * (None or ints), in bytes */
static int str_range(trender *r, const tv *s, const tv *start, const tv *end,
		     size_t *a, size_t *b)
{
	int64_t len = (int64_t)tu_count(s->u.s, s->n), x = 0, y = len;
	int e;

	if (start && start->k != TV_NONE) {
		if ((e = targ_int(r, "slice index", start, &x)))
			return e;
		if (x < 0 && (x += len) < 0)
			x = 0;
	}
	if (end && end->k != TV_NONE) {
		if ((e = targ_int(r, "slice index", end, &y)))
			return e;
		if (y < 0 && (y += len) < 0)
			y = 0;
		if (y > len)
			y = len;
	}
	if (x > len || y < x) {
		*a = *b = s->n;
		return 1; /* nothing there, not even an empty string */
	}
	*a = tu_offset(s->u.s, s->n, (size_t)x);
	*b = tu_offset(s->u.s, s->n, (size_t)y);
	return 0;
}

static int str_pred(const tv *s, int id)
{
	int any = 0, cased = 0, prev = 0;
	size_t i = 0;

	if (id == TM_isascii) {
		for (size_t k = 0; k < s->n; k++)
			if ((unsigned char)s->u.s[k] >= 0x80)
				return 0;
		return 1;
	}
	while (i < s->n) {
		uint32_t cp;
		uint16_t f;

		i += tu_dec(s->u.s + i, s->n - i, &cp);
		f = tu_flags(cp);
		any = 1;
		switch (id) {
		case TM_isalnum:
			if (!(f &
			      (TU_ALPHA | TU_DECIMAL | TU_DIGIT | TU_NUMERIC)))
				return 0;
			break;
		case TM_isalpha:
			if (!(f & TU_ALPHA))
				return 0;
			break;
		case TM_isdecimal:
			if (!(f & TU_DECIMAL))
				return 0;
			break;
		case TM_isdigit:
			if (!(f & TU_DIGIT))
				return 0;
			break;
		case TM_isnumeric:
			if (!(f & TU_NUMERIC))
				return 0;
			break;
		case TM_isprintable:
			if (!(f & TU_PRINTABLE))
				return 0;
			break;
		case TM_isspace:
			if (!tu_isspace(cp))
				return 0;
			break;
		case TM_islower:
			if (f & (TU_UPPER | TU_TITLE))
				return 0;
			if (f & TU_LOWER)
				cased = 1;
			break;
		case TM_isupper:
			if (f & (TU_LOWER | TU_TITLE))
				return 0;
			if (f & TU_UPPER)
				cased = 1;
			break;
		case TM_istitle:
			if (f & (TU_UPPER | TU_TITLE)) {
				if (prev)
					return 0;
				prev = cased = 1;
			} else if (f & TU_LOWER) {
				if (!prev)
					return 0;
				prev = cased = 1;
			} else {
				prev = 0;
			}
			break;
		default:
			return 0;
		}
	}
	if (id == TM_isprintable)
		return 1;
	if (id == TM_islower || id == TM_isupper || id == TM_istitle)
		return cased;
	return any;
}

static int str_pad(trender *r, const tv *s, int id, tv *args, int nargs,
		   tv *out)
{
	int64_t width = 0, len = (int64_t)tu_count(s->u.s, s->n), marg, left;
	const char *fill = " ";
	size_t fn = 1, k = 0;
	char *o;
	int e;

	if ((e = nargs_range(r, tm_name(id), nargs, 1,
			     id == TM_zfill ? 1 : 2)) ||
	    (e = targ_int(r, tm_name(id), &args[0], &width)))
		return e;
	if (nargs > 1) {
		if ((e = need_str(r, tm_name(id), &args[1])))
			return e;
		if (tu_count(args[1].u.s, args[1].n) != 1)
			return tr_fail(r, -EINVAL,
				       "TypeError: The fill character must be "
				       "exactly one character long");
		fill = args[1].u.s;
		fn = args[1].n;
	}
	if (width <= len) {
		*out = *s;
		out->f = 0;
		return 0;
	}
	if (width > (int64_t)(r->lim.max_memory / 4))
		return tr_fail(r, -E2BIG, "max_memory exceeded (%zu bytes)",
			       r->lim.max_memory);
	marg = width - len;
	if (id == TM_center)
		left = marg / 2 + (marg & width & 1);
	else if (id == TM_ljust)
		left = 0;
	else
		left = marg;
	if (id == TM_zfill) {
		fill = "0";
		fn = 1;
	}
	if ((e = tv_newstr(r, s->n + (size_t)marg * fn, out, &o)))
		return e;
	if (id == TM_zfill && s->n && (s->u.s[0] == '+' || s->u.s[0] == '-')) {
		o[k++] = s->u.s[0];
		for (int64_t i = 0; i < marg; i++)
			o[k++] = '0';
		memcpy(o + k, s->u.s + 1, s->n - 1);
		return 0;
	}
	for (int64_t i = 0; i < left; i++, k += fn)
		memcpy(o + k, fill, fn);
	memcpy(o + k, s->u.s, s->n);
	k += s->n;
	for (int64_t i = left; i < marg; i++, k += fn)
		memcpy(o + k, fill, fn);
	return 0;
}

static int str_find(trender *r, const tv *s, int id, tv *args, int nargs,
		    tv *out)
{
	size_t a, b;
	int64_t at = -1;
	int e;

	if ((e = nargs_range(r, tm_name(id), nargs, 1, 3)) ||
	    (e = need_str(r, tm_name(id), &args[0])))
		return e;
	e = str_range(r, s, nargs > 1 ? &args[1] : NULL,
		      nargs > 2 ? &args[2] : NULL, &a, &b);
	if (e < 0)
		return e;
	if (!e && b >= a && b - a >= args[0].n) {
		if (id == TM_find || id == TM_index) {
			int p = ps_find(s->u.s, b, args[0].u.s, args[0].n, a);

			at = p;
		} else {
			for (size_t k = b - args[0].n + 1; k-- > a;)
				if (!memcmp(s->u.s + k, args[0].u.s,
					    args[0].n)) {
					at = (int64_t)k;
					break;
				}
		}
	}
	if (at < 0) {
		if (id == TM_index || id == TM_rindex)
			return tr_fail(r, -EINVAL,
				       "ValueError: substring not found");
		*out = tv_int(-1);
		return 0;
	}
	*out = tv_int((int64_t)tu_count(s->u.s, (size_t)at));
	return 0;
}

static int str_count(trender *r, const tv *s, tv *args, int nargs, tv *out)
{
	size_t a, b, i;
	int64_t c = 0;
	int e;

	if ((e = nargs_range(r, "count", nargs, 1, 3)) ||
	    (e = need_str(r, "count", &args[0])))
		return e;
	e = str_range(r, s, nargs > 1 ? &args[1] : NULL,
		      nargs > 2 ? &args[2] : NULL, &a, &b);
	if (e < 0)
		return e;
	if (e || b < a) {
		*out = tv_int(0);
		return 0;
	}
	if (!args[0].n) {
		*out = tv_int((int64_t)tu_count(s->u.s + a, b - a) + 1);
		return 0;
	}
	for (i = a; i + args[0].n <= b;) {
		const char *p =
		    memmem(s->u.s + i, b - i, args[0].u.s, args[0].n);

		if (!p)
			break;
		c++;
		i = (size_t)(p - s->u.s) + args[0].n;
	}
	*out = tv_int(c);
	return 0;
}

static int str_affix(trender *r, const tv *s, int id, tv *args, int nargs,
		     tv *out)
{
	const tv *cands;
	size_t a, b, ncand;
	int e;

	if ((e = nargs_range(r, tm_name(id), nargs, 1, 3)))
		return e;
	if (args[0].k == TV_TUPLE) {
		cands = args[0].u.items;
		ncand = args[0].n;
	} else {
		if (args[0].k != TV_STR)
			return tr_fail(
			    r, -EINVAL,
			    "TypeError: %s first arg must be str or a "
			    "tuple of str, not %s",
			    tm_name(id), tv_typename(&args[0]));
		cands = &args[0];
		ncand = 1;
	}
	e = str_range(r, s, nargs > 1 ? &args[1] : NULL,
		      nargs > 2 ? &args[2] : NULL, &a, &b);
	if (e < 0)
		return e;
	*out = tv_bool(0);
	for (size_t i = 0; i < ncand; i++) {
		const tv *c = &cands[i];

		if (c->k != TV_STR)
			return tr_fail(r, -EINVAL,
				       "TypeError: tuple for %s must only "
				       "contain str, not %s",
				       tm_name(id), tv_typename(c));
		if (e || b < a)
			continue;
		if (c->n > b - a)
			continue;
		if (id == TM_startswith
			? !memcmp(s->u.s + a, c->u.s, c->n)
			: !memcmp(s->u.s + b - c->n, c->u.s, c->n)) {
			*out = tv_bool(1);
			return 0;
		}
	}
	return 0;
}

static int str_partition(trender *r, const tv *s, int id, tv *args, int nargs,
			 tv *out)
{
	int64_t at = -1;
	int e;

	if ((e = nargs_range(r, tm_name(id), nargs, 1, 1)) ||
	    (e = need_str(r, tm_name(id), &args[0])))
		return e;
	if (!args[0].n)
		return tr_fail(r, -EINVAL, "ValueError: empty separator");
	if (id == TM_partition) {
		at = ps_find(s->u.s, s->n, args[0].u.s, args[0].n, 0);
	} else if (s->n >= args[0].n) {
		for (size_t k = s->n - args[0].n + 1; k-- > 0;)
			if (!memcmp(s->u.s + k, args[0].u.s, args[0].n)) {
				at = (int64_t)k;
				break;
			}
	}
	if ((e = tv_newlist(r, 3, 1, out)))
		return e;
	if (at < 0) {
		out->u.items[0] = id == TM_partition ? *s : TV_LIT("");
		out->u.items[1] = TV_LIT("");
		out->u.items[2] = id == TM_partition ? TV_LIT("") : *s;
	} else {
		out->u.items[0] = tv_str(s->u.s, (size_t)at);
		out->u.items[1] = args[0];
		out->u.items[2] = tv_str(s->u.s + at + args[0].n,
					 s->n - (size_t)at - args[0].n);
	}
	for (int i = 0; i < 3; i++)
		out->u.items[i].f = 0;
	return 0;
}

static int call_str(trender *r, const tv *s, int id, tv *args, int nargs,
		    const tkw *kw, tv *kwv, int nkw, tv *out)
{
	static const char *const split_spec[] = {"sep", "maxsplit", NULL};
	static const char *const lines_spec[] = {"keepends", NULL};
	tv vals[3];
	int has[3], e;
	int64_t k;

	if (s->f & TVF_MARKUP)
		return te_unsupported(r, "calling a method of a safe (Markup) "
					 "string");
	if (id != TM_split && id != TM_rsplit && id != TM_splitlines &&
	    id != TM_format && (e = no_kw(r, tm_name(id), nkw)))
		return e;
	switch (id) {
	case TM_capitalize:
	case TM_lower:
	case TM_upper:
	case TM_title:
	case TM_swapcase:
		if ((e = nargs_range(r, tm_name(id), nargs, 0, 0)))
			return e;
		return ps_case(r, s,
			       id == TM_capitalize ? CASE_CAPITALIZE
			       : id == TM_lower	   ? CASE_LOWER
			       : id == TM_upper	   ? CASE_UPPER
			       : id == TM_title	   ? CASE_TITLE
						   : CASE_SWAP,
			       out);
	case TM_casefold:
		for (size_t i = 0; i < s->n; i++)
			if ((unsigned char)s->u.s[i] >= 0x80)
				return te_unsupported(r, "str.casefold() of "
							 "non-ASCII text");
		return ps_case(r, s, CASE_LOWER, out);
	case TM_center:
	case TM_ljust:
	case TM_rjust:
	case TM_zfill:
		return str_pad(r, s, id, args, nargs, out);
	case TM_count:
		return str_count(r, s, args, nargs, out);
	case TM_find:
	case TM_rfind:
	case TM_index:
	case TM_rindex:
		return str_find(r, s, id, args, nargs, out);
	case TM_startswith:
	case TM_endswith:
		return str_affix(r, s, id, args, nargs, out);
	case TM_format:
		return py_format(r, s, args, nargs, kw, kwv, nkw, out);
	case TM_join:
		if ((e = nargs_range(r, "join", nargs, 1, 1)))
			return e;
		return ps_join(r, s, &args[0], out);
	case TM_strip:
	case TM_lstrip:
	case TM_rstrip:
		if ((e = nargs_range(r, tm_name(id), nargs, 0, 1)))
			return e;
		if (nargs && args[0].k != TV_NONE &&
		    (e = need_str(r, tm_name(id), &args[0])))
			return e;
		*out =
		    ps_strip(s, nargs && args[0].k == TV_STR ? &args[0] : NULL,
			     id == TM_strip    ? 3
			     : id == TM_lstrip ? 1
					       : 2);
		return 0;
	case TM_split:
	case TM_rsplit:
		if ((e = targs_bind(r, tm_name(id), split_spec, args, nargs, kw,
				    kwv, nkw, vals, has)))
			return e;
		k = -1;
		if (has[1] && (e = targ_int(r, "maxsplit", &vals[1], &k)))
			return e;
		if (has[0] && vals[0].k != TV_NONE &&
		    (e = need_str(r, tm_name(id), &vals[0])))
			return e;
		return ps_split(r, s, has[0] ? &vals[0] : NULL, k,
				id == TM_rsplit, out);
	case TM_splitlines: {
		int keep = 0;

		if ((e = targs_bind(r, "splitlines", lines_spec, args, nargs,
				    kw, kwv, nkw, vals, has)))
			return e;
		if (has[0] && (e = tv_truthy(r, &vals[0], &keep)))
			return e;
		return ps_splitlines(r, s, keep, out);
	}
	case TM_replace:
		if ((e = nargs_range(r, "replace", nargs, 2, 3)) ||
		    (e = need_str(r, "replace", &args[0])) ||
		    (e = need_str(r, "replace", &args[1])))
			return e;
		k = -1;
		if (nargs > 2 && (e = targ_int(r, "replace", &args[2], &k)))
			return e;
		return ps_replace(r, s, &args[0], &args[1], k, out);
	case TM_partition:
	case TM_rpartition:
		return str_partition(r, s, id, args, nargs, out);
	case TM_removeprefix:
	case TM_removesuffix:
		if ((e = nargs_range(r, tm_name(id), nargs, 1, 1)) ||
		    (e = need_str(r, tm_name(id), &args[0])))
			return e;
		*out = *s;
		out->f = 0;
		if (args[0].n <= s->n) {
			if (id == TM_removeprefix &&
			    !memcmp(s->u.s, args[0].u.s, args[0].n))
				*out = tv_str(s->u.s + args[0].n,
					      s->n - args[0].n);
			if (id == TM_removesuffix && args[0].n &&
			    !memcmp(s->u.s + s->n - args[0].n, args[0].u.s,
				    args[0].n))
				*out = tv_str(s->u.s, s->n - args[0].n);
		}
		return 0;
	case TM_isalnum:
	case TM_isalpha:
	case TM_isascii:
	case TM_isdecimal:
	case TM_isdigit:
	case TM_islower:
	case TM_isnumeric:
	case TM_isprintable:
	case TM_isspace:
	case TM_istitle:
	case TM_isupper:
		if ((e = nargs_range(r, tm_name(id), nargs, 0, 0)))
			return e;
		*out = tv_bool(str_pred(s, id));
		return 0;
	default:
		return tr_fail(r, -EINVAL, "str.%s() is not supported",
			       tm_name(id));
	}
}

/* ---- dict, list, tuple --------------------------------------------- */

static int view(trender *r, const tv *m, int which, tv *out)
{
	tv *copy = tr_alloc(r, sizeof(tv));

	if (!copy)
		return -E2BIG;
	*copy = *m;
	*out = tv_undef();
	out->k = TV_VIEW;
	out->x = (uint16_t)which;
	out->u.view = copy;
	return 0;
}

static int call_dict(trender *r, const tv *d, int id, tv *args, int nargs,
		     int nkw, tv *out)
{
	tcur c;
	tv k, v;
	int e, got;

	if ((e = no_kw(r, tm_name(id), nkw)))
		return e;
	switch (id) {
	case TM_get:
		if ((e = nargs_range(r, "get", nargs, 1, 2)))
			return e;
		got = tv_map_get(r, d, &args[0], out);
		if (got == 2)
			return tr_fail(r, -EINVAL,
				       "TypeError: unhashable type: "
				       "'%s'",
				       tv_typename(&args[0]));
		if (got < 0)
			return got;
		if (!got)
			*out = nargs > 1 ? args[1] : tv_none();
		return 0;
	case TM_items:
	case TM_keys:
	case TM_values:
		if ((e = nargs_range(r, tm_name(id), nargs, 0, 0)))
			return e;
		return view(r, d,
			    id == TM_items  ? TVIEW_ITEMS
			    : id == TM_keys ? TVIEW_KEYS
					    : TVIEW_VALUES,
			    out);
	case TM_copy:
		if ((e = nargs_range(r, "copy", nargs, 0, 0)) ||
		    (e = tv_newdict(r, (uint32_t)tv_map_len(d), out)) ||
		    (e = tc_open(r, d, &c)))
			return e;
		while ((got = tc_next(r, &c, &k)) == 1) {
			if (tv_map_get(r, d, &k, &v) != 1)
				return tr_fail(r, -EINVAL,
					       "dict lookup failed");
			if ((e = td_set(r, out->u.dict, &k, &v)))
				return e;
		}
		return got;
	default:
		return tr_fail(r, -EINVAL, "dict.%s() is not supported",
			       tm_name(id));
	}
}

static int call_seq(trender *r, const tv *l, int id, tv *args, int nargs,
		    int nkw, tv *out)
{
	size_t n = tv_seq_len(l);
	int64_t c = 0, start = 0, stop = (int64_t)n;
	int e, eq;

	if ((e = no_kw(r, tm_name(id), nkw)))
		return e;
	switch (id) {
	case TM_count:
		if ((e = nargs_range(r, "count", nargs, 1, 1)))
			return e;
		for (size_t i = 0; i < n; i++) {
			tv item = tv_seq_at(l, i);

			if ((e = tv_eq(r, &item, &args[0], &eq)))
				return e;
			c += eq;
		}
		*out = tv_int(c);
		return 0;
	case TM_index:
		if ((e = nargs_range(r, "index", nargs, 1, 3)))
			return e;
		if (nargs > 1 && (e = targ_int(r, "index", &args[1], &start)))
			return e;
		if (nargs > 2 && (e = targ_int(r, "index", &args[2], &stop)))
			return e;
		if (start < 0 && (start += (int64_t)n) < 0)
			start = 0;
		if (stop < 0 && (stop += (int64_t)n) < 0)
			stop = 0;
		for (int64_t i = start; i < stop && i < (int64_t)n; i++) {
			tv item = tv_seq_at(l, (size_t)i);

			if ((e = tv_eq(r, &item, &args[0], &eq)))
				return e;
			if (eq) {
				*out = tv_int(i);
				return 0;
			}
		}
		return tr_fail(r, -EINVAL, "ValueError: value is not in %s",
			       l->k == TV_TUPLE ? "tuple" : "list");
	case TM_copy:
		if ((e = nargs_range(r, "copy", nargs, 0, 0)) ||
		    (e = tv_newlist(r, (uint32_t)n, 0, out)))
			return e;
		for (size_t i = 0; i < n; i++)
			out->u.items[i] = tv_seq_at(l, i);
		return 0;
	default:
		return tr_fail(r, -EINVAL, "%s.%s() is not supported",
			       tv_typename(l), tm_name(id));
	}
}

static int call_loop(trender *r, tloop *l, int id, tv *args, int nargs, int nkw,
		     tv *out)
{
	int e, eq;

	if ((e = no_kw(r, tm_name(id), nkw)))
		return e;
	if (id == TM_cycle) {
		if (!nargs)
			return tr_fail(r, -EINVAL,
				       "TypeError: no items for "
				       "cycling given");
		*out = args[l->index0 % nargs];
		return 0;
	}
	{
		tv t;

		if ((e = tv_newlist(r, (uint32_t)nargs, 1, &t)))
			return e;
		for (int i = 0; i < nargs; i++)
			t.u.items[i] = args[i];
		eq = 0;
		if (l->has_changed && (e = tv_eq(r, &l->last_changed, &t, &eq)))
			return e;
		*out = tv_bool(!eq);
		if (!eq) {
			l->last_changed = t;
			l->has_changed = 1;
		}
	}
	return 0;
}

int tm_call(trender *r, const tv *obj, int id, tv *args, int nargs,
	    const tkw *kw, tv *kwv, int nkw, tv *out)
{
	if (tm_has(obj, id) != 1)
		return tr_fail(r, -EINVAL, "%s.%s() is not supported",
			       tv_typename(obj), tm_name(id));
	switch (obj->k) {
	case TV_STR:
		return call_str(r, obj, id, args, nargs, kw, kwv, nkw, out);
	case TV_DICT:
	case TV_JOBJ:
		return call_dict(r, obj, id, args, nargs, nkw, out);
	case TV_LOOP:
		return call_loop(r, obj->u.loop, id, args, nargs, nkw, out);
	default:
		return call_seq(r, obj, id, args, nargs, nkw, out);
	}
}
