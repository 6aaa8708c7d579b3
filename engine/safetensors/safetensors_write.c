/* safetensors_write.c: atomic safetensors writer, single files and shards. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/fsutil.h"

#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"
#define MAX_WRITE_CHUNK (1u << 30)

struct chunk {
	const void *p;
	uint64_t len;
};

static int cmp_name_ptr(const void *pa, const void *pb)
{
	const taco_st_tensor *const *a = pa, *const *b = pb;

	return strcmp((*a)->name, (*b)->name);
}

/* Checks the tensors to be written; *total gets the sum of their bytes. */
static int validate(const char *path, const taco_st_tensor *ts, size_t n,
		    uint64_t *total, taco_err *err)
{
	const taco_st_tensor **sorted = NULL;
	uint64_t sum = 0;
	int rc = 0;

	if (n && !ts)
		return taco_err_at(err, -EINVAL, path, "NULL tensor array");
	if (n > TACO_ST_MAX_TENSORS)
		return taco_err_at(err, -EINVAL, path,
				   "%zu tensors, limit is %u", n,
				   TACO_ST_MAX_TENSORS);
	for (size_t i = 0; i < n; i++) {
		const taco_st_tensor *t = &ts[i];
		uint64_t nelem = 1;
		size_t esize;
		int zero = 0;

		if (!t->name)
			return taco_err_at(err, -EINVAL, path,
					   "tensor %zu: NULL name", i);
		if (strlen(t->name) > TACO_ST_MAX_NAME)
			return taco_err_at(
			    err, -EINVAL, path,
			    "tensor '%.64s...': name is %zu bytes, limit "
			    "is %d",
			    t->name, strlen(t->name), TACO_ST_MAX_NAME);
		if (strcmp(t->name, "__metadata__") == 0)
			return taco_err_at(
			    err, -EINVAL, path,
			    "tensor name '__metadata__' is reserved");
		esize = taco_st_dtype_size(t->dtype);
		if (!esize)
			return taco_err_at(err, -EINVAL, path,
					   "tensor '%s': unknown dtype %d",
					   t->name, t->dtype);
		if (t->ndim < 0 || t->ndim > TACO_ST_MAX_DIMS)
			return taco_err_at(err, -EINVAL, path,
					   "tensor '%s': ndim %d outside 0..%d",
					   t->name, t->ndim, TACO_ST_MAX_DIMS);
		for (int d = 0; d < t->ndim; d++) {
			if (t->shape[d] < 0)
				return taco_err_at(
				    err, -EINVAL, path,
				    "tensor '%s': shape[%d] = %lld is "
				    "negative",
				    t->name, d, (long long)t->shape[d]);
			if (t->shape[d] == 0)
				zero = 1;
		}
		for (int d = 0; d < t->ndim && !zero; d++) {
			uint64_t x = (uint64_t)t->shape[d];

			if (nelem > UINT64_MAX / x)
				return taco_err_at(
				    err, -EINVAL, path,
				    "tensor '%s': shape element count "
				    "overflows",
				    t->name);
			nelem *= x;
		}
		if (zero)
			nelem = 0;
		if (nelem > UINT64_MAX / esize || nelem * esize != t->nbytes)
			return taco_err_at(
			    err, -EINVAL, path,
			    "tensor '%s': nbytes %llu does not match its "
			    "shape and dtype %s",
			    t->name, (unsigned long long)t->nbytes,
			    taco_st_dtype_name(t->dtype));
		if (t->nbytes && !t->data)
			return taco_err_at(
			    err, -EINVAL, path,
			    "tensor '%s': NULL data for %llu bytes", t->name,
			    (unsigned long long)t->nbytes);
		if (t->nbytes > (uint64_t)INT64_MAX - sum)
			return taco_err_at(err, -EINVAL, path,
					   "total tensor size overflows");
		sum += t->nbytes;
	}
	if (n > 1) {
		sorted = malloc(n * sizeof(*sorted));
		if (!sorted)
			return taco_err_at(err, -ENOMEM, path, "out of memory");
		for (size_t i = 0; i < n; i++)
			sorted[i] = &ts[i];
		qsort(sorted, n, sizeof(*sorted), cmp_name_ptr);
		for (size_t i = 1; i < n && rc == 0; i++)
			if (strcmp(sorted[i - 1]->name, sorted[i]->name) == 0)
				rc = taco_err_at(err, -EINVAL, path,
						 "duplicate tensor name '%s'",
						 sorted[i]->name);
		free(sorted);
	}
	if (rc == 0)
		*total = sum;
	return rc;
}

