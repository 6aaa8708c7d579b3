/* fuzz_config.c: config.json parsing, and the tensor list it implies. */
#include <stddef.h>
#include <stdint.h>

#include "daemon/config/config.h"
#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	taco_config c;
	taco_err err;
	taco_model *m = NULL;

	if (taco_config_parse((const char *)data, size, "fuzz", &c, &err))
		return 0;
	/* Shapes only: no weights are allocated, so large configs are fine,
	 * but keep the layer loop of the skeleton cheap. */
	if (c.layers <= 64 && taco_model_shapes(&c, &m, &err) == 0)
		taco_model_free(m);
	return 0;
}
