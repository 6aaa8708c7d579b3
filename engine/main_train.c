/* taco-train: runs one fine-tuning job in the foreground. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "data/job_data.h"
#include "gguf/gguf_export.h"
#include "job/job.h"
#include "launch.h"
#include "plan/plan.h"
#include "serve.h"
#include "tk_comm.h"
#include "train/export_gguf.h"
#include "train/train.h"
#include "util/runtime.h"

enum {
	EXIT_OK = 0,
	EXIT_FAILED = 1,
	EXIT_USAGE = 2,
	EXIT_STOPPED = 3,
};

static volatile sig_atomic_t stop_requested;
/* with --die-with-parent: the parent's pid (tacod's), else 0 */
static volatile sig_atomic_t parent_pid;

/* First signal: finish the step, checkpoint, exit 3. Second: exit now,
 * unless it comes from the parent. A parent killed with its threads
 * (kill -9 of tacod) sends PR_SET_PDEATHSIG's signal once for each of its
 * threads the child is handed to as they exit (Linux gives the orphan to
 * a live thread of the parent first), all from the parent's pid; tacod
 * itself sends one SIGTERM, then SIGKILL. */
static void on_signal(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	if (stop_requested && !(parent_pid && si && si->si_pid == parent_pid))
		_exit(128 + sig);
	stop_requested = 1;
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: taco-train [OPTIONS] JOB.json\n"
		"       taco-train --list-devices\n"
		"       taco-train --serve MODEL_DIR [--rows N] [--context N] "
		"[--precision P]\n"
		"\n"
		"Runs the fine-tuning job described by JOB.json (docs/job.md) "
		"in the\n"
		"foreground on the CPU or the CUDA backend: trains, "
		"evaluates, writes\n"
		"checkpoints and exports the model to OUTPUT_DIR/model.\n"
		"\n"
		"Options:\n"
		"  --resume         continue from the newest complete "
		"checkpoint in\n"
		"                   OUTPUT_DIR/checkpoints (start fresh if "
		"there is none)\n"
		"  --events-fd N    write one JSON object per line to file "
		"descriptor N\n"
		"                   (docs/events.md)\n"
		"  --events-file PATH\n"
		"                   append the same lines to the file PATH "
		"(tacod's\n"
		"                   Slurm jobs: docs/slurm.md)\n"
		"  --die-with-parent\n"
		"                   stop (with a checkpoint) when the parent "
		"process dies\n"
		"                   (tacod starts its workers so); with "
		"--export-gguf, exit\n"
		"                   at once\n"
		"  --no-progress    print no progress (by default: a live line "
		"on a\n"
		"                   terminal, else a line every log_every "
		"steps)\n"
		"  --check          validate JOB.json, print the problems, "
		"and exit\n"
		"  --validate       read the data files as training would and "
		"print the\n"
		"                   validation report (docs/datasets.md); "
		"exit 0 without\n"
		"                   errors, else 1\n"
		"  --plan           print the memory plan of the job, term by "
		"term, and\n"
		"                   whether it fits: device and host memory, "
		"and with\n"
		"                   streamed weights the bytes per step to the "
		"device\n"
		"                   and back; exit 0 if it fits, else 1\n"
		"  --backend B      cpu (default) or cuda (GPU 0): the "
		"backend the job\n"
		"                   trains on, and the one --plan plans "
		"for\n"
		"  --memory-budget SIZE\n"
		"                   device memory the job may use, e.g. 80GB, "
		"80GiB, 512MB\n"
		"                   (default: this machine's physical "
		"memory with cpu,\n"
		"                   80GB for --plan with cuda, no check when "
		"training\n"
		"                   on cuda); a job whose plan exceeds it is "
		"refused\n"
		"                   before it loads\n"
		"  --export-gguf TYPE\n"
		"                   convert the job's exported model "
		"(OUTPUT_DIR/model) to\n"
		"                   GGUF for llama.cpp, of type bf16, f16 or "
		"q8_0, and exit:\n"
		"                   OUTPUT_DIR/gguf/model-TYPE.gguf "
		"(docs/gguf.md)\n"
		"  --checkpoint DIR with --export-gguf: convert the "
		"checkpoint DIR instead\n"
		"                   (OUTPUT_DIR/gguf/step-NNNNNNNN-TYPE.gguf)\n"
		"  --output PATH    with --export-gguf: write the file to "
		"PATH instead\n"
		"  --list-devices   print the GPUs the CUDA backend sees as "
		"JSON, and exit\n"
		"                   (no JOB.json; exit 1 when it sees none: "
		"why on stderr)\n"
		"  --serve MODEL_DIR\n"
		"                   (no JOB.json) load the model and answer "
		"chat requests,\n"
		"                   one JSON object a line on stdin, on stdout "
		"until stdin\n"
		"                   ends (tacod's chat completions worker: "
		"docs/generation.md)\n"
		"  --rows N         with --serve: completions of one request "
		"at most (1)\n"
		"  --context N      with --serve: tokens of a prompt and its "
		"answer (default:\n"
		"                   the model's max_position_embeddings, at "
		"most 8192)\n"
		"  --precision P    with --serve: fp32 or bf16 (default: fp32 "
		"on cpu, bf16\n"
		"                   on cuda)\n"
		"  -h, --help       this text\n"
		"\n"
		"SIGTERM or SIGINT: finish the current step, write a "
		"checkpoint, exit 3.\n"
		"A second signal exits at once.\n"
		"\n"
		"Exit status: 0 finished, 1 failed, 2 bad usage or invalid "
		"job,\n"
		"3 stopped by a signal after a checkpoint.\n");
}

