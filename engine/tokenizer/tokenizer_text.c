/* tokenizer_text.c: text machinery of the tokenizer: buffers, UTF-8,
 * Unicode normalization, regex (PCRE2), normalizers and decoders. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"
#include "tokenizer_unidata.h"
#include "util/hex.h"

/* ------------------------------------------------------------ buffers */

int tok_buf_reserve(struct tok_buf *b, size_t extra)
{
	size_t need, cap;
	char *p;

	if (extra > SIZE_MAX / 2 - b->n)
		return -ENOMEM;
	need = b->n + extra + 1;
	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 64;
	while (cap < need)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

int tok_buf_put(struct tok_buf *b, const void *p, size_t n)
{
	if (tok_buf_reserve(b, n))
		return -ENOMEM;
	if (n)
		memcpy(b->p + b->n, p, n);
	b->n += n;
	b->p[b->n] = 0;
	return 0;
}

void tok_buf_free(struct tok_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->n = b->cap = 0;
}

/* ------------------------------------------------------------ UTF-8 */

int tok_utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
	unsigned char c = s[0];

	if (c < 0x80 || n < 2) {
		*cp = c;
		return 1;
	}
	if (c < 0xE0) {
		*cp = ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
		return 2;
	}
	if (c < 0xF0 || n < 4) {
		if (n < 3) {
			*cp = c;
			return 1;
		}
		*cp = ((uint32_t)(c & 0x0F) << 12) |
		      ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
		return 3;
	}
	*cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
	      ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
	return 4;
}

int tok_utf8_put(uint32_t cp, char *out)
{
	unsigned char *o = (unsigned char *)out;

	if (cp < 0x80) {
		o[0] = (unsigned char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (unsigned char)(0xC0 | (cp >> 6));
		o[1] = (unsigned char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (unsigned char)(0xE0 | (cp >> 12));
		o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
		o[2] = (unsigned char)(0x80 | (cp & 0x3F));
		return 3;
	}
	o[0] = (unsigned char)(0xF0 | (cp >> 18));
	o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
	o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
	o[3] = (unsigned char)(0x80 | (cp & 0x3F));
	return 4;
}

/* Well-formed UTF-8 (Unicode table 3-7). Returns the length of the
 * sequence at s, or 0 and in *bad the length of its maximal subpart (the
 * longest prefix of a well-formed sequence, at least 1). */
size_t tok_utf8_valid_prefix(const unsigned char *s, size_t n, size_t *bad)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xBF;
	size_t need, i;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		need = 1;
	else if (c >= 0xE0 && c <= 0xEF) {
		need = 2;
		if (c == 0xE0)
			lo = 0xA0;
		else if (c == 0xED)
			hi = 0x9F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		need = 3;
		if (c == 0xF0)
			lo = 0x90;
		else if (c == 0xF4)
			hi = 0x8F;
	} else {
		*bad = 1;
		return 0;
	}
	for (i = 1; i <= need; i++) {
		if (i >= n || s[i] < lo || s[i] > hi) {
			*bad = i;
			return 0;
		}
		lo = 0x80;
		hi = 0xBF;
	}
	return need + 1;
}

int tok_utf8_lossy(struct tok_buf *out, const unsigned char *s, size_t n)
{
	static const char fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
	size_t i = 0, run = 0, k, bad;

	if (!n)
		return tok_buf_put(out, "", 0);
	while (i < n) {
		if (s[i] < 0x80) {
			i++;
			continue;
		}
		k = tok_utf8_valid_prefix(s + i, n - i, &bad);
		if (k) {
			i += k;
			continue;
		}
		if (tok_buf_put(out, s + run, i - run) ||
		    tok_buf_put(out, fffd, 3))
			return -ENOMEM;
		i += bad;
		run = i;
	}
	return tok_buf_put(out, s + run, n - run);
}

/* Rust char::is_whitespace: the White_Space property. */
int tok_is_whitespace(uint32_t c)
{
	if (c < 0x80)
		return c == ' ' || (c >= 9 && c <= 13);
	return c == 0x85 || c == 0xA0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
	       c == 0x202F || c == 0x205F || c == 0x3000;
}

/* ------------------------------------------------------------ byte level */

/* GPT-2's bytes_to_unicode: printable bytes map to themselves, the others
 * to U+0100 and up in byte order. */
const uint16_t tok_byte_char[256] = {
    256, 257, 258, 259, 260, 261, 262, 263, 264, 265, 266, 267, 268, 269, 270,
    271, 272, 273, 274, 275, 276, 277, 278, 279, 280, 281, 282, 283, 284, 285,
    286, 287, 288, 33,	34,  35,  36,  37,  38,	 39,  40,  41,	42,  43,  44,
    45,	 46,  47,  48,	49,  50,  51,  52,  53,	 54,  55,  56,	57,  58,  59,
    60,	 61,  62,  63,	64,  65,  66,  67,  68,	 69,  70,  71,	72,  73,  74,
    75,	 76,  77,  78,	79,  80,  81,  82,  83,	 84,  85,  86,	87,  88,  89,
    90,	 91,  92,  93,	94,  95,  96,  97,  98,	 99,  100, 101, 102, 103, 104,
    105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116, 117, 118, 119,
    120, 121, 122, 123, 124, 125, 126, 289, 290, 291, 292, 293, 294, 295, 296,
    297, 298, 299, 300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310, 311,
    312, 313, 314, 315, 316, 317, 318, 319, 320, 321, 322, 161, 162, 163, 164,
    165, 166, 167, 168, 169, 170, 171, 172, 323, 174, 175, 176, 177, 178, 179,
    180, 181, 182, 183, 184, 185, 186, 187, 188, 189, 190, 191, 192, 193, 194,
    195, 196, 197, 198, 199, 200, 201, 202, 203, 204, 205, 206, 207, 208, 209,
    210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222, 223, 224,
    225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 235, 236, 237, 238, 239,
    240, 241, 242, 243, 244, 245, 246, 247, 248, 249, 250, 251, 252, 253, 254,
    255,
};

int tok_char_byte(uint32_t cp)
{
	if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) ||
	    (cp >= 174 && cp <= 255))
		return (int)cp;
	if (cp >= 256 && cp <= 323) {
		uint32_t k = cp - 256; /* k-th byte outside the printable set */
		if (k <= 32)
			return (int)k;
		if (k <= 32 + 34)
			return (int)(127 + (k - 33));
		return 173;
	}
	return -1;
}

