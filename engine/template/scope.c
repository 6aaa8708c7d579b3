/* scope.c: jinja2's symbol analysis (idtracking), statically, frame by
 * frame. jinja2 compiles each frame (the template, a loop body, a macro,
 * a call, filter, set or with block) to Python locals: a name that a frame
 * assigns is the frame's own everywhere in it and in the frames inside
 * it, and when its first use in the frame is that assignment (outside any
 * if, where it would be read from the context instead) and no enclosing
 * frame knows the name, it starts undefined, whatever the context holds.
 * Those names are what this pass finds: the render sets them undefined
 * when it enters the frame (tnode.pre); every other name is looked up
 * through the scopes as it runs. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tmpl.h"
#include "util/taco_err.h"

enum { SK_RESOLVE = 1, SK_ALIAS, SK_UNDEF, SK_PARAM };

typedef struct ssym {
	int id;
	int kind;
} ssym;

typedef struct stab {
	const struct stab *parent;
	ssym *refs;
	int nrefs, caprefs;
	int *stores;
	int nstores, capstores;
} stab;

/* nested frames found while visiting one */
typedef struct sframes {
	tnode **v;
	int *kind;
	int n, cap;
} sframes;

enum { SF_FOR_BODY, SF_FOR_ELSE, SF_FUNC, SF_BLOCK, SF_WITH };

typedef struct sctx {
	tarena *a;
	taco_err *err;
	int oom;
	int bad_line; /* a name jinja2 cannot resolve (below), or 0 */
} sctx;

static ssym *own_ref(const stab *t, int id)
{
	for (int i = 0; i < t->nrefs; i++)
		if (t->refs[i].id == id)
			return &t->refs[i];
	return NULL;
}

static const ssym *find_ref(const stab *t, int id)
{
	for (; t; t = t->parent) {
		const ssym *s = own_ref(t, id);

		if (s)
			return s;
	}
	return NULL;
}

static void define(sctx *c, stab *t, int id, int kind)
{
	ssym *s = own_ref(t, id);

	if (s) {
		s->kind = kind;
		return;
	}
	if (t->nrefs == t->caprefs) {
		int cap = t->caprefs ? t->caprefs * 2 : 8;
		ssym *n = realloc(t->refs, (size_t)cap * sizeof(*n));

		if (!n) {
			c->oom = 1;
			return;
		}
		t->refs = n;
		t->caprefs = cap;
	}
	t->refs[t->nrefs].id = id;
	t->refs[t->nrefs].kind = kind;
	t->nrefs++;
}

static int has_store(const stab *t, int id)
{
	for (int i = 0; i < t->nstores; i++)
		if (t->stores[i] == id)
			return 1;
	return 0;
}

static void add_store(sctx *c, stab *t, int id)
{
	if (has_store(t, id))
		return;
	if (t->nstores == t->capstores) {
		int cap = t->capstores ? t->capstores * 2 : 8;
		int *n = realloc(t->stores, (size_t)cap * sizeof(*n));

		if (!n) {
			c->oom = 1;
			return;
		}
		t->stores = n;
		t->capstores = cap;
	}
	t->stores[t->nstores++] = id;
}

static void sym_load(sctx *c, stab *t, int id)
{
	if (!find_ref(t, id))
		define(c, t, id, SK_RESOLVE);
}

static void sym_store(sctx *c, stab *t, int id)
{
	add_store(c, t, id);
	if (own_ref(t, id))
		return;
	if (t->parent && find_ref(t->parent, id)) {
		define(c, t, id, SK_ALIAS);
		return;
	}
	define(c, t, id, SK_UNDEF);
}

static void sym_param(sctx *c, stab *t, int id)
{
	add_store(c, t, id);
	define(c, t, id, SK_PARAM);
}

static void stab_free(stab *t)
{
	free(t->refs);
	free(t->stores);
}

static void stab_copy(sctx *c, stab *dst, const stab *src)
{
	*dst = *src;
	dst->refs = NULL;
	dst->stores = NULL;
	dst->nrefs = dst->caprefs = dst->nstores = dst->capstores = 0;
	for (int i = 0; i < src->nrefs; i++)
		define(c, dst, src->refs[i].id, src->refs[i].kind);
	for (int i = 0; i < src->nstores; i++)
		add_store(c, dst, src->stores[i]);
}

static void push_frame(sctx *c, sframes *f, tnode *n, int kind)
{
	if (f->n == f->cap) {
		int cap = f->cap ? f->cap * 2 : 8;
		tnode **nv = realloc(f->v, (size_t)cap * sizeof(*nv));
		int *nk = realloc(f->kind, (size_t)cap * sizeof(*nk));

		if (nv)
			f->v = nv;
		if (nk)
			f->kind = nk;
		if (!nv || !nk) {
			c->oom = 1;
			return;
		}
		f->cap = cap;
	}
	f->v[f->n] = n;
	f->kind[f->n++] = kind;
}

