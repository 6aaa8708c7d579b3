#include "export.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "job/job_export.h"
#include "model_io.h"
#include "util/fsutil.h"

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
		if ((r = taco_copy_file(src, dst, err)))
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
