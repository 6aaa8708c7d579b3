/* tokenizer.h: Hugging Face tokenizer.json (BPE) in C.
 *
 * Reads the tokenizer.json of a model directory and encodes text to the ids
 * that Hugging Face `tokenizers` gives for it, and decodes ids back; or,
 * for a directory without one, GPT-2 style vocab.json + merges.txt with the
 * ids of transformers' GPT2Tokenizer (see taco_tok_load_gpt2). What is
 * implemented (anything else in a tokenizer.json is refused by name at load
 * time, never approximated):
 *
 *   model          BPE: vocab, merges as "a b" strings or ["a", "b"] pairs,
 *                  unk_token, fuse_unk, byte_fallback (<0xNN> tokens),
 *                  ignore_merges, continuing_subword_prefix,
 *                  end_of_word_suffix; dropout null (or 0) only
 *   normalizer     NFC, NFD, NFKC, NFKD (tables of the Unicode version that
 *                  `tokenizers` uses), Prepend, Replace (String or Regex),
 *                  Strip, Sequence
 *   pre_tokenizer  ByteLevel (add_prefix_space, use_regex with the GPT-2
 *                  pattern), Split (String or Regex; behaviors Removed,
 *                  Isolated, MergedWithPrevious, MergedWithNext, Contiguous;
 *                  invert), Metaspace (replacement, prepend_scheme
 *                  first/always/never, split), Digits, Sequence
 *   post_processor TemplateProcessing (single template), ByteLevel,
 *                  BertProcessing, RobertaProcessing, Sequence
 *   decoder        ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip,
 *                  Sequence; none: tokens joined by spaces
 *   added_tokens   matched before normalization (normalized false) or on the
 *                  normalized text (normalized true), leftmost-longest,
 *                  never split; special, lstrip, rstrip, single_word
 *   truncation and padding must be null.
 *
 * Regex patterns (Split, Replace) are run by PCRE2 in UTF + UCP mode with
 * JIT; \s and \S are rewritten to the Unicode White_Space set that
 * Oniguruma (the engine of `tokenizers`) uses, and \p{..} / \P{..} /
 * \p{^..} of a General_Category value (short or long name, any case, ' ',
 * '-' and '_' ignored, as Oniguruma reads them; LC and Assigned too) and \d
 * / \D (\p{Nd}) to the code points Oniguruma has at its Unicode version
 * (tokenizer_unidata.h), not PCRE2's own tables of an older one; \p
 * without a brace is the letter p, as in Oniguruma. Other \p{..} names
 * (scripts, binary properties) keep PCRE2's meaning. Patterns with
 * constructs whose meaning differs between the two engines (\w, \W, \b,
 * \B, \h, \H, \X, \Q, class intersection &&, \S inside a class) are
 * refused.
 *
 * Invalid UTF-8 input: every maximal invalid subsequence (the Unicode
 * "maximal subpart" rule, the same as Python's bytes.decode(errors=
 * "replace") and Rust's String::from_utf8_lossy) is replaced by U+FFFD
 * before tokenizing. So encode(bytes) gives the ids `tokenizers` gives for
 * bytes.decode("utf-8", "replace"). Decoding never fails on bytes either:
 * byte-level and byte-fallback decoders replace what is not UTF-8 the same
 * way `tokenizers` does.
 *
 * Limits (refused with -EFBIG or -EINVAL, naming the field): tokenizer.json
 * at most TACO_TOK_MAX_FILE bytes, ids below TACO_TOK_MAX_VOCAB, tokens at
 * most TACO_TOK_MAX_TOKEN_LEN bytes, at most TACO_TOK_MAX_MERGES merges and
 * TACO_TOK_MAX_ADDED added tokens, regex patterns at most 64 KiB; one encode
 * call takes at most TACO_TOK_MAX_INPUT bytes of text, one decode call at
 * most TACO_TOK_MAX_INPUT ids.
 *
 * Cost: encoding is linear in the input except for added-token matching,
 * which tries the longest added token at each position where one may
 * start (O(input x longest added token) at worst), and BPE, O(n log n) in
 * the length of a pre-token.
 *
 * A loaded tokenizer is immutable except for an internal cache guarded by a
 * lock: encode and decode may be called from several threads at once.
 * Library code never prints; errors go to taco_err (see taco_err.h). */
#ifndef TACO_TOKENIZER_H
#define TACO_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "util/taco_err.h"

#define TACO_TOK_MAX_FILE (64u << 20)
#define TACO_TOK_MAX_VOCAB (4u << 20)
#define TACO_TOK_MAX_TOKEN_LEN 4096
#define TACO_TOK_MAX_MERGES (4u << 20)
#define TACO_TOK_MAX_ADDED 65536
#define TACO_TOK_MAX_INPUT (8u << 20)

typedef struct taco_tok taco_tok;

/* A growable array of ids. Zero-initialize it before first use; encode
 * replaces its contents (n) and grows ids/cap as needed. Free with
 * taco_tok_ids_free. */
