/* train.c: the training loop. */
#include "train.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tk_hash.h"

#include "checkpoint.h"
#include "data/chat.h"
#include "data/data.h"
#include "data/job_data.h"
#include "dist.h"
#include "eval.h"
#include "events.h"
#include "export_gguf.h"
#include "gguf/gguf_export.h"
#include "model/export.h"
#include "model/model.h"
#include "optim/optim.h"
#include "plan/plan.h"
#include "pref.h"
#include "samples.h"
#include "util/fsutil.h"

/* The gradient consumer of a step: update each tensor at once (dense NULL)
 * or accumulate into dense (grad_accum > 1). */
typedef struct grad_ctx {
	taco_optim *o;	       /* NULL: no update */
	const uint8_t *frozen; /* NULL or a flag per tensor */
	float **dense;	       /* accumulated gradients, or NULL */
	/* dense: the tensors some piece of this step's gradient reached; the
	 * others (an expert that received no token) are not updated, as in
	 * part mode, where no piece means no update */
	uint8_t *touched;
	int micro; /* micro-batch of the running step */
	float lr;  /* of the running step */
} grad_ctx;

typedef struct trainer {
	const taco_job *job; /* &job_lr */
	/* the job as given, with its auto lr resolved for the model */
	taco_job job_lr;
	int lr_auto; /* the job's lr was auto */
	const taco_train_opts *opts;
	taco_model *m;
	taco_optim *o;
	taco_job_data data;
	taco_data *train, *val; /* data.train, data.val */
	const tk_ops *ops;	/* the backend trained on */
	int backend;		/* enum taco_plan_backend of ops */
	uint8_t *frozen;
	int32_t *tokens, *targets, *pos; /* [A, B, T] */
	size_t *order;
	uint64_t order_epoch;
	taco_cursor cur;
	int64_t step, total, start_step;
	int64_t eval_step; /* the step of the last evaluation; -1: none */
	int64_t tokens_seen;
	double t_start, loss;
	double accuracy; /* of the last step: targets that are the argmax */
	double aux_loss; /* of the last step: a mixture of experts' auxiliary
			  loss (its micro-batches' mean), when trained */
	taco_events ev;
	taco_plan plan;
	int lock_fd; /* flock of output_dir/.lock, -1 when not held */
	grad_ctx g;  /* gradient consumer of the running step */
	taco_plan_input plan_in; /* the settings admission chose */
	/* DPO (method dpo): rows are pairs' sequences */
	int dpo;
	taco_pref_ref ref;
	size_t *ids;	      /* [A * B] the step's pairs */
	double *refb, *logp;  /* [2B] a micro-batch's */
	taco_pref_sums last;  /* of the last step */
	char ckpt_digest[17]; /* the reference a resumed checkpoint names */
	/* data parallel (gpus): this rank among the job's; rank 0 alone
	 * writes (events, checkpoints, the export, the terminal) */
	taco_dist dist;
	taco_train_opts rank_opts; /* opts, for this rank */
	taco_samples samples;	   /* evaluation's answers */
} trainer;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int64_t taco_train_total_steps(const taco_job *job, size_t n_examples)
{
	double per_step = (double)job->batch_size * job->grad_accum;

	if (job->steps)
		return job->steps;
	return (int64_t)ceil(job->epochs * (double)n_examples / per_step);
}

/* Gradient consumer of part mode: each piece updates its tensor. */
static int on_part(void *ctx, taco_model *m, const taco_grad_part *p)
{
	grad_ctx *g = ctx;
	int r;

	(void)m;
	if (!g->o)
		return 0;
	r = taco_optim_apply_part(g->o, p, g->lr);
	return r;
}

/* Where a streamed tensor's update changed it: TACO's slot rows. */
static const void *on_changed_rows(void *ctx, taco_model *m, int id, int *k)
{
	grad_ctx *g = ctx;

	(void)m;
	return g->o ? taco_optim_changed_rows(g->o, id, k) : NULL;
}

/* Dense mode (grad_accum > 1, AdamW everywhere): the buffers to add into. */
static float *on_dense(void *ctx, taco_model *m, int id)
{
	grad_ctx *g = ctx;

	(void)m;
	g->touched[id] = 1;
	return g->dense[id];
}

int taco_train_step(taco_model *m, taco_optim *o, const uint8_t *frozen,
		    const taco_batch *b, float lr, taco_step_stats *stats,
		    taco_err *err)
{
	grad_ctx g = {o, frozen, NULL, NULL, 0, lr};
	taco_grad_sink sink = {on_part, NULL, frozen, &g, on_changed_rows};

	if (o)
		taco_optim_begin_step(o);
	return taco_model_step(m, b, 0, o ? &sink : NULL, stats, err);
}

/* CUDA ops return void and record their first failure: poll it. */
static int backend_check(trainer *tr, taco_err *err)
{
	const char *e;

	if (tr->backend != TACO_BACKEND_CUDA || !(e = tk_cuda_last_error()))
		return 0;
	return taco_err_set(err, -EIO, "CUDA backend: %s", e);
}

