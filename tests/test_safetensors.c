/* test_safetensors.c: safetensors reader, writer and sharded models. */
#include "safetensors/safetensors.h"
#include "testutil.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers ---- */

static char *make_tmpdir(void)
{
	const char *base = getenv("TMPDIR");
	char *t = malloc(4096);

	ck_assert_ptr_nonnull(t);
	snprintf(t, 4096, "%s/taco_st_XXXXXX", base && *base ? base : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(t));
	return t;
}

static int rm_entry(const char *path, const struct stat *sb, int flag,
		    struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void rm_tree(char *dir)
{
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(dir);
}

static char *pjoin(const char *dir, const char *name)
{
	static char buf[4][4096];
	static int k;
	char *b = buf[k++ & 3];

	snprintf(b, 4096, "%s/%s", dir, name);
	return b;
}

/* Number of entries in dir whose name contains needle. */
static int count_entries(const char *dir, const char *needle)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)))
		if (strstr(e->d_name, needle))
			n++;
	closedir(d);
	return n;
}

static void write_bytes(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");

	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(p, 1, n, f), n);
	ck_assert_int_eq(fclose(f), 0);
}

static void write_text(const char *path, const char *s)
{
	write_bytes(path, s, strlen(s));
}

static taco_st_tensor mk(const char *name, int dtype, int ndim,
			 const int64_t *shape, const void *data)
{
	taco_st_tensor t = {.name = name, .dtype = dtype, .ndim = ndim};
	uint64_t n = 1;

	for (int d = 0; d < ndim; d++) {
		t.shape[d] = shape[d];
		n *= (uint64_t)shape[d];
	}
	t.nbytes = n * taco_st_dtype_size(dtype);
	t.data = data;
	return t;
}

static void fill_bytes(void *p, size_t n, uint64_t seed)
{
	unsigned char *b = p;

	for (size_t i = 0; i < n; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		b[i] = (unsigned char)(seed >> 56);
	}
}

static void assert_same(const taco_st_tensor *got, const taco_st_tensor *want)
{
	ck_assert_ptr_nonnull(got);
	ck_assert_str_eq(got->name, want->name);
	ck_assert_int_eq(got->dtype, want->dtype);
	ck_assert_int_eq(got->ndim, want->ndim);
	for (int d = 0; d < want->ndim; d++)
		ck_assert_int_eq(got->shape[d], want->shape[d]);
	ck_assert_uint_eq(got->nbytes, want->nbytes);
	if (want->nbytes)
		ck_assert_int_eq(memcmp(got->data, want->data, want->nbytes),
				 0);
}

/* A file image: le64(strlen(hdr)) + hdr + data_len zero bytes. */
static unsigned char *image(const char *hdr, size_t data_len, size_t *len)
{
	size_t h = strlen(hdr);
	unsigned char *b = calloc(1, 8 + h + data_len + 1);

	ck_assert_ptr_nonnull(b);
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)((uint64_t)h >> (8 * i));
	memcpy(b + 8, hdr, h);
	*len = 8 + h + data_len;
	return b;
}

/* ---- dtypes ---- */

START_TEST(test_dtypes)
{
	ck_assert(taco_st_dtype_supported(TK_F32));
	ck_assert(taco_st_dtype_supported(TK_BF16));
	ck_assert(taco_st_dtype_supported(TK_F16));
	ck_assert(!taco_st_dtype_supported(TACO_ST_I64));
	ck_assert(!taco_st_dtype_supported(TACO_ST_F8_E4M3));
	ck_assert(!taco_st_dtype_supported(-1));
	ck_assert_uint_eq(taco_st_dtype_size(TK_F32), 4);
	ck_assert_uint_eq(taco_st_dtype_size(TK_BF16), 2);
	ck_assert_uint_eq(taco_st_dtype_size(TACO_ST_F64), 8);
	ck_assert_uint_eq(taco_st_dtype_size(TACO_ST_BOOL), 1);
	ck_assert_uint_eq(taco_st_dtype_size(999), 0);
	ck_assert_str_eq(taco_st_dtype_name(TK_BF16), "BF16");
	ck_assert_str_eq(taco_st_dtype_name(TACO_ST_F8_E5M2), "F8_E5M2");
	ck_assert_ptr_null(taco_st_dtype_name(999));
	ck_assert_int_eq(taco_st_dtype_from_name("F16"), TK_F16);
	ck_assert_int_eq(taco_st_dtype_from_name("U8"), TACO_ST_U8);
	ck_assert_int_eq(taco_st_dtype_from_name("f32"), -1);
	ck_assert_int_eq(taco_st_dtype_from_name(NULL), -1);
}
END_TEST

/* ---- single-file round trip ---- */

enum { NT = 10 };
static float f_a[6], f_b[4], f_c[1];
static uint16_t bf_a[15], bf_b[7], h_a[8], h_b[3];
static int64_t i64_a[3];
static uint8_t u8_a[5];
static taco_st_tensor ts[NT];

