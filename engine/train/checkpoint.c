#include "checkpoint.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/model_io.h"
#include "util/fsutil.h"

#define CKPT_MAX_LISTED 100000

/* step-NNNNNNNN exactly: returns the step, or -1. */
static int64_t complete_step(const char *name)
{
	char *end;
	long long s;

	if (strncmp(name, "step-", 5) || strlen(name) != 13)
		return -1;
	s = strtoll(name + 5, &end, 10);
	return *end || s < 0 ? -1 : (int64_t)s;
}

static int ckpt_root(const char *output_dir, char *buf, size_t len,
		     taco_err *err)
{
	if (snprintf(buf, len, "%s/checkpoints", output_dir) >= (int)len)
		return taco_err_set(err, -ENAMETOOLONG, "%s: path too long",
				    output_dir);
	return 0;
}

static int cmp_i64_desc(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x < y) - (x > y);
}

/* Complete checkpoint steps, newest first. */
static int list_steps(const char *root, int64_t **steps, size_t *n,
		      taco_err *err)
{
	DIR *d = opendir(root);
	struct dirent *e;
	size_t cap = 16;
	int64_t *s;

	*n = 0;
	*steps = NULL;
	if (!d)
		return errno == ENOENT ? 0
				       : taco_err_set(err, -errno, "%s: %s",
						      root, strerror(errno));
	s = malloc(cap * sizeof(*s));
	while (s && (e = readdir(d)) && *n < CKPT_MAX_LISTED) {
		int64_t st = complete_step(e->d_name);
		if (st < 0)
			continue;
		if (*n == cap) {
			int64_t *g = realloc(s, 2 * cap * sizeof(*s));
			if (!g)
				break;
			s = g;
			cap *= 2;
		}
		s[(*n)++] = st;
	}
	closedir(d);
	if (!s)
		return taco_err_set(err, -ENOMEM, "out of memory");
	qsort(s, *n, sizeof(*s), cmp_i64_desc);
	*steps = s;
	return 0;
}

/* Removes temporaries of earlier writers and checkpoints beyond keep. */
static void prune(const char *root, int keep)
{
	int64_t *steps = NULL;
	size_t n = 0;
	char path[4600];
	DIR *d;
	struct dirent *e;

	if (list_steps(root, &steps, &n, NULL) == 0) {
		for (size_t i = (size_t)keep; i < n; i++) {
			snprintf(path, sizeof(path), "%s/step-%08" PRId64, root,
				 steps[i]);
			taco_remove_flat_dir(path, NULL);
		}
	}
	free(steps);
	d = opendir(root);
	while (d && (e = readdir(d))) {
		if (strncmp(e->d_name, "step-", 5) == 0 &&
		    complete_step(e->d_name) < 0) {
			snprintf(path, sizeof(path), "%s/%s", root, e->d_name);
			taco_remove_flat_dir(path, NULL);
		}
	}
	if (d)
		closedir(d);
}

int taco_ckpt_save(const char *output_dir, int64_t step, const taco_model *m,
		   const taco_optim *o, json_t *trainer, int keep, char *path,
		   size_t path_len, taco_err *err)
{
	char root[4200], tmp[4300], final[4300], file[4400];
	char *text = NULL;
	int r;

	if ((r = ckpt_root(output_dir, root, sizeof(root), err)) ||
	    (r = taco_mkdir_p(root, err)))
		return r;
	snprintf(final, sizeof(final), "%s/step-%08" PRId64, root, step);
	snprintf(tmp, sizeof(tmp), "%s/step-%08" PRId64 ".tmp-%d", root, step,
		 (int)getpid());
	taco_remove_flat_dir(tmp, NULL);
	if (mkdir(tmp, 0755))
		return taco_err_set(err, -errno, "%s: mkdir: %s", tmp,
				    strerror(errno));
	snprintf(file, sizeof(file), "%s/model.safetensors", tmp);
	if ((r = taco_model_save_weights(m, file, err)))
		goto fail;
	snprintf(file, sizeof(file), "%s/optimizer.safetensors", tmp);
	if ((r = taco_optim_save(o, file, err)))
		goto fail;
	text = json_dumps(trainer, JSON_INDENT(1) | JSON_SORT_KEYS);
	if (!text) {
		r = taco_err_set(err, -ENOMEM, "out of memory");
		goto fail;
	}
	snprintf(file, sizeof(file), "%s/trainer.json", tmp);
	if ((r = taco_write_file_atomic(file, text, strlen(text), err)))
		goto fail;
	if ((r = taco_fsync_dir(tmp, err)))
		goto fail;
	/* A checkpoint of the same step (a resumed run) is replaced. */
	if ((r = taco_replace_dir(tmp, final, err)))
		goto fail;
	free(text);
	prune(root, keep);
	if (path)
		snprintf(path, path_len, "%s", final);
	return 0;
fail:
	taco_remove_flat_dir(tmp, NULL);
	free(text);
	return r;
}

int taco_ckpt_latest(const char *output_dir, char *path, size_t path_len,
		     int64_t *step, taco_err *err)
{
	char root[4200];
	int64_t *steps = NULL;
	size_t n = 0;
	int r;

	if ((r = ckpt_root(output_dir, root, sizeof(root), err)) ||
	    (r = list_steps(root, &steps, &n, err)))
		return r;
	if (n == 0) {
		free(steps);
		return taco_err_set(err, -ENOENT, "%s: no complete checkpoint",
				    root);
	}
	snprintf(path, path_len, "%s/step-%08" PRId64, root, steps[0]);
	*step = steps[0];
	free(steps);
	return 0;
}

int taco_ckpt_load(const char *dir, taco_model *m, taco_optim *o,
		   json_t **trainer, taco_err *err)
{
	char file[4400];
	json_error_t jerr;
	json_t *t;
	int r;

	snprintf(file, sizeof(file), "%s/trainer.json", dir);
	t = json_load_file(file, JSON_REJECT_DUPLICATES, &jerr);
	if (!t || !json_is_object(t)) {
		json_decref(t);
		return taco_err_set(err, -EINVAL, "%s: %s", file,
				    t ? "not an object" : jerr.text);
	}
	snprintf(file, sizeof(file), "%s/model.safetensors", dir);
	if ((r = taco_model_load_weights(m, file, err)))
		goto fail;
	snprintf(file, sizeof(file), "%s/optimizer.safetensors", dir);
	if ((r = taco_optim_load(o, file, err)))
		goto fail;
	*trainer = t;
	return 0;
fail:
	json_decref(t);
	return r;
}
