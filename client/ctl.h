/* ctl.h: what tacoctl's commands share: the session (server, token,
 * --json), option parsing, requests that report their own errors, and
 * output helpers.
 *
 * A command returns the process exit status: CTL_OK, CTL_FAIL (the server
 * or the connection said no; one line on stderr) or CTL_USAGE. */
#ifndef CTL_H
#define CTL_H

#include <getopt.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "err.h"
#include "http.h"

enum { CTL_OK = 0, CTL_FAIL = 1, CTL_USAGE = 2 };
#define CTL_GO_ON (-1) /* ctl_parse: options read, run the command */

#define CTL_DEFAULT_URL "http://127.0.0.1:8226"
#define CTL_CONFIG_MAX (64u << 10) /* bytes of the config file */
#define CTL_ID_MAX 1280		   /* an id or a model name, escaped */
#define CTL_PATH_MAX 2048	   /* a request path */
#define CTL_LIST_PAGE 100	   /* rows asked per list request */
#define CTL_LIST_MAX 100000	   /* rows listed at most */

/* Long options every command takes besides its own. */
enum {
	CTL_OPT_JSON = 0x1000,
	CTL_OPT_URL,
	CTL_OPT_TOKEN,
	CTL_OPT_HELP,
	CTL_OPT_OWN = 0x1100, /* first id free for a command's own */
};

typedef struct ctl {
	const char *url_flag, *token_flag; /* --url, --token, or NULL */
	int json;			   /* --json */
	int connected;
	ctl_http http;
} ctl;

typedef struct ctl_cmd {
	const char *group; /* "jobs", or the command ("models") */
	const char *name;  /* "create", or NULL for a command */
	int (*run)(ctl *c, const struct ctl_cmd *cmd, int argc, char **argv);
	const char *args; /* "[OPTIONS] JOB": the usage line after the name */
	const char *summary; /* one line */
	const char *help;    /* the options, one per line, or NULL */
} ctl_cmd;

/* The command table (main.c). */
extern const ctl_cmd ctl_commands[];

/* Prints cmd's usage and options to f. */
void ctl_help(const ctl_cmd *cmd, FILE *f);

/* Reads argv's options: the command's own (`own`, terminated by a zero
 * entry; `shortopts` their short forms) go to on(ctx, id, arg), which
 * returns CTL_GO_ON or an exit status; the common ones set c. Options may
 * follow positional arguments. Returns CTL_GO_ON with *first set to the
 * first positional argument's index, or an exit status (--help: 0). */
int ctl_parse(ctl *c, const ctl_cmd *cmd, int argc, char **argv,
	      const struct option *own, const char *shortopts,
	      int (*on)(void *ctx, int id, const char *arg), void *ctx,
	      int *first);

/* A usage error: the message and a pointer to --help on stderr; returns
 * CTL_USAGE. */
int ctl_usage(const ctl_cmd *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Resolves the server URL and token (flags, then TACOD_URL/TACOD_TOKEN,
 * then the config file, then the default) and opens the HTTP client. */
int ctl_connect(ctl *c);
void ctl_disconnect(ctl *c);

/* Prints "tacoctl: MESSAGE" on stderr and returns CTL_FAIL. */
int ctl_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A request whose failure is printed: CTL_OK with *out, or CTL_FAIL. */
int ctl_call(ctl *c, const char *method, const char *path, json_t *body,
	     unsigned flags, ctl_resp *out);

/* GETs path into the file output ("-": standard output) through a
 * temporary file renamed when complete (files.c); CTL_OK or CTL_FAIL
 * (printed). */
int ctl_download_file(ctl *c, const char *path, const char *output);

/* The request path fmt with each %s an id, percent-escaped; CTL_OK or
 * CTL_FAIL (printed). */
int ctl_pathf(char *out, size_t cap, const char *fmt, ...);
/* DELETE fmt (one %s, an id; with parent, two: parent's id, then the
 * id) of each of argv, printing "deleted ID" (or the reply with --json);
 * CTL_FAIL when any failed (each said why). */
int ctl_delete_each(ctl *c, const char *fmt, const char *parent, int argc,
		    char **argv);

/* Writes the body exactly as the server sent it, then a newline if it has
 * none. */
void ctl_print_raw(const ctl_resp *r);

/* Strict number parsing of option values: 0 or -EINVAL. */
int ctl_parse_int(const char *s, long long lo, long long hi, long long *out);
int ctl_parse_num(const char *s, double *out);

/* Fields of a JSON object: "" / 0 when missing. */
const char *ctl_str(json_t *o, const char *key);
long long ctl_int(json_t *o, const char *key);

/* Formatting into buf (at least 32 bytes): "1.5 GiB", "2026-05-01 12:00",
 * "1h02m", and "-" for a missing time. */
const char *ctl_fmt_bytes(double bytes, char *buf, size_t cap);
const char *ctl_fmt_time(long long unix_s, char *buf, size_t cap);
const char *ctl_fmt_duration(double s, char *buf, size_t cap);

/* A table printed with aligned columns. */
#define CTL_TABLE_COLS 8
typedef struct ctl_table {
	int ncol, nrow, cap;
	char **cell; /* nrow x ncol, owned */
	int width[CTL_TABLE_COLS];
	int right[CTL_TABLE_COLS]; /* right-aligned columns (numbers) */
} ctl_table;
void ctl_table_init(ctl_table *t, int ncol);
/* Adds a row of ncol cells (NULL: ""). 0 or -ENOMEM. */
int ctl_table_row(ctl_table *t, ...);
void ctl_table_print(const ctl_table *t, FILE *f);
void ctl_table_free(ctl_table *t);

/* ---- shared between commands --------------------------------------- */

/* The body of a create (and of a plan) from a job file and flags, local
 * data files uploaded first (jobspec.c). */
typedef struct ctl_jobspec ctl_jobspec;
int ctl_jobspec_new(ctl_jobspec **out);
void ctl_jobspec_free(ctl_jobspec *s);
/* The options jobs create and plan share. */
extern const struct option ctl_jobspec_options[];
extern const char ctl_jobspec_help[];
/* Takes one of ctl_jobspec_options: CTL_GO_ON or CTL_USAGE. */
int ctl_jobspec_option(ctl_jobspec *s, const ctl_cmd *cmd, int id,
		       const char *arg);
/* The request body: the job file (the first positional argument, if any)
 * with the flags over it; files that are local paths uploaded. CTL_OK with
 * *body, or an exit status (printed). */
int ctl_jobspec_body(ctl *c, ctl_jobspec *s, const ctl_cmd *cmd,
		     const char *job_file, json_t **body);

/* Follows a job's events until it has finished, rendering progress on
 * stdout (logs.c). CTL_OK when it succeeded; CTL_FAIL when it failed, was
 * cancelled or the stream broke. */
int ctl_follow(ctl *c, const char *job_id);

/* A list command: --limit/--after, pages of GET path (which has no query)
 * until the end, one table row per item by row(); --json: the one page
 * as the server sent it (jobs.c). */
extern const struct option ctl_list_options[];
int ctl_list(ctl *c, const ctl_cmd *cmd, int argc, char **argv,
	     const char *path, int (*row)(ctl_table *t, json_t *item),
	     ctl_table *t);

/* The final line about a finished job; CTL_OK when it succeeded. */
int ctl_job_outcome(json_t *job, FILE *f);

#endif
