/* step_opts.h: how a training step bounds its memory (taco_model_step's
 * schedule). Apart from model.h, with nothing of the backend, so that the
 * planner's interface (plan/plan.h), which tacod includes, reaches no
 * kernel header. */
#ifndef TACO_STEP_OPTS_H
#define TACO_STEP_OPTS_H

#include <stddef.h>

/* How a step bounds its memory. Every field 0 means the defaults. */
typedef struct taco_step_opts {
	/* 0 (default): activation checkpointing, forward keeps each layer's
	 * input and backward recomputes one layer at a time. 1: every layer's
	 * intermediates are kept, trading memory for the recompute. */
	int keep_activations;
	/* 1: the checkpointed layer inputs live in host memory (copied out
	 * during forward, prefetched during backward); the device keeps 3. */
	int offload;
	/* The MLP runs in this many blocks of the intermediate dimension
	 * (0: blocks of [tokens, block] within 32 MiB; 1: whole), each
	 * recomputed by the MLP's backward; kept activations: whole. */
	int mlp_chunks;
	/* Elements of the fp32 weight-gradient block (0: 16 Mi), at least
	 * one row or column of any tensor; and of one chunk of logits (0:
	 * 4 Mi). Tests shrink them to exercise the chunking. */
	size_t grad_block_elems;
	size_t logit_elems;
	/* 1: the optimizer's updates run on the backend's side stream while
	 * the backward goes on (two gradient blocks, each half the default
	 * size, used in turn); 0: one block, updates in line. The same bits
	 * either way. */
	int overlap;
	/* Weight residency: the last stream_layers decoder layers keep their
	 * matrices (2-D tensors) in host memory and stream them through a
	 * ring of TACO_RING_SLOTS layer slots on the device, fetched one
	 * layer ahead on the copy stream in forward and backward; after a
	 * layer's updates the slot is written back to the host copy. 0 (the
	 * default): every weight on the device; at most the layer count.
	 * The same bits either way. */
	int stream_layers;
	/* 1: the step may be a preference step (taco_model_step_pref): the
	 * buffers of each token's loss and gradient scale are made. */
	int pref;
	/* Data parallel (job option gpus): the step's batch is one of ranks
	 * equal slices of a global batch whose tokens taco_batch.all_tokens
	 * holds, and an untied embedding's gradient covers the distinct
	 * tokens of the whole global batch, so that every rank hands the
	 * sink the same parts to sum (0 or 1: one rank). */
	int ranks;
} taco_step_opts;

#endif
