/* export_gguf.h: a job's GGUF files (docs/gguf.md). */
#ifndef TACO_TRAIN_EXPORT_GGUF_H
#define TACO_TRAIN_EXPORT_GGUF_H

#include <stddef.h>

#include "job/job.h"
#include "util/taco_err.h"

/* Writes the job's exported model (OUTPUT_DIR/model/), or the checkpoint
 * ckpt_dir when not NULL (its weights, the base model's config and
 * tokenizer), as GGUF of type (enum taco_gguf_type) to out, or when out is
 * NULL to OUTPUT_DIR/gguf/model-TYPE.gguf (a checkpoint:
 * OUTPUT_DIR/gguf/step-NNNNNNNN-TYPE.gguf). The file's path goes to
 * path[len]. 0 or a negative errno. */
int taco_train_export_gguf(const taco_job *job, const char *ckpt_dir, int type,
			   const char *out, char *path, size_t len,
			   taco_err *err);

#endif
