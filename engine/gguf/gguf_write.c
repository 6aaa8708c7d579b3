/* gguf_write.c: see gguf_write.h. */
#include "gguf_write.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/fsutil.h"

/* GGUF's value types (gguf.h, enum gguf_type). */
enum {
	GGUF_UINT32 = 4,
	GGUF_INT32 = 5,
	GGUF_FLOAT32 = 6,
	GGUF_BOOL = 7,
	GGUF_STRING = 8,
	GGUF_ARRAY = 9,
};

#define GGUF_MAX_KV 4096

typedef struct buf {
	uint8_t *p;
	size_t len, cap;
	int oom; /* a failed append: reported once, at begin */
} buf;

typedef struct tensor_info {
	uint64_t offset, nbytes;
} tensor_info;

struct taco_gguf {
	buf kv, ti;
	char **keys;
	size_t nkv;
	tensor_info *t;
	size_t nt, tcap;
	uint64_t data_size; /* aligned */
	/* writing */
	int fd;
	char *path, *tmp;
	size_t cur;	   /* tensor being written */
	uint64_t cur_left; /* its bytes still to come */
	uint64_t written;  /* data bytes written, padding included */
	uint8_t wbuf[1 << 16];
	size_t wlen;
};

static void put(buf *b, const void *p, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + n)
			cap *= 2;
		uint8_t *q = realloc(b->p, cap);
		if (!q) {
			b->oom = 1;
			return;
		}
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
}

/* GGUF is little endian; so is every machine tacod builds for (x86-64,
 * aarch64), which CMake checks. */
static void put_u32(buf *b, uint32_t v)
{
	put(b, &v, 4);
}
static void put_u64(buf *b, uint64_t v)
{
	put(b, &v, 8);
}
static void put_str(buf *b, const char *s)
{
	size_t n = strlen(s);
	put_u64(b, n);
	put(b, s, n);
}

int taco_ggml_block(int type, int *elems, int *bytes)
{
	switch (type) {
	case TACO_GGML_F32:
		*elems = 1, *bytes = 4;
		return 1;
	case TACO_GGML_F16:
	case TACO_GGML_BF16:
		*elems = 1, *bytes = 2;
		return 1;
	case TACO_GGML_Q8_0: /* ggml's block_q8_0: fp16 d, int8 qs[32] */
		*elems = 32, *bytes = 34;
		return 1;
	}
	return 0;
}

const char *taco_ggml_type_name(int type)
{
	switch (type) {
	case TACO_GGML_F32:
		return "f32";
	case TACO_GGML_F16:
		return "f16";
	case TACO_GGML_Q8_0:
		return "q8_0";
	case TACO_GGML_BF16:
		return "bf16";
	}
	return NULL;
}

int taco_gguf_new(taco_gguf **out, taco_err *err)
{
	taco_gguf *g = calloc(1, sizeof(*g));
	if (!g)
		return taco_err_set(err, -ENOMEM, "out of memory");
	g->fd = -1;
	*out = g;
	return 0;
}

void taco_gguf_free(taco_gguf *g)
{
	if (!g)
		return;
	if (g->fd >= 0) {
		close(g->fd);
		unlink(g->tmp);
	}
	for (size_t i = 0; i < g->nkv; i++)
		free(g->keys[i]);
	free(g->keys);
	free(g->kv.p);
	free(g->ti.p);
	free(g->t);
	free(g->path);
	free(g->tmp);
	free(g);
}

/* The key's entry, written up to its value. */
static int kv_begin(taco_gguf *g, const char *key, uint32_t type)
{
	char **k;

	if (!key || !*key || g->nkv >= GGUF_MAX_KV)
		return -EINVAL;
	for (size_t i = 0; i < g->nkv; i++)
		if (!strcmp(g->keys[i], key))
			return -EEXIST;
	if (!(k = realloc(g->keys, (g->nkv + 1) * sizeof(*k))))
		return -ENOMEM;
	g->keys = k;
	if (!(k[g->nkv] = strdup(key)))
		return -ENOMEM;
	g->nkv++;
	put_str(&g->kv, key);
	put_u32(&g->kv, type);
	return g->kv.oom ? -ENOMEM : 0;
}

int taco_gguf_kv_u32(taco_gguf *g, const char *key, uint32_t v)
{
	int r = kv_begin(g, key, GGUF_UINT32);
	if (!r)
		put_u32(&g->kv, v);
	return r;
}

int taco_gguf_kv_i32(taco_gguf *g, const char *key, int32_t v)
{
	int r = kv_begin(g, key, GGUF_INT32);
	if (!r)
		put(&g->kv, &v, 4);
	return r;
}