static int write_all(int fd, const void *p, uint64_t len)
{
	const unsigned char *b = p;

	while (len > 0) {
		size_t want =
		    len > MAX_WRITE_CHUNK ? MAX_WRITE_CHUNK : (size_t)len;
		ssize_t w = write(fd, b, want);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		if (w == 0)
			return -EIO;
		b += w;
		len -= (uint64_t)w;
	}
	return 0;
}

/* fsyncs the directory holding path. Filesystems that cannot sync a
 * directory (EINVAL, ENOTSUP) are not an error. */
static int sync_parent(const char *path)
{
	const char *slash = strrchr(path, '/');
	char *dir;
	int fd, rc = 0;

	if (!slash) {
		dir = strdup(".");
	} else {
		size_t len = slash == path ? 1 : (size_t)(slash - path);

		dir = strndup(path, len);
	}
	if (!dir)
		return -ENOMEM;
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
	} else {
		if (fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP)
			rc = -errno;
		close(fd);
	}
	free(dir);
	return rc;
}

/* Writes the chunks to path.tmp.<pid>, syncs it and renames it over path. */
static int write_atomic(const char *path, const struct chunk *c, size_t nc,
			taco_err *err)
{
	size_t tlen = strlen(path) + 32;
	char *tmp = malloc(tlen);
	int fd = -1, rc = 0, created = 0, renamed = 0;

	if (!tmp)
		return taco_err_at(err, -ENOMEM, path, "out of memory");
	snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
		  0644);
	if (fd < 0) {
		rc = -errno;
		taco_err_at(err, rc, path, "cannot create %s: %s", tmp,
			    strerror(-rc));
		goto out;
	}
	created = 1;
	for (size_t i = 0; i < nc; i++) {
		rc = write_all(fd, c[i].p, c[i].len);
		if (rc != 0) {
			taco_err_at(err, rc, path, "write error: %s",
				    strerror(-rc));
			goto out;
		}
	}
	if (fsync(fd) != 0) {
		rc = -errno;
		taco_err_at(err, rc, path, "fsync failed: %s", strerror(-rc));
		goto out;
	}
	rc = close(fd) != 0 ? -errno : 0;
	fd = -1;
	if (rc != 0) {
		taco_err_at(err, rc, path, "close failed: %s", strerror(-rc));
		goto out;
	}
	if (rename(tmp, path) != 0) {
		rc = -errno;
		taco_err_at(err, rc, path, "cannot rename %s over it: %s", tmp,
			    strerror(-rc));
		goto out;
	}
	renamed = 1;
	rc = sync_parent(path);
	if (rc != 0)
		taco_err_at(err, rc, path,
			    "written, but fsync of its directory failed: %s",
			    strerror(-rc));
out:
	if (fd >= 0)
		close(fd);
	if (created && !renamed)
		unlink(tmp);
	free(tmp);
	return rc;
}

