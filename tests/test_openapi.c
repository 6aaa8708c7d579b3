/* test_openapi.c: api/openapi.yaml against the route table: every route is
 * documented, every documented operation is routed, and the binary serves
 * the file as it is in the tree.
 *
 * The document is read with a line scanner, not a YAML parser: under
 * `paths:` a path is a line "  /...:" (2 spaces) and an operation a line
 * "    get:" (4 spaces). The scanner refuses anything else at those levels,
 * so a document that drifts from that shape fails here instead of being
 * half read. */
#include <check.h>
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/service/internal.h"
#include "tacod_harness.h"
#include "testutil.h"

#define OPS_MAX 128

typedef struct op {
	char method[8]; /* "GET" */
	char path[160];
} op;

typedef struct ops {
	op v[OPS_MAX];
	int n;
	char why[256]; /* what was wrong, when scan fails */
} ops;

static const char *const http_methods[] = {
    "get", "put", "post", "delete", "patch", "head", "options", "trace", NULL};

static int bad(ops *o, int line, const char *what)
{
	snprintf(o->why, sizeof(o->why), "line %d: %s", line, what);
	return -EINVAL;
}

/* The key of a line "KEY:" with nothing after the colon, into key. */
static int bare_key(const char *s, size_t len, char *key, size_t cap)
{
	if (len < 2 || s[len - 1] != ':' || len - 1 >= cap)
		return -EINVAL;
	memcpy(key, s, len - 1);
	key[len - 1] = 0;
	return strpbrk(key, " :\t\"'") ? -EINVAL : 0;
}

/* The (method, path) pairs of the `paths:` section of text. */
static int scan(const char *text, ops *o)
{
	const char *p = text;
	char path[160] = "", key[160];
	int line = 0, in_paths = 0, seen_paths = 0;

	o->n = 0;
	o->why[0] = 0;
	while (*p) {
		const char *start = p, *end = strchr(p, '\n');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		size_t ind = strspn(p, " ");
		const char *s = p + ind;
		size_t slen = len - ind;

		line++;
		p += len + (end ? 1 : 0);
		while (slen && (s[slen - 1] == ' ' || s[slen - 1] == '\r'))
			slen--;
		if (memchr(start, '\t', len))
			return bad(o, line, "a tab");
		if (!slen || s[0] == '#')
			continue;
		if (ind == 0) {
			in_paths = slen == 6 && !memcmp(s, "paths:", 6);
			if (in_paths && seen_paths++)
				return bad(o, line, "a second paths:");
			continue;
		}
		if (!in_paths || ind > 4)
			continue;
		if (ind == 2) {
			if (s[0] != '/' ||
			    bare_key(s, slen, path, sizeof(path)))
				return bad(o, line,
					   "a path must be \"  /path:\"");
			continue;
		}
		if (ind != 4)
			return bad(
			    o, line,
			    "under paths:, indent 2 (path) or 4 (method)");
		if (!path[0] || bare_key(s, slen, key, sizeof(key)))
			return bad(
			    o, line,
			    "a method must be \"    get:\" below a path");
		int m = 0;
		while (http_methods[m] && strcmp(http_methods[m], key))
			m++;
		if (!http_methods[m])
			return bad(o, line, "indent 4 is an HTTP method only");
		if (o->n == OPS_MAX)
			return bad(o, line, "too many operations");
		for (int i = 0; key[i]; i++)
			o->v[o->n].method[i] =
			    (char)toupper((unsigned char)key[i]);
		o->v[o->n].method[strlen(key)] = 0;
		snprintf(o->v[o->n].path, sizeof(o->v[o->n].path), "%s", path);
		for (int i = 0; i < o->n; i++)
			if (!strcmp(o->v[i].method, o->v[o->n].method) &&
			    !strcmp(o->v[i].path, path))
				return bad(o, line, "an operation twice");
		o->n++;
	}
	if (!seen_paths)
		return bad(o, line, "no paths: section");
	return 0;
}

static int has(const ops *o, const char *method, const char *path)
{
	for (int i = 0; i < o->n; i++)
		if (!strcmp(o->v[i].method, method) &&
		    !strcmp(o->v[i].path, path))
			return 1;
	return 0;
}