/* taco-train --list-devices: {"devices": [{"index", "name", "memory",
 * "compute_capability", "usable"}]} on stdout (tacod's "devices": "auto"
 * reads it), or why there are none on stderr. */
static int list_devices(void)
{
	tk_device_info d[64];
	char why[256] = "", cc[16];
	json_t *all, *list;
	int n, r;

	if ((n = tk_cuda_devices(d, 64, why, sizeof(why))) < 0) {
		fprintf(stderr, "taco-train: --list-devices: %s\n", why);
		return EXIT_FAILED;
	}
	if (n > 64)
		n = 64;
	list = json_array();
	for (int i = 0; i < n; i++) {
		snprintf(cc, sizeof(cc), "%d.%d", d[i].cc_major, d[i].cc_minor);
		json_array_append_new(
		    list,
		    json_pack("{s:i, s:s, s:I, s:s, s:b}", "index", d[i].index,
			      "name", d[i].name, "memory",
			      (json_int_t)d[i].memory, "compute_capability", cc,
			      "usable", d[i].usable));
	}
	all = json_pack("{s:o}", "devices", list);
	r = json_dumpf(all, stdout, JSON_INDENT(2)) || puts("") == EOF ||
		    fflush(stdout)
		? EXIT_FAILED
		: EXIT_OK;
	json_decref(all);
	if (!n) {
		fprintf(stderr, "taco-train: --list-devices: no CUDA device\n");
		return EXIT_FAILED;
	}
	return r;
}

/* taco-train --validate */
static int print_validation(const taco_job *job)
{
	char path[TACO_PATH_MAX + 16];
	taco_config cfg;
	taco_job_data d;
	taco_err err = {{0}};
	int r;

	snprintf(path, sizeof(path), "%s/config.json", job->model);
	if (taco_config_load(path, &cfg, &err)) {
		fprintf(stderr, "taco-train: %s\n", err.msg);
		return EXIT_FAILED;
	}
	r = taco_job_data_load(job, cfg.vocab, &d, &err);
	if (d.have_reports) {
		taco_dataset_report_print(&d.train_report, job->train, stdout);
		if (job->validation[0] && d.val_report.lines)
			taco_dataset_report_print(&d.val_report,
						  job->validation, stdout);
	}
	if (!r && d.train)
		printf("%zu training examples: %lld optimizer steps of %d x "
		       "%d x %d tokens\n",
		       d.train->n,
		       (long long)taco_train_total_steps(job, d.train->n),
		       job->batch_size, job->grad_accum, job->seq_len);
	if (r)
		fprintf(stderr, "taco-train: %s\n", err.msg);
	taco_job_data_free(&d);
	return r ? EXIT_FAILED : EXIT_OK;
}

