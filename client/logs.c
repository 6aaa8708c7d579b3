/* logs.c: tacoctl logs [-f] JOB, and the following of a job that
 * jobs create --follow shares. */
#include <string.h>
#include <unistd.h>

#include "ctl.h"
#include "progress.h"

typedef struct follow_ctx {
	ctl *c;
	ctl_progress p;
} follow_ctx;

static int logs_on_event(void *ctx, const ctl_sse_event *ev, ctl_err *err)
{
	follow_ctx *f = ctx;
	json_t *o;

	(void)err;
	if (!ev) {
		ctl_progress_flush(&f->p);
		return 0;
	}
	if (f->c->json) {
		printf("%s\n", ev->data);
		fflush(stdout);
		return 0;
	}
	o = json_loads(ev->data, 0, NULL);
	if (o) /* not an event object: nothing to show */
		ctl_progress_event(&f->p, o);
	json_decref(o);
	return 0;
}

int ctl_job_outcome(json_t *job, FILE *f)
{
	const char *st = ctl_str(job, "status");
	json_t *e = json_object_get(job, "error");

	if (!strcmp(st, "succeeded")) {
		fprintf(f, "%s succeeded: %s\n", ctl_str(job, "id"),
			ctl_str(job, "fine_tuned_model"));
		return CTL_OK;
	}
	if (json_is_object(e) && ctl_str(e, "message")[0])
		fprintf(f, "%s %s: %s\n", ctl_str(job, "id"), st,
			ctl_str(e, "message"));
	else
		fprintf(f, "%s %s\n", ctl_str(job, "id"), st);
	return CTL_FAIL;
}

int ctl_follow(ctl *c, const char *job)
{
	char path[CTL_PATH_MAX];
	follow_ctx f = {.c = c};
	ctl_err err = {0};
	ctl_resp r = {0};
	int rc;

	if (ctl_pathf(path, sizeof(path),
		      "/v1/fine_tuning/jobs/%s/events?stream=true", job))
		return CTL_FAIL;
	ctl_progress_init(&f.p, stdout, isatty(STDOUT_FILENO));
	rc = ctl_http_sse(&c->http, path, logs_on_event, &f, &err);
	ctl_progress_end(&f.p);
	if (rc)
		return ctl_fail("%s", err.msg);
	/* the stream ends with the job: how it ended */
	if (ctl_pathf(path, sizeof(path), "/v1/fine_tuning/jobs/%s", job) ||
	    ctl_call(c, "GET", path, NULL, 0, &r))
		return CTL_FAIL;
	rc = c->json
		 ? (strcmp(ctl_str(r.json, "status"), "succeeded") ? CTL_FAIL
								   : CTL_OK)
		 : ctl_job_outcome(r.json, stdout);
	ctl_resp_free(&r);
	return rc;
}

typedef struct logs_opts {
	int follow;
	long long limit;
	const ctl_cmd *cmd;
} logs_opts;

enum { OPT_LIMIT = CTL_OPT_OWN };

static int logs_opt(void *ctx, int id, const char *arg)
{
	logs_opts *o = ctx;

	if (id == 'f') {
		o->follow = 1;
		return CTL_GO_ON;
	}
	if (ctl_parse_int(arg, 1, 100000, &o->limit))
		return ctl_usage(o->cmd, "--limit must be a number of events");
	return CTL_GO_ON;
}

int ctl_cmd_logs(ctl *c, const ctl_cmd *cmd, int argc, char **argv)
{
	static const struct option own[] = {
	    {"follow", no_argument, NULL, 'f'},
	    {"limit", required_argument, NULL, OPT_LIMIT},
	    {0},
	};
	logs_opts o = {0, 100, cmd};
	char path[CTL_PATH_MAX];
	ctl_progress p;
	ctl_resp r = {0};
	json_t *data;
	int first, rc;

	rc = ctl_parse(c, cmd, argc, argv, own, "f", logs_opt, &o, &first);
	if (rc != CTL_GO_ON)
		return rc;
	if (argc - first != 1)
		return ctl_usage(cmd, "expected one job id");
	if ((rc = ctl_connect(c)))
		return rc;
	if (o.follow)
		return ctl_follow(c, argv[first]);
	if (ctl_pathf(path, sizeof(path),
		      "/v1/fine_tuning/jobs/%s/events?limit=", argv[first]))
		return CTL_FAIL;
	snprintf(path + strlen(path), sizeof(path) - strlen(path), "%lld",
		 o.limit);
	if ((rc = ctl_call(c, "GET", path, NULL, 0, &r)))
		return rc;
	if (c->json) {
		ctl_print_raw(&r);
	} else {
		/* the list is newest first; a log reads oldest first */
		data = json_object_get(r.json, "data");
		ctl_progress_init(&p, stdout, 0);
		for (size_t i = json_array_size(data); i-- > 0;)
			ctl_progress_event(&p, json_array_get(data, i));
		ctl_progress_end(&p);
	}
	ctl_resp_free(&r);
	return CTL_OK;
}