/* ------------------------------------------------------------ Unicode */

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

#define NTAB(t) (sizeof(t) / sizeof((t)[0]))

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

static int push_cp(uint32_t **v, size_t *n, size_t *cap, uint32_t cp)
{
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 64;
		uint32_t *p = realloc(*v, c * sizeof(uint32_t));
		if (!p)
			return -ENOMEM;
		*v = p;
		*cap = c;
	}
	(*v)[(*n)++] = cp;
	return 0;
}

int tok_unicode_normalize(const struct taco_tok *tok, int form, const char *s,
			  size_t n, struct tok_buf *out)
{
	const unsigned char *u = (const unsigned char *)s;
	int compat = form == NORM_NFKC || form == NORM_NFKD;
	int compose = form == NORM_NFC || form == NORM_NFKC;
	uint32_t *cps = NULL;
	size_t ncp = 0, cap = 0, i = 0;
	int r = 0;

	if (quick_check(tok, form, u, n))
		return tok_buf_put(out, s, n);
	/* decompose */
	while (i < n) {
		uint32_t cp;
		int d = -1;

		i += (size_t)tok_utf8_next(u + i, n - i, &cp);
		if (cp >= HANGUL_S && cp < HANGUL_S + HANGUL_N) {
			uint32_t si = cp - HANGUL_S;
			r = push_cp(&cps, &ncp, &cap, HANGUL_L + si / 588);
			r = r ? r
			      : push_cp(&cps, &ncp, &cap,
					HANGUL_V + (si % 588) / 28);
			if (!r && si % 28)
				r = push_cp(&cps, &ncp, &cap,
					    HANGUL_T + si % 28);
		} else if (compat &&
			   (d = find_decomp(tok_compat, NTAB(tok_compat),
					    cp)) >= 0) {
			for (uint32_t k = 0; !r && k < tok_compat[d].len; k++)
				r = push_cp(
				    &cps, &ncp, &cap,
				    tok_compat_pool[tok_compat[d].off + k]);
		} else if ((d = find_decomp(tok_canon, NTAB(tok_canon), cp)) >=
			   0) {
			for (uint32_t k = 0; !r && k < tok_canon[d].len; k++)
				r = push_cp(
				    &cps, &ncp, &cap,
				    tok_canon_pool[tok_canon[d].off + k]);
		} else {
			r = push_cp(&cps, &ncp, &cap, cp);
		}
		if (r)
			goto out;
	}
	/* canonical ordering: stable insertion sort of non-starter runs */
	for (size_t k = 1; k < ncp; k++) {
		uint32_t c = cps[k];
		unsigned cc = ccc_of(c);
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
		cps[j] = c;
	}
	/* canonical composition (UAX #15) */
	if (compose && ncp) {
		size_t starter = 0, w = 1;
		unsigned last = ccc_of(cps[0]) ? 256 : 0;

		for (size_t k = 1; k < ncp; k++) {
			uint32_t c = cps[k], comp;
			unsigned cc = ccc_of(c);

			comp = compose_pair(cps[starter], c);
			if (comp && (last < cc || last == 0)) {
				cps[starter] = comp;
				continue;
			}
			if (cc == 0)
				starter = w;
			last = cc;
			cps[w++] = c;
		}
		ncp = w;
	}
	if ((r = tok_buf_reserve(out, ncp * 4)))
		goto out;
	for (size_t k = 0; k < ncp; k++)
		out->n += (size_t)tok_utf8_put(cps[k], out->p + out->n);
	out->p[out->n] = 0;
out:
	free(cps);
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

/* The mask of the categories of a \p{..} name (between the braces), or 0
 * when it is not a category name (a script, a binary property). */
static uint32_t gc_mask(const char *s, size_t n)
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

/* A translation: with no_adds set, the added code points (those that
 * tokenizers has in a class and PCRE2's tables not) are left out, which
 * gives the same matches on any text without them; blocks (one bit per 256
 * code points) and min_add say where they are. */
struct xlate {
	int no_adds;
	int any_add;
	uint32_t min_add;
	uint8_t blocks[0x110000 / 256 / 8];
};

static void mark_add(struct xlate *x, uint32_t lo, uint32_t hi)
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
static int put_adds(struct tok_buf *o, uint32_t mask, struct xlate *x)
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

static void mark_adds(struct xlate *x, uint32_t mask)
{
	put_adds(NULL, mask, x);
}

/* Appends the class of the categories in mask (negated: the others), as an
 * atom ([..]) or, in_class, as items of the class being written. */
static int put_gc_class(struct tok_buf *o, uint32_t mask, int negate,
			int in_class, struct xlate *x)
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

/* ------------------------------------------------------------ regex */

/* Oniguruma's \s: Unicode White_Space, as a class body. */
#define WS_BODY                                                                \
	"\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}"    \
	"\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

static int translate(const char *p, size_t n, struct tok_buf *o,
		     const char **bad, struct xlate *x)
{
	size_t i = 0;
	int in_class = 0, r = 0;

	while (i < n && !r) {
		char c = p[i];

		if (c == '\\') {
			char d;
			if (i + 1 >= n) {
				*bad = "a trailing backslash";
				return -EINVAL;
			}
			d = p[i + 1];
			if ((d == 'p' || d == 'P') && i + 2 < n &&
			    p[i + 2] == '{') {
				/* \p{NAME}, \p{^NAME}, \P{..} */
				const char *e =
				    memchr(p + i + 3, '}', n - i - 3);
				const char *nm = p + i + 3;
				int neg = d == 'P';
				uint32_t mask;

				if (!e) {
					*bad = "an unclosed \\p{";
					return -EINVAL;
				}
				while (nm < e && *nm == ' ')
					nm++;
				if (nm < e && *nm == '^') {
					neg = !neg;
					nm++;
				}
				mask = gc_mask(nm, (size_t)(e - nm));
				if (mask)
					r = put_gc_class(o, mask, neg, in_class,
							 x);
				else /* not a category: PCRE2's meaning */
					r = tok_buf_put(o, p + i,
							(size_t)(e - (p + i)) +
							    1);
				i = (size_t)(e - p) + 1;
				continue;
			} else if (d == 'p' || d == 'P') {
				/* Oniguruma: \p without { is the letter */
				r = tok_buf_put(o, &d, 1);
			} else if (d == 'd' || d == 'D') {
				/* Oniguruma's \d: \p{Nd} */
				r = put_gc_class(o, gc_mask("Nd", 2), d == 'D',
						 in_class, x);
			} else if (d == 's') {
				r = in_class ? tok_buf_put(o, WS_BODY,
							   strlen(WS_BODY))
					     : tok_buf_put(o, "[" WS_BODY "]",
							   strlen(WS_BODY) + 2);
			} else if (d == 'S') {
				if (in_class) {
					*bad = "\\S inside a character class";
					return -EINVAL;
				}
				r = tok_buf_put(o, "[^" WS_BODY "]",
						strlen(WS_BODY) + 3);
			} else if (strchr("wWbBhHXQEKNCgk", d) && d) {
				static const char *const names[] = {
				    "\\w", "\\W", "\\b", "\\B", "\\h",
				    "\\H", "\\X", "\\Q", "\\E", "\\K",
				    "\\N", "\\C", "\\g", "\\k"};
				*bad = names[strchr("wWbBhHXQEKNCgk", d) -
					     "wWbBhHXQEKNCgk"];
				return -EINVAL;
			} else if (d == 'u') {
				/* Oniguruma \uHHHH */
				size_t k = 0;
				while (k < 4 && i + 2 + k < n &&
				       strchr("0123456789abcdefABCDEF",
					      p[i + 2 + k]) &&
				       p[i + 2 + k])
					k++;
				if (k != 4) {
					*bad = "a malformed \\u escape";
					return -EINVAL;
				}
				r = tok_buf_put(o, "\\x{", 3);
				r = r ? r : tok_buf_put(o, p + i + 2, 4);
				r = r ? r : tok_buf_put(o, "}", 1);
				i += 6;
				continue;
			} else {
				/* copy the escape and the whole next char */
				size_t k = 2;
				while (i + k < n &&
				       ((unsigned char)p[i + k] & 0xC0) == 0x80)
					k++;
				r = tok_buf_put(o, p + i, k);
				i += k;
				continue;
			}
			i += 2;
			continue;
		}
		if (in_class) {
			if (c == '[') {
				if (i + 1 < n && p[i + 1] == ':') {
					const char *e =
					    memchr(p + i + 2, ']', n - i - 2);
					if (!e) {
						*bad = "an unclosed [:class:]";
						return -EINVAL;
					}
					r = tok_buf_put(o, p + i,
							(size_t)(e - (p + i)) +
							    1);
					i = (size_t)(e - p) + 1;
					continue;
				}
				*bad = "a nested character class";
				return -EINVAL;
			}
			if (c == '&' && i + 1 < n && p[i + 1] == '&') {
				*bad = "class intersection &&";
				return -EINVAL;
			}
			if (c == ']')
				in_class = 0;
			r = tok_buf_put(o, &c, 1);
			i++;
			continue;
		}
		if (c == '[') {
			in_class = 1;
			r = tok_buf_put(o, "[", 1);
			i++;
			if (i < n && p[i] == '^') {
				r = r ? r : tok_buf_put(o, "^", 1);
				i++;
			}
			if (i < n && p[i] == ']') {
				r = r ? r : tok_buf_put(o, "\\]", 2);
				i++;
			}
			continue;
		}
		r = tok_buf_put(o, &c, 1);
		i++;
	}
	if (!r && in_class) {
		*bad = "an unclosed character class";
		return -EINVAL;
	}
	return r;
}

int tok_regex_compile(struct tok_regex *re, const char *pat, size_t len,
		      int literal, const char *name, const char *what,
		      taco_err *err)
{
	struct tok_buf b = {0};
	const char *bad = NULL;
	int ec, r;
	PCRE2_SIZE eoff;
	uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK;
	struct xlate *x = NULL;

	memset(re, 0, sizeof(*re));
	if (len > 65536)
		return taco_err_set(err, -EFBIG,
				    "%s: %s pattern is longer than 65536 bytes",
				    name, what);
	if (literal) {
		opts = (opts & ~(uint32_t)PCRE2_UCP) | PCRE2_LITERAL;
		r = tok_buf_put(&b, pat, len);
	} else {
		x = calloc(1, sizeof(*x));
		r = x ? translate(pat, len, &b, &bad, x) : -ENOMEM;
	}
	if (r == -EINVAL) {
		free(x);
		tok_buf_free(&b);
		return taco_err_set(err, -EINVAL,
				    "%s: %s pattern uses %s, which Oniguruma "
				    "and PCRE2 read differently; not supported",
				    name, what, bad);
	}
	if (r) {
		free(x);
		tok_buf_free(&b);
		return taco_err_set(err, -ENOMEM, "%s: out of memory", name);
	}
	{
		/* the pattern must be valid UTF-8 (NO_UTF_CHECK above) */
		size_t i = 0, bl;
		while (i < b.n) {
			size_t k = tok_utf8_valid_prefix(
			    (const unsigned char *)b.p + i, b.n - i, &bl);
			if (!k || memchr(b.p + i, 0, k)) {
				if (!k || !literal) {
					free(x);
					tok_buf_free(&b);
					return taco_err_set(
					    err, -EINVAL,
					    "%s: %s pattern is not valid "
					    "UTF-8 text",
					    name, what);
				}
			}
			i += k;
		}
	}
	re->code = pcre2_compile((PCRE2_SPTR)(b.p ? b.p : ""), b.n, opts, &ec,
				 &eoff, NULL);
	if (!re->code) {
		PCRE2_UCHAR msg[256];
		free(x);
		tok_buf_free(&b);
		pcre2_get_error_message(ec, msg, sizeof(msg));
		return taco_err_set(err, -EINVAL,
				    "%s: %s pattern does not compile: %s", name,
				    what, (const char *)msg);
	}
	re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
	if (x && x->any_add) {
		/* the pattern without the added code points: PCRE2's own
		 * \p{..} alone, for texts that have none of them */
		const char *bad2;
		x->no_adds = 1;
		b.n = 0;
		r = translate(pat, len, &b, &bad2, x);
		re->fast = r ? NULL
			     : pcre2_compile((PCRE2_SPTR)b.p, b.n, opts, &ec,
					     &eoff, NULL);
		re->add_blocks = malloc(sizeof(x->blocks));
		if (!re->fast || !re->add_blocks) {
			free(x);
			tok_buf_free(&b);
			tok_regex_free(re);
			return taco_err_set(err, -ENOMEM, "%s: out of memory",
					    name);
		}
		memcpy(re->add_blocks, x->blocks, sizeof(x->blocks));
		re->fast_jit =
		    pcre2_jit_compile(re->fast, PCRE2_JIT_COMPLETE) == 0;
		/* the lead byte of the smallest added code point: a text
		 * without a byte at or above it has none */
		re->add_lead = (unsigned char)(x->min_add < 0x800
						   ? 0xC0 | (x->min_add >> 6)
					       : x->min_add < 0x10000
						   ? 0xE0 | (x->min_add >> 12)
						   : 0xF0 | (x->min_add >> 18));
	}
	free(x);
	tok_buf_free(&b);
	return 0;
}

void tok_regex_free(struct tok_regex *re)
{
	if (re->code)
		pcre2_code_free(re->code);
	if (re->fast)
		pcre2_code_free(re->fast);
	free(re->add_blocks);
	re->code = re->fast = NULL;
	re->add_blocks = NULL;
}

/* 1 when s[0..n) has a code point of the added ranges of re (checked by
 * block of 256). */
static int has_added(const struct tok_regex *re, const unsigned char *s,
		     size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t cp;
		if (s[i] < re->add_lead)
			continue;
		i += (size_t)tok_utf8_next(s + i, n - i, &cp) - 1;
		if ((re->add_blocks[cp >> 11] >> ((cp >> 8) & 7)) & 1)
			return 1;
	}
	return 0;
}