/* taco-train --plan */
static int print_plan(const taco_job *job, int backend, uint64_t budget)
{
	taco_plan p;
	taco_plan_input in;
	taco_model *shapes = NULL;
	uint8_t *frozen = NULL;
	taco_err err = {{0}};
	char settings[256];
	int r;

	if (!budget)
		budget = backend == TACO_BACKEND_CPU ? taco_plan_host_memory()
						     : 80000000000ull;
	r = taco_plan_job(job, backend, budget, &p, &in, &shapes, &err);
	if (r) {
		fprintf(stderr, "taco-train: %s\n", err.msg);
		return EXIT_FAILED;
	}
	taco_plan_settings(&p, settings, sizeof(settings));
	printf("Memory plan: %s, %s backend, weights %s, batch %d x %d, "
	       "grad_accum %d, %s\n  settings: %s\n",
	       taco_arch_name(shapes->cfg.arch),
	       backend == TACO_BACKEND_CPU ? "CPU" : "CUDA",
	       in.weight_dtype == TK_F32    ? "F32"
	       : in.weight_dtype == TK_BF16 ? "BF16"
					    : "F16",
	       in.B, in.T, in.A, in.optim.all_adamw ? "AdamW" : "TACO",
	       settings);
	taco_plan_print(&p, stdout);
	printf("  device %.3f GB, host %.3f GB (streamed weights %.3f GB, "
	       "offloaded activations and write-back staging %.3f GB)\n",
	       (double)p.total / 1e9, (double)p.host / 1e9,
	       (double)p.host_weights / 1e9,
	       (double)(p.host - p.host_weights) / 1e9);
	if (p.stream_layers)
		printf("  streamed: %d of %d layers, per step %.3f GB to the "
		       "device and %.3f GB back\n",
		       p.stream_layers, p.layers, (double)p.to_device / 1e9,
		       (double)p.to_host / 1e9);
	if (p.total <= budget) {
		printf("fits: %.3f GB of %.3f GB\n", (double)p.total / 1e9,
		       (double)budget / 1e9);
		r = EXIT_OK;
	} else {
		if (!taco_job_frozen(job, shapes, &frozen, &err)) {
			in.frozen = frozen;
			taco_plan_refuse(shapes, &in, &p, budget, &err);
		}
		printf("does not fit: %s\n", err.msg);
		r = EXIT_FAILED;
	}
	free(frozen);
	taco_model_free(shapes);
	return r;
}

/* taco-train --export-gguf */
static int export_gguf(const taco_job *job, int type, const char *ckpt,
		       const char *out)
{
	char path[4400];
	taco_err err = {{0}};

	if (taco_train_export_gguf(job, ckpt, type, out, path, sizeof(path),
				   &err)) {
		fprintf(stderr, "taco-train: %s\n", err.msg);
		return EXIT_FAILED;
	}
	printf("%s\n", path);
	return EXIT_OK;
}

static int parse_fd(const char *s, int *out)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (*end || v < 0 || v > 65535)
		return -1;
	*out = (int)v;
	return 0;
}

/* gpus > 1, started as one process: the job's ranks under mpirun, each
 * with this run's options (launch.c). */
static int launch(const taco_job *job, char *job_path,
		  const taco_train_opts *to, int no_progress, int backend,
		  const char *budget)
{
	char *args[8];
	int k = 0;

	if (to->resume)
		args[k++] = "--resume";
	if (no_progress)
		args[k++] = "--no-progress";
	if (backend == TACO_BACKEND_CUDA) {
		args[k++] = "--backend";
		args[k++] = "cuda";
	}
	if (budget) {
		args[k++] = "--memory-budget";
		args[k++] = (char *)budget;
	}
	args[k++] = job_path;
	args[k] = NULL;
	return taco_launch_ranks(job->gpus, args, to->events_fd,
				 &stop_requested);
}

/* A rank of several on the CUDA backend: its own GPU of the job's, as the
 * only one it sees, before CUDA starts (NCCL wants one GPU a rank). */
static int pin_rank_gpu(void)
{
	char gpu[128];
	const char *visible = getenv("CUDA_VISIBLE_DEVICES");
	int rank, r;

	if (tk_comm_world(&rank) < 2)
		return 0;
	r = tk_comm_rank_gpu(visible, tk_comm_local_rank(), gpu, sizeof(gpu));
	if (r) {
		fprintf(stderr,
			"taco-train: rank %d: no GPU of its own among "
			"CUDA_VISIBLE_DEVICES=%s (%s)\n",
			rank, visible ? visible : "(unset)", strerror(-r));
		return r;
	}
	return setenv("CUDA_VISIBLE_DEVICES", gpu, 1) ? -errno : 0;
}

/* --serve: a model answering chat requests on stdin/stdout. Under
 * tacod it has nothing to save: it ends with tacod. */
