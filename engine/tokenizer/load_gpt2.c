/* load_gpt2.c: GPT-2 style tokenizer files, as OPT checkpoints
 * (facebook/opt-*) and others ship them without a tokenizer.json:
 * vocab.json (token -> id), merges.txt (one "a b" merge a line) and, when
 * present, tokenizer_config.json and special_tokens_map.json.
 *
 * transformers 5 reads these with GPT2Tokenizer, which builds a `tokenizers`
 * tokenizer from them. We build the same tokenizer as a tokenizer.json tree
 * in memory and hand it to the tokenizer.json loader (load.c), so that
 * one code path encodes both kinds of model directory. What GPT2Tokenizer
 * builds (tokenization_gpt2.py, tokenization_utils_tokenizers.py):
 *
 *   no normalizer; ByteLevel pre-tokenizer with the GPT-2 pattern and
 *   tokenizer_config.json's add_prefix_space (default false); BPE with no
 *   unk token, dropout or subword affixes; ByteLevel decoder; a template
 *   that prepends the BOS when add_bos_token is true (OPT) and appends the
 *   EOS when add_eos_token is true, nothing otherwise (GPT-2).
 *
 * Added tokens, in the order transformers adds them: the entries of
 * tokenizer_config.json's added_tokens_decoder (by index), the named special
 * tokens (bos, eos, unk, sep, pad, cls, mask: from tokenizer_config.json,
 * overridden by special_tokens_map.json when the config has no
 * added_tokens_decoder; bos, eos and unk default to <|endoftext|>), then
 * extra_special_tokens (or additional_special_tokens). A token in the vocab
 * keeps its id; any other gets the next id after the vocab and the tokens
 * added before it (transformers does not use the index of
 * added_tokens_decoder either). Named and extra tokens are special.
 *
 * Refused by name (-ENOTSUP) rather than approximated: a tokenizer_class
 * other than GPT2Tokenizer, split_special_tokens, model-specific *_token
 * entries, added_tokens.json, extra tokens in both files, and one token
 * given twice with different lstrip, rstrip, single_word or normalized
 * (which `tokenizers` resolves one way for matching and another for
 * saving). */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tokenizer_internal.h"

#define N_NAMED 7
enum { NAMED_BOS, NAMED_EOS, NAMED_UNK, NAMED_SEP, NAMED_PAD };

static const char *const named_keys[N_NAMED] = {
    "bos_token", "eos_token", "unk_token",  "sep_token",
    "pad_token", "cls_token", "mask_token",
};

static const char ENDOFTEXT[] = "<|endoftext|>";

/* One definition of an added token. normalized -1: not given, then it is
 * !special, as for tokenizers' AddedToken. */
struct gdef {
	const char *s;
	size_t n;
	int single_word, lstrip, rstrip, normalized, special;
};

/* An added token after merging its definitions. */
struct gadded {
	struct gdef d;
	int32_t id;
};

struct gload {
	const taco_tok_gpt2_files *f;
	taco_err *err;
	char vocab_name[4200], merges_name[4200], config_name[4200],
	    map_name[4200];
	json_t *vocab;
	size_t n_vocab;
	struct gadded *added;
	size_t n_added, cap_added;
	int64_t max_added; /* highest id of an added token, -1: none */
};

