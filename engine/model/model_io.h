/* model_io.h: a model's weights to and from safetensors after loading:
 * checkpoints and the Hugging Face export. */
#ifndef TACO_MODEL_IO_H
#define TACO_MODEL_IO_H

#include <stdint.h>

#include "model.h"
#include "util/taco_err.h"

/* Writes every tensor in its dtype to path (one file), atomically. */
int taco_model_save_weights(const taco_model *m, const char *path,
			    taco_err *err);

/* Writes model.safetensors, or shards of at most shard_bytes plus
 * model.safetensors.index.json, into dir (Hugging Face layout). */
int taco_model_save_sharded(const taco_model *m, const char *dir,
			    uint64_t shard_bytes, taco_err *err);

/* Replaces the weights with those of path, which must hold exactly this
 * model's tensors with the same dtypes and shapes. */
int taco_model_load_weights(taco_model *m, const char *path, taco_err *err);

#endif
