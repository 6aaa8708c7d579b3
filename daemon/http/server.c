/* http/server.c: tacod's HTTP server: starting and stopping it, its
 * listeners (TCP, a unix socket) and their MHD daemons, the MHD callbacks
 * that carry a request from its URI to its completion (http/conn.c keeps
 * the time of each head), the stats and the tokens file. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "daemon/http/internal.h"

/* An idle connection is closed after CONN_TIMEOUT_S; one waiting for a
 * request head much sooner (http/conn.c). */
#define THREADS 4		 /* MHD polling threads per listener */
#define CONN_TIMEOUT_S 300	 /* idle connections are closed */
#define CONN_MEMORY (128u << 10) /* MHD's per-connection pool */

/* ---- MHD callbacks ---- */

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
	listener *l = cls;
	tacod_http_req *r = calloc(1, sizeof(*r));

	if (r) {
		r->srv = l->srv;
		r->l = l;
		r->file_fd = -1;
		r->raw_uri = strdup(uri ? uri : "/");
	}
	http_conn_line(c, r);
	return r;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c,
				 const char *url, const char *method,
				 const char *version, const char *data,
				 size_t *size, void **con_cls)
{
	tacod_http_req *r = *con_cls;

	(void)cls;
	(void)version;
	if (!r)
		return MHD_NO;
	if (!r->started) {
		r->started = 1;
		if (http_conn_head(c))
			return MHD_NO; /* given up at its deadline */
		return http_begin(r, c, method, url) ? MHD_NO : MHD_YES;
	}
	if (*size) {
		int rc = http_consume(r, data, *size);
		*size = 0;
		return rc ? MHD_NO : MHD_YES;
	}
	return http_finish(r) ? MHD_NO : MHD_YES;
}

void http_req_free(tacod_http_req *r)
{
	if (r->pp)
		MHD_destroy_post_processor(r->pp);
	http_drop_temp(r);
	if (r->stream)
		http_stream_gone(r->stream);
	if (r->later)
		http_later_gone(r->later);
	if (r->counted) {
		pthread_mutex_lock(&r->srv->lock);
		r->srv->active--;
		pthread_cond_broadcast(&r->srv->cond);
		pthread_mutex_unlock(&r->srv->lock);
	}
	http_kv_free(r->query, r->nquery);
	http_kv_free(r->form, r->nform);
	http_kv_free(r->hdr, r->nhdr);
	free(r->raw_uri);
	free(r->method);
	free(r->path);
	free(r->segbuf);
	free(r->body);
	free(r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	tacod_http_req *r = *con_cls;

	(void)cls;
	(void)toe;
	*con_cls = NULL;
	http_conn_idle(c); /* the next head's time begins */
	if (r)
		http_req_free(r);
}

/* ---- starting and stopping ---- */

static int parse_listen(const char *spec, struct sockaddr_storage *ss, int *v6,
			taco_err *err)
{
	char host[256];
	const char *colon, *port_s;
	char *end;
	long port;

	memset(ss, 0, sizeof(*ss));
	if (spec[0] == '[') {
		const char *rb = strchr(spec, ']');
		if (!rb || rb[1] != ':' ||
		    (size_t)(rb - spec - 1) >= sizeof(host))
			goto bad;
		memcpy(host, spec + 1, (size_t)(rb - spec - 1));
		host[rb - spec - 1] = 0;
		port_s = rb + 2;
		*v6 = 1;
	} else {
		colon = strrchr(spec, ':');
		if (!colon || (size_t)(colon - spec) >= sizeof(host))
			goto bad;
		memcpy(host, spec, (size_t)(colon - spec));
		host[colon - spec] = 0;
		port_s = colon + 1;
		*v6 = 0;
	}
	errno = 0;
	port = strtol(port_s, &end, 10);
	if (!*port_s || *end || errno || port < 0 || port > 65535)
		goto bad;
	if (*v6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1)
			goto bad;
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)ss;
		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)port);
		if (!strcmp(host, "localhost"))
			snprintf(host, sizeof(host), "127.0.0.1");
		if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
			goto bad;
	}
	return 0;
bad:
	return taco_err_set(err, -EINVAL,
			    "http: listen '%s' must be IPv4:port, "
			    "[IPv6]:port or localhost:port",
			    spec);
}

static int unix_listen(tacod_http_server *s, const char *path, int backlog,
		       taco_err *err)
{
	struct sockaddr_un sa;
	struct stat st;
	int fd;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sa.sun_path))
		return taco_err_set(err, -ENAMETOOLONG,
				    "http: unix socket path '%s' is too long",
				    path);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (lstat(path, &st) == 0) {
		int probe;
		if (!S_ISSOCK(st.st_mode))
			return taco_err_set(err, -EEXIST,
					    "http: %s exists and is not a "
					    "socket",
					    path);
		probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (probe >= 0 &&
		    connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(probe);
			return taco_err_set(err, -EADDRINUSE,
					    "http: %s: another server is "
					    "listening there",
					    path);
		}
		if (probe >= 0)
			close(probe);
		unlink(path); /* stale */
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return taco_err_set(err, -errno, "http: socket: %s",
				    strerror(errno));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		close(fd);
		return taco_err_set(err, -e, "http: bind %s: %s", path,
				    strerror(e));
	}
	if (chmod(path, 0660) < 0 || listen(fd, backlog) < 0) {
		int e = errno;
		close(fd);
		unlink(path);
		return taco_err_set(err, -e, "http: %s: %s", path, strerror(e));
	}
	s->unix_fd = fd;
	memcpy(s->unix_path, sa.sun_path, sizeof(s->unix_path));
	return 0;
}

