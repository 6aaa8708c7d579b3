/* load.c: loading a tokenizer.json (and tokenizer_config.json) into a
 * taco_tok: the top level, each stage's part handed to its file (bpe.c,
 * added_tokens.c, normalizers.c, pretokenizers.c, post_process.c,
 * decoders.c), what needs them all, and the files; refusing by name
 * whatever is not implemented. A directory without a tokenizer.json goes
 * to load_gpt2.c. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tokenizer_internal.h"

void taco_tok_free(taco_tok *t)
{
	if (!t)
		return;
	free(t->name);
	tok_vocab_free(&t->vocab);
	tok_vocab_free(&t->rvocab);
	free(t->merges.slots);
	free(t->cont_prefix);
	free(t->word_suffix);
	for (int i = 0; i < t->n_norms; i++) {
		free(t->norms[i].str);
		tok_regex_free(&t->norms[i].re);
	}
	free(t->norms);
	for (int i = 0; i < t->n_pts; i++)
		tok_regex_free(&t->pts[i].re);
	free(t->pts);
	tok_regex_free(&t->gpt2_re);
	free(t->post_pre);
	free(t->post_suf);
	for (int i = 0; i < t->n_decs; i++) {
		free(t->decs[i].pat);
		free(t->decs[i].content);
	}
	free(t->decs);
	for (int i = 0; i < t->n_added; i++) {
		if (t->added[i].match != t->added[i].content)
			free(t->added[i].match);
		free(t->added[i].content);
	}
	free(t->added);
	free(t->added_by_id);
	tok_trie_free(&t->trie_raw);
	tok_trie_free(&t->trie_norm);
	for (int i = 0; i < 4; i++)
		free(t->qc[i]);
	if (t->mctx)
		pcre2_match_context_free(t->mctx);
	tok_work_pool_free(t);
	if (t->cache)
		pthread_mutex_destroy(&t->cache_lock);
	free(t->cache);
	free(t);
}

/* A stage of the top level when it is there and not null. */
static int parse_stage(struct tok_loader *L, json_t *root, const char *key,
		       int (*parse)(struct tok_loader *, json_t *, const char *,
				    int))
{
	json_t *v = json_object_get(root, key);

	if (!v || json_is_null(v))
		return 0;
	return parse(L, v, key, 0);
}

/* The top level and each stage. */
static int parse_stages(struct tok_loader *L, json_t *root)
{
	static const char *const keys[] = {"version",	     "truncation",
					   "padding",	     "added_tokens",
					   "normalizer",     "pre_tokenizer",
					   "post_processor", "decoder",
					   "model",	     NULL};
	json_t *v;
	int r;

	if (!json_is_object(root))
		return tok_fail(L, -EINVAL, "the top level must be an object");
	if ((r = tok_check_keys(L, root, "tokenizer", keys)))
		return r;
	v = json_object_get(root, "truncation");
	if (v && !json_is_null(v))
		return tok_fail(L, -ENOTSUP,
				"truncation is not supported (must be null)");
	v = json_object_get(root, "padding");
	if (v && !json_is_null(v))
		return tok_fail(L, -ENOTSUP,
				"padding is not supported (must be null)");
	if ((r = tok_parse_model(L, json_object_get(root, "model"))) ||
	    (r = tok_parse_added(L, json_object_get(root, "added_tokens"))) ||
	    (r = parse_stage(L, root, "normalizer", tok_parse_normalizer)) ||
	    (r = parse_stage(L, root, "pre_tokenizer",
			     tok_parse_pretokenizer)) ||
	    (r = parse_stage(L, root, "post_processor",
			     tok_parse_post_processor)))
		return r;
	v = json_object_get(root, "decoder");
	if (v && !json_is_null(v)) {
		L->tok->has_decoder = 1;
		return tok_parse_decoder(L, v, "decoder", 0);
	}
	return 0;
}

/* The quick-check tables of the normalization forms used, and the match
 * context of every pattern. */
static int build_matching(struct tok_loader *L)
{
	taco_tok *t = L->tok;
	int need_nf[4] = {0};

	for (int i = 0; i < t->n_norms; i++)
		if (t->norms[i].type >= NORM_NFC &&
		    t->norms[i].type <= NORM_NFKD)
			need_nf[t->norms[i].type] = 1;
	if (tok_unicode_init(t, need_nf))
		return tok_oom(L);
	t->mctx = pcre2_match_context_create(NULL);
	if (!t->mctx)
		return tok_oom(L);
	/* bound the work of one regex match (the patterns come from the
	 * file) */
	pcre2_set_match_limit(t->mctx, 10000000);
	pcre2_set_depth_limit(t->mctx, 100000);
	pcre2_set_heap_limit(t->mctx, 64 * 1024);
	return tok_compile_gpt2_regex(L);
}

