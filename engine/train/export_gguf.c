/* export_gguf.c: see export_gguf.h. */
#include "export_gguf.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "data/chat.h"
#include "gguf/gguf_export.h"
#include "util/fsutil.h"

int taco_train_export_gguf(const taco_job *job, const char *ckpt_dir, int type,
			   const char *out, char *path, size_t len,
			   taco_err *err)
{
	char model[4200], dir[4200], file[4400];
	const char *name = "model", *tn = taco_gguf_type_name(type);
	int r;

	if (!tn)
		return taco_err_set(err, -EINVAL, "GGUF type %d", type);
	if (ckpt_dir) {
		size_t n = strlen(ckpt_dir);
		while (n > 1 && ckpt_dir[n - 1] == '/')
			n--;
		name = ckpt_dir + n;
		while (name > ckpt_dir && name[-1] != '/')
			name--;
		snprintf(model, sizeof(model), "%.*s",
			 (int)(ckpt_dir + n - name), name);
		name = model;
	}
	if (!out) {
		snprintf(dir, sizeof(dir), "%s/gguf", job->output_dir);
		if ((r = taco_mkdir_p(dir, err)))
			return r;
		if (snprintf(file, sizeof(file), "%s/%s-%s.gguf", dir, name,
			     tn) >= (int)sizeof(file))
			return taco_err_set(err, -ENAMETOOLONG,
					    "%s: path too long", dir);
		out = file;
	}
	if (snprintf(path, len, "%s", out) >= (int)len)
		return taco_err_set(err, -ENAMETOOLONG, "%s: path too long",
				    out);
	if (ckpt_dir)
		return taco_gguf_export(
		    job->model, ckpt_dir, out, type, job->export_gguf_max_bytes,
		    taco_chat_trained_jinja(job->chat_template,
					    job->chat_template_jinja),
		    err);
	snprintf(model, sizeof(model), "%s/model", job->output_dir);
	return taco_gguf_export(model, NULL, out, type,
				job->export_gguf_max_bytes, NULL, err);
}
