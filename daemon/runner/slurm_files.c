/* slurm.c: Slurm's commands run on the loop, their output parsed, and the
 * files of a job directory (slurm.h). */
#include "daemon/runner/slurm_files.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/fsutil.h"
#include "util/text.h"

/* ---- commands ---------------------------------------------------------- */

typedef struct cmd {
	uv_process_t proc;
	uv_pipe_t out, err;
	uv_timer_t timer;
	tacod_slurm_done done;
	void *ctx;
	char *buf; /* stdout, at most out_max bytes */
	size_t len, cap, out_max;
	char tail[TACOD_SLURM_ERR_MAX];
	size_t tail_len;
	int open_handles, exited, out_eof, err_eof, timed_out, truncated;
	int64_t status;
	int signal;
} cmd;

static void cmd_closed(uv_handle_t *h)
{
	cmd *c = h->data;

	if (--c->open_handles == 0) {
		free(c->buf);
		free(c);
	}
}

static void cmd_close(cmd *c)
{
	uv_handle_t *hs[] = {(uv_handle_t *)&c->proc, (uv_handle_t *)&c->out,
			     (uv_handle_t *)&c->err, (uv_handle_t *)&c->timer};

	for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); i++)
		if (!uv_is_closing(hs[i]))
			uv_close(hs[i], cmd_closed);
}

static void cmd_maybe_done(cmd *c)
{
	tacod_slurm_result r = {0};

	if (!c->exited || !c->out_eof || !c->err_eof)
		return;
	r.rc = c->timed_out ? -ETIMEDOUT : 0;
	r.status = c->status;
	r.signal = c->signal;
	r.truncated = c->truncated;
	r.out = c->buf ? c->buf : "";
	r.len = c->len;
	r.err = c->tail;
	c->done(&r, c->ctx);
	cmd_close(c);
}

static void cmd_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
	(void)h;
	b->base = malloc(suggested);
	b->len = b->base ? suggested : 0;
}

static void cmd_on_out(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
	cmd *c = s->data;

	if (n > 0) {
		size_t take = (size_t)n;
		if (c->len + take > c->out_max) {
			take = c->out_max - c->len;
			c->truncated = 1;
		}
		if (c->len + take + 1 > c->cap) {
			size_t cap = c->cap ? c->cap : 4096;
			char *g;
			while (cap < c->len + take + 1)
				cap *= 2;
			g = realloc(c->buf, cap);
			if (!g) {
				take = 0;
				c->truncated = 1;
			} else {
				c->buf = g;
				c->cap = cap;
			}
		}
		memcpy(c->buf + c->len, b->base, take);
		c->len += take;
		if (c->buf)
			c->buf[c->len] = 0;
	}
	free(b->base);
	if (n < 0) {
		uv_read_stop(s);
		c->out_eof = 1;
		cmd_maybe_done(c);
	}
}

static void cmd_on_err(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
	cmd *c = s->data;

	for (ssize_t i = 0; i < n; i++) {
		if (c->tail_len + 1 >= sizeof(c->tail)) {
			size_t half = sizeof(c->tail) / 2;
			memmove(c->tail, c->tail + c->tail_len - half, half);
			c->tail_len = half;
		}
		c->tail[c->tail_len++] = b->base[i];
	}
	c->tail[c->tail_len] = 0;
	free(b->base);
	if (n < 0) {
		uv_read_stop(s);
		c->err_eof = 1;
		cmd_maybe_done(c);
	}
}

static void cmd_on_exit(uv_process_t *p, int64_t status, int sig)
{
	cmd *c = p->data;

	c->exited = 1;
	c->status = status;
	c->signal = sig;
	uv_timer_stop(&c->timer);
	cmd_maybe_done(c);
}

static void cmd_on_timer(uv_timer_t *t)
{
	cmd *c = t->data;

	/* a hung command (slurmctld unreachable) must not hold tacod: it is
	 * killed and reported as timed out */
	c->timed_out = 1;
	if (!c->exited)
		uv_process_kill(&c->proc, SIGKILL);
}

