/* tokenizer_encode.c: hash tables, the BPE model, the encode pipeline
 * (added tokens, normalizer, pre-tokenizers, model, post-processor) and
 * decode. Semantics follow Hugging Face tokenizers 0.23. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

/* ------------------------------------------------------------ hashing */

uint32_t tok_hash(const void *p, size_t n)
{
	const unsigned char *s = p;
	uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n, v;

	while (n >= 8) {
		memcpy(&v, s, 8);
		h = (h ^ v) * 0xFF51AFD7ED558CCDull;
		h ^= h >> 32;
		s += 8;
		n -= 8;
	}
	v = 0;
	if (n)
		memcpy(&v, s, n);
	h = (h ^ v) * 0xC4CEB9FE1A85EC53ull;
	h ^= h >> 29;
	h *= 0xFF51AFD7ED558CCDull;
	h ^= h >> 32;
	return (uint32_t)h;
}

int tok_vocab_init(struct tok_vocab *v, uint32_t n_ids, uint32_t expect)
{
	uint32_t cap = 16;

	memset(v, 0, sizeof(*v));
	while (cap < expect * 2 + 16)
		cap *= 2;
	v->off = malloc(sizeof(uint32_t) * (n_ids ? n_ids : 1));
	v->len = calloc(n_ids ? n_ids : 1, sizeof(uint32_t));
	v->slots = calloc(cap, sizeof(uint64_t));
	if (!v->off || !v->len || !v->slots)
		return -ENOMEM;
	for (uint32_t i = 0; i < n_ids; i++)
		v->off[i] = TOK_NONE;
	v->n_ids = n_ids;
	v->mask = cap - 1;
	return 0;
}

void tok_vocab_free(struct tok_vocab *v)
{
	free(v->pool);
	free(v->off);
	free(v->len);
	free(v->slots);
	memset(v, 0, sizeof(*v));
}

int32_t tok_vocab_find(const struct tok_vocab *v, const char *s, size_t n)
{
	uint32_t h, i;

	if (!v->slots)
		return -1;
	h = tok_hash(s, n);
	for (i = h & v->mask;; i = (i + 1) & v->mask) {
		uint64_t e = v->slots[i];
		uint32_t id;
		if (!e)
			return -1;
		if ((uint32_t)(e >> 32) != h)
			continue;
		id = (uint32_t)e - 1;
		if (v->len[id] == n && !memcmp(v->pool + v->off[id], s, n))
			return (int32_t)id;
	}
}

int tok_vocab_add(struct tok_vocab *v, int32_t id, const char *s, size_t n,
		  int32_t *other)
{
	uint32_t h = tok_hash(s, n), i;

	if (v->count * 2 + 2 > v->mask)
		return -ENOSPC; /* sized by tok_vocab_init */
	for (i = h & v->mask; v->slots[i]; i = (i + 1) & v->mask) {
		uint64_t e = v->slots[i];
		uint32_t o = (uint32_t)e - 1;
		if ((uint32_t)(e >> 32) == h && v->len[o] == n &&
		    !memcmp(v->pool + v->off[o], s, n)) {
			*other = (int32_t)o;
			return -EEXIST;
		}
	}
	if (v->pool_len + n + 1 > v->pool_cap) {
		size_t c = v->pool_cap ? v->pool_cap : 4096;
		char *p;
		while (c < v->pool_len + n + 1)
			c *= 2;
		p = realloc(v->pool, c);
		if (!p)
			return -ENOMEM;
		v->pool = p;
		v->pool_cap = c;
	}
	memcpy(v->pool + v->pool_len, s, n);
	v->off[id] = (uint32_t)v->pool_len;
	v->len[id] = (uint32_t)n;
	v->pool_len += n;
	v->pool[v->pool_len++] = 0;
	v->slots[i] = ((uint64_t)h << 32) | ((uint32_t)id + 1);
	v->count++;
	return 0;
}

