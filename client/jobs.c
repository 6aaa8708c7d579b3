/* jobs.c: tacoctl jobs create|list|get|cancel|pause|resume|wait. */
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"

enum {
	OPT_FOLLOW = CTL_OPT_OWN,
	OPT_LIMIT,
	OPT_AFTER,
	OPT_TIMEOUT,
	OPT_INTERVAL,
};

/* ---- create ---------------------------------------------------------------
 */

typedef struct create_opts {
	ctl_jobspec *spec;
	const ctl_cmd *cmd;
	int follow;
} create_opts;

static int create_opt(void *ctx, int id, const char *arg)
{
	create_opts *o = ctx;

	if (id == OPT_FOLLOW) {
		o->follow = 1;
		return CTL_GO_ON;
	}
	return ctl_jobspec_option(o->spec, o->cmd, id, arg);
}

int ctl_cmd_jobs_create(ctl *c, const ctl_cmd *cmd, int argc, char **argv)
{
	struct option own[64];
	create_opts o = {NULL, cmd, 0};
	json_t *body = NULL;
	ctl_resp r = {0};
	int n = 0, first, rc;

	while (ctl_jobspec_options[n].name) {
		own[n] = ctl_jobspec_options[n];
		n++;
	}
	own[n++] = (struct option){"follow", no_argument, NULL, OPT_FOLLOW};
	own[n] = (struct option){0};
	if (ctl_jobspec_new(&o.spec))
		return ctl_fail("out of memory");
	rc = ctl_parse(c, cmd, argc, argv, own, NULL, create_opt, &o, &first);
	if (rc != CTL_GO_ON)
		goto out;
	if (argc - first > 1) {
		rc = ctl_usage(cmd, "at most one job file");
		goto out;
	}
	if ((rc = ctl_connect(c)) ||
	    (rc = ctl_jobspec_body(c, o.spec, cmd,
				   argc > first ? argv[first] : NULL, &body)) ||
	    (rc = ctl_call(c, "POST", "/v1/fine_tuning/jobs", body,
			   CTL_HTTP_CREATE, &r)))
		goto out;
	if (c->json)
		ctl_print_raw(&r);
	else
		printf("%s\n", ctl_str(r.json, "id"));
	fflush(stdout);
	if (o.follow)
		rc = ctl_follow(c, ctl_str(r.json, "id"));
	ctl_resp_free(&r);
out:
	ctl_jobspec_free(o.spec);
	json_decref(body);
	return rc;
}

/* ---- list -----------------------------------------------------------------
 */

typedef struct list_opts {
	const ctl_cmd *cmd;
	long long limit; /* 0: all */
	const char *after;
} list_opts;

static int list_opt(void *ctx, int id, const char *arg)
{
	list_opts *o = ctx;

	if (id == OPT_AFTER) {
		o->after = arg;
		return CTL_GO_ON;
	}
	if (ctl_parse_int(arg, 1, CTL_LIST_MAX, &o->limit))
		return ctl_usage(o->cmd, "--limit must be a number of rows");
	return CTL_GO_ON;
}

const struct option ctl_list_options[] = {
    {"limit", required_argument, NULL, OPT_LIMIT},
    {"after", required_argument, NULL, OPT_AFTER},
    {0},
};

int ctl_list(ctl *c, const ctl_cmd *cmd, int argc, char **argv,
	     const char *path, int (*row)(ctl_table *t, json_t *item),
	     ctl_table *t)
{
	list_opts o = {cmd, 0, NULL};
	char p[CTL_PATH_MAX], after[CTL_ID_MAX] = "";
	long long got = 0;
	ctl_resp r = {0};
	int first, rc, more = 1;

	rc = ctl_parse(c, cmd, argc, argv, ctl_list_options, NULL, list_opt, &o,
		       &first);
	if (rc != CTL_GO_ON)
		return rc;
	if (argc != first)
		return ctl_usage(cmd, "unexpected argument '%s'", argv[first]);
	if ((rc = ctl_connect(c)))
		return rc;
	if (o.after)
		snprintf(after, sizeof(after), "%s", o.after);
	/* pages of CTL_LIST_PAGE until --limit or the end; --json: one page,
	 * as the server sent it */
	while (more && (!o.limit || got < o.limit) && got < CTL_LIST_MAX) {
		long long want = o.limit && o.limit - got < CTL_LIST_PAGE
				     ? o.limit - got
				     : CTL_LIST_PAGE;
		json_t *data;
		int n = snprintf(p, sizeof(p), "%s?limit=%lld", path, want);
		if (after[0] &&
		    ctl_pathf(p + n, sizeof(p) - (size_t)n, "&after=%s", after))
			return CTL_FAIL;
		if ((rc = ctl_call(c, "GET", p, NULL, 0, &r)))
			return rc;
		if (c->json) {
			ctl_print_raw(&r);
			ctl_resp_free(&r);
			return CTL_OK;
		}
		data = json_object_get(r.json, "data");
		for (size_t i = 0; i < json_array_size(data); i++, got++)
			if (row(t, json_array_get(data, i))) {
				ctl_resp_free(&r);
				return ctl_fail("out of memory");
			}
		more = json_is_true(json_object_get(r.json, "has_more")) &&
		       json_array_size(data) > 0;
		snprintf(after, sizeof(after), "%s",
			 ctl_str(r.json, "last_id"));
		more = more && after[0];
		ctl_resp_free(&r);
	}
	ctl_table_print(t, stdout);
	return CTL_OK;
}

