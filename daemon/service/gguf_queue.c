/* service/gguf_queue.c: the GGUF conversions tacod runs on demand
 * (service/gguf.c has their routes, docs/gguf.md "From tacod").
 *
 * A conversion is a `taco-train --die-with-parent --export-gguf` child, as
 * a job is a taco-train child: a malformed checkpoint cannot take tacod
 * down, and tacod links no engine code. One thread runs them one at a time
 * (each reads and writes the whole model: two at once only share the
 * disk), oldest first, from a small queue. The files are the truth: a file
 * at its final name is complete (taco-train writes a temporary file,
 * fsyncs, renames), so what the queue loses in a restart is only the
 * conversions that had not finished, which a client asks for again. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon/service/gguf.h"

extern char **environ;

const char *const tacod_gguf_types[] = {"bf16", "f16", "q8_0", NULL};

/* ---- names: taco-train's, OUTPUT_DIR/gguf/NAME --------------------- */

int tacod_gguf_name_parse(const char *name, int64_t *step, int *type)
{
	const char *p = name, *t;
	int64_t v = -1;

	if (!strncmp(p, "model-", 6)) {
		p += 6;
	} else if (!strncmp(p, "step-", 5)) {
		const char *d = p += 5;
		v = 0;
		while (*p >= '0' && *p <= '9' && v < INT64_MAX / 10 - 9)
			v = v * 10 + (*p++ - '0');
		/* taco-train's %08lld: 8 digits, more only when needed */
		if (p - d < 8 || *p != '-' || (p - d > 8 && *d == '0'))
			return -1;
		p++;
	} else {
		return -1;
	}
	if (!(t = strstr(p, ".gguf")) || t[5])
		return -1;
	for (int i = 0; tacod_gguf_types[i]; i++)
		if ((size_t)(t - p) == strlen(tacod_gguf_types[i]) &&
		    !strncmp(p, tacod_gguf_types[i], (size_t)(t - p))) {
			*step = v;
			*type = i;
			return 0;
		}
	return -1;
}

/* ---- the conversion thread ----------------------------------------- */

/* The last bytes of the child's stderr into tail (NUL-terminated); the
 * pipe is read until its end or deadline (CLOCK_MONOTONIC seconds). */
static int read_stderr(int fd, char *tail, size_t cap, time_t deadline)
{
	size_t len = 0;
	char buf[4096];

	tail[0] = 0;
	for (;;) {
		struct timespec now;
		struct pollfd p = {.fd = fd, .events = POLLIN};
		ssize_t n;

		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec >= deadline)
			return -ETIMEDOUT;
		if (poll(&p, 1, 1000) <= 0)
			continue;
		n = read(fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return 0;
		for (ssize_t i = 0; i < n; i++) {
			if (len + 1 >= cap) {
				memmove(tail, tail + len - cap / 2, cap / 2);
				len = cap / 2;
			}
			tail[len++] = buf[i];
		}
		tail[len] = 0;
	}
}

void tacod_gguf_remove_stale(const char *path)
{
	char dir[TACOD_PATH_MAX + 96], full[2 * TACOD_PATH_MAX + 256];
	const char *slash = strrchr(path, '/'), *name;
	struct dirent *e;
	size_t n;
	DIR *d;

	if (!slash)
		return;
	snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	name = slash + 1;
	n = strlen(name);
	if (!(d = opendir(dir)))
		return;
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, name, n) &&
		    !strncmp(e->d_name + n, ".tmp-", 5)) {
			snprintf(full, sizeof(full), "%s/%s", dir, e->d_name);
			unlink(full);
		}
	closedir(d);
}

