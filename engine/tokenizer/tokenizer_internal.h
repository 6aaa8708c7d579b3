/* tokenizer_internal.h: data structures shared by the tokenizer's files
 * (tokenizer.c: loading; tokenizer_encode.c: the pipeline and BPE;
 * tokenizer_text.c: UTF-8, Unicode normalization, regex, decoders). */
#ifndef TACO_TOKENIZER_INTERNAL_H
#define TACO_TOKENIZER_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer.h"

#define TOK_NONE UINT32_MAX

/* A growable byte buffer. */
struct tok_buf {
	char *p;
	size_t n, cap;
};

int tok_buf_reserve(struct tok_buf *b, size_t extra);
int tok_buf_put(struct tok_buf *b, const void *p, size_t n);
void tok_buf_free(struct tok_buf *b);

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

uint32_t tok_hash(const void *p, size_t n);
int32_t tok_vocab_find(const struct tok_vocab *v, const char *s, size_t n);
/* Adds s as the string of id. Returns 0, -EEXIST when s is already there
 * (its id in *other), or -ENOMEM. */
int tok_vocab_add(struct tok_vocab *v, int32_t id, const char *s, size_t n,
		  int32_t *other);
int tok_vocab_init(struct tok_vocab *v, uint32_t n_ids, uint32_t expect);
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

const struct tok_merge *tok_merges_find(const struct tok_merges *m, int32_t a,
					int32_t b);

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

/* Frees the kept encode states. */
void tok_work_pool_free(struct taco_tok *tok);

/* UTF-8 */
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
/* A word char next to a single_word added token, as tokenizers has them
 * (tokenizer_unidata.h). */
int tok_is_word_cp(uint32_t cp);
/* Appends the pattern of char::is_numeric as tokenizers' Digits has it (its
 * runs when runs is set). */
int tok_numeric_pattern(struct tok_buf *o, int runs);

/* Unicode normalization of s into out (appended). form: NORM_NF*. */
int tok_unicode_normalize(const struct taco_tok *tok, int form, const char *s,
			  size_t n, struct tok_buf *out);
/* Makes the quick-check tables of the forms whose need[NORM_NF*] is set. */
int tok_unicode_init(struct taco_tok *tok, const int need[4]);

/* Normalizer chain on s; result in out (replaced). */
int tok_normalize(const struct taco_tok *tok, struct tok_matcher *m,
		  const char *s, size_t n, struct tok_buf *out,
		  struct tok_buf *tmp, taco_err *err);

/* Decoder chain. */
int tok_decode_tokens(const struct taco_tok *tok, const char **toks,
		      const size_t *lens, size_t n, struct tok_buf *out,
		      taco_err *err);

/* The byte-level alphabet: char of each byte, and its inverse. */
extern const uint16_t tok_byte_char[256];
int tok_char_byte(uint32_t cp); /* -1 when not in the alphabet */

int tok_trie_add(struct tok_trie *t, const char *s, size_t n, int32_t idx);
void tok_trie_free(struct tok_trie *t);

int32_t tok_added_id_index(const struct taco_tok *tok, int32_t id);

/* Loading (tokenizer.c): a parsed tokenizer.json tree (only read), and a
 * whole file of at most TACO_TOK_MAX_FILE bytes (NUL-terminated). */
struct json_t;
int tok_load_json(struct json_t *root, const char *name, taco_tok **out,
		  taco_err *err);
int tok_read_all(const char *path, char **out, size_t *len, taco_err *err);
/* tokenizer_gpt2.c: dir/vocab.json, merges.txt and the config files. */
int tok_load_gpt2_dir(const char *dir, taco_tok **out, taco_err *err);

#endif