static int job_row(ctl_table *t, json_t *j)
{
	char when[32];

	return ctl_table_row(
	    t, ctl_str(j, "id"), ctl_str(j, "status"), ctl_str(j, "model"),
	    ctl_fmt_time(ctl_int(j, "created_at"), when, sizeof(when)),
	    ctl_str(j, "fine_tuned_model")[0] ? ctl_str(j, "fine_tuned_model")
					      : "-");
}

int ctl_cmd_jobs_list(ctl *c, const ctl_cmd *cmd, int argc, char **argv)
{
	ctl_table t;
	int rc;

	ctl_table_init(&t, 5);
	ctl_table_row(&t, "ID", "STATUS", "MODEL", "CREATED",
		      "FINE-TUNED MODEL");
	rc = ctl_list(c, cmd, argc, argv, "/v1/fine_tuning/jobs", job_row, &t);
	ctl_table_free(&t);
	return rc;
}

/* ---- get ------------------------------------------------------------------
 */

static void field(const char *name, const char *value)
{
	printf("%-18s %s\n", name, value && value[0] ? value : "-");
}

static void json_field(const char *name, json_t *v)
{
	char *text = v && !json_is_null(v)
			 ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY)
			 : NULL;

	field(name, text);
	free(text);
}

static void show_job(json_t *j)
{
	char buf[64];
	json_t *e = json_object_get(j, "error");
	long long tokens = ctl_int(j, "trained_tokens");

	field("id", ctl_str(j, "id"));
	field("status", ctl_str(j, "status"));
	field("model", ctl_str(j, "model"));
	field("fine_tuned_model", ctl_str(j, "fine_tuned_model"));
	field("created_at",
	      ctl_fmt_time(ctl_int(j, "created_at"), buf, sizeof(buf)));
	field("finished_at",
	      ctl_fmt_time(ctl_int(j, "finished_at"), buf, sizeof(buf)));
	field("estimated_finish",
	      ctl_fmt_time(ctl_int(j, "estimated_finish"), buf, sizeof(buf)));
	field("training_file", ctl_str(j, "training_file"));
	field("validation_file", ctl_str(j, "validation_file"));
	/* the CSV of its step metrics, once it has ended: files get -o */
	field("result_file", json_string_value(json_array_get(
				 json_object_get(j, "result_files"), 0)));
	snprintf(buf, sizeof(buf), "%lld", tokens);
	field("trained_tokens", tokens ? buf : NULL);
	field("suffix", ctl_str(j, "user_provided_suffix"));
	/* supervised or dpo, with its own hyperparameters (dpo's beta) */
	json_field("method", json_object_get(j, "method"));
	json_field("hyperparameters", json_object_get(j, "hyperparameters"));
	json_field("taco", json_object_get(j, "taco"));
	json_field("metadata", json_object_get(j, "metadata"));
	if (json_is_object(e))
		field("error", ctl_str(e, "message"));
}

/* GET a job into *r; CTL_OK or CTL_FAIL (printed). */
static int get_job(ctl *c, const char *id, ctl_resp *r)
{
	char path[CTL_PATH_MAX];

	if (ctl_pathf(path, sizeof(path), "/v1/fine_tuning/jobs/%s", id))
		return CTL_FAIL;
	return ctl_call(c, "GET", path, NULL, 0, r);
}

/* CTL_GO_ON when argv names one job and the client is connected. */
static int one_job_arg(ctl *c, const ctl_cmd *cmd, int argc, char **argv,
		       int *first)
{
	int rc = ctl_parse(c, cmd, argc, argv, NULL, NULL, NULL, NULL, first);

	if (rc != CTL_GO_ON)
		return rc;
	if (argc - *first != 1)
		return ctl_usage(cmd, "expected one job id");
	return ctl_connect(c) ? CTL_FAIL : CTL_GO_ON;
}