/* Runs one conversion (lock not held): 0, or -1 with msg set. */
static int convert(tacod_service *s, tacod_gguf_task *t, const char *job_path,
		   char *msg, size_t cap)
{
	char type[8], ckpt[TACOD_PATH_MAX], out[TACOD_PATH_MAX + 96];
	char tmp[TACOD_PATH_MAX + 128], tail[TACOD_GGUF_ERR_MAX];
	char *argv[12];
	int n = 0, fds[2], status = 0, rc;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t sa;
	sigset_t none, dflt;
	struct timespec now;
	int64_t step;
	pid_t pid;
	int ti;

	pthread_mutex_lock(&s->lock);
	tacod_gguf_name_parse(t->name, &step, &ti);
	snprintf(type, sizeof(type), "%s", tacod_gguf_types[ti]);
	snprintf(ckpt, sizeof(ckpt), "%s", t->ckpt);
	snprintf(out, sizeof(out), "%s", t->out);
	pthread_mutex_unlock(&s->lock);
	argv[n++] = s->cfg.taco_train;
	argv[n++] = "--die-with-parent";
	argv[n++] = "--export-gguf";
	argv[n++] = type;
	if (ckpt[0]) {
		argv[n++] = "--checkpoint";
		argv[n++] = ckpt;
	}
	argv[n++] = "--output";
	argv[n++] = out;
	argv[n++] = (char *)job_path;
	argv[n] = NULL;
	/* what a conversion of this name left when tacod was killed: only
	 * one conversion of a name runs at a time, and the job's own
	 * export_gguf has finished before its final model can be asked for */
	tacod_gguf_remove_stale(out);
	if (pipe2(fds, O_CLOEXEC)) {
		snprintf(msg, cap, "cannot make a pipe: %s", strerror(errno));
		return -1;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
	/* the child starts with no signal blocked and the usual
	 * dispositions, whatever this thread and tacod have set */
	posix_spawnattr_init(&sa);
	sigemptyset(&none);
	sigemptyset(&dflt);
	sigaddset(&dflt, SIGPIPE);
	sigaddset(&dflt, SIGTERM);
	sigaddset(&dflt, SIGINT);
	sigaddset(&dflt, SIGHUP);
	posix_spawnattr_setsigmask(&sa, &none);
	posix_spawnattr_setsigdefault(&sa, &dflt);
	posix_spawnattr_setflags(&sa, POSIX_SPAWN_SETSIGMASK |
					  POSIX_SPAWN_SETSIGDEF);
	rc = posix_spawnp(&pid, argv[0], &fa, &sa, argv, environ);
	posix_spawnattr_destroy(&sa);
	posix_spawn_file_actions_destroy(&fa);
	close(fds[1]);
	if (rc) {
		close(fds[0]);
		snprintf(msg, cap, "cannot start %s: %s", argv[0],
			 strerror(rc));
		return -1;
	}
	pthread_mutex_lock(&s->lock);
	t->pid = pid;
	if (s->gguf->stop || t->cancelled)
		kill(pid, SIGKILL);
	pthread_mutex_unlock(&s->lock);
	clock_gettime(CLOCK_MONOTONIC, &now);
	rc = read_stderr(fds[0], tail, sizeof(tail),
			 now.tv_sec + TACOD_GGUF_TIMEOUT_S);
	if (rc)
		kill(pid, SIGKILL);
	close(fds[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	pthread_mutex_lock(&s->lock);
	t->pid = 0;
	pthread_mutex_unlock(&s->lock);
	/* a killed child leaves its temporary file (gguf_write.c's name) */
	snprintf(tmp, sizeof(tmp), "%s.tmp-%d", out, (int)pid);
	unlink(tmp);
	if (rc) {
		snprintf(msg, cap,
			 "the conversion ran past its limit of %d s and was "
			 "stopped",
			 TACOD_GGUF_TIMEOUT_S);
		return -1;
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	/* taco-train's message without its prefix and newline */
	{
		char *m = tail, *e;
		if (!strncmp(m, "taco-train: ", 12))
			m += 12;
		e = m + strlen(m);
		while (e > m && (e[-1] == '\n' || e[-1] == ' '))
			*--e = 0;
		if (*m)
			snprintf(msg, cap, "%s", m);
		else if (WIFSIGNALED(status))
			snprintf(msg, cap,
				 "the conversion was killed by "
				 "signal %d",
				 WTERMSIG(status));
		else
			snprintf(msg, cap,
				 "the conversion exited with "
				 "status %d",
				 WEXITSTATUS(status));
	}
	return -1;
}

static tacod_gguf_task *next_queued(struct tacod_gguf *g)
{
	tacod_gguf_task *best = NULL;

	for (int i = 0; i < TACOD_GGUF_TASKS; i++)
		if (g->task[i].state == TACOD_GGUF_QUEUED &&
		    (!best || g->task[i].created_at < best->created_at))
			best = &g->task[i];
	return best;
}

/* The job's event for a conversion that ended (lock held). */
static void conversion_event(tacod_service *s, const tacod_gguf_task *t, int ok,
			     uint64_t bytes)
{
	char msg[TACOD_GGUF_ERR_MAX + 128];

	if (ok)
		snprintf(msg, sizeof(msg), "Converted to GGUF: %s (%llu bytes)",
			 t->name, (unsigned long long)bytes);
	else
		snprintf(msg, sizeof(msg), "GGUF conversion %s failed: %s",
			 t->name, t->error);
	tacod_service_event(s, t->job, ok ? "info" : "warn", "message", msg,
			    json_pack("{ss ss sb}", "event", "gguf", "name",
				      t->name, "ok", ok));
}

static void *converter(void *arg)
{
	tacod_service *s = arg;
	struct tacod_gguf *g = s->gguf;

	pthread_mutex_lock(&s->lock);
	while (!g->stop) {
		tacod_gguf_task *t = next_queued(g);
		char job_path[TACOD_PATH_MAX + 96],
		    msg[TACOD_GGUF_ERR_MAX] = "";
		struct stat st;
		int rc;

		if (!t) {
			pthread_cond_wait(&g->cond, &s->lock);
			continue;
		}
		t->state = TACOD_GGUF_RUNNING;
		snprintf(job_path, sizeof(job_path), "%s/%s/job.json",
			 s->jobs_dir, t->job);
		pthread_mutex_unlock(&s->lock);
		rc = convert(s, t, job_path, msg, sizeof(msg));
		pthread_mutex_lock(&s->lock);
		if (t->cancelled) {
			/* the model was deleted: its gguf/ goes too (rmdir:
			 * only when nothing else is left in it) */
			char *slash = strrchr(t->out, '/');
			unlink(t->out);
			if (slash) {
				*slash = 0;
				rmdir(t->out);
			}
			t->state = TACOD_GGUF_FREE;
			continue;
		}
		if (rc == 0 && stat(t->out, &st) == 0) {
			conversion_event(s, t, 1, (uint64_t)st.st_size);
			t->state =
			    TACOD_GGUF_FREE; /* the file tells from now on */
			continue;
		}
		if (g->stop) {
			t->state =
			    TACOD_GGUF_FREE; /* asked again after a restart */
			continue;
		}
		tacod_name_job_paths(s, t->job, msg, sizeof(msg));
		snprintf(t->error, sizeof(t->error), "%s",
			 msg[0] ? msg : "the conversion wrote no file");
		t->state = TACOD_GGUF_FAILED;
		t->finished_at = tacod_now();
		conversion_event(s, t, 0, 0);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

int tacod_gguf_start(tacod_service *s, taco_err *err)
{
	struct tacod_gguf *g = calloc(1, sizeof(*g));
	int rc;

	if (!g)
		return taco_err_set(err, -ENOMEM, "out of memory");
	if ((rc = pthread_cond_init(&g->cond, NULL))) {
		free(g);
		return taco_err_set(err, -rc, "cannot make a condition: %s",
				    strerror(rc));
	}
	s->gguf = g;
	if ((rc = pthread_create(&g->thread, NULL, converter, s))) {
		pthread_cond_destroy(&g->cond);
		s->gguf = NULL;
		free(g);
		return taco_err_set(err, -rc,
				    "cannot start the GGUF conversion "
				    "thread: %s",
				    strerror(rc));
	}
	g->started = 1;
	return 0;
}

void tacod_gguf_stop(tacod_service *s)
{
	struct tacod_gguf *g = s->gguf;

	if (!g)
		return;
	g->stop = 1;
	for (int i = 0; i < TACOD_GGUF_TASKS; i++)
		if (g->task[i].pid > 0)
			kill(g->task[i].pid, SIGKILL);
	pthread_cond_broadcast(&g->cond);
}

void tacod_gguf_join(tacod_service *s)
{
	struct tacod_gguf *g = s->gguf;

	if (!g)
		return;
	pthread_mutex_lock(&s->lock);
	tacod_gguf_stop(s);
	pthread_mutex_unlock(&s->lock);
	if (g->started)
		pthread_join(g->thread, NULL);
	pthread_cond_destroy(&g->cond);
	free(g);
	s->gguf = NULL;
}

void tacod_gguf_forget_job(tacod_service *s, const char *job)
{
	struct tacod_gguf *g = s->gguf;

	for (int i = 0; g && i < TACOD_GGUF_TASKS; i++) {
		tacod_gguf_task *t = &g->task[i];
		if (t->state == TACOD_GGUF_FREE || strcmp(t->job, job))
			continue;
		if (t->state == TACOD_GGUF_RUNNING) {
			t->cancelled = 1;
			if (t->pid > 0)
				kill(t->pid, SIGKILL);
		} else {
			t->state = TACOD_GGUF_FREE;
		}
	}
}
