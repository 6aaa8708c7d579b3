/* test_text.c: messages cut to fit a fixed field (engine/util/text.h) and
 * the errors built on them: cut at a character boundary, never inside a
 * UTF-8 sequence, and marked so that a reader knows more was said. */
#include <check.h>
#include <jansson.h>
#include <string.h>

#include "testutil.h"
#include "util/taco_err.h"
#include "util/text.h"

/* 1 when s is UTF-8 that Jansson takes (what every reply is built with) */
static int json_ok(const char *s)
{
	json_t *j = json_string(s);
	int ok = j != NULL;

	json_decref(j);
	return ok;
}

static int ends_with(const char *s, const char *end)
{
	size_t a = strlen(s), b = strlen(end);

	return a >= b && !memcmp(s + a - b, end, b);
}

START_TEST(test_copy_fits)
{
	char d[16];

	ck_assert_int_eq(taco_text_copy(d, sizeof(d), "fifteen bytes!!"), 0);
	ck_assert_str_eq(d, "fifteen bytes!!");
	ck_assert_int_eq(taco_text_copy(d, sizeof(d), ""), 0);
	ck_assert_str_eq(d, "");
}
END_TEST

/* Every offset of a 2-, 3- and 4-byte character against the cut. */
START_TEST(test_copy_cuts_at_characters)
{
	static const char *chars[] = {"\xc3\xa9", "\xe2\x82\xac",
				      "\xf0\x9f\x98\x80"};
	char src[256], d[32];

	for (int c = 0; c < 3; c++)
		for (int lead = 0; lead < 4; lead++) {
			size_t n = 0;

			memset(src, 'a', (size_t)lead);
			n = (size_t)lead;
			while (n + 4 < sizeof(src) - 1) {
				memcpy(src + n, chars[c], strlen(chars[c]));
				n += strlen(chars[c]);
			}
			src[n] = 0;
			ck_assert_int_eq(taco_text_copy(d, sizeof(d), src), 1);
			ck_assert(strlen(d) < sizeof(d));
			ck_assert(ends_with(d, TACO_TEXT_CUT));
			ck_assert_msg(json_ok(d), "char %d lead %d: %s", c,
				      lead, d);
			/* all that is kept is the start of src */
			ck_assert(!strncmp(d, src,
					   strlen(d) - strlen(TACO_TEXT_CUT)));
			/* and no more than one character was given up */
			ck_assert_uint_ge(strlen(d), sizeof(d) - 1 - 3);
		}
}
END_TEST

START_TEST(test_format)
{
	char d[24];

	ck_assert_int_eq(taco_text_format(d, sizeof(d), "%s=%d", "x", 5), 0);
	ck_assert_str_eq(d, "x=5");
	ck_assert_int_eq(taco_text_format(d, sizeof(d), "%s",
					  "sbatch: error: \xe2\x82\xac\xe2\x82"
					  "\xac\xe2\x82\xac\xe2\x82\xac"),
			 1);
	ck_assert(ends_with(d, TACO_TEXT_CUT));
	ck_assert(json_ok(d));
}
END_TEST

START_TEST(test_tail)
{
	char src[200], d[20];
	size_t n = 0;

	/* a whole tail is left as it is */
	ck_assert_int_eq(taco_text_tail(d, sizeof(d), "short", 5, 0), 0);
	ck_assert_str_eq(d, "short");
	/* a tail of a longer text is marked even when it fits */
	ck_assert_int_eq(taco_text_tail(d, sizeof(d), "short", 5, 1), 1);
	ck_assert_str_eq(d, TACO_TEXT_CUT_HEAD "short");
	/* too long: the end is kept, from the start of a character */
	while (n + 3 < sizeof(src)) {
		memcpy(src + n, "\xe2\x82\xac", 3);
		n += 3;
	}
	src[n - 1] = 'Z'; /* the last character: "\xe2\x82Z" is not one */
	src[n - 2] = 'Y';
	src[n - 3] = 'X';
	ck_assert_int_eq(taco_text_tail(d, sizeof(d), src, n, 0), 1);
	ck_assert(!strncmp(d, TACO_TEXT_CUT_HEAD,
			   strlen(TACO_TEXT_CUT_HEAD)));
	ck_assert(ends_with(d, "XYZ"));
	ck_assert(json_ok(d));
	/* in place, as the Slurm stderr reader uses it */
	memcpy(d, "\x82\xac" "abc", 6);
	ck_assert_int_eq(taco_text_tail(d, sizeof(d), d, 5, 1), 1);
	ck_assert_str_eq(d, TACO_TEXT_CUT_HEAD "abc");
}
END_TEST

START_TEST(test_err)
{
	taco_err err = {{0}};
	char big[3000];

	for (size_t i = 0; i + 2 < sizeof(big); i += 2)
		memcpy(big + i, "\xc3\xa9", 2);
	big[sizeof(big) - 2] = 0;
	ck_assert_int_eq(taco_err_set(&err, -EIO, "x%s", big), -EIO);
	ck_assert(ends_with(err.msg, TACO_TEXT_CUT));
	ck_assert(json_ok(err.msg));
	ck_assert_int_eq(taco_err_at(&err, -EINVAL, "f.json", "line %d", 3),
			 -EINVAL);
	ck_assert_str_eq(err.msg, "f.json: line 3");
	ck_assert_int_eq(taco_err_prefix(&err, -EINVAL, "job %s", "j"),
			 -EINVAL);
	ck_assert_str_eq(err.msg, "job j: f.json: line 3");
	taco_err_set(&err, -EIO, "%s", big + 1); /* odd: starts mid-char */
	taco_err_prefix(&err, -EIO, "p");
	ck_assert(ends_with(err.msg, TACO_TEXT_CUT));
	ck_assert(taco_err_at(NULL, -EIO, "f", "x") == -EIO);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("text");
	TCase *tc = tcase_create("core");

	suite_add_tcase(s, tc);
	tcase_add_test(tc, test_copy_fits);
	tcase_add_test(tc, test_copy_cuts_at_characters);
	tcase_add_test(tc, test_format);
	tcase_add_test(tc, test_tail);
	tcase_add_test(tc, test_err);
	return tu_run(s, 0);
}
