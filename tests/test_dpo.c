/* test_dpo.c: the DPO step (taco_model_step_pref) against the engine's own
 * supervised step, on the tiny models of each family.
 *
 * With the reference log-probabilities equal to the policy's (the first
 * step of every DPO run), z = 0 and the loss is log 2; its gradient is
 * beta / (2P) (G_c - G_r), where G_c is the gradient of the chosen rows'
 * summed token loss (a supervised step on those targets alone, normalised
 * by 1) and G_r the rejected rows'. A reference moved by d scales both by
 * 2 sigmoid(-z). The transformers and TRL goldens are test_dpo_golden. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fcntl.h>
#include <jansson.h>
#include <unistd.h>

#include "job/job.h"
#include "model/model.h"
#include "testutil.h"
#include "train/train.h"

#define P 2
#define T 12

static const char *const models[] = {"llama_gqa", "qwen3_tied", "opt_pre",
				     "neox_par",  "qwen3_moe",	"gpt_oss"};

typedef struct pairs {
	int32_t tokens[2 * P * T], targets[2 * P * T];
} pairs;

/* Pair i: a prompt of 4 + i tokens, outputs of 5 and 3 + i tokens. */
static void make_pairs(pairs *p, int vocab)
{
	uint64_t s = 0x5eed;

	for (int row = 0; row < 2 * P; row++) {
		int i = row / 2, prompt = 4 + i;
		int len = prompt + (row % 2 ? 3 + i : 5);
		for (int t = 0; t < T; t++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			/* the rows of a pair share the prompt */
			p->tokens[row * T + t] =
			    t < prompt && row % 2 ? p->tokens[(row - 1) * T + t]
			    : t < len		  ? (int32_t)((s >> 33) % vocab)
						  : 0;
		}
		for (int t = 0; t < T; t++)
			p->targets[row * T + t] =
			    t + 1 >= prompt && t + 1 < len
				? p->tokens[row * T + t + 1]
				: -100;
	}
}

typedef struct sink {
	taco_model *m;
	float **g;
} sink;

static float *dense(void *ctx, taco_model *m, int id)
{
	sink *s = ctx;
	(void)m;
	return s->g[id];
}

static void sink_init(sink *s, taco_model *m)
{
	s->m = m;
	s->g = calloc((size_t)m->n_tensors, sizeof(float *));
	for (int i = 0; i < m->n_tensors; i++) {
		s->g[i] = m->ops->alloc(m->tensors[i].numel * sizeof(float));
		m->ops->memset0(s->g[i], m->tensors[i].numel * sizeof(float));
	}
}

static void sink_free(sink *s)
{
	for (int i = 0; i < s->m->n_tensors; i++)
		s->m->ops->free(s->g[i],
				s->m->tensors[i].numel * sizeof(float));
	free(s->g);
}

static taco_model *load(const char *name)
{
	char dir[4200];
	taco_model *m = NULL;
	taco_err err = {{0}};
	taco_step_opts so = {0};

	snprintf(dir, sizeof(dir), "%s/%s", tu_fixture("models"), name);
	ck_assert_msg(!taco_model_load_as(dir, tk_cpu_ops(), TK_F32, &m, &err),
		      "%s", err.msg);
	so.pref = 1;
	ck_assert_msg(!taco_model_set_step_opts(m, &so, &err), "%s", err.msg);
	return m;
}

/* The gradient of the summed token loss of the rows of one side (0:
 * chosen, 1: rejected) into g. */
static void side_grad(taco_model *m, const pairs *p, int side, sink *g)
{
	int32_t tg[2 * P * T];
	taco_batch b = {2 * P, T, p->tokens, tg, NULL, 0};
	taco_grad_sink sk = {NULL, dense, NULL, g, NULL};
	taco_step_stats st;
	taco_err err = {{0}};

	for (int i = 0; i < 2 * P * T; i++)
		tg[i] = (i / T) % 2 == side ? p->targets[i] : -100;
	ck_assert_msg(!taco_model_step(m, &b, 1, &sk, &st, &err), "%s",
		      err.msg);
}

