/* tar.c: the ustar extractor of tar.h, a state machine fed by the download
 * as it arrives, so that no archive is held in memory or on disk. */
#include "tar.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLOCK 512
#define NAME_MAX_BYTES 256 /* prefix (155) + '/' + name (100) */

enum { HEADER, DATA, PAD, END };

struct ctl_tar {
	ctl_tar_limits lim;
	char dest[PATH_MAX];
	char top[NAME_MAX_BYTES];
	int made_dest; /* we created dest: remove it on failure */
	int dirfd;     /* dest, or -1 before the first entry */
	int state;
	unsigned char hdr[BLOCK];
	size_t hn;	  /* bytes of hdr read */
	uint64_t left;	  /* DATA: bytes of the file; PAD: padding */
	uint64_t padding; /* after the current file's data */
	int fd, parentfd; /* the file being written and its directory */
	char tmp[64];	  /* its temporary name in parentfd */
	char leaf[NAME_MAX_BYTES];
	char rel[NAME_MAX_BYTES]; /* its path below dest */
	char **made;		  /* paths below dest we created, in order */
	int n_made, cap_made;
	int entries, files;
	uint64_t bytes;
	int failed; /* the first error, repeated */
	int finished;
};

static int tar_fail(ctl_tar *t, ctl_err *err, int code, const char *fmt,
		    const char *name)
{
	t->failed = code;
	return ctl_err_set(err, code, fmt, name);
}

int ctl_tar_open(const char *dest, const ctl_tar_limits *limits, ctl_tar **out,
		 ctl_err *err)
{
	ctl_tar *t;

	if (dest && (!dest[0] || strlen(dest) >= PATH_MAX))
		return ctl_err_set(err, -EINVAL, "invalid destination '%s'",
				   dest);
	t = calloc(1, sizeof(*t));
	if (!t)
		return ctl_err_set(err, -ENOMEM, "out of memory");
	t->lim.max_file = CTL_TAR_MAX_FILE;
	t->lim.max_total = CTL_TAR_MAX_TOTAL;
	t->lim.max_entries = CTL_TAR_MAX_ENTRIES;
	if (limits)
		t->lim = *limits;
	if (dest)
		memcpy(t->dest, dest, strlen(dest) + 1);
	t->dirfd = t->fd = t->parentfd = -1;
	*out = t;
	return 0;
}

