/* unicode.c: the users of the Unicode tables (tokenizer_unidata.h, the one
 * file that includes them): the normalization forms NFC, NFD, NFKC and
 * NFKD as tokenizers' normalizers have them, the General_Category classes
 * that regex.c writes for \p{..}, char::is_numeric (Digits) and the word
 * chars of single_word added tokens. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"
#include "tokenizer_unidata.h"

#define NTAB(t) (sizeof(t) / sizeof((t)[0]))

/* ------------------------------------------------------------ normalization */

static int find_decomp(const struct tok_decomp *t, size_t n, uint32_t cp)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (t[mid].cp < cp)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && t[lo].cp == cp ? (int)lo : -1;
}

static unsigned ccc_of(uint32_t cp)
{
	size_t lo = 0, hi = sizeof(tok_ccc_table) / sizeof(tok_ccc_table[0]);

	if (cp < 0x300)
		return 0;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (tok_ccc_table[mid].cp < cp)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < sizeof(tok_ccc_table) / sizeof(tok_ccc_table[0]) &&
		       tok_ccc_table[lo].cp == cp
		   ? tok_ccc_table[lo].ccc
		   : 0;
}

#define HANGUL_S 0xAC00u
#define HANGUL_L 0x1100u
#define HANGUL_V 0x1161u
#define HANGUL_T 0x11A7u
#define HANGUL_N 11172u

static uint32_t compose_pair(uint32_t a, uint32_t b)
{
	size_t lo = 0, hi = sizeof(tok_comp_table) / sizeof(tok_comp_table[0]);

	if (a >= HANGUL_L && a < HANGUL_L + 19 && b >= HANGUL_V &&
	    b < HANGUL_V + 21)
		return HANGUL_S + ((a - HANGUL_L) * 21 + (b - HANGUL_V)) * 28;
	if (a >= HANGUL_S && a < HANGUL_S + HANGUL_N &&
	    (a - HANGUL_S) % 28 == 0 && b > HANGUL_T && b < HANGUL_T + 28)
		return a + (b - HANGUL_T);
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		const struct tok_comp *c = &tok_comp_table[mid];
		if (c->a < a || (c->a == a && c->b < b))
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < sizeof(tok_comp_table) / sizeof(tok_comp_table[0]) &&
	    tok_comp_table[lo].a == a && tok_comp_table[lo].b == b)
		return tok_comp_table[lo].c;
	return 0;
}

/* 1 when cp may be changed by the form (decomposes, reorders, or
 * composes with what precedes it). Below U+0300 the composing forms keep
 * every char but those with a compatibility decomposition (NFKC); the
 * decomposing ones (NFD, NFKD) split the precomposed Latin letters. */
static int may_change(uint32_t cp, int compat, int compose)
{
	if (cp < 0x300 && compose && !compat)
		return 0;
	if (cp >= HANGUL_S && cp < HANGUL_S + HANGUL_N)
		return 1;
	if ((cp >= HANGUL_V && cp < HANGUL_V + 21) ||
	    (cp > HANGUL_T && cp < HANGUL_T + 28))
		return 1;
	if (compat && find_decomp(tok_compat, NTAB(tok_compat), cp) >= 0)
		return 1;
	if (cp < 0x300 && compose)
		return 0; /* NFKC: a canonical decomposition composes back */
	if (find_decomp(tok_canon, NTAB(tok_canon), cp) >= 0)
		return 1;
	return ccc_of(cp) != 0;
}

int tok_unicode_init(struct taco_tok *tok, const int need[4])
{
	for (int form = 0; form < 4; form++) {
		int compat = form == NORM_NFKC || form == NORM_NFKD;
		int compose = form == NORM_NFC || form == NORM_NFKC;
		uint8_t *bm;

		if (!need[form] || tok->qc[form])
			continue;
		bm = calloc(0x10000 / 8, 1);
		if (!bm)
			return -ENOMEM;
		for (uint32_t cp = 0; cp < 0x10000; cp++)
			if (may_change(cp, compat, compose))
				bm[cp >> 3] |= (uint8_t)(1u << (cp & 7));
		/* second elements of compositions */
		for (size_t i = 0; compose && i < NTAB(tok_comp_table); i++) {
			uint32_t b = tok_comp_table[i].b;
			if (b < 0x10000)
				bm[b >> 3] |= (uint8_t)(1u << (b & 7));
		}
		tok->qc[form] = bm;
	}
	return 0;
}

static int is_comp_second(uint32_t b)
{
	if (b >= 0x10000 && (b < 0x11000 || b > 0x11FFF))
		return 0;
	for (size_t i = 0; i < NTAB(tok_comp_table); i++)
		if (tok_comp_table[i].b == b)
			return 1;
	return 0;
}

