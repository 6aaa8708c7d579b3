/* encode.c: the encode pipeline (tokenizers' encode): invalid UTF-8
 * replaced, added tokens split off (added_tokens.c), the rest normalized
 * (normalizers.c), added tokens matched again on the normalized text,
 * pre-tokenized (pretokenizers.c), each pre-token through the model
 * (bpe.c), and the post-processor's ids around it all (post_process.c);
 * with the per-call state, kept in a small pool between calls.
 * Semantics follow Hugging Face tokenizers 0.23. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

/* ------------------------------------------------------------ work state */

void *tok_arena_alloc(struct tok_work *w, size_t n)
{
	struct tok_arena_block *b = w->arena;

	if (!b || b->cap - b->used < n) {
		size_t cap = b ? 65536 : 1024;
		if (cap < n)
			cap = n;
		b = malloc(sizeof(*b) + cap);
		if (!b)
			return NULL;
		b->next = w->arena;
		b->used = 0;
		b->cap = cap;
		w->arena = b;
	}
	b->used += n;
	return b->data + b->used - n;
}

int tok_plist_push(struct tok_plist *l, const char *p, size_t n, int at_origin)
{
	if (l->n == l->cap) {
		size_t c = l->cap ? l->cap * 2 : 64;
		struct tok_piece *v = realloc(l->v, c * sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = c;
	}
	l->v[l->n].p = p;
	l->v[l->n].n = n;
	l->v[l->n].at_origin = at_origin;
	l->n++;
	return 0;
}

int tok_slist_push(struct tok_slist *l, size_t s, size_t e, int m)
{
	if (l->n == l->cap) {
		size_t c = l->cap ? l->cap * 2 : 64;
		struct tok_seg *v = realloc(l->v, c * sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = c;
	}
	l->v[l->n].s = s;
	l->v[l->n].e = e;
	l->v[l->n].m = m;
	l->n++;
	return 0;
}

int tok_ids_push(taco_tok_ids *o, int32_t id)
{
	if (o->n == o->cap) {
		size_t c = o->cap ? o->cap * 2 : 256;
		int32_t *p = realloc(o->ids, c * sizeof(int32_t));
		if (!p)
			return -ENOMEM;
		o->ids = p;
		o->cap = c;
	}
	o->ids[o->n++] = id;
	return 0;
}

void taco_tok_ids_free(taco_tok_ids *v)
{
	if (!v)
		return;
	free(v->ids);
	v->ids = NULL;
	v->n = v->cap = 0;
}

static void work_free(struct tok_work *w)
{
	struct tok_arena_block *b = w->arena, *n;

	if (w->m.md)
		pcre2_match_data_free(w->m.md);
	tok_buf_free(&w->input);
	tok_buf_free(&w->norm);
	tok_buf_free(&w->tmp);
	tok_buf_free(&w->word);
	free(w->a.v);
	free(w->b.v);
	free(w->segs.v);
	free(w->segs2.v);
	free(w->added1.v);
	free(w->added2.v);
	for (; b; b = n) {
		n = b->next;
		free(b);
	}
	free(w->sid);
	free(w->sprev);
	free(w->snext);
	free(w->heap);
}

int tok_work_oom(struct tok_work *w)
{
	return taco_err_set(w->err, -ENOMEM, "%s: encode: out of memory",
			    w->name);
}

/* ------------------------------------------------------------ encode */

/* Pre-tokenizers then the model, for one normalized piece. */
static int encode_piece(const taco_tok *tok, struct tok_work *w, const char *s,
			size_t n, int at_origin, taco_tok_ids *out)
{
	struct tok_plist *pieces;
	int r;

	if ((r = tok_pretokenize(tok, w, s, n, at_origin, &pieces)))
		return r;
	for (size_t i = 0; i < pieces->n; i++)
		if ((r = tok_bpe_word(tok, w, pieces->v[i].p, pieces->v[i].n,
				      tok->bytelevel_last, out)))
			return r == -ENOMEM ? tok_work_oom(w) : r;
	return 0;
}

static int encode_text(const taco_tok *tok, struct tok_work *w, const char *s,
		       size_t n, taco_tok_ids *out)
{
	struct tok_slist *raw = &w->added1, *sub = &w->added2;
	int r;

	if ((r = tok_split_added(tok, &tok->trie_raw, w, s, n, raw)))
		return r;
	for (size_t i = 0; i < raw->n; i++) {
		const struct tok_seg *g = &raw->v[i];
		const char *p = s + g->s;
		size_t pn = g->e - g->s;

		if (g->m >= 0) {
			if (tok_ids_push(out, tok->added[g->m].id))
				return tok_work_oom(w);
			continue;
		}
		if (tok->n_norms) {
			if ((r = tok_normalize(tok, &w->m, p, pn, &w->norm,
					       &w->tmp, w->err)))
				return r == -ENOMEM
					   ? tok_work_oom(w)
					   : taco_err_prefix(w->err, r, "%s",
							     w->name);
			p = w->norm.p;
			pn = w->norm.n;
		}
		if ((r = tok_split_added(tok, &tok->trie_norm, w, p, pn, sub)))
			return r;
		for (size_t j = 0; j < sub->n; j++) {
			const struct tok_seg *h = &sub->v[j];
			if (h->m >= 0) {
				if (tok_ids_push(out, tok->added[h->m].id))
					return tok_work_oom(w);
				continue;
			}
			if ((r = encode_piece(tok, w, p + h->s, h->e - h->s,
					      g->s == 0 && h->s == 0, out)))
				return r;
		}
	}
	return 0;
}

static int work_init(const taco_tok *tok, struct tok_work *w, taco_err *err)
{
	memset(w, 0, sizeof(*w));
	w->err = err;
	w->name = tok->name;
	w->m.mc = tok->mctx;
	w->m.md = pcre2_match_data_create(1, NULL);
	if (!w->m.md)
		return tok_work_oom(w);
	return 0;
}

/* Bytes a work state holds on to. */
static size_t work_size(const struct tok_work *w)
{
	size_t n = w->input.cap + w->norm.cap + w->tmp.cap + w->word.cap;

	n += (w->a.cap + w->b.cap) * sizeof(struct tok_piece);
	n += (w->segs.cap + w->segs2.cap + w->added1.cap + w->added2.cap) *
	     sizeof(struct tok_seg);
	n +=
	    w->scap * 3 * sizeof(int32_t) + w->hcap * sizeof(struct tok_heap_e);
	for (struct tok_arena_block *b = w->arena; b; b = b->next)
		n += b->cap;
	return n;
}

/* A work state from the pool, or a new one. */
static struct tok_work *work_get(const taco_tok *tok, taco_err *err)
{
	struct taco_tok *t = (struct taco_tok *)tok;
	struct tok_work *w = NULL;

	if (t->cache && !pthread_mutex_lock(&t->cache_lock)) {
		if (t->n_work_pool)
			w = t->work_pool[--t->n_work_pool];
		pthread_mutex_unlock(&t->cache_lock);
	}
	if (w) {
		w->err = err;
		return w;
	}
	w = malloc(sizeof(*w));
	if (!w) {
		taco_err_set(err, -ENOMEM, "%s: encode: out of memory",
			     tok->name);
		return NULL;
	}
	if (work_init(tok, w, err)) {
		work_free(w);
		free(w);
		return NULL;
	}
	return w;
}

/* Back to the pool (small states only), else freed. */
static void work_put(const taco_tok *tok, struct tok_work *w)
{
	struct taco_tok *t = (struct taco_tok *)tok;

	/* keep one arena block */
	while (w->arena && w->arena->next) {
		struct tok_arena_block *b = w->arena;
		w->arena = b->next;
		free(b);
	}
	if (w->arena)
		w->arena->used = 0;
	if (work_size(w) <= (1u << 20) && t->cache &&
	    !pthread_mutex_lock(&t->cache_lock)) {
		if (t->n_work_pool < 8) {
			t->work_pool[t->n_work_pool++] = w;
			w = NULL;
		}
		pthread_mutex_unlock(&t->cache_lock);
	}
	if (w) {
		work_free(w);
		free(w);
	}
}

void tok_work_pool_free(struct taco_tok *tok)
{
	for (int i = 0; i < tok->n_work_pool; i++) {
		work_free(tok->work_pool[i]);
		free(tok->work_pool[i]);
	}
	tok->n_work_pool = 0;
}

int taco_tok_encode(const taco_tok *tok, const char *text, size_t len,
		    int add_special_tokens, taco_tok_ids *out, taco_err *err)
{
	struct tok_work *w;
	const unsigned char *u = (const unsigned char *)text;
	size_t i = 0, bad;
	int r;

	if (!tok || !out || (!text && len))
		return taco_err_set(err, -EINVAL,
				    "tokenizer: encode: bad "
				    "arguments");
	out->n = 0;
	if (len > TACO_TOK_MAX_INPUT)
		return taco_err_set(err, -EFBIG,
				    "%s: encode: input of %zu bytes is over "
				    "the limit of %u bytes per call",
				    tok->name, len, TACO_TOK_MAX_INPUT);
	if (!(w = work_get(tok, err)))
		return -ENOMEM;
	r = 0;
	/* invalid UTF-8 -> U+FFFD (maximal subparts) */
	while (i < len) {
		if (u[i] < 0x80) {
			i++;
			continue;
		}
		size_t k = tok_utf8_valid_prefix(u + i, len - i, &bad);
		if (!k)
			break;
		i += k;
	}
	if (i < len) {
		w->input.n = 0;
		if (tok_utf8_lossy(&w->input, u, len)) {
			r = tok_work_oom(w);
			goto done;
		}
		text = w->input.p;
		len = w->input.n;
	}
	/* the post-processor's ids (post_process.c) around the text */
	if (add_special_tokens)
		for (int k = 0; k < tok->n_post_pre; k++)
			if (tok_ids_push(out, tok->post_pre[k])) {
				r = tok_work_oom(w);
				goto done;
			}
	if ((r = encode_text(tok, w, text ? text : "", len, out)))
		goto done;
	if (add_special_tokens)
		for (int k = 0; k < tok->n_post_suf; k++)
			if (tok_ids_push(out, tok->post_suf[k])) {
				r = tok_work_oom(w);
				goto done;
			}
done:
	work_put(tok, w);
	if (r)
		out->n = 0;
	return r;
}
