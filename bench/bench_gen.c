/* bench_gen: times generation on the CPU: a prompt's prefill, then greedy
 * decode steps of one row over the KV cache (model/decode.h), and prints
 * one JSON line: the prefill's seconds, the decode tokens per second and
 * the ids generated. Used by bench/gen_cpu.py, which runs transformers'
 * generate() on the same model and prompt beside it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gen/gen.h"
#include "model/decode.h"
#include "util/runtime.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	taco_model *m = NULL;
	taco_kv *kv = NULL;
	taco_err err = {{0}};
	int P, D, V, rc = 1;
	int32_t *prompt = NULL, *seq = NULL, *out = NULL, last;
	float *lg = NULL;
	double t0, t_prefill, t_decode;

	taco_runtime_init(argv);
	if (argc < 4) {
		fprintf(stderr, "usage: bench_gen MODEL_DIR PROMPT_TOKENS "
				"NEW_TOKENS\n");
		return 2;
	}
	P = atoi(argv[2]);
	D = atoi(argv[3]);
	if (P < 1 || D < 1 || P > 65536 || D > 65536) {
		fprintf(stderr, "bench_gen: 1 to 65536 tokens each\n");
		return 2;
	}
	if (taco_model_load(argv[1], tk_cpu_ops(), &m, &err) ||
	    taco_kv_new(m, 1, P + D, P, &kv, &err))
		goto fail;
	V = m->cfg.vocab;
	prompt = malloc((size_t)P * sizeof(*prompt));
	seq = calloc((size_t)P, sizeof(*seq));
	out = malloc((size_t)D * sizeof(*out));
	lg = malloc((size_t)V * sizeof(*lg));
	if (!prompt || !seq || !out || !lg)
		goto fail;
	/* the prompt gen_cpu.py gives transformers: ids 3, 4, ... mod V */
	for (int i = 0; i < P; i++)
		prompt[i] = 3 + i % (V - 3);
	last = P - 1;
	t0 = now();
	if (taco_model_decode(m, kv, prompt, seq, P, &last, 1, lg, &err))
		goto fail;
	t_prefill = now() - t0;
	t0 = now();
	for (int t = 0; t < D; t++) {
		int32_t zero = 0;
		out[t] = taco_gen_argmax(lg, V);
		if (t + 1 < D && taco_model_decode(m, kv, &out[t], &zero, 1,
						   &zero, 1, lg, &err))
			goto fail;
	}
	t_decode = now() - t0;
	printf("{\"prefill_s\": %.6f, \"decode_tokens_per_s\": %.3f, "
	       "\"params\": %zu, \"ids\": [",
	       t_prefill, (D - 1) / t_decode, taco_model_param_count(m));
	for (int t = 0; t < D; t++)
		printf("%s%d", t ? ", " : "", out[t]);
	printf("]}\n");
	rc = 0;
	goto out;
fail:
	fprintf(stderr, "bench_gen: %s\n", err.msg[0] ? err.msg : "failed");
out:
	free(prompt);
	free(seq);
	free(out);
	free(lg);
	taco_kv_free(kv);
	taco_model_free(m);
	return rc;
}