/* Each tensor's gradient against factor (G_c - G_r): relative to its own
 * norm, or to 1e-3 of the whole gradient's for a gradient that is 0 in
 * exact arithmetic (OPT's key bias: softmax ignores a shift of every
 * score), whose computed value is rounding only. */
static void check_grads(taco_model *m, const char *name, double d,
			double factor, const sink *gd, const sink *gc,
			const sink *gr)
{
	double all = 0;

	for (int id = 0; id < m->n_tensors; id++)
		for (size_t k = 0; k < m->tensors[id].numel; k++) {
			double w =
			    factor * ((double)gc->g[id][k] - gr->g[id][k]);
			all += w * w;
		}
	all = sqrt(all);
	for (int id = 0; id < m->n_tensors; id++) {
		size_t n = m->tensors[id].numel;
		double num = 0, den = 0;
		for (size_t k = 0; k < n; k++) {
			double w =
			    factor * ((double)gc->g[id][k] - gr->g[id][k]);
			num += (gd->g[id][k] - w) * (gd->g[id][k] - w);
			den += w * w;
		}
		num = sqrt(num);
		den = fmax(sqrt(den), 1e-3 * all);
		ck_assert_msg(num / den < 1e-5, "%s %s (d %g): rel err %g",
			      name, m->tensors[id].name, d, num / den);
	}
}

START_TEST(test_pref_step_matches_sft)
{
	const char *name = models[_i];
	taco_model *m = load(name);
	pairs p;
	taco_batch b = {2 * P, T, NULL, NULL, NULL, 0};
	double ref[2 * P], logp[2 * P], beta = 0.5;
	taco_step_stats st;
	taco_err err = {{0}};
	sink gd, gc, gr;

	make_pairs(&p, m->cfg.vocab);
	b.tokens = p.tokens;
	b.targets = p.targets;
	ck_assert_msg(!taco_model_score(m, &b, ref, &err), "%s", err.msg);
	for (int r = 0; r < 2 * P; r++)
		ck_assert(ref[r] < 0);

	for (int shifted = 0; shifted < 2; shifted++) {
		/* the chosen rows' reference moved by d: z = -beta d */
		double d = shifted ? 3.0 : 0.0, want = 0, factor;
		double rf[2 * P];
		taco_pref pr = {beta, P, rf};
		taco_grad_sink sk;

		for (int r = 0; r < 2 * P; r++)
			rf[r] = ref[r] + (r % 2 ? 0 : d);
		sink_init(&gd, m);
		sink_init(&gc, m);
		sink_init(&gr, m);
		sk = (taco_grad_sink){NULL, dense, NULL, &gd, NULL};
		ck_assert_msg(
		    !taco_model_step_pref(m, &b, &pr, &sk, &st, logp, &err),
		    "%s: %s", name, err.msg);
		/* the step's policy log-probabilities are the reference
		 * pass's, bit for bit */
		for (int r = 0; r < 2 * P; r++)
			ck_assert_msg(logp[r] == ref[r],
				      "%s row %d: %.17g %.17g", name, r,
				      logp[r], ref[r]);
		want = log1p(exp(beta * d)); /* softplus(-z) */
		ck_assert_msg(fabs(st.loss - want) < 1e-12,
			      "%s: loss %.17g, want %.17g", name, st.loss,
			      want);
		side_grad(m, &p, 0, &gc);
		side_grad(m, &p, 1, &gr);
		/* dL/dlogp_c = -beta sigmoid(-z) / P for every pair */
		factor = beta / (1.0 + exp(-beta * d)) / P;
		check_grads(m, name, d, factor, &gd, &gc, &gr);
		sink_free(&gd);
		sink_free(&gc);
		sink_free(&gr);
	}
	taco_model_free(m);
}
END_TEST

