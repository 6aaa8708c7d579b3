/* test_tacoctl.c: the tacoctl binary against a real tacod on loopback (and
 * its unix socket): every command, --json, errors, where the URL and token
 * come from, progress on a pseudo-terminal and in a pipe; a scripted
 * server for what tacod cannot be made to do on cue (a stream that drops,
 * a create whose answer is lost); and the tar extractor on hostile
 * archives. */
#include <check.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <pty.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client/tar.h"
#include "daemon/http/auth.h"
#include "tacod_harness.h"
#include "testutil.h"
#include "util/fsutil.h"

#define RUN_TIMEOUT_S 240
#define MAX_ARGS 48
#define MAX_ENV 16

/* ---- running tacoctl ---------------------------------------------------- */

typedef struct run {
	int status; /* exit status, or 128 + signal */
	char *out, *err;
} run;

static char home[64];	/* HOME of the runs; XDG_CONFIG_HOME is its xdg/ */
static char url[128];	/* TACOD_URL of the runs, "" for none */
static char token[128]; /* TACOD_TOKEN of the runs, "" for none */
static int no_xdg;	/* leave XDG_CONFIG_HOME unset */

static void run_free(run *r)
{
	free(r->out);
	free(r->err);
	memset(r, 0, sizeof(*r));
}

/* argv and envp built before fork: the child only execs (tacod's threads
 * may hold malloc's lock at the fork). */
static void prepare(char **argv, char **envp, char *store, size_t cap,
		    va_list ap)
{
	static const char *const pass[] = {"PATH", "ASAN_OPTIONS",
					   "UBSAN_OPTIONS", "LSAN_OPTIONS"};
	const char *bin = getenv("TACO_BIN_DIR");
	size_t n = 0;
	int e = 0, a = 0;
	const char *s;

#define ADD(vec, idx, ...)                                                     \
	do {                                                                   \
		int k_ = snprintf(store + n, cap - n, __VA_ARGS__);            \
		ck_assert(k_ >= 0 && (size_t)k_ < cap - n);                    \
		vec[idx++] = store + n;                                        \
		n += (size_t)k_ + 1;                                           \
	} while (0)
	ADD(argv, a, "%s/tacoctl", bin ? bin : ".");
	while ((s = va_arg(ap, const char *)) && a < MAX_ARGS - 1)
		argv[a++] = (char *)s;
	argv[a] = NULL;
	for (size_t i = 0; i < sizeof(pass) / sizeof(pass[0]); i++)
		if (getenv(pass[i]))
			ADD(envp, e, "%s=%s", pass[i], getenv(pass[i]));
	ADD(envp, e, "HOME=%s", home);
	if (!no_xdg)
		ADD(envp, e, "XDG_CONFIG_HOME=%s/xdg", home);
	if (url[0])
		ADD(envp, e, "TACOD_URL=%s", url);
	if (token[0])
		ADD(envp, e, "TACOD_TOKEN=%s", token);
	ADD(envp, e, "TZ=UTC");
	envp[e] = NULL;
#undef ADD
}