static int alloc_dense(trainer *tr, taco_err *err)
{
	taco_model *m = tr->m;

	tr->g.dense = calloc((size_t)m->n_tensors, sizeof(float *));
	tr->g.touched = calloc((size_t)m->n_tensors, 1);
	if (!tr->g.dense || !tr->g.touched)
		return taco_err_set(err, -ENOMEM, "out of memory");
	for (int i = 0; i < m->n_tensors; i++) {
		if (tr->frozen[i])
			continue;
		tr->g.dense[i] = m->ops->alloc(m->tensors[i].numel * 4);
		if (!tr->g.dense[i])
			return taco_err_set(err, -ENOMEM,
					    "cannot allocate the gradient "
					    "accumulation buffer of '%s'",
					    m->tensors[i].name);
	}
	return 0;
}

static void free_trainer(trainer *tr)
{
	if (tr->g.dense)
		for (int i = 0; i < tr->m->n_tensors; i++)
			if (tr->g.dense[i])
				tr->m->ops->free(tr->g.dense[i],
						 tr->m->tensors[i].numel * 4);
	free(tr->g.dense);
	free(tr->g.touched);
	taco_optim_free(tr->o);
	taco_samples_close(&tr->samples);
	taco_model_free(tr->m);
	taco_job_data_free(&tr->data);
	free(tr->frozen);
	free(tr->tokens);
	free(tr->targets);
	free(tr->pos);
	free(tr->order);
	free(tr->ids);
	free(tr->refb);
	free(tr->logp);
	taco_pref_ref_free(&tr->ref);
	taco_events_close(&tr->ev);
	if (tr->lock_fd >= 0)
		close(tr->lock_fd); /* releases the lock */
	taco_dist_close(&tr->dist);
}

/* One DPO step: grad_accum micro-batches of batch_size pairs (2 rows a
 * pair), the loss the mean over the step's pairs. */
static int pref_step(trainer *tr, taco_err *err)
{
	const taco_job *j = tr->job;
	int P = j->batch_size, A = j->grad_accum;
	size_t rows = (size_t)2 * P * j->seq_len;
	taco_pref pr = {j->dpo_beta, (int64_t)P * A, tr->refb};
	double loss = 0;
	int64_t correct = 0, targets = 0;
	int r;

	memset(&tr->last, 0, sizeof(tr->last));
	for (int a = 0; a < A; a++)
		taco_data_next_pairs(tr->train, j->optim.seed, &tr->cur,
				     tr->order, &tr->order_epoch, P, j->seq_len,
				     tr->tokens + a * rows,
				     tr->targets + a * rows, tr->pos + a * rows,
				     tr->ids + (size_t)a * P);
	tr->g.o = tr->o;
	tr->g.frozen = tr->frozen;
	tr->g.lr = (float)taco_job_lr(j, tr->step + 1, tr->total);
	if (tr->g.dense) {
		for (int i = 0; i < tr->m->n_tensors; i++)
			if (tr->g.dense[i]) {
				tr->m->ops->memset0(tr->g.dense[i],
						    tr->m->tensors[i].numel *
							4);
				tr->g.touched[i] = 0;
			}
	}
	taco_optim_begin_step(tr->o);
	for (tr->g.micro = 0; tr->g.micro < A; tr->g.micro++) {
		size_t at = (size_t)tr->g.micro * rows;
		taco_batch b = {
		    2 * P,
		    j->seq_len,
		    tr->tokens + at,
		    tr->targets + at,
		    tr->pos + at,
		    (uint64_t)tr->step * (uint64_t)A + (uint64_t)tr->g.micro};
		taco_grad_sink sink =
		    tr->g.dense ? (taco_grad_sink){NULL, on_dense, tr->frozen,
						   &tr->g, NULL}
				: (taco_grad_sink){on_part, NULL, tr->frozen,
						   &tr->g, on_changed_rows};
		taco_step_stats st;

		for (int i = 0; i < P; i++) {
			size_t id = tr->ids[(size_t)tr->g.micro * P + i];
			tr->refb[2 * i] = tr->ref.train[2 * id];
			tr->refb[2 * i + 1] = tr->ref.train[2 * id + 1];
		}
		if ((r = taco_model_step_pref(tr->m, &b, &pr, &sink, &st,
					      tr->logp, err)))
			return r;
		loss += st.loss_sum;
		correct += st.n_correct;
		targets += st.n_targets;
		taco_pref_sums_add(&tr->last, j->dpo_beta, tr->logp, tr->refb,
				   P);
	}
	for (int i = 0; tr->g.dense && i < tr->m->n_tensors; i++)
		if (tr->g.dense[i] && tr->g.touched[i])
			taco_optim_apply(tr->o, i, tr->g.dense[i], tr->g.lr);
	tr->step++;
	tr->tokens_seen += (int64_t)rows * A;
	tr->loss = loss / (double)((int64_t)P * A);
	tr->accuracy = targets ? (double)correct / (double)targets : 0.0;
	return 0;
}

/* A mixture of experts' sums over the ranks within a step (the routing's
 * counts: taco_model_set_rank_sum). */
static int rank_sum(void *ctx, double *v, int n)
{
	taco_err e = {{0}};

	return taco_dist_sum(ctx, v, n, &e);
}

/* One optimizer step over grad_accum micro-batches. Every rank reads the
 * whole global batch (the same data order everywhere) and runs rows
 * [rank * B / N, (rank + 1) * B / N) of each micro-batch; the loss is
 * normalised by the global batch's targets, so the ranks' summed gradients
 * are the one-rank gradient, up to the order of the additions. */
