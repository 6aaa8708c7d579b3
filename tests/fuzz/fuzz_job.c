/* fuzz_job.c: JOB.json validation. */
#include <stdint.h>

#include "job/job.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	taco_job job;
	taco_job_problems p;

	taco_job_parse((const char *)data, size, "/jobs", &job, &p);
	taco_job_free(&job);
	return 0;
}