static int wait_exit(pid_t pid)
{
	int st = 0;

	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void append(char **buf, size_t *len, const char *d, size_t n)
{
	char *g = realloc(*buf, *len + n + 1);

	ck_assert_ptr_nonnull(g);
	memcpy(g + *len, d, n);
	*len += n;
	g[*len] = 0;
	*buf = g;
}

/* Runs tacoctl with the arguments; stdout and stderr are pipes, and so is
 * stdin when input is not NULL (written whole, then closed). Returns the
 * exit status. */
static int ctl_v(run *r, const char *input, va_list ap)
{
	char *argv[MAX_ARGS], *envp[MAX_ENV], store[16384];
	int out[2], err[2], in[2] = {-1, -1}, open_fds = 2;
	size_t on = 0, en = 0;
	time_t start = time(NULL);
	pid_t pid;

	prepare(argv, envp, store, sizeof(store), ap);
	memset(r, 0, sizeof(*r));
	ck_assert(pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0);
	ck_assert(!input || pipe2(in, O_CLOEXEC) == 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (input)
			dup2(in[0], 0);
		dup2(out[1], 1);
		dup2(err[1], 2);
		execve(argv[0], argv, envp);
		_exit(127);
	}
	close(out[1]);
	close(err[1]);
	if (input) {
		/* a few lines: the pipe's buffer takes them at once */
		close(in[0]);
		ck_assert(write(in[1], input, strlen(input)) ==
			  (ssize_t)strlen(input));
		close(in[1]);
	}
	append(&r->out, &on, "", 0);
	append(&r->err, &en, "", 0);
	while (open_fds) {
		struct pollfd p[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
		char b[4096];
		ck_assert_msg(time(NULL) - start < RUN_TIMEOUT_S,
			      "tacoctl %s ran too long", argv[1]);
		if (poll(p, 2, 1000) <= 0)
			continue;
		for (int i = 0; i < 2; i++) {
			ssize_t k;
			if (!p[i].revents || p[i].fd < 0)
				continue;
			k = read(p[i].fd, b, sizeof(b));
			if (k > 0) {
				append(i ? &r->err : &r->out, i ? &en : &on, b,
				       (size_t)k);
			} else {
				close(i ? err[0] : out[0]);
				if (i)
					err[0] = -1;
				else
					out[0] = -1;
				open_fds--;
			}
		}
	}
	r->status = wait_exit(pid);
	return r->status;
}

static int ctl(run *r, ...)
{
	va_list ap;
	int st;

	va_start(ap, r);
	st = ctl_v(r, NULL, ap);
	va_end(ap);
	return st;
}

static int ctl_in(run *r, const char *input, ...)
{
	va_list ap;
	int st;

	va_start(ap, input);
	st = ctl_v(r, input, ap);
	va_end(ap);
	return st;
}

/* The same on a pseudo-terminal (stdout and stderr), 100 columns. */
static int ctl_pty(run *r, ...)
{
	char *argv[MAX_ARGS], *envp[MAX_ENV], store[16384], b[4096];
	struct winsize ws = {.ws_row = 40, .ws_col = 100};
	time_t start = time(NULL);
	size_t on = 0;
	va_list ap;
	int master;
	pid_t pid;
	ssize_t k;

	va_start(ap, r);
	prepare(argv, envp, store, sizeof(store), ap);
	va_end(ap);
	memset(r, 0, sizeof(*r));
	pid = forkpty(&master, NULL, NULL, &ws);
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		execve(argv[0], argv, envp);
		_exit(127);
	}
	append(&r->out, &on, "", 0);
	for (;;) {
		struct pollfd p = {master, POLLIN, 0};
		ck_assert(time(NULL) - start < RUN_TIMEOUT_S);
		if (poll(&p, 1, 1000) <= 0)
			continue;
		/* EIO once the child is gone: the pty has no writer */
		if ((k = read(master, b, sizeof(b))) <= 0)
			break;
		append(&r->out, &on, b, (size_t)k);
	}
	close(master);
	r->err = strdup("");
	r->status = wait_exit(pid);
	return r->status;
}

#define ck_run(want, r, ...)                                                   \
	do {                                                                   \
		int st_ = ctl(r, __VA_ARGS__, (char *)NULL);                   \
		ck_assert_msg(st_ == (want),                                   \
			      "exit %d (want %d)\nstdout: %s\nstderr: %s",     \
			      st_, (want), (r)->out, (r)->err);                \
	} while (0)

static void has(const char *text, const char *what)
{
	ck_assert_msg(strstr(text, what), "'%s' not in:\n%s", what, text);
}

/* One line on stderr, nothing on stdout: how a failure reads. */
static void one_error_line(const run *r)
{
	size_t n = strlen(r->err);

	ck_assert_msg(n > 0 && r->err[n - 1] == '\n' &&
			  !memchr(r->err, '\n', n - 1),
		      "stderr: [%s]", r->err);
	ck_assert_str_eq(r->out, "");
}

static json_t *parse(const char *text)
{
	json_error_t je;
	json_t *j = json_loads(text, 0, &je);

	ck_assert_msg(j != NULL, "not JSON (%s): %s", je.text, text);
	return j;
}

/* The first line of text, without its newline, in a malloc'd string. */
static char *first_line(const char *text)
{
	size_t n = strcspn(text, "\n");
	char *s = strndup(text, n);

	ck_assert_ptr_nonnull(s);
	return s;
}

/* ---- one tacod per test ------------------------------------------------- */

static char sock_path[160];
static char tokens_path[160];
static int running_max;	    /* limits.max_running_jobs, 0: default */
static uint64_t sync_limit; /* limits.max_sync_validate_bytes, 0: default */

static void tweak(tacod_config *c)
{
	snprintf(c->unix_socket, sizeof(c->unix_socket), "%s", sock_path);
	snprintf(c->tokens_file, sizeof(c->tokens_file), "%s", tokens_path);
	if (running_max)
		c->limits.max_running_jobs = running_max;
	if (sync_limit)
		c->limits.max_sync_validate_bytes = sync_limit;
}

static void make_home(void)
{
	char dir[96];

	snprintf(home, sizeof(home), "/tmp/tacoctl-home-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(home));
	snprintf(dir, sizeof(dir), "%s/.config", home);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	snprintf(dir, sizeof(dir), "%s/xdg", home);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
}

static void remove_home(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", home);
	ck_assert_int_eq(system(cmd), 0);
}

static void setup(uint64_t device_memory)
{
	make_home();
	snprintf(sock_path, sizeof(sock_path), "%s/tacod.sock", home);
	th_start(device_memory, tweak);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", th_port);
}

static void teardown(void)
{
	th_stop();
	remove_home();
}

static json_t *get_job(const char *id)
{
	char path[256];
	json_t *j;

	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s", id);
	ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 200);
	return j;
}

/* A safetensors file is whole: 8 + header + the end of the last tensor's
 * data is its size. Returns the size. */
static long safetensors_size(const char *path)
{
	size_t len;
	char *b = tu_read_file(path, &len);
	uint64_t n = 0, end = 0;
	json_t *h, *v;
	const char *k;

	ck_assert_msg(b != NULL, "cannot read %s", path);
	ck_assert_uint_ge(len, 8);
	for (int i = 7; i >= 0; i--)
		n = n << 8 | (unsigned char)b[i];
	ck_assert_uint_le(8 + n, len);
	h = json_loadb(b + 8, n, 0, NULL);
	ck_assert_ptr_nonnull(h);
	json_object_foreach(h, k, v)
	{
		json_t *off = json_object_get(v, "data_offsets");
		if (!strcmp(k, "__metadata__"))
			continue;
		if ((uint64_t)json_integer_value(json_array_get(off, 1)) > end)
			end = (uint64_t)json_integer_value(
			    json_array_get(off, 1));
	}
	json_decref(h);
	free(b);
	ck_assert_uint_gt(end, 0);
	ck_assert_uint_eq(8 + n + end, len);
	return (long)len;
}

static int same_file(const char *a, const char *b)
{
	size_t na, nb;
	char *pa = tu_read_file(a, &na), *pb = tu_read_file(b, &nb);
	int same = pa && pb && na == nb && !memcmp(pa, pb, na);

	free(pa);
	free(pb);
	return same;
}

/* ---- files, jobs followed to the end, logs, checkpoints ---------------- */

START_TEST(test_files_jobs_checkpoints)
{
	run r;
	char *file, *job, dir[128], other[128], ckpt[128], path[512];
	char server[512], ft[100], results[64];
	json_t *j;
	struct stat st;

	setup(8ull << 30);
	/* upload, list, get */
	ck_run(0, &r, "files", "upload", tu_fixture("data/count_train.jsonl"));
	file = first_line(r.out);
	ck_assert_msg(!strncmp(file, "file-", 5), "%s", r.out);
	run_free(&r);
	ck_run(0, &r, "files", "list");
	has(r.out, file);
	has(r.out, "count_train.jsonl");
	run_free(&r);
	ck_assert_int_eq(stat(tu_fixture("data/count_train.jsonl"), &st), 0);
	ck_run(0, &r, "files", "get", file);
	snprintf(path, sizeof(path), "%lld", (long long)st.st_size);
	has(r.out, path);
	run_free(&r);
	snprintf(path, sizeof(path), "%s/copy.jsonl", home);
	ck_run(0, &r, "files", "get", file, "-o", path);
	ck_assert(same_file(path, tu_fixture("data/count_train.jsonl")));
	run_free(&r);

	/* create by flags with a local file, followed to the end */
	ck_run(0, &r, "jobs", "create", "--model", "llama_gqa", "--train",
	       tu_fixture("data/count_train.jsonl"), "--steps", "6",
	       "--seq-len", "24", "--lr", "0.03", "--checkpoint-every", "2",
	       "--keep-checkpoints", "3", "--suffix", "ctl", "--metadata",
	       "team=nlp", "--follow");
	job = first_line(r.out);
	ck_assert_msg(!strncmp(job, "ftjob-", 6), "%s", r.out);
	has(r.out, "Created fine-tuning job");
	has(r.out, "step 6/6");
	has(r.out, "succeeded: ft:llama_gqa:ctl:");
	ck_assert_ptr_null(strchr(r.out, '\r')); /* a pipe: plain lines */
	run_free(&r);
	j = get_job(job);
	ck_assert_str_eq(th_str(j, "status"), "succeeded");
	ck_assert(!strncmp(th_str(j, "training_file"), "file-", 5));
	ck_assert_str_eq(th_str(json_object_get(j, "metadata"), "team"), "nlp");
	ck_assert_int_eq(json_integer_value(json_object_get(
			     json_object_get(j, "taco"), "steps")),
			 6);
	json_decref(j);

	/* get, list, --json */
	ck_run(0, &r, "jobs", "get", job);
	has(r.out, "succeeded");
	has(r.out, "trained_tokens");
	/* its result file: named, listed, downloaded */
	j = get_job(job);
	snprintf(results, sizeof(results), "%s",
		 json_string_value(
		     json_array_get(json_object_get(j, "result_files"), 0)));
	json_decref(j);
	ck_assert_msg(!strncmp(results, "file-", 5), "%s", results);
	snprintf(path, sizeof(path), "result_file        %s\n", results);
	has(r.out, path);
	run_free(&r);
	ck_run(0, &r, "files", "list");
	has(r.out, "PURPOSE");
	has(r.out, results);
	has(r.out, "fine-tune-results");
	has(r.out, "step_metrics.csv");
	run_free(&r);
	snprintf(path, sizeof(path), "%s/step_metrics.csv", home);
	ck_run(0, &r, "files", "get", results, "-o", path);
	run_free(&r);
	{
		char *csv = NULL;
		size_t len = 0;
		ck_assert_int_eq(
		    taco_read_file(path, 1 << 20, &csv, &len, NULL), 0);
		const char *head = "step,train_loss,train_accuracy,"
				   "valid_loss,valid_mean_token_accuracy,";
		ck_assert_msg(!strncmp(csv, head, strlen(head)), "%s", csv);
		has(csv, "\n6,");
		free(csv);
	}
	ck_run(0, &r, "jobs", "get", job, "--json");
	j = parse(r.out);
	ck_assert_str_eq(th_str(j, "id"), job);
	ck_assert_str_eq(th_str(j, "object"), "fine_tuning.job");
	json_decref(j);
	run_free(&r);
	ck_run(0, &r, "--json", "jobs", "list");
	j = parse(r.out);
	ck_assert_str_eq(th_str(j, "object"), "list");
	ck_assert_str_eq(
	    th_str(json_array_get(json_object_get(j, "data"), 0), "id"), job);
	json_decref(j);
	run_free(&r);
	ck_run(0, &r, "jobs", "list");
	has(r.out, job);
	has(r.out, "STATUS");
	run_free(&r);
	ck_run(0, &r, "jobs", "wait", job);
	has(r.out, "succeeded");
	run_free(&r);

	/* logs of the finished job, oldest first; and followed: it ends */
	ck_run(0, &r, "logs", job);
	has(r.out, "step 1/6");
	ck_assert_ptr_nonnull(strstr(r.out, "Created fine-tuning job"));
	ck_assert(strstr(r.out, "Created fine-tuning job") <
		  strstr(r.out, "successfully completed"));
	run_free(&r);
	ck_run(0, &r, "logs", "-f", job);
	has(r.out, "step 6/6");
	has(r.out, "succeeded");
	ck_assert_ptr_null(strchr(r.out, '\r'));
	run_free(&r);
	ck_run(0, &r, "logs", "--json", job);
	j = parse(r.out);
	ck_assert_int_gt(json_array_size(json_object_get(j, "data")), 6);
	json_decref(j);
	run_free(&r);

	/* checkpoints: the list, then step 6 and the final model */
	ck_run(0, &r, "checkpoints", "list", job);
	snprintf(ckpt, sizeof(ckpt), "ftckpt-%s-6", job + 6);
	has(r.out, ckpt);
	has(r.out, "STEP");
	has(r.out, "TRAIN LOSS");
	run_free(&r);
	snprintf(dir, sizeof(dir), "%s/step6", home);
	ck_run(0, &r, "checkpoints", "download", job, "6", "-o", dir);
	has(r.out, " files, ");
	run_free(&r);
	snprintf(path, sizeof(path), "%s/config.json", dir);
	ck_assert_int_eq(access(path, R_OK), 0);
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	snprintf(server, sizeof(server),
		 "%s/jobs/%s/out/checkpoints/step-00000006/model.safetensors",
		 th_state, job);
	ck_assert_int_eq(safetensors_size(path), safetensors_size(server));
	snprintf(other, sizeof(other), "%s/final", home);
	ck_run(0, &r, "checkpoints", "download", "--json", job, "-o", other);
	j = parse(r.out);
	ck_assert_str_eq(th_str(j, "directory"), other);
	json_decref(j);
	run_free(&r);
	snprintf(path, sizeof(path), "%s/model.safetensors", other);
	snprintf(server, sizeof(server),
		 "%s/jobs/%s/out/model/model.safetensors", th_state, job);
	safetensors_size(path);
	ck_assert(same_file(path, server));
	/* by id, into a directory that is not empty: refused, untouched */
	ck_run(1, &r, "checkpoints", "download", job, ckpt, "-o", other);
	one_error_line(&r);
	has(r.err, "not empty");
	run_free(&r);
	ck_assert(same_file(path, server));

	/* the fine-tuned model: listed, shown, trained from (as from a
	 * checkpoint), then deleted */
	snprintf(ft, sizeof(ft), "ft:llama_gqa:ctl:%s", job + 6);
	ck_run(0, &r, "models");
	has(r.out, "PARENT");
	has(r.out, ft);
	has(r.out, "llama_gqa");
	run_free(&r);
	ck_run(0, &r, "models", "get", ft);
	has(r.out, "root      llama_gqa");
	has(r.out, "parent    llama_gqa");
	run_free(&r);
	snprintf(other, sizeof(other), "%s:ckpt-step-6", ft);
	ck_run(0, &r, "models", "get", other);
	has(r.out, other);
	run_free(&r);
	ck_run(0, &r, "plan", "--model", ft, "--train",
	       tu_fixture("data/count_train.jsonl"), "--steps", "2",
	       "--seq-len", "24");
	run_free(&r);
	ck_run(0, &r, "jobs", "create", "--model", other, "--train",
	       tu_fixture("data/count_train.jsonl"), "--steps", "2",
	       "--seq-len", "24", "--suffix", "again", "--follow");
	has(r.out, "succeeded: ft:llama_gqa:again:");
	run_free(&r);
	ck_run(0, &r, "models", "rm", ft);
	has(r.out, "deleted");
	run_free(&r);
	ck_run(1, &r, "models", "get", ft);
	one_error_line(&r);
	has(r.err, "does not exist");
	run_free(&r);
	ck_run(1, &r, "models", "rm", "llama_gqa");
	one_error_line(&r);
	has(r.err, "base model");
	run_free(&r);
	ck_run(2, &r, "models", "get");
	run_free(&r);
	ck_run(2, &r, "models", "frobnicate");
	run_free(&r);

	/* the file is no longer used by an unfinished job */
	ck_run(0, &r, "files", "rm", file);
	has(r.out, "deleted");
	run_free(&r);
	ck_run(1, &r, "files", "get", file);
	one_error_line(&r);
	run_free(&r);
	free(file);
	free(job);
	teardown();
}
END_TEST

/* ---- plan, pause/resume, cancel, device ------------------------------ */

/* Polls until the job's status (120 s at most). */
static void wait_for(const char *id, const char *status)
{
	json_t *j = NULL;
	char *text;

	for (int i = 0; i < 1200; i++) {
		json_decref(j);
		j = get_job(id);
		if (!strcmp(th_str(j, "status"), status)) {
			json_decref(j);
			return;
		}
		usleep(100000);
	}
	text = json_dumps(j, 0);
	ck_abort_msg("job %s never reached %s: %s", id, status, text);
}

START_TEST(test_plan_pause_cancel_device)
{
	run r;
	char *file, *a, *b, *jobfile;
	json_t *j;
	FILE *f;

	running_max = 1;
	sync_limit =
	    1000; /* the plan reads no data file of 1000 bytes or more */
	setup(64ull << 20); /* 64 MB of "device" */
	ck_run(0, &r, "files", "upload", tu_fixture("data/count_train.jsonl"));
	file = first_line(r.out);
	run_free(&r);

	/* a plan that cannot fit: the table, the advice, exit status 1 */
	ck_run(1, &r, "plan", "--model", "llama_gqa", "--train", file,
	       "--steps", "2", "--seq-len", "4096", "--batch-size", "256");
	has(r.out, "TERM");
	has(r.out, "weights");
	has(r.out, "total");
	has(r.out, "device");
	has(r.out, "64.0 MiB");
	has(r.out, "fits: no");
	has(r.out, "largest batch size that fits");
	has(r.out, "would be refused: insufficient_memory");
	run_free(&r);
	/* one that fits, from a job file with a flag over it */
	jobfile = malloc(256);
	snprintf(jobfile, 256, "%s/job.json", home);
	f = fopen(jobfile, "w");
	fprintf(f,
		"{\"model\": \"llama_gqa\", \"training_file\": \"%s\", "
		"\"taco\": {\"steps\": 2, \"seq_len\": 4096}}",
		file);
	fclose(f);
	ck_run(0, &r, "plan", jobfile, "--seq-len", "24");
	has(r.out, "fits: yes");
	has(r.out, "settings: precision ");
	has(r.out, "Training data not validated: ");
	has(r.out, "larger than limits.max_sync_validate_bytes (1000)");
	run_free(&r);
	ck_run(0, &r, "plan", jobfile, "--seq-len", "24", "--json");
	j = parse(r.out);
	ck_assert_str_eq(th_str(j, "object"), "fine_tuning.plan");
	ck_assert(json_is_true(json_object_get(j, "fits")));
	json_decref(j);
	run_free(&r);
	/* the first chat as the model sees it, its trained text marked (no
	 * terminal: between [[ and ]]) */
	snprintf(jobfile, 256, "%s/chat.jsonl", home);
	f = fopen(jobfile, "w");
	fputs("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, "
	      "{\"role\": \"assistant\", \"content\": \"Hello.\"}]}\n",
	      f);
	fclose(f);
	ck_run(0, &r, "plan", "--model", "chat_llama", "--train", jobfile,
	       "--steps", "2", "--seq-len", "24");
	has(r.out, "Line 1 as the model sees it (chat template: "
		   "chat_template.jinja; the trained text between [[ and ]])");
	has(r.out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
		   "[[Hello.<|im_end|>]]\n");
	run_free(&r);
	snprintf(jobfile, 256, "%s/job.json", home);

	/* a long job runs; a second one waits in the queue */
	ck_run(0, &r, "jobs", "create", "--model", "llama_gqa", "--train", file,
	       "--steps", "100000", "--seq-len", "24");
	a = first_line(r.out);
	run_free(&r);
	ck_run(0, &r, "jobs", "create", jobfile, "--seq-len", "24");
	b = first_line(r.out);
	run_free(&r);
	wait_for(a, "running");
	wait_for(b, "queued"); /* its files validated */
	ck_run(0, &r, "device");
	has(r.out, "backend");
	has(r.out, "cpu");
	has(r.out, a);
	run_free(&r);
	ck_run(0, &r, "device", "--json");
	j = parse(r.out);
	ck_assert_str_eq(th_str(j, "object"), "device");
	ck_assert_int_eq(json_integer_value(json_object_get(j, "queued_jobs")),
			 1);
	json_decref(j);
	run_free(&r);

	/* a queued job pauses at once, resumes into the queue */
	ck_run(0, &r, "jobs", "pause", b);
	has(r.out, "paused");
	run_free(&r);
	ck_run(0, &r, "jobs", "resume", b);
	has(r.out, "queued");
	run_free(&r);
	/* resuming a job that is not paused: the server's 409 */
	ck_run(1, &r, "jobs", "resume", a);
	one_error_line(&r);
	run_free(&r);
	/* cancelled while queued: at once (before a's pause lets it run) */
	ck_run(0, &r, "jobs", "cancel", b);
	has(r.out, "cancelled");
	run_free(&r);
	/* the running one checkpoints and pauses, then resumes. Once it has
	 * trained: a SIGTERM before taco-train's handler is installed fails
	 * the job (tacod's race, reported) */
	for (int i = 0; i < 1200; i++) {
		json_t *k = get_job(a);
		long long tokens =
		    json_integer_value(json_object_get(k, "trained_tokens"));
		json_decref(k);
		if (tokens > 0)
			break;
		usleep(100000);
	}
	ck_run(0, &r, "jobs", "pause", a);
	run_free(&r);
	wait_for(a, "paused");
	ck_run(0, &r, "jobs", "resume", a);
	has(r.out, "queued");
	run_free(&r);
	/* cancelled: wait and follow say so with exit status 1 */
	ck_run(0, &r, "jobs", "cancel", a);
	run_free(&r);
	ck_run(1, &r, "jobs", "wait", "--interval", "1", "--timeout", "120", a);
	has(r.out, "cancelled");
	run_free(&r);
	ck_run(1, &r, "logs", "-f", b);
	has(r.out, "cancelled");
	run_free(&r);
	ck_run(1, &r, "jobs", "cancel", a);
	one_error_line(&r);
	run_free(&r);
	free(jobfile);
	free(file);
	free(a);
	free(b);
	teardown();
	running_max = 0;
	sync_limit = 0;
}
END_TEST

/* ---- tacoctl chat ------------------------------------------------------- */

/* chat_llama's greedy answer of at most 12 tokens to the messages (a JSON
 * array), not streamed: what tacoctl chat must print. */
static char *answer_of(const char *messages)
{
	char body[2048];
	json_t *j;
	char *a;

	snprintf(body, sizeof(body),
		 "{\"model\": \"chat_llama\", \"messages\": %s, "
		 "\"max_tokens\": 12, \"temperature\": 0}",
		 messages);
	ck_assert_int_eq(
	    th_call("POST", "/v1/chat/completions", body, NULL, &j), 200);
	a = strdup(json_string_value(json_object_get(
	    json_object_get(json_array_get(json_object_get(j, "choices"), 0),
			    "message"),
	    "content")));
	ck_assert_ptr_nonnull(a);
	json_decref(j);
	return a;
}

static void is_line(const char *out, const char *answer)
{
	ck_assert_msg(strlen(out) == strlen(answer) + 1 &&
			  !strncmp(out, answer, strlen(answer)) &&
			  out[strlen(answer)] == '\n',
		      "printed [%s], want [%s] and a newline", out, answer);
}

START_TEST(test_chat)
{
	char msgs[1024], *line, *p, *hi, *sys, *again, *text;
	json_t *j;
	size_t n = 0;
	run r;

	setup(8ull << 30);
	hi = answer_of("[{\"role\": \"user\", \"content\": \"Hi\"}]");
	ck_assert_msg(hi[0], "the fixture answers nothing");

	/* one prompt: the streamed answer is the API's answer */
	ck_run(0, &r, "chat", "--max-tokens", "12", "--temperature", "0",
	       "chat_llama", "Hi");
	is_line(r.out, hi);
	ck_assert_str_eq(r.err, "");
	run_free(&r);
	/* --json: the chunks, a line each, adding up to the answer */
	ck_run(0, &r, "--json", "chat", "--max-tokens", "12", "--temperature",
	       "0", "chat_llama", "Hi");
	text = calloc(1, strlen(r.out) + 1);
	for (p = r.out; *p;
	     p += strcspn(p, "\n") + (p[strcspn(p, "\n")] != 0)) {
		json_t *d;
		line = first_line(p);
		j = parse(line);
		ck_assert_str_eq(th_str(j, "object"), "chat.completion.chunk");
		d = json_object_get(
		    json_array_get(json_object_get(j, "choices"), 0), "delta");
		if (json_string_value(json_object_get(d, "content")))
			strcat(text, json_string_value(
					 json_object_get(d, "content")));
		json_decref(j);
		free(line);
		n++;
	}
	ck_assert_uint_ge(n, 2);
	ck_assert_str_eq(text, hi);
	free(text);
	run_free(&r);

	/* a system message goes first */
	sys = answer_of("[{\"role\": \"system\", \"content\": \"Be "
			"brief.\"}, {\"role\": \"user\", \"content\": "
			"\"Hi\"}]");
	ck_run(0, &r, "chat", "--system", "Be brief.", "--max-tokens", "12",
	       "--temperature", "0", "chat_llama", "Hi");
	is_line(r.out, sys);
	run_free(&r);

	/* a conversation: each line of the input the next user message, the
	 * answers kept in the chat, until an empty line */
	j = json_pack("[{ss ss} {ss ss} {ss ss}]", "role", "user", "content",
		      "Hi", "role", "assistant", "content", hi, "role", "user",
		      "content", "Again");
	line = json_dumps(j, 0);
	json_decref(j);
	snprintf(msgs, sizeof(msgs), "%s", line);
	free(line);
	again = answer_of(msgs);
	ck_assert_int_eq(ctl_in(&r, "Hi\nAgain\n\nNot asked\n", "chat",
				"--max-tokens", "12", "--temperature", "0",
				"chat_llama", (char *)NULL),
			 0);
	line = malloc(strlen(hi) + strlen(again) + 3);
	sprintf(line, "%s\n%s", hi, again);
	is_line(r.out, line);
	ck_assert_str_eq(r.err, ""); /* no prompt: stdin is not a terminal */
	free(line);
	run_free(&r);

	/* errors: the server's (one line, status 1), and usage (status 2) */
	ck_run(1, &r, "chat", "no-such-model", "Hi");
	one_error_line(&r);
	has(r.err, "no-such-model");
	run_free(&r);
	ck_run(2, &r, "chat", "--max-tokens", "0", "chat_llama", "Hi");
	has(r.err, "--max-tokens must be 1 to 4096");
	run_free(&r);
	ck_run(2, &r, "chat");
	run_free(&r);
	free(hi);
	free(sys);
	free(again);
	teardown();
}
END_TEST

/* ---- progress on a terminal and in a pipe ------------------------------- */

START_TEST(test_progress)
{
	run r;
	char *job, *p;
	int eta = 0, redraws = 0;

	setup(8ull << 30);
	ck_run(0, &r, "jobs", "create", "--model", "llama_gqa", "--train",
	       tu_fixture("data/count_train.jsonl"), "--steps", "400",
	       "--seq-len", "24", "--lr", "0.01");
	job = first_line(r.out);
	run_free(&r);
	ck_assert_int_eq(ctl_pty(&r, "logs", "-f", job, (char *)NULL), 0);
	/* redraws: "\rstep N/120 [...] ... ETA <digits>" */
	for (p = r.out; (p = strstr(p, "\rstep ")); p++) {
		char *end = strpbrk(p + 1, "\r\n");
		size_t n = end ? (size_t)(end - p) : strlen(p);
		char line[256];
		snprintf(line, sizeof(line), "%.*s", (int)n, p);
		ck_assert_msg(strstr(line, "/400"), "%s", line);
		redraws++;
		/* an estimate while it runs, not the final "0s" */
		eta |= !strstr(line, "400/400") && strstr(line, "ETA ") &&
		       strchr("123456789", strstr(line, "ETA ")[4]);
	}
	ck_assert_msg(redraws >= 2, "%d redraws:\n%s", redraws, r.out);
	ck_assert_msg(eta, "no ETA:\n%s", r.out);
	has(r.out, "\033[K");
	has(r.out, "step 400/400");
	has(r.out, "succeeded");
	run_free(&r);
	/* in a pipe: plain lines only */
	ck_run(0, &r, "logs", "-f", job);
	ck_assert_ptr_null(strchr(r.out, '\r'));
	ck_assert_ptr_null(strchr(r.out, '\033'));
	has(r.out, "step 400/400");
	run_free(&r);
	free(job);
	teardown();
}
END_TEST

/* ---- errors, help, the unix socket -------------------------------------- */

START_TEST(test_errors_help_socket)
{
	static const char *const cmds[][2] = {
	    {"files", "upload"},
	    {"files", "list"},
	    {"files", "get"},
	    {"files", "rm"},
	    {"jobs", "create"},
	    {"jobs", "list"},
	    {"jobs", "get"},
	    {"jobs", "cancel"},
	    {"jobs", "pause"},
	    {"jobs", "resume"},
	    {"jobs", "wait"},
	    {"logs", NULL},
	    {"plan", NULL},
	    {"checkpoints", "list"},
	    {"checkpoints", "download"},
	    {"models", NULL},
	    {"device", NULL},
	};
	char sock_url[200], want[64];
	run r;
	json_t *j;

	setup(8ull << 30);
	ck_run(1, &r, "jobs", "get", "ftjob-nope");
	one_error_line(&r);
	has(r.err, "No such job");
	run_free(&r);
	ck_run(1, &r, "--json", "logs", "ftjob-nope");
	one_error_line(&r);
	run_free(&r);
	/* connection failures name the URL */
	ck_run(1, &r, "--url", "http://127.0.0.1:1", "models");
	one_error_line(&r);
	has(r.err, "http://127.0.0.1:1");
	run_free(&r);
	ck_run(1, &r, "models", "--url", "unix:/nonexistent/tacod.sock");
	one_error_line(&r);
	has(r.err, "unix:/nonexistent/tacod.sock");
	run_free(&r);
	/* usage errors: exit status 2 */
	ck_run(2, &r, "jobs", "get");
	run_free(&r);
	ck_run(2, &r, "frobnicate");
	run_free(&r);
	ck_run(2, &r, "jobs", "create", "--model", "llama_gqa", "--steps",
	       "many");
	has(r.err, "--steps");
	run_free(&r);
	ck_run(2, &r, "jobs", "create", "--train", "file-x");
	has(r.err, "--model");
	run_free(&r);
	ck_run(2, &r, "models", "--colour");
	run_free(&r);
	ck_assert_int_eq(ctl(&r, (char *)NULL), 2);
	run_free(&r);
	/* --help everywhere */
	ck_run(0, &r, "--help");
	has(r.out, "Usage: tacoctl");
	has(r.out, "checkpoints download");
	run_free(&r);
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		snprintf(want, sizeof(want), "Usage: tacoctl %s%s%s",
			 cmds[i][0], cmds[i][1] ? " " : "",
			 cmds[i][1] ? cmds[i][1] : "");
		if (cmds[i][1])
			ck_run(0, &r, cmds[i][0], cmds[i][1], "--help");
		else
			ck_run(0, &r, cmds[i][0], "--help");
		has(r.out, want);
		has(r.out, "--json");
		run_free(&r);
	}
	ck_run(0, &r, "jobs", "--help");
	has(r.out, "pause");
	run_free(&r);
	/* models over TCP and over the unix socket */
	ck_run(0, &r, "models");
	has(r.out, "llama_gqa");
	run_free(&r);
	snprintf(sock_url, sizeof(sock_url), "unix:%s", sock_path);
	ck_run(0, &r, "--url", sock_url, "--json", "models");
	j = parse(r.out);
	ck_assert_int_gt(json_array_size(json_object_get(j, "data")), 3);
	json_decref(j);
	run_free(&r);
	teardown();
}
END_TEST

