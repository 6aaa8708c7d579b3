/* service/assess.c: what a job needs and whether its data is usable: the
 * memory plan (config and safetensors headers: fast, on the request
 * thread) and the data's validation (tokenizing every line: slow, on the
 * validation thread of service/validate.c, or on the request thread for
 * a plan whose data is at most limits.max_sync_validate_bytes). Both work
 * from the job the request was parsed into; neither touches the store: no
 * lock is needed. Every message names the client's files as the request
 * did (file ids), never by the server's paths. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon/service/internal.h"
#include "data/job_data.h"
#include "job/job.h"
#include "util/text.h"

static void problem(tacod_assessment *a, const char *code, const char *param,
		    const char *msg)
{
	if (a->code[0])
		return;
	snprintf(a->code, sizeof(a->code), "%s", code);
	snprintf(a->param, sizeof(a->param), "%s", param ? param : "");
	taco_text_copy(a->msg, sizeof(a->msg), msg);
}

/* Replaces every occurrence of from in msg by to (in place, truncating at
 * cap). */
static void assess_replace_all(char *msg, size_t cap, const char *from,
			       const char *to)
{
	size_t nf = strlen(from), nt = strlen(to);
	char *at = msg, *hit;

	if (!nf)
		return;
	while ((hit = strstr(at, from))) {
		size_t tail = strlen(hit + nf);
		size_t keep = (size_t)(hit - msg) + nt;

		if (keep >= cap)
			break;
		if (keep + tail >= cap)
			tail = cap - keep - 1;
		memmove(hit + nt, hit + nf, tail);
		hit[nt + tail] = 0;
		memcpy(hit, to, nt);
		at = hit + nt;
	}
}

/* The engine names files by their paths; a client knows them by the
 * request's names (file ids, the model's name), and the server's
 * directories are none of its business. Longest paths first: a data file
 * lives under the state directory. */
static void name_paths(const tacod_service *s, const taco_job *job, json_t *req,
		       char *msg, size_t cap)
{
	const char *model = json_string_value(json_object_get(req, "model"));
	const char *train =
	    json_string_value(json_object_get(req, "training_file"));
	const char *val =
	    json_string_value(json_object_get(req, "validation_file"));

	if (job) {
		assess_replace_all(msg, cap, job->train, train ? train : "");
		if (job->validation[0])
			assess_replace_all(msg, cap, job->validation,
					   val ? val : "");
		assess_replace_all(msg, cap, job->model, model ? model : "");
	}
	assess_replace_all(msg, cap, s->jobs_dir, "<job>");
	assess_replace_all(msg, cap, s->cfg.state_dir, "<state>");
	assess_replace_all(msg, cap, s->cfg.models_dir, "<models>");
}

/* The report names the file as the client did, and so do its summary and
 * every problem's detail. */
static void name_report(const tacod_service *s, const taco_job *job,
			json_t *req, json_t *report)
{
	json_t *probs = json_object_get(report, "problems"), *p;
	char detail[1024];
	size_t i;

	if (json_object_get(report, "file"))
		json_object_set(report, "file",
				json_object_get(req, "training_file"));
	if (json_string_value(json_object_get(report, "summary"))) {
		taco_text_copy(
		    detail, sizeof(detail),
		    json_string_value(json_object_get(report, "summary")));
		name_paths(s, job, req, detail, sizeof(detail));
		json_object_set_new(report, "summary", json_string(detail));
	}
	json_array_foreach(probs, i, p)
	{
		const char *d = json_string_value(json_object_get(p, "detail"));
		if (!d)
			continue;
		taco_text_copy(detail, sizeof(detail), d);
		name_paths(s, job, req, detail, sizeof(detail));
		json_object_set_new(p, "detail", json_string(detail));
	}
}

static uint64_t file_bytes(const char *path)
{
	struct stat st;

	return path[0] && !stat(path, &st) ? (uint64_t)st.st_size : 0;
}

/* A job of gpus N runs on N devices at once, each holding its plan: a
 * tacod with fewer such devices could never start it. Slurm's nodes are
 * Slurm's to count. */
static void gpus_fit(tacod_service *s, const taco_job *job, tacod_assessment *a)
{
	tacod_device_config d[TACOD_MAX_DEVICES];
	int n, fit = 0;
	char msg[256];

	if (job->gpus < 2 || s->cfg.scheduler == TACOD_SCHED_SLURM)
		return;
	n = tacod_config_device_list(&s->cfg, d);
	for (int i = 0; i < n; i++)
		fit += d[i].memory >= a->plan.total;
	if (fit >= job->gpus)
		return;
	a->fits = 0;
	snprintf(msg, sizeof(msg),
		 "taco.gpus %d: this tacod has %d device%s that hold%s the "
		 "plan of one GPU's slice (tacod.json devices)",
		 job->gpus, fit, fit == 1 ? "" : "s", fit == 1 ? "s" : "");
	problem(a, "insufficient_gpus", "taco.gpus", msg);
}

void tacod_assess(tacod_service *s, const taco_job *job, json_t *req, int what,
		  uint64_t data_limit, tacod_assessment *a)
{
	taco_job_data data;
	taco_err err = {{0}};
	int rc;

	memset(a, 0, sizeof(*a));
	/* freed below whether or not it was loaded */
	memset(&data, 0, sizeof(data));
	a->data_bytes = file_bytes(job->train) + file_bytes(job->validation) +
			file_bytes(job->eval_multiple_choice);
	if (what & TACOD_ASSESS_PLAN) {
		rc = taco_plan_admit(job, s->cfg.backend, s->cfg.device_memory,
				     &a->plan, &a->advice, &err);
		if (rc == 0 || rc == -ENOSPC) {
			a->planned = 1;
			a->fits = rc == 0;
			if (rc)
				problem(a, "insufficient_memory", NULL,
					err.msg);
			else
				gpus_fit(s, job, a);
		} else {
			problem(a, "invalid_model", "model", err.msg);
		}
	}
	if ((what & TACOD_ASSESS_DATA) && a->data_bytes <= data_limit) {
		a->validated = 1;
		rc = taco_job_data_check(job, &data, &err);
		if (data.have_reports) {
			a->report = taco_dataset_report_json(&data.train_report,
							     job->train);
			name_report(s, job, req, a->report);
		}
		if (rc)
			problem(a, "invalid_training_file", "training_file",
				err.msg);
	}
	name_paths(s, job, req, a->msg, sizeof(a->msg));
	taco_job_data_free(&data);
}

void tacod_assess_file(tacod_service *s, const char *path, json_t *req,
		       int what, uint64_t data_limit, tacod_assessment *a)
{
	taco_job_problems probs;
	taco_job job;

	if (taco_job_load(path, &job, &probs)) {
		memset(a, 0, sizeof(*a));
		problem(a, "invalid_option", NULL, probs.msg[0]);
		name_paths(s, NULL, req, a->msg, sizeof(a->msg));
	} else {
		tacod_assess(s, &job, req, what, data_limit, a);
	}
	taco_job_free(&job);
}

void tacod_name_job_paths(const tacod_service *s, const char *job_id, char *msg,
			  size_t cap)
{
	char dir[sizeof(s->jobs_dir) + TACOD_ID_MAX + 1];

	snprintf(dir, sizeof(dir), "%s/%s", s->jobs_dir, job_id);
	assess_replace_all(msg, cap, dir, "<job>");
	name_paths(s, NULL, NULL, msg, cap);
}