static int gpt2_fail(struct gload *G, int code, const char *file,
		     const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int gpt2_fail(struct gload *G, int code, const char *file,
		     const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	taco_err_vat(G->err, code, file, fmt, ap);
	va_end(ap);
	return code;
}

/* "merges.txt:LINE: ..." */
static int fail_line(struct gload *G, int code, long long line, const char *fmt,
		     ...) __attribute__((format(printf, 4, 5)));

static int fail_line(struct gload *G, int code, long long line, const char *fmt,
		     ...)
{
	char where[sizeof(G->merges_name) + 24];
	va_list ap;

	snprintf(where, sizeof(where), "%s:%lld", G->merges_name, line);
	va_start(ap, fmt);
	taco_err_vat(G->err, code, where, fmt, ap);
	va_end(ap);
	return code;
}

static int utf8_ok(const char *s, size_t n)
{
	size_t i = 0, k, bad;

	while (i < n) {
		if (!(k = tok_utf8_valid_prefix((const unsigned char *)s + i,
						n - i, &bad)))
			return 0;
		i += k;
	}
	return 1;
}

static int oom(struct gload *G, const char *file)
{
	return gpt2_fail(G, -ENOMEM, file, "out of memory");
}

static void file_name(char *out, size_t cap, const char *dir, const char *name)
{
	if (dir && dir[0])
		snprintf(out, cap, "%s/%s", dir, name);
	else
		snprintf(out, cap, "%s", name);
}

static int parse_json(struct gload *G, const char *buf, size_t len,
		      const char *file, size_t flags, json_t **out)
{
	json_error_t je;

	*out = NULL;
	if (len > TACO_TOK_MAX_FILE)
		return gpt2_fail(G, -EFBIG, file,
				 "%zu bytes, over the limit of %u", len,
				 TACO_TOK_MAX_FILE);
	*out = json_loadb(buf, len, flags, &je);
	if (!*out)
		return gpt2_fail(G, -EINVAL, file,
				 "malformed JSON at line %d column %d: %s",
				 je.line, je.column, je.text);
	if (!json_is_object(*out))
		return gpt2_fail(G, -EINVAL, file, "must be a JSON object");
	return 0;
}

/* ------------------------------------------------------------ vocab */

static int parse_vocab(struct gload *G)
{
	const char *file = G->vocab_name, *key, **owner;
	json_t *v;
	int64_t max_id = -1;
	int r;

	/* tokenizers takes the last of duplicate keys; a vocab with two is
	 * broken, so it is refused */
	if ((r = parse_json(G, G->f->vocab, G->f->vocab_len, file,
			    JSON_REJECT_DUPLICATES, &G->vocab)))
		return r;
	G->n_vocab = json_object_size(G->vocab);
	if (G->n_vocab > TACO_TOK_MAX_VOCAB)
		return gpt2_fail(G, -EFBIG, file,
				 "%zu tokens, over the limit of %u", G->n_vocab,
				 TACO_TOK_MAX_VOCAB);
	json_object_foreach(G->vocab, key, v)
	{
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) >= (json_int_t)TACO_TOK_MAX_VOCAB)
			return gpt2_fail(
			    G, -EINVAL, file,
			    "the id of '%.200s' must be an integer in "
			    "[0, %u)",
			    key, TACO_TOK_MAX_VOCAB);
		if (strlen(key) > TACO_TOK_MAX_TOKEN_LEN)
			return gpt2_fail(
			    G, -EFBIG, file,
			    "token '%.40s...' is longer than %d bytes", key,
			    TACO_TOK_MAX_TOKEN_LEN);
		if (json_integer_value(v) > max_id)
			max_id = json_integer_value(v);
	}
	/* tokenizers keeps one of two tokens with the same id for decoding
	 * and gives both ids when encoding: refused */
	owner = calloc((size_t)(max_id + 2), sizeof(*owner));
	if (!owner)
		return oom(G, file);
	r = 0;
	json_object_foreach(G->vocab, key, v)
	{
		json_int_t id = json_integer_value(v);
		if (owner[id]) {
			r = gpt2_fail(
			    G, -EINVAL, file,
			    "id %lld is used by '%.200s' and '%.200s'",
			    (long long)id, owner[id], key);
			break;
		}
		owner[id] = key;
	}
	free(owner);
	return r;
}

/* ------------------------------------------------------------ merges */

/* Whether s[0..n) is a vocab token; tmp holds at least n + 1 bytes. Vocab
 * keys have no NUL (the JSON parser refuses it in keys) and neither has s,
 * so a copy ended by one is looked up. */
static int in_vocab(struct gload *G, const char *s, size_t n, char *tmp)
{
	memcpy(tmp, s, n);
	tmp[n] = 0;
	return json_object_get(G->vocab, tmp) != NULL;
}

/* One merge line p[0..n) (no line end): [a, b] appended to arr. tmp holds
 * 2 * TACO_TOK_MAX_TOKEN_LEN + 2 bytes. */
static int merge_line(struct gload *G, const char *p, size_t n, long long line,
		      json_t *arr, char *tmp)
{
	const char *sp = memchr(p, ' ', n), *b;
	size_t al, bl;
	json_t *pair;

	if (!utf8_ok(p, n))
		return fail_line(G, -EINVAL, line, "not valid UTF-8");
	if (memchr(p, 0, n))
		return fail_line(G, -EINVAL, line, "contains a NUL byte");
	if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp - p) - 1))
		return fail_line(G, -EINVAL, line,
				 "'%.*s' must be two tokens separated by one "
				 "space",
				 (int)(n < 200 ? n : 200), p);
	al = (size_t)(sp - p);
	b = sp + 1;
	bl = n - al - 1;
	if (al > TACO_TOK_MAX_TOKEN_LEN || bl > TACO_TOK_MAX_TOKEN_LEN)
		return fail_line(G, -EFBIG, line,
				 "a token is longer than %d bytes",
				 TACO_TOK_MAX_TOKEN_LEN);
	/* tokenizers refuses these too ("Token `x` out of vocabulary") */
	if (!in_vocab(G, p, al, tmp))
		return fail_line(G, -EINVAL, line,
				 "token '%.*s' is not in vocab.json",
				 (int)(al < 200 ? al : 200), p);
	if (!in_vocab(G, b, bl, tmp))
		return fail_line(G, -EINVAL, line,
				 "token '%.*s' is not in vocab.json",
				 (int)(bl < 200 ? bl : 200), b);
	memcpy(tmp, p, al);
	memcpy(tmp + al, b, bl);
	tmp[al + bl] = 0;
	if (!json_object_get(G->vocab, tmp))
		return fail_line(G, -EINVAL, line,
				 "the merged token '%.200s' is not in "
				 "vocab.json",
				 tmp);
	if (!(pair = json_array()) ||
	    json_array_append_new(pair, json_stringn_nocheck(p, al)) ||
	    json_array_append_new(pair, json_stringn_nocheck(b, bl)) ||
	    json_array_append_new(arr, pair))
		return oom(G, G->merges_name);
	return 0;
}

