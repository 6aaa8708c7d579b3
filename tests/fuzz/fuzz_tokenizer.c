/* fuzz_tokenizer.c: the tokenizer.json loader and encoding of arbitrary
 * bytes. The first input byte picks the mode (low two bits) and flags:
 *   0  encode with a small byte-level BPE (Split regex + ByteLevel) and
 *      check decode(encode(x)) == x with invalid UTF-8 replaced
 *   1  encode with a small Llama-2 style BPE (NFKC, Prepend, Replace,
 *      byte_fallback, added tokens with lstrip/rstrip/single_word/
 *      normalized, template), then decode
 *   2  encode with a GPT-2 style pipeline (NFC, ByteLevel add_prefix_space
 *      with the GPT-2 regex, Metaspace-free), then decode
 *   3  the rest of the input is a tokenizer.json: load it, and when it
 *      loads encode and decode a fixed text
 * bit 2: add_special_tokens; bit 3: skip_special_tokens. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_internal.h"

static taco_tok *toks[3];

static const char *const merges_a[][2] = {
    {"Ġ", "t"},	 {"h", "e"}, {"Ġt", "he"}, {"i", "n"},	 {"Ġ", "a"},
    {"e", "r"},	 {"o", "n"}, {"Ġ", "s"},   {"r", "e"},	 {"a", "t"},
    {"Ġ", "w"},	 {"o", "r"}, {"Ġ", "Ġ"},   {"ĠĠ", "ĠĠ"}, {"1", "2"},
    {"12", "3"}, {"Ã", "©"}, {"in", "g"},  {"Ġs", "t"},	 {"Ċ", "Ċ"},
};

static const char *const merges_b[][2] = {
    {"▁", "t"}, {"h", "e"}, {"▁t", "he"}, {"i", "n"},	{"▁", "a"},
    {"e", "r"}, {"o", "n"}, {"▁", "▁"},	  {"▁▁", "▁▁"},
};

static void add_tok(json_t *vocab, const char *s)
{
	if (!json_object_get(vocab, s))
		json_object_set_new(vocab, s,
				    json_integer(json_object_size(vocab)));
}

static json_t *added(int id, const char *content, int special, int lstrip,
		     int rstrip, int single_word, int normalized)
{
	return json_pack("{s:i,s:s,s:b,s:b,s:b,s:b,s:b}", "id", id, "content",
			 content, "special", special, "lstrip", lstrip,
			 "rstrip", rstrip, "single_word", single_word,
			 "normalized", normalized);
}

static taco_tok *build(json_t *root)
{
	char *s = json_dumps(root, JSON_COMPACT);
	taco_tok *t = NULL;
	taco_err err;

	if (taco_tok_load_buffer(s, strlen(s), "fuzz", &t, &err)) {
		fprintf(stderr, "fuzz_tokenizer: %s\n", err.msg);
		abort();
	}
	free(s);
	json_decref(root);
	return t;
}

static json_t *bytelevel_model(void)
{
	json_t *vocab = json_object(), *merges = json_array();

	for (int b = 0; b < 256; b++) {
		char u[8];
		int n = tok_utf8_put(tok_byte_char[b], u);
		u[n] = 0;
		add_tok(vocab, u);
	}
	for (size_t i = 0; i < sizeof(merges_a) / sizeof(merges_a[0]); i++) {
		char m[64];
		snprintf(m, sizeof(m), "%s%s", merges_a[i][0], merges_a[i][1]);
		add_tok(vocab, m);
		json_array_append_new(
		    merges, json_pack("[s,s]", merges_a[i][0], merges_a[i][1]));
	}
	return json_pack("{s:s,s:n,s:n,s:n,s:n,s:b,s:b,s:b,s:o,s:o}", "type",
			 "BPE", "dropout", "unk_token",
			 "continuing_subword_prefix", "end_of_word_suffix",
			 "fuse_unk", 0, "byte_fallback", 0, "ignore_merges", 1,
			 "vocab", vocab, "merges", merges);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	json_t *root, *model, *vocab, *merges, *addl;
	const char *llama3 =
	    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
	    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
	    "\\s+(?!\\S)|\\s+";

	(void)argc;
	(void)argv;
	/* A: byte-level, no normalizer (decode inverts encode) */
	model = bytelevel_model();
	addl = json_array();
	json_array_append_new(addl, added(276, "<|s|>", 1, 0, 0, 0, 0));
	json_array_append_new(addl, added(277, "wd", 0, 0, 0, 1, 0));
	json_array_append_new(addl, added(278, "<|s|>x", 1, 0, 0, 0, 0));
	root = json_pack(
	    "{s:o,s:n,s:{s:s,s:[{s:s,s:{s:s},s:s,s:b},{s:s,s:b,s:b,s:b}]},"
	    "s:{s:s,s:[{s:{s:s,s:i}},{s:{s:s,s:i}}],s:{s:{s:s,s:[i],s:[s]}}},"
	    "s:{s:s},s:o}",
	    "added_tokens", addl, "normalizer", "pre_tokenizer", "type",
	    "Sequence", "pretokenizers", "type", "Split", "pattern", "Regex",
	    llama3, "behavior", "Isolated", "invert", 0, "type", "ByteLevel",
	    "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 0,
	    "post_processor", "type", "TemplateProcessing", "single",
	    "SpecialToken", "id", "<|s|>", "type_id", 0, "Sequence", "id", "A",
	    "type_id", 0, "special_tokens", "<|s|>", "id", "<|s|>", "ids", 276,
	    "tokens", "<|s|>", "decoder", "type", "ByteLevel", "model", model);
	toks[0] = build(root);

	/* B: Llama-2 style */
	vocab = json_object();
	merges = json_array();
	add_tok(vocab, "<unk>");
	add_tok(vocab, "<s>");
	add_tok(vocab, "</s>");
	for (int b = 0; b < 256; b++) {
		char n[8];
		snprintf(n, sizeof(n), "<0x%02X>", b);
		add_tok(vocab, n);
	}
	for (const char *c = "abcdefghijklmnopqrstuvwxyz"; *c; c++) {
		char s[2] = {*c, 0};
		add_tok(vocab, s);
	}
	add_tok(vocab, "▁");
	for (size_t i = 0; i < sizeof(merges_b) / sizeof(merges_b[0]); i++) {
		char m[64];
		snprintf(m, sizeof(m), "%s%s", merges_b[i][0], merges_b[i][1]);
		add_tok(vocab, m);
		json_array_append_new(
		    merges, json_pack("[s,s]", merges_b[i][0], merges_b[i][1]));
	}
	{
		int n = (int)json_object_size(vocab);
		addl = json_array();
		json_array_append_new(addl, added(0, "<unk>", 1, 0, 0, 0, 0));
		json_array_append_new(addl, added(1, "<s>", 1, 0, 0, 0, 0));
		json_array_append_new(addl, added(2, "</s>", 1, 0, 0, 0, 0));
		json_array_append_new(addl, added(n, "<mask>", 1, 1, 1, 0, 0));
		json_array_append_new(addl, added(n + 1, "x1", 0, 0, 0, 1, 0));
		json_array_append_new(addl, added(n + 2, "ab", 0, 0, 0, 0, 1));
	}
	root = json_pack(
	    "{s:o,s:{s:s,s:[{s:s},{s:s,s:s},{s:s,s:{s:s},s:s}]},s:n,"
	    "s:{s:s,s:[{s:{s:s,s:i}},{s:{s:s,s:i}},{s:{s:s,s:i}}],"
	    "s:{s:{s:s,s:[i],s:[s]},s:{s:s,s:[i],s:[s]}}},"
	    "s:{s:s,s:[{s:s,s:{s:s},s:s},{s:s},{s:s},{s:s,s:s,s:i,s:i}]},"
	    "s:{s:s,s:n,s:s,s:n,s:n,s:b,s:b,s:b,s:o,s:o}}",
	    "added_tokens", addl, "normalizer", "type", "Sequence",
	    "normalizers", "type", "NFKC", "type", "Prepend", "prepend", "▁",
	    "type", "Replace", "pattern", "String", " ", "content", "▁",
	    "pre_tokenizer", "post_processor", "type", "TemplateProcessing",
	    "single", "SpecialToken", "id", "<s>", "type_id", 0, "Sequence",
	    "id", "A", "type_id", 0, "SpecialToken", "id", "</s>", "type_id", 0,
	    "special_tokens", "<s>", "id", "<s>", "ids", 1, "tokens", "<s>",
	    "</s>", "id", "</s>", "ids", 2, "tokens", "</s>", "decoder", "type",
	    "Sequence", "decoders", "type", "Replace", "pattern", "String", "▁",
	    "content", " ", "type", "ByteFallback", "type", "Fuse", "type",
	    "Strip", "content", " ", "start", 1, "stop", 0, "model", "type",
	    "BPE", "dropout", "unk_token", "<unk>", "continuing_subword_prefix",
	    "end_of_word_suffix", "fuse_unk", 1, "byte_fallback", 1,
	    "ignore_merges", 0, "vocab", vocab, "merges", merges);
	toks[1] = build(root);

	/* C: GPT-2 style with NFC and a prefix space */
	model = bytelevel_model();
	root =
	    json_pack("{s:[],s:{s:s},s:{s:s,s:b,s:b,s:b},s:n,s:{s:s},s:o}",
		      "added_tokens", "normalizer", "type", "NFC",
		      "pre_tokenizer", "type", "ByteLevel", "add_prefix_space",
		      1, "trim_offsets", 1, "use_regex", 1, "post_processor",
		      "decoder", "type", "ByteLevel", "model", model);
	toks[2] = build(root);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	taco_tok_ids ids = {0};
	taco_err err;
	char *out = NULL;
	size_t out_len;
	int mode, special, skip;

	if (size < 1)
		return 0;
	mode = data[0] & 3;
	special = (data[0] >> 2) & 1;
	skip = (data[0] >> 3) & 1;
	data++;
	size--;
	if (mode == 3) {
		static const char text[] = "Hello wörld! It's 2024 \xff\xfe "
					   "<s> ab  x1 \n\t 日本語 🙂";
		taco_tok *t;
		if (taco_tok_load_buffer((const char *)data, size, "fuzz", &t,
					 &err))
			return 0;
		if (taco_tok_encode(t, text, sizeof(text) - 1, special, &ids,
				    &err) == 0 &&
		    taco_tok_decode(t, ids.ids, ids.n, skip, &out, &out_len,
				    &err) == 0)
			free(out);
		(void)taco_tok_vocab_size(t);
		taco_tok_ids_free(&ids);
		taco_tok_free(t);
		return 0;
	}
	if (taco_tok_encode(toks[mode], (const char *)data, size, special, &ids,
			    &err)) {
		fprintf(stderr, "encode failed: %s\n", err.msg);
		abort();
	}
	for (size_t i = 0; i < ids.n; i++)
		if (ids.ids[i] < 0 ||
		    ids.ids[i] >= taco_tok_vocab_size(toks[mode]))
			abort();
	if (taco_tok_decode(toks[mode], ids.ids, ids.n, skip, &out, &out_len,
			    &err))
		abort();
	if (mode == 0 && !special) {
		/* byte-level without normalizer: decode inverts encode */
		struct tok_buf want = {0};
		if (tok_utf8_lossy(&want, data, size))
			abort();
		if (!skip && (out_len != want.n ||
			      (want.n && memcmp(out, want.p, want.n))))
			abort();
		tok_buf_free(&want);
	}
	free(out);
	taco_tok_ids_free(&ids);
	return 0;
}
