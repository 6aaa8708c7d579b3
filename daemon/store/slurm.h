/* store/slurm.h: the Slurm batch job behind each tacod job that runs on a
 * Slurm cluster (scheduler "slurm", docs/slurm.md): its Slurm job id and
 * how far tacod has read its events file. The row lives from the
 * submission to the job's end, so a restarted tacod finds its Slurm jobs
 * again and reads each events file on from where it stopped. */
#ifndef TACOD_STORE_SLURM_H
#define TACOD_STORE_SLURM_H

#include <stdint.h>

#include "daemon/store/store.h"

typedef struct tacod_slurm_row {
	char job_id[TACOD_ID_MAX];
	int64_t slurm_id;      /* 0: sbatch has not answered yet */
	int64_t events_offset; /* bytes of the events file consumed */
	int64_t submitted_at;  /* unix seconds */
} tacod_slurm_row;

/* Adds the row or replaces the job's row (a resubmission). */
int tacod_store_slurm_put(tacod_store *s, const tacod_slurm_row *r,
			  taco_err *err);
/* -ENOENT when the job has none. */
int tacod_store_slurm_get(tacod_store *s, const char *job_id,
			  tacod_slurm_row *out, taco_err *err);
/* Every row, oldest submission first, at most cap. */
int tacod_store_slurm_list(tacod_store *s, tacod_slurm_row *out, int cap,
			   int *n, taco_err *err);
/* Sets the offset (called inside the transaction that adds the events the
 * bytes held, so a crash neither loses nor repeats one). */
int tacod_store_slurm_offset(tacod_store *s, const char *job_id,
			     int64_t events_offset, taco_err *err);
int tacod_store_slurm_delete(tacod_store *s, const char *job_id, taco_err *err);

#endif