static int regex_match(const struct tok_regex *re, struct tok_matcher *m,
		       const char *s, size_t n, size_t from, taco_err *err)
{
	int rc, fast = re->fast && !m->exact;
	const pcre2_code *code = fast ? re->fast : re->code;

	if (fast ? re->fast_jit : re->jit)
		rc = pcre2_jit_match(code, (PCRE2_SPTR)s, n, from,
				     PCRE2_NO_UTF_CHECK, m->md, m->mc);
	else
		rc = PCRE2_ERROR_JIT_STACKLIMIT;
	if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
		rc = pcre2_match(code, (PCRE2_SPTR)s, n, from,
				 PCRE2_NO_UTF_CHECK, m->md, m->mc);
	if (rc >= 0)
		return 1;
	if (rc == PCRE2_ERROR_NOMATCH)
		return 0;
	{
		PCRE2_UCHAR msg[256];
		pcre2_get_error_message(rc, msg, sizeof(msg));
		return taco_err_set(
		    err, rc == PCRE2_ERROR_NOMEMORY ? -ENOMEM : -E2BIG,
		    "regex match failed: %s", (const char *)msg);
	}
}

int tok_regex_next(const struct tok_regex *re, struct tok_matcher *m,
		   const char *s, size_t n, size_t *pos, size_t *last,
		   size_t *ms, size_t *me, taco_err *err)
{
	/* which of re's two patterns fits s: decided at the first call on
	 * s, kept for the next ones */
	if (re->fast &&
	    (*last == SIZE_MAX || m->re != re || m->s != s || m->n != n)) {
		m->re = re;
		m->s = s;
		m->n = n;
		m->exact = has_added(re, (const unsigned char *)s, n);
	}
	for (;;) {
		int r;
		PCRE2_SIZE *ov;

		if (*pos > n)
			return 0;
		r = regex_match(re, m, s, n, *pos, err);
		if (r <= 0)
			return r;
		ov = pcre2_get_ovector_pointer(m->md);
		if (ov[0] > ov[1] || ov[1] > n)
			return taco_err_set(err, -EINVAL,
					    "regex: a lookaround (\\K) made "
					    "an inverted match");
		if (ov[0] == ov[1] && *last == ov[1]) {
			/* an empty match right after the previous match:
			 * move one char on */
			if (*pos >= n) {
				*pos = n + 1;
			} else {
				uint32_t cp;
				*pos += (size_t)tok_utf8_next(
				    (const unsigned char *)s + *pos, n - *pos,
				    &cp);
			}
			continue;
		}
		*ms = ov[0];
		*me = ov[1];
		*pos = ov[1];
		*last = ov[1];
		return 1;
	}
}

