/* job_data.h: the data of a job: tokenizer, training and validation sets,
 * multiple-choice evaluation set, and their validation reports. */
#ifndef TACO_JOB_DATA_H
#define TACO_JOB_DATA_H

#include "data.h"
#include "dataset.h"
#include "job/job.h"
#include "mc.h"
#include "tokenizer/tokenizer.h"

typedef struct taco_job_data {
	taco_tok *tok; /* NULL when the model has no tokenizer */
	taco_data *train, *val;
	taco_mc_set *mc;
	taco_dataset_report train_report, val_report;
	int have_reports;
} taco_job_data;

/* Loads everything the job names. With a tokenizer in the model directory
 * (tokenizer.json, or GPT-2 style vocab.json and merges.txt: see
 * taco_tok_load) every format of docs/datasets.md is read; without one
 * only pre-tokenized lines. Token ids must fit the model's vocab. On a data
 * error the reports say what is wrong, line by line. */
int taco_job_data_load(const taco_job *job, int vocab, taco_job_data *out,
		       taco_err *err);
/* The same against the vocabulary of the model's config.json: what tacod
 * checks before it queues a job, without loading the weights. */
int taco_job_data_check(const taco_job *job, taco_job_data *out, taco_err *err);
void taco_job_data_free(taco_job_data *d);

#endif
