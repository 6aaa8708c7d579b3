/* engine_logprobs: the reference side of tests/gguf/check.py. Loads a
 * Hugging Face model directory with the engine (fp32 arithmetic, the
 * weights as stored: what test_golden checks against transformers) and,
 * for each prompt of the JSON on stdin,
 *   {"prompts": [[id, ...], ...], "generate": N, "eos": ID}
 * prints the log-softmax of every position's next token and the greedy
 * continuation of up to N tokens (ending after eos):
 *   {"logprobs": [[[V floats] per position] per prompt],
 *    "greedy": [[id, ...] per prompt]} */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/model.h"
#include "tk_ops.h"

static int forward(taco_model *m, const int32_t *ids, int T, float *logits,
		   taco_err *err)
{
	int32_t *targets = malloc((size_t)T * sizeof(int32_t));
	int r;

	for (int i = 0; i < T; i++)
		targets[i] = -100;
	taco_batch b = {1, T, ids, targets, NULL, 0};
	r = taco_model_logits(m, &b, logits, err);
	free(targets);
	return r;
}

static json_t *log_softmax(const float *x, int V)
{
	double mx = x[0], s = 0;
	json_t *a = json_array();

	for (int v = 1; v < V; v++)
		mx = fmax(mx, x[v]);
	for (int v = 0; v < V; v++)
		s += exp(x[v] - mx);
	for (int v = 0; v < V; v++)
		json_array_append_new(a, json_real(x[v] - mx - log(s)));
	return a;
}

int main(int argc, char **argv)
{
	taco_err err = {{0}};
	json_error_t je;
	taco_model *m;
	json_t *in, *p, *out, *lps, *greedy;
	size_t i, j;
	int V, maxT, n_gen, eos;

	if (argc != 2) {
		fprintf(stderr, "usage: engine_logprobs MODEL_DIR < JSON\n");
		return 2;
	}
	if (taco_model_load(argv[1], tk_cpu_ops(), &m, &err)) {
		fprintf(stderr, "engine_logprobs: %s\n", err.msg);
		return 1;
	}
	if (!(in = json_loadf(stdin, 0, &je))) {
		fprintf(stderr, "engine_logprobs: stdin: %s\n", je.text);
		return 1;
	}
	V = m->cfg.vocab;
	maxT = m->cfg.max_pos;
	n_gen = (int)json_integer_value(json_object_get(in, "generate"));
	eos = (int)json_integer_value(json_object_get(in, "eos"));
	lps = json_array();
	greedy = json_array();
	json_array_foreach(json_object_get(in, "prompts"), i, p)
	{
		int T = (int)json_array_size(p);
		int32_t *ids = malloc((size_t)(T + n_gen) * sizeof(int32_t));
		float *logits = malloc((size_t)(T + n_gen) * V * sizeof(float));
		json_t *pos = json_array(), *g = json_array();
		json_t *e;

		json_array_foreach(p, j, e) ids[j] =
		    (int32_t)json_integer_value(e);
		if (forward(m, ids, T, logits, &err))
			goto fail;
		for (int t = 0; t < T; t++)
			json_array_append_new(
			    pos, log_softmax(logits + (size_t)t * V, V));
		for (int k = 0; k < n_gen && T < maxT; k++) {
			const float *last = logits + (size_t)(T - 1) * V;
			int best = 0;
			for (int v = 1; v < V; v++)
				if (last[v] > last[best])
					best = v;
			json_array_append_new(g, json_integer(best));
			if (best == eos)
				break;
			ids[T++] = best;
			if (forward(m, ids, T, logits, &err))
				goto fail;
		}
		json_array_append_new(lps, pos);
		json_array_append_new(greedy, g);
		free(ids);
		free(logits);
		continue;
	fail:
		fprintf(stderr, "engine_logprobs: %s\n", err.msg);
		return 1;
	}
	out = json_pack("{soso}", "logprobs", lps, "greedy", greedy);
	json_dumpf(out, stdout, JSON_COMPACT | JSON_REAL_PRECISION(9));
	putchar('\n');
	json_decref(out);
	json_decref(in);
	taco_model_free(m);
	return 0;
}
