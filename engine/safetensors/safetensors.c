/* safetensors.c: safetensors reader (single files and sharded models). */
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
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/fsutil.h"

#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"
#define MAX_SHARD_NAME 255

struct taco_st_file {
	char *path; /* for error messages */
	void *map;  /* NULL unless opened by taco_st_open */
	size_t map_len;
	size_t n;
	taco_st_tensor *t; /* data order */
	const taco_st_tensor **by_name;
	size_t nmeta;
	const char **meta; /* key, value pairs sorted by key */
	char *strings;	   /* names, metadata keys and values */
};

struct taco_st_model {
	size_t nshards;
	taco_st_file **shards; /* file-name order */
	size_t n;
	const taco_st_tensor **all; /* model order */
	const taco_st_tensor **by_name;
	char *dir;
};

static const struct {
	const char *name;
	int dtype;
	size_t size;
} dtypes[] = {
    {"F32", TK_F32, 4},
    {"BF16", TK_BF16, 2},
    {"F16", TK_F16, 2},
    {"F64", TACO_ST_F64, 8},
    {"I64", TACO_ST_I64, 8},
    {"U64", TACO_ST_U64, 8},
    {"I32", TACO_ST_I32, 4},
    {"U32", TACO_ST_U32, 4},
    {"I16", TACO_ST_I16, 2},
    {"U16", TACO_ST_U16, 2},
    {"I8", TACO_ST_I8, 1},
    {"U8", TACO_ST_U8, 1},
    {"BOOL", TACO_ST_BOOL, 1},
    {"F8_E4M3", TACO_ST_F8_E4M3, 1},
    {"F8_E5M2", TACO_ST_F8_E5M2, 1},
    {"F8_E8M0", TACO_ST_F8_E8M0, 1},
};

#define NDTYPES (sizeof(dtypes) / sizeof(dtypes[0]))

int taco_st_dtype_supported(int dtype)
{
	return dtype == TK_F32 || dtype == TK_BF16 || dtype == TK_F16;
}

size_t taco_st_dtype_size(int dtype)
{
	for (size_t i = 0; i < NDTYPES; i++)
		if (dtypes[i].dtype == dtype)
			return dtypes[i].size;
	return 0;
}

const char *taco_st_dtype_name(int dtype)
{
	for (size_t i = 0; i < NDTYPES; i++)
		if (dtypes[i].dtype == dtype)
			return dtypes[i].name;
	return NULL;
}

int taco_st_dtype_from_name(const char *name)
{
	if (!name)
		return -1;
	for (size_t i = 0; i < NDTYPES; i++)
		if (strcmp(dtypes[i].name, name) == 0)
			return dtypes[i].dtype;
	return -1;
}

static uint64_t le64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static int cmp_data(const void *pa, const void *pb)
{
	const taco_st_tensor *a = pa, *b = pb;
	uintptr_t da = (uintptr_t)a->data, db = (uintptr_t)b->data;

	if (da != db)
		return da < db ? -1 : 1;
	if (a->nbytes != b->nbytes)
		return a->nbytes < b->nbytes ? -1 : 1;
	return strcmp(a->name, b->name);
}

static int cmp_tensor_name(const void *pa, const void *pb)
{
	const taco_st_tensor *const *a = pa, *const *b = pb;

	return strcmp((*a)->name, (*b)->name);
}

static int cmp_meta(const void *pa, const void *pb)
{
	const char *const *a = pa, *const *b = pb;

	return strcmp(a[0], b[0]);
}

static int cmp_str(const void *pa, const void *pb)
{
	const char *const *a = pa, *const *b = pb;

	return strcmp(*a, *b);
}

/* Reads a non-negative JSON integer. */
static int get_uint(const json_t *v, uint64_t *out)
{
	json_int_t x;

	if (!json_is_integer(v))
		return -1;
	x = json_integer_value(v);
	if (x < 0)
		return -1;
	*out = (uint64_t)x;
	return 0;
}

