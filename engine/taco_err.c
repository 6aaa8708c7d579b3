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
	char prefix[512], old[sizeof(err->msg)];
	va_list ap;

	if (!err)
		return code;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	size_t n;

	memcpy(old, err->msg, sizeof(old));
	n = strnlen(prefix, sizeof(prefix) - 1);
	if (n + 2 >= sizeof(err->msg))
		n = sizeof(err->msg) - 3;
	memcpy(err->msg, prefix, n);
	memcpy(err->msg + n, ": ", 2);
	/* the old message, cut to what is left */
	snprintf(err->msg + n + 2, sizeof(err->msg) - n - 2, "%.*s",
		 (int)(sizeof(err->msg) - n - 3), old);
	return code;
}
