/* gguf.c: tacoctl gguf export|list|rm: GGUF files of a job's model or
 * checkpoints, converted by tacod (docs/gguf.md "From tacod"), for
 * llama.cpp, Ollama and LM Studio. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"

enum { OPT_TYPE = CTL_OPT_OWN, OPT_OUTPUT, OPT_TIMEOUT, OPT_NO_DOWNLOAD };

typedef struct export_opts {
	const ctl_cmd *cmd;
	const char *type, *output;
	long long timeout;
	int no_download;
} export_opts;

static int export_opt(void *ctx, int id, const char *arg)
{
	export_opts *o = ctx;

	switch (id) {
	case OPT_TYPE:
		if (strcmp(arg, "bf16") && strcmp(arg, "f16") &&
		    strcmp(arg, "q8_0"))
			return ctl_usage(o->cmd, "--type must be bf16, f16 or "
						 "q8_0");
		o->type = arg;
		break;
	case OPT_OUTPUT:
	case 'o':
		o->output = arg;
		break;
	case OPT_TIMEOUT:
		if (ctl_parse_int(arg, 1, 1000000000, &o->timeout))
			return ctl_usage(o->cmd, "--timeout must be a number "
						 "of seconds");
		break;
	case OPT_NO_DOWNLOAD:
		o->no_download = 1;
		break;
	default:
		return CTL_USAGE;
	}
	return CTL_GO_ON;
}

/* POST .../gguf: the conversion's (or the file's) object into *r. */
static int request(ctl *c, const char *job, const char *ckpt, const char *type,
		   ctl_resp *r)
{
	char path[CTL_PATH_MAX];
	long long step;
	json_t *body;
	int rc;

	if (ctl_pathf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/gguf", job))
		return CTL_FAIL;
	body = json_pack("{ss}", "type", type);
	/* a step as a number, else a checkpoint id */
	if (ckpt && !ctl_parse_int(ckpt, 0, 1000000000000ll, &step))
		json_object_set_new(body, "checkpoint", json_integer(step));
	else if (ckpt)
		json_object_set_new(body, "checkpoint", json_string(ckpt));
	rc = ctl_call(c, "POST", path, body, 0, r);
	json_decref(body);
	return rc;
}

/* Polls the object until it has succeeded or failed (*r: the last one). */
static int wait_done(ctl *c, const char *job, long long timeout, ctl_resp *r)
{
	char path[CTL_PATH_MAX], id[128];
	time_t start = time(NULL);
	int rc, waits = 0;

	snprintf(id, sizeof(id), "%s", ctl_str(r->json, "id"));
	if (ctl_pathf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/gguf/%s",
		      job, id))
		return CTL_FAIL;
	while (!strcmp(ctl_str(r->json, "status"), "queued") ||
	       !strcmp(ctl_str(r->json, "status"), "running")) {
		if (timeout && time(NULL) - start >= timeout)
			return ctl_fail("%s of %s is still %s after %lld s", id,
					job, ctl_str(r->json, "status"),
					timeout);
		/* a small model converts in a moment: poll fast at first */
		for (int i = 0; i < (waits < 10 ? 2 : 20); i++) {
			if (ctl_http_interrupted)
				return ctl_fail("interrupted (the conversion "
						"goes on in tacod)");
			usleep(100000);
		}
		waits++;
		ctl_resp_free(r);
		if ((rc = ctl_call(c, "GET", path, NULL, 0, r)))
			return rc;
	}
	if (strcmp(ctl_str(r->json, "status"), "succeeded"))
		return ctl_fail(
		    "%s of %s failed: %s", id, job,
		    ctl_str(json_object_get(r->json, "error"), "message"));
	return CTL_OK;
}

