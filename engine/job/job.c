/* job.c: JOB.json: the file read and checked against the schema
 * (job_schema.c), the defaults, the learning-rate schedule. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "job_schema.h"
#include "util/fsutil.h"
#include "util/json_file.h"

static void defaults(taco_job *job)
{
	memset(job, 0, sizeof(*job));
	job->batch_size = 4;
	job->seq_len = 1024;
	job->grad_accum = 1;
	job->gpus = 1;
	job->lr = 0; /* auto */
	job->lr_multiplier = 1;
	job->schedule = TACO_SCHED_LINEAR;
	job->min_lr_ratio = 0.0;
	taco_optim_defaults(&job->optim);
	job->keep_checkpoints = 2;
	job->eval_samples = TACO_JOB_EVAL_SAMPLES;
	job->export_shard_bytes = 5000000000ull;
	job->export_gguf_max_bytes = 1000000000000ull;
	job->log_every = 1;
	job->max_examples = 10000000;
	job->activation_checkpointing = 1;
	job->dropout = -1;
	job->router_aux_loss_coef = -1;
	job->dpo_beta = TACO_DPO_BETA_DEFAULT;
}

int taco_job_parse(const char *json, size_t len, const char *dir, taco_job *job,
		   taco_job_problems *p)
{
	json_t *root;
	taco_err err;

	defaults(job);
	memset(p, 0, sizeof(*p));
	if (taco_json_parse("job file", json, len, TACO_JOB_MAX_BYTES,
			    TACO_JSON_COLUMN, &root, &err)) {
		taco_job_problem(p, "%s", err.msg);
		return -EINVAL;
	}
	if (!json_is_object(root)) {
		taco_job_problem(p, "job file: must be a JSON object");
		json_decref(root);
		return -EINVAL;
	}
	taco_job_read(root, dir, job, p);
	json_decref(root);
	return p->n ? -EINVAL : 0;
}

int taco_job_load(const char *path, taco_job *job, taco_job_problems *p)
{
	char *buf = NULL, dir[TACO_PATH_MAX];
	const char *slash;
	taco_err err;
	size_t n = 0;
	int r = taco_read_file(path, TACO_JOB_MAX_BYTES, &buf, &n, &err);

	if (r) {
		defaults(job);
		memset(p, 0, sizeof(*p));
		taco_job_problem(p, "%s", err.msg);
		return r;
	}
	slash = strrchr(path, '/');
	snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path) : 1,
		 slash ? path : ".");
	r = taco_job_parse(buf, n, dir, job, p);
	free(buf);
	return r;
}

void taco_job_free(taco_job *job)
{
	for (int i = 0; job->freeze && i < job->n_freeze; i++)
		free(job->freeze[i]);
	free(job->freeze);
	job->freeze = NULL;
	job->n_freeze = 0;
	free(job->chat_template_jinja);
	free(job->chat_template_kwargs);
	job->chat_template_jinja = job->chat_template_kwargs = NULL;
}

double taco_job_lr(const taco_job *job, int64_t step, int64_t total)
{
	double lr = job->lr, floor_lr = job->lr * job->min_lr_ratio, frac;
	int64_t w = job->warmup_steps, span;

	if (w > 0 && step <= w)
		return lr * (double)step / (double)w;
	if (job->schedule == TACO_SCHED_CONSTANT)
		return lr;
	span = total - w;
	/* 0-based progress: the first step after warmup has the full rate */
	frac = span > 0 ? (double)(step - 1 - w) / (double)span : 1.0;
	if (frac > 1)
		frac = 1;
	if (job->schedule == TACO_SCHED_LINEAR)
		return floor_lr + (lr - floor_lr) * (1.0 - frac);
	return floor_lr + (lr - floor_lr) * 0.5 * (1.0 + cos(M_PI * frac));
}

int taco_job_sample_cache(const taco_job *job, int *rows, int *ctx, int *chunk)
{
	int c = job->seq_len < 1024 ? job->seq_len : 1024;

	*rows = job->eval_samples;
	*ctx = job->seq_len;
	*chunk = c > *rows ? c : *rows;
	return job->method != TACO_METHOD_DPO && job->validation[0] &&
	       job->eval_samples > 0;
}
