/* progress.h: job events for people. On a terminal, training progress is
 * one line redrawn in place (step/total, a bar, loss, tokens/s, ETA) and
 * other events print above it; elsewhere every event is a plain line. */
#ifndef CTL_PROGRESS_H
#define CTL_PROGRESS_H

#include <jansson.h>
#include <stdio.h>

typedef struct ctl_progress {
	FILE *f;
	int tty;
	int width;	/* of the terminal */
	char line[512]; /* the progress line last drawn or pending */
	int drawn;	/* it is on screen, the cursor at its end */
	int pending;	/* a newer one was not drawn yet (throttled) */
	double last_draw;
	/* the ETA without one from the server: steps over time, from the
	 * first event seen live (client clock) or, for events replayed, from
	 * their creation times */
	int have_live, have_old;
	double live_t0;
	long long live_s0, old_t0, old_s0;
} ctl_progress;

void ctl_progress_init(ctl_progress *p, FILE *f, int tty);

/* One event object of GET /v1/fine_tuning/jobs/{id}/events. */
void ctl_progress_event(ctl_progress *p, json_t *event);

/* Draws the progress line if a newer one is pending (redraws are at most
 * every 0.1 s within a burst of events). */
void ctl_progress_flush(ctl_progress *p);

/* Draws what is pending and ends the progress line. */
void ctl_progress_end(ctl_progress *p);

#endif