static void make_tensors(void)
{
	static const int64_t s23[] = {2, 3}, s4[] = {4}, s35[] = {3, 5},
			     s7[] = {7}, s222[] = {2, 2, 2}, s3[] = {3},
			     s5[] = {5}, s04[] = {0, 4};
	uint64_t st = 42;

	tu_fill_uniform(f_a, 6, -1, 1, &st);
	tu_fill_uniform(f_b, 4, -1, 1, &st);
	tu_fill_uniform(f_c, 1, -1, 1, &st);
	fill_bytes(bf_a, sizeof(bf_a), 1);
	fill_bytes(bf_b, sizeof(bf_b), 2);
	fill_bytes(h_a, sizeof(h_a), 3);
	fill_bytes(h_b, sizeof(h_b), 4);
	fill_bytes(i64_a, sizeof(i64_a), 5);
	fill_bytes(u8_a, sizeof(u8_a), 6);
	ts[0] = mk("model.embed_tokens.weight", TK_F32, 2, s23, f_a);
	ts[1] = mk("model.norm.weight", TK_F32, 1, s4, f_b);
	ts[2] = mk("scalar", TK_F32, 0, NULL, f_c);
	ts[3] = mk("model.layers.0.mlp.up_proj.weight", TK_BF16, 2, s35, bf_a);
	ts[4] = mk("bf.vec", TK_BF16, 1, s7, bf_b);
	ts[5] = mk("h.cube", TK_F16, 3, s222, h_a);
	ts[6] = mk("h.odd \"quoted\" \xc3\xa9", TK_F16, 1, s3, h_b);
	ts[7] = mk("positions", TACO_ST_I64, 1, s3, i64_a);
	ts[8] = mk("mask", TACO_ST_U8, 1, s5, u8_a);
	ts[9] = mk("empty", TK_F32, 2, s04, NULL);
}

START_TEST(test_roundtrip)
{
	static const char *const meta[] = {"format", "pt", "note", "hello",
					   NULL};
	char *dir = make_tmpdir();
	const char *path = pjoin(dir, "model.safetensors");
	const taco_st_tensor *w = NULL;
	taco_st_file *f = NULL, *g = NULL;
	unsigned char *bytes;
	const char *k, *v;
	taco_err err;
	size_t len;
	uint64_t hlen = 0;

	make_tensors();
	ck_assert_int_eq(taco_st_write(path, ts, NT, meta, &err), 0);
	ck_assert_int_eq(count_entries(dir, ".tmp."), 0);

	/* Layout: header length a multiple of 8, space padding. */
	bytes = (unsigned char *)tu_read_file(path, &len);
	ck_assert_ptr_nonnull(bytes);
	for (int i = 7; i >= 0; i--)
		hlen = hlen << 8 | bytes[i];
	ck_assert_uint_eq(hlen % 8, 0);
	ck_assert_int_eq(bytes[8], '{');
	ck_assert_uint_eq(len,
			  8 + hlen + 24 + 16 + 4 + 30 + 14 + 16 + 6 + 24 + 5);

	ck_assert_int_eq(taco_st_open(path, &f, &err), 0);
	ck_assert_str_eq(taco_st_path(f), path);
	ck_assert_uint_eq(taco_st_count(f), NT);
	for (size_t i = 0; i < NT; i++) {
		assert_same(taco_st_find(f, ts[i].name), &ts[i]);
		/* data order is write order */
		ck_assert_str_eq(taco_st_get(f, i)->name, ts[i].name);
	}
	ck_assert_ptr_null(taco_st_get(f, NT));
	ck_assert_ptr_null(taco_st_find(f, "nope"));

	ck_assert_uint_eq(taco_st_meta_count(f), 2);
	ck_assert_str_eq(taco_st_meta(f, "format"), "pt");
	ck_assert_str_eq(taco_st_meta(f, "note"), "hello");
	ck_assert_ptr_null(taco_st_meta(f, "other"));
	ck_assert_int_eq(taco_st_meta_get(f, 0, &k, &v), 0);
	ck_assert_str_eq(k, "format");
	ck_assert_str_eq(v, "pt");
	ck_assert_int_eq(taco_st_meta_get(f, 2, &k, &v), -ERANGE);

	/* weights */
	ck_assert_int_eq(taco_st_weight(f, "h.cube", &w, &err), 0);
	ck_assert_ptr_eq(w, taco_st_find(f, "h.cube"));
	w = NULL;
	ck_assert_int_eq(taco_st_weight(f, "positions", &w, &err), -ENOTSUP);
	ck_assert_ptr_null(w);
	ck_assert_ptr_nonnull(strstr(err.msg, path));
	ck_assert_ptr_nonnull(strstr(err.msg, "tensor 'positions': dtype I64"));
	ck_assert_int_eq(taco_st_weight(f, "ghost", &w, &err), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err.msg, "tensor 'ghost' not found"));

	/* the same bytes parsed from memory */
	ck_assert_int_eq(taco_st_parse(bytes, len, NULL, &g, &err), 0);
	ck_assert_str_eq(taco_st_path(g), "<memory>");
	ck_assert_uint_eq(taco_st_count(g), NT);
	for (size_t i = 0; i < NT; i++)
		assert_same(taco_st_find(g, ts[i].name), &ts[i]);

	taco_st_close(g);
	taco_st_close(f);
	taco_st_close(NULL);
	free(bytes);
	rm_tree(dir);
}
END_TEST