/* The post-processor's ids, n of them, must be under vocab_size. */
static int check_post_ids(struct tok_loader *L, const int32_t *ids, int n)
{
	for (int i = 0; i < n; i++)
		if (ids[i] >= L->tok->vocab_size)
			return tok_fail(L, -EINVAL,
					"post_processor: id %d is outside the "
					"vocab",
					ids[i]);
	return 0;
}

/* vocab_size: the highest id + 1. */
static int set_vocab_size(struct tok_loader *L)
{
	taco_tok *t = L->tok;
	int r;

	t->vocab_size = (int32_t)t->vocab.n_ids;
	for (int i = 0; i < t->n_added; i++)
		if (t->added[i].id + 1 > t->vocab_size)
			t->vocab_size = t->added[i].id + 1;
	if ((r = check_post_ids(L, t->post_pre, t->n_post_pre)))
		return r;
	return check_post_ids(L, t->post_suf, t->n_post_suf);
}

/* Metaspace(prepend_scheme first) only where "the start of the text" is
 * the start of the input. */
static int check_metaspace_first(struct tok_loader *L)
{
	if (L->metaspace_first_pos > 0)
		return tok_fail(L, -ENOTSUP,
				"pre_tokenizer: Metaspace with prepend_scheme "
				"'first' is only supported as the first "
				"pre-tokenizer");
	if (L->metaspace_first_pos == 0 && L->tok->n_norms &&
	    L->has_normalized_added)
		return tok_fail(L, -ENOTSUP,
				"pre_tokenizer: Metaspace with prepend_scheme "
				"'first' together with a normalizer and "
				"normalized added tokens is not supported");
	return 0;
}

static int parse_root(struct tok_loader *L, json_t *root)
{
	taco_tok *t = L->tok;
	int r;

	if ((r = parse_stages(L, root)) || (r = build_matching(L)) ||
	    (r = set_vocab_size(L)) || (r = tok_build_added(L)) ||
	    (r = check_metaspace_first(L)))
		return r;
	/* byte-level model read from raw bytes */
	if (t->n_pts && t->pts[t->n_pts - 1].type == PT_BYTELEVEL &&
	    !t->cont_prefix && !t->word_suffix) {
		if ((r = tok_build_raw_vocab(L)))
			return r;
		t->bytelevel_last = 1;
	}
	/* special ids from the post-processor */
	t->special.bos = t->n_post_pre == 1 ? t->post_pre[0] : -1;
	t->special.eos =
	    t->n_post_suf >= 1 ? t->post_suf[t->n_post_suf - 1] : -1;
	t->special.pad = -1;
	t->special.unk = t->unk_id;
	t->cache = calloc(TOK_CACHE_SLOTS, sizeof(struct tok_cache_entry));
	if (!t->cache || pthread_mutex_init(&t->cache_lock, NULL)) {
		free(t->cache);
		t->cache = NULL;
		return tok_oom(L);
	}
	return 0;
}

int tok_load_json(struct json_t *root, const char *name, taco_tok **out,
		  taco_err *err)
{
	struct tok_loader L = {0};
	int r;

	*out = NULL;
	L.tok = calloc(1, sizeof(taco_tok));
	L.name = name;
	L.err = err;
	L.metaspace_first_pos = -1;
	if (!L.tok || !(L.tok->name = strdup(name))) {
		taco_tok_free(L.tok);
		return taco_err_set(err, -ENOMEM, "%s: out of memory", name);
	}
	L.tok->unk_id = -1;
	if ((r = parse_root(&L, root))) {
		taco_tok_free(L.tok);
		return r;
	}
	*out = L.tok;
	return 0;
}

int taco_tok_load_buffer(const char *json, size_t len, const char *name,
			 taco_tok **out, taco_err *err)
{
	json_error_t je;
	json_t *root;
	int r;

	*out = NULL;
	if (!name)
		name = "tokenizer.json";
	if (len > TACO_TOK_MAX_FILE)
		return taco_err_set(err, -EFBIG,
				    "%s: %zu bytes, over the limit of %u", name,
				    len, TACO_TOK_MAX_FILE);
	root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return taco_err_set(err, -EINVAL,
				    "%s: malformed JSON at line %d column %d: "
				    "%s",
				    name, je.line, je.column, je.text);
	r = tok_load_json(root, name, out, err);
	json_decref(root);
	return r;
}

