/* taco_err.h: error reporting for library code.
 *
 * Library functions return 0 or a negative errno-style code and, when given a
 * taco_err, describe the problem in it (naming the file, tensor, field or
 * line). They never print: the caller decides what to do with the message. */
#ifndef TACO_ERR_H
#define TACO_ERR_H

#include <errno.h>
#include <stdarg.h>

typedef struct taco_err {
	char msg[1024];
} taco_err;

/* Formats the message into err (if not NULL) and returns code (negative).
 * A message longer than msg is cut at a character boundary and marked
 * (util/text.h). */
int taco_err_set(taco_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int taco_err_vset(taco_err *err, int code, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* "where: message": the one helper of every reader that names the file
 * (or file:line) it read. Returns code. */
int taco_err_at(taco_err *err, int code, const char *where, const char *fmt,
		...) __attribute__((format(printf, 4, 5)));
int taco_err_vat(taco_err *err, int code, const char *where, const char *fmt,
		 va_list ap) __attribute__((format(printf, 4, 0)));

/* Prepends "prefix: " to an existing message. Returns code. */
int taco_err_prefix(taco_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
