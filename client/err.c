#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int ctl_err_set(ctl_err *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (!err)
		return code;
	err->status = 0;
	err->code[0] = 0;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	/* a server message may span lines; stderr gets exactly one */
	for (char *p = err->msg; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	return code;
}
