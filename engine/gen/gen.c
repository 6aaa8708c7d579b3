/* gen.c: completions from prompts (gen.h): the prompts in one prefill
 * call, then one decode call a step over the rows still going, each
 * row's token sampled on the host, its text decoded and checked against
 * the stop strings, and what is certain handed to the caller. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gen.h"

void taco_completion_clear(taco_completion *c)
{
	if (!c)
		return;
	free(c->ids);
	free(c->text);
	memset(c, 0, sizeof(*c));
}

int taco_sampling_check(const taco_sampling *s, taco_err *err)
{
	if (s->max_tokens < 1)
		return taco_err_set(err, -EINVAL,
				    "max_tokens %d: must be at least 1",
				    s->max_tokens);
	if (!(s->temperature >= 0.0f && s->temperature <= 100.0f))
		return taco_err_set(err, -EINVAL,
				    "temperature %g: must be 0 to 100",
				    (double)s->temperature);
	if (!(s->top_p > 0.0f && s->top_p <= 1.0f))
		return taco_err_set(err, -EINVAL,
				    "top_p %g: must be above 0, at most 1",
				    (double)s->top_p);
	if (s->top_k < 0)
		return taco_err_set(err, -EINVAL, "top_k %d: must be >= 0",
				    s->top_k);
	if (s->n_stop < 0 || s->n_stop > TACO_GEN_MAX_STOP)
		return taco_err_set(err, -EINVAL,
				    "stop: at most %d strings, not %d",
				    TACO_GEN_MAX_STOP, s->n_stop);
	for (int i = 0; i < s->n_stop; i++) {
		size_t n = s->stop[i] ? strlen(s->stop[i]) : 0;
		if (n < 1 || n > TACO_GEN_MAX_STOP_LEN)
			return taco_err_set(err, -EINVAL,
					    "stop[%d]: 1 to %d bytes, not %zu",
					    i, TACO_GEN_MAX_STOP_LEN, n);
	}
	if (s->n_stop_ids < 0 || s->n_stop_ids > TACO_GEN_MAX_STOP_IDS)
		return taco_err_set(err, -EINVAL, "at most %d stop tokens",
				    TACO_GEN_MAX_STOP_IDS);
	return 0;
}

/* One completion's state while it grows. */
typedef struct row_state {
	int32_t *ids;
	int n, cap;
	char *text; /* decoded ids (cut at a stop string once found) */
	size_t len;
	size_t sent; /* bytes handed to the caller */
	int done, finish;
	taco_gen_rng rng;
} row_state;

static int is_stop_id(const taco_sampling *s, int32_t id)
{
	for (int i = 0; i < s->n_stop_ids; i++)
		if (s->stop_ids[i] == id)
			return 1;
	return 0;
}

/* The text that may still change: a suffix that begins a stop string,
 * or a decoded U+FFFD at the end (an unfinished UTF-8 sequence, which the
 * next token may complete). Returns the bytes that are certain. */
static size_t certain_len(const row_state *r, const taco_sampling *s)
{
	size_t keep = r->len;

	if (keep >= 3 && memcmp(r->text + keep - 3, "\xef\xbf\xbd", 3) == 0)
		keep -= 3;
	for (int i = 0; i < s->n_stop; i++) {
		size_t sl = strlen(s->stop[i]);
		/* the longest proper prefix of stop[i] ending the text */
		for (size_t p = sl - 1; p > 0; p--)
			if (p <= keep &&
			    memcmp(r->text + keep - p, s->stop[i], p) == 0) {
				keep -= p;
				break;
			}
	}
	return keep;
}

/* A decoded NUL (a byte-level token of byte 0) as U+FFFD: the text goes
 * into JSON lines and stores that take no U+0000 (tacod's event store, its
 * readers of worker lines). Returns text, or a new buffer (text freed);
 * NULL when out of memory. */
