/* http/conn.c: connections while they wait for a request head: the head
 * deadline and the connection limit per client.
 *
 * libmicrohttpd 0.9.75 times a connection out only when it has been idle
 * (MHD_OPTION_CONNECTION_TIMEOUT; every byte received restarts the
 * clock), so a client that trickles its head a byte at a time, or many
 * that send half a head and wait, hold their connections for as long as
 * they like. Here every connection is tracked from
 * MHD_OPTION_NOTIFY_CONNECTION's STARTED to its CLOSED, and it waits for
 * a head from its start and again after each request (a keep-alive
 * connection between requests waits for the next head just the same):
 * until the access handler's first call for the request (http_conn_head)
 * it is on its listener's waiting list, oldest first. A sweeper thread
 * wakes at the oldest deadline and gives up every connection that has
 * waited request_head_timeout_s: it sends a 408 when the request line had
 * arrived (nothing otherwise: there is no request to answer) and shuts
 * the socket down, and libmicrohttpd, reading end-of-file, closes the
 * connection. So no head takes longer than the deadline, however its
 * bytes come. Requests whose head is complete (bodies, handlers, streams)
 * are not touched: MHD's idle timeout still covers them, and suspended
 * streams are out of its reach by design.
 *
 * Clients are told apart by their address (IPv4; IPv6 by its /64, what
 * one site is given) on TCP and by their uid on the unix socket, where
 * every peer has the same "address". A client past
 * max_connections_per_client gives up its oldest connection waiting for a
 * head to make room for the new one; when none of its connections is
 * waiting the new one is refused with a 429. A listener at
 * max_connections gives up its oldest waiting connection, whoever it
 * belongs to. (libmicrohttpd's MHD_OPTION_PER_IP_CONNECTION_LIMIT drops
 * the newest connection instead, which leaves a flood that keeps
 * reconnecting in possession of its address's share, and it does not
 * apply to unix sockets.)
 *
 * Shutting a socket down from another thread is safe because
 * libmicrohttpd calls NOTIFY_CONNECTION CLOSED before it closes the
 * socket, and CLOSED and every shutdown here hold conn_lock: a socket is
 * only shut down while its connection is tracked. */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "daemon/http/internal.h"

#define KEY_LEN 9 /* a kind byte, then 4 (IPv4), 8 (IPv6 /64) or a uid */

typedef struct http_client {
	unsigned char key[KEY_LEN];
	int n;	  /* its connections not given up */
	int refs; /* its tracked connections, given up or not */
	struct http_conn *wait_head, *wait_tail; /* waiting, oldest first */
	struct http_client *hnext;
} http_client;

struct http_conn {
	listener *l;
	http_client *cl;
	struct MHD_Connection *c;
	pthread_t thread; /* the MHD thread that serves it */
	int fd;
	int64_t since_ms; /* waiting for a head since (CLOCK_MONOTONIC) */
	int waiting;	  /* on the waiting lists */
	int line;	  /* the request line of this head has arrived */
	int shut;	  /* given up: libmicrohttpd is closing it */
	/* in its MHD thread only: */
	tacod_http_req *req;	/* the request, until it completes */
	unsigned answer_status; /* answered when it closes (with answer) */
	char *answer;
	struct http_conn *prev, *next;	 /* l->wait_head */
	struct http_conn *cprev, *cnext; /* cl->wait_head */
};

/* The server of this MHD thread (set when it takes a connection). */
static _Thread_local tacod_http_server *thread_srv;

static int64_t conn_now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* ---- clients ---- */

static void client_key(listener *l, struct MHD_Connection *c, int fd,
		       unsigned char key[KEY_LEN])
{
	const union MHD_ConnectionInfo *ci;

	memset(key, 0, KEY_LEN);
	if (l->is_unix) {
		struct ucred cred;
		socklen_t len = sizeof(cred);
		key[0] = 'u';
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
		    len == sizeof(cred))
			memcpy(key + 1, &cred.uid, sizeof(cred.uid));
		else
			key[0] = '?';
		return;
	}
	ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	if (ci && ci->client_addr && ci->client_addr->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)ci->client_addr;
		key[0] = '4';
		memcpy(key + 1, &in->sin_addr, 4);
	} else if (ci && ci->client_addr &&
		   ci->client_addr->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)ci->client_addr;
		if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
			key[0] = '4';
			memcpy(key + 1, in6->sin6_addr.s6_addr + 12, 4);
		} else {
			key[0] = '6';
			memcpy(key + 1, in6->sin6_addr.s6_addr, 8);
		}
	} else {
		key[0] = '?';
	}
}