START_TEST(test_parse_valid_edges)
{
	static const char *const ok[] = {
	    "{}",
	    "{}       ",
	    "{\"__metadata__\":null}",
	    "{\"__metadata__\":{}}",
	    "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}"
	    ",\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]"
	    "}}",
	    /* gap between tensors and trailing bytes are allowed */
	    "{\"b\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[4,6]"
	    ",\"extra\":1},\"a\":{\"dtype\":\"U8\",\"shape\":[],"
	    "\"data_offsets\":[1,2]}}",
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		size_t len;
		unsigned char *b = image(ok[i], 8, &len);
		taco_st_file *f = NULL;
		taco_err err = {{0}};

		ck_assert_msg(taco_st_parse(b, len, "ok", &f, &err) == 0,
			      "case %zu: %s", i, err.msg);
		if (i == 5) {
			ck_assert_uint_eq(taco_st_count(f), 2);
			ck_assert_str_eq(taco_st_get(f, 0)->name, "a");
			ck_assert_ptr_eq(taco_st_get(f, 0)->data,
					 b + 8 + strlen(ok[i]) + 1);
			ck_assert_int_eq(taco_st_get(f, 0)->ndim, 0);
			ck_assert_uint_eq(taco_st_get(f, 0)->nbytes, 1);
		}
		taco_st_close(f);
		free(b);
	}
}
END_TEST

/* ---- malformed headers ---- */

struct bad_case {
	const char *hdr;
	size_t data_len;
	const char *frag;
};

#define T1(dt, shape, offs)                                                    \
	"{\"w\":{\"dtype\":\"" dt "\",\"shape\":" shape                        \
	",\"data_offsets\":" offs "}}"

START_TEST(test_malformed_headers)
{
	static char longname[1200];
	static const struct bad_case cases[] = {
	    {"[1,2]", 0, "JSON header is not an object"},
	    {"\"x\"", 0, "JSON header is not an object"},
	    {"{", 0, "invalid JSON header"},
	    {"", 0, "invalid JSON header"},
	    {"{} x", 0, "invalid JSON header"},
	    {"{\"w\":1}", 0, "tensor 'w': entry is not an object"},
	    {T1("F33", "[1]", "[0,4]"), 4, "tensor 'w': unknown dtype 'F33'"},
	    {"{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
	     "tensor 'w': dtype missing or not a string"},
	    {T1("F32", "[-1]", "[0,4]"), 4,
	     "tensor 'w': shape[0] is not a non-negative integer"},
	    {T1("F32", "[2,1.0]", "[0,8]"), 8,
	     "tensor 'w': shape[1] is not a non-negative integer"},
	    {T1("F32", "[\"2\"]", "[0,8]"), 8,
	     "tensor 'w': shape[0] is not a non-negative integer"},
	    {T1("F32", "7", "[0,28]"), 28,
	     "tensor 'w': shape missing or not an array"},
	    {T1("F32", "[1,1,1,1,1,1,1,1,1]", "[0,4]"), 4,
	     "tensor 'w': shape has 9 dims, limit is 8"},
	    {T1("F32", "[4294967296,4294967296,2]", "[0,0]"), 0,
	     "tensor 'w': shape element count overflows"},
	    {T1("F32", "[4611686018427387904]", "[0,0]"), 0,
	     "tensor 'w': shape byte size overflows"},
	    {T1("F32", "[4]", "[0,16]"), 8,
	     "tensor 'w': data_offsets end 16 beyond data region of 8 "
	     "bytes"},
	    {T1("F32", "[1]", "[8,4]"), 8,
	     "tensor 'w': data_offsets end 4 < begin 8"},
	    {T1("F32", "[3]", "[0,8]"), 16,
	     "tensor 'w': data_offsets span 8 bytes but shape [3] of F32 "
	     "needs 12"},
	    {T1("BF16", "[2,3]", "[0,6]"), 16,
	     "tensor 'w': data_offsets span 6 bytes but shape [2, 3] of "
	     "BF16 needs 12"},
	    {T1("F32", "[1]", "[0]"), 4,
	     "tensor 'w': data_offsets missing or not a [begin, end] array"},
	    {T1("F32", "[1]", "[0,4.0]"), 4,
	     "tensor 'w': data_offsets are not non-negative integers"},
	    {T1("F32", "[1]", "[-4,0]"), 4,
	     "tensor 'w': data_offsets are not non-negative integers"},
	    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4,
	     "tensor 'w': data_offsets missing"},
	    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
	     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]"
	     "}}",
	     16, "tensors 'a' [0, 8) and 'b' [4, 12) overlap"},
	    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}"
	     ",\"b\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,8]"
	     "}}",
	     16, "tensors 'a' [0, 16) and 'b' [8, 8) overlap"},
	    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
	     "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}"
	     "}",
	     8, "duplicate name in JSON header"},
	    {"{\"__metadata__\":[1]}", 0, "__metadata__ is not an object"},
	    {"{\"__metadata__\":{\"k\":3}}", 0,
	     "__metadata__ 'k': value is not a string"},
	    {"{\"w\\u0000x\":1}", 0, "invalid JSON header"},
	    {longname, 4, "name is 513 bytes, limit is 512"},
	};
	char hdr[1024];

	/* a 513-byte name */
	memset(hdr, 'n', 513);
	hdr[513] = 0;
	snprintf(longname, sizeof(longname),
		 "{\"%s\":{\"dtype\":\"F32\",\"shape\":[1],"
		 "\"data_offsets\":[0,4]}}",
		 hdr);

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len;
		unsigned char *b = image(cases[i].hdr, cases[i].data_len, &len);
		taco_st_file *f = (taco_st_file *)(uintptr_t)0x1;
		taco_err err = {{0}};
		int rc = taco_st_parse(b, len, "bad.safetensors", &f, &err);

		ck_assert_msg(rc == -EINVAL, "case %zu: rc %d", i, rc);
		ck_assert_msg(f == (taco_st_file *)(uintptr_t)0x1,
			      "case %zu: out was set", i);
		ck_assert_msg(strncmp(err.msg, "bad.safetensors: ", 17) == 0,
			      "case %zu: message '%s' does not name the file",
			      i, err.msg);
		ck_assert_msg(strstr(err.msg, cases[i].frag),
			      "case %zu: message '%s' lacks '%s'", i, err.msg,
			      cases[i].frag);
		free(b);
	}
}
END_TEST

