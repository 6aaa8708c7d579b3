/* cuda_absent.c: tk_cuda_open in a build without the CUDA backend
 * (TACO_CUDA=OFF, or a sanitizer or fuzz build), so that callers link the
 * same way and learn why at run time. */
#include <errno.h>
#include <stdio.h>

#include "tk_ops.h"

int tk_cuda_open(const tk_ops **out, char *why, size_t why_len)
{
	(void)out;
	if (why && why_len)
		snprintf(why, why_len, "built without CUDA");
	return -ENOSYS;
}

const char *tk_cuda_last_error(void)
{
	return NULL;
}