int taco_gguf_kv_f32(taco_gguf *g, const char *key, float v)
{
	int r = kv_begin(g, key, GGUF_FLOAT32);
	if (!r)
		put(&g->kv, &v, 4);
	return r;
}

int taco_gguf_kv_bool(taco_gguf *g, const char *key, int v)
{
	uint8_t b = v != 0;
	int r = kv_begin(g, key, GGUF_BOOL);
	if (!r)
		put(&g->kv, &b, 1);
	return r;
}

int taco_gguf_kv_str(taco_gguf *g, const char *key, const char *v)
{
	int r = kv_begin(g, key, GGUF_STRING);
	if (!r)
		put_str(&g->kv, v);
	return r;
}

int taco_gguf_kv_str_array(taco_gguf *g, const char *key, const char *const *v,
			   size_t n)
{
	int r = kv_begin(g, key, GGUF_ARRAY);
	if (r)
		return r;
	put_u32(&g->kv, GGUF_STRING);
	put_u64(&g->kv, n);
	for (size_t i = 0; i < n; i++)
		put_str(&g->kv, v[i]);
	return g->kv.oom ? -ENOMEM : 0;
}

int taco_gguf_kv_i32_array(taco_gguf *g, const char *key, const int32_t *v,
			   size_t n)
{
	int r = kv_begin(g, key, GGUF_ARRAY);
	if (r)
		return r;
	put_u32(&g->kv, GGUF_INT32);
	put_u64(&g->kv, n);
	put(&g->kv, v, 4 * n);
	return g->kv.oom ? -ENOMEM : 0;
}

static uint64_t align_up(uint64_t x)
{
	return (x + TACO_GGUF_ALIGNMENT - 1) / TACO_GGUF_ALIGNMENT *
	       TACO_GGUF_ALIGNMENT;
}

int taco_gguf_add_tensor(taco_gguf *g, const char *name, int type, int ndim,
			 const int64_t *shape, uint64_t *nbytes, taco_err *err)
{
	int be, bb;
	uint64_t n = 1;

	if (strlen(name) >= TACO_GGUF_MAX_NAME)
		return taco_err_set(err, -EINVAL,
				    "%s: a GGUF tensor name has at most %d "
				    "bytes",
				    name, TACO_GGUF_MAX_NAME - 1);
	if (ndim < 1 || ndim > TACO_GGUF_MAX_DIMS ||
	    g->nt >= TACO_GGUF_MAX_TENSORS || !taco_ggml_block(type, &be, &bb))
		return taco_err_set(err, -EINVAL, "%s: bad tensor", name);
	for (int d = 0; d < ndim; d++) {
		if (shape[d] < 1 || shape[d] > (INT64_C(1) << 40))
			return taco_err_set(err, -EINVAL,
					    "%s: dimension %d is %lld", name, d,
					    (long long)shape[d]);
		if (n > (UINT64_C(1) << 50) / (uint64_t)shape[d])
			return taco_err_set(err, -EFBIG, "%s: too large", name);
		n *= (uint64_t)shape[d];
	}
	if (shape[ndim - 1] % be)
		return taco_err_set(err, -EINVAL,
				    "%s: %s needs rows of a multiple of %d "
				    "values, not %lld",
				    name, taco_ggml_type_name(type), be,
				    (long long)shape[ndim - 1]);
	if (g->nt == g->tcap) {
		size_t cap = g->tcap ? 2 * g->tcap : 64;
		tensor_info *t = realloc(g->t, cap * sizeof(*t));
		if (!t)
			return taco_err_set(err, -ENOMEM, "out of memory");
		g->t = t;
		g->tcap = cap;
	}
	n = n / (uint64_t)be * (uint64_t)bb;
	put_str(&g->ti, name);
	put_u32(&g->ti, (uint32_t)ndim);
	for (int d = ndim - 1; d >= 0; d--)
		put_u64(&g->ti, (uint64_t)shape[d]);
	put_u32(&g->ti, (uint32_t)type);
	put_u64(&g->ti, g->data_size);
	if (g->ti.oom)
		return taco_err_set(err, -ENOMEM, "out of memory");
	g->t[g->nt].offset = g->data_size;
	g->t[g->nt].nbytes = n;
	g->nt++;
	g->data_size = align_up(g->data_size + n);
	if (nbytes)
		*nbytes = n;
	return 0;
}

static uint64_t header_size(const taco_gguf *g)
{
	return 4 + 4 + 8 + 8 + g->kv.len + g->ti.len;
}

uint64_t taco_gguf_file_size(const taco_gguf *g)
{
	return align_up(header_size(g)) + g->data_size;
}

