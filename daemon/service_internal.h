/* service_internal.h: the state shared by service.c (loop thread) and
 * service_routes.c (HTTP threads); every field below `lock` is guarded by
 * it. */
#ifndef TACOD_SERVICE_INTERNAL_H
#define TACOD_SERVICE_INTERNAL_H

#include <pthread.h>

#include "http.h"
#include "service.h"
#include "store.h"
#include "worker.h"

#define TACOD_MAX_RUNNING 64
#define TACOD_MAX_STREAMS 256 /* event streams open at once */
#define TACOD_ROUTES_MAX 32

enum {
	TACOD_STOP_NONE = 0,
	TACOD_STOP_CANCEL,
	TACOD_STOP_PAUSE,
	TACOD_STOP_SHUTDOWN,
};

typedef struct tacod_running {
	char id[TACOD_ID_MAX];
	tacod_worker *w;
	uint64_t planned;
	int stop, stop_sent;
	char exported[TACOD_PATH_MAX];
	char error[1024]; /* the worker's last error event */
	struct tacod_service *svc;
} tacod_running;

/* A client following a job's events (server-sent events). */
typedef struct tacod_follower {
	char job[TACOD_ID_MAX];
	tacod_http_stream *stream;
	int64_t last_seq; /* events up to this one were sent */
} tacod_follower;

struct tacod_service {
	tacod_config cfg;
	uv_loop_t *loop;
	uv_async_t wake;
	uv_timer_t tick;
	tacod_http_server *http;
	tacod_http_route routes[TACOD_ROUTES_MAX];
	char files_dir[TACOD_PATH_MAX + 16], jobs_dir[TACOD_PATH_MAX + 16];
	char upload_dir[TACOD_PATH_MAX + 16];
	pthread_mutex_t lock;
	tacod_store *store;
	tacod_running *run[TACOD_MAX_RUNNING];
	int n_run;
	char head_id[TACOD_ID_MAX];
	int head_skips;
	tacod_follower follow[TACOD_MAX_STREAMS];
	int n_follow;
	int shutting_down, closed;
};

int64_t tacod_now(void);
void tacod_service_routes(tacod_service *s);
/* Asks a running job to stop (why: TACOD_STOP_*) and wakes the loop. */
void tacod_service_request_stop(tacod_service *s, const char *id, int why);
void tacod_service_wake(tacod_service *s);
/* Adds a follower (lock held); -EBUSY when too many streams are open. */
int tacod_service_follow(tacod_service *s, const char *job,
			 tacod_http_stream *stream, int64_t after_seq);

#endif
