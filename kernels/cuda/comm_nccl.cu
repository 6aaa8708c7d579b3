/* comm_nccl.cu: the device comm of tk_comm.h for the CUDA backend: the
 * gradients of a data-parallel job summed over NCCL where they are, in
 * device memory, on the backend's stream (tkc_stream()), so that a sum
 * queued from the side stream overlaps the backward like the update after
 * it (engine/model/model_grad.c).
 *
 * NCCL is loaded at run time, like the module itself is: libtaco_cuda.so
 * does not NEED libnccl, so a one-GPU job runs where NCCL is missing, and
 * only nccl.h's types are used at build time. The library: $TACO_NCCL_LIB,
 * else libnccl.so.2 on the loader's path (PyPI's nvidia-nccl-cu13 wheel,
 * which a CUDA 13 PyTorch installs, once its lib directory is on it), else
 * the toolkit's (TK_NCCL_FALLBACK, found by CMake).
 *
 * NCCL's own calls block, and a peer that is gone makes its kernels spin
 * forever. So every collective records an event, and a watchdog thread
 * ends the rank when the oldest one is not done within the comm's timeout
 * (init counts as one): ncclCommAbort, a line on stderr, _exit(1). A rank
 * that ends makes mpirun (or srun) end the others, and the job fails as a
 * whole, to be retried or resumed like a one-GPU job.
 *
 * The sums are NCCL's ring or tree order, not the rank order of the MPI
 * comm: every rank still gets the same bits (each element is reduced once
 * and then copied), so the weights stay bit-identical across ranks; the
 * loss differs from a one-GPU run by the rounding of the order. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nccl.h>

#include "cuda_ops.h"
#include "tk_comm.h"
#include "tk_why.h"

/* Collectives in flight at most before the caller waits for the oldest. */
#define RING 1024
/* How often the watchdog looks. */
#define DOG_PERIOD_NS 100000000L

/* The NCCL calls used, resolved from the library loaded. */
static struct {
	decltype(&ncclGetVersion) version;
	decltype(&ncclGetUniqueId) unique_id;
	decltype(&ncclCommInitRank) init_rank;
	decltype(&ncclAllReduce) all_reduce;
	decltype(&ncclCommAbort) abort;
	decltype(&ncclCommDestroy) destroy;
	decltype(&ncclGetErrorString) error_string;
} nc;

