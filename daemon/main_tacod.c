/* tacod: the fine-tuning daemon. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "runtime.h"
#include "service.h"

static tacod_service *svc;
static uv_signal_t sig_term, sig_int;

static void usage(FILE *f)
{
	fprintf(f, "Usage: tacod [OPTIONS]\n"
		   "\n"
		   "Serves the fine-tuning API (OpenAI's /v1/files and "
		   "/v1/fine_tuning paths)\n"
		   "and runs the jobs with taco-train.\n"
		   "\n"
		   "  --config FILE       JSON configuration (docs/tacod.md)\n"
		   "  --listen HOST:PORT  TCP address (default 127.0.0.1:8226; "
		   "\"\" for none)\n"
		   "  --unix-socket PATH  also listen on a unix socket\n"
		   "  --state-dir DIR     database, uploads, job outputs\n"
		   "  --models-dir DIR    base models, one directory each\n"
		   "  --taco-train PATH   the worker binary\n"
		   "  --check-config      validate the configuration and exit\n"
		   "  -h, --help          this text\n"
		   "\n"
		   "SIGTERM or SIGINT: stop accepting, checkpoint running jobs "
		   "(they resume\n"
		   "when tacod starts again), exit.\n");
}

static void on_signal(uv_signal_t *h, int signum)
{
	(void)signum;
	uv_signal_stop(&sig_term);
	uv_signal_stop(&sig_int);
	uv_close((uv_handle_t *)&sig_term, NULL);
	uv_close((uv_handle_t *)&sig_int, NULL);
	fprintf(stderr, "tacod: stopping: running jobs checkpoint first\n");
	tacod_service_shutdown(h->data);
}

static int set(char *dst, size_t cap, const char *v, const char *flag)
{
	if (strlen(v) >= cap) {
		fprintf(stderr, "tacod: %s: too long\n", flag);
		return -1;
	}
	memcpy(dst, v, strlen(v) + 1);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"config", required_argument, NULL, 'c'},
	    {"listen", required_argument, NULL, 'l'},
	    {"unix-socket", required_argument, NULL, 'u'},
	    {"state-dir", required_argument, NULL, 's'},
	    {"models-dir", required_argument, NULL, 'm'},
	    {"taco-train", required_argument, NULL, 't'},
	    {"check-config", no_argument, NULL, 'C'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	tacod_config cfg;
	taco_err err = {{0}};
	int c, check = 0, bad = 0;
	const char *config_path = NULL;
	uv_loop_t *loop;

	taco_runtime_init(argv);
	tacod_config_defaults(&cfg);
	/* the config file first, so that flags override it */
	for (int i = 1; i + 1 < argc; i++)
		if (!strcmp(argv[i], "--config"))
			config_path = argv[i + 1];
	if (config_path && tacod_config_load(config_path, &cfg, &err)) {
		fprintf(stderr, "tacod: %s\n", err.msg);
		return 2;
	}
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			break;
		case 'l':
			bad |= set(cfg.listen, sizeof(cfg.listen), optarg,
				   "--listen");
			break;
		case 'u':
			bad |= set(cfg.unix_socket, sizeof(cfg.unix_socket),
				   optarg, "--unix-socket");
			break;
		case 's':
			bad |= set(cfg.state_dir, sizeof(cfg.state_dir), optarg,
				   "--state-dir");
			break;
		case 'm':
			bad |= set(cfg.models_dir, sizeof(cfg.models_dir),
				   optarg, "--models-dir");
			break;
		case 't':
			bad |= set(cfg.taco_train, sizeof(cfg.taco_train),
				   optarg, "--taco-train");
			break;
		case 'C':
			check = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (bad || optind != argc) {
		usage(stderr);
		return 2;
	}
	if (tacod_config_check(&cfg, &err)) {
		fprintf(stderr, "tacod: %s\n", err.msg);
		return 2;
	}
	if (check) {
		printf("tacod: configuration is valid\n");
		return 0;
	}
	loop = uv_default_loop();
	if (tacod_service_start(&cfg, loop, &svc, &err)) {
		fprintf(stderr, "tacod: %s\n", err.msg);
		return 1;
	}
	if (!cfg.tokens_file[0])
		fprintf(stderr, "tacod: no tokens_file: listening on loopback "
				"only, every client is the local admin\n");
	fprintf(stderr, "tacod: listening on %s%s%s\n", cfg.listen,
		cfg.unix_socket[0] ? " and " : "", cfg.unix_socket);
	uv_signal_init(loop, &sig_term);
	uv_signal_init(loop, &sig_int);
	sig_term.data = sig_int.data = svc;
	uv_signal_start(&sig_term, on_signal, SIGTERM);
	uv_signal_start(&sig_int, on_signal, SIGINT);
	uv_run(loop, UV_RUN_DEFAULT);
	tacod_service_free(svc);
	uv_loop_close(loop);
	return 0;
}
