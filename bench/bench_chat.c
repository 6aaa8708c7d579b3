/* bench_chat: reads a JSONL file of chats (OpenAI's format, tools
 * included) as a job's data: each rendered with the model's chat template,
 * tokenized, its trained tokens labelled (engine/data, single thread), and
 * prints one JSON line: {"chats", "tokens", "trained", "seconds"} with the
 * best time over --repeat passes. With --dump it prints each chat's ids
 * instead (space separated, one line a chat), and with --labels a second
 * line a chat: 1 for each trained token, 0 for the others.
 * bench/chat_template_bench.py runs transformers' apply_chat_template
 * beside it.
 *
 *   bench_chat MODEL_DIR CHATS.jsonl [--repeat N] [--dump [--labels]]
 *              [--seq-len N] [--kwargs JSON] [--now EPOCH] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data/dataset.h"
#include "tokenizer/tokenizer.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	taco_err err = {{0}};
	taco_tok *tok;
	taco_dataset_opts o;
	taco_dataset_report rep;
	taco_data *d = NULL;
	int repeat = 3, dump = 0, labels = 0, r = 1;
	double best = 1e30;

	if (argc < 3) {
		fprintf(stderr,
			"usage: %s MODEL_DIR CHATS.jsonl [--repeat N] [--dump] "
			"[--seq-len N]\n",
			argv[0]);
		return 2;
	}
	taco_dataset_defaults(&o);
	o.model_dir = argv[1];
	o.seq_len = 1 << 17;
	for (int i = 3; i < argc; i++) {
		if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
			repeat = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--seq-len") && i + 1 < argc)
			o.seq_len = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--dump"))
			dump = 1;
		else if (!strcmp(argv[i], "--labels"))
			labels = 1;
		else if (!strcmp(argv[i], "--kwargs") && i + 1 < argc)
			o.chat_kwargs = argv[++i];
		else if (!strcmp(argv[i], "--now") && i + 1 < argc)
			o.chat_now = atoll(argv[++i]);
	}
	if (taco_tok_load(argv[1], &tok, &err)) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	for (int k = 0; k < (dump ? 1 : repeat); k++) {
		double t0 = now(), dt;
		taco_data_free(d);
		d = NULL;
		if (taco_dataset_load(argv[2], tok, &o, &d, &rep, &err)) {
			fprintf(stderr, "%s\n", err.msg);
			goto out;
		}
		dt = now() - t0;
		best = dt < best ? dt : best;
	}
	if (dump) {
		for (size_t i = 0; i < d->n; i++) {
			for (size_t t = d->off[i]; t < d->off[i + 1]; t++)
				printf("%s%d", t > d->off[i] ? " " : "",
				       d->tokens[t]);
			printf("\n");
			for (size_t t = d->off[i]; labels && t < d->off[i + 1];
			     t++)
				printf("%s%d", t > d->off[i] ? " " : "",
				       d->labels[t] != -100);
			if (labels)
				printf("\n");
		}
	} else {
		printf("{\"chats\": %zu, \"tokens\": %lld, \"trained\": %lld, "
		       "\"seconds\": %.6f}\n",
		       d->n, (long long)rep.tokens,
		       (long long)rep.trainable_tokens, best);
	}
	r = 0;
out:
	taco_data_free(d);
	taco_tok_free(tok);
	return r;
}
