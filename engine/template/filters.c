/* filters.c: jinja2's filters as jinja2 3.1 defines them, with
 * transformers' tojson (json.dumps: no HTML escaping, ensure_ascii off).
 * Filters that return generators in jinja2 (map, select, reject,
 * selectattr, rejectattr, unique, batch, slice, items, reverse) return
 * one-pass iterators here too, run item by item. groupby, pprint, random,
 * striptags, urlencode, urlize, wordwrap, xmlattr and filesizeformat are
 * refused when they run. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tmpl.h"
#include "tmpl_unidata.h"

int ti_attrget(trender *r, const tv *item, const tv *attr, const tv *dflt,
	       tv *out);
int ti_key(trender *r, const tv *item, const tv *attr, int case_sensitive,
	   tv *out);
int te_contains(trender *r, const tv *hay, const tv *needle, int *out);

#define TF_LIST(X)                                                             \
	X(abs, 1)                                                              \
	X(attr, 1)                                                             \
	X(batch, 1)                                                            \
	X(capitalize, 1)                                                       \
	X(center, 1)                                                           \
	X(count, 1)                                                            \
	X(d, 1)                                                                \
	X(default, 1)                                                          \
	X(dictsort, 1)                                                         \
	X(e, 1)                                                                \
	X(escape, 1)                                                           \
	X(filesizeformat, 0)                                                   \
	X(first, 1)                                                            \
	X(float, 1)                                                            \
	X(forceescape, 1)                                                      \
	X(format, 1)                                                           \
	X(groupby, 0)                                                          \
	X(indent, 1)                                                           \
	X(int, 1)                                                              \
	X(join, 1)                                                             \
	X(last, 1)                                                             \
	X(length, 1)                                                           \
	X(list, 1)                                                             \
	X(lower, 1)                                                            \
	X(items, 1)                                                            \
	X(map, 1)                                                              \
	X(min, 1)                                                              \
	X(max, 1)                                                              \
	X(pprint, 0)                                                           \
	X(random, 0)                                                           \
	X(reject, 1)                                                           \
	X(rejectattr, 1)                                                       \
	X(replace, 1)                                                          \
	X(reverse, 1)                                                          \
	X(round, 1)                                                            \
	X(safe, 1)                                                             \
	X(select, 1)                                                           \
	X(selectattr, 1)                                                       \
	X(slice, 1)                                                            \
	X(sort, 1)                                                             \
	X(string, 1)                                                           \
	X(striptags, 0)                                                        \
	X(sum, 1)                                                              \
	X(title, 1)                                                            \
	X(trim, 1)                                                             \
	X(truncate, 1)                                                         \
	X(unique, 1)                                                           \
	X(upper, 1)                                                            \
	X(urlencode, 0)                                                        \
	X(urlize, 0)                                                           \
	X(wordcount, 1)                                                        \
	X(wordwrap, 0)                                                         \
	X(xmlattr, 0)                                                          \
	X(tojson, 1)

#define TF_ENUM(name, ok) TF_##name,
enum { TF_LIST(TF_ENUM) TF_COUNT };

static const struct {
	const char *name;
	int supported;
} tf_table[] = {
#define TF_ROW(name, ok) {#name, ok},
    TF_LIST(TF_ROW)};

int tf_lookup(const char *name, size_t n, int *supported)
{
	for (int i = 0; i < TF_COUNT; i++)
		if (strlen(tf_table[i].name) == n &&
		    !memcmp(tf_table[i].name, name, n)) {
			*supported = tf_table[i].supported;
			return i;
		}
	return -1;
}

const char *tf_name(int id)
{
	return id >= 0 && id < TF_COUNT ? tf_table[id].name : "?";
}

/* ---- sorting ------------------------------------------------------- */

/* Stable merge sort of items by keys with Python's <; reverse as
 * sorted(reverse=True): equal items keep their order. */
int tf_sort_values(trender *r, tv *items, size_t n, const tv *keys,
		   int reverse);

static int merge_sort(trender *r, tv *items, tv *keys, tv *ti, tv *tk, size_t n)
{
	for (size_t w = 1; w < n; w *= 2) {
		for (size_t lo = 0; lo < n; lo += 2 * w) {
			size_t mid = lo + w < n ? lo + w : n;
			size_t hi = lo + 2 * w < n ? lo + 2 * w : n;
			size_t i = lo, j = mid, k = lo;
			int lt, e;

			while (i < mid && j < hi) {
				if ((e = tr_step(r)) ||
				    (e = tv_lt(r, &keys[j], &keys[i], &lt)))
					return e;
				if (lt) {
					ti[k] = items[j];
					tk[k++] = keys[j++];
				} else {
					ti[k] = items[i];
					tk[k++] = keys[i++];
				}
			}
			while (i < mid) {
				ti[k] = items[i];
				tk[k++] = keys[i++];
			}
			while (j < hi) {
				ti[k] = items[j];
				tk[k++] = keys[j++];
			}
		}
		memcpy(items, ti, n * sizeof(tv));
		memcpy(keys, tk, n * sizeof(tv));
	}
	return 0;
}

static void rev(tv *v, size_t n)
{
	for (size_t i = 0; i < n / 2; i++) {
		tv t = v[i];

		v[i] = v[n - 1 - i];
		v[n - 1 - i] = t;
	}
}

int tf_sort_values(trender *r, tv *items, size_t n, const tv *keys_in,
		   int reverse)
{
	tv *keys, *ti, *tk;
	int e;

	if (n < 2)
		return 0;
	keys = tr_alloc(r, n * sizeof(tv));
	ti = tr_alloc(r, n * sizeof(tv));
	tk = tr_alloc(r, n * sizeof(tv));
	if (!keys || !ti || !tk)
		return -E2BIG;
	memcpy(keys, keys_in, n * sizeof(tv));
	if (reverse) {
		rev(items, n);
		rev(keys, n);
	}
	if ((e = merge_sort(r, items, keys, ti, tk, n)))
		return e;
	if (reverse)
		rev(items, n);
	return 0;
}

/* ---- helpers ------------------------------------------------------- */

