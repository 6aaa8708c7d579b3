/* job_schema.h: the options of the job file (docs/job.md), each written once:
 * its name, who sets it when tacod writes the file for an API request, its
 * type and limits, and where its value goes in taco_job. taco_job_parse
 * reads a job file by these rows (any other option is a problem), and
 * api/job_request.c lets a request's "taco" object set the options whose
 * setter is TACO_JOB_BY_REQUEST. */
#ifndef TACO_JOB_SCHEMA_H
#define TACO_JOB_SCHEMA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "job.h"

/* Who sets an option when tacod writes the job file of an API request. */
enum taco_job_setter {
	/* tacod: the paths, and the options the request's OpenAI fields map
	 * to (n_epochs, batch_size, seed, method, dpo.beta); the rest keep
	 * their defaults */
	TACO_JOB_BY_DAEMON = 0,
	/* the client, in the request's "taco" object */
	TACO_JOB_BY_REQUEST,
};

enum taco_job_type {
	TACO_JOB_PATH,	   /* char[TACO_PATH_MAX], relative to the file's dir */
	TACO_JOB_INT,	   /* int: an integer in [imin, imax] */
	TACO_JOB_I64,	   /* int64_t: likewise */
	TACO_JOB_U64,	   /* uint64_t: likewise */
	TACO_JOB_NUM,	   /* double: a number in [min, max], (min, max] with
			    * open_min */
	TACO_JOB_FLOAT,	   /* float: likewise */
	TACO_JOB_BOOL,	   /* int: true or false */
	TACO_JOB_ENUM,	   /* int: the index of one of names */
	TACO_JOB_ENUM_SET, /* unsigned: a list of names, bit i for names[i] */
	TACO_JOB_OBJECT,   /* an object of the options in fields */
	TACO_JOB_PREFIXES, /* freeze: at most TACO_JOB_MAX_FREEZE tensor-name
			    * prefixes into n_freeze and freeze */
	TACO_JOB_TEXT,	   /* char *, malloc'd: a string of at most imax
			    * bytes */
	TACO_JOB_JSON,	   /* char *, malloc'd: an object, as compact JSON
			    * text of at most imax bytes */
};

typedef struct taco_job_key taco_job_key;

struct taco_job_key {
	const char *name;
	int setter;		    /* enum taco_job_setter */
	int type;		    /* enum taco_job_type */
	size_t offset;		    /* of the value in taco_job */
	int required;		    /* PATH: absent is a problem */
	int64_t imin, imax;	    /* INT, I64, U64 */
	double min, max;	    /* NUM, FLOAT */
	int open_min;		    /* NUM, FLOAT: min itself is outside */
	int or_auto;		    /* NUM, FLOAT: "auto" keeps the default */
	const char *const *names;   /* ENUM: NULL-terminated, enum order */
	const taco_job_key *fields; /* OBJECT: its options, NULL-ended */
	/* A check across options, run right after this one is read (the
	 * problems come in the order of the rows). */
	void (*then)(json_t *obj, taco_job *job, taco_job_problems *p);
};

/* The options of a job file in the order they are read, ended by a row
 * with a NULL name. */
extern const taco_job_key taco_job_keys[];

/* The option of the job file called name, or NULL when there is none. */
const taco_job_key *taco_job_key_find(const char *name);

/* Reads the options of the object root into job (over its defaults),
 * adding a problem to p for each bad or unknown one. dir resolves relative
 * paths (NULL: as given). */
void taco_job_read(json_t *root, const char *dir, taco_job *job,
		   taco_job_problems *p);

/* Adds a problem to p (counted, and kept while there is room). */
void taco_job_problem(taco_job_problems *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
