/* export.h: the fine-tuned model as a Hugging Face directory. */
#ifndef TACO_EXPORT_H
#define TACO_EXPORT_H

#include <stdint.h>

#include "model.h"
#include "util/taco_err.h"

/* Writes out_dir: the files of taco_job_export_files (config.json,
 * generation_config.json, tokenizer files) copied from base_dir, and the
 * weights in their dtype (the base model's), sharded above shard_bytes.
 * chat_template, when not NULL, is the Jinja the job trained with in
 * place of the base model's: written as chat_template.jinja, which
 * transformers and the GGUF export read before tokenizer_config.json's.
 * Assembled under a temporary name and renamed, replacing an earlier
 * export. */
int taco_export(const taco_model *m, const char *base_dir, const char *out_dir,
		uint64_t shard_bytes, const char *chat_template, taco_err *err);

#endif
