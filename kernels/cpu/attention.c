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
 *
 * dt TK_BF16: a block first widens the [T, hd] slices it reads (q, k, v,
 * and out, dout in the backward pass) into per-thread fp32 scratch, runs
 * the fp32 block code on them (leading dimension hd instead of heads * hd)
 * into fp32 outputs, and rounds those once into the bf16 tensors. lse is
 * fp32 either way.
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"
#include "tk_attn.h"
#include "tk_convert.h"

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

/* Smallest lo(i) over the query rows [i0, i1). */
static int tile_klo(const int32_t *pos, int i0, int i1, int window)
{
	int klo = i0;

	for (int i = i0; i < i1; i++) {
		int lo = tk_attn_key_lo(pos, i, window);
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

/* One head's slices, fp32: q-like [T, hd] with row stride ldq (q, out,
 * dout, dq), k-like with row stride ldk (k, v, dk, dv). */
struct att_head {
	const float *q, *k, *v, *o, *dout;
	float *out, *dq, *dk, *dv;
	int ldq, ldk;
};

/* Forward of one (batch b, query head h) block: out, lb (lse [T]) from q,
 * k, v. S scratch: [ATT_QT, T] (scores, then softmax numerators). */
static void att_fwd_head(const struct att_head *x, float *lb, const int32_t *pb,
			 const struct att_dims *d, float *S)
{
	float rinv[ATT_QT];
	int T = d->T, hd = d->hd, ldq = x->ldq, ldk = x->ldk;

	for (int i0 = 0; i0 < T; i0 += ATT_QT) {
		int i1 = i0 + ATT_QT < T ? i0 + ATT_QT : T;
		int rows = i1 - i0;
		int klo = tile_klo(pb, i0, i1, d->window);
		int kn = i1 - klo;

		/* S [rows, kn] = scale * q[i0:i1] k[klo:i1]^T */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, kn,
			    hd, d->scale, x->q + (size_t)i0 * ldq, ldq,
			    x->k + (size_t)klo * ldk, ldk, 0.0f, S, kn);

		/* Row softmax numerators over the allowed keys, in place of
		 * S; the 1/sum normalisation is applied to out afterwards. */
		for (int r = 0; r < rows; r++) {
			int i = i0 + r;
			int j0 = tk_attn_key_lo(pb, i, d->window) - klo,
			    j1 = i - klo;
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
			    kn, 1.0f, S, kn, x->v + (size_t)klo * ldk, ldk,
			    0.0f, x->out + (size_t)i0 * ldq, ldq);
		for (int r = 0; r < rows; r++) {
			float *o = x->out + (size_t)(i0 + r) * ldq;
			for (int c = 0; c < hd; c++)
				o[c] *= rinv[r];
		}
	}
}

/* dst [T, hd] = the bf16 slice src [T, hd] (row stride ld), widened. */
static void widen_slice(float *dst, const void *src, size_t off, int ld, int T,
			int hd)
{
	const uint16_t *h = (const uint16_t *)src + off;

	for (int t = 0; t < T; t++)
		for (int c = 0; c < hd; c++)
			dst[(size_t)t * hd + c] =
			    tk_bf16_f32(h[(size_t)t * ld + c]);
}

/* The bf16 slice dst [T, hd] (row stride ld) = src rounded. */
static void round_slice(void *dst, size_t off, int ld, const float *src, int T,
			int hd)
{
	uint16_t *h = (uint16_t *)dst + off;

	for (int t = 0; t < T; t++)
		for (int c = 0; c < hd; c++)
			h[(size_t)t * ld + c] =
			    tk_f32_bf16_rne(src[(size_t)t * hd + c]);
}

/* Forward of block (b, h) in dt. W: bf16 widening scratch, 4 [T, hd]. */
static void att_fwd_block(int dt, void *out, float *lse, const void *q,
			  const void *k, const void *v, const int32_t *pos,
			  const struct att_dims *d, int b, int h, float *S,
			  float *W)
{
	int T = d->T, hd = d->hd;
	int ldq = d->nh * hd, ldk = d->nkv * hd;
	int kvh = h / (d->nh / d->nkv);
	size_t qoff = (size_t)b * T * ldq + (size_t)h * hd;
	size_t koff = (size_t)b * T * ldk + (size_t)kvh * hd;
	const int32_t *pb = pos + (size_t)b * T;
	float *lb = lse + ((size_t)b * d->nh + h) * T;
	struct att_head x = {0};

	if (dt == TK_F32) {
		x.q = (const float *)q + qoff;
		x.k = (const float *)k + koff;
		x.v = (const float *)v + koff;
		x.out = (float *)out + qoff;
		x.ldq = ldq;
		x.ldk = ldk;
		att_fwd_head(&x, lb, pb, d, S);
		return;
	}
	{
		size_t sl = (size_t)T * hd;
		float *wq = W, *wk = W + sl, *wv = W + 2 * sl, *wo = W + 3 * sl;

		widen_slice(wq, q, qoff, ldq, T, hd);
		widen_slice(wk, k, koff, ldk, T, hd);
		widen_slice(wv, v, koff, ldk, T, hd);
		x.q = wq;
		x.k = wk;
		x.v = wv;
		x.out = wo;
		x.ldq = x.ldk = hd;
		att_fwd_head(&x, lb, pb, d, S);
		round_slice(out, qoff, ldq, wo, T, hd);
	}
}

void tk_cpu_attention_fwd(int dt, void *out, float *lse, const void *q,
			  const void *k, const void *v, const int32_t *pos,
			  int B, int T, int nh, int nkv, int hd, int window,
			  float scale)
{
	struct att_dims d = {B, T, nh, nkv, hd, window, scale};
	int nblocks = B * nh, par = blocks_in_parallel(nblocks);
	int blas_threads = openblas_get_num_threads();
	size_t scratch = (size_t)ATT_QT * (T > 0 ? T : 1) * sizeof(float);
	size_t wide = dt == TK_BF16 ? (size_t)4 * T * hd * sizeof(float) : 0;

	if (nblocks <= 0 || T <= 0 || (dt != TK_F32 && dt != TK_BF16))
		return;
	if (par)
		openblas_set_num_threads(1);
#pragma omp parallel if (par)
	{
		float *S = att_scratch(scratch + wide);
#pragma omp for schedule(dynamic, 1)
		for (int bh = 0; bh < nblocks; bh++)
			att_fwd_block(dt, out, lse, q, k, v, pos, &d, bh / nh,
				      bh % nh, S, S + scratch / sizeof(float));
		free(S);
	}
	if (par)
		openblas_set_num_threads(blas_threads);
}

/* Backward of one query head h of a block: dq (overwritten), dk and dv
 * (accumulated) from dout, out, lb (lse [T]), q, k, v.
 * S, dS scratch: [ATT_QT, T] each. */
static void att_bwd_head(const struct att_head *x, const float *lb,
			 const int32_t *pb, const struct att_dims *d, float *S,
			 float *dS)
{
	int T = d->T, hd = d->hd, ldq = x->ldq, ldk = x->ldk;

	for (int i0 = 0; i0 < T; i0 += ATT_QT) {
		int i1 = i0 + ATT_QT < T ? i0 + ATT_QT : T;
		int rows = i1 - i0;
		int klo = tile_klo(pb, i0, i1, d->window);
		int kn = i1 - klo;

		/* S [rows, kn] = scale q k^T; P = exp(S - lse) */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, kn,
			    hd, d->scale, x->q + (size_t)i0 * ldq, ldq,
			    x->k + (size_t)klo * ldk, ldk, 0.0f, S, kn);
		/* dP [rows, kn] = dout[i0:i1] v[klo:i1]^T */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, kn,
			    hd, 1.0f, x->dout + (size_t)i0 * ldq, ldq,
			    x->v + (size_t)klo * ldk, ldk, 0.0f, dS, kn);

		/* dS = P * (dP - D), D_i = dout_i . out_i */
		for (int r = 0; r < rows; r++) {
			int i = i0 + r;
			int j0 = tk_attn_key_lo(pb, i, d->window) - klo;
			int j1 = i - klo;
			const float *oi = x->o + (size_t)i * ldq;
			const float *di = x->dout + (size_t)i * ldq;
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
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd,
			    kn, d->scale, dS, kn, x->k + (size_t)klo * ldk, ldk,
			    0.0f, x->dq + (size_t)i0 * ldq, ldq);
		/* dk[klo:i1] += scale * dS^T q[i0:i1] */
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn, hd,
			    rows, d->scale, dS, kn, x->q + (size_t)i0 * ldq,
			    ldq, 1.0f, x->dk + (size_t)klo * ldk, ldk);
		/* dv[klo:i1] += P^T dout[i0:i1] */
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn, hd,
			    rows, 1.0f, S, kn, x->dout + (size_t)i0 * ldq, ldq,
			    1.0f, x->dv + (size_t)klo * ldk, ldk);
	}
}

