/* test_dtype.c: fp32 to bf16/f16 rounding (kernels/tk_convert.h); MXFP4
 * weights dequantized as transformers does (engine/safetensors/mxfp4.c). */
#include <check.h>

#include "testutil.h"
#include <math.h>
#include <string.h>

#include "safetensors/mxfp4.h"
#include "safetensors/safetensors.h"
#include "tk_convert.h"
#include "tk_ops.h"

/* tests/fixtures/gen_mxfp4.py: gpt-oss's MXFP4 blocks and scales of 2
 * matrices [3, 64], and transformers' bf16 dequantization, transposed:
 * the same bits. */
START_TEST(test_mxfp4_as_transformers)
{
	taco_st_file *f = NULL;
	taco_err err = {{0}};
	const taco_st_tensor *b, *s, *x;
	uint16_t out[2 * 64 * 3], want[2 * 64 * 3];

	ck_assert_int_eq(
	    taco_st_open(tu_fixture("mxfp4/mxfp4.safetensors"), &f, &err), 0);
	b = taco_st_find(f, "blocks");
	s = taco_st_find(f, "scales");
	x = taco_st_find(f, "expected");
	ck_assert(b && s && x);
	ck_assert_uint_eq(b->nbytes, 2 * 3 * 2 * 16);
	ck_assert_uint_eq(s->nbytes, 2 * 3 * 2);
	ck_assert_uint_eq(x->nbytes, sizeof(want));
	memcpy(want, x->data, sizeof(want));
	taco_mxfp4_dequant_bf16(b->data, s->data, 2, 3, 64, out);
	for (size_t i = 0; i < sizeof(out) / 2; i++)
		ck_assert_msg(out[i] == want[i],
			      "element %zu: 0x%04x, want 0x%04x", i, out[i],
			      want[i]);
	/* every code at scale 2^-127, the subnormals included */
	ck_assert_float_eq(tk_mxfp4_decode(7, 0), 6 * 0x1p-127f);
	ck_assert_float_eq(tk_mxfp4_decode(9, 0), -0.5f * 0x1p-127f);
	ck_assert_float_eq(tk_mxfp4_decode(15, 127), -6.0f);
	taco_st_close(f);
}
END_TEST

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
	tcase_add_test(tc, test_mxfp4_as_transformers);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
