/* comm_loader.c: tk_comm_world and tk_comm_open (tk_comm.h): the one-rank
 * comm of a plain run, built in, or the MPI comm of libtaco_mpi.so,
 * loaded on demand (tk_module.h: $TACO_MPI_COMM, beside the program, the
 * installed module directory). */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tk_comm.h"
#include "tk_module.h"
#include "tk_why.h"

typedef int (*mpi_open_fn)(double timeout_s, tk_comm **out, char *why,
			   size_t why_len);

/* A non-negative integer environment variable, else -1. */
static int env_int(const char *name)
{
	const char *v = getenv(name);
	char *end;
	long x;

	if (!v || !v[0])
		return -1;
	x = strtol(v, &end, 10);
	return *end || x < 0 || x > 1 << 20 ? -1 : (int)x;
}

int tk_comm_world(int *rank)
{
	int size = env_int("OMPI_COMM_WORLD_SIZE");
	int r = env_int("OMPI_COMM_WORLD_RANK");

	/* mpirun's; srun's (PMIx) for a step of several tasks */
	if (size < 1 || r < 0) {
		size = env_int("SLURM_STEP_NUM_TASKS");
		r = env_int("PMIX_RANK");
	}
	if (size < 1 || r < 0 || r >= size) {
		*rank = 0;
		return 1;
	}
	*rank = r;
	return size;
}

int tk_comm_local_rank(void)
{
	int r = env_int("OMPI_COMM_WORLD_LOCAL_RANK");

	return r >= 0 ? r : env_int("SLURM_LOCALID");
}

int tk_comm_rank_gpu(const char *visible, int local_rank, char *out, size_t cap)
{
	const char *p = visible;
	int n = 1, k = 0;
	size_t len;

	if (!visible) {
		if (local_rank < 0)
			return -EINVAL;
		return snprintf(out, cap, "%d", local_rank) < (int)cap
			   ? 0
			   : -ENAMETOOLONG;
	}
	for (const char *c = visible; *c; c++)
		n += *c == ',';
	if (n > 1 && local_rank < 0)
		return -EINVAL;
	if (n > 1 && local_rank >= n)
		return -ERANGE;
	/* the entry: the whole list when it has one */
	for (; n > 1 && k < local_rank; k++)
		p = strchr(p, ',') + 1;
	len =
	    n > 1 && strchr(p, ',') ? (size_t)(strchr(p, ',') - p) : strlen(p);
	if (len + 1 > cap)
		return -ENAMETOOLONG;
	memcpy(out, p, len);
	out[len] = 0;
	return 0;
}

/* ---- one rank ---------------------------------------------------------- */

static int one_sum_f32(tk_comm *c, float *buf, size_t n)
{
	(void)c, (void)buf, (void)n;
	return 0;
}

static int one_sum_f64(tk_comm *c, double *buf, size_t n)
{
	(void)c, (void)buf, (void)n;
	return 0;
}

static int one_bcast(tk_comm *c, void *buf, size_t bytes)
{
	(void)c, (void)buf, (void)bytes;
	return 0;
}

static int one_gather_u64(tk_comm *c, uint64_t mine, uint64_t *all)
{
	(void)c;
	all[0] = mine;
	return 0;
}

static int one_barrier(tk_comm *c, double timeout_s)
{
	(void)c, (void)timeout_s;
	return 0;
}

static void one_abort(tk_comm *c, int code)
{
	(void)c;
	exit(code);
}

static void one_close(tk_comm *c)
{
	free(c);
}

static int open_one(double timeout_s, tk_comm **out)
{
	tk_comm *c = malloc(sizeof(*c));

	if (!c)
		return -ENOMEM;
	*c = (tk_comm){.rank = 0,
		       .size = 1,
		       .timeout_s = timeout_s,
		       .sum_f32 = one_sum_f32,
		       .sum_f64 = one_sum_f64,
		       .bcast = one_bcast,
		       .gather_u64 = one_gather_u64,
		       .barrier = one_barrier,
		       .abort = one_abort,
		       .close = one_close};
	*out = c;
	return 0;
}

int tk_comm_open(double timeout_s, tk_comm **out, char *why, size_t why_len)
{
	mpi_open_fn f;
	void *h;
	int rank;

	if (tk_comm_world(&rank) == 1)
		return open_one(timeout_s, out);
#ifdef TK_MPI_BUILT
	/* once a process: MPI_Init may not run twice */
	if (!(h = tk_module_load("TACO_MPI_COMM", "libtaco_mpi.so", "MPI comm",
				 why, why_len)))
		return -ENODEV;
	if (!(f = (mpi_open_fn)dlsym(h, "tk_mpi_module_open"))) {
		tk_why(why, why_len,
		       "libtaco_mpi.so: not a tacod MPI comm (no entry point)");
		return -ENODEV;
	}
	return f(timeout_s, out, why, why_len);
#else
	(void)f, (void)h;
	tk_why(why, why_len, "built without MPI (libopenmpi-dev)");
	return -ENOSYS;
#endif
}