int tacod_slurm_run(uv_loop_t *loop, char *const *argv, uint64_t timeout_ms,
		    size_t out_max, tacod_slurm_done done, void *ctx,
		    taco_err *err)
{
	cmd *c = calloc(1, sizeof(*c));
	uv_process_options_t o;
	uv_stdio_container_t stdio[3];
	int r;

	if (!c)
		return taco_err_set(err, -ENOMEM, "out of memory");
	c->done = done;
	c->ctx = ctx;
	c->out_max = out_max;
	uv_pipe_init(loop, &c->out, 0);
	uv_pipe_init(loop, &c->err, 0);
	uv_timer_init(loop, &c->timer);
	c->out.data = c->err.data = c->timer.data = c->proc.data = c;
	memset(&o, 0, sizeof(o));
	o.file = argv[0];
	o.args = (char **)argv;
	o.exit_cb = cmd_on_exit;
	stdio[0].flags = UV_IGNORE;
	stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	stdio[1].data.stream = (uv_stream_t *)&c->out;
	stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	stdio[2].data.stream = (uv_stream_t *)&c->err;
	o.stdio = stdio;
	o.stdio_count = 3;
	r = uv_spawn(loop, &c->proc, &o);
	c->open_handles = 4;
	if (r) {
		cmd_close(c);
		return taco_err_set(err, r, "cannot start %s: %s", argv[0],
				    uv_strerror(r));
	}
	uv_read_start((uv_stream_t *)&c->out, cmd_alloc, cmd_on_out);
	uv_read_start((uv_stream_t *)&c->err, cmd_alloc, cmd_on_err);
	uv_timer_start(&c->timer, cmd_on_timer, timeout_ms, 0);
	return 0;
}

/* ---- parsers ----------------------------------------------------------- */

static int parse_id(const char *p, size_t n, int64_t *out)
{
	int64_t v = 0;

	if (n == 0 || n > 18)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -EINVAL;
		v = v * 10 + (p[i] - '0');
	}
	if (v <= 0)
		return -EINVAL;
	*out = v;
	return 0;
}

int tacod_slurm_parse_squeue(const char *out, size_t len, tacod_slurm_entry *e,
			     int cap, int *n, taco_err *err)
{
	size_t i = 0;
	int k = 0, line = 0;

	while (i < len) {
		const char *l = out + i, *nl = memchr(l, '\n', len - i);
		size_t ll = nl ? (size_t)(nl - l) : len - i;
		const char *b1 = memchr(l, '|', ll), *b2;
		tacod_slurm_entry x = {0};

		i += ll + 1;
		line++;
		if (!b1)
			continue;
		b2 = memchr(b1 + 1, '|', (size_t)(l + ll - b1 - 1));
		/* "<id>|<state>|<name>": only the names tacod gives */
		if (!b2 || (size_t)(l + ll - b2 - 1) < 7 ||
		    memcmp(b2 + 1, "tacod-", 6))
			continue;
		{
			size_t sl = (size_t)(b2 - b1 - 1);
			size_t nl2 = (size_t)(l + ll - b2 - 7);
			/* an array job's "<id>_<task>" is none of ours */
			if (parse_id(l, (size_t)(b1 - l), &x.id) || sl == 0 ||
			    sl >= sizeof(x.state) || nl2 >= sizeof(x.job_id))
				return taco_err_set(err, -EINVAL,
						    "squeue: line %d: not "
						    "<id>|<state>|<name>",
						    line);
			memcpy(x.state, b1 + 1, sl);
			memcpy(x.job_id, b2 + 7, nl2);
			for (size_t q = 0; q < sl; q++)
				if (x.state[q] < 'A' || x.state[q] > 'Z') {
					if (x.state[q] != '_')
						return taco_err_set(
						    err, -EINVAL,
						    "squeue: line %d: bad "
						    "state",
						    line);
				}
		}
		if (k < cap)
			e[k] = x;
		k++;
	}
	*n = k;
	return 0;
}

int tacod_slurm_parse_sbatch(const char *out, size_t len, int64_t *id,
			     taco_err *err)
{
	size_t n = 0;

	while (n < len && out[n] >= '0' && out[n] <= '9')
		n++;
	if (parse_id(out, n, id) ||
	    (n < len && out[n] != ';' && out[n] != '\n'))
		return taco_err_set(err, -EINVAL,
				    "sbatch: expected a job id, got '%.*s'",
				    (int)(len < 80 ? len : 80), out);
	return 0;
}

