/* fuzz_job_request.c: the body of POST /v1/fine_tuning/jobs (and /plan):
 * JSON parsing, then validation and mapping to a taco-train job. A models
 * directory with one model is made once; file ids that start with "file-"
 * exist, absolute paths are refused like a server without dataset roots. */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api/job_request.h"

static char models[64];

static int file_path(void *ctx, const char *id, char *path, size_t cap)
{
	(void)ctx;
	if (strncmp(id, "file-", 5))
		return -ENOENT;
	snprintf(path, cap, "/state/files/%s", id);
	return 0;
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
	tacod_request_ctx ctx = {models, "/state/jobs/j/out", file_path, NULL,
				 NULL};
	tacod_request_error e;
	json_t *req = json_loadb((const char *)data, size, 0, NULL);
	tacod_job_spec spec;

	if (!req)
		return 0;
	if (tacod_job_request(req, &ctx, &spec, &e) == 0)
		tacod_job_spec_free(&spec);
	else if (!e.message[0])
		abort(); /* every refusal says why */
	json_decref(req);
	return 0;
}