int tok_read_all(const char *path, char **out, size_t *len, taco_err *err)
{
	struct stat st;
	FILE *f;
	char *buf;

	*out = NULL;
	if (stat(path, &st))
		return taco_err_set(err, -errno, "%s: %s", path,
				    strerror(errno));
	if ((uint64_t)st.st_size > TACO_TOK_MAX_FILE)
		return taco_err_set(err, -EFBIG,
				    "%s: %lld bytes, over the limit of %u "
				    "bytes",
				    path, (long long)st.st_size,
				    TACO_TOK_MAX_FILE);
	f = fopen(path, "rb");
	if (!f)
		return taco_err_set(err, -errno, "%s: %s", path,
				    strerror(errno));
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		fclose(f);
		return taco_err_set(err, -ENOMEM, "%s: out of memory", path);
	}
	*len = fread(buf, 1, (size_t)st.st_size, f);
	if (ferror(f) || *len != (size_t)st.st_size) {
		fclose(f);
		free(buf);
		return taco_err_set(err, -EIO, "%s: read error", path);
	}
	fclose(f);
	buf[*len] = 0;
	*out = buf;
	return 0;
}

/* bos_token etc. of tokenizer_config.json: a string, {"content": ...} or
 * null. */
static int config_token(taco_tok *t, json_t *root, const char *path,
			const char *key, int32_t *out, taco_err *err)
{
	json_t *v = json_object_get(root, key);

	if (!v || json_is_null(v))
		return 0;
	if (json_is_object(v))
		v = json_object_get(v, "content");
	if (!json_is_string(v))
		return taco_err_set(err, -EINVAL,
				    "%s: %s must be a string, "
				    "{\"content\": ...} or null",
				    path, key);
	*out = taco_tok_token_to_id(t, json_string_value(v),
				    json_string_length(v));
	if (*out < 0)
		return taco_err_set(err, -EINVAL,
				    "%s: %s '%.200s' is not in the vocabulary",
				    path, key, json_string_value(v));
	return 0;
}

static int load_config(taco_tok *t, const char *path, taco_err *err)
{
	json_error_t je;
	json_t *root;
	size_t len;
	char *buf;
	taco_tok_special s = {-1, -1, -1, t->unk_id};
	int r;

	if ((r = tok_read_all(path, &buf, &len, err)))
		return r;
	/* model_max_length is often 1e30, too big for a json integer */
	root = json_loadb(buf, len, JSON_DECODE_INT_AS_REAL, &je);
	free(buf);
	if (!root)
		return taco_err_set(err, -EINVAL,
				    "%s: malformed JSON at line %d column %d: "
				    "%s",
				    path, je.line, je.column, je.text);
	if (!json_is_object(root))
		r = taco_err_set(err, -EINVAL, "%s: must be an object", path);
	else if (!(r = config_token(t, root, path, "bos_token", &s.bos, err)) &&
		 !(r = config_token(t, root, path, "eos_token", &s.eos, err)) &&
		 !(r = config_token(t, root, path, "pad_token", &s.pad, err)) &&
		 !(r = config_token(t, root, path, "unk_token", &s.unk, err)))
		t->special = s;
	json_decref(root);
	return r;
}

int taco_tok_dir_has_tokenizer(const char *dir)
{
	char file[4200];
	struct stat st;

	snprintf(file, sizeof(file), "%s/tokenizer.json", dir);
	if (stat(file, &st) == 0)
		return 1;
	snprintf(file, sizeof(file), "%s/vocab.json", dir);
	return stat(file, &st) == 0;
}

int taco_tok_load(const char *path, taco_tok **out, taco_err *err)
{
	struct stat st;
	char file[4096], cfg[4096];
	size_t len;
	char *buf;
	int r;

	*out = NULL;
	if (stat(path, &st))
		return taco_err_set(err, -errno, "%s: %s", path,
				    strerror(errno));
	if (S_ISDIR(st.st_mode)) {
		snprintf(file, sizeof(file), "%s/tokenizer.json", path);
		snprintf(cfg, sizeof(cfg), "%s/tokenizer_config.json", path);
		/* GPT-2 style files (OPT ships no tokenizer.json) */
		if (stat(file, &st) && errno == ENOENT) {
			snprintf(file, sizeof(file), "%s/vocab.json", path);
			if (stat(file, &st) == 0)
				return tok_load_gpt2_dir(path, out, err);
			return taco_err_set(err, -ENOENT,
					    "%s: no tokenizer.json, nor "
					    "vocab.json and merges.txt",
					    path);
		}
	} else {
		const char *slash = strrchr(path, '/');
		snprintf(file, sizeof(file), "%s", path);
		if (slash)
			snprintf(cfg, sizeof(cfg), "%.*s/tokenizer_config.json",
				 (int)(slash - path), path);
		else
			snprintf(cfg, sizeof(cfg), "tokenizer_config.json");
	}
	if ((r = tok_read_all(file, &buf, &len, err)))
		return r;
	r = taco_tok_load_buffer(buf, len, file, out, err);
	free(buf);
	if (r)
		return r;
	if (stat(cfg, &st) == 0 && S_ISREG(st.st_mode) &&
	    (r = load_config(*out, cfg, err))) {
		taco_tok_free(*out);
		*out = NULL;
		return r;
	}
	return 0;
}
