/* service/dashboard.c: the web dashboard's static files (daemon/dashboard/
 * and Debian's Chart.js, built into the binary by daemon/CMakeLists.txt),
 * served at GET / and GET /ui/{file} without authentication: they hold no
 * data, and the page's calls of the API carry the user's token
 * (docs/dashboard.md). Each reply says what the browser may do with it:
 * scripts and styles from this server only, no inline script or style, no
 * framing, no type sniffing; an ETag (a hash of the file, computed once)
 * lets a reload cost a 304. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "daemon/service/internal.h"

#define EMBED(sym)                                                             \
	extern const unsigned char sym[];                                      \
	extern const size_t sym##_len;
EMBED(tacod_ui_index_html)
EMBED(tacod_ui_app_js)
EMBED(tacod_ui_api_js)
EMBED(tacod_ui_charts_js)
EMBED(tacod_ui_style_css)
EMBED(tacod_ui_chart_js)

typedef struct ui_file {
	const char *name; /* under /ui/ */
	const char *type;
	const unsigned char *data;
	const size_t *len;
	char etag[24]; /* "\"<16 hex>\"", set once */
} ui_file;

static ui_file files[] = {
    {"index.html", "text/html; charset=utf-8", tacod_ui_index_html,
     &tacod_ui_index_html_len, ""},
    {"app.js", "text/javascript; charset=utf-8", tacod_ui_app_js,
     &tacod_ui_app_js_len, ""},
    {"api.js", "text/javascript; charset=utf-8", tacod_ui_api_js,
     &tacod_ui_api_js_len, ""},
    {"charts.js", "text/javascript; charset=utf-8", tacod_ui_charts_js,
     &tacod_ui_charts_js_len, ""},
    {"style.css", "text/css; charset=utf-8", tacod_ui_style_css,
     &tacod_ui_style_css_len, ""},
    {"chart.min.js", "text/javascript; charset=utf-8", tacod_ui_chart_js,
     &tacod_ui_chart_js_len, ""},
};
#define N_FILES (sizeof(files) / sizeof(files[0]))

static pthread_once_t etags_once = PTHREAD_ONCE_INIT;

/* FNV-1a, 64 bits: the files change only with the binary, so any hash
 * that differs between versions will do; this one needs no library. */
static void etags_init(void)
{
	for (size_t i = 0; i < N_FILES; i++) {
		uint64_t h = 1469598103934665603ull;
		for (size_t k = 0; k < *files[i].len; k++) {
			h ^= files[i].data[k];
			h *= 1099511628211ull;
		}
		snprintf(files[i].etag, sizeof(files[i].etag), "\"%016llx\"",
			 (unsigned long long)h);
	}
}

/* The policy of every dashboard reply. connect-src 'self': the page talks
 * to this server only; form-action and base-uri 'none': no form posts or
 * base URL to redirect it. */
static const char csp[] =
    "default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; object-src 'none'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

static int reply_file(tacod_http_req *r, ui_file *f)
{
	const char *inm = tacod_http_header(r, "If-None-Match");
	int rc = 0;

	pthread_once(&etags_once, etags_init);
	rc |= tacod_http_add_header(r, "Content-Security-Policy", csp);
	rc |= tacod_http_add_header(r, "X-Frame-Options", "DENY");
	rc |= tacod_http_add_header(r, "Referrer-Policy", "no-referrer");
	/* revalidated on every load: a new binary's files show at once */
	rc |= tacod_http_add_header(r, "Cache-Control", "no-cache");
	rc |= tacod_http_add_header(r, "ETag", f->etag);
	if (rc)
		return tacod_http_error(r, 500, "server_error", NULL, NULL,
					"out of memory");
	if (inm && strstr(inm, f->etag))
		return tacod_http_reply_data(r, 304, NULL, "", 0);
	return tacod_http_reply_data(r, 200, f->type, f->data, *f->len);
}

/* GET /: the dashboard's page. */
int tacod_route_dashboard(tacod_http_req *r, void *ctx)
{
	(void)ctx;
	return reply_file(r, &files[0]);
}

/* GET /ui/{file}: its scripts, style and Chart.js. */
int tacod_route_dashboard_file(tacod_http_req *r, void *ctx)
{
	const char *name = tacod_http_param(r, "file");

	(void)ctx;
	for (size_t i = 0; i < N_FILES; i++)
		if (!strcmp(files[i].name, name))
			return reply_file(r, &files[i]);
	return tacod_http_error(r, 404, "invalid_request_error", "not_found",
				"file", "No dashboard file '%.64s'.", name);
}
