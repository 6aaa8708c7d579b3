/* plan_job.c: plans of jobs, and refusing jobs that do not fit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "plan.h"
#include "safetensors/safetensors.h"

int taco_job_frozen(const taco_job *job, const taco_model *m, uint8_t **out,
		    taco_err *err)
{
	uint8_t *frozen = calloc((size_t)m->n_tensors, 1);

	if (!frozen)
		return taco_err_set(err, -ENOMEM, "out of memory");
	for (int f = 0; f < job->n_freeze; f++) {
		const char *p = job->freeze[f];
		int hits = 0;
		for (int i = 0; i < m->n_tensors; i++) {
			if (strncmp(m->tensors[i].name, p, strlen(p)) == 0) {
				frozen[i] = 1;
				hits++;
			}
		}
		if (!hits) {
			free(frozen);
			return taco_err_set(
			    err, -EINVAL,
			    "freeze[%d]: '%s' matches no tensor "
			    "of the model",
			    f, p);
		}
	}
	*out = frozen;
	return 0;
}

uint64_t taco_plan_host_memory(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);

	return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

/* The dtype the embedding is stored in, from the headers only. The name is
 * the family's (shapes: model.embed_tokens, model.decoder.embed_tokens,
 * gpt_neox.embed_in); checkpoints saved from the bare model class (OPTModel,
 * GPTNeoXModel) lack its first component, as transformers allows. */
static int stored_dtype(const char *dir, const taco_model *shapes, int *dtype,
			taco_err *err)
{
	const char *name = shapes->tensors[shapes->embed].name;
	const char *bare = strchr(name, '.');
	taco_st_model *st = NULL;
	const taco_st_tensor *t;
	int r = taco_st_open_model(dir, &st, err);

	if (r)
		return r;
	t = taco_st_model_find(st, name);
	if (!t && bare)
		t = taco_st_model_find(st, bare + 1);
	if (!t || !taco_st_dtype_supported(t->dtype))
		r = taco_err_set(err, -EINVAL, "%s: no usable %s", dir, name);
	else
		*dtype = t->dtype;
	taco_st_model_close(st);
	return r;
}

/* The settings admission may try, cheapest first: as the job says, then
 * offload, then offload with twice as many MLP blocks, again and again
 * (each only where the job leaves it open); at most 9 doublings. */
static int next_setting(const taco_job *job, const taco_model *shapes,
			const taco_plan *p, taco_plan_input *in)
{
	int auto_off = job->activation_offload == TACO_CHOICE_AUTO;
	int auto_chunks = job->mlp_chunks == 0;

	if (in->step.keep_activations)
		return 0;
	if (auto_off && !in->step.offload) {
		in->step.offload = 1;
		return 1;
	}
	/* from the blocks planned (auto resolves to at least 1) */
	if (auto_chunks && p->mlp_chunks >= 1 &&
	    p->mlp_chunks * 2 <= shapes->cfg.intermediate &&
	    p->mlp_chunks < 256) {
		in->step.mlp_chunks = p->mlp_chunks * 2;
		return 1;
	}
	return 0;
}

/* Whether admission may stream the weights (weights auto): only where the
 * step updates every matrix from its pieces (job_schema.c's rule). */
static int may_stream(const taco_job *job)
{
	return job->weights == TACO_WEIGHTS_AUTO && job->grad_accum == 1 &&
	       !job->optim.all_adamw && job->activation_checkpointing;
}

/* A router_aux_loss_coef on a model without experts: refused at
 * planning, before a job waits in the queue. */
static int moe_refusal(const taco_job *job, const taco_config *cfg,
		       taco_err *err)
{
	if (cfg->experts <= 0 && job->router_aux_loss_coef > 0)
		return taco_err_set(err, -EINVAL,
				    "router_aux_loss_coef %g: %s has no "
				    "experts",
				    job->router_aux_loss_coef,
				    taco_arch_name(cfg->arch));
	return 0;
}

/* From the job's settings with offload where the job leaves it open: the
 * fewest streamed layers that fit budget (the plan shrinks as more
 * layers stream), by bisection; all of them when none fits. */
static int fewest_streamed(const taco_job *job, const taco_model *shapes,
			   uint64_t budget, taco_plan_input *in, taco_plan *p,
			   taco_err *err)
{
	int lo = 1, hi = shapes->cfg.layers, r;

	if (job->activation_offload == TACO_CHOICE_AUTO)
		in->step.offload = 1;
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		in->step.stream_layers = mid;
		if ((r = taco_plan_compute(shapes, in, p, err)))
			return r;
		if (p->total <= budget)
			hi = mid;
		else
			lo = mid + 1;
	}
	in->step.stream_layers = lo;
	return taco_plan_compute(shapes, in, p, err);
}

