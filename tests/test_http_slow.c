/* test_http_slow.c: tacod's HTTP layer against hostile clients, over raw
 * sockets: request heads that never end (a flood of them from one address,
 * a head trickled a byte at a time, garbage), the connection limit per
 * client, streams that outlive the head deadline, and the requests that
 * libmicrohttpd refuses by itself (a bad Content-Length, a head too large,
 * an unsupported HTTP version, broken chunked encoding, ...), whose
 * answers must be the JSON error envelope like every other error. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "daemon/http/auth.h"
#include "daemon/http/http.h"
#include "testutil.h"

#define TOKEN "slow-test-secret"
#define AUTH "Authorization: Bearer " TOKEN "\r\n"
#define HEAD_S 1 /* the head deadline the tests run with */

static char tmp[64], sock_path[100];
static tacod_http_server *srv;
static int port;

/* ---- the server: a few routes, a tokens file ---- */

static pthread_mutex_t st_lock = PTHREAD_MUTEX_INITIALIZER;
static tacod_http_stream *st_handle;

static int h_echo(tacod_http_req *r, void *ctx)
{
	size_t len;

	(void)ctx;
	tacod_http_body(r, &len);
	return tacod_http_reply_json(r, 200,
				     json_pack("{s:s, s:I}", "user",
					       tacod_http_identity(r)->user,
					       "body_len", (json_int_t)len));
}

static int h_stream(tacod_http_req *r, void *ctx)
{
	tacod_http_stream *s = tacod_http_stream_begin(r);

	(void)ctx;
	ck_assert_ptr_nonnull(s);
	pthread_mutex_lock(&st_lock);
	st_handle = s;
	pthread_mutex_unlock(&st_lock);
	return 0;
}

static tacod_http_stream *wait_stream(void)
{
	tacod_http_stream *s = NULL;
	double t0 = tu_now_s();

	while (!s && tu_now_s() - t0 < 10) {
		pthread_mutex_lock(&st_lock);
		s = st_handle;
		st_handle = NULL;
		pthread_mutex_unlock(&st_lock);
		if (!s)
			tu_sleep_ms(5);
	}
	ck_assert_ptr_nonnull(s);
	return s;
}

static tacod_http_route routes[] = {
    {"GET", "/v1/echo", h_echo, NULL, 0},
    {"POST", "/v1/echo", h_echo, NULL, 0},
    {"GET", "/v1/stream", h_stream, NULL, 0},
    {NULL, NULL, NULL, NULL, 0},
};

static void config(tacod_config *c)
{
	char path[400], hex[65];
	FILE *f;

	tacod_config_defaults(c);
	snprintf(c->listen, sizeof(c->listen), "127.0.0.1:0");
	snprintf(path, sizeof(path), "%s/tokens", tmp);
	tacod_auth_hash_token(TOKEN, hex);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "%s alice user\n", hex);
	fclose(f);
	chmod(path, 0600);
	snprintf(c->tokens_file, sizeof(c->tokens_file), "%s", path);
	c->limits.max_body_bytes = 4096;
	c->limits.request_head_timeout_s = HEAD_S;
}

static void start(const tacod_config *c)
{
	taco_err err = {{0}};
	int rc = tacod_http_start(c, routes, NULL, &srv, &err);

	ck_assert_msg(rc == 0, "start: %s", err.msg);
	port = tacod_http_port(srv);
	ck_assert(port > 0 || !c->listen[0]);
}

static void setup(void)
{
	signal(SIGPIPE, SIG_IGN);
	snprintf(tmp, sizeof(tmp), "/tmp/tacod-slow-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmp));
	snprintf(sock_path, sizeof(sock_path), "%s/tacod.sock", tmp);
	srv = NULL;
	st_handle = NULL;
}

static void teardown(void)
{
	char cmd[400];

	if (srv)
		tacod_http_stop(srv);
	srv = NULL;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmp);
}

/* ---- raw clients ---- */

