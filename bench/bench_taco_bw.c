/* bench_taco_bw: the memory bandwidth a TACO update reaches, against a
 * device-to-device copy of as many bytes in the same run, on the CPU or
 * the CUDA backend. One JSON line; a benchmark, never a pass/fail test.
 *
 *   bench_taco_bw [--backend cpu|cuda] [--rows R] [--cols C] [--k K]
 *                 [--iters N] [--warmup W] [--feed-rows F] [--seed S]
 *
 * The update is the optimizer's on one bf16 weight [R, C] (default 8192 x
 * 8192) from a random fp32 gradient, with the optimizer's defaults (k,
 * beta, no weight decay, stochastic rounding: taco_optim_defaults), lr
 * 1e-5, tensor_index 0, steps 1, 2, ... from an empty state (as a fresh
 * optimizer's: idx all ones, q and scale 0). The W warm-up steps (default
 * 1) are not timed, so the N timed ones (default 20) find a tracked state.
 * --feed-rows F: taco_begin, taco_feed in blocks of F rows, taco_finish
 * (the engine's path for a gradient in blocks) instead of taco_update.
 *
 * Bytes of the update, the least it must move (kernels/cpu/taco.c,
 * kernels/cuda/taco.cu): the gradient read once (4 R C), the state read
 * and written (2 C (k idx_bytes + k + 4)), and of W only the one entry per
 * column that the step changes, read and written (2 C 2): the update
 * never touches the rest of W. The copy moves the same: bytes / 2 read and
 * bytes / 2 written, as ops->convert of bf16 to bf16 (a cudaMemcpyAsync
 * device to device on CUDA, memcpy on the CPU). GB/s = bytes / time of
 * each; ratio = taco_gbps / copy_gbps, the fraction of the copy's
 * bandwidth the update reaches.
 *
 * Timing: on CUDA, the sum of the ops' own times from the profile
 * (tk_cuda_profile_start/stop, CUDA events), divided by N; on the CPU
 * (or when the profile cannot start) wall clock around the N calls,
 * ended by a 4-byte download (which waits for the backend's queue).
 *
 * Exit status: 0, 1 on a failure (a JSON line with "error"), 2 on bad
 * usage. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "optim/optim.h"
#include "tk_convert.h"
#include "tk_hash.h"
#include "tk_ops.h"
#include "util/runtime.h"

#define LR 1e-5f /* a fine-tuning rate; the cost does not depend on it */

typedef struct args {
	int cuda, R, C, k, iters, warmup, feed;
	uint64_t seed;
} args;

/* What one run allocates on the backend. */
typedef struct bufs {
	void *W, *idx, *scan, *csrc, *cdst;
	float *G, *scale;
	uint8_t *q;
	size_t wb, gb, ib, qb, sb, scanb, cb;
} bufs;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: bench_taco_bw [--backend cpu|cuda] [--rows R] "
		"[--cols C] [--k K]\n"
		"                     [--iters N] [--warmup W] "
		"[--feed-rows F] [--seed S]\n"
		"\n"
		"Times the TACO update of one bf16 weight [R, C] (default "
		"8192 x 8192, k\n"
		"default the optimizer's) from an fp32 gradient, and a "
		"device-to-device\n"
		"copy of as many bytes, N timed calls (default 20) after W "
		"warm-up ones\n"
		"(default 1). --feed-rows F: the row-block path (taco_begin, "
		"taco_feed of\n"
		"F rows, taco_finish). Prints one JSON line: taco_gbps, "
		"copy_gbps, ratio,\n"
		"bytes (the least the update moves: the gradient once, the "
		"state read and\n"
		"written, the one entry of W per column it steps), ... "
		"A benchmark: it\n"
		"passes or fails on errors only.\n");
}

static int int_arg(const char *s, int lo, int hi, int *out)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (end == s || *end || v < lo || v > hi)
		return -1;
	*out = (int)v;
	return 0;
}

static int parse(int argc, char **argv, args *a)
{
	static const struct option opts[] = {
	    {"backend", required_argument, NULL, 'b'},
	    {"rows", required_argument, NULL, 'r'},
	    {"cols", required_argument, NULL, 'c'},
	    {"k", required_argument, NULL, 'k'},
	    {"iters", required_argument, NULL, 'n'},
	    {"warmup", required_argument, NULL, 'w'},
	    {"feed-rows", required_argument, NULL, 'f'},
	    {"seed", required_argument, NULL, 's'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	taco_optim_opts oo;
	int c, bad = 0;

	taco_optim_defaults(&oo);
	*a = (args){.R = 8192, .C = 8192, .k = oo.k, .iters = 20, .warmup = 1};
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'b':
			a->cuda = strcmp(optarg, "cuda") == 0;
			bad |= !a->cuda && strcmp(optarg, "cpu");
			break;
		case 'r':
			bad |= int_arg(optarg, 1, 1 << 20, &a->R);
			break;
		case 'c':
			bad |= int_arg(optarg, 1, 1 << 20, &a->C);
			break;
		case 'k':
			bad |= int_arg(optarg, 1, 16, &a->k);
			break;
		case 'n':
			bad |= int_arg(optarg, 1, 100000, &a->iters);
			break;
		case 'w':
			bad |= int_arg(optarg, 0, 100000, &a->warmup);
			break;
		case 'f':
			bad |= int_arg(optarg, 0, 1 << 20, &a->feed);
			break;
		case 's':
			a->seed = strtoull(optarg, NULL, 10);
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			bad = 1;
		}
	}
	/* the gradient's elements are indexed by int in the kernels */
	if (bad || optind != argc || (int64_t)a->R * a->C > (1LL << 31) - 1) {
		usage(stderr);
		return -1;
	}
	return 0;
}