int tacod_slurm_gres(const char *gres, int gpus, char *out, size_t cap)
{
	const char *c = strrchr(gres, ':');
	long count = 0;
	char *end;
	int n;

	if (c && c[1] >= '0' && c[1] <= '9') {
		count = strtol(c + 1, &end, 10);
		if (*end || count < 1 || count > 1024)
			count = 0;
	}
	/* a count: times gpus; none ("gpu", "gpu:h100"): gpus of them */
	n = count ? snprintf(out, cap, "%.*s:%ld", (int)(c - gres), gres,
			     count * gpus)
		  : snprintf(out, cap, "%s:%d", gres, gpus);
	return n >= 0 && (size_t)n < cap ? 0 : -ENAMETOOLONG;
}

int tacod_slurm_parse_status(const char *text, size_t len, int64_t *status,
			     int *sig, taco_err *err)
{
	int64_t v = 0;
	size_t n = 0;

	while (n < len && text[n] >= '0' && text[n] <= '9' && n < 4)
		v = v * 10 + (text[n++] - '0');
	if (n == 0 || v > 255 || (n < len && text[n] != '\n'))
		return taco_err_set(err, -EINVAL,
				    "exit status: expected a number in [0, "
				    "255]");
	/* the shell's $? of a child a signal ended is 128 + the signal */
	*status = v > 128 ? 0 : v;
	*sig = v > 128 ? (int)(v - 128) : 0;
	return 0;
}

/* ---- job directory ----------------------------------------------------- */

static int quotable(const char *p)
{
	for (; *p; p++)
		if (*p == '\'' || (unsigned char)*p < 0x20 || *p == 0x7f)
			return 0;
	return 1;
}

int tacod_slurm_write_script(const char *dir, const char *taco_train,
			     const char *backend, taco_err *err)
{
	char path[TACOD_PATH_MAX + 160], *text = NULL;
	int n, r;

	if (!quotable(dir) || !quotable(taco_train) || !quotable(backend))
		return taco_err_set(err, -EINVAL,
				    "%s: a path with a single quote or a "
				    "control character cannot go into the "
				    "batch script",
				    dir);
	/* Every value is tacod's own (its paths, its backend), between
	 * single quotes. `wait` returns early when the trapped SIGTERM
	 * arrives: it is waited for again until taco-train has exited. */
	n = asprintf(
	    &text,
	    "#!/bin/sh\n"
	    "# Written by tacod: one fine-tuning job on the node Slurm "
	    "chose.\n"
	    "# SIGTERM (tacod's cancel or pause, Slurm's time limit) goes to\n"
	    "# taco-train, which checkpoints and exits 3; its exit status is\n"
	    "# left in " TACOD_SLURM_STATUS " for tacod, which may read it "
	    "after Slurm\n"
	    "# has forgotten the job.\n"
	    "dir='%s'\n"
	    "'%s' --no-progress --events-file \"$dir/" TACOD_SLURM_EVENTS
	    "\" \\\n"
	    "\t--backend '%s' --resume \"$dir/job.json\" \\\n"
	    "\t2>>\"$dir/" TACOD_SLURM_STDERR "\" &\n"
	    "pid=$!\n"
	    "echo \"$pid\" >\"$dir/" TACOD_SLURM_PID "\"\n"
	    "trap 'kill -TERM \"$pid\" 2>/dev/null' TERM\n"
	    "while :; do\n"
	    "\twait \"$pid\"\n"
	    "\tst=$?\n"
	    "\tkill -0 \"$pid\" 2>/dev/null || break\n"
	    "done\n"
	    "echo \"$st\" >\"$dir/" TACOD_SLURM_STATUS ".tmp\"\n"
	    "sync \"$dir/" TACOD_SLURM_STATUS ".tmp\"\n"
	    "mv -f \"$dir/" TACOD_SLURM_STATUS
	    ".tmp\" \"$dir/" TACOD_SLURM_STATUS "\"\n"
	    "exit \"$st\"\n",
	    dir, taco_train, backend);
	if (n < 0)
		return taco_err_set(err, -ENOMEM, "out of memory");
	snprintf(path, sizeof(path), "%s/" TACOD_SLURM_SCRIPT, dir);
	r = taco_write_file_atomic(path, text, (size_t)n, err);
	free(text);
	if (r == 0 && chmod(path, 0755))
		r = taco_err_set(err, -errno, "%s: chmod: %s", path,
				 strerror(errno));
	return r;
}

