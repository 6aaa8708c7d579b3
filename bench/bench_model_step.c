/* bench_model_step: times the engine's training step on a model of real
 * shapes with random bf16 weights and random tokens, on the CPU or the CUDA
 * backend, and prints one JSON line. A step is what taco-train runs for
 * grad_accum 1 (taco_train_step: forward, chunked loss, backward with
 * activation checkpointing, the TACO update of each tensor as its gradient
 * completes). Used by tests/gpu/run.sh beside bench/step_gpu_torch.py.
 *
 *   bench_model_step --config CFG.json --backend cpu|cuda --batch B --seq T
 *                    [--steps N] [--warmup W] [--optimizer taco|none]
 *                    [--keep-activations] [--peak-tflops F] [--seed S]
 *                    [--offload] [--mlp-chunks K]
 *                    [--stream-layers N | --device-budget SIZE]
 *                    [--profile] [--name NAME]
 *
 * --stream-layers N|all: the last N layers' weights live in host memory and
 * stream through the ring (taco_step_opts.stream_layers); --device-budget
 * SIZE: the fewest streamed layers whose plan fits SIZE (as admission's
 * weights auto). The JSON line then carries the bytes over the bus per
 * step, and with --profile the copy stream's achieved bandwidth and the
 * fraction of its time hidden behind compute.
 *
 * --profile (CUDA): the timed steps run under tk_cuda_profile_start/stop and
 * the JSON line gets a "profile" object, ms per step by phase (stderr gets
 * it as a table); on the CPU backend "profile" is null, with a note.
 *
 * Exit status: 0, 1 on a failure (a JSON line with "error" on stdout), 2 on
 * bad usage. */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "model/config.h"
#include "model/model.h"
#include "optim/optim.h"
#include "plan/plan.h"
#include "tk_hash.h"
#include "train/init.h"
#include "train/train.h"
#include "util/runtime.h"

#define MAX_STEPS 1000

