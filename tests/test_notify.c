/* test_notify.c: the sd_notify protocol (daemon/notify.c) against sockets
 * bound here, at a path and at an abstract name; then the real tacod
 * binary under a pretend service manager: READY=1 once it answers HTTP,
 * WATCHDOG=1 again and again, and on SIGTERM with a job running
 * STOPPING=1, EXTEND_TIMEOUT_USEC while the job checkpoints, exit 0. */
#include <check.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon/notify.h"
#include "tacod_harness.h"
#include "testutil.h"

/* ---- a pretend service manager ------------------------------------- */

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Binds a datagram socket at name ("/path" or "@abstract"). */
static int bind_dgram(const char *name)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	size_t n = strlen(name);
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n +
				    (name[0] == '/'));
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	ck_assert_uint_lt(n, sizeof(sa.sun_path));
	memcpy(sa.sun_path, name, n);
	if (name[0] == '@')
		sa.sun_path[0] = 0;
	ck_assert_msg(bind(fd, (struct sockaddr *)&sa, len) == 0, "bind %s: %s",
		      name, strerror(errno));
	return fd;
}

/* One datagram within timeout_ms, NUL-terminated; -1 on timeout. */
static int recv_msg(int fd, char *buf, size_t cap, int timeout_ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	ssize_t n;

	if (poll(&p, 1, timeout_ms) != 1)
		return -1;
	n = recv(fd, buf, cap - 1, 0);
	ck_assert_int_ge(n, 0);
	buf[n] = 0;
	return (int)n;
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* ---- the protocol ---------------------------------------------------- */

START_TEST(test_unset_and_bad_state)
{
	char big[TACOD_NOTIFY_MAX + 2];

	unsetenv("NOTIFY_SOCKET");
	ck_assert_int_eq(tacod_notify("READY=1"), 0);
	setenv("NOTIFY_SOCKET", "", 1);
	ck_assert_int_eq(tacod_notify("READY=1"), 0);
	ck_assert_int_eq(tacod_notify(""), -EINVAL);
	ck_assert_int_eq(tacod_notify(NULL), -EINVAL);
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	ck_assert_int_eq(tacod_notify(big), -EINVAL);
}
END_TEST

static void roundtrip(const char *name)
{
	char big[TACOD_NOTIFY_MAX + 1], buf[TACOD_NOTIFY_MAX + 16];
	int fd = bind_dgram(name), fds;

	setenv("NOTIFY_SOCKET", name, 1);
	ck_assert_int_eq(tacod_notify("READY=1\nSTATUS=listening"), 0);
	ck_assert_int_eq(recv_msg(fd, buf, sizeof(buf), 5000), 24);
	ck_assert_str_eq(buf, "READY=1\nSTATUS=listening");
	/* the longest message arrives whole, in one datagram */
	memcpy(big, "STATUS=", 7);
	memset(big + 7, 'y', TACOD_NOTIFY_MAX - 7);
	big[TACOD_NOTIFY_MAX] = 0;
	ck_assert_int_eq(tacod_notify(big), 0);
	ck_assert_int_eq(recv_msg(fd, buf, sizeof(buf), 5000),
			 TACOD_NOTIFY_MAX);
	ck_assert_str_eq(buf, big);
	/* one socket per call, closed after it */
	fds = count_fds();
	for (int i = 0; i < 100; i++) {
		ck_assert_int_eq(tacod_notify("WATCHDOG=1"), 0);
		ck_assert_int_eq(recv_msg(fd, buf, sizeof(buf), 5000), 10);
	}
	ck_assert_int_eq(count_fds(), fds);
	close(fd);
}

START_TEST(test_path_socket)
{
	char dir[] = "/tmp/tacod-notify-XXXXXX", path[64];

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/notify", dir);
	roundtrip(path);
	unlink(path);
	/* nobody bound there any more */
	ck_assert_int_eq(tacod_notify("READY=1"), -ENOENT);
	rmdir(dir);
}
END_TEST

START_TEST(test_abstract_socket)
{
	char name[64];

	snprintf(name, sizeof(name), "@tacod-notify-test-%d-%ld", (int)getpid(),
		 (long)time(NULL));
	roundtrip(name);
	/* closed: the name is gone with the socket */
	ck_assert_int_eq(tacod_notify("READY=1"), -ECONNREFUSED);
}
END_TEST

START_TEST(test_bad_addresses)
{
	char longp[200];

	setenv("NOTIFY_SOCKET", "relative/notify", 1);
	ck_assert_int_eq(tacod_notify("READY=1"), -EAFNOSUPPORT);
	setenv("NOTIFY_SOCKET", "vsock:2:1234", 1);
	ck_assert_int_eq(tacod_notify("READY=1"), -EAFNOSUPPORT);
	setenv("NOTIFY_SOCKET", "@", 1);
	ck_assert_int_eq(tacod_notify("READY=1"), -EINVAL);
	memset(longp, 'a', sizeof(longp) - 1);
	longp[0] = '/';
	longp[sizeof(longp) - 1] = 0;
	setenv("NOTIFY_SOCKET", longp, 1);
	ck_assert_int_eq(tacod_notify("READY=1"), -ENAMETOOLONG);
	/* 108 bytes: too long for a path (its NUL), not for an abstract name
	 * (nobody listens there) */
	longp[108] = 0;
	setenv("NOTIFY_SOCKET", longp, 1);
	ck_assert_int_eq(tacod_notify("READY=1"), -ENAMETOOLONG);
	longp[0] = '@';
	setenv("NOTIFY_SOCKET", longp, 1);
	ck_assert_int_eq(tacod_notify("READY=1"), -ECONNREFUSED);
	unsetenv("NOTIFY_SOCKET");
}
END_TEST

START_TEST(test_watchdog_usec)
{
	static const char *const bad[] = {"0",
					  "-5",
					  " 5",
					  "5 ",
					  "0x10",
					  "abc",
					  "99999999999999999999999",
					  "18446744073709551616"};
	uint64_t us = 7;
	char pid[32];

	unsetenv("WATCHDOG_USEC");
	unsetenv("WATCHDOG_PID");
	ck_assert_int_eq(tacod_notify_watchdog_usec(&us), 0);
	ck_assert_uint_eq(us, 0);
	setenv("WATCHDOG_USEC", "200000", 1);
	ck_assert_int_eq(tacod_notify_watchdog_usec(&us), 0);
	ck_assert_uint_eq(us, 200000);
	setenv("WATCHDOG_USEC", "18446744073709551615", 1);
	ck_assert_int_eq(tacod_notify_watchdog_usec(&us), 0);
	ck_assert_uint_eq(us, UINT64_MAX);
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	setenv("WATCHDOG_USEC", "30000000", 1);
	setenv("WATCHDOG_PID", pid, 1);
	ck_assert_int_eq(tacod_notify_watchdog_usec(&us), 0);
	ck_assert_uint_eq(us, 30000000);
	/* meant for another process (a parent that let it be inherited) */
	snprintf(pid, sizeof(pid), "%d", (int)getpid() + 1);
	setenv("WATCHDOG_PID", pid, 1);
	us = 7;
	ck_assert_int_eq(tacod_notify_watchdog_usec(&us), 0);
	ck_assert_uint_eq(us, 0);
	setenv("WATCHDOG_PID", "me", 1);
	us = 7;
	ck_assert_int_eq(tacod_notify_watchdog_usec(&us), -EINVAL);
	ck_assert_uint_eq(us, 7);
	unsetenv("WATCHDOG_PID");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		setenv("WATCHDOG_USEC", bad[i], 1);
		ck_assert_msg(tacod_notify_watchdog_usec(&us) == -EINVAL,
			      "WATCHDOG_USEC=%s accepted", bad[i]);
		ck_assert_uint_eq(us, 7);
	}
	unsetenv("WATCHDOG_USEC");
}
END_TEST

