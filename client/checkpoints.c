/* checkpoints.c: tacoctl checkpoints list|download: a checkpoint or the
 * final model, streamed from its tar into a model directory. */
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "tar.h"

enum { OPT_OUTPUT = CTL_OPT_OWN };

/* A metric of the checkpoint's ("-" when tacod has none). */
static const char *metric(json_t *k, const char *name, char *buf, size_t cap)
{
	json_t *v = json_object_get(json_object_get(k, "metrics"), name);

	if (!json_is_number(v))
		return "-";
	snprintf(buf, cap, "%.4f", json_number_value(v));
	return buf;
}

static int ckpt_row(ctl_table *t, json_t *k)
{
	char when[32], step[32], train[32], valid[32];

	snprintf(step, sizeof(step), "%lld", ctl_int(k, "step_number"));
	return ctl_table_row(
	    t, ctl_str(k, "id"), step,
	    metric(k, "train_loss", train, sizeof(train)),
	    metric(k, "valid_loss", valid, sizeof(valid)),
	    ctl_fmt_time(ctl_int(k, "created_at"), when, sizeof(when)),
	    ctl_str(k, "fine_tuned_model_checkpoint")[0]
		? ctl_str(k, "fine_tuned_model_checkpoint")
		: "-");
}

/* GET the next page of the job's checkpoints (newest first) into *r: the
 * first when *after is "", then after *after, which becomes the page's
 * last id; *more tells whether another page follows. */
static int next_page(ctl *c, const char *job, char *after, size_t cap,
		     ctl_resp *r, int *more)
{
	char path[CTL_PATH_MAX];
	size_t n;
	int rc;

	if (ctl_pathf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/checkpoints",
		      job))
		return CTL_FAIL;
	n = strlen(path);
	if ((size_t)snprintf(path + n, sizeof(path) - n, "?limit=%d",
			     CTL_LIST_PAGE) >= sizeof(path) - n)
		return ctl_fail("the request path is too long");
	n = strlen(path);
	if (after[0] &&
	    ctl_pathf(path + n, sizeof(path) - n, "&after=%s", after))
		return CTL_FAIL;
	if ((rc = ctl_call(c, "GET", path, NULL, 0, r)))
		return rc;
	*more = json_is_true(json_object_get(r->json, "has_more")) &&
		json_array_size(json_object_get(r->json, "data")) > 0;
	snprintf(after, cap, "%s", ctl_str(r->json, "last_id"));
	*more = *more && after[0];
	return CTL_OK;
}

int ctl_cmd_checkpoints_list(ctl *c, const ctl_cmd *cmd, int argc, char **argv)
{
	char after[CTL_ID_MAX] = "";
	ctl_resp r = {0};
	ctl_table t;
	int first, rc, more = 1;

	rc = ctl_parse(c, cmd, argc, argv, NULL, NULL, NULL, NULL, &first);
	if (rc != CTL_GO_ON)
		return rc;
	if (argc - first != 1)
		return ctl_usage(cmd, "expected one job id");
	if ((rc = ctl_connect(c)))
		return rc;
	ctl_table_init(&t, 6);
	t.right[1] = t.right[2] = t.right[3] = 1;
	ctl_table_row(&t, "ID", "STEP", "TRAIN LOSS", "VALID LOSS", "CREATED",
		      "MODEL CHECKPOINT");
	/* every page; --json: the first, as the server sent it */
	while (more) {
		json_t *data;

		if ((rc = next_page(c, argv[first], after, sizeof(after), &r,
				    &more))) {
			ctl_table_free(&t);
			return rc;
		}
		if (c->json) {
			ctl_print_raw(&r);
			ctl_resp_free(&r);
			ctl_table_free(&t);
			return CTL_OK;
		}
		data = json_object_get(r.json, "data");
		for (size_t i = 0; i < json_array_size(data); i++)
			ckpt_row(&t, json_array_get(data, i));
		ctl_resp_free(&r);
	}
	ctl_table_print(&t, stdout);
	ctl_table_free(&t);
	return CTL_OK;
}