typedef struct args {
	const char *config, *name;
	int cuda, B, T, steps, warmup, taco, keep;
	int bf16, offload, chunks; /* bf16 -1: the backend's default */
	int profile;
	int stream; /* layers streamed; -1: from budget */
	uint64_t budget;
	double peak_tflops;
	uint64_t seed;
} args;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: bench_model_step --config CFG.json --backend cpu|cuda "
		"--batch B --seq T\n"
		"                        [--steps N] [--warmup W] "
		"[--optimizer taco|none]\n"
		"                        [--keep-activations] "
		"[--peak-tflops F] [--seed S]\n"
		"                        [--precision fp32|bf16] [--offload] "
		"[--mlp-chunks K]\n"
		"                        [--stream-layers N | "
		"--device-budget SIZE]\n"
		"                        [--profile] [--name NAME]\n"
		"\n"
		"--stream-layers N|all: the last N layers' weights in host "
		"memory,\n"
		"streamed layer by layer; --device-budget SIZE (e.g. 22GB): "
		"the fewest "
		"streamed\n"
		"layers whose plan fits.\n"
		"\n"
		"Random bf16 weights of CFG.json's shapes, random tokens; W "
		"warm-up steps\n"
		"(default 1), then N timed steps (default 3). Prints one JSON "
		"line:\n"
		"step_s is the median timed step, mfu = 6 * params * B * T / "
		"step_s /\n"
		"(F * 1e12), F default 989 (H100/H200 dense bf16); the "
		"backward's\n"
		"recomputation is not counted as work.\n"
		"\n"
		"--profile: time every op of the N timed steps with CUDA "
		"events\n"
		"(tk_cuda_profile_start/stop) and add \"profile\": ms per "
		"step by phase\n"
		"(gemm, attention, elementwise, loss, optimizer on the main "
		"and side\n"
		"streams, copies, idle, wall), also as a table on stderr. "
		"The profiled\n"
		"steps pay two event records per op. On the CPU backend: "
		"\"profile\": null.\n");
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
	    {"config", required_argument, NULL, 'c'},
	    {"backend", required_argument, NULL, 'b'},
	    {"batch", required_argument, NULL, 'B'},
	    {"seq", required_argument, NULL, 'T'},
	    {"steps", required_argument, NULL, 'n'},
	    {"warmup", required_argument, NULL, 'w'},
	    {"optimizer", required_argument, NULL, 'o'},
	    {"keep-activations", no_argument, NULL, 'k'},
	    {"precision", required_argument, NULL, 'P'},
	    {"offload", no_argument, NULL, 'O'},
	    {"mlp-chunks", required_argument, NULL, 'M'},
	    {"peak-tflops", required_argument, NULL, 'p'},
	    {"seed", required_argument, NULL, 's'},
	    {"name", required_argument, NULL, 'N'},
	    {"profile", no_argument, NULL, 'R'},
	    {"stream-layers", required_argument, NULL, 'S'},
	    {"device-budget", required_argument, NULL, 'D'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	int c, bad = 0;

	*a = (args){.steps = 3,
		    .warmup = 1,
		    .taco = 1,
		    .peak_tflops = 989,
		    .bf16 = -1,
		    .chunks = 0};
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			a->config = optarg;
			break;
		case 'b':
			a->cuda = strcmp(optarg, "cuda") == 0;
			bad |= !a->cuda && strcmp(optarg, "cpu");
			break;
		case 'B':
			bad |= int_arg(optarg, 1, 4096, &a->B);
			break;
		case 'T':
			bad |= int_arg(optarg, 2, 131072, &a->T);
			break;
		case 'n':
			bad |= int_arg(optarg, 1, MAX_STEPS, &a->steps);
			break;
		case 'w':
			bad |= int_arg(optarg, 0, MAX_STEPS, &a->warmup);
			break;
		case 'o':
			a->taco = strcmp(optarg, "taco") == 0;
			bad |= !a->taco && strcmp(optarg, "none");
			break;
		case 'k':
			a->keep = 1;
			break;
		case 'P':
			a->bf16 = strcmp(optarg, "bf16") == 0;
			bad |= !a->bf16 && strcmp(optarg, "fp32");
			break;
		case 'O':
			a->offload = 1;
			break;
		case 'M':
			bad |= int_arg(optarg, 0, 1024, &a->chunks);
			break;
		case 'p':
			a->peak_tflops = strtod(optarg, NULL);
			bad |= !(a->peak_tflops > 0);
			break;
		case 's':
			a->seed = strtoull(optarg, NULL, 10);
			break;
		case 'N':
			a->name = optarg;
			break;
		case 'R':
			a->profile = 1;
			break;
		case 'S': /* "all": every layer (clamped to the count) */
			if (strcmp(optarg, "all") == 0)
				a->stream = 100000;
			else
				bad |= int_arg(optarg, 0, 100000, &a->stream);
			break;
		case 'D':
			bad |= taco_parse_bytes(optarg, &a->budget) != 0 ||
			       !a->budget;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			bad = 1;
		}
	}
	if (bad || optind != argc || !a->config || !a->B || !a->T ||
	    (a->budget && a->stream) ||
	    (int64_t)a->B * a->T > TACO_MAX_TOKENS) {
		usage(stderr);
		return -1;
	}
	if (a->bf16 < 0) /* bf16 on CUDA, fp32 on the CPU, as jobs */
		a->bf16 = a->cuda;
	return 0;
}

/* "qwen3-8b" for .../qwen3-8b.json, "llama_gqa" for .../llama_gqa/config.json
 */
static void config_name(const char *path, char *out, size_t len)
{
	char buf[4096], *base, *dot;

	snprintf(buf, sizeof(buf), "%s", path);
	base = basename(buf);
	if (strcmp(base, "config.json") == 0) {
		snprintf(buf, sizeof(buf), "%s", path);
		base = basename(dirname(buf));
	}
	snprintf(out, len, "%s", base);
	if ((dot = strrchr(out, '.')) && strcmp(dot, ".json") == 0)
		*dot = 0;
}

/* The plan of this shape for a backend: what the model, optimizer and step
 * buffers should take. Without an optimizer its state terms are left out.
 * full: the whole plan (may be NULL). */
static int plan_full(const taco_config *cfg, const args *a, int backend,
		     int stream, uint64_t *out, taco_plan *full, taco_err *err)
{
	taco_model *shapes = NULL;
	taco_plan_input in = {0};
	taco_plan p;
	int r;

	if ((r = taco_model_shapes(cfg, &shapes, err)))
		return r;
	in.backend = backend;
	in.weight_dtype = TK_BF16;
	in.B = a->B;
	in.T = a->T;
	in.A = 1;
	in.act_dtype = a->bf16 ? TK_BF16 : TK_F32;
	in.step.keep_activations = a->keep;
	in.step.offload = a->offload;
	in.step.mlp_chunks = a->chunks;
	in.step.stream_layers = stream;
	in.step.overlap = backend == TACO_BACKEND_CUDA;
	taco_optim_defaults(&in.optim);
	r = taco_plan_compute(shapes, &in, &p, err);
	taco_model_free(shapes);
	if (r)
		return r;
	if (!a->taco)
		p.total -= p.term[TACO_PLAN_TACO_STATE] +
			   p.term[TACO_PLAN_ADAMW_STATE];
	*out = p.total;
	if (full)
		*full = p;
	return 0;
}

