/* launch.h: taco-train starting a job's ranks under mpirun, or srun inside
 * a Slurm allocation (launch.c). */
#ifndef TACO_LAUNCH_H
#define TACO_LAUNCH_H

#include <signal.h>

/* Runs `mpirun -np n <this program> --events-file FIFO rank_args...` (or
 * `srun --ntasks=n ...` in a Slurm allocation of n tasks or more)
 * (rank_args: NULL-terminated, at most 64) and relays rank 0's events to
 * events_fd (-1: none) until mpirun ends; *stop (set by the caller's
 * signal handler) is forwarded to the ranks once. Returns the exit status
 * for taco-train: 0, 3 (stopped after a checkpoint) or 1; when a rank or
 * mpirun died of a signal, the launcher dies of it too. */
int taco_launch_ranks(int n, char *const *rank_args, int events_fd,
		      const volatile sig_atomic_t *stop);

#endif
