/* test_dpo_golden.c: the CPU preference (DPO) step against TRL 1.16.
 *
 * tests/fixtures/gen_dpo.py wrote, for four of the golden models, one batch
 * of 2 pairs with each row's summed log-probability, the reference model's,
 * the loss TRL's DPOTrainer computes from them (sigmoid, mean over the
 * pairs) and every parameter's gradient of that loss (torch autograd). */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "safetensors/safetensors.h"
#include "testutil.h"

static const char *const fixtures[] = {"llama_gqa", "qwen3_tied", "opt_pre",
				       "neox_par"};

#define MAX_ROWS 8

typedef struct dpo_fixture {
	taco_model *m;
	int B, T, P;
	int32_t *tokens, *targets;
	double beta, loss, loss_bf16;
	double policy[MAX_ROWS], ref[MAX_ROWS]; /* rows 2i, 2i + 1: pair i */
	int64_t n_targets;
	taco_st_file *grads;
	/* gradients that are 0 in exact arithmetic (OPT's key biases): what
	 * torch gives is rounding noise */
	char zero[16][96];
	int n_zero;
} dpo_fixture;

static void doubles(json_t *a, double *out, int n, const char *what)
{
	ck_assert_msg((int)json_array_size(a) == n, "%s: %zu values, not %d",
		      what, json_array_size(a), n);
	for (int i = 0; i < n; i++)
		out[i] = json_number_value(json_array_get(a, i));
}

/* The fixture with the model in dtype (TK_F32, TK_BF16), its schedule so
 * (pref set here) applied. */
static void fixture_load(dpo_fixture *f, const char *name, int dtype,
			 taco_step_opts so)
{
	char dir[4096], path[4200];
	json_error_t jerr;
	json_t *j, *z;
	taco_err err = {{0}};
	int r, T;

	memset(f, 0, sizeof(*f));
	snprintf(dir, sizeof(dir), "%s", tu_fixture("models"));
	snprintf(dir + strlen(dir), sizeof(dir) - strlen(dir), "/%s", name);
	r = taco_model_load_as(dir, tk_cpu_ops(), dtype, &f->m, &err);
	ck_assert_msg(r == 0, "%s: %s", name, err.msg);
	so.pref = 1;
	r = taco_model_set_step_opts(f->m, &so, &err);
	ck_assert_msg(r == 0, "%s: %s", name, err.msg);

	snprintf(path, sizeof(path), "%s/dpo.json", dir);
	j = json_load_file(path, 0, &jerr);
	ck_assert_msg(j != NULL, "%s: %s", path, jerr.text);
	f->tokens = tu_int_matrix(json_object_get(j, "tokens"), &f->B, &f->T);
	f->targets = tu_int_matrix(json_object_get(j, "targets"), &f->B, &T);
	ck_assert_int_eq(T, f->T);
	f->P = (int)json_integer_value(json_object_get(j, "pairs"));
	ck_assert_int_eq(f->B, 2 * f->P);
	ck_assert_int_le(f->B, MAX_ROWS);
	f->beta = json_number_value(json_object_get(j, "beta"));
	f->loss = json_number_value(json_object_get(j, "loss"));
	f->loss_bf16 = json_number_value(json_object_get(j, "loss_bf16"));
	f->n_targets = json_integer_value(json_object_get(j, "n_targets"));
	doubles(json_object_get(j, "policy_logps"), f->policy, f->B,
		"policy_logps");
	doubles(json_object_get(j, "ref_logps"), f->ref, f->B, "ref_logps");
	z = json_object_get(j, "zero_in_exact_arithmetic");
	for (size_t i = 0; z && i < json_array_size(z) && i < 16; i++)
		snprintf(f->zero[f->n_zero++], sizeof(f->zero[0]), "%s",
			 json_string_value(json_array_get(z, i)));
	json_decref(j);

	snprintf(path, sizeof(path), "%s/dpo.safetensors", dir);
	r = taco_st_open(path, &f->grads, &err);
	ck_assert_msg(r == 0, "%s", err.msg);
}

static void fixture_free(dpo_fixture *f)
{
	taco_model_free(f->m);
	taco_st_close(f->grads);
	free(f->tokens);
	free(f->targets);
}

/* Rows [row0, row0 + rows) of the fixture's batch. */
static taco_batch rows_of(const dpo_fixture *f, int row0, int rows)
{
	size_t at = (size_t)row0 * (size_t)f->T;

	return (taco_batch){rows, f->T, f->tokens + at, f->targets + at,
			    NULL, 0};
}

/* Dense gradient sink: the engine adds every piece into one backend
 * buffer per tensor (gradient accumulation's mode). */
