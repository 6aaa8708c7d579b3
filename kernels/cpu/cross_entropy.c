/* cross_entropy.c: fused softmax cross-entropy over a chunk of tokens.
 *
 * Per row: m = max(x), sum = sum exp(x - m) (double), lse = m + log(sum),
 * loss = lse - x[target]. Rows whose target is -100 (or otherwise outside
 * [0, V)) are ignored: no loss, not counted, zero gradient.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"

/* One row: returns the loss (0 when ignored); *correct = argmax == target. */
static double ce_row(float *x, int32_t target, int V, float grad_scale,
		     int *correct)
{
	int write = grad_scale != 0.0f, amax = 0;
	float m = x[0], xt;
	double sum = 0, lse;
	float inv;

	*correct = 0;
	if (target < 0 || target >= V) {
		if (write)
			for (int j = 0; j < V; j++)
				x[j] = 0.0f;
		return 0.0;
	}
	/* Strict > keeps the smallest index among ties. */
	for (int j = 1; j < V; j++)
		if (x[j] > m) {
			m = x[j];
			amax = j;
		}
	xt = x[target];
	if (write) {
		for (int j = 0; j < V; j++) {
			float e = expf(x[j] - m);
			x[j] = e;
			sum += e;
		}
	} else {
		for (int j = 0; j < V; j++)
			sum += expf(x[j] - m);
	}
	lse = (double)m + log(sum);
	*correct = amax == target;
	if (write) {
		inv = (float)(1.0 / sum);
		for (int j = 0; j < V; j++)
			x[j] = grad_scale * (x[j] * inv);
		x[target] -= grad_scale;
	}
	return lse - (double)xt;
}

/* logits [n, V] (gradient in place when grad_scale != 0), targets [n] */
void tk_cpu_cross_entropy(float *logits, const int32_t *targets, int n, int V,
			  float grad_scale, double *loss_sum, int *n_correct,
			  double *row_loss)
{
	/* Per-row results, summed in row order: deterministic totals. */
	double *loss = malloc((n > 0 ? (size_t)n : 1) * sizeof(*loss));
	int *corr = malloc((n > 0 ? (size_t)n : 1) * sizeof(*corr));
	int par = loss && corr && (long long)n * V >= TK_CPU_PAR_MIN;
	double total = 0;
	int nc = 0;

	if (!loss || !corr) {
		/* Out of memory for the scratch: same sums, one thread. */
		for (int i = 0; i < n; i++) {
			int c;
			double l = ce_row(logits + (size_t)i * V, targets[i], V,
					  grad_scale, &c);
			total += l;
			nc += c;
			if (row_loss)
				row_loss[i] = l;
		}
	} else {
#pragma omp parallel for if (par) schedule(dynamic, 4)
		for (int i = 0; i < n; i++)
			loss[i] = ce_row(logits + (size_t)i * V, targets[i], V,
					 grad_scale, &corr[i]);
		for (int i = 0; i < n; i++) {
			total += loss[i];
			nc += corr[i];
		}
		if (row_loss)
			memcpy(row_loss, loss, (size_t)n * sizeof(*loss));
	}
	free(loss);
	free(corr);
	if (loss_sum)
		*loss_sum = total;
	if (n_correct)
		*n_correct = nc;
}
