/* job_export.h: what a job's model output holds beside its weights. */
#ifndef TACO_JOB_EXPORT_H
#define TACO_JOB_EXPORT_H

/* The files of the base model directory that a job's exported model
 * (OUTPUT_DIR/model/, docs/job.md) carries over when present, and so does
 * a checkpoint's download from tacod: config, tokenizer, generation and
 * chat template files. NULL terminated. Here, in the job's leaf library,
 * so that tacod lists them without engine/model. */
extern const char *const taco_job_export_files[];

#endif
