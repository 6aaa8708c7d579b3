/* fuzz_jsonl.c: the pre-tokenized JSONL reader. The input becomes a file
 * (memfd) so the real reader runs, line splitting included. */
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "data/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("jsonl", 0);
	char path[64];
	taco_data *d = NULL;
	taco_err err;

	if (fd < 0)
		return 0;
	if (write(fd, data, size) == (ssize_t)size) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		if (taco_data_load_pretok(path, 1000, 10000, &d, &err) == 0)
			taco_data_free(d);
	}
	close(fd);
	return 0;
}
