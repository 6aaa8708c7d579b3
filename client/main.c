/* main.c: tacoctl, the command-line client of tacod: the command table,
 * help, global options and dispatch. It speaks only HTTP to tacod. */
#include <ctype.h>
#include <curl/curl.h>
#include <signal.h>
#include <string.h>

#include "ctl.h"

int ctl_cmd_files_upload(ctl *c, const ctl_cmd *cmd, int argc, char **argv);
int ctl_cmd_files_list(ctl *c, const ctl_cmd *cmd, int argc, char **argv);
int ctl_cmd_files_get(ctl *c, const ctl_cmd *cmd, int argc, char **argv);
int ctl_cmd_files_rm(ctl *c, const ctl_cmd *cmd, int argc, char **argv);
int ctl_cmd_jobs_create(ctl *c, const ctl_cmd *cmd, int argc, char **argv);
int ctl_cmd_jobs_list(ctl *c, const ctl_cmd *cmd, int argc, char **argv);
int ctl_cmd_jobs_get(ctl *c, const ctl_cmd *cmd, int argc, char **argv);
int ctl_cmd_jobs_cancel(ctl *c, const ctl_cmd *cmd, int argc, char **argv);
int ctl_cmd_jobs_pause(ctl *c, const ctl_cmd *cmd, int argc, char **argv);
int ctl_cmd_jobs_resume(ctl *c, const ctl_cmd *cmd, int argc, char **argv);
int ctl_cmd_jobs_wait(ctl *c, const ctl_cmd *cmd, int argc, char **argv);
int ctl_cmd_logs(ctl *c, const ctl_cmd *cmd, int argc, char **argv);
int ctl_cmd_plan(ctl *c, const ctl_cmd *cmd, int argc, char **argv);
int ctl_cmd_checkpoints_list(ctl *c, const ctl_cmd *cmd, int argc, char **argv);
int ctl_cmd_checkpoints_download(ctl *c, const ctl_cmd *cmd, int argc,
				 char **argv);
int ctl_cmd_gguf_export(ctl *c, const ctl_cmd *cmd, int argc, char **argv);
int ctl_cmd_gguf_list(ctl *c, const ctl_cmd *cmd, int argc, char **argv);
int ctl_cmd_gguf_rm(ctl *c, const ctl_cmd *cmd, int argc, char **argv);
int ctl_cmd_models(ctl *c, const ctl_cmd *cmd, int argc, char **argv);
int ctl_cmd_chat(ctl *c, const ctl_cmd *cmd, int argc, char **argv);
int ctl_cmd_device(ctl *c, const ctl_cmd *cmd, int argc, char **argv);

static const char list_help[] =
    "  --limit N                at most N rows (default: all, in pages)\n"
    "  --after ID               start after this id\n";

