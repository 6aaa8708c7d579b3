/* plan.h: the memory a job will need, term by term, before it runs.
 *
 * For the CPU backend every term is computed from the same buffer lists the
 * engine allocates from (model_work.c, optim.c, train.c), so the plan is what
 * the allocator's counters will read. The CUDA terms describe the bf16 GPU
 * engine of docs/memory-plan.md; they are the contract that backend's
 * allocations are checked against. */
#ifndef TACO_PLAN_H
#define TACO_PLAN_H

#include <stdint.h>
#include <stdio.h>

#include "job/job.h"
#include "model/mem_terms.h"
#include "model/step_opts.h"
#include "util/taco_err.h"

/* A model's tensor list and shapes (model/model.h). Only pointed to here:
 * this header, which tacod includes, reaches no kernel header. */
struct taco_model;

enum taco_plan_backend {
	TACO_BACKEND_CPU = 0,
	/* the same buffers, plus the CUDA context, the cuBLASLt workspace
	 * and cudaMalloc's rounding */
	TACO_BACKEND_CUDA,
};

typedef struct taco_plan_input {
	int backend;
	int weight_dtype;    /* how the weights are stored (TK_F32, TK_BF16) */
	int act_dtype;	     /* the engine's precision: TK_F32 or TK_BF16 */
	int B, T, A;	     /* batch, sequence length, gradient accumulation */
	taco_step_opts step; /* kept activations, offload, MLP blocks */
	taco_optim_opts optim;
	const uint8_t *frozen; /* NULL or a flag per tensor of the shapes */
	/* evaluation's answers: their cache (model/decode.h), rows x ctx
	 * with calls of chunk tokens; rows 0: none */
	int gen_rows, gen_ctx, gen_chunk;
} taco_plan_input;

typedef struct taco_plan {
	uint64_t term[TACO_PLAN_TERMS];
	uint64_t total;	       /* backend (device) memory */
	uint64_t host;	       /* host memory: offloaded activations, streamed
				  weights */
	uint64_t host_weights; /* of which streamed weights */
	/* bytes over the bus per step with streamed weights: the layers'
	 * fetches (forward and backward; the last ring's worth is fetched
	 * once) and the write-backs */
	uint64_t to_device, to_host;
	const char *peak_phase;
	/* the settings planned (taco_plan_job picks them) */
	int act_dtype;
	int offload;
	int mlp_chunks;
	int overlap; /* optimizer on the side stream (two gradient blocks) */
	int stream_layers, layers; /* layers streamed from host, of all */
} taco_plan;

const char *taco_plan_term_name(int term);

/* Plans a model of these shapes (taco_model_shapes or a loaded model; the
 * tensors' dtypes are not used: weight_dtype is). */
int taco_plan_compute(const struct taco_model *shapes,
		      const taco_plan_input *in, taco_plan *out, taco_err *err);

/* What would fit in `budget` bytes when the plan does not: the largest
 * batch (same T) and sequence length (same B), 0 when none, and whether
 * freezing the embeddings and LM head would make the job fit. */
typedef struct taco_plan_advice {
	int max_batch;
	int max_seq_len;
	int freeze_embeddings_fits;
	uint64_t frozen_embeddings_total;
} taco_plan_advice;

int taco_plan_advise(const struct taco_model *shapes, const taco_plan_input *in,
		     uint64_t budget, taco_plan_advice *out, taco_err *err);

/* The plan input of a job on a backend, with the weights stored in
 * weight_dtype; offload and MLP blocks at the job's setting, or none
 * where the job leaves them to admission. */
void taco_plan_input_from_job(const taco_job *job, int backend,
			      int weight_dtype, taco_plan_input *in);

/* Whether the job needs a dense gradient of every trainable tensor:
 * gradient accumulation, or AdamW on 2-D tensors (AdamW takes a tensor's
 * gradient whole). */
int taco_plan_dense_grads(const taco_job *job);

