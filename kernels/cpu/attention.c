/* attention.c: causal grouped-query attention with document masking and an
 * optional sliding window, flash-style backward from the saved lse.
 *
 * q [B*T, nh*hd], k/v [B*T, nkv*hd], out [B*T, nh*hd], lse [B, nh, T].
 * Query i of a row attends keys lo(i) <= j <= i with
 *   lo(i) = max(doc_start(i), i - window + 1 when window > 0),
 *   doc_start(i) = i - pos[i] (clamped to [0, i]).
 * Query head h reads kv head h / (nh / nkv).
 *
 * Work is split into (batch, head) blocks and, inside a block, into tiles of
 * ATT_QT query rows. A tile only looks at the keys [min lo, last row], so the
 * causal half and everything outside the window are skipped. Each tile does
 * its products with single-threaded cblas_sgemm; the blocks run in parallel
 * with OpenMP. Scratch is two [ATT_QT, T] float buffers per thread.
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#ifndef ATT_QT
#define ATT_QT 64 /* query rows per tile */
#endif

/* Shape of one attention call. */
struct att_dims {
	int B, T, nh, nkv, hd, window;
	float scale;
};

/* First key that query i may see; pos is this row's [T] positions. */
static int key_lo(const int32_t *pos, int i, int window)
{
	int lo = pos[i] < 0 ? i : (pos[i] > i ? 0 : i - pos[i]);

	if (window > 0 && i - window + 1 > lo)
		lo = i - window + 1;
	return lo;
}

/* Smallest lo(i) over the query rows [i0, i1). */
static int tile_klo(const int32_t *pos, int i0, int i1, int window)
{
	int klo = i0;

	for (int i = i0; i < i1; i++) {
		int lo = key_lo(pos, i, window);
		if (lo < klo)
			klo = lo;
	}
	return klo;
}

/* Per-thread scratch. The op table has no error channel, and silently
 * skipping a block would train on garbage, so running out of memory for a
 * few hundred KiB of scratch is fatal. */
static float *att_scratch(size_t bytes)
{
	float *p = malloc(bytes);

	if (!p) {
		fprintf(stderr, "tk_cpu attention: out of memory (%zu bytes)\n",
			bytes);
		abort();
	}
	return p;
}

/* Runs the block loop either with OpenMP threads over blocks (BLAS on one
 * thread each) or sequentially with a multi-threaded BLAS, whichever keeps
 * the cores busy: blocks in parallel when there are enough of them. */
static int blocks_in_parallel(int nblocks)
{
#ifdef _OPENMP
	int nt = omp_get_max_threads();
	return nt > 1 && nblocks >= nt && !omp_in_parallel();
#else
	(void)nblocks;
	return 0;
#endif
}

/* max of s[n], n >= 1; four partial maxima so the loop pipelines (max is
 * exact, so the order does not matter). */
static float row_max(const float *s, int n)
{
	float m[4] = {s[0], s[0], s[0], s[0]};
	int j = 0;

	for (; j + 4 <= n; j += 4)
		for (int u = 0; u < 4; u++)
			m[u] = s[j + u] > m[u] ? s[j + u] : m[u];
	for (; j < n; j++)
		m[0] = s[j] > m[0] ? s[j] : m[0];
	m[0] = m[1] > m[0] ? m[1] : m[0];
	m[2] = m[3] > m[2] ? m[3] : m[2];
	return m[2] > m[0] ? m[2] : m[0];
}

/* s[j] = exp(s[j] - m) in place; returns their sum, accumulated in double
 * with four fixed partial sums (deterministic, and not latency bound). */