typedef struct dl_opts {
	const char *output;
} dl_opts;

static int dl_opt(void *ctx, int id, const char *arg)
{
	(void)id;
	((dl_opts *)ctx)->output = arg;
	return CTL_GO_ON;
}

static int into_tar(void *ctx, const void *data, size_t n, ctl_err *err)
{
	return ctl_tar_write(ctx, data, n, err);
}

/* A step number names the checkpoint of that step: its id from the list. */
static int checkpoint_id(ctl *c, const char *job, const char *arg, char *id,
			 size_t cap)
{
	char after[CTL_ID_MAX] = "";
	long long step;
	ctl_resp r = {0};
	int rc = CTL_FAIL, more = 1;

	if (ctl_parse_int(arg, 0, 1000000000000ll, &step)) {
		snprintf(id, cap, "%s", arg);
		return CTL_OK;
	}
	while (rc && more) {
		json_t *data;
		int got;

		if ((got = next_page(c, job, after, sizeof(after), &r, &more)))
			return got;
		data = json_object_get(r.json, "data");
		for (size_t i = 0; i < json_array_size(data) && rc; i++) {
			json_t *k = json_array_get(data, i);
			if (ctl_int(k, "step_number") == step) {
				snprintf(id, cap, "%s", ctl_str(k, "id"));
				rc = CTL_OK;
			}
		}
		ctl_resp_free(&r);
	}
	if (rc)
		ctl_fail("%s has no checkpoint at step %lld", job, step);
	return rc;
}

int ctl_cmd_checkpoints_download(ctl *c, const ctl_cmd *cmd, int argc,
				 char **argv)
{
	static const struct option own[] = {
	    {"output", required_argument, NULL, OPT_OUTPUT},
	    {0},
	};
	dl_opts o = {NULL};
	char path[CTL_PATH_MAX], id[CTL_ID_MAX], size[32];
	ctl_tar *t = NULL;
	ctl_err err = {0};
	uint64_t bytes;
	int first, rc, files;

	rc = ctl_parse(c, cmd, argc, argv, own, "o:", dl_opt, &o, &first);
	if (rc != CTL_GO_ON)
		return rc;
	if (argc - first < 1 || argc - first > 2)
		return ctl_usage(cmd, "expected a job id and optionally a "
				      "checkpoint");
	if ((rc = ctl_connect(c)))
		return rc;
	if (argc - first == 2) {
		if ((rc = checkpoint_id(c, argv[first], argv[first + 1], id,
					sizeof(id))) ||
		    ctl_pathf(path, sizeof(path),
			      "/v1/fine_tuning/jobs/%s/checkpoints/%s/content",
			      argv[first], id))
			return CTL_FAIL;
	} else if (ctl_pathf(path, sizeof(path),
			     "/v1/fine_tuning/jobs/%s/model/content",
			     argv[first])) {
		return CTL_FAIL;
	}
	if (ctl_tar_open(o.output, NULL, &t, &err))
		return ctl_fail("%s", err.msg);
	rc = ctl_http_download(&c->http, path, into_tar, t, &err);
	if (!rc)
		rc = ctl_tar_finish(t, &err);
	if (rc) {
		/* what was written is removed with t */
		ctl_tar_free(t);
		return ctl_fail("%s", err.msg);
	}
	ctl_tar_stats(t, &files, &bytes);
	if (c->json) {
		json_t *j =
		    json_pack("{ss si sI}", "directory", ctl_tar_dir(t),
			      "files", files, "bytes", (json_int_t)bytes);
		char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
		printf("%s\n", text ? text : "{}");
		free(text);
		json_decref(j);
	} else {
		printf("%s: %d files, %s\n", ctl_tar_dir(t), files,
		       ctl_fmt_bytes((double)bytes, size, sizeof(size)));
	}
	ctl_tar_free(t);
	return CTL_OK;
}
