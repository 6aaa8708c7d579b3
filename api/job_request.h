/* job_request.h: an OpenAI fine-tuning create request, validated and turned
 * into a taco-train job (docs/job.md). OpenAI's fields map onto ours:
 * method.type -> method (supervised: sft, dpo: dpo), n_epochs -> epochs,
 * batch_size (pairs for dpo), learning_rate_multiplier -> lr_multiplier
 * (of the auto rate taco-train picks for the model: docs/taco.md), dpo's
 * beta -> dpo.beta, seed; tacod's own options go in the "taco" object. */
#ifndef TACOD_JOB_REQUEST_H
#define TACOD_JOB_REQUEST_H

#include <jansson.h>
#include <stddef.h>

#include "job/job.h"

#define TACOD_DEFAULT_EPOCHS 3
#define TACOD_DEFAULT_BATCH 4

typedef struct tacod_request_ctx {
	const char *models_dir;
	const char *output_dir; /* where this job writes */
	/* The path of an uploaded file the requesting user may read:
	 * 0, -ENOENT when there is no such file for this user, or -EINVAL
	 * when the file is not data (a job's result file). */
	int (*file_path)(void *ctx, const char *id, char *path, size_t cap);
	/* The resolved path of a dataset named by an absolute path: 0,
	 * -ENOENT, or -EACCES when it is not under a dataset root. NULL: no
	 * paths are allowed. Both callbacks get file_ctx. */
	int (*dataset_path)(void *ctx, const char *p, char *path, size_t cap);
	/* The model directory (config, tokenizer, weights: what taco-train
	 * reads) of a fine-tuned model or checkpoint name the requesting user
	 * may train from: 0, or -ENOENT when there is no such model for this
	 * user, or another negative errno. NULL: only base models. */
	int (*model_path)(void *ctx, const char *name, char *path, size_t cap);
	void *file_ctx;
} tacod_request_ctx;

/* What was wrong: OpenAI's error fields. */
typedef struct tacod_request_error {
	char param[96];
	char code[48];
	char message[512];
} tacod_request_error;

/* A create request as a job: the job file's text, and the job parsed from
 * that very text, as taco-train will parse it. */
typedef struct tacod_job_spec {
	char *text;   /* the job file (JSON, docs/job.md): tacod's job.json */
	taco_job job; /* the text parsed and validated: the daemon plans and
			 validates the data from it, reading no file back */
} tacod_job_spec;

/* Validates req (every field; the first problem is returned) and maps it
 * onto a job. Returns 0 with *out set (the caller frees it with
 * tacod_job_spec_free), or -EINVAL with e filled (a bad request), or the
 * model_path callback's failure other than -ENOENT with e filled (the
 * server's: -ENOMEM, -ENOSPC, ...). */
int tacod_job_request(json_t *req, const tacod_request_ctx *ctx,
		      tacod_job_spec *out, tacod_request_error *e);
void tacod_job_spec_free(tacod_job_spec *spec);

/* The hyperparameters a request accepted by tacod_job_request runs with,
 * as OpenAI's job object shows them: {"n_epochs", "batch_size",
 * "learning_rate_multiplier"}, "auto" and absent resolved to tacod's
 * defaults, from either place (method.supervised or method.dpo, or the
 * deprecated top level), the multiplier null with a taco.lr (a rate of
 * its own, not a multiple of the auto one), and n_epochs null when
 * taco.steps sets the length. NULL when req is not such a request. */
json_t *tacod_job_hyperparameters(json_t *req);

/* The method such a request runs, as OpenAI's job object shows it:
 * {"type": "supervised", "supervised": {"hyperparameters": the above}}, or
 * {"type": "dpo", "dpo": {"hyperparameters": {"beta", the above}}} with beta
 * resolved ("auto": TACO_DPO_BETA_DEFAULT). NULL as above. */
json_t *tacod_job_method(json_t *req);

#endif