/* As tokenizers reads merges.txt: lines split at \n (a \r before it is
 * dropped), those starting with "#version" skipped, every other one
 * exactly two tokens split by one space; ranks in file order. tokenizers
 * refuses blank lines; blank lines at the end are allowed here (editors
 * leave them). Each merge is [a, b] in the tree. */
static int parse_merges(struct gload *G, json_t **out)
{
	const char *p = G->f->merges, *end = p + G->f->merges_len;
	long long line = 0, blank = 0;
	size_t n_merges = 0;
	char *tmp = NULL;
	json_t *arr;
	int r = 0;

	*out = NULL;
	if (G->f->merges_len > TACO_TOK_MAX_FILE)
		return gpt2_fail(G, -EFBIG, G->merges_name,
				 "%zu bytes, over the limit of %u",
				 G->f->merges_len, TACO_TOK_MAX_FILE);
	if (!(arr = json_array()) ||
	    !(tmp = malloc(2 * (size_t)TACO_TOK_MAX_TOKEN_LEN + 2))) {
		json_decref(arr);
		return oom(G, G->merges_name);
	}
	while (p < end && !r) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *e = nl ? nl : end;

		line++;
		if (nl && e > p && e[-1] == '\r')
			e--;
		if (e == p) {
			if (!blank)
				blank = line;
		} else if (blank) {
			r = fail_line(G, -EINVAL, blank,
				      "empty line (only allowed at the end)");
		} else if (e - p >= 8 && !memcmp(p, "#version", 8)) {
			/* the format's header, skipped wherever it is */
		} else if (++n_merges > TACO_TOK_MAX_MERGES) {
			r = gpt2_fail(G, -EFBIG, G->merges_name,
				      "more than %u merges",
				      TACO_TOK_MAX_MERGES);
		} else {
			r = merge_line(G, p, (size_t)(e - p), line, arr, tmp);
		}
		p = nl ? nl + 1 : end;
	}
	free(tmp);
	if (r) {
		json_decref(arr);
		return r;
	}
	*out = arr;
	return 0;
}

/* ------------------------------------------------------------ config */

static int get_flag(struct gload *G, json_t *o, const char *file,
		    const char *where, const char *key, int dflt, int *out)
{
	json_t *v = json_object_get(o, key);

	*out = dflt;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_boolean(v))
		return gpt2_fail(G, -EINVAL, file,
				 "%s%s%s must be true or false", where,
				 where[0] ? "." : "", key);
	*out = json_is_true(v);
	return 0;
}

/* A token of a config file: a string (special, as transformers makes it),
 * an AddedToken object, or null (*present = 0). */
static int parse_token(struct gload *G, json_t *v, const char *file,
		       const char *where, struct gdef *d, int *present)
{
	static const char *const keys[] = {"content", "single_word", "lstrip",
					   "rstrip",  "normalized",  "special",
					   "__type",  NULL};
	const char *k;
	json_t *x, *c = v;
	int r;

	memset(d, 0, sizeof(*d));
	d->normalized = -1;
	*present = 0;
	if (!v || json_is_null(v))
		return 0;
	if (json_is_object(v)) {
		json_object_foreach(v, k, x)
		{
			int ok = 0;
			for (int i = 0; keys[i]; i++)
				ok |= !strcmp(k, keys[i]);
			if (!ok)
				return gpt2_fail(
				    G, -ENOTSUP, file,
				    "%s field '%s' is not supported", where, k);
		}
		x = json_object_get(v, "__type");
		if (x && !(json_is_string(x) &&
			   !strcmp(json_string_value(x), "AddedToken")))
			return gpt2_fail(G, -EINVAL, file,
					 "%s.__type must be \"AddedToken\"",
					 where);
		if ((r = get_flag(G, v, file, where, "single_word", 0,
				  &d->single_word)) ||
		    (r = get_flag(G, v, file, where, "lstrip", 0,
				  &d->lstrip)) ||
		    (r = get_flag(G, v, file, where, "rstrip", 0,
				  &d->rstrip)) ||
		    (r = get_flag(G, v, file, where, "special", 0,
				  &d->special)))
			return r;
		x = json_object_get(v, "normalized");
		if (x && !json_is_null(x) &&
		    (r = get_flag(G, v, file, where, "normalized", 0,
				  &d->normalized)))
			return r;
		c = json_object_get(v, "content");
		if (!json_is_string(c))
			return gpt2_fail(G, -EINVAL, file,
					 "%s.content must be a string", where);
	} else if (json_is_string(v)) {
		d->special = 1;
	} else {
		return gpt2_fail(G, -EINVAL, file,
				 "%s must be a string, an AddedToken object or "
				 "null",
				 where);
	}
	d->s = json_string_value(c);
	d->n = json_string_length(c);
	if (!d->n)
		return gpt2_fail(G, -EINVAL, file, "%s is an empty token",
				 where);
	if (d->n > TACO_TOK_MAX_TOKEN_LEN)
		return gpt2_fail(G, -EFBIG, file, "%s is longer than %d bytes",
				 where, TACO_TOK_MAX_TOKEN_LEN);
	*present = 1;
	return 0;
}

