/* events.h: one JSON object per line for tacod (taco-train --events-fd N,
 * or --events-file PATH under Slurm).
 * docs/events.md documents every event and field. */
#ifndef TACO_EVENTS_H
#define TACO_EVENTS_H

#include <jansson.h>
#include <stdio.h>

typedef struct taco_events {
	FILE *f; /* NULL: events off */
} taco_events;

/* Opens fd for events (-1: none). Returns 0 or -errno. */
int taco_events_open(taco_events *e, int fd);
void taco_events_close(taco_events *e);

/* Writes {"event": name, "time": unix seconds, ...fields} and a newline,
 * flushed (and fsync'd, but for progress events). Takes ownership of fields
 * (may be NULL). */
void taco_events_emit(taco_events *e, const char *name, json_t *fields);

#endif
