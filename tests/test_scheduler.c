/* test_scheduler.c: admission by memory plan on one or several devices,
 * FIFO with bounded backfill per device, multi-GPU jobs all at once or
 * not at all. */
#include <check.h>

#include "daemon/runner/scheduler.h"
#include "testutil.h"

#define GB 1000000000ull

/* One device of budget b, running r jobs of rb bytes together. */
static tacod_sched_state one(uint64_t b, uint64_t rb, int r, int max_running)
{
	tacod_sched_state st = {{{b, rb, r}}, 1, r, max_running, 2};
	return st;
}

static tacod_sched_state many(const uint64_t *budget, int n)
{
	tacod_sched_state st = {{{0}}, n, 0, 64, 2};

	for (int d = 0; d < n; d++)
		st.dev[d].budget = budget[d];
	return st;
}

START_TEST(test_fifo_and_parallel)
{
	tacod_sched_state st = one(80 * GB, 0, 0, 8);
	tacod_sched_job q[3] = {
	    {30 * GB, 1, 0}, {30 * GB, 1, 0}, {30 * GB, 1, 0}};
	int start[3];
	uint32_t dev[3];

	/* two fit together, the third waits */
	ck_assert_int_eq(tacod_sched_pick(&st, q, 3, start, dev), 2);
	ck_assert_int_eq(start[0], 0);
	ck_assert_int_eq(start[1], 1);
	ck_assert_uint_eq(dev[0], 1);
	ck_assert_uint_eq(st.dev[0].running_bytes, 60 * GB);
	ck_assert_int_eq(tacod_sched_pick(&st, q + 2, 1, start, dev), 0);
}
END_TEST

START_TEST(test_backfill_is_bounded)
{
	/* 50 GB running; head needs 60, small jobs of 10 keep arriving */
	tacod_sched_state st = one(80 * GB, 50 * GB, 1, 8);
	tacod_sched_job q[5] = {
	    {60 * GB, 1, 0}, {10 * GB, 1, 0}, {10 * GB, 1, 0}, {10 * GB, 1, 0}};
	int start[5], n;
	uint32_t dev[5];

	n = tacod_sched_pick(&st, q, 4, start, dev);
	/* two backfills pass the head, then it is protected */
	ck_assert_int_eq(n, 2);
	ck_assert_int_eq(start[0], 1);
	ck_assert_int_eq(start[1], 2);
	ck_assert_int_eq(q[0].skips, 2);
	/* even with room for the small job, nothing passes the head now */
	st = one(80 * GB, 50 * GB, 1, 8);
	ck_assert_int_eq(tacod_sched_pick(&st, (tacod_sched_job[]){q[0], q[3]},
					  2, start, dev),
			 0);
	/* when the running job ends the head starts */
	st = one(80 * GB, 0, 0, 8);
	ck_assert_int_eq(tacod_sched_pick(&st, q, 1, start, dev), 1);
}
END_TEST

START_TEST(test_limits)
{
	tacod_sched_state st = one(80 * GB, 0, 0, 1);
	tacod_sched_job q[2] = {{1 * GB, 1, 0}, {1 * GB, 1, 0}};
	int start[2];
	uint32_t dev[2];

	ck_assert_int_eq(tacod_sched_pick(&st, q, 2, start, dev), 1);
	ck_assert(tacod_sched_never_fits(&st, 81 * GB, 1));
	ck_assert(!tacod_sched_never_fits(&st, 80 * GB, 1));
	ck_assert(tacod_sched_never_fits(&st, 1 * GB, 2));
}
END_TEST