/* 1 when s is certainly unchanged by the form. */
static int quick_check(const struct taco_tok *tok, int form,
		       const unsigned char *s, size_t n)
{
	int compat = form == NORM_NFKC || form == NORM_NFKD;
	int compose = form == NORM_NFC || form == NORM_NFKC;
	const uint8_t *bm = form >= 0 && form < 4 ? tok->qc[form] : NULL;
	size_t i = 0;

	while (i < n) {
		uint32_t cp;
		if (s[i] < 0x80) {
			/* compat forms leave ASCII alone too */
			i++;
			continue;
		}
		i += (size_t)tok_utf8_next(s + i, n - i, &cp);
		if (cp < 0x10000) {
			if (!bm || (bm[cp >> 3] >> (cp & 7)) & 1)
				return 0;
		} else if (may_change(cp, compat, compose) ||
			   (compose && is_comp_second(cp))) {
			return 0;
		}
	}
	return 1;
}

/* Code points on their way through a normalization form. */
struct cps {
	uint32_t *v;
	size_t n, cap;
};

static int push_cp(struct cps *c, uint32_t cp)
{
	if (c->n == c->cap) {
		size_t k = c->cap ? c->cap * 2 : 64;
		uint32_t *p = realloc(c->v, k * sizeof(uint32_t));
		if (!p)
			return -ENOMEM;
		c->v = p;
		c->cap = k;
	}
	c->v[c->n++] = cp;
	return 0;
}

static int push_decomp(struct cps *c, const struct tok_decomp *d,
		       const uint32_t *pool)
{
	int r = 0;

	for (uint32_t k = 0; !r && k < d->len; k++)
		r = push_cp(c, pool[d->off + k]);
	return r;
}

/* The full decomposition of cp (canonical, or compat when set). */
static int decompose(struct cps *c, uint32_t cp, int compat)
{
	int d, r;

	if (cp >= HANGUL_S && cp < HANGUL_S + HANGUL_N) {
		uint32_t si = cp - HANGUL_S;
		r = push_cp(c, HANGUL_L + si / 588);
		r = r ? r : push_cp(c, HANGUL_V + (si % 588) / 28);
		if (!r && si % 28)
			r = push_cp(c, HANGUL_T + si % 28);
		return r;
	}
	if (compat && (d = find_decomp(tok_compat, NTAB(tok_compat), cp)) >= 0)
		return push_decomp(c, &tok_compat[d], tok_compat_pool);
	if ((d = find_decomp(tok_canon, NTAB(tok_canon), cp)) >= 0)
		return push_decomp(c, &tok_canon[d], tok_canon_pool);
	return push_cp(c, cp);
}

/* Canonical ordering: a stable insertion sort of non-starter runs. */
static void canonical_order(struct cps *c)
{
	uint32_t *cps = c->v;

	for (size_t k = 1; k < c->n; k++) {
		uint32_t ch = cps[k];
		unsigned cc = ccc_of(ch);
		size_t j = k;

		if (!cc)
			continue;
		while (j > 0) {
			unsigned pc = ccc_of(cps[j - 1]);
			if (pc == 0 || pc <= cc)
				break;
			cps[j] = cps[j - 1];
			j--;
		}
		cps[j] = ch;
	}
}

/* Canonical composition (UAX #15), in place. */
static void compose_all(struct cps *c)
{
	uint32_t *cps = c->v;
	size_t starter = 0, w = 1;
	unsigned last;

	if (!c->n)
		return;
	last = ccc_of(cps[0]) ? 256 : 0;
	for (size_t k = 1; k < c->n; k++) {
		uint32_t ch = cps[k], comp;
		unsigned cc = ccc_of(ch);

		comp = compose_pair(cps[starter], ch);
		if (comp && (last < cc || last == 0)) {
			cps[starter] = comp;
			continue;
		}
		if (cc == 0)
			starter = w;
		last = cc;
		cps[w++] = ch;
	}
	c->n = w;
}

int tok_unicode_normalize(const struct taco_tok *tok, int form, const char *s,
			  size_t n, struct tok_buf *out)
{
	const unsigned char *u = (const unsigned char *)s;
	int compat = form == NORM_NFKC || form == NORM_NFKD;
	int compose = form == NORM_NFC || form == NORM_NFKC;
	struct cps c = {0};
	size_t i = 0;
	int r = 0;

	if (quick_check(tok, form, u, n))
		return tok_buf_put(out, s, n);
	while (i < n && !r) {
		uint32_t cp;
		i += (size_t)tok_utf8_next(u + i, n - i, &cp);
		r = decompose(&c, cp, compat);
	}
	if (r)
		goto out;
	canonical_order(&c);
	if (compose)
		compose_all(&c);
	if ((r = tok_buf_reserve(out, c.n * 4)))
		goto out;
	for (size_t k = 0; k < c.n; k++)
		out->n += (size_t)tok_utf8_put(c.v[k], out->p + out->n);
	out->p[out->n] = 0;
out:
	free(c.v);
	return r;
}