static int plan_bytes(const taco_config *cfg, const args *a, int backend,
		      uint64_t *out, taco_err *err)
{
	return plan_full(cfg, a, backend, a->stream, out, NULL, err);
}

/* --device-budget: the fewest streamed layers whose plan on the backend
 * fits (all of them when none does). */
static int fewest_streamed(const taco_config *cfg, args *a, taco_err *err)
{
	uint64_t total;
	int r;

	for (a->stream = 0; a->stream < cfg->layers; a->stream++) {
		if ((r = plan_full(
			 cfg, a, a->cuda ? TACO_BACKEND_CUDA : TACO_BACKEND_CPU,
			 a->stream, &total, NULL, err)))
			return r;
		if (total <= a->budget)
			return 0;
	}
	return 0;
}

/* Tokens uniform over the vocabulary; each target is the next token. */
static void random_batch(int32_t *tok, int32_t *tgt, int B, int T, int V,
			 uint64_t seed)
{
	uint64_t s = seed;

	for (size_t i = 0; i < (size_t)B * T; i++)
		tok[i] = (int32_t)(tk_splitmix64_next(&s) % (uint64_t)V);
	for (size_t i = 0; i < (size_t)B * T; i++)
		tgt[i] = (i + 1) % (size_t)T ? tok[i + 1] : -100;
}

/* CUDA ops return void: their first failure is polled. */
static int backend_failed(const args *a, taco_err *err)
{
	const char *e = a->cuda ? tk_cuda_last_error() : NULL;

	return e ? taco_err_set(err, -EIO, "CUDA backend: %s", e) : 0;
}

/* The profile of n steps, ms per step: the JSON line's "profile" object,
 * and the same as a table on stderr for the one reading the log. */
static json_t *profile_json(const tk_profile *p, int n, int complete,
			    const char *name)
{
	static const char *const label[TK_PHASE_COUNT] = {
	    "gemm", "attention", "elementwise", "loss", "optimizer", "copies"};
	double d = n, busy = 0, side = 0;

	for (int i = 0; i < TK_PHASE_COUNT; i++) {
		busy += p->main_ms[i];
		side += p->side_ms[i];
	}
	fprintf(stderr,
		"bench_model_step: profile of %s, ms per step over %d steps "
		"(%.0f ops per step)%s:\n"
		"  %-12s %12s %12s\n",
		name, n, (double)p->ops / d,
		complete ? "" : ", PARTIAL: the events ran out", "phase",
		"main stream", "side stream");
	for (int i = 0; i < TK_PHASE_COUNT; i++)
		fprintf(stderr, "  %-12s %12.3f %12.3f\n", label[i],
			p->main_ms[i] / d, p->side_ms[i] / d);
	fprintf(stderr,
		"  %-12s %12.3f %12.3f\n"
		"  %-12s %12.3f\n"
		"  %-12s %12.3f\n"
		"  %-12s %12.3f (overlapped, offload)\n",
		"busy", busy / d, side / d, "idle", p->idle_ms / d, "wall",
		p->wall_ms / d, "copy stream", p->copy_ms / d);
	return json_pack(
	    "{si sf sf sf sf sf sf sf sf sf sf sf sf sf sb}", "steps", n,
	    "wall_ms", p->wall_ms / d, "gemm_ms", p->main_ms[TK_PHASE_GEMM] / d,
	    "attention_ms", p->main_ms[TK_PHASE_ATTENTION] / d,
	    "elementwise_ms", p->main_ms[TK_PHASE_ELEMENTWISE] / d, "loss_ms",
	    p->main_ms[TK_PHASE_LOSS] / d, "optimizer_ms",
	    p->main_ms[TK_PHASE_OPTIMIZER] / d, "optimizer_side_ms",
	    p->side_ms[TK_PHASE_OPTIMIZER] / d, "side_ms", side / d, "copy_ms",
	    p->main_ms[TK_PHASE_COPY] / d, "copy_stream_ms", p->copy_ms / d,
	    "busy_ms", busy / d, "idle_ms", p->idle_ms / d, "ops_per_step",
	    (double)p->ops / d, "complete", complete);
}

