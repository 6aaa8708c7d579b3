/* test_data.c: pre-tokenized JSONL, batching, epochs and the cursor;
 * preference pairs' rows and order. */
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

/* NP pairs of pre-tokenized examples, marked as preference data: example
 * 2p + s (pair p, s 0 chosen, 1 rejected) is [p + 1, 200 + s, 60, 61, ...],
 * 4 + p % 5 + 2 s tokens, its first two labels -100 (the prompt). */
#define NP 40
static taco_data *load_pairs(void)
{
	char *text = malloc(NP * 2 * 128), *path;
	taco_data *d = NULL;
	taco_err err = {{0}};
	size_t at = 0;

	for (int p = 0; p < NP; p++)
		for (int s = 0; s < 2; s++) {
			int n = 4 + p % 5 + 2 * s;
			at += (size_t)sprintf(
			    text + at, "{\"input_ids\":[%d,%d", p + 1, 200 + s);
			for (int t = 2; t < n; t++)
				at += (size_t)sprintf(text + at, ",%d", 58 + t);
			at += (size_t)sprintf(text + at,
					      "],\"labels\":[-100,-100");
			for (int t = 2; t < n; t++)
				at += (size_t)sprintf(text + at, ",%d", 58 + t);
			at += (size_t)sprintf(text + at, "]}\n");
		}
	path = write_tmp(text);
	ck_assert_int_eq(taco_data_load_pretok(path, 256, 1000, &d, &err), 0);
	ck_assert_uint_eq(d->n, 2 * NP);
	d->pairs = 1;
	unlink(path);
	free(text);
	return d;
}

/* Row r of T tokens holds pair p's sequence s, shifted targets, positions
 * from 0, truncated at T and padded. */
static void check_pair_row(const int32_t *tok, const int32_t *tgt,
			   const int32_t *pos, int T, int p, int s)
{
	int n = 4 + p % 5 + 2 * s;

	for (int t = 0; t < T; t++) {
		int want_tok = t >= n	? 0
			       : t == 0 ? p + 1
			       : t == 1 ? 200 + s
					: 58 + t;
		/* labels[t + 1] of the sequence: -100 for the prompt's,
		 * 58 + t + 1 after, -100 past its end or the row's */
		int want_tgt = t + 1 < n && t + 1 < T && t + 1 >= 2 ? 59 + t
			       : t + 1 == T && t + 1 < n	    ? 59 + t
								    : -100;
		ck_assert_msg(tok[t] == want_tok && tgt[t] == want_tgt,
			      "pair %d seq %d t %d: tok %d tgt %d, want %d %d",
			      p, s, t, tok[t], tgt[t], want_tok, want_tgt);
		ck_assert_int_eq(pos[t], t < n ? t : t - n);
	}
}

/* The pair order: a permutation of the pairs, a function of seed and
 * epoch. next_pairs: rows 2i and 2i + 1 one pair's chosen and rejected
 * sequences, in that order; every pair once an epoch; the cursor counts
 * pairs and wraps into the next epoch; a reader at a saved cursor gives
 * the same rows. */
