/* test_gguf: the GGUF writer's format and limits, ggml's q8_0, the export's
 * refusals and the job's export_gguf option. What llama.cpp reads of a
 * whole export is tests/gguf/check.py's (CTest gguf_export). */
#include <check.h>

#include "testutil.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf_export.h"
#include "gguf/gguf_quant.h"
#include "gguf/gguf_write.h"
#include "job/job.h"
#include "tk_convert.h"
#include "util/fsutil.h"

static char tmp[256];

static void setup(void)
{
	snprintf(tmp, sizeof(tmp), "/tmp/test_gguf.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmp));
}

static void teardown(void)
{
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	ck_assert_int_eq(system(cmd), 0);
}

static int exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

/* ggml's quantize_row_q8_0_ref: d = max|x| / 127 in fp16, q = roundf(x /
 * d) with halves away from zero, a zero block all zeros. */
START_TEST(test_q8_0)
{
	float x[64];
	uint8_t q[68];
	uint16_t d;

	for (int j = 0; j < 32; j++)
		x[j] = (float)(j - 16);
	for (int j = 0; j < 32; j++)
		x[32 + j] = 0;
	taco_q8_0_quantize_row(x, 64, q);
	memcpy(&d, q, 2);
	ck_assert_uint_eq(d, tk_f32_f16_rne(16.0f / 127.0f));
	ck_assert_int_eq((int8_t)q[2], -127);	  /* -16 */
	ck_assert_int_eq((int8_t)q[2 + 16], 0);	  /* 0 */
	ck_assert_int_eq((int8_t)q[2 + 31], 119); /* 15 * 127 / 16 = 119.06 */
	memcpy(&d, q + 34, 2);
	ck_assert_uint_eq(d, 0);
	for (int j = 0; j < 32; j++)
		ck_assert_int_eq(q[36 + j], 0);
	/* d = 1: halves round away from zero */
	for (int j = 0; j < 32; j++)
		x[j] = 0;
	x[0] = 127, x[1] = 2.5f, x[2] = -2.5f, x[3] = 0.5f, x[4] = -126.5f;
	taco_q8_0_quantize_row(x, 32, q);
	ck_assert_int_eq((int8_t)q[2], 127);
	ck_assert_int_eq((int8_t)q[3], 3);
	ck_assert_int_eq((int8_t)q[4], -3);
	ck_assert_int_eq((int8_t)q[5], 1);
	ck_assert_int_eq((int8_t)q[6], -127);
}
END_TEST

static uint64_t u64_at(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

/* A file of one key and two tensors, read back byte by byte: the header,
 * the reversed dims, the offsets and the alignment of the data. */
START_TEST(test_writer_format)
{
	char path[300];
	taco_gguf *g;
	taco_err err = {{0}};
	int64_t s2[2] = {2, 3}, s1[1] = {5};
	float a[6] = {1, 2, 3, 4, 5, 6}, b[5] = {7, 8, 9, 10, 11};
	uint64_t n;
	uint8_t *f;
	size_t len;

	snprintf(path, sizeof(path), "%s/t.gguf", tmp);
	ck_assert_int_eq(taco_gguf_new(&g, &err), 0);
	ck_assert_int_eq(taco_gguf_kv_u32(g, "k", 7), 0);
	ck_assert_int_eq(taco_gguf_kv_u32(g, "k", 8), -EEXIST);
	ck_assert_int_eq(
	    taco_gguf_add_tensor(g, "a", TACO_GGML_F32, 2, s2, &n, &err), 0);
	ck_assert_uint_eq(n, 24);
	ck_assert_int_eq(
	    taco_gguf_add_tensor(g, "b", TACO_GGML_F32, 1, s1, &n, &err), 0);
	ck_assert_int_eq(taco_gguf_begin(g, path, &err), 0);
	ck_assert_int_eq(taco_gguf_write_data(g, a, 10, &err), 0);
	ck_assert_int_eq(taco_gguf_write_data(g, (char *)a + 10, 14, &err), 0);
	ck_assert_int_eq(taco_gguf_write_data(g, b, sizeof(b), &err), 0);
	ck_assert_int_eq(taco_gguf_write_data(g, b, 1, &err), -EINVAL);
	ck_assert_int_eq(taco_gguf_finish(g, &err), 0);
	n = taco_gguf_file_size(g);
	taco_gguf_free(g);
	ck_assert_ptr_nonnull(f = (uint8_t *)tu_read_file(path, &len));
	ck_assert_uint_eq(len, n);
	ck_assert_int_eq(memcmp(f, "GGUF", 4), 0);
	ck_assert_int_eq(f[4], 3);
	ck_assert_uint_eq(u64_at(f + 8), 2);  /* tensors */
	ck_assert_uint_eq(u64_at(f + 16), 1); /* key-values */
	/* "k": len 1, 'k', type u32 (4), 7 */
	ck_assert_uint_eq(u64_at(f + 24), 1);
	ck_assert_int_eq(f[32], 'k');
	ck_assert_int_eq(f[33], 4);
	ck_assert_int_eq(f[37], 7);
	/* tensor a: name, n_dims 2, ne {3, 2}, type 0, offset 0 */
	size_t o = 41;
	ck_assert_uint_eq(u64_at(f + o), 1);
	ck_assert_int_eq(f[o + 8], 'a');
	ck_assert_int_eq(f[o + 9], 2);
	ck_assert_uint_eq(u64_at(f + o + 13), 3);
	ck_assert_uint_eq(u64_at(f + o + 21), 2);
	ck_assert_int_eq(f[o + 29], 0);
	ck_assert_uint_eq(u64_at(f + o + 33), 0);
	/* tensor b at the next multiple of 32 */
	o += 41;
	ck_assert_int_eq(f[o + 8], 'b');
	ck_assert_uint_eq(u64_at(f + o + 13), 5);
	ck_assert_uint_eq(u64_at(f + o + 25), 32);
	o += 33;
	size_t data = (o + 31) / 32 * 32;
	ck_assert_uint_eq(len, data + 32 + 32);
	ck_assert_int_eq(memcmp(f + data, a, 24), 0);
	ck_assert_int_eq(memcmp(f + data + 32, b, 20), 0);
	for (size_t i = data + 24; i < data + 32; i++)
		ck_assert_int_eq(f[i], 0);
	free(f);
}
END_TEST

/* The writer's limits: a name llama.cpp cannot hold, rows that are not
 * whole q8_0 blocks, a finish before every byte came (no file left). */
START_TEST(test_writer_limits)
{
	char path[300], name[80];
	taco_gguf *g;
	taco_err err = {{0}};
	int64_t s[2] = {2, 33}, big[2] = {INT64_C(1) << 41, 2};

	snprintf(path, sizeof(path), "%s/t.gguf", tmp);
	ck_assert_int_eq(taco_gguf_new(&g, &err), 0);
	memset(name, 'n', 64);
	name[64] = 0;
	ck_assert_int_eq(
	    taco_gguf_add_tensor(g, name, TACO_GGML_F32, 2, s, NULL, &err),
	    -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "at most 63 bytes"));
	ck_assert_int_eq(
	    taco_gguf_add_tensor(g, "q", TACO_GGML_Q8_0, 2, s, NULL, &err),
	    -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "multiple of 32"));
	ck_assert_int_eq(
	    taco_gguf_add_tensor(g, "b", TACO_GGML_F32, 2, big, NULL, &err),
	    -EINVAL);
	ck_assert_int_eq(
	    taco_gguf_add_tensor(g, "f", TACO_GGML_F16, 2, s, NULL, &err), 0);
	ck_assert_int_eq(taco_gguf_begin(g, path, &err), 0);
	ck_assert_int_eq(taco_gguf_write_data(g, name, 10, &err), 0);
	ck_assert_int_eq(taco_gguf_finish(g, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "not written"));
	taco_gguf_free(g);
	ck_assert(!exists(path));
}
END_TEST

