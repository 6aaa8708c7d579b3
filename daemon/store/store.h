/* store.h: tacod's durable state in SQLite (WAL): uploaded files, jobs,
 * their events and checkpoints (the rows of api/types.h), and idempotency
 * keys.
 *
 * Everything a client was told with a 2xx is committed before the reply:
 * every write is one transaction, synchronous = FULL. A store is used from
 * one thread at a time (tacod serialises access with a mutex). Library code:
 * no logging; errors come back as negative errno codes with a taco_err. */
#ifndef TACOD_STORE_H
#define TACOD_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "api/types.h"
#include "util/taco_err.h"

typedef struct tacod_store tacod_store;

/* Opens (creating when missing) the database at path and brings its schema
 * up to date. -ENOTSUP when it was written by a newer tacod. */
int tacod_store_open(const char *path, tacod_store **out, taco_err *err);
void tacod_store_close(tacod_store *s);
/* PRAGMA integrity_check: 0 when the database is sound, -EIO naming the
 * first problem otherwise. */
int tacod_store_integrity_check(tacod_store *s, taco_err *err);

/* One write transaction around several calls (each of which is otherwise
 * its own): tx_end commits when rc is 0 and every call inside succeeded,
 * and rolls everything back otherwise, returning rc or the failure. */
int tacod_store_tx_begin(tacod_store *s, taco_err *err);
int tacod_store_tx_end(tacod_store *s, int rc, taco_err *err);

/* Progress reports need not reach the disk before the next write does:
 * between tacod_store_relaxed(s, 1) and (s, 0) commits skip the fsync
 * (SQLite's synchronous = NORMAL in WAL mode: a crash of tacod loses
 * nothing, a power loss at most those commits). Nothing a client is told
 * with a 2xx may be written relaxed. */
int tacod_store_relaxed(tacod_store *s, int on, taco_err *err);

/* A new random id with the given prefix ("file-", "ftjob-"). */
void tacod_new_id(const char *prefix, char out[TACOD_ID_MAX]);

/* Files. user NULL means any user (admin); another user's rows are
 * -ENOENT, never -EPERM, so ids do not leak. Lists are newest first
 * (unless they say otherwise), starting after the id `after` ("" = from
 * the start), at most limit (<= TACOD_LIST_MAX) rows; *has_more tells
 * whether more follow. */
int tacod_store_file_add(tacod_store *s, const tacod_file *f, taco_err *err);
int tacod_store_file_get(tacod_store *s, const char *user, const char *id,
			 tacod_file *out, taco_err *err);
/* Of one purpose (NULL: any), oldest first when ascending. */
int tacod_store_file_list(tacod_store *s, const char *user, const char *purpose,
			  int ascending, const char *after, int limit,
			  tacod_file *out, int *n, int *has_more,
			  taco_err *err);
/* Refused with -EBUSY while a job that is not finished uses the file. A
 * job whose result file it is names none from then on. */
int tacod_store_file_delete(tacod_store *s, const char *user, const char *id,
			    taco_err *err);
/* How many files (of any user) have this content: the bytes may go when it
 * is 0 after a delete. */
int tacod_store_file_count_sha256(tacod_store *s, const char *sha256,
				  int64_t *count, taco_err *err);

/* Jobs. job_add assigns queue_seq. */
int tacod_store_job_add(tacod_store *s, tacod_job *j, taco_err *err);
int tacod_store_job_get(tacod_store *s, const char *user, const char *id,
			tacod_job *out, taco_err *err);
int tacod_store_job_list(tacod_store *s, const char *user, const char *after,
			 int limit, tacod_job *out, int *n, int *has_more,
			 taco_err *err);
/* The same list, of the jobs whose request's metadata holds every pair of
 * metadata_json (a JSON object of strings; NULL: no filter). */
int tacod_store_job_list_metadata(tacod_store *s, const char *user,
				  const char *metadata_json, const char *after,
				  int limit, tacod_job *out, int *n,
				  int *has_more, taco_err *err);
/* Jobs in a status, oldest queue_seq first (the scheduler's view). */
int tacod_store_job_by_status(tacod_store *s, int status, tacod_job *out,
			      int cap, int *n, taco_err *err);
/* How many jobs of user (NULL: of everyone) are in each status, indexed by
 * status. */
int tacod_store_job_count(tacod_store *s, const char *user,
			  int64_t counts[TACOD_CANCELLED + 1], taco_err *err);
/* Writes every field of j (found by id). -ENOENT when there is no such
 * job. */
int tacod_store_job_update(tacod_store *s, const tacod_job *j, taco_err *err);
/* The same, only while the job is still in status `from` (-EAGAIN
 * otherwise): a compare-and-set that also writes the other fields. */
int tacod_store_job_update_from(tacod_store *s, const tacod_job *j, int from,
				taco_err *err);
