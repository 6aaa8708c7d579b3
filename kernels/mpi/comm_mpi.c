/* comm_mpi.c: libtaco_mpi.so, the MPI comm of tk_comm.h (Open MPI 4.1,
 * Debian's openmpi-bin): the collectives of a data-parallel job on the CPU
 * backend. Loaded on demand by comm_loader.c, so that only a job of
 * several ranks needs libmpi.
 *
 * A sum is a reduce-scatter and an all-gather, by hand: rank r receives
 * every rank's r-th chunk (MPI_Ialltoallv), adds them in rank order, and
 * the chunks go back to every rank (MPI_Iallgatherv). MPI_Allreduce would
 * be shorter, but the standard lets its order of additions differ from
 * rank to rank, and then so would the ranks' weights.
 *
 * Every collective is non-blocking, waited for by polling against the
 * comm's timeout: a rank that died, or hangs, gives -ETIMEDOUT instead of
 * a process waiting forever (mpirun also ends the job when a rank dies). */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tk_comm.h"
#include "tk_why.h"

#define EXPORT __attribute__((visibility("default")))

/* Elements of one collective call at most (MPI counts are int). */
#define SEGMENT ((size_t)1 << 28)

typedef struct mpi_comm {
	tk_comm c;
	void *scratch; /* [size * chunk] received chunks */
	size_t scratch_bytes;
	int *counts, *displs, *rcounts, *rdispls; /* [size] each */
} mpi_comm;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Polls rq until done or timeout_s passed; backs off from 2 us to 1 ms, so
 * that a short collective is not slowed and a long wait costs no core. */