static void copy_fixture(const char *name, char *dir, size_t len)
{
	char cmd[1200];
	const char *base = strrchr(name, '/');
	snprintf(dir, len, "%s/%s", tmp, base ? base + 1 : name);
	snprintf(cmd, sizeof(cmd), "cp -r '%s' '%s'", tu_fixture(name), dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* What the export refuses, each with the file and what is wrong, and
 * without leaving a file: OPT (no llama.cpp architecture), a file over
 * the limit, a tokenizer llama.cpp would split otherwise. */
START_TEST(test_export_refusals)
{
	char dir[600], out[700], path[800];
	taco_err err = {{0}};
	json_t *t;
	int r;

	snprintf(out, sizeof(out), "%s/x.gguf", tmp);
	r = taco_gguf_export(tu_fixture("models/opt_pre"), NULL, out,
			     TACO_GGUF_F16, UINT64_MAX, NULL, &err);
	ck_assert_msg(r == -ENOTSUP, "%d %s", r, err.msg);
	ck_assert_msg(strstr(err.msg, "OPT"), "%s", err.msg);
	ck_assert_ptr_nonnull(strstr(err.msg, "no llama.cpp architecture"));
	/* Phi-3: llama.cpp has it, tacod's export of it is not written yet */
	r = taco_gguf_export(tu_fixture("models/phi3_long"), NULL, out,
			     TACO_GGUF_F16, UINT64_MAX, NULL, &err);
	ck_assert_msg(r == -ENOTSUP && strstr(err.msg, "Phi-3") &&
			  strstr(err.msg, "not written yet"),
		      "%d %s", r, err.msg);
	/* a mixture of experts with a dense layer, and one whose experts'
	 * weights are not renormalised: not what llama.cpp's qwen3moe runs */
	r = taco_gguf_export(tu_fixture("models/qwen3_moe"), NULL, out,
			     TACO_GGUF_F16, UINT64_MAX, NULL, &err);
	ck_assert_msg(r == -ENOTSUP &&
			  strstr(err.msg, "layer 1 has a dense MLP"),
		      "%d %s", r, err.msg);
	r = taco_gguf_export(tu_fixture("models/qwen3_moe_aux"), NULL, out,
			     TACO_GGUF_F16, UINT64_MAX, NULL, &err);
	ck_assert_msg(r == -ENOTSUP &&
			  strstr(err.msg, "layer 0 has a dense MLP"),
		      "%d %s", r, err.msg);
	r = taco_gguf_export(tu_fixture("models/gpt_oss"), NULL, out,
			     TACO_GGUF_F16, UINT64_MAX, NULL, &err);
	/* gpt-oss with another clamp than llama.cpp's constant */
	ck_assert_msg(r == -ENOTSUP && strstr(err.msg, "swiglu_limit 7"),
		      "%d %s", r, err.msg);
	ck_assert(!exists(out));
	ck_assert_int_eq(taco_gguf_export(tu_fixture("gguf/llama"), NULL, out,
					  TACO_GGUF_Q8_0, 4096, NULL, &err),
			 -EFBIG);
	ck_assert_ptr_nonnull(strstr(err.msg, "over the limit of 4096"));
	ck_assert(!exists(out));
	ck_assert_int_eq(taco_gguf_export(tu_fixture("gguf/llama"), NULL, out,
					  TACO_GGUF_TYPES, UINT64_MAX, NULL,
					  &err),
			 -EINVAL);

	copy_fixture("gguf/llama", dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
	ck_assert_ptr_nonnull(t = json_load_file(path, 0, NULL));
	json_object_set_new(
	    t, "pre_tokenizer",
	    json_pack("{ssss}", "type", "Metaspace", "replacement", "_"));
	ck_assert_int_eq(json_dump_file(t, path, 0), 0);
	json_decref(t);
	ck_assert_int_eq(taco_gguf_export(dir, NULL, out, TACO_GGUF_F16,
					  UINT64_MAX, NULL, &err),
			 -ENOTSUP);
	/* Llama 2's and Mistral's kind: named as such */
	ck_assert_msg(strstr(err.msg, "tokenizer.json: a SentencePiece "
				      "tokenizer") &&
			  strstr(err.msg, "convert_hf_to_gguf.py"),
		      "%s", err.msg);
	ck_assert(!exists(out));
	ck_assert_ptr_nonnull(t = json_load_file(path, 0, NULL));
	json_object_set_new(t, "pre_tokenizer",
			    json_pack("{ss}", "type", "Whitespace"));
	ck_assert_int_eq(json_dump_file(t, path, 0), 0);
	json_decref(t);
	ck_assert_int_eq(taco_gguf_export(dir, NULL, out, TACO_GGUF_F16,
					  UINT64_MAX, NULL, &err),
			 -ENOTSUP);
	ck_assert_ptr_nonnull(strstr(err.msg, "tokenizer.json: pre_tokenizer"));
	ck_assert(!exists(out));
	/* and the fixture itself converts */
	ck_assert_int_eq(taco_gguf_export(tu_fixture("gguf/llama"), NULL, out,
					  TACO_GGUF_Q8_0, UINT64_MAX, NULL,
					  &err),
			 0);
	ck_assert(exists(out));
}
END_TEST

static int parse(const char *json, taco_job *job, taco_job_problems *p)
{
	return taco_job_parse(json, strlen(json), "/jobs", job, p);
}

#define JOB "{\"model\":\"m\",\"train\":\"t\",\"output_dir\":\"o\",\"steps\":1,"

START_TEST(test_job_option)
{
	taco_job job;
	taco_job_problems p;

	ck_assert_int_eq(
	    parse(JOB "\"export_gguf\":[\"q8_0\",\"bf16\"]}", &job, &p), 0);
	ck_assert_uint_eq(job.export_gguf,
			  (1u << TACO_GGUF_Q8_0) | (1u << TACO_GGUF_BF16));
	ck_assert_uint_eq(job.export_gguf_max_bytes, 1000000000000ull);
	taco_job_free(&job);
	ck_assert_int_eq(parse(JOB "\"seed\":1}", &job, &p), 0);
	ck_assert_uint_eq(job.export_gguf, 0);
	taco_job_free(&job);
	ck_assert_int_ne(parse(JOB "\"export_gguf\":[\"q4_0\"]}", &job, &p), 0);
	ck_assert_str_eq(p.msg[0],
			 "export_gguf[0]: must be one of bf16, f16, q8_0");
	taco_job_free(&job);
	ck_assert_int_ne(
	    parse(JOB "\"export_gguf\":[\"f16\",\"f16\"]}", &job, &p), 0);
	ck_assert_str_eq(p.msg[0], "export_gguf[1]: f16 is listed twice");
	taco_job_free(&job);
	ck_assert_int_ne(parse(JOB "\"export_gguf\":\"f16\"}", &job, &p), 0);
	ck_assert_str_eq(p.msg[0], "export_gguf: must be a list");
	taco_job_free(&job);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("gguf");
	TCase *tc = tcase_create("gguf");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_q8_0);
	tcase_add_test(tc, test_writer_format);
	tcase_add_test(tc, test_writer_limits);
	tcase_add_test(tc, test_export_refusals);
	tcase_add_test(tc, test_job_option);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
