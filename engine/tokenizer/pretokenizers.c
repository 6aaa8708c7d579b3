/* pretokenizers.c: the pre-tokenizer stage: ByteLevel (with the GPT-2
 * pattern), Split (String or Regex, its five behaviors, invert),
 * Metaspace, Digits and Sequence, read from tokenizer.json and run on a
 * normalized piece of text, cutting it into the pre-tokens of the model. */
#include <errno.h>
#include <jansson.h>
#include <string.h>

#include "tokenizer_internal.h"

/* ------------------------------------------------------------ loading */

static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
    "\\s+(?!\\S)|\\s+";

static int parse_bytelevel(struct tok_loader *L, struct tok_pt *pt, json_t *o,
			   const char *where)
{
	static const char *const keys[] = {"type", "add_prefix_space",
					   "trim_offsets", "use_regex", NULL};
	int r;

	pt->type = PT_BYTELEVEL;
	if ((r = tok_check_keys(L, o, where, keys)) ||
	    (r = tok_get_bool(L, o, where, "add_prefix_space", 1,
			      &pt->add_prefix_space)) ||
	    (r = tok_get_bool(L, o, where, "use_regex", 1, &pt->use_regex)))
		return r;
	return 0;
}

static int parse_split(struct tok_loader *L, struct tok_pt *pt, json_t *o,
		       const char *where)
{
	static const char *const keys[] = {"type", "pattern", "behavior",
					   "invert", NULL};
	static const char *const names[] = {"Removed", "Isolated",
					    "MergedWithPrevious",
					    "MergedWithNext", "Contiguous"};
	json_t *b = json_object_get(o, "behavior");
	int r;

	pt->type = PT_SPLIT;
	if ((r = tok_check_keys(L, o, where, keys)) ||
	    (r = tok_get_bool(L, o, where, "invert", 0, &pt->invert)))
		return r;
	if (!json_is_string(b))
		return tok_fail(L, -EINVAL, "%s.behavior is required", where);
	pt->behavior = -1;
	for (int i = 0; i < 5; i++)
		if (!strcmp(json_string_value(b), names[i]))
			pt->behavior = i;
	if (pt->behavior < 0)
		return tok_fail(L, -ENOTSUP,
				"%s.behavior '%s' is not supported", where,
				json_string_value(b));
	return tok_get_pattern(L, o, where, &pt->re, 1);
}

/* Digits: a Split (Isolated) on char::is_numeric (Rust's tables); grouped
 * digits are contiguous runs. */
static int parse_digits(struct tok_loader *L, struct tok_pt *pt, json_t *o,
			const char *where)
{
	static const char *const keys[] = {"type", "individual_digits", NULL};
	struct tok_buf pat = {0};
	int ind = 0, r;

	pt->type = PT_SPLIT;
	pt->behavior = SPLIT_ISOLATED;
	if ((r = tok_check_keys(L, o, where, keys)) ||
	    (r = tok_get_bool(L, o, where, "individual_digits", 0, &ind)))
		return r;
	if (tok_numeric_pattern(&pat, !ind))
		r = tok_oom(L);
	else
		r = tok_regex_compile(&pt->re, pat.p, pat.n, 0, L->name, where,
				      L->err);
	tok_buf_free(&pat);
	return r;
}

static int parse_metaspace(struct tok_loader *L, struct tok_pt *pt, json_t *o,
			   const char *where)
{
	static const char *const keys[] = {
	    "type",  "replacement",	 "prepend_scheme",
	    "split", "add_prefix_space", "str_rep",
	    NULL};
	int r;

	pt->type = PT_METASPACE;
	if ((r = tok_check_keys(L, o, where, keys)) ||
	    (r = tok_get_char(L, o, where, "replacement", pt->repl,
			      &pt->repl_len, NULL)) ||
	    (r = tok_get_prepend_scheme(L, o, where, &pt->prepend_scheme)) ||
	    (r = tok_get_bool(L, o, where, "split", 1, &pt->split)))
		return r;
	if (pt->prepend_scheme == PREPEND_FIRST && L->metaspace_first_pos < 0)
		L->metaspace_first_pos = L->tok->n_pts - 1;
	return tok_regex_compile(&pt->re, pt->repl, (size_t)pt->repl_len, 1,
				 L->name, where, L->err);
}