static void format_shape(char *buf, size_t cap, const taco_st_tensor *t)
{
	size_t o = 0;

	o += (size_t)snprintf(buf, cap, "[");
	for (int d = 0; d < t->ndim && o < cap; d++)
		o += (size_t)snprintf(buf + o, cap - o, "%s%lld", d ? ", " : "",
				      (long long)t->shape[d]);
	if (o < cap)
		snprintf(buf + o, cap - o, "]");
}

/* Parses one tensor entry into t (name already set); data points into the
 * data region. */
static int parse_tensor(taco_st_tensor *t, const json_t *v,
			const unsigned char *region, uint64_t region_len,
			const char *file, taco_err *err)
{
	const char *name = t->name, *ds;
	const json_t *shape, *offs;
	uint64_t nelem = 1, begin, end, x;
	size_t esize;
	int zero = 0;

	if (!json_is_object(v))
		return taco_err_at(err, -EINVAL, file,
				   "tensor '%s': entry is not an object", name);
	ds = json_string_value(json_object_get(v, "dtype"));
	if (!ds)
		return taco_err_at(err, -EINVAL, file,
				   "tensor '%s': dtype missing or not a string",
				   name);
	t->dtype = taco_st_dtype_from_name(ds);
	if (t->dtype < 0)
		return taco_err_at(err, -EINVAL, file,
				   "tensor '%s': unknown dtype '%.32s'", name,
				   ds);
	esize = taco_st_dtype_size(t->dtype);

	shape = json_object_get(v, "shape");
	if (!json_is_array(shape))
		return taco_err_at(err, -EINVAL, file,
				   "tensor '%s': shape missing or not an array",
				   name);
	if (json_array_size(shape) > TACO_ST_MAX_DIMS)
		return taco_err_at(
		    err, -EINVAL, file,
		    "tensor '%s': shape has %zu dims, limit is %d", name,
		    json_array_size(shape), TACO_ST_MAX_DIMS);
	t->ndim = (int)json_array_size(shape);
	for (int d = 0; d < t->ndim; d++) {
		if (get_uint(json_array_get(shape, (size_t)d), &x) != 0)
			return taco_err_at(
			    err, -EINVAL, file,
			    "tensor '%s': shape[%d] is not a non-negative "
			    "integer",
			    name, d);
		t->shape[d] = (int64_t)x;
		if (x == 0)
			zero = 1;
	}
	for (int d = 0; d < t->ndim && !zero; d++) {
		x = (uint64_t)t->shape[d];
		if (nelem > UINT64_MAX / x)
			return taco_err_at(
			    err, -EINVAL, file,
			    "tensor '%s': shape element count overflows", name);
		nelem *= x;
	}
	if (zero)
		nelem = 0;
	if (nelem > UINT64_MAX / esize)
		return taco_err_at(err, -EINVAL, file,
				   "tensor '%s': shape byte size overflows",
				   name);
	t->nbytes = nelem * esize;

	offs = json_object_get(v, "data_offsets");
	if (!json_is_array(offs) || json_array_size(offs) != 2)
		return taco_err_at(err, -EINVAL, file,
				   "tensor '%s': data_offsets missing or not a "
				   "[begin, end] array",
				   name);
	if (get_uint(json_array_get(offs, 0), &begin) != 0 ||
	    get_uint(json_array_get(offs, 1), &end) != 0)
		return taco_err_at(
		    err, -EINVAL, file,
		    "tensor '%s': data_offsets are not non-negative "
		    "integers",
		    name);
	if (end < begin)
		return taco_err_at(
		    err, -EINVAL, file,
		    "tensor '%s': data_offsets end %llu < begin %llu", name,
		    (unsigned long long)end, (unsigned long long)begin);
	if (end > region_len)
		return taco_err_at(
		    err, -EINVAL, file,
		    "tensor '%s': data_offsets end %llu beyond data "
		    "region of %llu bytes",
		    name, (unsigned long long)end,
		    (unsigned long long)region_len);
	if (end - begin != t->nbytes) {
		char sh[256];

		format_shape(sh, sizeof(sh), t);
		return taco_err_at(
		    err, -EINVAL, file,
		    "tensor '%s': data_offsets span %llu bytes but "
		    "shape %s of %s needs %llu",
		    name, (unsigned long long)(end - begin), sh, ds,
		    (unsigned long long)t->nbytes);
	}
	t->data = region + begin;
	return 0;
}