/* ------------------------------------------------------------ \p{..} */

/* \p{..} of a General_Category value (and \d, Oniguruma's \p{Nd}) are
 * rewritten into the code points that tokenizers' regex engine has for it
 * (tok_gc_runs, at its Unicode version), not left to PCRE2's tables, which
 * are of another Unicode version. When the PCRE2 linked has the tables
 * that tok_gc_pcre2_diff was made against, a class is PCRE2's own \p{..}
 * plus the code points that tokenizers has in it and PCRE2 not (fast:
 * PCRE2 looks a property up in one step); else, or when tokenizers has
 * fewer code points in it than PCRE2, or for a negated name inside a
 * class, it is the whole class as explicit ranges. */
int tok_regex_explicit_classes;

uint32_t tok_gc_mask(const char *s, size_t n)
{
	char k[48];
	size_t m = 0, lo = 0, hi = NTAB(tok_gc_names);

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == ' ' || c == '-' || c == '_')
			continue;
		if (c >= 0x80 || m + 1 >= sizeof(k))
			return 0;
		k[m++] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
	}
	k[m] = 0;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(tok_gc_names[mid].name, k);
		if (!c)
			return tok_gc_names[mid].mask;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return 0;
}

/* 1 when the PCRE2 linked has the tables tok_gc_pcre2_diff is against. */
static int gc_native_ok(void)
{
	char v[64] = {0};

	if (tok_regex_explicit_classes)
		return 0;
	if (pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, v) < 0)
		return 0;
	return !strcmp(v, TOK_GC_PCRE2_UNICODE);
}

static int put_range(struct tok_buf *o, uint32_t a, uint32_t b)
{
	char t[40];
	int k = a == b ? snprintf(t, sizeof(t), "\\x{%X}", (unsigned)a)
		       : snprintf(t, sizeof(t), "\\x{%X}-\\x{%X}", (unsigned)a,
				  (unsigned)b);
	return tok_buf_put(o, t, (size_t)k);
}

int tok_numeric_pattern(struct tok_buf *o, int runs)
{
	int r = tok_buf_put(o, "[\\p{N}", 6);

	for (size_t i = 0; !r && i < NTAB(tok_numeric_extra); i++)
		r = put_range(o, tok_numeric_extra[i][0],
			      tok_numeric_extra[i][1]);
	return r ? r : tok_buf_put(o, runs ? "]+" : "]", runs ? 2u : 1u);
}

int tok_is_word_cp(uint32_t cp)
{
	size_t lo = 0, hi = NTAB(tok_word_ranges);

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (tok_word_ranges[mid][1] < cp)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < NTAB(tok_word_ranges) && tok_word_ranges[lo][0] <= cp;
}

/* Appends, as class items, the code points whose category is in mask (not
 * in mask when negate), surrogates left out. *any: whether any was. */
static int put_gc_ranges(struct tok_buf *o, uint32_t mask, int negate, int *any)
{
	size_t n = NTAB(tok_gc_runs);
	uint32_t start = 0;
	int open = 0, r = 0;

	for (size_t i = 0; i < n && !r; i++) {
		uint32_t a = tok_gc_runs[i].lo;
		unsigned g = tok_gc_runs[i].gc;
		int in = (int)((mask >> g) & 1) != negate &&
			 strcmp(tok_gc_short[g], "Cs");

		if (in && !open) {
			start = a;
			open = 1;
		} else if (!in && open) {
			r = put_range(o, start, a - 1);
			open = 0;
			*any = 1;
		}
	}
	if (!r && open) {
		r = put_range(o, start, 0x10FFFF);
		*any = 1;
	}
	return r;
}

/* Appends PCRE2's own \p{..} items for mask: whole groups (L, M, ...) as
 * one item. */
