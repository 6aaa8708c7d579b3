/* model_decode.c: generation's forward pass over a KV cache (decode.h).
 *
 * A call runs the embedding, every layer (the family's taco_layer_ops, in
 * a work of its own whose shape says gen: the attention stores the new
 * keys and values in the cache and reads it, lp_attention_fwd) and, for
 * the wanted tokens only, the final norm and the head. Streamed weights
 * pass through the same ring as in a training step (no write-back: nothing
 * is updated). Buffers are those of one call of at most `chunk` tokens; a
 * longer call runs in chunks, in order, so that a row's later tokens see
 * its earlier ones in the cache. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "decode.h"
#include "layer.h"

struct taco_kv {
	taco_model *m;
	taco_work *w;
	int rows, ctx, chunk;
	int *len;		   /* [rows] tokens in the cache */
	int32_t *pos, *ids, *want; /* host [chunk] */
	int *next;		   /* [rows] a call's next position */
	int rope_long;		   /* LongRoPE: the tables hold the long set */
	int32_t *hist;		   /* LongRoPE: [rows, ctx] the rows' tokens */
	int replaying;		   /* LongRoPE: recomputing the cache */
};

int taco_kv_len(const taco_kv *kv, int r)
{
	return r >= 0 && r < kv->rows ? kv->len[r] : 0;
}

void taco_kv_clear(taco_kv *kv, int r)
{
	if (r >= 0 && r < kv->rows)
		kv->len[r] = 0;
}

int taco_kv_rows(const taco_kv *kv)
{
	return kv->rows;
}

int taco_kv_ctx(const taco_kv *kv)
{
	return kv->ctx;
}

static int kv_check(const taco_model *m, int rows, int ctx, int chunk,
		    taco_err *err)
{
	const taco_config *cf = &m->cfg;

	if (rows < 1 || rows > TACO_KV_MAX_ROWS || ctx < 1 ||
	    ctx > TACO_KV_MAX_CTX || chunk < rows || chunk > TACO_MAX_TOKENS)
		return taco_err_set(err, -EINVAL,
				    "generation cache of %d rows x %d "
				    "positions, calls of %d tokens: need 1 <= "
				    "rows <= %d, 1 <= positions <= %d, rows <= "
				    "tokens <= %d",
				    rows, ctx, chunk, TACO_KV_MAX_ROWS,
				    TACO_KV_MAX_CTX, TACO_MAX_TOKENS);
	if (cf->learned_pos && ctx > cf->max_pos)
		return taco_err_set(err, -EINVAL,
				    "generation context %d: past the model's "
				    "%d learned positions",
				    ctx, cf->max_pos);
	if (cf->head_dim > TK_ATT_DEC_MAX_HD)
		return taco_err_set(err, -EINVAL,
				    "head_dim %d: generation's attention "
				    "takes at most %d",
				    cf->head_dim, TK_ATT_DEC_MAX_HD);
	return 0;
}

/* The work's shape; beside a step, a streamed model's ring is lent. */
static void kv_shape(const taco_model *m, int rows, int ctx, int chunk,
		     int beside, taco_work_shape *s)
{
	taco_gen_shape_of(m, rows, ctx, chunk, s);
	s->ring_lent = beside && s->stream > 0;
}

static int kv_plan(const taco_model *m, int rows, int ctx, int chunk,
		   int beside, uint64_t *term, uint64_t *host)
{
	taco_work_shape s;

	if (kv_check(m, rows, ctx, chunk, NULL))
		return -EINVAL;
	kv_shape(m, rows, ctx, chunk, beside, &s);
	return taco_work_plan_shape(m, &s, term, host);
}

int taco_kv_plan(const taco_model *m, int rows, int ctx, int chunk,
		 uint64_t *term, uint64_t *host)
{
	return kv_plan(m, rows, ctx, chunk, 0, term, host);
}

int taco_kv_plan_beside(const taco_model *m, int rows, int ctx, int chunk,
			uint64_t *term, uint64_t *host)
{
	return kv_plan(m, rows, ctx, chunk, 1, term, host);
}

