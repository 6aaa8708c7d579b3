/* tar.h: a POSIX ustar archive of regular files, produced on demand.
 *
 * The archive's layout is fixed when it is built (names, sizes), so its
 * total size is known before the first byte is read and a reader may ask
 * for any range: HTTP sends it with a Content-Length and reads it as the
 * client drains it, never holding a file in memory. Library code: no
 * logging. */
#ifndef TACOD_TAR_H
#define TACOD_TAR_H

#include <stdint.h>
#include <sys/types.h>

#include "util/taco_err.h"

#define TACOD_TAR_MAX_ENTRIES 256
#define TACOD_TAR_NAME_MAX 100 /* ustar name field, without a prefix */

typedef struct tacod_tar tacod_tar;

int tacod_tar_new(tacod_tar **out, taco_err *err);
/* Adds the regular file at path as `name` (relative, at most
 * TACOD_TAR_NAME_MAX - 1 bytes, no "..", not absolute). Its size is taken
 * now; a file that changes size before it is read fails the read with
 * -EIO. */
int tacod_tar_add(tacod_tar *t, const char *name, const char *path,
		  taco_err *err);
uint64_t tacod_tar_size(const tacod_tar *t);
int tacod_tar_count(const tacod_tar *t);
/* Copies up to max bytes of the archive from offset pos into buf: the
 * number of bytes (0 at the end), or a negative errno. */
ssize_t tacod_tar_read(tacod_tar *t, uint64_t pos, char *buf, size_t max);
void tacod_tar_free(tacod_tar *t);

#endif