/* Refuses config options whose effect on the ids this reader does not
 * reproduce (listed in the error), rather than guessing. */
static int check_config(struct gload *G, json_t *o, const char *file)
{
	const char *k;
	json_t *v;
	int b, r;

	v = json_object_get(o, "tokenizer_class");
	if (json_is_string(v) &&
	    strcmp(json_string_value(v), "GPT2Tokenizer") &&
	    strcmp(json_string_value(v), "GPT2TokenizerFast"))
		return gpt2_fail(G, -ENOTSUP, file,
				 "tokenizer_class '%.200s' is not supported "
				 "(GPT2Tokenizer only)",
				 json_string_value(v));
	if ((r = get_flag(G, o, file, "", "split_special_tokens", 0, &b)))
		return r;
	if (b)
		return gpt2_fail(G, -ENOTSUP, file,
				 "split_special_tokens true is not supported");
	json_object_foreach(o, k, v)
	{
		size_t n = strlen(k);
		int named = 0;
		for (int i = 0; i < N_NAMED; i++)
			named |= !strcmp(k, named_keys[i]);
		/* transformers makes other "*_token" strings and
		 * AddedTokens special tokens of their own (the two flags
		 * must be booleans, checked apart) */
		named |=
		    !strcmp(k, "add_bos_token") || !strcmp(k, "add_eos_token");
		if (!named && n > 6 && !strcmp(k + n - 6, "_token") &&
		    (json_is_string(v) || json_is_object(v)))
			return gpt2_fail(G, -ENOTSUP, file,
					 "'%.200s' (a model-specific special "
					 "token) is not supported",
					 k);
		if (!strcmp(k, "extra_special_tokens") && json_is_object(v))
			return gpt2_fail(
			    G, -ENOTSUP, file,
			    "extra_special_tokens as an object "
			    "(model-specific special tokens) is not "
			    "supported");
	}
	return 0;
}

/* A list of extra special tokens: *out the list, NULL when null or
 * empty. */
static int extras_list(struct gload *G, json_t *v, const char *file,
		       const char *key, json_t **out)
{
	*out = NULL;
	if (json_is_null(v))
		return 0;
	if (!json_is_array(v))
		return gpt2_fail(G, -EINVAL, file, "%s must be a list", key);
	if (json_array_size(v) > TACO_TOK_MAX_ADDED)
		return gpt2_fail(G, -EFBIG, file,
				 "%s has %zu entries, over the limit of %d",
				 key, json_array_size(v), TACO_TOK_MAX_ADDED);
	*out = json_array_size(v) ? v : NULL;
	return 0;
}

/* The extra special tokens transformers ends up with (from_pretrained,
 * then PreTrainedTokenizerBase.__init__): tokenizer_config.json's
 * extra_special_tokens when not empty, else its
 * additional_special_tokens, else its extra_special_tokens; then, when
 * special_tokens_map.json is read (map not NULL), that file's
 * extra_special_tokens joins them (null replaces them), and its
 * additional_special_tokens is used only when neither config key is
 * there. */
static int find_extras(struct gload *G, json_t *cfg, json_t *map, json_t **out,
		       const char **file)
{
	static const char EXTRA[] = "extra_special_tokens",
			  ADDITIONAL[] = "additional_special_tokens";
	json_t *x = json_object_get(cfg, EXTRA),
	       *y = json_object_get(cfg, ADDITIONAL), *l;
	int present = x || y, r;
	/* Python's truth of the value (the other falsy ones fail below) */
	int x_true =
	    x && (json_is_array(x) ? json_array_size(x) > 0
				   : !json_is_null(x) && !json_is_false(x));

	*out = NULL;
	*file = G->config_name;
	if (x_true || (!y && x)) {
		if ((r = extras_list(G, x, G->config_name, EXTRA, out)))
			return r;
	} else if (y &&
		   (r = extras_list(G, y, G->config_name, ADDITIONAL, out))) {
		return r;
	}
	if (!map)
		return 0;
	x = json_object_get(map, EXTRA);
	y = json_object_get(map, ADDITIONAL);
	if (x) {
		if ((r = extras_list(G, x, G->map_name, EXTRA, &l)))
			return r;
		if (json_is_null(x))
			*out = NULL;
		else if (l && *out)
			return gpt2_fail(
			    G, -ENOTSUP, G->map_name,
			    "extra special tokens here and in "
			    "tokenizer_config.json are not supported");
		else if (l) {
			*out = l;
			*file = G->map_name;
		}
		present = 1;
	}
	if (y && !present) {
		if ((r = extras_list(G, y, G->map_name, ADDITIONAL, out)))
			return r;
		*file = G->map_name;
	}
	return 0;
}