typedef struct taco_tok_ids {
	int32_t *ids;
	size_t n;
	size_t cap;
} taco_tok_ids;

void taco_tok_ids_free(taco_tok_ids *v);

/* Loads path: a model directory or a tokenizer.json file. A directory with
 * a tokenizer.json is read from it (and its tokenizer_config.json, when
 * present, for the bos/eos/pad/unk token names); one without, that has a
 * vocab.json, as GPT-2 style files (taco_tok_load_gpt2): vocab.json,
 * merges.txt, and tokenizer_config.json, special_tokens_map.json when
 * present. A tokenizer.json file is read with its directory's
 * tokenizer_config.json likewise. Returns 0 or a negative errno; *out is
 * NULL on error. */
int taco_tok_load(const char *path, taco_tok **out, taco_err *err);

/* 1 when the model directory has a tokenizer taco_tok_load reads there
 * (tokenizer.json, or vocab.json), else 0. */
int taco_tok_dir_has_tokenizer(const char *dir);

/* Parses a tokenizer.json held in memory (len bytes, need not be
 * NUL-terminated). name is used in error messages. No tokenizer_config. */
int taco_tok_load_buffer(const char *json, size_t len, const char *name,
			 taco_tok **out, taco_err *err);

/* GPT-2 style tokenizer files held in memory (none need be NUL-terminated),
 * as OPT checkpoints ship them instead of a tokenizer.json. They give the
 * ids transformers' GPT2Tokenizer gives (load_gpt2.c says what is read
 * and what is refused): byte-level BPE with the GPT-2 pattern, the
 * BOS prepended when tokenizer_config.json has add_bos_token true. Each
 * file is at most TACO_TOK_MAX_FILE bytes; errors name the file under dir
 * (and the line of merges.txt). */
typedef struct taco_tok_gpt2_files {
	const char *dir;   /* names the files in messages; NULL or "": bare */
	const char *vocab; /* vocab.json: {"token": id, ...} */
	size_t vocab_len;
	const char *merges; /* merges.txt: "a b" a line */
	size_t merges_len;
	const char *config; /* tokenizer_config.json, NULL when absent */
	size_t config_len;
	const char *special_map; /* special_tokens_map.json, NULL: absent */
	size_t special_map_len;
	int has_added_tokens_json; /* dir has an added_tokens.json */
} taco_tok_gpt2_files;

int taco_tok_load_gpt2(const taco_tok_gpt2_files *f, taco_tok **out,
		       taco_err *err);

void taco_tok_free(taco_tok *tok);

/* Encodes len bytes of text (UTF-8; invalid sequences become U+FFFD, see
 * above) into out->ids[0..out->n). add_special_tokens applies the
 * post_processor (e.g. prepends BOS), as tokenizers' add_special_tokens. */
int taco_tok_encode(const taco_tok *tok, const char *text, size_t len,
		    int add_special_tokens, taco_tok_ids *out, taco_err *err);

/* Decodes n ids into a malloc'd NUL-terminated string *out (length in
 * *out_len when not NULL). Unknown ids are skipped, as tokenizers does.
 * skip_special_tokens drops added tokens marked special. */
int taco_tok_decode(const taco_tok *tok, const int32_t *ids, size_t n,
		    int skip_special_tokens, char **out, size_t *out_len,
		    taco_err *err);

/* Id of a token string (added tokens first, then the model vocab), -1 when
 * absent. */
int32_t taco_tok_token_to_id(const taco_tok *tok, const char *token,
			     size_t len);

/* Token string of an id (not NUL-terminated; length in *len), NULL when the
 * id has none. As in tokenizers, an added token with normalized: true gives
 * its content passed through the normalizer. */
const char *taco_tok_id_to_token(const taco_tok *tok, int32_t id, size_t *len);

/* Highest id + 1 over the model vocab and the added tokens (the embedding
 * rows a model needs). */
int32_t taco_tok_vocab_size(const taco_tok *tok);

/* The added tokens, in the order of tokenizer.json's added_tokens: their
 * count, and the content of the i-th (len bytes, not NUL-terminated; NULL
 * past the end) with whether it is marked special. */
int taco_tok_added_count(const taco_tok *tok);
const char *taco_tok_added_token(const taco_tok *tok, int i, size_t *len,
				 int *special);

/* 1 when id is an added token marked special. */
int taco_tok_is_special(const taco_tok *tok, int32_t id);

/* Special token ids, -1 when unknown. From tokenizer_config.json
 * (bos_token, eos_token, pad_token, unk_token) when loaded from a
 * directory that has one; otherwise bos/eos from the post_processor's
 * single template (the special token before / after the sequence) and unk
 * from the model's unk_token. */
typedef struct taco_tok_special {
	int32_t bos, eos, pad, unk;
} taco_tok_special;

taco_tok_special taco_tok_special_ids(const taco_tok *tok);

#endif
