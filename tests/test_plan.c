/* test_plan.c: the memory plan against the allocator's measured peak of real
 * training runs, refusals with advice, and the headline arithmetic. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "job/job.h"
#include "plan/plan.h"
#include "safetensors/safetensors.h"
#include "testutil.h"
#include "train/train.h"

static double worst_error;

/* A job on the count task: model, batch, sequence length, accumulation,
 * optimizer, activation checkpointing; with eval_samples in extra, its
 * validation file too (evaluation's answers: their cache). */
static void make_job_x(taco_job *job, const char *model, int B, int T, int A,
		       int adamw, int ckpt, const char *extra, const char *out)
{
	char text[2048], val[1024] = "";
	taco_job_problems p;
	int r;

	if (strstr(extra, "eval_samples"))
		snprintf(val, sizeof(val),
			 ", \"validation\": \"%s/data/count_val.jsonl\"",
			 tu_fixture(""));
	snprintf(text, sizeof(text),
		 "{\"model\": \"%s/models/%s\", \"train\": "
		 "\"%s/data/count_train.jsonl\", \"output_dir\": \"%s\", "
		 "\"steps\": 2, \"batch_size\": %d, \"seq_len\": %d, "
		 "\"grad_accum\": %d, \"lr\": 0.01, \"optimizer\": \"%s\", "
		 "\"activation_checkpointing\": %s%s%s}",
		 tu_fixture(""), model, tu_fixture(""), out, B, T, A,
		 adamw ? "adamw" : "taco", ckpt ? "true" : "false", extra, val);
	r = taco_job_parse(text, strlen(text), NULL, job, &p);
	ck_assert_msg(r == 0, "%s", p.msg[0]);
}

static void make_job(taco_job *job, const char *model, int B, int T, int A,
		     int adamw, int ckpt, const char *out)
{
	make_job_x(job, model, B, T, A, adamw, ckpt, "", out);
}

#define BF16 ", \"precision\": \"bf16\""
#define OFFLOAD ", \"activation_offload\": \"on\""
#define CHUNKS ", \"mlp_chunks\": 3"
#define HOST ", \"weights\": \"host\""
#define SAMPLES ", \"eval_samples\": 3"

static const struct {
	const char *model;
	int B, T, A, adamw, ckpt;
	const char *extra;
} matrix[] = {
    {"llama_gqa", 2, 16, 1, 0, 1, ""},
    {"llama_gqa", 8, 24, 1, 0, 1, ""},
    {"llama_gqa", 4, 64, 4, 0, 1, ""},
    {"llama_gqa", 4, 24, 1, 1, 0, ""},
    {"qwen3_tied", 1, 128, 1, 0, 1, ""},
    {"qwen3_tied", 6, 24, 4, 1, 1, ""},
    {"qwen3_tied", 3, 32, 1, 0, 0, ""},
    {"llama_bf16", 8, 24, 1, 0, 1, ""},
    {"llama_bf16", 2, 256, 4, 0, 0, ""},
    {"mistral_sw", 4, 48, 1, 0, 1, ""},
    {"qwen2_bias", 16, 24, 1, 1, 1, ""},
    {"qwen2_bias", 2, 24, 4, 0, 0, ""},
    /* bf16 precision, offload, MLP blocks */
    {"llama_gqa", 8, 24, 1, 0, 1, BF16},
    {"llama_gqa", 4, 64, 4, 0, 1, BF16 CHUNKS},
    {"qwen3_tied", 3, 32, 1, 0, 0, BF16},
    {"qwen3_tied", 2, 64, 1, 0, 1, BF16 OFFLOAD CHUNKS},
    {"llama_bf16", 8, 24, 1, 0, 1, BF16 OFFLOAD},
    {"mistral_sw", 4, 48, 1, 0, 1, OFFLOAD},
    {"qwen2_bias", 16, 24, 1, 1, 1, BF16},
    {"qwen2_bias", 4, 24, 1, 0, 1, CHUNKS},
    /* OPT and GPT-NeoX */
    {"opt_pre", 4, 16, 1, 0, 1, ""},
    {"opt_post", 2, 16, 2, 0, 1, BF16},
    {"opt_post", 4, 16, 1, 0, 1, OFFLOAD CHUNKS},
    {"opt_pre", 2, 16, 1, 0, 0, BF16}, /* kept activations */
    {"neox_par", 4, 16, 1, 0, 1, BF16 CHUNKS},
    {"neox_par", 2, 16, 1, 1, 1, ""},
    {"neox_seq", 4, 16, 1, 0, 1, OFFLOAD},
    /* a mixture of experts: the N x k slots, a dense layer beside */
    {"qwen3_moe", 4, 16, 1, 0, 1, ""},
    {"qwen3_moe", 2, 32, 2, 1, 1, BF16},
    {"qwen3_moe", 2, 16, 1, 0, 0, BF16}, /* kept activations */
    {"qwen3_moe_aux", 4, 16, 1, 0, 1, OFFLOAD},
    {"gpt_oss", 2, 16, 1, 0, 1, BF16},
    /* weights streamed from host memory: the ring on the device, the
     * weights in the host pool */
    {"llama_gqa", 4, 24, 1, 0, 1, HOST},
    {"qwen3_tied", 2, 64, 1, 0, 1, BF16 OFFLOAD HOST},
    {"opt_post", 4, 16, 1, 0, 1, BF16 HOST},
    {"qwen3_moe", 4, 16, 1, 0, 1, HOST},
    {"gpt_oss", 2, 16, 1, 0, 1, BF16 HOST},
    {"neox_par", 2, 16, 1, 0, 1, HOST CHUNKS},
    /* evaluation's answers: their cache beside the step, through the
     * step's ring when weights stream */
    {"llama_gqa", 2, 16, 1, 0, 1, SAMPLES},
    {"llama_gqa", 4, 24, 1, 0, 1, HOST SAMPLES},
    {"qwen3_moe", 4, 16, 1, 0, 1, BF16 HOST SAMPLES},
    /* Phi-3: fused qkv_proj and gate_up_proj, LongRoPE */
    {"phi3_long", 4, 16, 1, 0, 1, ""},
    {"phi3_long", 2, 32, 1, 1, 0, BF16},
    {"phi3_short", 4, 16, 1, 0, 1, BF16 OFFLOAD HOST CHUNKS SAMPLES},
};