/* A non-blocking TCP connection to the server from src ("127.0.0.2", or
 * NULL for the kernel's choice, 127.0.0.1), in progress or made. */
static int tcp_open(const char *src)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	if (src) {
		struct sockaddr_in me = {.sin_family = AF_INET};
		ck_assert_int_eq(inet_pton(AF_INET, src, &me.sin_addr), 1);
		ck_assert_int_eq(bind(fd, (struct sockaddr *)&me, sizeof(me)),
				 0);
	}
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 &&
	    errno != EINPROGRESS) {
		close(fd);
		return -1;
	}
	return fd;
}

static int unix_open(void)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Waits until fd is ready for ev or the deadline (absolute, now_s) passes.
 * Returns the revents, 0 at the deadline. */
static int wait_fd(int fd, short ev, double deadline)
{
	for (;;) {
		struct pollfd p = {.fd = fd, .events = ev};
		double left = deadline - tu_now_s();
		int n;
		if (left <= 0)
			return 0;
		n = poll(&p, 1, (int)(left * 1000) + 1);
		if (n > 0)
			return p.revents;
		if (n < 0 && errno != EINTR)
			return POLLERR;
	}
}

/* Writes all of buf before the deadline. Returns 0, or -1. */
static int send_all(int fd, const void *buf, size_t n, double deadline)
{
	const char *p = buf;

	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w > 0) {
			p += w;
			n -= (size_t)w;
			continue;
		}
		if (w < 0 && errno != EAGAIN && errno != EINTR)
			return -1;
		if (!(wait_fd(fd, POLLOUT, deadline) & POLLOUT))
			return -1;
	}
	return 0;
}

/* Reads into buf (NUL-terminated) until the server closes, one whole
 * reply (head and Content-Length body) has arrived, or the deadline.
 * Returns the bytes read; *eof tells whether the server closed. */
static size_t read_reply(int fd, char *buf, size_t cap, double deadline,
			 int *eof)
{
	size_t got = 0;

	*eof = 0;
	buf[0] = 0;
	while (got < cap - 1) {
		const char *end = memmem(buf, got, "\r\n\r\n", 4);
		if (end) {
			const char *cl = strcasestr(buf, "\r\nContent-Length:");
			size_t want = (size_t)(end - buf) + 4;
			if (cl && cl < end)
				want += strtoul(cl + 17, NULL, 10);
			if (got >= want)
				break;
		}
		ssize_t n = recv(fd, buf + got, cap - 1 - got, 0);
		if (n > 0) {
			got += (size_t)n;
			buf[got] = 0;
			continue;
		}
		if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
			*eof = 1;
			break;
		}
		if (!wait_fd(fd, POLLIN, deadline))
			break;
	}
	return got;
}

/* Waits for the server to close fd (reading and dropping what it sends)
 * until the deadline; returns the time it closed, or -1. */
static double wait_closed(int fd, double deadline, char *buf, size_t cap)
{
	size_t got = 0;

	if (buf)
		buf[0] = 0;
	for (;;) {
		char tmpb[4096];
		ssize_t n = recv(fd, tmpb, sizeof(tmpb), 0);
		if (n > 0) {
			if (buf && got + (size_t)n < cap) {
				memcpy(buf + got, tmpb, (size_t)n);
				got += (size_t)n;
				buf[got] = 0;
			}
			continue;
		}
		if (n == 0 || (errno != EAGAIN && errno != EINTR))
			return tu_now_s();
		if (!wait_fd(fd, POLLIN, deadline))
			return -1;
	}
}

/* One request on a new connection from src (NULL: 127.0.0.1), tried
 * again on a new connection when the server closes without an answer,
 * until the deadline. Returns the seconds to the answer (its status in
 * *status), or -1 when none came. */
