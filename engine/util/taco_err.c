#include "taco_err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "text.h"

int taco_err_vset(taco_err *err, int code, const char *fmt, va_list ap)
{
	if (err)
		taco_text_vformat(err->msg, sizeof(err->msg), fmt, ap);
	return code;
}

int taco_err_set(taco_err *err, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	taco_err_vset(err, code, fmt, ap);
	va_end(ap);
	return code;
}

int taco_err_vat(taco_err *err, int code, const char *where, const char *fmt,
		 va_list ap)
{
	char msg[sizeof(err->msg)];

	if (!err)
		return code;
	taco_text_vformat(msg, sizeof(msg), fmt, ap);
	return taco_err_set(err, code, "%s: %s", where, msg);
}

int taco_err_at(taco_err *err, int code, const char *where, const char *fmt,
		...)
{
	va_list ap;

	va_start(ap, fmt);
	taco_err_vat(err, code, where, fmt, ap);
	va_end(ap);
	return code;
}

int taco_err_prefix(taco_err *err, int code, const char *fmt, ...)
{
	char prefix[sizeof(err->msg)], old[sizeof(err->msg)];
	va_list ap;

	if (!err)
		return code;
	va_start(ap, fmt);
	taco_text_vformat(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof(old));
	return taco_err_set(err, code, "%s: %s", prefix, old);
}