static int train_step(trainer *tr, taco_err *err)
{
	const taco_job *j = tr->job;
	size_t rows = (size_t)j->batch_size * j->seq_len;
	int Bl = j->batch_size / tr->dist.size;
	size_t mine = (size_t)tr->dist.rank * Bl * j->seq_len;
	int64_t norm = 0;
	double sums[2] = {0, 0}; /* loss, correct */
	double aux = 0;		 /* mean auxiliary loss */
	int r;

	if (tr->dpo)
		return pref_step(tr, err);
	for (int a = 0; a < j->grad_accum; a++)
		taco_data_next_batch(
		    tr->train, j->optim.seed, &tr->cur, tr->order,
		    &tr->order_epoch, j->batch_size, j->seq_len, j->packing,
		    tr->tokens + a * rows, tr->targets + a * rows,
		    tr->pos + a * rows);
	for (size_t i = 0; i < rows * (size_t)j->grad_accum; i++)
		norm += tr->targets[i] != -100;
	tr->g.o = tr->o;
	tr->g.frozen = tr->frozen;
	tr->g.lr = (float)taco_job_lr(j, tr->step + 1, tr->total);
	taco_optim_begin_step(tr->o);
	if (tr->g.dense)
		for (int i = 0; i < tr->m->n_tensors; i++)
			if (tr->g.dense[i]) {
				tr->m->ops->memset0(tr->g.dense[i],
						    tr->m->tensors[i].numel *
							4);
				tr->g.touched[i] = 0;
			}
	for (tr->g.micro = 0; tr->g.micro < j->grad_accum; tr->g.micro++) {
		size_t at = (size_t)tr->g.micro * rows;
		taco_batch b = {Bl,
				j->seq_len,
				tr->tokens + at + mine,
				tr->targets + at + mine,
				tr->pos + at + mine,
				(uint64_t)tr->step * (uint64_t)j->grad_accum +
				    (uint64_t)tr->g.micro};
		/* part mode: each piece updates its tensor (summed over the
		 * ranks first); dense: the pieces add up for the end */
		taco_grad_sink part = {on_part, NULL, tr->frozen, &tr->g,
				       on_changed_rows};
		taco_grad_sink dense = {NULL, on_dense, tr->frozen, &tr->g,
					NULL};
		taco_step_stats st;
		if (tr->dist.size > 1) {
			taco_model_set_global_batch(tr->m, tr->tokens + at,
						    (int)rows);
			taco_model_set_rank_sum(tr->m, rank_sum, &tr->dist);
		}
		r = taco_model_step(
		    tr->m, &b, norm,
		    tr->g.dense ? &dense : taco_dist_sink(&tr->dist, &part),
		    &st, err);
		taco_model_set_global_batch(tr->m, NULL, 0);
		if (r)
			return r;
		sums[0] += st.loss_sum;
		sums[1] += (double)st.n_correct;
		aux += st.aux_loss / j->grad_accum;
	}
	for (int i = 0; tr->g.dense && i < tr->m->n_tensors; i++)
		if (tr->g.dense[i] && tr->g.touched[i]) {
			if ((r = taco_dist_sum_f32(&tr->dist, tr->g.dense[i],
						   tr->m->tensors[i].numel,
						   err)))
				return r;
			taco_optim_apply(tr->o, i, tr->g.dense[i], tr->g.lr);
		}
	if ((r = taco_dist_sum(&tr->dist, sums, 2, err)))
		return r;
	tr->step++;
	tr->tokens_seen += (int64_t)rows * j->grad_accum;
	tr->loss = norm ? sums[0] / (double)norm : 0.0;
	tr->aux_loss = aux;
	tr->accuracy = norm ? sums[1] / (double)norm : 0.0;
	return 0;
}

/* The validation pairs under the current weights, against their
 * reference: the loss and rewards TRL reports at an evaluation. */
static int pref_eval(trainer *tr, taco_pref_sums *s, taco_err *err)
{
	const taco_job *j = tr->job;
	int P = j->batch_size;
	size_t n = tr->val->n / 2;
	int r;

	memset(s, 0, sizeof(*s));
	for (size_t first = 0; first < n; first += (size_t)P) {
		int k = n - first < (size_t)P ? (int)(n - first) : P;
		taco_batch b = {2 * P,	     j->seq_len, tr->tokens,
				tr->targets, tr->pos,	 0};
		taco_data_pair_rows(tr->val, first, P, j->seq_len, tr->tokens,
				    tr->targets, tr->pos);
		if ((r = taco_model_score(tr->m, &b, tr->logp, err)))
			return r;
		taco_pref_sums_add(s, j->dpo_beta, tr->logp,
				   tr->ref.val + 2 * first, k);
	}
	return 0;
}

/* With ranks each evaluates its slice of every batch of the validation set
 * (the step's shape, which its plan holds), and the sums are summed. */