/* ---- where the URL and token come from ---------------------------------- */

static void write_config(const char *dir, const char *text)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/tacoctl", dir);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/tacoctl/config.json", dir);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

START_TEST(test_url_and_token_sources)
{
	char hash[65], cfg[512], xdg[128];
	char saved_url[128];
	FILE *f;
	run r;

	snprintf(tokens_path, sizeof(tokens_path), "/tmp/tacoctl-tok-XXXXXX");
	ck_assert_int_ge(mkstemp(tokens_path), 0);
	tacod_auth_hash_token("s3cret-token", hash);
	f = fopen(tokens_path, "w");
	fprintf(f, "%s alice admin\n", hash);
	fclose(f);
	setup(8ull << 30);
	/* no token: tacod's 401, on one line */
	ck_run(1, &r, "models");
	one_error_line(&r);
	run_free(&r);
	/* from the environment, from the flag */
	snprintf(token, sizeof(token), "s3cret-token");
	ck_run(0, &r, "models");
	has(r.out, "llama_gqa");
	run_free(&r);
	ck_run(1, &r, "--token", "wrong", "models");
	one_error_line(&r);
	run_free(&r);
	token[0] = 0;
	ck_run(0, &r, "models", "--token", "s3cret-token");
	run_free(&r);
	/* from $XDG_CONFIG_HOME/tacoctl/config.json, URL included */
	snprintf(saved_url, sizeof(saved_url), "%s", url);
	url[0] = 0;
	snprintf(xdg, sizeof(xdg), "%s/xdg", home);
	snprintf(cfg, sizeof(cfg),
		 "{\"url\": \"%s\", \"token\": \"s3cret-token\"}", saved_url);
	write_config(xdg, cfg);
	ck_run(0, &r, "models");
	has(r.out, "llama_gqa");
	run_free(&r);
	/* the flags win over the file */
	ck_run(1, &r, "--token", "wrong", "models");
	run_free(&r);
	ck_run(1, &r, "--url", "http://127.0.0.1:1", "models");
	has(r.err, "http://127.0.0.1:1");
	run_free(&r);
	/* ~/.config/tacoctl/config.json without XDG_CONFIG_HOME */
	no_xdg = 1;
	snprintf(xdg, sizeof(xdg), "%s/.config", home);
	write_config(xdg, cfg);
	ck_run(0, &r, "models");
	has(r.out, "llama_gqa");
	run_free(&r);
	/* a broken config file is an error that names it */
	write_config(xdg, "{\"url\": 5}");
	ck_run(1, &r, "models");
	one_error_line(&r);
	has(r.err, "config.json");
	run_free(&r);
	no_xdg = 0;
	snprintf(url, sizeof(url), "%s", saved_url);
	teardown();
	unlink(tokens_path);
	tokens_path[0] = 0;
}
END_TEST

