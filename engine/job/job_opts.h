/* job_opts.h: the option types a job carries that the libraries below it
 * take (the optimizer, the datasets). Defined here, in the job's leaf
 * library, so that parsing a job needs none of them: engine/optim and
 * engine/data include this header, not the other way round. */
#ifndef TACO_JOB_OPTS_H
#define TACO_JOB_OPTS_H

#include <stdint.h>

/* The optimizer's options (docs/taco.md; engine/optim). */
typedef struct taco_optim_opts {
	int all_adamw; /* 1: AdamW for every tensor (the comparison baseline) */
	int k;	       /* TACO slots per column, 1..16 */
	float beta;
	float weight_decay;
	int stochastic; /* bf16 rounding of TACO updates */
	float adam_beta1, adam_beta2, adam_eps, adam_weight_decay;
	uint64_t seed;
} taco_optim_opts;

/* The defaults of docs/taco.md: k 16, beta 0.9, no decay, stochastic rounding;
 * AdamW 0.9 / 0.999 / 1e-8 / 0. */
void taco_optim_defaults(taco_optim_opts *o);

/* The training method, in the order of the job file's names: supervised
 * fine-tuning on examples, or DPO on preference pairs (docs/job.md). */
enum taco_method {
	TACO_METHOD_SFT = 0,
	TACO_METHOD_DPO,
};

/* DPO's beta when the job sets none (TRL's and OpenAI's "auto"). */
#define TACO_DPO_BETA_DEFAULT 0.1

/* A chat dataset's template (engine/data), in the order of the job file's
 * names. */
enum taco_template {
	TACO_TEMPLATE_AUTO = 0, /* from tokenizer_config.json's chat_template */
	TACO_TEMPLATE_CHATML, /* Qwen: <|im_start|>role\ncontent<|im_end|>\n */
	TACO_TEMPLATE_LLAMA3,
	TACO_TEMPLATE_MISTRAL, /* [INST] user [/INST] assistant</s> */
};

/* What a dataset does with an example longer than seq_len, likewise. */
enum taco_overlength {
	TACO_OVERLENGTH_TRUNCATE = 0,
	TACO_OVERLENGTH_DROP,
	TACO_OVERLENGTH_ERROR,
};

#endif
