/* iter.c: iteration as Python iterates: lists and tuples, JSON arrays in
 * place, a dict's keys in order, a string's code points, ranges, dict
 * views, and the one-pass iterators that jinja2's filters return as
 * generators (select, map, unique, batch, slice, items, reverse), lazily,
 * item by item, as the generators run. Also a for loop's LoopContext:
 * its length and the look-ahead of loop.last. */
#include <errno.h>
#include <string.h>

#include "tmpl.h"

enum {
	TC_EMPTY,
	TC_ITEMS, /* list or tuple */
	TC_JARR,
	TC_DKEYS,
	TC_DVALS,
	TC_DITEMS,
	TC_JKEYS,
	TC_JVALS,
	TC_JITEMS,
	TC_STR,
	TC_RANGE,
	TC_ITER
};

int tc_open(trender *r, const tv *v, tcur *c)
{
	memset(c, 0, sizeof(*c));
	c->src = *v;
	switch (v->k) {
	case TV_UNDEF:
		c->kind = TC_EMPTY;
		return 0;
	case TV_LIST:
	case TV_TUPLE:
		c->kind = TC_ITEMS;
		c->n = v->n;
		return 0;
	case TV_JARR:
		c->kind = TC_JARR;
		c->n = json_array_size(v->u.j);
		return 0;
	case TV_DICT:
		c->kind = TC_DKEYS;
		c->n = v->u.dict->n;
		return 0;
	case TV_JOBJ:
		c->kind = TC_JKEYS;
		c->n = json_object_size(v->u.j);
		c->jit = json_object_iter((json_t *)v->u.j);
		return 0;
	case TV_STR:
		c->kind = TC_STR;
		c->n = v->n;
		return 0;
	case TV_RANGE:
		c->kind = TC_RANGE;
		c->n = (size_t)v->u.range->len;
		return 0;
	case TV_VIEW: {
		const tv *m = v->u.view;

		c->src = *m;
		if (m->k == TV_JOBJ) {
			c->kind = v->x == TVIEW_KEYS	 ? TC_JKEYS
				  : v->x == TVIEW_VALUES ? TC_JVALS
							 : TC_JITEMS;
			c->n = json_object_size(m->u.j);
			c->jit = json_object_iter((json_t *)m->u.j);
		} else {
			c->kind = v->x == TVIEW_KEYS	 ? TC_DKEYS
				  : v->x == TVIEW_VALUES ? TC_DVALS
							 : TC_DITEMS;
			c->n = m->u.dict->n;
		}
		return 0;
	}
	case TV_ITER:
		c->kind = TC_ITER;
		c->it = v->u.it;
		return 0;
	default:
		return tr_fail(r, -EINVAL,
			       "TypeError: '%s' object is not "
			       "iterable",
			       tv_typename(v));
	}
}

int64_t tc_len(const tcur *c)
{
	switch (c->kind) {
	case TC_ITER:
		return -1;
	case TC_STR:
		return (int64_t)tu_count(c->src.u.s, c->src.n);
	default:
		return (int64_t)c->n;
	}
}

static int pair(trender *r, const tv *k, const tv *v, tv *out)
{
	int e = tv_newlist(r, 2, 1, out);

	if (e)
		return e;
	out->u.items[0] = *k;
	out->u.items[1] = *v;
	return 0;
}

static int ti_next(trender *r, titer *it, tv *out);

int tc_next(trender *r, tcur *c, tv *out)
{
	switch (c->kind) {
	case TC_EMPTY:
		return 0;
	case TC_ITEMS:
		if (c->i >= c->n)
			return 0;
		*out = c->src.u.items[c->i++];
		return 1;
	case TC_JARR:
		if (c->i >= c->n)
			return 0;
		*out = tv_json(json_array_get(c->src.u.j, c->i++));
		return 1;
	case TC_DKEYS:
	case TC_DVALS:
	case TC_DITEMS: {
		const tdict *d = c->src.u.dict;

		if (c->i >= d->n)
			return 0;
		c->i++;
		if (c->kind == TC_DKEYS)
			*out = d->keys[c->i - 1];
		else if (c->kind == TC_DVALS)
			*out = d->vals[c->i - 1];
		else
			return pair(r, &d->keys[c->i - 1], &d->vals[c->i - 1],
				    out)
				   ?: 1;
		return 1;
	}
	case TC_JKEYS:
	case TC_JVALS:
	case TC_JITEMS: {
		json_t *obj = (json_t *)c->src.u.j;
		tv k, v;

		if (!c->jit)
			return 0;
		k = tv_str(json_object_iter_key(c->jit),
			   json_object_iter_key_len(c->jit));
		v = tv_json(json_object_iter_value(c->jit));
		c->jit = json_object_iter_next(obj, c->jit);
		if (c->kind == TC_JKEYS)
			*out = k;
		else if (c->kind == TC_JVALS)
			*out = v;
		else
			return pair(r, &k, &v, out) ?: 1;
		return 1;
	}
	case TC_STR: {
		uint32_t cp;
		size_t len;

		if (c->i >= c->n)
			return 0;
		len = tu_dec(c->src.u.s + c->i, c->n - c->i, &cp);
		*out = tv_str(c->src.u.s + c->i, len);
		c->i += len;
		return 1;
	}
	case TC_RANGE: {
		const struct trange *rg = c->src.u.range;

		if (c->i >= c->n)
			return 0;
		*out = tv_int(rg->start + (int64_t)c->i * rg->step);
		c->i++;
		return 1;
	}
	default:
		return ti_next(r, c->it, out);
	}
}