/* ------------------------------------------------------------ added */

static struct gadded *find_added(struct gload *G, const char *s, size_t n)
{
	for (size_t i = 0; i < G->n_added; i++)
		if (G->added[i].d.n == n && !memcmp(G->added[i].d.s, s, n))
			return &G->added[i];
	return NULL;
}

/* Adds one definition as tokenizers' add_tokens does: a token already
 * added is not added again (its definitions must agree), a vocab token
 * keeps its id, any other takes the next free one. */
static int add_def(struct gload *G, const struct gdef *d0, const char *file,
		   const char *where)
{
	struct gdef d = *d0;
	struct gadded *a;
	json_t *v;
	char *key;

	if (d.normalized < 0)
		d.normalized = !d.special;
	if ((a = find_added(G, d.s, d.n))) {
		if (a->d.single_word != d.single_word ||
		    a->d.lstrip != d.lstrip || a->d.rstrip != d.rstrip ||
		    a->d.normalized != d.normalized)
			return gpt2_fail(
			    G, -ENOTSUP, file,
			    "%s: '%.200s' is defined twice with "
			    "different lstrip, rstrip, single_word or "
			    "normalized",
			    where, d.s);
		a->d.special |= d.special;
		return 0;
	}
	if (G->n_added >= TACO_TOK_MAX_ADDED)
		return gpt2_fail(G, -EFBIG, file, "more than %d added tokens",
				 TACO_TOK_MAX_ADDED);
	if (G->n_added == G->cap_added) {
		size_t c = G->cap_added ? G->cap_added * 2 : 16;
		struct gadded *g = realloc(G->added, c * sizeof(*g));
		if (!g)
			return oom(G, file);
		G->added = g;
		G->cap_added = c;
	}
	a = &G->added[G->n_added++];
	a->d = d;
	if (!(key = malloc(d.n + 1)))
		return oom(G, file);
	memcpy(key, d.s, d.n);
	key[d.n] = 0;
	v = memchr(d.s, 0, d.n) ? NULL : json_object_get(G->vocab, key);
	free(key);
	if (v) {
		a->id = (int32_t)json_integer_value(v);
	} else {
		int64_t next = (int64_t)G->n_vocab;
		if (G->max_added + 1 > next)
			next = G->max_added + 1;
		if (next >= (int64_t)TACO_TOK_MAX_VOCAB)
			return gpt2_fail(
			    G, -EFBIG, file,
			    "%s: '%.200s' would get an id over the "
			    "limit of %u",
			    where, d.s, TACO_TOK_MAX_VOCAB);
		a->id = (int32_t)next;
	}
	if (a->id > G->max_added)
		G->max_added = a->id;
	return 0;
}

struct atd_entry {
	long long index;
	json_t *v;
	const char *key;
};

static int atd_cmp(const void *a, const void *b)
{
	const struct atd_entry *x = a, *y = b;

	return (x->index > y->index) - (x->index < y->index);
}

static int is_named(const struct gdef *named, const int *has, const char *s,
		    size_t n)
{
	for (int i = 0; i < N_NAMED; i++)
		if (has[i] && named[i].n == n && !memcmp(named[i].s, s, n))
			return 1;
	return 0;
}

/* added_tokens_decoder: {"<index>": AddedToken, ...} in index order.
 * Tokens that are also named special tokens are special. */
static int add_decoder_tokens(struct gload *G, json_t *atd,
			      const struct gdef *named, const int *has)
{
	const char *file = G->config_name, *k;
	struct atd_entry *e;
	size_t n = json_object_size(atd), i = 0;
	json_t *v;
	int r = 0;

	if (n > TACO_TOK_MAX_ADDED)
		return gpt2_fail(
		    G, -EFBIG, file,
		    "added_tokens_decoder has %zu entries, over the "
		    "limit of %d",
		    n, TACO_TOK_MAX_ADDED);
	if (!(e = calloc(n + 1, sizeof(*e))))
		return oom(G, file);
	json_object_foreach(atd, k, v)
	{
		char *endp;
		long long idx = strtoll(k, &endp, 10);
		if (!k[0] || *endp || idx < 0 || !json_is_object(v)) {
			r = gpt2_fail(
			    G, -EINVAL, file,
			    "added_tokens_decoder['%.200s'] must be an "
			    "AddedToken object under an index",
			    k);
			break;
		}
		e[i].index = idx;
		e[i].v = v;
		e[i++].key = k;
	}
	if (!r)
		qsort(e, n, sizeof(*e), atd_cmp);
	for (i = 0; i < n && !r; i++) {
		char where[256];
		struct gdef d;
		int present;
		snprintf(where, sizeof(where), "added_tokens_decoder['%.200s']",
			 e[i].key);
		if (!(r = parse_token(G, e[i].v, file, where, &d, &present))) {
			if (is_named(named, has, d.s, d.n))
				d.special = 1;
			r = add_def(G, &d, file, where);
		}
	}
	free(e);
	return r;
}