/* Validates "__metadata__" and adds up the bytes its strings need. */
static int scan_meta(const json_t *meta, const char *file, size_t *count,
		     size_t *bytes, taco_err *err)
{
	const char *key;
	size_t klen;
	json_t *v;

	*count = 0;
	if (json_is_null(meta))
		return 0;
	if (!json_is_object(meta))
		return taco_err_at(err, -EINVAL, file,
				   "__metadata__ is not an object");
	json_object_keylen_foreach((json_t *)meta, key, klen, v)
	{
		if (strlen(key) != klen)
			return taco_err_at(
			    err, -EINVAL, file,
			    "__metadata__ key contains a NUL byte");
		if (!json_is_string(v) ||
		    strlen(json_string_value(v)) != json_string_length(v))
			return taco_err_at(
			    err, -EINVAL, file,
			    "__metadata__ '%.200s': value is not a "
			    "string",
			    key);
		*bytes += klen + 1 + json_string_length(v) + 1;
		(*count)++;
	}
	return 0;
}

static char *put_str(char **arena, const char *s, size_t len)
{
	char *p = *arena;

	memcpy(p, s, len);
	p[len] = 0;
	*arena = p + len + 1;
	return p;
}

/* Fills f (path already set) from the parsed header. */
static int build_file(taco_st_file *f, json_t *root,
		      const unsigned char *region, uint64_t region_len,
		      taco_err *err)
{
	const char *file = f->path, *key;
	json_t *v, *meta = NULL;
	size_t klen, bytes = 0, n = 0, nmeta = 0, i;
	char *arena;
	int rc;

	if (!json_is_object(root))
		return taco_err_at(err, -EINVAL, file,
				   "JSON header is not an object");
	if (json_object_size(root) > TACO_ST_MAX_TENSORS + 1)
		return taco_err_at(
		    err, -EINVAL, file,
		    "header lists %zu entries, limit is %u tensors",
		    json_object_size(root), TACO_ST_MAX_TENSORS);
	json_object_keylen_foreach(root, key, klen, v)
	{
		if (strlen(key) != klen)
			return taco_err_at(err, -EINVAL, file,
					   "tensor name contains a NUL byte");
		if (strcmp(key, "__metadata__") == 0) {
			meta = v;
			continue;
		}
		if (klen > TACO_ST_MAX_NAME)
			return taco_err_at(
			    err, -EINVAL, file,
			    "tensor '%.64s...': name is %zu bytes, limit "
			    "is %d",
			    key, klen, TACO_ST_MAX_NAME);
		bytes += klen + 1;
		n++;
	}
	if (n > TACO_ST_MAX_TENSORS)
		return taco_err_at(err, -EINVAL, file,
				   "header lists %zu tensors, limit is %u", n,
				   TACO_ST_MAX_TENSORS);
	if (meta && (rc = scan_meta(meta, file, &nmeta, &bytes, err)) != 0)
		return rc;

	f->t = calloc(n ? n : 1, sizeof(*f->t));
	f->by_name = malloc((n ? n : 1) * sizeof(*f->by_name));
	f->meta = malloc((nmeta ? 2 * nmeta : 1) * sizeof(*f->meta));
	f->strings = malloc(bytes ? bytes : 1);
	if (!f->t || !f->by_name || !f->meta || !f->strings)
		return taco_err_at(err, -ENOMEM, file,
				   "out of memory for %zu tensors", n);
	arena = f->strings;

	i = 0;
	json_object_keylen_foreach(root, key, klen, v)
	{
		if (v == meta)
			continue;
		f->t[i].name = put_str(&arena, key, klen);
		rc = parse_tensor(&f->t[i], v, region, region_len, file, err);
		if (rc != 0)
			return rc;
		i++;
	}
	f->n = n;

	if (meta && nmeta) {
		i = 0;
		json_object_keylen_foreach(meta, key, klen, v)
		{
			f->meta[2 * i] = put_str(&arena, key, klen);
			f->meta[2 * i + 1] =
			    put_str(&arena, json_string_value(v),
				    json_string_length(v));
			i++;
		}
		qsort(f->meta, nmeta, 2 * sizeof(*f->meta), cmp_meta);
	}
	f->nmeta = nmeta;

	qsort(f->t, n, sizeof(*f->t), cmp_data);
	for (i = 1; i < n; i++) {
		const unsigned char *pd = f->t[i - 1].data, *cd = f->t[i].data;
		uint64_t pb = (uint64_t)(pd - region);
		uint64_t pe = pb + f->t[i - 1].nbytes;
		uint64_t cb = (uint64_t)(cd - region);

		if (cb < pe)
			return taco_err_at(
			    err, -EINVAL, file,
			    "tensors '%s' [%llu, %llu) and '%s' [%llu, "
			    "%llu) overlap",
			    f->t[i - 1].name, (unsigned long long)pb,
			    (unsigned long long)pe, f->t[i].name,
			    (unsigned long long)cb,
			    (unsigned long long)(cb + f->t[i].nbytes));
	}
	for (i = 0; i < n; i++)
		f->by_name[i] = &f->t[i];
	qsort(f->by_name, n, sizeof(*f->by_name), cmp_tensor_name);
	for (i = 1; i < n; i++)
		if (strcmp(f->by_name[i - 1]->name, f->by_name[i]->name) == 0)
			return taco_err_at(err, -EINVAL, file,
					   "duplicate tensor name '%s'",
					   f->by_name[i]->name);
	return 0;
}

