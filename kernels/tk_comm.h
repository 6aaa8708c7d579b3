/* tk_comm.h: the collectives of a data-parallel job (job option gpus,
 * docs/multi-gpu.md): N ranks, each a process with a full replica of the
 * model, that sum their gradients. Two implementations behind one table:
 * the one rank of a plain run (every sum is the identity), and MPI
 * (libtaco_mpi.so, loaded on demand like the CUDA backend, so that no
 * program NEEDs libmpi), for the CPU backend. And a device comm for the
 * CUDA backend (NCCL, in libtaco_cuda.so: tk_cuda_comm_open in tk_ops.h),
 * which sums the gradients where they are, in device memory; the host
 * comm beside it does the rest.
 *
 * Every sum adds the ranks' values in rank order, (r0 + r1) + r2 ...,
 * element by element, and gives every rank the same bits: the ranks then
 * compute the same update, so their weights stay bit-identical without
 * ever being sent. Every collective is bounded by the comm's timeout: a
 * rank that stops answering aborts the whole job (MPI_Abort) instead of
 * hanging it. Every call is a collective: all ranks make the same calls in
 * the same order. 0 or a negative errno. */
#ifndef TK_COMM_H
#define TK_COMM_H

#include <stddef.h>
#include <stdint.h>

typedef struct tk_comm tk_comm;

struct tk_comm {
	int rank, size;
	double timeout_s; /* each collective's bound, set by tk_comm_open */
	/* device memory the comm holds itself (NCCL's buffers), measured
	 * when it was made; 0 for host comms */
	size_t device_bytes;
	/* buf[n] (host memory; a device comm's: device memory, queued on
	 * the backend's stream) summed over the ranks into buf on each */
	int (*sum_f32)(tk_comm *c, float *buf, size_t n);
	/* A device comm's (NULL in a host comm): rows x cols of g, rows ld
	 * apart, into out[rows * cols] summed over the ranks, queued on the
	 * backend's current stream; g and out in device memory. */
	int (*sum_rows_f32)(tk_comm *c, const float *g, int ld, int rows,
			    int cols, float *out);
	int (*sum_f64)(tk_comm *c, double *buf, size_t n);
	/* bytes of rank 0's buf into every rank's */
	int (*bcast)(tk_comm *c, void *buf, size_t bytes);
	/* each rank's 8 bytes into all[size], in rank order */
	int (*gather_u64)(tk_comm *c, uint64_t mine, uint64_t *all);
	/* every rank here, bounded by timeout_s (rank 0's checkpoint, say) */
	int (*barrier)(tk_comm *c, double timeout_s);
	/* ends every rank with status code (a rank that failed alone) */
	void (*abort)(tk_comm *c, int code);
	void (*close)(tk_comm *c);
	void *impl;
};

/* How many ranks the launcher started this process among (mpirun's or
 * srun's environment), and this one's rank: 1 and 0 for a plain run. */
int tk_comm_world(int *rank);

/* This rank's index among the ranks on its machine (mpirun's or srun's
 * environment), or -1. */
int tk_comm_local_rank(void);

/* The GPU a rank of several uses, as CUDA_VISIBLE_DEVICES for it alone:
 * the local_rank-th of visible (the job's GPUs, as tacod or a user pinned
 * them; NULL: every GPU, so number local_rank), or visible itself when it
 * names one (srun gives each task its own). -ERANGE: fewer GPUs than
 * local ranks; -EINVAL: local_rank unknown (-1) with several GPUs. */
int tk_comm_rank_gpu(const char *visible, int local_rank, char *out,
		     size_t cap);

/* The comm of this process: the one-rank comm when tk_comm_world says 1,
 * else MPI's (-ENOSYS: built without MPI; -ENODEV: libtaco_mpi.so or
 * libmpi missing, why says which; -EIO: MPI_Init failed). */
int tk_comm_open(double timeout_s, tk_comm **out, char *why, size_t why_len);

#endif
