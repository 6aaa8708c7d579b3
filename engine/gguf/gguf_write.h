/* gguf_write.h: a GGUF version 3 file, written in one pass.
 *
 * Layout (llama.cpp's gguf.cpp reads it so): "GGUF", u32 version 3,
 * u64 tensor count, u64 key-value count; the key-values (a string key,
 * a u32 type, the value); the tensor infos (a string name, u32 n_dims,
 * u64 ne[n_dims] innermost first, u32 ggml type, u64 offset into the data);
 * zero padding to the alignment (32); the tensors' data, each starting at
 * an aligned offset. Strings are a u64 length and the bytes, no NUL.
 *
 * The caller adds every key-value and tensor info first, then streams the
 * tensors' bytes in the order they were added. Nothing is held but the
 * header: a 70B export does not need 140 GB of memory. */
#ifndef TACO_GGUF_WRITE_H
#define TACO_GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "util/taco_err.h"

#define TACO_GGUF_ALIGNMENT 32
#define TACO_GGUF_MAX_TENSORS 1000000
#define TACO_GGUF_MAX_NAME 64 /* llama.cpp's GGML_MAX_NAME, NUL included */
#define TACO_GGUF_MAX_DIMS 4

/* ggml's tensor types (ggml.h, enum ggml_type): the ones written here. */
enum taco_ggml_type {
	TACO_GGML_F32 = 0,
	TACO_GGML_F16 = 1,
	TACO_GGML_Q8_0 = 8,
	TACO_GGML_BF16 = 30,
};

/* Elements per block and bytes per block of a type; 0 for another. */
int taco_ggml_block(int type, int *elems, int *bytes);
/* ggml's name for a type ("f32", "f16", "q8_0", "bf16"); NULL else. */
const char *taco_ggml_type_name(int type);

typedef struct taco_gguf taco_gguf;

int taco_gguf_new(taco_gguf **out, taco_err *err);
void taco_gguf_free(taco_gguf *g);

/* Key-values, in the order added. Keys must be unique (-EEXIST). */
int taco_gguf_kv_u32(taco_gguf *g, const char *key, uint32_t v);
int taco_gguf_kv_i32(taco_gguf *g, const char *key, int32_t v);
int taco_gguf_kv_f32(taco_gguf *g, const char *key, float v);
int taco_gguf_kv_bool(taco_gguf *g, const char *key, int v);
int taco_gguf_kv_str(taco_gguf *g, const char *key, const char *v);
int taco_gguf_kv_str_array(taco_gguf *g, const char *key, const char *const *v,
			   size_t n);
int taco_gguf_kv_i32_array(taco_gguf *g, const char *key, const int32_t *v,
			   size_t n);

/* A tensor of shape[ndim] (row-major, outermost first, as safetensors and
 * numpy spell it; GGUF stores the reverse). The innermost dimension must
 * be a whole number of the type's blocks. Returns its data size in bytes
 * through *nbytes (optional). */
int taco_gguf_add_tensor(taco_gguf *g, const char *name, int type, int ndim,
			 const int64_t *shape, uint64_t *nbytes, taco_err *err);

/* The file's size once written. */
uint64_t taco_gguf_file_size(const taco_gguf *g);

/* Opens path's temporary sibling and writes the header: 0 or a negative
 * errno. Then taco_gguf_write_data for each tensor's bytes, in order and
 * in pieces of any size; then taco_gguf_finish, which checks that every
 * byte came, fsyncs and renames the file to path. taco_gguf_free of an
 * unfinished writer removes the temporary file. */
int taco_gguf_begin(taco_gguf *g, const char *path, taco_err *err);
int taco_gguf_write_data(taco_gguf *g, const void *data, size_t len,
			 taco_err *err);
int taco_gguf_finish(taco_gguf *g, taco_err *err);

#endif