static int evaluate(trainer *tr, taco_err *err)
{
	const taco_job *j = tr->job;
	int Bl = j->batch_size / tr->dist.size;
	double sums[3] = {0, 0, 0}; /* loss, targets, correct */
	double loss = 0;
	int64_t n = 0, correct = 0;
	json_t *ev;
	int r;

	double mc_acc = -1;

	/* the same choices on every rank: each scores them all */
	if (tr->data.mc && (r = taco_mc_eval(tr->m, tr->data.mc, Bl, j->seq_len,
					     &mc_acc, NULL, err)))
		return r;
	taco_pref_sums ps = {0};

	if (tr->dpo && tr->val && (r = pref_eval(tr, &ps, err)))
		return r;
	for (size_t first = 0; !tr->dpo && tr->val && first < tr->val->n;
	     first += j->batch_size) {
		taco_step_stats st;
		taco_data_rows(tr->val, first + (size_t)tr->dist.rank * Bl, Bl,
			       j->seq_len, tr->tokens, tr->targets, tr->pos);
		if ((r = taco_model_eval(tr->m,
					 &(taco_batch){Bl, j->seq_len,
						       tr->tokens, tr->targets,
						       tr->pos, 0},
					 &st, err)))
			return r;
		sums[0] += st.loss_sum;
		sums[1] += (double)st.n_targets;
		sums[2] += (double)st.n_correct;
	}
	if (!tr->dpo && tr->val && (r = taco_dist_sum(&tr->dist, sums, 3, err)))
		return r;
	loss = sums[0];
	n = (int64_t)sums[1];
	correct = (int64_t)sums[2];
	if ((r = backend_check(tr, err)))
		return r;
	ev = json_pack("{sI}", "step", (json_int_t)tr->step);
	if (tr->dpo && tr->val)
		taco_pref_sums_json(&ps, "val_", 1, ev);
	else if (tr->val)
		json_object_update_new(
		    ev,
		    json_pack("{sf sf sI}", "val_loss",
			      n ? loss / (double)n : 0.0, "val_token_accuracy",
			      n ? (double)correct / (double)n : 0.0,
			      "val_targets", (json_int_t)n));
	if (tr->data.mc)
		json_object_update_new(
		    ev, json_pack("{sf sI}", "mc_accuracy", mc_acc,
				  "mc_examples", (json_int_t)tr->data.mc->n));
	/* every rank generates (the same answers), so none waits alone */
	if ((r = taco_samples_run(&tr->samples, tr->m, tr->val, tr->data.tok,
				  ev, err)) ||
	    (r = backend_check(tr, err))) {
		json_decref(ev);
		return r;
	}
	json_t *em = json_object_get(ev, "val_exact_match");
	double exact = em ? json_real_value(em) : -1;
	taco_events_emit(&tr->ev, "eval", ev);
	tr->eval_step = tr->step;
	if (!tr->opts->progress)
		return 0;
	fprintf(stderr, "%seval at step %lld:",
		tr->opts->progress == TACO_PROGRESS_TTY ? "\n" : "",
		(long long)tr->step);
	if (tr->dpo && tr->val)
		fprintf(stderr, " loss %.4f, reward accuracy %.4f, margin %.4f",
			ps.pairs ? ps.loss / (double)ps.pairs : 0.0,
			ps.pairs ? (double)ps.correct / (double)ps.pairs : 0.0,
			ps.pairs
			    ? (ps.reward_c - ps.reward_r) / (double)ps.pairs
			    : 0.0);
	else if (tr->val)
		fprintf(stderr, " loss %.4f, token accuracy %.4f",
			n ? loss / (double)n : 0.0,
			n ? (double)correct / (double)n : 0.0);
	if (tr->data.mc)
		fprintf(stderr, " multiple-choice accuracy %.4f", mc_acc);
	if (exact >= 0)
		fprintf(stderr, ", exact match %.4f", exact);
	fputc('\n', stderr);
	return 0;
}

/* The options a checkpoint must agree with to be resumed. */
static json_t *job_identity(const taco_job *j)
{
	json_t *o =
	    json_pack("{ss ss si si si ss si sf sI sb}", "model", j->model,
		      "train", j->train, "batch_size", j->batch_size, "seq_len",
		      j->seq_len, "grad_accum", j->grad_accum, "optimizer",
		      j->optim.all_adamw ? "adamw" : "taco", "taco_k",
		      j->optim.k, "taco_beta", (double)j->optim.beta, "seed",
		      (json_int_t)j->optim.seed, "packing", j->packing);

	/* an SFT job's identity stays what older checkpoints hold */
	if (o && j->method == TACO_METHOD_DPO)
		json_object_update_new(o, json_pack("{ss sf}", "method", "dpo",
						    "dpo_beta", j->dpo_beta));
	return o;
}

static int write_checkpoint(trainer *tr, taco_err *err)
{
	char path[4400];
	json_t *t = json_pack(
	    "{sI sI sI sI sI so}", "step", (json_int_t)tr->step, "epoch",
	    (json_int_t)tr->cur.epoch, "index", (json_int_t)tr->cur.index,
	    "tokens_seen", (json_int_t)tr->tokens_seen, "total_steps",
	    (json_int_t)tr->total, "job", job_identity(tr->job));
	int r;

	if (t && tr->dpo)
		json_object_set_new(t, "reference_logps",
				    json_pack("{ss ss}", "file",
					      TACO_PREF_REF_FILE, "digest",
					      tr->ref.digest));
	if (!t)
		return taco_err_set(err, -ENOMEM, "out of memory");
	r = taco_ckpt_save(tr->job->output_dir, tr->step, tr->m, tr->o, t,
			   tr->job->keep_checkpoints, path, sizeof(path), err);
	json_decref(t);
	/* a failed download would have written garbage: say so */
	if (r || (r = backend_check(tr, err)))
		return r;
	if (tr->opts->progress)
		fprintf(stderr, "%scheckpoint %s\n",
			tr->opts->progress == TACO_PROGRESS_TTY ? "\n" : "",
			path);
	taco_events_emit(
	    &tr->ev, "checkpoint",
	    json_pack("{sI ss}", "step", (json_int_t)tr->step, "path", path));
	return 0;
}

