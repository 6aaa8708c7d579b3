/* util.c: option parsing, requests that print their errors, formatting
 * and tables for the commands. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctl.h"

#define MAX_OPTIONS 64

static const struct option common[] = {
    {"json", no_argument, NULL, CTL_OPT_JSON},
    {"url", required_argument, NULL, CTL_OPT_URL},
    {"token", required_argument, NULL, CTL_OPT_TOKEN},
    {"help", no_argument, NULL, CTL_OPT_HELP},
};

static void cmd_name(const ctl_cmd *cmd, char *buf, size_t cap)
{
	snprintf(buf, cap, "tacoctl%s%s%s%s", cmd ? " " : "",
		 cmd ? cmd->group : "", cmd && cmd->name ? " " : "",
		 cmd && cmd->name ? cmd->name : "");
}

int ctl_usage(const ctl_cmd *cmd, const char *fmt, ...)
{
	char name[64];
	va_list ap;

	cmd_name(cmd, name, sizeof(name));
	fprintf(stderr, "%s: ", name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s --help'.\n", name);
	return CTL_USAGE;
}

int ctl_parse(ctl *c, const ctl_cmd *cmd, int argc, char **argv,
	      const struct option *own, const char *shortopts,
	      int (*on)(void *ctx, int id, const char *arg), void *ctx,
	      int *first)
{
	struct option opts[MAX_OPTIONS];
	char shorts[64];
	int n = 0, id, rc;

	for (; own && own[n].name && n < MAX_OPTIONS - 5; n++)
		opts[n] = own[n];
	memcpy(opts + n, common, sizeof(common));
	memset(opts + n + 4, 0, sizeof(opts[0]));
	/* ':' first: a missing argument is reported as ':' */
	snprintf(shorts, sizeof(shorts), ":h%s", shortopts ? shortopts : "");
	opterr = 0;
	optind = 0; /* GNU: start over, argv may be another array */
	while ((id = getopt_long(argc, argv, shorts, opts, NULL)) != -1) {
		switch (id) {
		case CTL_OPT_JSON:
			c->json = 1;
			break;
		case CTL_OPT_URL:
			c->url_flag = optarg;
			break;
		case CTL_OPT_TOKEN:
			c->token_flag = optarg;
			break;
		case 'h':
		case CTL_OPT_HELP:
			ctl_help(cmd, stdout);
			return CTL_OK;
		case ':':
			return ctl_usage(cmd, "option '%s' needs a value",
					 argv[optind - 1]);
		case '?':
			if (optopt)
				return ctl_usage(cmd, "unknown option '-%c'",
						 optopt);
			return ctl_usage(cmd, "unknown option '%s'",
					 argv[optind - 1]);
		default:
			rc = on ? on(ctx, id, optarg) : CTL_USAGE;
			if (rc != CTL_GO_ON)
				return rc;
		}
	}
	*first = optind;
	return CTL_GO_ON;
}

