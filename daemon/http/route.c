/* http/route.c: the route table compiled into segments, the request URI
 * parsed and matched against it, who is calling (the socket's peer, a
 * bearer token, or a loopback client without a tokens file), and the
 * request head's accessors. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "daemon/http/internal.h"
#include "util/hex.h"

/* Percent-decodes [s, s+n) into out (room for n + 1). plus: '+' is a
 * space (query strings). Returns -1 on a bad escape or a %00 when strict,
 * else the length. */
static long pct_decode(const char *s, size_t n, char *out, int plus, int strict)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		int hi, lo;
		if (s[i] == '%' && i + 2 < n &&
		    (hi = taco_hex_value(s[i + 1])) >= 0 &&
		    (lo = taco_hex_value(s[i + 2])) >= 0) {
			char ch = (char)(hi << 4 | lo);
			if (ch == 0 && strict)
				return -1;
			out[o++] = ch ? ch : '?';
			i += 2;
		} else if (s[i] == '%' && strict) {
			return -1;
		} else {
			out[o++] = plus && s[i] == '+' ? ' ' : s[i];
		}
	}
	out[o] = 0;
	return (long)o;
}

int http_routes_compile(tacod_http_server *s, const tacod_http_route *rt,
			taco_err *err)
{
	int n = 0;

	while (rt && rt[n].method)
		n++;
	s->routes = calloc((size_t)n + 1, sizeof(*s->routes));
	if (!s->routes)
		return taco_err_set(err, -ENOMEM, "http: out of memory");
	for (int i = 0; i < n; i++) {
		croute *cr = &s->routes[i];
		const char *pat = rt[i].pattern;
		char *p;
		int np = 0;

		cr->r = &rt[i];
		if (!pat || pat[0] != '/' || !rt[i].handler)
			return taco_err_set(err, -EINVAL,
					    "http: route %d (%s %s): the "
					    "pattern must start with '/' and "
					    "a handler is needed",
					    i, rt[i].method, pat ? pat : "");
		cr->buf = strdup(pat + 1);
		if (!cr->buf)
			return taco_err_set(err, -ENOMEM,
					    "http: out of memory");
		s->n_routes = i + 1;
		for (p = cr->buf;;) {
			char *slash = strchr(p, '/');
			size_t len;
			if (slash)
				*slash = 0;
			len = strlen(p);
			if (cr->nseg == MAX_SEGMENTS)
				return taco_err_set(err, -EINVAL,
						    "http: route '%s' has too "
						    "many segments",
						    pat);
			cr->is_param[cr->nseg] =
			    len >= 3 && p[0] == '{' && p[len - 1] == '}';
			if (cr->is_param[cr->nseg]) {
				p[len - 1] = 0;
				p++;
				if (++np > TACOD_HTTP_MAX_PARAMS)
					return taco_err_set(
					    err, -EINVAL,
					    "http: route '%s' has more than "
					    "%d parameters",
					    pat, TACOD_HTTP_MAX_PARAMS);
			} else if (strchr(p, '{') || strchr(p, '}')) {
				return taco_err_set(err, -EINVAL,
						    "http: route '%s': a "
						    "{param} must be a whole "
						    "segment",
						    pat);
			}
			cr->seg[cr->nseg++] = p;
			if (!slash)
				break;
			p = slash + 1;
		}
	}
	return 0;
}

void http_routes_free(tacod_http_server *s)
{
	for (int i = 0; i < s->n_routes; i++)
		free(s->routes[i].buf);
	free(s->routes);
}

static int parse_uri(tacod_http_req *r, const char *uri)
{
	const char *q = strchr(uri, '?');
	size_t plen = q ? (size_t)(q - uri) : strlen(uri);
	const char *hash;
	char *p;

	if (!plen || uri[0] != '/')
		return -EINVAL;
	r->path = malloc(plen + 1);
	r->segbuf = malloc(plen + 1);
	if (!r->path || !r->segbuf)
		return -ENOMEM;
	if (pct_decode(uri, plen, r->path, 0, 1) < 0)
		return -EINVAL;
	http_utf8_fix(r->path);
	/* Segments, each decoded on its own (so %2F stays inside one). */
	p = r->segbuf;
	for (size_t i = 1; i <= plen;) {
		size_t j = i;
		long n;
		while (j < plen && uri[j] != '/')
			j++;
		if (r->nseg == MAX_SEGMENTS)
			return -E2BIG;
		n = pct_decode(uri + i, j - i, p, 0, 1);
		if (n < 0)
			return -EINVAL;
		r->seg[r->nseg++] = p;
		p += n + 1;
		i = j + 1;
		if (j == plen)
			break;
	}
	if (!q)
		return 0;
	hash = strchr(q + 1, '#');
	for (const char *s = q + 1, *end = hash ? hash : q + strlen(q);
	     s < end;) {
		const char *amp = memchr(s, '&', (size_t)(end - s));
		const char *e = amp ? amp : end;
		const char *eq = memchr(s, '=', (size_t)(e - s));
		if (e > s && r->nquery < MAX_QUERY) {
			const char *ke = eq ? eq : e;
			kv *x = &r->query[r->nquery];
			x->k = malloc((size_t)(ke - s) + 1);
			x->v = malloc(eq ? (size_t)(e - eq) : 1);
			if (!x->k || !x->v) {
				free(x->k);
				free(x->v);
				return -ENOMEM;
			}
			pct_decode(s, (size_t)(ke - s), x->k, 1, 0);
			if (eq)
				pct_decode(eq + 1, (size_t)(e - eq - 1), x->v,
					   1, 0);
			else
				x->v[0] = 0;
			r->nquery++;
		}
		s = e + 1;
	}
	return 0;
}