static int run(args *a, json_t *res, taco_err *err)
{
	const tk_ops *ops = tk_cpu_ops();
	taco_config cfg;
	taco_model *m = NULL;
	taco_optim *o = NULL;
	taco_optim_opts oo;
	taco_step_stats st = {0};
	int32_t *tok = NULL, *tgt = NULL;
	double times[MAX_STEPS], t0, first_loss = 0, step_s;
	uint64_t planned = 0, engine = 0, probe = 0;
	size_t params, peak;
	char why[256] = "";
	int r, profiling = 0, pr;
	tk_profile prof;
	json_t *prof_obj = NULL;
	taco_plan full;
	taco_step_opts so;

	/* planned: the backend's plan (for CUDA the bf16 engine of
	 * docs/memory-plan.md); engine: the buffer lists this engine allocates
	 * (model_work.c, optim.c), which is the CPU backend's plan */
	if ((r = taco_config_load(a->config, &cfg, err)))
		return r;
	if (a->stream > cfg.layers)
		a->stream = cfg.layers;
	if ((a->budget && (r = fewest_streamed(&cfg, a, err))) ||
	    (r = plan_full(&cfg, a,
			   a->cuda ? TACO_BACKEND_CUDA : TACO_BACKEND_CPU,
			   a->stream, &planned, &full, err)) ||
	    (r = plan_bytes(&cfg, a,
			    a->cuda ? TACO_BACKEND_CUDA : TACO_BACKEND_CPU,
			    &planned, err)) ||
	    (r = plan_bytes(&cfg, a, TACO_BACKEND_CPU, &engine, err)))
		return r;
	if (a->cuda && (r = tk_cuda_open(&ops, why, sizeof(why))))
		return taco_err_set(err, r, "no CUDA backend: %s", why);
	t0 = now();
	/* the schedule first: streamed layers are made in host memory */
	so = (taco_step_opts){.keep_activations = a->keep,
			      .offload = a->offload,
			      .mlp_chunks = a->chunks,
			      .stream_layers = a->stream};
	if ((r = taco_model_init_random_sched(&cfg, ops, TK_BF16, a->seed, &so,
					      &m, err)))
		return r;
	json_object_set_new(res, "init_s", json_real(now() - t0));
	m->act_dtype = a->bf16 ? TK_BF16 : TK_F32;
	if ((r = taco_model_set_step_opts(m, &so, err)))
		goto out;
	taco_optim_defaults(&oo);
	oo.seed = a->seed;
	if (a->taco && (r = taco_optim_create(m, &oo, NULL, &o, err)))
		goto out;
	tok = malloc((size_t)a->B * a->T * sizeof(int32_t));
	tgt = malloc((size_t)a->B * a->T * sizeof(int32_t));
	if (!tok || !tgt) {
		r = taco_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < a->warmup + a->steps; i++) {
		/* One profile over the timed steps; its events are made
		 * here, before the first one is timed. A profile that cannot
		 * start leaves the benchmark as it is, with a note. */
		if (i == a->warmup && a->profile && a->cuda) {
			if ((pr = tk_cuda_profile_start()) == 0)
				profiling = 1;
			else
				json_object_set_new(
				    res, "profile_note",
				    json_sprintf("tk_cuda_profile_start: %s",
						 strerror(-pr)));
		}
		random_batch(tok, tgt, a->B, a->T, cfg.vocab,
			     a->seed + (uint64_t)i);
		t0 = now();
		/* lr 1e-5: a fine-tuning rate, the weights stay random */
		if ((r = taco_train_step(
			 m, o, NULL,
			 &(taco_batch){a->B, a->T, tok, tgt, NULL, 0}, 1e-5f,
			 &st, err)))
			goto out;
		/* A download waits for the backend's queue: the step's end. */
		m->ops->download(&probe, m->tensors[m->embed].data, 2);
		if ((r = backend_failed(a, err)))
			goto out;
		if (i >= a->warmup)
			times[i - a->warmup] = now() - t0;
		if (i == 0)
			first_loss = st.loss;
		if (!isfinite(st.loss)) {
			r = taco_err_set(err, -EDOM, "step %d: loss %g", i + 1,
					 st.loss);
			goto out;
		}
	}
	if (profiling) {
		profiling = 0;
		pr = tk_cuda_profile_stop(&prof);
		if (pr == 0 || pr == -ENOSPC) {
			prof_obj = profile_json(
			    &prof, a->steps, pr == 0,
			    json_string_value(json_object_get(res, "config")));
		} else {
			json_object_set_new(
			    res, "profile_note",
			    json_sprintf("tk_cuda_profile_stop: %s",
					 strerror(-pr)));
		}
	}
	qsort(times, (size_t)a->steps, sizeof(double), cmp_double);
	step_s = times[a->steps / 2];
	params = taco_model_param_count(m);
	peak = ops->mem_peak();
	json_object_update_new(
	    res,
	    json_pack("{sI sf sf sf sI sI sf sI sf sf sf sI}", "params",
		      (json_int_t)params, "step_s", step_s, "step_min_s",
		      times[0], "tokens_per_s", (double)a->B * a->T / step_s,
		      "peak_bytes", (json_int_t)peak, "planned_bytes",
		      (json_int_t)planned, "plan_error_pct",
		      planned ? 100.0 * ((double)peak - (double)planned) /
				    (double)planned
			      : 0.0,
		      "engine_plan_bytes", (json_int_t)engine, "mfu",
		      6.0 * (double)params * a->B * a->T / step_s /
			  (a->peak_tflops * 1e12),
		      "loss_first", first_loss, "loss_last", st.loss,
		      "optimizer_state_bytes",
		      (json_int_t)(o ? o->state_bytes : 0)));
	json_object_update_new(
	    res, json_pack("{si sI sI sI sI sI}", "stream_layers", a->stream,
			   "host_peak_bytes", (json_int_t)ops->host_peak(),
			   "host_planned_bytes", (json_int_t)full.host,
			   "host_weights_bytes", (json_int_t)full.host_weights,
			   "to_device_bytes", (json_int_t)full.to_device,
			   "to_host_bytes", (json_int_t)full.to_host));
	if (prof_obj) {
		/* the copy stream also carries the offloaded layer inputs:
		 * out once, back but for the last three */
		double es = a->bf16 ? 2 : 4,
		       nh = (double)a->B * a->T * cfg.hidden * es;
		double bytes = (double)full.to_device + (double)full.to_host +
			       (a->offload ? nh * (2.0 * cfg.layers - 2) : 0);
		double copy = json_real_value(
			   json_object_get(prof_obj, "copy_stream_ms")),
		       idle = json_real_value(
			   json_object_get(prof_obj, "idle_ms")),
		       busy = json_real_value(
			   json_object_get(prof_obj, "busy_ms"));
		double gbps = copy > 0 ? bytes / (copy * 1e-3) / 1e9 : 0;
		double hidden =
		    copy > 0 ? 1.0 - (idle < copy ? idle : copy) / copy : 1.0;
		double bound = busy > copy ? busy : copy;
		json_object_update_new(
		    res, json_pack("{sf sf sf sf sf}", "copy_bytes", bytes,
				   "copy_gbps", gbps, "hidden_fraction", hidden,
				   "compute_ms", busy, "step_over_bound",
				   bound > 0 ? step_s * 1e3 / bound : 0.0));
	}
	if (a->profile) {
		json_object_set_new(res, "profile",
				    prof_obj ? prof_obj : json_null());
		prof_obj = NULL;
		if (!a->cuda)
			json_object_set_new(
			    res, "profile_note",
			    json_string("CPU backend: no CUDA events, no "
					"profile"));
	}
	r = 0;
out:
	if (profiling) /* a failed step: put the op table back */
		tk_cuda_profile_stop(&prof);
	json_decref(prof_obj);
	free(tok);
	free(tgt);
	taco_optim_free(o);
	taco_model_free(m);
	return r;
}

int main(int argc, char **argv)
{
	args a;
	taco_err err = {{0}};
	char name[256];
	json_t *res;
	char *line;
	int r;

	taco_runtime_init(argv);
	if (parse(argc, argv, &a))
		return 2;
	if (a.name)
		snprintf(name, sizeof(name), "%s", a.name);
	else
		config_name(a.config, name, sizeof(name));
	res = json_pack("{ss ss ss si si si sb ss sb si sf}", "impl", "taco",
			"backend", a.cuda ? "cuda" : "cpu", "config", name, "B",
			a.B, "T", a.T, "steps", a.steps, "keep_activations",
			a.keep, "precision", a.bf16 ? "bf16" : "fp32",
			"offload", a.offload, "mlp_chunks", a.chunks,
			"peak_tflops", a.peak_tflops);
	json_object_set_new(res, "optimizer",
			    json_string(a.taco ? "taco" : "none"));
	r = run(&a, res, &err);
	if (r)
		json_object_set_new(res, "error", json_string(err.msg));
	line = json_dumps(res, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (line)
		puts(line);
	free(line);
	json_decref(res);
	if (r)
		fprintf(stderr, "bench_model_step: %s\n", err.msg);
	return r ? 1 : 0;
}
