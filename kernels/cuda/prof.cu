/* prof.cu: the profile of tk_ops.h (tk_cuda_profile_start / stop), by
 * phase, from timing events around every op.
 *
 * The engine holds a pointer to the module's one table (ops_table.cu), so
 * start swaps the table's op pointers for wrappers and stop puts the saved
 * ones back: nothing in the engine knows it is profiled, and an op costs
 * nothing extra when it is not. A wrapper records an event on the stream
 * the op runs on (tkc_stream(): main, or side between side_begin and
 * side_end), calls the real op, and records a second event on the same
 * stream; the time between the two is the op's. Ops of one stream run in
 * issue order, so the durations of one stream add up to its busy time.
 * copy_async is timed on the copy stream through memory.cu's hook, after
 * the copy stream's wait for the compute stream (that wait is not copy
 * work).
 *
 * Not wrapped: memory management (alloc, free, mem_*, host_*), the stream
 * waits (copy_wait, side_begin/end/wait) and taco_scan_bytes, which are no
 * device work; a wait of the main stream for the side or copy stream is
 * therefore a gap between ops, counted as idle.
 *
 * Limits, for reading the numbers: an event pair times what the stream did
 * between the two records, so an op whose stream was empty when it was
 * issued also counts its launch latency, and an op that waits for the host
 * inside (upload, download: they synchronise) counts that wait. Two event
 * records per op add host time; a step whose host issues slower than the
 * GPU runs gets slower by it.
 *
 * Events come from a pool created by start (creating them inside the
 * profiled work would cost more than recording them); when it runs out,
 * the ops that follow are not timed and stop says -ENOSPC.
 *
 * Lock order: copy_async holds memory.cu's lock when it calls the hook,
 * which takes prof_lock, so the hook is set and cleared outside prof_lock.
 * start and stop are meant to be called between ops, by the thread that
 * issues them (a benchmark's); the table's pointers change under it.
 */
#include <errno.h>
#include <mutex>
#include <stdlib.h>
#include <string.h>

#include "cuda_ops.h"

/* Events of the pool: two per op, and the profile's start and stop. */
#define PROF_EVENTS (1 << 17)
#define EV_START 0
#define EV_STOP 1
#define EV_FIRST_OP 2

/* Every member of tk_ops, so that an op added there cannot be left out
 * of the profile unnoticed: wrap it below, or say why it is not device
 * work, and count it here. */
#define TK_OPS_MEMBERS 70
static_assert(sizeof(tk_ops) == TK_OPS_MEMBERS * sizeof(void *),
	      "tk_ops has a new member: wrap it in prof.cu and count it");

enum where { ON_MAIN, ON_SIDE, ON_COPY };

/* One timed op: events ev (before) and ev + 1 (after) on stream s. */
struct prof_rec {
	cudaStream_t s;
	int phase; /* enum tk_phase; -1: its second event was not recorded */
	int where;
	int ev;
};

static std::mutex prof_lock;
static int profiling;
static int full;	/* the pool ran out: later ops were not timed */
static int failed;	/* an event record failed */
static tk_ops *live;	/* the module's table, wrapped */
static tk_ops real;	/* its ops as they were at start */
static cudaEvent_t *ev; /* the pool, ncreated of PROF_EVENTS */
static int ncreated;
static int nused;
static prof_rec *rec; /* one per timed op, nrec */
static int nrec;
static int copy_open = -1; /* the record of the copy being issued */

static void pool_free(void)
{
	for (int i = 0; i < ncreated; i++)
		cudaEventDestroy(ev[i]);
	free(ev);
	free(rec);
	ev = NULL;
	rec = NULL;
	ncreated = nused = nrec = 0;
}

/* Under prof_lock: the first event of an op in phase on stream s; its
 * record, or -1 when it is not timed. */
static int mark(int phase, cudaStream_t s, int where)
{
	int i;

	if (!profiling || full || failed)
		return -1;
	if (nused + 2 > ncreated) {
		full = 1;
		return -1;
	}
	if (cudaEventRecord(ev[nused], s) != cudaSuccess) {
		/* the profile's failure, not the next op's: the engine's
		 * launch checks read cudaGetLastError */
		(void)cudaGetLastError();
		failed = 1;
		return -1;
	}
	i = nrec++;
	rec[i] = prof_rec{s, phase, where, nused};
	nused += 2;
	return i;
}