/* Creates dest, or takes an existing empty directory, and opens it. */
static int open_dest(ctl_tar *t, ctl_err *err)
{
	DIR *d;
	struct dirent *e;
	int empty = 1;

	if (mkdir(t->dest, 0755) == 0)
		t->made_dest = 1;
	else if (errno != EEXIST)
		return tar_fail(t, err, -errno, "cannot create %s", t->dest);
	t->dirfd = open(t->dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (t->dirfd < 0)
		return tar_fail(t, err, -ENOTDIR, "%s is not a directory",
				t->dest);
	if (!t->made_dest) {
		int fd = dup(t->dirfd);
		d = fd >= 0 ? fdopendir(fd) : NULL;
		if (!d) {
			if (fd >= 0)
				close(fd);
			return tar_fail(t, err, -EIO, "cannot read %s",
					t->dest);
		}
		while (empty && (e = readdir(d)))
			empty =
			    !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
		closedir(d);
		if (!empty)
			return tar_fail(t, err, -EEXIST,
					"%s already exists and is not empty",
					t->dest);
	}
	return 0;
}

static int remember(ctl_tar *t, const char *rel)
{
	if (t->n_made == t->cap_made) {
		int cap = t->cap_made ? 2 * t->cap_made : 16;
		char **g = realloc(t->made, (size_t)cap * sizeof(*g));
		if (!g)
			return -ENOMEM;
		t->made = g;
		t->cap_made = cap;
	}
	if (!(t->made[t->n_made] = strdup(rel)))
		return -ENOMEM;
	t->n_made++;
	return 0;
}

/* A ustar number field: octal digits (space or NUL padded), or the base-256
 * form GNU tar writes for sizes from 8 GiB. -1 when malformed. */
static int64_t number(const unsigned char *f, size_t n)
{
	uint64_t v = 0;
	size_t i = 0;

	if (f[0] & 0x80) {
		if (f[0] != 0x80) /* negative, or a size past 2^63 */
			return -1;
		for (i = 1; i < n; i++) {
			if (v >> 55)
				return -1;
			v = v << 8 | f[i];
		}
		return (int64_t)v;
	}
	while (i < n && f[i] == ' ')
		i++;
	if (i == n || f[i] < '0' || f[i] > '7')
		return -1;
	for (; i < n && f[i] >= '0' && f[i] <= '7'; i++) {
		if (v >> 60)
			return -1;
		v = v * 8 + (uint64_t)(f[i] - '0');
	}
	for (; i < n; i++)
		if (f[i] != ' ' && f[i] != 0)
			return -1;
	return (int64_t)v;
}

static int checksum_ok(const unsigned char *h)
{
	int64_t want = number(h + 148, 8);
	int64_t u = 0, s = 0; /* historic tars summed signed chars */

	for (int i = 0; i < BLOCK; i++) {
		int c = i >= 148 && i < 156 ? ' ' : h[i];
		u += c;
		s += i >= 148 && i < 156 ? ' ' : (signed char)h[i];
	}
	return want >= 0 && (want == u || want == s);
}

/* Checks a name below dest: relative, components neither empty nor "." nor
 * "..", printable. Returns its depth, or -1. */
static int safe_relative(const char *rel)
{
	int depth = 0;
	const char *p = rel;

	if (!*p || *p == '/')
		return -1;
	while (*p) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		if (!n || (n == 1 && p[0] == '.') ||
		    (n == 2 && p[0] == '.' && p[1] == '.'))
			return -1;
		for (size_t i = 0; i < n; i++)
			if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f)
				return -1;
		depth++;
		p += n;
		if (*p == '/' && !*++p)
			return -1; /* "a/": trailing slashes were removed */
	}
	return depth;
}

/* Opens the directory of rel (all but its last component), creating the
 * missing ones. Returns the fd, or a negative code. */
static int open_parent(ctl_tar *t, const char *rel, int create_last,
		       ctl_err *err)
{
	char part[NAME_MAX_BYTES];
	int fd = dup(t->dirfd), next;
	const char *p = rel;

	if (fd < 0)
		return tar_fail(t, err, -errno, "cannot open %s", t->dest);
	for (;;) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		if (!slash && !create_last)
			return fd;
		memcpy(part, p, n);
		part[n] = 0;
		if (mkdirat(fd, part, 0755) == 0) {
			size_t upto = (size_t)(p - rel) + n;
			char sub[NAME_MAX_BYTES];
			memcpy(sub, rel, upto);
			sub[upto] = 0;
			if (remember(t, sub)) {
				close(fd);
				return tar_fail(t, err, -ENOMEM, "%s",
						"out of memory");
			}
		} else if (errno != EEXIST) {
			close(fd);
			return tar_fail(t, err, -errno, "cannot create %s",
					rel);
		}
		/* O_NOFOLLOW: a name that exists as a link is refused */
		next = openat(fd, part,
			      O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		close(fd);
		if (next < 0)
			return tar_fail(
			    t, err, -ENOTDIR,
			    "%s: a path component is not a directory", rel);
		fd = next;
		if (!slash)
			return fd;
		p = slash + 1;
	}
}

