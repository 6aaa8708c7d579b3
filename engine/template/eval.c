/* eval.c: expressions. Names through the scopes, then the render's
 * variables (the JSON context, read in place), then the globals; the
 * sandbox's attribute and item lookups (attribute first for a.b, item
 * first for a[b], names starting with _ and mutating methods unsafe);
 * Python's arithmetic on int64 (an overflow is an error, never a wrong
 * number) and floats; comparisons, tests, filters and calls. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tmpl.h"
#include "util/taco_err.h"

/* ---- the render's state -------------------------------------------- */

int tr_fail(trender *r, int code, const char *fmt, ...)
{
	char msg[900];
	va_list ap;

	if (r->errset)
		return code;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	taco_err_set(r->err, code, "line %d: %s", r->line, msg);
	r->errset = 1;
	r->errcode = code;
	return code;
}

int tr_oom(trender *r)
{
	return tr_fail(r, -ENOMEM, "out of memory");
}

void *tr_alloc(trender *r, size_t n)
{
	void *p = ta_alloc(&r->a, n);

	if (!p) {
		if (n > r->a.limit - r->a.used ||
		    r->a.used + (64u << 10) >= r->a.limit)
			tr_fail(r, -E2BIG, "max_memory exceeded (%zu bytes)",
				r->lim.max_memory);
		else
			tr_oom(r);
	}
	return p;
}

int tr_enter(trender *r)
{
	if (++r->rdepth > TR_LIMIT_RDEPTH) {
		r->rdepth--;
		return tr_fail(r, -E2BIG, "evaluation depth exceeded (%d)",
			       TR_LIMIT_RDEPTH);
	}
	return 0;
}

int te_unsupported(trender *r, const char *what)
{
	return tr_fail(r, -EINVAL, "%s is not supported", what);
}

/* ---- scopes -------------------------------------------------------- */

tscope *ts_new(trender *r, tscope *parent)
{
	tscope *s = tr_alloc(r, sizeof(*s));

	if (!s)
		return NULL;
	s->parent = parent;
	s->n = 0;
	s->cap = 4;
	s->slots = s->inl;
	return s;
}

int ts_set(trender *r, tscope *s, int id, const tv *v)
{
	for (uint32_t i = 0; i < s->n; i++)
		if (s->slots[i].id == id) {
			s->slots[i].v = *v;
			return 0;
		}
	if (s->n == s->cap) {
		uint32_t cap = s->cap * 2;
		tslot *ns = tr_alloc(r, cap * sizeof(tslot));

		if (!ns)
			return -E2BIG;
		memcpy(ns, s->slots, s->n * sizeof(tslot));
		s->slots = ns;
		s->cap = cap;
	}
	s->slots[s->n].id = id;
	s->slots[s->n].v = *v;
	s->n++;
	return 0;
}

int ts_lookup(trender *r, tscope *s, int id, tv *out)
{
	tctxslot *c;

	for (; s; s = s->parent)
		for (uint32_t i = 0; i < s->n; i++)
			if (s->slots[i].id == id) {
				*out = s->slots[i].v;
				return 0;
			}
	c = &r->ctxc[id];
	if (!c->state) {
		const tname *nm = &r->t->names[id];
		const json_t *j = json_object_getn(r->ctx, nm->s, nm->n);
		int g;

		c->state = 2;
		if (j) {
			c->state = 1;
			c->v = tv_json(j);
		} else if ((g = tg_lookup(nm->s, nm->n)) >= 0) {
			c->state = 1;
			c->v = tv_undef();
			c->v.k = TV_FUNC;
			c->v.x = (uint16_t)g;
		}
	}
	if (c->state == 1) {
		*out = c->v;
		return 0;
	}
	*out = tv_undef_id(id);
	return 0;
}

int ts_pre(trender *r, tscope *s, const tnode *n)
{
	for (int i = 0; i < n->npre; i++) {
		tv u = tv_undef_id(n->pre[i]);
		int e = ts_set(r, s, n->pre[i], &u);

		if (e)
			return e;
	}
	return 0;
}

/* ---- attributes and items ------------------------------------------ */

/* Python's special attributes (__class__, __len__, ...): every object has
 * some, all unsafe; a name like _x or __x is no attribute of ours */
static int is_dunder(const char *s, size_t n)
{
	return n >= 5 && s[0] == '_' && s[1] == '_' && s[n - 1] == '_' &&
	       s[n - 2] == '_';
}

static int bound(trender *r, const tv *obj, int mid, tv *out)
{
	tv *self = tr_alloc(r, sizeof(tv));

	if (!self)
		return -E2BIG;
	*self = *obj;
	*out = tv_undef();
	out->k = TV_METHOD;
	out->x = (uint16_t)mid;
	out->u.bound = self;
	return 0;
}

int tl_peek(trender *r, tloop *l, tv *out);