START_TEST(test_malformed_lengths)
{
	unsigned char b[64] = {0};
	taco_st_file *f = NULL;
	taco_err err;

	/* fewer than 8 bytes */
	ck_assert_int_eq(taco_st_parse(b, 5, "t.st", &f, &err), -EINVAL);
	ck_assert_ptr_nonnull(
	    strstr(err.msg, "t.st: file too short (5 bytes)"));
	ck_assert_int_eq(taco_st_parse(NULL, 0, "t.st", &f, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "file too short"));
	/* header length larger than the file */
	b[0] = 100;
	memcpy(b + 8, "{}", 2);
	ck_assert_int_eq(taco_st_parse(b, 10, "t.st", &f, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg,
				     "t.st: header length 100 larger than the "
				     "2 bytes after the length prefix"));
	/* header length beyond the limit, whatever the file size */
	b[0] = 0;
	b[3] = 0x10; /* 256 MiB */
	ck_assert_int_eq(taco_st_parse(b, sizeof(b), "t.st", &f, &err),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "exceeds the limit"));
	b[3] = 0;
	b[7] = 0x80; /* 2^63 */
	ck_assert_int_eq(taco_st_parse(b, sizeof(b), "t.st", &f, &err),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "exceeds the limit"));
	ck_assert_ptr_null(f);
}
END_TEST

START_TEST(test_open_errors)
{
	char *dir = make_tmpdir();
	const char *path = pjoin(dir, "m.safetensors");
	taco_st_file *f = NULL;
	unsigned char *bytes;
	taco_err err;
	size_t len;

	ck_assert_int_eq(taco_st_open(pjoin(dir, "missing"), &f, &err),
			 -ENOENT);
	ck_assert_ptr_nonnull(strstr(err.msg, "missing: cannot open"));
	ck_assert_int_eq(taco_st_open(dir, &f, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "not a regular file"));

	make_tensors();
	ck_assert_int_eq(taco_st_write(path, ts, NT, NULL, &err), 0);
	bytes = (unsigned char *)tu_read_file(path, &len);
	ck_assert_ptr_nonnull(bytes);

	/* truncated inside the length prefix, the header, the data */
	write_bytes(path, bytes, 5);
	ck_assert_int_eq(taco_st_open(path, &f, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "file too short (5 bytes)"));
	ck_assert_ptr_nonnull(strstr(err.msg, path));
	write_bytes(path, bytes, 40);
	ck_assert_int_eq(taco_st_open(path, &f, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "header length"));
	ck_assert_ptr_nonnull(strstr(err.msg, "truncated"));
	write_bytes(path, bytes, len - 1);
	ck_assert_int_eq(taco_st_open(path, &f, &err), -EINVAL);
	ck_assert_ptr_nonnull(
	    strstr(err.msg, "tensor 'mask': data_offsets end"));
	ck_assert_ptr_nonnull(strstr(err.msg, "beyond data region"));
	ck_assert_ptr_null(f);

	free(bytes);
	rm_tree(dir);
}
END_TEST

