/* gguf_export.h: a Hugging Face model directory as one GGUF file that
 * llama.cpp loads: the tensors, metadata and tokenizer that llama.cpp's
 * convert_hf_to_gguf.py writes for the same directory (docs/gguf.md). */
#ifndef TACO_GGUF_EXPORT_H
#define TACO_GGUF_EXPORT_H

#include <stdint.h>

#include "util/taco_err.h"

/* The types a GGUF export comes in. */
enum taco_gguf_type {
	TACO_GGUF_BF16 = 0,
	TACO_GGUF_F16,
	TACO_GGUF_Q8_0,
	TACO_GGUF_TYPES
};

/* "bf16", "f16", "q8_0"; NULL for another value. */
const char *taco_gguf_type_name(int type);
/* The inverse: the type, or -1. */
int taco_gguf_type_from_name(const char *name);

/* Converts model_dir (config.json, tokenizer.json, tokenizer_config.json,
 * and the safetensors weights unless weights_dir, a checkpoint, holds
 * them) to out_path, through a temporary file, an fsync
 * and a rename. Refuses a family llama.cpp has no architecture for (OPT),
 * a file larger than max_bytes (-EFBIG, before writing anything) and a
 * tokenizer llama.cpp would read differently. chat_template, when not
 * NULL, is the template written in place of model_dir's (a checkpoint of a
 * job that trained with another). 0 or a negative errno. */
int taco_gguf_export(const char *model_dir, const char *weights_dir,
		     const char *out_path, int type, uint64_t max_bytes,
		     const char *chat_template, taco_err *err);

#endif
