/* dist.h: data parallel (job option gpus, docs/multi-gpu.md): the ranks'
 * slices of each global batch, and their gradients summed before the
 * optimizer takes them. TACO's state is small enough for every rank to
 * keep all of it, so nothing is sharded: given the same summed gradients
 * every rank computes the same update, and the weights stay bit-identical
 * without being sent (checked at every checkpoint). */
#ifndef TACO_DIST_H
#define TACO_DIST_H

#include <stdint.h>

#include "job/job.h"
#include "model/model.h"
#include "tk_comm.h"
#include "tk_ops.h"
#include "util/taco_err.h"

/* A step's collectives wait this long at most for the slowest rank; the
 * waits for rank 0's checkpoint or export, TACO_DIST_LONG_S. */
#define TACO_DIST_TIMEOUT_S 600.0
#define TACO_DIST_LONG_S (6 * 3600.0)

typedef struct taco_dist {
	tk_comm *comm; /* NULL until open */
	/* the CUDA backend's: gradient sums in device memory (NCCL), made
	 * over comm; NULL: comm sums host memory (the CPU backend) */
	tk_comm *dev;
	int rank, size;
	/* one rank through NCCL (TACO_NCCL_ONE_RANK=1, tests/gpu/run.sh):
	 * a comm block of its own, as its step buffers have none */
	const tk_ops *ops;
	float *own;
	size_t own_cap;
	/* the sink the summed parts go on to */
	const taco_grad_sink *inner;
	taco_grad_sink sink;
	double comm_s; /* seconds in the step's sums so far (bench/) */
} taco_dist;

/* Joins the job's ranks: job->gpus of them, as the launcher started this
 * process (tk_comm_world); one rank, without any MPI, for gpus 1. */
int taco_dist_open(taco_dist *d, const taco_job *job, taco_err *err);
void taco_dist_close(taco_dist *d);

/* The CUDA backend (ops, open): the gradients' sums over NCCL in device
 * memory, the NCCL id passed over the host comm. Nothing with one rank,
 * unless TACO_NCCL_ONE_RANK=1 asks for NCCL anyway: the check on a
 * machine of one GPU that the NCCL path gives the bits of the plain one. */
int taco_dist_open_device(taco_dist *d, const tk_ops *ops, taco_err *err);

/* The sink that sums each gradient part over the ranks, then hands it to
 * inner (part mode). */
const taco_grad_sink *taco_dist_sink(taco_dist *d, const taco_grad_sink *inner);

/* Sums n values over the ranks (the step's loss and counts, a stop
 * flag), or whole fp32 buffers (dense mode). */
int taco_dist_sum(taco_dist *d, double *v, int n, taco_err *err);
int taco_dist_sum_f32(taco_dist *d, float *buf, size_t n, taco_err *err);

/* Every rank's weights against rank 0's, by a digest of their bytes:
 * -EIO naming the first rank that differs (the ranks have diverged: a
 * bug, or a faulty GPU). */
int taco_dist_check_weights(taco_dist *d, const taco_model *m, int64_t step,
			    taco_err *err);

/* All ranks here, within timeout_s (rank 0 has written a checkpoint). */
int taco_dist_barrier(taco_dist *d, double timeout_s, taco_err *err);

#endif