static int loop_attr(trender *r, const tv *obj, const char *name, size_t n,
		     tv *out)
{
	tloop *l = obj->u.loop;
	int64_t len;
	tv next;
	int e;

#define IS(lit) (n == sizeof(lit) - 1 && !memcmp(name, lit, n))
	if (IS("index")) {
		*out = tv_int(l->index0 + 1);
	} else if (IS("index0")) {
		*out = tv_int(l->index0);
	} else if (IS("first")) {
		*out = tv_bool(l->index0 == 0);
	} else if (IS("depth")) {
		*out = tv_int(l->depth0 + 1);
	} else if (IS("depth0")) {
		*out = tv_int(l->depth0);
	} else if (IS("length") || IS("revindex") || IS("revindex0")) {
		if ((e = tv_len(r, obj, &len)))
			return e;
		*out = tv_int(IS("length")     ? len
			      : IS("revindex") ? len - l->index0
					       : len - l->index0 - 1);
	} else if (IS("last")) {
		if ((e = tl_peek(r, l, &next)) < 0)
			return e;
		*out = tv_bool(!e);
	} else if (IS("nextitem")) {
		if ((e = tl_peek(r, l, &next)) < 0)
			return e;
		*out = e ? next : tv_undef_msg(r, "there is no next item");
	} else if (IS("previtem")) {
		*out = l->index0 == 0 ? tv_undef_msg(r, "there is no previous "
							"item")
				      : l->before;
	} else if (name[0] == '_') {
		*out = tv_unsafe(r, obj, name, n);
	} else {
		*out = tv_undef_attr(r, obj, name, n, 0);
	}
#undef IS
	return r->errset ? -E2BIG : 0;
}

/* obj.name when obj has no such Python attribute: the sandbox's fallback
 * to obj[name] */
static int attr_fallback(trender *r, const tv *obj, const char *name, size_t n,
			 tv *out)
{
	switch (obj->k) {
	case TV_DICT:
	case TV_JOBJ:
		if (tv_map_gets(obj, name, n, out))
			return 0;
		break;
	case TV_NS:
		if (tv_map_gets(
			&(tv){.k = TV_DICT, .u.dict = &obj->u.ns->attrs}, name,
			n, out)) {
			if (name[0] == '_')
				*out = tv_unsafe(r, obj, name, n);
			return r->errset ? -E2BIG : 0;
		}
		break;
	case TV_LOOP:
		return loop_attr(r, obj, name, n, out);
	case TV_RANGE: {
		const struct trange *g = obj->u.range;

		if (n == 5 && !memcmp(name, "start", 5)) {
			*out = tv_int(g->start);
			return 0;
		}
		if (n == 4 && !memcmp(name, "stop", 4)) {
			*out = tv_int(g->stop);
			return 0;
		}
		if (n == 4 && !memcmp(name, "step", 4)) {
			*out = tv_int(g->step);
			return 0;
		}
		break;
	}
	case TV_ITER:
	case TV_MACRO:
	case TV_FUNC: {
		/* the few attributes these Python objects have: refused;
		 * any other name is undefined, as in jinja2 */
		static const char *const gen[] = {
		    "close",	    "send",	    "throw", "gi_running",
		    "gi_suspended", "gi_yieldfrom", NULL};
		static const char *const mac[] = {"name",
						  "arguments",
						  "catch_kwargs",
						  "catch_varargs",
						  "caller",
						  "explicit_caller",
						  NULL};
		static const char *const cls[] = {
		    "count",  "index", "start",	   "step",	 "stop",
		    "clear",  "copy",  "fromkeys", "get",	 "items",
		    "keys",   "pop",   "popitem",  "setdefault", "update",
		    "values", NULL};
		const char *const *names =
		    obj->k == TV_ITER				? gen
		    : obj->k == TV_MACRO			? mac
		    : (obj->x == TG_RANGE || obj->x == TG_DICT) ? cls
								: NULL;

		for (int i = 0; names && names[i]; i++)
			if (strlen(names[i]) == n && !memcmp(names[i], name, n))
				return tr_fail(r, -EINVAL,
					       "the attribute '%s' of a %s is "
					       "not supported",
					       names[i], tv_typename(obj));
		break;
	}
	default:
		break;
	}
	*out = tv_undef_attr(r, obj, name, n, 0);
	return r->errset ? -E2BIG : 0;
}

/* the method or attribute of obj called name (id mid): 1 when obj has
 * it (*out set), 0 when not */
static int py_attr(trender *r, const tv *obj, const char *name, size_t n,
		   int mid, tv *out)
{
	int h;

	if (is_dunder(name, n)) {
		*out = tv_unsafe(r, obj, name, n);
		return r->errset ? -E2BIG : 1;
	}
	if (mid < 0)
		return 0;
	h = tm_has(obj, mid);
	if (!h)
		return 0;
	if (h == 2) {
		*out = tv_unsafe(r, obj, name, n);
		return r->errset ? -E2BIG : 1;
	}
	if (h == 4)
		return tr_fail(r, -EINVAL,
			       "the attribute '%s' of %s is not supported",
			       tm_name(mid), tv_typename(obj));
	return bound(r, obj, mid, out) ?: 1;
}

int te_getattr(trender *r, const tv *obj, const char *name, size_t n, int mid,
	       tv *out)
{
	int e;

	if (obj->k == TV_UNDEF)
		return tv_undef_fail(r, obj);
	if ((e = py_attr(r, obj, name, n, mid, out)))
		return e < 0 ? e : 0;
	return attr_fallback(r, obj, name, n, out);
}

static int undef_elem(trender *r, const tv *obj, const tv *key, tv *out)
{
	tbuf b = {0};
	tv s;
	int e = py_repr(r, &b, key);

	if (!e)
		e = tb_take(r, &b, &s);
	tb_free(r, &b);
	if (e)
		return e;
	*out = tv_undef_attr(r, obj, s.u.s, s.n, 1);
	return r->errset ? -E2BIG : 0;
}