int tv_to_list(trender *r, const tv *v, tv *out)
{
	tcur c;
	tv item, *items = NULL;
	size_t n = 0, cap = 0;
	int e, got;

	if ((e = tc_open(r, v, &c)))
		return e;
	if (c.kind == TC_ITEMS && v->k == TV_LIST) {
		*out = *v;
		return 0;
	}
	if (c.kind != TC_ITER && c.kind != TC_STR)
		cap = c.n;
	if (cap) {
		items = tr_alloc(r, cap * sizeof(tv));
		if (!items)
			return -E2BIG;
	}
	while ((got = tc_next(r, &c, &item)) == 1) {
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 8;
			tv *ni = tr_alloc(r, nc * sizeof(tv));

			if (!ni)
				return -E2BIG;
			if (n)
				memcpy(ni, items, n * sizeof(tv));
			items = ni;
			cap = nc;
		}
		items[n++] = item;
		if ((e = tr_step(r)))
			return e;
	}
	if (got < 0)
		return got;
	if (n > UINT32_MAX)
		return tr_fail(r, -E2BIG, "list too long");
	memset(out, 0, sizeof(*out));
	out->k = TV_LIST;
	out->n = (uint32_t)n;
	out->u.items = items;
	return 0;
}

/* ---- attribute getters (jinja2's make_attrgetter) ------------------ */

/* item[part] for each part of attr ("a.b.0": digits are indexes) */
int ti_attrget(trender *r, const tv *item, const tv *attr, const tv *dflt,
	       tv *out);

int ti_attrget(trender *r, const tv *item, const tv *attr, const tv *dflt,
	       tv *out)
{
	tv cur = *item, key;
	int e;

	if (attr->k == TV_NONE || attr->k == TV_UNDEF) {
		*out = cur;
		return 0;
	}
	if (attr->k != TV_STR) {
		if ((e = te_getitem(r, &cur, attr, &cur)))
			return e;
		if (dflt && cur.k == TV_UNDEF)
			cur = *dflt;
		*out = cur;
		return 0;
	}
	for (size_t i = 0; i <= attr->n;) {
		size_t j = i, k;
		int digits = 1;

		while (j < attr->n && attr->u.s[j] != '.')
			j++;
		for (k = i; k < j; k++)
			if (attr->u.s[k] < '0' || attr->u.s[k] > '9')
				digits = 0;
		if (digits && j > i) {
			int64_t v = 0;

			for (k = i; k < j; k++) {
				if (v > (INT64_MAX - 9) / 10)
					return tr_fail(r, -EINVAL,
						       "attribute index too "
						       "large");
				v = v * 10 + (attr->u.s[k] - '0');
			}
			key = tv_int(v);
		} else {
			key = tv_str(attr->u.s + i, j - i);
		}
		if ((e = te_getitem(r, &cur, &key, &cur)))
			return e;
		if (dflt && cur.k == TV_UNDEF)
			cur = *dflt;
		i = j + 1;
	}
	*out = cur;
	return 0;
}

/* ---- the iterators of filters -------------------------------------- */

static int ti_select(trender *r, titer *it, tv *out)
{
	tv item, x;
	int got, ok, e;

	for (;;) {
		if ((got = tc_next(r, &it->src, &item)) != 1)
			return got;
		if ((e = tr_step(r)))
			return e;
		x = item;
		if (it->attr &&
		    (e = ti_attrget(r, &item, &it->attrpath, NULL, &x)))
			return e;
		if (it->name) {
			e = tt_apply_name(r, it->name, it->nlen, &x, it->args,
					  it->nargs, it->kw, it->kwv, it->nkw,
					  &ok);
		} else {
			e = tv_truthy(r, &x, &ok);
		}
		if (e)
			return e;
		if (ok != it->reject) {
			*out = item;
			return 1;
		}
	}
}