/* Runs two real training steps and compares the allocator's peak with the
 * plan: within 5%. */
START_TEST(test_plan_matches_measured_peak)
{
	const tk_ops *ops = tk_cpu_ops();
	char out[] = "/tmp/taco-plan-XXXXXX", cmd[64];
	taco_train_opts to = {.events_fd = -1};
	taco_job job;
	taco_plan p;
	taco_err err = {{0}};
	double rel;
	uint64_t peak, host, host0;
	int r;

	ck_assert_ptr_nonnull(mkdtemp(out));
	make_job_x(&job, matrix[_i].model, matrix[_i].B, matrix[_i].T,
		   matrix[_i].A, matrix[_i].adamw, matrix[_i].ckpt,
		   matrix[_i].extra, out);
	ck_assert_int_eq(
	    taco_plan_job(&job, TACO_BACKEND_CPU, 0, &p, NULL, NULL, &err), 0);
	ck_assert_uint_eq(ops->mem_current(), 0);
	ops->mem_reset_peak();
	host0 = ops->host_current();
	r = taco_train_run(&job, &to, &err);
	ck_assert_msg(r == 0, "%s", err.msg);
	peak = ops->mem_peak();
	host = ops->host_peak() - host0;
	ck_assert_uint_eq(ops->mem_current(), 0);
	rel = fabs((double)peak - (double)p.total) / (double)peak;
	if (rel > worst_error)
		worst_error = rel;
	fprintf(stderr,
		"plan %-10s B=%-2d T=%-3d A=%d %-5s %-4s %-4s off %d mlp %d "
		"plan %9llu B, measured %9llu B, error %.4f%%; host plan "
		"%llu, measured %llu\n",
		matrix[_i].model, matrix[_i].B, matrix[_i].T, matrix[_i].A,
		matrix[_i].adamw ? "adamw" : "taco",
		matrix[_i].ckpt ? "ckpt" : "keep",
		p.act_dtype == TK_BF16 ? "bf16" : "fp32", p.offload,
		p.mlp_chunks, (unsigned long long)p.total,
		(unsigned long long)peak, 100 * rel, (unsigned long long)p.host,
		(unsigned long long)host);
	ck_assert_msg(peak == p.total, "plan %llu vs measured %llu",
		      (unsigned long long)p.total, (unsigned long long)peak);
	ck_assert_msg(host == p.host, "host plan %llu vs measured %llu",
		      (unsigned long long)p.host, (unsigned long long)host);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", out);
	ck_assert_int_eq(system(cmd), 0);
	taco_job_free(&job);
}
END_TEST

/* A job over budget is refused before it loads, saying by how much and
 * what would fit. */