/* Under prof_lock: the second event of record i. */
static void mark_end(int i)
{
	if (i < 0 || !profiling || i >= nrec)
		return;
	if (cudaEventRecord(ev[rec[i].ev + 1], rec[i].s) != cudaSuccess) {
		(void)cudaGetLastError();
		failed = 1;
		rec[i].phase = -1;
	}
}

static int op_begin(int phase)
{
	std::lock_guard<std::mutex> g(prof_lock);
	cudaStream_t s = tkc_stream();

	return mark(phase, s, s == tkc_main_stream() ? ON_MAIN : ON_SIDE);
}

static void op_end(int i)
{
	std::lock_guard<std::mutex> g(prof_lock);

	mark_end(i);
}

/* memory.cu's hook: called around each copy_async's copy, on the copy
 * stream, one copy at a time (under the copy lock). */
static void copy_hook(int after, cudaStream_t s)
{
	std::lock_guard<std::mutex> g(prof_lock);

	if (!after) {
		copy_open = mark(TK_PHASE_COPY, s, ON_COPY);
	} else {
		mark_end(copy_open);
		copy_open = -1;
	}
}

/* w_OP: OP of the saved table, between two events, in phase PHASE. Every
 * op of tk_ops.h that is device work has one, also those the table may
 * not have yet (the fused ops): start installs those whose real op is
 * there. */
#define WRAP(op, phase, params, args)                                          \
	static void w_##op params                                              \
	{                                                                      \
		int i = op_begin(phase);                                       \
		real.op args;                                                  \
		op_end(i);                                                     \
	}

WRAP(upload, TK_PHASE_COPY, (void *dst, const void *src, size_t bytes),
     (dst, src, bytes))
WRAP(download, TK_PHASE_COPY, (void *dst, const void *src, size_t bytes),
     (dst, src, bytes))
WRAP(memset0, TK_PHASE_ELEMENTWISE, (void *p, size_t bytes), (p, bytes))
WRAP(to_f32, TK_PHASE_ELEMENTWISE,
     (float *dst, const void *src, int dtype, size_t n), (dst, src, dtype, n))
WRAP(convert, TK_PHASE_ELEMENTWISE,
     (void *dst, int dst_dtype, const void *src, int src_dtype, size_t n),
     (dst, dst_dtype, src, src_dtype, n))
WRAP(matmul, TK_PHASE_GEMM,
     (int transa, int transb, int M, int N, int K, float alpha, int ab_dtype,
      const void *A, int lda, const void *B, int ldb, float beta, int c_dtype,
      void *C, int ldc),
     (transa, transb, M, N, K, alpha, ab_dtype, A, lda, B, ldb, beta, c_dtype,
      C, ldc))
WRAP(add, TK_PHASE_ELEMENTWISE, (int dt, void *y, const void *x, size_t n),
     (dt, y, x, n))
WRAP(bias_fwd, TK_PHASE_ELEMENTWISE,
     (int dt, void *y, const void *bias, int rows, int C),
     (dt, y, bias, rows, C))
WRAP(bias_bwd, TK_PHASE_ELEMENTWISE,
     (int dt, float *dbias, const void *dy, int rows, int C),
     (dt, dbias, dy, rows, C))
WRAP(embedding_fwd, TK_PHASE_ELEMENTWISE,
     (int dt, void *out, const void *table, const int32_t *tokens, int n,
      int H),
     (dt, out, table, tokens, n, H))
WRAP(embedding_bwd, TK_PHASE_ELEMENTWISE,
     (int dt, float *dtable, const void *dout, const int32_t *rows, int n,
      int H, int r0, int nr),
     (dt, dtable, dout, rows, n, H, r0, nr))
WRAP(rmsnorm_fwd, TK_PHASE_ELEMENTWISE,
     (int dt, void *out, float *rstd, const void *x, const void *w, int n,
      int H, float eps),
     (dt, out, rstd, x, w, n, H, eps))