/* ---- writer ---- */

START_TEST(test_write_replaces_mapped_file)
{
	char *dir = make_tmpdir();
	const char *path = pjoin(dir, "model.safetensors");
	taco_st_tensor sub[3];
	taco_st_file *f = NULL, *g = NULL;
	taco_err err;

	make_tensors();
	ck_assert_int_eq(taco_st_write(path, ts, NT, NULL, &err), 0);
	ck_assert_int_eq(taco_st_open(path, &f, &err), 0);
	/* rewrite the file from its own mapping, in another order */
	sub[0] = *taco_st_find(f, "h.cube");
	sub[1] = *taco_st_find(f, "model.embed_tokens.weight");
	sub[2] = *taco_st_find(f, "positions");
	ck_assert_int_eq(taco_st_write(path, sub, 3, NULL, &err), 0);
	ck_assert_int_eq(taco_st_open(path, &g, &err), 0);
	ck_assert_uint_eq(taco_st_count(g), 3);
	assert_same(taco_st_get(g, 0), &ts[5]);
	assert_same(taco_st_get(g, 1), &ts[0]);
	assert_same(taco_st_get(g, 2), &ts[7]);
	ck_assert_uint_eq(taco_st_meta_count(g), 0);
	/* the old mapping is still readable */
	assert_same(taco_st_find(f, "mask"), &ts[8]);
	ck_assert_int_eq(count_entries(dir, ".tmp."), 0);
	taco_st_close(f);
	taco_st_close(g);
	rm_tree(dir);
}
END_TEST

START_TEST(test_write_bad_arguments)
{
	static const int64_t s2[] = {2}, sneg[] = {-2};
	static const char *const odd_meta[] = {"k", NULL, NULL};
	static const char *const bad_utf8_meta[] = {"k", "\xff", NULL};
	float d[2] = {1, 2};
	char *dir = make_tmpdir();
	const char *path = pjoin(dir, "x.safetensors");
	char longname[600];
	taco_st_tensor t[2];
	taco_err err;

	t[0] = mk("a", TK_F32, 1, s2, d);
	t[1] = mk("a", TK_F32, 1, s2, d);
	ck_assert_int_eq(taco_st_write(path, t, 2, NULL, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "duplicate tensor name 'a'"));
	ck_assert_ptr_nonnull(strstr(err.msg, path));

	t[1] = mk("b", TK_F32, 1, s2, d);
	t[1].nbytes = 4;
	ck_assert_int_eq(taco_st_write(path, t, 2, NULL, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "tensor 'b': nbytes 4"));

	t[1] = mk("b", 99, 1, s2, d);
	ck_assert_int_eq(taco_st_write(path, t, 2, NULL, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "tensor 'b': unknown dtype 99"));

	t[1] = mk("b", TK_F32, 1, sneg, d);
	t[1].nbytes = 0;
	ck_assert_int_eq(taco_st_write(path, t, 2, NULL, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "shape[0] = -2 is negative"));

	t[1] = mk("b", TK_F32, 1, s2, NULL);
	ck_assert_int_eq(taco_st_write(path, t, 2, NULL, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "tensor 'b': NULL data"));

	t[1] = mk("b", TK_F32, 1, s2, d);
	t[1].ndim = 9;
	ck_assert_int_eq(taco_st_write(path, t, 2, NULL, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "ndim 9"));

	t[1] = mk("__metadata__", TK_F32, 1, s2, d);
	ck_assert_int_eq(taco_st_write(path, t, 2, NULL, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "reserved"));

	memset(longname, 'x', 513);
	longname[513] = 0;
	t[1] = mk(longname, TK_F32, 1, s2, d);
	ck_assert_int_eq(taco_st_write(path, t, 2, NULL, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "name is 513 bytes"));

	t[1] = mk("bad\xff", TK_F32, 1, s2, d);
	ck_assert_int_eq(taco_st_write(path, t, 2, NULL, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "not valid UTF-8"));

	t[1] = mk("b", TK_F32, 1, s2, d);
	ck_assert_int_eq(taco_st_write(path, t, 2, odd_meta, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "metadata key 'k' has no value"));
	ck_assert_int_eq(taco_st_write(path, t, 2, bad_utf8_meta, &err),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "metadata 'k'"));

	/* nothing was created by any of these */
	ck_assert_int_eq(count_entries(dir, "x.safetensors"), 0);
	ck_assert_int_eq(taco_st_write(path, t, 2, NULL, &err), 0);
	rm_tree(dir);
}
END_TEST