static void visit(sctx *c, stab *t, sframes *f, const tnode *n);

/* an assignment target */
static void visit_target(sctx *c, stab *t, const tnode *n, int param)
{
	if (!n)
		return;
	if (n->kind == N_NAME) {
		if (param)
			sym_param(c, t, n->id);
		else
			sym_store(c, t, n->id);
	} else if (n->kind == N_NSREF) {
		sym_load(c, t, n->id);
	} else if (n->kind == N_TUPLE) {
		for (int i = 0; i < n->nkids; i++)
			visit_target(c, t, n->kids[i], param);
	}
}

static void visit_list(sctx *c, stab *t, sframes *f, tnode *const *kids, int n)
{
	for (int i = 0; i < n; i++)
		visit(c, t, f, kids[i]);
}

/* jinja2's branch_update: a name first assigned in a branch of an if
 * starts from the context (or the enclosing frame), never undefined */
/* the names assigned in branches br[0..nb) that t had not: first assigned
 * in a branch, they start from the context (or the enclosing frame) */
static void branch_update(sctx *c, stab *t, stab *br, int nb)
{
	int *news = NULL, nn = 0, cap = 0;

	for (int b = 0; b < nb; b++)
		for (int k = 0; k < br[b].nstores; k++) {
			int id = br[b].stores[k], dup = has_store(t, id);

			for (int j = 0; j < nn && !dup; j++)
				dup = news[j] == id;
			if (dup)
				continue;
			if (nn == cap) {
				int *m;

				cap = cap ? cap * 2 : 8;
				m = realloc(news, (size_t)cap * sizeof(int));
				if (!m) {
					c->oom = 1;
					free(news);
					return;
				}
				news = m;
			}
			news[nn++] = id;
		}
	for (int b = 0; b < nb; b++) {
		for (int k = 0; k < br[b].nrefs; k++)
			define(c, t, br[b].refs[k].id, br[b].refs[k].kind);
		for (int k = 0; k < br[b].nstores; k++)
			add_store(c, t, br[b].stores[k]);
		stab_free(&br[b]);
	}
	for (int j = 0; j < nn; j++)
		define(c, t, news[j],
		       t->parent && find_ref(t->parent, news[j]) ? SK_ALIAS
								 : SK_RESOLVE);
	free(news);
}

/* jinja2's visit_If: the test, then the body, the elifs (each an if of
 * its own with neither elif nor else) and the else, each in a copy of
 * the symbols, merged by branch_update */
static void visit_if(sctx *c, stab *t, sframes *f, const tnode *n)
{
	stab br[3];
	const tnode *e, *els = NULL;

	visit(c, t, f, n->a);
	for (int b = 0; b < 3; b++)
		stab_copy(c, &br[b], t);
	visit_list(c, &br[0], f, n->kids, n->nkids);
	for (e = n->b; e && e->kind == N_IF; e = e->b) {
		stab sub[3];

		visit(c, &br[1], f, e->a);
		for (int b = 0; b < 3; b++)
			stab_copy(c, &sub[b], &br[1]);
		visit_list(c, &sub[0], f, e->kids, e->nkids);
		branch_update(c, &br[1], sub, 3);
	}
	els = e;
	if (els)
		visit_list(c, &br[2], f, els->kids, els->nkids);
	branch_update(c, t, br, 3);
}

/* FrameSymbolVisitor: what a frame's own code reads and assigns */
static void visit(sctx *c, stab *t, sframes *f, const tnode *n)
{
	if (!n)
		return;
	switch (n->kind) {
	case N_NAME:
		sym_load(c, t, n->id);
		return;
	case N_NSREF:
		sym_load(c, t, n->id);
		return;
	case N_SET:
		visit(c, t, f, n->b);
		visit_target(c, t, n->a, 0);
		return;
	case N_SETBLOCK:
		visit_target(c, t, n->a, 0);
		push_frame(c, f, (tnode *)n, SF_BLOCK);
		return;
	case N_FOR:
		visit(c, t, f, n->b);
		push_frame(c, f, (tnode *)n, SF_FOR_BODY);
		if (n->d)
			push_frame(c, f, (tnode *)n, SF_FOR_ELSE);
		return;
	case N_IF:
		visit_if(c, t, f, n);
		return;
	case N_MACRO:
		sym_store(c, t, n->id);
		push_frame(c, f, (tnode *)n, SF_FUNC);
		return;
	case N_CALLBLOCK:
		visit(c, t, f, n->b);
		push_frame(c, f, (tnode *)n, SF_FUNC);
		return;
	case N_GENERATION:
		push_frame(c, f, (tnode *)n, SF_FUNC);
		return;
	case N_FILTERBLOCK:
		visit(c, t, f, n->b);
		push_frame(c, f, (tnode *)n, SF_BLOCK);
		return;
	case N_WITH:
		visit(c, t, f, n->b);
		push_frame(c, f, (tnode *)n, SF_WITH);
		return;
	default:
		break;
	}
	visit(c, t, f, n->a);
	visit(c, t, f, n->b);
	visit(c, t, f, n->c);
	visit(c, t, f, n->d);
	visit_list(c, t, f, n->kids, n->nkids);
	for (int i = 0; i < n->nkw; i++)
		visit(c, t, f, n->kw[i].val);
	visit_list(c, t, f, n->dflt, n->ndflt);
}

