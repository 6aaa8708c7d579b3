/* service/plan.c: POST /v1/fine_tuning/plan: a create's request planned
 * and its data validated, with nothing created and no file written. */
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

/* POST /v1/fine_tuning/plan: the memory plan and validation report of a
 * create request, without creating anything. The data is read on this
 * thread only up to limits.max_sync_validate_bytes; a larger one is left
 * to the validation a create does in the background. */
int tacod_route_job_plan(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	json_t *req = tacod_http_body_json(r), *o, *terms;
	char id[TACOD_ID_MAX], dir[TACOD_PATH_MAX + 160];
	uint64_t limit = s->cfg.limits.max_sync_validate_bytes;
	tacod_job_spec spec;
	tacod_assessment a;

	if (!req)
		return 0;
	/* a job that would write here, planned from the parsed request: no
	 * file is written but, for a fine-tuned model, the links of its
	 * model directory, which go with the plan */
	tacod_new_id("plan-", id);
	snprintf(dir, sizeof(dir), "%s/plan-%s", s->jobs_dir, id + 5);
	if (tacod_route_map_job(r, s, req, dir, &spec)) {
		tacod_route_remove_job_dir(dir);
		json_decref(req);
		return 0;
	}
	tacod_assess(s, &spec.job, req, TACOD_ASSESS_PLAN | TACOD_ASSESS_DATA,
		     limit, &a);
	tacod_job_spec_free(&spec);
	tacod_route_remove_job_dir(dir);
	terms = json_object();
	for (int t = 0; a.planned && t < TACO_PLAN_TERMS; t++)
		json_object_set_new(terms, taco_plan_term_name(t),
				    json_integer((json_int_t)a.plan.term[t]));
	o = json_pack("{ss sb sI sI so}", "object", "fine_tuning.plan", "fits",
		      a.planned && a.fits, "device_memory_bytes",
		      (json_int_t)s->cfg.device_memory, "total_bytes",
		      (json_int_t)(a.planned ? a.plan.total : 0), "terms",
		      terms);
	if (a.planned) {
		json_object_set_new(o, "peak_phase",
				    json_string(a.plan.peak_phase));
		json_object_set_new(o, "host_bytes",
				    json_integer((json_int_t)a.plan.host));
		json_object_set_new(
		    o, "settings",
		    json_pack("{ss sb si si si}", "precision",
			      taco_plan_precision(&a.plan),
			      "activation_offload", a.plan.offload,
			      "mlp_chunks", a.plan.mlp_chunks,
			      "streamed_layers", a.plan.stream_layers, "layers",
			      a.plan.layers));
		/* weights streamed from host memory: what crosses the bus */
		json_object_set_new(o, "transfer",
				    json_pack("{sI sI sI}",
					      "host_weights_bytes",
					      (json_int_t)a.plan.host_weights,
					      "to_device_bytes_per_step",
					      (json_int_t)a.plan.to_device,
					      "to_host_bytes_per_step",
					      (json_int_t)a.plan.to_host));
	}
	if (a.planned && !a.fits)
		json_object_set_new(
		    o, "advice",
		    json_pack("{si si sb sI}", "max_batch_size",
			      a.advice.max_batch, "max_seq_len",
			      a.advice.max_seq_len, "freeze_embeddings_fits",
			      a.advice.freeze_embeddings_fits,
			      "frozen_embeddings_total_bytes",
			      (json_int_t)a.advice.frozen_embeddings_total));
	json_decref(req);
	json_object_set_new(o, "validation", a.report ? a.report : json_null());
	json_object_set_new(o, "validated", json_boolean(a.validated));
	json_object_set_new(o, "data_bytes",
			    json_integer((json_int_t)a.data_bytes));
	json_object_set_new(o, "max_sync_validate_bytes",
			    json_integer((json_int_t)limit));
	if (!a.validated && a.data_bytes > limit) {
		char note[256];
		snprintf(note, sizeof(note),
			 "the data (%llu bytes) is larger than "
			 "limits.max_sync_validate_bytes (%llu): it was not "
			 "read here; a created job validates it in the "
			 "background (status validating_files)",
			 (unsigned long long)a.data_bytes,
			 (unsigned long long)limit);
		json_object_set_new(o, "note", json_string(note));
	}
	if (a.code[0]) {
		json_t *e =
		    tacod_error_object(a.msg, "invalid_request_error",
				       a.param[0] ? a.param : NULL, a.code);
		json_object_set(o, "error", json_object_get(e, "error"));
		json_decref(e);
	}
	return tacod_http_reply_json(r, 200, o);
}