START_TEST(test_pref_refuses)
{
	taco_model *m = load("llama_gqa");
	pairs p;
	taco_batch b = {2 * P - 1, T, NULL, NULL, NULL, 0};
	double ref[2 * P] = {-1, -1, -1, -1};
	taco_pref pr = {0.1, P, ref};
	taco_step_stats st;
	taco_err err = {{0}};
	taco_step_opts so = {0};

	make_pairs(&p, m->cfg.vocab);
	b.tokens = p.tokens;
	b.targets = p.targets;
	/* an odd row count is not pairs */
	ck_assert_int_eq(
	    taco_model_step_pref(m, &b, &pr, NULL, &st, NULL, &err), -EINVAL);
	b.B = 2 * P;
	pr.beta = 0;
	ck_assert_int_eq(
	    taco_model_step_pref(m, &b, &pr, NULL, &st, NULL, &err), -EINVAL);
	pr.beta = 0.1;
	ck_assert_int_eq(taco_model_set_step_opts(m, &so, &err), 0);
	ck_assert_int_eq(
	    taco_model_step_pref(m, &b, &pr, NULL, &st, NULL, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "pref"));
	taco_model_free(m);
}
END_TEST

/* The loss and its derivative in double, also where exp would overflow. */
START_TEST(test_pref_loss)
{
	double logp[6] = {-1, -2, -100, 0, 0, -900};
	double ref[6] = {-1.5, -1.5, 0, -100, -900, 0};
	double loss[3], d[6];

	taco_pref_loss(2.0, logp, ref, 3, 4, loss, d);
	/* z = 2 ((0.5) - (-0.5)) = 2 */
	ck_assert(fabs(loss[0] - log1p(exp(-2.0))) < 1e-15);
	ck_assert(fabs(d[0] + 2.0 / (1 + exp(2.0)) / 4) < 1e-15);
	ck_assert(d[1] == -d[0]);
	/* z = 2 (-100 - 100) = -400: loss 400, d = -beta / 4 */
	ck_assert(fabs(loss[1] - 400.0) < 1e-9);
	ck_assert(fabs(d[2] + 0.5) < 1e-15);
	/* z = 2 (900 + 900) = 3600: loss ~0, d ~0, finite */
	ck_assert(isfinite(loss[2]) && loss[2] >= 0 && loss[2] < 1e-300);
	ck_assert(isfinite(d[4]) && fabs(d[4]) < 1e-300);
}
END_TEST

/* ---- taco-train's DPO runs --------------------------------------------- */

typedef struct run {
	char dir[64], events[128];
	taco_job job;
} run;

static void run_init(run *r)
{
	char text[2048], p[160];
	taco_job_problems probs;

	snprintf(r->dir, sizeof(r->dir), "/tmp/taco-dpo-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(r->dir));
	snprintf(p, sizeof(p), "%s/train.jsonl", r->dir);
	tu_write_count_pairs(p, 24, 7);
	snprintf(p, sizeof(p), "%s/val.jsonl", r->dir);
	tu_write_count_pairs(p, 8, 99);
	snprintf(r->events, sizeof(r->events), "%s/events.jsonl", r->dir);
	snprintf(text, sizeof(text),
		 "{\"model\": \"%s\", \"train\": "
		 "\"train.jsonl\", \"validation\": \"val.jsonl\", "
		 "\"output_dir\": \"out\", \"steps\": 12, \"batch_size\": 4, "
		 "\"seq_len\": 40, \"lr\": 0.01, \"method\": \"dpo\", "
		 "\"dpo\": {\"beta\": 0.1}, \"eval_every\": 6, "
		 "\"checkpoint_every\": 6, \"log_every\": 1}",
		 tu_fixture("../../examples/demo/model"));
	ck_assert_msg(
	    !taco_job_parse(text, strlen(text), r->dir, &r->job, &probs), "%s",
	    probs.msg[0]);
}

static int run_train(run *r, int resume, taco_err *err)
{
	int fd = open(r->events, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	taco_train_opts o = {.resume = resume, .events_fd = fd};
	int e;

	ck_assert_int_ge(fd, 0);
	e = taco_train_run(&r->job, &o, err);
	close(fd);
	return e;
}

/* The events named name, in order (a JSON array the caller owns). */
static json_t *events_named(const run *r, const char *name)
{
	FILE *f = fopen(r->events, "r");
	json_t *a = json_array();
	char line[1 << 14];

	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f)) {
		json_t *e = json_loads(line, 0, NULL);
		ck_assert_ptr_nonnull(e);
		if (!strcmp(json_string_value(json_object_get(e, "event")),
			    name))
			json_array_append(a, e);
		json_decref(e);
	}
	fclose(f);
	return a;
}