int ctl_cmd_jobs_get(ctl *c, const ctl_cmd *cmd, int argc, char **argv)
{
	ctl_resp r = {0};
	int first, rc;

	if ((rc = one_job_arg(c, cmd, argc, argv, &first)) != CTL_GO_ON)
		return rc;
	if ((rc = get_job(c, argv[first], &r)))
		return rc;
	if (c->json)
		ctl_print_raw(&r);
	else
		show_job(r.json);
	ctl_resp_free(&r);
	return CTL_OK;
}

/* ---- cancel, pause, resume ------------------------------------------------
 */

static int job_action(ctl *c, const ctl_cmd *cmd, int argc, char **argv)
{
	char path[CTL_PATH_MAX];
	int first, rc, failed = 0;

	rc = ctl_parse(c, cmd, argc, argv, NULL, NULL, NULL, NULL, &first);
	if (rc != CTL_GO_ON)
		return rc;
	if (argc == first)
		return ctl_usage(cmd, "expected a job id");
	if ((rc = ctl_connect(c)))
		return rc;
	for (int i = first; i < argc; i++) {
		ctl_resp r = {0};
		size_t n;
		if (ctl_pathf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/",
			      argv[i])) {
			failed = 1;
			continue;
		}
		n = strlen(path);
		snprintf(path + n, sizeof(path) - n, "%s", cmd->name);
		if (ctl_call(c, "POST", path, NULL, 0, &r)) {
			failed = 1;
			continue;
		}
		if (c->json)
			ctl_print_raw(&r);
		else /* a running job stops at its next step boundary */
			printf("%s %s%s\n", ctl_str(r.json, "id"),
			       ctl_str(r.json, "status"),
			       strcmp(ctl_str(r.json, "status"), "running") ? ""
			       : !strcmp(cmd->name, "cancel")
				   ? " (cancelling)"
				   : " (pausing: checkpoint first)");
		ctl_resp_free(&r);
	}
	return failed ? CTL_FAIL : CTL_OK;
}

int ctl_cmd_jobs_cancel(ctl *c, const ctl_cmd *cmd, int argc, char **argv)
{
	return job_action(c, cmd, argc, argv);
}

int ctl_cmd_jobs_pause(ctl *c, const ctl_cmd *cmd, int argc, char **argv)
{
	return job_action(c, cmd, argc, argv);
}

int ctl_cmd_jobs_resume(ctl *c, const ctl_cmd *cmd, int argc, char **argv)
{
	return job_action(c, cmd, argc, argv);
}

/* ---- wait -----------------------------------------------------------------
 */

typedef struct wait_opts {
	const ctl_cmd *cmd;
	long long timeout, interval;
} wait_opts;

static int wait_opt(void *ctx, int id, const char *arg)
{
	wait_opts *o = ctx;

	if (ctl_parse_int(arg, 1, 100000000,
			  id == OPT_TIMEOUT ? &o->timeout : &o->interval))
		return ctl_usage(o->cmd, "--%s must be a number of seconds",
				 id == OPT_TIMEOUT ? "timeout" : "interval");
	return CTL_GO_ON;
}

static int finished(const char *status)
{
	return !strcmp(status, "succeeded") || !strcmp(status, "failed") ||
	       !strcmp(status, "cancelled");
}

int ctl_cmd_jobs_wait(ctl *c, const ctl_cmd *cmd, int argc, char **argv)
{
	static const struct option own[] = {
	    {"timeout", required_argument, NULL, OPT_TIMEOUT},
	    {"interval", required_argument, NULL, OPT_INTERVAL},
	    {0},
	};
	wait_opts o = {cmd, 0, 2};
	ctl_resp r = {0};
	time_t start = time(NULL);
	int first, rc;

	rc = ctl_parse(c, cmd, argc, argv, own, NULL, wait_opt, &o, &first);
	if (rc != CTL_GO_ON)
		return rc;
	if (argc - first != 1)
		return ctl_usage(cmd, "expected one job id");
	if ((rc = ctl_connect(c)))
		return rc;
	for (;;) {
		if ((rc = get_job(c, argv[first], &r)))
			return rc;
		if (finished(ctl_str(r.json, "status")))
			break;
		if (o.timeout && time(NULL) - start >= o.timeout) {
			rc =
			    ctl_fail("%s is still %s after %lld s", argv[first],
				     ctl_str(r.json, "status"), o.timeout);
			ctl_resp_free(&r);
			return rc;
		}
		ctl_resp_free(&r);
		for (long long i = 0; i < o.interval * 10; i++) {
			if (ctl_http_interrupted)
				return ctl_fail("interrupted");
			usleep(100000);
		}
	}
	if (c->json) {
		ctl_print_raw(&r);
		rc = strcmp(ctl_str(r.json, "status"), "succeeded") ? CTL_FAIL
								    : CTL_OK;
	} else {
		rc = ctl_job_outcome(r.json, stdout);
	}
	ctl_resp_free(&r);
	return rc;
}
