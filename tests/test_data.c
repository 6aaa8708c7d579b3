/* test_data.c: pre-tokenized JSONL, batching, epochs and the cursor. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/data.h"
#include "testutil.h"

static char *write_tmp(const char *text)
{
	static char path[64];
	int fd;

	snprintf(path, sizeof(path), "/tmp/taco-data-XXXXXX");
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (int)strlen(text));
	close(fd);
	return path;
}

START_TEST(test_count_task)
{
	taco_data *d = NULL;
	taco_err err = {{0}};
	int r = taco_data_load_pretok(tu_fixture("data/count_train.jsonl"), 256,
				      1000, &d, &err);

	ck_assert_msg(r == 0, "%s", err.msg);
	ck_assert_uint_eq(d->n, 512);
	ck_assert_uint_eq(d->n_tokens, 512 * 24);
	ck_assert_int_eq(d->labels[0], -100);
	ck_assert_int_eq(d->labels[2], d->tokens[2]);
	/* 22 labelled tokens per example, all inside 24 positions */
	ck_assert_int_eq(taco_data_count_targets(d, 24), 512 * 22);
	/* seq_len 10: targets are labels 1..10, of which 2..10 count */
	ck_assert_int_eq(taco_data_count_targets(d, 10), 512 * 9);
	taco_data_free(d);
}
END_TEST

static const struct {
	const char *text;
	const char *fragment;
} bad[] = {
    {"{\"input_ids\":[1,2]}\n{oops\n", ":2: invalid JSON"},
    {"{\"input_ids\":[1,2,300]}\n", ":1: input_ids[2] must be a token id"},
    {"{\"input_ids\":[1]}\n", ":1: needs \"input_ids\""},
    {"{\"input_ids\":[1,2],\"labels\":[1]}\n", "as long as"},
    {"{\"input_ids\":[1,2],\"labels\":[1,-7]}\n", "labels[1]"},
    {"\n\n", "no examples"},
    {"[1,2,3]\n", ":1: needs"},
    {"{\"input_ids\":[1,2],\"input_ids\":[3,4]}\n", "duplicate"},
};

START_TEST(test_bad_lines)
{
	taco_data *d = NULL;
	taco_err err = {{0}};
	char *path = write_tmp(bad[_i].text);
	int r = taco_data_load_pretok(path, 256, 1000, &d, &err);

	ck_assert_int_lt(r, 0);
	ck_assert_ptr_null(d);
	ck_assert_msg(strstr(err.msg, bad[_i].fragment) != NULL,
		      "case %d: '%s' lacks '%s'", _i, err.msg,
		      bad[_i].fragment);
	ck_assert_ptr_nonnull(strstr(err.msg, path));
	unlink(path);
}
END_TEST

START_TEST(test_limits_and_missing)
{
	taco_data *d = NULL;
	taco_err err = {{0}};
	char *path = write_tmp("{\"input_ids\":[1,2]}\n\n{\"input_ids\":[3,"
			       "4]}\n{\"input_ids\":[5,6]}\n");

	ck_assert_int_eq(taco_data_load_pretok(path, 256, 2, &d, &err),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, ":4: more than 2 examples"));
	ck_assert_int_eq(taco_data_load_pretok(path, 256, 3, &d, &err), 0);
	ck_assert_uint_eq(d->n, 3);
	taco_data_free(d);
	unlink(path);
	ck_assert_int_eq(
	    taco_data_load_pretok("/nonexistent.jsonl", 256, 3, &d, &err),
	    -ENOENT);
}
END_TEST

START_TEST(test_batches)
{
	taco_data *d = NULL;
	taco_err err = {{0}};
	char *path = write_tmp("{\"input_ids\":[1,2,3,4,5],\"labels\":[-100,"
			       "2,3,-100,5]}\n{\"input_ids\":[7,8]}\n");
	int32_t tok[2 * 4], tgt[2 * 4], pos[2 * 4];

	ck_assert_int_eq(taco_data_load_pretok(path, 256, 10, &d, &err), 0);
	taco_data_rows(d, 0, 2, 4, tok, tgt, pos);
	/* truncated to 4: targets are labels 1..4 */
	ck_assert_int_eq(tok[0], 1);
	ck_assert_int_eq(tok[3], 4);
	ck_assert_int_eq(tgt[0], 2);
	ck_assert_int_eq(tgt[1], 3);
	ck_assert_int_eq(tgt[2], -100);
	ck_assert_int_eq(tgt[3], 5);
	/* padded */
	ck_assert_int_eq(tok[4], 7);
	ck_assert_int_eq(tok[5], 8);
	ck_assert_int_eq(tok[6], 0);
	ck_assert_int_eq(tgt[4], 8);
	ck_assert_int_eq(tgt[5], -100);
	ck_assert_int_eq(tgt[7], -100);
	/* past the end: fully masked */
	taco_data_rows(d, 1, 2, 4, tok, tgt, pos);
	ck_assert_int_eq(tgt[4], -100);
	ck_assert_int_eq(tgt[4 + 3], -100);
	taco_data_free(d);
	unlink(path);
}
END_TEST