static int wait_for(MPI_Request *rq, double timeout_s)
{
	double t0 = now();
	long ns = 2000;

	for (;;) {
		int done = 0;
		if (MPI_Test(rq, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
			return -EIO;
		if (done)
			return 0;
		if (now() - t0 > timeout_s)
			return -ETIMEDOUT;
		nanosleep(&(struct timespec){0, ns}, NULL);
		if (ns < 1000000)
			ns *= 2;
	}
}

static int grow(mpi_comm *m, size_t bytes)
{
	void *p;

	if (bytes <= m->scratch_bytes)
		return 0;
	if (!(p = realloc(m->scratch, bytes)))
		return -ENOMEM;
	m->scratch = p;
	m->scratch_bytes = bytes;
	return 0;
}

/* buf[n] of one segment summed in rank order, elements of es bytes of type
 * t; add(dst, src, k) adds k of them. */
static int sum_segment(mpi_comm *m, void *buf, size_t n, size_t es,
		       MPI_Datatype t,
		       void (*add)(void *, const void *, size_t))
{
	int R = m->c.size, me = m->c.rank, r;
	size_t mine = n * (size_t)(me + 1) / R - n * (size_t)me / R;
	char *s;
	MPI_Request rq;

	if ((r = grow(m, (size_t)R * mine * es + es)))
		return r;
	for (int k = 0; k < R; k++) {
		m->displs[k] = (int)(n * (size_t)k / R);
		m->counts[k] = (int)(n * (size_t)(k + 1) / R) - m->displs[k];
		m->rcounts[k] = (int)mine;
		m->rdispls[k] = (int)(mine * (size_t)k);
	}
	if (MPI_Ialltoallv(buf, m->counts, m->displs, t, m->scratch, m->rcounts,
			   m->rdispls, t, MPI_COMM_WORLD, &rq) != MPI_SUCCESS)
		return -EIO;
	if ((r = wait_for(&rq, m->c.timeout_s)))
		return r;
	s = m->scratch;
	for (int k = 1; k < R; k++)
		add(s, s + (size_t)k * mine * es, mine);
	memcpy((char *)buf + (size_t)m->displs[me] * es, s, mine * es);
	if (MPI_Iallgatherv(MPI_IN_PLACE, 0, t, buf, m->counts, m->displs, t,
			    MPI_COMM_WORLD, &rq) != MPI_SUCCESS)
		return -EIO;
	return wait_for(&rq, m->c.timeout_s);
}

static void add_f32(void *d, const void *s, size_t k)
{
	float *a = d;
	const float *b = s;

	for (size_t i = 0; i < k; i++)
		a[i] += b[i];
}

static void add_f64(void *d, const void *s, size_t k)
{
	double *a = d;
	const double *b = s;

	for (size_t i = 0; i < k; i++)
		a[i] += b[i];
}

static int sum_any(tk_comm *c, void *buf, size_t n, size_t es, MPI_Datatype t,
		   void (*add)(void *, const void *, size_t))
{
	mpi_comm *m = c->impl;
	int r = 0;

	for (size_t at = 0; at < n && !r; at += SEGMENT)
		r = sum_segment(m, (char *)buf + at * es,
				n - at < SEGMENT ? n - at : SEGMENT, es, t,
				add);
	return r;
}

static int sum_f32(tk_comm *c, float *buf, size_t n)
{
	return sum_any(c, buf, n, sizeof(float), MPI_FLOAT, add_f32);
}

static int sum_f64(tk_comm *c, double *buf, size_t n)
{
	return sum_any(c, buf, n, sizeof(double), MPI_DOUBLE, add_f64);
}

static int bcast(tk_comm *c, void *buf, size_t bytes)
{
	MPI_Request rq;
	int r = 0;

	for (size_t at = 0; at < bytes && !r; at += SEGMENT) {
		size_t k = bytes - at < SEGMENT ? bytes - at : SEGMENT;
		if (MPI_Ibcast((char *)buf + at, (int)k, MPI_BYTE, 0,
			       MPI_COMM_WORLD, &rq) != MPI_SUCCESS)
			return -EIO;
		r = wait_for(&rq, c->timeout_s);
	}
	return r;
}

static int gather_u64(tk_comm *c, uint64_t mine, uint64_t *all)
{
	MPI_Request rq;

	if (MPI_Iallgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T,
			   MPI_COMM_WORLD, &rq) != MPI_SUCCESS)
		return -EIO;
	return wait_for(&rq, c->timeout_s);
}

static int barrier(tk_comm *c, double timeout_s)
{
	MPI_Request rq;

	(void)c;
	if (MPI_Ibarrier(MPI_COMM_WORLD, &rq) != MPI_SUCCESS)
		return -EIO;
	return wait_for(&rq, timeout_s);
}

static void comm_abort(tk_comm *c, int code)
{
	(void)c;
	MPI_Abort(MPI_COMM_WORLD, code);
}

static void comm_close(tk_comm *c)
{
	mpi_comm *m = c->impl;

	MPI_Finalize();
	free(m->scratch);
	free(m->counts);
	free(m);
}

EXPORT int tk_mpi_module_open(double timeout_s, tk_comm **out, char *why,
			      size_t why_len)
{
	mpi_comm *m = calloc(1, sizeof(*m));
	int provided = 0, rank = 0, size = 0;

	if (!m)
		return -ENOMEM;
	/* Open MPI's own plugins resolve libmpi's symbols globally: this
	 * module was loaded RTLD_LOCAL, so make libmpi global first. */
	(void)dlopen("libmpi.so.40", RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
	/* the trainer calls MPI from its main thread only (OpenMP threads
	 * work between the calls) */
	if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) !=
		MPI_SUCCESS ||
	    MPI_Comm_rank(MPI_COMM_WORLD, &rank) != MPI_SUCCESS ||
	    MPI_Comm_size(MPI_COMM_WORLD, &size) != MPI_SUCCESS) {
		tk_why(why, why_len, "MPI_Init failed");
		free(m);
		return -EIO;
	}
	/* one allocation for the four count arrays */
	if (!(m->counts = calloc((size_t)size * 4, sizeof(int)))) {
		MPI_Finalize();
		free(m);
		return -ENOMEM;
	}
	m->displs = m->counts + size;
	m->rcounts = m->counts + 2 * size;
	m->rdispls = m->counts + 3 * size;
	m->c = (tk_comm){.rank = rank,
			 .size = size,
			 .timeout_s = timeout_s,
			 .sum_f32 = sum_f32,
			 .sum_f64 = sum_f64,
			 .bcast = bcast,
			 .gather_u64 = gather_u64,
			 .barrier = barrier,
			 .abort = comm_abort,
			 .close = comm_close,
			 .impl = m};
	*out = &m->c;
	return 0;
}