START_TEST(test_write_failures_leave_nothing)
{
	static const int64_t s2[] = {2};
	float d[2] = {1, 2};
	char *dir = make_tmpdir();
	taco_st_tensor t = mk("a", TK_F32, 1, s2, d);
	const char *sub = pjoin(dir, "sub");
	taco_err err;

	/* target path is a directory: the rename fails */
	ck_assert_int_eq(mkdir(sub, 0755), 0);
	ck_assert_int_lt(taco_st_write(sub, &t, 1, NULL, &err), 0);
	ck_assert_ptr_nonnull(strstr(err.msg, sub));
	ck_assert_ptr_nonnull(strstr(err.msg, "cannot rename"));
	ck_assert_int_eq(count_entries(dir, ".tmp."), 0);

	/* target directory does not exist */
	ck_assert_int_eq(
	    taco_st_write(pjoin(dir, "nodir/x.safetensors"), &t, 1, NULL, &err),
	    -ENOENT);
	ck_assert_ptr_nonnull(strstr(err.msg, "nodir/x.safetensors: cannot "
					      "create"));
	rm_tree(dir);
}
END_TEST

/* A write that runs out of space (RLIMIT_FSIZE gives EFBIG, which is what
 * ENOSPC looks like to the writer) keeps the previous file. */
START_TEST(test_write_out_of_space_keeps_old_file)
{
	static const int64_t sbig[] = {65536};
	char *dir = make_tmpdir();
	const char *path = pjoin(dir, "model.safetensors");
	float *big = calloc(65536, sizeof(float));
	unsigned char *before, *after;
	size_t blen, alen;
	struct rlimit old, lim;
	void (*oldsig)(int);
	taco_st_tensor t = mk("big", TK_F32, 1, sbig, big);
	taco_err err;
	int rc;

	ck_assert_ptr_nonnull(big);
	make_tensors();
	ck_assert_int_eq(taco_st_write(path, ts, NT, NULL, &err), 0);
	before = (unsigned char *)tu_read_file(path, &blen);
	ck_assert_ptr_nonnull(before);

	ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = 16384;
	oldsig = signal(SIGXFSZ, SIG_IGN);
	ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
	rc = taco_st_write(path, &t, 1, NULL, &err);
	ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, oldsig);

	ck_assert_int_eq(rc, -EFBIG);
	ck_assert_ptr_nonnull(strstr(err.msg, path));
	ck_assert_ptr_nonnull(strstr(err.msg, "write error"));
	ck_assert_int_eq(count_entries(dir, ".tmp."), 0);
	after = (unsigned char *)tu_read_file(path, &alen);
	ck_assert_ptr_nonnull(after);
	ck_assert_uint_eq(alen, blen);
	ck_assert_int_eq(memcmp(before, after, blen), 0);

	free(before);
	free(after);
	free(big);
	rm_tree(dir);
}
END_TEST

/* ---- sharded models ---- */

enum { NS = 9 };
static float sh_data[NS][16];
static char sh_names[NS][64];
static taco_st_tensor sh[NS];

static void make_shard_tensors(void)
{
	static const int64_t s16[] = {16}, s4x8[] = {4, 8}, s32[] = {32};
	uint64_t st = 7;

	for (int i = 0; i < NS; i++) {
		tu_fill_uniform(sh_data[i], 16, -2, 2, &st);
		snprintf(sh_names[i], sizeof(sh_names[i]),
			 "model.layers.%d.weight", i);
		/* 64 bytes each, in three dtypes */
		if (i % 3 == 0)
			sh[i] = mk(sh_names[i], TK_F32, 1, s16, sh_data[i]);
		else if (i % 3 == 1)
			sh[i] = mk(sh_names[i], TK_BF16, 1, s32, sh_data[i]);
		else
			sh[i] = mk(sh_names[i], TK_F16, 2, s4x8, sh_data[i]);
	}
}

