/* fold.c: jinja2's optimizer. jinja2 evaluates constant expressions when
 * it compiles a template (Node.as_const): a printed one into its text,
 * any other into its value when that value has a safe repr. That shows
 * in three places, which this pass reproduces by folding the same
 * subtrees: a slice in a folded expression goes through the sandbox's
 * getitem (a failed slice is undefined, where compiled code's own slice
 * raises); and a constant that stays (is written into jinja2's Python
 * code) is a NameError when it holds inf or nan, and, negative and left
 * of **, binds as Python binds -3 ** x: -(3 ** x). */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "tmpl.h"

/* what folding may spend on one template: beyond, expressions are left
 * to the render (which is bounded itself) */
#define TF_MAX_STEPS 20000000
#define TF_MAX_BYTES (16u << 20)

typedef struct fctx {
	taco_tmpl *t;
	trender r;
	taco_err err;
	uint64_t steps; /* evaluation steps spent folding */
	size_t bytes;	/* bytes of folded values */
} fctx;

/* a value into the template's arena, when it has a safe repr */
static int copy_value(fctx *c, const tv *v, tv *out, int depth)
{
	tarena *a = &c->t->arena;

	*out = *v;
	if (depth > 64)
		return -1;
	switch (v->k) {
	case TV_NONE:
	case TV_BOOL:
	case TV_INT:
	case TV_FLOAT:
		return 0;
	case TV_STR: {
		char *s;

		if ((c->bytes += v->n) > TF_MAX_BYTES)
			return -1;
		s = ta_alloc(a, (size_t)v->n + 1);

		if (!s)
			return -1;
		memcpy(s, v->u.s, v->n);
		s[v->n] = 0;
		out->u.s = s;
		return 0;
	}
	case TV_LIST:
	case TV_TUPLE: {
		tv *items =
		    v->n ? ta_alloc(a, (size_t)v->n * sizeof(tv)) : NULL;

		if (v->n && !items)
			return -1;
		for (uint32_t i = 0; i < v->n; i++)
			if (copy_value(c, &v->u.items[i], &items[i], depth + 1))
				return -1;
		out->u.items = items;
		return 0;
	}
	case TV_DICT: {
		const tdict *d = v->u.dict;
		tdict *nd;

		if ((c->bytes += (size_t)d->cap * 2 * sizeof(tv)) >
		    TF_MAX_BYTES)
			return -1;
		nd = ta_alloc(a, sizeof(*nd));
		if (!nd)
			return -1;
		*nd = *d;
		nd->keys =
		    ta_alloc(a, (size_t)(d->cap ? d->cap : 1) * sizeof(tv));
		nd->vals =
		    ta_alloc(a, (size_t)(d->cap ? d->cap : 1) * sizeof(tv));
		if (!nd->keys || !nd->vals)
			return -1;
		for (uint32_t i = 0; i < d->n; i++)
			if (copy_value(c, &d->keys[i], &nd->keys[i],
				       depth + 1) ||
			    copy_value(c, &d->vals[i], &nd->vals[i], depth + 1))
				return -1;
		if (d->index) {
			nd->index = ta_alloc(a, d->nindex * sizeof(uint32_t));
			if (!nd->index)
				return -1;
			memcpy(nd->index, d->index,
			       d->nindex * sizeof(uint32_t));
		}
		out->u.dict = nd;
		return 0;
	}
	default:
		return -1;
	}
}

/* as_const of n: 0 and its value, or nonzero (jinja2's Impossible) */
static int const_eval(fctx *c, const tnode *n, tv *out)
{
	trender *r = &c->r;
	int e;

	if (c->steps > TF_MAX_STEPS || c->bytes > TF_MAX_BYTES)
		return -E2BIG;
	r->errset = 0;
	r->steps = 0;
	r->rdepth = 0;
	e = te_eval(r, n, NULL, out);
	c->steps += r->steps;
	return e;
}

static int foldable(int kind)
{
	switch (kind) {
	case N_CONCAT:
	case N_COMPARE:
	case N_GETATTR:
	case N_GETITEM:
	case N_SLICE:
	case N_FILTER:
	case N_TEST:
	case N_CONDEXPR:
	case N_BINOP:
	case N_AND:
	case N_OR:
	case N_NOT:
	case N_NEG:
	case N_POS:
		return 1;
	default:
		return 0;
	}
}

static tnode *const_node(fctx *c, const tnode *like, const tv *v)
{
	tnode *n = ta_alloc(&c->t->arena, sizeof(*n));

	if (!n)
		return NULL;
	memset(n, 0, sizeof(*n));
	n->kind = N_CONST;
	n->line = like->line;
	n->id = -1;
	n->h = 1;
	n->cval = *v;
	return n;
}

static int walk(fctx *c, tnode **slot);