void taco_kv_free(taco_kv *kv)
{
	if (!kv)
		return;
	taco_work_free(kv->m, kv->w);
	free(kv->len);
	free(kv->next);
	free(kv->pos);
	free(kv->ids);
	free(kv->want);
	free(kv->hist);
	free(kv);
}

/* The RoPE tables of every position of the cache, as prepare_batch
 * makes a batch's (model_step.c). */
static int upload_rope(taco_model *m, taco_work *w, int ctx, int rope_long)
{
	int half = m->cfg.rotary_dim / 2;
	const float *inv_freq = rope_long ? m->inv_freq_long : m->inv_freq;
	float *cs;

	if (!half)
		return 0;
	cs = malloc((size_t)ctx * half * 2 * sizeof(float));
	if (!cs)
		return -ENOMEM;
	for (int p = 0; p < ctx; p++)
		for (int i = 0; i < half; i++) {
			float a = (float)p * inv_freq[i];
			float f = (float)m->cfg.rope_attn_factor;
			cs[(size_t)p * half + i] = (float)cos((double)a) * f;
			cs[(size_t)(ctx + p) * half + i] =
			    (float)sin((double)a) * f;
		}
	m->ops->upload(w->rope_cos, cs, (size_t)ctx * half * sizeof(float));
	m->ops->upload(w->rope_sin, cs + (size_t)ctx * half,
		       (size_t)ctx * half * sizeof(float));
	free(cs);
	return 0;
}

static int kv_new(taco_model *m, int rows, int ctx, int chunk, int beside,
		  taco_kv **out, taco_err *err)
{
	taco_work_shape s;
	taco_kv *kv;
	int r;

	if ((r = kv_check(m, rows, ctx, chunk, err)))
		return r;
	kv = calloc(1, sizeof(*kv));
	if (!kv)
		return taco_err_set(err, -ENOMEM, "out of memory");
	kv->m = m;
	kv->rows = rows;
	kv->ctx = ctx;
	kv->chunk = chunk;
	kv->len = calloc((size_t)rows, sizeof(int));
	kv->next = calloc((size_t)rows, sizeof(int));
	kv->pos = malloc((size_t)chunk * 4);
	kv->ids = malloc((size_t)chunk * 4);
	kv->want = malloc((size_t)chunk * 4);
	if (m->cfg.rope_type == TACO_ROPE_LONGROPE &&
	    !(kv->hist = malloc((size_t)rows * ctx * 4))) {
		taco_kv_free(kv);
		return taco_err_set(err, -ENOMEM, "out of memory");
	}
	kv_shape(m, rows, ctx, chunk, beside, &s);
	if (kv->len && kv->next && kv->pos && kv->ids && kv->want)
		kv->w = taco_work_alloc(m, &s);
	if (!kv->w || upload_rope(m, kv->w, ctx, 0)) {
		taco_kv_free(kv);
		return taco_err_set(err, -ENOMEM,
				    "cannot allocate a generation cache of %d "
				    "rows x %d positions",
				    rows, ctx);
	}
	*out = kv;
	return 0;
}

int taco_kv_new(taco_model *m, int rows, int ctx, int chunk, taco_kv **out,
		taco_err *err)
{
	return kv_new(m, rows, ctx, chunk, 0, out, err);
}

int taco_kv_new_beside(taco_model *m, int rows, int ctx, int chunk,
		       taco_kv **out, taco_err *err)
{
	return kv_new(m, rows, ctx, chunk, 1, out, err);
}

/* A lent ring: the step work's, of the same layout (the model's streamed
 * layers), borrowed for this call. Between the step's calls its slots
 * hold nothing it needs: each call begins by emptying them (stream_begin)
 * and ends with its write-backs done. */
static int lend_ring(taco_model *m, taco_kv *kv, taco_err *err)
{
	taco_work *w = kv->w, *step = m->work;

	if (!w->s.ring_lent)
		return 0;
	if (!step || !step->ring || step->s.slots != w->s.slots ||
	    step->slot_bytes != w->slot_bytes)
		return taco_err_set(err, -EINVAL,
				    "generation beside a training step: the "
				    "model has no step buffers to lend their "
				    "weight ring");
	w->ring = step->ring;
	return 0;
}