static inline uint32_t merge_slot(uint64_t key, uint32_t mask)
{
	return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

const struct tok_merge *tok_merges_find(const struct tok_merges *m, int32_t a,
					int32_t b)
{
	uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
	uint32_t i;

	if (!m->slots)
		return NULL;
	for (i = merge_slot(key, m->mask);; i = (i + 1) & m->mask) {
		const struct tok_merge *e = &m->slots[i];
		if (e->key == key)
			return e;
		if (e->key == UINT64_MAX)
			return NULL;
	}
}

/* Used by the loader: inserts or overwrites (a later duplicate wins, as a
 * Rust HashMap collected from the merges list). */
int tok_merges_put(struct tok_merges *m, int32_t a, int32_t b, uint32_t rank,
		   int32_t id);
int tok_merges_put(struct tok_merges *m, int32_t a, int32_t b, uint32_t rank,
		   int32_t id)
{
	uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
	uint32_t i;

	for (i = merge_slot(key, m->mask);; i = (i + 1) & m->mask) {
		struct tok_merge *e = &m->slots[i];
		if (e->key == key || e->key == UINT64_MAX) {
			if (e->key == UINT64_MAX)
				m->count++;
			e->key = key;
			e->rank = rank;
			e->id = id;
			return 0;
		}
	}
}

/* ------------------------------------------------------------ trie */

static int trie_grow_edges(struct tok_trie *t)
{
	uint32_t cap = t->mask ? (t->mask + 1) * 2 : 256;
	uint64_t *k = calloc(cap, sizeof(uint64_t));
	uint32_t *v = malloc(cap * sizeof(uint32_t));

	if (!k || !v) {
		free(k);
		free(v);
		return -ENOMEM;
	}
	for (uint32_t i = 0; t->keys && i <= t->mask; i++) {
		uint32_t j;
		if (!t->keys[i])
			continue;
		for (j = merge_slot(t->keys[i], cap - 1); k[j];
		     j = (j + 1) & (cap - 1))
			;
		k[j] = t->keys[i];
		v[j] = t->vals[i];
	}
	free(t->keys);
	free(t->vals);
	t->keys = k;
	t->vals = v;
	t->mask = cap - 1;
	return 0;
}

static inline int64_t trie_child(const struct tok_trie *t, uint32_t node,
				 unsigned char c)
{
	uint64_t key = (((uint64_t)node << 8) | c) + 1;
	uint32_t i;

	for (i = merge_slot(key, t->mask); t->keys[i]; i = (i + 1) & t->mask)
		if (t->keys[i] == key)
			return t->vals[i];
	return -1;
}

int tok_trie_add(struct tok_trie *t, const char *s, size_t n, int32_t idx)
{
	uint32_t node = 0;

	if (!t->term) {
		t->cap_nodes = 64;
		t->term = malloc(sizeof(int32_t) * t->cap_nodes);
		if (!t->term)
			return -ENOMEM;
		t->term[0] = -1;
		t->n_nodes = 1;
	}
	if (!t->keys && trie_grow_edges(t))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		int64_t ch = trie_child(t, node, c);
		if (ch < 0) {
			uint64_t key = (((uint64_t)node << 8) | c) + 1;
			uint32_t j;
			if ((t->n_edges + 1) * 2 > t->mask &&
			    trie_grow_edges(t))
				return -ENOMEM;
			if (t->n_nodes == t->cap_nodes) {
				int32_t *p =
				    realloc(t->term,
					    sizeof(int32_t) * t->cap_nodes * 2);
				if (!p)
					return -ENOMEM;
				t->term = p;
				t->cap_nodes *= 2;
			}
			t->term[t->n_nodes] = -1;
			for (j = merge_slot(key, t->mask); t->keys[j];
			     j = (j + 1) & t->mask)
				;
			t->keys[j] = key;
			t->vals[j] = t->n_nodes;
			t->n_edges++;
			ch = t->n_nodes++;
		}
		node = (uint32_t)ch;
		if (i == 0)
			t->first[c] = 1;
	}
	/* the first token with a content keeps it */
	if (t->term[node] < 0)
		t->term[node] = idx;
	t->empty = 0;
	return 0;
}

void tok_trie_free(struct tok_trie *t)
{
	free(t->keys);
	free(t->vals);
	free(t->term);
	memset(t, 0, sizeof(*t));
}

/* Longest added token starting at s; its index, length in *len; -1. */
static int32_t trie_longest(const struct tok_trie *t, const char *s, size_t n,
			    size_t *len)
{
	uint32_t node = 0;
	int32_t best = -1;

	for (size_t i = 0; i < n; i++) {
		int64_t ch = trie_child(t, node, (unsigned char)s[i]);
		if (ch < 0)
			break;
		node = (uint32_t)ch;
		if (t->term[node] >= 0) {
			best = t->term[node];
			*len = i + 1;
		}
	}
	return best;
}

/* ------------------------------------------------------------ work state */

struct piece {
	const char *p;
	size_t n;
	int at_origin;
};

struct plist {
	struct piece *v;
	size_t n, cap;
};

struct seg {
	size_t s, e;
	int m; /* split: is a match; added: added index or -1 */
};

struct slist {
	struct seg *v;
	size_t n, cap;
};