/* obj[key] failed as an item: a string key tries the attribute */
static int item_fallback(trender *r, const tv *obj, const tv *key, tv *out)
{
	int e;

	if (key->k != TV_STR)
		return undef_elem(r, obj, key, out);
	if ((e = py_attr(r, obj, key->u.s, key->n, tm_lookup(key->u.s, key->n),
			 out)))
		return e < 0 ? e : 0;
	switch (obj->k) {
	case TV_NS:
	case TV_LOOP:
	case TV_RANGE:
	case TV_ITER:
	case TV_MACRO:
	case TV_FUNC:
		return attr_fallback(r, obj, key->u.s, key->n, out);
	default:
		*out = tv_undef_attr(r, obj, key->u.s, key->n, 0);
		return r->errset ? -E2BIG : 0;
	}
}

int te_getitem(trender *r, const tv *obj, const tv *key, tv *out)
{
	int64_t i, len;

	switch (obj->k) {
	case TV_UNDEF:
		return tv_undef_fail(r, obj);
	case TV_DICT:
	case TV_JOBJ: {
		int got = tv_map_get(r, obj, key, out);

		if (got < 0)
			return got;
		if (got == 1)
			return 0;
		return item_fallback(r, obj, key, out);
	}
	case TV_LIST:
	case TV_TUPLE:
	case TV_JARR:
	case TV_STR:
	case TV_RANGE:
		if (key->k != TV_INT && key->k != TV_BOOL)
			return item_fallback(r, obj, key, out);
		i = key->u.i;
		if (obj->k == TV_STR)
			len = (int64_t)tu_count(obj->u.s, obj->n);
		else if (obj->k == TV_RANGE)
			len = obj->u.range->len;
		else
			len = (int64_t)tv_seq_len(obj);
		if (i < 0)
			i += len;
		if (i < 0 || i >= len)
			return undef_elem(r, obj, key, out);
		if (obj->k == TV_STR) {
			size_t off = tu_offset(obj->u.s, obj->n, (size_t)i);
			uint32_t cp;

			*out =
			    tv_str(obj->u.s + off,
				   tu_dec(obj->u.s + off, obj->n - off, &cp));
		} else if (obj->k == TV_RANGE) {
			*out = tv_int(obj->u.range->start +
				      i * obj->u.range->step);
		} else {
			*out = tv_seq_at(obj, (size_t)i);
		}
		return 0;
	default:
		return item_fallback(r, obj, key, out);
	}
}

/* Python's slice of a length: *count items from *start by step */
static void slice_adjust(int64_t len, int64_t *start, int64_t *stop,
			 int64_t step, int has_start, int has_stop,
			 int64_t *count)
{
	if (!has_start)
		*start = step < 0 ? len - 1 : 0;
	else if (*start < 0) {
		*start += len;
		if (*start < 0)
			*start = step < 0 ? -1 : 0;
	} else if (*start >= len) {
		*start = step < 0 ? len - 1 : len;
	}
	if (!has_stop)
		*stop = step < 0 ? -1 : len;
	else if (*stop < 0) {
		*stop += len;
		if (*stop < 0)
			*stop = step < 0 ? -1 : 0;
	} else if (*stop >= len) {
		*stop = step < 0 ? len - 1 : len;
	}
	if (step < 0)
		*count =
		    *stop < *start ? (*start - *stop - 1) / (-step) + 1 : 0;
	else
		*count = *start < *stop ? (*stop - *start - 1) / step + 1 : 0;
}

