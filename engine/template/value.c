/* value.c: values as Python sees them: JSON wrapped in place, undefined
 * values and their messages, truthiness, len(), ==, the ordering of <,
 * hashing and the dicts templates build, and the render's output
 * buffers. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tmpl.h"

/* ---- buffers ------------------------------------------------------- */

static int tb_reserve(trender *r, tbuf *b, size_t more)
{
	size_t cap;
	char *p;

	if (more > r->lim.max_output || b->n > r->lim.max_output - more)
		return tr_fail(r, -E2BIG, "max_output exceeded (%zu bytes)",
			       r->lim.max_output);
	if (b->n + more + 1 <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 256;
	while (cap < b->n + more + 1)
		cap *= 2;
	if (ta_charge(&r->a, (ptrdiff_t)(cap - b->cap)))
		return tr_fail(r, -E2BIG, "max_memory exceeded (%zu bytes)",
			       r->lim.max_memory);
	p = realloc(b->p, cap);
	if (!p) {
		ta_charge(&r->a, -(ptrdiff_t)(cap - b->cap));
		return tr_oom(r);
	}
	b->p = p;
	b->cap = cap;
	return 0;
}

int tb_put(trender *r, tbuf *b, const char *s, size_t n)
{
	int e;

	/* the limit whatever the capacity (which may have grown past it) */
	if ((b->cap - b->n <= n || n > r->lim.max_output - b->n) &&
	    (e = tb_reserve(r, b, n)))
		return e;
	if (n)
		memcpy(b->p + b->n, s, n);
	b->n += n;
	return 0;
}

int tb_putc(trender *r, tbuf *b, char c)
{
	return tb_put(r, b, &c, 1);
}

int tb_printf(trender *r, tbuf *b, const char *fmt, ...)
{
	char tmp[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n < 0)
		return tr_fail(r, -EINVAL, "formatting failed");
	if ((size_t)n < sizeof(tmp))
		return tb_put(r, b, tmp, (size_t)n);
	{
		int e = tb_reserve(r, b, (size_t)n);

		if (e)
			return e;
		va_start(ap, fmt);
		vsnprintf(b->p + b->n, (size_t)n + 1, fmt, ap);
		va_end(ap);
		b->n += (size_t)n;
	}
	return 0;
}

int tb_take(trender *r, tbuf *b, tv *out)
{
	char *s = NULL;
	int e;

	if ((e = tv_newstr(r, b->n, out, &s)))
		return e;
	if (b->n)
		memcpy(s, b->p, b->n);
	b->n = 0;
	return 0;
}

void tb_free(trender *r, tbuf *b)
{
	free(b->p);
	ta_charge(&r->a, -(ptrdiff_t)b->cap);
	b->p = NULL;
	b->n = b->cap = 0;
}

/* ---- making values ------------------------------------------------- */

tv tv_json(const json_t *j)
{
	tv v = {0};

	switch (json_typeof(j)) {
	case JSON_STRING:
		v.k = TV_STR;
		v.u.s = json_string_value(j);
		v.n = (uint32_t)json_string_length(j);
		break;
	case JSON_INTEGER:
		v.k = TV_INT;
		v.u.i = (int64_t)json_integer_value(j);
		break;
	case JSON_REAL:
		v.k = TV_FLOAT;
		v.u.d = json_real_value(j);
		break;
	case JSON_TRUE:
		v.k = TV_BOOL;
		v.u.i = 1;
		break;
	case JSON_FALSE:
		v.k = TV_BOOL;
		break;
	case JSON_ARRAY:
		v.k = TV_JARR;
		v.u.j = j;
		break;
	case JSON_OBJECT:
		v.k = TV_JOBJ;
		v.u.j = j;
		break;
	default:
		v.k = TV_NONE;
		break;
	}
	return v;
}

int tv_newstr(trender *r, size_t n, tv *out, char **buf)
{
	char *s;

	if (n >= UINT32_MAX)
		return tr_fail(r, -E2BIG, "string too long");
	s = tr_alloc(r, n + 1);
	if (!s)
		return -E2BIG;
	s[n] = 0;
	*out = tv_str(s, n);
	*buf = s;
	return 0;
}

int tv_newlist(trender *r, uint32_t n, int tuple, tv *out)
{
	tv *items = NULL;

	if (n) {
		items = tr_alloc(r, (size_t)n * sizeof(tv));
		if (!items)
			return -E2BIG;
	}
	memset(out, 0, sizeof(*out));
	out->k = tuple ? TV_TUPLE : TV_LIST;
	out->n = n;
	out->u.items = items;
	return 0;
}

static int tv_mkundef(trender *r, tv *out, tundef **u)
{
	*u = tr_alloc(r, sizeof(**u));
	if (!*u)
		return -E2BIG;
	memset(*u, 0, sizeof(**u));
	(*u)->of_kind = -1;
	*out = tv_undef();
	out->u.undef = *u;
	return 0;
}

tv tv_undef_msg(trender *r, const char *msg)
{
	tundef *u;
	tv v;

	if (tv_mkundef(r, &v, &u))
		return tv_undef();
	u->msg = msg;
	return v;
}

tv tv_undef_name(trender *r, const char *name, size_t n)
{
	tundef *u;
	tv v;

	if (tv_mkundef(r, &v, &u))
		return tv_undef();
	u->name = name;
	u->n = (uint32_t)n;
	return v;
}

tv tv_undef_attr(trender *r, const tv *obj, const char *name, size_t n,
		 int elem)
{
	tundef *u;
	tv v;

	if (tv_mkundef(r, &v, &u))
		return tv_undef();
	u->name = name;
	u->n = (uint32_t)n;
	u->of_kind = (int8_t)obj->k;
	u->elem = (uint8_t)elem;
	return v;
}

tv tv_unsafe(trender *r, const tv *obj, const char *name, size_t n)
{
	tv v = tv_undef_attr(r, obj, name, n, 0);

	if (v.u.undef)
		v.u.undef->security = 1;
	return v;
}

static const char *kind_name(int k)
{
	static const char *const names[TV_KINDS] = {
	    "Undefined",
	    "NoneType",
	    "bool",
	    "int",
	    "float",
	    "str",
	    "list",
	    "tuple",
	    "dict",
	    "list",
	    "dict",
	    "Namespace",
	    "range",
	    "generator",
	    "dict_view",
	    "LoopContext",
	    "Macro",
	    "function",
	    "builtin_function_or_method"};
	return k >= 0 && k < TV_KINDS ? names[k] : "object";
}

const char *tv_typename(const tv *v)
{
	if (v->k == TV_VIEW)
		return v->x == TVIEW_KEYS     ? "dict_keys"
		       : v->x == TVIEW_VALUES ? "dict_values"
					      : "dict_items";
	if (v->k == TV_ITER && v->u.it && v->u.it->kind == TI_REVERSED)
		return "list_reverseiterator";
	return kind_name(v->k);
}

int tv_undef_fail(trender *r, const tv *v)
{
	const tundef *u = v->u.undef;
	const char *kind;

	if (!u && v->n) {
		const tname *nm = &r->t->names[v->n - 1];

		return tr_fail(r, -EINVAL,
			       "UndefinedError: '%.*s' is undefined",
			       (int)(nm->n > 100 ? 100 : nm->n), nm->s);
	}
	if (!u)
		return tr_fail(r, -EINVAL,
			       "UndefinedError: value is undefined");
	if (u->security)
		return tr_fail(r, -EINVAL,
			       "SecurityError: access to attribute '%.*s' of "
			       "'%s' object is unsafe.",
			       (int)(u->n > 100 ? 100 : u->n), u->name,
			       kind_name(u->of_kind));
	if (u->msg)
		return tr_fail(r, -EINVAL, "UndefinedError: %s", u->msg);
	if (u->of_kind < 0)
		return tr_fail(r, -EINVAL,
			       "UndefinedError: '%.*s' is undefined",
			       (int)(u->n > 100 ? 100 : u->n), u->name);
	kind = u->of_kind == TV_NONE ? "None" : kind_name(u->of_kind);
	if (u->elem)
		return tr_fail(r, -EINVAL,
			       "UndefinedError: %s%s has no element %.*s", kind,
			       u->of_kind == TV_NONE ? "" : " object",
			       (int)(u->n > 100 ? 100 : u->n), u->name);
	return tr_fail(r, -EINVAL,
		       "UndefinedError: '%s%s' has no attribute '%.*s'", kind,
		       u->of_kind == TV_NONE ? "" : " object",
		       (int)(u->n > 100 ? 100 : u->n), u->name);
}

/* ---- sequences and mappings ---------------------------------------- */

int tv_is_mapping(const tv *v)
{
	return v->k == TV_DICT || v->k == TV_JOBJ;
}

int tv_is_seq(const tv *v)
{
	return v->k == TV_LIST || v->k == TV_TUPLE || v->k == TV_JARR;
}

size_t tv_seq_len(const tv *v)
{
	return v->k == TV_JARR ? json_array_size(v->u.j) : v->n;
}

tv tv_seq_at(const tv *v, size_t i)
{
	if (v->k == TV_JARR)
		return tv_json(json_array_get(v->u.j, i));
	return v->u.items[i];
}

size_t tv_map_len(const tv *m)
{
	return m->k == TV_JOBJ ? json_object_size(m->u.j) : m->u.dict->n;
}

int tv_map_gets(const tv *m, const char *k, size_t n, tv *out)
{
	if (m->k == TV_JOBJ) {
		const json_t *j = json_object_getn(m->u.j, k, n);

		if (!j)
			return 0;
		*out = tv_json(j);
		return 1;
	}
	if (m->u.dict->index) {
		tv key = tv_str(k, n);

		return td_get(NULL, m->u.dict, &key, out);
	}
	for (uint32_t i = 0; i < m->u.dict->n; i++) {
		const tv *key = &m->u.dict->keys[i];

		if (key->k == TV_STR && key->n == n &&
		    !memcmp(key->u.s, k, n)) {
			*out = m->u.dict->vals[i];
			return 1;
		}
	}
	return 0;
}

int tv_map_get(trender *r, const tv *m, const tv *key, tv *out)
{
	if (!tv_hashable(key))
		return 2;
	if (m->k == TV_JOBJ) {
		if (key->k != TV_STR)
			return 0;
		return tv_map_gets(m, key->u.s, key->n, out);
	}
	return td_get(r, m->u.dict, key, out);
}

/* ---- truthiness and len -------------------------------------------- */

int tl_length(trender *r, tloop *l, int64_t *out);

int tv_len(trender *r, const tv *v, int64_t *out)
{
	*out = -1;
	switch (v->k) {
	case TV_UNDEF:
		*out = 0;
		return 0;
	case TV_STR:
		*out = (int64_t)tu_count(v->u.s, v->n);
		return 0;
	case TV_LIST:
	case TV_TUPLE:
		*out = v->n;
		return 0;
	case TV_JARR:
		*out = (int64_t)json_array_size(v->u.j);
		return 0;
	case TV_DICT:
	case TV_JOBJ:
		*out = (int64_t)tv_map_len(v);
		return 0;
	case TV_VIEW:
		*out = (int64_t)tv_map_len(v->u.view);
		return 0;
	case TV_RANGE:
		*out = v->u.range->len;
		return 0;
	case TV_LOOP:
		return tl_length(r, v->u.loop, out);
	default:
		return 0;
	}
}

int tv_truthy(trender *r, const tv *v, int *out)
{
	int64_t n;
	int e;

	switch (v->k) {
	case TV_UNDEF:
	case TV_NONE:
		*out = 0;
		return 0;
	case TV_BOOL:
	case TV_INT:
		*out = v->u.i != 0;
		return 0;
	case TV_FLOAT:
		*out = v->u.d != 0.0;
		return 0;
	case TV_STR:
		*out = v->n != 0;
		return 0;
	case TV_LIST:
	case TV_TUPLE:
		*out = v->n != 0;
		return 0;
	case TV_NS:
	case TV_ITER:
	case TV_MACRO:
	case TV_FUNC:
	case TV_METHOD:
		*out = 1;
		return 0;
	default:
		if ((e = tv_len(r, v, &n)))
			return e;
		*out = n != 0;
		return 0;
	}
}

/* ---- numbers ------------------------------------------------------- */

/* i against d exactly: -1, 0, 1, or 2 when d is NaN */
static int cmp_int_float(int64_t i, double d)
{
	double fl;
	int64_t di;

	if (isnan(d))
		return 2;
	if (d >= 9223372036854775808.0)
		return -1;
	if (d < -9223372036854775808.0)
		return 1;
	fl = floor(d);
	di = (int64_t)fl;
	if (i < di)
		return -1;
	if (i > di)
		return 1;
	return fl == d ? 0 : -1;
}

static int is_num(const tv *v)
{
	return v->k == TV_INT || v->k == TV_BOOL || v->k == TV_FLOAT;
}

/* numbers a against b: -1, 0, 1 or 2 (unordered) */
static int num_cmp(const tv *a, const tv *b)
{
	int fa = a->k == TV_FLOAT, fb = b->k == TV_FLOAT;

	if (!fa && !fb)
		return a->u.i < b->u.i ? -1 : a->u.i > b->u.i;
	if (fa && fb) {
		if (isnan(a->u.d) || isnan(b->u.d))
			return 2;
		return a->u.d < b->u.d ? -1 : a->u.d > b->u.d;
	}
	if (fa) {
		int c = cmp_int_float(b->u.i, a->u.d);

		return c == 2 ? 2 : -c;
	}
	return cmp_int_float(a->u.i, b->u.d);
}

/* ---- equality ------------------------------------------------------ */

static int seq_family(const tv *v)
{
	if (v->k == TV_LIST || v->k == TV_JARR)
		return 1;
	if (v->k == TV_TUPLE)
		return 2;
	return 0;
}

int tv_eq(trender *r, const tv *a, const tv *b, int *out)
{
	int e = 0;

	*out = 0;
	if (is_num(a) && is_num(b)) {
		*out = num_cmp(a, b) == 0;
		return 0;
	}
	if (a->k == TV_STR && b->k == TV_STR) {
		*out = a->n == b->n && !memcmp(a->u.s, b->u.s, a->n);
		return 0;
	}
	if (a->k == TV_UNDEF || b->k == TV_UNDEF || a->k == TV_NONE ||
	    b->k == TV_NONE) {
		*out = a->k == b->k;
		return 0;
	}
	if (seq_family(a) && seq_family(a) == seq_family(b)) {
		size_t n = tv_seq_len(a);

		if (n != tv_seq_len(b))
			return 0;
		if (a->k == b->k && a->k != TV_JARR &&
		    a->u.items == b->u.items) {
			*out = 1;
			return 0;
		}
		if ((e = tr_enter(r)))
			return e;
		*out = 1;
		for (size_t i = 0; i < n && *out; i++) {
			tv x = tv_seq_at(a, i), y = tv_seq_at(b, i);

			if ((e = tv_eq(r, &x, &y, out)))
				break;
		}
		tr_leave(r);
		return e;
	}
	if (tv_is_mapping(a) && tv_is_mapping(b)) {
		size_t n = tv_map_len(a);
		tcur c;
		tv k, va, vb;
		int got = 0;

		if (n != tv_map_len(b))
			return 0;
		if ((e = tr_enter(r)))
			return e;
		*out = 1;
		if ((e = tc_open(r, a, &c)))
			goto done;
		while (*out && (got = tc_next(r, &c, &k)) == 1) {
			if (tv_map_get(r, a, &k, &va) != 1 ||
			    tv_map_get(r, b, &k, &vb) != 1) {
				*out = 0;
				break;
			}
			if ((e = tv_eq(r, &va, &vb, out)))
				goto done;
		}
		if (got < 0)
			e = got;
	done:
		tr_leave(r);
		return e;
	}
	if (a->k != b->k)
		return 0;
	switch (a->k) {
	case TV_RANGE: {
		const struct trange *x = a->u.range, *y = b->u.range;

		*out = x->len == y->len &&
		       (!x->len || (x->start == y->start &&
				    (x->len == 1 || x->step == y->step)));
		return 0;
	}
	case TV_VIEW:
		return tr_fail(r, -EINVAL,
			       "comparing dict views is not "
			       "supported");
	case TV_FUNC:
		*out = a->x == b->x;
		return 0;
	case TV_METHOD:
		return tr_fail(r, -EINVAL,
			       "comparing methods is not supported");
	default:
		*out = a->u.p == b->u.p;
		return 0;
	}
}

/* ---- ordering ------------------------------------------------------ */

static int cmp_result(int op, int c)
{
	if (c == 2)
		return 0;
	switch (op) {
	case CMP_LT:
		return c < 0;
	case CMP_LE:
		return c <= 0;
	case CMP_GT:
		return c > 0;
	default:
		return c >= 0;
	}
}

static const char *op_sym(int op)
{
	static const char *const s[] = {
	    "==", "!=", "<", "<=", ">", ">=", "in", "not in"};
	return s[op];
}

int tv_cmp_op(trender *r, int op, const tv *a, const tv *b, int *out)
{
	int e = 0;

	if (op == CMP_EQ || op == CMP_NE) {
		if ((e = tv_eq(r, a, b, out)))
			return e;
		if (op == CMP_NE)
			*out = !*out;
		return 0;
	}
	if (a->k == TV_UNDEF)
		return tv_undef_fail(r, a);
	if (b->k == TV_UNDEF)
		return tv_undef_fail(r, b);
	if (is_num(a) && is_num(b)) {
		*out = cmp_result(op, num_cmp(a, b));
		return 0;
	}
	if (a->k == TV_STR && b->k == TV_STR) {
		size_t n = a->n < b->n ? a->n : b->n;
		int c = memcmp(a->u.s, b->u.s, n);

		if (!c)
			c = a->n < b->n ? -1 : a->n > b->n;
		*out = cmp_result(op, c < 0 ? -1 : c > 0);
		return 0;
	}
	if (seq_family(a) && seq_family(a) == seq_family(b)) {
		size_t na = tv_seq_len(a), nb = tv_seq_len(b), i;
		int eq = 1;

		if ((e = tr_enter(r)))
			return e;
		for (i = 0; i < na && i < nb; i++) {
			tv x = tv_seq_at(a, i), y = tv_seq_at(b, i);

			if ((e = tv_eq(r, &x, &y, &eq)))
				goto done;
			if (!eq) {
				e = tv_cmp_op(r, op, &x, &y, out);
				goto done;
			}
		}
		*out = cmp_result(op, na < nb ? -1 : na > nb);
	done:
		tr_leave(r);
		return e;
	}
	return tr_fail(r, -EINVAL,
		       "TypeError: '%s' not supported between instances of "
		       "'%s' and '%s'",
		       op_sym(op), tv_typename(a), tv_typename(b));
}

int tv_lt(trender *r, const tv *a, const tv *b, int *out)
{
	return tv_cmp_op(r, CMP_LT, a, b, out);
}

/* ---- hashing and dicts --------------------------------------------- */

static int hashable(const tv *v, int depth)
{
	switch (v->k) {
	case TV_LIST:
	case TV_JARR:
	case TV_DICT:
	case TV_JOBJ:
	case TV_VIEW:
		return 0;
	case TV_TUPLE:
		/* tuples nested deeper than this are refused as unhashable */
		if (depth > 64)
			return 0;
		for (uint32_t i = 0; i < v->n; i++)
			if (!hashable(&v->u.items[i], depth + 1))
				return 0;
		return 1;
	default:
		return 1;
	}
}

int tv_hashable(const tv *v)
{
	return hashable(v, 0);
}

static uint64_t mix(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return h;
}

/* Equal values (1 == 1.0 == True) hash alike. */
static uint64_t tv_hash(const tv *v)
{
	uint64_t h;

	switch (v->k) {
	case TV_BOOL:
	case TV_INT:
		return mix((uint64_t)v->u.i);
	case TV_FLOAT: {
		double d = v->u.d;

		if (d == floor(d) && d >= -9223372036854775808.0 &&
		    d < 9223372036854775808.0)
			return mix((uint64_t)(int64_t)d);
		memcpy(&h, &d, sizeof(h));
		return mix(h);
	}
	case TV_STR:
		h = 1469598103934665603ULL;
		for (uint32_t i = 0; i < v->n; i++)
			h = (h ^ (unsigned char)v->u.s[i]) * 1099511628211ULL;
		return h;
	case TV_TUPLE:
		h = 0x345678;
		for (uint32_t i = 0; i < v->n; i++)
			h = mix(h * 1000003 ^ tv_hash(&v->u.items[i]));
		return h;
	case TV_NONE:
		return 0x1234;
	case TV_UNDEF:
		return 0x4321;
	case TV_RANGE:
		return mix((uint64_t)v->u.range->len);
	case TV_FUNC:
		return mix(v->x);
	default:
		return mix((uint64_t)(uintptr_t)v->u.p);
	}
}

int td_init(trender *r, tdict *d, uint32_t cap)
{
	memset(d, 0, sizeof(*d));
	if (!cap)
		return 0;
	d->keys = tr_alloc(r, (size_t)cap * sizeof(tv));
	d->vals = tr_alloc(r, (size_t)cap * sizeof(tv));
	if (!d->keys || !d->vals)
		return -E2BIG;
	d->cap = cap;
	return 0;
}

int tv_newdict(trender *r, uint32_t cap, tv *out)
{
	tdict *d = tr_alloc(r, sizeof(*d));

	if (!d || td_init(r, d, cap))
		return -E2BIG;
	memset(out, 0, sizeof(*out));
	out->k = TV_DICT;
	out->u.dict = d;
	return 0;
}

#define TD_LINEAR 8

static int td_reindex(trender *r, tdict *d)
{
	uint32_t slots = 16;

	while (slots < d->cap * 2)
		slots *= 2;
	d->index = tr_alloc(r, (size_t)slots * sizeof(uint32_t));
	if (!d->index)
		return -E2BIG;
	memset(d->index, 0, (size_t)slots * sizeof(uint32_t));
	d->nindex = slots;
	for (uint32_t i = 0; i < d->n; i++) {
		uint32_t h = (uint32_t)tv_hash(&d->keys[i]) & (slots - 1);

		while (d->index[h])
			h = (h + 1) & (slots - 1);
		d->index[h] = i + 1;
	}
	return 0;
}

/* the index of key in d, or -1; < -1 on an error */
static int64_t td_find(trender *r, const tdict *d, const tv *key,
		       uint32_t *slot)
{
	int eq, e;

	if (d->index) {
		uint32_t h = (uint32_t)tv_hash(key) & (d->nindex - 1), i;

		while ((i = d->index[h])) {
			if ((e = tv_eq(r, &d->keys[i - 1], key, &eq)))
				return e - 1;
			if (eq)
				return i - 1;
			h = (h + 1) & (d->nindex - 1);
		}
		if (slot)
			*slot = h;
		return -1;
	}
	for (uint32_t i = 0; i < d->n; i++) {
		if (key->k == TV_STR && d->keys[i].k == TV_STR) {
			if (key->n == d->keys[i].n &&
			    !memcmp(key->u.s, d->keys[i].u.s, key->n))
				return i;
			continue;
		}
		if ((e = tv_eq(r, &d->keys[i], key, &eq)))
			return e - 1;
		if (eq)
			return i;
	}
	return -1;
}

int td_get(trender *r, const tdict *d, const tv *key, tv *out)
{
	int64_t i = td_find(r, d, key, NULL);

	if (i < -1)
		return (int)(i + 1);
	if (i < 0)
		return 0;
	*out = d->vals[i];
	return 1;
}

int td_set(trender *r, tdict *d, const tv *key, const tv *val)
{
	uint32_t slot = 0;
	int64_t i = td_find(r, d, key, &slot);

	if (i < -1)
		return (int)(i + 1);
	if (i >= 0) {
		d->vals[i] = *val;
		return 0;
	}
	if (d->n == d->cap) {
		uint32_t cap = d->cap ? d->cap * 2 : 4;
		tv *k = tr_alloc(r, (size_t)cap * sizeof(tv));
		tv *v = tr_alloc(r, (size_t)cap * sizeof(tv));

		if (!k || !v)
			return -E2BIG;
		if (d->n) {
			memcpy(k, d->keys, d->n * sizeof(tv));
			memcpy(v, d->vals, d->n * sizeof(tv));
		}
		d->keys = k;
		d->vals = v;
		d->cap = cap;
		if (d->index || d->cap > TD_LINEAR) {
			d->keys[d->n] = *key;
			d->vals[d->n] = *val;
			d->n++;
			return td_reindex(r, d);
		}
	}
	d->keys[d->n] = *key;
	d->vals[d->n] = *val;
	if (d->index) {
		d->index[slot] = d->n + 1;
		if ((d->n + 1) * 2 > d->nindex) {
			d->n++;
			return td_reindex(r, d);
		}
	}
	d->n++;
	return 0;
}