START_TEST(test_refusal_and_advice)
{
	taco_train_opts to = {.events_fd = -1};
	taco_job job;
	taco_plan p, small;
	taco_plan_input in;
	taco_model *shapes = NULL;
	taco_plan_advice a;
	taco_err err = {{0}};
	char out[] = "/tmp/taco-plan-XXXXXX", cmd[64];

	ck_assert_ptr_nonnull(mkdtemp(out));
	/* settings fixed: admission may not trade them for the batch */
	make_job_x(&job, "llama_gqa", 16, 256, 1, 0, 1,
		   ", \"activation_offload\": \"off\", \"mlp_chunks\": 1", out);
	ck_assert_int_eq(
	    taco_plan_job(&job, TACO_BACKEND_CPU, 0, &p, &in, &shapes, &err),
	    0);
	/* a budget between the plans of batch 4 and batch 5 */
	in.B = 4;
	ck_assert_int_eq(taco_plan_compute(shapes, &in, &small, &err), 0);
	to.memory_budget = small.total + 1000;
	ck_assert_int_eq(taco_train_run(&job, &to, &err), -ENOSPC);
	ck_assert_ptr_nonnull(strstr(err.msg, "more than the"));
	ck_assert_ptr_nonnull(strstr(err.msg, "batch_size 4 fits"));
	ck_assert_ptr_nonnull(strstr(err.msg, "seq_len"));
	in.B = 16;
	ck_assert_int_eq(
	    taco_plan_advise(shapes, &in, small.total + 1000, &a, &err), 0);
	ck_assert_int_eq(a.max_batch, 4);
	ck_assert_int_gt(a.max_seq_len, 2);
	ck_assert_int_lt(a.max_seq_len, 256);
	ck_assert_int_eq(a.freeze_embeddings_fits, 0);
	/* nothing fits in 1 kB */
	ck_assert_int_eq(taco_plan_advise(shapes, &in, 1000, &a, &err), 0);
	ck_assert_int_eq(a.max_batch, 0);
	ck_assert_int_eq(a.max_seq_len, 0);
	taco_model_free(shapes);
	taco_job_free(&job);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", out);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* The CUDA plan of a reference shape at 4 x 1024, bf16, TACO. */
static void cuda_plan(const char *config, int offload, int chunks, taco_plan *p,
		      taco_model **shapes)
{
	taco_config c;
	taco_plan_input in;
	taco_err err = {{0}};

	memset(&in, 0, sizeof(in));
	in.backend = TACO_BACKEND_CUDA;
	in.weight_dtype = TK_BF16;
	in.act_dtype = TK_BF16;
	in.B = 4;
	in.T = 1024;
	in.A = 1;
	in.step.offload = offload;
	in.step.mlp_chunks = chunks;
	in.step.overlap = 1; /* as taco_plan_input_from_job sets for CUDA */
	taco_optim_defaults(&in.optim);
	ck_assert_int_eq(taco_config_load(tu_fixture(config), &c, &err), 0);
	ck_assert_int_eq(taco_model_shapes(&c, shapes, &err), 0);
	ck_assert_msg(taco_plan_compute(*shapes, &in, p, &err) == 0, "%s",
		      err.msg);
}

/* The headline, for the engine as built: Qwen3-32B at batch 4 x 1024 on
 * CUDA in at most 70 GB, at most 68 GB with offload; the 70B shape fits
 * an H200 (150.7 GB) with offload. OPT-13B's optimizer state stays under
 * 0.13 GB. */
START_TEST(test_headline_plans)
{
	taco_config c;
	taco_model *m = NULL;
	taco_plan p;
	taco_optim_opts o;
	uint64_t state = 0;
	taco_err err = {{0}};

	cuda_plan("configs/qwen3-32b.json", 0, 0, &p, &m);
	ck_assert_uint_eq(p.term[TACO_PLAN_WEIGHTS], 2 * 32762123264ull);
	fprintf(stderr, "qwen3-32b 4 x 1024 CUDA plan: %.3f GB\n",
		(double)p.total / 1e9);
	ck_assert_uint_le(p.total, 70000000000ull);
	taco_model_free(m);
	cuda_plan("configs/qwen3-32b.json", 1, 0, &p, &m);
	fprintf(stderr, "qwen3-32b 4 x 1024 CUDA plan, offload: %.3f GB\n",
		(double)p.total / 1e9);
	ck_assert_uint_le(p.total, 68000000000ull);
	ck_assert_uint_gt(p.host, 2000000000ull);
	taco_model_free(m);
	cuda_plan("configs/llama-3.3-70b.json", 1, 0, &p, &m);
	fprintf(stderr, "llama-3.3-70b 4 x 1024 CUDA plan, offload: %.3f GB\n",
		(double)p.total / 1e9);
	ck_assert_uint_le(p.total, 150700000000ull);
	taco_model_free(m);

	/* shapes-only families: no plan, but the optimizer state counts */
	ck_assert_int_eq(
	    taco_config_load(tu_fixture("configs/opt-13b.json"), &c, &err), 0);
	ck_assert_int_eq(taco_model_shapes(&c, &m, &err), 0);
	taco_optim_defaults(&o);
	for (int i = 0; i < m->n_tensors; i++) {
		const taco_tensor *t = &m->tensors[i];
		state += taco_optim_tensor_bytes(taco_optim_kind_of(t, &o, 0),
						 t->ndim, t->shape[0],
						 t->shape[1], o.k);
	}
	ck_assert_uint_eq(state, 128450560ull);
	taco_model_free(m);
}
END_TEST

/* Admission picks the cheapest settings that fit: none, then offload,
 * then MLP blocks; a setting the job fixes is kept. */
START_TEST(test_admission_settings)
{
	char dir[] = "/tmp/taco-plan-adm-XXXXXX", cmd[8192];
	static uint16_t one;
	taco_st_tensor t = {
	    "model.embed_tokens.weight", TK_BF16, 2, {1, 1}, 2, &one};
	taco_job job;
	taco_plan p, none, off;
	taco_err err = {{0}};

	/* Qwen3-32B's config beside a one-element embedding (admission
	 * reads only config.json and the embedding's dtype) */
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s/config.json'",
		 tu_fixture("configs/qwen3-32b.json"), dir);
	ck_assert_int_eq(system(cmd), 0);
	snprintf(cmd, sizeof(cmd), "%s/model.safetensors", dir);
	ck_assert_int_eq(taco_st_write(cmd, &t, 1, NULL, &err), 0);
	make_job_x(&job, "llama_gqa", 4, 1024, 1, 0, 1, BF16, "/tmp/unused");
	snprintf(job.model, sizeof(job.model), "%s", dir);
	ck_assert_int_eq(
	    taco_plan_job(&job, TACO_BACKEND_CUDA, 0, &none, NULL, NULL, &err),
	    0);
	ck_assert_int_eq(none.offload, 0);
	ck_assert_int_eq(none.act_dtype, TK_BF16);
	/* a budget just under: offload */
	ck_assert_int_eq(taco_plan_job(&job, TACO_BACKEND_CUDA, none.total - 1,
				       &off, NULL, NULL, &err),
			 0);
	ck_assert_int_eq(off.offload, 1);
	ck_assert_int_eq(off.mlp_chunks, none.mlp_chunks);
	ck_assert_uint_lt(off.total, none.total);
	/* under that: more MLP blocks too */
	ck_assert_int_eq(taco_plan_job(&job, TACO_BACKEND_CUDA, off.total - 1,
				       &p, NULL, NULL, &err),
			 0);
	ck_assert_int_eq(p.offload, 1);
	ck_assert_int_gt(p.mlp_chunks, off.mlp_chunks);
	ck_assert_uint_lt(p.total, off.total);
	/* nothing fits: the first plan, for the refusal */
	ck_assert_int_eq(
	    taco_plan_job(&job, TACO_BACKEND_CUDA, 1000, &p, NULL, NULL, &err),
	    0);
	ck_assert_int_eq(p.offload, 0);
	ck_assert_uint_eq(p.total, none.total);
	taco_job_free(&job);
	/* the job fixes offload off: only MLP blocks are tried */
	make_job_x(&job, "llama_gqa", 4, 1024, 1, 0, 1,
		   BF16 ", \"activation_offload\": \"off\"", "/tmp/unused");
	snprintf(job.model, sizeof(job.model), "%s", dir);
	ck_assert_int_eq(taco_plan_job(&job, TACO_BACKEND_CUDA, none.total - 1,
				       &p, NULL, NULL, &err),
			 0);
	ck_assert_int_eq(p.offload, 0);
	ck_assert_int_gt(p.mlp_chunks, none.mlp_chunks);
	taco_job_free(&job);
	/* weights auto: on the device while they fit; below, the fewest
	 * streamed layers that fit, with offload; weights device: never */
	{
		taco_plan dev, str, less;
		taco_plan_input in;
		taco_model *shapes = NULL;
		make_job_x(&job, "llama_gqa", 4, 1024, 1, 0, 1, BF16,
			   "/tmp/unused");
		snprintf(job.model, sizeof(job.model), "%s", dir);
		ck_assert_int_eq(taco_plan_job(&job, TACO_BACKEND_CUDA,
					       80000000000ull, &dev, NULL, NULL,
					       &err),
				 0);
		ck_assert_int_eq(dev.stream_layers, 0);
		ck_assert_int_eq(taco_plan_job(&job, TACO_BACKEND_CUDA,
					       22000000000ull, &str, &in,
					       &shapes, &err),
				 0);
		ck_assert_int_gt(str.stream_layers, 3);
		ck_assert_int_lt(str.stream_layers, 64);
		ck_assert_int_eq(str.offload, 1);
		ck_assert_uint_le(str.total, 22000000000ull);
		ck_assert_uint_gt(str.host_weights, 40000000000ull);
		ck_assert_uint_gt(str.to_device, str.to_host);
		fprintf(stderr,
			"qwen3-32b 4 x 1024 CUDA plan at 22 GB: %d of 64 "
			"layers streamed, device %.3f GB, host %.3f GB, "
			"per step %.3f GB in, %.3f GB out\n",
			str.stream_layers, (double)str.total / 1e9,
			(double)str.host / 1e9, (double)str.to_device / 1e9,
			(double)str.to_host / 1e9);
		in.step.stream_layers--; /* one fewer does not fit */
		ck_assert_int_eq(taco_plan_compute(shapes, &in, &less, &err),
				 0);
		ck_assert_uint_gt(less.total, 22000000000ull);
		ck_assert_uint_gt(less.total, str.total);
		taco_model_free(shapes);
		taco_job_free(&job);
		make_job_x(&job, "llama_gqa", 4, 1024, 1, 0, 1,
			   BF16 ", \"weights\": \"device\"", "/tmp/unused");
		snprintf(job.model, sizeof(job.model), "%s", dir);
		ck_assert_int_eq(taco_plan_job(&job, TACO_BACKEND_CUDA,
					       22000000000ull, &str, NULL, NULL,
					       &err),
				 0);
		ck_assert_int_eq(str.stream_layers, 0);
		ck_assert_uint_gt(str.total, 22000000000ull);
		taco_job_free(&job);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
	/* fp32 is the CPU's default, bf16 CUDA's */
	make_job(&job, "llama_gqa", 8, 64, 1, 0, 1, "/tmp/unused");
	ck_assert_int_eq(
	    taco_plan_job(&job, TACO_BACKEND_CPU, 0, &p, NULL, NULL, &err), 0);
	ck_assert_int_eq(p.act_dtype, TK_F32);
	ck_assert_int_eq(
	    taco_plan_job(&job, TACO_BACKEND_CUDA, 0, &p, NULL, NULL, &err), 0);
	ck_assert_int_eq(p.act_dtype, TK_BF16);
	taco_job_free(&job);
}
END_TEST

START_TEST(test_parse_bytes)
{
	uint64_t b;

	ck_assert_int_eq(taco_parse_bytes("80GB", &b), 0);
	ck_assert_uint_eq(b, 80000000000ull);
	ck_assert_int_eq(taco_parse_bytes("80GiB", &b), 0);
	ck_assert_uint_eq(b, 80ull << 30);
	ck_assert_int_eq(taco_parse_bytes("512MB", &b), 0);
	ck_assert_uint_eq(b, 512000000ull);
	ck_assert_int_eq(taco_parse_bytes("1.5TB", &b), 0);
	ck_assert_uint_eq(b, 1500000000000ull);
	ck_assert_int_eq(taco_parse_bytes("12345", &b), 0);
	ck_assert_uint_eq(b, 12345);
	ck_assert_int_eq(taco_parse_bytes("80G", &b), -EINVAL);
	ck_assert_int_eq(taco_parse_bytes("x", &b), -EINVAL);
	ck_assert_int_eq(taco_parse_bytes("-1GB", &b), -EINVAL);
	ck_assert_int_eq(taco_parse_bytes("1e30", &b), -EINVAL);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("plan");
	TCase *tc = tcase_create("plan");
	int failed;

	tcase_set_timeout(tc, 600);
	tcase_add_loop_test(tc, test_plan_matches_measured_peak, 0,
			    sizeof(matrix) / sizeof(matrix[0]));
	tcase_add_test(tc, test_refusal_and_advice);
	tcase_add_test(tc, test_parse_bytes);
	tcase_add_test(tc, test_headline_plans);
	tcase_add_test(tc, test_admission_settings);
	suite_add_tcase(s, tc);
	/* one process, so worst_error is seen across the matrix */
	failed = tu_run(s, 1);
	fprintf(stderr, "plan vs measured peak: worst error %.4f%%\n",
		100 * worst_error);
	return failed;
}
