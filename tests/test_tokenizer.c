/* test_tokenizer.c: the tokenizer against Hugging Face tokenizers
 * (fixtures made by tests/fixtures/tokenizers/gen_tokenizers.py): the same
 * ids on every corpus line for every fixture tokenizer, the same decoding,
 * tokenizer variants, invalid UTF-8, every code point's regex classes and
 * normalizations (unicode_classes.json, normalization.json), refusals and
 * limits; and GPT-2 style vocab.json + merges.txt directories against
 * transformers' GPT2Tokenizer (gen_gpt2.py): the corpus, config variants
 * (gpt2_cases.json), the BOS prefix, and the errors naming file and line. */
#include <check.h>
#include <dirent.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_internal.h"

static const char *const names[] = {"bytelevel", "metaspace", "mistral",
				    "claude"};
/* GPT-2 style directories (vocab.json + merges.txt, gen_gpt2.py) */
static const char *const gpt2_names[] = {"opt", "gpt2"};

/* ------------------------------------------------------------ fixtures */

struct corpus {
	char **text;
	size_t *len;
	size_t n;
};

static void corpus_load(struct corpus *c)
{
	size_t len;
	char *buf = tu_read_file(tu_fixture("tokenizers/corpus.jsonl"), &len);
	char *p, *nl;

	ck_assert_msg(buf, "corpus.jsonl missing");
	memset(c, 0, sizeof(*c));
	for (p = buf; p < buf + len; p = nl + 1) {
		json_error_t je;
		json_t *s;
		nl = memchr(p, '\n', (size_t)(buf + len - p));
		if (!nl)
			nl = buf + len;
		s = json_loadb(p, (size_t)(nl - p),
			       JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
		ck_assert_msg(json_is_string(s), "corpus line %zu: %s",
			      c->n + 1, je.text);
		c->text = realloc(c->text, sizeof(char *) * (c->n + 1));
		c->len = realloc(c->len, sizeof(size_t) * (c->n + 1));
		c->len[c->n] = json_string_length(s);
		c->text[c->n] = malloc(c->len[c->n] + 1);
		memcpy(c->text[c->n], json_string_value(s), c->len[c->n] + 1);
		c->n++;
		json_decref(s);
	}
	free(buf);
}

static void corpus_free(struct corpus *c)
{
	for (size_t i = 0; i < c->n; i++)
		free(c->text[i]);
	free(c->text);
	free(c->len);
}

/* <name>.ids: 'TKID', u32 count, then per line varint n, varint ids. */
struct idsfile {
	int32_t **ids;
	size_t *n;
	size_t lines;
};

static uint32_t varint(const unsigned char **p, const unsigned char *end)
{
	uint32_t v = 0;
	int shift = 0;

	while (*p < end) {
		unsigned char b = *(*p)++;
		v |= (uint32_t)(b & 0x7F) << shift;
		if (!(b & 0x80))
			return v;
		shift += 7;
	}
	ck_abort_msg("truncated ids file");
	return 0;
}

static void ids_load(const char *name, struct idsfile *f)
{
	char rel[256];
	size_t len;
	unsigned char *buf;
	const unsigned char *p, *end;

	snprintf(rel, sizeof(rel), "tokenizers/%s.ids", name);
	buf = (unsigned char *)tu_read_file(tu_fixture(rel), &len);
	ck_assert_msg(buf && len >= 8 && !memcmp(buf, "TKID", 4), "%s", rel);
	p = buf + 8;
	end = buf + len;
	{
		uint32_t nl;
		memcpy(&nl, buf + 4, 4);
		f->lines = nl;
	}
	f->ids = calloc(f->lines, sizeof(int32_t *));
	f->n = calloc(f->lines, sizeof(size_t));
	for (size_t i = 0; i < f->lines; i++) {
		f->n[i] = varint(&p, end);
		f->ids[i] = malloc(sizeof(int32_t) * (f->n[i] + 1));
		for (size_t k = 0; k < f->n[i]; k++)
			f->ids[i][k] = (int32_t)varint(&p, end);
	}
	free(buf);
}

static void ids_free(struct idsfile *f)
{
	for (size_t i = 0; i < f->lines; i++)
		free(f->ids[i]);
	free(f->ids);
	free(f->n);
}

static json_t *json_fixture(const char *rel)
{
	json_error_t je;
	json_t *j = json_load_file(tu_fixture(rel), JSON_ALLOW_NUL, &je);

	ck_assert_msg(j, "%s: %s", rel, je.text);
	return j;
}

static taco_tok *load_named(const char *name)
{
	char rel[256];
	taco_tok *tok;
	taco_err err = {{0}};

	snprintf(rel, sizeof(rel), "tokenizers/%s", name);
	ck_assert_msg(taco_tok_load(tu_fixture(rel), &tok, &err) == 0, "%s",
		      err.msg);
	return tok;
}

static int ids_equal(const taco_tok_ids *a, const int32_t *b, size_t n)
{
	return a->n == n && (n == 0 || !memcmp(a->ids, b, n * sizeof(int32_t)));
}

static int ids_equal_json(const taco_tok_ids *a, json_t *arr)
{
	if (!json_is_array(arr) || json_array_size(arr) != a->n)
		return 0;
	for (size_t i = 0; i < a->n; i++)
		if (json_integer_value(json_array_get(arr, i)) != a->ids[i])
			return 0;
	return 1;
}

static char *ids_str(const int32_t *ids, size_t n)
{
	static char buf[512];
	size_t k = 0;

	buf[0] = 0;
	for (size_t i = 0; i < n && k < sizeof(buf) - 16; i++)
		k += (size_t)snprintf(buf + k, sizeof(buf) - k, "%s%d",
				      i ? " " : "", ids[i]);
	if (n > 0 && k >= sizeof(buf) - 16)
		snprintf(buf + k, sizeof(buf) - k, " ...");
	return buf;
}

/* ------------------------------------------------------------ corpus */

static void corpus_parity(const char *name)
{
	char rel[256];
	struct corpus c;
	struct idsfile f = {0};
	json_t *exp, *pre, *suf, *dec, *decs, *head, *diff, *exc;
	taco_tok *tok = load_named(name);
	taco_tok_ids ids = {0}, sp = {0};
	taco_err err = {{0}};
	size_t bad_ids = 0, bad_special = 0, bad_dec = 0, bad_skip = 0;
	size_t bad_head = 0;
	char report[4096] = "";
	size_t rl = 0;

	corpus_load(&c);
	snprintf(rel, sizeof(rel), "tokenizers/%s.expect.json", name);
	exp = json_fixture(rel);
	ck_assert_int_eq(json_integer_value(json_object_get(exp, "lines")),
			 c.n);
	diff = json_object_get(exp, "ids_diff");
	ids_load(diff ? json_string_value(json_object_get(exp, "ids_base"))
		      : name,
		 &f);
	ck_assert_uint_eq(f.lines, c.n);
	pre = json_object_get(exp, "prefix");
	suf = json_object_get(exp, "suffix");
	exc = json_object_get(exp, "special_exceptions");
	dec = json_object_get(exp, "decode");
	decs = json_object_get(exp, "decode_skip_special");
	head = json_object_get(exp, "decode_special_head");
	for (size_t i = 0; i < c.n; i++) {
		char key[32], *out = NULL;
		json_t *want_j, *d;
		const char *want;
		size_t wl, ol;
		int ok;

		snprintf(key, sizeof(key), "%zu", i);
		ck_assert_msg(taco_tok_encode(tok, c.text[i], c.len[i], 0, &ids,
					      &err) == 0,
			      "%s line %zu: %s", name, i, err.msg);
		want_j = diff ? json_object_get(diff, key) : NULL;
		ok = want_j ? ids_equal_json(&ids, want_j)
			    : ids_equal(&ids, f.ids[i], f.n[i]);
		if (!ok && bad_ids++ < 3 && rl < sizeof(report) - 600)
			rl += (size_t)snprintf(
			    report + rl, sizeof(report) - rl,
			    "\n  line %zu %.60s\n    ours: %s", i, c.text[i],
			    ids_str(ids.ids, ids.n));
		/* add_special_tokens: the frame around the plain ids */
		ck_assert_int_eq(
		    taco_tok_encode(tok, c.text[i], c.len[i], 1, &sp, &err), 0);
		if ((want_j = json_object_get(exc, key))) {
			ok = ids_equal_json(&sp, want_j);
		} else {
			size_t np = json_array_size(pre),
			       ns = json_array_size(suf);
			ok = sp.n == np + ids.n + ns;
			for (size_t k = 0; ok && k < np; k++)
				ok = sp.ids[k] ==
				     json_integer_value(json_array_get(pre, k));
			for (size_t k = 0; ok && k < ids.n; k++)
				ok = sp.ids[np + k] == ids.ids[k];
			for (size_t k = 0; ok && k < ns; k++)
				ok = sp.ids[np + ids.n + k] ==
				     json_integer_value(json_array_get(suf, k));
		}
		bad_special += !ok;
		/* decode(plain ids) */
		ck_assert_int_eq(
		    taco_tok_decode(tok, ids.ids, ids.n, 0, &out, &ol, &err),
		    0);
		d = json_object_get(dec, key);
		want = d ? json_string_value(d) : c.text[i];
		wl = d ? json_string_length(d) : c.len[i];
		if ((ol != wl || memcmp(out, want, wl)) && bad_dec++ < 3 &&
		    rl < sizeof(report) - 600)
			rl += (size_t)snprintf(
			    report + rl, sizeof(report) - rl,
			    "\n  decode line %zu: want '%.60s' got '%.60s'", i,
			    want, out);
		free(out);
		/* decode(framed ids, skip_special_tokens) */
		ck_assert_int_eq(
		    taco_tok_decode(tok, sp.ids, sp.n, 1, &out, &ol, &err), 0);
		if (!(d = json_object_get(decs, key)))
			d = json_object_get(dec, key);
		want = d ? json_string_value(d) : c.text[i];
		wl = d ? json_string_length(d) : c.len[i];
		bad_skip += ol != wl || memcmp(out, want, wl);
		free(out);
		if (i < json_array_size(head)) {
			d = json_array_get(head, i);
			ck_assert_int_eq(taco_tok_decode(tok, sp.ids, sp.n, 0,
							 &out, &ol, &err),
					 0);
			bad_head += ol != json_string_length(d) ||
				    memcmp(out, json_string_value(d), ol);
			free(out);
		}
	}
	ck_assert_msg(bad_ids + bad_special + bad_dec + bad_skip + bad_head ==
			  0,
		      "%s: of %zu lines, %zu differ in ids, %zu with special "
		      "tokens, %zu in decode, %zu in decode skipping special, "
		      "%zu in decode with special:%s",
		      name, c.n, bad_ids, bad_special, bad_dec, bad_skip,
		      bad_head, report);
	taco_tok_ids_free(&ids);
	taco_tok_ids_free(&sp);
	ids_free(&f);
	json_decref(exp);
	corpus_free(&c);
	taco_tok_free(tok);
}

START_TEST(test_corpus_parity)
{
	corpus_parity(names[_i]);
}
END_TEST

START_TEST(test_corpus_parity_gpt2)
{
	corpus_parity(gpt2_names[_i]);
}
END_TEST

/* ------------------------------------------------------------ variants */

/* Same rules as apply_patch() in gen_tokenizers.py. */
static void apply_patch(json_t *root, json_t *patch)
{
	const char *k;
	json_t *v;

	json_object_foreach(patch, k, v)
	{
		const char *dot = strchr(k, '.');
		if (!strcmp(k, "added_tokens+")) {
			json_array_extend(json_object_get(root, "added_tokens"),
					  v);
		} else if (dot) {
			char a[64];
			snprintf(a, sizeof(a), "%.*s", (int)(dot - k), k);
			json_object_set(json_object_get(root, a), dot + 1, v);
		} else {
			json_object_set(root, k, v);
		}
	}
}

/* base tokenizer.json with patch applied, as a string */
static char *patched(const char *base, json_t *patch)
{
	char rel[256];
	json_t *root;
	char *s;

	snprintf(rel, sizeof(rel), "tokenizers/%s/tokenizer.json", base);
	root = json_fixture(rel);
	if (patch)
		apply_patch(root, patch);
	s = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	return s;
}

START_TEST(test_variants)
{
	json_t *all = json_fixture("tokenizers/cases.json");
	json_t *texts = json_object_get(all, "texts");
	json_t *cases = json_object_get(all, "cases"), *c;
	size_t ci, bad = 0;
	char report[4096] = "";
	size_t rl = 0;

	ck_assert_uint_ge(json_array_size(cases), 30);
	json_array_foreach(cases, ci, c)
	{
		const char *name =
		    json_string_value(json_object_get(c, "name"));
		const char *base =
		    json_string_value(json_object_get(c, "base"));
		taco_tok *tok;
		taco_tok_ids ids = {0};
		taco_err err = {{0}};
		char *js;
		int r;

		if (!strcmp(base, "inline"))
			js = json_dumps(json_object_get(c, "tokenizer"),
					JSON_COMPACT);
		else
			js = patched(base, json_object_get(c, "patch"));
		r = taco_tok_load_buffer(js, strlen(js), name, &tok, &err);
		free(js);
		ck_assert_msg(r == 0, "%s: %s", name, err.msg);
		for (size_t t = 0; t < json_array_size(texts); t++) {
			json_t *s = json_array_get(texts, t);
			static const char *const kinds[] = {
			    "ids", "ids_special", "decode", "decode_skip"};
			for (int k = 0; k < 4; k++) {
				json_t *want = json_array_get(
				    json_object_get(c, kinds[k]), t);
				int ok;
				if (k < 2) {
					ck_assert_msg(taco_tok_encode(
							  tok,
							  json_string_value(s),
							  json_string_length(s),
							  k, &ids, &err) == 0,
						      "%s: %s", name, err.msg);
					ok = ids_equal_json(&ids, want);
				} else {
					json_t *src = json_array_get(
					    json_object_get(c, "ids_special"),
					    t);
					int32_t v[4096];
					size_t n = json_array_size(src), ol;
					char *out;
					ck_assert_uint_le(n, 4096);
					for (size_t q = 0; q < n; q++)
						v[q] =
						    (int32_t)json_integer_value(
							json_array_get(src, q));
					ck_assert_int_eq(
					    taco_tok_decode(tok, v, n, k == 3,
							    &out, &ol, &err),
					    0);
					ok = ol == json_string_length(want) &&
					     !memcmp(out,
						     json_string_value(want),
						     ol);
					free(out);
				}
				if (!ok && bad++ < 6 &&
				    rl < sizeof(report) - 300)
					rl += (size_t)snprintf(
					    report + rl, sizeof(report) - rl,
					    "\n  %s text %zu (%.40s) %s%s%s",
					    name, t, json_string_value(s),
					    kinds[k], k < 2 ? ": ours " : "",
					    k < 2 ? ids_str(ids.ids, ids.n)
						  : "");
			}
		}
		taco_tok_ids_free(&ids);
		taco_tok_free(tok);
	}
	ck_assert_msg(bad == 0, "%zu variant results differ:%s", bad, report);
	json_decref(all);
}
END_TEST

/* ------------------------------------------------------------ UTF-8 */

static size_t unhex(const char *h, unsigned char *out)
{
	size_t n = strlen(h) / 2;

	for (size_t i = 0; i < n; i++) {
		unsigned v;
		sscanf(h + 2 * i, "%2x", &v);
		out[i] = (unsigned char)v;
	}
	return n;
}

START_TEST(test_invalid_utf8)
{
	json_t *all = json_fixture("tokenizers/invalid_utf8.json");
	json_t *inputs = json_object_get(all, "inputs");
	json_t *dec = json_object_get(all, "decode");

	for (size_t t = 0; t < sizeof(names) / sizeof(names[0]); t++) {
		taco_tok *tok = load_named(names[t]);
		json_t *want =
		    json_object_get(json_object_get(all, "ids"), names[t]);
		json_t *rows = json_object_get(dec, names[t]), *row;
		taco_tok_ids ids = {0};
		taco_err err = {{0}};
		size_t i;

		for (i = 0; i < json_array_size(inputs); i++) {
			unsigned char b[256];
			size_t n = unhex(
			    json_string_value(json_array_get(inputs, i)), b);
			ck_assert_int_eq(
			    taco_tok_encode(tok, (char *)b, n, 0, &ids, &err),
			    0);
			ck_assert_msg(
			    ids_equal_json(&ids, json_array_get(want, i)),
			    "%s: invalid input %zu (%s): ours %s", names[t], i,
			    json_string_value(json_array_get(inputs, i)),
			    ids_str(ids.ids, ids.n));
		}
		json_array_foreach(rows, i, row)
		{
			json_t *src = json_array_get(row, 0);
			json_t *txt = json_array_get(row, 1);
			int32_t v[16];
			size_t n = json_array_size(src), ol;
			char *out;
			for (size_t q = 0; q < n && q < 16; q++)
				v[q] = (int32_t)json_integer_value(
				    json_array_get(src, q));
			ck_assert_int_eq(
			    taco_tok_decode(tok, v, n, 0, &out, &ol, &err), 0);
			ck_assert_msg(
			    ol == json_string_length(txt) &&
				!memcmp(out, json_string_value(txt), ol),
			    "%s decode row %zu: '%s' != '%s'", names[t], i, out,
			    json_string_value(txt));
			free(out);
		}
		taco_tok_ids_free(&ids);
		taco_tok_free(tok);
	}
	json_decref(all);
}
END_TEST

/* ------------------------------------------------------------ specials */

static void special_never_split(const char *name)
{
	taco_tok *tok = load_named(name);
	taco_tok_ids ids = {0};
	taco_err err = {{0}};
	int32_t vs = taco_tok_vocab_size(tok), n_special = 0;

	for (int32_t id = 0; id < vs; id++) {
		size_t len;
		const char *t;
		char text[5000];
		int found = 0;

		if (!taco_tok_is_special(tok, id))
			continue;
		n_special++;
		t = taco_tok_id_to_token(tok, id, &len);
		ck_assert_ptr_nonnull(t);
		ck_assert_int_eq(taco_tok_token_to_id(tok, t, len), id);
		/* alone, and glued between words */
		ck_assert_int_eq(taco_tok_encode(tok, t, len, 0, &ids, &err),
				 0);
		ck_assert_msg(ids.n == 1 && ids.ids[0] == id,
			      "%s: '%.*s' alone gives %s", name, (int)len, t,
			      ids_str(ids.ids, ids.n));
		snprintf(text, sizeof(text), "ab%.*scd %.*s", (int)len, t,
			 (int)len, t);
		ck_assert_int_eq(
		    taco_tok_encode(tok, text, strlen(text), 0, &ids, &err), 0);
		for (size_t k = 0; k < ids.n; k++)
			found += ids.ids[k] == id;
		ck_assert_msg(found == 2, "%s: '%s' holds the token %d times",
			      name, text, found);
	}
	ck_assert_int_gt(n_special, 0);
	taco_tok_ids_free(&ids);
	taco_tok_free(tok);
}

START_TEST(test_special_never_split)
{
	special_never_split(names[_i]);
}
END_TEST

START_TEST(test_special_never_split_gpt2)
{
	special_never_split(gpt2_names[_i]);
}
END_TEST

START_TEST(test_api)
{
	taco_tok *tok = load_named("bytelevel"), *t2;
	taco_tok_special s = taco_tok_special_ids(tok);
	taco_err err = {{0}};
	size_t len;
	const char *t;
	char *out;

	ck_assert_int_eq(s.bos,
			 taco_tok_token_to_id(tok, "<|begin_of_text|>", 17));
	ck_assert_int_eq(s.eos,
			 taco_tok_token_to_id(tok, "<|end_of_text|>", 15));
	ck_assert_int_eq(s.pad, -1);
	ck_assert_int_eq(taco_tok_vocab_size(tok), 3001);
	t = taco_tok_id_to_token(tok, 3000, &len);
	ck_assert_ptr_nonnull(t);
	ck_assert_int_eq(len, 11);
	ck_assert(!memcmp(t, "<tool_call>", 11));
	ck_assert(!taco_tok_is_special(tok, 3000));
	ck_assert(taco_tok_is_special(tok, s.bos));
	ck_assert_ptr_null(taco_tok_id_to_token(tok, 3001, &len));
	ck_assert_ptr_null(taco_tok_id_to_token(tok, -1, &len));
	ck_assert_int_eq(taco_tok_token_to_id(tok, "no such token", 13), -1);
	/* unknown ids are skipped by decode */
	{
		int32_t v[3] = {-5, 99999, s.bos};
		ck_assert_int_eq(
		    taco_tok_decode(tok, v, 3, 0, &out, &len, &err), 0);
		ck_assert_str_eq(out, "<|begin_of_text|>");
		free(out);
		ck_assert_int_eq(
		    taco_tok_decode(tok, v, 3, 1, &out, &len, &err), 0);
		ck_assert_str_eq(out, "");
		ck_assert_uint_eq(len, 0);
		free(out);
	}
	taco_tok_free(tok);

	/* the metaspace config names its tokens as {"content": ...} */
	tok = load_named("metaspace");
	s = taco_tok_special_ids(tok);
	ck_assert_int_eq(s.bos, 1);
	ck_assert_int_eq(s.eos, 2);
	ck_assert_int_eq(s.pad, 0);
	ck_assert_int_eq(s.unk, 0);
	taco_tok_free(tok);

	/* no tokenizer_config.json: bos from the template; none for claude */
	tok = load_named("claude");
	s = taco_tok_special_ids(tok);
	ck_assert_int_eq(s.bos, -1);
	ck_assert_int_eq(taco_tok_vocab_size(tok), 65000);
	taco_tok_free(tok);
	ck_assert_int_eq(
	    taco_tok_load(tu_fixture("tokenizers/mistral/tokenizer.json"), &t2,
			  &err),
	    0);
	s = taco_tok_special_ids(t2);
	ck_assert_int_eq(s.bos, 1);
	ck_assert_int_eq(s.unk, 0);
	taco_tok_free(t2);

	ck_assert_int_lt(
	    taco_tok_load(tu_fixture("tokenizers/nope"), &t2, &err), 0);
	ck_assert_ptr_null(t2);
	ck_assert_ptr_nonnull(strstr(err.msg, "tokenizers/nope"));
}
END_TEST

struct thr {
	taco_tok *tok;
	struct corpus *c;
	size_t mismatches;
	taco_tok_ids *ref;
};

static void *thr_run(void *arg)
{
	struct thr *t = arg;
	taco_tok_ids ids = {0};
	taco_err err;

	for (int rep = 0; rep < 2; rep++)
		for (size_t i = 0; i < 2000; i++) {
			if (taco_tok_encode(t->tok, t->c->text[i], t->c->len[i],
					    0, &ids, &err) ||
			    !ids_equal(&ids, t->ref[i].ids, t->ref[i].n))
				t->mismatches++;
		}
	taco_tok_ids_free(&ids);
	return NULL;
}

START_TEST(test_threads)
{
	struct corpus c;
	taco_tok *tok = load_named("bytelevel");
	taco_tok_ids ref[2000];
	taco_err err;
	struct thr t[3];
	pthread_t th[3];

	corpus_load(&c);
	memset(ref, 0, sizeof(ref));
	for (size_t i = 0; i < 2000; i++)
		ck_assert_int_eq(
		    taco_tok_encode(tok, c.text[i], c.len[i], 0, &ref[i], &err),
		    0);
	for (int k = 0; k < 3; k++) {
		t[k] = (struct thr){tok, &c, 0, ref};
		pthread_create(&th[k], NULL, thr_run, &t[k]);
	}
	for (int k = 0; k < 3; k++) {
		pthread_join(th[k], NULL);
		ck_assert_uint_eq(t[k].mismatches, 0);
	}
	for (size_t i = 0; i < 2000; i++)
		taco_tok_ids_free(&ref[i]);
	corpus_free(&c);
	taco_tok_free(tok);
}
END_TEST

/* ------------------------------------------------------------ Unicode */

/* Every code point but the surrogates, as UTF-8, with the offset of each. */
struct allcp {
	char *s;
	size_t n;
	uint32_t *off; /* by index */
	uint32_t *cp;  /* by index */
	size_t count;
};

static void allcp_make(struct allcp *a)
{
	a->s = malloc(0x110000 * 4);
	a->off = malloc(0x110000 * sizeof(uint32_t));
	a->cp = malloc(0x110000 * sizeof(uint32_t));
	a->n = a->count = 0;
	for (uint32_t c = 0; c < 0x110000; c++) {
		if (c >= 0xD800 && c < 0xE000)
			continue;
		a->off[a->count] = (uint32_t)a->n;
		a->cp[a->count++] = c;
		a->n += (size_t)tok_utf8_put(c, a->s + a->n);
	}
}

static void allcp_free(struct allcp *a)
{
	free(a->s);
	free(a->off);
	free(a->cp);
}

/* Index of the code point starting at byte offset o (binary search). */
static size_t allcp_at(const struct allcp *a, size_t o)
{
	size_t lo = 0, hi = a->count;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (a->off[mid] < o)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Checks that pattern (one char a match) matches exactly the code points
 * of ranges ([lo, hi, ...]); returns the number of code points that
 * differ, the first in *first. */
static size_t class_diff(const struct allcp *a, const char *pattern,
			 json_t *ranges, uint8_t *got, uint32_t *first)
{
	struct tok_regex re;
	struct tok_matcher m = {0};
	taco_err err = {{0}};
	size_t pos = 0, last = SIZE_MAX, ms, me, bad = 0;
	int r;

	m.md = pcre2_match_data_create(1, NULL);
	memset(got, 0, 0x110000);
	if (tok_regex_compile(&re, pattern, strlen(pattern), 0, "t", "class",
			      &err)) {
		/* does not compile: as if it matched nothing */
		fprintf(stderr, "%s: %s\n", pattern, err.msg);
		pcre2_match_data_free(m.md);
		m.md = NULL;
		goto compare;
	}
	while ((r = tok_regex_next(&re, &m, a->s, a->n, &pos, &last, &ms, &me,
				   &err)) > 0) {
		/* (no ck_assert per match: each one is a write to a pipe) */
		size_t i = allcp_at(a, ms);
		if (i >= a->count || a->off[i] != ms ||
		    (i + 1 < a->count ? a->off[i + 1] : a->n) != me)
			ck_abort_msg("%s: a match of more than one char at %zu",
				     pattern, ms);
		got[a->cp[i]] = 1;
	}
	ck_assert_msg(r == 0, "%s: %s", pattern, err.msg);
	tok_regex_free(&re);
compare:
	*first = UINT32_MAX;
	for (size_t j = 0; j + 1 < json_array_size(ranges); j += 2) {
		uint32_t lo = (uint32_t)json_integer_value(
			     json_array_get(ranges, j)),
			 hi = (uint32_t)json_integer_value(
			     json_array_get(ranges, j + 1));
		for (uint32_t c = lo; c <= hi && c < 0x110000; c++)
			got[c] ^= 2; /* bit 1: wanted */
	}
	for (size_t i = 0; i < a->count; i++) {
		uint32_t c = a->cp[i];
		if (got[c] == 1 || got[c] == 2) {
			if (!bad++)
				*first = c;
		}
	}
	if (m.md)
		pcre2_match_data_free(m.md);
	return bad;
}

/* class_diff of pattern against ranges, noted in report (4096 bytes) when
 * it differs (as is: the class it is an alias of). 1 when it differs. */
static int check_class(const struct allcp *a, const char *pattern,
		       const char *as, json_t *ranges, uint8_t *got,
		       char *report, size_t *rl)
{
	uint32_t first;
	size_t d = class_diff(a, pattern, ranges, got, &first);

	if (d && *rl < 4096 - 200)
		*rl += (size_t)snprintf(report + *rl, 4096 - *rl,
					"\n  %s%s%s%s: %zu code points differ, "
					"first U+%04X",
					pattern, *as ? " (" : "", as,
					*as ? ")" : "", d, first);
	return d != 0;
}

/* Every code point's class under \p{..} of each General_Category (short
 * and long names), \s, \d and negated and class forms, against what the
 * regex engine of tokenizers has (unicode_classes.json); _i 0: with
 * PCRE2's own tables plus what they lack, 1: explicit ranges only. */
START_TEST(test_unicode_classes)
{
	json_t *all = json_fixture("tokenizers/unicode_classes.json");
	json_t *classes = json_object_get(all, "classes");
	json_t *aliases = json_object_get(all, "aliases"), *v;
	struct allcp a;
	uint8_t *got = malloc(0x110000);
	const char *pat;
	char report[4096] = "";
	size_t rl = 0, bad = 0;

	tok_regex_explicit_classes = _i;
	allcp_make(&a);
	ck_assert_uint_ge(json_object_size(classes), 60);
	ck_assert_uint_ge(json_object_size(aliases), 40);
	json_object_foreach(classes, pat, v)
	{
		bad += check_class(&a, pat, "", v, got, report, &rl);
	}
	json_object_foreach(aliases, pat, v)
	{
		json_t *r = json_object_get(classes, json_string_value(v));
		ck_assert_ptr_nonnull(r);
		bad += check_class(&a, pat, json_string_value(v), r, got,
				   report, &rl);
	}
	{
		/* the Digits pre-tokenizer's char::is_numeric */
		struct tok_buf np = {0};
		ck_assert_int_eq(tok_numeric_pattern(&np, 0), 0);
		bad += check_class(&a, np.p, "Digits",
				   json_object_get(all, "numeric"), got, report,
				   &rl);
		tok_buf_free(&np);
	}
	tok_regex_explicit_classes = 0;
	ck_assert_msg(bad == 0, "%zu classes differ from tokenizers:%s", bad,
		      report);
	allcp_free(&a);
	free(got);
	json_decref(all);
}
END_TEST

/* Ids of texts with letters and digits of Unicode 15.0-16.0 ("c" and a
 * Garay letter is one pre-token of GPT-2's pattern in tokenizers). */
START_TEST(test_unicode_new_chars)
{
	json_t *all = json_fixture("tokenizers/unicode_classes.json");
	json_t *sets = json_object_get(all, "ids"), *set;
	size_t si, bad = 0;
	char report[4096] = "";
	size_t rl = 0;

	tok_regex_explicit_classes = _i;
	ck_assert_uint_ge(json_array_size(sets), 3);
	json_array_foreach(sets, si, set)
	{
		json_t *patch = json_object_get(set, "patch");
		json_t *texts = json_object_get(set, "texts");
		json_t *ids = json_object_get(set, "ids");
		char *js = patched(
		    json_string_value(json_object_get(set, "base")), patch);
		taco_tok *tok;
		taco_tok_ids got = {0};
		taco_err err = {{0}};

		ck_assert_msg(taco_tok_load_buffer(js, strlen(js), "t.json",
						   &tok, &err) == 0,
			      "set %zu: %s", si, err.msg);
		free(js);
		for (size_t i = 0; i < json_array_size(texts); i++) {
			const char *t =
			    json_string_value(json_array_get(texts, i));
			ck_assert_int_eq(
			    taco_tok_encode(tok, t, strlen(t), 0, &got, &err),
			    0);
			if (!ids_equal_json(&got, json_array_get(ids, i))) {
				bad++;
				if (rl < sizeof(report) - 600)
					rl += (size_t)snprintf(
					    report + rl, sizeof(report) - rl,
					    "\n  set %zu text %zu: %s", si, i,
					    ids_str(got.ids, got.n));
			}
		}
		taco_tok_ids_free(&got);
		taco_tok_free(tok);
	}
	tok_regex_explicit_classes = 0;
	ck_assert_msg(bad == 0, "%zu texts differ from tokenizers:%s", bad,
		      report);
	json_decref(all);
}
END_TEST

/* Whether v has id. */
static int ids_have(const taco_tok_ids *v, int32_t id)
{
	for (size_t i = 0; i < v->n; i++)
		if (v->ids[i] == id)
			return 1;
	return 0;
}

/* A single_word added token ("ZZ") right after (_i 0) or right before
 * (_i 1) each code point: it matches where tokenizers has no word char
 * there (unicode_classes.json's single_word). */
START_TEST(test_unicode_single_word)
{
	json_t *all = json_fixture("tokenizers/unicode_classes.json");
	json_t *sw = json_object_get(all, "single_word");
	json_t *ranges = json_object_get(sw, _i ? "after" : "before");
	char *js = patched(json_string_value(json_object_get(sw, "base")),
			   json_object_get(sw, "patch"));
	uint8_t *word = calloc(0x110000, 1);
	taco_tok *tok;
	taco_tok_ids ids = {0};
	taco_err err = {{0}};
	int32_t zz;
	char report[4096] = "";
	size_t rl = 0, bad = 0;

	ck_assert_msg(
	    taco_tok_load_buffer(js, strlen(js), "t.json", &tok, &err) == 0,
	    "%s", err.msg);
	free(js);
	zz = taco_tok_token_to_id(tok, "ZZ", 2);
	ck_assert_int_ge(zz, 0);
	for (size_t j = 0; j + 1 < json_array_size(ranges); j += 2)
		for (json_int_t c =
			 json_integer_value(json_array_get(ranges, j));
		     c <= json_integer_value(json_array_get(ranges, j + 1));
		     c++)
			word[c] = 1;
	for (uint32_t c = 0; c < 0x110000; c++) {
		char s[8];
		int n;

		if ((c >= 0xD800 && c < 0xE000) || c == 'Z')
			continue;
		if (_i) {
			memcpy(s, "ZZ", 2);
			n = 2 + tok_utf8_put(c, s + 2);
		} else {
			n = tok_utf8_put(c, s);
			memcpy(s + n, "ZZ", 2);
			n += 2;
		}
		if (taco_tok_encode(tok, s, (size_t)n, 0, &ids, &err))
			ck_abort_msg("U+%04X: %s", c, err.msg);
		if (ids_have(&ids, zz) == !word[c])
			continue;
		if (!bad++ || rl < sizeof(report) - 100)
			rl += (size_t)snprintf(report + rl, sizeof(report) - rl,
					       " U+%04X", c);
	}
	ck_assert_msg(bad == 0,
		      "%zu code points differ from tokenizers as word chars:%s",
		      bad, report);
	taco_tok_ids_free(&ids);
	taco_tok_free(tok);
	free(word);
	json_decref(all);
}
END_TEST

static uint64_t fnv1a64(uint64_t h, const void *p, size_t n)
{
	const unsigned char *s = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ s[i]) * 0x100000001B3ull;
	return h;
}

/* Every code point alone through the normalizer (NFC, NFD, NFKC, NFKD by
 * _i) of a loaded tokenizer, against tokenizers' normalizers
 * (normalization.json): changed where it lists, itself elsewhere. */
START_TEST(test_unicode_normalization)
{
	static const char *const forms[] = {"NFC", "NFD", "NFKC", "NFKD"};
	json_t *all = json_fixture("tokenizers/normalization.json");
	json_t *form =
	    json_object_get(json_object_get(all, "forms"), forms[_i]);
	json_t *changed = json_object_get(form, "changed");
	json_t *patch = json_pack("{s:{s:s}}", "normalizer", "type", forms[_i]);
	char *js = patched("bytelevel", patch);
	int32_t *idx = malloc(0x110000 * sizeof(int32_t));
	char(*want)[64] = calloc(json_array_size(changed), 64);
	taco_tok *tok;
	taco_err err = {{0}};
	struct tok_matcher m = {0};
	struct tok_buf out = {0}, tmp = {0};
	uint64_t h = 0xCBF29CE484222325ull;
	char hex[32], report[4096] = "";
	size_t rl = 0, bad = 0;

	ck_assert_msg(
	    taco_tok_load_buffer(js, strlen(js), "t.json", &tok, &err) == 0,
	    "%s", err.msg);
	free(js);
	json_decref(patch);
	for (uint32_t c = 0; c < 0x110000; c++)
		idx[c] = -1;
	ck_assert_uint_gt(json_array_size(changed), 1000);
	for (size_t i = 0; i < json_array_size(changed); i++) {
		const char *e = json_string_value(json_array_get(changed, i));
		char *end;
		uint32_t c = (uint32_t)strtoul(e, &end, 16);
		size_t k = 0;
		idx[c] = (int32_t)i;
		while (*end == ' ') {
			uint32_t r = (uint32_t)strtoul(end + 1, &end, 16);
			ck_assert_uint_lt(k, 60);
			k += (size_t)tok_utf8_put(r, want[i] + k);
		}
		want[i][k] = 0;
	}
	for (uint32_t c = 0; c < 0x110000; c++) {
		char s[4];
		int n;
		const char *w;

		if (c >= 0xD800 && c < 0xE000)
			continue;
		n = tok_utf8_put(c, s);
		if (tok_normalize(tok, &m, s, (size_t)n, &out, &tmp, &err))
			ck_abort_msg("U+%04X: %s", c, err.msg);
		if (c >= 0xAC00 && c <= 0xD7A3) {
			h = fnv1a64(h, out.p, out.n + 1); /* with its NUL */
			continue;
		}
		w = idx[c] >= 0 ? want[idx[c]] : NULL;
		if (w ? out.n == strlen(w) && !memcmp(out.p, w, out.n)
		      : out.n == (size_t)n && !memcmp(out.p, s, out.n))
			continue;
		if (!bad++ || rl < sizeof(report) - 100)
			rl += (size_t)snprintf(report + rl, sizeof(report) - rl,
					       " U+%04X", c);
	}
	snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)h);
	ck_assert_msg(bad == 0, "%s: %zu code points differ from tokenizers:%s",
		      forms[_i], bad, report);
	ck_assert_str_eq(
	    hex, json_string_value(json_object_get(form, "hangul_fnv1a64")));
	tok_buf_free(&out);
	tok_buf_free(&tmp);
	taco_tok_free(tok);
	free(idx);
	free(want);
	json_decref(all);
}
END_TEST