static size_t key_hash(const unsigned char key[KEY_LEN], size_t nb)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */

	for (int i = 0; i < KEY_LEN; i++)
		h = (h ^ key[i]) * 1099511628211ull;
	return (size_t)(h ^ (h >> 29)) & (nb - 1);
}

/* Under conn_lock. NULL when out of memory. */
static http_client *client_get(tacod_http_server *s,
			       const unsigned char key[KEY_LEN])
{
	size_t b = key_hash(key, s->n_buckets);
	http_client *cl;

	for (cl = s->clients[b]; cl; cl = cl->hnext)
		if (!memcmp(cl->key, key, KEY_LEN))
			return cl;
	cl = calloc(1, sizeof(*cl));
	if (!cl)
		return NULL;
	memcpy(cl->key, key, KEY_LEN);
	cl->hnext = s->clients[b];
	s->clients[b] = cl;
	return cl;
}

/* Under conn_lock: the client's last connection is gone. */
static void client_drop(tacod_http_server *s, http_client *cl)
{
	http_client **p = &s->clients[key_hash(cl->key, s->n_buckets)];

	while (*p != cl)
		p = &(*p)->hnext;
	*p = cl->hnext;
	free(cl);
}

/* ---- the waiting lists (under conn_lock) ---- */

static void wait_begin(tacod_http_server *s, http_conn *t)
{
	listener *l = t->l;
	http_client *cl = t->cl;

	t->since_ms = conn_now_ms();
	t->line = 0;
	t->waiting = 1;
	t->next = NULL;
	t->prev = l->wait_tail;
	if (l->wait_tail)
		l->wait_tail->next = t;
	else
		l->wait_head = t;
	l->wait_tail = t;
	t->cnext = NULL;
	t->cprev = cl->wait_tail;
	if (cl->wait_tail)
		cl->wait_tail->cnext = t;
	else
		cl->wait_head = t;
	cl->wait_tail = t;
	if (l->wait_head == t)
		pthread_cond_signal(&s->conn_cond); /* a new first deadline */
}

static void wait_end(http_conn *t)
{
	listener *l = t->l;
	http_client *cl = t->cl;

	if (!t->waiting)
		return;
	t->waiting = 0;
	if (t->prev)
		t->prev->next = t->next;
	else
		l->wait_head = t->next;
	if (t->next)
		t->next->prev = t->prev;
	else
		l->wait_tail = t->prev;
	if (t->cprev)
		t->cprev->cnext = t->cnext;
	else
		cl->wait_head = t->cnext;
	if (t->cnext)
		t->cnext->cprev = t->cprev;
	else
		cl->wait_tail = t->cprev;
	t->prev = t->next = t->cprev = t->cnext = NULL;
}

/* Under conn_lock: gives the connection up. With an answer (one of
 * HTTP_CANNED_*), it is sent first, if the socket takes it at once. */
static void give_up(tacod_http_server *s, http_conn *t, int answer,
		    uint64_t *counter)
{
	if (t->shut)
		return;
	wait_end(t);
	t->shut = 1;
	t->cl->n--;
	t->l->live--;
	__atomic_fetch_sub(&s->stats_conns, 1, __ATOMIC_RELAXED);
	if (counter)
		__atomic_fetch_add(counter, 1, __ATOMIC_RELAXED);
	if (answer >= 0)
		http_send_canned(s, t->fd, answer);
	shutdown(t->fd, SHUT_RDWR);
}

/* ---- the sweeper ---- */

