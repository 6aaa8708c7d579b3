/* fuzz_job_request.c: the body of POST /v1/fine_tuning/jobs (and /plan):
 * JSON parsing, then validation and mapping to a taco-train job. A models
 * directory with one model is made once; file ids that start with "file-"
 * exist, absolute paths are refused like a server without dataset roots,
 * every fine-tuned model name that parses resolves to that model; an
 * accepted request's method and hyperparameters are echoed, of the job's
 * method (supervised or dpo). The input is also a model name
 * (api/model_name.h, as GET /v1/models/{model} takes it): one that parses
 * must be formed again byte for byte. */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api/job_request.h"
#include "api/model_name.h"

static char models[64];

static int file_path(void *ctx, const char *id, char *path, size_t cap)
{
	(void)ctx;
	if (strncmp(id, "file-", 5))
		return -ENOENT;
	snprintf(path, cap, "/state/files/%s", id);
	return 0;
}

static int model_path(void *ctx, const char *name, char *path, size_t cap)
{
	tacod_model_name m;

	(void)ctx;
	if (tacod_model_name_parse(name, &m) || m.kind == TACOD_MODEL_BASE)
		abort(); /* the request only asks for fine-tuned models */
	snprintf(path, cap, "%s/m", models);
	return 0;
}

/* A name that parses is the one format makes of its parts. */
static void name_round_trip(const uint8_t *data, size_t size)
{
	char name[TACOD_MODEL_NAME_MAX + 1], again[TACOD_MODEL_NAME_MAX];
	tacod_model_name m;

	if (size > TACOD_MODEL_NAME_MAX || memchr(data, 0, size))
		return;
	memcpy(name, data, size);
	name[size] = 0;
	if (tacod_model_name_parse(name, &m) || m.kind == TACOD_MODEL_BASE)
		return;
	if (tacod_model_name_format(m.root, m.suffix, m.job_id,
				    m.kind == TACOD_MODEL_CHECKPOINT ? m.step
								     : -1,
				    again, sizeof(again)) ||
	    strcmp(again, name))
		abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char path[128];
	FILE *f;

	(void)argc;
	(void)argv;
	snprintf(models, sizeof(models), "/tmp/fuzz-models-XXXXXX");
	if (!mkdtemp(models))
		abort();
	snprintf(path, sizeof(path), "%s/m", models);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/m/config.json", models);
	if (!(f = fopen(path, "w")))
		abort();
	fputs("{}", f);
	fclose(f);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	tacod_request_ctx ctx = {.models_dir = models,
				 .output_dir = "/state/jobs/j/out",
				 .file_path = file_path,
				 .model_path = model_path};
	tacod_request_error e;
	json_t *req = json_loadb((const char *)data, size, 0, NULL);
	tacod_job_spec spec;

	name_round_trip(data, size);

	if (!req)
		return 0;
	if (tacod_job_request(req, &ctx, &spec, &e) == 0) {
		/* an accepted request's job object echoes its method and
		 * hyperparameters, of the method the job file says */
		json_t *m = tacod_job_method(req);
		json_t *hp = tacod_job_hyperparameters(req);
		const char *type =
		    json_string_value(json_object_get(m, "type"));

		if (!m || !hp || !type ||
		    (spec.job.method == TACO_METHOD_DPO) !=
			!strcmp(type, "dpo"))
			abort();
		json_decref(m);
		json_decref(hp);
		tacod_job_spec_free(&spec);
	} else if (!e.message[0])
		abort(); /* every refusal says why */
	json_decref(req);
	return 0;
}