/* ---- a scripted server -------------------------------------------------- */

#define SCRIPT_MAX 4

typedef struct script {
	int fd, port, n;
	const char *reply[SCRIPT_MAX]; /* NULL: close without a reply */
	char request[SCRIPT_MAX][8192];
	pthread_t thread;
} script;

/* Reads one request (headers and Content-Length body). */
static void read_request(int fd, char *buf, size_t cap)
{
	size_t n = 0, need = 0;
	char *end = NULL;

	while (n < cap - 1) {
		ssize_t k = read(fd, buf + n, cap - 1 - n);
		if (k <= 0)
			break;
		n += (size_t)k;
		buf[n] = 0;
		if (!end && (end = strstr(buf, "\r\n\r\n"))) {
			char *cl = strcasestr(buf, "Content-Length:");
			need = (size_t)(end + 4 - buf) +
			       (cl && cl < end ? (size_t)atol(cl + 15) : 0);
		}
		if (end && n >= need)
			break;
	}
	buf[n] = 0;
}

static void *serve(void *p)
{
	script *s = p;

	for (int i = 0; i < s->n; i++) {
		int c = accept(s->fd, NULL, NULL);
		if (c < 0)
			break;
		read_request(c, s->request[i], sizeof(s->request[i]));
		if (s->reply[i] && write(c, s->reply[i], strlen(s->reply[i])))
			usleep(100000);
		close(c);
	}
	return NULL;
}

