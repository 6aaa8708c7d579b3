/* objects.h: OpenAI-compatible JSON objects of tacod's rows (files, jobs,
 * events, lists) and the error shape. api/openapi.yaml describes them. */
#ifndef TACOD_OBJECTS_H
#define TACOD_OBJECTS_H

#include <jansson.h>

#include "types.h"

/* {"id", "object": "file", "bytes", "created_at", "filename", "purpose",
 *  "status": "processed", "expires_at": null, "status_details": null} */
json_t *tacod_file_object(const tacod_file *f);

/* {"id", "object": "fine_tuning.job", "model", "status", ...}: the
 * request's seed, suffix, metadata and taco extension are echoed from
 * j->request; its hyperparameters are the effective ones
 * (tacod_job_hyperparameters), in "hyperparameters" and in method's
 * (tacod_job_method: "method.supervised.hyperparameters", or
 * "method.dpo.hyperparameters" with beta); result_files is
 * [j->result_file] when it has one. */
json_t *tacod_job_object(const tacod_job *j);

/* {"id": "ftevent-...", "object": "fine_tuning.job.event", "created_at",
 *  "level", "type", "message", "data"} */
json_t *tacod_event_object(const tacod_event *e);

/* {"id": "ftckpt-...", "object": "fine_tuning.job.checkpoint", "created_at",
 *  "fine_tuning_job_id", "step_number", "fine_tuned_model_checkpoint",
 *  "metrics": c->metrics with "step", OpenAI's other metrics null where
 *  c->metrics lacks them}; j is the checkpoint's job. */
json_t *tacod_checkpoint_object(const tacod_checkpoint *c, const tacod_job *j);

/* {"id", "object": "model", "created", "owned_by", "root", "parent"}: OpenAI's
 * model with two fields of tacod's (as vLLM's): root, the base model at the
 * start of its chain, and parent, the model it was trained from (NULL: none,
 * a base model). */
json_t *tacod_model_object(const char *id, int64_t created,
			   const char *owned_by, const char *root,
			   const char *parent);

/* {"object": "list", "data": items (stolen), "has_more", "first_id",
 *  "last_id"} */
json_t *tacod_list_object(json_t *items, int has_more);

/* The one builder of OpenAI's error object, for replies and for a job's
 * error alike. message NULL reads "(no message)"; a NULL or empty type,
 * param or code is JSON null (OpenAI's "none"), except that a reply's type
 * defaults to "error". */

/* {"message", "code", "param"}: a fine-tuning job's "error" field. */
json_t *tacod_error_fields(const char *message, const char *code,
			   const char *param);

/* {"error": {"message", "type", "param", "code"}}: an error reply. */
json_t *tacod_error_object(const char *message, const char *type,
			   const char *param, const char *code);

#endif
