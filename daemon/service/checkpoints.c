/* service/checkpoints.c: a job's checkpoints, paged as OpenAI's (their
 * content is download.c's). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/objects.h"
#include "daemon/service/internal.h"

/* Sets m's names[i] to the number at keys[i] of the job's newest metrics
 * event at or before step that has a number at src (lock held); null where
 * there is none. */
static void metrics_from(tacod_service *s, const char *job, int64_t step,
			 const char *src, json_t *m, const char *const *keys,
			 const char *const *names, int n)
{
	char *text = NULL;
	json_t *d = NULL;

	if (!tacod_store_event_metrics_last(s->store, job, src, step, &text,
					    NULL))
		d = json_loads(text, 0, NULL);
	free(text);
	for (int i = 0; i < n; i++) {
		json_t *v = json_object_get(d, keys[i]);
		json_object_set_new(m, names[i],
				    json_is_number(v) ? json_incref(v)
						      : json_null());
	}
	json_decref(d);
}

char *tacod_checkpoint_metrics(tacod_service *s, const char *job, int64_t step)
{
	/* a training step's metrics event (service.c) */
	static const char *const train[] = {"train_loss",
					    "train_mean_token_accuracy"};
	/* taco-train's eval event: the whole validation set, so the full_
	 * fields are the same numbers */
	static const char *const eval[] = {"val_loss", "val_token_accuracy",
					   "val_loss", "val_token_accuracy"};
	static const char *const eval_names[] = {
	    "valid_loss", "valid_mean_token_accuracy", "full_valid_loss",
	    "full_valid_mean_token_accuracy"};
	json_t *m = json_pack("{sI}", "step", (json_int_t)step);
	char *text;

	metrics_from(s, job, step, "train_loss", m, train, train, 2);
	metrics_from(s, job, step, "val_loss", m, eval, eval_names, 4);
	text = json_dumps(m, JSON_COMPACT);
	json_decref(m);
	return text;
}

/* Only what can be downloaded: the worker removes checkpoints beyond
 * keep_checkpoints after it has reported them, so a row whose weights are
 * gone is forgotten (deleted) when a page reaches it. */
static int weights_kept(const tacod_checkpoint *c)
{
	char w[TACOD_PATH_MAX + 32];

	snprintf(w, sizeof(w), "%s/model.safetensors", c->path);
	return access(w, F_OK) == 0;
}

int tacod_route_checkpoints(tacod_http_req *r, tacod_service *s, const char *id,
			    int64_t before_step, int limit, tacod_job *j,
			    tacod_checkpoint *out, int *n, int *has_more,
			    taco_err *err)
{
	/* one kept row past the page tells whether a next page has one */
	int want = limit + 1, got = 0, more = 1, rc;

	*n = 0;
	*has_more = 0;
	pthread_mutex_lock(&s->lock);
	rc = tacod_store_job_get(s->store, tacod_route_scope(r), id, j, err);
	/* Each pass reads below the last step it saw, so it ends: when the
	 * page is full, or no older row is left. */
	while (!rc && more && got < want) {
		int k = 0, end;

		rc = tacod_store_checkpoint_list(s->store, id, before_step,
						 want - got, out + got, &k,
						 &more, err);
		end = got + k;
		for (int i = got; !rc && i < end; i++) {
			before_step = out[i].step;
			if (weights_kept(&out[i])) {
				out[got++] = out[i];
				continue;
			}
			tacod_store_checkpoint_delete(s->store, id, out[i].step,
						      NULL);
			free(out[i].metrics);
		}
	}
	pthread_mutex_unlock(&s->lock);
	if (rc) {
		for (int i = 0; i < got; i++)
			free(out[i].metrics);
		return rc;
	}
	if (got > limit) {
		free(out[limit].metrics);
		got = limit;
		*has_more = 1;
	}
	*n = got;
	return 0;
}

/* GET /v1/fine_tuning/jobs/{id}/checkpoints: newest step first, `limit`
 * (OpenAI's default 10) at a time, after the checkpoint id `after`. */
int tacod_route_job_checkpoints(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	const char *id = tacod_http_param(r, "id");
	const char *after = tacod_http_query(r, "after");
	int64_t before = INT64_MAX;
	tacod_checkpoint *c;
	tacod_job j = {0};
	taco_err err = {{0}};
	json_t *items;
	int n = 0, more = 0, rc;
	int limit = tacod_route_page_limit(r, 10, TACOD_LIST_MAX);

	if (limit < 0)
		return 0;
	/* an id of this job's checkpoints, also one keep_checkpoints has
	 * removed since: the page goes on below its step */
	if (after && after[0]) {
		before = tacod_route_item_number(after, "ftckpt-", id, &err);
		if (before == -ENOENT)
			return tacod_http_error(r, 404, "invalid_request_error",
						"not_found", "after",
						"after names no checkpoint of "
						"this job");
		if (before < 0)
			return tacod_route_store_error(r, (int)before, &err,
						       "checkpoint");
	}
	if (!(c = calloc(TACOD_LIST_MAX + 1, sizeof(*c))))
		return tacod_http_error(r, 500, "server_error", NULL, NULL,
					"out of memory");
	rc = tacod_route_checkpoints(r, s, id, before, limit, &j, c, &n, &more,
				     &err);
	items = json_array();
	for (int i = 0; i < n; i++) {
		json_array_append_new(items,
				      tacod_checkpoint_object(&c[i], &j));
		free(c[i].metrics);
	}
	free(c);
	tacod_job_clear(&j);
	if (rc) {
		json_decref(items);
		return tacod_route_store_error(r, rc, &err, "job");
	}
	return tacod_http_reply_json(r, 200, tacod_list_object(items, more));
}