static void script_start(script *s)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof(a);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(s->fd, 0);
	ck_assert_int_eq(bind(s->fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(s->fd, 4), 0);
	getsockname(s->fd, (struct sockaddr *)&a, &len);
	s->port = ntohs(a.sin_port);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", s->port);
	pthread_create(&s->thread, NULL, serve, s);
}

static void script_end(script *s)
{
	pthread_join(s->thread, NULL);
	close(s->fd);
}

#define EVENT(id, type, msg)                                                   \
	"id: " id "\nevent: " type "\ndata: {\"id\": \"" id "\", "             \
	"\"object\": \"fine_tuning.job.event\", \"created_at\": 1, "           \
	"\"level\": \"info\", \"type\": \"" type "\", \"message\": \"" msg     \
	"\", \"data\": null}\n\n"
#define STREAM_HEAD                                                            \
	"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"               \
	"Connection: close\r\n\r\n"

static char *json_reply(const char *body)
{
	char *r = malloc(strlen(body) + 200);

	sprintf(r,
		"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
		"Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
		strlen(body), body);
	return r;
}

START_TEST(test_stream_reconnects)
{
	script s = {.n = 3};
	char *job = json_reply("{\"id\": \"ftjob-x\", \"object\": "
			       "\"fine_tuning.job\", \"status\": "
			       "\"succeeded\", \"fine_tuned_model\": "
			       "\"ft:m::x\"}");
	run r;

	make_home();
	/* the first connection drops after two events */
	s.reply[0] = STREAM_HEAD EVENT("ftevent-x-1", "status", "first")
	    EVENT("ftevent-x-2", "message", "second");
	s.reply[1] = STREAM_HEAD EVENT("ftevent-x-3", "message",
				       "third") "event: done\ndata: [DONE]\n\n";
	s.reply[2] = job;
	script_start(&s);
	ck_run(0, &r, "logs", "-f", "ftjob-x");
	script_end(&s);
	has(r.out, "first");
	has(r.out, "second");
	has(r.out, "third");
	ck_assert_ptr_null(strstr(strstr(r.out, "second") + 1, "second"));
	has(r.out, "ftjob-x succeeded");
	ck_assert_ptr_null(strcasestr(s.request[0], "Last-Event-ID"));
	has(s.request[1], "Last-Event-ID: ftevent-x-2\r\n");
	has(s.request[2], "GET /v1/fine_tuning/jobs/ftjob-x ");
	run_free(&r);
	free(job);
	url[0] = 0;
	remove_home();
}
END_TEST