START_TEST(test_next_pairs)
{
	enum { P = 3, T = 8 };
	taco_data *d = load_pairs();
	size_t o1[NP], o2[NP], order[NP], order2[NP];
	int seen[NP];
	uint64_t oe = UINT64_MAX, oe2 = UINT64_MAX;
	taco_cursor c = {0, 0}, c2;
	int32_t tok[2 * P * T], tgt[2 * P * T], pos[2 * P * T];
	int32_t tok2[2 * P * T], tgt2[2 * P * T], pos2[2 * P * T];
	size_t drawn = 0;

	taco_data_pair_order(d, 9, 0, o1);
	taco_data_pair_order(d, 9, 0, o2);
	ck_assert_mem_eq(o1, o2, sizeof(o1));
	memset(seen, 0, sizeof(seen));
	for (int i = 0; i < NP; i++)
		seen[o1[i]]++;
	for (int i = 0; i < NP; i++)
		ck_assert_int_eq(seen[i], 1);
	taco_data_pair_order(d, 9, 1, o2);
	ck_assert(memcmp(o1, o2, sizeof(o1)) != 0);
	taco_data_pair_order(d, 10, 0, o2);
	ck_assert(memcmp(o1, o2, sizeof(o1)) != 0);

	/* 3 epochs and a bit: each epoch's pairs in its order */
	for (int call = 0; call < 41; call++) {
		size_t ids[P];
		taco_data_next_pairs(d, 9, &c, order, &oe, P, T, tok, tgt, pos,
				     ids);
		for (int i = 0; i < P; i++, drawn++) {
			uint64_t epoch = drawn / NP;
			size_t want;
			int p = tok[2 * i * T] - 1;
			taco_data_pair_order(d, 9, epoch, o2);
			want = o2[drawn % NP];
			ck_assert_int_eq(p, (int)want);
			ck_assert_uint_eq(ids[i], want);
			check_pair_row(tok + 2 * i * T, tgt + 2 * i * T,
				       pos + 2 * i * T, T, p, 0);
			check_pair_row(tok + (2 * i + 1) * T,
				       tgt + (2 * i + 1) * T,
				       pos + (2 * i + 1) * T, T, p, 1);
		}
	}
	ck_assert_uint_eq(c.epoch, drawn / NP);
	ck_assert_uint_eq(c.index, drawn % NP);
	ck_assert_uint_eq(c.epoch, 3);
	c2 = c;
	taco_data_next_pairs(d, 9, &c, order, &oe, P, T, tok, tgt, pos, NULL);
	taco_data_next_pairs(d, 9, &c2, order2, &oe2, P, T, tok2, tgt2, pos2,
			     NULL);
	ck_assert_mem_eq(tok, tok2, sizeof(tok));
	ck_assert_mem_eq(tgt, tgt2, sizeof(tgt));
	ck_assert_mem_eq(pos, pos2, sizeof(pos));
	ck_assert_mem_eq(&c, &c2, sizeof(c));
	/* another seed, another stream */
	c2.epoch = c2.index = 0;
	oe2 = UINT64_MAX;
	taco_data_next_pairs(d, 10, &c2, order2, &oe2, P, T, tok2, tgt2, pos2,
			     NULL);
	taco_data_pair_order(d, 10, 0, o2);
	ck_assert_int_eq(tok2[0] - 1, (int)o2[0]);
	taco_data_free(d);
}
END_TEST

/* pair_rows: pairs in file order from first; rows of pairs past the end
 * fully masked (token 0, target -100). */
START_TEST(test_pair_rows)
{
	enum { P = 4, T = 16 };
	taco_data *d = load_pairs();
	int32_t tok[2 * P * T], tgt[2 * P * T], pos[2 * P * T];

	taco_data_pair_rows(d, NP - 2, P, T, tok, tgt, pos);
	for (int i = 0; i < 2; i++)
		for (int s = 0; s < 2; s++)
			check_pair_row(tok + (2 * i + s) * T,
				       tgt + (2 * i + s) * T,
				       pos + (2 * i + s) * T, T, NP - 2 + i, s);
	for (int t = 4 * T; t < 2 * P * T; t++) {
		ck_assert_int_eq(tok[t], 0);
		ck_assert_int_eq(tgt[t], -100);
		ck_assert_int_eq(pos[t], t % T);
	}
	/* rows shorter than a sequence: truncated, the last kept token's
	 * target the next label */
	taco_data_pair_rows(d, 4, 1, 5, tok, tgt, pos);
	check_pair_row(tok, tgt, pos, 5, 4, 0);
	check_pair_row(tok + 5, tgt + 5, pos + 5, 5, 4, 1);
	ck_assert_int_eq(tgt[5 + 4], 63);
	taco_data_free(d);
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
	tcase_add_test(tc, test_next_pairs);
	tcase_add_test(tc, test_pair_rows);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