static double row_exp_sum(float *s, int n, float m)
{
	double acc[4] = {0, 0, 0, 0};
	int j = 0;

	for (; j + 4 <= n; j += 4)
		for (int u = 0; u < 4; u++) {
			s[j + u] = expf(s[j + u] - m);
			acc[u] += s[j + u];
		}
	for (; j < n; j++) {
		s[j] = expf(s[j] - m);
		acc[0] += s[j];
	}
	return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

/* Forward of one (batch b, query head h) block.
 * S scratch: [ATT_QT, T] (scores, then softmax numerators in place). */
static void att_fwd_block(float *out, float *lse, const float *q,
			  const float *k, const float *v, const int32_t *pos,
			  const struct att_dims *d, int b, int h, float *S)
{
	float rinv[ATT_QT];
	int T = d->T, hd = d->hd;
	int ldq = d->nh * hd, ldk = d->nkv * hd;
	int kvh = h / (d->nh / d->nkv);
	const int32_t *pb = pos + (size_t)b * T;
	const float *qb = q + (size_t)b * T * ldq + (size_t)h * hd;
	const float *kb = k + (size_t)b * T * ldk + (size_t)kvh * hd;
	const float *vb = v + (size_t)b * T * ldk + (size_t)kvh * hd;
	float *ob = out + (size_t)b * T * ldq + (size_t)h * hd;
	float *lb = lse + ((size_t)b * d->nh + h) * T;

	for (int i0 = 0; i0 < T; i0 += ATT_QT) {
		int i1 = i0 + ATT_QT < T ? i0 + ATT_QT : T;
		int rows = i1 - i0;
		int klo = tile_klo(pb, i0, i1, d->window);
		int kn = i1 - klo;

		/* S [rows, kn] = scale * q[i0:i1] k[klo:i1]^T */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, kn,
			    hd, d->scale, qb + (size_t)i0 * ldq, ldq,
			    kb + (size_t)klo * ldk, ldk, 0.0f, S, kn);

		/* Row softmax numerators over the allowed keys, in place of
		 * S; the 1/sum normalisation is applied to out afterwards. */
		for (int r = 0; r < rows; r++) {
			int i = i0 + r;
			int j0 = key_lo(pb, i, d->window) - klo, j1 = i - klo;
			float *s = S + (size_t)r * kn, m;
			double sum;

			for (int j = 0; j < j0; j++)
				s[j] = 0.0f;
			for (int j = j1 + 1; j < kn; j++)
				s[j] = 0.0f;
			m = row_max(s + j0, j1 - j0 + 1);
			sum = row_exp_sum(s + j0, j1 - j0 + 1, m);
			rinv[r] = (float)(1.0 / sum);
			lb[i] = (float)((double)m + log(sum));
		}

		/* out[i0:i1] [rows, hd] = P [rows, kn] v[klo:i1] [kn, hd] */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd,
			    kn, 1.0f, S, kn, vb + (size_t)klo * ldk, ldk, 0.0f,
			    ob + (size_t)i0 * ldq, ldq);
		for (int r = 0; r < rows; r++) {
			float *o = ob + (size_t)(i0 + r) * ldq;
			for (int c = 0; c < hd; c++)
				o[c] *= rinv[r];
		}
	}
}

void tk_cpu_attention_fwd(float *out, float *lse, const float *q,
			  const float *k, const float *v, const int32_t *pos,
			  int B, int T, int nh, int nkv, int hd, int window,
			  float scale)
{
	struct att_dims d = {B, T, nh, nkv, hd, window, scale};
	int nblocks = B * nh, par = blocks_in_parallel(nblocks);
	int blas_threads = openblas_get_num_threads();
	size_t scratch = (size_t)ATT_QT * (T > 0 ? T : 1) * sizeof(float);

	if (nblocks <= 0 || T <= 0)
		return;
	if (par)
		openblas_set_num_threads(1);
#pragma omp parallel if (par)
	{
		float *S = att_scratch(scratch);
#pragma omp for schedule(dynamic, 1)
		for (int bh = 0; bh < nblocks; bh++)
			att_fwd_block(out, lse, q, k, v, pos, &d, bh / nh,
				      bh % nh, S);
		free(S);
	}
	if (par)
		openblas_set_num_threads(blas_threads);
}

/* Backward of one (batch b, kv head g) block: all query heads of the group,
 * so dk/dv of the block are owned by this call (no races).
 * S, dS scratch: [ATT_QT, T] each. */