static int start_daemon(tacod_http_server *s, listener *l, int max_conn,
			const struct sockaddr *sa, int v6, int fd,
			taco_err *err)
{
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD |
			 MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC;
	unsigned threads = THREADS;

	/* poll(), not epoll: libmicrohttpd 0.9.75's epoll mode (Debian 12)
	 * misses some clients' hang-ups (a few percent of closed keep-alive
	 * connections and aborted uploads stay in CLOSE_WAIT, their temporary
	 * files with them, until the idle timeout); poll() sees every one.
	 * A pool of THREADS polling threads spreads the connections. */
	if (MHD_is_feature_supported(MHD_FEATURE_POLL) == MHD_YES)
		flags |= MHD_USE_POLL;
	if (v6)
		flags |= MHD_USE_IPv6;
	if ((unsigned)max_conn < threads)
		threads = (unsigned)max_conn;
	l->srv = s;
	l->quiesced_fd = -1;
	l->max_conn = max_conn;
	/* No MHD_OPTION_PER_IP_CONNECTION_LIMIT: http/conn.c counts the
	 * connections of each client (on the unix socket too) and makes room
	 * by giving up the oldest one waiting for a head, where the library
	 * would refuse the newest. */
	if (sa)
		l->d = MHD_start_daemon(
		    flags, 0, NULL, NULL, on_access, l, MHD_OPTION_SOCK_ADDR,
		    sa, MHD_OPTION_CONNECTION_LIMIT, (unsigned)max_conn,
		    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONN_TIMEOUT_S,
		    MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY,
		    MHD_OPTION_THREAD_POOL_SIZE, threads,
		    MHD_OPTION_NOTIFY_COMPLETED, on_completed, l,
		    MHD_OPTION_NOTIFY_CONNECTION, http_conn_notify, l,
		    MHD_OPTION_URI_LOG_CALLBACK, on_uri, l,
		    MHD_OPTION_LISTENING_ADDRESS_REUSE, 1, MHD_OPTION_END);
	else
		l->d = MHD_start_daemon(
		    flags, 0, NULL, NULL, on_access, l,
		    MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT,
		    (unsigned)max_conn, MHD_OPTION_CONNECTION_TIMEOUT,
		    (unsigned)CONN_TIMEOUT_S,
		    MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY,
		    MHD_OPTION_THREAD_POOL_SIZE, threads,
		    MHD_OPTION_NOTIFY_COMPLETED, on_completed, l,
		    MHD_OPTION_NOTIFY_CONNECTION, http_conn_notify, l,
		    MHD_OPTION_URI_LOG_CALLBACK, on_uri, l, MHD_OPTION_END);
	if (!l->d)
		return taco_err_set(err, -EADDRINUSE,
				    "http: cannot start listening on %s (in "
				    "use, or not an address of this machine)",
				    sa ? "the TCP address" : s->unix_path);
	return 0;
}

static void server_free(tacod_http_server *s)
{
	http_conns_stop(s);
	http_routes_free(s);
	tacod_auth_free(s->auth);
	pthread_rwlock_destroy(&s->auth_lock);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->cond);
	free(s);
}

static void close_listeners(tacod_http_server *s)
{
	listener *ls[2] = {&s->tcp, &s->unx};

	for (int i = 0; i < 2; i++) {
		if (ls[i]->d)
			MHD_stop_daemon(ls[i]->d);
		ls[i]->d = NULL;
		if (ls[i]->quiesced_fd >= 0)
			close(ls[i]->quiesced_fd);
		ls[i]->quiesced_fd = -1;
	}
	if (s->unix_fd >= 0)
		close(s->unix_fd); /* MHD never took it */
	s->unix_fd = -1;
	if (s->unix_path[0])
		unlink(s->unix_path);
	s->unix_path[0] = 0;
}

