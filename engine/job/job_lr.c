/* job_lr.c: the auto learning rate, by method, optimizer and model width.
 *
 * Two anchors per method and optimizer (docs/taco.md, "Learning rates"):
 * the best rate of bench/quality's sweeps on models of width 64 and 256,
 * where it did not move with the width, and a rate for models of width
 * 2048 and more, where AdamW's is the one full fine-tunes of billion-
 * parameter models use and TACO's keeps the ratio to AdamW's measured on
 * the small models. Between the two widths the rate is interpolated
 * geometrically; outside them it stays at the nearer anchor. */
#include <float.h>
#include <math.h>

#include "job.h"

enum { SMALL_WIDTH = 256, LARGE_WIDTH = 2048 };

/* [method][optimizer: 0 taco, 1 adamw] */
static const double small_lr[2][2] = {
    [TACO_METHOD_SFT] = {1e-2, 3e-3},
    [TACO_METHOD_DPO] = {3e-5, 1e-5},
};
static const double large_lr[2][2] = {
    [TACO_METHOD_SFT] = {3e-5, 1e-5},
    [TACO_METHOD_DPO] = {3e-6, 1e-6},
};

double taco_job_lr_auto(const taco_job *job, int hidden)
{
	int m = job->method == TACO_METHOD_DPO, o = job->optim.all_adamw != 0;
	double lo = small_lr[m][o], hi = large_lr[m][o], t;

	if (hidden <= SMALL_WIDTH)
		return lo;
	if (hidden >= LARGE_WIDTH)
		return hi;
	t = log((double)hidden / SMALL_WIDTH) /
	    log((double)LARGE_WIDTH / SMALL_WIDTH);
	return lo * pow(hi / lo, t);
}

int taco_job_resolve_lr(taco_job *job, int hidden)
{
	if (job->lr != 0)
		return 0;
	/* a positive multiplier is a positive rate: a tiny one's product
	 * would underflow to 0, no rate at all */
	job->lr =
	    fmax(taco_job_lr_auto(job, hidden) * job->lr_multiplier, DBL_MIN);
	return 1;
}