/* Builds the padded JSON header; *hdr is malloc'd, *hlen a multiple of 8. */
static int build_header(const char *path, const taco_st_tensor *ts, size_t n,
			const char *const *meta_kv, char **hdr, size_t *hlen,
			taco_err *err)
{
	json_t *root = json_object(), *meta = NULL;
	uint64_t off = 0;
	char *text = NULL, *buf = NULL;
	size_t len, padded = 0;
	int rc = 0;

	if (!root)
		return taco_err_at(err, -ENOMEM, path, "out of memory");
	if (meta_kv) {
		meta = json_object();
		if (!meta || json_object_set_new(root, "__metadata__", meta)) {
			rc = taco_err_at(err, -ENOMEM, path, "out of memory");
			goto out;
		}
		for (size_t i = 0; meta_kv[i]; i += 2) {
			if (!meta_kv[i + 1]) {
				rc = taco_err_at(
				    err, -EINVAL, path,
				    "metadata key '%s' has no value",
				    meta_kv[i]);
				goto out;
			}
			if (json_object_set_new(meta, meta_kv[i],
						json_string(meta_kv[i + 1]))) {
				rc = taco_err_at(
				    err, -EINVAL, path,
				    "metadata '%s': key or value is not "
				    "valid UTF-8",
				    meta_kv[i]);
				goto out;
			}
		}
	}
	for (size_t i = 0; i < n; i++) {
		const taco_st_tensor *t = &ts[i];
		json_t *e = json_object(), *shape = json_array(),
		       *offs = json_array();
		int bad = !e || !shape || !offs;

		for (int d = 0; d < t->ndim && !bad; d++)
			bad = json_array_append_new(shape,
						    json_integer(t->shape[d]));
		bad = bad || json_array_append_new(
				 offs, json_integer((json_int_t)off));
		off += t->nbytes;
		bad = bad || json_array_append_new(
				 offs, json_integer((json_int_t)off));
		bad = bad || json_object_set_new(
				 e, "dtype",
				 json_string(taco_st_dtype_name(t->dtype)));
		bad = bad || json_object_set(e, "shape", shape);
		bad = bad || json_object_set(e, "data_offsets", offs);
		json_decref(shape);
		json_decref(offs);
		if (bad) {
			json_decref(e);
			rc = taco_err_at(err, -ENOMEM, path, "out of memory");
			goto out;
		}
		if (json_object_set_new(root, t->name, e)) {
			rc = taco_err_at(err, -EINVAL, path,
					 "tensor '%s': name is not valid UTF-8",
					 t->name);
			goto out;
		}
	}
	text = json_dumps(root, JSON_COMPACT);
	if (!text) {
		rc = taco_err_at(err, -ENOMEM, path,
				 "cannot serialize the header");
		goto out;
	}
	len = strlen(text);
	padded = (len + 7) & ~(size_t)7;
	if (padded > TACO_ST_MAX_HEADER_BYTES) {
		rc = taco_err_at(err, -EINVAL, path,
				 "header of %zu bytes exceeds the limit of %u",
				 padded, TACO_ST_MAX_HEADER_BYTES);
		goto out;
	}
	buf = malloc(padded);
	if (!buf) {
		rc = taco_err_at(err, -ENOMEM, path, "out of memory");
		goto out;
	}
	memcpy(buf, text, len);
	memset(buf + len, ' ', padded - len);
out:
	free(text);
	json_decref(root);
	if (rc != 0)
		return rc;
	*hdr = buf;
	*hlen = padded;
	return 0;
}

