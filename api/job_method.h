/* job_method.h: a create request's training method and hyperparameters,
 * OpenAI's method ({"type": "supervised" | "dpo", "supervised" | "dpo":
 * {"hyperparameters": {...}}}) and the deprecated top-level hyperparameters,
 * read one way for the job file (job_request.c) and for the job object's
 * echo of them. */
#ifndef TACOD_JOB_METHOD_H
#define TACOD_JOB_METHOD_H

#include <jansson.h>

#include "job_request.h"

/* What a request runs with, "auto" and absent resolved. */
typedef struct tacod_request_hp {
	int method; /* enum taco_method */
	json_int_t epochs;
	json_int_t batch; /* sequences; pairs for dpo */
	double mult;	  /* learning_rate_multiplier */
	double beta;	  /* dpo */
} tacod_request_hp;

/* Reads req's method and hyperparameters into *hp (over tacod's defaults):
 * 0, or -EINVAL with e naming the field. */
int tacod_request_method(json_t *req, tacod_request_hp *hp,
			 tacod_request_error *e);

/* Fills e (param, code, the message) and returns -EINVAL. */
int tacod_request_fail(tacod_request_error *e, const char *param,
		       const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