/* ---- tacod under the pretend manager ---------------------------------- */

#define MAX_MSGS 4096

/* Every datagram tacod sends, with when it came, read by a thread so that
 * the socket's short queue never fills while the test talks HTTP. */
static struct {
	pthread_mutex_t lock;
	int fd, stop, n;
	char *text[MAX_MSGS];
	double at[MAX_MSGS];
} rx = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void *reader(void *arg)
{
	char buf[TACOD_NOTIFY_MAX + 16];

	(void)arg;
	for (;;) {
		int n = recv_msg(rx.fd, buf, sizeof(buf), 50);
		pthread_mutex_lock(&rx.lock);
		if (n >= 0 && rx.n < MAX_MSGS) {
			rx.at[rx.n] = now_s();
			rx.text[rx.n++] = strdup(buf);
		}
		if (rx.stop) {
			pthread_mutex_unlock(&rx.lock);
			return NULL;
		}
		pthread_mutex_unlock(&rx.lock);
	}
}

/* Index of the first message from `from` on that has line `line`
 * ("READY=1", or a prefix such as "EXTEND_TIMEOUT_USEC="), waiting up to
 * timeout_s; -1 when none came. */
static int wait_line(int from, const char *line, double timeout_s)
{
	double end = now_s() + timeout_s;
	size_t len = strlen(line);

	for (;;) {
		pthread_mutex_lock(&rx.lock);
		for (int i = from; i < rx.n; i++) {
			const char *p = rx.text[i];
			while (p) {
				if (!strncmp(p, line, len)) {
					pthread_mutex_unlock(&rx.lock);
					return i;
				}
				p = strchr(p, '\n');
				p = p ? p + 1 : NULL;
			}
		}
		pthread_mutex_unlock(&rx.lock);
		if (now_s() > end)
			return -1;
		usleep(10000);
	}
}

