/* globals.c: the functions a template can call by name: jinja2's range
 * (the sandbox's: at most 100000 items), dict and namespace, and
 * transformers' raise_exception and strftime_now. lipsum, cycler and
 * joiner are refused. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tmpl.h"

#define TG_MAX_RANGE 100000

static const char *const tg_names[TG_COUNT] = {
    "range",	    "dict",   "namespace", "raise_exception",
    "strftime_now", "lipsum", "cycler",	   "joiner"};

int tg_lookup(const char *name, size_t n)
{
	for (int i = 0; i < TG_COUNT; i++)
		if (strlen(tg_names[i]) == n && !memcmp(tg_names[i], name, n))
			return i;
	return -1;
}

const char *tg_name(int id)
{
	return id >= 0 && id < TG_COUNT ? tg_names[id] : "?";
}

static int tg_range(trender *r, tv *args, int nargs, int nkw, tv *out)
{
	int64_t v[3] = {0, 0, 1};
	__int128 len = 0;
	struct trange *g;
	int e;

	if (nkw)
		return tr_fail(r, -EINVAL,
			       "TypeError: range() takes no keyword "
			       "arguments");
	if (nargs < 1 || nargs > 3)
		return tr_fail(r, -EINVAL,
			       "TypeError: range expected 1 to 3 "
			       "arguments, got %d",
			       nargs);
	for (int i = 0; i < nargs; i++)
		if ((e = targ_int(r, "range", &args[i],
				  &v[nargs == 1 ? 1 : i])))
			return e;
	if (!v[2])
		return tr_fail(r, -EINVAL,
			       "ValueError: range() arg 3 must not be "
			       "zero");
	if (v[2] > 0 && v[0] < v[1])
		len = ((__int128)v[1] - v[0] - 1) / v[2] + 1;
	else if (v[2] < 0 && v[0] > v[1])
		len = ((__int128)v[0] - v[1] - 1) / -(__int128)v[2] + 1;
	if (len > TG_MAX_RANGE)
		return tr_fail(
		    r, -EINVAL,
		    "OverflowError: Range too big. The sandbox blocks "
		    "ranges larger than MAX_RANGE (%d).",
		    TG_MAX_RANGE);
	g = tr_alloc(r, sizeof(*g));
	if (!g)
		return -E2BIG;
	g->start = v[0];
	g->stop = v[1];
	g->step = v[2];
	g->len = (int64_t)len;
	*out = tv_undef();
	out->k = TV_RANGE;
	out->u.range = g;
	return 0;
}

/* dict(*args, **kwargs) into d */
static int tg_fill_dict(trender *r, tdict *d, const char *what, tv *args,
			int nargs, const tkw *kw, tv *kwv, int nkw)
{
	tcur c;
	tv item, k, v;
	int e, got;

	if (nargs > 1)
		return tr_fail(
		    r, -EINVAL,
		    "TypeError: %s expected at most 1 argument, got %d", what,
		    nargs);
	if (nargs) {
		const tv *src = &args[0];

		if (src->k == TV_UNDEF)
			return tv_undef_fail(r, src);
		if ((e = tc_open(r, src, &c)))
			return e;
		while ((got = tc_next(r, &c, &item)) == 1) {
			if ((e = tr_step(r)))
				return e;
			if (tv_is_mapping(src)) {
				k = item;
				if (tv_map_get(r, src, &k, &v) != 1)
					return tr_fail(r, -EINVAL,
						       "dict lookup failed");
			} else {
				tcur p;
				tv kv[3];
				int n = 0;

				if ((e = tc_open(r, &item, &p)))
					return e;
				while (n < 3 &&
				       (got = tc_next(r, &p, &kv[n])) == 1)
					n++;
				if (got < 0)
					return got;
				if (n != 2)
					return tr_fail(
					    r, -EINVAL,
					    "ValueError: dictionary "
					    "update sequence element "
					    "has length %d; 2 is "
					    "required",
					    n);
				k = kv[0];
				v = kv[1];
			}
			if (!tv_hashable(&k))
				return tr_fail(
				    r, -EINVAL,
				    "TypeError: unhashable type: '%s'",
				    tv_typename(&k));
			if ((e = td_set(r, d, &k, &v)))
				return e;
		}
		if (got < 0)
			return got;
	}
	for (int i = 0; i < nkw; i++) {
		k = tv_str(kw[i].name, kw[i].n);
		if ((e = td_set(r, d, &k, &kwv[i])))
			return e;
	}
	return 0;
}

