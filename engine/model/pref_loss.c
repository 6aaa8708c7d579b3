/* pref_loss.c: DPO's sigmoid loss of preference pairs, in double on the
 * host (a few numbers a pair; the step's gradient scales come from it).
 *
 * With z = beta ((logp_c - ref_c) - (logp_r - ref_r)) a pair's loss is
 * -log sigmoid(z) = softplus(-z), and d loss / d z = -sigmoid(-z). Both
 * are written so that no exp overflows for any |z|. */
#include <math.h>

#include "model.h"

/* log(1 + exp(x)) without overflow */
static double softplus(double x)
{
	return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
}

/* 1 / (1 + exp(-x)) without overflow */
static double sigmoid(double x)
{
	if (x >= 0)
		return 1.0 / (1.0 + exp(-x));
	double e = exp(x);
	return e / (1.0 + e);
}

void taco_pref_loss(double beta, const double *logp, const double *ref, int n,
		    int64_t norm_pairs, double *loss, double *dlogp)
{
	for (int i = 0; i < n; i++) {
		double rc = logp[2 * i] - ref[2 * i];
		double rr = logp[2 * i + 1] - ref[2 * i + 1];
		double z = beta * (rc - rr);

		loss[i] = softplus(-z);
		if (dlogp) {
			double g = -sigmoid(-z) * beta / (double)norm_pairs;
			dlogp[2 * i] = g;
			dlogp[2 * i + 1] = -g;
		}
	}
}
