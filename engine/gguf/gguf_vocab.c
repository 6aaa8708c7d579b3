/* gguf_vocab.c: see gguf_vocab.h. */
#include "gguf_vocab.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fsutil.h"
#include "util/json_file.h"

/* llama.cpp's token types (llama.h, enum llama_token_type). */
enum {
	TOK_NORMAL = 1,
	TOK_CONTROL = 3,
	TOK_USER_DEFINED = 4,
	TOK_UNUSED = 5,
};

/* The pre-tokenizer regexes of the byte-level BPE tokenizers llama.cpp
 * names (llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_*). The converter finds the
 * name by hashing a test string's tokens; a pattern says the same of the
 * tokenizer.json it came from. */
static const struct {
	const char *name, *regex;
} pre_names[] = {
    {"qwen2", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
	      "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|"
	      "\\s+"},
    {"llama-bpe",
     "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
     " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
};

typedef struct vocab {
	const char *dir;
	char **tok;
	int32_t *type;
	int n;
	const char **merges;
	size_t nmerges;
	json_t *tj, *tc, *cfg; /* tokenizer.json, tokenizer_config, config */
	char tj_name[4200];
} vocab;

static int load_json(const char *dir, const char *file, int required,
		     size_t max, json_t **out, taco_err *err)
{
	char path[4200], *buf = NULL;
	size_t len;
	int r;

	*out = NULL;
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	if ((r = taco_read_file(path, max, &buf, &len, err)))
		return (r == -ENOENT && !required) ? 0 : r;
	r = taco_json_parse(path, buf, len, max, TACO_JSON_OBJECT, out, err);
	free(buf);
	return r;
}

/* A pre_tokenizer that llama.cpp splits the same way: its name. */
static int pre_name(vocab *v, const char **out, taco_err *err)
{
	json_t *p = json_object_get(v->tj, "pre_tokenizer");
	const char *type = json_string_value(json_object_get(p, "type"));

	if (type && !strcmp(type, "ByteLevel") &&
	    json_is_true(json_object_get(p, "use_regex"))) {
		*out = "gpt-2"; /* GPT-2's own regex */
		return 0;
	}
	if (type && !strcmp(type, "Sequence")) {
		json_t *seq = json_object_get(p, "pretokenizers");
		json_t *s0 = json_array_get(seq, 0),
		       *s1 = json_array_get(seq, 1);
		const char *t0 = json_string_value(json_object_get(s0, "type"));
		const char *t1 = json_string_value(json_object_get(s1, "type"));
		const char *re = json_string_value(
		    json_object_get(json_object_get(s0, "pattern"), "Regex"));
		if (json_array_size(seq) == 2 && t0 && !strcmp(t0, "Split") &&
		    t1 && !strcmp(t1, "ByteLevel") && re &&
		    !json_is_true(json_object_get(s1, "use_regex")))
			for (size_t i = 0;
			     i < sizeof(pre_names) / sizeof(pre_names[0]); i++)
				if (!strcmp(re, pre_names[i].regex)) {
					*out = pre_names[i].name;
					return 0;
				}
	}
	/* Llama 2's and Mistral's: SentencePiece pieces with byte
	 * fallback, GGUF's "llama" tokenizer, which the export does not
	 * write (docs/gguf.md) */
	if (json_is_true(json_object_get(json_object_get(v->tj, "model"),
					 "byte_fallback")) ||
	    (type && !strcmp(type, "Metaspace")))
		return taco_err_set(err, -ENOTSUP,
				    "%s: a SentencePiece tokenizer (byte "
				    "fallback or Metaspace, as Llama 2's and "
				    "Mistral's): tacod's GGUF export writes "
				    "byte-level BPE tokenizers only; "
				    "llama.cpp's convert_hf_to_gguf.py "
				    "converts this model",
				    v->tj_name);
	return taco_err_set(err, -ENOTSUP,
			    "%s: pre_tokenizer: not one whose llama.cpp "
			    "pre-tokenizer tacod knows (GPT-2's byte-level "
			    "regex, Qwen2's or Llama 3's split)",
			    v->tj_name);
}

static int set_token(vocab *v, int id, const char *s, int type, taco_err *err)
{
	if (id < 0 || id >= v->n)
		return taco_err_set(err, -EINVAL,
				    "%s: token id %d of \"%.40s\" is not below "
				    "vocab_size %d (config.json)",
				    v->tj_name, id, s, v->n);
	free(v->tok[id]);
	if (!(v->tok[id] = strdup(s)))
		return taco_err_set(err, -ENOMEM, "out of memory");
	v->type[id] = type;
	return 0;
}

static int looks_special(const char *s)
{
	size_t n = strlen(s);
	return n >= 4 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>");
}

static int read_tokens(vocab *v, taco_err *err)
{
	json_t *model = json_object_get(v->tj, "model"), *val, *at;
	const char *mt = json_string_value(json_object_get(model, "type"));
	const char *key;
	size_t i;
	int r;

	if (!mt || strcmp(mt, "BPE") ||
	    !json_is_object(json_object_get(model, "vocab")))
		return taco_err_set(err, -ENOTSUP,
				    "%s: model.type: GGUF export takes a BPE "
				    "tokenizer, not %s",
				    v->tj_name, mt ? mt : "this one");
	json_object_foreach(json_object_get(model, "vocab"), key, val)
	{
		if (!json_is_integer(val))
			return taco_err_set(err, -EINVAL,
					    "%s: model.vocab: \"%.40s\" has no "
					    "integer id",
					    v->tj_name, key);
		if ((r = set_token(v, (int)json_integer_value(val), key,
				   TOK_NORMAL, err)))
			return r;
	}
	json_array_foreach(json_object_get(v->tj, "added_tokens"), i, at)
	{
		const char *c =
		    json_string_value(json_object_get(at, "content"));
		json_t *id = json_object_get(at, "id");
		if (!c || !json_is_integer(id))
			return taco_err_set(err, -EINVAL,
					    "%s: added_tokens[%zu]: no content "
					    "or id",
					    v->tj_name, i);
		int special = json_is_true(json_object_get(at, "special")) ||
			      looks_special(c);
		if ((r = set_token(v, (int)json_integer_value(id), c,
				   special ? TOK_CONTROL : TOK_USER_DEFINED,
				   err)))
			return r;
	}
	for (int k = 0; k < v->n; k++)
		if (!v->tok[k]) {
			char pad[32];
			snprintf(pad, sizeof(pad), "[PAD%d]", k);
			if ((r = set_token(v, k, pad, TOK_UNUSED, err)))
				return r;
		}
	return 0;
}

static int read_merges(vocab *v, taco_err *err)
{
	json_t *m = json_object_get(json_object_get(v->tj, "model"), "merges");
	json_t *e;
	size_t i;

	if (!json_is_array(m))
		return taco_err_set(err, -EINVAL,
				    "%s: model.merges: not a list", v->tj_name);
	v->nmerges = json_array_size(m);
	if (!(v->merges = calloc(v->nmerges + 1, sizeof(*v->merges))))
		return taco_err_set(err, -ENOMEM, "out of memory");
	json_array_foreach(m, i, e)
	{
		if (json_is_string(e)) {
			v->merges[i] = json_string_value(e);
			continue;
		}
		/* ["a", "b"]: "a b", as the converter joins them */
		const char *a = json_string_value(json_array_get(e, 0));
		const char *b = json_string_value(json_array_get(e, 1));
		if (!a || !b || json_array_size(e) != 2)
			return taco_err_set(err, -EINVAL,
					    "%s: model.merges[%zu]: not a pair "
					    "of strings",
					    v->tj_name, i);
		json_t *s = json_sprintf("%s %s", a, b);
		if (!s || json_array_set_new(m, i, s))
			return taco_err_set(err, -ENOMEM, "out of memory");
		v->merges[i] = json_string_value(json_array_get(m, i));
	}
	return 0;
}

/* The id of tokenizer_config's NAME ("bos_token": a string or an object
 * with "content"), else config.json's NAME_id; -1 when neither says. */
static int special_id(vocab *v, const char *name)
{
	json_t *t = json_object_get(v->tc, name), *at;
	const char *c = json_is_object(t)
			    ? json_string_value(json_object_get(t, "content"))
			    : json_string_value(t);
	char key[64];
	size_t i;

	if (c)
		json_array_foreach(
		    json_object_get(v->tj, "added_tokens"), i,
		    at) if (!strcmp(c,
				    json_string_value(
					json_object_get(at, "content"))
					?: "")) return (int)
		    json_integer_value(json_object_get(at, "id"));
	snprintf(key, sizeof(key), "%s_id", name);
	t = json_object_get(v->cfg, key);
	if (json_is_array(t)) /* eos_token_id: [a, b]: the first */
		t = json_array_get(t, 0);
	if (json_is_integer(t) && json_integer_value(t) >= 0 &&
	    json_integer_value(t) < v->n)
		return (int)json_integer_value(t);
	return -1;
}

/* Whether encoding adds a BOS: tokenizer_config's add_bos_token, else
 * whether the post-processor's template starts with a special token. */
static int adds_bos(vocab *v)
{
	json_t *b = json_object_get(v->tc, "add_bos_token");
	json_t *pp = json_object_get(v->tj, "post_processor");
	const char *t = json_string_value(json_object_get(pp, "type"));

	if (json_is_boolean(b))
		return json_is_true(b);
	if (t && !strcmp(t, "TemplateProcessing"))
		return json_object_get(
			   json_array_get(json_object_get(pp, "single"), 0),
			   "SpecialToken") != NULL;
	return 0;
}

/* The template transformers serves with: chat_template.jinja, else
 * tokenizer_config.json's chat_template (a string, or the list's
 * "default"). A job that trained with another wrote it as the export's
 * chat_template.jinja. */
static int add_template(taco_gguf *g, vocab *v, taco_err *err)
{
	json_t *c = json_object_get(v->tc, "chat_template"), *e;
	const char *t = json_string_value(c);
	char path[4200], *buf = NULL;
	size_t len, i;
	int r;

	snprintf(path, sizeof(path), "%s/chat_template.jinja", v->dir);
	r = taco_read_file(path, TACO_GGUF_TEMPLATE_MAX_BYTES, &buf, &len, err);
	if (r && r != -ENOENT)
		return r;
	if (!r) {
		if (strlen(buf) != len) {
			free(buf);
			return taco_err_set(err, -EINVAL,
					    "%s: holds a NUL byte", path);
		}
		r = taco_gguf_kv_str(g, "tokenizer.chat_template", buf);
		free(buf);
		if (r)
			return taco_err_set(err, r, "%s: %s", path,
					    strerror(-r));
		return 0;
	}
	json_array_foreach(c, i, e)
	{
		const char *n = json_string_value(json_object_get(e, "name"));
		if (n && !strcmp(n, "default"))
			t = json_string_value(json_object_get(e, "template"));
	}
	if (t && (r = taco_gguf_kv_str(g, "tokenizer.chat_template", t)))
		return taco_err_set(err, r, "%s: chat_template: %s", v->dir,
				    strerror(-r));
	return 0;
}

int taco_gguf_add_vocab(taco_gguf *g, const char *dir, int vocab_size,
			const char *chat_template, taco_err *err)
{
	static const char *const ids[][2] = {
	    {"bos_token", "tokenizer.ggml.bos_token_id"},
	    {"eos_token", "tokenizer.ggml.eos_token_id"},
	    {"unk_token", "tokenizer.ggml.unknown_token_id"},
	    {"pad_token", "tokenizer.ggml.padding_token_id"},
	};
	vocab v = {.dir = dir, .n = vocab_size};
	const char *pre = NULL;
	json_t *ae;
	int r;

	snprintf(v.tj_name, sizeof(v.tj_name), "%s/tokenizer.json", dir);
	if (!(v.tok = calloc((size_t)vocab_size, sizeof(*v.tok))) ||
	    !(v.type = calloc((size_t)vocab_size, sizeof(*v.type)))) {
		r = taco_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	if ((r = load_json(dir, "tokenizer.json", 1,
			   TACO_GGUF_TOKENIZER_MAX_BYTES, &v.tj, err)) ||
	    (r = load_json(dir, "tokenizer_config.json", 0,
			   TACO_GGUF_TOKENIZER_MAX_BYTES, &v.tc, err)) ||
	    (r = load_json(dir, "config.json", 1, 1u << 20, &v.cfg, err)) ||
	    (r = pre_name(&v, &pre, err)) || (r = read_tokens(&v, err)) ||
	    (r = read_merges(&v, err)))
		goto out;
	if ((r = taco_gguf_kv_str(g, "tokenizer.ggml.model", "gpt2")) ||
	    (r = taco_gguf_kv_str(g, "tokenizer.ggml.pre", pre)) ||
	    (r = taco_gguf_kv_str_array(g, "tokenizer.ggml.tokens",
					(const char *const *)v.tok, v.n)) ||
	    (r = taco_gguf_kv_i32_array(g, "tokenizer.ggml.token_type", v.type,
					v.n)) ||
	    (r = taco_gguf_kv_str_array(g, "tokenizer.ggml.merges", v.merges,
					v.nmerges)))
		goto kv;
	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		int id = special_id(&v, ids[i][0]);
		if (id >= 0 &&
		    (r = taco_gguf_kv_u32(g, ids[i][1], (uint32_t)id)))
			goto kv;
	}
	if ((r = taco_gguf_kv_bool(g, "tokenizer.ggml.add_bos_token",
				   adds_bos(&v))))
		goto kv;
	ae = json_object_get(v.tc, "add_eos_token");
	if (json_is_boolean(ae) &&
	    (r = taco_gguf_kv_bool(g, "tokenizer.ggml.add_eos_token",
				   json_is_true(ae))))
		goto kv;
	if (chat_template)
		r = taco_gguf_kv_str(g, "tokenizer.chat_template",
				     chat_template);
	else
		r = add_template(g, &v, err);
	if (r)
		goto out;
	r = 0;
	goto out;
kv:
	r = taco_err_set(err, r, "%s: GGUF tokenizer keys: %s", dir,
			 strerror(-r));
out:
	for (int i = 0; v.tok && i < vocab_size; i++)
		free(v.tok[i]);
	free(v.tok);
	free(v.type);
	free(v.merges);
	json_decref(v.tj);
	json_decref(v.tc);
	json_decref(v.cfg);
	return r;
}
