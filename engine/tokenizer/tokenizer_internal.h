/* tokenizer_internal.h: what the tokenizer's files share. The files follow
 * the stages of Hugging Face tokenizers, each reading its part of
 * tokenizer.json and running it:
 *
 *   load.c            tokenizer.json (and tokenizer_config.json) to a taco_tok
 *   load_fields.c     the loader's field readers and errors
 *   load_gpt2.c       GPT-2 style vocab.json + merges.txt, as a tokenizer.json
 *   added_tokens.c    added tokens: reading, tries, matching them in text
 *   normalizers.c     normalizers (NFC..., Prepend, Replace, Strip)
 *   pretokenizers.c   pre-tokenizers (ByteLevel, Split, Metaspace, Digits)
 *   bpe.c             the BPE model: vocab, merges, the merge loop, its cache
 *   post_process.c    post-processors (their ids before and after the text)
 *   decoders.c        decoders, and taco_tok_decode
 *   encode.c          the encode pipeline and its per-call state
 *   lookup.c          ids and token strings (the public lookups)
 *   regex.c           Oniguruma-style patterns run by PCRE2
 *   unicode.c         the Unicode tables (tokenizer_unidata.h, made by
 *                     gen_unidata.py): normalization forms, \p{..} classes,
 *                     is_numeric, word chars
 *   utf8.c            byte buffers, UTF-8, the byte-level alphabet
 *
 * The functions, types and variables they share start with tok_ (macros
 * with TOK_; the step kinds are NORM_, PT_, SPLIT_, PREPEND_ and DEC_). */
#ifndef TACO_TOKENIZER_INTERNAL_H
#define TACO_TOKENIZER_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer.h"

#define TOK_NONE UINT32_MAX

/* ------------------------------------------------------------ utf8.c */

/* A growable byte buffer. */
struct tok_buf {
	char *p;
	size_t n, cap;
};

int tok_buf_reserve(struct tok_buf *b, size_t extra);
int tok_buf_put(struct tok_buf *b, const void *p, size_t n);
void tok_buf_free(struct tok_buf *b);

/* Decodes one char of valid UTF-8 at s (n > 0 bytes left); returns its
 * length and the code point in *cp. */
int tok_utf8_next(const unsigned char *s, size_t n, uint32_t *cp);
int tok_utf8_put(uint32_t cp, char *out);
/* Length of the well-formed sequence at s, or 0 with the maximal subpart
 * length in *bad. */
size_t tok_utf8_valid_prefix(const unsigned char *s, size_t n, size_t *bad);
/* Appends s with invalid sequences replaced by U+FFFD. */
int tok_utf8_lossy(struct tok_buf *out, const unsigned char *s, size_t n);
int tok_is_whitespace(uint32_t cp);

/* The byte-level alphabet: the char of each byte. */
extern const uint16_t tok_byte_char[256];
/* The byte-level chars of the bytes s[0..n) into out (room for 2 * n
 * bytes); returns their length. */
size_t tok_bytelevel_encode(const char *s, size_t n, char *out);
/* The bytes whose byte-level chars s[0..n) is into out (room for n bytes),
 * their count in *len; 0 when a char is not of the alphabet. */
int tok_bytelevel_decode(const unsigned char *s, size_t n, char *out,
			 size_t *len);

/* The slot of a 64-bit key in an open-addressing table of mask + 1 slots
 * (the merges of bpe.c, the tries of added_tokens.c). */
