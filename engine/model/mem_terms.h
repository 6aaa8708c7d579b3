/* mem_terms.h: the terms the memory plan is made of. Every buffer the
 * engine allocates is counted in one of them: model_work.c files each step
 * buffer under its term, and plan/ adds the weights, the optimizer state
 * and the backend's own memory. Defined here, below plan/, so that the
 * buffer lists need nothing from the planner. */
#ifndef TACO_MEM_TERMS_H
#define TACO_MEM_TERMS_H

enum taco_plan_term {
	TACO_PLAN_WEIGHTS = 0,	  /* parameters, in their stored dtype */
	TACO_PLAN_TACO_STATE,	  /* TACO slots of 2-D tensors */
	TACO_PLAN_ADAMW_STATE,	  /* master, m, v of AdamW tensors */
	TACO_PLAN_GRAD_BUFFER,	  /* a block of a gradient, or all (dense) */
	TACO_PLAN_LAYER_INPUTS,	  /* checkpointed layer inputs (or all
				     activations when they are kept) */
	TACO_PLAN_LAYER_WORK,	  /* one layer's recompute and backward */
	TACO_PLAN_LOSS_CHUNK,	  /* final norm output, logits of a chunk */
	TACO_PLAN_ATTENTION,	  /* attention statistics and workspace */
	TACO_PLAN_BATCH,	  /* token ids, targets, positions, RoPE */
	TACO_PLAN_WEIGHT_SCRATCH, /* fp32 copies of one layer's weights */
	TACO_PLAN_WEIGHT_RING,	  /* slots of streamed layers' weights */
	TACO_PLAN_GEMM_WORKSPACE, /* BLAS / cuBLASLt workspace */
	TACO_PLAN_COMM,		  /* data parallel: gradient sums (NCCL) */
	TACO_PLAN_KV_CACHE,	  /* generation: keys and values of every
				     layer and sequence */
	TACO_PLAN_BACKEND_FIXED,  /* CUDA context, library handles */
	TACO_PLAN_MARGIN,	  /* allocator fragmentation */
	TACO_PLAN_TERMS
};

#endif