static void *sweeper_main(void *arg)
{
	tacod_http_server *s = arg;
	listener *ls[2] = {&s->tcp, &s->unx};

	pthread_mutex_lock(&s->conn_lock);
	while (!s->sweeper_stop) {
		int64_t now = conn_now_ms(), next = -1;
		for (int i = 0; i < 2; i++) {
			http_conn *t;
			while ((t = ls[i]->wait_head) &&
			       t->since_ms + s->head_ms <= now)
				give_up(s, t,
					t->line ? HTTP_CANNED_TIMEOUT : -1,
					&s->stats_timed_out);
			if (t && (next < 0 || t->since_ms + s->head_ms < next))
				next = t->since_ms + s->head_ms;
		}
		if (next < 0) {
			pthread_cond_wait(&s->conn_cond, &s->conn_lock);
		} else {
			struct timespec ts;
			ts.tv_sec = (time_t)(next / 1000);
			ts.tv_nsec = (long)(next % 1000) * 1000000L;
			pthread_cond_timedwait(&s->conn_cond, &s->conn_lock,
					       &ts);
		}
	}
	pthread_mutex_unlock(&s->conn_lock);
	return NULL;
}

int http_conns_init(tacod_http_server *s, const tacod_config *cfg,
		    taco_err *err)
{
	pthread_condattr_t ca;
	size_t want;

	s->head_ms = (int64_t)(cfg->limits.request_head_timeout_s > 0
				   ? cfg->limits.request_head_timeout_s
				   : 10) *
		     1000;
	s->per_client = cfg->limits.max_connections_per_client > 0
			    ? cfg->limits.max_connections_per_client
			    : 32;
	want = 2 * (size_t)(cfg->limits.max_connections > 0
				? cfg->limits.max_connections
				: 256);
	for (s->n_buckets = 64; s->n_buckets < want && s->n_buckets < 65536;)
		s->n_buckets *= 2;
	s->clients = calloc(s->n_buckets, sizeof(*s->clients));
	if (!s->clients || http_canned_init(s)) {
		free(s->clients);
		s->clients = NULL;
		http_canned_free(s);
		return taco_err_set(err, -ENOMEM, "http: out of memory");
	}
	pthread_mutex_init(&s->conn_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->conn_cond, &ca);
	pthread_condattr_destroy(&ca);
	s->conns_ready = 1;
	if (pthread_create(&s->sweeper, NULL, sweeper_main, s))
		return taco_err_set(err, -EAGAIN,
				    "http: cannot start a thread");
	s->sweeper_on = 1;
	return 0;
}

void http_conns_stop(tacod_http_server *s)
{
	if (!s->conns_ready)
		return;
	if (s->sweeper_on) {
		pthread_mutex_lock(&s->conn_lock);
		s->sweeper_stop = 1;
		pthread_cond_signal(&s->conn_cond);
		pthread_mutex_unlock(&s->conn_lock);
		pthread_join(s->sweeper, NULL);
		s->sweeper_on = 0;
	}
	/* Every connection has been closed (its listener stopped). */
	free(s->clients);
	s->clients = NULL;
	http_canned_free(s);
	pthread_cond_destroy(&s->conn_cond);
	pthread_mutex_destroy(&s->conn_lock);
	s->conns_ready = 0;
}

/* ---- libmicrohttpd's calls ---- */

static http_conn *conn_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return ci ? ci->socket_context : NULL;
}

void http_conn_notify(void *cls, struct MHD_Connection *c,
		      void **socket_context,
		      enum MHD_ConnectionNotificationCode code)
{
	listener *l = cls;
	tacod_http_server *s = l->srv;
	http_conn *t = *socket_context, *victim = NULL;
	const union MHD_ConnectionInfo *ci;
	unsigned char key[KEY_LEN];
	int answer = -1;