/* ------------------------------------------------------------ normalizers */

static int replace_all(const struct tok_norm *nm, struct tok_matcher *m,
		       const char *s, size_t n, struct tok_buf *out,
		       taco_err *err)
{
	size_t pos = 0, last = SIZE_MAX, ms, me, prev = 0;
	int r;

	out->n = 0;
	while ((r = tok_regex_next(&nm->re, m, s, n, &pos, &last, &ms, &me,
				   err)) > 0) {
		if (tok_buf_put(out, s + prev, ms - prev) ||
		    tok_buf_put(out, nm->str, nm->str_len))
			return -ENOMEM;
		prev = me;
	}
	if (r < 0)
		return r;
	return tok_buf_put(out, s + prev, n - prev);
}

int tok_normalize(const struct taco_tok *tok, struct tok_matcher *m,
		  const char *s, size_t n, struct tok_buf *out,
		  struct tok_buf *tmp, taco_err *err)
{
	int r = 0;

	out->n = 0;
	if ((r = tok_buf_put(out, s, n)))
		return r;
	for (int k = 0; k < tok->n_norms; k++) {
		const struct tok_norm *nm = &tok->norms[k];
		struct tok_buf t;

		tmp->n = 0;
		switch (nm->type) {
		case NORM_NFC:
		case NORM_NFD:
		case NORM_NFKC:
		case NORM_NFKD:
			r = tok_unicode_normalize(tok, nm->type, out->p, out->n,
						  tmp);
			break;
		case NORM_PREPEND:
			if (out->n == 0)
				continue;
			r = tok_buf_put(tmp, nm->str, nm->str_len);
			r = r ? r : tok_buf_put(tmp, out->p, out->n);
			break;
		case NORM_REPLACE:
			r = replace_all(nm, m, out->p, out->n, tmp, err);
			break;
		case NORM_STRIP: {
			const unsigned char *u = (const unsigned char *)out->p;
			size_t a = 0, b = out->n;
			uint32_t cp;
			while (nm->left && a < b) {
				int l = tok_utf8_next(u + a, b - a, &cp);
				if (!tok_is_whitespace(cp))
					break;
				a += (size_t)l;
			}
			while (nm->right && b > a) {
				size_t st = b - 1;
				while (st > a && (u[st] & 0xC0) == 0x80)
					st--;
				tok_utf8_next(u + st, b - st, &cp);
				if (!tok_is_whitespace(cp))
					break;
				b = st;
			}
			r = tok_buf_put(tmp, out->p + a, b - a);
			break;
		}
		default:
			r = -EINVAL;
		}
		if (r)
			return r;
		t = *out;
		*out = *tmp;
		*tmp = t;
	}
	return 0;
}

