/* pref.c: a DPO run's reference log-probabilities and its metrics.
 *
 * DPO's reference model is the starting model. Its log-probability of
 * each output is all the loss needs of it, so one forward pass over the
 * pairs before the first step replaces a second model in memory. The
 * values go to the output directory (written atomically, with a digest of
 * the data and the settings they belong to; the checkpoints name it), so
 * that a resumed run, whose weights have moved, reads them back instead
 * of recomputing them from the wrong weights. */
#include "pref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tk_hash.h"
#include "util/fsutil.h"
#include "util/json_file.h"

#define REF_MAX_BYTES ((size_t)1 << 30)

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t mix_data(uint64_t h, const taco_data *d)
{
	h = tk_splitmix64(h ^ (d ? d->n : 0));
	for (size_t i = 0; d && i < d->n_tokens; i++)
		h = tk_splitmix64(h ^ ((uint64_t)(uint32_t)d->tokens[i] << 32 ^
				       (uint32_t)d->labels[i]));
	for (size_t i = 0; d && i <= d->n; i++)
		h = tk_splitmix64(h ^ d->off[i]);
	return h;
}

/* Of the data, the sequence length, the batch shape and the precision:
 * what the values depend on besides the starting weights (the job's
 * model, which a resumed job keeps). */
static void digest_of(const taco_model *m, const taco_data *train,
		      const taco_data *val, int P, int T, char out[17])
{
	uint64_t h = tk_splitmix64(0x726566ull ^ (uint64_t)T);

	h = tk_splitmix64(h ^ (uint64_t)P ^ (uint64_t)m->act_dtype << 20);
	h = mix_data(h, train);
	h = mix_data(h ^ 0x76616c, val);
	snprintf(out, 17, "%016llx", (unsigned long long)h);
}

/* A training micro-batch costs about three of the pass's forward passes of
 * the same shape: the forward, and a backward of about twice its
 * multiply-adds (activation recompute adds a little; the estimate leaves it
 * out). The first "progress" event replaces it with measured time. */
#define TRAIN_FORWARDS 3.0

/* The pass over both sets, for its events. */
typedef struct pass_state {
	const taco_pref_pass *p;
	double t0, last;
	size_t done, total; /* pairs */
	int64_t batches;
} pass_state;

static void pass_report(pass_state *ps, const char *set, size_t pairs,
			size_t set_total)
{
	double t = now(), el = t - ps->t0;
	double per_batch = el / (double)ps->batches;
	double eta =
	    ps->done ? el / (double)ps->done * (double)(ps->total - ps->done)
		     : 0;
	double train =
	    per_batch * TRAIN_FORWARDS * (double)ps->p->train_batches;

	/* a few events a minute, and the last of each set */
	if (t - ps->last < 5.0 && pairs != set_total)
		return;
	ps->last = t;
	taco_events_emit(ps->p->ev, "reference",
			 json_pack("{ss sI sI sf sf sf}", "set", set, "pairs",
				   (json_int_t)pairs, "total_pairs",
				   (json_int_t)set_total, "elapsed_s", el,
				   "eta_s", eta, "train_eta_s", train));
	if (ps->p->progress)
		fprintf(stderr, "reference log-probs (%s): %zu/%zu pairs\n",
			set, pairs, set_total);
}

/* One set: 2 values a pair, P pairs a forward pass. */
static int score_set(taco_model *m, const taco_data *d, int P, int T,
		     double *out, pass_state *ps, const char *set,
		     taco_err *err)
{
	size_t n = d->n / 2, rows = (size_t)2 * P * T;
	int32_t *tok = malloc(rows * sizeof(int32_t));
	int32_t *tgt = malloc(rows * sizeof(int32_t));
	int32_t *pos = malloc(rows * sizeof(int32_t));
	double *sums = malloc((size_t)2 * P * sizeof(double));
	int r = 0;

	if (!tok || !tgt || !pos || !sums) {
		r = taco_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	for (size_t first = 0; first < n; first += (size_t)P) {
		size_t k = n - first < (size_t)P ? n - first : (size_t)P;
		taco_batch b = {2 * P, T, tok, tgt, pos, 0};

		taco_data_pair_rows(d, first, P, T, tok, tgt, pos);
		if ((r = taco_model_score(m, &b, sums, err)))
			goto out;
		memcpy(out + 2 * first, sums, 2 * k * sizeof(double));
		ps->done += k;
		ps->batches++;
		pass_report(ps, set, first + k, n);
	}
out:
	free(tok);
	free(tgt);
	free(pos);
	free(sums);
	return r;
}

static json_t *values(const double *v, size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < n; i++)
		if (json_array_append_new(a, json_real(v[i]))) {
			json_decref(a);
			return NULL;
		}
	return a;
}

static int write_ref(const char *path, const taco_pref_ref *r, taco_err *err)
{
	json_t *o = json_pack("{ss so so}", "digest", r->digest, "train",
			      values(r->train, 2 * r->n_train), "validation",
			      values(r->val, 2 * r->n_val));
	char *text;
	int e;

	if (!o)
		return taco_err_set(err, -ENOMEM, "out of memory");
	/* 17 digits: every double reads back as itself */
	text = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
	json_decref(o);
	if (!text)
		return taco_err_set(err, -ENOMEM, "out of memory");
	e = taco_write_file_atomic(path, text, strlen(text), err);
	free(text);
	return e;
}