static int ti_map(trender *r, titer *it, tv *out)
{
	tv item;
	int got;

	if ((got = tc_next(r, &it->src, &item)) != 1)
		return got;
	if (it->name)
		return tf_apply_name(r, it->name, it->nlen, &item, it->args,
				     it->nargs, it->kw, it->kwv, it->nkw, out)
			   ?: 1;
	return ti_attrget(r, &item, &it->attrpath,
			  it->has_dflt ? &it->dflt : NULL, out)
		   ?: 1;
}

/* the key of unique, sort, min and max: lowered when not case sensitive */
int ti_key(trender *r, const tv *item, const tv *attr, int case_sensitive,
	   tv *out);

int ti_key(trender *r, const tv *item, const tv *attr, int case_sensitive,
	   tv *out)
{
	int e = ti_attrget(r, item, attr, NULL, out);

	if (e)
		return e;
	if (!case_sensitive && out->k == TV_STR)
		return ps_case(r, out, CASE_LOWER, out);
	return 0;
}

static int ti_unique(trender *r, titer *it, tv *out)
{
	tv item, key, dummy;
	int got, e;

	for (;;) {
		if ((got = tc_next(r, &it->src, &item)) != 1)
			return got;
		if ((e = tr_step(r)))
			return e;
		if ((e = ti_key(r, &item, &it->attrpath, it->case_sensitive,
				&key)))
			return e;
		if (!tv_hashable(&key))
			return tr_fail(r, -EINVAL,
				       "TypeError: unhashable type: "
				       "'%s'",
				       tv_typename(&key));
		if ((e = td_get(r, &it->seen, &key, &dummy)) < 0)
			return e;
		if (e == 1)
			continue;
		if ((e = td_set(r, &it->seen, &key, &key)))
			return e;
		*out = item;
		return 1;
	}
}

/* do_batch: lists of count items, the last one filled */
static int ti_batch(trender *r, titer *it, tv *out)
{
	tv item;
	int got, e;

	while ((got = tc_next(r, &it->src, &item)) == 1) {
		if ((e = tr_step(r)))
			return e;
		if ((int64_t)it->bn == it->count) {
			memset(out, 0, sizeof(*out));
			out->k = TV_LIST;
			out->n = (uint32_t)it->bn;
			out->u.items = it->bitems;
			it->bitems = NULL;
			it->bn = it->bcap = 0;
		} else {
			got = 2;
		}
		if (it->bn == it->bcap) {
			size_t cap = it->bcap ? it->bcap * 2 : 8;
			tv *ni = tr_alloc(r, cap * sizeof(tv));

			if (!ni)
				return -E2BIG;
			if (it->bn)
				memcpy(ni, it->bitems, it->bn * sizeof(tv));
			it->bitems = ni;
			it->bcap = cap;
		}
		it->bitems[it->bn++] = item;
		if (got == 1)
			return 1;
	}
	if (got < 0)
		return got;
	if (it->done || !it->bn)
		return 0;
	it->done = 1;
	if (it->has_fill && (int64_t)it->bn < it->count) {
		size_t need = (size_t)it->count;
		tv *ni;

		if (it->count > (int64_t)(SIZE_MAX / sizeof(tv)) / 2)
			return tr_fail(r, -E2BIG, "batch too large");
		ni = tr_alloc(r, need * sizeof(tv));
		if (!ni)
			return -E2BIG;
		memcpy(ni, it->bitems, it->bn * sizeof(tv));
		while (it->bn < need)
			ni[it->bn++] = it->fill;
		it->bitems = ni;
	}
	memset(out, 0, sizeof(*out));
	out->k = TV_LIST;
	out->n = (uint32_t)it->bn;
	out->u.items = it->bitems;
	if (it->bn > UINT32_MAX)
		return tr_fail(r, -E2BIG, "batch too large");
	return 1;
}

