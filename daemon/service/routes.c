/* service/routes.c: the REST API (OpenAI's fine-tuning paths): the route
 * table, the helpers every resource's file shares, and the small routes
 * (health, the API's description). Handlers run on the HTTP
 * server's thread and hold the service lock while they touch the store;
 * each resource has its file: files.c, jobs.c, plan.c, events.c,
 * checkpoints.c, download.c, gguf.c, models.c, device.c, dashboard.c; OpenAI's
 * paths tacod does not serve (checkpoint permissions, graders) answer a
 * documented 404 here. */
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

/* The user whose rows a request sees: NULL (everything) for admins. */
const char *tacod_route_scope(tacod_http_req *r)
{
	const tacod_identity *id = tacod_http_identity(r);

	return id->role == TACOD_ROLE_ADMIN ? NULL : id->user;
}

const char *tacod_route_user(tacod_http_req *r)
{
	return tacod_http_identity(r)->user;
}

int tacod_route_page_limit(tacod_http_req *r, int dflt, int max)
{
	const char *l = tacod_http_query(r, "limit");
	char *end;
	long n;

	if (!l)
		return dflt;
	errno = 0;
	n = strtol(l, &end, 10);
	if (end == l || *end || errno || n < 1 || n > max) {
		tacod_http_error(r, 400, "invalid_request_error",
				 "invalid_value", "limit",
				 "limit must be an integer from 1 to %d", max);
		return -1;
	}
	return (int)n;
}

int tacod_route_limit(tacod_http_req *r)
{
	return tacod_route_page_limit(r, 20, TACOD_LIST_MAX);
}

int64_t tacod_route_item_number(const char *item_id, const char *prefix,
				const char *job, taco_err *err)
{
	size_t np = strlen(prefix);
	size_t nj = strncmp(job, "ftjob-", 6) ? strlen(job) : strlen(job) - 6;
	const char *p = item_id + np;
	char *end;
	long long v;

	if (strlen(item_id) >= TACOD_ID_MAX)
		return taco_err_set(err, -EINVAL, "after: longer than %d bytes",
				    TACOD_ID_MAX - 1);
	if (strncmp(item_id, prefix, np) ||
	    strncmp(p, job + strlen(job) - nj, nj) || p[nj] != '-')
		return taco_err_set(err, -ENOENT, "after: no such id");
	p += nj + 1;
	if (*p < '0' || *p > '9' || (p[0] == '0' && p[1]))
		return taco_err_set(err, -ENOENT, "after: no such id");
	errno = 0;
	v = strtoll(p, &end, 10);
	if (*end || errno)
		return taco_err_set(err, -ENOENT, "after: no such id");
	return v;
}

int tacod_route_store_error(tacod_http_req *r, int code, const taco_err *err,
			    const char *what)
{
	if (tacod_http_storage_errno(code))
		return tacod_route_write_error(r, code, err);
	if (code == -ENOENT)
		return tacod_http_error(r, 404, "invalid_request_error",
					"not_found", "id", "No such %s", what);
	if (code == -EINVAL)
		return tacod_http_error(r, 400, "invalid_request_error",
					"invalid_value", NULL, "%s", err->msg);
	return tacod_http_error(r, 500, "server_error", NULL, NULL, "%s",
				err->msg);
}

static int healthz(tacod_http_req *r, void *ctx)
{
	(void)ctx;
	return tacod_http_reply_json(r, 200, json_pack("{ss}", "status", "ok"));
}

/* ---- OpenAI's fine-tuning paths tacod does not serve ---------------- */

/* A documented 404 in the error envelope (the SDK's NotFoundError), not
 * the unknown_url of a mistyped path: these exist in OpenAI's API. */
static int checkpoint_permissions(tacod_http_req *r, void *ctx)
{
	(void)ctx;
	return tacod_http_error(
	    r, 404, "invalid_request_error", "not_supported", NULL,
	    "checkpoint permissions are not supported: tacod has no "
	    "organizations or projects to share a checkpoint with; a "
	    "checkpoint is its job owner's, and GET "
	    "/v1/fine_tuning/jobs/{id}/checkpoints/{checkpoint}/content "
	    "downloads it");
}

static int alpha_graders(tacod_http_req *r, void *ctx)
{
	(void)ctx;
	return tacod_http_error(r, 404, "invalid_request_error",
				"not_supported", NULL,
				"graders are not supported: they serve "
				"reinforcement fine-tuning, and tacod runs "
				"supervised fine-tuning only");
}

extern const unsigned char tacod_openapi_yaml[];
extern const size_t tacod_openapi_yaml_len;