static taco_st_file *file_new(const char *path)
{
	taco_st_file *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->path = strdup(path);
	if (!f->path) {
		free(f);
		return NULL;
	}
	return f;
}

static void file_free(taco_st_file *f)
{
	if (!f)
		return;
	if (f->map)
		munmap(f->map, f->map_len);
	free(f->path);
	free(f->t);
	free(f->by_name);
	free(f->meta);
	free(f->strings);
	free(f);
}

/* Parses buf into f (path set). */
static int parse_into(taco_st_file *f, const unsigned char *p, size_t len,
		      taco_err *err)
{
	const char *file = f->path;
	json_error_t jerr;
	json_t *root;
	uint64_t hlen;
	int rc;

	if (len < 8)
		return taco_err_at(
		    err, -EINVAL, file,
		    "file too short (%zu bytes) for the 8-byte header "
		    "length",
		    len);
	hlen = le64(p);
	if (hlen > TACO_ST_MAX_HEADER_BYTES)
		return taco_err_at(
		    err, -EINVAL, file,
		    "header length %llu exceeds the limit of %u bytes",
		    (unsigned long long)hlen, TACO_ST_MAX_HEADER_BYTES);
	if (hlen > len - 8)
		return taco_err_at(
		    err, -EINVAL, file,
		    "header length %llu larger than the %zu bytes after "
		    "the length prefix (truncated file?)",
		    (unsigned long long)hlen, len - 8);
	root = json_loadb((const char *)p + 8, (size_t)hlen,
			  JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
	if (!root) {
		if (strstr(jerr.text, "duplicate object key"))
			return taco_err_at(err, -EINVAL, file,
					   "duplicate name in JSON header (%s)",
					   jerr.text);
		return taco_err_at(
		    err, -EINVAL, file,
		    "invalid JSON header at line %d column %d: %s", jerr.line,
		    jerr.column, jerr.text);
	}
	rc = build_file(f, root, p + 8 + hlen, len - 8 - hlen, err);
	json_decref(root);
	return rc;
}

int taco_st_parse(const void *buf, size_t len, const char *filename_for_errors,
		  taco_st_file **out, taco_err *err)
{
	const char *file =
	    filename_for_errors ? filename_for_errors : "<memory>";
	taco_st_file *f;
	int rc;

	if (!buf && len)
		return taco_err_at(err, -EINVAL, file, "NULL buffer");
	f = file_new(file);
	if (!f)
		return taco_err_at(err, -ENOMEM, file, "out of memory");
	rc = parse_into(f, buf ? buf : "", buf ? len : 0, err);
	if (rc != 0) {
		file_free(f);
		return rc;
	}
	*out = f;
	return 0;
}

int taco_st_open(const char *path, taco_st_file **out, taco_err *err)
{
	taco_st_file *f = NULL;
	struct stat st;
	int fd = -1, rc;

	if (!path)
		return taco_err_set(err, -EINVAL, "taco_st_open: NULL path");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		taco_err_at(err, rc, path, "cannot open: %s", strerror(-rc));
		goto out;
	}
	if (fstat(fd, &st) != 0) {
		rc = -errno;
		taco_err_at(err, rc, path, "cannot stat: %s", strerror(-rc));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = taco_err_at(err, -EINVAL, path, "not a regular file");
		goto out;
	}
	if (st.st_size < 8) {
		rc = taco_err_at(
		    err, -EINVAL, path,
		    "file too short (%lld bytes) for the 8-byte header "
		    "length",
		    (long long)st.st_size);
		goto out;
	}
	if ((uint64_t)st.st_size > SIZE_MAX) {
		rc = taco_err_at(err, -EFBIG, path, "file too large to map");
		goto out;
	}
	f = file_new(path);
	if (!f) {
		rc = taco_err_at(err, -ENOMEM, path, "out of memory");
		goto out;
	}
	f->map_len = (size_t)st.st_size;
	f->map = mmap(NULL, f->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
	if (f->map == MAP_FAILED) {
		f->map = NULL;
		rc = -errno;
		taco_err_at(err, rc, path, "cannot mmap %zu bytes: %s",
			    f->map_len, strerror(-rc));
		goto out;
	}
	rc = parse_into(f, f->map, f->map_len, err);
out:
	if (fd >= 0)
		close(fd);
	if (rc != 0) {
		file_free(f);
		return rc;
	}
	*out = f;
	return 0;
}

void taco_st_close(taco_st_file *f)
{
	file_free(f);
}

const char *taco_st_path(const taco_st_file *f)
{
	return f ? f->path : NULL;
}

size_t taco_st_count(const taco_st_file *f)
{
	return f ? f->n : 0;
}

const taco_st_tensor *taco_st_get(const taco_st_file *f, size_t i)
{
	return f && i < f->n ? &f->t[i] : NULL;
}

static const taco_st_tensor *find_name(const taco_st_tensor *const *by_name,
				       size_t n, const char *name)
{
	taco_st_tensor key = {.name = name};
	const taco_st_tensor *kp = &key, *const * hit;

	if (!name || !n)
		return NULL;
	hit = bsearch(&kp, by_name, n, sizeof(*by_name), cmp_tensor_name);
	return hit ? *hit : NULL;
}

const taco_st_tensor *taco_st_find(const taco_st_file *f, const char *name)
{
	return f ? find_name(f->by_name, f->n, name) : NULL;
}

static int check_weight(const char *file, const char *name,
			const taco_st_tensor *t, const taco_st_tensor **out,
			taco_err *err)
{
	if (!t)
		return taco_err_at(err, -ENOENT, file, "tensor '%s' not found",
				   name ? name : "(null)");
	if (!taco_st_dtype_supported(t->dtype))
		return taco_err_at(
		    err, -ENOTSUP, file,
		    "tensor '%s': dtype %s is not supported as a model "
		    "weight (need F32, BF16 or F16)",
		    t->name, taco_st_dtype_name(t->dtype));
	*out = t;
	return 0;
}

int taco_st_weight(const taco_st_file *f, const char *name,
		   const taco_st_tensor **out, taco_err *err)
{
	if (!f)
		return taco_err_set(err, -EINVAL, "taco_st_weight: NULL file");
	return check_weight(f->path, name, taco_st_find(f, name), out, err);
}

size_t taco_st_meta_count(const taco_st_file *f)
{
	return f ? f->nmeta : 0;
}

int taco_st_meta_get(const taco_st_file *f, size_t i, const char **key,
		     const char **value)
{
	if (!f || i >= f->nmeta)
		return -ERANGE;
	if (key)
		*key = f->meta[2 * i];
	if (value)
		*value = f->meta[2 * i + 1];
	return 0;
}

const char *taco_st_meta(const taco_st_file *f, const char *key)
{
	const char *k[2] = {key, NULL};
	const char **hit;

	if (!f || !key || !f->nmeta)
		return NULL;
	hit = bsearch(k, f->meta, f->nmeta, 2 * sizeof(*f->meta), cmp_meta);
	return hit ? hit[1] : NULL;
}

/* ---- sharded models ---- */

static void model_free(taco_st_model *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->nshards; i++)
		file_free(m->shards ? m->shards[i] : NULL);
	free(m->shards);
	free(m->all);
	free(m->by_name);
	free(m->dir);
	free(m);
}