/* Moves a job from status `from` to `to` only if it is in `from`:
 * -EAGAIN otherwise (the compare-and-set the scheduler and the API use). */
int tacod_store_job_transition(tacod_store *s, const char *id, int from, int to,
			       taco_err *err);
/* Sets a job's started_at to t (unix seconds) unless it has one: a job
 * run again (resumed, requeued) keeps its first start. One statement, not
 * a rewrite of the row. -ENOENT when there is no such job. */
int tacod_store_job_started(tacod_store *s, const char *id, int64_t t,
			    taco_err *err);
/* Names the job's result file (file_id, "" for none). One statement, not
 * a rewrite of the row. -ENOENT when there is no such job. */
int tacod_store_job_set_result_file(tacod_store *s, const char *id,
				    const char *file_id, taco_err *err);

/* The fine-tuned models of user (NULL: of everyone) that are not deleted:
 * the succeeded jobs' fine_tuned_model, newest first, at most cap;
 * *has_more when more are left. */
typedef struct tacod_model_row {
	char name[TACOD_MODEL_NAME_MAX];
	char parent[TACOD_MODEL_NAME_MAX]; /* the job's model */
	char user[TACOD_USER_MAX];
	char job_id[TACOD_ID_MAX];
	int64_t created; /* the job's finished_at */
} tacod_model_row;
int tacod_store_model_list(tacod_store *s, const char *user,
			   tacod_model_row *out, int cap, int *n, int *has_more,
			   taco_err *err);

/* Events: seq assigned here, returned through *seq. */
int tacod_store_event_add(tacod_store *s, const char *job_id, const char *level,
			  const char *type, const char *message,
			  const char *data_json, int64_t *seq, taco_err *err);
/* The seq of a job's newest event in *seq, 0 when it has none. */
int tacod_store_event_newest(tacod_store *s, const char *job_id, int64_t *seq,
			     taco_err *err);
/* Events with seq > after_seq, oldest first, at most limit. */
int tacod_store_event_list(tacod_store *s, const char *job_id,
			   int64_t after_seq, int limit, tacod_event *out,
			   int *n, int *has_more, taco_err *err);
/* The data (JSON text, malloc'd into *data) of the job's newest metrics
 * event, by seq, whose data has a number at `key` (a-z and _) and whose
 * step is at most max_step; -ENOENT when there is none. By seq: a step run
 * again after a resume is told by its newest run. */
int tacod_store_event_metrics_last(tacod_store *s, const char *job_id,
				   const char *key, int64_t max_step,
				   char **data, taco_err *err);
/* Calls fn with the data of each of the job's metrics events that have an
 * integer step: by step, and by seq within a step. fn returns 0 to go on;
 * its negative errno stops the walk and is returned. fn must not use the
 * store. */
typedef int (*tacod_store_data_fn)(void *ctx, int64_t step, const char *data);
int tacod_store_event_metrics_each(tacod_store *s, const char *job_id,
				   tacod_store_data_fn fn, void *ctx,
				   taco_err *err);

/* A job's checkpoint at a step; adding a step again replaces it (a job
 * resumed from an earlier checkpoint saves the same steps again). */
int tacod_store_checkpoint_add(tacod_store *s, const tacod_checkpoint *c,
			       taco_err *err);
/* One page of a job's checkpoints, newest step first: those with a step
 * below before_step (INT64_MAX: from the newest), at most limit (clamped
 * to [1, TACOD_LIST_MAX]); *has_more tells whether older ones follow.
 * Each row's metrics is the caller's to free. */
int tacod_store_checkpoint_list(tacod_store *s, const char *job_id,
				int64_t before_step, int limit,
				tacod_checkpoint *out, int *n, int *has_more,
				taco_err *err);
/* The checkpoint of job_id at step: -ENOENT when there is none. out's
 * metrics are the caller's to free. */
int tacod_store_checkpoint_get(tacod_store *s, const char *job_id, int64_t step,
			       tacod_checkpoint *out, taco_err *err);
int tacod_store_checkpoint_delete(tacod_store *s, const char *job_id,
				  int64_t step, taco_err *err);

/* Idempotency-Key: the first response to (user, key) is kept and replayed.
 * get returns -ENOENT when the key is new. request_hash guards against a
 * key reused with a different request (-EEXIST). get's *body is malloc'd
 * (the caller frees it). put is -EEXIST when the key is already there: the
 * first response stays. */
int tacod_store_idem_get(tacod_store *s, const char *user, const char *key,
			 const char *request_hash, int *status, char **body,
			 taco_err *err);
int tacod_store_idem_put(tacod_store *s, const char *user, const char *key,
			 const char *request_hash, int status, const char *body,
			 taco_err *err);
/* Forgets keys stored before the unix time `before`; *deleted (may be NULL)
 * tells how many. */
int tacod_store_idem_purge(tacod_store *s, int64_t before, int64_t *deleted,
			   taco_err *err);

#endif