#define BIND(spec)                                                             \
	tv vals[8];                                                            \
	int has[8];                                                            \
	int e =                                                                \
	    targs_bind(r, name, spec, args, nargs, kw, kwv, nkw, vals, has);   \
	if (e)                                                                 \
	return e

static int truthy_arg(trender *r, const tv *v, int has, int *out)
{
	*out = 0;
	return has ? tv_truthy(r, v, out) : 0;
}

static int new_iter(trender *r, int kind, const tv *src, titer **out)
{
	titer *it = tr_alloc(r, sizeof(*it));
	int e;

	if (!it)
		return -E2BIG;
	memset(it, 0, sizeof(*it));
	it->kind = (uint8_t)kind;
	if (src && (e = tc_open(r, src, &it->src)))
		return e;
	*out = it;
	return 0;
}

static tv iter_value(titer *it)
{
	tv v = tv_undef();

	v.k = TV_ITER;
	v.u.it = it;
	return v;
}

static int str_arg(trender *r, const tv *v, tv *out)
{
	return py_str_value(r, v, out);
}

/* the multi-attribute key of sort: item[a], item[b] for "a,b" */
static int sort_key(trender *r, const tv *item, const tv *attr,
		    int case_sensitive, tv *out)
{
	size_t parts = 1, i, k = 0, start = 0;
	int e;

	if (attr->k != TV_STR)
		return ti_key(r, item, attr, case_sensitive, out);
	for (i = 0; i < attr->n; i++)
		parts += attr->u.s[i] == ',';
	if (parts == 1)
		return ti_key(r, item, attr, case_sensitive, out);
	if ((e = tv_newlist(r, (uint32_t)parts, 0, out)))
		return e;
	for (i = 0; i <= attr->n; i++) {
		if (i < attr->n && attr->u.s[i] != ',')
			continue;
		{
			tv a = tv_str(attr->u.s + start, i - start);

			if ((e = ti_key(r, item, &a, case_sensitive,
					&out->u.items[k++])))
				return e;
		}
		start = i + 1;
	}
	return 0;
}

/* ---- the filters --------------------------------------------------- */

static int f_tojson(trender *r, const tv *in, tv *args, int nargs,
		    const tkw *kw, tv *kwv, int nkw, tv *out)
{
	static const char *const spec[] = {"ensure_ascii", "indent",
					   "separators", "sort_keys", NULL};
	const char *name = "tojson";
	tjson_opts o = {0};
	char spaces[256];
	tbuf b = {0};
	BIND(spec);

	if ((e = truthy_arg(r, &vals[0], has[0], &o.ensure_ascii)) ||
	    (e = truthy_arg(r, &vals[3], has[3], &o.sort_keys)))
		return e;
	o.item_sep = ", ";
	o.item_sep_n = 2;
	o.key_sep = ": ";
	o.key_sep_n = 2;
	if (has[1] && vals[1].k != TV_NONE) {
		o.has_indent = 1;
		o.item_sep = ",";
		o.item_sep_n = 1;
		if (vals[1].k == TV_STR) {
			o.indent = vals[1].u.s;
			o.indent_n = vals[1].n;
		} else {
			int64_t w;

			if ((e = targ_int(r, "tojson indent", &vals[1], &w)))
				return e;
			if (w > (int64_t)sizeof(spaces))
				return te_unsupported(r, "a tojson indent over "
							 "256");
			if (w < 0)
				w = 0;
			memset(spaces, ' ', (size_t)w);
			o.indent = spaces;
			o.indent_n = (size_t)w;
		}
	}
	if (has[2] && vals[2].k != TV_NONE) {
		tv sep = vals[2];

		if (!tv_is_seq(&sep) || tv_seq_len(&sep) != 2)
			return tr_fail(r, -EINVAL,
				       "ValueError: separators must "
				       "be a pair of strings");
		{
			tv a = tv_seq_at(&sep, 0), c = tv_seq_at(&sep, 1);

			if (a.k != TV_STR || c.k != TV_STR)
				return tr_fail(r, -EINVAL,
					       "TypeError: separators must be "
					       "strings");
			o.item_sep = a.u.s;
			o.item_sep_n = a.n;
			o.key_sep = c.u.s;
			o.key_sep_n = c.n;
		}
	}
	e = py_json(r, &b, in, &o);
	if (!e)
		e = tb_take(r, &b, out);
	tb_free(r, &b);
	return e;
}

static int f_sort(trender *r, const tv *in, tv *args, int nargs, const tkw *kw,
		  tv *kwv, int nkw, tv *out)
{
	static const char *const spec[] = {"reverse", "case_sensitive",
					   "attribute", NULL};
	const char *name = "sort";
	int reverse, cs;
	tv *keys, attr;
	BIND(spec);

	if ((e = truthy_arg(r, &vals[0], has[0], &reverse)) ||
	    (e = truthy_arg(r, &vals[1], has[1], &cs)))
		return e;
	attr = has[2] ? vals[2] : tv_none();
	{
		tv list;

		if ((e = tv_to_list(r, in, &list)) ||
		    (e = tv_newlist(r, list.n, 0, out)))
			return e;
		if (list.n)
			memcpy(out->u.items, list.u.items, list.n * sizeof(tv));
	}
	keys = tr_alloc(r, (out->n ? out->n : 1) * sizeof(tv));
	if (!keys)
		return -E2BIG;
	for (uint32_t i = 0; i < out->n; i++)
		if ((e = sort_key(r, &out->u.items[i], &attr, cs, &keys[i])))
			return e;
	/* a key of one attribute is compared as [key] by jinja2 */
	return tf_sort_values(r, out->u.items, out->n, keys, reverse);
}