__attribute__((noinline)) static int te_slice(trender *r, const tnode *n,
					      tscope *s, tv *out)
{
	tv obj, idx[3];
	const tnode *parts[3] = {n->b, n->c, n->d};
	int64_t v[3] = {0, 0, 1}, len, count;
	int has[3] = {0, 0, 0}, bad = 0, e;

	if ((e = te_eval(r, n->a, s, &obj)))
		return e;
	for (int k = 0; k < 3; k++) {
		if (!parts[k])
			continue;
		if ((e = te_eval(r, parts[k], s, &idx[k])))
			return e;
		if (idx[k].k == TV_INT || idx[k].k == TV_BOOL) {
			v[k] = idx[k].u.i;
			has[k] = 1;
		} else if (idx[k].k != TV_NONE) {
			bad = 1;
		}
	}
	/* jinja2 slices with Python's own subscript: no undefined here, but
	 * in constants that its compiler folds (fold.c), evaluated with the
	 * sandbox's getitem */
	r->line = n->line;
	if (r->constmode && obj.k != TV_UNDEF &&
	    ((obj.k != TV_STR && !tv_is_seq(&obj)) || bad)) {
		*out = tv_undef_attr(r, &obj, "slice", 5, 1);
		return r->errset ? -E2BIG : 0;
	}
	if (obj.k == TV_UNDEF)
		return tv_undef_fail(r, &obj);
	if (obj.k == TV_RANGE && !bad) {
		const struct trange *g = obj.u.range;
		struct trange *ng = tr_alloc(r, sizeof(*ng));

		if (!ng)
			return -E2BIG;
		if (has[2] && v[2] == 0)
			return tr_fail(r, -EINVAL,
				       "ValueError: slice step cannot "
				       "be zero");
		slice_adjust(g->len, &v[0], &v[1], v[2], has[0], has[1],
			     &count);
		if (__builtin_mul_overflow(v[2], g->step, &ng->step) ||
		    __builtin_mul_overflow(v[0], g->step, &ng->start) ||
		    __builtin_add_overflow(ng->start, g->start, &ng->start) ||
		    __builtin_mul_overflow(v[1], g->step, &ng->stop) ||
		    __builtin_add_overflow(ng->stop, g->start, &ng->stop))
			return te_unsupported(r, "a range slice beyond 64-bit "
						 "integers");
		ng->len = count;
		*out = obj;
		out->u.range = ng;
		return 0;
	}
	if (obj.k != TV_STR && !tv_is_seq(&obj)) {
		if (tv_is_mapping(&obj))
			return tr_fail(r, -EINVAL,
				       "TypeError: unhashable type: "
				       "'slice'");
		return tr_fail(r, -EINVAL,
			       "TypeError: '%s' object is not "
			       "subscriptable",
			       tv_typename(&obj));
	}
	if (bad)
		return tr_fail(r, -EINVAL,
			       "TypeError: slice indices must be "
			       "integers or None or have an "
			       "__index__ method");
	if (has[2] && v[2] == 0)
		return tr_fail(r, -EINVAL,
			       "ValueError: slice step cannot be zero");
	if (v[2] == INT64_MIN)
		v[2] = -INT64_MAX;
	len = obj.k == TV_STR ? (int64_t)tu_count(obj.u.s, obj.n)
			      : (int64_t)tv_seq_len(&obj);
	slice_adjust(len, &v[0], &v[1], v[2], has[0], has[1], &count);
	if (obj.k == TV_STR) {
		if (!count) {
			*out = TV_LIT("");
			return 0;
		}
		return ps_slice(r, &obj, v[0],
				v[0] + v[2] * (count - 1) + (v[2] > 0 ? 1 : -1),
				v[2], out);
	}
	if ((e = tv_newlist(r, (uint32_t)count, obj.k == TV_TUPLE, out)))
		return e;
	for (int64_t i = 0; i < count; i++)
		out->u.items[i] = tv_seq_at(&obj, (size_t)(v[0] + i * v[2]));
	return 0;
}

/* ---- arithmetic ---------------------------------------------------- */

static int is_intish(const tv *v)
{
	return v->k == TV_INT || v->k == TV_BOOL;
}

static int is_num(const tv *v)
{
	return is_intish(v) || v->k == TV_FLOAT;
}

static double as_double(const tv *v)
{
	return v->k == TV_FLOAT ? v->u.d : (double)v->u.i;
}

static int overflow(trender *r)
{
	return tr_fail(r, -EINVAL,
		       "integer overflow: an integer beyond 64 "
		       "bits is not supported");
}

static int type_error(trender *r, const char *op, const tv *a, const tv *b)
{
	if (a->k == TV_UNDEF)
		return tv_undef_fail(r, a);
	if (b->k == TV_UNDEF)
		return tv_undef_fail(r, b);
	return tr_fail(
	    r, -EINVAL,
	    "TypeError: unsupported operand type(s) for %s: '%s' and "
	    "'%s'",
	    op, tv_typename(a), tv_typename(b));
}

static int zero_div(trender *r)
{
	return tr_fail(r, -EINVAL, "ZeroDivisionError: division by zero");
}

static int concat_seq(trender *r, const tv *a, const tv *b, tv *out)
{
	size_t na = tv_seq_len(a), nb = tv_seq_len(b);
	int e;

	if (na + nb > UINT32_MAX)
		return tr_fail(r, -E2BIG, "list too long");
	if ((e = tv_newlist(r, (uint32_t)(na + nb), a->k == TV_TUPLE, out)))
		return e;
	for (size_t i = 0; i < na; i++)
		out->u.items[i] = tv_seq_at(a, i);
	for (size_t i = 0; i < nb; i++)
		out->u.items[na + i] = tv_seq_at(b, i);
	return 0;
}

static int repeat_seq(trender *r, const tv *a, int64_t k, tv *out)
{
	size_t n = tv_seq_len(a);
	int e;

	if (k < 0)
		k = 0;
	if (n && (uint64_t)k > (UINT32_MAX / n))
		return tr_fail(r, -E2BIG, "list too long");
	if ((size_t)k * n * sizeof(tv) > r->lim.max_memory)
		return tr_fail(r, -E2BIG, "max_memory exceeded (%zu bytes)",
			       r->lim.max_memory);
	if ((e = tv_newlist(r, (uint32_t)(n * (size_t)k), a->k == TV_TUPLE,
			    out)))
		return e;
	for (int64_t i = 0; i < k; i++) {
		if ((e = tr_step(r)))
			return e;
		for (size_t j = 0; j < n; j++)
			out->u.items[(size_t)i * n + j] = tv_seq_at(a, j);
	}
	return 0;
}

/* Python's float // and % */
static void float_divmod(double vx, double wx, double *floordiv, double *mod)
{
	double div, m = fmod(vx, wx);

	div = (vx - m) / wx;
	if (m) {
		if ((wx < 0) != (m < 0)) {
			m += wx;
			div -= 1.0;
		}
	} else {
		m = copysign(0.0, wx);
	}
	if (div) {
		double f = floor(div);

		if (div - f > 0.5)
			f += 1.0;
		*floordiv = f;
	} else {
		*floordiv = copysign(0.0, vx / wx);
	}
	*mod = m;
}