static char *no_nul(char *text, size_t *len)
{
	size_t nul = 0, k = 0;
	char *out;

	for (size_t i = 0; i < *len; i++)
		nul += text[i] == 0;
	if (!nul)
		return text;
	out = malloc(*len + 2 * nul + 1);
	if (!out) {
		free(text);
		return NULL;
	}
	for (size_t i = 0; i < *len; i++) {
		if (text[i]) {
			out[k++] = text[i];
		} else {
			memcpy(out + k, "\xef\xbf\xbd", 3);
			k += 3;
		}
	}
	out[k] = 0;
	*len = k;
	free(text);
	return out;
}

/* Appends id to row r: its text decoded again from all its ids (a
 * token's text depends on its neighbours: byte fallback, a leading
 * space), a stop string cut off. */
static int row_push(row_state *r, const taco_tok *tok, const taco_sampling *s,
		    int32_t id, taco_err *err)
{
	char *text = NULL;
	size_t len = 0, from;
	int rc;

	if (r->n == r->cap) {
		int cap = r->cap ? 2 * r->cap : 64;
		int32_t *p = realloc(r->ids, (size_t)cap * sizeof(*p));
		if (!p)
			return taco_err_set(err, -ENOMEM, "out of memory");
		r->ids = p;
		r->cap = cap;
	}
	r->ids[r->n++] = id;
	if ((rc = taco_tok_decode(tok, r->ids, (size_t)r->n, 1, &text, &len,
				  err)))
		return rc;
	if (!(text = no_nul(text, &len)))
		return taco_err_set(err, -ENOMEM, "out of memory");
	free(r->text);
	r->text = text;
	r->len = len;
	/* a stop string can only end in text this token changed: search
	 * from where the certain text ended */
	from = r->sent;
	for (int i = 0; i < s->n_stop; i++) {
		char *hit = memmem(r->text + from, r->len - from, s->stop[i],
				   strlen(s->stop[i]));
		if (hit && (size_t)(hit - r->text) < r->len) {
			r->len = (size_t)(hit - r->text);
			r->text[r->len] = '\0';
			r->done = 1;
			r->finish = TACO_FINISH_STOP;
		}
	}
	return 0;
}

/* Hands row i's new certain text (all of it once done) to the caller. */
static int row_emit(row_state *r, int i, const taco_sampling *s,
		    taco_gen_delta cb, void *ctx)
{
	size_t upto = r->done ? r->len : certain_len(r, s);

	if (upto <= r->sent)
		return 0;
	if (cb && cb(ctx, i, r->text + r->sent, upto - r->sent))
		return -ECANCELED;
	r->sent = upto;
	return 0;
}

static void rows_free(row_state *rs, int n)
{
	for (int i = 0; rs && i < n; i++) {
		free(rs[i].ids);
		free(rs[i].text);
	}
	free(rs);
}

/* The prompts of the n rows in one call, each row's last token's logits
 * wanted. */
static int prefill(taco_model *m, taco_kv *kv, const int32_t *const *prompt,
		   const int *plen, int n, float *lg, taco_err *err)
{
	int total = 0, at = 0, r;
	int32_t *tok, *seq, *want;

	for (int i = 0; i < n; i++)
		total += plen[i];
	tok = malloc((size_t)total * sizeof(*tok));
	seq = malloc((size_t)total * sizeof(*seq));
	want = malloc((size_t)n * sizeof(*want));
	if (!tok || !seq || !want) {
		r = taco_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < n; i++) {
		memcpy(tok + at, prompt[i], (size_t)plen[i] * sizeof(*tok));
		for (int j = 0; j < plen[i]; j++)
			seq[at + j] = i;
		at += plen[i];
		want[i] = at - 1;
	}
	r = taco_model_decode(m, kv, tok, seq, total, want, n, lg, err);
out:
	free(tok);
	free(seq);
	free(want);
	return r;
}

/* Samples each live row's next token from its logits (row order of
 * live[]); rows ending here are marked done. Returns the live rows that
 * go on, their tokens in next[] and rows in live[]. */
