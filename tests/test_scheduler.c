/* test_scheduler.c: admission by memory plan, FIFO with bounded backfill. */
#include <check.h>

#include "daemon/runner/scheduler.h"
#include "testutil.h"

#define GB 1000000000ull

START_TEST(test_fifo_and_parallel)
{
	tacod_sched_state st = {80 * GB, 0, 0, 8, 2};
	tacod_sched_job q[3] = {{30 * GB, 0}, {30 * GB, 0}, {30 * GB, 0}};
	int start[3];

	/* two fit together, the third waits */
	ck_assert_int_eq(tacod_sched_pick(&st, q, 3, start), 2);
	ck_assert_int_eq(start[0], 0);
	ck_assert_int_eq(start[1], 1);
	ck_assert_uint_eq(st.running_bytes, 60 * GB);
	ck_assert_int_eq(tacod_sched_pick(&st, q + 2, 1, start), 0);
}
END_TEST

START_TEST(test_backfill_is_bounded)
{
	/* 50 GB running; head needs 60, small jobs of 10 keep arriving */
	tacod_sched_state st = {80 * GB, 50 * GB, 1, 8, 2};
	tacod_sched_job q[5] = {
	    {60 * GB, 0}, {10 * GB, 0}, {10 * GB, 0}, {10 * GB, 0}};
	int start[5], n;

	n = tacod_sched_pick(&st, q, 4, start);
	/* two backfills pass the head, then it is protected */
	ck_assert_int_eq(n, 2);
	ck_assert_int_eq(start[0], 1);
	ck_assert_int_eq(start[1], 2);
	ck_assert_int_eq(q[0].skips, 2);
	/* even with room for the small job, nothing passes the head now */
	st.running_bytes = 50 * GB;
	st.running = 1;
	ck_assert_int_eq(
	    tacod_sched_pick(&st, (tacod_sched_job[]){q[0], q[3]}, 2, start),
	    0);
	/* when the running job ends the head starts */
	st.running_bytes = 0;
	st.running = 0;
	ck_assert_int_eq(tacod_sched_pick(&st, q, 1, start), 1);
}
END_TEST

START_TEST(test_limits)
{
	tacod_sched_state st = {80 * GB, 0, 0, 1, 2};
	tacod_sched_job q[2] = {{1 * GB, 0}, {1 * GB, 0}};
	int start[2];

	ck_assert_int_eq(tacod_sched_pick(&st, q, 2, start), 1);
	ck_assert(tacod_sched_never_fits(&st, 81 * GB));
	ck_assert(!tacod_sched_never_fits(&st, 80 * GB));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("scheduler");
	TCase *tc = tcase_create("scheduler");

	tcase_add_test(tc, test_fifo_and_parallel);
	tcase_add_test(tc, test_backfill_is_bounded);
	tcase_add_test(tc, test_limits);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
