/* service/gguf.h: what the GGUF routes (service/gguf.c) and the
 * conversion queue (service/gguf_queue.c) share; everything here is
 * guarded by the service lock. */
#ifndef TACOD_SERVICE_GGUF_H
#define TACOD_SERVICE_GGUF_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "api/types.h"
#include "daemon/service/internal.h"

#define TACOD_GGUF_NAME_MAX 64
#define TACOD_GGUF_ERR_MAX 1024

/* "bf16", "f16", "q8_0", NULL: taco-train's --export-gguf types */
extern const char *const tacod_gguf_types[];

enum {
	TACOD_GGUF_FREE,
	TACOD_GGUF_QUEUED,
	TACOD_GGUF_RUNNING,
	TACOD_GGUF_FAILED
};

/* A conversion that has not (yet) left its file. */
typedef struct tacod_gguf_task {
	int state;
	char job[TACOD_ID_MAX];
	char name[TACOD_GGUF_NAME_MAX]; /* "model-q8_0.gguf", ... */
	char ckpt[TACOD_PATH_MAX];	/* the checkpoint's directory, or "" */
	char out[TACOD_PATH_MAX + 96];	/* the file to write */
	int64_t created_at, finished_at;
	pid_t pid;     /* while running */
	int cancelled; /* the model was deleted: forget it */
	char error[TACOD_GGUF_ERR_MAX];
} tacod_gguf_task;

struct tacod_gguf {
	pthread_t thread;
	pthread_cond_t cond; /* signalled when a task is queued */
	int started, stop;
	tacod_gguf_task task[TACOD_GGUF_TASKS];
};

/* "model-TYPE.gguf" (step -1) or "step-NNNNNNNN-TYPE.gguf" (taco-train's
 * names): 0 with *step and *type (an index of tacod_gguf_types) set, or
 * -1. */
int tacod_gguf_name_parse(const char *name, int64_t *step, int *type);

/* Removes the temporary files taco-train left for the file at path
 * (path.tmp-PID: a conversion killed with tacod, kill -9). */
void tacod_gguf_remove_stale(const char *path);

#endif
