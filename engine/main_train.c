/* taco-train: runs the engine in the foreground.
 *
 * This first version loads a Hugging Face model directory and runs forward
 * and backward on a pre-tokenized batch (batch.json with "input_ids" and
 * "targets", or "labels" in the Hugging Face unshifted convention), printing
 * the loss, the gradient norm and the step time. Optimizers and jobs come
 * with the training loop. */
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model.h"

#define MAX_BATCH_BYTES (64u << 20)

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: taco-train --model DIR --batch FILE [--steps N]\n"
		"\n"
		"Runs forward and backward of a Hugging Face model (Llama, "
		"Mistral,\n"
		"Qwen2, Qwen3) on the CPU backend for a pre-tokenized batch and "
		"prints\n"
		"the loss, the gradient norm and the time of each step.\n"
		"\n"
		"  --model DIR    model directory: config.json and "
		"*.safetensors\n"
		"  --batch FILE   JSON object with \"input_ids\": [[ids]] and\n"
		"                 \"targets\" (shifted; -100 = no loss) or\n"
		"                 \"labels\" (Hugging Face convention, "
		"unshifted)\n"
		"  --steps N      repeat the step N times (default 1, at most "
		"1000000)\n"
		"  -h, --help     this text\n");
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* rows[B][T] of integers into out; every row of the same length. */
static int read_rows(json_t *rows, const char *file, const char *field, int *B,
		     int *T, int32_t **out)
{
	size_t b, t;
	json_t *row, *v;
	int32_t *x;

	if (!json_is_array(rows) || json_array_size(rows) == 0 ||
	    !json_is_array(json_array_get(rows, 0))) {
		fprintf(stderr, "%s: field '%s' must be a non-empty array of "
				"arrays\n",
			file, field);
		return -1;
	}
	*B = (int)json_array_size(rows);
	*T = (int)json_array_size(json_array_get(rows, 0));
	if (*T == 0 || (int64_t)*B * *T > TACO_MAX_TOKENS) {
		fprintf(stderr, "%s: field '%s': %d x %d tokens (limit %d)\n",
			file, field, *B, *T, TACO_MAX_TOKENS);
		return -1;
	}
	x = malloc(sizeof(*x) * (size_t)*B * (size_t)*T);
	if (!x)
		return -1;
	json_array_foreach(rows, b, row)
	{
		if (!json_is_array(row) || json_array_size(row) != (size_t)*T) {
			fprintf(stderr, "%s: %s[%zu] must have %d entries\n",
				file, field, b, *T);
			free(x);
			return -1;
		}
		json_array_foreach(row, t, v)
		{
			if (!json_is_integer(v) ||
			    json_integer_value(v) < INT32_MIN ||
			    json_integer_value(v) > INT32_MAX) {
				fprintf(stderr,
					"%s: %s[%zu][%zu] is not an integer\n",
					file, field, b, t);
				free(x);
				return -1;
			}
			x[b * (size_t)*T + t] = (int32_t)json_integer_value(v);
		}
	}
	*out = x;
	return 0;
}

static int load_batch(const char *file, taco_batch *b, int32_t **tok,
		      int32_t **tgt)
{
	json_error_t jerr;
	json_t *root = json_load_file(file, JSON_REJECT_DUPLICATES, &jerr);
	json_t *targets, *labels;
	int B2, T2, r = -1;

	*tok = *tgt = NULL;
	if (!root) {
		fprintf(stderr, "%s: line %d: %s\n", file, jerr.line,
			jerr.text);
		return -1;
	}
	targets = json_object_get(root, "targets");
	labels = json_object_get(root, "labels");
	if (read_rows(json_object_get(root, "input_ids"), file, "input_ids",
		      &b->B, &b->T, tok))
		goto out;
	if (targets) {
		if (read_rows(targets, file, "targets", &B2, &T2, tgt))
			goto out;
	} else if (labels) {
		if (read_rows(labels, file, "labels", &B2, &T2, tgt))
			goto out;
		for (int i = 0; i < B2; i++) {
			for (int t = 0; t + 1 < T2; t++)
				(*tgt)[i * T2 + t] = (*tgt)[i * T2 + t + 1];
			(*tgt)[i * T2 + T2 - 1] = -100;
		}
	} else {
		fprintf(stderr, "%s: needs 'targets' or 'labels'\n", file);
		goto out;
	}
	if (B2 != b->B || T2 != b->T) {
		fprintf(stderr, "%s: input_ids is %d x %d but the targets are "
				"%d x %d\n",
			file, b->B, b->T, B2, T2);
		goto out;
	}
	b->tokens = *tok;
	b->targets = *tgt;
	b->pos = NULL;
	r = 0;
out:
	if (r) {
		free(*tok);
		free(*tgt);
		*tok = *tgt = NULL;
	}
	json_decref(root);
	return r;
}

static int sum_squares(void *ctx, taco_model *m, int id, float *grad)
{
	double *acc = ctx;
	const float *g = grad; /* CPU backend: host memory */

	for (size_t i = 0; i < m->tensors[id].numel; i++)
		*acc += (double)g[i] * g[i];
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"model", required_argument, NULL, 'm'},
		{"batch", required_argument, NULL, 'b'},
		{"steps", required_argument, NULL, 's'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *model_dir = NULL, *batch_file = NULL;
	long steps = 1;
	taco_model *m = NULL;
	taco_batch b = {0};
	int32_t *tok = NULL, *tgt = NULL;
	taco_err err = {{0}};
	int c, rc = 1;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		char *end;
		switch (c) {
		case 'm':
			model_dir = optarg;
			break;
		case 'b':
			batch_file = optarg;
			break;
		case 's':
			steps = strtol(optarg, &end, 10);
			if (*end || steps < 1 || steps > 1000000) {
				fprintf(stderr, "taco-train: --steps must be "
						"an integer in [1, 1000000]\n");
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!model_dir || !batch_file || optind != argc) {
		usage(stderr);
		return 2;
	}
	if (taco_model_load(model_dir, tk_cpu_ops(), &m, &err)) {
		fprintf(stderr, "taco-train: %s\n", err.msg);
		return 1;
	}
	if (load_batch(batch_file, &b, &tok, &tgt))
		goto out;
	printf("model %s: %s, %zu parameters, %d layers\n", model_dir,
	       taco_arch_name(m->cfg.arch), taco_model_param_count(m),
	       m->cfg.layers);
	for (long s = 1; s <= steps; s++) {
		taco_step_stats st;
		double g2 = 0, t0 = now();
		if (taco_model_step(m, &b, 0, sum_squares, &g2, &st, &err)) {
			fprintf(stderr, "taco-train: %s\n", err.msg);
			goto out;
		}
		printf("step %ld: loss %.6f over %lld targets, grad norm %.6g, "
		       "%.3f s\n",
		       s, st.loss, (long long)st.n_targets, sqrt(g2),
		       now() - t0);
	}
	rc = 0;
out:
	free(tok);
	free(tgt);
	taco_model_free(m);
	return rc;
}