/* LongRoPE: the call's last position (decode_check's kv->next) picks the
 * factors, as transformers' forward does; where they change, the cache is
 * recomputed with the new ones, as transformers' Phi-3 generation drops
 * its cache when it passes original_max_position_embeddings. */
static int longrope_switch(taco_model *m, taco_kv *kv, taco_err *err)
{
	int last = 0, want_long, r = 0;
	int32_t *seq = NULL;
	float none[1]; /* no logits wanted */

	for (int rw = 0; rw < kv->rows; rw++)
		if (kv->next[rw] > kv->len[rw] && kv->next[rw] - 1 > last)
			last = kv->next[rw] - 1;
	want_long = taco_config_rope_long(&m->cfg, last);
	if (want_long == kv->rope_long)
		return 0;
	if (upload_rope(m, kv->w, kv->ctx, want_long) ||
	    !(seq = malloc((size_t)kv->chunk * 4)))
		return taco_err_set(err, -ENOMEM, "out of memory");
	kv->rope_long = want_long;
	kv->replaying = 1;
	for (int rw = 0; rw < kv->rows && !r; rw++) {
		int n = kv->len[rw];
		kv->len[rw] = 0;
		for (int i = 0; i < kv->chunk; i++)
			seq[i] = rw;
		for (int i0 = 0; i0 < n && !r; i0 += kv->chunk) {
			int cn = n - i0 < kv->chunk ? n - i0 : kv->chunk;
			r = taco_model_decode(
			    m, kv, kv->hist + (size_t)rw * kv->ctx + i0, seq,
			    cn, NULL, 0, none, err);
		}
	}
	kv->replaying = 0;
	free(seq);
	return r;
}

/* Checks a call and sets each token's position; nothing changes on
 * error. */
static int decode_check(taco_kv *kv, const int32_t *tokens, const int32_t *seq,
			int n, const int32_t *want, int n_want, taco_err *err)
{
	int V = kv->m->cfg.vocab;

	if (n < 1 || n > TACO_MAX_TOKENS || n_want < 0 || n_want > kv->rows)
		return taco_err_set(err, -EINVAL,
				    "decode of %d tokens, %d logits: need 1 "
				    "to %d tokens, 0 to %d logits",
				    n, n_want, TACO_MAX_TOKENS, kv->rows);
	for (int r = 0; r < kv->rows; r++)
		kv->next[r] = kv->len[r];
	for (int i = 0; i < n; i++) {
		if (tokens[i] < 0 || tokens[i] >= V)
			return taco_err_set(err, -EINVAL,
					    "token %d: id %d outside the "
					    "vocabulary (%d)",
					    i, tokens[i], V);
		if (seq[i] < 0 || seq[i] >= kv->rows)
			return taco_err_set(err, -EINVAL,
					    "token %d: cache row %d of %d", i,
					    seq[i], kv->rows);
		if (kv->next[seq[i]] >= kv->ctx)
			return taco_err_set(err, -ENOSPC,
					    "cache row %d is full (%d "
					    "positions)",
					    seq[i], kv->ctx);
		kv->next[seq[i]]++;
	}
	for (int j = 0; j < n_want; j++)
		if (want[j] < 0 || want[j] >= n ||
		    (j && want[j] <= want[j - 1]))
			return taco_err_set(err, -EINVAL,
					    "wanted logits %d: token %d is not "
					    "an ascending index of the %d",
					    j, want[j], n);
	return 0;
}

/* Tokens [i0, i0 + n) of the call (positions in kv->pos): embedding,
 * layers, and the logits of the wanted ones among them (nw of them, at
 * want, indices into the chunk) into host. */
