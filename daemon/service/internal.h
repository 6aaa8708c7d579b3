/* service/internal.h: the state shared by service/service.c (loop thread) and
 * service/routes.c (HTTP threads); every field below `lock` is guarded by
 * it. */
#ifndef TACOD_SERVICE_INTERNAL_H
#define TACOD_SERVICE_INTERNAL_H

#include <pthread.h>

#include "api/job_request.h"
#include "daemon/http/http.h"
#include "daemon/runner/runner.h"
#include "daemon/service/service.h"
#include "daemon/store/store.h"
#include "plan/plan.h"

#define TACOD_MAX_STREAMS 256 /* event streams open at once */
#define TACOD_ROUTES_MAX 48
#define TACOD_PUMP_MS 100 /* event streams are fed this often */
/* Jobs waiting in validating_files, of all users together: a create past
 * it is refused with 429 validation_queue_full (service/validate.c). */
#define TACOD_MAX_VALIDATING 256
/* state_dir/reserve (service/storage.c): room to record the ends of the
 * running jobs when the disk fills */
#define TACOD_RESERVE_BYTES (1u << 20)
/* GGUF conversions (service/gguf.c): waiting, running or failed ones
 * remembered at once; a conversion's time limit; the files one list
 * call sorts (a job has one per checkpoint and type at most) */
#define TACOD_GGUF_TASKS 16
#define TACOD_GGUF_TIMEOUT_S (6 * 3600)
#define TACOD_GGUF_LIST_MAX 4096

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
	tacod_runs runs;      /* every job a runner runs */
	tacod_runner *runner; /* local children or Slurm */
	tacod_follower follow[TACOD_MAX_STREAMS];
	int n_follow;
	int shutting_down, closed;
	int64_t idem_purged_at; /* unix seconds */
	int armed;		/* wake, tick and pump are initialised */
	/* the storage reserve (service/storage.c): there, or when it was
	 * last tried (unix seconds) */
	int reserve_live;
	int64_t reserve_checked_at;
	/* the validation thread (service/validate.c): it takes the oldest
	 * job in validating_files from the store, so the store is its queue */
	pthread_t val_thread;
	pthread_cond_t val_cond; /* signalled when there may be work */
	int val_started, val_stop;
	char val_job[TACOD_ID_MAX]; /* being validated now; "" when idle */
	/* the jobs their creates parsed, oldest first, for their validation
	 * (tacod_validate_keep) */
	struct tacod_kept_job *val_kept[TACOD_MAX_VALIDATING];
	int n_val_kept;
	/* the webhook delivery thread's state (webhooks/delivery.c) */
	struct tacod_hooks *hooks;
	/* the GGUF conversions and their thread (service/gguf.c) */
	struct tacod_gguf *gguf;
	/* chat completions: their queue and model workers (service/chat.c) */
	struct tacod_chat *chat;
};

int64_t tacod_now(void);

/* Shared by the route files (service/routes.c, service/jobs.c, ...). */
/* The user whose rows a request sees: NULL (everything) for admins. */
const char *tacod_route_scope(tacod_http_req *r);
/* ?limit=, dflt when absent; -1 when it is not an integer in [1, max]
 * (a 400 has been sent). */
int tacod_route_page_limit(tacod_http_req *r, int dflt, int max);
/* The same, 20 by default and at most TACOD_LIST_MAX (OpenAI's default for
 * jobs and events). */
int tacod_route_limit(tacod_http_req *r);
/* A store error as the HTTP error that fits (404 naming `what`, 400, 507
 * for a full or failing disk, 500). */
int tacod_route_store_error(tacod_http_req *r, int code, const taco_err *err,
			    const char *what);
/* A failed write of the server's own files or rows (code a negative
 * errno; err, which may be NULL, names the path): 507 when the storage is
 * full or failing, else 500. The reply names no path; err goes to tacod's
 * log (service/storage.c). */
int tacod_route_write_error(tacod_http_req *r, int code, const taco_err *err);
/* The storage reserve (lock held, or before the threads start): make
 * takes it when there is room for it and more; release deletes it (1 when
 * that freed room, 0 when there was none to free). */
