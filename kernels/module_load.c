/* module_load.c: tk_module_load, how the loadable backends (the CUDA
 * backend, libtaco_cuda.so; the MPI comm, libtaco_mpi.so) are found: a
 * program that NEEDs a library missing from the loader's path cannot start
 * at all, so the programs NEED neither, and load them on demand. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tk_module.h"
#include "tk_why.h"

/* The directory of the running program, with a trailing '/'. */
static int program_dir(char *buf, size_t cap)
{
	ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
	char *slash;

	if (n <= 0 || (size_t)n >= cap - 1)
		return -1;
	buf[n] = 0;
	slash = strrchr(buf, '/');
	if (!slash)
		return -1;
	slash[1] = 0;
	return 0;
}

void *tk_module_load(const char *env_var, const char *name, const char *what,
		     char *why, size_t why_len)
{
	const char *env = getenv(env_var);
	char dir[PATH_MAX], path[PATH_MAX + 128];
	void *h;

	if (env && env[0]) {
		if (!(h = dlopen(env, RTLD_NOW | RTLD_LOCAL)))
			tk_why(why, why_len, "the %s %s: %s", what, env,
			       dlerror());
		return h;
	}
	if (program_dir(dir, sizeof(dir))) {
		tk_why(why, why_len, "%s: cannot find the program's directory",
		       name);
		return NULL;
	}
	/* the build tree, then an installed tree */
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s%s%s", dir,
			 i ? TK_MODULE_REL_DIR "/" : "", name);
		if (access(path, F_OK))
			continue;
		/* the first that exists but does not load (a missing
		 * libcudart) is what why says */
		if (!(h = dlopen(path, RTLD_NOW | RTLD_LOCAL)))
			tk_why(why, why_len, "the %s %s: %s", what, path,
			       dlerror());
		return h;
	}
	tk_why(why, why_len, "no %s (%s) beside the program in %s", what, name,
	       dir);
	return NULL;
}