static int ti_slice(trender *r, titer *it, tv *out)
{
	int64_t len, per, extra, start, end, no = it->slice_no;
	tv list;
	int e;

	if (!it->started) {
		titer tmp;
		tv src = tv_undef();

		it->started = 1;
		memset(&tmp, 0, sizeof(tmp));
		tmp.kind = TI_CUR;
		tmp.src = it->src;
		src.k = TV_ITER;
		src.u.it = &tmp;
		if ((e = tv_to_list(r, &src, &it->slice_list)))
			return e;
		if (!it->count)
			return tr_fail(r, -EINVAL,
				       "ZeroDivisionError: integer "
				       "division or modulo by "
				       "zero");
	}
	if (no >= it->count)
		return 0;
	list = it->slice_list;
	len = list.n;
	per = len / it->count;
	extra = len % it->count;
	start = it->slice_off + no * per;
	if (no < extra)
		it->slice_off++;
	end = it->slice_off + (no + 1) * per;
	it->slice_no++;
	if ((e = tv_newlist(r, (uint32_t)(end - start + 1), 0, out)))
		return e;
	out->n = (uint32_t)(end - start);
	if (end > start)
		memcpy(out->u.items, list.u.items + start,
		       (size_t)(end - start) * sizeof(tv));
	if (it->has_fill && no >= extra)
		out->u.items[out->n++] = it->fill;
	return 1;
}

static int ti_loopfilter(trender *r, titer *it, tv *out);

static int ti_next(trender *r, titer *it, tv *out)
{
	int e;

	if (!it)
		return 0;
	if ((e = tr_enter(r)))
		return e;
	switch (it->kind) {
	case TI_CUR:
	case TI_ITEMS:
		e = tc_next(r, &it->src, out);
		break;
	case TI_REVERSED:
		if (it->pos < 0) {
			e = 0;
		} else if (it->seq.k == TV_STR) {
			e = tr_fail(r, -EINVAL, "reversed string iterator");
		} else {
			*out = tv_seq_at(&it->seq, (size_t)it->pos--);
			e = 1;
		}
		break;
	case TI_SELECT:
		e = ti_select(r, it, out);
		break;
	case TI_MAP:
		e = ti_map(r, it, out);
		break;
	case TI_UNIQUE:
		e = ti_unique(r, it, out);
		break;
	case TI_BATCH:
		e = ti_batch(r, it, out);
		break;
	case TI_SLICE:
		e = ti_slice(r, it, out);
		break;
	case TI_LOOPFILTER:
		e = ti_loopfilter(r, it, out);
		break;
	default:
		e = 0;
		break;
	}
	tr_leave(r);
	return e;
}

/* ---- for loops ----------------------------------------------------- */

int tl_assign(trender *r, tscope *s, const tnode *target, const tv *v);

/* the items of the loop's iterable that pass its if clause */
static int ti_loopfilter(trender *r, titer *it, tv *out)
{
	tv item, res;
	int got, ok, e;

	for (;;) {
		if ((got = tc_next(r, &it->src, &item)) != 1)
			return got;
		if ((e = tr_step(r)))
			return e;
		it->scope->n = 0;
		if ((e = tl_assign(r, it->scope, it->target, &item)))
			return e;
		if ((e = te_eval(r, it->test, it->scope, &res)) ||
		    (e = tv_truthy(r, &res, &ok)))
			return e;
		if (ok) {
			*out = item;
			return 1;
		}
	}
}

/* LoopContext.length: the rest of a one-pass iterable counted */
int tl_length(trender *r, tloop *l, int64_t *out)
{
	tv rest, src;
	titer tmp;
	int e;

	if (l->length >= 0) {
		*out = l->length;
		return 0;
	}
	memset(&tmp, 0, sizeof(tmp));
	tmp.kind = TI_CUR;
	tmp.src = l->cur;
	src = tv_undef();
	src.k = TV_ITER;
	src.u.it = &tmp;
	if ((e = tv_to_list(r, &src, &rest)))
		return e;
	if ((e = tc_open(r, &rest, &l->cur)))
		return e;
	l->length = (int64_t)rest.n + l->index0 + 1 + (l->has_after == 1);
	*out = l->length;
	return 0;
}

/* LoopContext._peek_next: 1 an item, 0 the end */
int tl_peek(trender *r, tloop *l, tv *out);

int tl_peek(trender *r, tloop *l, tv *out)
{
	int got;

	if (!l->has_after) {
		got = tc_next(r, &l->cur, &l->after);
		if (got < 0)
			return got;
		l->has_after = got ? 1 : 2;
	}
	if (l->has_after == 1)
		*out = l->after;
	return l->has_after == 1;
}

/* the loop's next item: 1, or 0 at the end */
int tl_next(trender *r, tloop *l, tv *out);

int tl_next(trender *r, tloop *l, tv *out)
{
	int got;

	if (l->has_after) {
		got = l->has_after == 1;
		l->has_after = 0;
		*out = l->after;
	} else {
		got = tc_next(r, &l->cur, out);
		if (got < 0)
			return got;
	}
	if (!got)
		return 0;
	l->index0++;
	l->before = l->current;
	l->current = *out;
	return 1;
}