WRAP(rmsnorm_bwd, TK_PHASE_ELEMENTWISE,
     (int dt, void *dx, float *dw, const void *dout, const void *x,
      const void *w, const float *rstd, int n, int H),
     (dt, dx, dw, dout, x, w, rstd, n, H))
WRAP(rope_fwd, TK_PHASE_ELEMENTWISE,
     (int dt, void *x, const float *cos, const float *sin, const int32_t *pos,
      int n, int heads, int hd),
     (dt, x, cos, sin, pos, n, heads, hd))
WRAP(rope_bwd, TK_PHASE_ELEMENTWISE,
     (int dt, void *dx, const float *cos, const float *sin, const int32_t *pos,
      int n, int heads, int hd),
     (dt, dx, cos, sin, pos, n, heads, hd))
WRAP(add_rmsnorm_fwd, TK_PHASE_ELEMENTWISE,
     (int dt, void *x, const void *r, void *out, float *rstd, const void *w,
      int n, int H, float eps),
     (dt, x, r, out, rstd, w, n, H, eps))
WRAP(rmsnorm_bwd_add, TK_PHASE_ELEMENTWISE,
     (int dt, void *dres, float *dw, const void *dout, const void *x,
      const void *w, const float *rstd, int n, int H),
     (dt, dres, dw, dout, x, w, rstd, n, H))
WRAP(qknorm_rope_fwd, TK_PHASE_ELEMENTWISE,
     (int dt, void *out, float *rstd, const void *x, const void *w,
      const float *cos, const float *sin, const int32_t *pos, int n, int heads,
      int hd, int rd, float eps),
     (dt, out, rstd, x, w, cos, sin, pos, n, heads, hd, rd, eps))
WRAP(qknorm_rope_bwd, TK_PHASE_ELEMENTWISE,
     (int dt, void *dx, float *dw, const void *dout, const void *x,
      const void *w, const float *rstd, const float *cos, const float *sin,
      const int32_t *pos, int n, int heads, int hd, int rd),
     (dt, dx, dw, dout, x, w, rstd, cos, sin, pos, n, heads, hd, rd))
WRAP(linear_bias, TK_PHASE_GEMM,
     (int M, int N, int K, int ab_dtype, const void *A, int lda, const void *B,
      int ldb, const void *bias, int c_dtype, void *C, int ldc),
     (M, N, K, ab_dtype, A, lda, B, ldb, bias, c_dtype, C, ldc))
WRAP(attention_fwd, TK_PHASE_ATTENTION,
     (int dt, void *out, float *lse, const void *q, const void *k,
      const void *v, const int32_t *pos, int B, int T, int nh, int nkv, int hd,
      int window, float scale),
     (dt, out, lse, q, k, v, pos, B, T, nh, nkv, hd, window, scale))
WRAP(attention_bwd, TK_PHASE_ATTENTION,
     (int dt, void *dq, void *dk, void *dv, const void *dout, const void *out,
      const float *lse, const void *q, const void *k, const void *v,
      const int32_t *pos, int B, int T, int nh, int nkv, int hd, int window,
      float scale),
     (dt, dq, dk, dv, dout, out, lse, q, k, v, pos, B, T, nh, nkv, hd, window,
      scale))
WRAP(kv_store, TK_PHASE_ATTENTION,
     (int dt, void *kc, void *vc, const void *k, const void *v,
      const int32_t *seq, const int32_t *pos, int n, int nkv, int hd, int ctx),
     (dt, kc, vc, k, v, seq, pos, n, nkv, hd, ctx))
WRAP(attention_decode, TK_PHASE_ATTENTION,
     (int dt, void *out, float *lse, const void *q, const void *kc,
      const void *vc, const int32_t *seq, const int32_t *pos, int n, int nh,
      int nkv, int hd, int ctx, int window, float scale),
     (dt, out, lse, q, kc, vc, seq, pos, n, nh, nkv, hd, ctx, window, scale))
WRAP(attn_sink_fwd, TK_PHASE_ATTENTION,
     (int dt, void *out, float *lse, const float *sinks, int B, int T, int nh,
      int hd),
     (dt, out, lse, sinks, B, T, nh, hd))
