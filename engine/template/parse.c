/* parse.c: jinja2's parser, statement by statement and operator by
 * operator as jinja2 3.1 parses them, into the tree of tmpl.h. Filters
 * and tests are resolved here: an unknown one is an error at compile
 * time, except inside an if statement or a conditional expression, where
 * jinja2 defers the error to when it runs (and so do we). The tree's
 * height is bounded, so that nothing walking it recurses without bound. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tmpl.h"
#include "util/taco_err.h"

#define TP_MAX_HEIGHT 256

typedef struct tparse {
	taco_tmpl *t;
	tarena *a;
	ttok *toks;
	int ntoks, pos;
	taco_err *err;
	int depth;   /* recursion of the parser */
	int loops;   /* for loops open in the current function body */
	int capture; /* set or filter blocks open inside the innermost loop */
	int funcs;   /* macro, call and generation bodies open */
	/* name interning */
	tname *names;
	int nnames, capnames;
	int *hash;
	int hcap;
	/* tags being closed, for errors */
	const char *open_tags[TP_MAX_HEIGHT];
	int nopen;
} tparse;

static int tp_fail(tparse *p, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int tp_fail(tparse *p, int line, const char *fmt, ...)
{
	char msg[600];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return taco_err_set(p->err, -EINVAL, "line %d: %s", line, msg);
}

/* the parser's bound on nesting: hostile input cannot overflow the stack
 * of whatever walks the tree */
static int tp_limit(tparse *p, int line)
{
	return taco_err_set(p->err, -E2BIG,
			    "line %d: nesting depth exceeded (%d levels)", line,
			    TP_MAX_HEIGHT);
}

static int tp_oom(tparse *p)
{
	return taco_err_set(p->err, -ENOMEM, "out of memory");
}

static ttok *cur(tparse *p)
{
	return &p->toks[p->pos];
}

static ttok *look(tparse *p)
{
	return p->pos + 1 < p->ntoks ? &p->toks[p->pos + 1]
				     : &p->toks[p->ntoks - 1];
}

static void next(tparse *p)
{
	if (p->pos + 1 < p->ntoks)
		p->pos++;
}

static int is_op(const ttok *t, int op)
{
	return t->type == T_OP && t->op == op;
}

static int is_name(const ttok *t, const char *name)
{
	size_t n = strlen(name);

	return t->type == T_NAME && t->n == n && !memcmp(t->s, name, n);
}

static const char *op_text(int op)
{
	static const char *const s[] = {"+",  "-",  "/", "//", "*", "%",  "**",
					"~",  "[",  "]", "(",  ")", "{",  "}",
					"==", "!=", ">", ">=", "<", "<=", "=",
					".",  ":",  "|", ",",  ";"};
	return s[op];
}

/* jinja2's describe_token */
static void describe(const ttok *t, char *buf, size_t cap)
{
	switch (t->type) {
	case T_NAME:
		snprintf(buf, cap, "%.*s", (int)(t->n > 60 ? 60 : t->n),
			 t->s ? t->s : "");
		return;
	case T_OP:
		snprintf(buf, cap, "%s", op_text(t->op));
		return;
	case T_EOF:
		snprintf(buf, cap, "end of template");
		return;
	case T_DATA:
		snprintf(buf, cap, "template data / text");
		return;
	case T_VAR_BEGIN:
		snprintf(buf, cap, "begin of print statement");
		return;
	case T_VAR_END:
		snprintf(buf, cap, "end of print statement");
		return;
	case T_BLOCK_BEGIN:
		snprintf(buf, cap, "begin of statement block");
		return;
	case T_BLOCK_END:
		snprintf(buf, cap, "end of statement block");
		return;
	case T_STRING:
		snprintf(buf, cap, "string");
		return;
	case T_INT:
		snprintf(buf, cap, "integer");
		return;
	default:
		snprintf(buf, cap, "float");
		return;
	}
}

static int tp_unexpected(tparse *p, const ttok *t)
{
	char d[80];

	if (t->type == T_EOF)
		return tp_fail(p, t->line, "unexpected end of template");
	describe(t, d, sizeof(d));
	return tp_fail(p, t->line, "unexpected '%s'", d);
}

static int expect_op(tparse *p, int op)
{
	char d[80];

	if (is_op(cur(p), op)) {
		next(p);
		return 0;
	}
	if (cur(p)->type == T_EOF)
		return tp_fail(p, cur(p)->line,
			       "unexpected end of template, expected '%s'",
			       op_text(op));
	describe(cur(p), d, sizeof(d));
	return tp_fail(p, cur(p)->line, "expected token '%s', got '%s'",
		       op_text(op), d);
}

static int expect_type(tparse *p, int type)
{
	ttok want = {0};
	char d[80], w[80];

	if (cur(p)->type == type) {
		next(p);
		return 0;
	}
	want.type = (uint8_t)type;
	describe(&want, w, sizeof(w));
	if (cur(p)->type == T_EOF)
		return tp_fail(p, cur(p)->line,
			       "unexpected end of template, expected '%s'", w);
	describe(cur(p), d, sizeof(d));
	return tp_fail(p, cur(p)->line, "expected token '%s', got '%s'", w, d);
}

/* ---- names --------------------------------------------------------- */

static uint32_t tp_hash(const char *s, size_t n)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 16777619u;
	return h;
}

static int tp_intern(tparse *p, const char *s, size_t n)
{
	uint32_t h;
	int slot;

	if (p->nnames * 2 >= p->hcap) {
		int cap = p->hcap ? p->hcap * 2 : 256;
		int *nh = malloc((size_t)cap * sizeof(*nh));

		if (!nh)
			return -1;
		for (int i = 0; i < cap; i++)
			nh[i] = -1;
		for (int i = 0; i < p->nnames; i++) {
			h = tp_hash(p->names[i].s, p->names[i].n) &
			    (uint32_t)(cap - 1);
			while (nh[h] >= 0)
				h = (h + 1) & (uint32_t)(cap - 1);
			nh[h] = i;
		}
		free(p->hash);
		p->hash = nh;
		p->hcap = cap;
	}
	h = tp_hash(s, n) & (uint32_t)(p->hcap - 1);
	while ((slot = p->hash[h]) >= 0) {
		if (p->names[slot].n == n && !memcmp(p->names[slot].s, s, n))
			return slot;
		h = (h + 1) & (uint32_t)(p->hcap - 1);
	}
	if (p->nnames == p->capnames) {
		int cap = p->capnames ? p->capnames * 2 : 64;
		tname *nn = realloc(p->names, (size_t)cap * sizeof(*nn));

		if (!nn)
			return -1;
		p->names = nn;
		p->capnames = cap;
	}
	p->names[p->nnames].s = s;
	p->names[p->nnames].n = (uint32_t)n;
	p->hash[h] = p->nnames;
	return p->nnames++;
}

/* ---- nodes --------------------------------------------------------- */

static tnode *mk(tparse *p, int kind, int line)
{
	tnode *n = ta_alloc(p->a, sizeof(*n));

	if (!n)
		return NULL;
	memset(n, 0, sizeof(*n));
	n->kind = (uint8_t)kind;
	n->line = line;
	n->id = -1;
	return n;
}