int ctl_cmd_gguf_export(ctl *c, const ctl_cmd *cmd, int argc, char **argv)
{
	static const struct option own[] = {
	    {"type", required_argument, NULL, OPT_TYPE},
	    {"output", required_argument, NULL, OPT_OUTPUT},
	    {"timeout", required_argument, NULL, OPT_TIMEOUT},
	    {"no-download", no_argument, NULL, OPT_NO_DOWNLOAD},
	    {0},
	};
	export_opts o = {cmd, "q8_0", NULL, 0, 0};
	char path[CTL_PATH_MAX], out[1024], size[32];
	const char *job;
	ctl_resp r = {0};
	int first, rc;

	rc = ctl_parse(c, cmd, argc, argv, own, "o:", export_opt, &o, &first);
	if (rc != CTL_GO_ON)
		return rc;
	if (argc - first < 1 || argc - first > 2)
		return ctl_usage(cmd, "expected a job id and optionally a "
				      "checkpoint");
	job = argv[first];
	if ((rc = ctl_connect(c)) ||
	    (rc = request(c, job, argc - first == 2 ? argv[first + 1] : NULL,
			  o.type, &r)))
		return rc;
	if ((rc = wait_done(c, job, o.timeout, &r))) {
		ctl_resp_free(&r);
		return rc;
	}
	if (o.no_download) {
		if (c->json)
			ctl_print_raw(&r);
		else
			printf("%s: %s\n", ctl_str(r.json, "id"),
			       ctl_fmt_bytes((double)ctl_int(r.json, "bytes"),
					     size, sizeof(size)));
		ctl_resp_free(&r);
		return CTL_OK;
	}
	/* by default the server's download name, "<job without
	 * ftjob->-<name>", in the current directory */
	if (o.output)
		snprintf(out, sizeof(out), "%s", o.output);
	else
		snprintf(out, sizeof(out), "%s-%s",
			 job + (strncmp(job, "ftjob-", 6) ? 0 : 6),
			 ctl_str(r.json, "id"));
	rc = ctl_pathf(path, sizeof(path),
		       "/v1/fine_tuning/jobs/%s/gguf/%s/content", job,
		       ctl_str(r.json, "id"));
	if (!rc)
		rc = ctl_download_file(c, path, out);
	if (!rc && strcmp(out, "-")) {
		if (c->json) {
			json_t *j =
			    json_pack("{ss ss sI}", "file", out, "id",
				      ctl_str(r.json, "id"), "bytes",
				      (json_int_t)ctl_int(r.json, "bytes"));
			char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
			printf("%s\n", text ? text : "{}");
			free(text);
			json_decref(j);
		} else {
			printf("%s: %s\n", out,
			       ctl_fmt_bytes((double)ctl_int(r.json, "bytes"),
					     size, sizeof(size)));
		}
	}
	ctl_resp_free(&r);
	return rc;
}

static int gguf_row(ctl_table *t, json_t *g)
{
	char when[32], step[32], size[32];

	if (json_is_integer(json_object_get(g, "step")))
		snprintf(step, sizeof(step), "%lld", ctl_int(g, "step"));
	else
		snprintf(step, sizeof(step), "final");
	return ctl_table_row(
	    t, ctl_str(g, "id"), ctl_str(g, "type"), step, ctl_str(g, "status"),
	    json_is_integer(json_object_get(g, "bytes"))
		? ctl_fmt_bytes((double)ctl_int(g, "bytes"), size, sizeof(size))
		: "-",
	    ctl_fmt_time(ctl_int(g, "created_at"), when, sizeof(when)));
}

int ctl_cmd_gguf_list(ctl *c, const ctl_cmd *cmd, int argc, char **argv)
{
	char path[CTL_PATH_MAX], after[128] = "";
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
	t.right[4] = 1;
	ctl_table_row(&t, "NAME", "TYPE", "STEP", "STATUS", "SIZE", "CREATED");
	while (more) {
		json_t *data;
		size_t n;

		if ((after[0] ? ctl_pathf(path, sizeof(path),
					  "/v1/fine_tuning/jobs/%s/gguf?limit="
					  "100&after=%s",
					  argv[first], after)
			      : ctl_pathf(path, sizeof(path),
					  "/v1/fine_tuning/jobs/%s/gguf?limit="
					  "100",
					  argv[first])) ||
		    (rc = ctl_call(c, "GET", path, NULL, 0, &r))) {
			ctl_table_free(&t);
			return CTL_FAIL;
		}
		if (c->json) {
			ctl_print_raw(&r);
			ctl_resp_free(&r);
			ctl_table_free(&t);
			return CTL_OK;
		}
		data = json_object_get(r.json, "data");
		n = json_array_size(data);
		for (size_t i = 0; i < n; i++)
			gguf_row(&t, json_array_get(data, i));
		more = json_is_true(json_object_get(r.json, "has_more")) && n;
		snprintf(after, sizeof(after), "%s",
			 ctl_str(r.json, "last_id"));
		ctl_resp_free(&r);
	}
	ctl_table_print(&t, stdout);
	ctl_table_free(&t);
	return CTL_OK;
}

int ctl_cmd_gguf_rm(ctl *c, const ctl_cmd *cmd, int argc, char **argv)
{
	int first, rc;

	rc = ctl_parse(c, cmd, argc, argv, NULL, NULL, NULL, NULL, &first);
	if (rc != CTL_GO_ON)
		return rc;
	if (argc - first < 2)
		return ctl_usage(cmd, "expected a job id and GGUF names");
	if ((rc = ctl_connect(c)))
		return rc;
	return ctl_delete_each(c, "/v1/fine_tuning/jobs/%s/gguf/%s",
			       argv[first], argc - first - 1, argv + first + 1);
}