static int f_dictsort(trender *r, const tv *in, tv *args, int nargs,
		      const tkw *kw, tv *kwv, int nkw, tv *out)
{
	static const char *const spec[] = {"case_sensitive", "by", "reverse",
					   NULL};
	const char *name = "dictsort";
	int cs, reverse, pos = 0;
	tv view, *keys;
	BIND(spec);

	if ((e = truthy_arg(r, &vals[0], has[0], &cs)) ||
	    (e = truthy_arg(r, &vals[2], has[2], &reverse)))
		return e;
	if (has[1]) {
		if (vals[1].k == TV_STR && vals[1].n == 5 &&
		    !memcmp(vals[1].u.s, "value", 5))
			pos = 1;
		else if (!(vals[1].k == TV_STR && vals[1].n == 3 &&
			   !memcmp(vals[1].u.s, "key", 3)))
			return tr_fail(r, -EINVAL,
				       "FilterArgumentError: You can only sort "
				       "by either \"key\" or \"value\"");
	}
	if (!tv_is_mapping(in)) {
		if (in->k == TV_UNDEF)
			return tv_undef_fail(r, in);
		return tr_fail(r, -EINVAL,
			       "AttributeError: '%s' object has no "
			       "attribute 'items'",
			       tv_typename(in));
	}
	{
		tv *copy = tr_alloc(r, sizeof(tv));

		if (!copy)
			return -E2BIG;
		*copy = *in;
		view = tv_undef();
		view.k = TV_VIEW;
		view.x = TVIEW_ITEMS;
		view.u.view = copy;
	}
	if ((e = tv_to_list(r, &view, out)))
		return e;
	keys = tr_alloc(r, (out->n ? out->n : 1) * sizeof(tv));
	if (!keys)
		return -E2BIG;
	for (uint32_t i = 0; i < out->n; i++) {
		keys[i] = out->u.items[i].u.items[pos];
		if (!cs && keys[i].k == TV_STR &&
		    (e = ps_case(r, &keys[i], CASE_LOWER, &keys[i])))
			return e;
	}
	return tf_sort_values(r, out->u.items, out->n, keys, reverse);
}

static int f_minmax(trender *r, int is_max, const tv *in, tv *args, int nargs,
		    const tkw *kw, tv *kwv, int nkw, tv *out)
{
	static const char *const spec[] = {"case_sensitive", "attribute", NULL};
	const char *name = is_max ? "max" : "min";
	tv attr, item, key, best, bestkey;
	int cs, got, first = 1, better;
	tcur c;
	BIND(spec);

	if ((e = truthy_arg(r, &vals[0], has[0], &cs)))
		return e;
	attr = has[1] ? vals[1] : tv_none();
	if ((e = tc_open(r, in, &c)))
		return e;
	while ((got = tc_next(r, &c, &item)) == 1) {
		if ((e = tr_step(r)) || (e = ti_key(r, &item, &attr, cs, &key)))
			return e;
		if (first) {
			best = item;
			bestkey = key;
			first = 0;
			continue;
		}
		if ((e = tv_cmp_op(r, is_max ? CMP_GT : CMP_LT, &key, &bestkey,
				   &better)))
			return e;
		if (better) {
			best = item;
			bestkey = key;
		}
	}
	if (got < 0)
		return got;
	*out = first ? tv_undef_msg(r, "No aggregated item, sequence was "
				       "empty.")
		     : best;
	return r->errset ? -E2BIG : 0;
}

static int f_sum(trender *r, const tv *in, tv *args, int nargs, const tkw *kw,
		 tv *kwv, int nkw, tv *out)
{
	static const char *const spec[] = {"attribute", "start", NULL};
	const char *name = "sum";
	tv acc, item;
	tcur c;
	int got;
	BIND(spec);

	acc = has[1] ? vals[1] : tv_int(0);
	if (acc.k == TV_STR)
		return tr_fail(r, -EINVAL,
			       "TypeError: sum() can't sum strings "
			       "[use ''.join(seq) instead]");
	if ((e = tc_open(r, in, &c)))
		return e;
	while ((got = tc_next(r, &c, &item)) == 1) {
		int te_binop(trender *, int, const tv *, const tv *, tv *);

		if ((e = tr_step(r)))
			return e;
		if (has[0] && vals[0].k != TV_NONE &&
		    (e = ti_attrget(r, &item, &vals[0], NULL, &item)))
			return e;
		if ((e = te_binop(r, OP_ADD, &acc, &item, &acc)))
			return e;
	}
	if (got < 0)
		return got;
	*out = acc;
	return 0;
}

static int f_join(trender *r, const tv *in, tv *args, int nargs, const tkw *kw,
		  tv *kwv, int nkw, tv *out)
{
	static const char *const spec[] = {"d", "attribute", NULL};
	const char *name = "join";
	tv sep = TV_LIT(""), item, s;
	tbuf b = {0};
	tcur c;
	int got, first = 1;
	BIND(spec);

	if (has[0] && (e = str_arg(r, &vals[0], &sep)))
		return e;
	if ((e = tc_open(r, in, &c)))
		return e;
	while ((got = tc_next(r, &c, &item)) == 1) {
		if (has[1] && vals[1].k != TV_NONE &&
		    (e = ti_attrget(r, &item, &vals[1], NULL, &item)))
			break;
		if (!first && (e = tb_put(r, &b, sep.u.s, sep.n)))
			break;
		first = 0;
		if ((e = tr_step(r)) || (e = py_str(r, &b, &item)))
			break;
	}
	if (!e && got < 0)
		e = got;
	if (!e)
		e = tb_take(r, &b, out);
	tb_free(r, &b);
	(void)s;
	return e;
}

static int f_first_last(trender *r, int last, const tv *in, tv *out)
{
	tcur c;
	int e, got;

	if (last) {
		tv list;

		if (in->k == TV_ITER)
			return tr_fail(r, -EINVAL,
				       "TypeError: '%s' object is "
				       "not reversible",
				       tv_typename(in));
		if (in->k == TV_STR) {
			size_t n = in->n, k = 1;

			if (!n) {
				*out = tv_undef_msg(r, "No last item, sequence "
						       "was empty.");
				return r->errset ? -E2BIG : 0;
			}
			while (k < n &&
			       ((unsigned char)in->u.s[n - k] & 0xC0) == 0x80)
				k++;
			*out = tv_str(in->u.s + n - k, k);
			return 0;
		}
		if (tv_is_seq(in)) {
			size_t n = tv_seq_len(in);

			if (n) {
				*out = tv_seq_at(in, n - 1);
				return 0;
			}
			*out = tv_undef_msg(r, "No last item, sequence was "
					       "empty.");
			return r->errset ? -E2BIG : 0;
		}
		if ((e = tv_to_list(r, in, &list)))
			return e;
		if (list.n) {
			*out = list.u.items[list.n - 1];
			return 0;
		}
		*out = tv_undef_msg(r, "No last item, sequence was empty.");
		return r->errset ? -E2BIG : 0;
	}
	if ((e = tc_open(r, in, &c)))
		return e;
	got = tc_next(r, &c, out);
	if (got < 0)
		return got;
	if (!got)
		*out = tv_undef_msg(r, "No first item, sequence was empty.");
	return r->errset ? -E2BIG : 0;
}

