/* plan_table: the memory plan of every reference model at batch 4 x 1024 on
 * the CUDA backend as built (bf16), as a Markdown table, with offload and
 * with 8-bit and 32-bit AdamW beside it. docs/memory-plan.md is this
 * program's output:
 *
 *     build/plan_table tests/fixtures/configs > docs/memory-plan.md
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "plan/plan.h"

#define BATCH 4
#define SEQ 1024

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static double gb(uint64_t x)
{
	return (double)x / 1e9;
}

/* Same activations and workspace as ours; optimizer state per parameter
 * as given, and a bf16 gradient of every tensor held at once (PyTorch's
 * optimizer.step runs after backward). */
static uint64_t baseline(const taco_plan *p, uint64_t params,
			 double state_per_param)
{
	uint64_t t = p->total;

	t -= p->term[TACO_PLAN_TACO_STATE] + p->term[TACO_PLAN_ADAMW_STATE] +
	     p->term[TACO_PLAN_GRAD_BUFFER] + p->term[TACO_PLAN_MARGIN];
	t += (uint64_t)((double)params * state_per_param) + params * 2;
	/* PyTorch's caching allocator: 3% fragmentation, a common sight */
	return t + 3 * t / 100;
}

/* The budgets of the streamed table: an 80 GB and a 24 GB card, less
 * what the driver and other processes keep. */
static const uint64_t budgets[] = {75000000000ull, 22000000000ull};

/* One row of the streamed table: with offload, the fewest streamed layers
 * whose plan fits budget (admission's weights auto), or every layer when
 * none does. */
static int stream_row(const char *file, const taco_model *m, taco_plan_input in,
		      uint64_t budget)
{
	taco_plan p;
	taco_err err = {{0}};
	int L = m->cfg.layers, s;

	in.step.offload = 1;
	for (s = 0; s <= L; s++) {
		in.step.stream_layers = s;
		if (taco_plan_compute(m, &in, &p, &err)) {
			fprintf(stderr, "plan_table: %s\n", err.msg);
			return -1;
		}
		if (p.total <= budget)
			break;
	}
	if (s == 0)
		return 0; /* fits with the weights on the device */
	printf("| %s | %.0f | %s%d of %d | %.2f | %.2f | %.2f | %.2f | %.2f | "
	       "%.1f | %.1f |\n",
	       file, gb(budget), s > L ? "does not fit: " : "", s > L ? L : s,
	       L, gb(p.total), gb(p.host), gb(p.host_weights), gb(p.to_device),
	       gb(p.to_host), (double)(p.to_device + p.to_host) / 50e9,
	       (double)(p.to_device + p.to_host) / 25e9);
	return 0;
}

/* OPT-13B's optimizer state as planned, beside the preprint's */
static double opt13_taco = -1, opt13_adam8 = -1;

/* A full fine-tune at BATCH x SEQ in bf16 on the CUDA backend, as a CUDA
 * job runs it (the optimizer overlapping the backward). */
static void cuda_input(taco_plan_input *in)
{
	memset(in, 0, sizeof(*in));
	in->backend = TACO_BACKEND_CUDA;
	in->weight_dtype = TK_BF16;
	in->act_dtype = TK_BF16;
	in->B = BATCH;
	in->T = SEQ;
	in->A = 1;
	in->step.overlap = 1;
	taco_optim_defaults(&in->optim);
}

