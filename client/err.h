/* err.h: error reporting of tacoctl's modules.
 *
 * Functions return 0 or a negative errno code and describe the problem in a
 * ctl_err, on one line; only main.c and the commands print. */
#ifndef CTL_ERR_H
#define CTL_ERR_H

#include <errno.h>

typedef struct ctl_err {
	long status;	/* HTTP status of an error the server sent, or 0 */
	char code[64];	/* the server's error code ("not_found"), or "" */
	char msg[1024]; /* one line, no trailing newline */
} ctl_err;

/* Formats the message into err (if not NULL), newlines flattened to spaces,
 * and returns code (negative). */
int ctl_err_set(ctl_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