void tacod_reserve_make(tacod_service *s);
int tacod_reserve_release(tacod_service *s);
/* Idempotency-Key (service/idem.c): tacod_idem_begin replays the first
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
/* The job id (as the request's user sees it) and one page of its
 * checkpoints that can still be downloaded, newest step first: steps
 * below before_step (INT64_MAX: from the newest), at most limit (1 to
 * TACOD_LIST_MAX) into out (TACOD_LIST_MAX + 1 rows), each row's metrics
 * the caller's to free; *has_more when an older one follows. Rows whose
 * weights keep_checkpoints removed are deleted on the way. */
int tacod_route_checkpoints(tacod_http_req *r, tacod_service *s, const char *id,
			    int64_t before_step, int limit, tacod_job *j,
			    tacod_checkpoint *out, int *n, int *has_more,
			    taco_err *err);
/* A checkpoint's metrics at step, under OpenAI's names, from the job's
 * stored events (lock held): step; train_loss and
 * train_mean_token_accuracy of the last training step at or before it;
 * valid_loss, valid_mean_token_accuracy and their full_valid_ twins of the
 * last evaluation at or before it; null where there is none. JSON text
 * (malloc'd), NULL when out of memory. */
char *tacod_checkpoint_metrics(tacod_service *s, const char *job, int64_t step);
/* A job that has just ended (its end recorded; lock held): its step
 * metrics as a CSV File of purpose fine-tune-results, named in the job's
 * result_file and in j->result_file (service/results.c). Nothing when the
 * job has no step metrics or has a result file. A failure is told in the
 * job's events and tacod's log, and changes nothing else. */
void tacod_results_attach(tacod_service *s, tacod_job *j);
/* Removes the bytes of files_dir/<sha256> when no file has them any more
 * (lock held: an upload keeps its bytes under it). */
void tacod_file_bytes_release(tacod_service *s, const char *sha256);
/* N of the id of a job's event or checkpoint, "<prefix><job id without
 * ftjob->-N" (N >= 0 in decimal, no leading zero): -EINVAL when it is
 * longer than an id, -ENOENT when it is no such id of this job. */
int64_t tacod_route_item_number(const char *item_id, const char *prefix,
				const char *job, taco_err *err);
/* The user a request is from (its token's, or its peer's). */
const char *tacod_route_user(tacod_http_req *r);
/* Parses and maps a create request (jobs.c) onto a job in the directory
 * dir, which it writes into dir/out; a fine-tuned model it starts from is
 * linked into dir/base (models.c). Its data files must be of the kind its
 * method trains on (a 400 naming the file otherwise). 0 with *spec set, or
 * a 4xx/5xx has been sent (*spec freed); dir may hold dir/base either way:
 * the caller removes what it does not keep (tacod_route_remove_job_dir). */
int tacod_route_map_job(tacod_http_req *r, tacod_service *s, json_t *req,
			const char *dir, tacod_job_spec *spec);
/* Removes what a create or a plan left in dir: dir/base and dir. */
void tacod_route_remove_job_dir(const char *dir);
/* models.c: the model directory dst (made here) for a job of scope (NULL:
 * anyone) starting from the fine-tuned model or checkpoint name: 0,
 * -ENOENT when scope has no such model, or another negative errno (dst
 * removed). Lock held. */
int tacod_models_assemble(tacod_service *s, const char *scope, const char *name,
			  const char *dst, taco_err *err);
/* models.c: the directory a chat worker serves model name from, for
 * scope (NULL: anyone), into dir (lock held): a base model's own (0), or
 * a fine-tuned model or checkpoint assembled at dst as for a job (1: the
 * caller removes dst when done); dst NULL only checks that scope may use
 * it (0; dir: the directory of its tokenizer). -ENOENT when there is no
 * such model for scope. */
int tacod_models_serve_dir(tacod_service *s, const char *scope,
			   const char *name, const char *dst, char *dir,
			   size_t cap, taco_err *err);
/* models.c: the model directory of a job that has ended (succeeded,
 * failed, cancelled) is removed; a job from a base model has none. */
