/* stmt.c: statements, scoped as jinja2 scopes them: a for loop's body
 * and a macro's, a call, filter, set or generation block's body and a
 * with block each see the enclosing variables but keep their own sets;
 * if does not make a scope. Output goes to the render's buffer or, for
 * macros and blocks whose output is a value, to a capture buffer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tmpl.h"

#define TE_BREAK 1
#define TE_CONTINUE 2

int te_filter(trender *r, const tnode *n, tscope *s, const tv *in, tv *out);
int tl_next(trender *r, tloop *l, tv *out);

static int exec_list(trender *r, tnode *const *kids, int n, tscope *s);

/* ---- captures ------------------------------------------------------ */

static int cap_push(trender *r, tbuf **saved)
{
	if (r->capdepth == r->ncaps) {
		int cap = r->ncaps ? r->ncaps * 2 : 8;
		tbuf **nc = realloc(r->caps, (size_t)cap * sizeof(*nc));

		if (!nc)
			return tr_oom(r);
		r->caps = nc;
		for (int i = r->ncaps; i < cap; i++)
			r->caps[i] = NULL;
		r->ncaps = cap;
	}
	if (!r->caps[r->capdepth]) {
		r->caps[r->capdepth] = calloc(1, sizeof(tbuf));
		if (!r->caps[r->capdepth])
			return tr_oom(r);
	}
	*saved = r->out;
	r->out = r->caps[r->capdepth++];
	r->out->n = 0;
	return 0;
}

static int cap_pop(trender *r, tbuf *saved, tv *out)
{
	int e = out ? tb_take(r, r->out, out) : 0;

	r->out->n = 0;
	r->capdepth--;
	r->out = saved;
	return e;
}

/* ---- assignment ---------------------------------------------------- */

int tl_assign(trender *r, tscope *s, const tnode *target, const tv *v);

int tl_assign(trender *r, tscope *s, const tnode *target, const tv *v)
{
	tcur c;
	tv item, ns;
	int e, got, i = 0;

	switch (target->kind) {
	case N_NAME:
		return ts_set(r, s, target->id, v);
	case N_NSREF: {
		tv key = tv_str(target->str, target->slen);

		if ((e = ts_lookup(r, s, target->id, &ns)))
			return e;
		if (ns.k != TV_NS)
			return tr_fail(r, -EINVAL,
				       "TemplateRuntimeError: cannot assign "
				       "attribute on non-namespace object");
		return td_set(r, &ns.u.ns->attrs, &key, v);
	}
	default:
		break;
	}
	/* a tuple: unpack exactly */
	if ((e = tc_open(r, v, &c)))
		return e;
	while ((got = tc_next(r, &c, &item)) == 1) {
		if (i == target->nkids)
			return tr_fail(r, -EINVAL,
				       "ValueError: too many values to unpack "
				       "(expected %d)",
				       target->nkids);
		if ((e = tl_assign(r, s, target->kids[i++], &item)))
			return e;
	}
	if (got < 0)
		return got;
	if (i < target->nkids)
		return tr_fail(r, -EINVAL,
			       "ValueError: not enough values to unpack "
			       "(expected %d, got %d)",
			       target->nkids, i);
	return 0;
}

/* ---- macros -------------------------------------------------------- */

static int kw_find(const tkw *kw, int nkw, const char *name, size_t n,
		   const uint8_t *used)
{
	for (int i = 0; i < nkw; i++)
		if (!used[i] && kw[i].n == n && !memcmp(kw[i].name, name, n))
			return i;
	return -1;
}