/* Rank 0's checkpoint, then every rank's weights against rank 0's. */
static int checkpoint(trainer *tr, taco_err *err)
{
	int r = tr->dist.rank == 0 ? write_checkpoint(tr, err) : 0;

	if (r || (r = taco_dist_barrier(&tr->dist, TACO_DIST_LONG_S, err)))
		return r;
	return taco_dist_check_weights(&tr->dist, tr->m, tr->step, err);
}

static int resume(trainer *tr, taco_err *err)
{
	char dir[4400];
	int64_t step;
	json_t *t = NULL, *want, *have;
	const char *key;
	json_t *v;
	int r;

	r = taco_ckpt_latest(tr->job->output_dir, dir, sizeof(dir), &step, err);
	if (r == -ENOENT)
		return 0; /* nothing to resume: start at step 0 */
	if (r || (r = taco_ckpt_load(dir, tr->m, tr->o, &t, err)))
		return r;
	want = job_identity(tr->job);
	have = json_object_get(t, "job");
	json_object_foreach(want, key, v)
	{
		if (!json_equal(v, json_object_get(have, key))) {
			r = taco_err_set(err, -EINVAL,
					 "%s: checkpoint was made with a "
					 "different '%s'; resume with the "
					 "same job",
					 dir, key);
			break;
		}
	}
	json_decref(want);
	if (!r) {
		tr->step = json_integer_value(json_object_get(t, "step"));
		tr->cur.epoch =
		    (uint64_t)json_integer_value(json_object_get(t, "epoch"));
		tr->cur.index =
		    (uint64_t)json_integer_value(json_object_get(t, "index"));
		tr->tokens_seen =
		    json_integer_value(json_object_get(t, "tokens_seen"));
		snprintf(tr->ckpt_digest, sizeof(tr->ckpt_digest), "%s",
			 json_string_value(json_object_get(
			     json_object_get(t, "reference_logps"), "digest"))
			     ?: "");
		if (tr->step != step || tr->o->step != (uint64_t)step)
			r = taco_err_set(err, -EINVAL,
					 "%s: step in trainer.json and "
					 "optimizer state disagree",
					 dir);
	}
	json_decref(t);
	return r;
}

static void fmt_time(char *buf, size_t len, double s)
{
	long t = s > 0 && s < 1e9 ? (long)(s + 0.5) : 0;

	if (t >= 3600)
		snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60,
			 t % 60);
	else
		snprintf(buf, len, "%02ld:%02ld", t / 60, t % 60);
}

static void progress(trainer *tr)
{
	const taco_job *j = tr->job;
	double el = now() - tr->t_start;
	int64_t done = tr->step - tr->start_step;
	double tok = (double)done * j->batch_size * j->seq_len * j->grad_accum;
	double tps = el > 0 ? tok / el : 0;
	double eta =
	    done > 0 ? el / (double)done * (double)(tr->total - tr->step) : 0;
	char e1[32], e2[32];

	if (tr->step % j->log_every == 0 || tr->step == tr->total) {
		json_t *e = json_pack(
		    "{sI sI sf sf sf sI sf sf sf sI sI}", "step",
		    (json_int_t)tr->step, "total_steps", (json_int_t)tr->total,
		    "loss", tr->loss, "token_accuracy", tr->accuracy, "lr",
		    (double)tr->g.lr, "tokens", (json_int_t)tr->tokens_seen,
		    "tokens_per_s", tps, "elapsed_s", el, "eta_s", eta,
		    "mem_bytes", (json_int_t)tr->m->ops->mem_current(),
		    "mem_peak_bytes", (json_int_t)tr->m->ops->mem_peak());
		/* a mixture of experts' auxiliary loss, when trained (the
		 * loss above is the cross-entropy alone) */
		if (e && tr->m->aux_coef > 0 && !tr->dpo)
			json_object_set_new(e, "aux_loss",
					    json_real(tr->aux_loss));
		/* DPO: the pairs' rewards and log-probs, as TRL names them */
		if (e && tr->dpo)
			taco_pref_sums_json(&tr->last, "", 0, e);
		taco_events_emit(&tr->ev, "progress", e);
	}
	if (!tr->opts->progress ||
	    (tr->opts->progress == TACO_PROGRESS_LINES &&
	     tr->step % j->log_every && tr->step != tr->total))
		return;
	fmt_time(e1, sizeof(e1), el);
	fmt_time(e2, sizeof(e2), eta);
	fprintf(stderr,
		"%sstep %lld/%lld | loss %.4f | lr %.2e | %.0f tok/s | %s "
		"elapsed | ETA %s%s",
		tr->opts->progress == TACO_PROGRESS_TTY ? "\r" : "",
		(long long)tr->step, (long long)tr->total, tr->loss,
		(double)tr->g.lr, tps, e1, e2,
		tr->opts->progress == TACO_PROGRESS_TTY ? "   " : "\n");
	fflush(stderr);
}

