/* runner/scheduler.h: which queued jobs start now, on one GPU. A job starts when its
 * memory plan fits next to the running jobs' plans. The queue is FIFO; a
 * later, smaller job may start past a head that does not fit (backfill),
 * but each time it does the head counts a skip, and after max_skips no job
 * passes the head until it has started: the head cannot starve. */
#ifndef TACOD_SCHEDULER_H
#define TACOD_SCHEDULER_H

#include <stdint.h>

typedef struct tacod_sched_job {
	uint64_t planned; /* bytes */
	int skips;	  /* times a later job started first (updated) */
} tacod_sched_job;

typedef struct tacod_sched_state {
	uint64_t budget;	/* device memory for all jobs together */
	uint64_t running_bytes; /* planned bytes of the running jobs */
	int running, max_running;
	int max_skips;
} tacod_sched_state;

/* queue[0..n) in FIFO order. Writes the indexes of the jobs to start, in
 * order, to start[] (capacity n) and returns how many; updates skips and
 * the state as if they had started. */
int tacod_sched_pick(tacod_sched_state *st, tacod_sched_job *queue, int n,
		     int *start);

/* 1 when a job of this plan can never run on the device. */
int tacod_sched_never_fits(const tacod_sched_state *st, uint64_t planned);

#endif