/* a growing array of nodes while parsing (malloc'd) */
typedef struct nvec {
	tnode **v;
	int n, cap;
} nvec;

static int nv_push(nvec *v, tnode *n)
{
	if (v->n == v->cap) {
		int cap = v->cap ? v->cap * 2 : 8;
		tnode **nv = realloc(v->v, (size_t)cap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		v->v = nv;
		v->cap = cap;
	}
	v->v[v->n++] = n;
	return 0;
}

/* moves the vector into the arena */
static int nv_take(tparse *p, nvec *v, tnode ***out, int *n)
{
	*out = NULL;
	*n = v->n;
	if (v->n) {
		*out = ta_alloc(p->a, (size_t)v->n * sizeof(tnode *));
		if (!*out) {
			free(v->v);
			v->v = NULL;
			return tp_oom(p);
		}
		memcpy(*out, v->v, (size_t)v->n * sizeof(tnode *));
	}
	free(v->v);
	v->v = NULL;
	v->n = v->cap = 0;
	return 0;
}

/* The height of n from its children; an error past TP_MAX_HEIGHT, so
 * that nothing that walks the tree recurses without bound. */
static int tp_seal(tparse *p, tnode *n)
{
	int h = 0;

#define TP_H(x)                                                                \
	do {                                                                   \
		if ((x) && (x)->h > h)                                         \
			h = (x)->h;                                            \
	} while (0)
	TP_H(n->a);
	TP_H(n->b);
	TP_H(n->c);
	TP_H(n->d);
	for (int i = 0; i < n->nkids; i++)
		TP_H(n->kids[i]);
	for (int i = 0; i < n->nkw; i++)
		TP_H(n->kw[i].val);
	for (int i = 0; i < n->ndflt; i++)
		TP_H(n->dflt[i]);
#undef TP_H
	n->h = (uint16_t)(h + 1);
	/* never constant: a name, a call, or an operand that is (but the
	 * operands and branches that short-circuits may skip) */
	if (n->kind == N_NAME || n->kind == N_CALL || n->kind == N_NSREF) {
		n->flags |= NF_DYNAMIC;
	} else if (n->kind == N_AND || n->kind == N_OR ||
		   n->kind == N_CONDEXPR) {
		if (n->a && (n->a->flags & NF_DYNAMIC))
			n->flags |= NF_DYNAMIC;
	} else {
		if ((n->a && (n->a->flags & NF_DYNAMIC)) ||
		    (n->b && (n->b->flags & NF_DYNAMIC)) ||
		    (n->c && (n->c->flags & NF_DYNAMIC)) ||
		    (n->d && (n->d->flags & NF_DYNAMIC)))
			n->flags |= NF_DYNAMIC;
		for (int i = 0; i < n->nkids; i++)
			if (n->kids[i]->flags & NF_DYNAMIC)
				n->flags |= NF_DYNAMIC;
		for (int i = 0; i < n->nkw; i++)
			if (n->kw[i].val->flags & NF_DYNAMIC)
				n->flags |= NF_DYNAMIC;
	}
	if (n->h > TP_MAX_HEIGHT)
		return tp_limit(p, n->line);
	return 0;
}

/* ---- expressions --------------------------------------------------- */

static int parse_expression(tparse *p, int with_condexpr, tnode **out);
static int parse_tuple(tparse *p, int simplified, int with_condexpr,
		       const char *extra_end, int explicit_paren,
		       int with_namespace, tnode **out);
static int parse_unary(tparse *p, int with_filter, tnode **out);
static int parse_primary(tparse *p, int with_namespace, tnode **out);
static int parse_postfix(tparse *p, tnode **node);
static int parse_filter(tparse *p, tnode **node, int start_inline);

static int tp_enter(tparse *p)
{
	if (++p->depth > TP_MAX_HEIGHT)
		return tp_limit(p, cur(p)->line);
	return 0;
}

static int parse_condexpr(tparse *p, tnode **out);

static int parse_or(tparse *p, tnode **out);

static int parse_binary_chain(tparse *p, tnode **out, int level);

static int parse_call_args(tparse *p, tnode *call)
{
	nvec args = {0};
	tkw *kw = NULL;
	int nkw = 0, capkw = 0, e = 0, line = cur(p)->line, need_comma = 0;

	if ((e = expect_op(p, TO_LPAREN)))
		return e;
	while (!is_op(cur(p), TO_RPAREN)) {
		tnode *v;

		if (need_comma) {
			if ((e = expect_op(p, TO_COMMA)))
				goto out;
			if (is_op(cur(p), TO_RPAREN))
				break;
		}
		if (is_op(cur(p), TO_MUL) || is_op(cur(p), TO_POW)) {
			e = tp_fail(p, cur(p)->line,
				    "*args and **kwargs in a call are not "
				    "supported");
			goto out;
		}
		if (cur(p)->type == T_NAME && is_op(look(p), TO_ASSIGN)) {
			const ttok *name = cur(p);

			next(p);
			next(p);
			if ((e = parse_expression(p, 1, &v)))
				goto out;
			if (nkw == capkw) {
				int cap = capkw ? capkw * 2 : 4;
				tkw *nk =
				    realloc(kw, (size_t)cap * sizeof(*nk));

				if (!nk) {
					e = tp_oom(p);
					goto out;
				}
				kw = nk;
				capkw = cap;
			}
			kw[nkw].name = name->s;
			kw[nkw].n = name->n;
			kw[nkw].val = v;
			nkw++;
		} else {
			if (nkw) {
				e = tp_fail(p, line,
					    "invalid syntax for "
					    "function call expression");
				goto out;
			}
			if ((e = parse_expression(p, 1, &v)))
				goto out;
			if ((e = nv_push(&args, v))) {
				e = tp_oom(p);
				goto out;
			}
		}
		need_comma = 1;
	}
	if ((e = expect_op(p, TO_RPAREN)))
		goto out;
	if ((e = nv_take(p, &args, &call->kids, &call->nkids)))
		goto out;
	if (nkw) {
		call->kw = ta_alloc(p->a, (size_t)nkw * sizeof(tkw));
		if (!call->kw) {
			e = tp_oom(p);
			goto out;
		}
		memcpy(call->kw, kw, (size_t)nkw * sizeof(tkw));
		call->nkw = nkw;
	}
out:
	free(args.v);
	free(kw);
	return e;
}

/* filter or test name: dotted names are joined (and unknown) */
static int parse_dotted(tparse *p, const char **s, uint32_t *n)
{
	const ttok *t = cur(p);
	char *buf;
	size_t len;
	int e;

	if (t->type != T_NAME)
		return expect_type(p, T_NAME);
	*s = t->s;
	*n = t->n;
	next(p);
	while (is_op(cur(p), TO_DOT)) {
		next(p);
		if (cur(p)->type != T_NAME)
			return (e = expect_type(p, T_NAME));
		len = *n + 1 + cur(p)->n;
		buf = ta_alloc(p->a, len);
		if (!buf)
			return tp_oom(p);
		memcpy(buf, *s, *n);
		buf[*n] = '.';
		memcpy(buf + *n + 1, cur(p)->s, cur(p)->n);
		*s = buf;
		*n = (uint32_t)len;
		next(p);
	}
	return 0;
}

static int parse_filter(tparse *p, tnode **node, int start_inline)
{
	int e;

	while (is_op(cur(p), TO_PIPE) || start_inline) {
		int line, supported = 1;
		tnode *f;

		if (!start_inline)
			next(p);
		start_inline = 0;
		line = cur(p)->line;
		f = mk(p, N_FILTER, line);
		if (!f)
			return tp_oom(p);
		if ((e = parse_dotted(p, &f->str, &f->slen)))
			return e;
		f->id = tf_lookup(f->str, f->slen, &supported);
		if (f->id >= 0 && !supported)
			f->flags |= NF_UNSUPPORTED;
		f->a = *node;
		if (is_op(cur(p), TO_LPAREN) && (e = parse_call_args(p, f)))
			return e;
		if ((e = tp_seal(p, f)))
			return e;
		*node = f;
	}
	return 0;
}

static int parse_test(tparse *p, tnode **node)
{
	int line = cur(p)->line, negated = 0, e, supported = 1;
	tnode *t, *arg;
	const ttok *c;

	next(p); /* is */
	if (is_name(cur(p), "not")) {
		next(p);
		negated = 1;
	}
	t = mk(p, N_TEST, line);
	if (!t)
		return tp_oom(p);
	if ((e = parse_dotted(p, &t->str, &t->slen)))
		return e;
	t->id = tt_lookup(t->str, t->slen, &supported);
	if (t->id >= 0 && !supported)
		t->flags |= NF_UNSUPPORTED;
	t->a = *node;
	c = cur(p);
	if (is_op(c, TO_LPAREN)) {
		if ((e = parse_call_args(p, t)))
			return e;
	} else if ((c->type == T_NAME || c->type == T_STRING ||
		    c->type == T_INT || c->type == T_FLOAT ||
		    is_op(c, TO_LBRACKET) || is_op(c, TO_LBRACE)) &&
		   !is_name(c, "else") && !is_name(c, "or") &&
		   !is_name(c, "and")) {
		if (is_name(c, "is"))
			return tp_fail(p, c->line,
				       "You cannot chain multiple "
				       "tests with is");
		if ((e = parse_primary(p, 0, &arg)) ||
		    (e = parse_postfix(p, &arg)))
			return e;
		t->kids = ta_alloc(p->a, sizeof(tnode *));
		if (!t->kids)
			return tp_oom(p);
		t->kids[0] = arg;
		t->nkids = 1;
	}
	if ((e = tp_seal(p, t)))
		return e;
	if (negated) {
		tnode *n = mk(p, N_NOT, line);

		if (!n)
			return tp_oom(p);
		n->a = t;
		if ((e = tp_seal(p, n)))
			return e;
		t = n;
	}
	*node = t;
	return 0;
}

static int parse_call(tparse *p, tnode **node)
{
	tnode *c = mk(p, N_CALL, cur(p)->line);
	int e;

	if (!c)
		return tp_oom(p);
	c->a = *node;
	if ((e = parse_call_args(p, c)) || (e = tp_seal(p, c)))
		return e;
	*node = c;
	return 0;
}

/* [a], [a:b:c] and tuples of them */
static int parse_subscribed(tparse *p, tnode **out)
{
	int line = cur(p)->line, e;
	tnode *parts[3] = {NULL, NULL, NULL}, *s;

	if (is_op(cur(p), TO_COLON)) {
		next(p);
	} else {
		if ((e = parse_expression(p, 1, &parts[0])))
			return e;
		if (!is_op(cur(p), TO_COLON)) {
			*out = parts[0];
			return 0;
		}
		next(p);
	}
	if (!is_op(cur(p), TO_COLON) && !is_op(cur(p), TO_RBRACKET) &&
	    !is_op(cur(p), TO_COMMA) && (e = parse_expression(p, 1, &parts[1])))
		return e;
	if (is_op(cur(p), TO_COLON)) {
		next(p);
		if (!is_op(cur(p), TO_RBRACKET) && !is_op(cur(p), TO_COMMA) &&
		    (e = parse_expression(p, 1, &parts[2])))
			return e;
	}
	s = mk(p, N_SLICE, line);
	if (!s)
		return tp_oom(p);
	s->b = parts[0];
	s->c = parts[1];
	s->d = parts[2];
	*out = s;
	return 0;
}

static int parse_subscript(tparse *p, tnode **node)
{
	const ttok *t = cur(p);
	int line = t->line, e;
	tnode *n;

	next(p);
	if (t->type == T_OP && t->op == TO_DOT) {
		const ttok *a = cur(p);

		next(p);
		if (a->type == T_NAME) {
			n = mk(p, N_GETATTR, line);
			if (!n)
				return tp_oom(p);
			n->a = *node;
			n->str = a->s;
			n->slen = a->n;
			n->id = tm_lookup(a->s, a->n);
		} else if (a->type == T_INT) {
			n = mk(p, N_GETITEM, line);
			if (!n)
				return tp_oom(p);
			n->a = *node;
			n->b = mk(p, N_CONST, a->line);
			if (!n->b)
				return tp_oom(p);
			n->b->cval = tv_int(a->i);
		} else {
			return tp_fail(p, a->line, "expected name or number");
		}
	} else {
		nvec args = {0};
		tnode *arg = NULL;

		while (!is_op(cur(p), TO_RBRACKET)) {
			if (args.n && (e = expect_op(p, TO_COMMA))) {
				free(args.v);
				return e;
			}
			if ((e = parse_subscribed(p, &arg))) {
				free(args.v);
				return e;
			}
			if (nv_push(&args, arg)) {
				free(args.v);
				return tp_oom(p);
			}
		}
		if ((e = expect_op(p, TO_RBRACKET))) {
			free(args.v);
			return e;
		}
		if (args.n == 1 && args.v[0]->kind == N_SLICE) {
			n = args.v[0];
			n->a = *node;
			free(args.v);
		} else {
			n = mk(p, N_GETITEM, line);
			if (!n) {
				free(args.v);
				return tp_oom(p);
			}
			n->a = *node;
			if (args.n == 1) {
				n->b = args.v[0];
				free(args.v);
			} else {
				tnode *tup = mk(p, N_TUPLE, line);

				if (!tup) {
					free(args.v);
					return tp_oom(p);
				}
				for (int i = 0; i < args.n; i++)
					if (args.v[i]->kind == N_SLICE) {
						free(args.v);
						return tp_fail(
						    p, line,
						    "slices in a tuple "
						    "subscript "
						    "are not supported");
					}
				if ((e = nv_take(p, &args, &tup->kids,
						 &tup->nkids)) ||
				    (e = tp_seal(p, tup)))
					return e;
				n->b = tup;
			}
		}
	}
	if ((e = tp_seal(p, n)))
		return e;
	*node = n;
	return 0;
}

static int parse_postfix(tparse *p, tnode **node)
{
	int e;

	for (;;) {
		if (is_op(cur(p), TO_DOT) || is_op(cur(p), TO_LBRACKET))
			e = parse_subscript(p, node);
		else if (is_op(cur(p), TO_LPAREN))
			e = parse_call(p, node);
		else
			return 0;
		if (e)
			return e;
	}
}

static int parse_filter_expr(tparse *p, tnode **node)
{
	int e;

	for (;;) {
		if (is_op(cur(p), TO_PIPE))
			e = parse_filter(p, node, 0);
		else if (is_name(cur(p), "is"))
			e = parse_test(p, node);
		else if (is_op(cur(p), TO_LPAREN))
			e = parse_call(p, node);
		else
			return 0;
		if (e)
			return e;
	}
}

static int parse_list_or_dict(tparse *p, int dict, tnode **out)
{
	int line = cur(p)->line, e;
	nvec items = {0};
	tnode *n, *k, *v;
	int close = dict ? TO_RBRACE : TO_RBRACKET;

	next(p);
	while (!is_op(cur(p), close)) {
		if (items.n && (e = expect_op(p, TO_COMMA)))
			goto fail;
		if (is_op(cur(p), close))
			break;
		if ((e = parse_expression(p, 1, &k)))
			goto fail;
		if (nv_push(&items, k)) {
			e = tp_oom(p);
			goto fail;
		}
		if (dict) {
			if ((e = expect_op(p, TO_COLON)) ||
			    (e = parse_expression(p, 1, &v)))
				goto fail;
			if (nv_push(&items, v)) {
				e = tp_oom(p);
				goto fail;
			}
		}
	}
	if ((e = expect_op(p, close)))
		goto fail;
	n = mk(p, dict ? N_DICT : N_LIST, line);
	if (!n) {
		e = tp_oom(p);
		goto fail;
	}
	if ((e = nv_take(p, &items, &n->kids, &n->nkids)) ||
	    (e = tp_seal(p, n)))
		return e;
	*out = n;
	return 0;
fail:
	free(items.v);
	return e;
}

static int parse_primary(tparse *p, int with_namespace, tnode **out)
{
	const ttok *t = cur(p);
	tnode *n;
	int e;

	if ((e = tp_enter(p)))
		return e;
	if (t->type == T_NAME) {
		next(p);
		n = mk(p, N_CONST, t->line);
		if (!n)
			return tp_oom(p);
		if (is_name(t, "true") || is_name(t, "True")) {
			n->cval = tv_bool(1);
		} else if (is_name(t, "false") || is_name(t, "False")) {
			n->cval = tv_bool(0);
		} else if (is_name(t, "none") || is_name(t, "None")) {
			n->cval = tv_none();
		} else if (with_namespace && is_op(cur(p), TO_DOT)) {
			next(p);
			if (cur(p)->type != T_NAME)
				return expect_type(p, T_NAME);
			n->kind = N_NSREF;
			n->id = tp_intern(p, t->s, t->n);
			n->str = cur(p)->s;
			n->slen = cur(p)->n;
			next(p);
		} else {
			n->kind = N_NAME;
			n->id = tp_intern(p, t->s, t->n);
		}
		if (n->id < -1 || (n->kind != N_CONST && n->id < 0))
			return tp_oom(p);
	} else if (t->type == T_STRING) {
		size_t len = 0;
		char *buf;
		int first = p->pos;

		while (cur(p)->type == T_STRING) {
			len += cur(p)->n;
			next(p);
		}
		n = mk(p, N_CONST, t->line);
		if (!n)
			return tp_oom(p);
		if (p->pos - first == 1) {
			n->cval = tv_str(t->s, t->n);
		} else {
			buf = ta_alloc(p->a, len + 1);
			if (!buf)
				return tp_oom(p);
			len = 0;
			for (int i = first; i < p->pos; i++) {
				memcpy(buf + len, p->toks[i].s, p->toks[i].n);
				len += p->toks[i].n;
			}
			n->cval = tv_str(buf, len);
		}
	} else if (t->type == T_INT || t->type == T_FLOAT) {
		next(p);
		n = mk(p, N_CONST, t->line);
		if (!n)
			return tp_oom(p);
		n->cval = t->type == T_INT ? tv_int(t->i) : tv_float(t->d);
	} else if (is_op(t, TO_LPAREN)) {
		next(p);
		if ((e = parse_tuple(p, 0, 1, NULL, 1, 0, &n)) ||
		    (e = expect_op(p, TO_RPAREN)))
			return e;
	} else if (is_op(t, TO_LBRACKET)) {
		if ((e = parse_list_or_dict(p, 0, &n)))
			return e;
	} else if (is_op(t, TO_LBRACE)) {
		if ((e = parse_list_or_dict(p, 1, &n)))
			return e;
	} else {
		return tp_unexpected(p, t);
	}
	p->depth--;
	*out = n;
	return 0;
}

static int parse_unary(tparse *p, int with_filter, tnode **out)
{
	const ttok *t = cur(p);
	tnode *n;
	int e;

	if (is_op(t, TO_SUB) || is_op(t, TO_ADD)) {
		next(p);
		n = mk(p, is_op(t, TO_SUB) ? N_NEG : N_POS, t->line);
		if (!n)
			return tp_oom(p);
		if ((e = tp_enter(p)) || (e = parse_unary(p, 0, &n->a)) ||
		    (e = tp_seal(p, n)))
			return e;
		p->depth--;
	} else if ((e = parse_primary(p, 0, &n))) {
		return e;
	}
	if ((e = parse_postfix(p, &n)))
		return e;
	if (with_filter && (e = parse_filter_expr(p, &n)))
		return e;
	*out = n;
	return 0;
}

static tnode *mk_bin(tparse *p, int kind, int op, int line, tnode *a, tnode *b)
{
	tnode *n = mk(p, kind, line);

	if (!n)
		return NULL;
	n->op = (uint8_t)op;
	n->a = a;
	n->b = b;
	return n;
}

/* pow (level 0), math2 (1), concat (2), math1 (3) */
static int parse_binary_chain(tparse *p, tnode **out, int level)
{
	int line = cur(p)->line, e;
	tnode *left, *right, *n;

	e = level ? parse_binary_chain(p, &left, level - 1)
		  : parse_unary(p, 1, &left);
	if (e)
		return e;
	if (level == 2) { /* concat: one node of all operands */
		nvec args = {0};

		if (!is_op(cur(p), TO_TILDE)) {
			*out = left;
			return 0;
		}
		if (nv_push(&args, left))
			return tp_oom(p);
		while (is_op(cur(p), TO_TILDE)) {
			next(p);
			if ((e = parse_binary_chain(p, &right, 1)) ||
			    (e = nv_push(&args, right) ? tp_oom(p) : 0)) {
				free(args.v);
				return e;
			}
		}
		n = mk(p, N_CONCAT, line);
		if (!n) {
			free(args.v);
			return tp_oom(p);
		}
		if ((e = nv_take(p, &args, &n->kids, &n->nkids)) ||
		    (e = tp_seal(p, n)))
			return e;
		*out = n;
		return 0;
	}
	for (;;) {
		const ttok *t = cur(p);
		int op;

		if (t->type != T_OP)
			break;
		if (level == 0 && t->op == TO_POW)
			op = OP_POW;
		else if (level == 1 && t->op == TO_MUL)
			op = OP_MUL;
		else if (level == 1 && t->op == TO_DIV)
			op = OP_DIV;
		else if (level == 1 && t->op == TO_FLOORDIV)
			op = OP_FLOORDIV;
		else if (level == 1 && t->op == TO_MOD)
			op = OP_MOD;
		else if (level == 3 && t->op == TO_ADD)
			op = OP_ADD;
		else if (level == 3 && t->op == TO_SUB)
			op = OP_SUB;
		else
			break;
		next(p);
		e = level ? parse_binary_chain(p, &right, level - 1)
			  : parse_unary(p, 1, &right);
		if (e)
			return e;
		n = mk_bin(p, N_BINOP, op, line, left, right);
		if (!n)
			return tp_oom(p);
		if ((e = tp_seal(p, n)))
			return e;
		left = n;
		line = cur(p)->line;
	}
	*out = left;
	return 0;
}

static int parse_compare(tparse *p, tnode **out)
{
	int line = cur(p)->line, e;
	tnode *expr, *operand;
	nvec ops = {0};

	if ((e = parse_binary_chain(p, &expr, 3)))
		return e;
	for (;;) {
		const ttok *t = cur(p);
		int op = -1;

		if (t->type == T_OP) {
			switch (t->op) {
			case TO_EQ:
				op = CMP_EQ;
				break;
			case TO_NE:
				op = CMP_NE;
				break;
			case TO_LT:
				op = CMP_LT;
				break;
			case TO_LTEQ:
				op = CMP_LE;
				break;
			case TO_GT:
				op = CMP_GT;
				break;
			case TO_GTEQ:
				op = CMP_GE;
				break;
			default:
				break;
			}
			if (op >= 0)
				next(p);
		} else if (is_name(t, "in")) {
			op = CMP_IN;
			next(p);
		} else if (is_name(t, "not") && is_name(look(p), "in")) {
			op = CMP_NOTIN;
			next(p);
			next(p);
		}
		if (op < 0)
			break;
		operand = mk(p, N_OPERAND, t->line);
		if (!operand) {
			free(ops.v);
			return tp_oom(p);
		}
		operand->op = (uint8_t)op;
		if ((e = parse_binary_chain(p, &operand->a, 3)) ||
		    (e = tp_seal(p, operand))) {
			free(ops.v);
			return e;
		}
		if (nv_push(&ops, operand)) {
			free(ops.v);
			return tp_oom(p);
		}
		line = cur(p)->line;
	}
	if (!ops.n) {
		*out = expr;
		return 0;
	}
	*out = mk(p, N_COMPARE, line);
	if (!*out) {
		free(ops.v);
		return tp_oom(p);
	}
	(*out)->a = expr;
	if ((e = nv_take(p, &ops, &(*out)->kids, &(*out)->nkids)))
		return e;
	return tp_seal(p, *out);
}

static int parse_not(tparse *p, tnode **out)
{
	int e;

	if (is_name(cur(p), "not")) {
		tnode *n = mk(p, N_NOT, cur(p)->line);

		if (!n)
			return tp_oom(p);
		next(p);
		if ((e = tp_enter(p)) || (e = parse_not(p, &n->a)) ||
		    (e = tp_seal(p, n)))
			return e;
		p->depth--;
		*out = n;
		return 0;
	}
	return parse_compare(p, out);
}

static int parse_andor(tparse *p, tnode **out, int is_or)
{
	int line = cur(p)->line, e;
	tnode *left, *right, *n;

	e = is_or ? parse_andor(p, &left, 0) : parse_not(p, &left);
	if (e)
		return e;
	while (is_name(cur(p), is_or ? "or" : "and")) {
		next(p);
		e = is_or ? parse_andor(p, &right, 0) : parse_not(p, &right);
		if (e)
			return e;
		n = mk_bin(p, is_or ? N_OR : N_AND, 0, line, left, right);
		if (!n)
			return tp_oom(p);
		if ((e = tp_seal(p, n)))
			return e;
		left = n;
		line = cur(p)->line;
	}
	*out = left;
	return 0;
}

static int parse_or(tparse *p, tnode **out)
{
	return parse_andor(p, out, 1);
}

static int parse_condexpr(tparse *p, tnode **out)
{
	int line = cur(p)->line, e;
	tnode *expr1, *n;

	if ((e = parse_or(p, &expr1)))
		return e;
	while (is_name(cur(p), "if")) {
		next(p);
		n = mk(p, N_CONDEXPR, line);
		if (!n)
			return tp_oom(p);
		n->b = expr1;
		if ((e = parse_or(p, &n->a)))
			return e;
		if (is_name(cur(p), "else")) {
			next(p);
			if ((e = tp_enter(p)) || (e = parse_condexpr(p, &n->c)))
				return e;
			p->depth--;
		}
		if ((e = tp_seal(p, n)))
			return e;
		expr1 = n;
		line = cur(p)->line;
	}
	*out = expr1;
	return 0;
}

static int parse_expression(tparse *p, int with_condexpr, tnode **out)
{
	return with_condexpr ? parse_condexpr(p, out) : parse_or(p, out);
}

static int is_tuple_end(tparse *p, const char *extra_end)
{
	const ttok *t = cur(p);

	if (t->type == T_VAR_END || t->type == T_BLOCK_END ||
	    is_op(t, TO_RPAREN))
		return 1;
	return extra_end && is_name(t, extra_end);
}

static int parse_tuple(tparse *p, int simplified, int with_condexpr,
		       const char *extra_end, int explicit_paren,
		       int with_namespace, tnode **out)
{
	int line = cur(p)->line, is_tuple = 0, e;
	nvec args = {0};
	tnode *n;

	for (;;) {
		if (args.n && (e = expect_op(p, TO_COMMA)))
			goto fail;
		if (is_tuple_end(p, extra_end))
			break;
		e = simplified ? parse_primary(p, with_namespace, &n)
			       : parse_expression(p, with_condexpr, &n);
		if (e)
			goto fail;
		if (nv_push(&args, n)) {
			e = tp_oom(p);
			goto fail;
		}
		if (is_op(cur(p), TO_COMMA))
			is_tuple = 1;
		else
			break;
		line = cur(p)->line;
	}
	if (!is_tuple) {
		if (args.n) {
			*out = args.v[0];
			free(args.v);
			return 0;
		}
		if (!explicit_paren) {
			char d[80];

			describe(cur(p), d, sizeof(d));
			e = tp_fail(p, cur(p)->line,
				    "Expected an expression, got '%s'", d);
			goto fail;
		}
	}
	n = mk(p, N_TUPLE, line);
	if (!n) {
		e = tp_oom(p);
		goto fail;
	}
	if ((e = nv_take(p, &args, &n->kids, &n->nkids)) || (e = tp_seal(p, n)))
		return e;
	*out = n;
	return 0;
fail:
	free(args.v);
	return e;
}

/* ---- statements ---------------------------------------------------- */

static int subparse(tparse *p, const char *const *end_tags, tnode **body);

/* checks an assignment target: names, ns.attr and tuples of them */
static int check_target(tparse *p, const tnode *t, int nsref_ok)
{
	if (t->kind == N_NAME)
		return 0;
	if (t->kind == N_NSREF && nsref_ok)
		return 0;
	if (t->kind == N_TUPLE) {
		for (int i = 0; i < t->nkids; i++) {
			int e = check_target(p, t->kids[i], nsref_ok);

			if (e)
				return e;
		}
		return 0;
	}
	return tp_fail(p, t->line, "can't assign to '%s'",
		       t->kind == N_CONST ? "const" : "expression");
}

static int parse_assign_target(tparse *p, const char *extra_end,
			       int with_namespace, tnode **out)
{
	int e = parse_tuple(p, 1, 1, extra_end, 0, with_namespace, out);

	if (e)
		return e;
	return check_target(p, *out, with_namespace);
}

static int name_only(tparse *p, tnode **out)
{
	const ttok *t = cur(p);

	if (t->type != T_NAME)
		return expect_type(p, T_NAME);
	next(p);
	*out = mk(p, N_NAME, t->line);
	if (!*out)
		return tp_oom(p);
	(*out)->id = tp_intern(p, t->s, t->n);
	return (*out)->id < 0 ? tp_oom(p) : 0;
}

/* the statements up to one of end_tags (the tag left as the current
 * token) after the block_end of the opening tag */
static int parse_statements(tparse *p, const char *const *end_tags,
			    int drop_needle, tnode **body)
{
	int e;

	if (is_op(cur(p), TO_COLON))
		next(p);
	if ((e = expect_type(p, T_BLOCK_END)) ||
	    (e = subparse(p, end_tags, body)))
		return e;
	if (cur(p)->type == T_EOF) {
		char want[200] = "";
		size_t n = 0;

		for (int i = 0; end_tags[i]; i++)
			n += (size_t)snprintf(want + n, sizeof(want) - n,
					      "%s'%s'", i ? " or " : "",
					      end_tags[i]);
		return tp_fail(
		    p, cur(p)->line,
		    "unexpected end of template: looking for %s "
		    "(the innermost block that needs to be closed is "
		    "'%s')",
		    want, p->nopen ? p->open_tags[p->nopen - 1] : "?");
	}
	if (drop_needle)
		next(p);
	return 0;
}

static int parse_signature(tparse *p, tnode *n)
{
	nvec args = {0}, dflt = {0};
	int e;

	if ((e = expect_op(p, TO_LPAREN)))
		return e;
	while (!is_op(cur(p), TO_RPAREN)) {
		tnode *arg = NULL, *d;

		if (args.n && (e = expect_op(p, TO_COMMA)))
			goto fail;
		if ((e = name_only(p, &arg)))
			goto fail;
		if (is_op(cur(p), TO_ASSIGN)) {
			next(p);
			if ((e = parse_expression(p, 1, &d)))
				goto fail;
			if (nv_push(&dflt, d)) {
				e = tp_oom(p);
				goto fail;
			}
		} else if (dflt.n) {
			e = tp_fail(p, cur(p)->line,
				    "non-default argument "
				    "follows default argument");
			goto fail;
		}
		if (nv_push(&args, arg)) {
			e = tp_oom(p);
			goto fail;
		}
	}
	if ((e = expect_op(p, TO_RPAREN)))
		goto fail;
	if ((e = nv_take(p, &args, &n->kids, &n->nkids)))
		goto fail;
	return nv_take(p, &dflt, &n->dflt, &n->ndflt);
fail:
	free(args.v);
	free(dflt.v);
	return e;
}

static int tp_find_names(const tnode *n, int id);

static int parse_macro_like(tparse *p, tnode *n, const char *end)
{
	const char *ends[] = {end, NULL};
	int loops = p->loops, capture = p->capture, e;

	p->loops = 0;
	p->capture = 0;
	p->funcs++;
	e = parse_statements(p, ends, 1, &n->d);
	p->funcs--;
	p->loops = loops;
	p->capture = capture;
	return e;
}

/* seals an if and its elif chain from the chain's end (off the stack:
 * parse_stmt recurses) */
static int seal_elifs(tparse *p, tnode *n, int line)
{
	tnode **chain = malloc((TP_MAX_HEIGHT + 1) * sizeof(*chain));
	int k = 0, e = 0;

	if (!chain)
		return tp_oom(p);
	for (tnode *c = n; c && c->kind == N_IF && k <= TP_MAX_HEIGHT; c = c->b)
		chain[k++] = c;
	if (k > TP_MAX_HEIGHT)
		e = tp_limit(p, line);
	while (!e && k--)
		e = tp_seal(p, chain[k]);
	free(chain);
	return e;
}

static int parse_stmt(tparse *p, tnode **out)
{
	const ttok *t = cur(p);
	int line = t->line, e = 0;
	tnode *n;
	char name[32];

	if (t->type != T_NAME)
		return tp_fail(p, line, "tag name expected");
	snprintf(name, sizeof(name), "%.*s", (int)(t->n > 20 ? 20 : t->n),
		 t->s);
	if ((e = tp_enter(p)))
		return e;
	p->open_tags[p->nopen++] = is_name(t, "for")	      ? "for"
				   : is_name(t, "if")	      ? "if"
				   : is_name(t, "macro")      ? "macro"
				   : is_name(t, "set")	      ? "set"
				   : is_name(t, "call")	      ? "call"
				   : is_name(t, "filter")     ? "filter"
				   : is_name(t, "with")	      ? "with"
				   : is_name(t, "generation") ? "generation"
							      : "?";
	n = mk(p, N_BODY, line);
	if (!n)
		return tp_oom(p);
	if (is_name(t, "for")) {
		static const char *const ends1[] = {"endfor", "else", NULL};
		static const char *const ends2[] = {"endfor", NULL};
		int capture = p->capture;

		next(p);
		n->kind = N_FOR;
		if ((e = parse_assign_target(p, "in", 0, &n->a)))
			return e;
		if (!is_name(cur(p), "in")) {
			char d[80];

			describe(cur(p), d, sizeof(d));
			return tp_fail(p, cur(p)->line,
				       "expected token 'in', got '%s'", d);
		}
		next(p);
		if ((e = parse_tuple(p, 0, 0, "recursive", 0, 0, &n->b)))
			return e;
		if (is_name(cur(p), "if")) {
			next(p);
			if ((e = parse_expression(p, 1, &n->c)))
				return e;
		}
		if (is_name(cur(p), "recursive"))
			return tp_fail(p, cur(p)->line,
				       "recursive for loops are not supported");
		p->loops++;
		p->capture = 0;
		e = parse_statements(p, ends1, 0, &n->d);
		p->loops--;
		p->capture = capture;
		if (e)
			return e;
		/* n->d is the body; move it to kids, else to d */
		n->kids = n->d->kids;
		n->nkids = n->d->nkids;
		n->d = NULL;
		if (is_name(cur(p), "else")) {
			next(p);
			if ((e = parse_statements(p, ends2, 1, &n->d)))
				return e;
		} else {
			next(p);
		}
	} else if (is_name(t, "if")) {
		static const char *const ends1[] = {"elif", "else", "endif",
						    NULL};
		static const char *const ends2[] = {"endif", NULL};
		tnode *node = n, *body;

		next(p);
		n->kind = N_IF;
		for (;;) {
			if ((e = parse_tuple(p, 0, 0, NULL, 0, 0, &node->a)) ||
			    (e = parse_statements(p, ends1, 0, &body)))
				return e;
			node->kids = body->kids;
			node->nkids = body->nkids;
			if (is_name(cur(p), "elif")) {
				tnode *elif = mk(p, N_IF, cur(p)->line);

				if (!elif)
					return tp_oom(p);
				next(p);
				node->b = elif;
				node = elif;
				continue;
			}
			if (is_name(cur(p), "else")) {
				next(p);
				if ((e = parse_statements(p, ends2, 1,
							  &node->b)))
					return e;
			} else {
				next(p);
			}
			break;
		}
		if ((e = seal_elifs(p, n, line)))
			return e;
	} else if (is_name(t, "set")) {
		static const char *const ends[] = {"endset", NULL};

		next(p);
		if ((e = parse_assign_target(p, NULL, 1, &n->a)))
			return e;
		if (is_op(cur(p), TO_ASSIGN)) {
			next(p);
			n->kind = N_SET;
			if ((e = parse_tuple(p, 0, 1, NULL, 0, 0, &n->b)))
				return e;
		} else {
			n->kind = N_SETBLOCK;
			if (n->a->kind == N_TUPLE)
				return tp_fail(p, line,
					       "a block set assigns to "
					       "one name");
			if ((e = parse_filter(p, &n->b, 0)))
				return e;
			p->capture++;
			e = parse_statements(p, ends, 1, &n->d);
			p->capture--;
			if (e)
				return e;
		}
	} else if (is_name(t, "macro")) {
		next(p);
		n->kind = N_MACRO;
		if ((e = name_only(p, &n->a)))
			return e;
		n->id = n->a->id;
		if ((e = parse_signature(p, n)) ||
		    (e = parse_macro_like(p, n, "endmacro")))
			return e;
		if (tp_find_names(n->d, p->t->id_caller))
			n->flags |= NF_CALLER;
		if (tp_find_names(n->d, p->t->id_varargs))
			n->flags |= NF_VARARGS;
		if (tp_find_names(n->d, p->t->id_kwargs))
			n->flags |= NF_KWARGS;
	} else if (is_name(t, "call")) {
		next(p);
		n->kind = N_CALLBLOCK;
		if (is_op(cur(p), TO_LPAREN) && (e = parse_signature(p, n)))
			return e;
		if ((e = parse_expression(p, 1, &n->b)))
			return e;
		if (n->b->kind != N_CALL)
			return tp_fail(p, line, "expected call");
		if ((e = parse_macro_like(p, n, "endcall")))
			return e;
		if (tp_find_names(n->d, p->t->id_caller))
			n->flags |= NF_CALLER;
		if (tp_find_names(n->d, p->t->id_varargs))
			n->flags |= NF_VARARGS;
		if (tp_find_names(n->d, p->t->id_kwargs))
			n->flags |= NF_KWARGS;
	} else if (is_name(t, "filter")) {
		static const char *const ends[] = {"endfilter", NULL};

		next(p);
		n->kind = N_FILTERBLOCK;
		if ((e = parse_filter(p, &n->b, 1)))
			return e;
		p->capture++;
		e = parse_statements(p, ends, 1, &n->d);
		p->capture--;
		if (e)
			return e;
	} else if (is_name(t, "with")) {
		static const char *const ends[] = {"endwith", NULL};
		nvec targets = {0}, values = {0};
		tnode *tg, *v;

		next(p);
		n->kind = N_WITH;
		while (cur(p)->type != T_BLOCK_END) {
			if (targets.n && (e = expect_op(p, TO_COMMA)))
				goto with_fail;
			if ((e = parse_assign_target(p, NULL, 0, &tg)))
				goto with_fail;
			if ((e = expect_op(p, TO_ASSIGN)) ||
			    (e = parse_expression(p, 1, &v)))
				goto with_fail;
			if (nv_push(&targets, tg) || nv_push(&values, v)) {
				e = tp_oom(p);
				goto with_fail;
			}
		}
		n->a = mk(p, N_TUPLE, line);
		n->b = mk(p, N_TUPLE, line);
		if (!n->a || !n->b) {
			e = tp_oom(p);
			goto with_fail;
		}
		if ((e = nv_take(p, &targets, &n->a->kids, &n->a->nkids)) ||
		    (e = nv_take(p, &values, &n->b->kids, &n->b->nkids)) ||
		    (e = tp_seal(p, n->a)) || (e = tp_seal(p, n->b)))
			goto with_fail;
		if ((e = parse_statements(p, ends, 1, &n->d)))
			return e;
		goto with_done;
	with_fail:
		free(targets.v);
		free(values.v);
		return e;
	with_done:;
	} else if (is_name(t, "print")) {
		nvec items = {0};
		tnode *v;

		next(p);
		n->kind = N_OUTPUT;
		while (cur(p)->type != T_BLOCK_END) {
			if (items.n && (e = expect_op(p, TO_COMMA))) {
				free(items.v);
				return e;
			}
			if ((e = parse_expression(p, 1, &v))) {
				free(items.v);
				return e;
			}
			if (nv_push(&items, v)) {
				free(items.v);
				return tp_oom(p);
			}
		}
		if ((e = nv_take(p, &items, &n->kids, &n->nkids)))
			return e;
	} else if (is_name(t, "generation")) {
		static const char *const ends[] = {"endgeneration", NULL};
		int loops = p->loops, capture = p->capture;

		next(p);
		n->kind = N_GENERATION;
		p->loops = 0;
		p->capture = 0;
		p->funcs++;
		e = parse_statements(p, ends, 1, &n->d);
		p->funcs--;
		p->loops = loops;
		p->capture = capture;
		if (e)
			return e;
	} else if (is_name(t, "break") || is_name(t, "continue")) {
		n->kind = is_name(t, "break") ? N_BREAK : N_CONTINUE;
		next(p);
		if (!p->loops)
			return tp_fail(p, line, "'%s' outside loop", name);
		if (p->capture)
			return tp_fail(
			    p, line,
			    "{%% %s %%} inside a set or filter block "
			    "is not supported",
			    name);
	} else if (is_name(t, "block") || is_name(t, "extends") ||
		   is_name(t, "include") || is_name(t, "import") ||
		   is_name(t, "from") || is_name(t, "autoescape")) {
		return tp_fail(p, line, "{%% %s %%} is not supported", name);
	} else {
		return tp_fail(p, line, "Encountered unknown tag '%.*s'.",
			       (int)(t->n > 60 ? 60 : t->n), t->s);
	}
	if ((e = tp_seal(p, n)))
		return e;
	p->nopen--;
	p->depth--;
	*out = n;
	return 0;
}

static int flush_output(tparse *p, nvec *data, nvec *body)
{
	tnode *o;
	int e;

	if (!data->n)
		return 0;
	o = mk(p, N_OUTPUT, data->v[0]->line);
	if (!o)
		return tp_oom(p);
	if ((e = nv_take(p, data, &o->kids, &o->nkids)) || (e = tp_seal(p, o)))
		return e;
	return nv_push(body, o) ? tp_oom(p) : 0;
}

static int is_end_tag(const ttok *t, const char *const *end_tags)
{
	if (!end_tags)
		return 0;
	for (int i = 0; end_tags[i]; i++)
		if (is_name(t, end_tags[i]))
			return 1;
	return 0;
}

static int subparse(tparse *p, const char *const *end_tags, tnode **body)
{
	nvec data = {0}, stmts = {0};
	tnode *b = mk(p, N_BODY, cur(p)->line), *n;
	int e = 0;

	if (!b)
		return tp_oom(p);
	while (cur(p)->type != T_EOF) {
		const ttok *t = cur(p);

		if (t->type == T_DATA) {
			n = mk(p, N_CONST, t->line);
			if (!n) {
				e = tp_oom(p);
				goto out;
			}
			n->cval = tv_str(t->s, t->n);
			next(p);
			if (nv_push(&data, n)) {
				e = tp_oom(p);
				goto out;
			}
		} else if (t->type == T_VAR_BEGIN) {
			next(p);
			if ((e = parse_tuple(p, 0, 1, NULL, 0, 0, &n)) ||
			    (e = expect_type(p, T_VAR_END)))
				goto out;
			if (nv_push(&data, n)) {
				e = tp_oom(p);
				goto out;
			}
		} else if (t->type == T_BLOCK_BEGIN) {
			if ((e = flush_output(p, &data, &stmts)))
				goto out;
			next(p);
			if (is_end_tag(cur(p), end_tags))
				break;
			if ((e = parse_stmt(p, &n)))
				goto out;
			if (nv_push(&stmts, n)) {
				e = tp_oom(p);
				goto out;
			}
			if ((e = expect_type(p, T_BLOCK_END)))
				goto out;
		} else {
			e = tp_unexpected(p, t);
			goto out;
		}
	}
	if ((e = flush_output(p, &data, &stmts)) ||
	    (e = nv_take(p, &stmts, &b->kids, &b->nkids)) ||
	    (e = tp_seal(p, b)))
		goto out;
	*body = b;
out:
	free(data.v);
	free(stmts.v);
	return e;
}

/* ---- after parsing ------------------------------------------------- */

/* 1 when the tree n reads the name id */
static int tp_find_names(const tnode *n, int id)
{
	if (!n)
		return 0;
	if (n->kind == N_NAME && n->id == id)
		return 1;
	if (tp_find_names(n->a, id) || tp_find_names(n->b, id) ||
	    tp_find_names(n->c, id) || tp_find_names(n->d, id))
		return 1;
	for (int i = 0; i < n->nkids; i++)
		if (tp_find_names(n->kids[i], id))
			return 1;
	for (int i = 0; i < n->nkw; i++)
		if (tp_find_names(n->kw[i].val, id))
			return 1;
	for (int i = 0; i < n->ndflt; i++)
		if (tp_find_names(n->dflt[i], id))
			return 1;
	return 0;
}

/* Unknown filters and tests: errors now, unless in an if statement or a
 * conditional expression (jinja2's soft frames), where they fail when
 * they run. */
static int tp_check(tparse *p, tnode *n, int soft)
{
	int e;

	if (!n)
		return 0;
	if ((n->kind == N_FILTER || n->kind == N_TEST) && n->id < 0) {
		if (!soft)
			return tp_fail(p, n->line, "No %s named '%.*s'.",
				       n->kind == N_FILTER ? "filter" : "test",
				       (int)(n->slen > 60 ? 60 : n->slen),
				       n->str);
		n->flags |= NF_SOFT;
	}
	switch (n->kind) {
	case N_IF:
	case N_CONDEXPR:
		soft = 1;
		break;
	case N_FOR:
		if ((e = tp_check(p, n->b, soft)))
			return e;
		if ((e = tp_check(p, n->a, 0)) || (e = tp_check(p, n->c, 0)) ||
		    (e = tp_check(p, n->d, 0)))
			return e;
		for (int i = 0; i < n->nkids; i++)
			if ((e = tp_check(p, n->kids[i], 0)))
				return e;
		return 0;
	case N_MACRO:
	case N_SETBLOCK:
	case N_FILTERBLOCK:
	case N_GENERATION:
		soft = 0;
		break;
	case N_CALLBLOCK:
	case N_WITH:
		if ((e = tp_check(p, n->b, soft)))
			return e;
		soft = 0;
		if ((e = tp_check(p, n->a, 0)) || (e = tp_check(p, n->d, 0)))
			return e;
		for (int i = 0; i < n->nkids; i++)
			if ((e = tp_check(p, n->kids[i], 0)))
				return e;
		for (int i = 0; i < n->ndflt; i++)
			if ((e = tp_check(p, n->dflt[i], 0)))
				return e;
		return 0;
	default:
		break;
	}
	if ((e = tp_check(p, n->a, soft)) || (e = tp_check(p, n->b, soft)) ||
	    (e = tp_check(p, n->c, soft)) || (e = tp_check(p, n->d, soft)))
		return e;
	for (int i = 0; i < n->nkids; i++)
		if ((e = tp_check(p, n->kids[i], soft)))
			return e;
	for (int i = 0; i < n->nkw; i++)
		if ((e = tp_check(p, n->kw[i].val, soft)))
			return e;
	for (int i = 0; i < n->ndflt; i++)
		if ((e = tp_check(p, n->dflt[i], soft)))
			return e;
	return 0;
}

int tp_parse(taco_tmpl *t, ttok *toks, int ntoks, taco_err *err);

int tp_parse(taco_tmpl *t, ttok *toks, int ntoks, taco_err *err)
{
	tparse p;
	int e;

	memset(&p, 0, sizeof(p));
	p.t = t;
	p.a = &t->arena;
	p.toks = toks;
	p.ntoks = ntoks;
	p.err = err;
	t->id_loop = tp_intern(&p, "loop", 4);
	t->id_caller = tp_intern(&p, "caller", 6);
	t->id_varargs = tp_intern(&p, "varargs", 7);
	t->id_kwargs = tp_intern(&p, "kwargs", 6);
	if (t->id_kwargs < 0) {
		e = tp_oom(&p);
		goto out;
	}
	if ((e = subparse(&p, NULL, &t->root)))
		goto out;
	if ((e = tp_check(&p, t->root, 0)))
		goto out;
	t->names = ta_alloc(p.a, (size_t)p.nnames * sizeof(tname));
	if (!t->names) {
		e = tp_oom(&p);
		goto out;
	}
	memcpy(t->names, p.names, (size_t)p.nnames * sizeof(tname));
	t->nnames = p.nnames;
out:
	free(p.names);
	free(p.hash);
	return e;
}