/* ------------------------------------------------------------ refusals */

static const struct {
	const char *base;
	const char *patch; /* JSON object, as in cases.json */
	const char *expect;
} refusals[] = {
    {"bytelevel", "{\"normalizer\": {\"type\": \"BertNormalizer\"}}",
     "normalizer type 'BertNormalizer' is not supported"},
    {"bytelevel",
     "{\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": "
     "[{\"type\": \"NFC\"}, {\"type\": \"Lowercase\"}]}}",
     "normalizer.normalizers[1] type 'Lowercase' is not supported"},
    {"bytelevel",
     "{\"normalizer\": {\"type\": \"Precompiled\", "
     "\"precompiled_charsmap\": \"AA==\"}}",
     "type 'Precompiled' is not supported"},
    {"bytelevel", "{\"pre_tokenizer\": {\"type\": \"Whitespace\"}}",
     "pre_tokenizer type 'Whitespace' is not supported"},
    {"bytelevel",
     "{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": "
     "[{\"type\": \"Punctuation\", \"behavior\": \"Isolated\"}]}}",
     "pre_tokenizer.pretokenizers[0] type 'Punctuation' is not supported"},
    {"bytelevel", "{\"model.type\": \"WordPiece\"}",
     "model type 'WordPiece' is not supported"},
    {"bytelevel", "{\"model.type\": \"Unigram\"}",
     "model type 'Unigram' is not supported"},
    {"bytelevel",
     "{\"decoder\": {\"type\": \"WordPiece\", \"prefix\": "
     "\"##\", \"cleanup\": true}}",
     "decoder type 'WordPiece' is not supported"},
    {"metaspace",
     "{\"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": "
     "\"Fuse\"}, {\"type\": \"CTC\"}]}}",
     "decoder.decoders[1] type 'CTC' is not supported"},
    {"bytelevel", "{\"post_processor\": {\"type\": \"Fancy\"}}",
     "post_processor type 'Fancy' is not supported"},
    {"bytelevel", "{\"model.vocab\": null}", "model.vocab is required"},
    {"bytelevel", "{\"model\": null}", "model is required"},
    {"bytelevel", "{\"model.merges\": [\"a b c\"]}",
     "model.merges[0] 'a b c' must be two tokens separated by one space"},
    {"bytelevel", "{\"model.merges\": [[\"a\"]]}", "model.merges[0] must be"},
    {"bytelevel", "{\"model.merges\": [\"zzzz q\"]}",
     "model.merges[0]: token 'zzzz' is not in the vocab"},
    {"bytelevel", "{\"model.merges\": [\"a b\", \"Q Z\"]}",
     "model.merges[0]: the merged token 'ab' is not in the vocab"},
    {"bytelevel", "{\"model.dropout\": 0.1}",
     "model.dropout is not "
     "supported"},
    {"bytelevel", "{\"model.unk_token\": \"<nope>\"}",
     "model.unk_token '<nope>' is not in the vocab"},
    {"bytelevel", "{\"model.vocab\": {\"a\": 5000000}}",
     "must be an id in [0, 4194304)"},
    {"bytelevel", "{\"model.vocab\": {\"a\": 0, \"b\": 0}}",
     "model.vocab: id 0 is used by"},
    {"bytelevel", "{\"model.extra\": 1}",
     "model field 'extra' is not supported"},
    {"bytelevel", "{\"truncation\": {\"max_length\": 10}}",
     "truncation is not supported"},
    {"bytelevel", "{\"padding\": {\"strategy\": \"BatchLongest\"}}",
     "padding is not supported"},
    {"bytelevel", "{\"something\": 1}",
     "tokenizer field 'something' is not supported"},
    {"bytelevel",
     "{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": "
     "\"\\\\w+\"}, \"behavior\": \"Isolated\", \"invert\": false}}",
     "pre_tokenizer.pattern pattern uses \\w"},
    {"bytelevel",
     "{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": "
     "\"(\"}, \"behavior\": \"Isolated\", \"invert\": false}}",
     "pre_tokenizer.pattern pattern does not compile"},
    {"bytelevel",
     "{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": "
     "\"x\"}, \"behavior\": \"Sideways\", \"invert\": false}}",
     "pre_tokenizer.behavior 'Sideways' is not supported"},
    {"bytelevel",
     "{\"added_tokens+\": [{\"id\": 7, \"content\": \"<new>\", "
     "\"special\": true}]}",
     "added_tokens[6]: id 7 of '<new>' differs from the id tokenizers "
     "assigns it (3001)"},
    {"bytelevel", "{\"added_tokens+\": [{\"id\": 3001, \"content\": \"\"}]}",
     "added_tokens[6].content is empty"},
    {"metaspace",
     "{\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Sequence\", "
     "\"pretokenizers\": [{\"type\": \"Digits\", \"individual_digits\": "
     "true}, {\"type\": \"Metaspace\", \"replacement\": \"_\", "
     "\"prepend_scheme\": \"first\", \"split\": false}]}}",
     "Metaspace with prepend_scheme 'first' is only supported as the first"},
    {"metaspace",
     "{\"pre_tokenizer\": {\"type\": \"Metaspace\", "
     "\"replacement\": \"ab\", \"prepend_scheme\": \"always\"}}",
     "pre_tokenizer.replacement must be a single character"},
    {"metaspace",
     "{\"decoder\": {\"type\": \"Replace\", \"pattern\": {\"Regex\": "
     "\"x\"}, \"content\": \"y\"}}",
     "only String patterns are supported in decoders"},
    {"metaspace",
     "{\"post_processor\": {\"type\": \"TemplateProcessing\", "
     "\"single\": [{\"SpecialToken\": {\"id\": \"<x>\", "
     "\"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", "
     "\"type_id\": 0}}], \"pair\": [], \"special_tokens\": {}}}",
     "special token '<x>' is missing from special_tokens"},
};

