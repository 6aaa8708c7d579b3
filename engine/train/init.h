/* init.h: models of real shapes with random weights, for benchmarks, the
 * GPU checks and tests. Here, beside training, because it fills weights
 * with the OpenMP thread pool that only the training side links. */
#ifndef TACO_INIT_H
#define TACO_INIT_H

#include <stdint.h>

#include "model/model.h"
#include "util/taco_err.h"

/* A model of the config's shapes with deterministic random weights (normal
 * std 0.02, norms 1, biases 0). Made on the host a chunk at a time and
 * uploaded: host memory stays a few tens of MB at any model size. */
int taco_model_init_random(const taco_config *cfg, const tk_ops *ops, int dtype,
			   uint64_t seed, taco_model **out, taco_err *err);
/* The same with the schedule sched set first (NULL: the defaults), so that
 * streamed layers' weights are made in host memory. */
int taco_model_init_random_sched(const taco_config *cfg, const tk_ops *ops,
				 int dtype, uint64_t seed,
				 const taco_step_opts *sched, taco_model **out,
				 taco_err *err);

#endif