static int step_rows(row_state *rs, int *live, int nlive, const float *lg,
		     int V, const taco_tok *tok, const taco_sampling *s,
		     taco_kv *kv, int32_t *next, float *pf, int32_t *pi,
		     taco_gen_delta cb, void *cctx, taco_err *err)
{
	int go = 0, rc;

	for (int j = 0; j < nlive; j++) {
		int i = live[j];
		row_state *r = &rs[i];
		int32_t id =
		    taco_gen_sample(lg + (size_t)j * V, V, s, &r->rng, pf, pi);
		if (is_stop_id(s, id)) {
			r->done = 1;
			r->finish = TACO_FINISH_STOP;
		} else if ((rc = row_push(r, tok, s, id, err))) {
			return rc;
		}
		if (!r->done && (r->n >= s->max_tokens ||
				 taco_kv_len(kv, i) >= taco_kv_ctx(kv))) {
			r->done = 1;
			r->finish = TACO_FINISH_LENGTH;
		}
		if ((rc = row_emit(r, i, s, cb, cctx)))
			return rc;
		if (!r->done) {
			next[go] = id;
			live[go++] = i;
		}
	}
	return go;
}

int taco_generate(taco_model *m, taco_kv *kv, const taco_tok *tok,
		  const int32_t *const *prompt, const int *plen, int n,
		  const taco_sampling *s, taco_gen_delta on_delta, void *ctx,
		  taco_completion *out, taco_err *err)
{
	int V = m->cfg.vocab, rc, nlive = n;
	row_state *rs = NULL;
	float *lg = NULL, *pf = NULL;
	int32_t *pi = NULL, *next = NULL;
	int *live = NULL;

	if ((rc = taco_sampling_check(s, err)))
		return rc;
	if (n < 1 || n > taco_kv_rows(kv))
		return taco_err_set(err, -EINVAL,
				    "%d completions: the cache holds 1 to %d",
				    n, taco_kv_rows(kv));
	for (int i = 0; i < n; i++)
		if (plen[i] < 1 || plen[i] >= taco_kv_ctx(kv))
			return taco_err_set(err, -E2BIG,
					    "a prompt of %d tokens: the "
					    "context holds %d, and the "
					    "completion needs room",
					    plen[i], taco_kv_ctx(kv));
	rs = calloc((size_t)n, sizeof(*rs));
	lg = malloc((size_t)n * V * sizeof(*lg));
	pf = malloc((size_t)V * sizeof(*pf));
	pi = malloc((size_t)V * sizeof(*pi));
	next = malloc((size_t)n * sizeof(*next));
	live = malloc((size_t)n * sizeof(*live));
	if (!rs || !lg || !pf || !pi || !next || !live) {
		rc = taco_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < n; i++) {
		taco_kv_clear(kv, i);
		rs[i].rng = taco_gen_rng_of(s->seed, i);
		live[i] = i;
	}
	if ((rc = prefill(m, kv, prompt, plen, n, lg, err)))
		goto out;
	while (nlive > 0) {
		nlive = step_rows(rs, live, nlive, lg, V, tok, s, kv, next, pf,
				  pi, on_delta, ctx, err);
		if (nlive < 0) {
			rc = nlive;
			if (rc == -ECANCELED)
				taco_err_set(err, rc, "generation cancelled");
			goto out;
		}
		if (nlive == 0)
			break;
		/* the rows going on, in row order (live[] ascends): one
		 * token each, every one's logits wanted */
		for (int j = 0; j < nlive; j++)
			pi[j] = j;
		if ((rc = taco_model_decode(m, kv, next, live, nlive, pi, nlive,
					    lg, err)))
			goto out;
	}
	for (int i = 0; i < n; i++) {
		out[i].ids = rs[i].ids;
		out[i].n_ids = rs[i].n;
		out[i].text = rs[i].text ? rs[i].text : calloc(1, 1);
		out[i].len = rs[i].len;
		out[i].finish = rs[i].finish;
		rs[i].ids = NULL;
		rs[i].text = NULL;
	}
	rc = 0;
	for (int i = 0; i < n; i++)
		if (!out[i].text) {
			for (int j = 0; j < n; j++)
				taco_completion_clear(&out[j]);
			rc = taco_err_set(err, -ENOMEM, "out of memory");
		}
out:
	rows_free(rs, n);
	free(lg);
	free(pf);
	free(pi);
	free(next);
	free(live);
	return rc;
}
