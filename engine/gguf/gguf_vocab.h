/* gguf_vocab.h: a Hugging Face tokenizer as GGUF's tokenizer.ggml.* keys,
 * the way llama.cpp's convert_hf_to_gguf.py writes a byte-level BPE
 * ("gpt2") vocabulary. */
#ifndef TACO_GGUF_VOCAB_H
#define TACO_GGUF_VOCAB_H

#include "gguf_write.h"
#include "util/taco_err.h"

/* Limits on what a model directory's tokenizer files may hold. */
#define TACO_GGUF_TOKENIZER_MAX_BYTES (64u << 20)
#define TACO_GGUF_TEMPLATE_MAX_BYTES (1u << 20)

/* Reads dir/tokenizer.json, dir/tokenizer_config.json (and
 * chat_template.jinja when there) and dir/config.json, and adds to g:
 * tokenizer.ggml.model ("gpt2"), .pre, .tokens (vocab_size of them: ids
 * the tokenizer lacks become "[PADn]", unused), .token_type, .merges, the
 * bos/eos/unk/padding ids it names, .add_bos_token (and .add_eos_token
 * when the tokenizer config says) and tokenizer.chat_template. A
 * tokenizer llama.cpp would read differently (not byte-level BPE, an
 * unknown pre-tokenizer) is refused, naming the file and field.
 * chat_template, when not NULL, is written in place of dir's. */
int taco_gguf_add_vocab(taco_gguf *g, const char *dir, int vocab_size,
			const char *chat_template,
			taco_err *err);

#endif
