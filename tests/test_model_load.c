/* test_model_load.c: model directories: sharded checkpoints, and every way a
 * directory can disagree with its config. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "model/model_io.h"
#include "safetensors/safetensors.h"
#include "testutil.h"
#include "train/init.h"
#include "util/fsutil.h"

static char dir[256];

static void setup_dir(void)
{
	char cfg[300];

	snprintf(dir, sizeof(dir), "/tmp/taco-load-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(cfg, sizeof(cfg), "%s/config.json", dir);
	ck_assert_int_eq(
	    taco_copy_file(tu_fixture("models/llama_gqa/config.json"), cfg,
			   NULL),
	    0);
}

static void cleanup_dir(void)
{
	char cmd[300];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* The fixture's tensors, edited by `edit` (index of the tensor to change:
 * 0 drop, 1 reshape, 2 add an extra, 3 make it I64), written to dir. */
static void write_variant(int edit)
{
	taco_st_file *f = NULL;
	taco_err err = {{0}};
	taco_st_tensor t[64];
	char path[300];
	size_t n;
	int64_t extra[4] = {0};

	ck_assert_int_eq(taco_st_open(tu_fixture("models/llama_gqa/"
						 "model.safetensors"),
				      &f, &err),
			 0);
	n = taco_st_count(f);
	ck_assert_uint_lt(n, 63);
	for (size_t i = 0; i < n; i++)
		t[i] = *taco_st_get(f, i);
	/* edit the tensor named model.norm.weight */
	for (size_t i = 0; i < n; i++) {
		if (strcmp(t[i].name, "model.norm.weight"))
			continue;
		if (edit == 0) {
			t[i] = t[n - 1];
			n--;
		} else if (edit == 1) {
			t[i].shape[0] = 32;
			t[i].nbytes = 32 * 4;
		} else if (edit == 3) {
			t[i].dtype = TACO_ST_I64;
			t[i].shape[0] = 32;
		}
		break;
	}
	if (edit == 2)
		t[n++] = (taco_st_tensor){.name = "model.extra.weight",
					  .dtype = TK_F32,
					  .ndim = 1,
					  .shape = {4},
					  .nbytes = 16,
					  .data = extra};
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	ck_assert_int_eq(taco_st_write(path, t, n, NULL, &err), 0);
	taco_st_close(f);
}

static const char *const expect[] = {
    "tensor 'model.norm.weight' is missing",
    "tensor 'model.norm.weight' has shape [32], the config needs [64]",
    "tensor 'model.extra.weight' is not part of a LlamaForCausalLM",
    "tensor 'model.norm.weight' has dtype I64",
};

START_TEST(test_bad_directories)
{
	taco_model *m = NULL;
	taco_err err = {{0}};

	setup_dir();
	write_variant(_i);
	ck_assert_int_lt(taco_model_load(dir, tk_cpu_ops(), &m, &err), 0);
	ck_assert_ptr_null(m);
	ck_assert_msg(strstr(err.msg, expect[_i]) && strstr(err.msg, dir),
		      "got '%s'", err.msg);
	cleanup_dir();
}
END_TEST

/* Sharded weights give the same model as one file. */
START_TEST(test_sharded_same_loss)
{
	taco_model *a = NULL, *b = NULL;
	taco_err err = {{0}};
	int32_t tok[16], tgt[16];
	taco_step_stats sa, sb;
	char idx[300];

	setup_dir();
	ck_assert_int_eq(taco_model_load(tu_fixture("models/llama_gqa"),
					 tk_cpu_ops(), &a, &err),
			 0);
	ck_assert_int_eq(taco_model_save_sharded(a, dir, 100000, &err), 0);
	snprintf(idx, sizeof(idx), "%s/model.safetensors.index.json", dir);
	ck_assert_int_eq(access(idx, F_OK), 0);
	ck_assert_int_eq(taco_model_load(dir, tk_cpu_ops(), &b, &err), 0);
	for (int i = 0; i < 16; i++)
		tok[i] = (i * 37) % 256, tgt[i] = (i * 41 + 3) % 256;
	ck_assert_int_eq(
	    taco_model_eval(a, &(taco_batch){1, 16, tok, tgt, NULL, 0}, &sa, &err),
	    0);
	ck_assert_int_eq(
	    taco_model_eval(b, &(taco_batch){1, 16, tok, tgt, NULL, 0}, &sb, &err),
	    0);
	ck_assert(sa.loss == sb.loss);
	taco_model_free(a);
	taco_model_free(b);
	cleanup_dir();
}
END_TEST

/* Random initialisation in bf16: deterministic, and it round-trips. */
START_TEST(test_random_init_bf16)
{
	taco_config c;
	taco_model *a = NULL, *b = NULL;
	taco_err err = {{0}};
	char path[300];

	setup_dir();
	ck_assert_int_eq(taco_config_load(tu_fixture("models/qwen3_tied/"
						     "config.json"),
					  &c, &err),
			 0);
	ck_assert_int_eq(
	    taco_model_init_random(&c, tk_cpu_ops(), TK_BF16, 3, &a, &err), 0);
	ck_assert_int_eq(
	    taco_model_init_random(&c, tk_cpu_ops(), TK_BF16, 3, &b, &err), 0);
	for (int i = 0; i < a->n_tensors; i++)
		ck_assert_mem_eq(a->tensors[i].data, b->tensors[i].data,
				 a->tensors[i].numel * 2);
	snprintf(path, sizeof(path), "%s/w.safetensors", dir);
	ck_assert_int_eq(taco_model_save_weights(a, path, &err), 0);
	memset(b->tensors[0].data, 0, b->tensors[0].numel * 2);
	ck_assert_int_eq(taco_model_load_weights(b, path, &err), 0);
	ck_assert_mem_eq(a->tensors[0].data, b->tensors[0].data,
			 a->tensors[0].numel * 2);
	taco_model_free(a);
	taco_model_free(b);
	cleanup_dir();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("model_load");
	TCase *tc = tcase_create("model_load");

	tcase_add_loop_test(tc, test_bad_directories, 0, 4);
	tcase_add_test(tc, test_sharded_same_loss);
	tcase_add_test(tc, test_random_init_bf16);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