/* ------------------------------------------------------------ decoders */

struct toklist {
	struct tok_buf text;
	size_t *off, *len;
	size_t n, cap;
};

static int tl_add(struct toklist *l, const char *s, size_t n)
{
	if (l->n == l->cap) {
		size_t c = l->cap ? l->cap * 2 : 16;
		size_t *a = realloc(l->off, c * sizeof(size_t));
		if (!a)
			return -ENOMEM;
		l->off = a;
		a = realloc(l->len, c * sizeof(size_t));
		if (!a)
			return -ENOMEM;
		l->len = a;
		l->cap = c;
	}
	l->off[l->n] = l->text.n;
	l->len[l->n] = n;
	l->n++;
	return tok_buf_put(&l->text, s, n);
}

/* Appends to the last token. */
static int tl_cat(struct toklist *l, const char *s, size_t n)
{
	l->len[l->n - 1] += n;
	return tok_buf_put(&l->text, s, n);
}

static void tl_free(struct toklist *l)
{
	tok_buf_free(&l->text);
	free(l->off);
	free(l->len);
	memset(l, 0, sizeof(*l));
}

/* Rust u8::from_str_radix(s, 16) on two chars: an optional '+' then hex. */
static int byte_token(const char *t, size_t n)
{
	int a, b;

	if (n != 6 || memcmp(t, "<0x", 3) || t[5] != '>')
		return -1;
	if (t[3] == '+')
		return taco_hex_value(t[4]);
	a = taco_hex_value(t[3]);
	b = taco_hex_value(t[4]);
	return a < 0 || b < 0 ? -1 : a * 16 + b;
}

