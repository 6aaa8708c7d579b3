/* slurm.h: what tacod needs of a Slurm cluster (scheduler "slurm",
 * docs/slurm.md), through its commands: sbatch, squeue and scancel run
 * asynchronously on the caller's libuv loop (uv_spawn with pipes, an argv
 * and never a shell, a time limit and a limit on the output kept); the
 * parsers of their output; and the files of a job directory on the
 * shared filesystem: the batch script tacod writes, the exit status it
 * leaves, the events taco-train appends. Library code: no store, no
 * logging. */
#ifndef TACOD_SLURM_H
#define TACOD_SLURM_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "api/types.h"
#include "util/taco_err.h"

#define TACOD_SLURM_OUT_MAX (4u << 20) /* squeue's output kept */
#define TACOD_SLURM_ERR_MAX 1024       /* a command's stderr kept */
#define TACOD_SLURM_ARGS_MAX 64

/* The job directory's files. */
#define TACOD_SLURM_SCRIPT "slurm.sh"
#define TACOD_SLURM_EVENTS "events.jsonl"
#define TACOD_SLURM_STATUS "exit_status"
#define TACOD_SLURM_STDERR "stderr.log"
#define TACOD_SLURM_PID "train.pid"
#define TACOD_SLURM_OUTPUT "slurm.out"

typedef struct tacod_slurm_result {
	int rc;		 /* 0, or a negative errno: not started, timed out */
	int64_t status;	 /* its exit status */
	int signal;	 /* or the signal that ended it */
	int truncated;	 /* more than out_max bytes on stdout */
	const char *out; /* its stdout, NUL-terminated */
	size_t len;
	const char *err; /* the end of its stderr, NUL-terminated */
} tacod_slurm_result;

typedef void (*tacod_slurm_done)(const tacod_slurm_result *r, void *ctx);

/* Runs argv[0] (searched in PATH when it has no slash) with argv; done is
 * called once on the loop, after the process ended and its pipes drained,
 * or with rc -ETIMEDOUT after it was killed for running past timeout_ms.
 * Returns 0 (done will be called) or a negative errno (it will not). */
int tacod_slurm_run(uv_loop_t *loop, char *const *argv, uint64_t timeout_ms,
		    size_t out_max, tacod_slurm_done done, void *ctx,
		    taco_err *err);

/* One job of squeue -h -o '%i|%T|%j' whose name starts with "tacod-". */
typedef struct tacod_slurm_entry {
	int64_t id;
	char state[32];		   /* "PENDING", "RUNNING", ... */
	char job_id[TACOD_ID_MAX]; /* the name without "tacod-" */
} tacod_slurm_entry;

/* The tacod jobs of squeue's output, at most cap (the rest are counted in
 * *n but not stored). Other lines are skipped; -EINVAL when a tacod line
 * is malformed. */
int tacod_slurm_parse_squeue(const char *out, size_t len, tacod_slurm_entry *e,
			     int cap, int *n, taco_err *err);
/* sbatch --parsable's answer: "<id>" or "<id>;<cluster>". */
int tacod_slurm_parse_sbatch(const char *out, size_t len, int64_t *id,
			     taco_err *err);
/* The --gres of a job of gpus ranks, one GPU each: slurm.gres ("gpu:1",
 * "gpu:h100:1", "gpu") with its count times gpus ("gpu:2", "gpu:h100:2").
 * -ENAMETOOLONG when it does not fit out. */
int tacod_slurm_gres(const char *gres, int gpus, char *out, size_t cap);
/* The exit status file's text: the shell's $? of taco-train, a number in
 * [0, 255]; above 128 a signal. */
int tacod_slurm_parse_status(const char *text, size_t len, int64_t *status,
			     int *sig, taco_err *err);

/* Writes dir/slurm.sh (atomically): it runs `taco_train --no-progress
 * --events-file dir/events.jsonl --backend backend --resume dir/job.json`,
 * forwards SIGTERM to it, and writes its exit status to dir/exit_status
 * (atomically: a tmp file and a rename). Paths holding a single quote or a
 * control character are refused (-EINVAL). */
int tacod_slurm_write_script(const char *dir, const char *taco_train,
			     const char *backend, taco_err *err);
/* The exit status the script left in dir: -ENOENT when there is none. */
int tacod_slurm_read_status(const char *dir, int64_t *status, int *sig,
			    taco_err *err);
/* The last bytes of dir/stderr.log (NUL-terminated, "" when none). */
void tacod_slurm_stderr_tail(const char *dir, char *out, size_t cap);
/* Removes an earlier attempt's status, events, pid and stderr files. */
int tacod_slurm_clean(const char *dir, taco_err *err);

/* Reads the complete lines of path after *offset, at most max_bytes of
 * them: line(text, len, ctx) is called for each (without its newline),
 * and *offset is moved past the last complete one. -E2BIG when a line
 * longer than line_max has no end yet; a missing file is no lines. */
int tacod_slurm_read_lines(const char *path, int64_t *offset, size_t max_bytes,
			   size_t line_max,
			   void (*line)(const char *text, size_t len,
					void *ctx),
			   void *ctx, taco_err *err);

#endif
