/* fuzz_safetensors.c: libFuzzer harness for the safetensors parser.
 *
 * Parses the input as a whole file; on success checks that every tensor's
 * bytes lie inside the input (touching them lets ASan catch an overrun), that
 * lookups by name find the same tensor, and that metadata is consistent.
 *
 * Mutations rarely keep the 8-byte header length in step with the JSON, so
 * each input is parsed twice: as is, and with the length prefix rewritten to
 * end the header just after the last '}' (letting mutations of the JSON
 * reach the tensor validation). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memrchr */
#endif
#include "safetensors/safetensors.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void parse_one(const uint8_t *data, size_t size)
{
	taco_st_file *f = NULL;
	taco_err err;
	volatile unsigned sink = 0;

	if (taco_st_parse(data, size, "fuzz", &f, &err) != 0) {
		if (strncmp(err.msg, "fuzz: ", 6) != 0)
			abort();
		return;
	}
	for (size_t i = 0; i < taco_st_count(f); i++) {
		const taco_st_tensor *t = taco_st_get(f, i);
		const uint8_t *p = t->data;

		if (!t || taco_st_find(f, t->name) != t)
			abort();
		if (p < data || t->nbytes > (uint64_t)(data + size - p))
			abort();
		if (t->nbytes)
			sink += p[0] + p[t->nbytes - 1];
		if (t->ndim < 0 || t->ndim > TACO_ST_MAX_DIMS ||
		    !taco_st_dtype_size(t->dtype))
			abort();
		if (i > 0 && (const uint8_t *)taco_st_get(f, i - 1)->data +
				     taco_st_get(f, i - 1)->nbytes >
				 p)
			abort();
	}
	for (size_t i = 0; i < taco_st_meta_count(f); i++) {
		const char *k, *v;

		if (taco_st_meta_get(f, i, &k, &v) != 0 ||
		    taco_st_meta(f, k) != v)
			abort();
	}
	(void)sink;
	taco_st_close(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *close;
	uint8_t *copy;
	uint64_t hlen;

	parse_one(data, size);
	if (size <= 8)
		return 0;
	close = memrchr(data + 8, '}', size - 8);
	if (!close)
		return 0;
	/* a private copy, so that the parser's reads stay bounds-checked */
	copy = malloc(size);
	if (!copy)
		return 0;
	memcpy(copy, data, size);
	hlen = (uint64_t)(close - data) + 1 - 8;
	for (int i = 0; i < 8; i++)
		copy[i] = (uint8_t)(hlen >> (8 * i));
	parse_one(copy, size);
	free(copy);
	return 0;
}