START_TEST(test_sharded_roundtrip)
{
	char *dir = make_tmpdir();
	const char *idx = pjoin(dir, "model.safetensors.index.json");
	taco_st_model *m = NULL;
	const taco_st_tensor *w = NULL;
	char *text;
	taco_err err;

	make_shard_tensors();
	/* 3 x 64 bytes fit in 200, the 4th does not: 3 shards */
	ck_assert_int_eq(taco_st_write_sharded(dir, sh, NS, 200, &err), 0);
	ck_assert_int_eq(
	    access(pjoin(dir, "model-00001-of-00003.safetensors"), F_OK), 0);
	ck_assert_int_eq(
	    access(pjoin(dir, "model-00003-of-00003.safetensors"), F_OK), 0);
	ck_assert_int_ne(access(pjoin(dir, "model.safetensors"), F_OK), 0);
	ck_assert_int_eq(count_entries(dir, ".tmp."), 0);
	text = tu_read_file(idx, NULL);
	ck_assert_ptr_nonnull(text);
	ck_assert_ptr_nonnull(strstr(text, "\"total_size\": 576"));
	ck_assert_ptr_nonnull(strstr(text, "\"model.layers.4.weight\": "
					   "\"model-00002-of-00003."
					   "safetensors\""));
	free(text);

	ck_assert_int_eq(taco_st_open_model(dir, &m, &err), 0);
	ck_assert_uint_eq(taco_st_model_shard_count(m), 3);
	ck_assert_uint_eq(taco_st_model_count(m), NS);
	for (size_t i = 0; i < NS; i++) {
		const taco_st_tensor *t = taco_st_model_find(m, sh[i].name);
		const taco_st_file *f = taco_st_model_file_of(m, t);
		char want[64];

		assert_same(t, &sh[i]);
		assert_same(taco_st_model_get(m, i), &sh[i]);
		snprintf(want, sizeof(want), "model-%05zu-of-00003.safetensors",
			 i / 3 + 1);
		ck_assert_ptr_nonnull(f);
		ck_assert_ptr_eq(f, taco_st_model_shard(m, i / 3));
		ck_assert_ptr_nonnull(strstr(taco_st_path(f), want));
		ck_assert_str_eq(taco_st_meta(f, "format"), "pt");
	}
	ck_assert_ptr_null(taco_st_model_get(m, NS));
	ck_assert_ptr_null(taco_st_model_find(m, "ghost"));
	ck_assert_ptr_null(taco_st_model_file_of(m, &sh[0]));
	ck_assert_int_eq(taco_st_model_weight(m, sh[4].name, &w, &err), 0);
	ck_assert_ptr_eq(w, taco_st_model_find(m, sh[4].name));
	ck_assert_int_eq(taco_st_model_weight(m, "ghost", &w, &err), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err.msg, dir));
	taco_st_model_close(m);

	/* rewriting the same tensors as one file drops the index */
	ck_assert_int_eq(taco_st_write_sharded(dir, sh, NS, 1 << 20, &err), 0);
	ck_assert_int_ne(access(idx, F_OK), 0);
	ck_assert_int_eq(taco_st_open_model(dir, &m, &err), 0);
	ck_assert_uint_eq(taco_st_model_shard_count(m), 1);
	ck_assert_uint_eq(taco_st_model_count(m), NS);
	for (size_t i = 0; i < NS; i++)
		assert_same(taco_st_model_get(m, i), &sh[i]);
	ck_assert_ptr_nonnull(strstr(taco_st_path(taco_st_model_shard(m, 0)),
				     "/model.safetensors"));
	taco_st_model_close(m);
	taco_st_model_close(NULL);
	rm_tree(dir);
}
END_TEST

START_TEST(test_sharded_oversized_tensor)
{
	static const int64_t s16[] = {16}, s200[] = {200};
	static float small[2][16], big[200];
	char *dir = make_tmpdir();
	taco_st_tensor t[3];
	taco_st_model *m = NULL;
	taco_err err;

	t[0] = mk("a", TK_F32, 1, s16, small[0]);
	t[1] = mk("big", TK_F32, 1, s200, big);
	t[2] = mk("c", TK_F32, 1, s16, small[1]);
	ck_assert_int_eq(taco_st_write_sharded(dir, t, 3, 200, &err), 0);
	ck_assert_int_eq(taco_st_open_model(dir, &m, &err), 0);
	ck_assert_uint_eq(taco_st_model_shard_count(m), 3);
	ck_assert_uint_eq(taco_st_count(taco_st_model_shard(m, 1)), 1);
	ck_assert_str_eq(taco_st_get(taco_st_model_shard(m, 1), 0)->name,
			 "big");
	taco_st_model_close(m);
	rm_tree(dir);

	/* a lone oversized tensor is a single model.safetensors */
	dir = make_tmpdir();
	ck_assert_int_eq(taco_st_write_sharded(dir, &t[1], 1, 200, &err), 0);
	ck_assert_int_eq(access(pjoin(dir, "model.safetensors"), F_OK), 0);
	ck_assert_int_eq(taco_st_write_sharded(dir, t, 3, 0, &err), -EINVAL);
	rm_tree(dir);
}
END_TEST

/* Writes a 2-shard model (a, b | c) and replaces its index with text. */
static char *model_with_index(const char *index_text)
{
	static const int64_t s16[] = {16};
	static float d[3][16];
	char *dir = make_tmpdir();
	taco_st_tensor t[3];
	taco_err err;

	t[0] = mk("a", TK_F32, 1, s16, d[0]);
	t[1] = mk("b", TK_F32, 1, s16, d[1]);
	t[2] = mk("c", TK_F32, 1, s16, d[2]);
	ck_assert_int_eq(taco_st_write_sharded(dir, t, 3, 128, &err), 0);
	ck_assert_int_eq(
	    access(pjoin(dir, "model-00002-of-00002.safetensors"), F_OK), 0);
	if (index_text)
		write_text(pjoin(dir, "model.safetensors.index.json"),
			   index_text);
	return dir;
}

#define S1 "model-00001-of-00002.safetensors"
#define S2 "model-00002-of-00002.safetensors"