/* Fail before any work when the output cannot be written. */
static int check_output_dir(const char *dir, taco_err *err)
{
	struct stat st;
	int r = taco_mkdir_p(dir, err);

	if (r)
		return r;
	if (stat(dir, &st) || !S_ISDIR(st.st_mode) || access(dir, W_OK))
		return taco_err_set(err, -ENOTDIR,
				    "output_dir '%s' is not a writable "
				    "directory",
				    dir);
	return 0;
}

/* One taco-train per output directory: a second one (a resumed job whose
 * previous worker is still writing its last checkpoint) waits up to
 * LOCK_WAIT_S for the lock, then fails. */
#define LOCK_WAIT_S 120

static int lock_output_dir(trainer *tr, taco_err *err)
{
	char path[TACO_PATH_MAX + 16];
	int fd;

	snprintf(path, sizeof(path), "%s/.lock", tr->job->output_dir);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return taco_err_set(err, -errno, "%s: %s", path,
				    strerror(errno));
	for (int i = 0; flock(fd, LOCK_EX | LOCK_NB); i++) {
		if (errno != EWOULDBLOCK || i >= LOCK_WAIT_S * 10) {
			close(fd);
			return taco_err_set(err, -EBUSY,
					    "output_dir '%s' is in use by "
					    "another taco-train",
					    tr->job->output_dir);
		}
		usleep(100000);
	}
	tr->lock_fd = fd;
	return 0;
}

/* The plan must fit the memory budget before anything is loaded. The op
 * table cannot say how much memory a GPU has, so without a budget a CUDA
 * job is planned (for the started event) but not checked. */
static int admit(trainer *tr, taco_err *err)
{
	/* the ranks of a CPU job share this machine's memory */
	uint64_t budget =
	    tr->opts->memory_budget ? tr->opts->memory_budget
	    : tr->backend == TACO_BACKEND_CPU
		? taco_plan_host_memory() / (uint64_t)tr->dist.size
		: 0;
	taco_model *shapes = NULL;
	taco_plan_input in;
	uint8_t *frozen = NULL;
	int r;

	if ((r = taco_plan_job(tr->job, tr->backend, budget, &tr->plan, &in,
			       &shapes, err)))
		return r;
	tr->plan_in = in;
	if (tr->plan.total > budget && budget) {
		if (!(r = taco_job_frozen(tr->job, shapes, &frozen, err))) {
			in.frozen = frozen;
			r = taco_plan_refuse(shapes, &in, &tr->plan, budget,
					     err);
		}
	}
	free(frozen);
	taco_model_free(shapes);
	return r;
}

/* The data validation reports, as events and on the terminal. */
static void validated(trainer *tr)
{
	const taco_job_data *d = &tr->data;
	const taco_job *j = tr->job;

	if (!d->have_reports)
		return;
	taco_events_emit(&tr->ev, "validated",
			 taco_dataset_report_json(&d->train_report, j->train));
	if (tr->opts->progress)
		taco_dataset_report_print(&d->train_report, j->train, stderr);
	if (j->validation[0] && d->val_report.lines) {
		taco_events_emit(
		    &tr->ev, "validated",
		    taco_dataset_report_json(&d->val_report, j->validation));
		if (tr->opts->progress)
			taco_dataset_report_print(&d->val_report, j->validation,
						  stderr);
	}
}

/* The buffers of pairs, and the reference log-probabilities: computed
 * from the starting weights, or read back when the run resumes. */
static int pref_setup(trainer *tr, taco_err *err)
{
	const taco_job *j = tr->job;
	taco_pref_pass pass;
	int r;

	tr->ids =
	    malloc((size_t)j->batch_size * j->grad_accum * sizeof(size_t));
	tr->refb = malloc((size_t)2 * j->batch_size * sizeof(double));
	tr->logp = malloc((size_t)2 * j->batch_size * sizeof(double));
	if (!tr->ids || !tr->refb || !tr->logp)
		return taco_err_set(err, -ENOMEM, "out of memory");
	pass.ev = &tr->ev;
	pass.progress = tr->opts->progress;
	pass.train_batches = (tr->total - tr->step) * j->grad_accum;
	if ((r = taco_pref_ref_ensure(tr->m, tr->train, tr->val, j->batch_size,
				      j->seq_len, j->output_dir, tr->step > 0,
				      &pass, &tr->ref, err)))
		return r;
	if (tr->step > 0 && strcmp(tr->ckpt_digest, tr->ref.digest))
		return taco_err_set(err, -EINVAL,
				    "%s/%s: not the reference log-probs the "
				    "checkpoint was trained with",
				    j->output_dir, TACO_PREF_REF_FILE);
	return backend_check(tr, err);
}