typedef struct dense {
	taco_model *m;
	float **buf;
} dense;

static float *dense_of(void *ctx, taco_model *m, int id)
{
	(void)m;
	return ((dense *)ctx)->buf[id];
}

static void dense_init(dense *d, taco_model *m)
{
	d->m = m;
	d->buf = calloc((size_t)m->n_tensors, sizeof(float *));
	ck_assert_ptr_nonnull(d->buf);
	for (int i = 0; i < m->n_tensors; i++) {
		size_t n = m->tensors[i].numel * sizeof(float);
		d->buf[i] = m->ops->alloc(n);
		ck_assert_ptr_nonnull(d->buf[i]);
		m->ops->memset0(d->buf[i], n);
	}
}

static taco_grad_sink dense_sink(dense *d)
{
	return (taco_grad_sink){NULL, dense_of, NULL, d, NULL};
}

static void dense_free(dense *d)
{
	for (int i = 0; i < d->m->n_tensors; i++)
		d->m->ops->free(d->buf[i], d->m->tensors[i].numel * 4);
	free(d->buf);
}

/* The worst gradient error against the fixture (tu_rel_err per tensor, as
 * test_golden.c measures it; the zero_in_exact_arithmetic tensors by their
 * largest element, both sides being rounding noise), with its tensor. */
static double grad_err(const dpo_fixture *f, dense *d, double tol,
		       const char **worst_name)
{
	taco_model *m = f->m;
	double worst = 0;

	*worst_name = "";
	for (int i = 0; i < m->n_tensors; i++) {
		const taco_tensor *t = &m->tensors[i];
		const taco_st_tensor *ref;
		char gname[160];
		float *g = malloc(t->numel * sizeof(float));
		double e;

		ck_assert_ptr_nonnull(g);
		m->ops->download(g, d->buf[i], t->numel * sizeof(float));
		snprintf(gname, sizeof(gname), "grad.%s", t->name);
		ref = taco_st_find(f->grads, gname);
		ck_assert_msg(ref != NULL, "dpo.safetensors lacks %s", gname);
		ck_assert_uint_eq(ref->dtype, TK_F32);
		ck_assert_uint_eq(ref->nbytes, t->numel * sizeof(float));
		e = tu_rel_err(g, (const float *)ref->data, t->numel);
		for (int z = 0; z < f->n_zero; z++) {
			if (strcmp(gname, f->zero[z]))
				continue;
			e = 0;
			for (size_t k = 0; k < t->numel; k++)
				e = fmax(e, fabs(g[k]));
			e = e < 1e-6 ? 0 : e;
		}
		ck_assert_msg(e < tol, "%s gradient rel err %.3g", t->name, e);
		if (e > worst) {
			worst = e;
			*worst_name = t->name;
		}
		free(g);
	}
	return worst;
}

static double rel(double a, double want)
{
	return fabs(a - want) / fabs(want);
}

/* (a) The reference pass: taco_model_score gives each row's summed
 * log-probability as transformers does. */
START_TEST(test_score)
{
	dpo_fixture f;
	taco_err err = {{0}};
	double got[MAX_ROWS], worst = 0;
	taco_batch b;
	int r;

	fixture_load(&f, fixtures[_i], TK_F32, (taco_step_opts){0});
	b = rows_of(&f, 0, f.B);
	r = taco_model_score(f.m, &b, got, &err);
	ck_assert_msg(r == 0, "%s", err.msg);
	for (int i = 0; i < f.B; i++) {
		ck_assert_msg(rel(got[i], f.policy[i]) < 1e-5,
			      "%s row %d: log-prob %.9g, transformers %.9g",
			      fixtures[_i], i, got[i], f.policy[i]);
		worst = fmax(worst, rel(got[i], f.policy[i]));
	}
	fprintf(stderr, "dpo %-10s score: worst row rel err %.2g\n",
		fixtures[_i], worst);
	fixture_free(&f);
}
END_TEST

/* (b) One preference step on the whole batch: the loss, the rows'
 * log-probabilities and every gradient as TRL and torch give them; with
 * the default bounds, then every bound at its smallest (a one-column
 * gradient block, logits in chunks of a few rows, the MLP in 3 blocks). */
