#include "daemon/runner/scheduler.h"

int tacod_sched_never_fits(const tacod_sched_state *st, uint64_t planned)
{
	return planned > st->budget;
}

static int sched_fits(const tacod_sched_state *st, uint64_t planned)
{
	return st->running < st->max_running &&
	       planned <= st->budget - st->running_bytes;
}

int tacod_sched_pick(tacod_sched_state *st, tacod_sched_job *queue, int n,
		     int *start)
{
	int k = 0, head = -1;

	if (st->running_bytes > st->budget)
		return 0;
	for (int i = 0; i < n; i++) {
		if (sched_fits(st, queue[i].planned)) {
			if (head >= 0) {
				/* backfill past the head, a bounded number
				 * of times */
				if (queue[head].skips >= st->max_skips)
					break;
				queue[head].skips++;
			}
			start[k++] = i;
			st->running++;
			st->running_bytes += queue[i].planned;
		} else if (head < 0) {
			head = i;
			if (queue[head].skips >= st->max_skips)
				break;
		}
	}
	return k;
}