static int f_reverse(trender *r, const tv *in, tv *out)
{
	titer *it;
	tv list;
	int e;

	if (in->k == TV_STR) {
		int64_t len = (int64_t)tu_count(in->u.s, in->n);

		return ps_slice(r, in, len - 1, -1, -1, out);
	}
	if (in->k == TV_ITER) {
		if ((e = tv_to_list(r, in, &list)) ||
		    (e = tv_newlist(r, list.n, 0, out)))
			return e;
		for (uint32_t i = 0; i < list.n; i++)
			out->u.items[i] = list.u.items[list.n - 1 - i];
		return 0;
	}
	if (in->k == TV_UNDEF) {
		list = tv_undef();
	} else if (tv_is_seq(in)) {
		list = *in;
	} else if (in->k == TV_DICT || in->k == TV_JOBJ || in->k == TV_RANGE ||
		   (in->k == TV_VIEW && in->x != TVIEW_ITEMS)) {
		if ((e = tv_to_list(r, in, &list)))
			return e;
	} else {
		return tr_fail(r, -EINVAL,
			       "FilterArgumentError: argument must "
			       "be iterable");
	}
	if ((e = new_iter(r, TI_REVERSED, NULL, &it)))
		return e;
	it->seq = list;
	it->pos = list.k == TV_UNDEF ? -1 : (int64_t)tv_seq_len(&list) - 1;
	*out = iter_value(it);
	return 0;
}

/* select, reject, selectattr, rejectattr */
static int f_select(trender *r, int reject, int attr, const tv *in, tv *args,
		    int nargs, const tkw *kw, tv *kwv, int nkw, tv *out)
{
	titer *it;
	int e, truthy, off = attr ? 1 : 0;

	if ((e = new_iter(r, TI_SELECT, NULL, &it)))
		return e;
	it->reject = (uint8_t)reject;
	it->attr = (uint8_t)attr;
	/* jinja2 runs nothing until the first item is asked for, and a falsy
	 * value gives nothing */
	if ((e = tv_truthy(r, in, &truthy)))
		return e;
	if (truthy && (e = tc_open(r, in, &it->src)))
		return e;
	if (attr) {
		if (nargs < 1)
			return tr_fail(r, -EINVAL,
				       "FilterArgumentError: Missing "
				       "parameter for attribute "
				       "name");
		it->attrpath = args[0];
	}
	if (nargs > off) {
		tv tn;

		if ((e = py_str_value(r, &args[off], &tn)))
			return e;
		it->name = tn.u.s;
		it->nlen = tn.n;
		it->args = args + off + 1;
		it->nargs = nargs - off - 1;
		it->kw = (tkw *)kw;
		it->kwv = kwv;
		it->nkw = nkw;
		if (nkw || it->nargs) {
			/* keep the arguments: they live in the caller's frame
			 */
			tv *a = tr_alloc(r, (size_t)(it->nargs + nkw + 1) *
						sizeof(tv));

			if (!a)
				return -E2BIG;
			memcpy(a, it->args, (size_t)it->nargs * sizeof(tv));
			memcpy(a + it->nargs, kwv, (size_t)nkw * sizeof(tv));
			it->args = a;
			it->kwv = a + it->nargs;
		}
	}
	*out = iter_value(it);
	return 0;
}

static int f_map(trender *r, const tv *in, tv *args, int nargs, const tkw *kw,
		 tv *kwv, int nkw, tv *out)
{
	titer *it;
	int e, truthy;

	if ((e = new_iter(r, TI_MAP, NULL, &it)))
		return e;
	if ((e = tv_truthy(r, in, &truthy)))
		return e;
	if (truthy && (e = tc_open(r, in, &it->src)))
		return e;
	if (!nargs) {
		int ai = -1;

		for (int i = 0; i < nkw; i++)
			if (kw[i].n == 9 && !memcmp(kw[i].name, "attribute", 9))
				ai = i;
		for (int i = 0; ai >= 0 && i < nkw; i++) {
			if (i == ai)
				continue;
			if (kw[i].n == 7 && !memcmp(kw[i].name, "default", 7)) {
				it->dflt = kwv[i];
				it->has_dflt = kwv[i].k != TV_NONE;
				continue;
			}
			return tr_fail(
			    r, -EINVAL,
			    "FilterArgumentError: Unexpected keyword "
			    "argument '%.*s'",
			    (int)kw[i].n, kw[i].name);
		}
		if (ai >= 0) {
			it->attrpath = kwv[ai];
			*out = iter_value(it);
			return 0;
		}
	}
	if (!nargs)
		return tr_fail(r, -EINVAL,
			       "FilterArgumentError: map requires a "
			       "filter argument");
	{
		tv tn, *a;

		if ((e = py_str_value(r, &args[0], &tn)))
			return e;
		it->name = tn.u.s;
		it->nlen = tn.n;
		it->nargs = nargs - 1;
		it->nkw = nkw;
		it->kw = (tkw *)kw;
		a = tr_alloc(r, (size_t)(nargs + nkw) * sizeof(tv));
		if (!a)
			return -E2BIG;
		memcpy(a, args + 1, (size_t)(nargs - 1) * sizeof(tv));
		memcpy(a + nargs - 1, kwv, (size_t)nkw * sizeof(tv));
		it->args = a;
		it->kwv = a + nargs - 1;
	}
	*out = iter_value(it);
	return 0;
}

