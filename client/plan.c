/* plan.c: tacoctl plan: what a job would need, without creating it
 * (POST /v1/fine_tuning/plan), as a table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"

#define PROBLEMS_SHOWN 5

typedef struct plan_opts {
	ctl_jobspec *spec;
	const ctl_cmd *cmd;
} plan_opts;

static int plan_opt(void *ctx, int id, const char *arg)
{
	plan_opts *o = ctx;

	return ctl_jobspec_option(o->spec, o->cmd, id, arg);
}

/* What admission chose, and what crosses the bus with streamed weights. */
static void settings(json_t *p)
{
	json_t *s = json_object_get(p, "settings");
	json_t *t = json_object_get(p, "transfer");
	char a[32], b[32];

	if (!json_is_object(s))
		return;
	printf("settings: precision %s, activation offload %s, %lld MLP "
	       "block%s",
	       ctl_str(s, "precision"),
	       json_is_true(json_object_get(s, "activation_offload")) ? "on"
								      : "off",
	       ctl_int(s, "mlp_chunks"),
	       ctl_int(s, "mlp_chunks") == 1 ? "" : "s");
	if (ctl_int(s, "streamed_layers") > 0)
		printf(
		    ", weights of %lld of %lld layers streamed from host "
		    "memory (%s to the device, %s back per step)",
		    ctl_int(s, "streamed_layers"), ctl_int(s, "layers"),
		    ctl_fmt_bytes(
			(double)ctl_int(t, "to_device_bytes_per_step"), a,
			sizeof(a)),
		    ctl_fmt_bytes((double)ctl_int(t, "to_host_bytes_per_step"),
				  b, sizeof(b)));
	printf("\n");
	if (ctl_int(p, "host_bytes") > 0)
		printf("host memory: %s\n",
		       ctl_fmt_bytes((double)ctl_int(p, "host_bytes"), a,
				     sizeof(a)));
}

static void memory(json_t *p)
{
	json_t *terms = json_object_get(p, "terms");
	double total = (double)ctl_int(p, "total_bytes");
	double device = (double)ctl_int(p, "device_memory_bytes");
	int fits = json_is_true(json_object_get(p, "fits"));
	char b[32], row[64], fit[96];
	const char *k;
	json_t *v;
	ctl_table t;

	ctl_table_init(&t, 2);
	t.right[1] = 1;
	ctl_table_row(&t, "TERM", "BYTES");
	json_object_foreach(terms, k, v)
	{
		ctl_table_row(
		    &t, k,
		    ctl_fmt_bytes((double)json_integer_value(v), b, sizeof(b)));
	}
	ctl_table_row(&t, "total", ctl_fmt_bytes(total, b, sizeof(b)));
	ctl_table_row(&t, "device", ctl_fmt_bytes(device, b, sizeof(b)));
	if (fits)
		snprintf(fit, sizeof(fit), "yes (%s to spare)",
			 ctl_fmt_bytes(device - total, b, sizeof(b)));
	else if (total > 0)
		snprintf(fit, sizeof(fit), "no (%s over)",
			 ctl_fmt_bytes(total - device, b, sizeof(b)));
	else
		snprintf(fit, sizeof(fit), "no");
	snprintf(row, sizeof(row), "Memory plan (peak: %s)",
		 ctl_str(p, "peak_phase")[0] ? ctl_str(p, "peak_phase")
					     : "unknown");
	printf("%s\n", row);
	ctl_table_print(&t, stdout);
	ctl_table_free(&t);
	printf("fits: %s\n", fit);
	settings(p);
}

static void advice(json_t *a)
{
	char b[32];

	if (!json_is_object(a))
		return;
	printf("\nAdvice:\n");
	if (ctl_int(a, "max_batch_size") > 0)
		printf("  largest batch size that fits:      %lld\n",
		       ctl_int(a, "max_batch_size"));
	else
		printf("  no batch size fits at this sequence length\n");
	if (ctl_int(a, "max_seq_len") > 0)
		printf("  largest sequence length that fits: %lld\n",
		       ctl_int(a, "max_seq_len"));
	else
		printf("  no sequence length fits at this batch size\n");
	printf(
	    "  freezing the embeddings:           %s (%s)\n",
	    json_is_true(json_object_get(a, "freeze_embeddings_fits"))
		? "fits"
		: "does not fit",
	    ctl_fmt_bytes((double)ctl_int(a, "frozen_embeddings_total_bytes"),
			  b, sizeof(b)));
}

