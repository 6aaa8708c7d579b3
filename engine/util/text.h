/* text.h: messages copied into fixed fields, cut so that a reader sees it.
 *
 * Errors, event messages and job errors live in fixed arrays (taco_err,
 * the job row's error). A message longer than its field is cut at a UTF-8
 * character boundary, never inside a character (Jansson refuses invalid
 * UTF-8, so a half character would lose the whole message), and ends with
 * TACO_TEXT_CUT so that whoever reads it knows that more was said. */
#ifndef TACO_TEXT_H
#define TACO_TEXT_H

#include <stdarg.h>
#include <stddef.h>

/* What a cut message ends with, and what the tail of a longer text (a
 * program's last lines of stderr) starts with. */
#define TACO_TEXT_CUT " [cut]"
#define TACO_TEXT_CUT_HEAD "[cut] "

/* Copies src into dst (cap bytes, its NUL included; cap > 0). Returns 1
 * when src was cut to fit, 0 when it fit whole. */
int taco_text_copy(char *dst, size_t cap, const char *src);

/* vsnprintf into dst, cut as taco_text_copy cuts. Returns 1 when the
 * message was cut, 0 when it fit, -EINVAL on a format error (dst is then
 * empty). */
int taco_text_vformat(char *dst, size_t cap, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
int taco_text_format(char *dst, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The end of src[0, n) that fits dst (cap bytes with its NUL; cap > 6),
 * starting at a character boundary, and after TACO_TEXT_CUT_HEAD when
 * src did not fit whole or cut says that src is itself a tail. Returns 1
 * when it marked a cut. */
int taco_text_tail(char *dst, size_t cap, const char *src, size_t n, int cut);

#endif
