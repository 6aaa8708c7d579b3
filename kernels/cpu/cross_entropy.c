/* cross_entropy.c: softmax cross-entropy over the vocabulary in chunks.
 *
 * Per row, over the chunks [v0, v0 + Vc) in increasing v0 (an online
 * log-sum-exp):
 *   mc = max of the chunk (the first such id), new = max(mx, mc),
 *   se = se * exp(mx - new) + sum over the chunk of expf(x - new)
 *        (double, in id order), mx = new,
 *   am = the first id of the running max (strict >: ties keep the smaller
 *        id, across chunks too), tl = x[target] once its chunk is seen.
 * ce_finish: lse = mx + log(se) (double), loss = lse - tl. With one chunk
 * over the whole vocabulary this is the arithmetic of the former fused
 * kernel exactly (se = sum expf(x - max) from 0, lse = max + log(se)).
 * Rows whose target is -100 (any negative target) have no loss, are not
 * counted and get a zero gradient.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"
#include "tk_convert.h"

/* Folds chunk x [Vc] (ids v0..) into row i of s. */
static void ce_stats_row(const tk_ce_rows *s, int i, const float *x,
			 int32_t target, int v0, int Vc)
{
	float m = x[0], mx;
	int am = 0;
	double sum = 0, se;

	/* Strict > keeps the smallest index among ties. */
	for (int j = 1; j < Vc; j++)
		if (x[j] > m) {
			m = x[j];
			am = j;
		}
	if (v0 == 0) {
		mx = m;
		se = 0;
		s->am[i] = am;
	} else {
		mx = s->mx[i];
		se = s->se[i];
		if (m > mx) {
			se = se * exp((double)mx - (double)m);
			mx = m;
			s->am[i] = v0 + am;
		}
	}
	for (int j = 0; j < Vc; j++)
		sum += expf(x[j] - mx);
	s->mx[i] = mx;
	s->se[i] = v0 == 0 ? sum : se + sum;
	if (target >= v0 && target - v0 < Vc)
		s->tl[i] = x[target - v0];
}

void tk_cpu_ce_stats(const tk_ce_rows *s, const float *logits, int ldl,
		     const int32_t *targets, int n, int v0, int Vc)
{
	if (n <= 0 || Vc <= 0)
		return;
#pragma omp parallel for if ((long long)n * Vc >= TK_CPU_PAR_MIN)              \
    schedule(dynamic, 4)
	for (int i = 0; i < n; i++)
		ce_stats_row(s, i, logits + (size_t)i * ldl, targets[i], v0,
			     Vc);
}

void tk_cpu_ce_finish(const tk_ce_rows *s, const int32_t *targets, int n,
		      double *sums, double *row_loss)
{
	double total = 0;
	int nc = 0;

	/* Rows in order: deterministic totals. */
	for (int i = 0; i < n; i++) {
		double lse = (double)s->mx[i] + log(s->se[i]), l = 0;

		s->lse[i] = (float)lse;
		if (targets[i] >= 0) {
			l = lse - (double)s->tl[i];
			total += l;
			nc += s->am[i] == targets[i];
		}
		if (row_loss)
			row_loss[i] = l;
	}
	sums[0] = total;
	sums[1] = nc;
}

/* Row i: d [Vc] = grad_scale * (expf(x - lse) - onehot), or 0. Each x[j] is
 * read before d[j] is written (d may be x). */
TK_CPU_INLINE void ce_grad_row(int dt, void *d, size_t o, const float *x,
			       float lse, int32_t target, int v0, int Vc,
			       float grad_scale)
{
	int t = target >= 0 ? target - v0 : -1;

	if (target < 0) {
		for (int j = 0; j < Vc; j++)
			tk_store_f32_rne(d, dt, o + j, 0.0f);
		return;
	}
	for (int j = 0; j < Vc; j++) {
		float p = expf(x[j] - lse);

		if (j == t)
			p = p - 1.0f;
		tk_store_f32_rne(d, dt, o + j, grad_scale * p);
	}
}

void tk_cpu_ce_grad(int dt, void *dlogits, int ldd, const float *logits,
		    int ldl, const tk_ce_rows *s, const int32_t *targets, int n,
		    int v0, int Vc, float grad_scale)
{
	if (dt != TK_F32 && dt != TK_BF16)
		return;
	if (n <= 0 || Vc <= 0)
		return;
#pragma omp parallel for if ((long long)n * Vc >= TK_CPU_PAR_MIN)
	for (int i = 0; i < n; i++) {
		const float *x = logits + (size_t)i * ldl;
		size_t o = (size_t)i * ldd;
		float gs = s->scale ? grad_scale * s->scale[i] : grad_scale;

		if (dt == TK_F32)
			ce_grad_row(TK_F32, dlogits, o, x, s->lse[i],
				    targets[i], v0, Vc, gs);
		else
			ce_grad_row(TK_BF16, dlogits, o, x, s->lse[i],
				    targets[i], v0, Vc, gs);
	}
}