static inline uint32_t tok_slot(uint64_t key, uint32_t mask)
{
	return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

/* ------------------------------------------------------------ bpe.c */

/* Strings by id with a hash index: the model vocab, or the same tokens as
 * raw bytes for byte-level models. */
struct tok_vocab {
	char *pool;
	size_t pool_len, pool_cap;
	uint32_t *off, *len; /* by id; off TOK_NONE: no string */
	uint32_t n_ids;	     /* size of off/len */
	uint64_t *slots;     /* (hash << 32) | (id + 1); 0 = empty */
	uint32_t mask;
	uint32_t count;
};

int32_t tok_vocab_find(const struct tok_vocab *v, const char *s, size_t n);
void tok_vocab_free(struct tok_vocab *v);

/* Merge ranks: (left id, right id) -> (rank, merged id). */
struct tok_merge {
	uint64_t key; /* UINT64_MAX = empty */
	uint32_t rank;
	int32_t id;
};

struct tok_merges {
	struct tok_merge *slots;
	uint32_t mask, count;
};

/* ------------------------------------------------------------ regex.c */

/* A compiled pattern. When its \p{..} classes have code points that
 * PCRE2's tables lack (added as ranges), fast is the same pattern without
 * them, used on texts that have none of them (add_blocks: one bit per 256
 * code points where they are; add_lead: the lead byte of the smallest). */
struct tok_regex {
	pcre2_code *code;
	int jit;
	pcre2_code *fast;
	int fast_jit;
	uint8_t *add_blocks;
	unsigned char add_lead;
};

/* Compiles an Oniguruma-style pattern (or a literal when literal != 0);
 * what describes the field for messages. */
int tok_regex_compile(struct tok_regex *re, const char *pat, size_t len,
		      int literal, const char *name, const char *what,
		      taco_err *err);
void tok_regex_free(struct tok_regex *re);
/* Tests only: when set, \p{..} classes are always compiled as explicit
 * ranges, not as PCRE2's own \p{..} plus what its tables lack. */
extern int tok_regex_explicit_classes;

/* Per-call matching state (zero-initialize it; re, s, n and exact are
 * tok_regex_next's: whether the text it matches on has added code points
 * of re). */
struct tok_matcher {
	pcre2_match_data *md;
	pcre2_match_context *mc;
	const struct tok_regex *re;
	const char *s;
	size_t n;
	int exact;
};

/* find_iter over s[0..n) from start: the next match at or after *pos with
 * the empty-match rule of the onig crate (no empty match right where the
 * previous match ended). *last is the end of the previous match or
 * SIZE_MAX. Returns 1 with [*ms, *me), 0 when no more, <0 on error. */
int tok_regex_next(const struct tok_regex *re, struct tok_matcher *m,
		   const char *s, size_t n, size_t *pos, size_t *last,
		   size_t *ms, size_t *me, taco_err *err);

/* ------------------------------------------------------------ unicode.c */

/* Where a translated pattern has code points that tokenizers has in a
 * \p{..} class and PCRE2's tables not ("added" ones): with no_adds set they
 * are left out, which gives the same matches on any text without them;
 * blocks (one bit per 256 code points) and min_add say where they are. */
struct tok_class_adds {
	int no_adds;
	int any_add;
	uint32_t min_add;
	uint8_t blocks[0x110000 / 256 / 8];
};

/* The mask of the General_Category values of a \p{..} name (between the
 * braces), or 0 when it is not a category name (a script, a binary
 * property). */
uint32_t tok_gc_mask(const char *s, size_t n);
/* Appends the class of the categories in mask (negated: the others), as an
 * atom ([..]) or, in_class, as items of the class being written. */
int tok_gc_class(struct tok_buf *o, uint32_t mask, int negate, int in_class,
		 struct tok_class_adds *x);
/* A word char next to a single_word added token, as tokenizers has them
 * (tokenizer_unidata.h). */
int tok_is_word_cp(uint32_t cp);
/* Appends the pattern of char::is_numeric as tokenizers' Digits has it (its
 * runs when runs is set). */
int tok_numeric_pattern(struct tok_buf *o, int runs);

/* ------------------------------------------------------------ steps */

enum tok_norm_type {
	NORM_NFC,
	NORM_NFD,
	NORM_NFKC,
	NORM_NFKD,
	NORM_PREPEND,
	NORM_REPLACE,
	NORM_STRIP,
};

struct tok_norm {
	int type;
	char *str; /* Prepend text, Replace content */
	size_t str_len;
	struct tok_regex re; /* Replace pattern */
	int left, right;     /* Strip */
};

enum tok_pt_type { PT_BYTELEVEL, PT_SPLIT, PT_METASPACE };

enum tok_split_behavior {
	SPLIT_REMOVED,
	SPLIT_ISOLATED,
	SPLIT_MERGED_PREV,
	SPLIT_MERGED_NEXT,
	SPLIT_CONTIGUOUS,
};

enum tok_prepend { PREPEND_ALWAYS, PREPEND_NEVER, PREPEND_FIRST };

struct tok_pt {
	int type;
	/* ByteLevel */
	int add_prefix_space, use_regex;
	/* Split (ByteLevel with use_regex uses the shared GPT-2 pattern) */
	struct tok_regex re;
	int behavior, invert;
	/* Metaspace */
	char repl[5];
	int repl_len;
	int prepend_scheme, split;
};

enum tok_dec_type {
	DEC_BYTELEVEL,
	DEC_METASPACE,
	DEC_REPLACE,
	DEC_BYTEFALLBACK,
	DEC_FUSE,
	DEC_STRIP,
};

struct tok_dec {
	int type;
	char *pat, *content; /* Replace; Metaspace: pat = replacement */
	size_t pat_len, content_len;
	uint32_t strip_char; /* Strip: content */
	size_t start, stop;
	int prepend_scheme; /* Metaspace */
};

struct tok_added {
	int32_t id;
	char *content;
	uint32_t len;
	char *match; /* the text matched: content, normalized if normalized */
	uint32_t match_len;
	uint8_t special, lstrip, rstrip, single_word, normalized;
	/* decode with skip_special_tokens drops it: tokenizers checks the
	 * token string (match) against the special tokens' contents */
	uint8_t skip;
};

/* Byte trie of added tokens. */
struct tok_trie {
	uint64_t *keys; /* (node << 8 | byte) + 1; 0 = empty */
	uint32_t *vals;
	uint32_t mask, n_edges;
	int32_t *term; /* by node: added index or -1 */
	uint32_t n_nodes, cap_nodes;
	uint8_t first[256];
	int empty;
};

/* Direct-mapped cache of BPE results by pre-token. */
#define TOK_CACHE_SLOTS 8192
#define TOK_CACHE_KEY 30
#define TOK_CACHE_IDS 14

struct tok_cache_entry {
	uint32_t hash;
	uint8_t key_len; /* 0 = empty */
	uint8_t n_ids;
	char key[TOK_CACHE_KEY];
	int32_t ids[TOK_CACHE_IDS];
};

struct taco_tok {
	char *name;

	/* model */
	struct tok_vocab vocab;
	struct tok_vocab rvocab; /* byte-level: tokens as raw bytes */
	int has_rvocab;
	struct tok_merges merges;
	int32_t unk_id;
	int fuse_unk, byte_fallback, ignore_merges;
	char *cont_prefix, *word_suffix;
	size_t cont_prefix_len, word_suffix_len;
	int32_t fallback_id[256]; /* <0xNN>, -1 when absent */
	int32_t byte_id[256];	  /* byte-level: id of the char of each byte */

	struct tok_norm *norms;
	int n_norms;
	struct tok_pt *pts;
	int n_pts;
	int bytelevel_last; /* the last pre-tokenizer is ByteLevel */
	struct tok_regex gpt2_re;

	int32_t *post_pre, *post_suf;
	int n_post_pre, n_post_suf;

	struct tok_dec *decs;
	int n_decs, has_decoder;

	struct tok_added *added;
	int n_added;
	int32_t *added_by_id; /* by id: index into added, or -1 */
	uint32_t n_added_by_id;
	struct tok_trie trie_raw, trie_norm;

	int32_t vocab_size;
	taco_tok_special special;

	/* quick check over the BMP, by form (NORM_NFC..NORM_NFKD): bit set
	 * when a char may change under that form */
	uint8_t *qc[4];

	pcre2_match_context *mctx;

	pthread_mutex_t cache_lock; /* guards cache and work_pool */
	struct tok_cache_entry *cache;
	/* encode state kept between calls (its buffers), up to 8 */
	void *work_pool[8];
	int n_work_pool;
};

/* ------------------------------------------------------------ loading */

/* Nesting of Sequence steps, and steps of one stage, at most. */
#define TOK_MAX_DEPTH 8
#define TOK_MAX_STEPS 64

/* The state of one tokenizer.json load: the tokenizer being built, the
 * name messages start with, and what the stages note for later checks. */
struct tok_loader {
	taco_tok *tok;
	const char *name;
	taco_err *err;
	int n_norm_cap, n_pt_cap, n_dec_cap;
	int has_normalized_added;
	int metaspace_first_pos; /* step index of a Metaspace(first), or -1 */
};

struct json_t;

/* load_fields.c. Each returns 0 or, with "name: message" in L->err, a
 * negative errno; where names the object for messages. */
int tok_fail(struct tok_loader *L, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int tok_oom(struct tok_loader *L);
char *tok_dupn(const char *s, size_t n);
/* Refuses keys of o outside allowed (NULL-terminated). */
int tok_check_keys(struct tok_loader *L, struct json_t *o, const char *where,
		   const char *const *allowed);
int tok_get_bool(struct tok_loader *L, struct json_t *o, const char *where,
		 const char *key, int dflt, int *out);
/* A string field; NULL allowed when nullable (then *out = NULL). */
int tok_get_str(struct tok_loader *L, struct json_t *o, const char *where,
		const char *key, int nullable, const char **out, size_t *len);
/* One char (code point) string, as Rust's char fields: its UTF-8 in utf8
 * (NUL-terminated, *ulen bytes), its code point in *cp when cp is set. */
int tok_get_char(struct tok_loader *L, struct json_t *o, const char *where,
		 const char *key, char *utf8, int *ulen, uint32_t *cp);
/* o.pattern: {"String": s} or {"Regex": r}, compiled into re. */
int tok_get_pattern(struct tok_loader *L, struct json_t *o, const char *where,
		    struct tok_regex *re, int allow_regex);
/* prepend_scheme, or the older add_prefix_space: a PREPEND_*. */
int tok_get_prepend_scheme(struct tok_loader *L, struct json_t *o,
			   const char *where, int *out);
/* An id in [0, TACO_TOK_MAX_VOCAB). */
int tok_get_id(struct tok_loader *L, struct json_t *v, const char *where,
	       int32_t *out);
/* The type of the step o at depth (at most TOK_MAX_DEPTH), or NULL with
 * the error in *r. */
const char *tok_step_type(struct tok_loader *L, struct json_t *o,
			  const char *where, int depth, int *r);
/* A {"type": "Sequence", key: [...]} step: parse on each element (named
 * where.key[i]) at depth + 1. */
int tok_parse_sequence(struct tok_loader *L, struct json_t *o,
		       const char *where, const char *key, int depth,
		       int (*parse)(struct tok_loader *, struct json_t *,
				    const char *, int));
/* The next zeroed element of a growable array of steps (*arr, *n, *cap;
 * at most TOK_MAX_STEPS) in *out; what names the steps in messages
 * ("normalizers"). */
int tok_new_step(struct tok_loader *L, void **arr, int *n, int *cap,
		 size_t esize, const char *where, const char *what, void **out);

/* The stages' parts of tokenizer.json (the step at where, depth deep). */
int tok_parse_normalizer(struct tok_loader *L, struct json_t *o,
			 const char *where, int depth);
int tok_parse_pretokenizer(struct tok_loader *L, struct json_t *o,
			   const char *where, int depth);
/* The GPT-2 pattern of ByteLevel pre-tokenizers with use_regex, compiled
 * once into tok->gpt2_re when one has it (after tok->mctx is made). */
int tok_compile_gpt2_regex(struct tok_loader *L);
int tok_parse_post_processor(struct tok_loader *L, struct json_t *o,
			     const char *where, int depth);
int tok_parse_decoder(struct tok_loader *L, struct json_t *o, const char *where,
		      int depth);
/* bpe.c: the model object; then, for byte-level models, the vocab as raw
 * bytes (after the pre-tokenizers are known). */
int tok_parse_model(struct tok_loader *L, struct json_t *m);
int tok_build_raw_vocab(struct tok_loader *L);
/* added_tokens.c: the added_tokens array (NULL or null: none); then, once
 * the normalizer is known, their tries and lookups. */
int tok_parse_added(struct tok_loader *L, struct json_t *a);
int tok_build_added(struct tok_loader *L);

/* load.c: a parsed tokenizer.json tree (only read), and a whole file of at
 * most TACO_TOK_MAX_FILE bytes (NUL-terminated). */
int tok_load_json(struct json_t *root, const char *name, taco_tok **out,
		  taco_err *err);
int tok_read_all(const char *path, char **out, size_t *len, taco_err *err);
/* load_gpt2.c: dir/vocab.json, merges.txt and the config files. */
int tok_load_gpt2_dir(const char *dir, taco_tok **out, taco_err *err);

/* unicode.c: makes the quick-check tables of the forms whose
 * need[NORM_NF*] is set; Unicode normalization of s into out (appended),
 * form a NORM_NF*. */
int tok_unicode_init(struct taco_tok *tok, const int need[4]);
int tok_unicode_normalize(const struct taco_tok *tok, int form, const char *s,
			  size_t n, struct tok_buf *out);

/* ------------------------------------------------------------ encoding */

/* A piece of text on its way through the pre-tokenizers; at_origin: it
 * starts where the input does (Metaspace's prepend_scheme "first"). */
struct tok_piece {
	const char *p;
	size_t n;
	int at_origin;
};

struct tok_plist {
	struct tok_piece *v;
	size_t n, cap;
};

/* A segment [s, e) of a text. */
struct tok_seg {
	size_t s, e;
	int m; /* split: is a match; added: added index or -1 */
};

struct tok_slist {
	struct tok_seg *v;
	size_t n, cap;
};

struct tok_arena_block {
	struct tok_arena_block *next;
	size_t used, cap;
	char data[];
};

struct tok_heap_e {
	uint64_t key; /* rank << 32 | pos */
	int32_t id;
};

/* The state of one encode call (encode.c keeps some between calls): the
 * buffers of each stage, and where errors go. */
struct tok_work {
	struct tok_matcher m;
	struct tok_buf input, norm, tmp, word;
	struct tok_plist a, b;
	struct tok_slist segs, segs2, added1, added2;
	struct tok_arena_block *arena;
	int32_t *sid, *sprev, *snext; /* BPE symbols */
	size_t scap;
	struct tok_heap_e *heap; /* BPE merge queue */
	size_t hcap;
	taco_err *err;
	const char *name;
};

/* encode.c */
void *tok_arena_alloc(struct tok_work *w, size_t n);
int tok_plist_push(struct tok_plist *l, const char *p, size_t n, int at_origin);
int tok_slist_push(struct tok_slist *l, size_t s, size_t e, int m);
int tok_ids_push(taco_tok_ids *o, int32_t id);
/* "name: encode: out of memory" in w->err; returns -ENOMEM. */
int tok_work_oom(struct tok_work *w);
/* Frees the kept encode states. */
void tok_work_pool_free(struct taco_tok *tok);

/* normalizers.c: the normalizer chain on s; result in out (replaced). */
int tok_normalize(const struct taco_tok *tok, struct tok_matcher *m,
		  const char *s, size_t n, struct tok_buf *out,
		  struct tok_buf *tmp, taco_err *err);
/* pretokenizers.c: the pre-tokenizer chain on s; the pieces in *out (one of
 * w's lists). */
int tok_pretokenize(const taco_tok *tok, struct tok_work *w, const char *s,
		    size_t n, int at_origin, struct tok_plist **out);
/* bpe.c: one pre-token through the model, ids appended to out. raw: s
 * holds raw bytes standing for their byte-level chars. */
int tok_bpe_word(const taco_tok *tok, struct tok_work *w, const char *s,
		 size_t n, int raw, taco_tok_ids *out);
/* added_tokens.c: AddedVocabulary::find_matches with trie t: segments of s,
 * tokens (m = added index) and gaps (m = -1). */
int tok_split_added(const taco_tok *tok, const struct tok_trie *t,
		    struct tok_work *w, const char *s, size_t n,
		    struct tok_slist *o);
/* The index into tok->added of the added token with id, or -1. */
int32_t tok_added_id_index(const struct taco_tok *tok, int32_t id);
void tok_trie_free(struct tok_trie *t);

#endif
