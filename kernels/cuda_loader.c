/* cuda_loader.c: tk_cuda_open, tk_cuda_devices, tk_cuda_last_error and the
 * profile's tk_cuda_profile_start / stop, which load the CUDA backend
 * (libtaco_cuda.so, kernels/cuda) on demand or call into the loaded one.
 *
 * Why a loadable module: a program that NEEDs libcudart cannot start at all
 * where the CUDA runtime is not on the loader's path (a toolkit from
 * NVIDIA's runfile or tarball has no ld.so.conf entry), and then even CPU
 * jobs fail. Nothing but this file knows of the module; a CPU job never
 * touches it, and a failed load is an error of tk_cuda_open that names the
 * library that is missing.
 *
 * Where the module is looked for: $TACO_CUDA_BACKEND, then beside the
 * program, then in the installed module directory (tk_module.h). */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tk_module.h"
#include "tk_ops.h"
#include "tk_why.h"

#define MODULE "libtaco_cuda.so"

typedef int (*open_fn)(const tk_ops **out, char *why, size_t why_len);
typedef int (*devices_fn)(tk_device_info *out, int cap, char *why,
			  size_t why_len);
typedef int (*comm_fn)(struct tk_comm *host, double timeout_s,
		       struct tk_comm **out, char *why, size_t why_len);
typedef const char *(*last_error_fn)(void);
typedef int (*profile_start_fn)(void);
typedef int (*profile_stop_fn)(tk_profile *out);

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static last_error_fn module_last_error; /* set once the module is loaded */
/* Set once the module is open, if it has a profiler (a module of this
 * tree has; without one the profile calls say -ENOSYS). */
static profile_start_fn module_profile_start;
static profile_stop_fn module_profile_stop;

#ifdef TK_CUDA_BUILT
static open_fn module_open; /* these two too */
static devices_fn module_devices;
static comm_fn module_comm; /* NULL: a module without NCCL */

/* libtaco_cuda.so, found as every module is (tk_module.h) */
static void *load(char *why, size_t why_len)
{
	return tk_module_load("TACO_CUDA_BACKEND", MODULE, "CUDA backend", why,
			      why_len);
}

/* The module, loaded and its entry points resolved once; NULL with why set
 * when it is missing or not ours. Called with lock held. */
static void *module(char *why, size_t why_len)
{
	static void *handle;

	if (handle || !(handle = load(why, why_len)))
		return handle;
	module_open = (open_fn)dlsym(handle, "tk_cuda_module_open");
	module_devices = (devices_fn)dlsym(handle, "tk_cuda_module_devices");
	module_last_error =
	    (last_error_fn)dlsym(handle, "tk_cuda_module_last_error");
	if (!module_open || !module_devices || !module_last_error) {
		tk_why(why, why_len,
		       "%s: not a tacod CUDA backend (no entry points)",
		       MODULE);
		dlclose(handle);
		handle = NULL;
		module_open = NULL;
		module_devices = NULL;
		module_last_error = NULL;
		return NULL;
	}
	module_comm = (comm_fn)dlsym(handle, "tk_cuda_module_comm");
	module_profile_start =
	    (profile_start_fn)dlsym(handle, "tk_cuda_module_profile_start");
	module_profile_stop =
	    (profile_stop_fn)dlsym(handle, "tk_cuda_module_profile_stop");
	if (!module_profile_start || !module_profile_stop) {
		module_profile_start = NULL;
		module_profile_stop = NULL;
	}
	return handle;
}

int tk_cuda_open(const tk_ops **out, char *why, size_t why_len)
{
	int r;

	pthread_mutex_lock(&lock);
	r = module(why, why_len) ? module_open(out, why, why_len) : -ENODEV;
	pthread_mutex_unlock(&lock);
	return r;
}

int tk_cuda_devices(tk_device_info *out, int cap, char *why, size_t why_len)
{
	int r;

	pthread_mutex_lock(&lock);
	r = module(why, why_len) ? module_devices(out, cap, why, why_len)
				 : -ENODEV;
	pthread_mutex_unlock(&lock);
	return r;
}
int tk_cuda_comm_open(struct tk_comm *host, double timeout_s,
		      struct tk_comm **out, char *why, size_t why_len)
{
	int r;

	pthread_mutex_lock(&lock);
	if (!module(why, why_len))
		r = -ENODEV;
	else if (!module_comm) {
		tk_why(why, why_len, "%s was built without NCCL", MODULE);
		r = -ENOSYS;
	} else
		r = module_comm(host, timeout_s, out, why, why_len);
	pthread_mutex_unlock(&lock);
	return r;
}
#else
int tk_cuda_comm_open(struct tk_comm *host, double timeout_s,
		      struct tk_comm **out, char *why, size_t why_len)
{
	(void)host, (void)timeout_s, (void)out;
	tk_why(why, why_len, "built without CUDA");
	return -ENOSYS;
}

int tk_cuda_open(const tk_ops **out, char *why, size_t why_len)
{
	(void)out;
	tk_why(why, why_len, "built without CUDA");
	return -ENOSYS;
}

int tk_cuda_devices(tk_device_info *out, int cap, char *why, size_t why_len)
{
	(void)out;
	(void)cap;
	tk_why(why, why_len, "built without CUDA");
	return -ENOSYS;
}
#endif

const char *tk_cuda_last_error(void)
{
	last_error_fn f;

	pthread_mutex_lock(&lock);
	f = module_last_error;
	pthread_mutex_unlock(&lock);
	return f ? f() : NULL;
}

/* The module profiles only once it is open: before, or without CUDA, its
 * functions are not known here. */
int tk_cuda_profile_start(void)
{
	profile_start_fn f;

	pthread_mutex_lock(&lock);
	f = module_profile_start;
	pthread_mutex_unlock(&lock);
	return f ? f() : -ENOSYS;
}

int tk_cuda_profile_stop(tk_profile *out)
{
	profile_stop_fn f;

	pthread_mutex_lock(&lock);
	f = module_profile_stop;
	pthread_mutex_unlock(&lock);
	if (!f) {
		memset(out, 0, sizeof(*out));
		return -ENOSYS;
	}
	return f(out);
}
