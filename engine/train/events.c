#include "events.h"

#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int taco_events_open(taco_events *e, int fd)
{
	int dup_fd;

	e->f = NULL;
	if (fd < 0)
		return 0;
	dup_fd = dup(fd);
	if (dup_fd < 0)
		return -errno;
	e->f = fdopen(dup_fd, "w");
	if (!e->f) {
		int r = -errno;
		close(dup_fd);
		return r;
	}
	return 0;
}

void taco_events_close(taco_events *e)
{
	if (e->f)
		fclose(e->f);
	e->f = NULL;
}

void taco_events_emit(taco_events *e, const char *name, json_t *fields)
{
	struct timespec ts;
	json_t *o = fields ? fields : json_object();

	if (!e->f || !o) {
		json_decref(o);
		return;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	json_object_set_new(o, "event", json_string(name));
	json_object_set_new(o, "time",
			    json_real((double)ts.tv_sec + ts.tv_nsec * 1e-9));
	json_dumpf(o, e->f, JSON_COMPACT | JSON_SORT_KEYS);
	fputc('\n', e->f);
	fflush(e->f);
	/* to a file (--events-file, read by tacod on another machine): all
	 * but the many progress lines reach the disk before training goes
	 * on, so a node that dies keeps its checkpoint events. On a pipe
	 * fsync fails (EINVAL) and there is nothing to do. */
	if (strcmp(name, "progress"))
		(void)fsync(fileno(e->f));
	json_decref(o);
}