int ctl_fail(const char *fmt, ...)
{
	char msg[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	for (char *p = msg; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	fprintf(stderr, "tacoctl: %s\n", msg);
	return CTL_FAIL;
}

int ctl_call(ctl *c, const char *method, const char *path, json_t *body,
	     unsigned flags, ctl_resp *out)
{
	ctl_err err = {0};

	if (ctl_http_json(&c->http, method, path, body, flags, out, &err))
		return ctl_fail("%s", err.msg);
	return CTL_OK;
}

int ctl_pathf(char *out, size_t cap, const char *fmt, ...)
{
	char seg[CTL_ID_MAX];
	ctl_err err = {0};
	size_t n = 0, k;
	va_list ap;
	int rc = CTL_OK;

	va_start(ap, fmt);
	for (const char *p = fmt; *p && rc == CTL_OK; p++) {
		const char *piece = p;
		k = 1;
		if (p[0] == '%' && p[1] == 's') {
			if (ctl_http_escape(va_arg(ap, const char *), seg,
					    sizeof(seg), &err)) {
				rc = ctl_fail("%s", err.msg);
				break;
			}
			piece = seg;
			k = strlen(seg);
			p++;
		}
		if (n + k >= cap) {
			rc = ctl_fail("the request path is too long");
			break;
		}
		memcpy(out + n, piece, k);
		n += k;
	}
	va_end(ap);
	out[n] = 0;
	return rc;
}

void ctl_print_raw(const ctl_resp *r)
{
	fwrite(r->body, 1, r->len, stdout);
	if (!r->len || r->body[r->len - 1] != '\n')
		putchar('\n');
}

int ctl_parse_int(const char *s, long long lo, long long hi, long long *out)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (!s[0] || *end || errno || v < lo || v > hi)
		return -EINVAL;
	*out = v;
	return 0;
}

int ctl_parse_num(const char *s, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (!s[0] || *end || errno || !isfinite(v))
		return -EINVAL;
	*out = v;
	return 0;
}

const char *ctl_str(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : "";
}

long long ctl_int(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return json_is_integer(v) ? (long long)json_integer_value(v)
				  : (long long)json_number_value(v);
}

const char *ctl_fmt_bytes(double b, char *buf, size_t cap)
{
	static const char *const unit[] = {"B",	  "KiB", "MiB",
					   "GiB", "TiB", "PiB"};
	int u = 0;

	while ((b < 0 ? -b : b) >= 1024 && u < 5) {
		b /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, cap, "%.0f B", b);
	else
		snprintf(buf, cap, "%.*f %s", b > -10 && b < 10 ? 2 : 1, b,
			 unit[u]);
	return buf;
}

const char *ctl_fmt_time(long long t, char *buf, size_t cap)
{
	time_t tt = (time_t)t;
	struct tm tm;

	if (t <= 0 || !localtime_r(&tt, &tm) ||
	    !strftime(buf, cap, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, cap, "-");
	return buf;
}

const char *ctl_fmt_duration(double s, char *buf, size_t cap)
{
	long long t;

	if (!isfinite(s) || s > 1e9) {
		snprintf(buf, cap, "--");
		return buf;
	}
	t = s > 0 ? (long long)(s + 0.5) : 0;
	if (t >= 86400)
		snprintf(buf, cap, "%lldd%02lldh", t / 86400, t % 86400 / 3600);
	else if (t >= 3600)
		snprintf(buf, cap, "%lldh%02lldm", t / 3600, t % 3600 / 60);
	else if (t >= 60)
		snprintf(buf, cap, "%lldm%02llds", t / 60, t % 60);
	else
		snprintf(buf, cap, "%llds", t);
	return buf;
}

/* ---- tables ------------------------------------------------------------- */

void ctl_table_init(ctl_table *t, int ncol)
{
	memset(t, 0, sizeof(*t));
	t->ncol = ncol < CTL_TABLE_COLS ? ncol : CTL_TABLE_COLS;
}

int ctl_table_row(ctl_table *t, ...)
{
	va_list ap;
	int rc = 0;

	if (t->nrow == t->cap) {
		int cap = t->cap ? 2 * t->cap : 16;
		char **g = realloc(t->cell,
				   (size_t)cap * (size_t)t->ncol * sizeof(*g));
		if (!g)
			return -ENOMEM;
		t->cell = g;
		t->cap = cap;
	}
	va_start(ap, t);
	for (int i = 0; i < t->ncol; i++) {
		const char *s = va_arg(ap, const char *);
		char *d = strdup(s ? s : "");
		int w;
		if (!d)
			rc = -ENOMEM;
		t->cell[t->nrow * t->ncol + i] = d;
		w = d ? (int)strlen(d) : 0;
		if (w > t->width[i])
			t->width[i] = w;
	}
	va_end(ap);
	t->nrow++;
	return rc;
}

void ctl_table_print(const ctl_table *t, FILE *f)
{
	for (int r = 0; r < t->nrow; r++) {
		for (int i = 0; i < t->ncol; i++) {
			const char *s = t->cell[r * t->ncol + i];
			int last = i == t->ncol - 1;
			s = s ? s : "";
			if (t->right[i])
				fprintf(f, "%*s", t->width[i], s);
			else
				fprintf(f, "%-*s", last ? 0 : t->width[i], s);
			fputs(last ? "\n" : "  ", f);
		}
	}
}

void ctl_table_free(ctl_table *t)
{
	for (int i = 0; i < t->nrow * t->ncol; i++)
		free(t->cell[i]);
	free(t->cell);
	memset(t, 0, sizeof(*t));
}

int ctl_delete_each(ctl *c, const char *fmt, const char *parent, int argc,
		    char **argv)
{
	char path[CTL_PATH_MAX];
	int failed = 0;

	for (int i = 0; i < argc; i++) {
		ctl_resp r = {0};
		if ((parent
			 ? ctl_pathf(path, sizeof(path), fmt, parent, argv[i])
			 : ctl_pathf(path, sizeof(path), fmt, argv[i])) ||
		    ctl_call(c, "DELETE", path, NULL, 0, &r)) {
			failed = 1; /* said on stderr; the others still go */
			continue;
		}
		if (c->json)
			ctl_print_raw(&r);
		else
			printf("deleted %s\n", argv[i]);
		ctl_resp_free(&r);
	}
	return failed ? CTL_FAIL : CTL_OK;
}
