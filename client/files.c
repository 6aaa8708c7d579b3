/* files.c: tacoctl files upload|list|get|rm. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "ctl.h"

enum { OPT_PURPOSE = CTL_OPT_OWN, OPT_OUTPUT };

typedef struct file_opts {
	const char *purpose, *output;
} file_opts;

static int file_opt(void *ctx, int id, const char *arg)
{
	file_opts *o = ctx;

	if (id == OPT_PURPOSE)
		o->purpose = arg;
	else
		o->output = arg;
	return CTL_GO_ON;
}

int ctl_cmd_files_upload(ctl *c, const ctl_cmd *cmd, int argc, char **argv)
{
	static const struct option own[] = {
	    {"purpose", required_argument, NULL, OPT_PURPOSE},
	    {0},
	};
	file_opts o = {"fine-tune", NULL};
	const char *fields[3] = {"purpose", NULL, NULL};
	int first, rc, failed = 0;

	rc = ctl_parse(c, cmd, argc, argv, own, NULL, file_opt, &o, &first);
	if (rc != CTL_GO_ON)
		return rc;
	if (argc == first)
		return ctl_usage(cmd, "expected a file to upload");
	if ((rc = ctl_connect(c)))
		return rc;
	fields[1] = o.purpose;
	for (int i = first; i < argc; i++) {
		ctl_resp r = {0};
		ctl_err err = {0};
		if (ctl_http_upload(&c->http, "/v1/files", fields, argv[i], &r,
				    &err)) {
			/* name the file unless the message does */
			if (strstr(err.msg, argv[i]))
				ctl_fail("%s", err.msg);
			else
				ctl_fail("%s: %s", argv[i], err.msg);
			failed = 1;
			continue;
		}
		if (c->json)
			ctl_print_raw(&r);
		else
			printf("%s\n", ctl_str(r.json, "id"));
		ctl_resp_free(&r);
	}
	return failed ? CTL_FAIL : CTL_OK;
}

static int file_row(ctl_table *t, json_t *f)
{
	char when[32], bytes[32];

	snprintf(bytes, sizeof(bytes), "%lld", ctl_int(f, "bytes"));
	return ctl_table_row(
	    t, ctl_str(f, "id"), ctl_str(f, "purpose"), bytes,
	    ctl_fmt_time(ctl_int(f, "created_at"), when, sizeof(when)),
	    ctl_str(f, "filename"));
}

int ctl_cmd_files_list(ctl *c, const ctl_cmd *cmd, int argc, char **argv)
{
	ctl_table t;
	int rc;

	ctl_table_init(&t, 5);
	t.right[2] = 1;
	ctl_table_row(&t, "ID", "PURPOSE", "BYTES", "CREATED", "FILENAME");
	rc = ctl_list(c, cmd, argc, argv, "/v1/files", file_row, &t);
	ctl_table_free(&t);
	return rc;
}

/* ---- get: the metadata, or the content with -o -------------------------- */

typedef struct out_file {
	int fd;
	const char *name;
} out_file;

static int to_file(void *ctx, const void *data, size_t n, ctl_err *err)
{
	out_file *o = ctx;
	const char *p = data;

	while (n) {
		ssize_t w = write(o->fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return ctl_err_set(err, w < 0 ? -errno : -EIO,
					   "cannot write %s: %s", o->name,
					   strerror(w < 0 ? errno : EIO));
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int ctl_download_file(ctl *c, const char *path, const char *output)
{
	char tmp[4200];
	unsigned char rnd[6];
	out_file o = {STDOUT_FILENO, "standard output"};
	ctl_err err = {0};
	int rc;

	if (strcmp(output, "-")) {
		if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
			return ctl_fail("no random bytes");
		snprintf(tmp, sizeof(tmp), "%s.part-%02x%02x%02x%02x%02x%02x",
			 output, rnd[0], rnd[1], rnd[2], rnd[3], rnd[4],
			 rnd[5]);
		o.fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		o.name = output;
		if (o.fd < 0)
			return ctl_fail("cannot create %s: %s", tmp,
					strerror(errno));
	}
	rc = ctl_http_download(&c->http, path, to_file, &o, &err);
	if (o.fd == STDOUT_FILENO)
		return rc ? ctl_fail("%s", err.msg) : CTL_OK;
	if (!rc && fsync(o.fd))
		rc = ctl_err_set(&err, -errno, "cannot write %s: %s", output,
				 strerror(errno));
	if (close(o.fd) && !rc)
		rc = ctl_err_set(&err, -errno, "cannot write %s", output);
	if (!rc && rename(tmp, output))
		rc = ctl_err_set(&err, -errno, "cannot rename %s to %s: %s",
				 tmp, output, strerror(errno));
	if (rc) {
		unlink(tmp);
		return ctl_fail("%s", err.msg);
	}
	return CTL_OK;
}

int ctl_cmd_files_get(ctl *c, const ctl_cmd *cmd, int argc, char **argv)
{
	static const struct option own[] = {
	    {"output", required_argument, NULL, OPT_OUTPUT},
	    {0},
	};
	file_opts o = {NULL, NULL};
	char path[CTL_PATH_MAX], buf[32];
	ctl_resp r = {0};
	int first, rc;

	rc = ctl_parse(c, cmd, argc, argv, own, "o:", file_opt, &o, &first);
	if (rc != CTL_GO_ON)
		return rc;
	if (argc - first != 1)
		return ctl_usage(cmd, "expected one file id");
	if ((rc = ctl_connect(c)))
		return rc;
	if (o.output)
		return ctl_pathf(path, sizeof(path), "/v1/files/%s/content",
				 argv[first])
			   ? CTL_FAIL
			   : ctl_download_file(c, path, o.output);
	if (ctl_pathf(path, sizeof(path), "/v1/files/%s", argv[first]) ||
	    (rc = ctl_call(c, "GET", path, NULL, 0, &r)))
		return CTL_FAIL;
	if (c->json) {
		ctl_print_raw(&r);
	} else {
		printf("%-10s %s\n", "id", ctl_str(r.json, "id"));
		printf("%-10s %s\n", "filename", ctl_str(r.json, "filename"));
		printf("%-10s %lld\n", "bytes", ctl_int(r.json, "bytes"));
		printf("%-10s %s\n", "purpose", ctl_str(r.json, "purpose"));
		printf("%-10s %s\n", "created_at",
		       ctl_fmt_time(ctl_int(r.json, "created_at"), buf,
				    sizeof(buf)));
		printf("%-10s %s\n", "status", ctl_str(r.json, "status"));
	}
	ctl_resp_free(&r);
	return CTL_OK;
}

int ctl_cmd_files_rm(ctl *c, const ctl_cmd *cmd, int argc, char **argv)
{
	int first, rc;

	rc = ctl_parse(c, cmd, argc, argv, NULL, NULL, NULL, NULL, &first);
	if (rc != CTL_GO_ON)
		return rc;
	if (argc == first)
		return ctl_usage(cmd, "expected a file id");
	if ((rc = ctl_connect(c)))
		return rc;
	return ctl_delete_each(c, "/v1/files/%s", NULL, argc - first,
			       argv + first);
}
