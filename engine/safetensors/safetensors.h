/* safetensors.h: reading and writing Hugging Face safetensors files.
 *
 * File format: an 8-byte little-endian u64 N, then N bytes of JSON header
 *   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
 *    ..., "__metadata__": {"key": "value", ...}}
 * (possibly padded with trailing spaces), then the data region. Offsets are
 * relative to the start of the data region; tensors are row-major, little
 * endian.
 *
 * Every function returns 0 or a negative errno code (-EINVAL for a malformed
 * file or argument or an exceeded limit, -ENOMEM, or the errno of a failed
 * system call) and fills a taco_err naming the file and the tensor or field
 * at fault. Output parameters are set
 * only on success. Nothing here prints.
 *
 * Parsing is strict: the header must fit in the file and in
 * TACO_ST_MAX_HEADER_BYTES, the JSON must be an object without duplicate keys,
 * every tensor needs a known dtype, a shape of at most TACO_ST_MAX_DIMS
 * non-negative integers whose byte size does not overflow, and data_offsets
 * [begin, end] with begin <= end <= data region size and end - begin equal to
 * the byte size of the shape. Tensors may not overlap (gaps and trailing bytes
 * are allowed). Dtypes other than F32/BF16/F16 are parsed and kept, so a file
 * holding e.g. an I64 tensor can still be read for its other tensors; ask
 * taco_st_dtype_supported() / taco_st_weight() before using a tensor as a
 * model weight.
 */
#ifndef TACO_SAFETENSORS_H
#define TACO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "tk_ops.h"
#include "util/taco_err.h"

/* Limits enforced by the reader (and by the writer, so that everything it
 * writes can be read back). */
#define TACO_ST_MAX_HEADER_BYTES (100u << 20) /* JSON header length N */
#define TACO_ST_MAX_TENSORS 1000000u	      /* tensors per file */
#define TACO_ST_MAX_DIMS 8		      /* dims per tensor */
#define TACO_ST_MAX_NAME 512		      /* bytes per tensor name */
#define TACO_ST_MAX_SHARDS 4096		      /* shards per model */

/* Dtypes: TK_F32, TK_BF16, TK_F16 (enum tk_dtype, the ones the engine can use
 * as weights) plus the other safetensors dtypes, which are parsed and written
 * but not supported as weights. */
enum taco_st_dtype {
	TACO_ST_F64 = 16,
	TACO_ST_I64,
	TACO_ST_U64,
	TACO_ST_I32,
	TACO_ST_U32,
	TACO_ST_I16,
	TACO_ST_U16,
	TACO_ST_I8,
	TACO_ST_U8,
	TACO_ST_BOOL,
	TACO_ST_F8_E4M3,
	TACO_ST_F8_E5M2,
	TACO_ST_F8_E8M0,
};

/* 1 for TK_F32, TK_BF16, TK_F16; 0 for every other value. */
int taco_st_dtype_supported(int dtype);
/* Bytes per element (0 for an unknown dtype). */
size_t taco_st_dtype_size(int dtype);
/* The safetensors spelling ("F32", "BF16", "I64", ...), or NULL if unknown. */
const char *taco_st_dtype_name(int dtype);
/* Inverse of taco_st_dtype_name: the dtype, or -1 if unknown. */
int taco_st_dtype_from_name(const char *name);

/* One tensor. For a parsed file, name is owned by the taco_st_file and data
 * points into the file's bytes (the caller's buffer for taco_st_parse, the
 * mapping for taco_st_open), valid until taco_st_close; data may be
 * unaligned: copy or convert it, do not cast it to float *. For the writer, the
 * caller fills every field; data may be NULL when nbytes is 0. */
typedef struct taco_st_tensor {
	const char *name;
	int dtype;
	int ndim; /* 0..TACO_ST_MAX_DIMS; 0 is a scalar (one element) */
	int64_t shape[TACO_ST_MAX_DIMS];
	uint64_t nbytes; /* product(shape) * taco_st_dtype_size(dtype) */
	const void *data;
} taco_st_tensor;

typedef struct taco_st_file taco_st_file;

/* Parses a safetensors file held in memory (buf, len are the whole file).
 * The result references buf, which must outlive it; it does not own it.
 * filename_for_errors (NULL: "<memory>") prefixes every error message. */
int taco_st_parse(const void *buf, size_t len, const char *filename_for_errors,
		  taco_st_file **out, taco_err *err);

/* Opens path, maps it read-only and parses it. The mapping lives until
 * taco_st_close; truncating the file meanwhile gives SIGBUS on access, as
 * with any mmap. */
int taco_st_open(const char *path, taco_st_file **out, taco_err *err);

