/* bpe.c: the BPE model: its vocab and merges (hash tables), read from
 * tokenizer.json's model, and the merge loop of one pre-token (as
 * tokenizers' BPE::merge_word, with byte fallback, unk and its fusing, and
 * ignore_merges), with a cache of the results of short pre-tokens. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

/* ------------------------------------------------------------ hashing */

static uint32_t hash_bytes(const void *p, size_t n)
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

static int vocab_init(struct tok_vocab *v, uint32_t n_ids, uint32_t expect)
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
	h = hash_bytes(s, n);
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

/* Adds s as the string of id. Returns 0, -EEXIST when s is already there
 * (its id in *other), or -ENOMEM. */
static int vocab_add(struct tok_vocab *v, int32_t id, const char *s, size_t n,
		     int32_t *other)
{
	uint32_t h = hash_bytes(s, n), i;

	if (v->count * 2 + 2 > v->mask)
		return -ENOSPC; /* sized by vocab_init */
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

static const struct tok_merge *merges_find(const struct tok_merges *m,
					   int32_t a, int32_t b)
{
	uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
	uint32_t i;

	if (!m->slots)
		return NULL;
	for (i = tok_slot(key, m->mask);; i = (i + 1) & m->mask) {
		const struct tok_merge *e = &m->slots[i];
		if (e->key == key)
			return e;
		if (e->key == UINT64_MAX)
			return NULL;
	}
}

/* Inserts or overwrites (a later duplicate wins, as a Rust HashMap
 * collected from the merges list). */
static void merges_put(struct tok_merges *m, int32_t a, int32_t b,
		       uint32_t rank, int32_t id)
{
	uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
	uint32_t i;

	for (i = tok_slot(key, m->mask);; i = (i + 1) & m->mask) {
		struct tok_merge *e = &m->slots[i];
		if (e->key == key || e->key == UINT64_MAX) {
			if (e->key == UINT64_MAX)
				m->count++;
			e->key = key;
			e->rank = rank;
			e->id = id;
			return;
		}
	}
}

/* ------------------------------------------------------------ BPE */

static int sym_reserve(struct tok_work *w, size_t n)
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

static int heap_push(struct tok_work *w, size_t *hn, uint64_t key, int32_t id)
{
	size_t i;

	if (*hn == w->hcap) {
		size_t c = w->hcap ? w->hcap * 2 : 64;
		struct tok_heap_e *h = realloc(w->heap, c * sizeof(*h));
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

static struct tok_heap_e heap_pop(struct tok_work *w, size_t *hn)
{
	struct tok_heap_e top = w->heap[0], last = w->heap[--(*hn)];
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
static int bpe_merge(const taco_tok *tok, struct tok_work *w, size_t n,
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
		    merges_find(&tok->merges, id[i], id[i + 1]);
		if (m &&
		    heap_push(w, &hn, ((uint64_t)m->rank << 32) | i, m->id))
			return -ENOMEM;
	}
	while (hn) {
		struct tok_heap_e top = heap_pop(w, &hn);
		size_t pos = (size_t)(uint32_t)top.key;
		int32_t nx;
		const struct tok_merge *m;

		if (id[pos] < 0 || next[pos] < 0)
			continue; /* removed, or now the last symbol */
		nx = next[pos];
		m = merges_find(&tok->merges, id[pos], id[nx]);
		if (!m || m->id != top.id)
			continue; /* stale */
		id[pos] = top.id;
		id[nx] = -1;
		next[pos] = next[nx];
		if (next[nx] >= 0)
			prev[next[nx]] = (int32_t)pos;
		if (prev[pos] >= 0) {
			int32_t p = prev[pos];
			m = merges_find(&tok->merges, id[p], id[pos]);
			if (m &&
			    heap_push(w, &hn,
				      ((uint64_t)m->rank << 32) | (uint32_t)p,
				      m->id))
				return -ENOMEM;
		}
		if (next[pos] >= 0) {
			m = merges_find(&tok->merges, id[pos], id[next[pos]]);
			if (m &&
			    heap_push(w, &hn, ((uint64_t)m->rank << 32) | pos,
				      m->id))
				return -ENOMEM;
		}
	}
	for (int32_t i = n ? 0 : -1; i >= 0; i = next[i])
		if (tok_ids_push(out, id[i]))
			return -ENOMEM;
	return 0;
}

/* Symbols of a word, as BPE::merge_word: each char (with the continuing
 * prefix when not first, the end suffix when last) looked up, else its
 * bytes as <0xNN>, else unk (fused or not), else dropped. */
static int bpe_symbols(const taco_tok *tok, struct tok_work *w, const char *s,
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
			if (tok_ids_push(out, ids[i]))
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

int tok_bpe_word(const taco_tok *tok, struct tok_work *w, const char *s,
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
			return tok_ids_push(out, id);
	}
	if (cacheable) {
		h = hash_bytes(s, n);
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
			char *m = tok_arena_alloc(w, n * 2);
			size_t mn;
			if (!m)
				return -ENOMEM;
			mn = tok_bytelevel_encode(s, n, m);
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

/* ------------------------------------------------------------ loading */

/* model's type and options (not vocab and merges). */
static int model_options(struct tok_loader *L, json_t *m)
{
	static const char *const keys[] = {"type",
					   "dropout",
					   "unk_token",
					   "continuing_subword_prefix",
					   "end_of_word_suffix",
					   "fuse_unk",
					   "byte_fallback",
					   "ignore_merges",
					   "vocab",
					   "merges",
					   NULL};
	taco_tok *t = L->tok;
	json_t *dropout;
	const char *type, *s;
	size_t n;
	int r;

	if (!json_is_object(m))
		return tok_fail(L, -EINVAL, "model is required (an object)");
	if (!json_is_string(json_object_get(m, "type")))
		return tok_fail(L, -EINVAL, "model.type is required");
	type = json_string_value(json_object_get(m, "type"));
	if (strcmp(type, "BPE"))
		return tok_fail(L, -ENOTSUP, "model type '%s' is not supported",
				type);
	if ((r = tok_check_keys(L, m, "model", keys)))
		return r;
	dropout = json_object_get(m, "dropout");
	if (dropout && !json_is_null(dropout) &&
	    !(json_is_number(dropout) && json_number_value(dropout) == 0))
		return tok_fail(
		    L, -ENOTSUP,
		    "model.dropout is not supported (must be null)");
	if ((r = tok_get_bool(L, m, "model", "fuse_unk", 0, &t->fuse_unk)) ||
	    (r = tok_get_bool(L, m, "model", "byte_fallback", 0,
			      &t->byte_fallback)) ||
	    (r = tok_get_bool(L, m, "model", "ignore_merges", 0,
			      &t->ignore_merges)))
		return r;
	if ((r = tok_get_str(L, m, "model", "continuing_subword_prefix", 1, &s,
			     &n)))
		return r;
	if (s && n && !(t->cont_prefix = tok_dupn(s, n)))
		return tok_oom(L);
	t->cont_prefix_len = n;
	if ((r = tok_get_str(L, m, "model", "end_of_word_suffix", 1, &s, &n)))
		return r;
	if (s && n && !(t->word_suffix = tok_dupn(s, n)))
		return tok_oom(L);
	t->word_suffix_len = n;
	return 0;
}

/* The highest id of model.vocab, each checked, in *max_id (-1: none). */
static int vocab_max_id(struct tok_loader *L, json_t *vocab, int64_t *max_id)
{
	const char *key;
	json_t *v;

	*max_id = -1;
	if (!json_is_object(vocab))
		return tok_fail(L, -EINVAL,
				"model.vocab is required (an object of "
				"token: id)");
	if (json_object_size(vocab) > TACO_TOK_MAX_VOCAB)
		return tok_fail(L, -EFBIG,
				"model.vocab has %zu tokens, over the "
				"limit of %u",
				json_object_size(vocab), TACO_TOK_MAX_VOCAB);
	json_object_foreach(vocab, key, v)
	{
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) >= (json_int_t)TACO_TOK_MAX_VOCAB)
			return tok_fail(L, -EINVAL,
					"model.vocab['%.200s'] must be an id "
					"in [0, %u)",
					key, TACO_TOK_MAX_VOCAB);
		if (json_integer_value(v) > *max_id)
			*max_id = json_integer_value(v);
	}
	return 0;
}

static int model_vocab(struct tok_loader *L, json_t *vocab)
{
	taco_tok *t = L->tok;
	const char *key;
	int64_t max_id;
	json_t *v;
	int r;

	if ((r = vocab_max_id(L, vocab, &max_id)))
		return r;
	if ((r = vocab_init(&t->vocab, (uint32_t)(max_id + 1),
			    (uint32_t)json_object_size(vocab))))
		return tok_oom(L);
	json_object_foreach(vocab, key, v)
	{
		size_t kl = strlen(key);
		int32_t other;
		int32_t id = (int32_t)json_integer_value(v);
		if (kl > TACO_TOK_MAX_TOKEN_LEN)
			return tok_fail(L, -EFBIG,
					"model.vocab: token '%.40s...' is "
					"longer than %d bytes",
					key, TACO_TOK_MAX_TOKEN_LEN);
		if (t->vocab.off[id] != TOK_NONE)
			return tok_fail(L, -EINVAL,
					"model.vocab: id %d is used by "
					"'%.200s' and '%.200s'",
					id, t->vocab.pool + t->vocab.off[id],
					key);
		r = vocab_add(&t->vocab, id, key, kl, &other);
		if (r)
			return r == -ENOMEM ? tok_oom(L)
					    : tok_fail(L, -EINVAL,
						       "model.vocab: duplicate "
						       "token '%.200s'",
						       key);
	}
	return 0;
}

/* unk_token, and the <0xNN> tokens of byte fallback. */
static int model_unk(struct tok_loader *L, json_t *m)
{
	taco_tok *t = L->tok;
	const char *s;
	size_t n;
	int r;

	if ((r = tok_get_str(L, m, "model", "unk_token", 1, &s, &n)))
		return r;
	t->unk_id = -1;
	if (s) {
		t->unk_id = tok_vocab_find(&t->vocab, s, n);
		if (t->unk_id < 0)
			return tok_fail(L, -EINVAL,
					"model.unk_token '%.200s' is not in "
					"the vocab",
					s);
	}
	for (int b = 0; b < 256; b++) {
		char name[8];
		snprintf(name, sizeof(name), "<0x%02X>", b);
		t->fallback_id[b] = tok_vocab_find(&t->vocab, name, 6);
	}
	return 0;
}

/* model.merges[i]: "a b" or ["a", "b"]. */
static int merge_pair(struct tok_loader *L, json_t *e, size_t i, const char **a,
		      size_t *al, const char **b, size_t *bl)
{
	if (json_is_string(e)) {
		const char *sp, *x = json_string_value(e);
		size_t xl = json_string_length(e);
		sp = memchr(x, ' ', xl);
		if (!sp || memchr(sp + 1, ' ', xl - (size_t)(sp - x) - 1))
			return tok_fail(L, -EINVAL,
					"model.merges[%zu] '%.200s' must be "
					"two tokens separated by one space",
					i, x);
		*a = x;
		*al = (size_t)(sp - x);
		*b = sp + 1;
		*bl = xl - *al - 1;
		return 0;
	}
	if (json_is_array(e) && json_array_size(e) == 2 &&
	    json_is_string(json_array_get(e, 0)) &&
	    json_is_string(json_array_get(e, 1))) {
		*a = json_string_value(json_array_get(e, 0));
		*al = json_string_length(json_array_get(e, 0));
		*b = json_string_value(json_array_get(e, 1));
		*bl = json_string_length(json_array_get(e, 1));
		return 0;
	}
	return tok_fail(L, -EINVAL,
			"model.merges[%zu] must be \"a b\" or [\"a\", \"b\"]",
			i);
}

/* Merge i of a and b (its continuing prefix dropped when merged): both and
 * the merged token must be in the vocab. */
static int merge_add(struct tok_loader *L, size_t i, const char *a, size_t al,
		     const char *b, size_t bl)
{
	taco_tok *t = L->tok;
	size_t cp = t->cont_prefix_len;
	int32_t ia, ib, im;
	char *buf;
	int r;

	ia = tok_vocab_find(&t->vocab, a, al);
	ib = tok_vocab_find(&t->vocab, b, bl);
	if (ia < 0 || ib < 0)
		return tok_fail(
		    L, -EINVAL,
		    "model.merges[%zu]: token '%.*s' is not in the vocab", i,
		    (int)(ia < 0 ? (al < 200 ? al : 200)
				 : (bl < 200 ? bl : 200)),
		    ia < 0 ? a : b);
	if (bl < cp || (cp && ((unsigned char)b[cp] & 0xC0) == 0x80))
		return tok_fail(L, -EINVAL,
				"model.merges[%zu]: '%.200s' is shorter "
				"than continuing_subword_prefix",
				i, b);
	buf = malloc(al + bl + 1);
	if (!buf)
		return tok_oom(L);
	memcpy(buf, a, al);
	memcpy(buf + al, b + cp, bl - cp);
	im = tok_vocab_find(&t->vocab, buf, al + bl - cp);
	if (im < 0) {
		buf[al + bl - cp] = 0;
		r = tok_fail(L, -EINVAL,
			     "model.merges[%zu]: the merged token '%.200s' is "
			     "not in the vocab",
			     i, buf);
		free(buf);
		return r;
	}
	free(buf);
	merges_put(&t->merges, ia, ib, (uint32_t)i, im);
	return 0;
}

static int model_merges(struct tok_loader *L, json_t *merges)
{
	taco_tok *t = L->tok;
	uint32_t cap = 16;
	size_t n;
	int r;

	if (!merges || json_is_null(merges))
		merges = NULL;
	else if (!json_is_array(merges))
		return tok_fail(L, -EINVAL, "model.merges must be an array");
	n = merges ? json_array_size(merges) : 0;
	if (n > TACO_TOK_MAX_MERGES)
		return tok_fail(L, -EFBIG,
				"model.merges has %zu entries, over the limit "
				"of %u",
				n, TACO_TOK_MAX_MERGES);
	while (cap < n * 2 + 16)
		cap *= 2;
	t->merges.slots = malloc(sizeof(struct tok_merge) * cap);
	if (!t->merges.slots)
		return tok_oom(L);
	for (uint32_t k = 0; k < cap; k++)
		t->merges.slots[k].key = UINT64_MAX;
	t->merges.mask = cap - 1;
	for (size_t i = 0; i < n; i++) {
		const char *a = NULL, *b = NULL;
		size_t al = 0, bl = 0;
		if ((r = merge_pair(L, json_array_get(merges, i), i, &a, &al,
				    &b, &bl)) ||
		    (r = merge_add(L, i, a, al, b, bl)))
			return r;
	}
	return 0;
}

int tok_parse_model(struct tok_loader *L, json_t *m)
{
	int r;

	if ((r = model_options(L, m)) ||
	    (r = model_vocab(L, json_object_get(m, "vocab"))) ||
	    (r = model_unk(L, m)))
		return r;
	return model_merges(L, json_object_get(m, "merges"));
}

int tok_build_raw_vocab(struct tok_loader *L)
{
	taco_tok *t = L->tok;
	char *raw = malloc(TACO_TOK_MAX_TOKEN_LEN + 1);

	if (!raw || vocab_init(&t->rvocab, t->vocab.n_ids, t->vocab.count)) {
		free(raw);
		return tok_oom(L);
	}
	for (uint32_t id = 0; id < t->vocab.n_ids; id++) {
		size_t k;
		int32_t other;

		if (t->vocab.off[id] == TOK_NONE ||
		    !tok_bytelevel_decode((const unsigned char *)t->vocab.pool +
					      t->vocab.off[id],
					  t->vocab.len[id], raw, &k))
			continue;
		if (vocab_add(&t->rvocab, (int32_t)id, raw, k, &other) ==
		    -ENOMEM) {
			free(raw);
			return tok_oom(L);
		}
	}
	free(raw);
	for (int b = 0; b < 256; b++) {
		char u[4];
		int l = tok_utf8_put(tok_byte_char[b], u);
		t->byte_id[b] = tok_vocab_find(&t->vocab, u, (size_t)l);
	}
	t->has_rvocab = 1;
	return 0;
}