/* Fills m->all and m->by_name from the opened shards. */
static int model_index_tensors(taco_st_model *m, taco_err *err)
{
	size_t n = 0, k = 0;

	for (size_t s = 0; s < m->nshards; s++)
		n += m->shards[s]->n;
	m->all = malloc((n ? n : 1) * sizeof(*m->all));
	m->by_name = malloc((n ? n : 1) * sizeof(*m->by_name));
	if (!m->all || !m->by_name)
		return taco_err_at(err, -ENOMEM, m->dir,
				   "out of memory for %zu tensors", n);
	for (size_t s = 0; s < m->nshards; s++)
		for (size_t i = 0; i < m->shards[s]->n; i++)
			m->all[k++] = &m->shards[s]->t[i];
	m->n = n;
	memcpy(m->by_name, m->all, n * sizeof(*m->all));
	qsort(m->by_name, n, sizeof(*m->by_name), cmp_tensor_name);
	for (size_t i = 1; i < n; i++)
		if (strcmp(m->by_name[i - 1]->name, m->by_name[i]->name) == 0)
			return taco_err_at(
			    err, -EINVAL, m->dir,
			    "tensor '%s' appears in more than one shard",
			    m->by_name[i]->name);
	return 0;
}

/* Reads a small regular file (at most TACO_ST_MAX_HEADER_BYTES). */
static int read_small_file(const char *path, char **out, size_t *len,
			   taco_err *err)
{
	struct stat st;
	char *buf = NULL;
	size_t got = 0;
	int fd, rc = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		return taco_err_at(err, rc, path, "cannot open: %s",
				   strerror(-rc));
	}
	if (fstat(fd, &st) != 0) {
		rc = -errno;
		taco_err_at(err, rc, path, "cannot stat: %s", strerror(-rc));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = taco_err_at(err, -EINVAL, path, "not a regular file");
		goto out;
	}
	if (st.st_size > (off_t)TACO_ST_MAX_HEADER_BYTES) {
		rc = taco_err_at(err, -EINVAL, path,
				 "%lld bytes exceeds the limit of %u bytes",
				 (long long)st.st_size,
				 TACO_ST_MAX_HEADER_BYTES);
		goto out;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		rc = taco_err_at(err, -ENOMEM, path, "out of memory");
		goto out;
	}
	while (got < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = -errno;
			taco_err_at(err, rc, path, "read error: %s",
				    strerror(-rc));
			goto out;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	buf[got] = 0;
out:
	close(fd);
	if (rc != 0) {
		free(buf);
		return rc;
	}
	*out = buf;
	*len = got;
	return 0;
}

