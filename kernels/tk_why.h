/* tk_why.h: the "why" text of a backend that cannot open. */
#ifndef TK_WHY_H
#define TK_WHY_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* Formats into why (why_len bytes); nothing when why is NULL. */
__attribute__((format(printf, 3, 4))) static inline void
tk_why(char *why, size_t why_len, const char *fmt, ...)
{
	va_list ap;

	if (!why || !why_len)
		return;
	va_start(ap, fmt);
	vsnprintf(why, why_len, fmt, ap);
	va_end(ap);
}

#endif