static int route_matches_path(const croute *cr, tacod_http_req *r, int bind)
{
	int np = 0;

	if (cr->nseg != r->nseg)
		return 0;
	for (int i = 0; i < cr->nseg; i++) {
		if (cr->is_param[i]) {
			if (!r->seg[i][0])
				return 0;
			if (bind && np < TACOD_HTTP_MAX_PARAMS) {
				r->pname[np] = cr->seg[i];
				r->pval[np] = r->seg[i];
			}
			np++;
		} else if (strcmp(cr->seg[i], r->seg[i])) {
			return 0;
		}
	}
	if (bind)
		r->nparams = np;
	return 1;
}

static int method_is(const char *route_method, const char *m)
{
	return !strcmp(route_method, m) ||
	       (!strcmp(m, "HEAD") && !strcmp(route_method, "GET"));
}

static int is_loopback(const struct sockaddr *sa)
{
	if (!sa)
		return 0;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;
		return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)sa;
		const uint8_t *b = in6->sin6_addr.s6_addr;
		static const uint8_t v4map[12] = {0, 0, 0, 0, 0,    0,
						  0, 0, 0, 0, 0xff, 0xff};
		if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr))
			return 1;
		return !memcmp(b, v4map, 12) && b[12] == 127;
	}
	return 0;
}

static uint64_t content_length(struct MHD_Connection *c, int *have)
{
	const char *v =
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
	char *end;
	unsigned long long n;

	*have = 0;
	if (!v)
		return 0;
	n = strtoull(v, &end, 10);
	if (end == v || *end)
		return 0;
	*have = 1;
	return n;
}

static enum MHD_Result count_clen(void *cls, enum MHD_ValueKind kind,
				  const char *key, const char *value)
{
	(void)kind;
	(void)value;
	*(int *)cls += !strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH);
	return MHD_YES;
}

/* How the body is framed, where libmicrohttpd lets it pass: a coding it
 * does not decode would be read until the client closes (RFC 9112 6.1:
 * 501); a second Content-Length, or one beside Transfer-Encoding, is
 * ignored by it and may be what another server on the way believed (RFC
 * 9112 6.3: refuse). Returns 0, or http_reject's result. */