static double timed_get(const char *src, int use_unix, double limit_s,
			long *status, int *attempts)
{
	static const char req[] = "GET /v1/echo HTTP/1.1\r\nHost: x\r\n" AUTH
				  "Connection: close\r\n\r\n";
	double t0 = tu_now_s(), deadline = t0 + limit_s;
	char buf[4096];

	*status = 0;
	*attempts = 0;
	while (tu_now_s() < deadline) {
		int fd = use_unix ? unix_open() : tcp_open(src), eof;
		size_t got;
		++*attempts;
		if (fd < 0) {
			tu_sleep_ms(10);
			continue;
		}
		if (send_all(fd, req, sizeof(req) - 1, deadline)) {
			close(fd);
			tu_sleep_ms(10);
			continue;
		}
		got = read_reply(fd, buf, sizeof(buf), deadline, &eof);
		close(fd);
		if (got > 12 && !strncmp(buf, "HTTP/1.1 ", 9)) {
			*status = strtol(buf + 9, NULL, 10);
			return tu_now_s() - t0;
		}
		if (!eof)
			break; /* the deadline passed waiting */
		tu_sleep_ms(10);
	}
	return -1;
}

static tacod_http_stats stats(void)
{
	tacod_http_stats st;

	tacod_http_get_stats(srv, &st);
	return st;
}

/* Until the server counts n open connections. */
static void wait_open(uint64_t n)
{
	double t0 = tu_now_s();

	while (stats().connections_open != n && tu_now_s() - t0 < 10)
		tu_sleep_ms(5);
	ck_assert_uint_eq(stats().connections_open, n);
}

/* ---- the flood: connections that send an unfinished head, then
 * nothing, reopened when the server closes them ---- */

#define FLOOD_HEAD "GET /v1/echo HTTP/1.1\r\nHost: x\r\n"
#define FLOOD_REOPEN_MS 50 /* a closed connection is opened again after */

typedef struct flood {
	int n;
	int stop; /* atomic */
	pthread_t t;
	long opened, closed, rounds; /* atomic */
} flood;

static void *flood_main(void *arg)
{
	flood *f = arg;
	int *fd = malloc(sizeof(int) * (size_t)f->n);
	int *state = calloc((size_t)f->n, sizeof(int)); /* 0, 1: connecting,
							   2: head sent */
	double *closed_at = calloc((size_t)f->n, sizeof(double));
	struct pollfd *p = calloc((size_t)f->n, sizeof(*p));

	ck_assert(fd && state && closed_at && p);
	for (int i = 0; i < f->n; i++)
		fd[i] = -1;
	while (!__atomic_load_n(&f->stop, __ATOMIC_RELAXED)) {
		double now = tu_now_s();
		for (int i = 0; i < f->n; i++) {
			if (fd[i] >= 0 ||
			    now - closed_at[i] < FLOOD_REOPEN_MS * 1e-3)
				continue;
			fd[i] = tcp_open(NULL);
			state[i] = 1;
			if (fd[i] < 0)
				closed_at[i] = now;
			else
				__atomic_fetch_add(&f->opened, 1,
						   __ATOMIC_RELAXED);
		}
		for (int i = 0; i < f->n; i++) {
			p[i].fd = fd[i];
			p[i].events = state[i] == 1 ? POLLOUT : POLLIN;
			p[i].revents = 0;
		}
		poll(p, (nfds_t)f->n, 10);
		for (int i = 0; i < f->n; i++) {
			int bad = 0;
			if (fd[i] < 0 || !p[i].revents)
				continue;
			if (state[i] == 1) {
				int e = 0;
				socklen_t l = sizeof(e);
				getsockopt(fd[i], SOL_SOCKET, SO_ERROR, &e, &l);
				bad = e || send(fd[i], FLOOD_HEAD,
						sizeof(FLOOD_HEAD) - 1,
						MSG_NOSIGNAL) !=
					       (ssize_t)sizeof(FLOOD_HEAD) - 1;
				state[i] = 2;
			} else {
				char b[512];
				bad = 1; /* an answer or a close: reopen */
				while (recv(fd[i], b, sizeof(b), 0) > 0)
					;
			}
			if (bad) {
				close(fd[i]);
				fd[i] = -1;
				state[i] = 0;
				closed_at[i] = tu_now_s();
				__atomic_fetch_add(&f->closed, 1,
						   __ATOMIC_RELAXED);
			}
		}
		__atomic_fetch_add(&f->rounds, 1, __ATOMIC_RELAXED);
	}
	for (int i = 0; i < f->n; i++)
		if (fd[i] >= 0)
			close(fd[i]);
	free(fd);
	free(state);
	free(closed_at);
	free(p);
	return NULL;
}

