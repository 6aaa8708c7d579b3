/* model_name.h: the names of models a job can start from and produces, as
 * OpenAI forms them.
 *
 *   base          a directory of models_dir: "llama_gqa"
 *   fine-tuned    "ft:<root>:<suffix>:<job>"   (job: the id without
 *                 "ftjob-"; suffix may be empty)
 *   checkpoint    "ft:<root>:<suffix>:<job>:ckpt-step-<N>"
 *
 * root is always the base model, also for a job that started from a
 * fine-tuned model (the job's own `model` names that parent). Base names and
 * suffixes are plain (letters, digits, '-', '_', '.'), so ':' only
 * separates. */
#ifndef TACOD_MODEL_NAME_H
#define TACOD_MODEL_NAME_H

#include <stddef.h>
#include <stdint.h>

#include "api/types.h"

enum {
	TACOD_MODEL_BASE,
	TACOD_MODEL_FINE_TUNED,
	TACOD_MODEL_CHECKPOINT,
};

typedef struct tacod_model_name {
	int kind;
	char root[TACOD_BASE_NAME_MAX + 1]; /* the base model */
	char suffix[65];		    /* at most 64, as a request's */
	char job_id[TACOD_ID_MAX];	    /* "ftjob-..." (not for a base) */
	int64_t step;			    /* a checkpoint's */
} tacod_model_name;

/* Splits name: 0 with *out set, or -EINVAL when it is neither a plain base
 * name nor one of the ft: forms above. */
int tacod_model_name_parse(const char *name, tacod_model_name *out);

/* The base model at the root of name (a base name is its own root): out
 * holds at most cap - 1 bytes; -EINVAL for a name that does not parse. */
int tacod_model_name_root(const char *name, char *out, size_t cap);

/* The name of the model a job makes (step < 0) or of its checkpoint at
 * step: job_model is the job's `model` (a base or an ft: name), job_id its
 * id. -ENAMETOOLONG when it does not fit cap, -EINVAL when job_model does
 * not parse. */
int tacod_model_name_format(const char *job_model, const char *suffix,
			    const char *job_id, int64_t step, char *out,
			    size_t cap);

/* A base model name: plain characters, at most TACOD_BASE_NAME_MAX. */
int tacod_model_name_plain(const char *s, size_t max);

#endif
