#include "fsutil.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define COPY_MAX_BYTES (1ull << 32) /* files copied into an export */

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

int taco_copy_file(const char *src, const char *dst, taco_err *err)
{
	FILE *f = fopen(src, "rb");
	char *buf = NULL;
	long n;
	int r;

	if (!f)
		return taco_err_set(err, -errno, "%s: %s", src,
				    strerror(errno));
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 ||
	    (unsigned long long)n > COPY_MAX_BYTES || fseek(f, 0, SEEK_SET)) {
		fclose(f);
		return taco_err_set(err, -EIO, "%s: cannot read its size", src);
	}
	buf = malloc((size_t)n + 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		fclose(f);
		return taco_err_set(err, -EIO, "%s: read error", src);
	}
	fclose(f);
	r = taco_write_file_atomic(dst, buf, (size_t)n, err);
	free(buf);
	return r;
}