/* GET /v1/openapi.yaml: the API's description, built into the binary. */
static int openapi(tacod_http_req *r, void *ctx)
{
	(void)ctx;
	return tacod_http_reply_data(r, 200, "application/yaml",
				     tacod_openapi_yaml,
				     tacod_openapi_yaml_len);
}

void tacod_service_routes(tacod_service *s)
{
	const tacod_http_route routes[] = {
	    {"GET", "/healthz", healthz, NULL, 0},
	    {"GET", "/v1/models", tacod_route_model_list, NULL, 0},
	    {"GET", "/v1/models/{model}", tacod_route_model_show, NULL, 0},
	    {"DELETE", "/v1/models/{model}", tacod_route_model_delete, NULL, 0},
	    {"POST", "/v1/chat/completions", tacod_route_chat_completions, NULL,
	     0},
	    {"POST", "/v1/files", tacod_route_file_upload, s->upload_dir, 0},
	    {"GET", "/v1/files", tacod_route_file_list, NULL, 0},
	    {"GET", "/v1/files/{id}", tacod_route_file_show, NULL, 0},
	    {"DELETE", "/v1/files/{id}", tacod_route_file_delete, NULL, 0},
	    {"GET", "/v1/files/{id}/content", tacod_route_file_content, NULL,
	     0},
	    {"POST", "/v1/fine_tuning/jobs", tacod_route_job_create, NULL, 0},
	    {"POST", "/v1/fine_tuning/plan", tacod_route_job_plan, NULL, 0},
	    {"GET", "/v1/fine_tuning/jobs", tacod_route_job_list, NULL, 0},
	    {"GET", "/v1/fine_tuning/jobs/{id}", tacod_route_job_show, NULL, 0},
	    {"POST", "/v1/fine_tuning/jobs/{id}/cancel", tacod_route_job_cancel,
	     NULL, 0},
	    {"GET", "/v1/fine_tuning/jobs/{id}/events", tacod_route_job_events,
	     NULL, 0},
	    {"POST", "/v1/fine_tuning/jobs/{id}/pause", tacod_route_job_pause,
	     NULL, 0},
	    {"POST", "/v1/fine_tuning/jobs/{id}/resume", tacod_route_job_resume,
	     NULL, 0},
	    {"GET", "/v1/fine_tuning/jobs/{id}/checkpoints",
	     tacod_route_job_checkpoints, NULL, 0},
	    {"GET",
	     "/v1/fine_tuning/jobs/{id}/checkpoints/{checkpoint}/content",
	     tacod_route_checkpoint_content, NULL, 0},
	    {"GET", "/v1/fine_tuning/jobs/{id}/model/content",
	     tacod_route_model_content, NULL, 0},
	    {"POST", "/v1/fine_tuning/jobs/{id}/gguf", tacod_route_gguf_create,
	     NULL, 0},
	    {"GET", "/v1/fine_tuning/jobs/{id}/gguf", tacod_route_gguf_list,
	     NULL, 0},
	    {"GET", "/v1/fine_tuning/jobs/{id}/gguf/{name}",
	     tacod_route_gguf_show, NULL, 0},
	    {"DELETE", "/v1/fine_tuning/jobs/{id}/gguf/{name}",
	     tacod_route_gguf_delete, NULL, 0},
	    {"GET", "/v1/fine_tuning/jobs/{id}/gguf/{name}/content",
	     tacod_route_gguf_content, NULL, 0},
	    {"GET",
	     "/v1/fine_tuning/checkpoints/{fine_tuned_model_checkpoint}/"
	     "permissions",
	     checkpoint_permissions, NULL, 0},
	    {"POST",
	     "/v1/fine_tuning/checkpoints/{fine_tuned_model_checkpoint}/"
	     "permissions",
	     checkpoint_permissions, NULL, 0},
	    {"DELETE",
	     "/v1/fine_tuning/checkpoints/{fine_tuned_model_checkpoint}/"
	     "permissions/{permission_id}",
	     checkpoint_permissions, NULL, 0},
	    {"POST", "/v1/fine_tuning/alpha/graders/run", alpha_graders, NULL,
	     0},
	    {"POST", "/v1/fine_tuning/alpha/graders/validate", alpha_graders,
	     NULL, 0},
	    {"GET", "/v1/device", tacod_route_device, NULL, 0},
	    {"GET", "/metrics", tacod_route_metrics, NULL, 0},
	    {"GET", "/v1/openapi.yaml", openapi, NULL, 0},
	    {"GET", "/", tacod_route_dashboard, NULL, 1},
	    {"GET", "/ui/{file}", tacod_route_dashboard_file, NULL, 1},
	    {NULL, NULL, NULL, NULL, 0},
	};

	memcpy(s->routes, routes, sizeof(routes));
}
