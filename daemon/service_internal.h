/* service_internal.h: the state shared by service.c (loop thread) and
 * service_routes.c (HTTP threads); every field below `lock` is guarded by
 * it. */
#ifndef TACOD_SERVICE_INTERNAL_H
#define TACOD_SERVICE_INTERNAL_H

#include <pthread.h>

#include "http.h"
#include "plan/plan.h"
#include "service.h"
#include "store.h"
#include "worker.h"

#define TACOD_MAX_RUNNING 64
#define TACOD_MAX_STREAMS 256 /* event streams open at once */
#define TACOD_ROUTES_MAX 32
#define TACOD_WORKER_SETTLE_MS 500 /* no stop signal before this age */
#define TACOD_PUMP_MS 100	   /* event streams are fed this often */
/* Jobs waiting in validating_files, of all users together: a create past
 * it is refused with 429 validation_queue_full (service_validate.c). */
#define TACOD_MAX_VALIDATING 256

enum {
	TACOD_STOP_NONE = 0,
	TACOD_STOP_CANCEL,
	TACOD_STOP_PAUSE,
	TACOD_STOP_SHUTDOWN,
};

typedef struct tacod_running {
	char id[TACOD_ID_MAX];
	tacod_worker *w;       /* scheduler "local": the child */
	struct tacod_sjob *sj; /* scheduler "slurm" (service_slurm.c) */
	uint64_t planned;
	uint64_t peak;	     /* the worker's last reported peak */
	double tokens_per_s; /* its last progress event's */
	int stop, stop_sent;
	uint64_t started_ms; /* uv_now when the worker was spawned */
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
	uv_timer_t pump; /* event streams, while there are any */
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
	int64_t idem_purged_at; /* unix seconds */
	int armed;		/* wake, tick and pump are initialised */
	/* the validation thread (service_validate.c): it takes the oldest
	 * job in validating_files from the store, so the store is its queue */
	pthread_t val_thread;
	pthread_cond_t val_cond; /* signalled when there may be work */
	int val_started, val_stop;
	char val_job[TACOD_ID_MAX]; /* being validated now; "" when idle */
	/* the jobs their creates parsed, oldest first, for their validation
	 * (tacod_validate_keep) */
	struct tacod_kept_job *val_kept[TACOD_MAX_VALIDATING];
	int n_val_kept;
	/* the webhook delivery thread's state (service_webhooks.c) */
	struct tacod_hooks *hooks;
	struct tacod_slurm_state *slurm; /* scheduler "slurm" only */
};

int64_t tacod_now(void);

/* Shared by the route files (service_routes.c, service_jobs.c, ...). */
/* The user whose rows a request sees: NULL (everything) for admins. */
const char *tacod_route_scope(tacod_http_req *r);
/* ?limit=, 20 by default; -1 when it is not an integer in [1,
 * TACOD_LIST_MAX] (a 400 has been sent). */
int tacod_route_limit(tacod_http_req *r);
/* A store error as the HTTP error that fits (404 naming `what`, 400, 500). */
int tacod_route_store_error(tacod_http_req *r, int code, const taco_err *err,
			    const char *what);
/* Idempotency-Key (service_idem.c): tacod_idem_begin replays the first
 * reply of a key seen before (returns 1: the request is answered) or
 * refuses a key reused for another request, else returns 0 and the
 * handler goes on. tacod_idem_body is the JSON to store beside what the
 * handler creates, in the same transaction (lock held). */
typedef struct tacod_idem {
	char key[TACOD_IDEM_KEY_MAX]; /* "" when the request has none */
	char hash[TACOD_HASH_MAX];
} tacod_idem;
int tacod_idem_begin(tacod_http_req *r, tacod_service *s, const void *data,
		     size_t len, tacod_idem *out);
int tacod_idem_store(tacod_service *s, const char *user, const tacod_idem *k,
		     int status, json_t *body, taco_err *err);
/* The job id (as the request's user sees it) and its checkpoints, lowest
 * step first; *out (calloc'd, TACOD_LIST_MAX rows) is the caller's to
 * free, with each row's metrics, whatever the result. */
int tacod_route_checkpoints(tacod_http_req *r, tacod_service *s, const char *id,
			    tacod_job *j, tacod_checkpoint **out, int *n,
			    taco_err *err);
