/* template.c: the public face (template.h): compiling a template's text
 * (newlines normalized and one trailing newline dropped as jinja2 does,
 * then lexed and parsed) and rendering it with a context, every render
 * in an arena of its own that goes at its end. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "template/template.h"
#include "tmpl.h"
#include "util/taco_err.h"

int tp_parse(taco_tmpl *t, ttok *toks, int ntoks, taco_err *err);
int ts_analyze(taco_tmpl *t, taco_err *err);
int tf_fold(taco_tmpl *t, taco_err *err);

int taco_tmpl_compile(const char *src, size_t len, taco_tmpl **out,
		      taco_err *err)
{
	taco_tmpl *t;
	ttok *toks = NULL;
	char *norm;
	size_t n = 0;
	int ntoks = 0, e;

	if (len > TACO_TMPL_MAX_SOURCE)
		return taco_err_set(err, -E2BIG,
				    "the template is %zu bytes (at most %u)",
				    len, TACO_TMPL_MAX_SOURCE);
	if (!tu_valid(src, len))
		return taco_err_set(err, -EINVAL,
				    "the template is not valid UTF-8");
	t = calloc(1, sizeof(*t));
	if (!t)
		return taco_err_set(err, -ENOMEM, "out of memory");
	ta_init(&t->arena, SIZE_MAX);
	norm = ta_alloc(&t->arena, len + 1);
	if (!norm) {
		e = taco_err_set(err, -ENOMEM, "out of memory");
		goto fail;
	}
	/* jinja2: every \r\n, \r and \n is "\n"; one trailing one goes */
	for (size_t i = 0; i < len; i++) {
		if (src[i] == '\r') {
			norm[n++] = '\n';
			if (i + 1 < len && src[i + 1] == '\n')
				i++;
		} else {
			norm[n++] = src[i];
		}
	}
	if (n && norm[n - 1] == '\n')
		n--;
	norm[n] = 0;
	if ((e = tl_lex(&t->arena, norm, n, &toks, &ntoks, err)))
		goto fail;
	e = tp_parse(t, toks, ntoks, err);
	free(toks);
	if (e || (e = ts_analyze(t, err)) || (e = tf_fold(t, err)))
		goto fail;
	*out = t;
	return 0;
fail:
	taco_tmpl_free(t);
	return e;
}

void taco_tmpl_free(taco_tmpl *t)
{
	if (!t)
		return;
	ta_free(&t->arena);
	free(t);
}

int taco_tmpl_render(const taco_tmpl *t, const json_t *ctx,
		     const taco_tmpl_opts *o, taco_tmpl_out *out, taco_err *err)
{
	trender r;
	tscope *root;
	int e;

	memset(&r, 0, sizeof(r));
	r.t = t;
	r.ctx = ctx;
	r.err = err;
	r.line = 1;
	if (o)
		r.lim = o->limits;
	if (!r.lim.max_output)
		r.lim.max_output = 16u << 20;
	if (!r.lim.max_memory)
		r.lim.max_memory = 256u << 20;
	if (!r.lim.max_steps)
		r.lim.max_steps = 50000000;
	if (!r.lim.max_depth)
		r.lim.max_depth = 128;
	r.now = o ? o->now : 0;
	ta_init(&r.a, r.lim.max_memory);
	r.out = &r.root;
	if (!json_is_object(ctx)) {
		e = taco_err_set(err, -EINVAL,
				 "the context is not a JSON object");
		goto out;
	}
	r.ctxc = tr_alloc(&r, (size_t)(t->nnames ? t->nnames : 1) *
				  sizeof(tctxslot));
	root = r.ctxc ? ts_new(&r, NULL) : NULL;
	if (!root) {
		e = -E2BIG;
		goto out;
	}
	memset(r.ctxc, 0, (size_t)t->nnames * sizeof(tctxslot));
	if (!(e = ts_pre(&r, root, t->root)))
		e = te_exec(&r, t->root, root);
	if (e > 0)
		e = tr_fail(&r, -EINVAL,
			    "internal error: loop control at the "
			    "top level");
	if (e)
		goto out;
	/* the buffer always has a byte to spare for the NUL */
	if (!r.root.p && !(r.root.p = malloc(1))) {
		e = taco_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	r.root.p[r.root.n] = 0;
	out->len = r.root.n;
	out->text = r.root.p;
	out->gen = r.gen;
	out->n_gen = r.ngen;
	r.root.p = NULL;
	r.gen = NULL;
out:
	free(r.root.p);
	free(r.gen);
	for (int i = 0; i < r.ncaps; i++) {
		if (r.caps[i])
			free(r.caps[i]->p);
		free(r.caps[i]);
	}
	free(r.caps);
	ta_free(&r.a);
	return e;
}

void taco_tmpl_out_free(taco_tmpl_out *out)
{
	if (!out)
		return;
	free(out->text);
	free(out->gen);
	memset(out, 0, sizeof(*out));
}
