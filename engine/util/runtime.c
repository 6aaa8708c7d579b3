#include "runtime.h"

#include <stdlib.h>
#include <unistd.h>

void taco_runtime_init(char **argv)
{
	if (getenv("OMP_WAIT_POLICY"))
		return;
	if (setenv("OMP_WAIT_POLICY", "passive", 1))
		return;
	execv("/proc/self/exe", argv);
	/* exec failed: run on with the default policy */
}