static int routed(const char *method, const char *path)
{
	for (const tacod_http_route *r = th_svc->routes; r->method; r++)
		if (!strcmp(r->method, method) && !strcmp(r->pattern, path))
			return 1;
	return 0;
}

static char *spec_text(size_t *len)
{
	/* TACO_FIXTURES is <repo>/tests/fixtures */
	char *text = tu_read_file(tu_fixture("../../api/openapi.yaml"), len);

	ck_assert_msg(text, "cannot read %s",
		      tu_fixture("../../api/openapi.yaml"));
	return text;
}

START_TEST(test_scanner_shape)
{
	static ops o; /* static: the check fork's stack need not hold it */

	ck_assert_int_eq(scan("openapi: 3.1.0\npaths:\n  /a/{id}:\n    get:\n"
			      "      summary: x\n\n    delete:\n  /b:\n"
			      "    post:\n      responses:\n        \"200\": "
			      "{}\ncomponents:\n  schemas:\n    get:\n",
			      &o),
			 0);
	ck_assert_int_eq(o.n, 3);
	ck_assert(has(&o, "GET", "/a/{id}") && has(&o, "DELETE", "/a/{id}") &&
		  has(&o, "POST", "/b"));
	/* not in shape: each is refused, never half read */
	ck_assert_int_eq(scan("paths:\n   /a:\n    get:\n", &o), -EINVAL);
	ck_assert_int_eq(scan("paths:\n  /a:\n    parameters:\n", &o), -EINVAL);
	ck_assert_int_eq(scan("paths:\n  a:\n    get:\n", &o), -EINVAL);
	ck_assert_int_eq(scan("paths:\n  /a: {}\n", &o), -EINVAL);
	ck_assert_int_eq(scan("paths:\n    get:\n", &o), -EINVAL);
	ck_assert_int_eq(scan("paths:\n  /a:\n    get:\n    get:\n", &o),
			 -EINVAL);
	ck_assert_int_eq(scan("paths:\n  /a:\n\tget:\n", &o), -EINVAL);
	ck_assert_int_eq(scan("openapi: 3.1.0\n", &o), -EINVAL);
}
END_TEST

START_TEST(test_routes_match_spec)
{
	static ops o;
	size_t len;
	char *text = spec_text(&len);
	int n_routes = 0;

	ck_assert_msg(!strncmp(text, "openapi: 3.1.", 13),
		      "api/openapi.yaml must start with openapi: 3.1.x");
	ck_assert_msg(scan(text, &o) == 0, "api/openapi.yaml: %s", o.why);
	free(text);
	th_start(8ull << 30, NULL);
	/* (a) every route is documented */
	for (const tacod_http_route *r = th_svc->routes; r->method; r++) {
		n_routes++;
		ck_assert_msg(has(&o, r->method, r->pattern),
			      "%s %s is routed but not in api/openapi.yaml",
			      r->method, r->pattern);
	}
	/* (b) every documented operation is routed */
	for (int i = 0; i < o.n; i++)
		ck_assert_msg(routed(o.v[i].method, o.v[i].path),
			      "%s %s is in api/openapi.yaml but not routed",
			      o.v[i].method, o.v[i].path);
	ck_assert_int_eq(n_routes, o.n);
	ck_assert_int_gt(n_routes, 0);
	th_stop();
}
END_TEST

START_TEST(test_served_bytes)
{
	size_t len, got_len = 0;
	char *text = spec_text(&len), *got = NULL;

	th_start(8ull << 30, NULL);
	ck_assert_int_eq(th_call_x("GET", "/v1/openapi.yaml", NULL, NULL, NULL,
				   NULL, &got, &got_len),
			 200);
	/* a stale build (the file edited, the binary not rebuilt) fails */
	ck_assert_msg(got_len == len && !memcmp(got, text, len),
		      "GET /v1/openapi.yaml served %zu bytes that differ from "
		      "api/openapi.yaml's %zu",
		      got_len, len);
	free(got);
	free(text);
	th_stop();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("openapi");
	TCase *tc = tcase_create("openapi");

	curl_global_init(CURL_GLOBAL_DEFAULT);
	tcase_add_test(tc, test_scanner_shape);
	tcase_add_test(tc, test_routes_match_spec);
	tcase_add_test(tc, test_served_bytes);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