static int check_framing(tacod_http_req *r, struct MHD_Connection *c,
			 int *refused)
{
	const char *te = MHD_lookup_connection_value(
	    c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
	int n = 0;

	*refused = 1;
	if (te && strcasecmp(te, "chunked"))
		return http_reject(r, 501, "unsupported_transfer_encoding",
				   NULL,
				   "Transfer-Encoding '%.64s' is not "
				   "supported: send the body chunked or with a "
				   "Content-Length.",
				   te);
	MHD_get_connection_values(c, MHD_HEADER_KIND, count_clen, &n);
	if (n > 1 || (n && te))
		return http_reject(r, 400, "invalid_content_length", NULL,
				   "The request has %s: the body's length "
				   "is ambiguous.",
				   n > 1 ? "more than one Content-Length"
					 : "both Content-Length and "
					   "Transfer-Encoding");
	*refused = 0;
	return 0;
}

/* The first call of a request: authentication, routing, body limits.
 * Returns 0, or -1 to drop the connection. */
int http_begin(tacod_http_req *r, struct MHD_Connection *c, const char *method,
	       const char *url)
{
	tacod_http_server *srv = r->srv;
	const union MHD_ConnectionInfo *ci;
	int rc, uri_rc, have_len, path_known = 0, open = 0;
	uint64_t clen;
	char allow[256] = "";
	int refused;

	r->conn = c;
	r->method = strdup(method);
	if (!r->method)
		return -1;
	clen = content_length(c, &have_len);
	r->has_body = (have_len && clen > 0) ||
		      MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						  "Transfer-Encoding");
	pthread_mutex_lock(&srv->lock);
	srv->active++;
	r->counted = 1;
	rc = srv->stopping;
	pthread_mutex_unlock(&srv->lock);
	if (rc)
		return http_reject(r, 503, "server_shutting_down", NULL,
				   "The server is shutting down.");
	rc = check_framing(r, c, &refused);
	if (refused)
		return rc;

	/* Which route: an open one (http.h) is served without
	 * authentication, any other only after it. The route is the first
	 * that matches, as below. */
	uri_rc = parse_uri(r, r->raw_uri ? r->raw_uri : url);
	if (uri_rc == -ENOMEM)
		return -1;
	for (int i = 0; !uri_rc && i < srv->n_routes; i++)
		if (method_is(srv->routes[i].r->method, method) &&
		    route_matches_path(&srv->routes[i], r, 0)) {
			open = srv->routes[i].r->open;
			break;
		}

	/* Who is calling. */
	if (open) {
		/* nobody in particular: an open route reads no identity */
	} else if (r->l->is_unix) {
		taco_err err = {{0}};
		ci = MHD_get_connection_info(c,
					     MHD_CONNECTION_INFO_CONNECTION_FD);
		if (!ci || tacod_auth_peer(ci->connect_fd, &r->id, NULL, &err))
			return http_reject(r, 401, "unauthenticated", NULL,
					   "Cannot identify the socket's "
					   "peer: %s",
					   err.msg);
	} else {
		pthread_rwlock_rdlock(&srv->auth_lock);
		if (srv->auth)
			rc = tacod_auth_header(
			    srv->auth,
			    MHD_lookup_connection_value(
				c, MHD_HEADER_KIND,
				MHD_HTTP_HEADER_AUTHORIZATION),
			    &r->id);
		else
			rc = 1;
		pthread_rwlock_unlock(&srv->auth_lock);
		if (rc == 1) {
			ci = MHD_get_connection_info(
			    c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
			if (!ci || !is_loopback(ci->client_addr))
				return http_reject(
				    r, 403, "forbidden", NULL,
				    "Without a tokens file only "
				    "loopback clients are served.");
			tacod_auth_local(&r->id);
		} else if (rc) {
			const char *h = MHD_lookup_connection_value(
			    c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
			tacod_http_add_header(r, "WWW-Authenticate",
					      "Bearer realm=\"tacod\"");
			return http_reject(
			    r, 401, "invalid_api_key", NULL,
			    h ? "Incorrect API key provided."
			      : "You didn't provide an API key. Send "
				"it as 'Authorization: Bearer "
				"<token>'.");
		}
	}

	rc = uri_rc;
	if (rc == -EINVAL)
		return http_reject(r, 400, "invalid_url", NULL,
				   "The request URL is malformed.");
	for (int i = 0; !rc && i < srv->n_routes; i++) {
		const croute *cr = &srv->routes[i];
		if (!route_matches_path(cr, r, 0))
			continue;
		path_known = 1;
		if (method_is(cr->r->method, method) && !r->route) {
			r->route = cr;
			route_matches_path(cr, r, 1);
		}
		if (strlen(allow) + strlen(cr->r->method) + 3 < sizeof(allow) &&
		    !strstr(allow, cr->r->method)) {
			if (allow[0])
				strcat(allow, ", ");
			strcat(allow, cr->r->method);
		}
	}
	if (!r->route && path_known) {
		tacod_http_add_header(r, MHD_HTTP_HEADER_ALLOW, allow);
		return http_reject(r, 405, "method_not_allowed", NULL,
				   "Method %s is not allowed for %s "
				   "(allowed: %s).",
				   method, r->path, allow);
	}
	if (!r->route)
		return http_reject(r, 404, "unknown_url", NULL,
				   "Unknown request URL: %s %s.", method,
				   r->path ? r->path : "");

	/* How the body is read. */
	return http_body_mode(r, have_len, clen);
}

const char *tacod_http_method(const tacod_http_req *r)
{
	return r->method;
}

const char *tacod_http_path(const tacod_http_req *r)
{
	return r->path;
}

const char *tacod_http_param(const tacod_http_req *r, const char *name)
{
	for (int i = 0; i < r->nparams; i++)
		if (!strcmp(r->pname[i], name))
			return r->pval[i];
	return NULL;
}

const char *tacod_http_query(const tacod_http_req *r, const char *name)
{
	return http_kv_get(r->query, r->nquery, name);
}

int tacod_http_query_count(const tacod_http_req *r)
{
	return r->nquery;
}

void tacod_http_query_at(const tacod_http_req *r, int i, const char **name,
			 const char **value)
{
	*name = r->query[i].k;
	*value = r->query[i].v;
}

const char *tacod_http_header(const tacod_http_req *r, const char *name)
{
	return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const tacod_identity *tacod_http_identity(const tacod_http_req *r)
{
	return &r->id;
}

int tacod_http_is_unix(const tacod_http_req *r)
{
	return r->l->is_unix;
}