static int serve_model(const char *dir, int backend, int precision, int rows,
		       int context, int die_with_parent)
{
	taco_serve_opts so = {dir,     tk_cpu_ops(), TK_F32,	   rows,
			      context, STDIN_FILENO, STDOUT_FILENO};
	taco_err err = {{0}};
	char why[256] = "";

	if (die_with_parent) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() == 1)
			return EXIT_STOPPED;
	}
	/* a reader that is gone: stdin ends too */
	signal(SIGPIPE, SIG_IGN);
	if (backend == TACO_BACKEND_CUDA) {
		if (pin_rank_gpu())
			return EXIT_FAILED;
		if (tk_cuda_open(&so.ops, why, sizeof(why))) {
			fprintf(stderr,
				"taco-train: --backend cuda: no CUDA "
				"backend: %s\n",
				why);
			return EXIT_FAILED;
		}
	}
	so.act_dtype = precision >= 0		      ? precision
		       : backend == TACO_BACKEND_CUDA ? TK_BF16
						      : TK_F32;
	if (taco_serve(&so, &err)) {
		fprintf(stderr, "taco-train: --serve %s: %s\n", dir, err.msg);
		return EXIT_FAILED;
	}
	return EXIT_OK;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"resume", no_argument, NULL, 'r'},
	    {"events-fd", required_argument, NULL, 'e'},
	    {"events-file", required_argument, NULL, 'E'},
	    {"no-progress", no_argument, NULL, 'p'},
	    {"check", no_argument, NULL, 'c'},
	    {"die-with-parent", no_argument, NULL, 'D'},
	    {"validate", no_argument, NULL, 'V'},
	    {"plan", no_argument, NULL, 'P'},
	    {"backend", required_argument, NULL, 'B'},
	    {"memory-budget", required_argument, NULL, 'M'},
	    {"export-gguf", required_argument, NULL, 'G'},
	    {"checkpoint", required_argument, NULL, 'C'},
	    {"output", required_argument, NULL, 'O'},
	    {"list-devices", no_argument, NULL, 'L'},
	    {"serve", required_argument, NULL, 'S'},
	    {"rows", required_argument, NULL, 'R'},
	    {"context", required_argument, NULL, 'X'},
	    {"precision", required_argument, NULL, 'Q'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	taco_train_opts to = {.events_fd = -1, .stop = &stop_requested};
	int c, check = 0, no_progress = 0, plan = 0, validate = 0, r;
	int die_with_parent = 0, gguf = -1, list = 0, rows = 1, context = 0;
	int precision = -1;
	const char *serve = NULL;
	const char *ckpt = NULL, *gguf_out = NULL, *budget_arg = NULL;
	int backend = TACO_BACKEND_CPU;
	taco_job job;
	taco_job_problems probs;
	taco_err err = {{0}};
	struct sigaction sa;

	taco_runtime_init(argv);
	/* first thing after the re-exec: a stop asked while the job loads
	 * (tacod pauses a job that has just started) is honoured at the
	 * first step boundary, with a checkpoint */
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_signal;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	/* a rank's stop, from its launcher through mpirun (launch.c) */
	sigaction(SIGUSR1, &sa, NULL);
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'r':
			to.resume = 1;
			break;
		case 'e':
			if (parse_fd(optarg, &to.events_fd)) {
				fprintf(stderr,
					"taco-train: --events-fd: "
					"'%s' is not a file "
					"descriptor\n",
					optarg);
				return EXIT_USAGE;
			}
			break;
		case 'E':
			/* appended: a resumed run's events follow the ones
			 * before; the descriptor stays open to the end */
			to.events_fd = open(
			    optarg, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
			    0644);
			if (to.events_fd < 0) {
				fprintf(stderr,
					"taco-train: --events-file: %s: %s\n",
					optarg, strerror(errno));
				return EXIT_FAILED;
			}
			break;
		case 'p':
			no_progress = 1;
			break;
		case 'c':
			check = 1;
			break;
		case 'D':
			die_with_parent = 1;
			break;
		case 'P':
			plan = 1;
			break;
		case 'V':
			validate = 1;
			break;
		case 'B':
			if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda")) {
				fprintf(stderr, "taco-train: --backend must be "
						"cpu or cuda\n");
				return EXIT_USAGE;
			}
			backend = strcmp(optarg, "cpu") ? TACO_BACKEND_CUDA
							: TACO_BACKEND_CPU;
			break;
		case 'M':
			budget_arg = optarg;
			if (taco_parse_bytes(optarg, &to.memory_budget) ||
			    !to.memory_budget) {
				fprintf(stderr,
					"taco-train: --memory-budget: "
					"'%s' is not a size like 80GB\n",
					optarg);
				return EXIT_USAGE;
			}
			break;
		case 'G':
			if ((gguf = taco_gguf_type_from_name(optarg)) < 0) {
				fprintf(stderr,
					"taco-train: --export-gguf must "
					"be bf16, f16 or q8_0\n");
				return EXIT_USAGE;
			}
			break;
		case 'C':
			ckpt = optarg;
			break;
		case 'O':
			gguf_out = optarg;
			break;
		case 'L':
			list = 1;
			break;
		case 'S':
			serve = optarg;
			break;
		case 'R':
		case 'X': {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (*end || v < (c == 'R' ? 1 : 2) ||
			    v > (c == 'R' ? 64 : 1 << 20)) {
				fprintf(stderr,
					"taco-train: --%s: '%s' is not "
					"%s\n",
					c == 'R' ? "rows" : "context", optarg,
					c == 'R' ? "1 to 64"
						 : "2 to 1048576 tokens");
				return EXIT_USAGE;
			}
			*(c == 'R' ? &rows : &context) = (int)v;
			break;
		}
		case 'Q':
			if (strcmp(optarg, "fp32") && strcmp(optarg, "bf16")) {
				fprintf(stderr, "taco-train: --precision must "
						"be fp32 or bf16\n");
				return EXIT_USAGE;
			}
			precision = strcmp(optarg, "fp32") ? TK_BF16 : TK_F32;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (serve) {
		if (optind != argc) {
			fprintf(stderr, "taco-train: --serve takes no "
					"JOB.json\n");
			return EXIT_USAGE;
		}
		return serve_model(serve, backend, precision, rows, context,
				   die_with_parent);
	}
	if (list) {
		if (optind != argc) {
			fprintf(stderr, "taco-train: --list-devices takes no "
					"JOB.json\n");
			return EXIT_USAGE;
		}
		return list_devices();
	}
	if (optind != argc - 1) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (gguf < 0 && (ckpt || gguf_out)) {
		fprintf(stderr, "taco-train: --checkpoint and --output go with "
				"--export-gguf\n");
		return EXIT_USAGE;
	}
	if (taco_job_load(argv[optind], &job, &probs)) {
		int shown = probs.n < 64 ? probs.n : 64;
		fprintf(stderr, "taco-train: %s: %d problem%s:\n", argv[optind],
			probs.n, probs.n == 1 ? "" : "s");
		for (int i = 0; i < shown; i++)
			fprintf(stderr, "  %s\n", probs.msg[i]);
		if (probs.n > shown)
			fprintf(stderr, "  ... and %d more\n", probs.n - shown);
		taco_job_free(&job);
		return EXIT_USAGE;
	}
	if (gguf >= 0) {
		/* Under tacod a conversion ends with tacod: it has nothing
		 * to save, and its temporary file is tacod's to remove. */
		if (die_with_parent) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (getppid() == 1) {
				taco_job_free(&job);
				return EXIT_STOPPED;
			}
		}
		r = export_gguf(&job, gguf, ckpt, gguf_out);
		taco_job_free(&job);
		return r;
	}
	if (validate) {
		r = print_validation(&job);
		taco_job_free(&job);
		return r;
	}
	if (plan) {
		r = print_plan(&job, backend, to.memory_budget);
		taco_job_free(&job);
		return r;
	}
	if (check) {
		printf("%s: valid\n", argv[optind]);
		taco_job_free(&job);
		return EXIT_OK;
	}
	to.progress = no_progress	      ? TACO_PROGRESS_NONE
		      : isatty(STDERR_FILENO) ? TACO_PROGRESS_TTY
					      : TACO_PROGRESS_LINES;
	/* events to a reader that is gone fail quietly; training goes on */
	signal(SIGPIPE, SIG_IGN);
	/* Under tacod: when tacod dies, checkpoint and stop like on SIGTERM
	 * (a restarted tacod resumes the job). */
	if (die_with_parent) {
		parent_pid = (sig_atomic_t)getppid();
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() == 1)
			stop_requested = 1;
	}
	if (job.gpus > 1 && tk_comm_world(&r) == 1) {
		r = launch(&job, argv[optind], &to, no_progress, backend,
			   budget_arg);
		taco_job_free(&job);
		return r;
	}
	if (backend == TACO_BACKEND_CUDA) {
		char why[256] = "";
		if (pin_rank_gpu()) {
			taco_job_free(&job);
			return EXIT_FAILED;
		}
		if (tk_cuda_open(&to.ops, why, sizeof(why))) {
			fprintf(stderr,
				"taco-train: --backend cuda: no CUDA "
				"backend: %s\n",
				why);
			taco_job_free(&job);
			return EXIT_FAILED;
		}
	}
	r = taco_train_run(&job, &to, &err);
	taco_job_free(&job);
	if (r < 0) {
		fprintf(stderr, "taco-train: %s\n", err.msg);
		return EXIT_FAILED;
	}
	if (r == TACO_TRAIN_STOPPED) {
		fprintf(stderr, "taco-train: stopped after a checkpoint; "
				"continue with --resume\n");
		return EXIT_STOPPED;
	}
	return EXIT_OK;
}