static void flood_start(flood *f, int n)
{
	memset(f, 0, sizeof(*f));
	f->n = n;
	ck_assert_int_eq(pthread_create(&f->t, NULL, flood_main, f), 0);
	/* Until every socket has been opened once and the server had time
	 * to take what it takes. */
	for (double t0 = tu_now_s();
	     __atomic_load_n(&f->opened, __ATOMIC_RELAXED) < n &&
	     tu_now_s() - t0 < 10;)
		tu_sleep_ms(10);
	tu_sleep_ms(500);
}

static void flood_stop(flood *f)
{
	__atomic_store_n(&f->stop, 1, __ATOMIC_RELAXED);
	pthread_join(f->t, NULL);
}

START_TEST(test_flood_of_unfinished_heads)
{
	/* The issue: max_connections connections that each send an
	 * unfinished head from one address locked every other client out
	 * for the idle timeout (300 s). A client from another address must
	 * be answered within 1 s, one from the flood's own address within
	 * the head deadline plus 1 s. */
	tacod_config c;
	flood f;
	double worst_other = 0, worst_same = 0;
	int tries_same = 0;
	uint64_t most_open = 0;
	tacod_http_stats end;

	config(&c);
	c.limits.max_connections = 256;
	start(&c);
	flood_start(&f, 300);
	for (int round = 0; round < 5; round++) {
		long st;
		int att;
		double t = timed_get("127.0.0.2", 0, 3.0, &st, &att);
		if (stats().connections_open > most_open)
			most_open = stats().connections_open;
		ck_assert_msg(t >= 0 && t < 1.0,
			      "round %d: 127.0.0.2 answered after %.3f s "
			      "(-1: not in 3 s)",
			      round, t);
		ck_assert_int_eq(st, 200);
		if (t > worst_other)
			worst_other = t;
		t = timed_get(NULL, 0, HEAD_S + 3.0, &st, &att);
		ck_assert_msg(t >= 0 && t < HEAD_S + 1.0,
			      "round %d: 127.0.0.1 answered after %.3f s "
			      "(-1: not in %d s)",
			      round, t, HEAD_S + 3);
		ck_assert_int_eq(st, 200);
		if (t > worst_same)
			worst_same = t;
		tries_same += att;
		tu_sleep_ms(200);
	}
	flood_stop(&f);
	end = stats();
	fprintf(stderr,
		"flood: %ld connections opened, %ld closed by the server "
		"(%llu to make room, %llu at the head deadline), at most "
		"%llu open; slowest answer: %.1f ms from 127.0.0.2, %.1f ms "
		"from 127.0.0.1 (%d connections for 5 requests)\n",
		f.opened, f.closed, (unsigned long long)end.connections_evicted,
		(unsigned long long)end.heads_timed_out,
		(unsigned long long)most_open, worst_other * 1e3,
		worst_same * 1e3, tries_same);
	/* The flood went on, within its share: its connections were closed
	 * and reopened. */
	ck_assert_int_gt(f.closed, 0);
	ck_assert_uint_gt(end.connections_evicted, 0);
	ck_assert_uint_le(most_open, 32 + 2);
}
END_TEST