WRAP(attn_sink_bwd, TK_PHASE_ATTENTION,
     (int dt, float *dsinks, const void *dout, const void *out,
      const float *lse, const float *sinks, int B, int T, int nh, int hd),
     (dt, dsinks, dout, out, lse, sinks, B, T, nh, hd))
WRAP(glu_clamp_fwd, TK_PHASE_ELEMENTWISE,
     (int dt, void *out, const void *gu, size_t n, int ni, float alpha,
      float limit),
     (dt, out, gu, n, ni, alpha, limit))
WRAP(glu_clamp_bwd, TK_PHASE_ELEMENTWISE,
     (int dt, void *dgu, const void *dout, const void *gu, size_t n, int ni,
      float alpha, float limit),
     (dt, dgu, dout, gu, n, ni, alpha, limit))
WRAP(moe_route, TK_PHASE_ELEMENTWISE,
     (int mode, int norm, int wdt, const float *logits, int N, int E, int k,
      int32_t *idx, float *w),
     (mode, norm, wdt, logits, N, E, k, idx, w))
WRAP(moe_route_bwd, TK_PHASE_ELEMENTWISE,
     (int mode, int norm, const float *logits, const int32_t *idx,
      const float *dw, const float *extra, int N, int E, int k, float *dlogits),
     (mode, norm, logits, idx, dw, extra, N, E, k, dlogits))
WRAP(moe_prob_sum, TK_PHASE_ELEMENTWISE,
     (const float *logits, int N, int E, float *psum), (logits, N, E, psum))
WRAP(moe_sort, TK_PHASE_ELEMENTWISE,
     (const int32_t *idx, int N, int E, int k, int32_t *order, int32_t *inv,
      int32_t *counts),
     (idx, N, E, k, order, inv, counts))
WRAP(moe_gather, TK_PHASE_ELEMENTWISE,
     (int dt, void *xg, const void *x, const int32_t *order, int M, int k,
      int H),
     (dt, xg, x, order, M, k, H))
WRAP(moe_combine, TK_PHASE_ELEMENTWISE,
     (int dt, void *out, const void *y, const int32_t *inv, const float *w,
      int N, int k, int H),
     (dt, out, y, inv, w, N, k, H))
WRAP(moe_combine_bwd, TK_PHASE_ELEMENTWISE,
     (int dt, void *dy, float *dw, const void *dout, const void *y,
      const int32_t *inv, const float *w, int N, int k, int H),
     (dt, dy, dw, dout, y, inv, w, N, k, H))
WRAP(moe_scatter, TK_PHASE_ELEMENTWISE,
     (int dt, void *dx, const void *dxg, const int32_t *inv, int N, int k,
      int H),
     (dt, dx, dxg, inv, N, k, H))
WRAP(swiglu_fwd, TK_PHASE_ELEMENTWISE,
     (int dt, void *out, const void *gate, const void *up, size_t n),
     (dt, out, gate, up, n))
WRAP(swiglu_bwd, TK_PHASE_ELEMENTWISE,
     (int dt, void *dgate, void *dup, const void *dout, const void *gate,
      const void *up, size_t n),
     (dt, dgate, dup, dout, gate, up, n))
WRAP(ce_stats, TK_PHASE_LOSS,
     (const tk_ce_rows *s, const float *logits, int ldl, const int32_t *targets,
      int n, int v0, int Vc),
     (s, logits, ldl, targets, n, v0, Vc))
WRAP(ce_finish, TK_PHASE_LOSS,
     (const tk_ce_rows *s, const int32_t *targets, int n, double *sums,
      double *row_loss),
     (s, targets, n, sums, row_loss))
WRAP(ce_grad, TK_PHASE_LOSS,
     (int dt, void *dlogits, int ldd, const float *logits, int ldl,
      const tk_ce_rows *s, const int32_t *targets, int n, int v0, int Vc,
      float grad_scale),
     (dt, dlogits, ldd, logits, ldl, s, targets, n, v0, Vc, grad_scale))
WRAP(taco_update, TK_PHASE_OPTIMIZER,
     (void *W, int dtype, const float *G, int ldg, void *idx, uint8_t *q,
      float *scale, const tk_taco_args *a),
     (W, dtype, G, ldg, idx, q, scale, a))