/* The plan of a job without loading its weights: config.json, and the dtype
 * from the safetensors headers. frozen tensors follow job->freeze. Where
 * the job leaves offload and MLP blocks to admission, the cheapest settings
 * that fit budget (0: no limit) are planned: as the job says (MLP blocks
 * of at most 32 MiB when it leaves them open), then offload, then twice,
 * four times ... the MLP blocks. With weights auto, when none of those
 * fits with the weights on the device: offload as the job allows and the
 * fewest streamed layers that fit, then all streamed with the MLP blocks
 * doubled again; weights host streams every layer. When none fits, the
 * first. The settings are in out and in_out. */
int taco_plan_job(const taco_job *job, int backend, uint64_t budget,
		  taco_plan *out, taco_plan_input *in_out,
		  struct taco_model **shapes_out, taco_err *err);

/* Admission's view of a job: taco_plan_job within budget, and when the
 * plan does not fit, what would (taco_plan_advise) and why not
 * (taco_plan_refuse, in err). Returns 0 when it fits, -ENOSPC when it
 * does not (out and advice set), another negative errno when it cannot
 * be planned (nothing set). */
int taco_plan_admit(const taco_job *job, int backend, uint64_t budget,
		    taco_plan *out, taco_plan_advice *advice, taco_err *err);

/* "precision bf16, activation offload on, 1 MLP block": the settings of a
 * plan, for people. */
void taco_plan_settings(const taco_plan *p, char *buf, size_t len);

/* The precision planned: "bf16" or "fp32". */
const char *taco_plan_precision(const taco_plan *p);

/* A model served for generation (taco-train --serve, tacod's chat
 * completions): its context (requested, or 0: the model's
 * max_position_embeddings, at most TACO_SERVE_CONTEXT) and calls of at
 * most 1024 tokens; and its plan on a backend: the weights in act_dtype
 * (bf16, or as stored in fp32: weight_dtype), the KV cache of rows
 * completions and the call buffers (model/decode.h), and on CUDA the
 * context, the cuBLASLt workspace and the margin. Exact on the CPU. */
#define TACO_SERVE_CONTEXT 8192
void taco_plan_serve_shape(const struct taco_model *shapes, int requested,
			   int *ctx, int *chunk);
int taco_plan_serve(const struct taco_model *shapes, int backend,
		    int weight_dtype, int act_dtype, int rows, int ctx,
		    taco_plan *out, taco_err *err);

/* The same from a model directory (config.json, the dtype from the
 * safetensors headers), with taco-train --serve's precision on the
 * backend (fp32 on the CPU, bf16 on CUDA); *ctx the context planned. */
int taco_plan_serve_dir(const char *dir, int backend, int rows, int context,
			taco_plan *out, int *ctx, taco_err *err);

/* Frozen flags of job->freeze over a model's tensors (caller frees).
 * A prefix matching no tensor is an error. */
int taco_job_frozen(const taco_job *job, const struct taco_model *m,
		    uint8_t **out, taco_err *err);

/* Physical memory of this machine (the CPU backend's device). */
uint64_t taco_plan_host_memory(void);

/* Parses "123", "80GB", "80GiB", "512MB", "1.5TB" (K/M/G/T: powers of
 * 1000 with B, of 1024 with iB). Returns 0 or -EINVAL. */
int taco_parse_bytes(const char *s, uint64_t *out);

/* "65.52 GB", "1.08 MB" (decimal units). */
void taco_plan_format_bytes(uint64_t b, char *buf, size_t len);

/* A readable table of the plan. */
void taco_plan_print(const taco_plan *p, FILE *f);

/* Describes a plan that does not fit in budget, with what would, into err.
 * Returns -ENOSPC. */
int taco_plan_refuse(const struct taco_model *shapes, const taco_plan_input *in,
		     const taco_plan *p, uint64_t budget, taco_err *err);

#endif
