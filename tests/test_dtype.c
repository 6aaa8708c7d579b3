/* test_dtype.c: fp32 to bf16/f16 rounding (kernels/tk_convert.h). */
#include <check.h>

#include "testutil.h"
#include <math.h>
#include <string.h>

#include "tk_convert.h"
#include "tk_ops.h"

/* Every finite or infinite pattern survives decode then encode. */
START_TEST(test_all_patterns_round_trip)
{
	const tk_ops *o = tk_cpu_ops();

	for (uint32_t h = 0; h < 65536; h++) {
		uint16_t x = (uint16_t)h;
		float f;

		o->to_f32(&f, &x, TK_F16, 1);
		if (!isnan(f))
			ck_assert_uint_eq(tk_f32_f16_rne(f), x);
		else
			ck_assert(isnan(f) &&
				  (tk_f32_f16_rne(f) & 0x7C00) == 0x7C00);
		o->to_f32(&f, &x, TK_BF16, 1);
		if (!isnan(f))
			ck_assert_uint_eq(tk_f32_bf16_rne(f), x);
		else
			ck_assert(isnan(tk_bf16_f32(tk_f32_bf16_rne(f))));
	}
}
END_TEST

START_TEST(test_rounding)
{
	/* Ties to even: 1 + 2^-8 lies halfway between bf16 1 and 1 + 2^-7. */
	ck_assert_uint_eq(tk_f32_bf16_rne(1.0f + 0x1p-8f), 0x3F80);
	ck_assert_uint_eq(tk_f32_bf16_rne(1.0f + 3 * 0x1p-8f), 0x3F82);
	ck_assert_uint_eq(tk_f32_bf16_rne(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);
	/* f16: halfway between 1 and 1 + 2^-10 goes to 1. */
	ck_assert_uint_eq(tk_f32_f16_rne(1.0f + 0x1p-11f), 0x3C00);
	ck_assert_uint_eq(tk_f32_f16_rne(1.0f + 3 * 0x1p-11f), 0x3C02);
	ck_assert_uint_eq(tk_f32_f16_rne(65504.0f), 0x7BFF);
	ck_assert_uint_eq(tk_f32_f16_rne(65519.0f), 0x7BFF);
	ck_assert_uint_eq(tk_f32_f16_rne(65520.0f), 0x7C00);
	ck_assert_uint_eq(tk_f32_f16_rne(-1e10f), 0xFC00);
	/* Subnormals: 2^-24 is the smallest; half of it rounds to 0. */
	ck_assert_uint_eq(tk_f32_f16_rne(0x1p-24f), 0x0001);
	ck_assert_uint_eq(tk_f32_f16_rne(0x1p-25f), 0x0000);
	ck_assert_uint_eq(tk_f32_f16_rne(0x1.8p-24f), 0x0002);
	ck_assert_uint_eq(tk_f32_f16_rne(-0.0f), 0x8000);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("dtype");
	TCase *tc = tcase_create("dtype");

	tcase_add_test(tc, test_all_patterns_round_trip);
	tcase_add_test(tc, test_rounding);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
