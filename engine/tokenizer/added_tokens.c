/* added_tokens.c: the added tokens (tokenizers' AddedVocabulary): read from
 * tokenizer.json's added_tokens, put in byte tries (those matched on the
 * raw text, and those matched on the normalized text), and found in a text
 * leftmost-longest with single_word, lstrip and rstrip. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

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
		for (j = tok_slot(t->keys[i], cap - 1); k[j];
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

	for (i = tok_slot(key, t->mask); t->keys[i]; i = (i + 1) & t->mask)
		if (t->keys[i] == key)
			return t->vals[i];
	return -1;
}

static int trie_add(struct tok_trie *t, const char *s, size_t n, int32_t idx)
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
			for (j = tok_slot(key, t->mask); t->keys[j];
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

/* A single_word token at [start, stop) of s[0..n) is one: no word char
 * right before or after it. */
static int single_word_ok(const char *s, size_t n, size_t start, size_t stop)
{
	if (start > 0) {
		size_t p = prev_char(s, start);
		if (is_word_char(s + p, start - p))
			return 0;
	}
	if (stop < n) {
		uint32_t cp;
		int l = tok_utf8_next((const unsigned char *)s + stop, n - stop,
				      &cp);
		if (is_word_char(s + stop, (size_t)l))
			return 0;
	}
	return 1;
}

/* lstrip: start moved left over White_Space, not before low. */
static size_t lstrip_start(const char *s, size_t start, size_t low)
{
	size_t ns = start;

	while (ns > 0) {
		size_t p = prev_char(s, ns);
		uint32_t cp;
		tok_utf8_next((const unsigned char *)s + p, ns - p, &cp);
		if (!tok_is_whitespace(cp))
			break;
		ns = p;
	}
	return ns > low ? ns : low;
}

/* rstrip: stop moved right over White_Space. */
static size_t rstrip_stop(const char *s, size_t n, size_t stop)
{
	while (stop < n) {
		uint32_t cp;
		int l = tok_utf8_next((const unsigned char *)s + stop, n - stop,
				      &cp);
		if (!tok_is_whitespace(cp))
			break;
		stop += (size_t)l;
	}
	return stop;
}

int tok_split_added(const taco_tok *tok, const struct tok_trie *t,
		    struct tok_work *w, const char *s, size_t n,
		    struct tok_slist *o)
{
	size_t i = 0, start_off = 0;

	o->n = 0;
	if (!t->term || t->empty) {
		if (n && tok_slist_push(o, 0, n, -1))
			return tok_work_oom(w);
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
		if (a->single_word && !single_word_ok(s, n, start, stop))
			continue;
		if (a->lstrip)
			start = lstrip_start(s, start, start_off);
		if (a->rstrip)
			stop = rstrip_stop(s, n, stop);
		if (start_off < start &&
		    tok_slist_push(o, start_off, start, -1))
			return tok_work_oom(w);
		if (tok_slist_push(o, start, stop, k))
			return tok_work_oom(w);
		start_off = stop;
	}
	if (start_off < n && tok_slist_push(o, start_off, n, -1))
		return tok_work_oom(w);
	return 0;
}

int32_t tok_added_id_index(const struct taco_tok *tok, int32_t id)
{
	if (id < 0 || (uint32_t)id >= tok->n_added_by_id)
		return -1;
	return tok->added_by_id[id];
}

/* ------------------------------------------------------------ loading */

/* The id tokenizers' add_tokens gives content s[0..n) after the tokens
 * before it (max_added: their highest id), or -2 when it is one of them
 * already (with the same id, else an error). */
static int expected_id(struct tok_loader *L, const char *w, const char *s,
		       size_t n, int32_t id, int64_t max_added, int32_t *expect)
{
	taco_tok *t = L->tok;
	int64_t next;

	for (int k = 0; k < t->n_added; k++)
		if (t->added[k].len == n &&
		    !memcmp(t->added[k].content, s, n)) {
			if (t->added[k].id != id)
				return tok_fail(L, -EINVAL,
						"%s: '%.200s' appears twice "
						"with ids %d and %d",
						w, s, t->added[k].id, id);
			*expect = -2;
		}
	if (*expect == -2)
		return 0;
	*expect = tok_vocab_find(&t->vocab, s, n);
	if (*expect >= 0)
		return 0;
	next = t->vocab.count;
	if (max_added + 1 > next)
		next = max_added + 1;
	*expect = (int32_t)next;
	return 0;
}

static int added_flags(struct tok_loader *L, struct tok_added *x, json_t *e,
		       const char *w)
{
	/* in this order: normalized defaults to !special */
	const struct {
		const char *key;
		uint8_t *field;
	} flags[] = {{"special", &x->special},
		     {"single_word", &x->single_word},
		     {"lstrip", &x->lstrip},
		     {"rstrip", &x->rstrip},
		     {"normalized", &x->normalized}};
	int b = 0, r;

	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
		int dflt = !strcmp(flags[i].key, "normalized") && !x->special;
		if ((r = tok_get_bool(L, e, w, flags[i].key, dflt, &b)))
			return r;
		*flags[i].field = (uint8_t)b;
	}
	return 0;
}