/* inf or nan in a constant */
static int has_nonfinite(const tv *v, int depth)
{
	if (v->k == TV_FLOAT)
		return !isfinite(v->u.d);
	if (depth > 64)
		return 0;
	if (v->k == TV_LIST || v->k == TV_TUPLE) {
		for (uint32_t i = 0; i < v->n; i++)
			if (has_nonfinite(&v->u.items[i], depth + 1))
				return 1;
	} else if (v->k == TV_DICT) {
		for (uint32_t i = 0; i < v->u.dict->n; i++)
			if (has_nonfinite(&v->u.dict->keys[i], depth + 1) ||
			    has_nonfinite(&v->u.dict->vals[i], depth + 1))
				return 1;
	}
	return 0;
}

static int is_negative(const tv *v)
{
	return ((v->k == TV_INT || v->k == TV_BOOL) && v->u.i < 0) ||
	       (v->k == TV_FLOAT && signbit(v->u.d) && !isnan(v->u.d));
}

/* the constants that stay, as jinja2 writes them */
static void mark(tnode *n)
{
	if (!n)
		return;
	if (n->kind == N_CONST && has_nonfinite(&n->cval, 0))
		n->flags |= NF_QUIRK;
	if (n->kind == N_BINOP && n->op == OP_POW && n->a->kind == N_CONST &&
	    is_negative(&n->a->cval))
		n->flags |= NF_QUIRK;
	mark(n->a);
	mark(n->b);
	mark(n->c);
	mark(n->d);
	for (int i = 0; i < n->nkids; i++)
		if (n->kind != N_OUTPUT || n->kids[i]->kind != N_CONST)
			mark(n->kids[i]);
	for (int i = 0; i < n->nkw; i++)
		mark(n->kw[i].val);
	for (int i = 0; i < n->ndflt; i++)
		mark(n->dflt[i]);
}

static int fold_expr(fctx *c, tnode **slot, int output)
{
	tnode *n = *slot;
	tv v, copy;
	int e;

	if (!n || n->kind == N_CONST)
		return 0;
	if ((output || foldable(n->kind)) && !(n->flags & NF_DYNAMIC) &&
	    !const_eval(c, n, &v)) {
		if (output) {
			tbuf b = {0};

			if (!py_str(&c->r, &b, &v) &&
			    !copy_value(c,
					&(tv){.k = TV_STR,
					      .n = (uint32_t)b.n,
					      .u.s = b.p ? b.p : ""},
					&copy, 0)) {
				tb_free(&c->r, &b);
				*slot = const_node(c, n, &copy);
				return *slot ? 0 : -ENOMEM;
			}
			tb_free(&c->r, &b);
		} else if (!copy_value(c, &v, &copy, 0)) {
			*slot = const_node(c, n, &copy);
			return *slot ? 0 : -ENOMEM;
		}
	}
	if ((e = walk(c, &n->a)) || (e = walk(c, &n->b)) ||
	    (e = walk(c, &n->c)) || (e = walk(c, &n->d)))
		return e;
	for (int i = 0; i < n->nkids; i++)
		if ((e = walk(c, &n->kids[i])))
			return e;
	for (int i = 0; i < n->nkw; i++)
		if ((e = walk(c, &n->kw[i].val)))
			return e;
	return 0;
}

static int walk(fctx *c, tnode **slot)
{
	tnode *n = *slot;
	int e;

	if (!n)
		return 0;
	if (n->kind < N_BODY)
		return fold_expr(c, slot, 0);
	if (n->kind == N_OUTPUT) {
		for (int i = 0; i < n->nkids; i++)
			if ((e = fold_expr(c, &n->kids[i], 1)))
				return e;
		return 0;
	}
	if ((e = walk(c, &n->a)) || (e = walk(c, &n->b)) ||
	    (e = walk(c, &n->c)) || (e = walk(c, &n->d)))
		return e;
	for (int i = 0; i < n->nkids; i++)
		if ((e = walk(c, &n->kids[i])))
			return e;
	for (int i = 0; i < n->nkw; i++)
		if ((e = walk(c, &n->kw[i].val)))
			return e;
	for (int i = 0; i < n->ndflt; i++)
		if ((e = walk(c, &n->dflt[i])))
			return e;
	return 0;
}

int tf_fold(taco_tmpl *t, taco_err *err);

int tf_fold(taco_tmpl *t, taco_err *err)
{
	fctx c;
	int e;

	memset(&c, 0, sizeof(c));
	c.t = t;
	c.r.t = t;
	c.r.err = &c.err;
	c.r.lim.max_output = 1u << 20;
	c.r.lim.max_memory = 16u << 20;
	c.r.lim.max_steps = 100000;
	c.r.lim.max_depth = 16;
	c.r.out = &c.r.root;
	c.r.constmode = 1;
	c.r.folding = 1;
	ta_init(&c.r.a, c.r.lim.max_memory);
	e = walk(&c, &t->root);
	if (!e)
		mark(t->root);
	tb_free(&c.r, &c.r.root);
	ta_free(&c.r.a);
	if (e)
		return taco_err_set(err, e, "out of memory");
	return 0;
}
