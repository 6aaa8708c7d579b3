/* tacod: the fine-tuning daemon. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/config/config.h"
#include "daemon/notify.h"
#include "daemon/runner/discover.h"
#include "daemon/service/service.h"
#include "util/runtime.h"

static tacod_service *svc;
static uv_signal_t sig_term, sig_int, sig_hup;

/* ---- systemd (docs/tacod.md, "Running under systemd") ----------------- */

/* One timer tells the manager how tacod is doing: WATCHDOG=1 when asked
 * for, the job counts, and while draining EXTEND_TIMEOUT_USEC so that a
 * checkpoint longer than TimeoutStopSec= is not killed half written. The
 * extension outlasts several periods, so one late tick costs nothing. */
#define NOTIFY_PERIOD_MAX_MS 10000
#define DRAIN_EXTEND_USEC (30ull * 1000 * 1000)

static uv_timer_t notify_timer;
static int notify_armed, notify_failed;
static uint64_t watchdog_usec;
static char listening[1024]; /* "listening on ..." */

static void notify(const char *state)
{
	int r = tacod_notify(state);

	if (r && !notify_failed) { /* once: it would repeat every tick */
		notify_failed = 1;
		fprintf(stderr,
			"tacod: cannot notify the service manager: %s\n",
			strerror(-r));
	}
}

/* READY=1 when ready is set, WATCHDOG=1 when the manager watches,
 * EXTEND_TIMEOUT_USEC while jobs drain, and a STATUS line with the counts. */
static void notify_state(int ready)
{
	const char *r = ready ? "READY=1\n" : "";
	const char *wd = watchdog_usec ? "WATCHDOG=1\n" : "";
	tacod_service_stats st;
	char msg[TACOD_NOTIFY_MAX];

	/* the timer firing proves the loop turns; the counts, that the store
	 * answers: the watchdog is fed only when both hold */
	if (tacod_service_stats_get(svc, &st))
		snprintf(msg, sizeof(msg),
			 "%sSTATUS=the job store does not answer", r);
	else if (st.draining && st.running)
		snprintf(msg, sizeof(msg),
			 "%sEXTEND_TIMEOUT_USEC=%llu\nSTATUS=stopping: %d "
			 "running jobs checkpoint first",
			 wd, DRAIN_EXTEND_USEC, st.running);
	else if (st.draining)
		snprintf(msg, sizeof(msg), "%sSTATUS=stopping", wd);
	else
		snprintf(msg, sizeof(msg),
			 "%s%sSTATUS=%s; %d running, %lld queued", r, wd,
			 listening, st.running, st.queued);
	notify(msg);
}

static void on_notify_timer(uv_timer_t *t)
{
	(void)t;
	notify_state(0);
}

/* READY=1 once the HTTP server listens (tacod_service_start returned), and
 * the timer; nothing at all when no manager listens. */
static void notify_start(uv_loop_t *loop, const tacod_config *cfg)
{
	const char *ns = getenv("NOTIFY_SOCKET");
	uint64_t period_ms = NOTIFY_PERIOD_MAX_MS;

	/* cut: a status line needs no 4 KiB socket path */
	snprintf(listening, sizeof(listening), "listening on %.255s%s%.700s",
		 cfg->listen,
		 cfg->listen[0] && cfg->unix_socket[0] ? " and " : "",
		 cfg->unix_socket);
	if (!ns || !ns[0])
		return;
	if (tacod_notify_watchdog_usec(&watchdog_usec))
		fprintf(stderr, "tacod: WATCHDOG_USEC or WATCHDOG_PID is not "
				"a number: no watchdog\n");
	/* half the interval, as sd_watchdog_enabled(3) advises */
	if (watchdog_usec && watchdog_usec / 2000 < period_ms)
		period_ms = watchdog_usec / 2000 ? watchdog_usec / 2000 : 1;
	notify_state(1);
	uv_timer_init(loop, &notify_timer);
	uv_timer_start(&notify_timer, on_notify_timer, period_ms, period_ms);
	/* the drain ends when the service's own handles close, not ours */
	uv_unref((uv_handle_t *)&notify_timer);
	notify_armed = 1;
}

static void tacod_usage(FILE *f)
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
		   "when tacod starts again), exit. SIGHUP: read the tokens "
		   "file again.\n");
}

/* SIGHUP: the tokens file again; a broken one leaves the old tokens. */
static void on_hup(uv_signal_t *h, int signum)
{
	taco_err err = {{0}};
	int r;

	(void)signum;
	if (notify_armed)
		notify("RELOADING=1");
	r = tacod_service_reload(h->data, &err);
	if (notify_armed)
		notify("READY=1");
	if (r)
		fprintf(stderr, "tacod: reload failed, old tokens kept: %s\n",
			err.msg);
	else
		fprintf(stderr, "tacod: reloaded the tokens file\n");
}

static void tacod_on_signal(uv_signal_t *h, int signum)
{
	(void)signum;
	uv_signal_stop(&sig_term);
	uv_signal_stop(&sig_int);
	uv_signal_stop(&sig_hup);
	uv_close((uv_handle_t *)&sig_term, NULL);
	uv_close((uv_handle_t *)&sig_int, NULL);
	uv_close((uv_handle_t *)&sig_hup, NULL);
	fprintf(stderr, "tacod: stopping: running jobs checkpoint first\n");
	if (notify_armed)
		notify("STOPPING=1");
	tacod_service_shutdown(h->data);
	/* the first EXTEND_TIMEOUT_USEC now, not a period later */
	if (notify_armed)
		notify_state(0);
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
			tacod_usage(stdout);
			return 0;
		default:
			tacod_usage(stderr);
			return 2;
		}
	}
	if (bad || optind != argc) {
		tacod_usage(stderr);
		return 2;
	}
	if (tacod_config_check(&cfg, &err)) {
		fprintf(stderr, "tacod: %s\n", err.msg);
		return 2;
	}
	/* "devices": "auto": the GPUs from taco-train --list-devices, once
	 * at start (a GPU added later needs a restart, as a changed list
	 * does) */
	if (tacod_devices_discover(&cfg, TACOD_DISCOVER_TIMEOUT_MS, &err)) {
		fprintf(stderr, "tacod: %s\n", err.msg);
		return 2;
	}
	for (int i = 0; cfg.devices_auto && i < cfg.n_devices; i++)
		fprintf(stderr,
			"tacod: devices \"auto\": GPU %d, %s, %.1f GB\n",
			cfg.devices[i].index, cfg.devices[i].name,
			(double)cfg.devices[i].memory / 1e9);
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
	uv_signal_init(loop, &sig_hup);
	sig_term.data = sig_int.data = sig_hup.data = svc;
	uv_signal_start(&sig_term, tacod_on_signal, SIGTERM);
	uv_signal_start(&sig_int, tacod_on_signal, SIGINT);
	uv_signal_start(&sig_hup, on_hup, SIGHUP);
	notify_start(loop, &cfg);
	uv_run(loop, UV_RUN_DEFAULT);
	if (notify_armed) { /* unreferenced: still open when uv_run returns */
		uv_close((uv_handle_t *)&notify_timer, NULL);
		uv_run(loop, UV_RUN_DEFAULT);
	}
	tacod_service_free(svc);
	uv_loop_close(loop);
	return 0;
}