/* added_tokens[i]: appended to tok->added unless it repeats one. */
static int parse_added_entry(struct tok_loader *L, json_t *e, size_t i,
			     int64_t *max_added)
{
	static const char *const keys[] = {"id",      "content", "single_word",
					   "lstrip",  "rstrip",	 "normalized",
					   "special", NULL};
	taco_tok *t = L->tok;
	struct tok_added *x = &t->added[t->n_added];
	char w[64];
	const char *s;
	size_t n;
	int32_t id = -1, expect = -1;
	int r;

	snprintf(w, sizeof(w), "added_tokens[%zu]", i);
	if (!json_is_object(e))
		return tok_fail(L, -EINVAL, "%s must be an object", w);
	if ((r = tok_check_keys(L, e, w, keys)) ||
	    (r = tok_get_str(L, e, w, "content", 0, &s, &n)))
		return r;
	if (!n)
		return tok_fail(L, -EINVAL, "%s.content is empty", w);
	if ((r = tok_get_id(L, json_object_get(e, "id"), w, &id)) ||
	    (r = expected_id(L, w, s, n, id, *max_added, &expect)))
		return r;
	if (expect == -2)
		return 0;
	if (id != expect)
		return tok_fail(L, -EINVAL,
				"%s: id %d of '%.200s' differs from the id "
				"tokenizers assigns it (%d)",
				w, id, s, expect);
	if (id > *max_added)
		*max_added = id;
	x->id = id;
	x->len = (uint32_t)n;
	if (!(x->content = tok_dupn(s, n)))
		return tok_oom(L);
	if ((r = added_flags(L, x, e, w)))
		return r;
	t->n_added++;
	return 0;
}

int tok_parse_added(struct tok_loader *L, json_t *a)
{
	taco_tok *t = L->tok;
	int64_t max_added = -1;
	json_t *e;
	size_t i;
	int r;

	if (!a || json_is_null(a))
		return 0;
	if (!json_is_array(a))
		return tok_fail(L, -EINVAL, "added_tokens must be an array");
	if (json_array_size(a) > TACO_TOK_MAX_ADDED)
		return tok_fail(L, -EFBIG,
				"added_tokens has %zu entries, over the limit "
				"of %d",
				json_array_size(a), TACO_TOK_MAX_ADDED);
	t->added = calloc(json_array_size(a) + 1, sizeof(struct tok_added));
	if (!t->added)
		return tok_oom(L);
	json_array_foreach(a, i, e)
	{
		if ((r = parse_added_entry(L, e, i, &max_added)))
			return r;
	}
	return 0;
}

/* What added token x matches: its content, normalized when it is
 * normalized and there is a normalizer. */
static int added_match(struct tok_loader *L, struct tok_added *x,
		       struct tok_matcher *m, struct tok_buf *nb,
		       struct tok_buf *tmp)
{
	taco_tok *t = L->tok;
	taco_err e2;
	int r;

	if (x->normalized)
		L->has_normalized_added = 1;
	if (!x->normalized || !t->n_norms) {
		x->match = x->content;
		x->match_len = x->len;
		return 0;
	}
	if ((r = tok_normalize(t, m, x->content, x->len, nb, tmp, &e2)))
		return tok_fail(L, r, "added_tokens: normalizing '%.200s': %s",
				x->content, e2.msg);
	x->match_len = (uint32_t)nb->n;
	if (!(x->match = tok_dupn(nb->p ? nb->p : "", nb->n)))
		return tok_oom(L);
	return 0;
}

/* The tries of what the added tokens match. */
static int added_tries(struct tok_loader *L)
{
	taco_tok *t = L->tok;
	struct tok_buf nb = {0}, tmp = {0};
	struct tok_matcher m = {0};
	int r = 0;

	t->trie_raw.empty = t->trie_norm.empty = 1;
	m.md = pcre2_match_data_create(1, NULL);
	m.mc = t->mctx;
	if (!m.md)
		return tok_oom(L);
	for (int i = 0; i < t->n_added && !r; i++) {
		struct tok_added *x = &t->added[i];
		if ((r = added_match(L, x, &m, &nb, &tmp)))
			break;
		if (x->match_len &&
		    trie_add(x->normalized ? &t->trie_norm : &t->trie_raw,
			     x->match, x->match_len, i))
			r = tok_oom(L);
	}
	pcre2_match_data_free(m.md);
	tok_buf_free(&nb);
	tok_buf_free(&tmp);
	return r;
}

int tok_build_added(struct tok_loader *L)
{
	taco_tok *t = L->tok;
	int r;

	if ((r = added_tries(L)))
		return r;
	for (int i = 0; i < t->n_added; i++) {
		struct tok_added *x = &t->added[i];
		if (x->match == x->content) {
			x->skip = x->special;
			continue;
		}
		for (int k = 0; k < t->n_added && !x->skip; k++)
			x->skip = t->added[k].special &&
				  t->added[k].len == x->match_len &&
				  !memcmp(t->added[k].content, x->match,
					  x->match_len);
	}
	/* by id */
	t->n_added_by_id = (uint32_t)t->vocab_size;
	t->added_by_id = malloc(sizeof(int32_t) * (t->n_added_by_id + 1));
	if (!t->added_by_id)
		return tok_oom(L);
	for (uint32_t i = 0; i < t->n_added_by_id; i++)
		t->added_by_id[i] = -1;
	for (int i = 0; i < t->n_added; i++)
		if (t->added_by_id[t->added[i].id] < 0)
			t->added_by_id[t->added[i].id] = i;
	return 0;
}
