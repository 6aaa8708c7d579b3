/* taco-train: runs one fine-tuning job in the foreground. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "job.h"
#include "runtime.h"
#include "train.h"

enum {
	EXIT_OK = 0,
	EXIT_FAILED = 1,
	EXIT_USAGE = 2,
	EXIT_STOPPED = 3,
};

static volatile sig_atomic_t stop_requested;

/* First signal: finish the step, checkpoint, exit 3. Second: exit now. */
static void on_signal(int sig)
{
	if (stop_requested)
		_exit(128 + sig);
	stop_requested = 1;
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: taco-train [OPTIONS] JOB.json\n"
		"\n"
		"Runs the fine-tuning job described by JOB.json (docs/job.md) "
		"in the\n"
		"foreground on the CPU backend: trains, evaluates, writes "
		"checkpoints\n"
		"and exports the model to OUTPUT_DIR/model.\n"
		"\n"
		"Options:\n"
		"  --resume         continue from the newest complete "
		"checkpoint in\n"
		"                   OUTPUT_DIR/checkpoints (start fresh if "
		"there is none)\n"
		"  --events-fd N    write one JSON object per line to file "
		"descriptor N\n"
		"                   (docs/events.md)\n"
		"  --no-progress    print no progress (by default: a live line "
		"on a\n"
		"                   terminal, else a line every log_every "
		"steps)\n"
		"  --check          validate JOB.json, print the problems, "
		"and exit\n"
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

static int parse_fd(const char *s, int *out)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (*end || v < 0 || v > 65535)
		return -1;
	*out = (int)v;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"resume", no_argument, NULL, 'r'},
		{"events-fd", required_argument, NULL, 'e'},
		{"no-progress", no_argument, NULL, 'p'},
		{"check", no_argument, NULL, 'c'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	taco_train_opts to = {.events_fd = -1, .stop = &stop_requested};
	int c, check = 0, no_progress = 0, r;
	taco_job job;
	taco_job_problems probs;
	taco_err err = {{0}};
	struct sigaction sa;

	taco_runtime_init(argv);
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'r':
			to.resume = 1;
			break;
		case 'e':
			if (parse_fd(optarg, &to.events_fd)) {
				fprintf(stderr, "taco-train: --events-fd: "
						"'%s' is not a file "
						"descriptor\n",
					optarg);
				return EXIT_USAGE;
			}
			break;
		case 'p':
			no_progress = 1;
			break;
		case 'c':
			check = 1;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (optind != argc - 1) {
		usage(stderr);
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
	if (check) {
		printf("%s: valid\n", argv[optind]);
		taco_job_free(&job);
		return EXIT_OK;
	}
	to.progress = no_progress		 ? TACO_PROGRESS_NONE
		      : isatty(STDERR_FILENO) ? TACO_PROGRESS_TTY
					       : TACO_PROGRESS_LINES;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
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