static int dec_step(const struct tok_dec *d, const struct toklist *in,
		    struct toklist *o)
{
	int r = 0;

	switch (d->type) {
	case DEC_REPLACE:
		for (size_t i = 0; i < in->n && !r; i++) {
			const char *t = in->text.p + in->off[i], *e;
			size_t n = in->len[i];
			r = tl_add(o, "", 0);
			while (!r && d->pat_len && n >= d->pat_len &&
			       (e = memmem(t, n, d->pat, d->pat_len))) {
				r = tl_cat(o, t, (size_t)(e - t));
				r = r ? r
				      : tl_cat(o, d->content, d->content_len);
				n -= (size_t)(e - t) + d->pat_len;
				t = e + d->pat_len;
			}
			r = r ? r : tl_cat(o, t, n);
		}
		return r;
	case DEC_BYTEFALLBACK: {
		unsigned char bytes[64];
		size_t nb = 0;
		struct tok_buf pend = {0};
		for (size_t i = 0; i <= in->n && !r; i++) {
			int b = i < in->n ? byte_token(in->text.p + in->off[i],
						       in->len[i])
					  : -1;
			if (b >= 0) {
				if (nb == sizeof(bytes)) {
					r = tok_buf_put(&pend, bytes, nb);
					nb = 0;
				}
				bytes[nb++] = (unsigned char)b;
				continue;
			}
			if (nb || pend.n) {
				size_t bad, k = 0;
				r = r ? r : tok_buf_put(&pend, bytes, nb);
				nb = 0;
				while (!r && k < pend.n) {
					size_t l = tok_utf8_valid_prefix(
					    (unsigned char *)pend.p + k,
					    pend.n - k, &bad);
					if (!l)
						break;
					k += l;
				}
				if (r) {
				} else if (k == pend.n) {
					r = tl_add(o, pend.p, pend.n);
				} else {
					for (size_t j = 0; j < pend.n && !r;
					     j++)
						r = tl_add(o, "\xEF\xBF\xBD",
							   3);
				}
				pend.n = 0;
			}
			if (!r && i < in->n)
				r = tl_add(o, in->text.p + in->off[i],
					   in->len[i]);
		}
		tok_buf_free(&pend);
		return r;
	}
	case DEC_FUSE:
		r = tl_add(o, "", 0);
		for (size_t i = 0; i < in->n && !r; i++)
			r = tl_cat(o, in->text.p + in->off[i], in->len[i]);
		return r;
	case DEC_STRIP:
		for (size_t i = 0; i < in->n && !r; i++) {
			const unsigned char *t =
			    (const unsigned char *)in->text.p + in->off[i];
			size_t n = in->len[i], a = 0, b = n, k;
			uint32_t cp;
			/* up to start leading, stop trailing chars */
			for (k = 0; k < d->start && a < n; k++) {
				int l = tok_utf8_next(t + a, n - a, &cp);
				if (cp != d->strip_char)
					break;
				a += (size_t)l;
			}
			for (k = 0; k < d->stop && b > a; k++) {
				size_t st = b - 1;
				while (st > a && (t[st] & 0xC0) == 0x80)
					st--;
				tok_utf8_next(t + st, b - st, &cp);
				if (cp != d->strip_char)
					break;
				b = st;
			}
			r = tl_add(o, (const char *)t + a, b - a);
		}
		return r;
	case DEC_METASPACE:
		for (size_t i = 0; i < in->n && !r; i++) {
			const char *t = in->text.p + in->off[i], *e;
			size_t n = in->len[i];
			int drop = i == 0 && d->prepend_scheme != PREPEND_NEVER;
			r = tl_add(o, "", 0);
			while (!r && (e = memmem(t, n, d->pat, d->pat_len))) {
				r = tl_cat(o, t, (size_t)(e - t));
				if (!r && !drop)
					r = tl_cat(o, " ", 1);
				n -= (size_t)(e - t) + d->pat_len;
				t = e + d->pat_len;
			}
			r = r ? r : tl_cat(o, t, n);
		}
		return r;
	case DEC_BYTELEVEL: {
		struct tok_buf raw = {0};
		for (size_t i = 0; i < in->n && !r; i++) {
			const unsigned char *t =
			    (const unsigned char *)in->text.p + in->off[i];
			size_t n = in->len[i], a = 0, start = raw.n;
			int all = 1;
			while (a < n && !r) {
				uint32_t cp;
				int b;
				a += (size_t)tok_utf8_next(t + a, n - a, &cp);
				b = tok_char_byte(cp);
				if (b < 0) {
					all = 0;
					break;
				}
				unsigned char c = (unsigned char)b;
				r = tok_buf_put(&raw, &c, 1);
			}
			if (!r && !all) {
				raw.n = start; /* not all mapped: raw bytes */
				r = tok_buf_put(&raw, t, n);
			}
		}
		if (!r) {
			struct tok_buf txt = {0};
			r = tok_utf8_lossy(&txt, (unsigned char *)raw.p, raw.n);
			r = r ? r : tl_add(o, txt.p ? txt.p : "", txt.n);
			tok_buf_free(&txt);
		}
		tok_buf_free(&raw);
		return r;
	}
	}
	return -EINVAL;
}

