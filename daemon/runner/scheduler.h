/* runner/scheduler.h: which queued jobs start now, and on which GPUs. A
 * job needs `gpus` devices (1 unless it is a data-parallel job) with its
 * per-GPU memory plan free on each, beside the jobs already running there;
 * it takes them all at once or none. Among the devices that fit, the ones
 * with the least room left are taken (best fit: the big free devices stay
 * free for the big jobs).
 *
 * The queue is FIFO. A later job may start past a head that does not fit
 * (backfill), and each time it takes a device the head could run on, the
 * head counts a skip; after max_skips no later job takes such a device
 * until the head has started, so the head cannot starve. A job on a device
 * the head can never use (too small for its plan) does not delay it and
 * counts nothing: FIFO and backfill hold per device. With one device this
 * is the single-GPU rule: past max_skips nothing passes the head. */
#ifndef TACOD_SCHEDULER_H
#define TACOD_SCHEDULER_H

#include <stdint.h>

#define TACOD_SCHED_DEVICES_MAX 32 /* devices of one tacod: a mask's bits */

typedef struct tacod_sched_job {
	uint64_t planned; /* bytes on each of its GPUs */
	int gpus;	  /* devices it needs at once (0 counts as 1) */
	int skips;	  /* times a later job started first (updated) */
} tacod_sched_job;

typedef struct tacod_sched_device {
	uint64_t budget;	/* memory for all its jobs together */
	uint64_t running_bytes; /* planned bytes of the jobs on it */
	int running;		/* jobs on it */
} tacod_sched_device;

typedef struct tacod_sched_state {
	tacod_sched_device dev[TACOD_SCHED_DEVICES_MAX];
	int n_dev;
	int running, max_running; /* jobs, over every device */
	int max_skips;
} tacod_sched_state;

/* queue[0..n) in FIFO order. Writes the indexes of the jobs to start, in
 * order, to start[] and the devices each takes (a bit per device index)
 * to devices[] (capacity n each) and returns how many; updates skips and
 * the state as if they had started. */
int tacod_sched_pick(tacod_sched_state *st, tacod_sched_job *queue, int n,
		     int *start, uint32_t *devices);

/* 1 when a job of this plan can never run: fewer than gpus devices have
 * a budget of planned bytes. */
int tacod_sched_never_fits(const tacod_sched_state *st, uint64_t planned,
			   int gpus);

#endif