static int shard_name_ok(const char *s)
{
	size_t len = strlen(s);

	return len > 0 && len <= MAX_SHARD_NAME && !strchr(s, '/') &&
	       !strstr(s, "..") && strcmp(s, ".") != 0;
}

/* Opens the shards listed by the index at ipath into m. */
static int open_index(taco_st_model *m, const char *ipath, taco_err *err)
{
	const char **names = NULL, *key;
	json_t *root = NULL, *wm, *v;
	json_error_t jerr;
	char *text = NULL;
	size_t len = 0, klen, nn = 0, nu = 0;
	int rc;

	rc = read_small_file(ipath, &text, &len, err);
	if (rc != 0)
		return rc;
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		rc = taco_err_at(err, -EINVAL, ipath,
				 "invalid JSON at line %d column %d: %s",
				 jerr.line, jerr.column, jerr.text);
		goto out;
	}
	wm = json_object_get(root, "weight_map");
	if (!json_is_object(wm)) {
		rc = taco_err_at(err, -EINVAL, ipath,
				 "weight_map missing or not an object");
		goto out;
	}
	if (json_object_size(wm) == 0 ||
	    json_object_size(wm) > TACO_ST_MAX_TENSORS) {
		rc = taco_err_at(err, -EINVAL, ipath,
				 "weight_map lists %zu tensors (need 1 to %u)",
				 json_object_size(wm), TACO_ST_MAX_TENSORS);
		goto out;
	}
	names = malloc(json_object_size(wm) * sizeof(*names));
	if (!names) {
		rc = taco_err_at(err, -ENOMEM, ipath, "out of memory");
		goto out;
	}
	json_object_keylen_foreach(wm, key, klen, v)
	{
		const char *s = json_string_value(v);

		if (strlen(key) != klen || klen > TACO_ST_MAX_NAME) {
			rc = taco_err_at(err, -EINVAL, ipath,
					 "weight_map: bad tensor name '%.64s'",
					 key);
			goto out;
		}
		if (!s) {
			rc = taco_err_at(
			    err, -EINVAL, ipath,
			    "weight_map: tensor '%s': shard is not a "
			    "string",
			    key);
			goto out;
		}
		if (strlen(s) != json_string_length(v) || !shard_name_ok(s)) {
			rc = taco_err_at(
			    err, -EINVAL, ipath,
			    "weight_map: tensor '%s': shard '%.300s' is "
			    "not a plain file name",
			    key, s);
			goto out;
		}
		names[nn++] = s;
	}
	qsort(names, nn, sizeof(*names), cmp_str);
	for (size_t i = 0; i < nn; i++)
		if (nu == 0 || strcmp(names[nu - 1], names[i]) != 0)
			names[nu++] = names[i];
	if (nu > TACO_ST_MAX_SHARDS) {
		rc = taco_err_at(err, -EINVAL, ipath,
				 "weight_map names %zu shards, limit is %d", nu,
				 TACO_ST_MAX_SHARDS);
		goto out;
	}
	m->shards = calloc(nu, sizeof(*m->shards));
	if (!m->shards) {
		rc = taco_err_at(err, -ENOMEM, ipath, "out of memory");
		goto out;
	}
	for (size_t s = 0; s < nu; s++) {
		char *spath = taco_path_join(m->dir, names[s]);

		if (!spath) {
			rc = taco_err_at(err, -ENOMEM, ipath, "out of memory");
			goto out;
		}
		rc = taco_st_open(spath, &m->shards[s], err);
		free(spath);
		if (rc != 0)
			goto out;
		m->nshards = s + 1;
	}
	/* Every listed tensor is in its shard... */
	json_object_keylen_foreach(wm, key, klen, v)
	{
		const char *s = json_string_value(v), **hit;

		hit = bsearch(&s, names, nu, sizeof(*names), cmp_str);
		if (!hit || !taco_st_find(m->shards[hit - names], key)) {
			rc = taco_err_at(
			    err, -EINVAL, ipath,
			    "tensor '%s' listed for shard '%s' but not "
			    "found in it",
			    key, s);
			goto out;
		}
	}
	/* ...and no shard holds a tensor the index does not list for it. */
	for (size_t s = 0; s < nu; s++) {
		const taco_st_file *f = m->shards[s];

		for (size_t i = 0; i < f->n; i++) {
			const char *want = json_string_value(
			    json_object_get(wm, f->t[i].name));

			if (!want) {
				rc = taco_err_at(
				    err, -EINVAL, f->path,
				    "tensor '%s' is not listed in %s",
				    f->t[i].name, INDEX_NAME);
				goto out;
			}
			if (strcmp(want, names[s]) != 0) {
				rc = taco_err_at(
				    err, -EINVAL, f->path,
				    "tensor '%s' is listed in %s for "
				    "shard '%s'",
				    f->t[i].name, INDEX_NAME, want);
				goto out;
			}
		}
	}
	rc = 0;