const ctl_cmd ctl_commands[] = {
    {"files", "upload", ctl_cmd_files_upload, "[--purpose P] FILE...",
     "upload data files; prints each file's id",
     "  --purpose P              the files' purpose (default fine-tune)\n"},
    {"files", "list", ctl_cmd_files_list, "[--limit N] [--after ID]",
     "list files: uploads and jobs' result files", list_help},
    {"files", "get", ctl_cmd_files_get, "[-o FILE] ID",
     "show a file, or download its content with -o",
     "  -o, --output FILE        write the content to FILE (- for standard "
     "output)\n"},
    {"files", "rm", ctl_cmd_files_rm, "ID...", "delete files", NULL},
    {"jobs", "create", ctl_cmd_jobs_create, "[OPTIONS] [JOB.json]",
     "create a fine-tuning job; prints its id", NULL},
    {"jobs", "list", ctl_cmd_jobs_list, "[--limit N] [--after ID]", "list jobs",
     list_help},
    {"jobs", "get", ctl_cmd_jobs_get, "JOB", "show a job", NULL},
    {"jobs", "cancel", ctl_cmd_jobs_cancel, "JOB...", "cancel jobs", NULL},
    {"jobs", "pause", ctl_cmd_jobs_pause, "JOB...",
     "pause jobs (a running one checkpoints first)", NULL},
    {"jobs", "resume", ctl_cmd_jobs_resume, "JOB...", "queue paused jobs again",
     NULL},
    {"jobs", "wait", ctl_cmd_jobs_wait, "[--timeout S] [--interval S] JOB",
     "wait until a job has finished; exit status 0 if it succeeded",
     "  --timeout S              give up after S seconds (exit status 1)\n"
     "  --interval S             seconds between polls (default 2)\n"},
    {"logs", NULL, ctl_cmd_logs, "[-f] [--limit N] JOB",
     "a job's events; -f follows them live with a progress line",
     "  -f, --follow             follow until the job has finished "
     "(exit status 0\n"
     "                           if it succeeded), reconnecting when the "
     "connection\n"
     "                           drops; on a terminal, progress is one "
     "line redrawn\n"
     "  --limit N                the newest N events (default 100, the "
     "server's\n"
     "                           page size; -f shows them all)\n"},
    {"plan", NULL, ctl_cmd_plan, "[OPTIONS] [JOB.json]",
     "the memory plan and data report of a job, without creating it; "
     "exit status 0 if tacod would accept it",
     NULL},
    {"checkpoints", "list", ctl_cmd_checkpoints_list, "JOB",
     "list a job's checkpoints", NULL},
    {"checkpoints", "download", ctl_cmd_checkpoints_download,
     "[-o DIR] JOB [CHECKPOINT|STEP]",
     "download a checkpoint, or the final model, as a Hugging Face model "
     "directory",
     "  -o, --output DIR         the directory to create (or an empty one);"
     "\n                           default: the checkpoint's name\n"},
    {"gguf", "export", ctl_cmd_gguf_export,
     "[--type T] [-o FILE] [--timeout S] [--no-download] JOB "
     "[CHECKPOINT|STEP]",
     "convert the final model, or a checkpoint, to GGUF for llama.cpp "
     "in tacod, then download it",
     "  --type T                 bf16, f16 or q8_0 (default q8_0)\n"
     "  -o, --output FILE        where to write it (- for standard "
     "output); default:\n"
     "                           the server's name in the current "
     "directory, the job\n"
     "                           id without ftjob- and model-T.gguf "
     "or\n"
     "                           step-NNNNNNNN-T.gguf\n"
     "  --timeout S              give up waiting after S seconds (exit "
     "status 1;\n"
     "                           the conversion goes on in tacod)\n"
     "  --no-download            convert only; print the file's name "
     "and size\n"},
    {"gguf", "list", ctl_cmd_gguf_list, "JOB",
     "list a job's GGUF files and conversions", NULL},
    {"gguf", "rm", ctl_cmd_gguf_rm, "JOB NAME...", "delete GGUF files of a job",
     NULL},
    {"models", NULL, ctl_cmd_models, "[list | get MODEL | rm MODEL...]",
     "list the base models and your fine-tuned models, show one (a "
     "checkpoint too), or delete fine-tuned models",
     "  list                     the base models and your fine-tuned "
     "models (default)\n"
     "  get MODEL                one model: a base, a fine-tuned model "
     "(ft:...) or a\n"
     "                           checkpoint (ft:...:ckpt-step-N)\n"
     "  rm MODEL...              delete fine-tuned models: their weights "
     "go, their\n"
     "                           names are refused from then on\n"},
    {"chat", NULL, ctl_cmd_chat, "[OPTIONS] MODEL [PROMPT]",
     "a model's answer to PROMPT, streamed; without PROMPT, a "
     "conversation: a line of input a message, an empty line ends",
     "  --system TEXT            a system message first\n"
     "  --max-tokens N           the answer's tokens at most (1 to 4096)\n"
     "  --temperature X          0 (greedy) to 2 (default 1)\n"
     "  --seed N                 the sampling's seed: the same answer "
     "again\n"},
    {"device", NULL, ctl_cmd_device, "",
     "the device, its memory and the jobs on it", NULL},
    {NULL, NULL, NULL, NULL, NULL, NULL},
};

static const char common_help[] =
    "  --url URL                tacod: http://HOST:PORT or unix:/PATH.sock "
    "(TACOD_URL)\n"
    "  --token TOKEN            bearer token (TACOD_TOKEN)\n"
    "  --json                   print the server's JSON unchanged\n"
    "  -h, --help               this help\n";

void ctl_help(const ctl_cmd *cmd, FILE *f)
{
	int jobspec = cmd && (cmd->run == ctl_cmd_jobs_create ||
			      cmd->run == ctl_cmd_plan);

	if (!cmd) {
		fprintf(f, "Usage: tacoctl [--url URL] [--token TOKEN] "
			   "[--json] COMMAND [ARGS]\n\n"
			   "Commands:\n");
		for (const ctl_cmd *c = ctl_commands; c->group; c++) {
			char name[64];
			snprintf(name, sizeof(name), "%s%s%s", c->group,
				 c->name ? " " : "", c->name ? c->name : "");
			fprintf(f, "  %-22s %s\n", name, c->summary);
		}
		fprintf(f,
			"\nCommon options (before or after the command):\n%s"
			"\nThe server and token come from --url/--token, "
			"else TACOD_URL/TACOD_TOKEN,\n"
			"else $XDG_CONFIG_HOME/tacoctl/config.json "
			"(~/.config/tacoctl/config.json):\n"
			"{\"url\": ..., \"token\": ...}; the URL defaults to "
			"%s.\n"
			"Exit status: 0 done, 1 failed (the reason on "
			"standard error), 2 bad usage.\n"
			"'tacoctl COMMAND --help' describes a command.\n",
			common_help, CTL_DEFAULT_URL);
		return;
	}
	fprintf(f, "Usage: tacoctl %s%s%s %s\n\n%c%s.\n", cmd->group,
		cmd->name ? " " : "", cmd->name ? cmd->name : "", cmd->args,
		toupper((unsigned char)cmd->summary[0]), cmd->summary + 1);
	if (cmd->run == ctl_cmd_jobs_create)
		fprintf(f, "--follow streams its progress until it ends (exit "
			   "status 1 if it failed\nor was cancelled).\n");
	if (cmd->help || jobspec) {
		fprintf(f, "\nOptions:\n");
		if (jobspec)
			fputs(ctl_jobspec_help, f);
		if (cmd->run == ctl_cmd_jobs_create)
			fputs("  --follow                 follow the job's "
			      "progress until it has finished\n",
			      f);
		if (cmd->help)
			fputs(cmd->help, f);
	}
	fprintf(f, "\nCommon options:\n%s", common_help);
}