START_TEST(test_flood_on_unix_socket)
{
	/* The same on the unix socket, where every client of a user shares
	 * the uid that tells clients apart. */
	tacod_config c;
	int fds[40];
	long st;
	int att;
	double t;

	config(&c);
	c.listen[0] = 0;
	snprintf(c.unix_socket, sizeof(c.unix_socket), "%s", sock_path);
	c.limits.max_connections = 32;
	c.limits.max_connections_per_client = 8;
	start(&c);
	for (int i = 0; i < 40; i++) {
		fds[i] = unix_open();
		if (fds[i] >= 0)
			send(fds[i], FLOOD_HEAD, sizeof(FLOOD_HEAD) - 1,
			     MSG_NOSIGNAL);
	}
	tu_sleep_ms(200);
	t = timed_get(NULL, 1, HEAD_S + 3.0, &st, &att);
	ck_assert_msg(t >= 0 && t < HEAD_S + 1.0, "answered after %.3f s", t);
	ck_assert_int_eq(st, 200);
	for (int i = 0; i < 40; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}
END_TEST

START_TEST(test_trickled_head_is_cut)
{
	/* The request line, then a byte of the headers every 100 ms: each
	 * byte restarts libmicrohttpd's idle timer, but the head deadline
	 * still closes the connection, with a 408. */
	tacod_config c;
	static const char line[] = "GET /v1/echo HTTP/1.1\r\n";
	static const char rest[] =
	    "Host: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaa"
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	    "\r\n\r\n";
	char buf[4096];
	double t0, closed;
	int fd;

	config(&c);
	start(&c);
	t0 = tu_now_s(); /* the server's clock starts after this */
	fd = tcp_open(NULL);
	ck_assert_int_ge(fd, 0);
	ck_assert(wait_fd(fd, POLLOUT, t0 + 5) & POLLOUT);
	ck_assert_int_eq(send_all(fd, line, sizeof(line) - 1, t0 + 5), 0);
	for (size_t i = 0; i < sizeof(rest) - 1 && tu_now_s() - t0 < 5; i++) {
		if (wait_fd(fd, POLLIN, tu_now_s() + 0.1))
			break; /* the server spoke or closed */
		if (send(fd, rest + i, 1, MSG_NOSIGNAL) != 1)
			break;
	}
	closed = wait_closed(fd, t0 + HEAD_S + 3, buf, sizeof(buf));
	close(fd);
	ck_assert_msg(closed > 0, "still open after %d s", HEAD_S + 3);
	ck_assert_msg(closed - t0 >= HEAD_S - 0.1 && closed - t0 < HEAD_S + 1,
		      "closed after %.3f s", closed - t0);
	ck_assert_msg(!strncmp(buf, "HTTP/1.1 408", 12), "%s", buf);
	ck_assert_msg(strcasestr(buf, "Content-Type: application/json") &&
			  strstr(buf, "\"request_timeout\""),
		      "%s", buf);
}
END_TEST

START_TEST(test_idle_and_garbage_connections_close)
{
	/* Nothing at all, a keep-alive connection after its request, and a
	 * request line that never ends (a TLS hello, say) all wait for a
	 * head: each is closed at the head deadline. */
	tacod_config c;
	static const char tls[] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03"
				  "\x03 binary, no line end";
	static const char req[] =
	    "GET /v1/echo HTTP/1.1\r\nHost: x\r\n" AUTH "\r\n";
	char buf[4096];
	int fd[3], eof;
	double t0, t;

	config(&c);
	start(&c);
	t0 = tu_now_s(); /* the server's clocks start after this */
	for (int i = 0; i < 3; i++) {
		fd[i] = tcp_open(NULL);
		ck_assert_int_ge(fd[i], 0);
		ck_assert(wait_fd(fd[i], POLLOUT, t0 + 5) & POLLOUT);
	}
	ck_assert_int_eq(send_all(fd[1], req, sizeof(req) - 1, t0 + 5), 0);
	read_reply(fd[1], buf, sizeof(buf), t0 + 5, &eof);
	ck_assert_msg(!strncmp(buf, "HTTP/1.1 200", 12) && !eof, "%s", buf);
	ck_assert_int_eq(send_all(fd[2], tls, sizeof(tls) - 1, t0 + 5), 0);
	for (int i = 0; i < 3; i++) {
		t = wait_closed(fd[i], t0 + HEAD_S + 3, buf, sizeof(buf));
		ck_assert_msg(t > 0, "connection %d still open", i);
		ck_assert_msg(t - t0 >= HEAD_S - 0.1 && t - t0 < HEAD_S + 1,
			      "connection %d closed after %.3f s", i, t - t0);
		/* Nothing was asked: nothing is answered. */
		ck_assert_msg(!buf[0], "connection %d: %s", i, buf);
		close(fd[i]);
	}
}
END_TEST

START_TEST(test_stream_outlives_head_deadline)
{
	/* A live stream is a request whose head is long complete: neither
	 * the head deadline nor its silences end it. */
	tacod_config c;
	static const char req[] =
	    "GET /v1/stream HTTP/1.1\r\nHost: x\r\n" AUTH "\r\n";
	tacod_http_stream *s;
	char buf[8192];
	size_t got = 0;
	double t0;
	int fd;

	config(&c);
	start(&c);
	fd = tcp_open(NULL);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(send_all(fd, req, sizeof(req) - 1, tu_now_s() + 5), 0);
	s = wait_stream();
	t0 = tu_now_s();
	/* events 0 to 3 at least, however late a loaded machine wakes */
	for (int i = 0; i < 4 || tu_now_s() - t0 < 3.5 * HEAD_S; i++) {
		char ev[32];
		snprintf(ev, sizeof(ev), "%d", i);
		ck_assert_int_eq(tacod_http_stream_event(s, NULL, ev), 0);
		/* silences longer than the head deadline between events */
		tu_sleep_ms(i % 2 ? 200 : 1500 * HEAD_S);
	}
	ck_assert_int_eq(tacod_http_stream_event(s, "done", "end"), 0);
	while (!strstr(buf, "data: end")) {
		ck_assert(wait_fd(fd, POLLIN, tu_now_s() + 5) & POLLIN);
		ssize_t n = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
		ck_assert_msg(n > 0, "the stream closed: %s", buf);
		got += (size_t)n;
		buf[got] = 0;
	}
	ck_assert_msg(strstr(buf, "data: 0\n") && strstr(buf, "data: 3\n"),
		      "%s", buf);
	tacod_http_stream_end(s);
	close(fd);
}
END_TEST

START_TEST(test_connections_per_client)
{
	/* At its limit, a client's new connection takes the place of its
	 * oldest connection still waiting for a head; when all of them are
	 * busy the new one is refused with a 429. Other addresses are not
	 * counted with it. */
	tacod_config c;
	static const char req[] =
	    "GET /v1/stream HTTP/1.1\r\nHost: x\r\n" AUTH "\r\n";
	tacod_http_stream *s[4];
	char buf[4096];
	int idle[4], busy[4], fd, eof;
	long st;
	int att;
	double t;

	config(&c);
	c.limits.request_head_timeout_s = 30; /* nothing times out here */
	c.limits.max_connections_per_client = 4;
	start(&c);
	for (int i = 0; i < 4; i++) {
		idle[i] = tcp_open(NULL);
		ck_assert_int_ge(idle[i], 0);
		send_all(idle[i], FLOOD_HEAD, sizeof(FLOOD_HEAD) - 1,
			 tu_now_s() + 5);
		wait_open((uint64_t)i + 1); /* taken in this order */
	}
	/* A fifth: answered, and the oldest waiting one is gone. */
	t = timed_get(NULL, 0, 3, &st, &att);
	ck_assert_msg(t >= 0 && t < 1 && st == 200 && att == 1,
		      "%.3f s, %ld, %d tries", t, st, att);
	ck_assert(wait_closed(idle[0], tu_now_s() + 3, NULL, 0) > 0);
	for (int i = 1; i < 4; i++)
		ck_assert_int_eq(wait_fd(idle[i], POLLIN, tu_now_s() + 0.2), 0);
	ck_assert_uint_eq(stats().connections_evicted, 1);
	for (int i = 0; i < 4; i++)
		close(idle[i]);
	wait_open(0);
	/* Four streams: nothing to give way, the fifth is refused. */
	for (int i = 0; i < 4; i++) {
		busy[i] = tcp_open(NULL);
		ck_assert_int_ge(busy[i], 0);
		send_all(busy[i], req, sizeof(req) - 1, tu_now_s() + 5);
		s[i] = wait_stream();
	}
	fd = tcp_open(NULL);
	ck_assert_int_ge(fd, 0);
	read_reply(fd, buf, sizeof(buf), tu_now_s() + 3, &eof);
	close(fd);
	ck_assert_msg(!strncmp(buf, "HTTP/1.1 429", 12), "%s", buf);
	ck_assert_msg(strcasestr(buf, "Content-Type: application/json") &&
			  strstr(buf, "\"too_many_connections\""),
		      "%s", buf);
	ck_assert_uint_eq(stats().connections_refused, 1);
	/* Another address has its own share. */
	t = timed_get("127.0.0.2", 0, 3, &st, &att);
	ck_assert_msg(t >= 0 && t < 1 && st == 200, "%.3f s, %ld", t, st);
	for (int i = 0; i < 4; i++) {
		tacod_http_stream_end(s[i]);
		close(busy[i]);
	}
}
END_TEST

/* ---- what libmicrohttpd answers by itself ---- */

static const struct {
	const char *req; /* "%B": a 200 KiB run of 'b' */
	int status;	 /* 0: closed without an answer */
	const char *code;
} refused[] = {
    {"POST /v1/echo HTTP/1.1\r\nHost: x\r\n" AUTH
     "Content-Length: 99999999999999999999999\r\n\r\n",
     413, "request_too_large"},
    {"POST /v1/echo HTTP/1.1\r\nHost: x\r\n" AUTH "Content-Length: -1\r\n\r\n",
     400, "invalid_content_length"},
    {"POST /v1/echo HTTP/1.1\r\nHost: x\r\n" AUTH
     "Content-Length: 12abc\r\n\r\n",
     400, "invalid_content_length"},
    {"POST /v1/echo HTTP/1.1\r\nHost: x\r\n" AUTH
     "Content-Length: 2, 2\r\n\r\n{}",
     400, "invalid_content_length"},
    {"GET /v1/echo HTTP/1.1\r\nHost: x\r\nX-Big: %B\r\n\r\n", 431,
     "request_head_too_large"},
    {"GET /v1/echo?q=%B HTTP/1.1\r\nHost: x\r\n\r\n", 414,
     "request_head_too_large"},
    {"GET /v1/echo HTTP/2.0\r\nHost: x\r\n\r\n", 505,
     "http_version_not_supported"},
    {"GET /v1/echo HTTP/0.9\r\nHost: x\r\n\r\n", 505,
     "http_version_not_supported"},
    {"GET /v1/echo HTTX/1.1\r\nHost: x\r\n\r\n", 400, "malformed_request"},
    {"GET /v1/echo\r\nHost: x\r\n\r\n", 400, "malformed_request"},
    {"hello world\r\n\r\n", 400, "malformed_request"},
    {"GET /v1/echo HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", 400,
     "malformed_request"},
    {"POST /v1/echo HTTP/1.1\r\nHost: x\r\n" AUTH
     "Transfer-Encoding: chunked\r\n\r\nzz\r\n",
     400, "invalid_chunked_encoding"},
    {"POST /v1/echo HTTP/1.1\r\nHost: x\r\n" AUTH
     "Transfer-Encoding: chunked\r\n\r\n2\r\n{}XX",
     400, "invalid_chunked_encoding"},
    {"POST /v1/echo HTTP/1.1\r\nHost: x\r\n" AUTH
     "Transfer-Encoding: chunked\r\n\r\nfffffffffffffffffffff\r\n",
     413, "request_too_large"},
    {"POST /v1/echo HTTP/1.1\r\nHost: x\r\n" AUTH
     "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nno colon\r\n\r\n",
     400, "malformed_request"},
    {"POST /v1/echo HTTP/1.1\r\nHost: x\r\n" AUTH
     "Transfer-Encoding: gzip\r\n\r\nxxxx",
     501, "unsupported_transfer_encoding"},
    /* Ambiguous lengths (libmicrohttpd would take the first, or the
     * chunks, silently). */
    {"POST /v1/echo HTTP/1.1\r\nHost: x\r\n" AUTH
     "Content-Length: 2\r\nContent-Length: 40\r\n\r\n{}",
     400, "invalid_content_length"},
    {"POST /v1/echo HTTP/1.1\r\nHost: x\r\n" AUTH
     "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n"
     "0\r\n\r\n",
     400, "invalid_content_length"},
    /* No space in the request line: libmicrohttpd closes the connection
     * at once and lets the application answer nothing. */
    {"GARBAGE\r\n\r\n", 0, NULL},
};

START_TEST(test_library_refusals_are_json)
{
	tacod_config c;
	char *req = malloc(300u << 10), *buf = malloc(64u << 10);
	const char *tpl = refused[_i].req, *mark = strstr(tpl, "%B");
	double t0;
	int fd, eof;
	size_t n, got;

	ck_assert(req && buf);
	if (mark) {
		size_t pre = (size_t)(mark - tpl), big = 200u << 10;
		memcpy(req, tpl, pre);
		memset(req + pre, 'b', big);
		strcpy(req + pre + big, mark + 2);
	} else {
		strcpy(req, tpl);
	}
	n = strlen(req);
	config(&c);
	start(&c);
	fd = tcp_open(NULL);
	ck_assert_int_ge(fd, 0);
	t0 = tu_now_s();
	/* The server may close before it has read everything. */
	send_all(fd, req, n, t0 + 5);
	got = read_reply(fd, buf, 64u << 10, t0 + 5, &eof);
	close(fd);
	ck_assert_msg(tu_now_s() - t0 < 2, "case %d: %.3f s", _i,
		      tu_now_s() - t0);
	if (!refused[_i].status) {
		ck_assert_msg(eof && !got, "case %d: %s", _i, buf);
		goto out;
	}
	ck_assert_msg(got > 12 &&
			  strtol(buf + 9, NULL, 10) == refused[_i].status,
		      "case %d: %s", _i, buf);
	ck_assert_msg(strcasestr(buf, "\r\nContent-Type: application/json"),
		      "case %d: %s", _i, buf);
	{
		const char *body = strstr(buf, "\r\n\r\n") + 4;
		json_error_t e;
		json_t *j = json_loads(body, 0, &e), *err;
		ck_assert_msg(j, "case %d: not JSON: %s", _i, body);
		err = json_object_get(j, "error");
		ck_assert(json_is_object(err) && json_object_size(err) == 4);
		ck_assert(json_is_string(json_object_get(err, "message")));
		ck_assert(json_is_string(json_object_get(err, "type")));
		ck_assert(json_object_get(err, "param"));
		ck_assert_msg(
		    json_is_string(json_object_get(err, "code")) &&
			!strcmp(json_string_value(json_object_get(err, "code")),
				refused[_i].code),
		    "case %d: %s", _i, body);
		json_decref(j);
	}
out:
	free(req);
	free(buf);
	/* Still serving. */
	{
		long st;
		int att;
		ck_assert(timed_get(NULL, 0, 3, &st, &att) >= 0 && st == 200);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("http_slow");
	TCase *tc = tcase_create("http_slow");
	int rc;

	signal(SIGPIPE, SIG_IGN);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_flood_of_unfinished_heads);
	tcase_add_test(tc, test_flood_on_unix_socket);
	tcase_add_test(tc, test_trickled_head_is_cut);
	tcase_add_test(tc, test_idle_and_garbage_connections_close);
	tcase_add_test(tc, test_stream_outlives_head_deadline);
	tcase_add_test(tc, test_connections_per_client);
	tcase_add_loop_test(tc, test_library_refusals_are_json, 0,
			    sizeof(refused) / sizeof(refused[0]));
	suite_add_tcase(s, tc);
	rc = tu_run(s, 0);
	return rc;
}