static int tar_write_all(int fd, const unsigned char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* The current file is complete: fsync, rename into place, sync its
 * directory. */
static int end_file(ctl_tar *t, ctl_err *err)
{
	int rc = 0;

	if (fsync(t->fd))
		rc = -errno;
	if (close(t->fd) && !rc)
		rc = -errno;
	t->fd = -1;
	if (rc) {
		unlinkat(t->parentfd, t->tmp, 0);
		return tar_fail(t, err, rc, "cannot write %s", t->rel);
	}
	if (renameat2(t->parentfd, t->tmp, t->parentfd, t->leaf,
		      RENAME_NOREPLACE)) {
		rc = -errno;
		unlinkat(t->parentfd, t->tmp, 0);
		return tar_fail(t, err, rc,
				rc == -EEXIST ? "the archive holds %s twice"
					      : "cannot rename into %s",
				t->rel);
	}
	if (remember(t, t->rel))
		return tar_fail(t, err, -ENOMEM, "%s", "out of memory");
	fsync(t->parentfd);
	close(t->parentfd);
	t->parentfd = -1;
	t->files++;
	return 0;
}

static int begin_file(ctl_tar *t, const char *rel, uint64_t size, ctl_err *err)
{
	const char *leaf = strrchr(rel, '/');
	unsigned char rnd[6];

	snprintf(t->rel, sizeof(t->rel), "%s", rel);
	snprintf(t->leaf, sizeof(t->leaf), "%s", leaf ? leaf + 1 : rel);
	t->parentfd = open_parent(t, rel, 0, err);
	if (t->parentfd < 0) {
		int rc = t->parentfd;
		t->parentfd = -1;
		return rc;
	}
	for (int tries = 0; t->fd < 0 && tries < 8; tries++) {
		if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
			return tar_fail(t, err, -EIO, "%s", "no random bytes");
		snprintf(t->tmp, sizeof(t->tmp),
			 ".tacoctl-%02x%02x%02x%02x%02x%02x.part", rnd[0],
			 rnd[1], rnd[2], rnd[3], rnd[4], rnd[5]);
		t->fd = openat(
		    t->parentfd, t->tmp,
		    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
		if (t->fd < 0 && errno != EEXIST)
			break;
	}
	if (t->fd < 0)
		return tar_fail(t, err, -errno, "cannot create %s", rel);
	t->left = size;
	t->padding = (BLOCK - size % BLOCK) % BLOCK;
	t->bytes += size;
	t->state = size ? DATA : HEADER;
	return size ? 0 : end_file(t, err);
}

/* A complete header block: checks it and starts its entry. */
static int tar_header(ctl_tar *t, ctl_err *err)
{
	const unsigned char *h = t->hdr;
	char name[NAME_MAX_BYTES], *rel;
	size_t n, prefix;
	int64_t size;
	char type = (char)h[156];
	int zero = 1;

	for (int i = 0; i < BLOCK && zero; i++)
		zero = h[i] == 0;
	if (zero) {
		if (!t->entries)
			return tar_fail(t, err, -EINVAL, "%s",
					"the archive is empty");
		t->state = END;
		return 0;
	}
	if (memcmp(h + 257, "ustar", 5) || !checksum_ok(h))
		return tar_fail(t, err, -EINVAL, "%s",
				"not a ustar archive, or a damaged header");
	if (++t->entries > t->lim.max_entries)
		return tar_fail(t, err, -EFBIG, "%s",
				"the archive has too many entries");
	prefix = strnlen((const char *)h + 345, 155);
	n = strnlen((const char *)h, 100);
	if (prefix) {
		memcpy(name, h + 345, prefix);
		name[prefix] = '/';
		memcpy(name + prefix + 1, h, n);
		name[prefix + 1 + n] = 0;
	} else {
		memcpy(name, h, n);
		name[n] = 0;
	}
	size = number(h + 124, 12);
	if (size < 0)
		return tar_fail(t, err, -EINVAL, "%s: invalid size", name);
	if (type != '0' && type != 0 && type != '5')
		return tar_fail(t, err, -EINVAL,
				"%s: only files and directories are accepted "
				"(no links, devices or extension headers)",
				name);
	n = strlen(name);
	while (n > 1 && name[n - 1] == '/')
		name[--n] = 0;
	if (name[0] == '/' || safe_relative(name) < 0)
		return tar_fail(t, err, -EINVAL,
				"unsafe name in the archive: %s", name);
	/* the top directory: the same for every entry */
	rel = strchr(name, '/');
	if (rel)
		*rel++ = 0;
	if (!t->top[0]) {
		memcpy(t->top, name, strlen(name) + 1);
		if (!t->dest[0])
			snprintf(t->dest, sizeof(t->dest), "%s", t->top);
		if (open_dest(t, err))
			return t->failed;
	} else if (strcmp(t->top, name)) {
		return tar_fail(t, err, -EINVAL,
				"%s: outside the archive's top directory",
				name);
	}
	if (!rel) {
		if (type != '5')
			return tar_fail(t, err, -EINVAL,
					"%s: a file outside the archive's top "
					"directory",
					name);
		return 0; /* the top directory itself: dest */
	}
	if (safe_relative(rel) > CTL_TAR_MAX_DEPTH)
		return tar_fail(t, err, -EINVAL, "%s: nested too deep", rel);
	if (type == '5') {
		int fd = open_parent(t, rel, 1, err);
		if (fd < 0)
			return fd;
		close(fd);
		return 0;
	}
	if ((uint64_t)size > t->lim.max_file)
		return tar_fail(t, err, -EFBIG,
				"%s: larger than the limit for "
				"one file",
				rel);
	if ((uint64_t)size > t->lim.max_total - t->bytes)
		return tar_fail(t, err, -EFBIG,
				"%s: the archive is larger than "
				"the limit",
				rel);
	return begin_file(t, rel, (uint64_t)size, err);
}

int ctl_tar_write(ctl_tar *t, const void *data, size_t n, ctl_err *err)
{
	const unsigned char *p = data;
	int rc;

	if (t->failed)
		return t->failed;
	while (n) {
		size_t k;
		switch (t->state) {
		case HEADER:
			k = BLOCK - t->hn < n ? BLOCK - t->hn : n;
			memcpy(t->hdr + t->hn, p, k);
			t->hn += k;
			if (t->hn == BLOCK) {
				t->hn = 0;
				if ((rc = tar_header(t, err)))
					return rc;
			}
			break;
		case DATA:
			k = t->left < n ? (size_t)t->left : n;
			if ((rc = tar_write_all(t->fd, p, k)))
				return tar_fail(t, err, rc, "cannot write %s",
						t->rel);
			t->left -= k;
			if (!t->left && (rc = end_file(t, err)))
				return rc;
			if (!t->left) {
				t->state = PAD;
				t->left = t->padding;
			}
			break;
		case PAD:
			k = t->left < n ? (size_t)t->left : n;
			t->left -= k;
			break;
		default: /* END: the record's zero padding */
			k = n;
			break;
		}
		if (t->state == PAD && !t->left)
			t->state = HEADER;
		p += k;
		n -= k;
	}
	return 0;
}

int ctl_tar_finish(ctl_tar *t, ctl_err *err)
{
	if (t->failed)
		return t->failed;
	if (t->state != END)
		return tar_fail(t, err, -EPIPE, "%s",
				t->entries ? "the archive is truncated"
					   : "the archive is empty");
	if (fsync(t->dirfd))
		return tar_fail(t, err, -errno, "cannot sync %s", t->dest);
	t->finished = 1;
	return 0;
}

const char *ctl_tar_dir(const ctl_tar *t)
{
	return t->dest;
}

void ctl_tar_stats(const ctl_tar *t, int *files, uint64_t *bytes)
{
	*files = t->files;
	*bytes = t->bytes;
}

void ctl_tar_free(ctl_tar *t)
{
	if (!t)
		return;
	if (t->fd >= 0) {
		close(t->fd);
		unlinkat(t->parentfd, t->tmp, 0);
	}
	if (t->parentfd >= 0)
		close(t->parentfd);
	/* newest first: files before the directories that hold them */
	for (int i = t->n_made - 1; i >= 0; i--) {
		if (!t->finished && t->dirfd >= 0 &&
		    unlinkat(t->dirfd, t->made[i], 0) && errno == EISDIR)
			unlinkat(t->dirfd, t->made[i], AT_REMOVEDIR);
		free(t->made[i]);
	}
	free(t->made);
	if (t->dirfd >= 0)
		close(t->dirfd);
	if (!t->finished && t->made_dest)
		rmdir(t->dest);
	free(t);
}