/* "tacoctl jobs": the commands of a group. */
static void group_help(const char *group, FILE *f)
{
	fprintf(f, "Usage: tacoctl %s COMMAND [ARGS]\n\nCommands:\n", group);
	for (const ctl_cmd *c = ctl_commands; c->group; c++)
		if (!strcmp(c->group, group))
			fprintf(f, "  %-10s %s\n", c->name, c->summary);
	fprintf(f, "\n'tacoctl %s COMMAND --help' describes a command.\n",
		group);
}

static void ctl_on_signal(int sig)
{
	(void)sig;
	ctl_http_interrupted = 1;
}

static int dispatch(ctl *c, int argc, char **argv)
{
	const char *group = argv[0];
	const ctl_cmd *g = NULL;
	int asked = 0; /* "tacoctl help GROUP" */

	if (!strcmp(group, "help")) {
		if (argc == 1) {
			ctl_help(NULL, stdout);
			return CTL_OK;
		}
		argv++, argc--;
		group = argv[0];
		asked = 1;
		for (const ctl_cmd *cmd = ctl_commands; cmd->group; cmd++)
			if (!strcmp(cmd->group, group) &&
			    (!cmd->name ||
			     (argc > 1 && !strcmp(cmd->name, argv[1])))) {
				ctl_help(cmd, stdout);
				return CTL_OK;
			}
	}
	for (const ctl_cmd *cmd = ctl_commands; cmd->group && !g; cmd++)
		if (!strcmp(cmd->group, group))
			g = cmd;
	if (!g)
		return ctl_usage(NULL, "unknown command '%s'", group);
	if (!g->name)
		return g->run(c, g, argc, argv);
	if (asked || argc < 2 || !strcmp(argv[1], "--help") ||
	    !strcmp(argv[1], "-h")) {
		int usage = !asked && argc < 2;
		group_help(group, usage ? stderr : stdout);
		return usage ? CTL_USAGE : CTL_OK;
	}
	for (const ctl_cmd *cmd = g; cmd->group; cmd++)
		if (!strcmp(cmd->group, group) && !strcmp(cmd->name, argv[1]))
			return cmd->run(c, cmd, argc - 1, argv + 1);
	return ctl_usage(NULL, "unknown command '%s %s'", group, argv[1]);
}

int main(int argc, char **argv)
{
	static const struct option global[] = {
	    {"json", no_argument, NULL, CTL_OPT_JSON},
	    {"url", required_argument, NULL, CTL_OPT_URL},
	    {"token", required_argument, NULL, CTL_OPT_TOKEN},
	    {"help", no_argument, NULL, CTL_OPT_HELP},
	    {0},
	};
	struct sigaction sa;
	ctl c = {0};
	int id, rc;

	/* the first signal stops transfers cleanly (a download removes its
	 * partial files); a second one ends the process at once */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = ctl_on_signal;
	sa.sa_flags = SA_RESETHAND;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	opterr = 0;
	/* '+': stop at the command; its own options are read by it */
	while ((id = getopt_long(argc, argv, "+:h", global, NULL)) != -1) {
		switch (id) {
		case CTL_OPT_JSON:
			c.json = 1;
			break;
		case CTL_OPT_URL:
			c.url_flag = optarg;
			break;
		case CTL_OPT_TOKEN:
			c.token_flag = optarg;
			break;
		case 'h':
		case CTL_OPT_HELP:
			ctl_help(NULL, stdout);
			return CTL_OK;
		case ':':
			return ctl_usage(NULL, "option '%s' needs a value",
					 argv[optind - 1]);
		default:
			return ctl_usage(NULL, "unknown option '%s'",
					 argv[optind - 1]);
		}
	}
	if (optind == argc) {
		ctl_help(NULL, stderr);
		return CTL_USAGE;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT))
		return ctl_fail("cannot initialise libcurl");
	rc = dispatch(&c, argc - optind, argv + optind);
	ctl_disconnect(&c);
	curl_global_cleanup();
	fflush(stdout);
	if (ctl_http_interrupted && rc == CTL_FAIL)
		return 128 + SIGINT;
	return rc;
}