static int flush(taco_gguf *g, taco_err *err)
{
	size_t off = 0;
	while (off < g->wlen) {
		ssize_t w = write(g->fd, g->wbuf + off, g->wlen - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return taco_err_set(err, w < 0 ? -errno : -EIO,
					    "%s: %s", g->tmp,
					    strerror(w < 0 ? errno : EIO));
		off += (size_t)w;
	}
	g->wlen = 0;
	return 0;
}

static int emit(taco_gguf *g, const void *p, size_t n, taco_err *err)
{
	const uint8_t *s = p;
	int r;
	while (n) {
		size_t k = sizeof(g->wbuf) - g->wlen;
		if (k > n)
			k = n;
		memcpy(g->wbuf + g->wlen, s, k);
		g->wlen += k, s += k, n -= k;
		if (g->wlen == sizeof(g->wbuf) && (r = flush(g, err)))
			return r;
	}
	return 0;
}

static int pad(taco_gguf *g, uint64_t upto, uint64_t *pos, taco_err *err)
{
	static const uint8_t zero[TACO_GGUF_ALIGNMENT];
	int r = 0;
	while (*pos < upto && !r) {
		uint64_t k = upto - *pos;
		if (k > sizeof(zero))
			k = sizeof(zero);
		r = emit(g, zero, (size_t)k, err);
		*pos += k;
	}
	return r;
}

/* Past the tensors that are complete (zero-sized ones included), padding
 * each to the alignment. */
static int advance(taco_gguf *g, taco_err *err)
{
	int r;
	while (g->cur < g->nt && !g->cur_left) {
		uint64_t end = g->t[g->cur].offset + g->t[g->cur].nbytes;
		if ((r = pad(g, align_up(end), &g->written, err)))
			return r;
		if (++g->cur < g->nt)
			g->cur_left = g->t[g->cur].nbytes;
	}
	return 0;
}

int taco_gguf_begin(taco_gguf *g, const char *path, taco_err *err)
{
	buf h = {0};
	uint64_t pos;
	int r;

	if (g->kv.oom || g->ti.oom)
		return taco_err_set(err, -ENOMEM, "out of memory");
	if (g->fd >= 0)
		return taco_err_set(err, -EINVAL, "%s: already begun", path);
	if (!(g->path = strdup(path)) ||
	    asprintf(&g->tmp, "%s.tmp-%d", path, (int)getpid()) < 0) {
		g->tmp = NULL;
		return taco_err_set(err, -ENOMEM, "out of memory");
	}
	g->fd = open(g->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (g->fd < 0)
		return taco_err_set(err, -errno, "%s: %s", g->tmp,
				    strerror(errno));
	put(&h, "GGUF", 4);
	put_u32(&h, 3);
	put_u64(&h, g->nt);
	put_u64(&h, g->nkv);
	if (h.oom)
		return taco_err_set(err, -ENOMEM, "out of memory");
	r = emit(g, h.p, h.len, err);
	free(h.p);
	if (r || (r = emit(g, g->kv.p, g->kv.len, err)) ||
	    (r = emit(g, g->ti.p, g->ti.len, err)))
		return r;
	pos = header_size(g);
	if ((r = pad(g, align_up(pos), &pos, err)))
		return r;
	g->cur = 0;
	g->written = 0;
	g->cur_left = g->nt ? g->t[0].nbytes : 0;
	return advance(g, err);
}

int taco_gguf_write_data(taco_gguf *g, const void *data, size_t len,
			 taco_err *err)
{
	const uint8_t *p = data;
	int r;

	while (len) {
		if (g->fd < 0 || g->cur >= g->nt)
			return taco_err_set(err, -EINVAL,
					    "%s: more tensor data than the "
					    "tensors hold",
					    g->path ? g->path : "gguf");
		uint64_t k = g->cur_left < len ? g->cur_left : len;
		if ((r = emit(g, p, (size_t)k, err)))
			return r;
		p += k, len -= (size_t)k;
		g->cur_left -= k;
		g->written += k;
		if ((r = advance(g, err)))
			return r;
	}
	return 0;
}

int taco_gguf_finish(taco_gguf *g, taco_err *err)
{
	int r;

	if (g->fd < 0 || g->cur < g->nt)
		return taco_err_set(err, -EINVAL,
				    "%s: tensor %zu of %zu not written",
				    g->path ? g->path : "gguf", g->cur, g->nt);
	if ((r = flush(g, err)))
		return r;
	if (fsync(g->fd))
		return taco_err_set(err, -errno, "%s: fsync: %s", g->tmp,
				    strerror(errno));
	if (close(g->fd)) {
		g->fd = -1;
		unlink(g->tmp);
		return taco_err_set(err, -errno, "%s: %s", g->tmp,
				    strerror(errno));
	}
	g->fd = -1;
	if (rename(g->tmp, g->path)) {
		r = -errno;
		unlink(g->tmp);
		return taco_err_set(err, r, "%s: %s", g->path, strerror(-r));
	}
	return 0;
}