START_TEST(test_refusals)
{
	for (size_t i = 0; i < sizeof(refusals) / sizeof(refusals[0]); i++) {
		json_error_t je;
		json_t *patch = json_loads(refusals[i].patch, 0, &je);
		taco_tok *tok = (taco_tok *)1;
		taco_err err = {{0}};
		char *js;
		int r;

		ck_assert_msg(patch, "refusal %zu: %s", i, je.text);
		js = patched(refusals[i].base, patch);
		r = taco_tok_load_buffer(js, strlen(js), "tokenizer.json", &tok,
					 &err);
		free(js);
		json_decref(patch);
		ck_assert_msg(r < 0, "refusal %zu (%s) loaded", i,
			      refusals[i].expect);
		ck_assert_ptr_null(tok);
		ck_assert_msg(!strncmp(err.msg, "tokenizer.json: ", 16) &&
				  strstr(err.msg, refusals[i].expect),
			      "refusal %zu: '%s' lacks '%s'", i, err.msg,
			      refusals[i].expect);
	}
}
END_TEST

START_TEST(test_malformed)
{
	static const char *const bad[] = {
	    "",
	    "{",
	    "[]",
	    "null",
	    "{\"model\": ",
	    "{\"model\": {}}",
	    "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
	    "\"vocab\": {}}}"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		taco_tok *tok;
		taco_err err = {{0}};
		ck_assert_int_lt(taco_tok_load_buffer(bad[i], strlen(bad[i]),
						      "x/tokenizer.json", &tok,
						      &err),
				 0);
		ck_assert_msg(!strncmp(err.msg, "x/tokenizer.json: ", 18), "%s",
			      err.msg);
	}
	{
		taco_tok *tok;
		taco_err err = {{0}};
		const char *s = "{\"model\": [1";
		ck_assert_int_eq(
		    taco_tok_load_buffer(s, strlen(s), "t.json", &tok, &err),
		    -EINVAL);
		ck_assert_ptr_nonnull(strstr(err.msg, "malformed JSON"));
	}
}
END_TEST