out:
	free(names);
	json_decref(root);
	free(text);
	return rc;
}

int taco_st_open_model(const char *dir, taco_st_model **out, taco_err *err)
{
	taco_st_model *m = NULL;
	char *ipath = NULL, *spath = NULL;
	struct stat st;
	int rc;

	if (!dir)
		return taco_err_set(err, -EINVAL,
				    "taco_st_open_model: NULL dir");
	m = calloc(1, sizeof(*m));
	if (!m || !(m->dir = strdup(dir)) ||
	    !(ipath = taco_path_join(dir, INDEX_NAME)) ||
	    !(spath = taco_path_join(dir, SINGLE_NAME))) {
		rc = taco_err_at(err, -ENOMEM, dir, "out of memory");
		goto out;
	}
	if (stat(ipath, &st) == 0) {
		rc = open_index(m, ipath, err);
	} else if (errno != ENOENT) {
		rc = -errno;
		taco_err_at(err, rc, ipath, "cannot stat: %s", strerror(-rc));
	} else if (stat(spath, &st) == 0 || errno != ENOENT) {
		m->shards = calloc(1, sizeof(*m->shards));
		if (!m->shards) {
			rc = taco_err_at(err, -ENOMEM, dir, "out of memory");
			goto out;
		}
		rc = taco_st_open(spath, &m->shards[0], err);
		if (rc == 0)
			m->nshards = 1;
	} else {
		rc = taco_err_at(err, -ENOENT, dir,
				 "no %s or %s in this directory", SINGLE_NAME,
				 INDEX_NAME);
	}
	if (rc == 0)
		rc = model_index_tensors(m, err);
out:
	free(ipath);
	free(spath);
	if (rc != 0) {
		model_free(m);
		return rc;
	}
	*out = m;
	return 0;
}