static int put_gc_native(struct tok_buf *o, uint32_t mask)
{
	static const char groups[] = "LMNPSZC";
	int r = 0;

	for (const char *g = groups; *g && !r; g++) {
		uint32_t gm = 0;
		for (int i = 0; i < TOK_GC_COUNT; i++)
			if (tok_gc_short[i][0] == *g)
				gm |= 1u << i;
		if ((mask & gm) == gm) {
			char t[8] = {'\\', 'p', '{', *g, '}', 0};
			r = tok_buf_put(o, t, 5);
			mask &= ~gm;
		}
	}
	for (int i = 0; i < TOK_GC_COUNT && !r; i++)
		if ((mask >> i) & 1) {
			r = tok_buf_put(o, "\\p{", 3) ||
			    tok_buf_put(o, tok_gc_short[i], 2) ||
			    tok_buf_put(o, "}", 1);
		}
	return r ? -ENOMEM : 0;
}

static void mark_add(struct tok_class_adds *x, uint32_t lo, uint32_t hi)
{
	if (!x->any_add || lo < x->min_add)
		x->min_add = lo;
	x->any_add = 1;
	for (uint32_t b = lo >> 8; b <= hi >> 8; b++)
		x->blocks[b >> 3] |= (uint8_t)(1u << (b & 7));
}

/* Appends (unless x->no_adds; o NULL: only marks) the code points that
 * tokenizers has in the categories of mask and PCRE2's tables not, as
 * ranges, adjacent ones merged. */
static int put_adds(struct tok_buf *o, uint32_t mask, struct tok_class_adds *x)
{
	int r = 0;

	for (size_t i = 0; !r && i < NTAB(tok_gc_pcre2_diff); i++) {
		const struct tok_gc_diff *d = &tok_gc_pcre2_diff[i];
		uint32_t hi = d->hi;
		if (!((mask >> d->hf) & 1) || ((mask >> d->pcre2) & 1))
			continue;
		while (i + 1 < NTAB(tok_gc_pcre2_diff) &&
		       tok_gc_pcre2_diff[i + 1].lo == hi + 1 &&
		       ((mask >> tok_gc_pcre2_diff[i + 1].hf) & 1) &&
		       !((mask >> tok_gc_pcre2_diff[i + 1].pcre2) & 1))
			hi = tok_gc_pcre2_diff[++i].hi;
		mark_add(x, d->lo, hi);
		if (o && !x->no_adds)
			r = put_range(o, d->lo, hi);
	}
	return r;
}

static void mark_adds(struct tok_class_adds *x, uint32_t mask)
{
	put_adds(NULL, mask, x);
}

int tok_gc_class(struct tok_buf *o, uint32_t mask, int negate, int in_class,
		 struct tok_class_adds *x)
{
	int native = gc_native_ok(), add = 0, any = 0, r = 0;

	for (size_t i = 0; native && i < NTAB(tok_gc_pcre2_diff); i++) {
		const struct tok_gc_diff *d = &tok_gc_pcre2_diff[i];
		int hf = (mask >> d->hf) & 1, pc = (mask >> d->pcre2) & 1;
		if (pc && !hf)
			native = 0; /* PCRE2 has more: explicit ranges */
		add |= hf && !pc;
	}
	if (native && negate && in_class) {
		/* \P{X} of one category or group, when PCRE2 has it all */
		struct tok_buf one = {0};
		if (!add && !put_gc_native(&one, mask) &&
		    !memchr(one.p + 1, '\\', one.n - 1)) {
			one.p[1] = 'P';
			r = tok_buf_put(o, one.p, one.n);
			tok_buf_free(&one);
			return r;
		}
		tok_buf_free(&one);
		native = 0;
	}
	if (native && !in_class && (!add || x->no_adds)) {
		/* PCRE2's own \p{X} (\P{X}) when one item says it all */
		struct tok_buf one = {0};
		if (!put_gc_native(&one, mask) &&
		    !memchr(one.p + 1, '\\', one.n - 1)) {
			one.p[1] = negate ? 'P' : 'p';
			mark_adds(x, mask);
			r = tok_buf_put(o, one.p, one.n);
			tok_buf_free(&one);
			return r;
		}
		tok_buf_free(&one);
	}
	if (native) {
		r = in_class
			? 0
			: tok_buf_put(o, negate ? "[^" : "[", 1 + !!negate);
		r = r ? r : put_gc_native(o, mask);
		r = r ? r : put_adds(o, mask, x);
		return r ? r : in_class ? 0 : tok_buf_put(o, "]", 1);
	}
	if (in_class)
		return put_gc_ranges(o, mask, negate, &any);
	{
		size_t at = o->n;
		r = tok_buf_put(o, negate ? "[^" : "[", 1 + !!negate);
		r = r ? r : put_gc_ranges(o, mask, 0, &any);
		if (r || any)
			return r ? r : tok_buf_put(o, "]", 1);
		/* no code point: never matches, or (negated) any char */
		o->n = at;
		return tok_buf_put(o, negate ? "(?s:.)" : "(?!)",
				   negate ? 6 : 4);
	}
}