int taco_plan_job(const taco_job *job, int backend, uint64_t budget,
		  taco_plan *out, taco_plan_input *in_out,
		  taco_model **shapes_out, taco_err *err)
{
	char path[TACO_PATH_MAX + 16];
	taco_config cfg;
	taco_model *shapes = NULL;
	taco_plan_input in, first;
	taco_plan p, p0;
	uint8_t *frozen = NULL;
	int dtype = TK_BF16, r;

	snprintf(path, sizeof(path), "%s/config.json", job->model);
	if ((r = taco_config_load(path, &cfg, err)) ||
	    (r = moe_refusal(job, &cfg, err)))
		return r;
	if ((r = taco_model_shapes(&cfg, &shapes, err)))
		return r;
	if ((r = stored_dtype(job->model, shapes, &dtype, err)))
		goto out;
	if ((r = taco_job_frozen(job, shapes, &frozen, err)))
		goto out;
	taco_plan_input_from_job(job, backend, dtype, &in);
	in.frozen = frozen;
	if (job->weights == TACO_WEIGHTS_HOST)
		in.step.stream_layers = cfg.layers;
	if ((r = taco_plan_compute(shapes, &in, &p0, err)))
		goto out;
	first = in;
	p = p0;
	while (budget && p.total > budget && next_setting(job, shapes, &p, &in))
		if ((r = taco_plan_compute(shapes, &in, &p, err)))
			goto out;
	if (budget && p.total > budget && may_stream(job)) {
		in = first;
		if ((r = fewest_streamed(job, shapes, budget, &in, &p, err)))
			goto out;
		while (p.total > budget && next_setting(job, shapes, &p, &in))
			if ((r = taco_plan_compute(shapes, &in, &p, err)))
				goto out;
	}
	if (budget && p.total > budget) { /* none fits: report the first */
		in = first;
		p = p0;
	}
	*out = p;
	if (in_out) {
		in.frozen = NULL; /* freed below */
		*in_out = in;
	}
	if (shapes_out) {
		*shapes_out = shapes;
		shapes = NULL;
	}
out:
	free(frozen);
	taco_model_free(shapes);
	return r;
}

int taco_plan_admit(const taco_job *job, int backend, uint64_t budget,
		    taco_plan *out, taco_plan_advice *advice, taco_err *err)
{
	taco_plan_advice a;
	taco_plan_input in;
	taco_model *shapes = NULL;
	taco_plan p;
	int r = taco_plan_job(job, backend, budget, &p, &in, &shapes, err);

	if (r)
		return r;
	memset(&a, 0, sizeof(a));
	if (p.total > budget) {
		/* the advice may fail where the refusal says why */
		if (taco_plan_advise(shapes, &in, budget, &a, NULL))
			memset(&a, 0, sizeof(a));
		taco_plan_refuse(shapes, &in, &p, budget, err);
		r = -ENOSPC;
	}
	taco_model_free(shapes);
	*out = p;
	*advice = a;
	return r;
}

int taco_plan_refuse(const taco_model *shapes, const taco_plan_input *in,
		     const taco_plan *p, uint64_t budget, taco_err *err)
{
	taco_plan_advice a;
	char what[512] = "";
	int r = taco_plan_advise(shapes, in, budget, &a, err);

	if (r)
		return r;
	if (a.max_batch > 0)
		snprintf(what + strlen(what), sizeof(what) - strlen(what),
			 "; batch_size %d fits at this seq_len", a.max_batch);
	if (a.max_seq_len > 0)
		snprintf(what + strlen(what), sizeof(what) - strlen(what),
			 "; seq_len %d fits at this batch_size", a.max_seq_len);
	snprintf(what + strlen(what), sizeof(what) - strlen(what),
		 "; freezing the embeddings and LM head %s (%.2f GB)",
		 a.freeze_embeddings_fits ? "fits" : "does not fit",
		 (double)a.frozen_embeddings_total / 1e9);
	if (a.max_batch == 0 && a.max_seq_len == 0)
		snprintf(what + strlen(what), sizeof(what) - strlen(what),
			 "; no batch shape fits");
	return taco_err_set(err, -ENOSPC,
			    "the job needs %.2f GB, %.2f GB more than the %.2f "
			    "GB available%s",
			    (double)p->total / 1e9,
			    (double)(p->total - budget) / 1e9,
			    (double)budget / 1e9, what);
}

int taco_parse_bytes(const char *s, uint64_t *out)
{
	static const char *const units = "KMGT";
	char *end;
	double v = strtod(s, &end), mul = 1;
	const char *u;

	if (end == s || !(v >= 0))
		return -EINVAL;
	if (*end && (u = strchr(units, *end)) != NULL) {
		int p = (int)(u - units) + 1, bin = end[1] == 'i';
		for (int i = 0; i < p; i++)
			mul *= bin ? 1024.0 : 1000.0;
		end += bin ? 2 : 1;
		if (*end == 'B')
			end++;
		else
			return -EINVAL;
	} else if (*end == 'B') {
		end++;
	}
	if (*end || v * mul > 1.8e19)
		return -EINVAL;
	*out = (uint64_t)(v * mul);
	return 0;
}

int taco_plan_serve_dir(const char *dir, int backend, int rows, int context,
			taco_plan *out, int *ctx_out, taco_err *err)
{
	char path[TACO_PATH_MAX + 16];
	taco_config cfg;
	taco_model *shapes = NULL;
	int dtype = TK_BF16, chunk, r;

	snprintf(path, sizeof(path), "%s/config.json", dir);
	if ((r = taco_config_load(path, &cfg, err)) ||
	    (r = taco_model_shapes(&cfg, &shapes, err)))
		return r;
	if (!(r = stored_dtype(dir, shapes, &dtype, err))) {
		taco_plan_serve_shape(shapes, context, &context, &chunk);
		r = taco_plan_serve(
		    shapes, backend, dtype,
		    backend == TACO_BACKEND_CUDA ? TK_BF16 : TK_F32, rows,
		    context, out, err);
		*ctx_out = context;
	}
	taco_model_free(shapes);
	return r;
}