static int add_extras(struct gload *G, json_t *list, const char *file)
{
	size_t i;
	json_t *v;
	int r;

	json_array_foreach(list, i, v)
	{
		char where[64];
		struct gdef d;
		int present;
		snprintf(where, sizeof(where), "extra special token %zu", i);
		if ((r = parse_token(G, v, file, where, &d, &present)))
			return r;
		if (!present)
			return gpt2_fail(G, -EINVAL, file, "%s is null", where);
		d.special = 1;
		if ((r = add_def(G, &d, file, where)))
			return r;
	}
	return 0;
}

/* ------------------------------------------------------------ tree */

static int32_t added_id(struct gload *G, const struct gdef *d)
{
	struct gadded *a = find_added(G, d->s, d->n);

	return a ? a->id : -1;
}

static json_t *special_item(const struct gdef *d)
{
	return json_pack("{s:{s:s%,s:i}}", "SpecialToken", "id", d->s, d->n,
			 "type_id", 0);
}

/* The TemplateProcessing transformers' update_post_processor sets: BOS
 * before the sequence, EOS after it, each when asked for. */
static json_t *post_processor(struct gload *G, const struct gdef *bos,
			      const struct gdef *eos)
{
	json_t *single = json_array(), *sp = json_object(), *pp;
	const struct gdef *both[2] = {bos, eos};

	if (!single || !sp) {
		json_decref(single);
		json_decref(sp);
		return NULL;
	}
	if (bos)
		json_array_append_new(single, special_item(bos));
	json_array_append_new(single, json_pack("{s:{s:s,s:i}}", "Sequence",
						"id", "A", "type_id", 0));
	if (eos)
		json_array_append_new(single, special_item(eos));
	for (int i = 0; i < 2; i++) {
		char *name;
		int bad;
		if (!both[i])
			continue;
		if (!(name = malloc(both[i]->n + 1))) {
			json_decref(single);
			json_decref(sp);
			return NULL;
		}
		memcpy(name, both[i]->s, both[i]->n);
		name[both[i]->n] = 0;
		bad = json_object_set_new(
		    sp, name,
		    json_pack("{s:s%,s:[i],s:[s%]}", "id", both[i]->s,
			      both[i]->n, "ids", (int)added_id(G, both[i]),
			      "tokens", both[i]->s, both[i]->n));
		free(name);
		if (bad) {
			json_decref(single);
			json_decref(sp);
			return NULL;
		}
	}
	/* "o" hands both over, also when packing fails */
	pp = json_pack("{s:s,s:o,s:o}", "type", "TemplateProcessing", "single",
		       single, "special_tokens", sp);
	return pp;
}

static json_t *added_tokens_tree(struct gload *G)
{
	json_t *arr = json_array();

	for (size_t i = 0; arr && i < G->n_added; i++) {
		const struct gdef *d = &G->added[i].d;
		if (json_array_append_new(
			arr,
			json_pack("{s:i,s:s%,s:b,s:b,s:b,s:b,s:b}", "id",
				  (int)G->added[i].id, "content", d->s, d->n,
				  "single_word", d->single_word, "lstrip",
				  d->lstrip, "rstrip", d->rstrip, "normalized",
				  d->normalized, "special", d->special))) {
			json_decref(arr);
			return NULL;
		}
	}
	return arr;
}

/* ------------------------------------------------------------ load */

/* The named special tokens: has[i] when token i is there (its definition
 * in def[i]), set[i] when a file gives it (null too). */
struct gnamed {
	struct gdef def[N_NAMED];
	int has[N_NAMED], set[N_NAMED];
};

/* The named tokens that o (of file) gives. */
static int named_from(struct gload *G, json_t *o, const char *file,
		      struct gnamed *N)
{
	int r;

	for (int i = 0; i < N_NAMED; i++) {
		json_t *v = json_object_get(o, named_keys[i]);
		if (!v)
			continue;
		N->set[i] = 1;
		if ((r = parse_token(G, v, file, named_keys[i], &N->def[i],
				     &N->has[i])))
			return r;
	}
	return 0;
}

/* tokenizer_config.json (an empty one when absent) into *cfg; its flags.
 * model_max_length is often 1e30, too big for a JSON integer. */