static int setup(trainer *tr, taco_err *err)
{
	const taco_job *j = tr->job;
	size_t rows = (size_t)j->batch_size * j->seq_len * j->grad_accum *
		      (j->method == TACO_METHOD_DPO ? 2 : 1);
	int r;

	tr->dpo = j->method == TACO_METHOD_DPO;
	/* rank 0 owns the directory; the others only read checkpoints */
	if (tr->dist.rank == 0 && ((r = check_output_dir(j->output_dir, err)) ||
				   (r = lock_output_dir(tr, err))))
		return r;
	if ((r = admit(tr, err)))
		return r;
	/* with the schedule first: streamed weights load into host memory */
	if ((r = taco_model_load_sched(j->model, tr->ops, tr->plan_in.act_dtype,
				       &tr->plan_in.step, &tr->m, err)) ||
	    (r = backend_check(tr, err)) ||
	    (r = taco_model_set_dropout(
		 tr->m,
		 j->dropout >= 0 ? (float)j->dropout : tr->m->cfg.dropout,
		 tk_splitmix64(j->optim.seed ^ 0x64726f706f7574ull), err)))
		return r;
	if ((r = taco_model_set_aux_loss(tr->m, j->router_aux_loss_coef, err)))
		return r;
	/* from the config alone, so a resumed run gets the same rate */
	tr->lr_auto = taco_job_resolve_lr(&tr->job_lr, tr->m->cfg.hidden);
	r = taco_job_data_load(j, tr->m->cfg.vocab, &tr->data, err);
	validated(tr);
	if (r)
		return r;
	tr->train = tr->data.train;
	tr->val = tr->data.val;
	if ((r = taco_job_frozen(j, tr->m, &tr->frozen, err)))
		return r;
	if ((r = taco_optim_create(tr->m, &j->optim, tr->frozen, &tr->o, err)))
		return r;
	if ((r = taco_samples_open(&tr->samples, tr->m, j, tr->val,
				   tr->data.tok, err)))
		return r;
	if (taco_plan_dense_grads(j) && (r = alloc_dense(tr, err)))
		return r;
	tr->tokens = malloc(rows * sizeof(int32_t));
	tr->targets = malloc(rows * sizeof(int32_t));
	tr->pos = malloc(rows * sizeof(int32_t));
	tr->order = malloc(tr->train->n * sizeof(size_t));
	if (!tr->tokens || !tr->targets || !tr->pos || !tr->order)
		return taco_err_set(err, -ENOMEM, "out of memory");
	tr->order_epoch = UINT64_MAX;
	tr->total = taco_train_total_steps(j, tr->dpo ? tr->train->n / 2
						      : tr->train->n);
	if (tr->opts->resume && (r = resume(tr, err)))
		return r;
	if (tr->dpo && (r = pref_setup(tr, err)))
		return r;
	tr->start_step = tr->step;
	return backend_check(tr, err);
}

static void started(trainer *tr)
{
	const taco_job *j = tr->job;
	json_t *e = json_pack(
	    "{ss ss ss sI sI sI sI ss sI sI si si si sI}", "model", j->model,
	    "backend", tr->backend == TACO_BACKEND_CPU ? "cpu" : "cuda",
	    "architecture", taco_arch_name(tr->m->cfg.arch), "parameters",
	    (json_int_t)taco_model_param_count(tr->m), "total_steps",
	    (json_int_t)tr->total, "start_step", (json_int_t)tr->step,
	    "train_examples", (json_int_t)tr->train->n, "optimizer",
	    j->optim.all_adamw ? "adamw" : "taco", "optimizer_state_bytes",
	    (json_int_t)tr->o->state_bytes, "tokens_per_step",
	    (json_int_t)((int64_t)j->batch_size * j->seq_len * j->grad_accum),
	    "batch_size", j->batch_size, "seq_len", j->seq_len, "grad_accum",
	    j->grad_accum, "planned_bytes", (json_int_t)tr->plan.total);

	if (e) {
		json_object_set_new(e, "method",
				    json_string(tr->dpo ? "dpo" : "sft"));
		json_object_set_new(e, "lr", json_real(j->lr));
		json_object_set_new(e, "lr_auto", json_boolean(tr->lr_auto));
		json_object_set_new(e, "gpus", json_integer(tr->dist.size));
		/* NCCL's own device memory, as measured (the plan's
		 * estimate, CUDA_NCCL_RESERVE in plan.c, beside it) */
		if (tr->dist.dev)
			json_object_set_new(
			    e, "comm_device_bytes",
			    json_integer(
				(json_int_t)tr->dist.dev->device_bytes));
	}
	if (e && tr->dpo)
		json_object_set_new(e, "train_pairs",
				    json_integer((json_int_t)tr->train->n / 2));
	taco_events_emit(&tr->ev, "started", e);
}

static int finish(trainer *tr, taco_err *err)
{
	char out[4200];
	int r;

	/* the last step's evaluation came before its checkpoint (the loop's);
	 * a run resumed at its last step has none yet */
	if ((tr->val || tr->data.mc) && tr->eval_step != tr->step &&
	    (r = evaluate(tr, err)))
		return r;
	if (tr->dist.rank != 0) /* rank 0 exports */
		return taco_dist_barrier(&tr->dist, TACO_DIST_LONG_S, err);
	snprintf(out, sizeof(out), "%s/model", tr->job->output_dir);
	if ((r = taco_export(
		 tr->m, tr->job->model, out, tr->job->export_shard_bytes,
		 taco_chat_trained_jinja(tr->job->chat_template,
					 tr->job->chat_template_jinja),
		 err)) ||
	    (r = backend_check(tr, err)))
		return r;
	if (tr->opts->progress)
		fprintf(stderr, "exported %s\n", out);
	taco_events_emit(&tr->ev, "exported", json_pack("{ss}", "path", out));
	for (int t = 0; t < TACO_GGUF_TYPES; t++) {
		struct stat st;
		if (!(tr->job->export_gguf & (1u << t)))
			continue;
		if ((r = taco_train_export_gguf(tr->job, NULL, t, NULL, out,
						sizeof(out), err)))
			return r;
		if (tr->opts->progress)
			fprintf(stderr, "exported %s\n", out);
		taco_events_emit(
		    &tr->ev, "exported_gguf",
		    json_pack("{sssssI}", "path", out, "type",
			      taco_gguf_type_name(t), "bytes",
			      (json_int_t)(stat(out, &st) ? 0 : st.st_size)));
	}
	return taco_dist_barrier(&tr->dist, TACO_DIST_LONG_S, err);
}