WRAP(taco_begin, TK_PHASE_OPTIMIZER,
     (void *scan, const void *idx, const uint8_t *q, const float *scale,
      const tk_taco_args *a),
     (scan, idx, q, scale, a))
WRAP(taco_feed, TK_PHASE_OPTIMIZER,
     (void *scan, const float *G, int ldg, const int32_t *rows, int row0,
      int nrows, const tk_taco_args *a),
     (scan, G, ldg, rows, row0, nrows, a))
WRAP(taco_finish, TK_PHASE_OPTIMIZER,
     (void *scan, void *W, int dtype, void *idx, uint8_t *q, float *scale,
      const tk_taco_args *a),
     (scan, W, dtype, idx, q, scale, a))
WRAP(taco_gather, TK_PHASE_OPTIMIZER,
     (void *vals, const void *W, int dtype, const void *idx, int R, int C,
      int k),
     (vals, W, dtype, idx, R, C, k))
WRAP(adamw_update, TK_PHASE_OPTIMIZER,
     (void *p, int dtype, float *master, float *m, float *v, const float *g,
      size_t n, const tk_adamw_args *a),
     (p, dtype, master, m, v, g, n, a))
WRAP(layernorm_fwd, TK_PHASE_ELEMENTWISE,
     (int dt, void *out, float *mean, float *rstd, const void *x, const void *w,
      const void *b, int n, int H, float eps),
     (dt, out, mean, rstd, x, w, b, n, H, eps))
WRAP(layernorm_bwd, TK_PHASE_ELEMENTWISE,
     (int dt, void *dx, float *dw, float *db, const void *dout, const void *x,
      const void *w, const float *mean, const float *rstd, int n, int H),
     (dt, dx, dw, db, dout, x, w, mean, rstd, n, H))
WRAP(act_fwd, TK_PHASE_ELEMENTWISE,
     (int dt, int act, void *out, const void *x, size_t n),
     (dt, act, out, x, n))
WRAP(act_bwd, TK_PHASE_ELEMENTWISE,
     (int dt, int act, void *dx, const void *dout, const void *x, size_t n),
     (dt, act, dx, dout, x, n))
WRAP(qkv_split, TK_PHASE_ELEMENTWISE,
     (int dt, void *q, void *k, void *v, const void *qkv, int n, int heads,
      int hd),
     (dt, q, k, v, qkv, n, heads, hd))
WRAP(qkv_merge, TK_PHASE_ELEMENTWISE,
     (int dt, void *dqkv, const void *dq, const void *dk, const void *dv, int n,
      int heads, int hd),
     (dt, dqkv, dq, dk, dv, n, heads, hd))
WRAP(dropout, TK_PHASE_ELEMENTWISE,
     (int dt, void *x, size_t n, float p, uint64_t seed, uint64_t stream),
     (dt, x, n, p, seed, stream))

/* Each op of t that real has gets its wrapper; an op real lacks stays
 * NULL (the engine tests for it and takes the unfused path). */
static void install(tk_ops *t)
{
#define INSTALL(op)                                                            \
	if (real.op)                                                           \
		t->op = w_##op;
	INSTALL(upload)
	INSTALL(download)
	INSTALL(memset0)
	INSTALL(to_f32)
	INSTALL(convert)
	INSTALL(matmul)
	INSTALL(add)
	INSTALL(bias_fwd)
	INSTALL(bias_bwd)
	INSTALL(embedding_fwd)
	INSTALL(embedding_bwd)
	INSTALL(rmsnorm_fwd)
	INSTALL(rmsnorm_bwd)
	INSTALL(rope_fwd)
	INSTALL(rope_bwd)
	INSTALL(add_rmsnorm_fwd)
	INSTALL(rmsnorm_bwd_add)
	INSTALL(qknorm_rope_fwd)
	INSTALL(qknorm_rope_bwd)
	INSTALL(linear_bias)
	INSTALL(attention_fwd)
	INSTALL(attention_bwd)
	INSTALL(kv_store)
	INSTALL(attention_decode)
	INSTALL(attn_sink_fwd)
	INSTALL(attn_sink_bwd)
	INSTALL(glu_clamp_fwd)
	INSTALL(glu_clamp_bwd)
	INSTALL(moe_route)
	INSTALL(moe_route_bwd)
	INSTALL(moe_prob_sum)
	INSTALL(moe_sort)
	INSTALL(moe_gather)
	INSTALL(moe_combine)
	INSTALL(moe_combine_bwd)
	INSTALL(moe_scatter)
	INSTALL(swiglu_fwd)
	INSTALL(swiglu_bwd)
	INSTALL(ce_stats)
	INSTALL(ce_finish)
	INSTALL(ce_grad)
	INSTALL(taco_update)
	INSTALL(taco_begin)
	INSTALL(taco_feed)
	INSTALL(taco_finish)
	INSTALL(taco_gather)
	INSTALL(adamw_update)
	INSTALL(layernorm_fwd)
	INSTALL(layernorm_bwd)
	INSTALL(act_fwd)
	INSTALL(act_bwd)
	INSTALL(qkv_split)
	INSTALL(qkv_merge)
	INSTALL(dropout)
#undef INSTALL
}