static int row(const char *dir, const char *file, int streamed)
{
	char path[4096];
	taco_config c;
	taco_model *m = NULL;
	taco_plan p, off;
	taco_plan_input in;
	taco_err err = {{0}};
	uint64_t params = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	if (taco_config_load(path, &c, &err) ||
	    taco_model_shapes(&c, &m, &err)) {
		fprintf(stderr, "plan_table: %s\n", err.msg);
		return -1;
	}
	params = taco_model_param_count(m);
	cuda_input(&in);
	if (taco_plan_compute(m, &in, &p, &err)) {
		fprintf(stderr, "plan_table: %s\n", err.msg);
		taco_model_free(m);
		return -1;
	}
	if (streamed) {
		int r = 0;
		for (size_t b = 0; b < sizeof(budgets) / sizeof(budgets[0]);
		     b++)
			r |= stream_row(file, m, in, budgets[b]);
		taco_model_free(m);
		return r;
	}
	in.step.offload = 1;
	if (taco_plan_compute(m, &in, &off, &err)) {
		fprintf(stderr, "plan_table: %s\n", err.msg);
		taco_model_free(m);
		return -1;
	}
	printf(
	    "| %s | %.2f | %.2f | %.3f | %.3f | %.2f | %.2f | %.2f | %.2f | "
	    "%.2f | %.2f | %.2f | %.2f | **%.2f** | %.2f (host %.2f) | %.2f | "
	    "%.2f |\n",
	    file, (double)params / 1e9, gb(p.term[TACO_PLAN_WEIGHTS]),
	    gb(p.term[TACO_PLAN_TACO_STATE]), gb(p.term[TACO_PLAN_ADAMW_STATE]),
	    gb(p.term[TACO_PLAN_GRAD_BUFFER]),
	    gb(p.term[TACO_PLAN_LAYER_INPUTS]),
	    gb(p.term[TACO_PLAN_LAYER_WORK]), gb(p.term[TACO_PLAN_LOSS_CHUNK]),
	    gb(p.term[TACO_PLAN_ATTENTION] + p.term[TACO_PLAN_BATCH]),
	    gb(p.term[TACO_PLAN_GEMM_WORKSPACE]),
	    gb(p.term[TACO_PLAN_BACKEND_FIXED]), gb(p.term[TACO_PLAN_MARGIN]),
	    gb(p.total), gb(off.total), gb(off.host),
	    gb(baseline(&p, params, 2.0 + 8.0 / 2048)),
	    gb(baseline(&p, params, 8.0)));
	if (strcmp(file, "opt-13b.json") == 0) {
		opt13_taco = gb(p.term[TACO_PLAN_TACO_STATE]);
		opt13_adam8 =
		    gb((uint64_t)((double)params * (2.0 + 8.0 / 2048)));
	}
	taco_model_free(m);
	return 0;
}

/* A DPO job of BATCH pairs: 2 x BATCH sequences, the preference buffers. */
static int dpo_row(const char *dir, const char *file)
{
	char path[4096];
	taco_config c;
	taco_model *m = NULL;
	taco_plan p, off, sft;
	taco_plan_input in;
	taco_err err = {{0}};
	int r = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	if (taco_config_load(path, &c, &err) ||
	    taco_model_shapes(&c, &m, &err)) {
		fprintf(stderr, "plan_table: %s\n", err.msg);
		return -1;
	}
	cuda_input(&in);
	r = taco_plan_compute(m, &in, &sft, &err);
	in.B = 2 * BATCH;
	in.step.pref = 1;
	r = r ? r : taco_plan_compute(m, &in, &p, &err);
	in.step.offload = 1;
	r = r ? r : taco_plan_compute(m, &in, &off, &err);
	if (r)
		fprintf(stderr, "plan_table: %s\n", err.msg);
	else
		printf("| %s | %d x %d | %.2f | %.2f | %.2f | **%.2f** | %.2f "
		       "(host %.2f) | %.2f |\n",
		       file, 2 * BATCH, SEQ, gb(p.term[TACO_PLAN_LAYER_INPUTS]),
		       gb(p.term[TACO_PLAN_LAYER_WORK]),
		       gb(p.term[TACO_PLAN_LOSS_CHUNK]), gb(p.total),
		       gb(off.total), gb(off.host), gb(sft.total));
	taco_model_free(m);
	return r ? -1 : 0;
}