static int f_indent(trender *r, const tv *in, tv *args, int nargs,
		    const tkw *kw, tv *kwv, int nkw, tv *out)
{
	static const char *const spec[] = {"width", "first", "blank", NULL};
	const char *name = "indent";
	tv ind = TV_LIT("    "), s, lines, plain, nl = TV_LIT("\n");
	int first, blank;
	char spaces[256];
	tbuf b = {0};
	BIND(spec);

	if (in->k != TV_STR) {
		if (in->k == TV_UNDEF)
			return tv_undef_fail(r, in);
		return tr_fail(r, -EINVAL,
			       "TypeError: unsupported operand "
			       "type(s) for +=: '%s' and 'str'",
			       tv_typename(in));
	}
	if ((e = truthy_arg(r, &vals[1], has[1], &first)) ||
	    (e = truthy_arg(r, &vals[2], has[2], &blank)))
		return e;
	if (has[0]) {
		if (vals[0].k == TV_STR) {
			ind = vals[0];
		} else {
			int64_t w;

			if ((e = targ_int(r, "indent", &vals[0], &w)))
				return e;
			if (w > (int64_t)sizeof(spaces))
				return te_unsupported(r, "an indent over 256");
			if (w < 0)
				w = 0;
			memset(spaces, ' ', (size_t)w);
			ind = tv_str(spaces, (size_t)w);
		}
	}
	/* s + "\n", then its lines (str.splitlines) */
	plain = *in;
	plain.f = 0;
	if ((e = ps_concat(r, &plain, &nl, &s)) ||
	    (e = ps_splitlines(r, &s, 0, &lines)))
		return e;
	if (first && (e = tb_put(r, &b, ind.u.s, ind.n)))
		goto out;
	for (uint32_t i = 0; i < lines.n; i++) {
		const tv *l = &lines.u.items[i];

		if (i && (e = tb_putc(r, &b, '\n')))
			goto out;
		if (i && (blank || l->n) && (e = tb_put(r, &b, ind.u.s, ind.n)))
			goto out;
		if ((e = tb_put(r, &b, l->u.s, l->n)))
			goto out;
	}
	e = tb_take(r, &b, out);
	out->f = in->f;
out:
	tb_free(r, &b);
	return e;
}

static int f_truncate(trender *r, const tv *in, tv *args, int nargs,
		      const tkw *kw, tv *kwv, int nkw, tv *out)
{
	static const char *const spec[] = {"length", "killwords", "end",
					   "leeway", NULL};
	const char *name = "truncate";
	int64_t length = 255, leeway = 5, len, endlen;
	tv end = TV_LIT("..."), head, parts;
	int kill;
	BIND(spec);

	if ((has[0] && (e = targ_int(r, "truncate", &vals[0], &length))) ||
	    (e = truthy_arg(r, &vals[1], has[1], &kill)))
		return e;
	if (has[2]) {
		if (vals[2].k != TV_STR)
			return te_unsupported(r, "a truncate end that is not a "
						 "string");
		end = vals[2];
	}
	if (has[3] && vals[3].k != TV_NONE &&
	    (e = targ_int(r, "truncate", &vals[3], &leeway)))
		return e;
	endlen = (int64_t)tu_count(end.u.s, end.n);
	if (length < endlen)
		return tr_fail(r, -EINVAL,
			       "AssertionError: expected length >= "
			       "%lld, got %lld",
			       (long long)endlen, (long long)length);
	if (leeway < 0)
		return tr_fail(r, -EINVAL,
			       "AssertionError: expected leeway >= "
			       "0, got %lld",
			       (long long)leeway);
	if ((e = tv_len(r, in, &len)))
		return e;
	if (len < 0)
		return tr_fail(r, -EINVAL,
			       "TypeError: object of type '%s' has "
			       "no len()",
			       tv_typename(in));
	if (len <= length + leeway) {
		*out = *in;
		return 0;
	}
	if (in->k != TV_STR)
		return te_unsupported(r, "truncate of a long list or dict");
	head = tv_str(in->u.s,
		      tu_offset(in->u.s, in->n, (size_t)(length - endlen)));
	if (!kill) {
		tv space = TV_LIT(" ");

		if ((e = ps_split(r, &head, &space, 1, 1, &parts)))
			return e;
		head = parts.u.items[0];
	}
	return ps_concat(r, &head, &end, out);
}

static int f_wordcount(trender *r, const tv *in, tv *out)
{
	tv s;
	int64_t words = 0;
	int inword = 0, e;

	if ((e = str_arg(r, in, &s)))
		return e;
	for (size_t i = 0; i < s.n;) {
		uint32_t cp;
		int w;

		i += tu_dec(s.u.s + i, s.n - i, &cp);
		w = cp == '_' || (tu_flags(cp) & (TU_ALPHA | TU_DECIMAL |
						  TU_DIGIT | TU_NUMERIC));
		if (w && !inword)
			words++;
		inword = w;
	}
	*out = tv_int(words);
	return 0;
}

/* jinja2's title: each piece after [-\s({\[<]+ upper-cased first, the
 * rest lowered */
static int f_title(trender *r, const tv *in, tv *out)
{
	tv s;
	tbuf b = {0};
	size_t i = 0;
	int e;

	if ((e = str_arg(r, in, &s)))
		return e;
	while (i < s.n && !e) {
		size_t j = i, k;
		uint32_t cp;
		int sep = -1;

		/* a run of separators, or a word up to the next one */
		while (j < s.n) {
			int is_sep;

			k = tu_dec(s.u.s + j, s.n - j, &cp);
			is_sep = cp == '-' || cp == '(' || cp == '{' ||
				 cp == '[' || cp == '<' || tu_isspace(cp);
			if (sep < 0)
				sep = is_sep;
			if (is_sep != sep)
				break;
			j += k;
		}
		if (sep) {
			e = tb_put(r, &b, s.u.s + i, j - i);
		} else {
			tv first, rest, a, c;

			k = tu_dec(s.u.s + i, s.n - i, &cp);
			first = tv_str(s.u.s + i, k);
			rest = tv_str(s.u.s + i + k, j - i - k);
			if (!(e = ps_case(r, &first, CASE_UPPER, &a)) &&
			    !(e = ps_case(r, &rest, CASE_LOWER, &c)) &&
			    !(e = tb_put(r, &b, a.u.s, a.n)))
				e = tb_put(r, &b, c.u.s, c.n);
		}
		i = j;
	}
	if (!e)
		e = tb_take(r, &b, out);
	tb_free(r, &b);
	if (!e)
		out->f = in->k == TV_STR ? in->f : 0;
	return e;
}