/* ------------------------------------------------------------ limits */

START_TEST(test_limits)
{
	taco_tok *tok = load_named("bytelevel"), *t2;
	taco_tok_ids ids = {0};
	taco_err err = {{0}};
	char small[8] = "abc";
	char *out;
	json_t *root, *patch;
	char *js, *big;
	int r;

	/* input size per encode call, ids per decode call */
	ck_assert_int_eq(
	    taco_tok_encode(tok, small, TACO_TOK_MAX_INPUT + 1u, 0, &ids, &err),
	    -EFBIG);
	ck_assert_ptr_nonnull(strstr(err.msg, "over the limit"));
	ck_assert_int_eq(taco_tok_decode(tok, ids.ids,
					 (size_t)TACO_TOK_MAX_INPUT + 1u, 0,
					 &out, NULL, &err),
			 -EFBIG);
	/* a long input within the limit */
	big = malloc(1 << 20);
	for (int i = 0; i < (1 << 20); i++)
		big[i] = "ab \n\t9"[i % 6];
	ck_assert_int_eq(taco_tok_encode(tok, big, 1 << 20, 0, &ids, &err), 0);
	ck_assert_uint_gt(ids.n, 1000);
	memset(big, ' ', 1 << 20);
	ck_assert_int_eq(taco_tok_encode(tok, big, 1 << 20, 0, &ids, &err), 0);
	free(big);
	/* file size */
	ck_assert_int_eq(taco_tok_load_buffer(small, TACO_TOK_MAX_FILE + 1u,
					      "tokenizer.json", &t2, &err),
			 -EFBIG);
	/* token length */
	big = malloc(TACO_TOK_MAX_TOKEN_LEN + 2);
	memset(big, 'x', TACO_TOK_MAX_TOKEN_LEN + 1);
	big[TACO_TOK_MAX_TOKEN_LEN + 1] = 0;
	root = json_fixture("tokenizers/bytelevel/tokenizer.json");
	json_object_set_new(
	    json_object_get(json_object_get(root, "model"), "vocab"), big,
	    json_integer(5000));
	js = json_dumps(root, JSON_COMPACT);
	r = taco_tok_load_buffer(js, strlen(js), "tokenizer.json", &t2, &err);
	ck_assert_int_eq(r, -EFBIG);
	ck_assert_ptr_nonnull(strstr(err.msg, "longer than 4096 bytes"));
	free(js);
	json_decref(root);
	/* regex pattern length */
	root = json_fixture("tokenizers/bytelevel/tokenizer.json");
	memset(big, 'x', TACO_TOK_MAX_TOKEN_LEN + 1);
	{
		char *pat = malloc(70000);
		memset(pat, 'a', 69999);
		pat[69999] = 0;
		patch = json_pack("{s:s,s:{s:s},s:s,s:b}", "type", "Split",
				  "pattern", "Regex", pat, "behavior",
				  "Isolated", "invert", 0);
		free(pat);
	}
	json_object_set_new(root, "pre_tokenizer", patch);
	js = json_dumps(root, JSON_COMPACT);
	r = taco_tok_load_buffer(js, strlen(js), "tokenizer.json", &t2, &err);
	ck_assert_int_eq(r, -EFBIG);
	ck_assert_ptr_nonnull(strstr(err.msg, "longer than 65536"));
	free(js);
	json_decref(root);
	free(big);
	taco_tok_ids_free(&ids);
	taco_tok_free(tok);
}
END_TEST