static int tg_strftime(trender *r, const tv *fmt, tv *out)
{
	char small[512], *conv = small, *buf = NULL;
	size_t n = 0, cap = sizeof(small), bcap;
	time_t t = (time_t)r->now;
	struct tm tm;
	tbuf b = {0};
	int e;

	if (fmt->k != TV_STR) {
		if (fmt->k == TV_UNDEF)
			return tv_undef_fail(r, fmt);
		return tr_fail(r, -EINVAL,
			       "TypeError: strftime() argument 1 "
			       "must be str, not %s",
			       tv_typename(fmt));
	}
	if (!localtime_r(&t, &tm))
		return tr_fail(r, -EINVAL,
			       "strftime_now: no local time for %lld",
			       (long long)r->now);
	if (fmt->n * 6 + 2 > cap) {
		cap = fmt->n * 6 + 2;
		conv = tr_alloc(r, cap);
		if (!conv)
			return -E2BIG;
	}
	/* datetime.strftime's own: %f (microseconds: none here), %z and %Z
	 * (empty: datetime.now() has no time zone) */
	for (size_t i = 0; i < fmt->n; i++) {
		char c = fmt->u.s[i];

		if (c == '%' && i + 1 < fmt->n) {
			char d = fmt->u.s[++i];

			if (d == 'f') {
				memcpy(conv + n, "000000", 6);
				n += 6;
			} else if (d != 'z' && d != 'Z') {
				conv[n++] = '%';
				conv[n++] = d;
			}
			continue;
		}
		if (c == 0)
			return te_unsupported(r, "a NUL in the format of "
						 "strftime_now");
		conv[n++] = c;
	}
	conv[n] = 0;
	if (!n) {
		*out = TV_LIT("");
		return 0;
	}
	/* strftime's 0 is both "empty" and "too small": a marker tells */
	conv[n++] = '|';
	conv[n] = 0;
	for (bcap = 256; bcap <= (1u << 20); bcap *= 4) {
		size_t got;

		buf = tr_alloc(r, bcap);
		if (!buf)
			return -E2BIG;
		got = strftime(buf, bcap, conv, &tm);
		if (got) {
			e = tb_put(r, &b, buf, got - 1);
			if (!e)
				e = tb_take(r, &b, out);
			tb_free(r, &b);
			return e;
		}
	}
	return tr_fail(r, -E2BIG, "strftime_now: the result is too long");
}

int tg_call(trender *r, int id, tv *args, int nargs, const tkw *kw, tv *kwv,
	    int nkw, tv *out)
{
	int e;

	switch (id) {
	case TG_RANGE:
		return tg_range(r, args, nargs, nkw, out);
	case TG_DICT:
		if ((e = tv_newdict(r, 0, out)))
			return e;
		return tg_fill_dict(r, out->u.dict, "dict", args, nargs, kw,
				    kwv, nkw);
	case TG_NAMESPACE: {
		tns *ns = tr_alloc(r, sizeof(*ns));

		if (!ns || td_init(r, &ns->attrs, 0))
			return -E2BIG;
		if ((e = tg_fill_dict(r, &ns->attrs, "namespace", args, nargs,
				      kw, kwv, nkw)))
			return e;
		*out = tv_undef();
		out->k = TV_NS;
		out->u.ns = ns;
		return 0;
	}
	case TG_RAISE: {
		tv msg;

		if (nargs != 1 || nkw)
			return tr_fail(r, -EINVAL,
				       "TypeError: raise_exception() takes 1 "
				       "argument");
		if ((e = py_str_value(r, &args[0], &msg)))
			return e;
		return tr_fail(r, -EINVAL, "%.*s", (int)msg.n, msg.u.s);
	}
	case TG_STRFTIME:
		if (nargs != 1 || nkw)
			return tr_fail(r, -EINVAL,
				       "TypeError: strftime_now() takes 1 "
				       "argument");
		return tg_strftime(r, &args[0], out);
	default:
		return tr_fail(r, -EINVAL, "%s() is not supported",
			       tg_name(id));
	}
}