extern "C" TKC_EXPORT int tk_cuda_module_profile_start(void)
{
	tk_ops *t = tkc_table();

	if (!t)
		return -ENOSYS;
	{
		std::lock_guard<std::mutex> g(prof_lock);

		if (profiling)
			return -EBUSY;
		ev = (cudaEvent_t *)calloc(PROF_EVENTS, sizeof(*ev));
		rec = (prof_rec *)calloc(PROF_EVENTS / 2, sizeof(*rec));
		if (!ev || !rec) {
			pool_free();
			return -ENOMEM;
		}
		for (; ncreated < PROF_EVENTS; ncreated++)
			if (cudaEventCreate(&ev[ncreated]) != cudaSuccess) {
				(void)cudaGetLastError();
				pool_free();
				return -ENOMEM;
			}
		nused = EV_FIRST_OP;
		nrec = 0;
		full = failed = 0;
		copy_open = -1;
		if (cudaEventRecord(ev[EV_START], tkc_main_stream()) !=
		    cudaSuccess) {
			(void)cudaGetLastError();
			pool_free();
			return -EIO;
		}
		live = t;
		real = *t;
		install(t);
		profiling = 1;
	}
	tkc_set_copy_hook(copy_hook);
	return 0;
}

/* ms from event a to event b, both recorded and done; 0 if either was
 * not. */
static double elapsed_ms(cudaEvent_t a, cudaEvent_t b)
{
	float ms = 0;

	if (cudaEventElapsedTime(&ms, a, b) != cudaSuccess) {
		(void)cudaGetLastError();
		failed = 1;
		return 0;
	}
	return ms;
}

extern "C" TKC_EXPORT int tk_cuda_module_profile_stop(tk_profile *out)
{
	double busy = 0;
	int r;

	tkc_set_copy_hook(NULL); /* outside prof_lock: see the lock order */
	std::lock_guard<std::mutex> g(prof_lock);

	memset(out, 0, sizeof(*out));
	if (!profiling)
		return -EINVAL;
	if (cudaEventRecord(ev[EV_STOP], tkc_main_stream()) != cudaSuccess)
		failed = 1;
	/* The table first: ops issued from now on are not profiled. */
	*live = real;
	profiling = 0;
	if (cudaDeviceSynchronize() != cudaSuccess)
		failed = 1;
	(void)cudaGetLastError();
	for (int i = 0; i < nrec; i++) {
		const prof_rec *p = &rec[i];
		double ms;

		if (p->phase < 0)
			continue;
		ms = elapsed_ms(ev[p->ev], ev[p->ev + 1]);
		if (p->where == ON_COPY)
			out->copy_ms += ms;
		else if (p->where == ON_SIDE)
			out->side_ms[p->phase] += ms;
		else
			out->main_ms[p->phase] += ms;
		out->ops++;
	}
	out->wall_ms = elapsed_ms(ev[EV_START], ev[EV_STOP]);
	for (int p = 0; p < TK_PHASE_COUNT; p++)
		busy += out->main_ms[p];
	out->idle_ms = out->wall_ms > busy ? out->wall_ms - busy : 0;
	r = failed ? -EIO : full ? -ENOSPC : 0;
	pool_free();
	live = NULL;
	return r;
}