static int f_round(trender *r, const tv *in, tv *args, int nargs, const tkw *kw,
		   tv *kwv, int nkw, tv *out)
{
	static const char *const spec[] = {"precision", "method", NULL};
	const char *name = "round";
	int64_t prec = 0;
	int method = 0; /* common, ceil, floor */
	BIND(spec);

	if (has[0] && (e = targ_int(r, "round", &vals[0], &prec)))
		return e;
	if (has[1]) {
		const tv *m = &vals[1];

		if (m->k == TV_STR && m->n == 4 && !memcmp(m->u.s, "ceil", 4))
			method = 1;
		else if (m->k == TV_STR && m->n == 5 &&
			 !memcmp(m->u.s, "floor", 5))
			method = 2;
		else if (!(m->k == TV_STR && m->n == 6 &&
			   !memcmp(m->u.s, "common", 6)))
			return tr_fail(r, -EINVAL,
				       "FilterArgumentError: method "
				       "must be common, ceil or "
				       "floor");
	}
	if (in->k != TV_INT && in->k != TV_BOOL && in->k != TV_FLOAT) {
		if (in->k == TV_UNDEF)
			return tv_undef_fail(r, in);
		return tr_fail(r, -EINVAL,
			       "TypeError: type %s doesn't define "
			       "__round__ method",
			       tv_typename(in));
	}
	if (prec < 0 || prec > 300)
		return te_unsupported(r, "round with a precision below 0 or "
					 "over 300");
	if (method == 0) {
		char buf[700]; /* 309 digits, a point, 300 decimals */
		double d;

		if (in->k != TV_FLOAT) {
			*out = tv_int(in->u.i);
			return 0;
		}
		d = in->u.d;
		if (!isfinite(d)) {
			*out = *in;
			return 0;
		}
		snprintf(buf, sizeof(buf), "%.*f", (int)prec, d);
		*out = tv_float(strtod(buf, NULL));
		if (out->u.d == 0)
			out->u.d = copysign(0.0, d);
		return 0;
	}
	{
		double p = pow(10.0, (double)prec);
		double x = in->k == TV_FLOAT ? in->u.d : (double)in->u.i;

		*out = tv_float((method == 1 ? ceil(x * p) : floor(x * p)) / p);
	}
	return 0;
}

static int f_int(trender *r, const tv *in, tv *args, int nargs, const tkw *kw,
		 tv *kwv, int nkw, tv *out)
{
	static const char *const spec[] = {"default", "base", NULL};
	const char *name = "int";
	int64_t base = 10, v;
	double d;
	BIND(spec);

	if (has[1] && (e = targ_int(r, "int", &vals[1], &base)))
		return e;
	if (in->k == TV_UNDEF)
		return tv_undef_fail(r, in);
	*out = has[0] ? vals[0] : tv_int(0);
	switch (in->k) {
	case TV_INT:
	case TV_BOOL:
		*out = tv_int(in->u.i);
		return 0;
	case TV_FLOAT:
		d = in->u.d;
		break;
	case TV_STR:
		e = py_parse_int(in->u.s, in->n, (int)base, &v);
		if (!e) {
			*out = tv_int(v);
			return 0;
		}
		if (e == -ERANGE)
			return tr_fail(r, -EINVAL,
				       "int of '%.*s' is beyond "
				       "64-bit integers",
				       (int)(in->n > 40 ? 40 : in->n), in->u.s);
		if (e == -ENOMEM)
			return tr_oom(r);
		if (py_parse_float(in->u.s, in->n, &d))
			return 0;
		break;
	default:
		return 0;
	}
	if (isnan(d) || isinf(d))
		return 0;
	d = trunc(d);
	if (d >= 9223372036854775808.0 || d < -9223372036854775808.0)
		return tr_fail(r, -EINVAL,
			       "int of a float beyond 64-bit "
			       "integers is not supported");
	*out = tv_int((int64_t)d);
	return 0;
}

static int f_float(trender *r, const tv *in, tv *args, int nargs, const tkw *kw,
		   tv *kwv, int nkw, tv *out)
{
	static const char *const spec[] = {"default", NULL};
	const char *name = "float";
	double d;
	BIND(spec);

	if (in->k == TV_UNDEF)
		return tv_undef_fail(r, in);
	*out = has[0] ? vals[0] : tv_float(0.0);
	switch (in->k) {
	case TV_INT:
	case TV_BOOL:
		*out = tv_float((double)in->u.i);
		return 0;
	case TV_FLOAT:
		*out = *in;
		return 0;
	case TV_STR:
		if (!py_parse_float(in->u.s, in->n, &d))
			*out = tv_float(d);
		return 0;
	default:
		return 0;
	}
}

static int f_format(trender *r, const tv *in, tv *args, int nargs,
		    const tkw *kw, tv *kwv, int nkw, tv *out)
{
	tv s, a;
	int e;

	if (nargs && nkw)
		return tr_fail(r, -EINVAL,
			       "FilterArgumentError: can't handle "
			       "positional and keyword arguments at "
			       "the same time");
	if (in->k == TV_STR && (in->f & TVF_MARKUP))
		return te_unsupported(r, "format of a safe (Markup) string");
	if ((e = str_arg(r, in, &s)))
		return e;
	if (nkw) {
		if ((e = tv_newdict(r, (uint32_t)nkw, &a)))
			return e;
		for (int i = 0; i < nkw; i++) {
			tv k = tv_str(kw[i].name, kw[i].n);

			if ((e = td_set(r, a.u.dict, &k, &kwv[i])))
				return e;
		}
	} else {
		if ((e = tv_newlist(r, (uint32_t)nargs, 1, &a)))
			return e;
		for (int i = 0; i < nargs; i++)
			a.u.items[i] = args[i];
	}
	return py_percent(r, &s, &a, out);
}