int main(int argc, char **argv)
{
	DIR *d;
	struct dirent *e;
	char *names[256];
	int n = 0, rc = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: plan_table CONFIG_DIR\n");
		return 2;
	}
	d = opendir(argv[1]);
	if (!d) {
		perror(argv[1]);
		return 1;
	}
	while ((e = readdir(d)) && n < 256)
		if (strstr(e->d_name, ".json"))
			names[n++] = strdup(e->d_name);
	closedir(d);
	qsort(names, (size_t)n, sizeof(names[0]), cmp_str);
	printf(
	    "# Memory plans of the reference models\n\n"
	    "Generated by `build/plan_table tests/fixtures/configs` (the "
	    "reference\nmodels' configs): the plan of `engine/plan/plan.c` "
	    "for the CUDA backend as\nbuilt, a full fine-tune with TACO (k = "
	    "16) at batch %d x %d, bf16 precision,\nactivation checkpointing, "
	    "the MLP in blocks of at most 32 MiB; then the total with the "
	    "layer\ninputs offloaded "
	    "to host memory. The plan is the engine's own buffer list\n"
	    "(`engine/model/model_work.c`) plus the CUDA context, the "
	    "cuBLASLt workspace\nand cudaMalloc's rounding. Decimal GB (1e9 "
	    "bytes). Not measurements:\n`tests/gpu/run.sh` compares them with "
	    "the allocator's peak on a GPU\n(`bench/results/`).\n\n",
	    BATCH, SEQ);
	printf("| config | params (B) | weights | TACO state | AdamW state | "
	       "grad block | ckpt activations | layer work | loss chunk | "
	       "attention + batch | GEMM ws | CUDA fixed | margin | "
	       "**total** | with offload | 8-bit AdamW total | 32-bit AdamW "
	       "total |\n|");
	for (int i = 0; i < 17; i++)
		printf(" --- |");
	printf("\n");
	for (int i = 0; i < n; i++)
		rc |= row(argv[1], names[i], 0) ? 1 : 0;
	printf(
	    "\nThe terms: weights in bf16 (no fp32 master copy); TACO state "
	    "with the\noptimizer's two row-stream scans; two fp32 "
	    "gradient blocks of 32 MiB at most,\nused in turn (the optimizer "
	    "updates from one on a side stream while the\nbackward fills the "
	    "other; linear layers' gradients go "
	    "to TACO in column blocks, the MLP's gate and up\nand the LM "
	    "head in row blocks, so that no large gradient exists whole);\n"
	    "the checkpointed layer inputs (bf16); one layer's recompute and "
	    "backward\n(bf16), which the loss's buffers share (one chunk of "
	    "fp32 logits, the fp32\ngradient of the final norm output: the "
	    "column shows only what they need\nbeyond the layer's); the "
	    "cuBLASLt workspace; 0.54 GB for the CUDA context\nand library "
	    "handles, which device-memory readings include but allocator\n"
	    "counters do not; a margin of 64 MiB + 0.1%% for cudaMalloc's "
	    "rounding. With\noffload the device keeps 3 layer inputs and "
	    "the rest live in pinned host\nmemory. When a job does not fit, "
	    "admission tries offload, then the MLP in\ntwice as many blocks, "
	    "again and again "
	    "(`taco-train --plan` shows what it chose).\n\n"
	    "Baselines: the same weights, activations and workspace, a "
	    "bf16 gradient of\nevery tensor held at once (PyTorch's "
	    "`optimizer.step` runs after backward),\noptimizer state of "
	    "2 B per parameter plus 8 B per 2048-element block\n(8-bit "
	    "AdamW, bitsandbytes) or 8 B per parameter (32-bit AdamW, "
	    "fp32 moments),\nand 3%% allocator fragmentation.\n\n"
	    "Published figures (TACO preprint, H100 80 GB): OPT-13B "
	    "TACO optimizer state\n0.159 GB (8-bit AdamW 27.708 GB); "
	    "Qwen3-32B at batch 4, sequences up to\n1,024 tokens: peak "
	    "69.6 (SST-2), 71.6 (RTE), 75.9 (BoolQ) GB.\n\n"
	    "A mixture of experts (qwen3-30b-a3b): each expert's matrices "
	    "are TACO\ntensors of their own (128 experts x 3 matrices x 48 "
	    "layers: TACO state\nof 1.6 GB, the columns of 18,432 matrices). "
	    "How many tokens an expert\nreceives depends on the data, so the "
	    "experts' buffers are sized by what is\nfixed: the N x k routed "
	    "slots (N tokens, k experts a token) of one layer's\ninput, "
	    "gate, up, activation and output, whatever the routing. The plan "
	    "is\nthe peak of any routing, and every step allocates it. "
	    "gpt-oss (gpt-oss-20b,\ngpt-oss-120b) holds each expert's slice "
	    "of its fused tensors as a matrix of\nits own the same way (its "
	    "experts' biases are AdamW's vectors), and streams\na layer's "
	    "experts with the layer: gpt-oss-120b (233.7 GB of bf16 "
	    "weights)\nis planned within an 80 GB card with 29 of its 36 "
	    "layers in host memory\n(below).\n");
	if (opt13_taco >= 0)
		printf("\nOPT-13B as planned here: TACO state %.3f GB (FP8 "
		       "slots, their indices and scales,\nand the two "
		       "row-stream scans) against the preprint's 0.159 GB; "
		       "8-bit AdamW's\nstate by the baseline's rule %.2f GB "
		       "against the preprint's 27.708 GB.\n",
		       opt13_taco, opt13_adam8);
	printf("\n## Weights streamed from host memory\n\n"
	       "The same plan where it does not fit a device budget of %.0f "
	       "GB (an 80 GB\ncard) or %.0f GB (a 24 GB card): with offload, "
	       "the fewest last layers\nwhose matrices live in pinned host "
	       "memory and stream through a ring of\nthree layer slots on "
	       "the device (job option `weights: auto`; `host`\nstreams "
	       "every layer), the embedding, the head and the norms staying "
	       "on\nthe device. Host memory holds the streamed weights, the "
	       "write-back staging\nand the offloaded layer inputs. Per step, "
	       "each streamed layer is "
	       "fetched in forward and again in\nbackward (the last three "
	       "only once: they are still in the ring) and written\nback "
	       "after its update: TACO changes one entry per column, at one "
	       "of its k\nslot rows, so the entries at those rows go back "
	       "with the rows (k = 16:\n64 B per column), not the matrix; "
	       "the transfer time is those bytes at\n50 GB/s (PCIe Gen5 x16) "
	       "and 25 GB/s (Gen4). "
	       "Models that fit a budget with the\nweights on the device "
	       "have no row for it.\n\n",
	       gb(budgets[0]), gb(budgets[1]));
	printf("| config | budget (GB) | streamed layers | **device** | host | "
	       "of which weights | to device / step | to host / step | "
	       "transfer s at 50 GB/s | at 25 GB/s |\n|");
	for (int i = 0; i < 10; i++)
		printf(" --- |");
	printf("\n");
	for (int i = 0; i < n; i++) {
		rc |= row(argv[1], names[i], 1) ? 1 : 0;
	}
	printf("\n## DPO\n\n"
	       "A DPO job (`method: dpo`) of %d preference pairs x %d at "
	       "each step is %d\nsequences a step: the chosen and the "
	       "rejected output of each pair, in\nrows of their own; plus "
	       "each token's loss and gradient factor (the pair's\nweight "
	       "on its sequences' tokens, between the loss's two passes). "
	       "No reference\nmodel: the reference log-probabilities are "
	       "two numbers a pair, computed\nbefore the first step by a "
	       "forward pass of the starting weights at the\nsame shape "
	       "(less memory than a step, which it precedes). The SFT column "
	       "is\nthe table above's total at batch %d.\n\n",
	       BATCH, SEQ, 2 * BATCH, BATCH);
	printf("| config | sequences | ckpt activations | layer work | loss "
	       "chunk | **total** | with offload | SFT total |\n|");
	for (int i = 0; i < 8; i++)
		printf(" --- |");
	printf("\n");
	for (int i = 0; i < n; i++) {
		rc |= dpo_row(argv[1], names[i]) ? 1 : 0;
		free(names[i]);
	}
	return rc;
}