int te_call_macro(trender *r, const tmacro *m, tv *args, int nargs,
		  const tkw *kw, tv *kwv, int nkw, const tv *caller, tv *out)
{
	const tnode *def = m->def;
	const taco_tmpl *t = r->t;
	int np = def->nkids, nd = def->ndflt, e = 0;
	uint8_t used_inl[16], *used = used_inl;
	uint8_t given_inl[16], *given = given_inl;
	tscope *ms;
	tbuf *saved;
	tv v;

	if (r->depth >= r->lim.max_depth)
		return tr_fail(r, -E2BIG, "max_depth exceeded (%d)",
			       r->lim.max_depth);
	if (nkw > 16 && !(used = tr_alloc(r, (size_t)nkw)))
		return -E2BIG;
	if (np > 16 && !(given = tr_alloc(r, (size_t)np)))
		return -E2BIG;
	memset(used, 0, (size_t)(nkw > 16 ? nkw : 16));
	memset(given, 0, (size_t)(np > 16 ? np : 16));
	if (!(ms = ts_new(r, m->closure)) || (e = ts_pre(r, ms, def)))
		return ms ? e : -E2BIG;
	/* explicit arguments first: positional, then by name */
	for (int i = 0; i < np; i++) {
		const tname *pn = &t->names[def->kids[i]->id];
		int k;

		if (i < nargs) {
			v = args[i];
			given[i] = 1;
		} else if ((k = kw_find(kw, nkw, pn->s, pn->n, used)) >= 0) {
			used[k] = 1;
			v = kwv[k];
			given[i] = 1;
		} else {
			v = tv_undef_name(r, pn->s, pn->n);
		}
		if ((e = ts_set(r, ms, def->kids[i]->id, &v)))
			return e;
	}
	/* then defaults, in order, seeing the arguments */
	for (int i = 0; i < np; i++) {
		if (given[i])
			continue;
		if (i >= np - nd) {
			if ((e = te_eval(r, def->dflt[i - (np - nd)], ms, &v)))
				return e;
		} else {
			const tname *pn = &t->names[def->kids[i]->id];
			size_t len = pn->n + 40;
			char *msg = tr_alloc(r, len);

			if (!msg)
				return -E2BIG;
			snprintf(msg, len, "parameter '%.*s' was not provided",
				 (int)pn->n, pn->s);
			v = tv_undef_msg(r, msg);
		}
		if ((e = ts_set(r, ms, def->kids[i]->id, &v)))
			return e;
	}
	if (def->flags & NF_CALLER) {
		int k = kw_find(kw, nkw, "caller", 6, used);

		if (caller)
			v = *caller;
		else if (k >= 0) {
			used[k] = 1;
			v = kwv[k];
		} else {
			v = tv_undef_msg(r, "No caller defined");
		}
		if ((e = ts_set(r, ms, t->id_caller, &v)))
			return e;
	} else if (caller) {
		return tr_fail(r, -EINVAL,
			       "TypeError: macro '%.*s' was invoked with two "
			       "values for the special caller argument",
			       (int)m->nlen, m->name);
	}
	if (def->flags & NF_VARARGS) {
		int extra = nargs > np ? nargs - np : 0;

		if ((e = tv_newlist(r, (uint32_t)extra, 1, &v)))
			return e;
		for (int i = 0; i < extra; i++)
			v.u.items[i] = args[np + i];
		if ((e = ts_set(r, ms, t->id_varargs, &v)))
			return e;
	} else if (nargs > np) {
		return tr_fail(r, -EINVAL,
			       "TypeError: macro '%.*s' takes not more than %d "
			       "argument(s)",
			       (int)m->nlen, m->name, np);
	}
	if (def->flags & NF_KWARGS) {
		if ((e = tv_newdict(r, 0, &v)))
			return e;
		for (int i = 0; i < nkw; i++) {
			tv key = tv_str(kw[i].name, kw[i].n);

			if (!used[i] &&
			    (e = td_set(r, v.u.dict, &key, &kwv[i])))
				return e;
		}
		if ((e = ts_set(r, ms, t->id_kwargs, &v)))
			return e;
	} else {
		for (int i = 0; i < nkw; i++)
			if (!used[i])
				return tr_fail(
				    r, -EINVAL,
				    "TypeError: macro '%.*s' takes no "
				    "keyword argument '%.*s'",
				    (int)m->nlen, m->name,
				    (int)(kw[i].n > 60 ? 60 : kw[i].n),
				    kw[i].name);
	}
	if ((e = cap_push(r, &saved)))
		return e;
	r->depth++;
	e = te_exec(r, m->body, ms);
	r->depth--;
	if (e) {
		cap_pop(r, saved, NULL);
		return e;
	}
	return cap_pop(r, saved, out);
}

static int new_macro(trender *r, const tnode *def, const tnode *body, tscope *s,
		     const char *name, size_t nlen, tv *out)
{
	tmacro *m = tr_alloc(r, sizeof(*m));

	if (!m)
		return -E2BIG;
	m->def = def;
	m->closure = s;
	m->body = body;
	m->name = name;
	m->nlen = (uint32_t)nlen;
	*out = tv_undef();
	out->k = TV_MACRO;
	out->u.macro = m;
	return 0;
}