static void decode_chunk(taco_kv *kv, const int32_t *tokens, const int32_t *seq,
			 int i0, int n, int nw, float *host)
{
	taco_model *m = kv->m;
	taco_work *w = kv->w;
	const taco_config *cf = &m->cfg;
	taco_work_shape keep = w->s;
	size_t NH, es = tk_dtype_size(w->s.dt);
	int H = cf->hidden, L = cf->layers;
	step_ctx c;
	void *x;

	/* the layers size themselves by the work's shape: this call's */
	w->s.T = w->s.N = n;
	w->s.M = cf->experts > 0 ? n * cf->top_k : 0;
	m->ops->upload(w->tokens, tokens + i0, (size_t)n * 4);
	m->ops->upload(w->seq, seq + i0, (size_t)n * 4);
	m->ops->upload(w->pos, kv->pos, (size_t)n * 4);
	if (w->pos_ids) { /* OPT: the table's rows carry an offset of 2 */
		for (int i = 0; i < n; i++)
			kv->ids[i] = kv->pos[i] + 2;
		m->ops->upload(w->pos_ids, kv->ids, (size_t)n * 4);
	}
	memset(&c, 0, sizeof(c));
	c.m = m;
	c.o = m->ops;
	c.w = w;
	c.dt = w->s.dt;
	c.es = es;
	c.layer = step_layer_ops(m);
	NH = (size_t)n * H * es;
	stream_begin(&c);
	stream_prefetch(&c, 0);
	step_embed_fwd(&c, w->xs);
	for (int l = 0; l < L; l++) {
		if (stream_active(&c))
			c.o->copy_wait();
		stream_ready(&c, l);
		stream_prefetch(&c, l + 1);
		c.layer->fwd(&c, l, (char *)w->xs + (size_t)(l % 2) * NH,
			     (char *)w->xs + (size_t)((l + 1) % 2) * NH);
	}
	stream_end(&c);
	if (nw) {
		/* the wanted rows of the last output into the other half,
		 * then the final norm and the head over them */
		x = (char *)w->xs + (size_t)(L % 2) * NH;
		void *g = (char *)w->xs + (size_t)((L + 1) % 2) * NH;
		m->ops->upload(w->want, kv->want, (size_t)nw * 4);
		c.o->embedding_fwd(c.dt, g, x, w->want, nw, H);
		step_final_fwd(&c, g, nw);
		c.o->matmul(
		    0, 1, nw, cf->vocab, cf->proj_dim, 1.0f, c.dt, w->hf,
		    cf->proj_dim, step_weight_of(&c, m->lm_head, w->w_head),
		    cf->proj_dim, 0.0f, TK_F32, w->gen_logits, cf->vocab);
		m->ops->download(host, w->gen_logits,
				 (size_t)nw * cf->vocab * sizeof(float));
	}
	w->s = keep;
}

int taco_model_decode(taco_model *m, taco_kv *kv, const int32_t *tokens,
		      const int32_t *seq, int n, const int32_t *want,
		      int n_want, float *logits, taco_err *err)
{
	int r, j = 0;

	if (kv->m != m)
		return taco_err_set(err, -EINVAL,
				    "a generation cache of another model");
	if ((r = decode_check(kv, tokens, seq, n, want, n_want, err)) ||
	    (r = lend_ring(m, kv, err)))
		return r;
	if (m->cfg.rope_type == TACO_ROPE_LONGROPE && !kv->replaying &&
	    (r = longrope_switch(m, kv, err)))
		return r;
	for (int i0 = 0; i0 < n; i0 += kv->chunk) {
		int cn = n - i0 < kv->chunk ? n - i0 : kv->chunk, nw = 0;
		for (int i = 0; i < cn; i++) {
			kv->pos[i] = kv->len[seq[i0 + i]]++;
			if (kv->hist)
				kv->hist[(size_t)seq[i0 + i] * kv->ctx +
					 kv->pos[i]] = tokens[i0 + i];
		}
		while (j < n_want && want[j] < i0 + cn)
			kv->want[nw++] = want[j++] - i0;
		decode_chunk(kv, tokens, seq, i0, cn, nw,
			     logits + (size_t)(j - nw) * m->cfg.vocab);
	}
	return 0;
}
