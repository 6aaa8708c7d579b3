/* service/checkpoints.c: a job's checkpoints (their content is
 * download.c's). */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/job_request.h"
#include "api/objects.h"
#include "daemon/service/internal.h"
#include "daemon/webhooks/delivery.h"
#include "util/fsutil.h"

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

int tacod_route_checkpoints(tacod_http_req *r, tacod_service *s, const char *id,
			    tacod_job *j, tacod_checkpoint **out, int *n,
			    taco_err *err)
{
	tacod_checkpoint *c = calloc(TACOD_LIST_MAX, sizeof(*c));
	int rc;

	*n = 0;
	if (!c)
		return taco_err_set(err, -ENOMEM, "out of memory");
	pthread_mutex_lock(&s->lock);
	rc = tacod_store_job_get(s->store, tacod_route_scope(r), id, j, err);
	if (!rc)
		rc = tacod_store_checkpoint_list(s->store, id, c,
						 TACOD_LIST_MAX, n, err);
	/* Only what can be downloaded: the worker removes checkpoints beyond
	 * keep_checkpoints after it has reported them, so a row whose
	 * weights are gone is forgotten here. */
	if (!rc) {
		int k = 0;
		for (int i = 0; i < *n; i++) {
			char w[TACOD_PATH_MAX + 32];
			snprintf(w, sizeof(w), "%s/model.safetensors",
				 c[i].path);
			if (access(w, F_OK) == 0) {
				c[k++] = c[i];
				continue;
			}
			tacod_store_checkpoint_delete(s->store, id, c[i].step,
						      NULL);
			free(c[i].metrics);
		}
		*n = k;
	}
	pthread_mutex_unlock(&s->lock);
	*out = c;
	return rc;
}

int tacod_route_job_checkpoints(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	const char *id = tacod_http_param(r, "id");
	tacod_checkpoint *c = NULL;
	tacod_job j = {0};
	taco_err err = {{0}};
	json_t *items = json_array();
	int n = 0, rc;

	rc = tacod_route_checkpoints(r, s, id, &j, &c, &n, &err);
	for (int i = n - 1; i >= 0; i--) {
		if (!rc)
			json_array_append_new(
			    items, tacod_checkpoint_object(&c[i], &j));
		free(c[i].metrics);
	}
	free(c);
	tacod_job_clear(&j);
	if (rc) {
		json_decref(items);
		return tacod_route_store_error(r, rc, &err, "job");
	}
	return tacod_http_reply_json(r, 200, tacod_list_object(items, 0));
}