START_TEST(test_create_retries_with_its_key)
{
	script s = {.n = 2};
	char *job = json_reply("{\"id\": \"ftjob-y\", \"object\": "
			       "\"fine_tuning.job\", \"status\": \"queued\"}");
	char k0[64] = "", k1[64] = "";
	const char *p;
	run r;

	make_home();
	s.reply[0] = NULL; /* the answer is lost */
	s.reply[1] = job;
	script_start(&s);
	ck_run(0, &r, "jobs", "create", "--model", "m", "--train", "file-abc",
	       "--steps", "3");
	script_end(&s);
	ck_assert_str_eq(r.out, "ftjob-y\n");
	for (int i = 0; i < 2; i++) {
		p = strcasestr(s.request[i], "Idempotency-Key: ");
		ck_assert_msg(p != NULL, "%s", s.request[i]);
		snprintf(i ? k1 : k0, 64, "%.36s", p + 17);
		has(s.request[i], "\"training_file\":\"file-abc\"");
	}
	ck_assert_int_eq(strlen(k0), 36);
	ck_assert_str_eq(k0, k1);
	run_free(&r);
	free(job);
	url[0] = 0;
	remove_home();
}
END_TEST

/* ---- the tar extractor -------------------------------------------------- */

typedef struct tarbuf {
	unsigned char *p;
	size_t n;
} tarbuf;

