/* types.h: tacod's domain types: the rows of files, jobs, events and
 * checkpoints, the job status, and the limits on their fields. The store
 * (daemon/store.h) keeps them and api/ turns them into the API's JSON
 * objects; both include this header, and api/ needs nothing else of the
 * daemon. */
#ifndef TACOD_TYPES_H
#define TACOD_TYPES_H

#include <stddef.h>
#include <stdint.h>

#define TACOD_ID_MAX 64
#define TACOD_USER_MAX 64
#define TACOD_NAME_MAX 256
/* A model's name (api/model_name.h): a base name of at most
 * TACOD_BASE_NAME_MAX, or an ft: name built on one (with a suffix of 64 and
 * a checkpoint's step) */
#define TACOD_BASE_NAME_MAX 255
#define TACOD_MODEL_NAME_MAX 400
#define TACOD_PATH_MAX 4096
#define TACOD_LIST_MAX 100	 /* rows in one list call */
#define TACOD_TEXT_MAX (1 << 20) /* bytes of one JSON or message text */
#define TACOD_IDEM_KEY_MAX 256	 /* an Idempotency-Key, with its NUL */
#define TACOD_HASH_MAX 129	 /* a request hash (hex), with its NUL */
/* A webhook endpoint's URL and an event type ("fine_tuning.job.succeeded"),
 * with their NULs: the configuration's limits and the delivery queue's. */
#define TACOD_WEBHOOK_URL_MAX 2048
#define TACOD_WEBHOOK_TYPE_MAX 48
/* A job's metadata, as OpenAI limits it: pairs, and the characters (code
 * points, not bytes) of a key and of a value. */
#define TACOD_METADATA_PAIRS_MAX 16
#define TACOD_METADATA_KEY_MAX 64
#define TACOD_METADATA_VALUE_MAX 512

/* A file's purposes: an upload's, and a job's result file's (its step
 * metrics as CSV, made by tacod when the job ends; never uploaded). */
#define TACOD_PURPOSE_FINE_TUNE "fine-tune"
#define TACOD_PURPOSE_RESULTS "fine-tune-results"

/* An uploaded file (or a job's result file), stored by content hash under
 * the state directory. */
typedef struct tacod_file {
	char id[TACOD_ID_MAX];	   /* "file-<24 hex>" */
	char user[TACOD_USER_MAX]; /* owner */
	char filename[TACOD_NAME_MAX];
	char purpose[32];	   /* TACOD_PURPOSE_* */
	char sha256[65];	   /* hex */
	char path[TACOD_PATH_MAX]; /* where the bytes are */
	int64_t bytes;
	int64_t created_at; /* unix seconds */
} tacod_file;

enum tacod_job_status {
	TACOD_VALIDATING = 0,
	TACOD_QUEUED,
	TACOD_RUNNING,
	TACOD_PAUSED,
	TACOD_SUCCEEDED,
	TACOD_FAILED,
	TACOD_CANCELLED,
};

const char *tacod_status_name(int status);    /* "validating_files", ... */
int tacod_status_from_name(const char *name); /* -1 when unknown */
/* The characters (code points) of UTF-8 text of n bytes: what OpenAI's and
 * JSON Schema's lengths count. */
size_t tacod_utf8_chars(const char *s, size_t n);

/* A fine-tuning job. Text fields hold JSON where they say so. */
typedef struct tacod_job {
	char id[TACOD_ID_MAX]; /* "ftjob-<24 hex>" */
	char user[TACOD_USER_MAX];
	int status;
	char model[TACOD_MODEL_NAME_MAX]; /* what the request named */
	char training_file[TACOD_ID_MAX];
	char validation_file[TACOD_ID_MAX]; /* "" = none */
	char suffix[65];		    /* at most 64 characters */
	char *request; /* JSON: the create request as accepted (owned) */
	char *error;   /* JSON {"message","code","param"} or NULL (owned) */
	char fine_tuned_model[TACOD_MODEL_NAME_MAX]; /* "" until succeeded */
	char output_dir[TACOD_PATH_MAX];
	int64_t trained_tokens;
	int64_t planned_bytes, measured_peak_bytes;
	int64_t created_at, started_at, finished_at,
	    estimated_finish; /* 0 =
				  none */
	int64_t queue_seq;    /* FIFO order of the queue */
	int retries;
	/* when DELETE /v1/models removed the fine-tuned model (0: never):
	 * its name is refused from then on */
	int64_t model_deleted_at;
	char result_file[TACOD_ID_MAX]; /* the results CSV's file id, or "" */
} tacod_job;

void tacod_job_clear(tacod_job *j); /* frees request and error */

typedef struct tacod_event {
	char job_id[TACOD_ID_MAX];
	int64_t seq; /* per job, from 1 */
	int64_t created_at;
	char level[8]; /* "info", "warn", "error" */
	char type[32]; /* "message", "metrics", "status", ... */
	char *message; /* owned */
	char *data;    /* JSON or NULL, owned */
} tacod_event;

void tacod_event_clear(tacod_event *e);

typedef struct tacod_checkpoint {
	char job_id[TACOD_ID_MAX];
	int64_t step;
	char path[TACOD_PATH_MAX];
	int64_t created_at;
	char *metrics; /* JSON or NULL, owned */
} tacod_checkpoint;

#endif