static void check_step(const char *name, taco_step_opts so, int verbose)
{
	dpo_fixture f;
	taco_err err = {{0}};
	taco_step_stats st;
	taco_grad_sink sink;
	taco_batch b;
	taco_pref p;
	dense d;
	double logp[MAX_ROWS], worst_logp = 0, worst;
	const char *worst_name;
	int r;

	fixture_load(&f, name, TK_F32, so);
	b = rows_of(&f, 0, f.B);
	p = (taco_pref){f.beta, f.P, f.ref};
	dense_init(&d, f.m);
	sink = dense_sink(&d);
	r = taco_model_step_pref(f.m, &b, &p, &sink, &st, logp, &err);
	ck_assert_msg(r == 0, "%s: %s", name, err.msg);
	ck_assert_int_eq(st.n_targets, f.n_targets);
	ck_assert_msg(rel(st.loss, f.loss) < 1e-5,
		      "%s: loss %.9g, TRL %.9g (rel %.3g)", name, st.loss,
		      f.loss, rel(st.loss, f.loss));
	ck_assert_msg(rel(st.loss_sum, f.loss * f.P) < 1e-5,
		      "%s: loss_sum %.9g, not pairs * loss", name, st.loss_sum);
	for (int i = 0; i < f.B; i++) {
		ck_assert_msg(rel(logp[i], f.policy[i]) < 1e-5,
			      "%s row %d: logp %.9g, transformers %.9g", name,
			      i, logp[i], f.policy[i]);
		worst_logp = fmax(worst_logp, rel(logp[i], f.policy[i]));
	}
	worst = grad_err(&f, &d, 1e-4, &worst_name);
	if (verbose)
		fprintf(stderr,
			"dpo %-10s fp32 loss %.9f vs %.9f (rel %.2g), logp "
			"rel err %.2g, worst gradient %.2g (%s)\n",
			name, st.loss, f.loss, rel(st.loss, f.loss), worst_logp,
			worst, worst_name);
	dense_free(&d);
	fixture_free(&f);
}

START_TEST(test_step)
{
	check_step(fixtures[_i], (taco_step_opts){0}, 1);
	check_step(fixtures[_i],
		   (taco_step_opts){.grad_block_elems = 1,
				    .logit_elems = 700,
				    .mlp_chunks = 3},
		   0);
}
END_TEST

/* Gradient accumulation: each pair a micro-batch of its own, norm_pairs
 * the pairs of the whole step, into the same dense buffers: the sum is the
 * whole batch's gradient and the losses add up to its loss_sum. */
START_TEST(test_accumulate)
{
	dpo_fixture f;
	taco_err err = {{0}};
	taco_step_stats st;
	taco_grad_sink sink;
	dense d;
	double loss_sum = 0, worst;
	int64_t n_targets = 0;
	const char *worst_name;

	fixture_load(&f, fixtures[_i], TK_F32, (taco_step_opts){0});
	dense_init(&d, f.m);
	sink = dense_sink(&d);
	for (int i = 0; i < f.P; i++) {
		taco_batch b = rows_of(&f, 2 * i, 2);
		taco_pref p = {f.beta, f.P, f.ref + 2 * i};
		int r =
		    taco_model_step_pref(f.m, &b, &p, &sink, &st, NULL, &err);

		ck_assert_msg(r == 0, "%s", err.msg);
		ck_assert_msg(rel(st.loss, st.loss_sum) < 1e-12,
			      "one pair: loss %.9g, loss_sum %.9g", st.loss,
			      st.loss_sum);
		loss_sum += st.loss_sum;
		n_targets += st.n_targets;
	}
	ck_assert_int_eq(n_targets, f.n_targets);
	ck_assert_msg(rel(loss_sum / f.P, f.loss) < 1e-5,
		      "%s: accumulated loss %.9g, TRL %.9g", fixtures[_i],
		      loss_sum / f.P, f.loss);
	worst = grad_err(&f, &d, 1e-4, &worst_name);
	fprintf(stderr, "dpo %-10s accumulated: worst gradient %.2g (%s)\n",
		fixtures[_i], worst, worst_name);
	dense_free(&d);
	fixture_free(&f);
}
END_TEST

/* (c) bf16: the loss within 1e-2 of TRL's with the model in bf16 (the
 * same fp32 reference log-probabilities), the gradients near fp32's (as
 * test_golden.c's bf16 bound). */
START_TEST(test_bf16)
{
	dpo_fixture f;
	taco_err err = {{0}};
	taco_step_stats st;
	taco_grad_sink sink;
	taco_batch b;
	taco_pref p;
	dense d;
	double worst;
	const char *worst_name;
	int r;

	fixture_load(&f, fixtures[_i], TK_BF16, (taco_step_opts){0});
	b = rows_of(&f, 0, f.B);
	p = (taco_pref){f.beta, f.P, f.ref};
	dense_init(&d, f.m);
	sink = dense_sink(&d);
	r = taco_model_step_pref(f.m, &b, &p, &sink, &st, NULL, &err);
	ck_assert_msg(r == 0, "%s", err.msg);
	ck_assert_msg(fabs(st.loss - f.loss_bf16) < 1e-2,
		      "%s: bf16 loss %.6f, TRL in bf16 %.6f", fixtures[_i],
		      st.loss, f.loss_bf16);
	worst = grad_err(&f, &d, 0.1, &worst_name);
	fprintf(stderr,
		"dpo %-10s bf16 loss %.6f vs %.6f (diff %.2g), worst "
		"gradient vs fp32 %.2g (%s)\n",
		fixtures[_i], st.loss, f.loss_bf16, fabs(st.loss - f.loss_bf16),
		worst, worst_name);
	dense_free(&d);
	fixture_free(&f);
}
END_TEST

