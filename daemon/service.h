/* service.h: tacod itself: the store, the HTTP API, the scheduler and the
 * workers, on one libuv loop. HTTP handlers run on the HTTP server's
 * thread; they touch the store under the service lock and wake the loop
 * (uv_async) for anything that starts or stops a worker. */
#ifndef TACOD_SERVICE_H
#define TACOD_SERVICE_H

#include <uv.h>

#include "config.h"
#include "taco_err.h"

typedef struct tacod_service tacod_service;

/* Opens the store under config->state_dir, requeues jobs that were running
 * when the last tacod stopped (they resume from their newest checkpoint),
 * starts listening, and arms the loop. */
int tacod_service_start(const tacod_config *config, uv_loop_t *loop,
			tacod_service **out, taco_err *err);

/* The TCP port (tests listen on port 0). */
int tacod_service_port(const tacod_service *s);

/* Drain: stop accepting requests, ask running jobs to checkpoint and stop
 * (they are requeued, not failed), and close the loop's handles once they
 * have exited so that uv_run returns. Any thread. */
void tacod_service_shutdown(tacod_service *s);

/* Frees the service after uv_run has returned. */
void tacod_service_free(tacod_service *s);

#endif
