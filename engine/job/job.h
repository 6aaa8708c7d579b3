/* job.h: the options of one fine-tuning job (JOB.json), validated up front.
 * docs/job.md documents every field; job_schema.h lists them. */
#ifndef TACO_JOB_H
#define TACO_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "job_opts.h"

#define TACO_JOB_MAX_BYTES (1u << 20)
#define TACO_JOB_MAX_FREEZE 256
/* A job's ranks at most (job option gpus). */
#define TACO_JOB_MAX_GPUS 64
#define TACO_PATH_MAX 4096

enum taco_schedule {
	TACO_SCHED_CONSTANT = 0,
	TACO_SCHED_LINEAR,
	TACO_SCHED_COSINE,
};

/* in the order of the job file's names */
enum taco_precision {
	TACO_PRECISION_AUTO = 0, /* bf16 on CUDA, fp32 on the CPU */
	TACO_PRECISION_FP32,
	TACO_PRECISION_BF16,
};

enum taco_choice {
	TACO_CHOICE_AUTO = 0, /* what admission picks to fit */
	TACO_CHOICE_OFF,
	TACO_CHOICE_ON,
};

/* in the order of the job file's names */
enum taco_weights {
	TACO_WEIGHTS_AUTO = 0, /* on the device, streamed only to fit */
	TACO_WEIGHTS_DEVICE,
	TACO_WEIGHTS_HOST, /* every layer streamed from host memory */
};

/* eval_samples: its default and limit (the answers are generated at
 * every evaluation, one cache row each). */
#define TACO_JOB_EVAL_SAMPLES 4
#define TACO_JOB_MAX_EVAL_SAMPLES 64

typedef struct taco_job {
	char model[TACO_PATH_MAX];
	char train[TACO_PATH_MAX];
	char validation[TACO_PATH_MAX]; /* "" = none */
	char output_dir[TACO_PATH_MAX];
	int64_t steps; /* 0 = from epochs */
	double epochs; /* used when steps == 0 */
	int batch_size;
	int seq_len;
	int grad_accum;
	/* data-parallel ranks, one GPU each (docs/multi-gpu.md); 1 */
	int gpus;
	double lr;	      /* peak rate; 0: auto (taco_job_lr_auto) */
	double lr_multiplier; /* times the auto rate; 1 */
	int schedule;
	int64_t warmup_steps;
	double min_lr_ratio; /* the schedule decays to lr * min_lr_ratio */
	taco_optim_opts optim;
	int n_freeze;
	char **freeze;	    /* tensor-name prefixes */
	int64_t eval_every; /* 0 = at the end only */
	/* greedy answers to the first validation prompts at each
	 * evaluation (0: none) */
	int eval_samples;
	int64_t checkpoint_every; /* 0 = on stop signals only */
	int keep_checkpoints;
	uint64_t export_shard_bytes;
	/* GGUF files beside the export: bit TACO_GGUF_* (gguf_export.h's
	 * order: bf16, f16, q8_0) */
	unsigned export_gguf;
	uint64_t export_gguf_max_bytes; /* per file */
	int64_t log_every;
	int64_t max_examples; /* limit on examples read from a data file */
	int activation_checkpointing; /* 0: keep every layer's activations */
	int precision;		      /* enum taco_precision */
	int activation_offload;	      /* enum taco_choice */
	int mlp_chunks;		      /* 0: auto */
	int weights;		      /* enum taco_weights */
	double dropout;		      /* residual dropout; -1: the config's */
	/* a mixture of experts' auxiliary load-balancing loss: its weight,
	 * 0 off; -1: the config's (router_aux_loss_coef when
	 * output_router_logits is set, else off, as transformers trains) */
	double router_aux_loss_coef;
	int packing;		    /* several examples per sequence */
	int chat_template;	    /* enum taco_template */
	char *chat_template_jinja;  /* the job's own template, or NULL */
	char *chat_template_kwargs; /* template variables: JSON text, or
				     * NULL */
	/* strftime_now()'s clock, seconds since the epoch: fixed when tacod
	 * writes the file; 0 = when the job's data is first read */
	int64_t chat_template_time;
	int train_on_all;			  /* 0: answers only */
	int overlength;				  /* enum taco_overlength */
	char eval_multiple_choice[TACO_PATH_MAX]; /* "" = none */
	int method;				  /* enum taco_method */
	double dpo_beta; /* DPO: the reward scale beta */
} taco_job;

/* A problem list: every problem found, each naming its option. */
typedef struct taco_job_problems {
	int n;
	char msg[64][256];
} taco_job_problems;

/* Parses and validates JOB.json text. Returns 0, or -EINVAL with every
 * problem in probs (unknown options included). dir_of_file resolves
 * relative paths (NULL: as given). */
int taco_job_parse(const char *json, size_t len, const char *dir_of_file,
		   taco_job *job, taco_job_problems *probs);
int taco_job_load(const char *path, taco_job *job, taco_job_problems *probs);
void taco_job_free(taco_job *job);

/* The learning rate of optimizer step `step` (1-based) of `total`, for a
 * job whose lr is set (taco_job_resolve_lr). */
double taco_job_lr(const taco_job *job, int64_t step, int64_t total);

/* The auto peak rate for the job's method and optimizer on a model of
 * this hidden size (docs/taco.md, "Learning rates"), before
 * lr_multiplier. */
double taco_job_lr_auto(const taco_job *job, int hidden);

/* Sets job->lr to its auto rate times lr_multiplier when it is auto (0);
 * an explicit rate stays. Returns 1 when it was auto. */
int taco_job_resolve_lr(taco_job *job, int hidden);

const char *taco_schedule_name(int schedule);

/* Whether the job generates answers at its evaluations (eval_samples: a
 * supervised job with a validation set), and then the shape of their
 * cache: rows (eval_samples), context (seq_len) and the tokens of one
 * call (a prompt's prefill in calls of at most 1024). The plan counts
 * that cache, and taco-train allocates it before the first step. */
int taco_job_sample_cache(const taco_job *job, int *rows, int *ctx, int *chunk);

#endif