/* Backward of one (batch b, kv head g) block: all query heads of the group,
 * so dk/dv of the block are owned by this call (no races).
 * S, dS scratch: [ATT_QT, T] each; W: bf16 widening scratch, 8 [T, hd]. */
static void att_bwd_block(int dt, void *dq, void *dk, void *dv,
			  const void *dout, const void *out, const float *lse,
			  const void *q, const void *k, const void *v,
			  const int32_t *pos, const struct att_dims *d, int b,
			  int g, float *S, float *dS, float *W)
{
	int T = d->T, hd = d->hd, group = d->nh / d->nkv;
	int ldq = d->nh * hd, ldk = d->nkv * hd;
	const int32_t *pb = pos + (size_t)b * T;
	size_t koff = (size_t)b * T * ldk + (size_t)g * hd;
	size_t sl = (size_t)T * hd;
	struct att_head x = {0};

	if (dt == TK_F32) {
		x.k = (const float *)k + koff;
		x.v = (const float *)v + koff;
		x.dk = (float *)dk + koff;
		x.dv = (float *)dv + koff;
		x.ldq = ldq;
		x.ldk = ldk;
		for (int t = 0; t < T; t++) {
			memset(x.dk + (size_t)t * ldk, 0,
			       (size_t)hd * sizeof(float));
			memset(x.dv + (size_t)t * ldk, 0,
			       (size_t)hd * sizeof(float));
		}
	} else {
		widen_slice(W, k, koff, ldk, T, hd);
		widen_slice(W + sl, v, koff, ldk, T, hd);
		x.k = W;
		x.v = W + sl;
		x.dk = W + 2 * sl;
		x.dv = W + 3 * sl;
		x.ldq = x.ldk = hd;
		memset(x.dk, 0, 2 * sl * sizeof(float));
	}

	for (int h = g * group; h < (g + 1) * group; h++) {
		size_t qoff = (size_t)b * T * ldq + (size_t)h * hd;
		const float *lb = lse + ((size_t)b * d->nh + h) * T;

		if (dt == TK_F32) {
			x.q = (const float *)q + qoff;
			x.o = (const float *)out + qoff;
			x.dout = (const float *)dout + qoff;
			x.dq = (float *)dq + qoff;
			att_bwd_head(&x, lb, pb, d, S, dS);
		} else {
			float *wq = W + 4 * sl, *wo = W + 5 * sl;
			float *wd = W + 6 * sl, *wdq = W + 7 * sl;

			widen_slice(wq, q, qoff, ldq, T, hd);
			widen_slice(wo, out, qoff, ldq, T, hd);
			widen_slice(wd, dout, qoff, ldq, T, hd);
			x.q = wq;
			x.o = wo;
			x.dout = wd;
			x.dq = wdq;
			att_bwd_head(&x, lb, pb, d, S, dS);
			round_slice(dq, qoff, ldq, wdq, T, hd);
		}
	}
	if (dt != TK_F32) {
		round_slice(dk, koff, ldk, x.dk, T, hd);
		round_slice(dv, koff, ldk, x.dv, T, hd);
	}
}

