/* plan.c: memory plans. */
#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/decode.h"
#include "model/model.h"
#include "model/model_work.h"
#include "optim/optim.h"

static const char *const term_names[TACO_PLAN_TERMS] = {
    [TACO_PLAN_WEIGHTS] = "weights",
    [TACO_PLAN_TACO_STATE] = "TACO state",
    [TACO_PLAN_ADAMW_STATE] = "AdamW state",
    [TACO_PLAN_GRAD_BUFFER] = "gradient block / buffers",
    [TACO_PLAN_LAYER_INPUTS] = "checkpointed activations",
    [TACO_PLAN_LAYER_WORK] = "one layer's recompute + backward",
    [TACO_PLAN_LOSS_CHUNK] = "loss (beyond the layer buffers)",
    [TACO_PLAN_ATTENTION] = "attention workspace",
    [TACO_PLAN_BATCH] = "batch and RoPE tables",
    [TACO_PLAN_WEIGHT_SCRATCH] = "fp32 weight scratch",
    [TACO_PLAN_WEIGHT_RING] = "streamed weights' ring",
    [TACO_PLAN_GEMM_WORKSPACE] = "GEMM workspace",
    [TACO_PLAN_COMM] = "gradient sums across GPUs",
    [TACO_PLAN_KV_CACHE] = "generation's KV cache",
    [TACO_PLAN_BACKEND_FIXED] = "backend fixed overhead",
    [TACO_PLAN_MARGIN] = "allocator margin",
};

const char *taco_plan_term_name(int term)
{
	return term >= 0 && term < TACO_PLAN_TERMS ? term_names[term] : "?";
}

void taco_plan_input_from_job(const taco_job *job, int backend,
			      int weight_dtype, taco_plan_input *in)
{
	memset(in, 0, sizeof(*in));
	in->backend = backend;
	in->weight_dtype = weight_dtype;
	in->act_dtype = job->precision == TACO_PRECISION_BF16	? TK_BF16
			: job->precision == TACO_PRECISION_FP32 ? TK_F32
			: backend == TACO_BACKEND_CUDA		? TK_BF16
								: TK_F32;
	/* a DPO batch of B pairs is 2B sequences, with the buffers of each
	 * token's loss and gradient factor (the reference pass is forward
	 * only at the same shape: less than a step) */
	in->B = job->method == TACO_METHOD_DPO ? 2 * job->batch_size
					       : job->batch_size;
	/* data parallel: each GPU runs its slice of the batch (job_schema.c:
	 * batch_size is a multiple of gpus) */
	if (job->gpus > 1) {
		in->B /= job->gpus;
		in->step.ranks = job->gpus;
	}
	in->step.pref = job->method == TACO_METHOD_DPO;
	in->T = job->seq_len;
	in->A = job->grad_accum;
	in->optim = job->optim;
	in->step.keep_activations = !job->activation_checkpointing;
	if (!taco_job_sample_cache(job, &in->gen_rows, &in->gen_ctx,
				   &in->gen_chunk))
		in->gen_rows = 0;
	in->step.offload = job->activation_offload == TACO_CHOICE_ON;
	in->step.mlp_chunks = job->mlp_chunks; /* 0: auto */
	/* The GPU overlaps the optimizer with the backward; the CPU runs
	 * ops one after the other, where a second block would only cost. */
	in->step.overlap = backend == TACO_BACKEND_CUDA;
}

int taco_plan_dense_grads(const taco_job *job)
{
	return job->grad_accum > 1 || job->optim.all_adamw;
}

/* Weights, optimizer state and the accumulation buffers: what optim.c and
 * train.c allocate, the same on every backend. */
