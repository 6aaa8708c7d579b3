/* types.c: status names and the owned fields of rows. */
#include "types.h"

#include <stdlib.h>
#include <string.h>

static const char *const status_names[] = {
    [TACOD_VALIDATING] = "validating_files",
    [TACOD_QUEUED] = "queued",
    [TACOD_RUNNING] = "running",
    [TACOD_PAUSED] = "paused",
    [TACOD_SUCCEEDED] = "succeeded",
    [TACOD_FAILED] = "failed",
    [TACOD_CANCELLED] = "cancelled",
};

const char *tacod_status_name(int status)
{
	if (status < TACOD_VALIDATING || status > TACOD_CANCELLED)
		return "unknown";
	return status_names[status];
}

size_t tacod_utf8_chars(const char *s, size_t n)
{
	size_t c = 0;

	for (size_t i = 0; i < n; i++)
		c += ((unsigned char)s[i] & 0xC0) != 0x80;
	return c;
}

int tacod_status_from_name(const char *name)
{
	if (!name)
		return -1;
	for (int i = TACOD_VALIDATING; i <= TACOD_CANCELLED; i++)
		if (strcmp(name, status_names[i]) == 0)
			return i;
	return -1;
}

void tacod_job_clear(tacod_job *j)
{
	if (!j)
		return;
	free(j->request);
	free(j->error);
	j->request = NULL;
	j->error = NULL;
}

void tacod_event_clear(tacod_event *e)
{
	if (!e)
		return;
	free(e->message);
	free(e->data);
	e->message = NULL;
	e->data = NULL;
}