static int read_config(struct gload *G, json_t **cfg, int *add_bos,
		       int *add_eos, int *add_prefix_space)
{
	const taco_tok_gpt2_files *f = G->f;
	const char *file = G->config_name;
	int r;

	if (f->config) {
		if ((r = parse_json(G, f->config, f->config_len, file,
				    JSON_DECODE_INT_AS_REAL, cfg)))
			return r;
	} else if (!(*cfg = json_object())) {
		return oom(G, file);
	}
	if ((r = check_config(G, *cfg, file)) ||
	    (r = get_flag(G, *cfg, file, "", "add_bos_token", 0, add_bos)) ||
	    (r = get_flag(G, *cfg, file, "", "add_eos_token", 0, add_eos)) ||
	    (r = get_flag(G, *cfg, file, "", "add_prefix_space", 0,
			  add_prefix_space)))
		return r;
	return 0;
}

/* Without an added_tokens_decoder in the config, transformers reads the
 * legacy files: added_tokens.json (refused) and special_tokens_map.json
 * (into *map, its named tokens over the config's). */
static int read_legacy(struct gload *G, json_t **map, struct gnamed *N)
{
	const taco_tok_gpt2_files *f = G->f;
	int r;

	if (f->has_added_tokens_json)
		return taco_err_set(G->err, -ENOTSUP,
				    "%s%sadded_tokens.json is not supported "
				    "(list its tokens in "
				    "tokenizer_config.json's "
				    "added_tokens_decoder)",
				    f->dir && f->dir[0] ? f->dir : "",
				    f->dir && f->dir[0] ? "/" : "");
	if (!f->special_map)
		return 0;
	if ((r = parse_json(G, f->special_map, f->special_map_len, G->map_name,
			    0, map)) ||
	    (r = check_config(G, *map, G->map_name)))
		return r;
	return named_from(G, *map, G->map_name, N);
}

/* GPT2Tokenizer's defaults: bos, eos and unk are <|endoftext|> when no file
 * gives them. */
static void named_defaults(struct gnamed *N)
{
	for (int i = NAMED_BOS; i <= NAMED_UNK; i++)
		if (!N->set[i]) {
			memset(&N->def[i], 0, sizeof(N->def[i]));
			N->def[i].s = ENDOFTEXT;
			N->def[i].n = sizeof(ENDOFTEXT) - 1;
			N->def[i].normalized = -1;
			N->has[i] = 1;
		}
}

/* The named tokens, special, after the added_tokens_decoder entries (the
 * first n_atd added ones). */
static int add_named(struct gload *G, json_t *map, const struct gnamed *N,
		     size_t n_atd)
{
	int r;

	for (int i = 0; i < N_NAMED; i++) {
		struct gdef d = N->def[i];
		struct gadded *a;
		if (!N->has[i])
			continue;
		/* a named token of added_tokens_decoder is that entry, flags
		 * and all (transformers swaps in the decoder's AddedToken) */
		a = find_added(G, d.s, d.n);
		if (a && (size_t)(a - G->added) < n_atd)
			continue;
		d.special = 1;
		if ((r = add_def(G, &d,
				 N->set[i] && map &&
					 json_object_get(map, named_keys[i])
				     ? G->map_name
				     : G->config_name,
				 named_keys[i])))
			return r;
	}
	return 0;
}

/* The added tokens, in transformers' order, and what the files say of the
 * named ones (into N); *map is special_tokens_map.json when it is read. */
static int collect_added(struct gload *G, json_t *cfg, json_t **map,
			 struct gnamed *N)
{
	json_t *atd = json_object_get(cfg, "added_tokens_decoder"), *extras;
	const char *extras_file;
	size_t n_atd;
	int r;

	if ((r = named_from(G, cfg, G->config_name, N)))
		return r;
	if (atd && !json_is_object(atd) && !json_is_null(atd))
		return gpt2_fail(G, -EINVAL, G->config_name,
				 "added_tokens_decoder must be an object");
	if (!atd && (r = read_legacy(G, map, N)))
		return r;
	if ((r = find_extras(G, cfg, *map, &extras, &extras_file)))
		return r;
	named_defaults(N);
	if (atd && json_is_object(atd) &&
	    (r = add_decoder_tokens(G, atd, N->def, N->has)))
		return r;
	n_atd = G->n_added;
	if ((r = add_named(G, *map, N, n_atd)))
		return r;
	if (extras && (r = add_extras(G, extras, extras_file)))
		return r;
	return 0;
}

/* The tokenizer.json tree GPT2Tokenizer builds; it takes pp (NULL: none)
 * over, even when it fails (json_pack steals "o"). */
static json_t *gpt2_tree(struct gload *G, json_t *merges, json_t *pp,
			 int add_prefix_space)
{
	return json_pack(
	    "{s:n,s:n,s:o*,s:n,s:{s:s,s:b,s:b,s:b},s:o*,s:{s:s,s:b,s:b,s:b},"
	    "s:{s:s,s:n,s:n,s:n,s:n,s:b,s:b,s:b,s:O,s:O}}",
	    "truncation", "padding", "added_tokens", added_tokens_tree(G),
	    "normalizer", "pre_tokenizer", "type", "ByteLevel",
	    "add_prefix_space", add_prefix_space, "trim_offsets", 1,
	    "use_regex", 1, "post_processor", pp, "decoder", "type",
	    "ByteLevel", "add_prefix_space", 1, "trim_offsets", 1, "use_regex",
	    1, "model", "type", "BPE", "dropout", "unk_token",
	    "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", 0,
	    "byte_fallback", 0, "ignore_merges", 0, "vocab", G->vocab, "merges",
	    merges);
}