static int read_values(json_t *a, double *v, size_t n)
{
	if (!json_is_array(a) || json_array_size(a) != n)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		json_t *x = json_array_get(a, i);
		if (!json_is_number(x) || !isfinite(json_number_value(x)))
			return -EINVAL;
		v[i] = json_number_value(x);
	}
	return 0;
}

static int read_ref(json_t *root, const char *name, void *arg, taco_err *err)
{
	taco_pref_ref *r = arg;
	const char *d = json_string_value(json_object_get(root, "digest"));

	if (!d || strcmp(d, r->digest))
		return taco_err_set(
		    err, -ESTALE, "%s: made for other data or settings", name);
	if (read_values(json_object_get(root, "train"), r->train,
			2 * r->n_train) ||
	    read_values(json_object_get(root, "validation"), r->val,
			2 * r->n_val))
		return taco_err_set(err, -EINVAL,
				    "%s: \"train\" and \"validation\" must "
				    "hold two finite numbers a pair",
				    name);
	return 0;
}

int taco_pref_ref_ensure(taco_model *m, const taco_data *train,
			 const taco_data *val, int P, int T,
			 const char *output_dir, int must_exist,
			 const taco_pref_pass *pass, taco_pref_ref *out,
			 taco_err *err)
{
	taco_pref_ref r = {0};
	pass_state ps = {pass, 0, 0, 0, 0, 0};
	char *path = taco_path_join(output_dir, TACO_PREF_REF_FILE);
	taco_err rerr = {{0}};
	int e;

	r.n_train = train->n / 2;
	r.n_val = val ? val->n / 2 : 0;
	r.train = calloc(2 * r.n_train + 1, sizeof(double));
	r.val = calloc(2 * r.n_val + 1, sizeof(double));
	if (!path || !r.train || !r.val) {
		e = taco_err_set(err, -ENOMEM, "out of memory");
		goto fail;
	}
	digest_of(m, train, val, P, T, r.digest);
	e = taco_json_read_file(path, REF_MAX_BYTES, 0, read_ref, &r, &rerr);
	if (!e)
		goto done;
	if (must_exist) {
		e = taco_err_set(err, e == -ENOENT ? -ENOENT : e,
				 "%s; the checkpoint's weights are no longer "
				 "the reference: start the job anew",
				 rerr.msg);
		goto fail;
	}
	ps.t0 = ps.last = now();
	ps.total = r.n_train + r.n_val;
	if ((e = score_set(m, train, P, T, r.train, &ps, "train", err)) ||
	    (val &&
	     (e = score_set(m, val, P, T, r.val, &ps, "validation", err))) ||
	    (e = write_ref(path, &r, err)))
		goto fail;
done:
	free(path);
	*out = r;
	return 0;
fail:
	free(path);
	taco_pref_ref_free(&r);
	return e;
}

void taco_pref_ref_free(taco_pref_ref *r)
{
	free(r->train);
	free(r->val);
	r->train = r->val = NULL;
}

void taco_pref_sums_add(taco_pref_sums *s, double beta, const double *logp,
			const double *ref, int n)
{
	double loss[1];

	for (int i = 0; i < n; i++) {
		double rc = beta * (logp[2 * i] - ref[2 * i]);
		double rr = beta * (logp[2 * i + 1] - ref[2 * i + 1]);
		taco_pref_loss(beta, logp + 2 * i, ref + 2 * i, 1, 1, loss,
			       NULL);
		s->pairs++;
		s->loss += loss[0];
		s->reward_c += rc;
		s->reward_r += rr;
		s->correct += rc > rr;
		s->logp_c += logp[2 * i];
		s->logp_r += logp[2 * i + 1];
	}
}

void taco_pref_sums_json(const taco_pref_sums *s, const char *prefix, int loss,
			 json_t *o)
{
	static const char *const names[] = {
	    "rewards/chosen",	  "rewards/rejected", "rewards/margins",
	    "rewards/accuracies", "logps/chosen",     "logps/rejected"};
	double n = s->pairs ? (double)s->pairs : 1.0;
	double v[6] = {s->reward_c / n,
		       s->reward_r / n,
		       (s->reward_c - s->reward_r) / n,
		       (double)s->correct / n,
		       s->logp_c / n,
		       s->logp_r / n};
	char key[64];

	for (int i = 0; i < 6; i++) {
		snprintf(key, sizeof(key), "%s%s", prefix, names[i]);
		json_object_set_new(o, key, json_real(v[i]));
	}
	if (loss) {
		snprintf(key, sizeof(key), "%sloss", prefix);
		json_object_set_new(o, key, json_real(s->loss / n));
	}
	snprintf(key, sizeof(key), "%spairs", prefix);
	json_object_set_new(o, key, json_integer((json_int_t)s->pairs));
}
