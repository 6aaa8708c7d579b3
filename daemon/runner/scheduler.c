/* runner/scheduler.c: see scheduler.h. */
#include "daemon/runner/scheduler.h"

static int job_gpus(const tacod_sched_job *j)
{
	return j->gpus > 0 ? j->gpus : 1;
}

/* The devices of st that could hold planned when empty, as a mask. */
static uint32_t could_hold(const tacod_sched_state *st, uint64_t planned)
{
	uint32_t m = 0;

	for (int d = 0; d < st->n_dev; d++)
		if (planned <= st->dev[d].budget)
			m |= 1u << d;
	return m;
}

int tacod_sched_never_fits(const tacod_sched_state *st, uint64_t planned,
			   int gpus)
{
	uint32_t m = could_hold(st, planned);
	int n = 0;

	for (; m; m &= m - 1)
		n++;
	return n < (gpus > 0 ? gpus : 1);
}

static uint64_t room(const tacod_sched_device *d)
{
	return d->running_bytes > d->budget ? 0 : d->budget - d->running_bytes;
}

/* The gpus devices of `allowed` with planned bytes of room and the least
 * room (ties: the lower index), as a mask; 0 when fewer fit. */
static uint32_t place(const tacod_sched_state *st, uint64_t planned, int gpus,
		      uint32_t allowed)
{
	uint32_t taken = 0;

	for (int g = 0; g < gpus; g++) {
		int best = -1;
		for (int d = 0; d < st->n_dev; d++) {
			if (!(allowed & (1u << d)) || (taken & (1u << d)) ||
			    room(&st->dev[d]) < planned)
				continue;
			if (best < 0 ||
			    room(&st->dev[d]) < room(&st->dev[best]))
				best = d;
		}
		if (best < 0)
			return 0;
		taken |= 1u << best;
	}
	return taken;
}

int tacod_sched_pick(tacod_sched_state *st, tacod_sched_job *queue, int n,
		     int *start, uint32_t *devices)
{
	uint32_t all = st->n_dev >= 32 ? ~0u : (1u << st->n_dev) - 1;
	uint32_t allowed = all, head_devs = 0;
	int k = 0, head = -1;

	for (int i = 0; i < n && st->running < st->max_running; i++) {
		tacod_sched_job *j = &queue[i];
		uint32_t got = place(st, j->planned, job_gpus(j), allowed);

		if (!got) {
			if (head >= 0)
				continue;
			/* the head: the devices it could ever use are held
			 * for it once it has been passed max_skips times */
			head = i;
			head_devs = could_hold(st, j->planned);
			if (j->skips >= st->max_skips)
				allowed &= ~head_devs;
			continue;
		}
		if (head >= 0 && (got & head_devs)) {
			queue[head].skips++;
			if (queue[head].skips >= st->max_skips)
				allowed &= ~head_devs;
		}
		start[k] = i;
		devices[k++] = got;
		st->running++;
		for (int d = 0; d < st->n_dev; d++)
			if (got & (1u << d)) {
				st->dev[d].running++;
				st->dev[d].running_bytes += j->planned;
			}
	}
	return k;
}
