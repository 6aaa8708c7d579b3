/* test_cuda_train.c: the training loop (taco_train_run, what taco-train
 * --backend runs) on the CUDA backend against the CPU one: 20 TACO steps of
 * the count task on a fixture model of each family (Llama, OPT post-LN
 * with projections, GPT-NeoX parallel), fp32 and bf16, losses compared
 * step by step.
 *
 * Exits 77 (skipped) when tk_cuda_open fails. TACO_CUDA_TRAIN_SELFTEST=1
 * runs the comparison with the CPU backend on both sides (losses then
 * agree exactly), to check this test on a machine without a GPU. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "job/job.h"
#include "testutil.h"
#include "train/train.h"

#define STEPS 20

/* Step 1 is a forward and backward of the same weights: only GEMM rounding
 * differs (bf16 tensor-core operands, 2^-9 relative each, fp32 sums), which
 * should move the ~6.3 loss by well under 5e-3 relative (an estimate: this
 * was written on a machine without a GPU). Later steps also differ by the
 * trajectory: a TACO slot can go to another entry of a column on a near
 * tie, so the weights drift apart by a few bf16 ulps; 2e-2 is meant to
 * bound that over 20 steps (the loss itself falls by 14% over them). */
#define TOL_FIRST 5e-3
#define TOL_STEP 2e-2
/* bf16 precision on both backends: the bound, absolute, at every
 * step (the backends round at the same points; only summation order and
 * the trajectory differ). */
#define TOL_BF16 1e-2

static const tk_ops *cuda;
static int selftest;
static char tmpdir[256];

/* What one run reports through its events. */
typedef struct result {
	double loss[STEPS + 1];	 /* progress loss by step */
	int64_t peak[STEPS + 1]; /* mem_peak_bytes by step */
	int64_t params;
	char backend[16];
	int steps_seen, finished;
} result;

static const char *const precisions[] = {"fp32", "bf16"};
static int precision; /* index into precisions: the running test's */
/* a model of each family */
static const char *const models[] = {"models/llama_bf16", "models/opt_post",
				     "models/neox_par"};
static int model_i; /* index into models: the running test's */

/* DPO: the count task as preferences (the right count over one off by
 * one), on the demo model (a tokenizer, a chat template). */
static int dpo;

static const char *write_pairs(void)
{
	static char path[512];

	snprintf(path, sizeof(path), "%s/pairs.jsonl", tmpdir);
	tu_write_count_pairs(path, 64, 7);
	return path;
}

static const char *write_job(const char *name)
{
	static char path[512];
	char model[4096], data[4096];
	FILE *f;

	/* tu_fixture returns one static buffer */
	snprintf(
	    model, sizeof(model), "%s",
	    tu_fixture(dpo ? "../../examples/demo/model" : models[model_i]));
	snprintf(data, sizeof(data), "%s",
		 dpo ? write_pairs() : tu_fixture("data/count_train.jsonl"));
	snprintf(path, sizeof(path), "%s/%s.json", tmpdir, name);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f,
		"{\"model\": \"%s\", \"train\": \"%s\", \"output_dir\": "
		"\"%s/%s\", \"steps\": %d, \"batch_size\": 8, \"seq_len\": "
		"24, \"lr\": %g, \"schedule\": \"linear\", \"optimizer\": "
		"\"taco\", \"log_every\": 1, \"precision\": \"%s\"%s}\n",
		model, data, tmpdir, name, STEPS, dpo ? 0.003 : 0.03,
		precisions[precision],
		dpo ? ", \"method\": \"dpo\", \"dpo\": {\"beta\": 0.1}" : "");
	fclose(f);
	return path;
}

