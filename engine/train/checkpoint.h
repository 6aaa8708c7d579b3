/* checkpoint.h: training checkpoints under OUTPUT_DIR/checkpoints/.
 *
 * A checkpoint is a directory step-NNNNNNNN holding model.safetensors (the
 * weights in their dtype), optimizer.safetensors (the optimizer state) and
 * trainer.json (step, data cursor, seed, job). It is assembled under a
 * temporary name, every file fsynced, then renamed: a directory named
 * step-NNNNNNNN is complete, whatever happened while it was written. */
#ifndef TACO_CHECKPOINT_H
#define TACO_CHECKPOINT_H

#include <jansson.h>
#include <stdint.h>

#include "model/model.h"
#include "optim/optim.h"
#include "util/taco_err.h"

/* Writes checkpoint `step` with the given trainer state (borrowed), then
 * removes complete checkpoints beyond the newest `keep` and any leftover
 * temporary directories. path (may be NULL) receives the directory. */
int taco_ckpt_save(const char *output_dir, int64_t step, const taco_model *m,
		   const taco_optim *o, json_t *trainer, int keep, char *path,
		   size_t path_len, taco_err *err);

/* The newest complete checkpoint: 0 with its directory and step, or
 * -ENOENT when there is none. */
int taco_ckpt_latest(const char *output_dir, char *path, size_t path_len,
		     int64_t *step, taco_err *err);

/* Loads weights and optimizer state of a checkpoint directory, and returns
 * its trainer.json (the caller owns it). */
int taco_ckpt_load(const char *dir, taco_model *m, taco_optim *o,
		   json_t **trainer, taco_err *err);

#endif