int tacod_slurm_read_status(const char *dir, int64_t *status, int *sig,
			    taco_err *err)
{
	char path[TACOD_PATH_MAX + 160], *text = NULL;
	size_t len = 0;
	int r;

	snprintf(path, sizeof(path), "%s/" TACOD_SLURM_STATUS, dir);
	if (access(path, F_OK))
		return -ENOENT;
	r = taco_read_file(path, 64, &text, &len, err);
	if (r == 0)
		r = tacod_slurm_parse_status(text, len, status, sig, err);
	if (r < 0)
		taco_err_prefix(err, r, "%s", path);
	free(text);
	return r;
}

void tacod_slurm_stderr_tail(const char *dir, char *out, size_t cap)
{
	char path[TACOD_PATH_MAX + 160];
	FILE *f;
	long size;
	size_t n;

	out[0] = 0;
	snprintf(path, sizeof(path), "%s/" TACOD_SLURM_STDERR, dir);
	f = fopen(path, "rb");
	if (!f)
		return;
	if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 0) {
		long from = size > (long)cap - 1 ? size - (long)cap + 1 : 0;
		if (fseek(f, from, SEEK_SET) == 0) {
			n = fread(out, 1, cap - 1, f);
			/* a tail of a longer file: marked, from a character */
			taco_text_tail(out, cap, out, n, from > 0);
		}
	}
	fclose(f);
}

int tacod_slurm_clean(const char *dir, taco_err *err)
{
	static const char *const names[] = {
	    TACOD_SLURM_STATUS, TACOD_SLURM_STATUS ".tmp", TACOD_SLURM_EVENTS,
	    TACOD_SLURM_PID, TACOD_SLURM_STDERR};
	char path[TACOD_PATH_MAX + 160];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		if (unlink(path) && errno != ENOENT)
			return taco_err_set(err, -errno, "%s: %s", path,
					    strerror(errno));
	}
	return 0;
}

int tacod_slurm_read_lines(const char *path, int64_t *offset, size_t max_bytes,
			   size_t line_max,
			   void (*line)(const char *text, size_t len,
					void *ctx),
			   void *ctx, taco_err *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t cap = max_bytes + 1, have = 0, start = 0;
	char *buf;
	ssize_t got;
	int rc = 0;

	if (fd < 0)
		return errno == ENOENT ? 0
				       : taco_err_set(err, -errno, "%s: %s",
						      path, strerror(errno));
	{
		/* only what is there: the file's size bounds the read */
		struct stat st;
		if (fstat(fd, &st) || st.st_size <= *offset) {
			close(fd);
			return 0;
		}
		if ((uint64_t)(st.st_size - *offset) < max_bytes)
			max_bytes = (size_t)(st.st_size - *offset);
		cap = max_bytes + 1;
	}
	buf = malloc(cap);
	if (!buf) {
		close(fd);
		return taco_err_set(err, -ENOMEM, "out of memory");
	}
	while (have < max_bytes &&
	       (got = pread(fd, buf + have, max_bytes - have,
			    (off_t)(*offset + (int64_t)have))) > 0)
		have += (size_t)got;
	for (size_t i = 0; i < have; i++) {
		if (buf[i] != '\n')
			continue;
		if (i - start > line_max) {
			rc = taco_err_set(err, -E2BIG,
					  "%s: an event line over %zu bytes",
					  path, line_max);
			break;
		}
		line(buf + start, i - start, ctx);
		start = i + 1;
	}
	/* the rest is a line still being written, unless it is already
	 * too long to be one */
	if (rc == 0 && have - start > line_max)
		rc = taco_err_set(err, -E2BIG,
				  "%s: an event line over %zu bytes", path,
				  line_max);
	*offset += (int64_t)start;
	free(buf);
	close(fd);
	return rc;
}
