/* taco_err.h: error reporting for library code.
 *
 * Library functions return 0 or a negative errno-style code and, when given a
 * taco_err, describe the problem in it (naming the file, tensor, field or
 * line). They never print: the caller decides what to do with the message. */
#ifndef TACO_ERR_H
#define TACO_ERR_H

#include <errno.h>

typedef struct taco_err {
	char msg[1024];
} taco_err;

/* Formats the message into err (if not NULL) and returns code (negative). */
int taco_err_set(taco_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to an existing message. Returns code. */
int taco_err_prefix(taco_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