/* ------------------------------------------------------------ GPT-2 files */

static void scratch_dir(char *dir, size_t cap)
{
	snprintf(dir, cap, "/tmp/taco_tok_XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void put_file(const char *dir, const char *name, const char *s, size_t n)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	ck_assert_ptr_nonnull(f = fopen(path, "wb"));
	ck_assert_uint_eq(fwrite(s, 1, n, f), n);
	ck_assert_int_eq(fclose(f), 0);
}

static void put_json(const char *dir, const char *name, json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT);

	put_file(dir, name, s, strlen(s));
	free(s);
}

static void rm_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d))) {
		char path[512];
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		ck_assert_int_eq(unlink(path), 0);
	}
	closedir(d);
	ck_assert_int_eq(rmdir(dir), 0);
}

static int32_t id_or_none(json_t *v)
{
	return json_is_integer(v) ? (int32_t)json_integer_value(v) : -1;
}

/* Config variants over opt's vocab.json and merges.txt: what transformers
 * gives for the texts of gpt2_cases.json. */
START_TEST(test_gpt2_cases)
{
	json_t *all = json_fixture("tokenizers/gpt2_cases.json");
	json_t *texts = json_object_get(all, "texts"), *c;
	json_t *base = json_fixture("tokenizers/opt/vocab.json");
	size_t mlen, ci;
	char *merges =
	    tu_read_file(tu_fixture("tokenizers/opt/merges.txt"), &mlen);

	ck_assert_ptr_nonnull(merges);
	ck_assert_uint_gt(json_array_size(json_object_get(all, "cases")), 10);
	json_array_foreach(json_object_get(all, "cases"), ci, c)
	{
		const char *name =
		    json_string_value(json_object_get(c, "name"));
		json_t *vocab = json_deep_copy(base), *v, *cfg, *map;
		taco_tok_ids ids = {0};
		taco_tok_special sp;
		taco_err err = {{0}};
		taco_tok *tok;
		char dir[64];
		size_t i;

		scratch_dir(dir, sizeof(dir));
		json_object_update(vocab, json_object_get(c, "vocab_add"));
		put_json(dir, "vocab.json", vocab);
		put_file(dir, "merges.txt", merges, mlen);
		if (!json_is_null(cfg = json_object_get(c, "config")))
			put_json(dir, "tokenizer_config.json", cfg);
		if (!json_is_null(map =
				      json_object_get(c, "special_tokens_map")))
			put_json(dir, "special_tokens_map.json", map);
		ck_assert_int_eq(taco_tok_dir_has_tokenizer(dir), 1);
		ck_assert_msg(taco_tok_load(dir, &tok, &err) == 0, "%s: %s",
			      name, err.msg);
		json_array_foreach(texts, i, v)
		{
			const char *t = json_string_value(v), *want;
			size_t tl = json_string_length(v), ol;
			char *out;

			ck_assert_int_eq(
			    taco_tok_encode(tok, t, tl, 1, &ids, &err), 0);
			ck_assert_msg(
			    ids_equal_json(
				&ids,
				json_array_get(json_object_get(c, "ids"), i)),
			    "%s: '%s' gives %s", name, t,
			    ids_str(ids.ids, ids.n));
			ck_assert_int_eq(taco_tok_decode(tok, ids.ids, ids.n, 0,
							 &out, &ol, &err),
					 0);
			want = json_string_value(
			    json_array_get(json_object_get(c, "decode"), i));
			ck_assert_msg(!strcmp(out, want), "%s: '%s' != '%s'",
				      name, out, want);
			free(out);
			ck_assert_int_eq(taco_tok_decode(tok, ids.ids, ids.n, 1,
							 &out, &ol, &err),
					 0);
			want = json_string_value(json_array_get(
			    json_object_get(c, "decode_skip"), i));
			ck_assert_msg(!strcmp(out, want), "%s: '%s' != '%s'",
				      name, out, want);
			free(out);
			ck_assert_int_eq(
			    taco_tok_encode(tok, t, tl, 0, &ids, &err), 0);
			ck_assert_msg(
			    ids_equal_json(
				&ids,
				json_array_get(json_object_get(c, "plain"), i)),
			    "%s: '%s' without special tokens gives %s", name, t,
			    ids_str(ids.ids, ids.n));
		}
		sp = taco_tok_special_ids(tok);
		ck_assert_int_eq(sp.bos, id_or_none(json_object_get(c, "bos")));
		ck_assert_int_eq(sp.eos, id_or_none(json_object_get(c, "eos")));
		ck_assert_int_eq(sp.pad, id_or_none(json_object_get(c, "pad")));
		ck_assert_int_eq(sp.unk, id_or_none(json_object_get(c, "unk")));
		ck_assert_int_eq(
		    taco_tok_vocab_size(tok),
		    json_integer_value(json_object_get(c, "vocab_size")));
		taco_tok_ids_free(&ids);
		taco_tok_free(tok);
		json_decref(vocab);
		rm_dir(dir);
	}
	free(merges);
	json_decref(base);
	json_decref(all);
}
END_TEST