/* Each epoch is a permutation; order depends on seed and epoch only; the
 * cursor resumes the stream exactly. */
START_TEST(test_epochs_and_cursor)
{
	taco_data *d = NULL;
	taco_err err = {{0}};
	size_t o1[512], o2[512], order[512];
	int seen[512] = {0};
	uint64_t oe = UINT64_MAX, oe2 = UINT64_MAX;
	taco_cursor c = {0, 0}, c2;
	int32_t tok[3 * 24], tgt[3 * 24], tok2[3 * 24], tgt2[3 * 24];
	int32_t pos[3 * 24];

	ck_assert_int_eq(
	    taco_data_load_pretok(tu_fixture("data/count_train.jsonl"), 256,
				  1000, &d, &err),
	    0);
	taco_data_epoch_order(d, 5, 0, o1);
	taco_data_epoch_order(d, 5, 0, o2);
	ck_assert_mem_eq(o1, o2, sizeof(o1));
	for (int i = 0; i < 512; i++)
		seen[o1[i]]++;
	for (int i = 0; i < 512; i++)
		ck_assert_int_eq(seen[i], 1);
	taco_data_epoch_order(d, 5, 1, o2);
	ck_assert(memcmp(o1, o2, sizeof(o1)) != 0);
	taco_data_epoch_order(d, 6, 0, o2);
	ck_assert(memcmp(o1, o2, sizeof(o1)) != 0);

	/* 171 batches of 3 cross into epoch 1 */
	for (int i = 0; i < 171; i++)
		taco_data_next_batch(d, 5, &c, order, &oe, 3, 24, 0, tok, tgt,
				     pos);
	ck_assert_uint_eq(c.epoch, 1);
	ck_assert_uint_eq(c.index, 1);
	c2 = c;
	taco_data_next_batch(d, 5, &c, order, &oe, 3, 24, 0, tok, tgt, pos);
	/* a fresh reader at the saved cursor gives the same batch */
	taco_data_next_batch(d, 5, &c2, o2, &oe2, 3, 24, 0, tok2, tgt2, pos);
	ck_assert_mem_eq(tok, tok2, sizeof(tok));
	ck_assert_mem_eq(tgt, tgt2, sizeof(tgt));
	taco_data_free(d);
}
END_TEST

/* Packing: whole examples while they fit, positions restarting, no target
 * across a boundary; an example longer than a row is truncated alone. */
START_TEST(test_packing)
{
	taco_data *d = NULL;
	taco_err err = {{0}};
	char *path =
	    write_tmp("{\"input_ids\":[1,2,3]}\n{\"input_ids\":[4,5]}\n"
		      "{\"input_ids\":[6,7,8,9,10,11,12]}\n"
		      "{\"input_ids\":[13,14]}\n");
	int32_t tok[2 * 6], tgt[2 * 6], pos[2 * 6];
	size_t order[4];
	uint64_t oe = UINT64_MAX;
	taco_cursor c = {0, 0};
	const int32_t want_tok[12] = {1, 2, 3, 4, 5, 0, 6, 7, 8, 9, 10, 11};
	const int32_t want_tgt[12] = {2, 3, -100, 5,  -100, -100,
				      7, 8, 9,	  10, 11,   12};
	const int32_t want_pos[12] = {0, 1, 2, 0, 1, 0, 0, 1, 2, 3, 4, 5};

	ck_assert_int_eq(taco_data_load_pretok(path, 256, 10, &d, &err), 0);
	/* file order, to know what to expect: fake the epoch's order */
	for (int i = 0; i < 4; i++)
		order[i] = (size_t)i;
	oe = 0;
	taco_data_next_batch(d, 0, &c, order, &oe, 2, 6, 1, tok, tgt, pos);
	ck_assert_mem_eq(tok, want_tok, sizeof(tok));
	ck_assert_mem_eq(tgt, want_tgt, sizeof(tgt));
	ck_assert_mem_eq(pos, want_pos, sizeof(pos));
	ck_assert_uint_eq(c.index, 3);
	taco_data_free(d);
	unlink(path);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("data");
	TCase *tc = tcase_create("data");

	tcase_add_test(tc, test_count_task);
	tcase_add_loop_test(tc, test_bad_lines, 0,
			    sizeof(bad) / sizeof(bad[0]));
	tcase_add_test(tc, test_limits_and_missing);
	tcase_add_test(tc, test_batches);
	tcase_add_test(tc, test_epochs_and_cursor);
	tcase_add_test(tc, test_packing);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
