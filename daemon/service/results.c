/* service/results.c: a job's result file. When a job ends after steps, its
 * step metrics (the metrics events in the store, so a restart loses none)
 * become one CSV, stored by content hash as the uploads are: a File of
 * purpose fine-tune-results owned by the job's owner, named in the job's
 * result_file. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/http/auth.h"
#include "daemon/service/internal.h"
#include "util/fsutil.h"

#define RESULTS_FILENAME "step_metrics.csv"

/* The columns after `step`: OpenAI's first, then tacod's, each read from
 * a key of a training step's metrics event (service.c) or of an
 * evaluation's (taco-train's eval event: the whole validation set, so the
 * full_valid_ columns are the same numbers). */
typedef struct column {
	const char *name;
	int eval;
	const char *key;
} column;

static const column columns[] = {
    {"train_loss", 0, "train_loss"},
    {"train_accuracy", 0, "train_mean_token_accuracy"},
    {"valid_loss", 1, "val_loss"},
    {"valid_mean_token_accuracy", 1, "val_token_accuracy"},
    {"full_valid_loss", 1, "val_loss"},
    {"full_valid_mean_token_accuracy", 1, "val_token_accuracy"},
    {"learning_rate", 0, "learning_rate"},
    {"tokens_per_s", 0, "tokens_per_s"},
    {"tokens", 0, "tokens"},
    {"mem_peak_bytes", 0, "mem_peak_bytes"},
    {"valid_exact_match", 1, "val_exact_match"},
};

#define N_COLUMNS (sizeof(columns) / sizeof(columns[0]))

/* The CSV being written, hashed as it goes: the step whose row is being
 * gathered, with its newest training metrics and evaluation (by seq: a
 * step run again after a resume is its newest run's). */
typedef struct csv {
	int fd;
	tacod_auth_sha256 sha;
	int64_t bytes, rows;
	int64_t step;
	json_t *train, *eval; /* of step; NULL: none */
} csv;

