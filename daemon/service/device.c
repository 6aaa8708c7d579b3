/* service/device.c: GET /v1/device and GET /metrics (Prometheus text
 * exposition format 0.0.4). Both read the running set under the lock and
 * the job counts from the store; neither touches a worker. */
#include <dirent.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/service/internal.h"
#include "daemon/webhooks/delivery.h"
#include "plan/plan.h"

static char device_name[160];
static pthread_once_t device_once = PTHREAD_ONCE_INIT;

/* The first "key: value" line of a /proc text file starting with key. */
static int proc_field(const char *path, const char *key, char *out, size_t cap)
{
	FILE *f = fopen(path, "re");
	char line[512];
	size_t k = strlen(key);
	int found = 0;

	while (f && !found && fgets(line, sizeof(line), f)) {
		char *v = strchr(line, ':');
		if (strncmp(line, key, k) || !v)
			continue;
		v++;
		v += strspn(v, " \t");
		v[strcspn(v, "\n")] = 0;
		snprintf(out, cap, "%s", v);
		found = 1;
	}
	if (f)
		fclose(f);
	return found;
}

/* The CPU model, or the first NVIDIA GPU's as its driver names it: tacod
 * itself never opens the device (its workers do). */
static void find_device_name(void)
{
	DIR *d = opendir("/proc/driver/nvidia/gpus");
	struct dirent *e;
	char path[512];

	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path),
			 "/proc/driver/nvidia/gpus/%.200s/information",
			 e->d_name);
		if (proc_field(path, "Model", device_name, sizeof(device_name)))
			break;
	}
	if (d)
		closedir(d);
	if (!device_name[0] && !proc_field("/proc/cpuinfo", "model name",
					   device_name, sizeof(device_name)))
		snprintf(device_name, sizeof(device_name), "unknown");
}

typedef struct snapshot {
	int n;
	struct {
		char id[TACOD_ID_MAX];
		uint64_t planned, peak;
		double tokens_per_s;
		uint32_t devices;
	} run[TACOD_MAX_RUNNING];
	/* the devices jobs run on (tacod_config_device_list) */
	int n_dev;
	tacod_device_config dev[TACOD_MAX_DEVICES];
	uint64_t dev_planned[TACOD_MAX_DEVICES], dev_used[TACOD_MAX_DEVICES];
	int dev_jobs[TACOD_MAX_DEVICES];
	uint64_t total;
	uint64_t planned, used;
	int64_t counts[TACOD_CANCELLED + 1];
} snapshot;