int taco_st_write(const char *path, const taco_st_tensor *tensors, size_t n,
		  const char *const *meta_kv, taco_err *err)
{
	unsigned char prefix[8];
	struct chunk *c = NULL;
	char *hdr = NULL;
	size_t hlen = 0, nc = 0;
	uint64_t total;
	int rc;

	if (!path)
		return taco_err_set(err, -EINVAL, "taco_st_write: NULL path");
	rc = validate(path, tensors, n, &total, err);
	if (rc != 0)
		return rc;
	rc = build_header(path, tensors, n, meta_kv, &hdr, &hlen, err);
	if (rc != 0)
		return rc;
	c = malloc((n + 2) * sizeof(*c));
	if (!c) {
		rc = taco_err_at(err, -ENOMEM, path, "out of memory");
		goto out;
	}
	for (int i = 0; i < 8; i++)
		prefix[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
	c[nc++] = (struct chunk){prefix, 8};
	c[nc++] = (struct chunk){hdr, hlen};
	for (size_t i = 0; i < n; i++)
		if (tensors[i].nbytes)
			c[nc++] =
			    (struct chunk){tensors[i].data, tensors[i].nbytes};
	rc = write_atomic(path, c, nc, err);
out:
	free(c);
	free(hdr);
	return rc;
}

/* Removes dir/name if present. */
static int remove_stale(const char *dir, const char *name, taco_err *err)
{
	char *p = taco_path_join(dir, name);
	int rc = 0;

	if (!p)
		return taco_err_at(err, -ENOMEM, dir, "out of memory");
	if (unlink(p) != 0 && errno != ENOENT) {
		rc = -errno;
		taco_err_at(err, rc, p, "cannot remove stale file: %s",
			    strerror(-rc));
	}
	free(p);
	return rc;
}

static int write_index(const char *dir, const taco_st_tensor *ts, size_t n,
		       const size_t *shard_of, size_t nshards, uint64_t total,
		       taco_err *err)
{
	json_t *root = NULL, *wm;
	char *path = taco_path_join(dir, INDEX_NAME), *text = NULL;
	int rc = 0;

	if (!path)
		return taco_err_at(err, -ENOMEM, dir, "out of memory");
	root = json_pack("{s:{s:I}, s:{}}", "metadata", "total_size",
			 (json_int_t)total, "weight_map");
	wm = root ? json_object_get(root, "weight_map") : NULL;
	if (!wm) {
		rc = taco_err_at(err, -ENOMEM, path, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		char name[64];

		snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors",
			 shard_of[i] + 1, nshards);
		if (json_object_set_new(wm, ts[i].name, json_string(name))) {
			rc = taco_err_at(err, -ENOMEM, path, "out of memory");
			goto out;
		}
	}
	text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
	if (!text) {
		rc = taco_err_at(err, -ENOMEM, path,
				 "cannot serialize the index");
		goto out;
	}
	{
		struct chunk c[2] = {{text, strlen(text)}, {"\n", 1}};

		rc = write_atomic(path, c, 2, err);
	}
out:
	free(text);
	json_decref(root);
	free(path);
	return rc;
}

int taco_st_write_sharded(const char *dir, const taco_st_tensor *tensors,
			  size_t n, uint64_t max_shard_bytes, taco_err *err)
{
	static const char *const meta[] = {"format", "pt", NULL};
	size_t *shard_of = NULL, nshards = 0, start;
	uint64_t total, cur = 0;
	char *path = NULL;
	int rc;

	if (!dir)
		return taco_err_set(err, -EINVAL,
				    "taco_st_write_sharded: NULL dir");
	if (max_shard_bytes == 0)
		return taco_err_at(err, -EINVAL, dir, "max_shard_bytes is 0");
	rc = validate(dir, tensors, n, &total, err);
	if (rc != 0)
		return rc;
	if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
		rc = -errno;
		return taco_err_at(err, rc, dir, "cannot create directory: %s",
				   strerror(-rc));
	}

	shard_of = malloc((n ? n : 1) * sizeof(*shard_of));
	if (!shard_of)
		return taco_err_at(err, -ENOMEM, dir, "out of memory");
	/* Greedy: a tensor opens a new shard when it would overflow the
	 * current, non-empty one; an oversized tensor ends up alone. */
	for (size_t i = 0; i < n; i++) {
		uint64_t nb = tensors[i].nbytes;

		if (nshards == 0 ||
		    (cur > 0 && nb > 0 &&
		     (cur >= max_shard_bytes || nb > max_shard_bytes - cur))) {
			nshards++;
			cur = 0;
		}
		shard_of[i] = nshards - 1;
		cur += nb; /* total <= INT64_MAX, checked by validate() */
	}
	if (nshards <= 1) {
		path = taco_path_join(dir, SINGLE_NAME);
		if (!path) {
			rc = taco_err_at(err, -ENOMEM, dir, "out of memory");
			goto out;
		}
		rc = taco_st_write(path, tensors, n, meta, err);
		if (rc == 0)
			rc = remove_stale(dir, INDEX_NAME, err);
		goto out;
	}
	if (nshards > TACO_ST_MAX_SHARDS) {
		rc = taco_err_at(err, -EINVAL, dir,
				 "%zu shards needed, limit is %d (raise "
				 "max_shard_bytes)",
				 nshards, TACO_ST_MAX_SHARDS);
		goto out;
	}
	start = 0;
	for (size_t s = 0; s < nshards; s++) {
		char name[64];
		size_t end = start;

		while (end < n && shard_of[end] == s)
			end++;
		snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors",
			 s + 1, nshards);
		free(path);
		path = taco_path_join(dir, name);
		if (!path) {
			rc = taco_err_at(err, -ENOMEM, dir, "out of memory");
			goto out;
		}
		rc = taco_st_write(path, tensors + start, end - start, meta,
				   err);
		if (rc != 0)
			goto out;
		start = end;
	}
	rc = write_index(dir, tensors, n, shard_of, nshards, total, err);
	if (rc == 0)
		rc = remove_stale(dir, SINGLE_NAME, err);
out:
	free(path);
	free(shard_of);
	return rc;
}