START_TEST(test_model_index_errors)
{
	static const struct {
		const char *index;
		int rc;
		const char *frag;
	} cases[] = {
	    {"{\"weight_map\":{\"a\":\"" S1 "\",\"b\":\"../" S1 "\",\"c\":\"" S2
	     "\"}}",
	     -EINVAL, "tensor 'b': shard '../" S1 "' is not a plain file"},
	    {"{\"weight_map\":{\"a\":\"" S1 "\",\"b\":\"..\",\"c\":\"" S2
	     "\"}}",
	     -EINVAL, "shard '..' is not a plain file name"},
	    {"{\"weight_map\":{\"a\":\"" S1 "\",\"b\":\"/etc/passwd\",\"c\":"
	     "\"" S2 "\"}}",
	     -EINVAL, "shard '/etc/passwd' is not a plain file name"},
	    {"{\"weight_map\":{\"a\":\"" S1 "\",\"b\":\"" S1 "\",\"c\":\"" S2
	     "\",\"ghost\":\"" S2 "\"}}",
	     -EINVAL, "tensor 'ghost' listed for shard '" S2 "' but not found"},
	    {"{\"weight_map\":{\"a\":\"" S1 "\",\"c\":\"" S2 "\"}}", -EINVAL,
	     S1 ": tensor 'b' is not listed in model.safetensors.index.json"},
	    {"{\"weight_map\":{\"a\":\"" S1 "\",\"b\":\"" S2 "\",\"c\":\"" S2
	     "\"}}",
	     -EINVAL, "tensor 'b' listed for shard '" S2 "' but not found"},
	    {"{\"weight_map\":{\"a\":\"" S1 "\",\"b\":\"" S1 "\",\"c\":"
	     "\"model-00003-of-00002.safetensors\"}}",
	     -ENOENT, "model-00003-of-00002.safetensors: cannot open"},
	    {"{\"weight_map\":{\"a\":\"" S1 "\",\"b\":7}}", -EINVAL,
	     "tensor 'b': shard is not a string"},
	    {"{\"weight_map\":{}}", -EINVAL, "weight_map lists 0 tensors"},
	    {"{\"metadata\":{}}", -EINVAL, "weight_map missing"},
	    {"{\"weight_map\":", -EINVAL, "invalid JSON"},
	    {"{\"weight_map\":{\"a\":\"" S1 "\",\"a\":\"" S1 "\"}}", -EINVAL,
	     "duplicate object key"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *dir = model_with_index(cases[i].index);
		taco_st_model *m = (taco_st_model *)(uintptr_t)0x1;
		taco_err err = {{0}};
		int rc = taco_st_open_model(dir, &m, &err);

		ck_assert_msg(rc == cases[i].rc, "case %zu: rc %d (%s)", i, rc,
			      err.msg);
		ck_assert_ptr_eq(m, (taco_st_model *)(uintptr_t)0x1);
		ck_assert_msg(strstr(err.msg, dir),
			      "case %zu: '%s' does not name the directory", i,
			      err.msg);
		ck_assert_msg(strstr(err.msg, cases[i].frag),
			      "case %zu: message '%s' lacks '%s'", i, err.msg,
			      cases[i].frag);
		rm_tree(dir);
	}
}
END_TEST

START_TEST(test_model_missing)
{
	char *dir = make_tmpdir();
	char *empty = make_tmpdir();
	taco_st_model *m = NULL;
	taco_err err;

	ck_assert_int_eq(taco_st_open_model(empty, &m, &err), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err.msg, empty));
	ck_assert_ptr_nonnull(strstr(err.msg, "no model.safetensors or "
					      "model.safetensors.index.json"));
	ck_assert_ptr_null(m);
	ck_assert_int_eq(taco_st_open_model(pjoin(dir, "nodir"), &m, &err),
			 -ENOENT);

	/* a shard file that is corrupt: the error names that file */
	rm_tree(dir);
	dir = model_with_index(NULL);
	write_text(pjoin(dir, S2), "garbage!garbage!");
	ck_assert_int_eq(taco_st_open_model(dir, &m, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, S2 ": header length"));
	ck_assert_ptr_null(m);
	rm_tree(dir);
	rm_tree(empty);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("safetensors");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_dtypes);
	tcase_add_test(tc, test_roundtrip);
	tcase_add_test(tc, test_parse_valid_edges);
	tcase_add_test(tc, test_malformed_headers);
	tcase_add_test(tc, test_malformed_lengths);
	tcase_add_test(tc, test_open_errors);
	tcase_add_test(tc, test_write_replaces_mapped_file);
	tcase_add_test(tc, test_write_bad_arguments);
	tcase_add_test(tc, test_write_failures_leave_nothing);
	tcase_add_test(tc, test_write_out_of_space_keeps_old_file);
	tcase_add_test(tc, test_sharded_roundtrip);
	tcase_add_test(tc, test_sharded_oversized_tensor);
	tcase_add_test(tc, test_model_index_errors);
	tcase_add_test(tc, test_model_missing);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(suite());
	int nf;

	srunner_run_all(sr, CK_NORMAL);
	nf = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nf ? 1 : 0;
}