/* Frees f and unmaps it if it was opened by taco_st_open. NULL is a no-op. */
void taco_st_close(taco_st_file *f);

/* The name used in error messages (the path for taco_st_open). */
const char *taco_st_path(const taco_st_file *f);

/* Tensors in data-region order (ascending data_offsets begin; at equal
 * begins, zero-byte tensors first, then by name). The writer's order for a
 * file it wrote. */
size_t taco_st_count(const taco_st_file *f);
/* NULL if i >= count. */
const taco_st_tensor *taco_st_get(const taco_st_file *f, size_t i);
/* Lookup by exact name (binary search); NULL if absent. */
const taco_st_tensor *taco_st_find(const taco_st_file *f, const char *name);

/* Looks a tensor up for use as a model weight: -ENOENT if absent, -ENOTSUP
 * if its dtype is not F32/BF16/F16; the message names the file and tensor. */
int taco_st_weight(const taco_st_file *f, const char *name,
		   const taco_st_tensor **out, taco_err *err);

/* "__metadata__" entries (string to string), sorted by key. */
size_t taco_st_meta_count(const taco_st_file *f);
/* Sets *key and *value for entry i; returns 0, or -ERANGE if i >= count. */
int taco_st_meta_get(const taco_st_file *f, size_t i, const char **key,
		     const char **value);
/* The value for key, or NULL. */
const char *taco_st_meta(const taco_st_file *f, const char *key);

/* A model: dir/model.safetensors, or the shards listed by
 * dir/model.safetensors.index.json (which takes precedence when present).
 * With an index, shard names must be plain file names (no '/', no ".."),
 * there may be at most TACO_ST_MAX_SHARDS distinct shards, every tensor of
 * "weight_map" must be in its shard and no shard may hold a tensor the index
 * does not list for it. */
typedef struct taco_st_model taco_st_model;

int taco_st_open_model(const char *dir, taco_st_model **out, taco_err *err);
void taco_st_model_close(taco_st_model *m);

/* All tensors: shard by shard (shards in file-name order), each shard in
 * data-region order. */
size_t taco_st_model_count(const taco_st_model *m);
const taco_st_tensor *taco_st_model_get(const taco_st_model *m, size_t i);
const taco_st_tensor *taco_st_model_find(const taco_st_model *m,
					 const char *name);
/* The shard holding a tensor found in m (NULL if t is not one of m's). */
const taco_st_file *taco_st_model_file_of(const taco_st_model *m,
					  const taco_st_tensor *t);
/* As taco_st_weight, over all shards; the message names the shard file. */
int taco_st_model_weight(const taco_st_model *m, const char *name,
			 const taco_st_tensor **out, taco_err *err);
size_t taco_st_model_shard_count(const taco_st_model *m);
const taco_st_file *taco_st_model_shard(const taco_st_model *m, size_t i);

/* Writes n tensors to path: header with data_offsets in the given order,
 * padded with spaces so the data region starts at a multiple of 8 bytes,
 * then the data. meta_kv is NULL or a NULL-terminated list key, value, key,
 * value, ... stored as "__metadata__". Any dtype with a known size is
 * written. Names must be unique, valid UTF-8, at most TACO_ST_MAX_NAME bytes
 * and not "__metadata__".
 *
 * The bytes go to "path.tmp.<pid>", which is fsynced, renamed over path, and
 * then the directory is fsynced. On any error before the rename the
 * temporary file is removed and a previous file at path is left untouched.
 * (A failing directory fsync after the rename is reported, but the new file
 * is then already in place.) Tensor data may point into a mapping of the
 * file being replaced. */
int taco_st_write(const char *path, const taco_st_tensor *tensors, size_t n,
		  const char *const *meta_kv, taco_err *err);

/* Writes a model into directory dir (created if missing, one level).
 * Tensors fill shards greedily in the given order: a tensor opens a new
 * shard when it would push the current non-empty shard past max_shard_bytes
 * (> 0; counts tensor data bytes), so a tensor larger than max_shard_bytes
 * gets a shard of its own. With one shard, writes dir/model.safetensors and
 * removes a stale dir/model.safetensors.index.json. Otherwise writes the
 * shards as
 * model-00001-of-0000N.safetensors ..., then writes
 * model.safetensors.index.json ({"metadata": {"total_size": bytes},
 * "weight_map": {tensor: shard}}) atomically as the commit point, and removes
 * a stale dir/model.safetensors. Each shard carries metadata
 * {"format": "pt"}. Old shards with other names are not removed. On error,
 * shards written so far stay but no index is written for them. */
int taco_st_write_sharded(const char *dir, const taco_st_tensor *tensors,
			  size_t n, uint64_t max_shard_bytes, taco_err *err);

#endif