static int frame(sctx *c, const stab *parent, tnode *n, int kind,
		 const taco_tmpl *tm);

/* jinja2 compiles a set block's filter in the block's frame without
 * looking at its names: one that no enclosing frame knows fails its
 * compiler (an AssertionError). So does it here. */
static void unknown_names(sctx *c, const stab *t, const tnode *n)
{
	if (!n || c->bad_line)
		return;
	if (n->kind == N_NAME && !find_ref(t, n->id)) {
		c->bad_line = n->line;
		return;
	}
	unknown_names(c, t, n->a);
	unknown_names(c, t, n->b);
	unknown_names(c, t, n->c);
	unknown_names(c, t, n->d);
	for (int i = 0; i < n->nkids; i++)
		unknown_names(c, t, n->kids[i]);
	for (int i = 0; i < n->nkw; i++)
		unknown_names(c, t, n->kw[i].val);
}

/* the undefined-at-entry names of t onto node n */
static void record(sctx *c, const stab *t, tnode *n)
{
	int k = 0;

	for (int i = 0; i < t->nrefs; i++)
		k += t->refs[i].kind == SK_UNDEF;
	n->npre = 0;
	n->pre = NULL;
	if (!k)
		return;
	n->pre = ta_alloc(c->a, (size_t)k * sizeof(int32_t));
	if (!n->pre) {
		c->oom = 1;
		return;
	}
	for (int i = 0; i < t->nrefs; i++)
		if (t->refs[i].kind == SK_UNDEF)
			n->pre[n->npre++] = t->refs[i].id;
}

static int frame(sctx *c, const stab *parent, tnode *n, int kind,
		 const taco_tmpl *tm)
{
	stab t;
	sframes f = {0};
	tnode *rec = n;
	int e = 0;

	memset(&t, 0, sizeof(t));
	t.parent = parent;
	switch (kind) {
	case SF_FOR_BODY:
		visit_target(c, &t, n->a, 1);
		visit_list(c, &t, &f, n->kids, n->nkids);
		break;
	case SF_FOR_ELSE:
		visit_list(c, &t, &f, n->d->kids, n->d->nkids);
		rec = n->d;
		break;
	case SF_FUNC:
		for (int i = 0; i < n->nkids; i++)
			visit_target(c, &t, n->kids[i], 1);
		if (n->kind == N_MACRO || n->kind == N_CALLBLOCK) {
			if (n->flags & NF_CALLER)
				sym_param(c, &t, tm->id_caller);
			if (n->flags & NF_VARARGS)
				sym_param(c, &t, tm->id_varargs);
			if (n->flags & NF_KWARGS)
				sym_param(c, &t, tm->id_kwargs);
		}
		visit_list(c, &t, &f, n->dflt, n->ndflt);
		visit_list(c, &t, &f, n->d->kids, n->d->nkids);
		break;
	case SF_BLOCK:
		visit_list(c, &t, &f, n->d->kids, n->d->nkids);
		if (n->kind == N_FILTERBLOCK)
			visit(c, &t, &f, n->b);
		else
			unknown_names(c, &t, n->b);
		break;
	case SF_WITH:
		visit_target(c, &t, n->a, 1);
		visit_list(c, &t, &f, n->d->kids, n->d->nkids);
		break;
	default: /* the template */
		visit_list(c, &t, &f, n->kids, n->nkids);
		break;
	}
	record(c, &t, rec);
	for (int i = 0; i < f.n && !e && !c->oom; i++)
		e = frame(c, &t, f.v[i], f.kind[i], tm);
	free(f.v);
	free(f.kind);
	stab_free(&t);
	return e;
}

int ts_analyze(taco_tmpl *t, taco_err *err);

int ts_analyze(taco_tmpl *t, taco_err *err)
{
	sctx c = {&t->arena, err, 0, 0};
	int e = frame(&c, NULL, t->root, -1, t);

	if (!e && c.oom)
		e = taco_err_set(err, -ENOMEM, "out of memory");
	if (!e && c.bad_line)
		e = taco_err_set(err, -EINVAL,
				 "line %d: a name in the filter of a set block "
				 "that is nowhere else in its scope is not "
				 "supported (jinja2's compiler fails on it)",
				 c.bad_line);
	return e;
}