START_TEST(test_devices_best_fit)
{
	/* 80, 40 and 80 GB: a 30 GB job goes where the least room is left
	 * that holds it, so the 80s stay whole for a 70 */
	static const uint64_t b[] = {80 * GB, 40 * GB, 80 * GB};
	tacod_sched_state st = many(b, 3);
	tacod_sched_job q[4] = {
	    {30 * GB, 1, 0}, {70 * GB, 1, 0}, {70 * GB, 1, 0}, {30 * GB, 1, 0}};
	int start[4];
	uint32_t dev[4];

	ck_assert_int_eq(tacod_sched_pick(&st, q, 4, start, dev), 3);
	ck_assert_uint_eq(dev[0], 1u << 1); /* the 40 */
	ck_assert_uint_eq(dev[1], 1u << 0);
	ck_assert_uint_eq(dev[2], 1u << 2);
	/* the fourth finds 10 GB left on each */
	ck_assert_int_eq(q[3].skips, 0);
	ck_assert_int_eq(st.running, 3);
	ck_assert_int_eq(st.dev[1].running, 1);
}
END_TEST

START_TEST(test_multi_gpu_all_or_none)
{
	static const uint64_t b[] = {80 * GB, 80 * GB, 80 * GB};
	tacod_sched_state st = many(b, 3);
	tacod_sched_job q[3] = {
	    {50 * GB, 1, 0}, {50 * GB, 3, 0}, {20 * GB, 2, 0}};
	int start[3];
	uint32_t dev[3];

	/* the 3-GPU job needs 50 on all three: device 0 has 30 left, so it
	 * waits (the head); the 2-GPU job of 20 takes the two fullest that
	 * hold it: 0 (30 left) and 1 */
	ck_assert_int_eq(tacod_sched_pick(&st, q, 3, start, dev), 2);
	ck_assert_int_eq(start[0], 0);
	ck_assert_uint_eq(dev[0], 1u << 0);
	ck_assert_int_eq(start[1], 2);
	ck_assert_uint_eq(dev[1], (1u << 0) | (1u << 1));
	ck_assert_int_eq(q[1].skips, 1);
	ck_assert_uint_eq(st.dev[0].running_bytes, 70 * GB);
	ck_assert_uint_eq(st.dev[1].running_bytes, 20 * GB);
	ck_assert_uint_eq(st.dev[2].running_bytes, 0);
	/* all three free: it takes them all at once */
	st = many(b, 3);
	ck_assert_int_eq(tacod_sched_pick(&st, q + 1, 1, start, dev), 1);
	ck_assert_uint_eq(dev[0], 7);
	ck_assert(!tacod_sched_never_fits(&st, 80 * GB, 3));
	ck_assert(tacod_sched_never_fits(&st, 80 * GB, 4));
}
END_TEST

START_TEST(test_backfill_per_device)
{
	/* a head of 60 GB can use only the 80 GB device; jobs on the 24 GB
	 * device never delay it, so they never count and are never held */
	static const uint64_t b[] = {80 * GB, 24 * GB};
	tacod_sched_state st = many(b, 2);
	tacod_sched_job q[6] = {{40 * GB, 1, 0}, {60 * GB, 1, 0},
				{10 * GB, 1, 0}, {10 * GB, 1, 0},
				{10 * GB, 1, 0}, {10 * GB, 1, 0}};
	int start[6];
	uint32_t dev[6];

	/* 40 on the 80 (the only one that holds it); the 60 waits; the
	 * small ones: two on the 24 (best fit, no skip), then the 80's 40
	 * left: two pass the head there, the last is held */
	ck_assert_int_eq(tacod_sched_pick(&st, q, 6, start, dev), 5);
	ck_assert_uint_eq(dev[0], 1u << 0);
	ck_assert_uint_eq(dev[1], 1u << 1);
	ck_assert_uint_eq(dev[2], 1u << 1);
	ck_assert_uint_eq(dev[3], 1u << 0);
	ck_assert_uint_eq(dev[4], 1u << 0);
	ck_assert_int_eq(q[1].skips, 2);
	ck_assert_uint_eq(st.dev[1].running_bytes, 20 * GB);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("scheduler");
	TCase *tc = tcase_create("scheduler");

	tcase_add_test(tc, test_fifo_and_parallel);
	tcase_add_test(tc, test_backfill_is_bounded);
	tcase_add_test(tc, test_limits);
	tcase_add_test(tc, test_devices_best_fit);
	tcase_add_test(tc, test_multi_gpu_all_or_none);
	tcase_add_test(tc, test_backfill_per_device);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