int tok_parse_pretokenizer(struct tok_loader *L, json_t *o, const char *where,
			   int depth)
{
	struct tok_pt *pt;
	const char *type;
	int r;

	if (!(type = tok_step_type(L, o, where, depth, &r)))
		return r;
	if (!strcmp(type, "Sequence"))
		return tok_parse_sequence(L, o, where, "pretokenizers", depth,
					  tok_parse_pretokenizer);
	if (strcmp(type, "ByteLevel") && strcmp(type, "Split") &&
	    strcmp(type, "Metaspace") && strcmp(type, "Digits"))
		return tok_fail(L, -ENOTSUP, "%s type '%s' is not supported",
				where, type);
	if ((r = tok_new_step(L, (void **)&L->tok->pts, &L->tok->n_pts,
			      &L->n_pt_cap, sizeof(*pt), where,
			      "pre-tokenizers", (void **)&pt)))
		return r;
	if (!strcmp(type, "ByteLevel"))
		return parse_bytelevel(L, pt, o, where);
	if (!strcmp(type, "Split"))
		return parse_split(L, pt, o, where);
	if (!strcmp(type, "Digits"))
		return parse_digits(L, pt, o, where);
	return parse_metaspace(L, pt, o, where);
}

int tok_compile_gpt2_regex(struct tok_loader *L)
{
	taco_tok *t = L->tok;
	int r;

	for (int i = 0; i < t->n_pts; i++)
		if (t->pts[i].type == PT_BYTELEVEL && t->pts[i].use_regex &&
		    !t->gpt2_re.code &&
		    (r = tok_regex_compile(&t->gpt2_re, GPT2_PATTERN,
					   strlen(GPT2_PATTERN), 0, L->name,
					   "ByteLevel", L->err)))
			return r;
	return 0;
}

/* ------------------------------------------------------------ running */

/* Segments of s by a pattern: gaps and matches, as Pattern::find_matches,
 * then folded by behavior; pieces pushed (non-empty) to dst. */
static int split_piece(const struct tok_regex *re, int behavior, int invert,
		       struct tok_work *w, const struct tok_piece *pc,
		       struct tok_plist *dst)
{
	struct tok_slist *sg = &w->segs, *o = &w->segs2;
	size_t pos = 0, last = SIZE_MAX, ms, me, prev = 0;
	int r, pm = 0;

	sg->n = o->n = 0;
	while ((r = tok_regex_next(re, &w->m, pc->p, pc->n, &pos, &last, &ms,
				   &me, w->err)) > 0) {
		if (prev != ms && tok_slist_push(sg, prev, ms, 0))
			return tok_work_oom(w);
		if (tok_slist_push(sg, ms, me, 1))
			return tok_work_oom(w);
		prev = me;
	}
	if (r < 0)
		return taco_err_prefix(w->err, r, "%s", w->name);
	if (prev != pc->n && tok_slist_push(sg, prev, pc->n, 0))
		return tok_work_oom(w);
	if (invert)
		for (size_t i = 0; i < sg->n; i++)
			sg->v[i].m = !sg->v[i].m;
	switch (behavior) {
	case SPLIT_REMOVED:
		for (size_t i = 0; i < sg->n; i++)
			if (!sg->v[i].m &&
			    tok_slist_push(o, sg->v[i].s, sg->v[i].e, 0))
				return tok_work_oom(w);
		break;
	case SPLIT_ISOLATED:
		for (size_t i = 0; i < sg->n; i++)
			if (tok_slist_push(o, sg->v[i].s, sg->v[i].e, 0))
				return tok_work_oom(w);
		break;
	case SPLIT_MERGED_PREV:
		for (size_t i = 0; i < sg->n; i++) {
			if (sg->v[i].m && !pm && o->n)
				o->v[o->n - 1].e = sg->v[i].e;
			else if (tok_slist_push(o, sg->v[i].s, sg->v[i].e, 0))
				return tok_work_oom(w);
			pm = sg->v[i].m;
		}
		break;
	case SPLIT_MERGED_NEXT:
		for (size_t i = sg->n; i-- > 0;) {
			if (sg->v[i].m && !pm && o->n)
				o->v[o->n - 1].s = sg->v[i].s;
			else if (tok_slist_push(o, sg->v[i].s, sg->v[i].e, 0))
				return tok_work_oom(w);
			pm = sg->v[i].m;
		}
		for (size_t i = 0; i < o->n / 2; i++) {
			struct tok_seg t = o->v[i];
			o->v[i] = o->v[o->n - 1 - i];
			o->v[o->n - 1 - i] = t;
		}
		break;
	case SPLIT_CONTIGUOUS:
		for (size_t i = 0; i < sg->n; i++) {
			if (sg->v[i].m == pm && o->n)
				o->v[o->n - 1].e = sg->v[i].e;
			else if (tok_slist_push(o, sg->v[i].s, sg->v[i].e, 0))
				return tok_work_oom(w);
			pm = sg->v[i].m;
		}
		break;
	}
	for (size_t i = 0; i < o->n; i++)
		if (o->v[i].e > o->v[i].s &&
		    tok_plist_push(dst, pc->p + o->v[i].s,
				   o->v[i].e - o->v[i].s,
				   pc->at_origin && o->v[i].s == 0))
			return tok_work_oom(w);
	return 0;
}

