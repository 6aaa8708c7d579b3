/* fsutil.h: durable file-system operations. Whatever is persisted is written
 * to a temporary name, fsynced, then renamed, and the directory fsynced. */
#ifndef TACO_FSUTIL_H
#define TACO_FSUTIL_H

#include <stddef.h>

#include "taco_err.h"

/* "dir/name" in a new malloc'd string, or NULL when out of memory. */
char *taco_path_join(const char *dir, const char *name);

int taco_write_file_atomic(const char *path, const void *data, size_t len,
			   taco_err *err);
int taco_fsync_dir(const char *dir, taco_err *err);
/* mkdir -p with mode 0755 */
int taco_mkdir_p(const char *path, taco_err *err);
/* Removes a directory and the plain files in it (no recursion deeper). */
int taco_remove_flat_dir(const char *dir, taco_err *err);
/* Reads a whole file of at most max bytes into a NUL-terminated malloc'd
 * buffer. A larger file is -EFBIG, naming the path. */
int taco_read_file(const char *path, size_t max, char **out, size_t *len,
		   taco_err *err);

/* Puts the complete directory tmp in place of dir: an existing dir is
 * moved aside and removed, tmp renamed, the parent fsynced. */
int taco_replace_dir(const char *tmp, const char *dir, taco_err *err);

/* Copies a regular file atomically. */
int taco_copy_file(const char *src, const char *dst, taco_err *err);

#endif