static int int_pow(trender *r, int64_t base, int64_t exp, tv *out)
{
	int64_t result = 1;

	while (exp > 0) {
		if (exp & 1 && __builtin_mul_overflow(result, base, &result))
			return overflow(r);
		exp >>= 1;
		if (exp && __builtin_mul_overflow(base, base, &base))
			return overflow(r);
	}
	*out = tv_int(result);
	return 0;
}

static int float_pow(trender *r, double x, double y, tv *out)
{
	double z;

	if (x == 0 && y < 0)
		return tr_fail(r, -EINVAL,
			       "ZeroDivisionError: 0.0 cannot be "
			       "raised to a negative power");
	if (x < 0 && isfinite(x) && isfinite(y) && y != floor(y))
		return te_unsupported(r, "a negative number raised to a "
					 "fractional power (a complex number)");
	z = pow(x, y);
	if (isinf(z) && isfinite(x) && isfinite(y))
		return tr_fail(r, -EINVAL,
			       "OverflowError: (34, 'Numerical "
			       "result out of range')");
	*out = tv_float(z);
	return 0;
}

int te_binop(trender *r, int op, const tv *a, const tv *b, tv *out);

int te_binop(trender *r, int op, const tv *a, const tv *b, tv *out)
{
	static const char *const sym[] = {"+", "-", "*", "/", "//", "%", "**"};
	int64_t x, y, z;

	if (is_intish(a) && is_intish(b)) {
		x = a->u.i;
		y = b->u.i;
		switch (op) {
		case OP_ADD:
			if (__builtin_add_overflow(x, y, &z))
				return overflow(r);
			*out = tv_int(z);
			return 0;
		case OP_SUB:
			if (__builtin_sub_overflow(x, y, &z))
				return overflow(r);
			*out = tv_int(z);
			return 0;
		case OP_MUL:
			if (__builtin_mul_overflow(x, y, &z))
				return overflow(r);
			*out = tv_int(z);
			return 0;
		case OP_DIV:
			if (!y)
				return zero_div(r);
			if (x > (1LL << 53) || x < -(1LL << 53) ||
			    y > (1LL << 53) || y < -(1LL << 53))
				return te_unsupported(
				    r,
				    "true division of integers beyond 2**53");
			*out = tv_float((double)x / (double)y);
			return 0;
		case OP_FLOORDIV:
		case OP_MOD:
			if (!y)
				return tr_fail(r, -EINVAL,
					       "ZeroDivisionError: integer "
					       "division or modulo by zero");
			if (x == INT64_MIN && y == -1) {
				if (op == OP_MOD) {
					*out = tv_int(0);
					return 0;
				}
				return overflow(r);
			}
			z = x / y;
			if ((x % y) && ((x < 0) != (y < 0)))
				z--;
			*out = tv_int(op == OP_FLOORDIV ? z : x - z * y);
			return 0;
		default:
			if (y < 0) {
				if (!x)
					return tr_fail(
					    r, -EINVAL,
					    "ZeroDivisionError: 0.0 cannot be "
					    "raised to a negative power");
				return float_pow(r, (double)x, (double)y, out);
			}
			return int_pow(r, x, y, out);
		}
	}
	if (is_num(a) && is_num(b)) {
		double dx = as_double(a), dy = as_double(b), q, m;

		switch (op) {
		case OP_ADD:
			*out = tv_float(dx + dy);
			return 0;
		case OP_SUB:
			*out = tv_float(dx - dy);
			return 0;
		case OP_MUL:
			*out = tv_float(dx * dy);
			return 0;
		case OP_DIV:
			if (dy == 0)
				return tr_fail(
				    r, -EINVAL,
				    "ZeroDivisionError: float division "
				    "by zero");
			*out = tv_float(dx / dy);
			return 0;
		case OP_FLOORDIV:
		case OP_MOD:
			if (dy == 0)
				return tr_fail(
				    r, -EINVAL,
				    "ZeroDivisionError: float modulo");
			float_divmod(dx, dy, &q, &m);
			*out = tv_float(op == OP_FLOORDIV ? q : m);
			return 0;
		default:
			return float_pow(r, dx, dy, out);
		}
	}
	if (op == OP_ADD) {
		if (a->k == TV_STR && b->k == TV_STR)
			return ps_concat(r, a, b, out);
		if ((a->k == TV_LIST || a->k == TV_JARR) &&
		    (b->k == TV_LIST || b->k == TV_JARR))
			return concat_seq(r, a, b, out);
		if (a->k == TV_TUPLE && b->k == TV_TUPLE)
			return concat_seq(r, a, b, out);
	}
	if (op == OP_MUL) {
		const tv *seq = is_intish(b) ? a : b,
			 *cnt = is_intish(b) ? b : a;

		if (is_intish(cnt) && seq->k == TV_STR)
			return ps_repeat(r, seq, cnt->u.i, out);
		if (is_intish(cnt) && tv_is_seq(seq)) {
			tv s = *seq;

			if (s.k == TV_JARR) {
				if (repeat_seq(r, &s, cnt->u.i, out))
					return -EINVAL;
				out->k = TV_LIST;
				return 0;
			}
			return repeat_seq(r, &s, cnt->u.i, out);
		}
	}
	if (op == OP_MOD && a->k == TV_STR) {
		if (a->f & TVF_MARKUP)
			return te_unsupported(r,
					      "% formatting of a safe (Markup) "
					      "string");
		return py_percent(r, a, b, out);
	}
	return type_error(r, sym[op], a, b);
}

