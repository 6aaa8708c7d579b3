/* fuzz_slurm.c: what tacod reads from Slurm and from the shared job
 * directories (daemon/runner/slurm_files.h): squeue's and sbatch's output, the exit
 * status file, and tacod.json with its "slurm" object. The first byte
 * picks the parser. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "daemon/config/config.h"
#include "daemon/runner/slurm_files.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *t = (const char *)data + 1;
	tacod_slurm_entry e[8];
	tacod_config c;
	taco_err err;
	int64_t v;
	int n, sig;

	if (size < 1)
		return 0;
	size--;
	switch (data[0] % 4) {
	case 0:
		if (tacod_slurm_parse_squeue(t, size, e, 8, &n, &err) == 0)
			for (int i = 0; i < n && i < 8; i++)
				if (strlen(e[i].state) >= sizeof(e[i].state) ||
				    e[i].id <= 0)
					__builtin_trap();
		break;
	case 1:
		if (tacod_slurm_parse_sbatch(t, size, &v, &err) == 0 && v <= 0)
			__builtin_trap();
		break;
	case 2:
		if (tacod_slurm_parse_status(t, size, &v, &sig, &err) == 0 &&
		    (v < 0 || v > 128 || sig < 0 || sig > 127))
			__builtin_trap();
		break;
	default:
		tacod_config_defaults(&c);
		if (tacod_config_parse(t, size, "fuzz", &c, &err) == 0)
			tacod_config_check(&c, &err);
		break;
	}
	return 0;
}