static void model_terms(const taco_model *s, const taco_plan_input *in,
			taco_plan *p)
{
	uint64_t *term = p->term;
	int wdt = in->act_dtype == TK_BF16 ? TK_BF16 : in->weight_dtype;
	int dense = in->A > 1 || in->optim.all_adamw;
	int L = s->cfg.layers, first = L - in->step.stream_layers;
	int ring = in->step.stream_layers < TACO_RING_SLOTS
		       ? in->step.stream_layers
		       : TACO_RING_SLOTS;

	for (int i = 0; i < s->n_tensors; i++) {
		const taco_tensor *t = &s->tensors[i];
		int frozen = in->frozen ? in->frozen[i] : 0;
		int kind = taco_optim_kind_of(t, &in->optim, frozen);
		uint64_t st = taco_optim_tensor_bytes(
		    kind, t->ndim, t->shape[0], t->shape[1], in->optim.k);
		uint64_t bytes = t->numel * tk_dtype_size(wdt);

		if (t->ndim == 2 && t->layer >= 0 && t->layer >= first) {
			/* streamed (model_stream.c): fetched in forward and
			 * in backward but for the last ring's worth, and
			 * written back after its update */
			p->host_weights += bytes;
			p->to_device +=
			    t->layer >= L - ring ? bytes : 2 * bytes;
			/* TACO: the entries at its slot rows, with the rows
			 * (model_stream.c); other optimizers: whole */
			if (kind == TACO_OPT_TACO)
				p->to_host += (uint64_t)t->shape[1] *
					      (uint64_t)in->optim.k *
					      (tk_dtype_size(wdt) +
					       (t->shape[0] <= 65535 ? 2 : 4));
			else if (!frozen)
				p->to_host += bytes;
		} else {
			term[TACO_PLAN_WEIGHTS] += bytes;
		}
		term[kind == TACO_OPT_TACO ? TACO_PLAN_TACO_STATE
					   : TACO_PLAN_ADAMW_STATE] += st;
		if (dense && !frozen)
			term[TACO_PLAN_GRAD_BUFFER] += t->numel * 4;
	}
	/* the optimizer's row-stream scans (tk_ops.h fixes their size) */
	term[TACO_PLAN_TACO_STATE] += taco_optim_scan_total(
	    s, &in->optim, in->frozen, tk_taco_scan_bytes);
}

/* The engine's step buffers: model_work.c's own list. */
static int work_terms(const taco_model *shapes, const taco_plan_input *in,
		      uint64_t *term, uint64_t *host, int *chunks,
		      taco_err *err)
{
	taco_work_shape ws;
	taco_model view = *shapes;
	taco_tensor *t = malloc((size_t)shapes->n_tensors * sizeof(*t));
	int r;

	if (!t)
		return taco_err_set(err, -ENOMEM, "out of memory");
	/* The work list reads dtypes (fp32 scratch for other dtypes), the
	 * precision and the schedule from the model. */
	memcpy(t, shapes->tensors, (size_t)shapes->n_tensors * sizeof(*t));
	for (int i = 0; i < shapes->n_tensors; i++)
		t[i].dtype =
		    in->act_dtype == TK_BF16 ? TK_BF16 : in->weight_dtype;
	view.tensors = t;
	view.work = NULL;
	view.act_dtype = in->act_dtype;
	view.sched = in->step;
	r = taco_work_plan(&view, in->B, in->T, term, host);
	/* evaluation's answers: their cache and call buffers, held beside
	 * the step's (model_decode.c) */
	if (!r && in->gen_rows > 0)
		r = taco_kv_plan_beside(&view, in->gen_rows, in->gen_ctx,
					in->gen_chunk, term, host);
	taco_work_shape_of(&view, in->B, in->T, &ws);
	*chunks = ws.chunks;
	free(t);
	if (r)
		return taco_err_set(err, r, "out of memory");
	return 0;
}

/* kernels/cuda: the cuBLASLt workspace allocated at open; the context
 * and library handles, outside the allocator's counters but in the
 * device's memory; cudaMalloc's 2 MiB rounding of each buffer. */
#define CUDA_GEMM_WORKSPACE (32u << 20)
#define CUDA_CONTEXT (512u << 20)
#define CUDA_MARGIN_FIXED (64u << 20)
/* NCCL's own buffers on each GPU of a job of several (its channels'
 * FIFOs, for every peer and protocol): an estimate until a GPU measures
 * it (the started event's comm_device_bytes, tests/gpu/run.sh). */
#define CUDA_NCCL_RESERVE (512u << 20)

/* The backend's own terms over the buffers', then the total: a CPU
 * matmul on bf16 holds its conversion scratch while it runs; CUDA adds its
 * workspace, its context and the allocator's margin over the rest. */
static void backend_terms(taco_plan *p, int backend, int act_dtype)
{
	uint64_t dynamic = 0;

	if (backend == TACO_BACKEND_CPU && act_dtype == TK_BF16)
		p->term[TACO_PLAN_GEMM_WORKSPACE] += TK_CPU_GEMM_SCRATCH_BYTES;
	if (backend == TACO_BACKEND_CUDA) {
		p->term[TACO_PLAN_GEMM_WORKSPACE] += CUDA_GEMM_WORKSPACE;
		p->term[TACO_PLAN_BACKEND_FIXED] += CUDA_CONTEXT;
		for (int t = 0; t < TACO_PLAN_TERMS; t++)
			if (t != TACO_PLAN_BACKEND_FIXED)
				dynamic += p->term[t];
		p->term[TACO_PLAN_MARGIN] = CUDA_MARGIN_FIXED + dynamic / 1000;
	}
	p->total = 0;
	for (int t = 0; t < TACO_PLAN_TERMS; t++)
		p->total += p->term[t];
}