void taco_st_model_close(taco_st_model *m)
{
	model_free(m);
}

size_t taco_st_model_count(const taco_st_model *m)
{
	return m ? m->n : 0;
}

const taco_st_tensor *taco_st_model_get(const taco_st_model *m, size_t i)
{
	return m && i < m->n ? m->all[i] : NULL;
}

const taco_st_tensor *taco_st_model_find(const taco_st_model *m,
					 const char *name)
{
	return m ? find_name(m->by_name, m->n, name) : NULL;
}

const taco_st_file *taco_st_model_file_of(const taco_st_model *m,
					  const taco_st_tensor *t)
{
	if (!m || !t)
		return NULL;
	for (size_t s = 0; s < m->nshards; s++) {
		const taco_st_file *f = m->shards[s];
		uintptr_t p = (uintptr_t)t, lo = (uintptr_t)f->t;

		if (f->n && p >= lo && p < lo + f->n * sizeof(*f->t))
			return f;
	}
	return NULL;
}

int taco_st_model_weight(const taco_st_model *m, const char *name,
			 const taco_st_tensor **out, taco_err *err)
{
	const taco_st_tensor *t;
	const taco_st_file *f;

	if (!m)
		return taco_err_set(err, -EINVAL,
				    "taco_st_model_weight: NULL model");
	t = taco_st_model_find(m, name);
	f = taco_st_model_file_of(m, t);
	return check_weight(f ? f->path : m->dir, name, t, out, err);
}

size_t taco_st_model_shard_count(const taco_st_model *m)
{
	return m ? m->nshards : 0;
}

const taco_st_file *taco_st_model_shard(const taco_st_model *m, size_t i)
{
	return m && i < m->nshards ? m->shards[i] : NULL;
}
