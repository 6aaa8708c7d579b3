/* comm_fault.c: libtaco_mpi_fault.so, a wrong MPI comm for the negative
 * controls of tests/dist_mpi.sh. It loads the real comm (libtaco_mpi.so,
 * at $TACO_FAULT_REAL) and passes every collective through, except that
 * rank 1 spoils its share of each gradient sum before it goes out, as a
 * broken reduction would:
 *   TACO_FAULT=drop    rank 1's gradient counts as zero (the sum is rank
 *                      0's and the others');
 *   TACO_FAULT=double  rank 1's gradient counts twice.
 * taco-train loads it in place of the real comm through $TACO_MPI_COMM.
 * A test that cannot tell these sums from the right one checks nothing. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tk_comm.h"

#define EXPORT __attribute__((visibility("default")))

typedef int (*open_fn)(double timeout_s, tk_comm **out, char *why,
		       size_t why_len);

static int (*real_sum_f32)(tk_comm *c, float *buf, size_t n);
static float factor = 1.0f;

static int fault_sum_f32(tk_comm *c, float *buf, size_t n)
{
	if (c->rank == 1)
		for (size_t i = 0; i < n; i++)
			buf[i] *= factor;
	return real_sum_f32(c, buf, n);
}

EXPORT int tk_mpi_module_open(double timeout_s, tk_comm **out, char *why,
			      size_t why_len)
{
	const char *real = getenv("TACO_FAULT_REAL");
	const char *mode = getenv("TACO_FAULT");
	void *h;
	open_fn f;
	int r;

	if (!mode || !(!strcmp(mode, "drop") || !strcmp(mode, "double"))) {
		snprintf(why, why_len, "TACO_FAULT: drop or double");
		return -EINVAL;
	}
	factor = strcmp(mode, "drop") ? 2.0f : 0.0f;
	if (!real || !(h = dlopen(real, RTLD_NOW | RTLD_LOCAL)) ||
	    !(f = (open_fn)dlsym(h, "tk_mpi_module_open"))) {
		snprintf(why, why_len, "TACO_FAULT_REAL: no MPI comm at %s",
			 real ? real : "(unset)");
		return -ENODEV;
	}
	if ((r = f(timeout_s, out, why, why_len)))
		return r;
	real_sum_f32 = (*out)->sum_f32;
	(*out)->sum_f32 = fault_sum_f32;
	return 0;
}