int tacod_http_start(const tacod_config *cfg, const tacod_http_route *routes,
		     void *ctx, tacod_http_server **out, taco_err *err)
{
	tacod_http_server *s = calloc(1, sizeof(*s));
	struct sockaddr_storage ss;
	pthread_condattr_t ca;
	int v6 = 0, rc, max_conn;

	*out = NULL;
	if (!s)
		return taco_err_set(err, -ENOMEM, "http: out of memory");
	pthread_rwlock_init(&s->auth_lock, NULL);
	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cond, &ca);
	pthread_condattr_destroy(&ca);
	s->unix_fd = -1;
	s->tcp.quiesced_fd = s->unx.quiesced_fd = -1;
	s->ctx = ctx;
	s->max_body = cfg->limits.max_body_bytes;
	s->max_upload = cfg->limits.max_upload_bytes;
	max_conn =
	    cfg->limits.max_connections > 0 ? cfg->limits.max_connections : 256;
	snprintf(s->tokens_file, sizeof(s->tokens_file), "%s",
		 cfg->tokens_file);
	if ((rc = http_routes_compile(s, routes, err)) ||
	    (rc = http_conns_init(s, cfg, err)))
		goto fail;
	if (s->tokens_file[0] &&
	    (rc = tacod_auth_load(s->tokens_file, &s->auth, err)))
		goto fail;
	if (!cfg->listen[0] && !cfg->unix_socket[0]) {
		rc = taco_err_set(err, -EINVAL,
				  "http: neither 'listen' nor 'unix_socket' "
				  "is set");
		goto fail;
	}
	if (cfg->listen[0]) {
		if ((rc = parse_listen(cfg->listen, &ss, &v6, err)))
			goto fail;
		if ((rc = start_daemon(s, &s->tcp, max_conn,
				       (struct sockaddr *)&ss, v6, -1, err))) {
			taco_err_prefix(err, rc, "%s", cfg->listen);
			goto fail;
		}
	}
	if (cfg->unix_socket[0]) {
		if ((rc = unix_listen(s, cfg->unix_socket, 128, err)))
			goto fail;
		if ((rc = start_daemon(s, &s->unx, max_conn, NULL, 0,
				       s->unix_fd, err)))
			goto fail;
		s->unix_fd = -1; /* MHD's now */
		s->unx.is_unix = 1;
	}
	*out = s;
	return 0;
fail:
	close_listeners(s);
	server_free(s);
	return rc;
}

int tacod_http_port(const tacod_http_server *s)
{
	const union MHD_DaemonInfo *i;

	if (!s || !s->tcp.d)
		return 0;
	i = MHD_get_daemon_info(s->tcp.d, MHD_DAEMON_INFO_BIND_PORT);
	return i ? i->port : 0;
}

void tacod_http_get_stats(tacod_http_server *s, tacod_http_stats *out)
{
	memset(out, 0, sizeof(*out));
	out->requests = __atomic_load_n(&s->stats_requests, __ATOMIC_RELAXED);
	for (int i = 0; i < TACOD_HTTP_STATUS_MAX; i++)
		out->by_status[i] =
		    __atomic_load_n(&s->stats_status[i], __ATOMIC_RELAXED);
	out->streams = __atomic_load_n(&s->stats_streams, __ATOMIC_RELAXED);
	out->streams_open = __atomic_load_n(&s->stats_open, __ATOMIC_RELAXED);
	out->streams_dropped =
	    __atomic_load_n(&s->stats_dropped, __ATOMIC_RELAXED);
	out->connections_open =
	    __atomic_load_n(&s->stats_conns, __ATOMIC_RELAXED);
	out->heads_timed_out =
	    __atomic_load_n(&s->stats_timed_out, __ATOMIC_RELAXED);
	out->connections_evicted =
	    __atomic_load_n(&s->stats_evicted, __ATOMIC_RELAXED);
	out->connections_refused =
	    __atomic_load_n(&s->stats_refused, __ATOMIC_RELAXED);
}

int tacod_http_reload_tokens(tacod_http_server *s, taco_err *err)
{
	tacod_auth *a = NULL, *old;
	int rc;

	if (!s->tokens_file[0])
		return 0;
	if ((rc = tacod_auth_load(s->tokens_file, &a, err)))
		return rc;
	pthread_rwlock_wrlock(&s->auth_lock);
	old = s->auth;
	s->auth = a;
	pthread_rwlock_unlock(&s->auth_lock);
	tacod_auth_free(old);
	return 0;
}

static void deadline_after(struct timespec *ts, int ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

void tacod_http_stop_grace(tacod_http_server *s, int grace_ms)
{
	listener *ls[2];
	struct timespec deadline;

	if (!s)
		return;
	ls[0] = &s->tcp;
	ls[1] = &s->unx;
	/* No new connections. */
	for (int i = 0; i < 2; i++)
		if (ls[i]->d)
			ls[i]->quiesced_fd = MHD_quiesce_daemon(ls[i]->d);

	/* End every stream; the suspended ones are woken to finish. */
	http_streams_stop(s);
	http_laters_stop(s);

	/* Requests in flight finish (for at most grace_ms). */
	deadline_after(&deadline, grace_ms);
	pthread_mutex_lock(&s->lock);
	while (s->active > 0 && pthread_cond_timedwait(&s->cond, &s->lock,
						       &deadline) != ETIMEDOUT)
		;
	while (__atomic_load_n(&s->resuming, __ATOMIC_SEQ_CST) > 0)
		pthread_cond_wait(&s->cond, &s->lock);
	pthread_mutex_unlock(&s->lock);

	close_listeners(s);
	server_free(s);
}

void tacod_http_stop(tacod_http_server *s)
{
	tacod_http_stop_grace(s, TACOD_HTTP_STOP_GRACE_MS);
}