	if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
		if (!t)
			return;
		/* libmicrohttpd has let go of the socket, and closes it
		 * next. */
		if (t->answer) {
			http_send_raw(s, t->fd, t->answer_status, NULL,
				      t->answer);
			free(t->answer);
		}
		if (t->req) /* it closed without completing the request */
			http_req_free(t->req);
		pthread_mutex_lock(&s->conn_lock);
		if (!t->shut) {
			wait_end(t);
			t->cl->n--;
			l->live--;
			__atomic_fetch_sub(&s->stats_conns, 1,
					   __ATOMIC_RELAXED);
		}
		if (--t->cl->refs == 0)
			client_drop(s, t->cl);
		pthread_mutex_unlock(&s->conn_lock);
		free(t);
		*socket_context = NULL;
		return;
	}
	if (code != MHD_CONNECTION_NOTIFY_STARTED)
		return;
	ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!ci)
		return;
	thread_srv = s;
	t = calloc(1, sizeof(*t));
	if (t) {
		t->l = l;
		t->c = c;
		t->thread = pthread_self();
		t->fd = ci->connect_fd;
		client_key(l, c, t->fd, key);
	}
	pthread_mutex_lock(&s->conn_lock);
	if (t && !(t->cl = client_get(s, key))) {
		free(t);
		t = NULL;
	}
	if (!t) {
		/* Untracked, it could wait forever: refuse it. */
		shutdown(ci->connect_fd, SHUT_RDWR);
		pthread_mutex_unlock(&s->conn_lock);
		return;
	}
	*socket_context = t;
	t->cl->refs++;
	t->cl->n++;
	l->live++;
	__atomic_fetch_add(&s->stats_conns, 1, __ATOMIC_RELAXED);
	wait_begin(s, t);
	if (t->cl->n > s->per_client) {
		/* Its oldest connection waiting for a head makes room; when
		 * that is this one, none of the others waits. */
		victim = t->cl->wait_head;
		answer = HTTP_CANNED_TOO_MANY;
	} else if (l->live >= l->max_conn) {
		/* The last free place: the listener's oldest waiting
		 * connection goes, so that the next one finds a place. */
		victim = l->wait_head != t ? l->wait_head : NULL;
		answer = HTTP_CANNED_BUSY;
	}
	if (victim == t)
		give_up(s, t, HTTP_CANNED_TOO_MANY, &s->stats_refused);
	else if (victim)
		give_up(s, victim, victim->line ? answer : -1,
			&s->stats_evicted);
	pthread_mutex_unlock(&s->conn_lock);
}

void http_conn_line(struct MHD_Connection *c, tacod_http_req *r)
{
	http_conn *t = conn_of(c);

	if (!t)
		return;
	t->req = r;
	pthread_mutex_lock(&t->l->srv->conn_lock);
	if (t->waiting)
		t->line = 1;
	pthread_mutex_unlock(&t->l->srv->conn_lock);
}

int http_conn_head(struct MHD_Connection *c)
{
	http_conn *t = conn_of(c);
	int shut;

	if (!t)
		return 0;
	pthread_mutex_lock(&t->l->srv->conn_lock);
	shut = t->shut;
	wait_end(t);
	pthread_mutex_unlock(&t->l->srv->conn_lock);
	return shut ? -1 : 0;
}

void http_conn_idle(struct MHD_Connection *c)
{
	http_conn *t = conn_of(c);
	tacod_http_server *s;

	if (!t)
		return;
	t->req = NULL;
	s = t->l->srv;
	pthread_mutex_lock(&s->conn_lock);
	if (!t->shut && !t->waiting)
		wait_begin(s, t);
	pthread_mutex_unlock(&s->conn_lock);
}

int http_conn_stopping(void)
{
	return thread_srv &&
	       __atomic_load_n(&thread_srv->stopping, __ATOMIC_SEQ_CST);
}

int http_conn_refused(unsigned status, const char *body)
{
	tacod_http_server *s = thread_srv;
	listener *ls[2];
	http_conn *found = NULL;
	int n = 0;

	if (!s)
		return -1;
	ls[0] = &s->tcp;
	ls[1] = &s->unx;
	pthread_mutex_lock(&s->conn_lock);
	/* This thread's connections waiting for a head: the one being
	 * refused is the only one whose whole head has arrived (the access
	 * handler would have ended its wait otherwise), which libmicrohttpd
	 * reports as a header size. */
	for (int i = 0; i < 2; i++)
		for (http_conn *t = ls[i]->wait_head; t; t = t->next)
			if (pthread_equal(t->thread, pthread_self()) &&
			    MHD_get_connection_info(
				t->c,
				MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE)) {
				found = t;
				n++;
			}
	if (n == 1 && status && !(found->answer = strdup(body)))
		n = 0;
	if (n == 1) {
		found->answer_status = status;
		wait_end(found); /* it closes after the answer */
	}
	pthread_mutex_unlock(&s->conn_lock);
	return n == 1 ? 0 : -1;
}
