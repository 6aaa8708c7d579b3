/* fuzz_http.c: raw bytes at tacod's HTTP server over loopback: the request
 * line, headers, percent-decoding of paths and queries, chunked and
 * multipart bodies (uploads are hashed and written to a temp dir), JSON
 * bodies, authentication headers. libmicrohttpd parses in its own threads;
 * ours run the handlers. Each input is one connection: sent, half-closed,
 * the reply read until the server closes or 2 s pass. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/http/http.h"

static tacod_http_server *srv;
static int port;
static char dir[64];

static int h_json(tacod_http_req *r, void *ctx)
{
	json_t *b = tacod_http_body_json(r);

	(void)ctx;
	if (!b)
		return 0;
	return tacod_http_reply_json(r, 200, b);
}

static int h_query(tacod_http_req *r, void *ctx)
{
	const char *a = tacod_http_query(r, "after");
	const char *h = tacod_http_header(r, "Last-Event-ID");

	(void)ctx;
	return tacod_http_reply_json(r, 200,
				     json_pack("{ss? ss? ss}", "after", a,
					       "last", h, "id",
					       tacod_http_param(r, "id")));
}

static int h_upload(tacod_http_req *r, void *ctx)
{
	const tacod_http_upload *u = tacod_http_upload_file(r);
	const char *p = tacod_http_form(r, "purpose");

	(void)ctx;
	return tacod_http_reply_json(r, 200,
				     json_pack("{ss? sI}", "purpose", p, "size",
					       (json_int_t)(u ? u->size : 0)));
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static char upload[128];
	static tacod_http_route routes[] = {
	    {"POST", "/v1/fine_tuning/jobs", h_json, NULL, 0},
	    {"GET", "/v1/fine_tuning/jobs/{id}/events", h_query, NULL, 0},
	    {"POST", "/v1/files", h_upload, upload, 0},
	    {NULL, NULL, NULL, NULL, 0},
	};
	tacod_config c;
	taco_err err = {{0}};

	(void)argc;
	(void)argv;
	snprintf(dir, sizeof(dir), "/tmp/fuzz-http-XXXXXX");
	if (!mkdtemp(dir))
		abort();
	snprintf(upload, sizeof(upload), "%s", dir);
	tacod_config_defaults(&c);
	snprintf(c.listen, sizeof(c.listen), "127.0.0.1:0");
	c.limits.max_body_bytes = 64 << 10;
	c.limits.max_upload_bytes = 64 << 10;
	if (tacod_http_start(&c, routes, NULL, &srv, &err)) {
		fprintf(stderr, "fuzz_http: %s\n", err.msg);
		abort();
	}
	port = tacod_http_port(srv);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sockaddr_in a = {0};
	char buf[4096];
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct pollfd p = {fd, POLLIN, 0};

	if (fd < 0)
		return 0;
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
		size_t off = 0;
		while (off < size) {
			ssize_t n =
			    send(fd, data + off, size - off, MSG_NOSIGNAL);
			if (n <= 0)
				break;
			off += (size_t)n;
		}
		shutdown(fd, SHUT_WR);
		while (poll(&p, 1, 2000) > 0 &&
		       recv(fd, buf, sizeof(buf), 0) > 0)
			;
	}
	close(fd);
	return 0;
}
