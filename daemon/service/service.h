/* service/service.h: tacod itself: the store, the HTTP API, the scheduler and
 * the workers, on one libuv loop. HTTP handlers run on the HTTP server's
 * thread; they touch the store under the service lock and wake the loop
 * (uv_async) for anything that starts or stops a worker. */
#ifndef TACOD_SERVICE_H
#define TACOD_SERVICE_H

#include <uv.h>

#include "daemon/config/config.h"
#include "util/taco_err.h"

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

/* For the service manager (main_tacod.c, daemon/notify.h): jobs running
 * (draining ones included) and queued, and whether a drain has begun. The
 * queued count comes from the store under the service lock, so a store
 * that fails shows as an error and a lock never released as a stuck loop:
 * either way the watchdog stops being fed. Loop thread. */
typedef struct tacod_service_stats {
	int running, draining;
	long long queued;
} tacod_service_stats;
int tacod_service_stats_get(tacod_service *s, tacod_service_stats *out);

/* SIGHUP: reads the tokens file again (the old tokens stay when it is
 * invalid: err says why). Loop thread. */
int tacod_service_reload(tacod_service *s, taco_err *err);

/* Frees the service after uv_run has returned. */
void tacod_service_free(tacod_service *s);

#endif