int tok_decode_tokens(const struct taco_tok *tok, const char **toks,
		      const size_t *lens, size_t n, struct tok_buf *out,
		      taco_err *err)
{
	struct toklist a = {0}, b = {0};
	int r = 0;

	out->n = 0;
	if (!tok->has_decoder) {
		for (size_t i = 0; i < n && !r; i++) {
			if (i)
				r = tok_buf_put(out, " ", 1);
			r = r ? r : tok_buf_put(out, toks[i], lens[i]);
		}
		r = r ? r : tok_buf_put(out, "", 0);
		goto done;
	}
	{
		/* size the lists once: decoders rarely grow the text much */
		size_t total = 16;
		for (size_t i = 0; i < n; i++)
			total += lens[i] + 3;
		a.off = malloc(sizeof(size_t) * (n + 1));
		a.len = malloc(sizeof(size_t) * (n + 1));
		b.off = malloc(sizeof(size_t) * (n + 1));
		b.len = malloc(sizeof(size_t) * (n + 1));
		if (!a.off || !a.len || !b.off || !b.len ||
		    tok_buf_reserve(&a.text, total) ||
		    tok_buf_reserve(&b.text, total))
			r = -ENOMEM;
		a.cap = b.cap = n + 1;
	}
	for (size_t i = 0; i < n && !r; i++)
		r = tl_add(&a, toks[i], lens[i]);
	for (int k = 0; k < tok->n_decs && !r; k++) {
		struct toklist t;
		b.n = 0;
		b.text.n = 0;
		r = dec_step(&tok->decs[k], &a, &b);
		t = a;
		a = b;
		b = t;
	}
	for (size_t i = 0; i < a.n && !r; i++)
		r = tok_buf_put(out, a.text.p + a.off[i], a.len[i]);
	r = r ? r : tok_buf_put(out, "", 0);
done:
	tl_free(&a);
	tl_free(&b);
	if (r)
		return taco_err_set(err, r, "%s: decode: out of memory",
				    tok->name);
	return 0;
}