static void parse_events(const char *path, result *res)
{
	char *text = tu_read_file(path, NULL), *line, *save = NULL;

	ck_assert_ptr_nonnull(text);
	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		json_t *e = json_loads(line, 0, NULL);
		const char *kind;
		json_int_t s;

		ck_assert_msg(e != NULL, "bad event line: %s", line);
		kind = json_string_value(json_object_get(e, "event"));
		ck_assert_ptr_nonnull(kind);
		if (!strcmp(kind, "started")) {
			res->params = json_integer_value(
			    json_object_get(e, "parameters"));
			snprintf(
			    res->backend, sizeof(res->backend), "%s",
			    json_string_value(json_object_get(e, "backend")));
		} else if (!strcmp(kind, "progress")) {
			s = json_integer_value(json_object_get(e, "step"));
			ck_assert(s >= 1 && s <= STEPS);
			res->loss[s] =
			    json_real_value(json_object_get(e, "loss"));
			res->peak[s] = json_integer_value(
			    json_object_get(e, "mem_peak_bytes"));
			res->steps_seen++;
		} else if (!strcmp(kind, "finished")) {
			res->finished = 1;
		} else if (!strcmp(kind, "error")) {
			ck_abort_msg(
			    "run failed: %s",
			    json_string_value(json_object_get(e, "message")));
		}
		json_decref(e);
	}
	free(text);
}

