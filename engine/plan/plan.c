/* plan.c: memory plans. */
#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_work.h"
#include "optim/optim.h"

static const char *const term_names[TACO_PLAN_TERMS] = {
    [TACO_PLAN_WEIGHTS] = "weights",
    [TACO_PLAN_TACO_STATE] = "TACO state",
    [TACO_PLAN_ADAMW_STATE] = "AdamW state",
    [TACO_PLAN_GRAD_BUFFER] = "gradient buffer",
    [TACO_PLAN_HEAD_GRAD] = "LM-head gradient",
    [TACO_PLAN_LAYER_INPUTS] = "checkpointed activations",
    [TACO_PLAN_LAYER_WORK] = "one layer's recompute + backward",
    [TACO_PLAN_LOSS_CHUNK] = "cross-entropy chunk",
    [TACO_PLAN_ATTENTION] = "attention workspace",
    [TACO_PLAN_BATCH] = "batch and RoPE tables",
    [TACO_PLAN_WEIGHT_SCRATCH] = "fp32 weight scratch",
    [TACO_PLAN_GEMM_WORKSPACE] = "GEMM workspace",
    [TACO_PLAN_BACKEND_FIXED] = "backend fixed overhead",
    [TACO_PLAN_MARGIN] = "allocator margin",
};

const char *taco_plan_term_name(int term)
{
	return term >= 0 && term < TACO_PLAN_TERMS ? term_names[term] : "?";
}

void taco_plan_input_from_job(const taco_job *job, int weight_dtype,
			      taco_plan_input *in)
{
	memset(in, 0, sizeof(*in));
	in->backend = TACO_BACKEND_CPU;
	in->weight_dtype = weight_dtype;
	in->B = job->batch_size;
	in->T = job->seq_len;
	in->A = job->grad_accum;
	in->optim = job->optim;
	in->keep_activations = !job->activation_checkpointing;
}

/* Weights, optimizer state and the accumulation buffer: what optim.c and
 * train.c allocate, the same on every backend. */
static void model_terms(const taco_model *s, const taco_plan_input *in,
			uint64_t *term)
{
	for (int i = 0; i < s->n_tensors; i++) {
		const taco_tensor *t = &s->tensors[i];
		int frozen = in->frozen ? in->frozen[i] : 0;
		int kind = taco_optim_kind_of(t, &in->optim, frozen);
		uint64_t st = taco_optim_tensor_bytes(
		    kind, t->ndim, t->shape[0], t->shape[1], in->optim.k);

		term[TACO_PLAN_WEIGHTS] +=
		    t->numel * tk_dtype_size(in->weight_dtype);
		term[kind == TACO_OPT_TACO ? TACO_PLAN_TACO_STATE
					   : TACO_PLAN_ADAMW_STATE] += st;
		if (in->A > 1 && !frozen)
			term[TACO_PLAN_GRAD_BUFFER] += t->numel * 4;
	}
}

/* The CPU engine: model_work.c's own buffer list. */
static int cpu_terms(const taco_model *shapes, const taco_plan_input *in,
		     uint64_t *term, taco_err *err)
{
	taco_model view = *shapes;
	taco_tensor *t = malloc((size_t)shapes->n_tensors * sizeof(*t));
	int r;

	if (!t)
		return taco_err_set(err, -ENOMEM, "out of memory");
	/* The work list reads dtypes (fp32 scratch for other dtypes) and the
	 * activation mode from the model. */
	memcpy(t, shapes->tensors, (size_t)shapes->n_tensors * sizeof(*t));
	for (int i = 0; i < shapes->n_tensors; i++)
		t[i].dtype = in->weight_dtype;
	view.tensors = t;
	view.work = NULL;
	view.keep_activations = in->keep_activations;
	r = taco_work_plan(&view, in->B, in->T, term);
	free(t);
	if (r)
		return taco_err_set(err, r, "out of memory");
	return 0;
}

/* The bf16 CUDA engine of docs/memory-plan.md: bf16 activations, one fp32
 * weight-gradient buffer reused per tensor, the LM head processed in
 * vocabulary chunks so its gradient never exists whole. */
#define CUDA_VOCAB_CHUNK 8192	     /* rows of the head per chunk */
#define CUDA_LOGIT_BYTES (64u << 20) /* fp32 logits of one chunk */
#define CUDA_GEMM_WORKSPACE (32u << 20)
#define CUDA_CONTEXT (512u << 20) /* context + cuBLAS/cuBLASLt handles */
#define CUDA_MARGIN_FIXED (64u << 20)