static const char *msg_at(int i)
{
	const char *t;

	pthread_mutex_lock(&rx.lock);
	t = rx.text[i];
	pthread_mutex_unlock(&rx.lock);
	return t;
}

static int port;
static char tacod_dir[] = "/tmp/tacod-sdtest-XXXXXX";

/* Unchecked fixture, in the runner's process: a failed check ends the
 * test's process at once, and the directory must go all the same (tacod
 * itself dies with that process: PR_SET_PDEATHSIG). */
static void setup_dir(void)
{
	if (!mkdtemp(tacod_dir))
		abort();
}

static void teardown_dir(void)
{
	char cmd[64];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tacod_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "test_notify: cannot remove %s\n", tacod_dir);
}

typedef struct buf {
	char *p;
	size_t n;
} buf;

static size_t sink(char *d, size_t sz, size_t n, void *ctx)
{
	buf *b = ctx;
	char *g = realloc(b->p, b->n + sz * n + 1);

	if (!g)
		return 0;
	b->p = g;
	memcpy(b->p + b->n, d, sz * n);
	b->n += sz * n;
	b->p[b->n] = 0;
	return sz * n;
}

/* One request to tacod; the status (0: no answer) and the JSON body. */
static long call(const char *method, const char *path, const char *json,
		 const char *upload, json_t **out)
{
	CURL *c = curl_easy_init();
	char url[512];
	buf b = {0};
	long status = 0;
	struct curl_slist *h = NULL;
	curl_mime *mime = NULL;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
	if (json) {
		h = curl_slist_append(h, "Content-Type: application/json");
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, json);
	}
	if (upload) {
		curl_mimepart *part;
		mime = curl_mime_init(c);
		part = curl_mime_addpart(mime);
		curl_mime_name(part, "purpose");
		curl_mime_data(part, "fine-tune", CURL_ZERO_TERMINATED);
		part = curl_mime_addpart(mime);
		curl_mime_name(part, "file");
		curl_mime_filedata(part, upload);
		curl_easy_setopt(c, CURLOPT_MIMEPOST, mime);
	}
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	if (out)
		*out = b.p ? json_loads(b.p, 0, NULL) : NULL;
	free(b.p);
	curl_slist_free_all(h);
	curl_mime_free(mime);
	curl_easy_cleanup(c);
	return status;
}

/* Waits for pid up to timeout_s; its wait status, or -1. */
static int wait_exit(pid_t pid, double timeout_s)
{
	double end = now_s() + timeout_s;
	int st;

	while (now_s() < end) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return st;
		usleep(20000);
	}
	return -1;
}