static int take(tacod_service *s, snapshot *sn, taco_err *err)
{
	int rc;

	memset(sn, 0, sizeof(*sn));
	pthread_mutex_lock(&s->lock);
	for (int i = 0; i < s->runs.n; i++) {
		tacod_run *rj = s->runs.run[i];
		snprintf(sn->run[i].id, sizeof(sn->run[i].id), "%s", rj->id);
		sn->run[i].planned = rj->planned;
		sn->run[i].peak = rj->peak;
		sn->run[i].tokens_per_s = rj->tokens_per_s;
		/* a Slurm job's GPU is Slurm's: the one device entry */
		sn->run[i].devices = rj->devices ? rj->devices : 1;
		for (int d = 0; d < TACOD_MAX_DEVICES; d++)
			if (sn->run[i].devices & (1u << d)) {
				sn->dev_planned[d] += rj->planned;
				sn->dev_used[d] += rj->peak;
				sn->dev_jobs[d]++;
				sn->planned += rj->planned;
				sn->used += rj->peak;
			}
	}
	sn->n = s->runs.n;
	sn->n_dev = tacod_config_device_list(&s->cfg, sn->dev);
	if (!s->cfg.n_devices)
		sn->dev[0].memory = s->cfg.device_memory; /* Slurm's too */
	for (int d = 0; d < sn->n_dev; d++)
		sn->total += sn->dev[d].memory;
	rc = tacod_store_job_count(s->store, NULL, sn->counts, err);
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/* A device's label in /metrics: its CUDA number, or its place. */
static int label(const snapshot *sn, int d)
{
	return sn->dev[d].index >= 0 ? sn->dev[d].index : d;
}

int tacod_route_device(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	taco_err err = {{0}};
	snapshot *sn = malloc(sizeof(*sn));
	json_t *run, *devs, *o;
	int rc;

	if (!sn)
		return tacod_http_error(r, 500, "server_error", NULL, NULL,
					"out of memory");
	pthread_once(&device_once, find_device_name);
	if ((rc = take(s, sn, &err))) {
		free(sn);
		return tacod_route_store_error(r, rc, &err, "job");
	}
	run = json_array();
	devs = json_array();
	for (int d = 0; d < sn->n_dev; d++)
		json_array_append_new(
		    devs,
		    json_pack("{so so sI sI sI s[]}", "index",
			      sn->dev[d].index < 0
				  ? json_null()
				  : json_integer(sn->dev[d].index),
			      "name",
			      sn->dev[d].name[0] ? json_string(sn->dev[d].name)
						 : json_null(),
			      "memory_total", (json_int_t)sn->dev[d].memory,
			      "memory_planned", (json_int_t)sn->dev_planned[d],
			      "memory_used", (json_int_t)sn->dev_used[d],
			      "running_jobs"));
	for (int i = 0; i < sn->n; i++) {
		json_t *on = json_array();
		for (int d = 0; d < sn->n_dev; d++)
			if (sn->run[i].devices & (1u << d)) {
				json_array_append_new(
				    json_object_get(json_array_get(devs, d),
						    "running_jobs"),
				    json_string(sn->run[i].id));
				json_array_append_new(
				    on, sn->dev[d].index < 0
					    ? json_null()
					    : json_integer(sn->dev[d].index));
			}
		json_array_append_new(
		    run, json_pack("{ss sI sI sf so}", "id", sn->run[i].id,
				   "planned_bytes",
				   (json_int_t)sn->run[i].planned, "peak_bytes",
				   (json_int_t)sn->run[i].peak, "tokens_per_s",
				   sn->run[i].tokens_per_s, "devices", on));
	}
	o = json_pack(
	    "{ss ss ss sI sI sI so sI sI so}", "object", "device", "backend",
	    s->cfg.backend == TACO_BACKEND_CPU ? "cpu" : "cuda", "name",
	    device_name, "memory_total", (json_int_t)sn->total,
	    "memory_planned", (json_int_t)sn->planned, "memory_used",
	    (json_int_t)sn->used, "running_jobs", run, "queued_jobs",
	    (json_int_t)sn->counts[TACOD_QUEUED], "paused_jobs",
	    (json_int_t)sn->counts[TACOD_PAUSED], "devices", devs);
	free(sn);
	return tacod_http_reply_json(r, 200, o);
}

/* A growing text buffer; on allocation failure it stops growing and the
 * reply becomes a 500. */
typedef struct text {
	char *p;
	size_t len, cap;
	int failed;
} text;

static void metrics_put(text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void metrics_put(text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (int tries = 0; !t->failed && tries < 2; tries++) {
		size_t room = t->cap - t->len;
		va_start(ap, fmt);
		n = vsnprintf(t->p ? t->p + t->len : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0) {
			t->failed = 1;
		} else if ((size_t)n < room) {
			t->len += (size_t)n;
			return;
		} else {
			size_t cap = (t->cap + (size_t)n + 1) * 2;
			char *p = realloc(t->p, cap);
			if (!p)
				t->failed = 1;
			t->p = p ? p : t->p;
			t->cap = p ? cap : t->cap;
		}
	}
}

int tacod_route_metrics(tacod_http_req *r, void *ctx)
{
	tacod_service *s = ctx;
	taco_err err = {{0}};
	snapshot *sn = malloc(sizeof(*sn));
	tacod_http_stats *hs = malloc(sizeof(*hs));
	text t = {0};
	int rc;

	if (!sn || !hs || (rc = take(s, sn, &err))) {
		free(sn);
		free(hs);
		return tacod_http_error(r, 500, "server_error", NULL, NULL,
					"%s",
					err.msg[0] ? err.msg : "out of memory");
	}
	metrics_put(&t, "# HELP tacod_jobs Jobs by status.\n"
			"# TYPE tacod_jobs gauge\n");
	for (int st = 0; st <= TACOD_CANCELLED; st++)
		metrics_put(&t, "tacod_jobs{status=\"%s\"} %lld\n",
			    tacod_status_name(st), (long long)sn->counts[st]);
	metrics_put(
	    &t,
	    "# HELP tacod_queue_depth Jobs waiting to run.\n"
	    "# TYPE tacod_queue_depth gauge\n"
	    "tacod_queue_depth %lld\n"
	    "# HELP tacod_device_memory_bytes Memory the plans of running "
	    "jobs must fit in.\n"
	    "# TYPE tacod_device_memory_bytes gauge\n"
	    "tacod_device_memory_bytes %llu\n"
	    "# HELP tacod_planned_memory_bytes Sum of the running jobs' "
	    "memory plans.\n"
	    "# TYPE tacod_planned_memory_bytes gauge\n"
	    "tacod_planned_memory_bytes %llu\n",
	    (long long)sn->counts[TACOD_QUEUED], (unsigned long long)sn->total,
	    (unsigned long long)sn->planned);
	metrics_put(&t, "# HELP tacod_gpu_memory_bytes One device's memory, "
			"which the plans of its jobs must fit in.\n"
			"# TYPE tacod_gpu_memory_bytes gauge\n");
	for (int d = 0; d < sn->n_dev; d++)
		metrics_put(&t, "tacod_gpu_memory_bytes{device=\"%d\"} %llu\n",
			    label(sn, d),
			    (unsigned long long)sn->dev[d].memory);
	metrics_put(&t, "# HELP tacod_gpu_planned_bytes Sum of the memory "
			"plans of one device's running jobs.\n"
			"# TYPE tacod_gpu_planned_bytes gauge\n");
	for (int d = 0; d < sn->n_dev; d++)
		metrics_put(&t, "tacod_gpu_planned_bytes{device=\"%d\"} %llu\n",
			    label(sn, d),
			    (unsigned long long)sn->dev_planned[d]);
	metrics_put(&t, "# HELP tacod_gpu_jobs Jobs running on one device.\n"
			"# TYPE tacod_gpu_jobs gauge\n");
	for (int d = 0; d < sn->n_dev; d++)
		metrics_put(&t, "tacod_gpu_jobs{device=\"%d\"} %d\n",
			    label(sn, d), sn->dev_jobs[d]);
	metrics_put(
	    &t, "# HELP tacod_job_planned_bytes A running job's memory plan.\n"
		"# TYPE tacod_job_planned_bytes gauge\n");
	for (int i = 0; i < sn->n; i++)
		metrics_put(&t, "tacod_job_planned_bytes{job=\"%s\"} %llu\n",
			    sn->run[i].id,
			    (unsigned long long)sn->run[i].planned);
	metrics_put(&t,
		    "# HELP tacod_job_peak_bytes A running job's measured peak "
		    "memory.\n"
		    "# TYPE tacod_job_peak_bytes gauge\n");
	for (int i = 0; i < sn->n; i++)
		metrics_put(&t, "tacod_job_peak_bytes{job=\"%s\"} %llu\n",
			    sn->run[i].id, (unsigned long long)sn->run[i].peak);
	metrics_put(&t, "# HELP tacod_job_tokens_per_second A running job's "
			"training throughput.\n"
			"# TYPE tacod_job_tokens_per_second gauge\n");
	for (int i = 0; i < sn->n; i++)
		metrics_put(&t,
			    "tacod_job_tokens_per_second{job=\"%s\"} %.3f\n",
			    sn->run[i].id, sn->run[i].tokens_per_s);
	tacod_http_get_stats(s->http, hs);
	metrics_put(&t,
		    "# HELP tacod_http_requests_total HTTP replies by status "
		    "code.\n"
		    "# TYPE tacod_http_requests_total counter\n");
	for (int c = 100; c < TACOD_HTTP_STATUS_MAX; c++)
		if (hs->by_status[c])
			metrics_put(
			    &t, "tacod_http_requests_total{code=\"%d\"} %llu\n",
			    c, (unsigned long long)hs->by_status[c]);
	metrics_put(
	    &t,
	    "# HELP tacod_http_streams_open Event streams open now.\n"
	    "# TYPE tacod_http_streams_open gauge\n"
	    "tacod_http_streams_open %llu\n"
	    "# HELP tacod_http_streams_dropped_total Event streams dropped "
	    "because their client fell behind.\n"
	    "# TYPE tacod_http_streams_dropped_total counter\n"
	    "tacod_http_streams_dropped_total %llu\n",
	    (unsigned long long)hs->streams_open,
	    (unsigned long long)hs->streams_dropped);
	{
		char *hooks = tacod_webhooks_metrics(s->hooks);
		if (hooks)
			metrics_put(&t, "%s", hooks);
		else
			t.failed = 1;
		free(hooks);
	}
	free(sn);
	free(hs);
	if (t.failed) {
		free(t.p);
		return tacod_http_error(r, 500, "server_error", NULL, NULL,
					"out of memory");
	}
	rc = tacod_http_reply_data(
	    r, 200, "text/plain; version=0.0.4; charset=utf-8", t.p, t.len);
	free(t.p);
	return rc;
}
