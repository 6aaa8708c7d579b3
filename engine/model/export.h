/* export.h: the fine-tuned model as a Hugging Face directory. */
#ifndef TACO_EXPORT_H
#define TACO_EXPORT_H

#include <stdint.h>

#include "model.h"
#include "util/taco_err.h"

/* The files of a base model directory that an export carries over when
 * present (config, tokenizer, generation and chat template files), NULL
 * terminated. */
extern const char *const taco_export_base_files[];

/* Writes out_dir: config.json, generation_config.json and tokenizer files
 * copied from base_dir, and the weights in their dtype (the base model's),
 * sharded above shard_bytes. Assembled under a temporary name and renamed,
 * replacing an earlier export. */
int taco_export(const taco_model *m, const char *base_dir, const char *out_dir,
		uint64_t shard_bytes, taco_err *err);

#endif