/* ---- calls --------------------------------------------------------- */

#define TE_INLINE_ARGS 8

typedef struct targs {
	tv inl[TE_INLINE_ARGS];
	tv *v;
	int n;
	tv kwinl[TE_INLINE_ARGS];
	tv *kwv;
	int nkw;
} targs;

static int eval_args(trender *r, const tnode *n, tscope *s, targs *a)
{
	int e;

	a->n = n->nkids;
	a->v = a->inl;
	if (a->n > TE_INLINE_ARGS &&
	    !(a->v = tr_alloc(r, (size_t)a->n * sizeof(tv))))
		return -E2BIG;
	for (int i = 0; i < a->n; i++)
		if ((e = te_eval(r, n->kids[i], s, &a->v[i])))
			return e;
	a->nkw = n->nkw;
	a->kwv = a->kwinl;
	if (a->nkw > TE_INLINE_ARGS &&
	    !(a->kwv = tr_alloc(r, (size_t)a->nkw * sizeof(tv))))
		return -E2BIG;
	for (int i = 0; i < a->nkw; i++)
		if ((e = te_eval(r, n->kw[i].val, s, &a->kwv[i])))
			return e;
	return 0;
}

int te_call_value(trender *r, const tv *fn, tv *args, int nargs, const tkw *kw,
		  tv *kwv, int nkw, tv *out)
{
	switch (fn->k) {
	case TV_MACRO:
		return te_call_macro(r, fn->u.macro, args, nargs, kw, kwv, nkw,
				     NULL, out);
	case TV_FUNC:
		return tg_call(r, fn->x, args, nargs, kw, kwv, nkw, out);
	case TV_METHOD:
		return tm_call(r, fn->u.bound, fn->x, args, nargs, kw, kwv, nkw,
			       out);
	case TV_UNDEF:
		return tv_undef_fail(r, fn);
	case TV_LOOP:
		return te_unsupported(r, "calling loop (recursive loops)");
	default:
		return tr_fail(r, -EINVAL,
			       "TypeError: '%s' object is not "
			       "callable",
			       tv_typename(fn));
	}
}

__attribute__((noinline)) static int eval_call(trender *r, const tnode *n,
					       tscope *s, tv *out)
{
	const tnode *callee = n->a;
	targs a;
	tv fn;
	int e;

	if (callee->kind == N_GETATTR) {
		tv obj;

		if ((e = te_eval(r, callee->a, s, &obj)))
			return e;
		r->line = n->line;
		if (obj.k != TV_UNDEF && callee->id >= 0 &&
		    !is_dunder(callee->str, callee->slen) &&
		    tm_has(&obj, callee->id) == 1) {
			if ((e = eval_args(r, n, s, &a)))
				return e;
			r->line = n->line;
			return tm_call(r, &obj, callee->id, a.v, a.n, n->kw,
				       a.kwv, a.nkw, out);
		}
		if ((e = te_getattr(r, &obj, callee->str, callee->slen,
				    callee->id, &fn)))
			return e;
	} else if ((e = te_eval(r, callee, s, &fn))) {
		return e;
	}
	if ((e = eval_args(r, n, s, &a)))
		return e;
	r->line = n->line;
	return te_call_value(r, &fn, a.v, a.n, n->kw, a.kwv, a.nkw, out);
}

/* what jinja2's as_const cannot evaluate (fold.c) */
static int impossible(trender *r, const tnode *n)
{
	static const char *const ctxf[] = {
	    "map", "select", "reject", "selectattr", "rejectattr", "random"};

	switch (n->kind) {
	case N_NAME:
	case N_CALL:
	case N_NSREF:
		return 1;
	case N_FILTER:
		if (!n->a || (n->flags & (NF_SOFT | NF_UNSUPPORTED)))
			return 1;
		for (size_t i = 0; i < sizeof(ctxf) / sizeof(ctxf[0]); i++)
			if (n->slen == strlen(ctxf[i]) &&
			    !memcmp(n->str, ctxf[i], n->slen))
				return 1;
		return 0;
	case N_TEST:
		return (n->flags & (NF_SOFT | NF_UNSUPPORTED)) != 0;
	default:
		(void)r;
		return 0;
	}
}

/* a filter applied to in: n's own input is in (a filter block's chain) */
int te_filter(trender *r, const tnode *n, tscope *s, const tv *in, tv *out);

int te_filter(trender *r, const tnode *n, tscope *s, const tv *in, tv *out)
{
	targs a;
	tv input;
	int e;

	if (n->kind != N_FILTER)
		return te_eval(r, n, s, out);
	if (r->folding && impossible(r, n))
		return -EAGAIN;
	if (n->a) {
		if ((e = te_filter(r, n->a, s, in, &input)))
			return e;
	} else if (in) {
		input = *in;
	} else {
		/* a filter block's chain has no constant input */
		if (r->folding)
			return -EAGAIN;
		input = tv_undef();
	}
	if ((e = eval_args(r, n, s, &a)))
		return e;
	r->line = n->line;
	if (n->flags & NF_SOFT)
		return tr_fail(r, -EINVAL, "No filter named '%.*s'.",
			       (int)(n->slen > 60 ? 60 : n->slen), n->str);
	if (n->flags & NF_UNSUPPORTED)
		return tr_fail(r, -EINVAL, "the filter '%s' is not supported",
			       tf_name(n->id));
	return tf_apply(r, n->id, &input, a.v, a.n, n->kw, a.kwv, a.nkw, out);
}