/* {% call m(...) %}: m called with the block as caller */
static int exec_callblock(trender *r, const tnode *n, tscope *s)
{
	const tnode *call = n->b;
	tv fn, caller, res, *args = NULL, *kwv = NULL;
	int e;

	if ((e = new_macro(r, n, n->d, s, "caller", 6, &caller)))
		return e;
	if ((e = te_eval(r, call->a, s, &fn)))
		return e;
	if (call->nkids &&
	    !(args = tr_alloc(r, (size_t)call->nkids * sizeof(tv))))
		return -E2BIG;
	if (call->nkw && !(kwv = tr_alloc(r, (size_t)call->nkw * sizeof(tv))))
		return -E2BIG;
	for (int i = 0; i < call->nkids; i++)
		if ((e = te_eval(r, call->kids[i], s, &args[i])))
			return e;
	for (int i = 0; i < call->nkw; i++)
		if ((e = te_eval(r, call->kw[i].val, s, &kwv[i])))
			return e;
	r->line = n->line;
	if (fn.k == TV_UNDEF)
		return tv_undef_fail(r, &fn);
	if (fn.k != TV_MACRO)
		return te_unsupported(r, "{% call %} of something other than a "
					 "macro");
	if ((e = te_call_macro(r, fn.u.macro, args, call->nkids, call->kw, kwv,
			       call->nkw, &caller, &res)))
		return e;
	return py_str(r, r->out, &res);
}

/* ---- loops --------------------------------------------------------- */

static int exec_for(trender *r, const tnode *n, tscope *s)
{
	tv it, item, lv;
	tloop *l;
	tscope *ls;
	int e, got, ran = 0;

	if ((e = te_eval(r, n->b, s, &it)))
		return e;
	r->line = n->line;
	if (r->depth >= r->lim.max_depth)
		return tr_fail(r, -E2BIG, "max_depth exceeded (%d)",
			       r->lim.max_depth);
	if (!(l = tr_alloc(r, sizeof(*l))) || !(ls = ts_new(r, s)))
		return -E2BIG;
	memset(l, 0, sizeof(*l));
	l->length = -1;
	l->index0 = -1;
	if (n->c) {
		titer *fi = tr_alloc(r, sizeof(*fi));
		tv fv = tv_undef();

		if (!fi)
			return -E2BIG;
		memset(fi, 0, sizeof(*fi));
		fi->kind = TI_LOOPFILTER;
		fi->target = n->a;
		fi->test = n->c;
		if (!(fi->scope = ts_new(r, s)))
			return -E2BIG;
		if ((e = tc_open(r, &it, &fi->src)))
			return e;
		fv.k = TV_ITER;
		fv.u.it = fi;
		if ((e = tc_open(r, &fv, &l->cur)))
			return e;
	} else {
		if ((e = tc_open(r, &it, &l->cur)))
			return e;
		l->length = tc_len(&l->cur);
	}
	lv = tv_undef();
	lv.k = TV_LOOP;
	lv.u.loop = l;
	r->depth++;
	while ((got = tl_next(r, l, &item)) == 1) {
		if ((e = tr_step(r)))
			goto out;
		ran = 1;
		ls->n = 0;
		if ((e = ts_pre(r, ls, n)) ||
		    (e = tl_assign(r, ls, n->a, &item)) ||
		    (e = ts_set(r, ls, r->t->id_loop, &lv)))
			goto out;
		e = exec_list(r, n->kids, n->nkids, ls);
		if (e == TE_BREAK) {
			e = 0;
			break;
		}
		if (e == TE_CONTINUE)
			e = 0;
		if (e)
			goto out;
		r->line = n->line;
	}
	e = got < 0 ? got : 0;
	if (!e && !ran && n->d) {
		tscope *es = ts_new(r, s);

		if (!es)
			e = -E2BIG;
		else if (!(e = ts_pre(r, es, n->d)))
			e = exec_list(r, n->d->kids, n->d->nkids, es);
	}
out:
	r->depth--;
	return e;
}

/* ---- statements ---------------------------------------------------- */

static int exec_output(trender *r, const tnode *n, tscope *s)
{
	tv v;
	int e;

	for (int i = 0; i < n->nkids; i++) {
		const tnode *k = n->kids[i];

		if (k->kind == N_CONST && k->cval.k == TV_STR) {
			if ((e = tb_put(r, r->out, k->cval.u.s, k->cval.n)))
				return e;
			continue;
		}
		if ((e = te_eval(r, k, s, &v)))
			return e;
		r->line = k->line;
		if ((e = py_str(r, r->out, &v)))
			return e;
	}
	return 0;
}

/* the output of frame n's body in a scope of its own, as a string */
static int capture(trender *r, const tnode *n, tscope *s, tv *out)
{
	tscope *bs = ts_new(r, s);
	const tnode *body = n->d;
	tbuf *saved;
	int e;

	if (!bs)
		return -E2BIG;
	if ((e = ts_pre(r, bs, n)))
		return e;
	if ((e = cap_push(r, &saved)))
		return e;
	e = te_exec(r, body, bs);
	if (e) {
		cap_pop(r, saved, NULL);
		return e < 0 ? e
			     : tr_fail(r, -EINVAL,
				       "internal error: loop "
				       "control in a block");
	}
	return cap_pop(r, saved, out);
}

