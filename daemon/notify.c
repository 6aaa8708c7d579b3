#include "daemon/notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* A positive decimal number and nothing else: strtoull alone would take
 * signs, spaces and "0x", and wrap "-1" to UINT64_MAX. */
static int parse_u64(const char *s, uint64_t *out)
{
	uint64_t v = 0;

	if (!*s)
		return -EINVAL;
	for (; *s; s++) {
		uint64_t d = (uint64_t)(*s - '0');
		if (*s < '0' || *s > '9' || v > (UINT64_MAX - d) / 10)
			return -EINVAL;
		v = v * 10 + d;
	}
	if (!v)
		return -EINVAL;
	*out = v;
	return 0;
}

/* $NOTIFY_SOCKET as an address. An abstract name is sun_path with a
 * leading NUL and a length that counts only the name's bytes; a path's
 * length counts its NUL, as systemd's own SOCKADDR_UN_LEN does. */
static int address(const char *name, struct sockaddr_un *sa, socklen_t *len)
{
	size_t n = strlen(name);

	if (name[0] != '/' && name[0] != '@')
		return -EAFNOSUPPORT;
	if (name[0] == '@' && n < 2)
		return -EINVAL;
	/* a path needs room for its NUL, an abstract name does not */
	if (n > sizeof(sa->sun_path) - (name[0] == '/'))
		return -ENAMETOOLONG;
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	memcpy(sa->sun_path, name, n);
	if (name[0] == '@') {
		sa->sun_path[0] = 0;
		*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
	} else {
		*len =
		    (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
	}
	return 0;
}

int tacod_notify(const char *state)
{
	const char *name = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa;
	socklen_t len;
	size_t n = state ? strlen(state) : 0;
	ssize_t sent;
	int fd, r;

	if (!n || n > TACOD_NOTIFY_MAX)
		return -EINVAL;
	if (!name || !name[0])
		return 0;
	if ((r = address(name, &sa, &len)))
		return r;
	/* CLOEXEC: a worker forked meanwhile must not keep it */
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* The manager learns our pid from the kernel (it sets SO_PASSCRED),
	 * which is all NotifyAccess=main needs: no SCM_CREDENTIALS here.
	 * MSG_DONTWAIT: a receiver's queue of datagrams is short (10 by
	 * default), and a manager that does not read must not stall the
	 * loop that sends; -EAGAIN is the caller's to ignore. */
	sent = sendto(fd, state, n, MSG_NOSIGNAL | MSG_DONTWAIT,
		      (struct sockaddr *)&sa, len);
	r = sent < 0 ? -errno : (size_t)sent != n ? -EIO : 0;
	close(fd);
	return r;
}

int tacod_notify_watchdog_usec(uint64_t *usec)
{
	const char *us = getenv("WATCHDOG_USEC");
	const char *pid = getenv("WATCHDOG_PID");
	uint64_t v, p;

	if (!us || !us[0]) {
		*usec = 0;
		return 0;
	}
	if (parse_u64(us, &v))
		return -EINVAL;
	if (pid && pid[0]) {
		if (parse_u64(pid, &p))
			return -EINVAL;
		/* inherited from a parent that was the one watched */
		if (p != (uint64_t)getpid()) {
			*usec = 0;
			return 0;
		}
	}
	*usec = v;
	return 0;
}
