/* fuzz_tokenizer_gpt2.c: the GPT-2 style tokenizer files (vocab.json,
 * merges.txt, tokenizer_config.json, special_tokens_map.json), untrusted
 * input of every model directory without a tokenizer.json. The first input
 * byte holds flags, the rest is split at NUL bytes (which none of the files
 * may hold) into the files:
 *   bit 0  vocab.json is a fixed byte-level vocab (the 256 byte chars and
 *          some merged tokens) and the input starts with merges.txt, so
 *          that most inputs get past vocab.json to the merges
 *   bit 1  there is no tokenizer_config.json (else: the next part)
 *   bit 2  there is no special_tokens_map.json (else: the next part)
 *   bit 3  add_special_tokens; bit 4: skip_special_tokens
 *   bit 5  the directory has an added_tokens.json
 * When the files load, a fixed text is encoded and decoded and the ids are
 * checked against the vocab size. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_internal.h"

static char *fixed_vocab;
static size_t fixed_vocab_len;

/* merged tokens of the fixed vocab, beyond the byte chars */
static const char *const merged[] = {
    "Ġt",   "he", "Ġthe", "in", "Ġa",  "er",   "on",	"ĠĠ",
    "ĠĠĠĠ", "12", "123",  "Ã©", "ing", "</s>", "<pad>", "<|endoftext|>",
};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	json_t *v = json_object();

	(void)argc;
	(void)argv;
	for (int b = 0; b < 256; b++) {
		char u[8];
		int n = tok_utf8_put(tok_byte_char[b], u);
		u[n] = 0;
		json_object_set_new(v, u, json_integer(b));
	}
	for (size_t i = 0; i < sizeof(merged) / sizeof(merged[0]); i++)
		json_object_set_new(v, merged[i],
				    json_integer(json_object_size(v)));
	fixed_vocab = json_dumps(v, JSON_COMPACT);
	fixed_vocab_len = strlen(fixed_vocab);
	json_decref(v);
	return 0;
}

/* The next NUL-separated part of [*p, end). */
static const char *part(const char **p, const char *end, size_t *len)
{
	const char *s = *p, *z;

	if (s > end)
		s = end;
	z = memchr(s, 0, (size_t)(end - s));
	*len = (size_t)((z ? z : end) - s);
	*p = z ? z + 1 : end + 1;
	return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char text[] =
	    "Hello wörld! It's 2024 \xff\xfe </s>"
	    "<pad> ab  x1 \n\t 日本語 🙂<|endoftext|>";
	taco_tok_gpt2_files f = {0};
	taco_tok_ids ids = {0};
	taco_tok *t;
	taco_err err;
	const char *p, *end;
	char *out = NULL;
	size_t out_len;
	int flags;

	if (size < 1)
		return 0;
	flags = data[0];
	p = (const char *)data + 1;
	end = (const char *)data + size;
	f.dir = "fuzz";
	if (flags & 1) {
		f.vocab = fixed_vocab;
		f.vocab_len = fixed_vocab_len;
	} else {
		f.vocab = part(&p, end, &f.vocab_len);
	}
	f.merges = part(&p, end, &f.merges_len);
	if (!(flags & 2))
		f.config = part(&p, end, &f.config_len);
	if (!(flags & 4))
		f.special_map = part(&p, end, &f.special_map_len);
	f.has_added_tokens_json = (flags >> 5) & 1;
	if (taco_tok_load_gpt2(&f, &t, &err))
		return 0;
	if (taco_tok_encode(t, text, sizeof(text) - 1, (flags >> 3) & 1, &ids,
			    &err))
		abort();
	for (size_t i = 0; i < ids.n; i++)
		if (ids.ids[i] < 0 || ids.ids[i] >= taco_tok_vocab_size(t))
			abort();
	if (taco_tok_decode(t, ids.ids, ids.n, (flags >> 4) & 1, &out, &out_len,
			    &err))
		abort();
	free(out);
	taco_tok_ids_free(&ids);
	taco_tok_free(t);
	return 0;
}
