#include "text.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* dst holds the first cap - 1 bytes of a message of len bytes (len >=
 * cap): backs off to a character boundary that leaves room for the mark,
 * and appends it. A field too small for the mark gets what fits of it. */
static void cut(char *dst, size_t cap)
{
	size_t mark = sizeof(TACO_TEXT_CUT) - 1;
	size_t p;

	if (cap <= mark + 1) {
		memcpy(dst, &TACO_TEXT_CUT[1], cap - 1);
		dst[cap - 1] = 0;
		return;
	}
	p = cap - 1 - mark;
	/* a continuation byte (10xxxxxx) at p: the character starts before */
	while (p > 0 && ((unsigned char)dst[p] & 0xC0) == 0x80)
		p--;
	memcpy(dst + p, TACO_TEXT_CUT, mark + 1);
}

int taco_text_copy(char *dst, size_t cap, const char *src)
{
	size_t n = strlen(src);

	if (n < cap) {
		memmove(dst, src, n + 1);
		return 0;
	}
	memmove(dst, src, cap - 1);
	dst[cap - 1] = 0;
	cut(dst, cap);
	return 1;
}

int taco_text_vformat(char *dst, size_t cap, const char *fmt, va_list ap)
{
	int n = vsnprintf(dst, cap, fmt, ap);

	if (n < 0) {
		dst[0] = 0;
		return -EINVAL;
	}
	if ((size_t)n < cap)
		return 0;
	cut(dst, cap);
	return 1;
}

int taco_text_format(char *dst, size_t cap, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = taco_text_vformat(dst, cap, fmt, ap);
	va_end(ap);
	return r;
}

int taco_text_tail(char *dst, size_t cap, const char *src, size_t n, int cut)
{
	size_t head = sizeof(TACO_TEXT_CUT_HEAD) - 1;
	size_t from = 0;

	if (n >= cap)
		cut = 1;
	if (cut) {
		from = n > cap - 1 - head ? n - (cap - 1 - head) : 0;
		/* skip the rest of a character cut at its start */
		while (from < n && ((unsigned char)src[from] & 0xC0) == 0x80)
			from++;
	} else {
		head = 0;
	}
	/* the text first: src may be dst (the head would overwrite it) */
	memmove(dst + head, src + from, n - from);
	memcpy(dst, TACO_TEXT_CUT_HEAD, head);
	dst[head + n - from] = 0;
	return cut;
}