int taco_plan_compute(const taco_model *shapes, const taco_plan_input *in,
		      taco_plan *out, taco_err *err)
{
	taco_plan p;
	int r;

	if (in->B < 1 || in->T < 1 || in->A < 1)
		return taco_err_set(err, -EINVAL, "plan: bad batch shape");
	if (in->act_dtype != TK_F32 && in->act_dtype != TK_BF16)
		return taco_err_set(err, -EINVAL, "plan: bad precision");
	if (in->step.keep_activations && in->step.offload)
		return taco_err_set(err, -EINVAL,
				    "kept activations exclude offload");
	if (in->step.stream_layers < 0 ||
	    in->step.stream_layers > shapes->cfg.layers ||
	    (in->step.stream_layers && in->step.keep_activations))
		return taco_err_set(err, -EINVAL,
				    "plan: bad streamed layer count");
	memset(&p, 0, sizeof(p));
	model_terms(shapes, in, &p);
	if ((r = work_terms(shapes, in, p.term, &p.host, &p.mlp_chunks, err)))
		return r;
	if (in->backend == TACO_BACKEND_CUDA && in->step.ranks > 1)
		p.term[TACO_PLAN_COMM] += CUDA_NCCL_RESERVE;
	backend_terms(&p, in->backend, in->act_dtype);
	/* Every buffer is allocated before the first step and held. */
	p.peak_phase = "every step (buffers are allocated once)";
	p.host += p.host_weights;
	p.act_dtype = in->act_dtype;
	p.offload = in->step.offload;
	p.overlap = in->step.overlap;
	p.stream_layers = in->step.stream_layers;
	p.layers = shapes->cfg.layers;
	*out = p;
	return 0;
}

const char *taco_plan_precision(const taco_plan *p)
{
	return p->act_dtype == TK_BF16 ? "bf16" : "fp32";
}

void taco_plan_settings(const taco_plan *p, char *buf, size_t len)
{
	int n = snprintf(buf, len,
			 "precision %s, activation offload %s, %d MLP "
			 "block%s%s",
			 taco_plan_precision(p), p->offload ? "on" : "off",
			 p->mlp_chunks, p->mlp_chunks == 1 ? "" : "s",
			 p->overlap ? ", optimizer overlapped" : "");

	if (p->stream_layers && n >= 0 && (size_t)n < len)
		snprintf(buf + n, len - (size_t)n,
			 ", weights of %d of %d layers streamed from host "
			 "memory",
			 p->stream_layers, p->layers);
}

static int fits(const taco_model *s, const taco_plan_input *in, uint64_t budget,
		int *ok, taco_err *err)
{
	taco_plan p;
	int r = taco_plan_compute(s, in, &p, err);

	if (!r)
		*ok = p.total <= budget;
	return r;
}

/* Largest value v in [1, hi] with fits(v), by bisection (fitting is
 * monotone in batch size and sequence length); 0 when none. */
static int largest_fitting(const taco_model *s, taco_plan_input *in,
			   uint64_t budget, int *field, int lo, int hi,
			   int *out, taco_err *err)
{
	int best = 0, ok, r;

	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2;
		*field = mid; /* field points into *in */
		if ((r = fits(s, in, budget, &ok, err)))
			return r;
		if (ok) {
			best = mid;
			lo = mid + 1;
		} else {
			hi = mid - 1;
		}
	}
	*out = best;
	return 0;
}

int taco_plan_advise(const taco_model *shapes, const taco_plan_input *in,
		     uint64_t budget, taco_plan_advice *out, taco_err *err)
{
	taco_plan_input x = *in;
	taco_plan_advice a;
	uint8_t *frozen;
	taco_plan p;
	int r;

	memset(&a, 0, sizeof(a));
	if ((r = largest_fitting(shapes, &x, budget, &x.B, 1, in->B,
				 &a.max_batch, err)))
		return r;
	x = *in;
	if ((r = largest_fitting(shapes, &x, budget, &x.T, 2, in->T,
				 &a.max_seq_len, err)))
		return r;
	frozen = calloc((size_t)shapes->n_tensors, 1);
	if (!frozen)
		return taco_err_set(err, -ENOMEM, "out of memory");
	if (in->frozen)
		memcpy(frozen, in->frozen, (size_t)shapes->n_tensors);
	frozen[shapes->embed] = frozen[shapes->lm_head] = 1;
	x = *in;
	x.frozen = frozen;
	r = taco_plan_compute(shapes, &x, &p, err);
	free(frozen);
	if (r)
		return r;
	a.frozen_embeddings_total = p.total;
	a.freeze_embeddings_fits = p.total <= budget;
	*out = a;
	return 0;
}