__attribute__((noinline)) static int eval_test(trender *r, const tnode *n,
					       tscope *s, tv *out)
{
	targs a;
	tv input;
	int e, ok;

	if ((e = te_eval(r, n->a, s, &input)) || (e = eval_args(r, n, s, &a)))
		return e;
	r->line = n->line;
	if (n->flags & NF_SOFT)
		return tr_fail(r, -EINVAL, "No test named '%.*s'.",
			       (int)(n->slen > 60 ? 60 : n->slen), n->str);
	if (n->flags & NF_UNSUPPORTED)
		return tr_fail(r, -EINVAL, "the test '%s' is not supported",
			       tt_name(n->id));
	if ((e = tt_apply(r, n->id, &input, a.v, a.n, n->kw, a.kwv, a.nkw,
			  &ok)))
		return e;
	*out = tv_bool(ok);
	return 0;
}

/* ---- membership ---------------------------------------------------- */

int te_contains(trender *r, const tv *hay, const tv *needle, int *out);

int te_contains(trender *r, const tv *hay, const tv *needle, int *out)
{
	tcur c;
	tv item;
	int e, got;

	*out = 0;
	switch (hay->k) {
	case TV_STR:
		if (needle->k != TV_STR) {
			if (needle->k == TV_UNDEF)
				return tv_undef_fail(r, needle);
			return tr_fail(
			    r, -EINVAL,
			    "TypeError: 'in <string>' requires string "
			    "as left operand, not %s",
			    tv_typename(needle));
		}
		*out =
		    ps_find(hay->u.s, hay->n, needle->u.s, needle->n, 0) >= 0;
		return 0;
	case TV_DICT:
	case TV_JOBJ:
		got = tv_map_get(r, hay, needle, &item);
		if (got == 2)
			return tr_fail(r, -EINVAL,
				       "TypeError: unhashable type: "
				       "'%s'",
				       tv_typename(needle));
		if (got < 0)
			return got;
		*out = got;
		return 0;
	case TV_VIEW:
		if (hay->x == TVIEW_KEYS)
			return te_contains(r, hay->u.view, needle, out);
		break;
	case TV_RANGE:
		if (is_intish(needle)) {
			const struct trange *g = hay->u.range;
			int64_t v = needle->u.i;

			if (g->step > 0)
				*out = v >= g->start && v < g->stop &&
				       (v - g->start) % g->step == 0;
			else
				*out = v <= g->start && v > g->stop &&
				       (g->start - v) % (-g->step) == 0;
			return 0;
		}
		break;
	case TV_UNDEF:
		return 0;
	case TV_LIST:
	case TV_TUPLE:
	case TV_JARR:
	case TV_ITER:
		break;
	default:
		return tr_fail(
		    r, -EINVAL,
		    "TypeError: argument of type '%s' is not iterable",
		    tv_typename(hay));
	}
	if ((e = tc_open(r, hay, &c)))
		return e;
	while ((got = tc_next(r, &c, &item)) == 1) {
		int eq;

		if ((e = tr_step(r)) || (e = tv_eq(r, &item, needle, &eq)))
			return e;
		if (eq) {
			*out = 1;
			return 0;
		}
	}
	return got;
}

/* ---- expressions --------------------------------------------------- */

__attribute__((noinline)) static int eval_compare(trender *r, const tnode *n,
						  tscope *s, tv *out)
{
	tv left, right;
	int e, ok = 1;

	if ((e = te_eval(r, n->a, s, &left)))
		return e;
	for (int i = 0; i < n->nkids && ok; i++) {
		const tnode *o = n->kids[i];

		if ((e = te_eval(r, o->a, s, &right)))
			return e;
		r->line = o->line;
		if (o->op == CMP_IN || o->op == CMP_NOTIN) {
			e = te_contains(r, &right, &left, &ok);
			if (o->op == CMP_NOTIN)
				ok = !ok;
		} else {
			e = tv_cmp_op(r, o->op, &left, &right, &ok);
		}
		if (e)
			return e;
		left = right;
	}
	*out = tv_bool(ok);
	return 0;
}

__attribute__((noinline)) static int eval_concat(trender *r, const tnode *n,
						 tscope *s, tv *out)
{
	tbuf b = {0};
	tv v;
	int e = 0;

	for (int i = 0; i < n->nkids && !e; i++) {
		if (!(e = te_eval(r, n->kids[i], s, &v)))
			e = py_str(r, &b, &v);
	}
	if (!e)
		e = tb_take(r, &b, out);
	tb_free(r, &b);
	return e;
}