START_TEST(test_tacod_under_manager)
{
	const char *bindir = getenv("TACO_BIN_DIR");
	char *dir = tacod_dir, sock[64], listen[64];
	char state[64], bin[4096], train[4096], want[96];
	char body[512], path[256];
	int ready, first_wd, n_wd = 0, stopping, extend, st, started = 0;
	double max_gap = 0, last = 0, t0;
	pthread_t thr;
	json_t *j;
	char *file, *job;
	pid_t pid;

	snprintf(sock, sizeof(sock), "%s/notify", dir);
	snprintf(state, sizeof(state), "%s/state", dir);
	snprintf(bin, sizeof(bin), "%s/tacod", bindir ? bindir : ".");
	snprintf(train, sizeof(train), "%s/taco-train", bindir ? bindir : ".");
	port = th_free_port();
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	rx.fd = bind_dgram(sock);
	pthread_create(&thr, NULL, reader, NULL);

	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		char me[32];
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		/* what systemd sets: the pid is tacod's own, exec keeps it */
		snprintf(me, sizeof(me), "%d", (int)getpid());
		setenv("NOTIFY_SOCKET", sock, 1);
		setenv("WATCHDOG_USEC", "200000", 1);
		setenv("WATCHDOG_PID", me, 1);
		execl(bin, "tacod", "--listen", listen, "--state-dir", state,
		      "--models-dir", tu_fixture("models"), "--taco-train",
		      train, (char *)NULL);
		_exit(127);
	}

	/* READY=1 is the first thing said, and by then HTTP answers */
	ready = wait_line(0, "READY=1", 120);
	ck_assert_msg(ready >= 0, "no READY=1 from tacod");
	ck_assert_int_eq(call("GET", "/healthz", NULL, NULL, NULL), 200);
	ck_assert_int_eq(ready, 0);
	snprintf(want, sizeof(want), "STATUS=listening on %s; 0 running",
		 listen);
	ck_assert_msg(strstr(msg_at(ready), want), "READY message: %s",
		      msg_at(ready));

	/* WATCHDOG=1 every 100 ms (half of WATCHDOG_USEC) from then on */
	t0 = now_s();
	first_wd = ready + 1;
	while (now_s() - t0 < 2.0)
		usleep(50000);
	pthread_mutex_lock(&rx.lock);
	for (int i = first_wd; i < rx.n; i++) {
		if (!strstr(rx.text[i], "WATCHDOG=1\n"))
			continue;
		if (n_wd++ && rx.at[i] - last > max_gap)
			max_gap = rx.at[i] - last;
		last = rx.at[i];
	}
	pthread_mutex_unlock(&rx.lock);
	fprintf(stderr,
		"test_notify: %d WATCHDOG=1 in 2 s, largest gap %.0f ms\n",
		n_wd, max_gap * 1e3);
	ck_assert_int_ge(n_wd, 5);

	/* a job that runs until told to stop */
	ck_assert_int_eq(call("POST", "/v1/files", NULL,
			      tu_fixture("data/count_train.jsonl"), &j),
			 200);
	file = strdup(json_string_value(json_object_get(j, "id")));
	json_decref(j);
	snprintf(body, sizeof(body),
		 "{\"model\": \"llama_gqa\", \"training_file\": \"%s\", "
		 "\"taco\": {\"seq_len\": 24, \"steps\": 1000000, \"lr\": "
		 "0.01}}",
		 file);
	ck_assert_int_eq(call("POST", "/v1/fine_tuning/jobs", body, NULL, &j),
			 200);
	job = strdup(json_string_value(json_object_get(j, "id")));
	json_decref(j);
	/* training, not still loading: its first step was reported */
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/events?limit=100",
		 job);
	for (int i = 0; i < 1200 && !started; i++) {
		json_t *ev;
		size_t k;
		ck_assert_int_eq(call("GET", path, NULL, NULL, &j), 200);
		json_array_foreach(json_object_get(j, "data"), k, ev)
		{
			const char *m =
			    json_string_value(json_object_get(ev, "message"));
			started |= m && strstr(m, "training loss=") != NULL;
		}
		json_decref(j);
		if (!started)
			usleep(100000);
	}
	ck_assert_msg(started, "the job never trained");

	/* SIGTERM: STOPPING=1, the stop timeout extended while the job
	 * writes its checkpoint, then exit 0 */
	pthread_mutex_lock(&rx.lock);
	st = rx.n;
	pthread_mutex_unlock(&rx.lock);
	ck_assert_int_eq(kill(pid, SIGTERM), 0);
	stopping = wait_line(st, "STOPPING=1", 60);
	ck_assert_msg(stopping >= 0, "no STOPPING=1");
	extend = wait_line(st, "EXTEND_TIMEOUT_USEC=30000000", 60);
	ck_assert_msg(extend > stopping, "no EXTEND_TIMEOUT_USEC after "
					 "STOPPING=1");
	ck_assert_msg(strstr(msg_at(extend), "STATUS=stopping: 1 running"),
		      "%s", msg_at(extend));
	st = wait_exit(pid, 120);
	ck_assert_msg(st != -1, "tacod did not exit");
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "tacod exit status 0x%x", st);

	pthread_mutex_lock(&rx.lock);
	rx.stop = 1;
	pthread_mutex_unlock(&rx.lock);
	pthread_join(thr, NULL);
	close(rx.fd);
	for (int i = 0; i < rx.n; i++)
		free(rx.text[i]);
	free(file);
	free(job);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("notify");
	TCase *tc = tcase_create("protocol");
	TCase *td = tcase_create("tacod");

	curl_global_init(CURL_GLOBAL_DEFAULT);
	tcase_add_test(tc, test_unset_and_bad_state);
	tcase_add_test(tc, test_path_socket);
	tcase_add_test(tc, test_abstract_socket);
	tcase_add_test(tc, test_bad_addresses);
	tcase_add_test(tc, test_watchdog_usec);
	suite_add_tcase(s, tc);
	tcase_set_timeout(td, 300);
	tcase_add_unchecked_fixture(td, setup_dir, teardown_dir);
	tcase_add_test(td, test_tacod_under_manager);
	suite_add_tcase(s, td);
	return tu_run(s, 0);
}