/* Joins the job's ranks (gpus); rank 0 alone writes events and to the
 * terminal. A rank that could not join fails alone: the launcher ends the
 * others. */
static int open_ranks(trainer *tr, taco_err *err)
{
	int r;

	if ((r = taco_dist_open(&tr->dist, tr->job, err)))
		return r;
	if (tr->backend == TACO_BACKEND_CUDA &&
	    (r = taco_dist_open_device(&tr->dist, tr->ops, err)))
		return r;
	if (tr->dist.rank != 0) {
		tr->rank_opts.events_fd = -1;
		tr->rank_opts.progress = TACO_PROGRESS_NONE;
	}
	return 0;
}

/* Whether to stop before the next step: asked of any rank, so all stop at
 * the same step. */
static int stop_asked(trainer *tr, int *end, taco_err *err)
{
	double v = tr->opts->stop && *tr->opts->stop ? 1.0 : 0.0;
	int r;

	if ((r = taco_dist_sum(&tr->dist, &v, 1, err)))
		return r;
	if (v > 0)
		*end = TACO_TRAIN_STOPPED;
	return 0;
}

int taco_train_run(const taco_job *job, const taco_train_opts *opts,
		   taco_err *err)
{
	trainer tr;
	int r, end = TACO_TRAIN_FINISHED;

	memset(&tr, 0, sizeof(tr));
	tr.lock_fd = -1;
	tr.eval_step = -1;
	/* a shallow copy: freeze stays the caller's */
	tr.job_lr = *job;
	tr.job = &tr.job_lr;
	tr.rank_opts = *opts;
	tr.opts = &tr.rank_opts;
	tr.ops = opts->ops ? opts->ops : tk_cpu_ops();
	tr.backend =
	    tr.ops == tk_cpu_ops() ? TACO_BACKEND_CPU : TACO_BACKEND_CUDA;
	if ((r = open_ranks(&tr, err)))
		goto out;
	if (taco_events_open(&tr.ev, tr.opts->events_fd)) {
		r = taco_err_set(err, -EBADF, "--events-fd %d: not open",
				 tr.opts->events_fd);
		goto out;
	}
	if ((r = setup(&tr, err)))
		goto out;
	started(&tr);
	tr.t_start = now();
	while (tr.step < tr.total) {
		if ((r = stop_asked(&tr, &end, err)))
			goto out;
		if (end == TACO_TRAIN_STOPPED)
			break;
		if ((r = train_step(&tr, err)) || (r = backend_check(&tr, err)))
			goto out;
		progress(&tr);
		/* a step's evaluation before its checkpoint, so that tacod
		 * gives the checkpoint that step's evaluation (the last step's
		 * too: the end's evaluation) */
		if ((tr.val || tr.data.mc) &&
		    ((job->eval_every && tr.step % job->eval_every == 0) ||
		     tr.step == tr.total) &&
		    (r = evaluate(&tr, err)))
			goto out;
		if (job->checkpoint_every &&
		    tr.step % job->checkpoint_every == 0 &&
		    (r = checkpoint(&tr, err)))
			goto out;
	}
	if (tr.opts->progress == TACO_PROGRESS_TTY)
		fputc('\n', stderr);
	if (end == TACO_TRAIN_STOPPED) {
		if (!(job->checkpoint_every &&
		      tr.step % job->checkpoint_every == 0 && tr.step > 0) &&
		    (r = checkpoint(&tr, err)))
			goto out;
	} else if ((r = finish(&tr, err))) {
		goto out;
	}
	{
		json_t *e = json_pack("{ss sI sf sf}", "status",
				      end == TACO_TRAIN_STOPPED ? "stopped"
								: "succeeded",
				      "step", (json_int_t)tr.step, "loss",
				      tr.loss, "elapsed_s", now() - tr.t_start);
		/* rank 0's time in the gradient sums (bench/dist_scaling.sh) */
		if (e && tr.dist.size > 1)
			json_object_set_new(e, "comm_s",
					    json_real(tr.dist.comm_s));
		taco_events_emit(&tr.ev, "finished", e);
	}
	r = end;
out:
	/* errno: what failed, for tacod (ENOSPC: out of storage) */
	if (r < 0)
		taco_events_emit(
		    &tr.ev, "error",
		    json_pack("{ss si}", "message", err->msg, "errno", -r));
	/* a rank that fails alone ends them all: the others would wait in
	 * their next sum (mpirun then ends the job) */
	if (r < 0 && tr.dist.size > 1) {
		fprintf(stderr, "taco-train: rank %d: %s\n", tr.dist.rank,
			err->msg);
		tr.dist.comm->abort(tr.dist.comm, 1);
	}
	free_trainer(&tr);
	return r;
}