/* OPT prepends its BOS </s>; GPT-2 adds nothing, its <|endoftext|> (not in
 * this vocab) comes after the vocab. */
START_TEST(test_gpt2_bos)
{
	static const char text[] = "Hello world";
	taco_tok *opt = load_named("opt"), *gpt2 = load_named("gpt2");
	taco_tok_ids plain = {0}, sp = {0};
	taco_err err = {{0}};
	taco_tok_special s;
	char *out;
	size_t len;

	ck_assert_int_eq(
	    taco_tok_dir_has_tokenizer(tu_fixture("tokenizers/opt")), 1);
	ck_assert_int_eq(taco_tok_encode(opt, text, 11, 0, &plain, &err), 0);
	ck_assert_int_eq(taco_tok_encode(opt, text, 11, 1, &sp, &err), 0);
	ck_assert_uint_gt(plain.n, 0);
	ck_assert_uint_eq(sp.n, plain.n + 1);
	ck_assert_int_eq(sp.ids[0], 2);
	ck_assert_int_eq(
	    memcmp(sp.ids + 1, plain.ids, plain.n * sizeof(int32_t)), 0);
	ck_assert_int_eq(
	    taco_tok_decode(opt, sp.ids, sp.n, 0, &out, &len, &err), 0);
	ck_assert_str_eq(out, "</s>Hello world");
	free(out);
	ck_assert_int_eq(
	    taco_tok_decode(opt, sp.ids, sp.n, 1, &out, &len, &err), 0);
	ck_assert_str_eq(out, text);
	free(out);
	s = taco_tok_special_ids(opt);
	ck_assert_int_eq(s.bos, 2);
	ck_assert_int_eq(s.eos, 2);
	ck_assert_int_eq(s.unk, 2);
	ck_assert_int_eq(s.pad, 1);
	ck_assert_int_eq(taco_tok_vocab_size(opt), 2000);
	ck_assert(taco_tok_is_special(opt, 1) && taco_tok_is_special(opt, 2));
	ck_assert(!taco_tok_is_special(opt, 0));

	ck_assert_int_eq(taco_tok_encode(gpt2, text, 11, 1, &sp, &err), 0);
	ck_assert(ids_equal(&sp, plain.ids, plain.n));
	s = taco_tok_special_ids(gpt2);
	ck_assert_int_eq(s.bos, 2000);
	ck_assert_int_eq(s.eos, 2000);
	ck_assert_int_eq(s.unk, 2000);
	ck_assert_int_eq(s.pad, -1);
	ck_assert_int_eq(taco_tok_vocab_size(gpt2), 2001);
	ck_assert_int_eq(
	    taco_tok_encode(gpt2, "a<|endoftext|>", 14, 1, &sp, &err), 0);
	ck_assert_uint_eq(sp.n, 2);
	ck_assert_int_eq(sp.ids[1], 2000);
	taco_tok_ids_free(&plain);
	taco_tok_ids_free(&sp);
	taco_tok_free(opt);
	taco_tok_free(gpt2);
}
END_TEST

