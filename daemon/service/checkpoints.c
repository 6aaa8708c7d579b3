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