/* A uniform float in [-1, 1). */
static float unit(uint64_t *s)
{
	return (float)((double)(tk_splitmix64_next(s) >> 11) * 0x1p-52 - 1.0);
}

/* The weight (small random values, as a trained bf16 weight's), the
 * gradient and the empty state, uploaded. */
static int fill(const tk_ops *ops, const args *a, bufs *b)
{
	size_t n = (size_t)a->R * a->C;
	uint64_t s = a->seed ^ 0x7461636fULL;
	uint16_t *w = malloc(b->wb);
	float *g = malloc(b->gb);
	uint8_t *ones = malloc(b->ib);

	if (!w || !g || !ones) {
		free(w);
		free(g);
		free(ones);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		w[i] = tk_f32_bf16_rne(0.02f * unit(&s));
	for (size_t i = 0; i < n; i++)
		g[i] = 1e-3f * unit(&s);
	memset(ones, 0xFF, b->ib); /* all ones: every slot empty */
	ops->upload(b->W, w, b->wb);
	ops->upload(b->G, g, b->gb);
	ops->upload(b->idx, ones, b->ib);
	ops->memset0(b->q, b->qb);
	ops->memset0(b->scale, b->sb);
	ops->memset0(b->csrc, b->cb);
	free(w);
	free(g);
	free(ones);
	return 0;
}

/* One optimizer step (from 1) of the whole weight. */
static void taco_step(const tk_ops *ops, const args *a, const bufs *b,
		      uint64_t step)
{
	taco_optim_opts oo;
	tk_taco_args t;

	taco_optim_defaults(&oo);
	t = (tk_taco_args){.R = a->R,
			   .C = a->C,
			   .col0 = 0,
			   .ncols = a->C,
			   .k = a->k,
			   .lr = LR,
			   .beta = oo.beta,
			   .weight_decay = oo.weight_decay,
			   .stochastic = oo.stochastic,
			   .seed = a->seed,
			   .tensor_index = 0,
			   .step = step};
	if (!a->feed) {
		ops->taco_update(b->W, TK_BF16, b->G, a->C, b->idx, b->q,
				 b->scale, &t);
		return;
	}
	ops->taco_begin(b->scan, b->idx, b->q, b->scale, &t);
	for (int r0 = 0; r0 < a->R; r0 += a->feed) {
		int nr = a->R - r0 < a->feed ? a->R - r0 : a->feed;

		ops->taco_feed(b->scan, b->G + (size_t)r0 * a->C, a->C, NULL,
			       r0, nr, &t);
	}
	ops->taco_finish(b->scan, b->W, TK_BF16, b->idx, b->q, b->scale, &t);
}

static void copy(const tk_ops *ops, const bufs *b)
{
	ops->convert(b->cdst, TK_BF16, b->csrc, TK_BF16, b->cb / 2);
}

/* Seconds per call of n calls of the update (is_taco, steps step0 ..) or
 * the copy: on CUDA the ops' own time in phase (the profile), else wall
 * clock ended by a download; *timer says which. */
static double timed(const tk_ops *ops, const args *a, const bufs *b, int phase,
		    int is_taco, uint64_t step0, const char **timer)
{
	int prof = a->cuda && tk_cuda_profile_start() == 0;
	uint32_t probe;
	tk_profile p;
	double t0 = now();

	for (int i = 0; i < a->iters; i++) {
		if (is_taco)
			taco_step(ops, a, b, step0 + (uint64_t)i);
		else
			copy(ops, b);
	}
	if (prof && tk_cuda_profile_stop(&p) == 0) {
		*timer = "cuda events";
		return p.main_ms[phase] * 1e-3 / a->iters;
	}
	/* without a profile (or a failed one, which synchronised anyway) */
	ops->download(&probe, b->G, sizeof(probe));
	*timer = "wall clock";
	return (now() - t0) / a->iters;
}

static void release(const tk_ops *ops, bufs *b)
{
	ops->free(b->W, b->wb);
	ops->free(b->G, b->gb);
	ops->free(b->idx, b->ib);
	ops->free(b->q, b->qb);
	ops->free(b->scale, b->sb);
	ops->free(b->scan, b->scanb);
	ops->free(b->csrc, b->cb);
	ops->free(b->cdst, b->cb);
}

static int run(const args *a, json_t *res, char *msg, size_t len)
{
	const tk_ops *ops = tk_cpu_ops();
	const char *e, *ttimer = "", *ctimer = "";
	size_t C = (size_t)a->C, idx_bytes = a->R <= 65535 ? 2 : 4;
	size_t grad, state, weight, bytes;
	double taco_s, copy_s;
	char why[256] = "";
	bufs b = {0};
	int r;

	if (a->cuda && (r = tk_cuda_open(&ops, why, sizeof(why)))) {
		snprintf(msg, len, "no CUDA backend: %s", why);
		return r;
	}
	grad = (size_t)4 * a->R * C;
	state = 2 * C * ((size_t)a->k * idx_bytes + (size_t)a->k + 4);
	weight = 2 * C * tk_dtype_size(TK_BF16);
	bytes = grad + state + weight;
	b.wb = (size_t)a->R * C * tk_dtype_size(TK_BF16);
	b.gb = grad;
	b.ib = C * (size_t)a->k * idx_bytes;
	b.qb = C * (size_t)a->k;
	b.sb = C * sizeof(float);
	b.scanb = a->feed ? ops->taco_scan_bytes(a->C) : 0;
	/* bf16 elements: bytes / 2 read and as many written */
	b.cb = bytes / 4 * 2;
	if (!(b.W = ops->alloc(b.wb)) || !(b.G = ops->alloc(b.gb)) ||
	    !(b.idx = ops->alloc(b.ib)) || !(b.q = ops->alloc(b.qb)) ||
	    !(b.scale = ops->alloc(b.sb)) ||
	    (b.scanb && !(b.scan = ops->alloc(b.scanb))) ||
	    !(b.csrc = ops->alloc(b.cb)) || !(b.cdst = ops->alloc(b.cb))) {
		snprintf(msg, len, "out of %s memory",
			 a->cuda ? "device" : "backend");
		r = -ENOMEM;
		goto out;
	}
	if ((r = fill(ops, a, &b))) {
		snprintf(msg, len, "out of host memory");
		goto out;
	}
	for (int i = 0; i < a->warmup; i++) {
		taco_step(ops, a, &b, (uint64_t)i + 1);
		copy(ops, &b);
	}
	taco_s = timed(ops, a, &b, TK_PHASE_OPTIMIZER, 1,
		       (uint64_t)a->warmup + 1, &ttimer);
	copy_s = timed(ops, a, &b, TK_PHASE_ELEMENTWISE, 0, 0, &ctimer);
	if ((e = a->cuda ? tk_cuda_last_error() : NULL)) {
		snprintf(msg, len, "CUDA backend: %s", e);
		r = -EIO;
		goto out;
	}
	if (!(taco_s > 0) || !(copy_s > 0)) {
		snprintf(msg, len, "a time of 0: too few iterations to time");
		r = -ERANGE;
		goto out;
	}
	json_object_update_new(
	    res,
	    json_pack("{sI sI sI sI sI sf sf sf sf sf ss ss}", "bytes",
		      (json_int_t)bytes, "bytes_gradient", (json_int_t)grad,
		      "bytes_state", (json_int_t)state, "bytes_weight",
		      (json_int_t)weight, "copy_bytes", (json_int_t)(2 * b.cb),
		      "taco_ms", taco_s * 1e3, "copy_ms", copy_s * 1e3,
		      "taco_gbps", (double)bytes / taco_s / 1e9, "copy_gbps",
		      (double)(2 * b.cb) / copy_s / 1e9, "ratio",
		      ((double)bytes / taco_s) / ((double)(2 * b.cb) / copy_s),
		      "taco_timer", ttimer, "copy_timer", ctimer));
	r = 0;
out:
	release(ops, &b);
	return r;
}

int main(int argc, char **argv)
{
	args a;
	char msg[512] = "";
	json_t *res;
	char *line;
	int r;

	taco_runtime_init(argv);
	if (parse(argc, argv, &a))
		return 2;
	res = json_pack("{ss ss si si si ss si si si}", "bench", "taco_bw",
			"backend", a.cuda ? "cuda" : "cpu", "rows", a.R, "cols",
			a.C, "k", a.k, "dtype", "bf16", "feed_rows", a.feed,
			"iters", a.iters, "warmup", a.warmup);
	r = run(&a, res, msg, sizeof(msg));
	if (r)
		json_object_set_new(res, "error", json_string(msg));
	line = json_dumps(res, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (line)
		puts(line);
	free(line);
	json_decref(res);
	if (r)
		fprintf(stderr, "bench_taco_bw: %s\n", msg);
	return r ? 1 : 0;
}