__attribute__((noinline)) static int eval_unary(trender *r, const tnode *n,
						tscope *s, tv *out)
{
	tv v;
	int e;

	if ((e = te_eval(r, n->a, s, &v)))
		return e;
	r->line = n->line;
	if (n->kind == N_NOT) {
		int t;

		if ((e = tv_truthy(r, &v, &t)))
			return e;
		*out = tv_bool(!t);
		return 0;
	}
	if (is_intish(&v)) {
		if (n->kind == N_NEG && v.u.i == INT64_MIN)
			return overflow(r);
		*out = tv_int(n->kind == N_NEG ? -v.u.i : v.u.i);
		return 0;
	}
	if (v.k == TV_FLOAT) {
		*out = tv_float(n->kind == N_NEG ? -v.u.d : v.u.d);
		return 0;
	}
	if (v.k == TV_UNDEF)
		return tv_undef_fail(r, &v);
	return tr_fail(r, -EINVAL,
		       "TypeError: bad operand type for unary %c: "
		       "'%s'",
		       n->kind == N_NEG ? '-' : '+', tv_typename(&v));
}

__attribute__((noinline)) static int eval_dict(trender *r, const tnode *n,
					       tscope *s, tv *out)
{
	tv k, v;
	int e;

	if ((e = tv_newdict(r, (uint32_t)(n->nkids / 2), out)))
		return e;
	for (int i = 0; i + 1 < n->nkids; i += 2) {
		if ((e = te_eval(r, n->kids[i], s, &k)) ||
		    (e = te_eval(r, n->kids[i + 1], s, &v)))
			return e;
		if (!tv_hashable(&k))
			return tr_fail(r, -EINVAL,
				       "TypeError: unhashable type: "
				       "'%s'",
				       tv_typename(&k));
		if ((e = td_set(r, out->u.dict, &k, &v)))
			return e;
	}
	return 0;
}

static int eval_node(trender *r, const tnode *n, tscope *s, tv *out)
{
	tv a, b;
	int e, t;

	if (r->folding && impossible(r, n))
		return -EAGAIN;
	switch (n->kind) {
	case N_CONST:
		if (n->flags & NF_QUIRK)
			return tr_fail(r, -EINVAL,
				       "NameError: a constant inf or "
				       "nan in an expression (jinja2 "
				       "writes it as the name inf or "
				       "nan)");
		*out = n->cval;
		return 0;
	case N_NAME:
		return ts_lookup(r, s, n->id, out);
	case N_LIST:
	case N_TUPLE:
		if ((e = tv_newlist(r, (uint32_t)n->nkids, n->kind == N_TUPLE,
				    out)))
			return e;
		for (int i = 0; i < n->nkids; i++)
			if ((e = te_eval(r, n->kids[i], s, &out->u.items[i])))
				return e;
		return 0;
	case N_DICT:
		return eval_dict(r, n, s, out);
	case N_GETATTR:
		if ((e = te_eval(r, n->a, s, &a)))
			return e;
		r->line = n->line;
		return te_getattr(r, &a, n->str, n->slen, n->id, out);
	case N_GETITEM:
		if ((e = te_eval(r, n->a, s, &a)) ||
		    (e = te_eval(r, n->b, s, &b)))
			return e;
		r->line = n->line;
		return te_getitem(r, &a, &b, out);
	case N_SLICE:
		return te_slice(r, n, s, out);
	case N_CALL:
		return eval_call(r, n, s, out);
	case N_FILTER:
		return te_filter(r, n, s, NULL, out);
	case N_TEST:
		return eval_test(r, n, s, out);
	case N_BINOP:
		if ((e = te_eval(r, n->a, s, &a)) ||
		    (e = te_eval(r, n->b, s, &b)))
			return e;
		r->line = n->line;
		if (n->flags & NF_QUIRK) {
			/* jinja2's code reads "-3 ** x": -(3 ** x) */
			tv neg;

			if ((e = te_binop(r, OP_SUB, &(tv){.k = TV_INT}, &a,
					  &neg)) ||
			    (e = te_binop(r, OP_POW, &neg, &b, &a)))
				return e;
			return te_binop(r, OP_SUB, &(tv){.k = TV_INT}, &a, out);
		}
		return te_binop(r, n->op, &a, &b, out);
	case N_CONCAT:
		return eval_concat(r, n, s, out);
	case N_COMPARE:
		return eval_compare(r, n, s, out);
	case N_AND:
	case N_OR:
		if ((e = te_eval(r, n->a, s, &a)) || (e = tv_truthy(r, &a, &t)))
			return e;
		if ((n->kind == N_AND) != (t != 0)) {
			*out = a;
			return 0;
		}
		return te_eval(r, n->b, s, out);
	case N_NOT:
	case N_NEG:
	case N_POS:
		return eval_unary(r, n, s, out);
	case N_CONDEXPR:
		if ((e = te_eval(r, n->a, s, &a)) || (e = tv_truthy(r, &a, &t)))
			return e;
		if (t)
			return te_eval(r, n->b, s, out);
		if (n->c)
			return te_eval(r, n->c, s, out);
		if (r->folding)
			return -EAGAIN;
		*out =
		    tv_undef_msg(r, "the inline if-expression evaluated to "
				    "false and no else section was defined.");
		return r->errset ? -E2BIG : 0;
	default:
		return tr_fail(r, -EINVAL, "internal error: node %d", n->kind);
	}
}

int te_eval(trender *r, const tnode *n, tscope *s, tv *out)
{
	int e;

	if (++r->steps > r->lim.max_steps)
		return tr_step(r);
	if (++r->rdepth > TR_LIMIT_RDEPTH) {
		r->rdepth--;
		return tr_enter(r);
	}
	r->line = n->line;
	e = eval_node(r, n, s, out);
	r->rdepth--;
	return e;
}