static void tar_entry(tarbuf *t, const char *name, char type, const char *data,
		      size_t size)
{
	unsigned char h[512] = {0};
	unsigned sum = 0;
	size_t pad = (512 - size % 512) % 512;

	snprintf((char *)h, 100, "%s", name);
	snprintf((char *)h + 100, 8, "%07o", 0644);
	snprintf((char *)h + 124, 12, "%011zo", size);
	snprintf((char *)h + 136, 12, "%011o", 0);
	h[156] = (unsigned char)type;
	memcpy(h + 257,
	       "ustar\0"
	       "00",
	       8);
	memset(h + 148, ' ', 8);
	for (int i = 0; i < 512; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
	t->p = realloc(t->p, t->n + 512 + size + pad);
	memcpy(t->p + t->n, h, 512);
	if (size)
		memcpy(t->p + t->n + 512, data, size);
	memset(t->p + t->n + 512 + size, 0, pad);
	t->n += 512 + size + pad;
}

static void tar_end(tarbuf *t)
{
	t->p = realloc(t->p, t->n + 1024);
	memset(t->p + t->n, 0, 1024);
	t->n += 1024;
}

/* Feeds the archive in small pieces; returns ctl_tar_finish's result. */
static int extract(tarbuf *t, const char *dest, const ctl_tar_limits *lim,
		   ctl_err *err)
{
	ctl_tar *x;
	int rc = ctl_tar_open(dest, lim, &x, err);

	for (size_t i = 0; !rc && i < t->n; i += 100)
		rc = ctl_tar_write(x, t->p + i, t->n - i < 100 ? t->n - i : 100,
				   err);
	if (!rc)
		rc = ctl_tar_finish(x, err);
	ctl_tar_free(x);
	free(t->p);
	t->p = NULL;
	t->n = 0;
	return rc;
}

static int count_entries(const char *dir)
{
	char cmd[256];
	FILE *p;
	int n = -1;

	snprintf(cmd, sizeof(cmd), "find '%s' | wc -l", dir);
	p = popen(cmd, "r");
	if (fscanf(p, "%d", &n) != 1)
		n = -1;
	pclose(p);
	return n;
}

START_TEST(test_tar_extractor)
{
	char base[64], dest[128], path[256], cmd[128];
	ctl_tar_limits small = {1000, 1500, 10};
	tarbuf t = {0};
	ctl_err err = {0};
	size_t len;
	char *text;

	snprintf(base, sizeof(base), "/tmp/tacoctl-tar-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(base));
	ck_assert_int_eq(chdir(base), 0);

	/* a model directory, the top stripped, a subdirectory made */
	tar_entry(&t, "ckpt-1/", '5', NULL, 0);
	tar_entry(&t, "ckpt-1/config.json", '0', "{}", 2);
	tar_entry(&t, "ckpt-1/sub/model.safetensors", '0', "0123456789", 10);
	tar_entry(&t, "ckpt-1/empty", '0', NULL, 0);
	tar_end(&t);
	snprintf(dest, sizeof(dest), "%s/out", base);
	ck_assert_msg(extract(&t, dest, NULL, &err) == 0, "%s", err.msg);
	snprintf(path, sizeof(path), "%s/sub/model.safetensors", dest);
	text = tu_read_file(path, &len);
	ck_assert_ptr_nonnull(text);
	ck_assert_str_eq(text, "0123456789");
	free(text);
	ck_assert_int_eq(count_entries(dest), 5);
	/* no destination: the top directory's name, here */
	tar_entry(&t, "ckpt-2/config.json", '0', "{}", 2);
	tar_end(&t);
	ck_assert_msg(extract(&t, NULL, NULL, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(access("ckpt-2/config.json", R_OK), 0);

	/* each refusal leaves nothing behind */
	snprintf(dest, sizeof(dest), "%s/bad", base);
#define REFUSED(what)                                                          \
	do {                                                                   \
		ck_assert_int_lt(extract(&t, dest, NULL, &err), 0);            \
		ck_assert_msg(strstr(err.msg, what), "%s", err.msg);           \
		ck_assert_int_ne(access(dest, F_OK), 0);                       \
	} while (0)
	tar_entry(&t, "top/../../escape", '0', "x", 1);
	tar_end(&t);
	REFUSED("unsafe name");
	tar_entry(&t, "/etc/passwd", '0', "x", 1);
	tar_end(&t);
	REFUSED("unsafe name");
	tar_entry(&t, "top/ok", '0', "x", 1);
	tar_entry(&t, "top/link", '2', NULL, 0);
	tar_end(&t);
	REFUSED("only files and directories");
	tar_entry(&t, "top/hard", '1', NULL, 0);
	tar_end(&t);
	REFUSED("only files and directories");
	tar_entry(&t, "top/a", '0', "x", 1);
	tar_entry(&t, "other/b", '0', "x", 1);
	tar_end(&t);
	REFUSED("outside");
	tar_entry(&t, "top/a", '0', "x", 1);
	tar_entry(&t, "top/a", '0', "y", 1);
	tar_end(&t);
	REFUSED("twice");
	tar_entry(&t, "top/a", '0', "x", 1);
	t.p[0] ^= 1; /* the checksum no longer matches */
	tar_end(&t);
	REFUSED("damaged header");
	tar_entry(&t, "top/a", '0', "abcdef", 6);
	t.n -= 512; /* the data is cut short */
	REFUSED("truncated");
	tar_entry(&t, "top/a", '0', "x", 1); /* no end-of-archive blocks */
	REFUSED("truncated");
	/* limits: one file, all files, entries */
	{
		char big[1200];
		memset(big, 'x', sizeof(big));
		tar_entry(&t, "top/big", '0', big, 1001);
		tar_end(&t);
		ck_assert_int_lt(extract(&t, dest, &small, &err), 0);
		has(err.msg, "limit");
		tar_entry(&t, "top/a", '0', big, 800);
		tar_entry(&t, "top/b", '0', big, 800);
		tar_end(&t);
		ck_assert_int_lt(extract(&t, dest, &small, &err), 0);
		has(err.msg, "limit");
		ck_assert_int_ne(access(dest, F_OK), 0);
		for (int i = 0; i < 11; i++) {
			char name[32];
			snprintf(name, sizeof(name), "top/f%d", i);
			tar_entry(&t, name, '0', "x", 1);
		}
		tar_end(&t);
		ck_assert_int_lt(extract(&t, dest, &small, &err), 0);
		has(err.msg, "too many entries");
	}
	/* a destination that is not empty */
	tar_entry(&t, "top/a", '0', "x", 1);
	tar_end(&t);
	snprintf(dest, sizeof(dest), "%s/out", base);
	ck_assert_int_lt(extract(&t, dest, NULL, &err), 0);
	has(err.msg, "not empty");
	ck_assert_int_eq(count_entries(dest), 5);
	ck_assert_int_eq(chdir("/"), 0);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* ---- method dpo ---------------------------------------------------------- */

/* The hyperparameters of a job's method echo. */
static json_t *method_hp(json_t *j, const char *type)
{
	json_t *m = json_object_get(j, "method");

	ck_assert_str_eq(th_str(m, "type"), type);
	return json_object_get(json_object_get(m, type), "hyperparameters");
}

/* Ends a job that may have ended already: validating or queued, it is
 * cancelled; failed (a loader that does not read pairs yet), 400
 * job_finished. */
static void cancel(const char *id)
{
	char path[256];
	long st;

	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/cancel", id);
	st = th_call("POST", path, "{}", NULL, NULL);
	ck_assert_msg(st == 200 || st == 400, "cancel: %ld", st);
}

/* --method dpo and --beta: the hyperparameter flags go to
 * method.dpo.hyperparameters (over a job file's, the deprecated top level's
 * included), a job file's other type's values go along, and each method
 * refuses the other's data. */
START_TEST(test_method_dpo)
{
	static const char pairs[] =
	    "{\"input\": {\"messages\": [{\"role\": \"user\", \"content\": "
	    "\"Hi\"}]}, \"preferred_output\": [{\"role\": \"assistant\", "
	    "\"content\": \"Hello!\"}], \"non_preferred_output\": [{\"role\": "
	    "\"assistant\", \"content\": \"Go away.\"}]}\n";
	char train[128], jobfile[128];
	char *job;
	run r;
	json_t *j, *h;
	FILE *f;

	setup(8ull << 30);
	snprintf(train, sizeof(train), "%s/pairs.jsonl", home);
	ck_assert_ptr_nonnull(f = fopen(train, "w"));
	fputs(pairs, f);
	fclose(f);
	ck_run(0, &r, "jobs", "create", "--model", "llama_gqa", "--train",
	       train, "--method", "dpo", "--beta", "0.3", "--batch-size", "2",
	       "--epochs", "1", "--seq-len", "24");
	job = first_line(r.out);
	run_free(&r);
	j = get_job(job);
	h = method_hp(j, "dpo");
	ck_assert(json_real_value(json_object_get(h, "beta")) == 0.3);
	ck_assert_int_eq(json_integer_value(json_object_get(h, "batch_size")),
			 2);
	ck_assert_int_eq(json_integer_value(json_object_get(h, "n_epochs")), 1);
	json_decref(j);
	ck_run(0, &r, "jobs", "get", job);
	has(r.out, "\"type\":\"dpo\"");
	has(r.out, "\"beta\":");
	run_free(&r);
	cancel(job);
	free(job);

	/* over a job file: its supervised values move to dpo, the flag wins
	 * over its top-level batch_size, which is not sent besides */
	snprintf(jobfile, sizeof(jobfile), "%s/job.json", home);
	ck_assert_ptr_nonnull(f = fopen(jobfile, "w"));
	fprintf(f,
		"{\"model\": \"llama_gqa\", \"training_file\": \"%s\", "
		"\"hyperparameters\": {\"batch_size\": 8}, \"method\": "
		"{\"type\": \"supervised\", \"supervised\": "
		"{\"hyperparameters\": {\"n_epochs\": 2, "
		"\"learning_rate_multiplier\": 0.5}}}, \"taco\": {\"seq_len\": "
		"24}}",
		train);
	fclose(f);
	ck_run(0, &r, "jobs", "create", jobfile, "--method", "dpo",
	       "--batch-size", "1");
	job = first_line(r.out);
	run_free(&r);
	j = get_job(job);
	h = method_hp(j, "dpo");
	ck_assert(json_real_value(json_object_get(h, "beta")) == 0.1);
	ck_assert_int_eq(json_integer_value(json_object_get(h, "batch_size")),
			 1);
	ck_assert_int_eq(json_integer_value(json_object_get(h, "n_epochs")), 2);
	ck_assert(json_real_value(
		      json_object_get(h, "learning_rate_multiplier")) == 0.5);
	json_decref(j);
	cancel(job);
	free(job);

	/* usage errors, before any request */
	ck_run(2, &r, "jobs", "create", "--model", "llama_gqa", "--train",
	       train, "--beta", "0.1");
	has(r.err, "--beta");
	run_free(&r);
	ck_run(2, &r, "jobs", "create", "--model", "llama_gqa", "--train",
	       train, "--method", "ppo");
	has(r.err, "--method");
	run_free(&r);
	ck_run(2, &r, "plan", "--model", "llama_gqa", "--train", train,
	       "--method", "dpo", "--beta", "high");
	has(r.err, "--beta");
	run_free(&r);
	/* the data of the other method: tacod's 400, naming the file */
	ck_run(1, &r, "jobs", "create", "--model", "llama_gqa", "--train",
	       tu_fixture("data/count_train.jsonl"), "--method", "dpo",
	       "--seq-len", "24");
	has(r.err, "training_file");
	has(r.err, "preference pairs");
	run_free(&r);
	ck_run(1, &r, "plan", "--model", "llama_gqa", "--train", train,
	       "--seq-len", "24");
	has(r.err, "training_file");
	has(r.err, "method.type dpo");
	run_free(&r);
	teardown();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tacoctl");
	TCase *tc = tcase_create("tacoctl");

	curl_global_init(CURL_GLOBAL_DEFAULT);
	signal(SIGPIPE, SIG_IGN);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_tar_extractor);
	tcase_add_test(tc, test_create_retries_with_its_key);
	tcase_add_test(tc, test_stream_reconnects);
	tcase_add_test(tc, test_errors_help_socket);
	tcase_add_test(tc, test_url_and_token_sources);
	tcase_add_test(tc, test_files_jobs_checkpoints);
	tcase_add_test(tc, test_plan_pause_cancel_device);
	tcase_add_test(tc, test_progress);
	tcase_add_test(tc, test_method_dpo);
	tcase_add_test(tc, test_chat);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