static void train(const char *name, const tk_ops *ops, result *res)
{
	char events[512];
	taco_job job;
	taco_job_problems probs;
	taco_err err = {{0}};
	taco_train_opts o = {.events_fd = -1, .ops = ops};
	int r;

	memset(res, 0, sizeof(*res));
	ck_assert_int_eq(taco_job_load(write_job(name), &job, &probs), 0);
	snprintf(events, sizeof(events), "%s/%s.events", tmpdir, name);
	o.events_fd = open(events, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ck_assert_int_ge(o.events_fd, 0);
	r = taco_train_run(&job, &o, &err);
	close(o.events_fd);
	taco_job_free(&job);
	ck_assert_msg(r == TACO_TRAIN_FINISHED, "%s run: %d %s", name, r,
		      err.msg);
	parse_events(events, res);
	ck_assert_int_eq(res->steps_seen, STEPS);
	ck_assert(res->finished);
}

/* DPO (method dpo, 8 pairs a step, on the demo model) on both backends:
 * the first step's loss is log 2 on each (its log-probabilities are the
 * reference pass's: the same kernels at the same shape), and the losses
 * after it follow the CPU's. */
START_TEST(test_dpo_losses_match_cpu)
{
	result cpu, gpu;

	precision = _i;
	dpo = 1;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/taco-cuda-dpo-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	train("cpu", tk_cpu_ops(), &cpu);
	train("cuda", cuda, &gpu);
	ck_assert_str_eq(gpu.backend, selftest ? "cpu" : "cuda");
	ck_assert_msg(fabs(cpu.loss[1] - log(2.0)) < 1e-12 &&
			  fabs(gpu.loss[1] - log(2.0)) < 1e-12,
		      "first DPO loss: cpu %.17g, %s %.17g", cpu.loss[1],
		      gpu.backend, gpu.loss[1]);
	for (int s = 1; s <= STEPS; s++) {
		double diff = fabs(gpu.loss[s] - cpu.loss[s]);
		fprintf(stderr, "dpo %s step %2d: cpu %.6f %s %.6f diff %.2e\n",
			precisions[precision], s, cpu.loss[s], gpu.backend,
			gpu.loss[s], diff);
		ck_assert(isfinite(gpu.loss[s]));
		ck_assert_msg(diff <= (precision ? TOL_BF16 : TOL_STEP),
			      "dpo step %d: cpu loss %.6f, cuda %.6f", s,
			      cpu.loss[s], gpu.loss[s]);
	}
	ck_assert_ptr_null(tk_cuda_last_error());
	{
		char cmd[512];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
		ck_assert_int_eq(system(cmd), 0);
	}
	dpo = 0;
}
END_TEST

START_TEST(test_losses_match_cpu)
{
	result cpu, gpu;
	double worst = 0;
	int worst_step = 1;

	precision = _i % 2;
	model_i = _i / 2;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/taco-cuda-train-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	train("cpu", tk_cpu_ops(), &cpu);
	train("cuda", cuda, &gpu);
	ck_assert_str_eq(cpu.backend, "cpu");
	ck_assert_str_eq(gpu.backend, selftest ? "cpu" : "cuda");
	ck_assert_int_eq(cpu.params, gpu.params);
	for (int s = 1; s <= STEPS; s++) {
		double rel = fabs(gpu.loss[s] - cpu.loss[s]) / cpu.loss[s];
		double diff = fabs(gpu.loss[s] - cpu.loss[s]);
		fprintf(stderr,
			"%s %s step %2d: cpu %.6f %s %.6f diff %.2e rel "
			"%.2e\n",
			models[model_i], precisions[precision], s, cpu.loss[s],
			gpu.backend, gpu.loss[s], diff, rel);
		ck_assert(isfinite(gpu.loss[s]));
		if (precision == 1)
			ck_assert_msg(diff <= TOL_BF16,
				      "bf16 step %d: cpu loss %.6f, cuda %.6f "
				      "(diff %.2e)",
				      s, cpu.loss[s], gpu.loss[s], diff);
		else
			ck_assert_msg(rel <= (s == 1 ? TOL_FIRST : TOL_STEP),
				      "step %d: cpu loss %.6f, cuda %.6f (rel "
				      "%.2e)",
				      s, cpu.loss[s], gpu.loss[s], rel);
		if (rel > worst) {
			worst = rel;
			worst_step = s;
		}
		/* at least the bf16 weights are resident */
		ck_assert_msg(gpu.peak[s] >= 2 * gpu.params,
			      "step %d: peak %lld B below the weights' %lld", s,
			      (long long)gpu.peak[s],
			      (long long)(2 * gpu.params));
	}
	fprintf(stderr,
		"%s losses %.4f -> %.4f (cpu), %.4f -> %.4f (%s); worst rel "
		"diff %.2e at step %d; peak %lld B\n",
		precisions[precision], cpu.loss[1], cpu.loss[STEPS],
		gpu.loss[1], gpu.loss[STEPS], gpu.backend, worst, worst_step,
		(long long)gpu.peak[STEPS]);
	/* it learned: the comparison is not of two stuck runs (the loss of
	 * one batch is noisy: the mean of the last 5 steps; 0.87 on the CPU) */
	{
		double tail = 0;
		for (int s = STEPS - 4; s <= STEPS; s++)
			tail += gpu.loss[s] / 5;
		ck_assert_msg(tail < 0.95 * gpu.loss[1],
			      "loss %.4f at step 1, %.4f over the last 5",
			      gpu.loss[1], tail);
	}
	ck_assert_ptr_null(tk_cuda_last_error());
	{
		char cmd[512];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
		ck_assert_int_eq(system(cmd), 0);
	}
}
END_TEST

int main(void)
{
	char why[256] = "";
	Suite *s;
	TCase *tc;

	selftest = getenv("TACO_CUDA_TRAIN_SELFTEST") &&
		   !strcmp(getenv("TACO_CUDA_TRAIN_SELFTEST"), "1");
	if (selftest) {
		cuda = tk_cpu_ops();
	} else if (tk_cuda_open(&cuda, why, sizeof(why))) {
		printf("test_cuda_train: skipped: %s\n", why);
		return 77;
	}
	s = suite_create("cuda_train");
	tc = tcase_create("cuda_train");
	tcase_set_timeout(tc, 600);
	tcase_add_loop_test(tc, test_losses_match_cpu, 0,
			    2 * (int)(sizeof(models) / sizeof(models[0])));
	tcase_add_loop_test(tc, test_dpo_losses_match_cpu, 0, 2);
	suite_add_tcase(s, tc);
	/* no fork: the CUDA context opened here does not survive one */
	return tu_run(s, 1);
}