struct arena_block {
	struct arena_block *next;
	size_t used, cap;
	char data[];
};

struct heap_e {
	uint64_t key; /* rank << 32 | pos */
	int32_t id;
};

struct work {
	struct tok_matcher m;
	struct tok_buf input, norm, tmp, word;
	struct plist a, b;
	struct slist segs, segs2, added1, added2;
	struct arena_block *arena;
	int32_t *sid, *sprev, *snext;
	size_t scap;
	struct heap_e *heap;
	size_t hcap;
	taco_err *err;
	const char *name;
};

static void *arena_alloc(struct work *w, size_t n)
{
	struct arena_block *b = w->arena;

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

static int plist_push(struct plist *l, const char *p, size_t n, int at_origin)
{
	if (l->n == l->cap) {
		size_t c = l->cap ? l->cap * 2 : 64;
		struct piece *v = realloc(l->v, c * sizeof(*v));
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

static int slist_push(struct slist *l, size_t s, size_t e, int m)
{
	if (l->n == l->cap) {
		size_t c = l->cap ? l->cap * 2 : 64;
		struct seg *v = realloc(l->v, c * sizeof(*v));
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

static int ids_push(taco_tok_ids *o, int32_t id)
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

static void work_free(struct work *w)
{
	struct arena_block *b = w->arena, *n;

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

static int oom(struct work *w)
{
	return taco_err_set(w->err, -ENOMEM, "%s: encode: out of memory",
			    w->name);
}

/* ------------------------------------------------------------ BPE */

static int sym_reserve(struct work *w, size_t n)
{
	if (n <= w->scap)
		return 0;
	size_t c = w->scap ? w->scap : 64;
	while (c < n)
		c *= 2;
	int32_t *a = realloc(w->sid, c * sizeof(int32_t));
	if (!a)
		return -ENOMEM;
	w->sid = a;
	a = realloc(w->sprev, c * sizeof(int32_t));
	if (!a)
		return -ENOMEM;
	w->sprev = a;
	a = realloc(w->snext, c * sizeof(int32_t));
	if (!a)
		return -ENOMEM;
	w->snext = a;
	w->scap = c;
	return 0;
}

static int heap_push(struct work *w, size_t *hn, uint64_t key, int32_t id)
{
	size_t i;

	if (*hn == w->hcap) {
		size_t c = w->hcap ? w->hcap * 2 : 64;
		struct heap_e *h = realloc(w->heap, c * sizeof(*h));
		if (!h)
			return -ENOMEM;
		w->heap = h;
		w->hcap = c;
	}
	i = (*hn)++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (w->heap[p].key <= key)
			break;
		w->heap[i] = w->heap[p];
		i = p;
	}
	w->heap[i].key = key;
	w->heap[i].id = id;
	return 0;
}

static struct heap_e heap_pop(struct work *w, size_t *hn)
{
	struct heap_e top = w->heap[0], last = w->heap[--(*hn)];
	size_t i = 0, n = *hn;

	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && w->heap[c + 1].key < w->heap[c].key)
			c++;
		if (last.key <= w->heap[c].key)
			break;
		w->heap[i] = w->heap[c];
		i = c;
	}
	if (n)
		w->heap[i] = last;
	return top;
}

/* Applies the merges to the n symbols in w->sid (linked list), then
 * appends the surviving ids to out. */
static int bpe_merge(const taco_tok *tok, struct work *w, size_t n,
		     taco_tok_ids *out)
{
	size_t hn = 0;
	int32_t *id = w->sid, *prev = w->sprev, *next = w->snext;

	for (size_t i = 0; i < n; i++) {
		prev[i] = (int32_t)i - 1;
		next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
	}
	for (size_t i = 0; i + 1 < n; i++) {
		const struct tok_merge *m =
		    tok_merges_find(&tok->merges, id[i], id[i + 1]);
		if (m &&
		    heap_push(w, &hn, ((uint64_t)m->rank << 32) | i, m->id))
			return -ENOMEM;
	}
	while (hn) {
		struct heap_e top = heap_pop(w, &hn);
		size_t pos = (size_t)(uint32_t)top.key;
		int32_t nx;
		const struct tok_merge *m;

		if (id[pos] < 0 || next[pos] < 0)
			continue; /* removed, or now the last symbol */
		nx = next[pos];
		m = tok_merges_find(&tok->merges, id[pos], id[nx]);
		if (!m || m->id != top.id)
			continue; /* stale */
		id[pos] = top.id;
		id[nx] = -1;
		next[pos] = next[nx];
		if (next[nx] >= 0)
			prev[next[nx]] = (int32_t)pos;
		if (prev[pos] >= 0) {
			int32_t p = prev[pos];
			m = tok_merges_find(&tok->merges, id[p], id[pos]);
			if (m &&
			    heap_push(w, &hn,
				      ((uint64_t)m->rank << 32) | (uint32_t)p,
				      m->id))
				return -ENOMEM;
		}
		if (next[pos] >= 0) {
			m = tok_merges_find(&tok->merges, id[pos],
					    id[next[pos]]);
			if (m &&
			    heap_push(w, &hn, ((uint64_t)m->rank << 32) | pos,
				      m->id))
				return -ENOMEM;
		}
	}
	for (int32_t i = n ? 0 : -1; i >= 0; i = next[i])
		if (ids_push(out, id[i]))
			return -ENOMEM;
	return 0;
}

/* Symbols of a word, as BPE::merge_word: each char (with the continuing
 * prefix when not first, the end suffix when last) looked up, else its
 * bytes as <0xNN>, else unk (fused or not), else dropped. */
static int bpe_symbols(const taco_tok *tok, struct work *w, const char *s,
		       size_t n, size_t *count)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0, k = 0;
	int32_t unk = -1;
	int r;

	if ((r = sym_reserve(w, n + 1)))
		return r;
	while (i < n) {
		uint32_t cp;
		size_t cl = (size_t)tok_utf8_next(u + i, n - i, &cp);
		const char *cs = s + i;
		size_t csn = cl;
		int32_t id;

		if ((i > 0 && tok->cont_prefix) ||
		    (i + cl == n && tok->word_suffix)) {
			w->word.n = 0;
			if (i > 0 && tok->cont_prefix)
				r = tok_buf_put(&w->word, tok->cont_prefix,
						tok->cont_prefix_len);
			r = r ? r : tok_buf_put(&w->word, s + i, cl);
			if (!r && i + cl == n && tok->word_suffix)
				r = tok_buf_put(&w->word, tok->word_suffix,
						tok->word_suffix_len);
			if (r)
				return r;
			cs = w->word.p;
			csn = w->word.n;
		}
		i += cl;
		id = tok_vocab_find(&tok->vocab, cs, csn);
		if (id >= 0) {
			if (unk >= 0) {
				w->sid[k++] = unk;
				unk = -1;
			}
			w->sid[k++] = id;
			continue;
		}
		if (tok->byte_fallback) {
			size_t j;
			for (j = 0; j < csn; j++)
				if (tok->fallback_id[(unsigned char)cs[j]] < 0)
					break;
			if (j == csn) {
				if ((r = sym_reserve(w, k + csn + (n - i) + 2)))
					return r;
				for (j = 0; j < csn; j++)
					w->sid[k++] = tok->fallback_id[(
					    unsigned char)cs[j]];
				continue;
			}
		}
		if (tok->unk_id >= 0) {
			if (unk >= 0 && !tok->fuse_unk)
				w->sid[k++] = unk;
			unk = tok->unk_id;
		}
	}
	if (unk >= 0)
		w->sid[k++] = unk;
	*count = k;
	return 0;
}

static int cache_get(const taco_tok *tok, uint32_t h, const char *s, size_t n,
		     taco_tok_ids *out, int *hit)
{
	struct taco_tok *t = (struct taco_tok *)tok;
	struct tok_cache_entry *e;

	*hit = 0;
	if (pthread_mutex_trylock(&t->cache_lock))
		return 0;
	e = &t->cache[h & (TOK_CACHE_SLOTS - 1)];
	if (e->key_len == n && e->hash == h && !memcmp(e->key, s, n)) {
		int32_t ids[TOK_CACHE_IDS];
		int k = e->n_ids;
		memcpy(ids, e->ids, sizeof(int32_t) * (size_t)k);
		pthread_mutex_unlock(&t->cache_lock);
		for (int i = 0; i < k; i++)
			if (ids_push(out, ids[i]))
				return -ENOMEM;
		*hit = 1;
		return 0;
	}
	pthread_mutex_unlock(&t->cache_lock);
	return 0;
}

static void cache_put(const taco_tok *tok, uint32_t h, const char *s, size_t n,
		      const int32_t *ids, size_t k)
{
	struct taco_tok *t = (struct taco_tok *)tok;
	struct tok_cache_entry *e;

	if (k > TOK_CACHE_IDS || pthread_mutex_trylock(&t->cache_lock))
		return;
	e = &t->cache[h & (TOK_CACHE_SLOTS - 1)];
	e->hash = h;
	e->key_len = (uint8_t)n;
	e->n_ids = (uint8_t)k;
	memcpy(e->key, s, n);
	memcpy(e->ids, ids, sizeof(int32_t) * k);
	pthread_mutex_unlock(&t->cache_lock);
}

/* One pre-token through the model. raw: s holds raw bytes standing for
 * their byte-level chars. */
static int bpe_word(const taco_tok *tok, struct work *w, const char *s,
		    size_t n, int raw, taco_tok_ids *out)
{
	size_t count = 0, start = out->n;
	uint32_t h = 0;
	int r, hit, cacheable = n > 0 && n <= TOK_CACHE_KEY && tok->cache;

	if (!n)
		return 0;
	if (tok->ignore_merges) {
		int32_t id = raw ? tok_vocab_find(&tok->rvocab, s, n)
				 : tok_vocab_find(&tok->vocab, s, n);
		if (id >= 0)
			return ids_push(out, id);
	}
	if (cacheable) {
		h = tok_hash(s, n);
		if ((r = cache_get(tok, h, s, n, out, &hit)))
			return r;
		if (hit)
			return 0;
	}
	if (raw) {
		size_t i;
		if ((r = sym_reserve(w, n)))
			return r;
		for (i = 0; i < n; i++) {
			int32_t id = tok->byte_id[(unsigned char)s[i]];
			if (id < 0)
				break;
			w->sid[i] = id;
		}
		count = i;
		if (i < n) {
			/* a byte whose char is not in the vocab: take the
			 * general path on the mapped string */
			char *m = arena_alloc(w, n * 2);
			size_t mn = 0;
			if (!m)
				return -ENOMEM;
			for (i = 0; i < n; i++)
				mn += (size_t)tok_utf8_put(
				    tok_byte_char[(unsigned char)s[i]], m + mn);
			if ((r = bpe_symbols(tok, w, m, mn, &count)))
				return r;
		}
	} else if ((r = bpe_symbols(tok, w, s, n, &count))) {
		return r;
	}
	if ((r = bpe_merge(tok, w, count, out)))
		return r;
	/* an empty word adds no ids (and out->ids may still be NULL) */
	if (cacheable && out->n > start)
		cache_put(tok, h, s, n, out->ids + start, out->n - start);
	return 0;
}

/* ------------------------------------------------------------ splitting */

/* Segments of s by a pattern: gaps and matches, as Pattern::find_matches,
 * then folded by behavior; pieces pushed (non-empty) to dst. */
static int split_piece(const struct tok_regex *re, int behavior, int invert,
		       struct work *w, const struct piece *pc,
		       struct plist *dst)
{
	struct slist *sg = &w->segs, *o = &w->segs2;
	size_t pos = 0, last = SIZE_MAX, ms, me, prev = 0;
	int r, pm = 0;

	sg->n = o->n = 0;
	while ((r = tok_regex_next(re, &w->m, pc->p, pc->n, &pos, &last, &ms,
				   &me, w->err)) > 0) {
		if (prev != ms && slist_push(sg, prev, ms, 0))
			return oom(w);
		if (slist_push(sg, ms, me, 1))
			return oom(w);
		prev = me;
	}
	if (r < 0)
		return taco_err_prefix(w->err, r, "%s", w->name);
	if (prev != pc->n && slist_push(sg, prev, pc->n, 0))
		return oom(w);
	if (invert)
		for (size_t i = 0; i < sg->n; i++)
			sg->v[i].m = !sg->v[i].m;
	switch (behavior) {
	case SPLIT_REMOVED:
		for (size_t i = 0; i < sg->n; i++)
			if (!sg->v[i].m &&
			    slist_push(o, sg->v[i].s, sg->v[i].e, 0))
				return oom(w);
		break;
	case SPLIT_ISOLATED:
		for (size_t i = 0; i < sg->n; i++)
			if (slist_push(o, sg->v[i].s, sg->v[i].e, 0))
				return oom(w);
		break;
	case SPLIT_MERGED_PREV:
		for (size_t i = 0; i < sg->n; i++) {
			if (sg->v[i].m && !pm && o->n)
				o->v[o->n - 1].e = sg->v[i].e;
			else if (slist_push(o, sg->v[i].s, sg->v[i].e, 0))
				return oom(w);
			pm = sg->v[i].m;
		}
		break;
	case SPLIT_MERGED_NEXT:
		for (size_t i = sg->n; i-- > 0;) {
			if (sg->v[i].m && !pm && o->n)
				o->v[o->n - 1].s = sg->v[i].s;
			else if (slist_push(o, sg->v[i].s, sg->v[i].e, 0))
				return oom(w);
			pm = sg->v[i].m;
		}
		for (size_t i = 0; i < o->n / 2; i++) {
			struct seg t = o->v[i];
			o->v[i] = o->v[o->n - 1 - i];
			o->v[o->n - 1 - i] = t;
		}
		break;
	case SPLIT_CONTIGUOUS:
		for (size_t i = 0; i < sg->n; i++) {
			if (sg->v[i].m == pm && o->n)
				o->v[o->n - 1].e = sg->v[i].e;
			else if (slist_push(o, sg->v[i].s, sg->v[i].e, 0))
				return oom(w);
			pm = sg->v[i].m;
		}
		break;
	}
	for (size_t i = 0; i < o->n; i++)
		if (o->v[i].e > o->v[i].s &&
		    plist_push(dst, pc->p + o->v[i].s, o->v[i].e - o->v[i].s,
			       pc->at_origin && o->v[i].s == 0))
			return oom(w);
	return 0;
}

static int pt_bytelevel(const taco_tok *tok, const struct tok_pt *pt,
			struct work *w, const struct piece *pc,
			struct plist *dst, int last)
{
	struct piece p = *pc;
	size_t first = dst->n;
	int r;

	if (pt->add_prefix_space && (p.n == 0 || p.p[0] != ' ')) {
		char *q = arena_alloc(w, p.n + 1);
		if (!q)
			return oom(w);
		q[0] = ' ';
		memcpy(q + 1, p.p, p.n);
		p.p = q;
		p.n++;
	}
	if (pt->use_regex) {
		if ((r = split_piece(&tok->gpt2_re, SPLIT_ISOLATED, 0, w, &p,
				     dst)))
			return r;
	} else if (p.n && plist_push(dst, p.p, p.n, p.at_origin)) {
		return oom(w);
	}
	if (last)
		return 0; /* the model reads the raw bytes (bpe_word raw) */
	for (size_t i = first; i < dst->n; i++) {
		struct piece *q = &dst->v[i];
		char *m = arena_alloc(w, q->n * 2);
		size_t mn = 0;
		if (!m)
			return oom(w);
		for (size_t k = 0; k < q->n; k++)
			mn += (size_t)tok_utf8_put(
			    tok_byte_char[(unsigned char)q->p[k]], m + mn);
		q->p = m;
		q->n = mn;
	}
	return 0;
}

static int pt_metaspace(const struct tok_pt *pt, struct work *w,
			const struct piece *pc, struct plist *dst)
{
	size_t spaces = 0, k = 0;
	struct piece p;
	char *q;
	int pre;

	for (size_t i = 0; i < pc->n; i++)
		spaces += pc->p[i] == ' ';
	q = arena_alloc(w, pc->n + spaces * (size_t)pt->repl_len +
			       (size_t)pt->repl_len);
	if (!q)
		return oom(w);
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
		return k ? plist_push(dst, q, k, p.at_origin) ? oom(w) : 0 : 0;
	return split_piece(&pt->re, SPLIT_MERGED_NEXT, 0, w, &p, dst);
}

/* Pre-tokenizers then the model, for one normalized piece. */
static int encode_piece(const taco_tok *tok, struct work *w, const char *s,
			size_t n, int at_origin, taco_tok_ids *out)
{
	struct plist *cur = &w->a, *nxt = &w->b, *t;
	int r;

	cur->n = 0;
	if (plist_push(cur, s, n, at_origin))
		return oom(w);
	for (int k = 0; k < tok->n_pts; k++) {
		const struct tok_pt *pt = &tok->pts[k];
		nxt->n = 0;
		for (size_t i = 0; i < cur->n; i++) {
			struct piece pc = cur->v[i];
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
	for (size_t i = 0; i < cur->n; i++)
		if ((r = bpe_word(tok, w, cur->v[i].p, cur->v[i].n,
				  tok->bytelevel_last, out)))
			return r == -ENOMEM ? oom(w) : r;
	return 0;
}

/* ------------------------------------------------------------ added */

/* The char s[0..n) is a word char next to a single_word added token. */
static int is_word_char(const char *s, size_t n)
{
	uint32_t cp;

	if (n == 1)
		return (s[0] >= '0' && s[0] <= '9') ||
		       (s[0] >= 'a' && s[0] <= 'z') ||
		       (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_';
	tok_utf8_next((const unsigned char *)s, n, &cp);
	return tok_is_word_cp(cp);
}

static size_t prev_char(const char *s, size_t i)
{
	while (i > 0 && ((unsigned char)s[--i] & 0xC0) == 0x80)
		;
	return i;
}

/* AddedVocabulary::find_matches: segments of s, tokens (m = added index)
 * and gaps (m = -1). */
static int split_added(const taco_tok *tok, const struct tok_trie *t,
		       struct work *w, const char *s, size_t n, struct slist *o)
{
	size_t i = 0, start_off = 0;

	o->n = 0;
	if (!t->term || t->empty) {
		if (n && slist_push(o, 0, n, -1))
			return oom(w);
		return 0;
	}
	while (i < n) {
		size_t len = 0, start, stop;
		int32_t k;
		const struct tok_added *a;

		if (!t->first[(unsigned char)s[i]]) {
			i++;
			continue;
		}
		k = trie_longest(t, s + i, n - i, &len);
		if (k < 0) {
			i++;
			continue;
		}
		a = &tok->added[k];
		start = i;
		stop = i + len;
		i = stop;
		if (a->single_word) {
			int ok = 1;
			if (start > 0) {
				size_t p = prev_char(s, start);
				if (is_word_char(s + p, start - p))
					ok = 0;
			}
			if (ok && stop < n) {
				uint32_t cp;
				int l = tok_utf8_next((const unsigned char *)s +
							  stop,
						      n - stop, &cp);
				if (is_word_char(s + stop, (size_t)l))
					ok = 0;
			}
			if (!ok)
				continue;
		}
		if (a->lstrip) {
			size_t ns = start;
			while (ns > 0) {
				size_t p = prev_char(s, ns);
				uint32_t cp;
				tok_utf8_next((const unsigned char *)s + p,
					      ns - p, &cp);
				if (!tok_is_whitespace(cp))
					break;
				ns = p;
			}
			start = ns > start_off ? ns : start_off;
		}
		if (a->rstrip) {
			while (stop < n) {
				uint32_t cp;
				int l = tok_utf8_next((const unsigned char *)s +
							  stop,
						      n - stop, &cp);
				if (!tok_is_whitespace(cp))
					break;
				stop += (size_t)l;
			}
		}
		if (start_off < start && slist_push(o, start_off, start, -1))
			return oom(w);
		if (slist_push(o, start, stop, k))
			return oom(w);
		start_off = stop;
	}
	if (start_off < n && slist_push(o, start_off, n, -1))
		return oom(w);
	return 0;
}

/* ------------------------------------------------------------ encode */

static int encode_text(const taco_tok *tok, struct work *w, const char *s,
		       size_t n, taco_tok_ids *out)
{
	struct slist *raw = &w->added1, *sub = &w->added2;
	int r;

	if ((r = split_added(tok, &tok->trie_raw, w, s, n, raw)))
		return r;
	for (size_t i = 0; i < raw->n; i++) {
		const struct seg *g = &raw->v[i];
		const char *p = s + g->s;
		size_t pn = g->e - g->s;

		if (g->m >= 0) {
			if (ids_push(out, tok->added[g->m].id))
				return oom(w);
			continue;
		}
		if (tok->n_norms) {
			if ((r = tok_normalize(tok, &w->m, p, pn, &w->norm,
					       &w->tmp, w->err)))
				return r == -ENOMEM
					   ? oom(w)
					   : taco_err_prefix(w->err, r, "%s",
							     w->name);
			p = w->norm.p;
			pn = w->norm.n;
		}
		if ((r = split_added(tok, &tok->trie_norm, w, p, pn, sub)))
			return r;
		for (size_t j = 0; j < sub->n; j++) {
			const struct seg *h = &sub->v[j];
			if (h->m >= 0) {
				if (ids_push(out, tok->added[h->m].id))
					return oom(w);
				continue;
			}
			if ((r = encode_piece(tok, w, p + h->s, h->e - h->s,
					      g->s == 0 && h->s == 0, out)))
				return r;
		}
	}
	return 0;
}

static int work_init(const taco_tok *tok, struct work *w, taco_err *err)
{
	memset(w, 0, sizeof(*w));
	w->err = err;
	w->name = tok->name;
	w->m.mc = tok->mctx;
	w->m.md = pcre2_match_data_create(1, NULL);
	if (!w->m.md)
		return oom(w);
	return 0;
}

/* Bytes a work state holds on to. */
static size_t work_size(const struct work *w)
{
	size_t n = w->input.cap + w->norm.cap + w->tmp.cap + w->word.cap;

	n += (w->a.cap + w->b.cap) * sizeof(struct piece);
	n += (w->segs.cap + w->segs2.cap + w->added1.cap + w->added2.cap) *
	     sizeof(struct seg);
	n += w->scap * 3 * sizeof(int32_t) + w->hcap * sizeof(struct heap_e);
	for (struct arena_block *b = w->arena; b; b = b->next)
		n += b->cap;
	return n;
}

/* A work state from the pool, or a new one. */
static struct work *work_get(const taco_tok *tok, taco_err *err)
{
	struct taco_tok *t = (struct taco_tok *)tok;
	struct work *w = NULL;

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
static void work_put(const taco_tok *tok, struct work *w)
{
	struct taco_tok *t = (struct taco_tok *)tok;

	/* keep one arena block */
	while (w->arena && w->arena->next) {
		struct arena_block *b = w->arena;
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
	struct work *w;
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
			r = oom(w);
			goto done;
		}
		text = w->input.p;
		len = w->input.n;
	}
	if (add_special_tokens)
		for (int k = 0; k < tok->n_post_pre; k++)
			if (ids_push(out, tok->post_pre[k])) {
				r = oom(w);
				goto done;
			}
	if ((r = encode_text(tok, w, text ? text : "", len, out)))
		goto done;
	if (add_special_tokens)
		for (int k = 0; k < tok->n_post_suf; k++)
			if (ids_push(out, tok->post_suf[k])) {
				r = oom(w);
				goto done;
			}
done:
	work_put(tok, w);
	if (r)
		out->n = 0;
	return r;
}

/* ------------------------------------------------------------ lookups */

int32_t tok_added_id_index(const struct taco_tok *tok, int32_t id)
{
	if (id < 0 || (uint32_t)id >= tok->n_added_by_id)
		return -1;
	return tok->added_by_id[id];
}

int32_t taco_tok_token_to_id(const taco_tok *tok, const char *token, size_t len)
{
	for (int i = 0; i < tok->n_added; i++)
		if (tok->added[i].len == len &&
		    !memcmp(tok->added[i].content, token, len))
			return tok->added[i].id;
	return tok_vocab_find(&tok->vocab, token, len);
}

const char *taco_tok_id_to_token(const taco_tok *tok, int32_t id, size_t *len)
{
	int32_t a = tok_added_id_index(tok, id);

	if (a >= 0) {
		/* tokenizers gives the normalized form of normalized tokens */
		*len = tok->added[a].match_len;
		return tok->added[a].match;
	}
	if (id < 0 || (uint32_t)id >= tok->vocab.n_ids ||
	    tok->vocab.off[id] == TOK_NONE)
		return NULL;
	*len = tok->vocab.len[id];
	return tok->vocab.pool + tok->vocab.off[id];
}

int32_t taco_tok_vocab_size(const taco_tok *tok)
{
	return tok->vocab_size;
}

int taco_tok_is_special(const taco_tok *tok, int32_t id)
{
	int32_t a = tok_added_id_index(tok, id);
	return a >= 0 && tok->added[a].special;
}

taco_tok_special taco_tok_special_ids(const taco_tok *tok)
{
	return tok->special;
}

int taco_tok_decode(const taco_tok *tok, const int32_t *ids, size_t n,
		    int skip_special_tokens, char **out, size_t *out_len,
		    taco_err *err)
{
	const char **toks = NULL;
	size_t *lens = NULL, k = 0;
	struct tok_buf b = {0};
	int r;

	*out = NULL;
	if (n > TACO_TOK_MAX_INPUT)
		return taco_err_set(err, -EFBIG,
				    "%s: decode: %zu ids is over the limit "
				    "of %u per call",
				    tok->name, n, TACO_TOK_MAX_INPUT);
	toks = malloc(sizeof(*toks) * (n ? n : 1));
	lens = malloc(sizeof(*lens) * (n ? n : 1));
	if (!toks || !lens) {
		free(toks);
		free(lens);
		return taco_err_set(err, -ENOMEM, "%s: decode: out of memory",
				    tok->name);
	}
	for (size_t i = 0; i < n; i++) {
		size_t l;
		const char *t = taco_tok_id_to_token(tok, ids[i], &l);
		if (!t)
			continue;
		if (skip_special_tokens &&
		    tok_added_id_index(tok, ids[i]) >= 0 &&
		    tok->added[tok_added_id_index(tok, ids[i])].skip)
			continue;
		toks[k] = t;
		lens[k++] = l;
	}
	r = tok_decode_tokens(tok, toks, lens, k, &b, err);
	free(toks);
	free(lens);
	if (r) {
		tok_buf_free(&b);
		return r;
	}
	if (!b.p && tok_buf_put(&b, "", 0))
		return taco_err_set(err, -ENOMEM, "%s: decode: out of memory",
				    tok->name);
	*out = b.p;
	if (out_len)
		*out_len = b.n;
	return 0;
}
