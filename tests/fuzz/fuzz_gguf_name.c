/* fuzz_gguf_name.c: the {name} of tacod's GGUF paths
 * (daemon/service/gguf.h): a name the parser takes is one taco-train
 * writes, so it prints back as itself, and it never names a path outside
 * OUTPUT_DIR/gguf. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "daemon/service/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char name[256], again[256];
	int64_t step;
	int type;

	if (size >= sizeof(name))
		return 0;
	memcpy(name, data, size);
	name[size] = 0;
	if (tacod_gguf_name_parse(name, &step, &type))
		return 0;
	if (type < 0 || type > 2 || step < -1)
		__builtin_trap();
	if (step < 0)
		snprintf(again, sizeof(again), "model-%s.gguf",
			 tacod_gguf_types[type]);
	else
		snprintf(again, sizeof(again), "step-%08lld-%s.gguf",
			 (long long)step, tacod_gguf_types[type]);
	if (strcmp(name, again) || strchr(name, '/') ||
	    strlen(name) >= TACOD_GGUF_NAME_MAX)
		__builtin_trap();
	return 0;
}
