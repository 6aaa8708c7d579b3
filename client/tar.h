/* tar.h: a streaming extractor for the POSIX ustar archives tacod sends (a
 * model directory, every entry under one top directory).
 *
 * Only what such an archive holds is accepted: regular files and
 * directories. Absolute names, "." and ".." components, links, devices,
 * FIFOs, pax and GNU extension headers, a bad header checksum, an entry
 * outside the top directory and sizes past the limits are errors. The top
 * directory is stripped: its content lands in the destination directory.
 *
 * Each file is written under a temporary name in its directory, fsynced and
 * renamed (never over an existing name). Everything is opened relative to
 * the destination without following symbolic links. When extraction fails
 * (or ctl_tar_free is called before ctl_tar_finish succeeded), the files and
 * directories written so far are removed again. */
#ifndef CTL_TAR_H
#define CTL_TAR_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define CTL_TAR_MAX_FILE (1ull << 40)  /* one file: 1 TiB */
#define CTL_TAR_MAX_TOTAL (1ull << 43) /* all files: 8 TiB */
#define CTL_TAR_MAX_ENTRIES 100000
#define CTL_TAR_MAX_DEPTH 16 /* directories below the top one */

typedef struct ctl_tar_limits {
	uint64_t max_file;  /* bytes of one file */
	uint64_t max_total; /* bytes of all files */
	int max_entries;
} ctl_tar_limits;

typedef struct ctl_tar ctl_tar;

/* Starts an extraction into dest, which is created (an existing one must be
 * an empty directory); dest NULL: the archive's top directory name, in the
 * current directory. limits NULL: the CTL_TAR_MAX_* defaults. */
int ctl_tar_open(const char *dest, const ctl_tar_limits *limits, ctl_tar **out,
		 ctl_err *err);

/* The next bytes of the archive. An error is final: later calls repeat it. */
int ctl_tar_write(ctl_tar *t, const void *data, size_t n, ctl_err *err);

/* Checks that the archive ended with its end-of-archive block and syncs the
 * destination. */
int ctl_tar_finish(ctl_tar *t, ctl_err *err);

/* The destination ("" until the first entry when it was not given), the
 * files written and their bytes. */
const char *ctl_tar_dir(const ctl_tar *t);
void ctl_tar_stats(const ctl_tar *t, int *files, uint64_t *bytes);

/* Ends the extraction; unless ctl_tar_finish succeeded, removes what was
 * written. */
void ctl_tar_free(ctl_tar *t);

#endif