static int exec_generation(trender *r, const tnode *n, tscope *s)
{
	tscope *gs = ts_new(r, s);
	size_t start = r->root.n;
	int e;

	if (!gs)
		return -E2BIG;
	if (r->out != &r->root)
		return te_unsupported(r,
				      "{% generation %} inside a macro, call, "
				      "filter or set block");
	if (r->in_gen)
		return te_unsupported(r,
				      "{% generation %} inside {% generation "
				      "%}");
	if ((e = ts_pre(r, gs, n)))
		return e;
	r->in_gen = 1;
	e = te_exec(r, n->d, gs);
	r->in_gen = 0;
	if (e)
		return e < 0 ? e
			     : tr_fail(r, -EINVAL,
				       "internal error: loop "
				       "control in a block");
	if (r->ngen == r->gencap) {
		int cap = r->gencap ? r->gencap * 2 : 16;
		size_t grow = (size_t)(cap - r->gencap) * 2 * sizeof(size_t);
		size_t *ng;

		if (cap > (1 << 28) || ta_charge(&r->a, (ptrdiff_t)grow))
			return tr_fail(r, -E2BIG,
				       "max_memory exceeded (%zu bytes)",
				       r->lim.max_memory);
		ng = realloc(r->gen, (size_t)cap * 2 * sizeof(size_t));
		if (!ng)
			return tr_oom(r);
		r->gen = ng;
		r->gencap = cap;
	}
	r->gen[2 * r->ngen] = start;
	r->gen[2 * r->ngen + 1] = r->root.n;
	r->ngen++;
	return 0;
}

static int exec_stmt(trender *r, const tnode *n, tscope *s)
{
	tv v, res;
	int e, t;

	if ((e = tr_step(r)))
		return e;
	r->line = n->line;
	switch (n->kind) {
	case N_OUTPUT:
		return exec_output(r, n, s);
	case N_IF:
		for (;;) {
			if ((e = te_eval(r, n->a, s, &v)) ||
			    (e = tv_truthy(r, &v, &t)))
				return e;
			if (t)
				return exec_list(r, n->kids, n->nkids, s);
			if (!n->b)
				return 0;
			if (n->b->kind != N_IF)
				return exec_list(r, n->b->kids, n->b->nkids, s);
			n = n->b;
			if ((e = tr_step(r)))
				return e;
			r->line = n->line;
		}
	case N_FOR:
		return exec_for(r, n, s);
	case N_SET:
		if ((e = te_eval(r, n->b, s, &v)))
			return e;
		r->line = n->line;
		return tl_assign(r, s, n->a, &v);
	case N_SETBLOCK:
		if ((e = capture(r, n, s, &v)))
			return e;
		if (n->b && (e = te_filter(r, n->b, s, &v, &v)))
			return e;
		return tl_assign(r, s, n->a, &v);
	case N_FILTERBLOCK:
		if ((e = capture(r, n, s, &v)) ||
		    (e = te_filter(r, n->b, s, &v, &res)))
			return e;
		return py_str(r, r->out, &res);
	case N_MACRO:
		if ((e = new_macro(r, n, n->d, s, r->t->names[n->id].s,
				   r->t->names[n->id].n, &v)))
			return e;
		return ts_set(r, s, n->id, &v);
	case N_CALLBLOCK:
		return exec_callblock(r, n, s);
	case N_WITH: {
		tscope *ws = ts_new(r, s);

		if (!ws)
			return -E2BIG;
		if ((e = ts_pre(r, ws, n)))
			return e;
		for (int i = 0; i < n->a->nkids; i++) {
			if ((e = te_eval(r, n->b->kids[i], s, &v)) ||
			    (e = tl_assign(r, ws, n->a->kids[i], &v)))
				return e;
		}
		return exec_list(r, n->d->kids, n->d->nkids, ws);
	}
	case N_GENERATION:
		return exec_generation(r, n, s);
	case N_BREAK:
		return TE_BREAK;
	case N_CONTINUE:
		return TE_CONTINUE;
	case N_BODY:
		return exec_list(r, n->kids, n->nkids, s);
	default:
		return tr_fail(r, -EINVAL, "internal error: statement %d",
			       n->kind);
	}
}

static int exec_list(trender *r, tnode *const *kids, int n, tscope *s)
{
	int e = 0;

	if ((e = tr_enter(r)))
		return e;
	for (int i = 0; i < n && !e; i++)
		e = exec_stmt(r, kids[i], s);
	tr_leave(r);
	return e;
}

int te_exec(trender *r, const tnode *body, tscope *s)
{
	return exec_list(r, body->kids, body->nkids, s);
}