static void att_bwd_block(float *dq, float *dk, float *dv, const float *dout,
			  const float *out, const float *lse, const float *q,
			  const float *k, const float *v, const int32_t *pos,
			  const struct att_dims *d, int b, int g, float *S,
			  float *dS)
{
	int T = d->T, hd = d->hd, group = d->nh / d->nkv;
	int ldq = d->nh * hd, ldk = d->nkv * hd;
	const int32_t *pb = pos + (size_t)b * T;
	const float *kb = k + (size_t)b * T * ldk + (size_t)g * hd;
	const float *vb = v + (size_t)b * T * ldk + (size_t)g * hd;
	float *dkb = dk + (size_t)b * T * ldk + (size_t)g * hd;
	float *dvb = dv + (size_t)b * T * ldk + (size_t)g * hd;

	for (int t = 0; t < T; t++) {
		memset(dkb + (size_t)t * ldk, 0, (size_t)hd * sizeof(float));
		memset(dvb + (size_t)t * ldk, 0, (size_t)hd * sizeof(float));
	}

	for (int h = g * group; h < (g + 1) * group; h++) {
		size_t qoff = (size_t)b * T * ldq + (size_t)h * hd;
		const float *qb = q + qoff, *ob = out + qoff;
		const float *dob = dout + qoff;
		float *dqb = dq + qoff;
		const float *lb = lse + ((size_t)b * d->nh + h) * T;

		for (int i0 = 0; i0 < T; i0 += ATT_QT) {
			int i1 = i0 + ATT_QT < T ? i0 + ATT_QT : T;
			int rows = i1 - i0;
			int klo = tile_klo(pb, i0, i1, d->window);
			int kn = i1 - klo;

			/* S [rows, kn] = scale q k^T; P = exp(S - lse) */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
				    rows, kn, hd, d->scale,
				    qb + (size_t)i0 * ldq, ldq,
				    kb + (size_t)klo * ldk, ldk, 0.0f, S, kn);
			/* dP [rows, kn] = dout[i0:i1] v[klo:i1]^T */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
				    rows, kn, hd, 1.0f, dob + (size_t)i0 * ldq,
				    ldq, vb + (size_t)klo * ldk, ldk, 0.0f, dS,
				    kn);

			/* dS = P * (dP - D), D_i = dout_i . out_i */
			for (int r = 0; r < rows; r++) {
				int i = i0 + r;
				int j0 = key_lo(pb, i, d->window) - klo;
				int j1 = i - klo;
				const float *oi = ob + (size_t)i * ldq;
				const float *di = dob + (size_t)i * ldq;
				float *s = S + (size_t)r * kn;
				float *ds = dS + (size_t)r * kn, L = lb[i], D;
				double acc = 0;

				for (int c = 0; c < hd; c++)
					acc += (double)di[c] * oi[c];
				D = (float)acc;
				for (int j = 0; j < j0; j++)
					s[j] = ds[j] = 0.0f;
				for (int j = j0; j <= j1; j++) {
					float p = expf(s[j] - L);
					s[j] = p;
					ds[j] = p * (ds[j] - D);
				}
				for (int j = j1 + 1; j < kn; j++)
					s[j] = ds[j] = 0.0f;
			}

			/* dq[i0:i1] = scale * dS k[klo:i1] */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
				    rows, hd, kn, d->scale, dS, kn,
				    kb + (size_t)klo * ldk, ldk, 0.0f,
				    dqb + (size_t)i0 * ldq, ldq);
			/* dk[klo:i1] += scale * dS^T q[i0:i1] */
			cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn,
				    hd, rows, d->scale, dS, kn,
				    qb + (size_t)i0 * ldq, ldq, 1.0f,
				    dkb + (size_t)klo * ldk, ldk);
			/* dv[klo:i1] += P^T dout[i0:i1] */
			cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn,
				    hd, rows, 1.0f, S, kn,
				    dob + (size_t)i0 * ldq, ldq, 1.0f,
				    dvb + (size_t)klo * ldk, ldk);
		}
	}
}

void tk_cpu_attention_bwd(float *dq, float *dk, float *dv, const float *dout,
			  const float *out, const float *lse, const float *q,
			  const float *k, const float *v, const int32_t *pos,
			  int B, int T, int nh, int nkv, int hd, int window,
			  float scale)
{
	struct att_dims d = {B, T, nh, nkv, hd, window, scale};
	int nblocks = B * nkv, par = blocks_in_parallel(nblocks);
	int blas_threads = openblas_get_num_threads();
	size_t scratch = (size_t)ATT_QT * (T > 0 ? T : 1) * sizeof(float);

	if (nblocks <= 0 || T <= 0)
		return;
	if (par)
		openblas_set_num_threads(1);
#pragma omp parallel if (par)
	{
		float *S = att_scratch(2 * scratch);
#pragma omp for schedule(dynamic, 1)
		for (int bg = 0; bg < nblocks; bg++)
			att_bwd_block(dq, dk, dv, dout, out, lse, q, k, v, pos,
				      &d, bg / nkv, bg % nkv, S,
				      S + scratch / sizeof(float));
		free(S);
	}
	if (par)
		openblas_set_num_threads(blas_threads);
}