struct gpt2_input {
	const char *vocab, *merges, *config, *map;
	int added_json;
	int code;
	const char *expect; /* the message starts "m/" and holds this */
};

#define V5 "{\"a\": 0, \"b\": 1, \"c\": 2, \"ab\": 3, \"abc\": 4}"

static const struct gpt2_input gpt2_bad[] = {
    /* merges.txt, with its line */
    {V5, "#version: 0.2\na b\nab\n", NULL, NULL, 0, -EINVAL,
     "m/merges.txt:3: 'ab' must be two tokens separated by one space"},
    {V5, "a b c\n", NULL, NULL, 0, -EINVAL,
     "m/merges.txt:1: 'a b c' must be two tokens"},
    {V5, "a  b\n", NULL, NULL, 0, -EINVAL,
     "m/merges.txt:1: 'a  b' must be two tokens"},
    {V5, "a\tb\n", NULL, NULL, 0, -EINVAL,
     "m/merges.txt:1: 'a\tb' must be two tokens"},
    /* transformers refuses these too: "Token `x` out of vocabulary" */
    {V5, "a b\na x\n", NULL, NULL, 0, -EINVAL,
     "m/merges.txt:2: token 'x' is not in vocab.json"},
    {V5, "b c\n", NULL, NULL, 0, -EINVAL,
     "m/merges.txt:1: the merged token 'bc' is not in vocab.json"},
    {V5, "a b\n\nab c\n", NULL, NULL, 0, -EINVAL, "m/merges.txt:2: empty line"},
    {V5, "a b\n\xff b\n", NULL, NULL, 0, -EINVAL,
     "m/merges.txt:2: not valid UTF-8"},
    /* vocab.json */
    {"[1, 2]", "", NULL, NULL, 0, -EINVAL,
     "m/vocab.json: must be a JSON object"},
    {"{\"a\": 0", "", NULL, NULL, 0, -EINVAL, "m/vocab.json: malformed JSON"},
    {"{\"a\": 0, \"a\": 1}", "", NULL, NULL, 0, -EINVAL,
     "m/vocab.json: malformed JSON"},
    {"{\"a\": 0, \"b\": -1}", "", NULL, NULL, 0, -EINVAL,
     "m/vocab.json: the id of 'b' must be an integer in [0, 4194304)"},
    {"{\"a\": 0, \"b\": 1.0}", "", NULL, NULL, 0, -EINVAL,
     "m/vocab.json: the id of 'b' must be an integer"},
    {"{\"a\": 0, \"b\": \"1\"}", "", NULL, NULL, 0, -EINVAL,
     "m/vocab.json: the id of 'b' must be an integer"},
    {"{\"a\": 0, \"b\": 4194304}", "", NULL, NULL, 0, -EINVAL,
     "m/vocab.json: the id of 'b' must be an integer"},
    {"{\"a\": 0, \"b\": 1, \"c\": 1}", "", NULL, NULL, 0, -EINVAL,
     "m/vocab.json: id 1 is used by 'b' and 'c'"},
    /* tokenizer_config.json, special_tokens_map.json */
    {V5, "", "{\"add_bos_token\": \"yes\"}", NULL, 0, -EINVAL,
     "m/tokenizer_config.json: add_bos_token must be true or false"},
    {V5, "", "[]", NULL, 0, -EINVAL,
     "m/tokenizer_config.json: must be a JSON object"},
    {V5, "", "{\"tokenizer_class\": \"RobertaTokenizer\"}", NULL, 0, -ENOTSUP,
     "m/tokenizer_config.json: tokenizer_class 'RobertaTokenizer' is not "
     "supported"},
    {V5, "", "{\"split_special_tokens\": true}", NULL, 0, -ENOTSUP,
     "m/tokenizer_config.json: split_special_tokens true"},
    {V5, "", "{\"image_token\": \"<image>\"}", NULL, 0, -ENOTSUP,
     "m/tokenizer_config.json: 'image_token' (a model-specific special "
     "token)"},
    {V5, "", NULL, NULL, 1, -ENOTSUP, "m/added_tokens.json is not supported"},
    {V5, "",
     "{\"bos_token\": {\"content\": \"</s>\", \"lstrip\": true}, "
     "\"eos_token\": \"</s>\"}",
     NULL, 0, -ENOTSUP,
     "m/tokenizer_config.json: eos_token: '</s>' is defined twice"},
    {V5, "", "{\"bos_token\": 5}", NULL, 0, -EINVAL,
     "m/tokenizer_config.json: bos_token must be a string, an AddedToken "
     "object or null"},
    {V5, "", "{\"bos_token\": \"\"}", NULL, 0, -EINVAL,
     "m/tokenizer_config.json: bos_token is an empty token"},
    {V5, "", "{\"bos_token\": {\"content\": \"</s>\", \"weight\": 1}}", NULL, 0,
     -ENOTSUP,
     "m/tokenizer_config.json: bos_token field 'weight' is not supported"},
    {V5, "", "{\"added_tokens_decoder\": {\"x\": {\"content\": \"</s>\"}}}",
     NULL, 0, -EINVAL,
     "m/tokenizer_config.json: added_tokens_decoder['x'] must be"},
    {V5, "", "{\"additional_special_tokens\": [\"<a>\"]}",
     "{\"extra_special_tokens\": [\"<b>\"]}", 0, -ENOTSUP,
     "m/special_tokens_map.json: extra special tokens"},
    {V5, "", NULL, "{\"bos_token\": [1]}", 0, -EINVAL,
     "m/special_tokens_map.json: bos_token must be a string"},
};

