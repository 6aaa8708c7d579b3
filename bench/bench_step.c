/* bench_step: times the CPU training step (forward, loss, backward with
 * activation checkpointing; gradients consumed by a no-op) of a model
 * directory on a batch file, and prints one JSON line. Used by
 * bench/step_cpu.py, which runs PyTorch on the same model beside it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "model/model.h"
#include "util/runtime.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static int32_t *rows(json_t *a, int B, int T)
{
	int32_t *x = malloc(sizeof(int32_t) * (size_t)B * (size_t)T);

	for (int b = 0; x && b < B; b++)
		for (int t = 0; t < T; t++)
			x[b * T + t] = (int32_t)json_integer_value(
			    json_array_get(json_array_get(a, b), t));
	return x;
}

int main(int argc, char **argv)
{
	taco_model *m = NULL;
	taco_err err = {{0}};
	json_error_t jerr;
	json_t *root;
	int B, T, warmup = 1, iters = 5;
	double times[64];
	taco_step_stats st = {0};
	int32_t *tok, *tgt;

	taco_runtime_init(argv);
	if (argc < 3) {
		fprintf(stderr, "usage: bench_step MODEL_DIR BATCH_JSON "
				"[ITERS [keep]]\n");
		return 2;
	}
	if (argc > 3)
		iters = atoi(argv[3]);
	if (iters < 1 || iters > 64)
		iters = 5;
	if (taco_model_load(argv[1], tk_cpu_ops(), &m, &err)) {
		fprintf(stderr, "bench_step: %s\n", err.msg);
		return 1;
	}
	if (taco_model_set_step_opts(
		m,
		&(taco_step_opts){.keep_activations =
				      argc > 4 && strcmp(argv[4], "keep") == 0},
		&err)) {
		fprintf(stderr, "bench_step: %s\n", err.msg);
		return 1;
	}
	root = json_load_file(argv[2], 0, &jerr);
	if (!root) {
		fprintf(stderr, "bench_step: %s: %s\n", argv[2], jerr.text);
		return 1;
	}
	B = (int)json_array_size(json_object_get(root, "input_ids"));
	T = (int)json_array_size(
	    json_array_get(json_object_get(root, "input_ids"), 0));
	tok = rows(json_object_get(root, "input_ids"), B, T);
	tgt = rows(json_object_get(root, "targets"), B, T);
	for (int i = 0; i < warmup + iters; i++) {
		double t0 = now();
		if (taco_model_step(m, &(taco_batch){B, T, tok, tgt, NULL, 0}, 0,
				    NULL, &st, &err)) {
			fprintf(stderr, "bench_step: %s\n", err.msg);
			return 1;
		}
		if (i >= warmup)
			times[i - warmup] = now() - t0;
	}
	qsort(times, (size_t)iters, sizeof(double), cmp_double);
	printf("{\"median_s\": %.6f, \"min_s\": %.6f, \"loss\": %.6f, "
	       "\"peak_bytes\": %zu, \"params\": %zu}\n",
	       times[iters / 2], times[0], st.loss, m->ops->mem_peak(),
	       taco_model_param_count(m));
	free(tok);
	free(tgt);
	json_decref(root);
	taco_model_free(m);
	return 0;
}
