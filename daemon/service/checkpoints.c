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
