/* job_opts.c: the defaults of the option types a job carries. */
#include "job_opts.h"

#include <string.h>

void taco_optim_defaults(taco_optim_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->k = 16;
	o->beta = 0.9f;
	o->weight_decay = 0.0f;
	o->stochastic = 1;
	o->adam_beta1 = 0.9f;
	o->adam_beta2 = 0.999f;
	o->adam_eps = 1e-8f;
	o->adam_weight_decay = 0.0f;
}