static int load_gpt2(const struct gpt2_input *in, taco_tok **tok, taco_err *err)
{
	taco_tok_gpt2_files f = {0};

	f.dir = "m";
	f.vocab = in->vocab;
	f.vocab_len = strlen(in->vocab);
	f.merges = in->merges;
	f.merges_len = strlen(in->merges);
	f.config = in->config;
	f.config_len = in->config ? strlen(in->config) : 0;
	f.special_map = in->map;
	f.special_map_len = in->map ? strlen(in->map) : 0;
	f.has_added_tokens_json = in->added_json;
	return taco_tok_load_gpt2(&f, tok, err);
}

START_TEST(test_gpt2_errors)
{
	/* accepted as transformers accepts them: CRLF, "#version" anywhere,
	 * no line end at the end; blank lines at the end (transformers
	 * refuses those: harmless here) */
	static const struct gpt2_input ok[] = {
	    {V5, "#version: 0.2\r\na b\r\nab c\r\n\r\n\n", NULL, NULL, 0, 0,
	     NULL},
	    {V5, "a b\n#version x\nab c", NULL, NULL, 0, 0, NULL},
	};
	taco_tok *tok = (taco_tok *)1;
	taco_tok_ids ids = {0};
	taco_err err = {{0}};
	char dir[64], *big;
	taco_tok_gpt2_files f = {0};

	for (size_t i = 0; i < sizeof(gpt2_bad) / sizeof(gpt2_bad[0]); i++) {
		int r = load_gpt2(&gpt2_bad[i], &tok, &err);
		ck_assert_msg(r == gpt2_bad[i].code, "bad %zu: %d (%s)", i, r,
			      err.msg);
		ck_assert_ptr_null(tok);
		ck_assert_msg(!strncmp(err.msg, "m/", 2) &&
				  strstr(err.msg, gpt2_bad[i].expect),
			      "bad %zu: '%s' lacks '%s'", i, err.msg,
			      gpt2_bad[i].expect);
	}
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		ck_assert_msg(load_gpt2(&ok[i], &tok, &err) == 0, "ok %zu: %s",
			      i, err.msg);
		ck_assert_int_eq(taco_tok_encode(tok, "abc", 3, 0, &ids, &err),
				 0);
		ck_assert_msg(ids.n == 1 && ids.ids[0] == 4, "ok %zu: %s", i,
			      ids_str(ids.ids, ids.n));
		/* <|endoftext|>, GPT2Tokenizer's default, after the vocab */
		ck_assert_int_eq(taco_tok_vocab_size(tok), 6);
		ck_assert_int_eq(taco_tok_special_ids(tok).bos, 5);
		taco_tok_free(tok);
	}
	taco_tok_ids_free(&ids);

	/* limits: file sizes, token length */
	f.dir = "m";
	f.vocab = V5;
	f.vocab_len = TACO_TOK_MAX_FILE + 1u;
	f.merges = "";
	ck_assert_int_eq(taco_tok_load_gpt2(&f, &tok, &err), -EFBIG);
	ck_assert_ptr_nonnull(strstr(err.msg, "m/vocab.json: "));
	f.vocab_len = strlen(V5);
	f.merges_len = TACO_TOK_MAX_FILE + 1u;
	ck_assert_int_eq(taco_tok_load_gpt2(&f, &tok, &err), -EFBIG);
	ck_assert_ptr_nonnull(strstr(err.msg, "m/merges.txt: "));
	big = malloc(TACO_TOK_MAX_TOKEN_LEN + 32);
	snprintf(big, TACO_TOK_MAX_TOKEN_LEN + 32, "{\"%0*d\": 0}",
		 TACO_TOK_MAX_TOKEN_LEN + 1, 0);
	f.vocab = big;
	f.vocab_len = strlen(big);
	f.merges_len = 0;
	ck_assert_int_eq(taco_tok_load_gpt2(&f, &tok, &err), -EFBIG);
	ck_assert_ptr_nonnull(strstr(err.msg, "longer than 4096 bytes"));
	free(big);

	/* a directory: merges.txt missing, or no tokenizer at all */
	scratch_dir(dir, sizeof(dir));
	ck_assert_int_eq(taco_tok_dir_has_tokenizer(dir), 0);
	ck_assert_int_eq(taco_tok_load(dir, &tok, &err), -ENOENT);
	ck_assert_ptr_nonnull(strstr(
	    err.msg, "no tokenizer.json, nor vocab.json and merges.txt"));
	put_file(dir, "vocab.json", V5, strlen(V5));
	ck_assert_int_eq(taco_tok_dir_has_tokenizer(dir), 1);
	ck_assert_int_eq(taco_tok_load(dir, &tok, &err), -ENOENT);
	ck_assert_ptr_null(tok);
	ck_assert_msg(strstr(err.msg, "/merges.txt: ") &&
			  strstr(err.msg, "needs its merges.txt"),
		      "%s", err.msg);
	put_file(dir, "merges.txt", "a b\nab\n", 7);
	ck_assert_int_eq(taco_tok_load(dir, &tok, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "/merges.txt:2: 'ab' must be two"), "%s",
		      err.msg);
	put_file(dir, "merges.txt", "a b\nab c\n", 9);
	put_file(dir, "added_tokens.json", "{}", 2);
	ck_assert_int_eq(taco_tok_load(dir, &tok, &err), -ENOTSUP);
	ck_assert_ptr_nonnull(strstr(err.msg, "/added_tokens.json is not"));
	put_file(dir, "tokenizer_config.json",
		 "{\"added_tokens_decoder\": {}, \"add_bos_token\": true}", 51);
	ck_assert_msg(taco_tok_load(dir, &tok, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(taco_tok_encode(tok, "abc", 3, 1, &ids, &err), 0);
	ck_assert_msg(ids.n == 2 && ids.ids[0] == 5 && ids.ids[1] == 4, "%s",
		      ids_str(ids.ids, ids.n));
	taco_tok_free(tok);
	taco_tok_ids_free(&ids);
	rm_dir(dir);
}
END_TEST

static TCase *tcase(Suite *s, const char *name)
{
	TCase *tc = tcase_create(name);

	tcase_set_timeout(tc, 300);
	suite_add_tcase(s, tc);
	return tc;
}

static Suite *suite(void)
{
	Suite *s = suite_create("tokenizer");
	const int n = sizeof(names) / sizeof(names[0]);

	tcase_add_loop_test(tcase(s, "corpus"), test_corpus_parity, 0, n);
	tcase_add_test(tcase(s, "variants"), test_variants);
	tcase_add_test(tcase(s, "utf8"), test_invalid_utf8);
	tcase_add_loop_test(tcase(s, "special"), test_special_never_split, 0,
			    n);
	tcase_add_test(tcase(s, "api"), test_api);
	tcase_add_test(tcase(s, "threads"), test_threads);
	tcase_add_loop_test(tcase(s, "classes"), test_unicode_classes, 0, 2);
	tcase_add_loop_test(tcase(s, "new_chars"), test_unicode_new_chars, 0,
			    2);
	tcase_add_loop_test(tcase(s, "single_word"), test_unicode_single_word,
			    0, 2);
	tcase_add_loop_test(tcase(s, "normalization"),
			    test_unicode_normalization, 0, 4);
	tcase_add_test(tcase(s, "refusals"), test_refusals);
	tcase_add_test(tcase(s, "malformed"), test_malformed);
	tcase_add_test(tcase(s, "limits"), test_limits);
	tcase_add_loop_test(tcase(s, "gpt2_corpus"), test_corpus_parity_gpt2, 0,
			    2);
	tcase_add_loop_test(tcase(s, "gpt2_special"),
			    test_special_never_split_gpt2, 0, 2);
	tcase_add_test(tcase(s, "gpt2_cases"), test_gpt2_cases);
	tcase_add_test(tcase(s, "gpt2_bos"), test_gpt2_bos);
	tcase_add_test(tcase(s, "gpt2_errors"), test_gpt2_errors);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