/* The first chat as the model sees it: the trained text in colour on a
 * terminal (NO_COLOR honoured), between [[ and ]] elsewhere. */
static void preview(json_t *v)
{
	json_t *pv = json_object_get(v, "preview"), *segs, *s;
	int colour = isatty(STDOUT_FILENO) && !getenv("NO_COLOR");
	size_t i;

	if (!json_is_object(pv))
		return;
	segs = json_object_get(pv, "segments");
	printf("\nLine %lld as the model sees it (chat template: %s; the "
	       "trained text %s):\n",
	       ctl_int(pv, "line"), ctl_str(v, "chat_template"),
	       colour ? "in green" : "between [[ and ]]");
	json_array_foreach(segs, i, s)
	{
		int t = json_is_true(json_object_get(s, "trained"));
		printf("%s%s%s", t ? (colour ? "\033[32m" : "[[") : "",
		       ctl_str(s, "text"),
		       t ? (colour ? "\033[0m" : "]]") : "");
	}
	printf("%s\n", json_is_true(json_object_get(pv, "truncated"))
			   ? "\n... (the rest not shown)"
			   : "");
}

static void validation(json_t *v)
{
	json_t *probs = json_object_get(v, "problems");

	if (!json_is_object(v))
		return;
	printf("\nTraining data: %lld lines, %lld examples, %lld kept, %lld "
	       "tokens (%lld trained), %lld truncated, %lld dropped, %lld "
	       "errors, %lld warnings\n",
	       ctl_int(v, "lines"), ctl_int(v, "examples"), ctl_int(v, "kept"),
	       ctl_int(v, "tokens"), ctl_int(v, "trainable_tokens"),
	       ctl_int(v, "truncated"), ctl_int(v, "dropped"),
	       ctl_int(v, "errors"), ctl_int(v, "warnings"));
	for (size_t i = 0; i < json_array_size(probs) && i < PROBLEMS_SHOWN;
	     i++) {
		json_t *p = json_array_get(probs, i);
		printf("  line %lld: %s %s: %s\n", ctl_int(p, "line"),
		       ctl_str(p, "severity"), ctl_str(p, "code"),
		       ctl_str(p, "detail"));
	}
	if (json_array_size(probs) > PROBLEMS_SHOWN)
		printf("  ... and %zu more (--json shows them)\n",
		       json_array_size(probs) - PROBLEMS_SHOWN);
	preview(v);
}

int ctl_cmd_plan(ctl *c, const ctl_cmd *cmd, int argc, char **argv)
{
	plan_opts o = {NULL, cmd};
	json_t *body = NULL, *e;
	ctl_resp r = {0};
	int first, rc;

	if (ctl_jobspec_new(&o.spec))
		return ctl_fail("out of memory");
	rc = ctl_parse(c, cmd, argc, argv, ctl_jobspec_options, NULL, plan_opt,
		       &o, &first);
	if (rc != CTL_GO_ON)
		goto out;
	if (argc - first > 1) {
		rc = ctl_usage(cmd, "at most one job file");
		goto out;
	}
	if ((rc = ctl_connect(c)) ||
	    (rc = ctl_jobspec_body(c, o.spec, cmd,
				   argc > first ? argv[first] : NULL, &body)) ||
	    (rc = ctl_call(c, "POST", "/v1/fine_tuning/plan", body, 0, &r)))
		goto out;
	e = json_object_get(r.json, "error");
	/* exit status: would tacod accept the job? */
	rc = json_is_true(json_object_get(r.json, "fits")) && !json_is_object(e)
		 ? CTL_OK
		 : CTL_FAIL;
	if (c->json) {
		ctl_print_raw(&r);
	} else {
		memory(r.json);
		advice(json_object_get(r.json, "advice"));
		validation(json_object_get(r.json, "validation"));
		/* too large to read at once: a create validates it later */
		if (ctl_str(r.json, "note")[0])
			printf("\nTraining data not validated: %s\n",
			       ctl_str(r.json, "note"));
		if (json_is_object(e))
			printf("\nThe job would be refused: %s%s%s\n",
			       ctl_str(e, "code"),
			       ctl_str(e, "code")[0] ? ": " : "",
			       ctl_str(e, "message"));
	}
	ctl_resp_free(&r);
out:
	ctl_jobspec_free(o.spec);
	json_decref(body);
	return rc;
}
