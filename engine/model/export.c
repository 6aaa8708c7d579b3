/* export.c: a model directory that Hugging Face tools load: the base's
 * files, the chat template, the weights in bf16 (fused expert tensors
 * fused again). */
#include "export.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "job/job_export.h"
#include "model_io.h"
#include "util/fsutil.h"
#include "util/json_file.h"

/* A config whose checkpoint was quantized (gpt-oss's MXFP4 experts)
 * describes weights the export no longer has: it is written to dst without
 * its quantization_config, else copied as it is. */
static int drop_quantization(json_t *root, const char *name, void *arg,
			     taco_err *err)
{
	const char *dst = arg;
	char *text;
	int r;

	(void)name;
	if (!json_object_get(root, "quantization_config"))
		return 1;
	json_object_del(root, "quantization_config");
	text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	if (!text)
		return taco_err_set(err, -ENOMEM, "out of memory");
	r = taco_write_file_atomic(dst, text, strlen(text), err);
	free(text);
	return r;
}

static int export_config(const char *src, const char *dst, taco_err *err)
{
	int r =
	    taco_json_read_file(src, TACO_CONFIG_MAX_BYTES, TACO_JSON_OBJECT,
				drop_quantization, (void *)dst, err);

	return r == 1 ? taco_copy_file(src, dst, err) : r;
}

int taco_export(const taco_model *m, const char *base_dir, const char *out_dir,
		uint64_t shard_bytes, const char *chat_template, taco_err *err)
{
	char tmp[4200], src[4400], dst[4400];
	struct stat st;
	int r;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp-%d", out_dir, (int)getpid()) >=
	    (int)sizeof(tmp))
		return taco_err_set(err, -ENAMETOOLONG, "%s: path too long",
				    out_dir);
	taco_remove_flat_dir(tmp, NULL);
	if ((r = taco_mkdir_p(tmp, err)))
		return r;
	for (int i = 0; taco_job_export_files[i]; i++) {
		snprintf(src, sizeof(src), "%s/%s", base_dir,
			 taco_job_export_files[i]);
		snprintf(dst, sizeof(dst), "%s/%s", tmp,
			 taco_job_export_files[i]);
		if (stat(src, &st) || !S_ISREG(st.st_mode))
			continue;
		r = strcmp(taco_job_export_files[i], "config.json") == 0
			? export_config(src, dst, err)
			: taco_copy_file(src, dst, err);
		if (r)
			goto fail;
	}
	snprintf(dst, sizeof(dst), "%s/chat_template.jinja", tmp);
	if (chat_template &&
	    (r = taco_write_file_atomic(dst, chat_template,
					strlen(chat_template), err)))
		goto fail;
	if ((r = taco_model_save_sharded(m, tmp, shard_bytes, err)) ||
	    (r = taco_fsync_dir(tmp, err)))
		goto fail;
	if ((r = taco_replace_dir(tmp, out_dir, err)))
		goto fail;
	return 0;
fail:
	taco_remove_flat_dir(tmp, NULL);
	return r;
}
