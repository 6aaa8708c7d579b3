/* arena.c: the bump allocator of a compile and of a render. Everything a
 * render makes lives here and goes at its end, at once; used counts the
 * bytes taken from malloc, so that one limit bounds a render's memory. */
#include <errno.h>
#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tmpl.h"

#define TA_ALIGN 16
#define TA_FIRST (16u << 10)
#define TA_MAXCHUNK (1u << 20)

struct ta_chunk {
	ta_chunk *next;
	size_t size;
	alignas(TA_ALIGN) char data[];
};

void ta_init(tarena *a, size_t limit)
{
	a->head = NULL;
	a->cur = a->end = NULL;
	a->used = 0;
	a->limit = limit;
}

int ta_charge(tarena *a, ptrdiff_t n)
{
	if (n > 0 && (size_t)n > a->limit - a->used)
		return -E2BIG;
	a->used += (size_t)n;
	return 0;
}

static void *ta_chunk_new(tarena *a, size_t need)
{
	size_t size = a->head ? a->head->size * 2 : TA_FIRST;
	ta_chunk *c;

	if (size > TA_MAXCHUNK)
		size = TA_MAXCHUNK;
	if (size < need)
		size = need;
	if (size > SIZE_MAX - sizeof(*c) ||
	    ta_charge(a, (ptrdiff_t)(size + sizeof(*c))))
		return NULL;
	c = malloc(sizeof(*c) + size);
	if (!c) {
		a->used -= size + sizeof(*c);
		return NULL;
	}
	c->size = size;
	c->next = a->head;
	a->head = c;
	a->cur = c->data;
	a->end = c->data + size;
	return c;
}

void *ta_alloc(tarena *a, size_t n)
{
	char *p;

	if (n > SIZE_MAX - TA_ALIGN)
		return NULL;
	n = (n + TA_ALIGN - 1) & ~(size_t)(TA_ALIGN - 1);
	if (!n)
		n = TA_ALIGN;
	if ((size_t)(a->end - a->cur) < n && !ta_chunk_new(a, n))
		return NULL;
	p = a->cur;
	a->cur += n;
	return p;
}

void *ta_grow(tarena *a, void *p, size_t old, size_t n)
{
	size_t o = (old + TA_ALIGN - 1) & ~(size_t)(TA_ALIGN - 1);
	size_t m;
	void *q;

	if (n > SIZE_MAX - TA_ALIGN)
		return NULL;
	m = (n + TA_ALIGN - 1) & ~(size_t)(TA_ALIGN - 1);
	if (p && (char *)p + o == a->cur && (size_t)(a->end - (char *)p) >= m) {
		a->cur = (char *)p + m;
		return p;
	}
	q = ta_alloc(a, n);
	if (q && p && old)
		memcpy(q, p, old < n ? old : n);
	return q;
}

void ta_free(tarena *a)
{
	ta_chunk *c = a->head, *next;

	while (c) {
		next = c->next;
		free(c);
		c = next;
	}
	a->head = NULL;
	a->cur = a->end = NULL;
	a->used = 0;
}