static int f_attr(trender *r, const tv *in, tv *args, int nargs, int nkw,
		  tv *out)
{
	int e, mid;

	if (nargs != 1 || nkw)
		return tr_fail(r, -EINVAL,
			       "TypeError: attr takes one argument");
	if (args[0].k != TV_STR)
		return tr_fail(r, -EINVAL,
			       "TypeError: attribute name must be "
			       "string");
	if (in->k == TV_UNDEF)
		return tv_undef_fail(r, in);
	mid = tm_lookup(args[0].u.s, args[0].n);
	if ((args[0].n >= 1 && args[0].u.s[0] == '_') ||
	    (mid >= 0 && tm_has(in, mid)) || in->k == TV_NS ||
	    in->k == TV_LOOP || in->k == TV_RANGE)
		return te_getattr(r, in, args[0].u.s, args[0].n, mid, out);
	*out = tv_undef_attr(r, in, args[0].u.s, args[0].n, 0);
	e = r->errset ? -E2BIG : 0;
	return e;
}

int tf_apply(trender *r, int id, const tv *in, tv *args, int nargs,
	     const tkw *kw, tv *kwv, int nkw, tv *out)
{
	static const char *const no_spec[] = {NULL};
	const char *name = tf_name(id);
	tv s, v[8];
	int64_t n;
	int e, has[8], b;
	titer *it;

	switch (id) {
	case TF_tojson:
		return f_tojson(r, in, args, nargs, kw, kwv, nkw, out);
	case TF_sort:
		return f_sort(r, in, args, nargs, kw, kwv, nkw, out);
	case TF_dictsort:
		return f_dictsort(r, in, args, nargs, kw, kwv, nkw, out);
	case TF_min:
	case TF_max:
		return f_minmax(r, id == TF_max, in, args, nargs, kw, kwv, nkw,
				out);
	case TF_sum:
		return f_sum(r, in, args, nargs, kw, kwv, nkw, out);
	case TF_join:
		return f_join(r, in, args, nargs, kw, kwv, nkw, out);
	case TF_map:
		return f_map(r, in, args, nargs, kw, kwv, nkw, out);
	case TF_select:
	case TF_reject:
	case TF_selectattr:
	case TF_rejectattr:
		return f_select(r, id == TF_reject || id == TF_rejectattr,
				id == TF_selectattr || id == TF_rejectattr, in,
				args, nargs, kw, kwv, nkw, out);
	case TF_indent:
		return f_indent(r, in, args, nargs, kw, kwv, nkw, out);
	case TF_truncate:
		return f_truncate(r, in, args, nargs, kw, kwv, nkw, out);
	case TF_round:
		return f_round(r, in, args, nargs, kw, kwv, nkw, out);
	case TF_int:
		return f_int(r, in, args, nargs, kw, kwv, nkw, out);
	case TF_float:
		return f_float(r, in, args, nargs, kw, kwv, nkw, out);
	case TF_format:
		return f_format(r, in, args, nargs, kw, kwv, nkw, out);
	case TF_attr:
		return f_attr(r, in, args, nargs, nkw, out);
	default:
		break;
	}
	/* the filters of fewer arguments */
	switch (id) {
	case TF_abs:
	case TF_capitalize:
	case TF_count:
	case TF_length:
	case TF_e:
	case TF_escape:
	case TF_first:
	case TF_forceescape:
	case TF_last:
	case TF_list:
	case TF_lower:
	case TF_items:
	case TF_reverse:
	case TF_safe:
	case TF_string:
	case TF_title:
	case TF_upper:
	case TF_wordcount:
		if ((e = targs_bind(r, name, no_spec, args, nargs, kw, kwv, nkw,
				    v, has)))
			return e;
		break;
	default:
		break;
	}
	switch (id) {
	case TF_abs:
		if (in->k == TV_INT || in->k == TV_BOOL) {
			if (in->u.i == INT64_MIN)
				return tr_fail(r, -EINVAL, "integer overflow");
			*out = tv_int(in->u.i < 0 ? -in->u.i : in->u.i);
			return 0;
		}
		if (in->k == TV_FLOAT) {
			*out = tv_float(fabs(in->u.d));
			return 0;
		}
		return tr_fail(r, -EINVAL,
			       "TypeError: bad operand type for "
			       "abs(): '%s'",
			       tv_typename(in));
	case TF_count:
	case TF_length:
		if ((e = tv_len(r, in, &n)))
			return e;
		if (n < 0)
			return tr_fail(r, -EINVAL,
				       "TypeError: object of type "
				       "'%s' has no len()",
				       tv_typename(in));
		*out = tv_int(n);
		return 0;
	case TF_capitalize:
	case TF_lower:
	case TF_upper:
		if ((e = str_arg(r, in, &s)) ||
		    (e = ps_case(r, &s,
				 id == TF_capitalize ? CASE_CAPITALIZE
				 : id == TF_lower    ? CASE_LOWER
						     : CASE_UPPER,
				 out)))
			return e;
		out->f = in->k == TV_STR ? in->f : 0;
		return 0;
	case TF_title:
		return f_title(r, in, out);
	case TF_e:
	case TF_escape:
	case TF_forceescape:
		if (in->k == TV_STR && id != TF_forceescape)
			return ps_escape(r, in, out);
		if ((e = str_arg(r, in, &s)))
			return e;
		s.f = 0;
		return ps_escape(r, &s, out);
	case TF_safe:
		if ((e = str_arg(r, in, &s)))
			return e;
		*out = s;
		out->f = TVF_MARKUP;
		return 0;
	case TF_string:
		if (in->k == TV_STR) {
			*out = *in;
			return 0;
		}
		return str_arg(r, in, out);
	case TF_first:
	case TF_last:
		return f_first_last(r, id == TF_last, in, out);
	case TF_list:
		if ((e = tv_to_list(r, in, out)))
			return e;
		if (out->u.items == in->u.items && in->k == TV_LIST) {
			tv copy;

			if ((e = tv_newlist(r, in->n, 0, &copy)))
				return e;
			if (in->n)
				memcpy(copy.u.items, in->u.items,
				       in->n * sizeof(tv));
			*out = copy;
		}
		return 0;
	case TF_items:
		if (in->k == TV_UNDEF) {
			if ((e = new_iter(r, TI_ITEMS, NULL, &it)))
				return e;
			*out = iter_value(it);
			return 0;
		}
		if (!tv_is_mapping(in))
			return tr_fail(r, -EINVAL,
				       "TypeError: Can only get item "
				       "pairs from a mapping.");
		{
			tv view, *copy = tr_alloc(r, sizeof(tv));

			if (!copy)
				return -E2BIG;
			*copy = *in;
			view = tv_undef();
			view.k = TV_VIEW;
			view.x = TVIEW_ITEMS;
			view.u.view = copy;
			if ((e = new_iter(r, TI_ITEMS, &view, &it)))
				return e;
		}
		*out = iter_value(it);
		return 0;
	case TF_reverse:
		return f_reverse(r, in, out);
	case TF_wordcount:
		return f_wordcount(r, in, out);
	case TF_d:
	case TF_default: {
		static const char *const spec[] = {"default_value", "boolean",
						   NULL};

		if ((e = targs_bind(r, name, spec, args, nargs, kw, kwv, nkw, v,
				    has)) ||
		    (e = truthy_arg(r, &v[1], has[1], &b)))
			return e;
		if (in->k == TV_UNDEF) {
			*out = has[0] ? v[0] : TV_LIT("");
			return 0;
		}
		if (b) {
			int t;

			if ((e = tv_truthy(r, in, &t)))
				return e;
			if (!t) {
				*out = has[0] ? v[0] : TV_LIT("");
				return 0;
			}
		}
		*out = *in;
		return 0;
	}
	case TF_center: {
		static const char *const spec[] = {"width", NULL};
		tv w;

		if ((e = targs_bind(r, name, spec, args, nargs, kw, kwv, nkw, v,
				    has)) ||
		    (e = str_arg(r, in, &s)))
			return e;
		w = has[0] ? v[0] : tv_int(80);
		if ((e = tm_call(r, &s, tm_lookup("center", 6), &w, 1, NULL,
				 NULL, 0, out)))
			return e;
		out->f = in->k == TV_STR ? in->f : 0;
		return 0;
	}
	case TF_replace: {
		static const char *const spec[] = {"old", "new", "count", NULL};
		tv old, new_;

		if ((e = targs_bind(r, name, spec, args, nargs, kw, kwv, nkw, v,
				    has)))
			return e;
		if (!has[0] || !has[1])
			return tr_fail(r, -EINVAL,
				       "TypeError: replace takes old "
				       "and new");
		n = -1;
		if (has[2] && v[2].k != TV_NONE &&
		    (e = targ_int(r, "replace", &v[2], &n)))
			return e;
		if ((e = str_arg(r, in, &s)) || (e = str_arg(r, &v[0], &old)) ||
		    (e = str_arg(r, &v[1], &new_)))
			return e;
		return ps_replace(r, &s, &old, &new_, n, out);
	}
	case TF_trim: {
		static const char *const spec[] = {"chars", NULL};

		if ((e = targs_bind(r, name, spec, args, nargs, kw, kwv, nkw, v,
				    has)) ||
		    (e = str_arg(r, in, &s)))
			return e;
		if (has[0] && v[0].k != TV_NONE && v[0].k != TV_STR)
			return tr_fail(r, -EINVAL,
				       "TypeError: strip arg must be "
				       "None or str");
		if (has[0] && v[0].k == TV_STR && in->k == TV_STR &&
		    (in->f & TVF_MARKUP))
			return te_unsupported(r,
					      "trim(chars) of a safe (Markup) "
					      "string");
		*out =
		    ps_strip(&s, has[0] && v[0].k == TV_STR ? &v[0] : NULL, 3);
		out->f = in->k == TV_STR ? in->f : 0;
		return 0;
	}
	case TF_unique: {
		static const char *const spec[] = {"case_sensitive",
						   "attribute", NULL};

		if ((e = targs_bind(r, name, spec, args, nargs, kw, kwv, nkw, v,
				    has)) ||
		    (e = new_iter(r, TI_UNIQUE, in, &it)) ||
		    (e = truthy_arg(r, &v[0], has[0], &it->case_sensitive)))
			return e;
		it->attrpath = has[1] ? v[1] : tv_none();
		*out = iter_value(it);
		return 0;
	}
	case TF_batch:
	case TF_slice: {
		static const char *const bspec[] = {"linecount", "fill_with",
						    NULL};
		static const char *const sspec[] = {"slices", "fill_with",
						    NULL};

		if ((e = targs_bind(r, name, id == TF_batch ? bspec : sspec,
				    args, nargs, kw, kwv, nkw, v, has)))
			return e;
		if (!has[0])
			return tr_fail(r, -EINVAL,
				       "TypeError: %s() missing an "
				       "argument",
				       name);
		if ((e = new_iter(r, id == TF_batch ? TI_BATCH : TI_SLICE, in,
				  &it)) ||
		    (e = targ_int(r, name, &v[0], &it->count)))
			return e;
		it->has_fill = has[1] && v[1].k != TV_NONE;
		it->fill = v[1];
		*out = iter_value(it);
		return 0;
	}
	default:
		return tr_fail(r, -EINVAL, "the filter '%s' is not supported",
			       name);
	}
}

int tf_apply_name(trender *r, const char *name, size_t n, const tv *in,
		  tv *args, int nargs, const tkw *kw, tv *kwv, int nkw, tv *out)
{
	int ok = 1, id = tf_lookup(name, n, &ok);

	if (id < 0)
		return tr_fail(r, -EINVAL, "No filter named '%.*s'.",
			       (int)(n > 60 ? 60 : n), name);
	if (!ok)
		return tr_fail(r, -EINVAL, "the filter '%s' is not supported",
			       tf_name(id));
	return tf_apply(r, id, in, args, nargs, kw, kwv, nkw, out);
}
