/* store/ids.c: tacod_new_id, the random ids of files, jobs and the rest. */
#include "daemon/store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static int random_bytes(unsigned char *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = getrandom(buf + got, n - got, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		got += (size_t)r;
	}
	if (got == n)
		return 0;
	/* No getrandom (an old kernel or a seccomp filter): the device. */
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	got = 0;
	while (got < n) {
		ssize_t r = read(fd, buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	return got == n ? 0 : -1;
}

void tacod_new_id(const char *prefix, char out[TACOD_ID_MAX])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char b[12];
	char tail[2 * sizeof(b) + 1];
	size_t room, plen;

	if (random_bytes(b, sizeof(b)) < 0) {
		/* No randomness to be had: unique but guessable. Ids are
		 * names, not secrets (ownership is checked on every access). */
		static uint64_t counter;
		struct timespec ts;
		uint64_t x;

		clock_gettime(CLOCK_REALTIME, &ts);
		x = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
		x ^= (uint64_t)getpid() << 40;
		x += ++counter * 0x9e3779b97f4a7c15u;
		for (size_t i = 0; i < sizeof(b); i++) {
			x ^= x >> 31;
			x *= 0xbf58476d1ce4e5b9u;
			b[i] = (unsigned char)(x >> 56);
		}
	}
	for (size_t i = 0; i < sizeof(b); i++) {
		tail[2 * i] = hex[b[i] >> 4];
		tail[2 * i + 1] = hex[b[i] & 15];
	}
	tail[sizeof(tail) - 1] = 0;
	prefix = prefix ? prefix : "";
	plen = strlen(prefix);
	room = TACOD_ID_MAX - sizeof(tail); /* prefix bytes that fit */
	if (plen > room)
		plen = room;
	memcpy(out, prefix, plen);
	memcpy(out + plen, tail, sizeof(tail));
}