static int pt_bytelevel(const taco_tok *tok, const struct tok_pt *pt,
			struct tok_work *w, const struct tok_piece *pc,
			struct tok_plist *dst, int last)
{
	struct tok_piece p = *pc;
	size_t first = dst->n;
	int r;

	if (pt->add_prefix_space && (p.n == 0 || p.p[0] != ' ')) {
		char *q = tok_arena_alloc(w, p.n + 1);
		if (!q)
			return tok_work_oom(w);
		q[0] = ' ';
		memcpy(q + 1, p.p, p.n);
		p.p = q;
		p.n++;
	}
	if (pt->use_regex) {
		if ((r = split_piece(&tok->gpt2_re, SPLIT_ISOLATED, 0, w, &p,
				     dst)))
			return r;
	} else if (p.n && tok_plist_push(dst, p.p, p.n, p.at_origin)) {
		return tok_work_oom(w);
	}
	if (last)
		return 0; /* the model reads the raw bytes (tok_bpe_word raw) */
	for (size_t i = first; i < dst->n; i++) {
		struct tok_piece *q = &dst->v[i];
		char *m = tok_arena_alloc(w, q->n * 2);
		if (!m)
			return tok_work_oom(w);
		q->n = tok_bytelevel_encode(q->p, q->n, m);
		q->p = m;
	}
	return 0;
}

static int pt_metaspace(const struct tok_pt *pt, struct tok_work *w,
			const struct tok_piece *pc, struct tok_plist *dst)
{
	size_t spaces = 0, k = 0;
	struct tok_piece p;
	char *q;
	int pre;

	for (size_t i = 0; i < pc->n; i++)
		spaces += pc->p[i] == ' ';
	q = tok_arena_alloc(w, pc->n + spaces * (size_t)pt->repl_len +
				   (size_t)pt->repl_len);
	if (!q)
		return tok_work_oom(w);
	pre = pt->prepend_scheme == PREPEND_ALWAYS ||
	      (pt->prepend_scheme == PREPEND_FIRST && pc->at_origin);
	/* prepend unless it already starts with the replacement (checked
	 * after the spaces are replaced) */
	if (pre && (pc->n == 0 ||
		    (pc->p[0] == ' ' ? 0
				     : !(pc->n >= (size_t)pt->repl_len &&
					 !memcmp(pc->p, pt->repl,
						 (size_t)pt->repl_len))))) {
		memcpy(q, pt->repl, (size_t)pt->repl_len);
		k = (size_t)pt->repl_len;
	}
	for (size_t i = 0; i < pc->n; i++) {
		if (pc->p[i] == ' ') {
			memcpy(q + k, pt->repl, (size_t)pt->repl_len);
			k += (size_t)pt->repl_len;
		} else {
			q[k++] = pc->p[i];
		}
	}
	p.p = q;
	p.n = k;
	p.at_origin = pc->at_origin;
	if (!pt->split)
		return k ? tok_plist_push(dst, q, k, p.at_origin)
			       ? tok_work_oom(w)
			       : 0
			 : 0;
	return split_piece(&pt->re, SPLIT_MERGED_NEXT, 0, w, &p, dst);
}

int tok_pretokenize(const taco_tok *tok, struct tok_work *w, const char *s,
		    size_t n, int at_origin, struct tok_plist **out)
{
	struct tok_plist *cur = &w->a, *nxt = &w->b, *t;
	int r;

	cur->n = 0;
	if (tok_plist_push(cur, s, n, at_origin))
		return tok_work_oom(w);
	for (int k = 0; k < tok->n_pts; k++) {
		const struct tok_pt *pt = &tok->pts[k];
		nxt->n = 0;
		for (size_t i = 0; i < cur->n; i++) {
			struct tok_piece pc = cur->v[i];
			switch (pt->type) {
			case PT_BYTELEVEL:
				r = pt_bytelevel(tok, pt, w, &pc, nxt,
						 k == tok->n_pts - 1);
				break;
			case PT_SPLIT:
				r = split_piece(&pt->re, pt->behavior,
						pt->invert, w, &pc, nxt);
				break;
			default:
				r = pt_metaspace(pt, w, &pc, nxt);
			}
			if (r)
				return r;
		}
		t = cur;
		cur = nxt;
		nxt = t;
	}
	*out = cur;
	return 0;
}