static void cuda_terms(const taco_model *s, const taco_plan_input *in,
		       uint64_t *term)
{
	const taco_config *c = &s->cfg;
	uint64_t N = (uint64_t)in->B * in->T, H = c->hidden;
	uint64_t I = c->intermediate, V = c->vocab, L = c->layers;
	uint64_t D = (uint64_t)c->heads * c->head_dim;
	uint64_t Dkv = (uint64_t)c->kv_heads * c->head_dim;
	uint64_t largest = H, act, grads, rows;
	int q = c->qk_norm;

	for (int i = 0; i < s->n_tensors; i++)
		if (i != s->embed && i != s->lm_head &&
		    s->tensors[i].numel > largest)
			largest = s->tensors[i].numel;
	if (in->A <= 1)
		term[TACO_PLAN_GRAD_BUFFER] += largest * 4;
	/* head gradient: one vocabulary chunk of the head in fp32, plus for
	 * an untied embedding the rows of the batch's tokens */
	term[TACO_PLAN_HEAD_GRAD] += (uint64_t)CUDA_VOCAB_CHUNK * H * 4;
	if (!c->tie_embeddings)
		term[TACO_PLAN_HEAD_GRAD] += (N < V ? N : V) * H * 4;
	/* one layer's activations (bf16) and their gradients (bf16) */
	uint64_t mlp = c->gated_mlp ? 3 * I : 2 * I; /* gate, up, act */

	act = N * (2 * H + D + 2 * Dkv + D + H + mlp) + (q ? N * (D + Dkv) : 0);
	/* dx, dtmp, dq, datt, dk, dv, and d(act): the SwiGLU backward writes
	 * d(gate) and d(up) over gate and up, which it has read */
	grads = N * (2 * H + 2 * D + 2 * Dkv + I);
	if (in->keep_activations)
		term[TACO_PLAN_LAYER_INPUTS] += L * act * 2;
	else
		term[TACO_PLAN_LAYER_WORK] += act * 2;
	term[TACO_PLAN_LAYER_WORK] += grads * 2;
	term[TACO_PLAN_LAYER_INPUTS] += (L + 1) * N * H * 2;
	/* final norm output (bf16), its gradient (bf16), per-token
	 * log-sum-exp (fp32), logits of one chunk (fp32) */
	rows = CUDA_LOGIT_BYTES /
	       (4 * (V < CUDA_VOCAB_CHUNK ? V : CUDA_VOCAB_CHUNK));
	if (rows > N)
		rows = N;
	term[TACO_PLAN_LOSS_CHUNK] +=
	    N * H * 2 * 2 + N * 4 +
	    rows * (V < CUDA_VOCAB_CHUNK ? V : CUDA_VOCAB_CHUNK) * 4;
	/* flash attention keeps only the log-sum-exp per query and head */
	term[TACO_PLAN_ATTENTION] +=
	    N * (uint64_t)c->heads * 4 * (in->keep_activations ? L : 1);
	term[TACO_PLAN_BATCH] +=
	    3 * N * 4 + 2 * (uint64_t)in->T * (c->head_dim / 2) * 4;
	term[TACO_PLAN_GEMM_WORKSPACE] += CUDA_GEMM_WORKSPACE;
	term[TACO_PLAN_BACKEND_FIXED] += CUDA_CONTEXT;
}

int taco_plan_compute(const taco_model *shapes, const taco_plan_input *in,
		      taco_plan *out, taco_err *err)
{
	taco_plan p;
	uint64_t dynamic = 0;
	int r;

	if (in->B < 1 || in->T < 1 || in->A < 1)
		return taco_err_set(err, -EINVAL, "plan: bad batch shape");
	memset(&p, 0, sizeof(p));
	model_terms(shapes, in, p.term);
	if (in->backend == TACO_BACKEND_CPU ||
	    in->backend == TACO_BACKEND_CUDA) {
		if (shapes->cfg.shapes_only)
			return taco_err_set(
			    err, -ENOTSUP,
			    "%s is planned from its shapes only (the bf16 "
			    "target): tacod does not train it",
			    taco_arch_name(shapes->cfg.arch));
		if ((r = cpu_terms(shapes, in, p.term, err)))
			return r;
		/* Everything is allocated before the first step and held. */
		p.peak_phase = "every step (buffers are allocated once)";
		if (in->backend == TACO_BACKEND_CUDA) {
			/* kernels/cuda: the cuBLASLt workspace allocated at
			 * open; the context is outside the allocator's
			 * counters but inside the device's memory */
			p.term[TACO_PLAN_GEMM_WORKSPACE] += CUDA_GEMM_WORKSPACE;
			p.term[TACO_PLAN_BACKEND_FIXED] += CUDA_CONTEXT;
			for (int t = 0; t < TACO_PLAN_TERMS; t++)
				if (t != TACO_PLAN_BACKEND_FIXED)
					dynamic += p.term[t];
			/* cudaMalloc rounds each buffer to 2 MiB pages, and
			 * the loss keeps a small per-row buffer */
			p.term[TACO_PLAN_MARGIN] =
			    CUDA_MARGIN_FIXED + dynamic / 1000;
		}
	} else {
		cuda_terms(shapes, in, p.term);
		for (int t = 0; t < TACO_PLAN_TERMS; t++)
			if (t != TACO_PLAN_BACKEND_FIXED)
				dynamic += p.term[t];
		/* Every buffer comes from arenas allocated once before the
		 * first step: the margin covers their 2 MiB granularity and
		 * alignment, not a caching allocator's fragmentation. */
		p.term[TACO_PLAN_MARGIN] = CUDA_MARGIN_FIXED + dynamic / 1000;
		p.peak_phase = "backward of the first layer";
	}
	for (int t = 0; t < TACO_PLAN_TERMS; t++)
		p.total += p.term[t];
	*out = p;
	return 0;
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
}