static double num(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	ck_assert_msg(json_is_number(v), "no %s", key);
	return json_number_value(v);
}

START_TEST(test_dpo_run_resumes_bit_exact)
{
	run r;
	taco_err err = {{0}};
	char a[256], b[256], cmd[600];
	json_t *ev, *e, *started;
	size_t la, lb;
	char *ma, *mb;

	run_init(&r);
	ck_assert_msg(run_train(&r, 0, &err) == TACO_TRAIN_FINISHED, "%s",
		      err.msg);
	/* the reference pass over both sets */
	ev = events_named(&r, "reference");
	ck_assert_uint_eq(json_array_size(ev), 2);
	ck_assert_int_eq(num(json_array_get(ev, 0), "total_pairs"), 24);
	ck_assert_int_eq(num(json_array_get(ev, 1), "total_pairs"), 8);
	/* the time estimate: none of the pass is left at its end, and the
	 * training that follows has a positive estimate */
	e = json_array_get(ev, 1);
	ck_assert(num(e, "eta_s") == 0);
	ck_assert(num(e, "train_eta_s") > 0);
	ck_assert(num(json_array_get(ev, 0), "eta_s") >= 0);
	json_decref(ev);
	/* step 1 scores its pairs with the starting weights: the policy is
	 * the reference, bit for bit, so every pair's loss is log 2 */
	ev = events_named(&r, "progress");
	e = json_array_get(ev, 0);
	ck_assert_int_eq(num(e, "step"), 1);
	ck_assert_msg(num(e, "loss") == log(2.0), "loss %.17g", num(e, "loss"));
	ck_assert(num(e, "rewards/chosen") == 0 &&
		  num(e, "rewards/margins") == 0);
	/* the plan is what the run used (the CPU's count is exact) */
	started = events_named(&r, "started");
	ck_assert_int_eq(
	    num(json_array_get(ev, json_array_size(ev) - 1), "mem_peak_bytes"),
	    num(json_array_get(started, 0), "planned_bytes"));
	json_decref(started);
	json_decref(ev);
	ev = events_named(&r, "eval");
	ck_assert_uint_eq(json_array_size(ev), 2);
	ck_assert_int_eq(num(json_array_get(ev, 1), "val_pairs"), 8);
	num(json_array_get(ev, 1), "val_rewards/accuracies");
	json_decref(ev);

	/* resumed at step 6 it reads the reference back and ends with the
	 * same bytes */
	snprintf(a, sizeof(a), "%s/out/model/model.safetensors", r.dir);
	ma = tu_read_file(a, &la);
	snprintf(cmd, sizeof(cmd),
		 "rm -rf %s/out/model %s/out/checkpoints/step-00000012", r.dir,
		 r.dir);
	ck_assert_int_eq(system(cmd), 0);
	ck_assert_msg(run_train(&r, 1, &err) == TACO_TRAIN_FINISHED, "%s",
		      err.msg);
	ev = events_named(&r, "reference");
	ck_assert_uint_eq(json_array_size(ev), 0);
	json_decref(ev);
	mb = tu_read_file(a, &lb);
	ck_assert(ma && mb && la == lb && !memcmp(ma, mb, la));
	free(ma);
	free(mb);

	/* a checkpoint without its reference cannot go on: the weights are
	 * no longer the starting ones */
	snprintf(b, sizeof(b), "%s/out/reference_logps.json", r.dir);
	ck_assert_int_eq(unlink(b), 0);
	ck_assert_int_lt(run_train(&r, 1, &err), 0);
	ck_assert_ptr_nonnull(strstr(err.msg, "reference_logps.json"));
	taco_job_free(&r.job);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", r.dir);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("dpo");
	TCase *tc = tcase_create("step");

	tcase_set_timeout(tc, 600);
	tcase_add_loop_test(tc, test_pref_step_matches_sft, 0,
			    (int)(sizeof(models) / sizeof(models[0])));
	tcase_add_test(tc, test_pref_refuses);
	tcase_add_test(tc, test_pref_loss);
	tcase_add_test(tc, test_dpo_run_resumes_bit_exact);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(suite(), 0);
}
