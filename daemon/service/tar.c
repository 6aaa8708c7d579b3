/* tar.c: ustar writer (POSIX.1-1988 header, 512-byte blocks, two zero
 * blocks at the end). Hand-written rather than libarchive: the format needed
 * here is one header struct, and a pull-style reader by offset is what
 * libmicrohttpd's callback wants, which libarchive's push API is not. */
#include "daemon/service/tar.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BLOCK 512

typedef struct entry {
	char name[TACOD_TAR_NAME_MAX];
	char *path;
	uint64_t size;
	int64_t mtime;
	uint64_t offset; /* of its header in the archive */
	int fd;		 /* opened on first read, -1 before */
} entry;

struct tacod_tar {
	entry e[TACOD_TAR_MAX_ENTRIES];
	int n;
	uint64_t size; /* without the two closing blocks */
};

static uint64_t padded(uint64_t n)
{
	return (n + BLOCK - 1) / BLOCK * BLOCK;
}

int tacod_tar_new(tacod_tar **out, taco_err *err)
{
	tacod_tar *t = calloc(1, sizeof(*t));

	if (!t)
		return taco_err_set(err, -ENOMEM, "out of memory");
	*out = t;
	return 0;
}

static int tar_name_ok(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n >= TACOD_TAR_NAME_MAX || name[0] == '/')
		return 0;
	for (const char *p = name; *p; p++)
		if ((unsigned char)*p < 0x20)
			return 0;
	/* no ".." segment */
	for (const char *p = name; p; p = strchr(p, '/')) {
		if (*p == '/')
			p++;
		if (!strncmp(p, "..", 2) && (p[2] == '/' || !p[2]))
			return 0;
	}
	return 1;
}

int tacod_tar_add(tacod_tar *t, const char *name, const char *path,
		  taco_err *err)
{
	struct stat st;
	entry *e;

	if (t->n == TACOD_TAR_MAX_ENTRIES)
		return taco_err_set(err, -E2BIG, "tar: more than %d files",
				    TACOD_TAR_MAX_ENTRIES);
	if (!tar_name_ok(name))
		return taco_err_set(err, -EINVAL, "tar: bad member name '%s'",
				    name);
	if (stat(path, &st) < 0)
		return taco_err_set(err, -errno, "%s: %s", path,
				    strerror(errno));
	if (!S_ISREG(st.st_mode))
		return taco_err_set(err, -EINVAL, "%s: not a regular file",
				    path);
	/* 11 octal digits: the ustar size field's limit (8 GiB - 1) */
	if ((uint64_t)st.st_size > 077777777777ull)
		return taco_err_set(
		    err, -EFBIG, "%s: larger than a ustar member can be", path);
	e = &t->e[t->n];
	memset(e, 0, sizeof(*e));
	if (!(e->path = strdup(path)))
		return taco_err_set(err, -ENOMEM, "out of memory");
	snprintf(e->name, sizeof(e->name), "%s", name);
	e->size = (uint64_t)st.st_size;
	e->mtime = (int64_t)st.st_mtime;
	e->offset = t->size;
	e->fd = -1;
	t->size += BLOCK + padded(e->size);
	t->n++;
	return 0;
}

uint64_t tacod_tar_size(const tacod_tar *t)
{
	return t->size + 2 * BLOCK;
}

int tacod_tar_count(const tacod_tar *t)
{
	return t->n;
}

/* A ustar number field: width - 1 octal digits, zero padded, then NUL;
 * v must fit (the callers check sizes, and clamp times). */
static void octal(char *dst, int width, uint64_t v)
{
	dst[width - 1] = 0;
	for (int i = width - 2; i >= 0; i--, v >>= 3)
		dst[i] = (char)('0' + (v & 7));
}

static void tar_put_header(const entry *e, char h[BLOCK])
{
	unsigned sum = 0;
	uint64_t mtime = e->mtime < 0 ? 0 : (uint64_t)e->mtime;

	memset(h, 0, BLOCK);
	memcpy(h, e->name, strlen(e->name)); /* name[100] */
	octal(h + 100, 8, 0644);	     /* mode */
	octal(h + 108, 8, 0);		     /* uid */
	octal(h + 116, 8, 0);		     /* gid */
	octal(h + 124, 12, e->size);
	octal(h + 136, 12, mtime > 077777777777ull ? 077777777777ull : mtime);
	memset(h + 148, ' ', 8); /* chksum counts as spaces */
	h[156] = '0';		 /* regular file */
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	for (int i = 0; i < BLOCK; i++)
		sum += (unsigned char)h[i];
	octal(h + 148, 7, sum); /* six digits, NUL, then a space */
	h[155] = ' ';
}

/* The entry whose header or data covers pos, or NULL in the trailer. */
static entry *tar_find(tacod_tar *t, uint64_t pos)
{
	int lo = 0, hi = t->n - 1;

	if (pos >= t->size)
		return NULL;
	while (lo < hi) {
		int mid = (lo + hi + 1) / 2;
		if (t->e[mid].offset <= pos)
			lo = mid;
		else
			hi = mid - 1;
	}
	return &t->e[lo];
}

static ssize_t read_data(entry *e, uint64_t off, char *buf, size_t max)
{
	ssize_t n;

	if (e->fd < 0) {
		struct stat st;
		e->fd = open(e->path, O_RDONLY | O_CLOEXEC);
		if (e->fd < 0)
			return -errno;
		if (fstat(e->fd, &st) < 0 || (uint64_t)st.st_size != e->size)
			return -EIO; /* changed since the archive was laid out
				      */
	}
	n = pread(e->fd, buf, max, (off_t)off);
	if (n < 0)
		return -errno;
	if (n == 0)
		return -EIO; /* truncated under us */
	return n;
}

ssize_t tacod_tar_read(tacod_tar *t, uint64_t pos, char *buf, size_t max)
{
	uint64_t total = tacod_tar_size(t);
	entry *e;
	uint64_t in;

	if (pos >= total || max == 0)
		return 0;
	if (max > total - pos)
		max = (size_t)(total - pos);
	e = tar_find(t, pos);
	if (!e) { /* the two zero blocks */
		memset(buf, 0, max);
		return (ssize_t)max;
	}
	in = pos - e->offset;
	if (in < BLOCK) {
		char h[BLOCK];
		size_t n = BLOCK - (size_t)in;
		tar_put_header(e, h);
		if (n > max)
			n = max;
		memcpy(buf, h + in, n);
		return (ssize_t)n;
	}
	in -= BLOCK;
	if (in < e->size) {
		uint64_t left = e->size - in;
		return read_data(e, in, buf, left < max ? (size_t)left : max);
	}
	/* padding up to the block */
	{
		uint64_t left = padded(e->size) - in;
		size_t n = left < max ? (size_t)left : max;
		memset(buf, 0, n);
		return (ssize_t)n;
	}
}

void tacod_tar_free(tacod_tar *t)
{
	if (!t)
		return;
	for (int i = 0; i < t->n; i++) {
		if (t->e[i].fd >= 0)
			close(t->e[i].fd);
		free(t->e[i].path);
	}
	free(t);
}
