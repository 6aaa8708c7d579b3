#include "taco_err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int taco_err_set(taco_err *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (!err)
		return code;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	return code;
}

int taco_err_prefix(taco_err *err, int code, const char *fmt, ...)
{
	char both[2 * sizeof(err->msg)];
	va_list ap;
	int n;

	if (!err)
		return code;
	va_start(ap, fmt);
	n = vsnprintf(both, sizeof(err->msg), fmt, ap);
	va_end(ap);
	if (n < 0)
		return code;
	if ((size_t)n >= sizeof(err->msg))
		n = (int)sizeof(err->msg) - 1;
	/* both holds "prefix: old message"; cut to what fits in msg. */
	snprintf(both + n, sizeof(both) - (size_t)n, ": %s", err->msg);
	memcpy(err->msg, both, sizeof(err->msg) - 1);
	err->msg[sizeof(err->msg) - 1] = 0;
	return code;
}
