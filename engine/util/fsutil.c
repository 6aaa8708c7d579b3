#include "fsutil.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define COPY_MAX_BYTES (1ull << 32) /* files copied into an export */

char *taco_path_join(const char *dir, const char *name)
{
	size_t a = strlen(dir), b = strlen(name);
	char *s = malloc(a + b + 2);

	if (!s)
		return NULL;
	memcpy(s, dir, a);
	s[a] = '/';
	memcpy(s + a + 1, name, b + 1);
	return s;
}

int taco_fsync_dir(const char *dir, taco_err *err)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int r = 0;

	if (fd < 0)
		return taco_err_set(err, -errno, "%s: %s", dir,
				    strerror(errno));
	if (fsync(fd) && errno != EINVAL && errno != ENOTSUP)
		r = taco_err_set(err, -errno, "%s: fsync: %s", dir,
				 strerror(errno));
	close(fd);
	return r;
}

static void dir_of(const char *path, char *dir, size_t len)
{
	const char *slash = strrchr(path, '/');

	if (!slash)
		snprintf(dir, len, ".");
	else if (slash == path)
		snprintf(dir, len, "/");
	else
		snprintf(dir, len, "%.*s", (int)(slash - path), path);
}

int taco_write_file_atomic(const char *path, const void *data, size_t len,
			   taco_err *err)
{
	char tmp[4200], dir[4096];
	const char *p = data;
	int fd, r = 0;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >=
	    (int)sizeof(tmp))
		return taco_err_set(err, -ENAMETOOLONG, "%s: path too long",
				    path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
		  0644);
	if (fd < 0)
		return taco_err_set(err, -errno, "%s: %s", tmp,
				    strerror(errno));
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			r = taco_err_set(err, -errno, "%s: write: %s", path,
					 strerror(errno));
			break;
		}
		p += n;
		len -= (size_t)n;
	}
	if (!r && fsync(fd))
		r = taco_err_set(err, -errno, "%s: fsync: %s", path,
				 strerror(errno));
	if (close(fd) && !r)
		r = taco_err_set(err, -errno, "%s: close: %s", path,
				 strerror(errno));
	if (!r && rename(tmp, path))
		r = taco_err_set(err, -errno, "%s: rename: %s", path,
				 strerror(errno));
	if (r) {
		unlink(tmp);
		return r;
	}
	dir_of(path, dir, sizeof(dir));
	return taco_fsync_dir(dir, err);
}

int taco_mkdir_p(const char *path, taco_err *err)
{
	char buf[4096];
	size_t n = strlen(path);

	if (n == 0 || n >= sizeof(buf))
		return taco_err_set(err, -ENAMETOOLONG, "bad path '%s'", path);
	memcpy(buf, path, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (buf[i] != '/' && buf[i] != 0)
			continue;
		buf[i] = 0;
		if (mkdir(buf, 0755) && errno != EEXIST)
			return taco_err_set(err, -errno, "%s: mkdir: %s", buf,
					    strerror(errno));
		buf[i] = i < n ? '/' : 0;
	}
	return 0;
}

int taco_remove_flat_dir(const char *dir, taco_err *err)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[4400];

	if (!d)
		return errno == ENOENT ? 0
				       : taco_err_set(err, -errno, "%s: %s",
						      dir, strerror(errno));
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (unlink(path) && errno != ENOENT) {
			int r = -errno;
			closedir(d);
			return taco_err_set(err, r, "%s: %s", path,
					    strerror(-r));
		}
	}
	closedir(d);
	if (rmdir(dir) && errno != ENOENT)
		return taco_err_set(err, -errno, "%s: %s", dir,
				    strerror(errno));
	return 0;
}

int taco_read_file(const char *path, size_t max, char **out, size_t *len,
		   taco_err *err)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	size_t n;
	int r = 0;

	if (!f)
		return taco_err_set(err, -errno, "%s: %s", path,
				    strerror(errno));
	buf = malloc(max + 1);
	if (!buf) {
		fclose(f);
		return taco_err_set(err, -ENOMEM, "%s: out of memory", path);
	}
	n = fread(buf, 1, max + 1, f);
	if (ferror(f))
		r = taco_err_set(err, -EIO, "%s: read error", path);
	else if (n > max)
		r = taco_err_set(err, -EFBIG, "%s: larger than %zu bytes", path,
				 max);
	fclose(f);
	if (r) {
		free(buf);
		return r;
	}
	buf[n] = 0;
	*out = buf;
	if (len)
		*len = n;
	return 0;
}

int taco_replace_dir(const char *tmp, const char *dir, taco_err *err)
{
	char old[4200], parent[4200];

	snprintf(old, sizeof(old), "%s.old-%d", dir, (int)getpid());
	if (rename(dir, old) == 0)
		taco_remove_flat_dir(old, NULL);
	if (rename(tmp, dir))
		return taco_err_set(err, -errno, "%s: rename: %s", dir,
				    strerror(errno));
	dir_of(dir, parent, sizeof(parent));
	return taco_fsync_dir(parent, err);
}

int taco_copy_file(const char *src, const char *dst, taco_err *err)
{
	char *buf = NULL;
	size_t n = 0;
	int r = taco_read_file(src, COPY_MAX_BYTES, &buf, &n, err);

	if (r)
		return r;
	r = taco_write_file_atomic(dst, buf, n, err);
	free(buf);
	return r;
}