static int put(csv *c, const char *text, size_t n)
{
	tacod_auth_sha256_update(&c->sha, text, n);
	c->bytes += (int64_t)n;
	while (n) {
		ssize_t w = write(c->fd, text, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		text += w;
		n -= (size_t)w;
	}
	return 0;
}

/* A number as the shortest text that reads back as the same double (at
 * most %.17g's digits), an integer as it is; "" for anything else. */
static void cell(json_t *v, char *out, size_t cap)
{
	out[0] = 0;
	if (json_is_integer(v)) {
		snprintf(out, cap, "%lld", (long long)json_integer_value(v));
	} else if (json_is_real(v)) {
		double d = json_real_value(v);
		for (int digits = 1; digits <= 17; digits++) {
			snprintf(out, cap, "%.*g", digits, d);
			if (strtod(out, NULL) == d)
				break;
		}
	}
}

static int put_header(csv *c)
{
	char line[512] = "step";
	size_t n = strlen(line);

	for (size_t i = 0; i < N_COLUMNS; i++)
		n += (size_t)snprintf(line + n, sizeof(line) - n, ",%s",
				      columns[i].name);
	line[n++] = '\n';
	return put(c, line, n);
}

/* Writes the row of the step gathered so far, if it has any metrics. */
static int put_row(csv *c)
{
	/* 12 cells of at most 24 characters each */
	char line[512], v[32];
	size_t n;

	if (!c->train && !c->eval)
		return 0;
	n = (size_t)snprintf(line, sizeof(line), "%lld", (long long)c->step);
	for (size_t i = 0; i < N_COLUMNS; i++) {
		json_t *src = columns[i].eval ? c->eval : c->train;
		cell(json_object_get(src, columns[i].key), v, sizeof(v));
		n += (size_t)snprintf(line + n, sizeof(line) - n, ",%s", v);
	}
	line[n++] = '\n';
	json_decref(c->train);
	json_decref(c->eval);
	c->train = c->eval = NULL;
	c->rows++;
	return put(c, line, n);
}

/* One metrics event, in step order: a training step's (it has train_loss)
 * or an evaluation of the validation set (val_loss); an evaluation of only
 * a multiple-choice set has nothing for the CSV. */
static int add_event(void *ctx, int64_t step, const char *data)
{
	csv *c = ctx;
	json_t *d = data ? json_loads(data, 0, NULL) : NULL;
	json_t **slot = NULL;
	int rc = 0;

	if (step != c->step) {
		rc = put_row(c);
		c->step = step;
	}
	if (json_is_number(json_object_get(d, "train_loss")))
		slot = &c->train;
	else if (json_is_number(json_object_get(d, "val_loss")))
		slot = &c->eval;
	if (slot) {
		json_decref(*slot);
		*slot = d;
	} else {
		json_decref(d);
	}
	return rc;
}

/* The CSV of job id into the new file tmp (a template, filled here): 0
 * with c's rows, bytes and hash, or a negative errno (err set when the
 * store failed). */
static int write_csv(tacod_service *s, const char *id, char *tmp, csv *c,
		     taco_err *err)
{
	int rc;

	c->fd = mkostemp(tmp, O_CLOEXEC);
	if (c->fd < 0)
		return taco_err_set(err, -errno, "cannot create %s: %s", tmp,
				    strerror(errno));
	tacod_auth_sha256_init(&c->sha);
	rc = put_header(c);
	if (!rc)
		rc = tacod_store_event_metrics_each(s->store, id, add_event, c,
						    err);
	if (!rc)
		rc = put_row(c);
	json_decref(c->train);
	json_decref(c->eval);
	if (!rc && fsync(c->fd))
		rc = -errno;
	if (close(c->fd) && !rc)
		rc = -errno;
	if (rc && !err->msg[0])
		taco_err_set(err, rc, "cannot write %s: %s", tmp,
			     strerror(-rc));
	return rc;
}

/* The CSV's bytes under their hash in files_dir, as an upload's are (the
 * same bytes are kept once); tmp is gone either way. */
static int keep_bytes(tacod_service *s, const char *tmp, const char *dest,
		      taco_err *err)
{
	struct stat st;

	if (stat(dest, &st) == 0) {
		unlink(tmp);
		return 0;
	}
	if (rename(tmp, dest)) {
		int e = errno;
		unlink(tmp);
		return taco_err_set(err, -e, "cannot rename %s to %s: %s", tmp,
				    dest, strerror(e));
	}
	return taco_fsync_dir(s->files_dir, err);
}

/* The file's row and the job's result_file, together. */
static int add_file(tacod_service *s, const tacod_file *f, const char *job,
		    taco_err *err)
{
	int rc = tacod_store_tx_begin(s->store, err);

	if (rc)
		return rc;
	rc = tacod_store_file_add(s->store, f, err);
	if (!rc)
		rc = tacod_store_job_set_result_file(s->store, job, f->id, err);
	return tacod_store_tx_end(s->store, rc, err);
}

void tacod_results_attach(tacod_service *s, tacod_job *j)
{
	char tmp[TACOD_PATH_MAX + 32], msg[256];
	uint8_t digest[32];
	csv c = {.fd = -1, .step = INT64_MIN};
	tacod_file f = {0};
	taco_err err = {{0}};
	int rc, n;

	if (j->result_file[0])
		return;
	snprintf(tmp, sizeof(tmp), "%s/.results-XXXXXX", s->upload_dir);
	rc = write_csv(s, j->id, tmp, &c, &err);
	if (rc || !c.rows) {
		unlink(tmp);
		if (rc)
			goto fail;
		return; /* no step: no result file */
	}
	tacod_auth_sha256_final(&c.sha, digest);
	tacod_auth_hex(digest, f.sha256);
	n = snprintf(f.path, sizeof(f.path), "%s/%s", s->files_dir, f.sha256);
	if (n < 0 || (size_t)n >= sizeof(f.path)) {
		unlink(tmp);
		rc = taco_err_set(&err, -ENAMETOOLONG, "state_dir is too long");
		goto fail;
	}
	tacod_new_id("file-", f.id);
	snprintf(f.user, sizeof(f.user), "%s", j->user);
	snprintf(f.filename, sizeof(f.filename), "%s", RESULTS_FILENAME);
	snprintf(f.purpose, sizeof(f.purpose), "%s", TACOD_PURPOSE_RESULTS);
	f.bytes = c.bytes;
	f.created_at = tacod_now();
	if ((rc = keep_bytes(s, tmp, f.path, &err)) ||
	    (rc = add_file(s, &f, j->id, &err))) {
		/* bytes that no file has are not left behind */
		tacod_file_bytes_release(s, f.sha256);
		goto fail;
	}
	snprintf(j->result_file, sizeof(j->result_file), "%s", f.id);
	return;
fail:
	/* the job's end is recorded already; only the file is missing. The
	 * event names no server path; tacod's log has the whole message */
	fprintf(stderr, "tacod: %s: its result file: %s\n", j->id, err.msg);
	snprintf(msg, sizeof(msg), "The result file could not be written: %s",
		 strerror(-rc));
	tacod_service_event(s, j->id, "warn", "message", msg, NULL);
}