/* Route handlers of the other files. */
int tacod_route_job_pause(tacod_http_req *r, void *ctx);
int tacod_route_job_resume(tacod_http_req *r, void *ctx);
int tacod_route_device(tacod_http_req *r, void *ctx);
int tacod_route_metrics(tacod_http_req *r, void *ctx);
int tacod_route_checkpoint_content(tacod_http_req *r, void *ctx);
int tacod_route_model_content(tacod_http_req *r, void *ctx);
int tacod_route_dashboard(tacod_http_req *r, void *ctx);
int tacod_route_dashboard_file(tacod_http_req *r, void *ctx);
void tacod_service_routes(tacod_service *s);
/* At start: jobs the store has as running but nobody runs (none in the
 * running set) are queued again, to resume from their newest checkpoint. */
int tacod_service_requeue_running(tacod_service *s, taco_err *err);
/* Adds an event to a job's log (data, NULL or a JSON object, is consumed;
 * followers get it on the next pump). Lock held. */
void tacod_service_event(tacod_service *s, const char *job, const char *level,
			 const char *type, const char *msg, json_t *data);
/* The running (or, under Slurm, submitted) job of this id, or NULL. Lock
 * held. */
tacod_running *tacod_service_find_running(tacod_service *s, const char *id);
/* Asks a running job to stop (why: TACOD_STOP_*) and wakes the loop. */
void tacod_service_request_stop(tacod_service *s, const char *id, int why);
void tacod_service_wake(tacod_service *s);
/* What a job needs (service_assess.c). TACOD_ASSESS_PLAN: the memory
 * plan, from the model's config and safetensors headers (fast);
 * TACOD_ASSESS_DATA: reading and tokenizing the data files (slow), done
 * only when they hold at most data_limit bytes. req is the create request,
 * for naming its files in the messages and the report. No lock needed. */
enum { TACOD_ASSESS_PLAN = 1, TACOD_ASSESS_DATA = 2 };
typedef struct tacod_assessment {
	int planned; /* plan and fits are set */
	taco_plan plan;
	int fits;
	taco_plan_advice advice;
	uint64_t
	    data_bytes; /* training, validation and multiple-choice files */
	int validated;	/* the data was read */
	json_t *report; /* the training file's validation report, or NULL */
	char code[48], param[48], msg[1024]; /* the first problem, if any */
} tacod_assessment;
void tacod_assess(tacod_service *s, const taco_job *job, json_t *req, int what,
		  uint64_t data_limit, tacod_assessment *a);
/* The same for the job file at path, parsed once (a job validated after a
 * restart); a file that does not parse is the assessment's problem. */
void tacod_assess_file(tacod_service *s, const char *path, json_t *req,
		       int what, uint64_t data_limit, tacod_assessment *a);
/* The validation thread (service_validate.c). notify (lock held): there
 * is a new job in validating_files. stop (lock held): no validation starts
 * after the one in progress, whose outcome is still recorded; join (lock
 * not held) waits for the thread's end. */
int tacod_validate_start(tacod_service *s, taco_err *err);
void tacod_validate_notify(tacod_service *s);
/* Keeps the job a create parsed, with its request, for the validation of
 * job id (lock held): *job is taken (zeroed), req gets a reference. */
void tacod_validate_keep(tacod_service *s, const char *id, taco_job *job,
			 json_t *req);
void tacod_validate_stop(tacod_service *s);
void tacod_validate_join(tacod_service *s);
/* A running job's event, and its end (the worker's exit status or
 * signal, which finish_job maps to tacod's status; rj is freed): lock
 * held. The local workers' callbacks and service_slurm.c call them. */
void tacod_service_job_event(tacod_service *s, tacod_running *rj, json_t *e);
void tacod_service_job_exit(tacod_service *s, tacod_running *rj, int64_t status,
			    int sig);
/* Scheduler "slurm" (service_slurm.c), lock held but for attach (at the
 * start, before any thread): attach follows again the Slurm jobs of the
 * store and queues the running jobs that have none; arm starts the
 * polling; schedule submits queued jobs; apply_stop sends a job's
 * requested stop (a shutdown leaves the Slurm job running); close stops
 * the polling; free frees what attach made. */
int tacod_slurm_attach(tacod_service *s, taco_err *err);
void tacod_slurm_arm(tacod_service *s);
void tacod_slurm_schedule(tacod_service *s);
void tacod_slurm_apply_stop(tacod_service *s, tacod_running *rj);
void tacod_slurm_close(tacod_service *s);
void tacod_slurm_free(tacod_service *s);
/* Adds a follower (lock held); -EBUSY when too many streams are open. */
int tacod_service_follow(tacod_service *s, const char *job,
			 tacod_http_stream *stream, int64_t after_seq);

#endif