/* The special ids: the named tokens, as transformers' bos_token_id etc. */
static void set_specials(struct gload *G, const struct gnamed *N, taco_tok *t)
{
	const struct gdef *d = N->def;

	t->special.bos = N->has[NAMED_BOS] ? added_id(G, &d[NAMED_BOS]) : -1;
	t->special.eos = N->has[NAMED_EOS] ? added_id(G, &d[NAMED_EOS]) : -1;
	t->special.pad = N->has[NAMED_PAD] ? added_id(G, &d[NAMED_PAD]) : -1;
	t->special.unk = N->has[NAMED_UNK] ? added_id(G, &d[NAMED_UNK]) : -1;
}

int taco_tok_load_gpt2(const taco_tok_gpt2_files *f, taco_tok **out,
		       taco_err *err)
{
	struct gload G = {0};
	struct gnamed N = {0};
	json_t *cfg = NULL, *map = NULL, *merges = NULL, *root = NULL;
	json_t *pp = NULL;
	int add_bos = 0, add_eos = 0, add_prefix_space = 0, bos, eos, r;

	*out = NULL;
	G.f = f;
	G.err = err;
	G.max_added = -1;
	file_name(G.vocab_name, sizeof(G.vocab_name), f->dir, "vocab.json");
	file_name(G.merges_name, sizeof(G.merges_name), f->dir, "merges.txt");
	file_name(G.config_name, sizeof(G.config_name), f->dir,
		  "tokenizer_config.json");
	file_name(G.map_name, sizeof(G.map_name), f->dir,
		  "special_tokens_map.json");
	if ((r = parse_vocab(&G)) || (r = parse_merges(&G, &merges)) ||
	    (r = read_config(&G, &cfg, &add_bos, &add_eos,
			     &add_prefix_space)) ||
	    (r = collect_added(&G, cfg, &map, &N)))
		goto out;
	bos = add_bos && N.has[NAMED_BOS];
	eos = add_eos && N.has[NAMED_EOS];
	if ((bos || eos) &&
	    !(pp = post_processor(&G, bos ? &N.def[NAMED_BOS] : NULL,
				  eos ? &N.def[NAMED_EOS] : NULL))) {
		r = oom(&G, G.config_name);
		goto out;
	}
	root = gpt2_tree(&G, merges, pp, add_prefix_space);
	pp = NULL; /* the tree owns it */
	if (!root || !json_object_get(root, "added_tokens")) {
		r = oom(&G, G.vocab_name);
		goto out;
	}
	if ((r = tok_load_json(root, G.vocab_name, out, err)))
		goto out;
	set_specials(&G, &N, *out);
out:
	json_decref(root);
	json_decref(pp);
	json_decref(merges);
	json_decref(cfg);
	json_decref(map);
	json_decref(G.vocab);
	free(G.added);
	return r;
}

/* ------------------------------------------------------------ files */

static int read_optional(const char *path, char **buf, size_t *len,
			 taco_err *err)
{
	struct stat st;

	*buf = NULL;
	*len = 0;
	if (stat(path, &st) || !S_ISREG(st.st_mode))
		return 0;
	return tok_read_all(path, buf, len, err);
}

int tok_load_gpt2_dir(const char *dir, taco_tok **out, taco_err *err)
{
	char path[4200];
	char *vocab = NULL, *merges = NULL, *config = NULL, *map = NULL;
	taco_tok_gpt2_files f = {0};
	struct stat st;
	int r;

	*out = NULL;
	f.dir = dir;
	snprintf(path, sizeof(path), "%s/vocab.json", dir);
	if ((r = tok_read_all(path, &vocab, &f.vocab_len, err)))
		goto out;
	snprintf(path, sizeof(path), "%s/merges.txt", dir);
	if (stat(path, &st)) {
		r = taco_err_set(err, -errno,
				 "%s: %s (a vocab.json needs its merges.txt)",
				 path, strerror(errno));
		goto out;
	}
	if ((r = tok_read_all(path, &merges, &f.merges_len, err)))
		goto out;
	snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
	if ((r = read_optional(path, &config, &f.config_len, err)))
		goto out;
	snprintf(path, sizeof(path), "%s/special_tokens_map.json", dir);
	if ((r = read_optional(path, &map, &f.special_map_len, err)))
		goto out;
	snprintf(path, sizeof(path), "%s/added_tokens.json", dir);
	f.has_added_tokens_json = stat(path, &st) == 0;
	f.vocab = vocab;
	f.merges = merges;
	f.config = config;
	f.special_map = map;
	r = taco_tok_load_gpt2(&f, out, err);
out:
	free(vocab);
	free(merges);
	free(config);
	free(map);
	return r;
}