void tacod_models_release(tacod_service *s, const char *job_id);
int tacod_route_model_list(tacod_http_req *r, void *ctx);
int tacod_route_model_show(tacod_http_req *r, void *ctx);
int tacod_route_model_delete(tacod_http_req *r, void *ctx);
/* The route handlers, a file a resource: files.c, jobs.c, plan.c,
 * events.c, checkpoints.c, download.c, device.c, dashboard.c. */
int tacod_route_file_upload(tacod_http_req *r, void *ctx);
int tacod_route_file_list(tacod_http_req *r, void *ctx);
int tacod_route_file_show(tacod_http_req *r, void *ctx);
int tacod_route_file_content(tacod_http_req *r, void *ctx);
int tacod_route_file_delete(tacod_http_req *r, void *ctx);
int tacod_route_job_create(tacod_http_req *r, void *ctx);
int tacod_route_job_plan(tacod_http_req *r, void *ctx);
int tacod_route_job_list(tacod_http_req *r, void *ctx);
int tacod_route_job_show(tacod_http_req *r, void *ctx);
int tacod_route_job_cancel(tacod_http_req *r, void *ctx);
int tacod_route_job_events(tacod_http_req *r, void *ctx);
int tacod_route_job_checkpoints(tacod_http_req *r, void *ctx);
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
 * followers get it on the next pump): 0 or the store's negative errno.
 * Lock held. */
int tacod_service_event(tacod_service *s, const char *job, const char *level,
			const char *type, const char *msg, json_t *data);
/* Asks a running job to stop (why: TACOD_STOP_*) and wakes the loop. */
void tacod_service_request_stop(tacod_service *s, const char *id, int why);
void tacod_service_wake(tacod_service *s);
/* What a job needs (service/assess.c). TACOD_ASSESS_PLAN: the memory
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
/* A message of a job's worker (taco-train names files by their paths) as
 * a client may read it: the job's directory is "<job>", the server's other
 * directories are named as tacod_assess names them (service/assess.c). */
void tacod_name_job_paths(const tacod_service *s, const char *job_id, char *msg,
			  size_t cap);
/* The same for the job file at path, parsed once (a job validated after a
 * restart); a file that does not parse is the assessment's problem. */
void tacod_assess_file(tacod_service *s, const char *path, json_t *req,
		       int what, uint64_t data_limit, tacod_assessment *a);
/* The validation thread (service/validate.c). notify (lock held): there
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
/* GGUF conversions on demand (service/gguf.c). start: the thread.
 * stop (lock held): the running conversion is killed, no other starts.
 * join (lock not held): waits for the thread and frees the queue.
 * forget_job (lock held): the job's model was deleted; its waiting
 * conversions are dropped, the running one killed and its file removed. */
int tacod_gguf_start(tacod_service *s, taco_err *err);
void tacod_gguf_stop(tacod_service *s);
void tacod_gguf_join(tacod_service *s);
void tacod_gguf_forget_job(tacod_service *s, const char *job);
int tacod_route_gguf_create(tacod_http_req *r, void *ctx);
int tacod_route_gguf_list(tacod_http_req *r, void *ctx);
int tacod_route_gguf_show(tacod_http_req *r, void *ctx);
int tacod_route_gguf_content(tacod_http_req *r, void *ctx);
int tacod_route_gguf_delete(tacod_http_req *r, void *ctx);
/* Chat completions (service/chat.c). start: its state and directory
 * (before the loop runs). turn (lock held, loop thread): hands requests to
 * workers, starts and stops workers. held (lock held): the bytes the
 * workers' plans hold on each device, added into bytes[0 .. n). shutdown
 * (lock held): waiting requests get 503, every worker ends. close (lock
 * held, loop thread): 1 once every worker has exited (its handles then
 * close), else 0. */
int tacod_chat_start(tacod_service *s, taco_err *err);
void tacod_chat_turn(tacod_service *s);
void tacod_chat_held(tacod_service *s, uint64_t *bytes, int n);
void tacod_chat_shutdown(tacod_service *s);
int tacod_chat_close(tacod_service *s);
int tacod_route_chat_completions(tacod_http_req *r, void *ctx);
/* Adds a follower (lock held); -EBUSY when too many streams are open. */
int tacod_service_follow(tacod_service *s, const char *job,
			 tacod_http_stream *stream, int64_t after_seq);

#endif