void tk_cpu_attention_bwd(int dt, void *dq, void *dk, void *dv,
			  const void *dout, const void *out, const float *lse,
			  const void *q, const void *k, const void *v,
			  const int32_t *pos, int B, int T, int nh, int nkv,
			  int hd, int window, float scale)
{
	struct att_dims d = {B, T, nh, nkv, hd, window, scale};
	int nblocks = B * nkv, par = blocks_in_parallel(nblocks);
	int blas_threads = openblas_get_num_threads();
	size_t scratch = (size_t)ATT_QT * (T > 0 ? T : 1) * sizeof(float);
	size_t wide = dt == TK_BF16 ? (size_t)8 * T * hd * sizeof(float) : 0;

	if (nblocks <= 0 || T <= 0 || (dt != TK_F32 && dt != TK_BF16))
		return;
	if (par)
		openblas_set_num_threads(1);
#pragma omp parallel if (par)
	{
		float *S = att_scratch(2 * scratch + wide);
#pragma omp for schedule(dynamic, 1)
		for (int bg = 0; bg < nblocks; bg++)
			att_bwd_block(dt, dq, dk, dv, dout, out, lse, q, k, v,
				      pos, &d, bg / nkv, bg % nkv, S,
				      S + scratch / sizeof(float),
				      S + 2 * scratch / sizeof(float));
		free(S);
	}
	if (par)
		openblas_set_num_threads(blas_threads);
}