/* -log sigmoid(z) and sigmoid(-z) in double, in the form that neither
 * overflows nor cancels at large |z| (the reference of (d)). */
static double softplus_neg(double z)
{
	return z > 0 ? log1p(exp(-z)) : -z + log1p(exp(z));
}

static double sigmoid_neg(double z)
{
	return z > 0 ? exp(-z) / (1 + exp(-z)) : 1 / (1 + exp(z));
}

/* (d) taco_pref_loss against the formula, |z| from 0 to 1600: finite, the
 * loss to 1e-12 (relative, 1e-15 absolute for the loss of a won pair),
 * the derivatives scaled by 1 / norm_pairs. */
START_TEST(test_pref_loss)
{
	/* per pair: chosen and rejected log-probabilities, then refs */
	static const double lp[][4] = {
	    {-10, -12, -11, -11},     /* z = 0.2 beta */
	    {-7.5, -7.5, -7.5, -7.5}, /* z = 0 */
	    {-20, -5, -21, -4},	      /* z < 0: the rejected is preferred */
	    {-1, -401, -201, -201},   /* z = 400 beta */
	    {-801, -1, -1, -801},     /* z = -1600 beta */
	    {-1, -41, -21, -21},      /* z = 40 beta */
	    {-41, -1, -21, -21},      /* z = -40 beta */
	};
	static const double betas[] = {0.1, 1.0, 4.0};
	enum { N = sizeof(lp) / sizeof(lp[0]) };
	const int64_t norm = 7;
	double logp[2 * N], ref[2 * N], loss[N], dlogp[2 * N], loss2[N];

	for (int i = 0; i < N; i++) {
		logp[2 * i] = lp[i][0];
		logp[2 * i + 1] = lp[i][1];
		ref[2 * i] = lp[i][2];
		ref[2 * i + 1] = lp[i][3];
	}
	for (size_t k = 0; k < sizeof(betas) / sizeof(betas[0]); k++) {
		double beta = betas[k];

		taco_pref_loss(beta, logp, ref, N, norm, loss, dlogp);
		for (int i = 0; i < N; i++) {
			double z = beta * ((logp[2 * i] - ref[2 * i]) -
					   (logp[2 * i + 1] - ref[2 * i + 1]));
			double want = softplus_neg(z);
			double dw = beta * sigmoid_neg(z) / (double)norm;

			ck_assert_msg(isfinite(loss[i]) &&
					  isfinite(dlogp[2 * i]) &&
					  isfinite(dlogp[2 * i + 1]),
				      "z %g: loss %g, dlogp %g %g", z, loss[i],
				      dlogp[2 * i], dlogp[2 * i + 1]);
			ck_assert_msg(
			    fabs(loss[i] - want) <= 1e-12 * want + 1e-15,
			    "z %g: loss %.17g, want %.17g", z, loss[i], want);
			/* d/dlogp_c = -beta sigmoid(-z) / norm, d/dlogp_r
			 * its opposite */
			ck_assert_msg(fabs(dlogp[2 * i] + dw) <=
					  1e-12 * dw + 1e-300,
				      "z %g: dlogp_c %.17g, want %.17g", z,
				      dlogp[2 * i], -dw);
			ck_assert_msg(fabs(dlogp[2 * i + 1] - dw) <=
					  1e-12 * dw + 1e-300,
				      "z %g: dlogp_r %.17g, want %.17g", z,
				      dlogp[2 * i + 1], dw);
		}
		/* no derivatives wanted: the same losses */
		taco_pref_loss(beta, logp, ref, N, norm, loss2, NULL);
		ck_assert_mem_eq(loss, loss2, sizeof(loss));
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("dpo_golden");
	TCase *tc = tcase_create("dpo_golden");
	int n = sizeof(fixtures) / sizeof(fixtures[0]);

	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, test_score, 0, n);
	tcase_add_loop_test(tc, test_step, 0, n);
	tcase_add_loop_test(tc, test_accumulate, 0, n);
	tcase_add_loop_test(tc, test_bf16, 0, n);
	tcase_add_test(tc, test_pref_loss);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
