/* service/storage.c: a full or failing disk.
 *
 * A request whose write fails (its upload, its job file, its rows) is
 * answered 507 insufficient_storage (tacod_http_storage_error), naming no
 * path of the server's: the path and the system's message go to tacod's
 * log (stderr). A running job whose events cannot be stored is stopped and
 * fails (service/service.c); to record that on a disk that is full, tacod keeps
 * a reserve, state_dir/reserve (TACOD_RESERVE_BYTES), which it deletes then and
 * makes again once there is room. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "daemon/service/internal.h"

int tacod_route_write_error(tacod_http_req *r, int code, const taco_err *err)
{
	fprintf(stderr, "tacod: %s %s: %s\n", tacod_http_method(r),
		tacod_http_path(r),
		err && err->msg[0] ? err->msg : strerror(-code));
	if (tacod_http_storage_errno(code))
		return tacod_http_storage_error(r);
	return tacod_http_error(r, 500, "server_error", NULL, NULL,
				"the server could not write its files");
}

static void reserve_path(const tacod_service *s, char *out, size_t cap)
{
	snprintf(out, cap, "%s/reserve", s->cfg.state_dir);
}

/* The reserve's bytes allocated on disk: 0 when they are, else -errno
 * (the file is removed). */
static int reserve_write(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	int rc;

	if (fd < 0)
		return -errno;
	rc = posix_fallocate(fd, 0, TACOD_RESERVE_BYTES);
	if (!rc && fsync(fd))
		rc = errno;
	if (close(fd) && !rc)
		rc = errno;
	if (rc)
		unlink(path);
	return -rc;
}

void tacod_reserve_make(tacod_service *s)
{
	char path[TACOD_PATH_MAX + 16];
	struct statvfs v;
	struct stat st;

	s->reserve_checked_at = tacod_now();
	if (s->reserve_live)
		return;
	reserve_path(s, path, sizeof(path));
	if (stat(path, &st) == 0 && st.st_size >= TACOD_RESERVE_BYTES &&
	    (uint64_t)st.st_blocks * 512 >= TACOD_RESERVE_BYTES) {
		s->reserve_live = 1;
		return;
	}
	/* not the last of the room: what is left goes to requests */
	if (statvfs(s->cfg.state_dir, &v) ||
	    (uint64_t)v.f_bavail * v.f_frsize < 2ull * TACOD_RESERVE_BYTES)
		return;
	s->reserve_live = reserve_write(path) == 0;
}

int tacod_reserve_release(tacod_service *s)
{
	char path[TACOD_PATH_MAX + 16];

	if (!s->reserve_live)
		return 0;
	s->reserve_live = 0;
	reserve_path(s, path, sizeof(path));
	if (unlink(path))
		return 0;
	fprintf(stderr,
		"tacod: the disk of %s is full: its reserve (%u bytes) is "
		"freed to record the ends of the jobs\n",
		s->cfg.state_dir, (unsigned)TACOD_RESERVE_BYTES);
	return 1;
}
