/* fuzz_dataset.c: the JSONL dataset reader (every format, chat templates,
 * preference pairs under both methods, validation) with the chat fixture's
 * tokenizer. TACO_FIXTURES or the
 * source tree locates it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "data/dataset.h"

static taco_tok *tok;
static char model_dir[4096];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *root = getenv("TACO_FIXTURES");

	(void)argc;
	(void)argv;
	snprintf(model_dir, sizeof(model_dir), "%s/models/chat_llama",
		 root ? root : "tests/fixtures");
	if (taco_tok_load(model_dir, &tok, NULL)) {
		fprintf(stderr, "fuzz_dataset: cannot load %s\n", model_dir);
		exit(1);
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("dataset", 0);
	char path[64];
	taco_dataset_opts o;
	taco_dataset_report *rep = malloc(sizeof(*rep));
	taco_data *d = NULL;
	taco_err err;

	if (fd < 0 || !rep) {
		free(rep);
		return 0;
	}
	if (write(fd, data, size) == (ssize_t)size) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		taco_dataset_defaults(&o);
		o.model_dir = model_dir;
		o.template_id = size % 4; /* auto, chatml, llama3, mistral */
		o.seq_len = 64;
		o.overlength = (int)(size % 3);
		o.train_on_all = size % 5 == 0;
		/* sft or dpo, apart from the template's choice */
		o.method = (size >> 2) & 1 ? TACO_METHOD_DPO : TACO_METHOD_SFT;
		if (taco_dataset_load(path, tok, &o, &d, rep, &err) == 0)
			taco_data_free(d);
	}
	close(fd);
	free(rep);
	return 0;
}