typedef struct nccl_comm {
	tk_comm c;
	ncclComm_t comm;
	pthread_t dog;
	int dog_on;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	int stop;
	const char *busy;  /* a blocking call under way (init), or NULL */
	double busy_since; /* and since when */
	/* collectives in flight: [tail, head), each an event and the time
	 * it was queued */
	cudaEvent_t ev[RING];
	double t[RING];
	unsigned head, tail;
} nccl_comm;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The library and its calls, once; NULL with why set. */
static void *load_nccl(char *why, size_t why_len)
{
	static void *lib;
	const char *env = getenv("TACO_NCCL_LIB");
	const char *tried[3];
	int n = 0;

	if (lib)
		return lib;
	if (env && env[0])
		tried[n++] = env;
	tried[n++] = "libnccl.so.2";
#ifdef TK_NCCL_FALLBACK
	tried[n++] = TK_NCCL_FALLBACK;
#endif
	for (int i = 0; i < n && !lib; i++)
		lib = dlopen(tried[i], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		tk_why(
		    why, why_len,
		    "no libnccl.so.2 (%s): install NVIDIA's nvidia-nccl-cu13 "
		    "and put its lib directory on LD_LIBRARY_PATH, or name "
		    "the library in TACO_NCCL_LIB",
		    dlerror());
		return NULL;
	}
#define RESOLVE(field, sym)                                                    \
	nc.field = (decltype(nc.field))dlsym(lib, #sym);                       \
	if (!nc.field) {                                                       \
		tk_why(why, why_len, "libnccl.so.2 has no %s", #sym);          \
		dlclose(lib);                                                  \
		lib = NULL;                                                    \
		return NULL;                                                   \
	}
	RESOLVE(version, ncclGetVersion);
	RESOLVE(unique_id, ncclGetUniqueId);
	RESOLVE(init_rank, ncclCommInitRank);
	RESOLVE(all_reduce, ncclAllReduce);
	RESOLVE(abort, ncclCommAbort);
	RESOLVE(destroy, ncclCommDestroy);
	RESOLVE(error_string, ncclGetErrorString);
#undef RESOLVE
	return lib;
}

/* The rank cannot go on: the others would wait for it, or it for them.
 * Library code does not log, but this is the process's last word, and the
 * launcher shows it. */
static void fatal(nccl_comm *m, const char *what)
{
	fprintf(stderr,
		"taco-train: rank %d: NCCL: %s waited over %.0f s for the "
		"other ranks: one is gone or stuck; ending this rank\n",
		m->c.rank, what, m->c.timeout_s);
	if (m->comm)
		nc.abort(m->comm);
	_exit(1);
}

/* Drops the collectives that are done; a CUDA error or one waiting past
 * the timeout is fatal. Called with m->lock held. */
static void reap(nccl_comm *m)
{
	while (m->tail != m->head) {
		unsigned i = m->tail % RING;
		cudaError_t e = cudaEventQuery(m->ev[i]);

		if (e == cudaErrorNotReady) {
			if (now() - m->t[i] > m->c.timeout_s)
				fatal(m, "a gradient sum");
			return;
		}
		if (e != cudaSuccess)
			fatal(m, cudaGetErrorString(e));
		m->tail++;
	}
}

static void *watchdog(void *arg)
{
	nccl_comm *m = (nccl_comm *)arg;

	pthread_mutex_lock(&m->lock);
	while (!m->stop) {
		struct timespec ts;

		if (m->busy && now() - m->busy_since > m->c.timeout_s)
			fatal(m, m->busy);
		reap(m);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += DOG_PERIOD_NS;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&m->wake, &m->lock, &ts);
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

/* A blocking call under the watchdog's eye (NULL: done). */
static void set_busy(nccl_comm *m, const char *what)
{
	pthread_mutex_lock(&m->lock);
	m->busy = what;
	m->busy_since = now();
	pthread_mutex_unlock(&m->lock);
}

/* buf[n] summed in place, queued on the backend's stream, and watched. */
static int all_reduce(nccl_comm *m, float *buf, size_t n)
{
	cudaStream_t s = tkc_stream();
	ncclResult_t r;
	unsigned i;

	if (n == 0)
		return 0;
	r = nc.all_reduce(buf, buf, n, ncclFloat32, ncclSum, m->comm, s);
	if (r != ncclSuccess)
		return -EIO;
	pthread_mutex_lock(&m->lock);
	/* a full ring: wait for the oldest (the watchdog bounds the wait) */
	for (reap(m); m->head - m->tail == RING; reap(m)) {
		pthread_mutex_unlock(&m->lock);
		usleep(100);
		pthread_mutex_lock(&m->lock);
	}
	i = m->head % RING;
	if (cudaEventRecord(m->ev[i], s) != cudaSuccess) {
		pthread_mutex_unlock(&m->lock);
		return -EIO;
	}
	m->t[i] = now();
	m->head++;
	pthread_mutex_unlock(&m->lock);
	return 0;
}

static int sum_f32(tk_comm *c, float *buf, size_t n)
{
	return all_reduce((nccl_comm *)c->impl, buf, n);
}

static int sum_rows_f32(tk_comm *c, const float *g, int ld, int rows, int cols,
			float *out)
{
	size_t w = (size_t)cols * sizeof(float);

	if (rows <= 0 || cols <= 0)
		return 0;
	/* the rows made contiguous, on the stream the sum follows */
	if (cudaMemcpy2DAsync(out, w, g, (size_t)ld * sizeof(float), w,
			      (size_t)rows, cudaMemcpyDeviceToDevice,
			      tkc_stream()) != cudaSuccess)
		return -EIO;
	return all_reduce((nccl_comm *)c->impl, out, (size_t)rows * cols);
}

static void comm_abort(tk_comm *c, int code)
{
	nccl_comm *m = (nccl_comm *)c->impl;

	(void)code;
	if (m->comm)
		nc.abort(m->comm);
}

static void comm_free(nccl_comm *m)
{
	if (m->dog_on) {
		pthread_mutex_lock(&m->lock);
		m->stop = 1;
		pthread_cond_signal(&m->wake);
		pthread_mutex_unlock(&m->lock);
		pthread_join(m->dog, NULL);
	}
	for (int i = 0; i < RING; i++)
		if (m->ev[i])
			cudaEventDestroy(m->ev[i]);
	pthread_cond_destroy(&m->wake);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

/* Every sum done first: NCCL's destroy must not find one in flight. */
static void comm_close(tk_comm *c)
{
	nccl_comm *m = (nccl_comm *)c->impl;

	set_busy(m, "the last sums");
	cudaDeviceSynchronize();
	nc.destroy(m->comm);
	m->comm = NULL;
	comm_free(m);
}

/* Undoes the open so far: why says what failed, with NCCL's reason when
 * it was NCCL's call (nr), else r's. */
static int fail(nccl_comm *m, int r, char *why, size_t why_len,
		const char *what, ncclResult_t nr)
{
	tk_why(why, why_len, "%s: %s", what,
	       nr != ncclSuccess ? nc.error_string(nr) : strerror(-r));
	if (m->comm)
		nc.abort(m->comm);
	m->comm = NULL;
	comm_free(m);
	return r;
}

extern "C" TKC_EXPORT int tk_cuda_module_comm(tk_comm *host, double timeout_s,
					      tk_comm **out, char *why,
					      size_t why_len)
{
	nccl_comm *m;
	ncclUniqueId id;
	ncclResult_t nr;
	size_t free0 = 0, free1 = 0, total = 0;
	int version = 0, r;

	if (!load_nccl(why, why_len))
		return -ENODEV;
	if (nc.version(&version) != ncclSuccess || version < 21400) {
		tk_why(why, why_len, "NCCL %d is older than 2.14", version);
		return -ENODEV;
	}
	if (!(m = (nccl_comm *)calloc(1, sizeof(*m))))
		return -ENOMEM;
	pthread_mutex_init(&m->lock, NULL);
	pthread_cond_init(&m->wake, NULL);
	m->c.rank = host->rank;
	m->c.size = host->size;
	m->c.timeout_s = timeout_s;
	for (int i = 0; i < RING; i++)
		if (cudaEventCreateWithFlags(
			&m->ev[i], cudaEventDisableTiming) != cudaSuccess)
			return fail(m, -EIO, why, why_len, "cudaEventCreate",
				    ncclSuccess);
	memset(&id, 0, sizeof(id));
	if (host->rank == 0 && (nr = nc.unique_id(&id)) != ncclSuccess)
		return fail(m, -EIO, why, why_len, "ncclGetUniqueId", nr);
	if ((r = host->bcast(host, &id, sizeof(id))))
		return fail(m, r, why, why_len, "the NCCL id from rank 0",
			    ncclSuccess);
	if (pthread_create(&m->dog, NULL, watchdog, m))
		return fail(m, -EAGAIN, why, why_len, "the watchdog",
			    ncclSuccess);
	m->dog_on = 1;
	cudaMemGetInfo(&free0, &total);
	set_busy(m, "ncclCommInitRank");
	nr = nc.init_rank(&m->comm, host->size, id, host->rank);
	set_busy(m, NULL);
	if (nr != ncclSuccess)
		return fail(m, -EIO, why, why_len, "ncclCommInitRank", nr);
	cudaMemGetInfo(&free1, &total);
	m->c.device_bytes = free0 > free1 ? free0 - free1 : 0;
	m->c.sum_f32 = sum_f32;
	m->c.sum_rows_f32 = sum_rows_f32;
	m->c.abort = comm_abort;
	m->c.close = comm_close;
	m->c.impl = m;
	*out = &m->c;
	return 0;
}