void taco_plan_format_bytes(uint64_t b, char *buf, size_t len)
{
	if (b >= 1000000000ull)
		snprintf(buf, len, "%.2f GB", (double)b / 1e9);
	else if (b >= 1000000ull)
		snprintf(buf, len, "%.2f MB", (double)b / 1e6);
	else if (b >= 1000ull)
		snprintf(buf, len, "%.2f kB", (double)b / 1e3);
	else
		snprintf(buf, len, "%llu B", (unsigned long long)b);
}

void taco_plan_print(const taco_plan *p, FILE *f)
{
	char h[32];

	for (int t = 0; t < TACO_PLAN_TERMS; t++) {
		taco_plan_format_bytes(p->term[t], h, sizeof(h));
		fprintf(f, "  %-34s %12s  %16llu B\n", term_names[t], h,
			(unsigned long long)p->term[t]);
	}
	taco_plan_format_bytes(p->total, h, sizeof(h));
	fprintf(f, "  %-34s %12s  %16llu B\n", "total", h,
		(unsigned long long)p->total);
	fprintf(f, "  peak: %s\n", p->peak_phase);
	taco_plan_format_bytes(p->host, h, sizeof(h));
	fprintf(f, "  %-34s %12s  %16llu B\n", "host memory", h,
		(unsigned long long)p->host);
	taco_plan_format_bytes(p->host_weights, h, sizeof(h));
	fprintf(f, "  %-34s %12s  %16llu B\n", "  of which streamed weights", h,
		(unsigned long long)p->host_weights);
	if (!p->stream_layers)
		return;
	taco_plan_format_bytes(p->to_device, h, sizeof(h));
	fprintf(f, "  %-34s %12s  %16llu B\n", "per step to the device", h,
		(unsigned long long)p->to_device);
	taco_plan_format_bytes(p->to_host, h, sizeof(h));
	fprintf(f, "  %-34s %12s  %16llu B\n", "per step to host memory", h,
		(unsigned long long)p->to_host);
}

void taco_plan_serve_shape(const taco_model *shapes, int requested, int *ctx,
			   int *chunk)
{
	int c = requested;

	if (c <= 0)
		c = shapes->cfg.max_pos < TACO_SERVE_CONTEXT
			? shapes->cfg.max_pos
			: TACO_SERVE_CONTEXT;
	*ctx = c;
	*chunk = c < 1024 ? c : 1024;
}

int taco_plan_serve(const taco_model *shapes, int backend, int weight_dtype,
		    int act_dtype, int rows, int ctx, taco_plan *out,
		    taco_err *err)
{
	taco_model view = *shapes;
	taco_tensor *t;
	taco_plan p;
	int chunk, wdt = act_dtype == TK_BF16 ? TK_BF16 : weight_dtype, r;

	taco_plan_serve_shape(shapes, ctx, &ctx, &chunk);
	if (chunk < rows)
		chunk = rows;
	memset(&p, 0, sizeof(p));
	t = malloc((size_t)shapes->n_tensors * sizeof(*t));
	if (!t)
		return taco_err_set(err, -ENOMEM, "out of memory");
	memcpy(t, shapes->tensors, (size_t)shapes->n_tensors * sizeof(*t));
	for (int i = 0; i < shapes->n_tensors; i++) {
		t[i].dtype = wdt;
		p.term[TACO_PLAN_WEIGHTS] += t[i].numel * tk_dtype_size(wdt);
	}
	view.tensors = t;
	view.work = NULL;
	view.act_dtype = act_dtype;
	memset(&view.sched, 0, sizeof(view.sched));
	r = taco_kv_plan(&view, rows, ctx, chunk, p.term, &p.host);
	free(t);
	if (r)
		return taco_err_set(err, r,
				    "a generation of %d rows x %d tokens "
				    "cannot be planned for this model",
				    rows, ctx);
	backend_terms(&p, backend, act_dtype);
	p.peak_phase = "every request (buffers are allocated at load)";
	p.act_dtype = act_dtype;
	p.layers = shapes->cfg.layers;
	*out = p;
	return 0;
}
