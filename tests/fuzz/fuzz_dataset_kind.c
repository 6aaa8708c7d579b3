/* fuzz_dataset_kind.c: the quick look a create takes at a data file
 * (engine/data/dataset_kind.h): the bounded read of its first non-blank
 * line and that line's JSON. One line with no blank before it is told as
 * its own JSON tells it. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "data/dataset_kind.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("dataset_kind", 0);
	char path[64];
	taco_err err;
	json_t *root;
	int kind;

	if (fd < 0)
		return 0;
	if (write(fd, data, size) == (ssize_t)size) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		if (taco_dataset_kind(path, &kind, &err))
			abort(); /* a file that is there reads */
		if (kind < TACO_DATASET_KIND_UNKNOWN ||
		    kind > TACO_DATASET_KIND_PREFERENCE)
			abort();
		/* a line alone: its own JSON's kind */
		if (size && !memchr(data, '\n', size) && data[0] != ' ' &&
		    data[0] != '\t' && data[size - 1] != '\r') {
			root = json_loadb((const char *)data, size,
					  JSON_REJECT_DUPLICATES, NULL);
			if (taco_dataset_kind_of(root) != kind)
				abort();
			json_decref(root);
		}
	}
	close(fd);
	return 0;
}
