/* test_dataset_kind.c: supervised examples or preference pairs, told by a
 * file's first non-blank line (engine/data/dataset_kind.h). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/dataset.h"
#include "data/dataset_kind.h"
#include "testutil.h"

static char dir[64];

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/test-dataset-kind-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void remove_dir(void)
{
	char path[128];

	snprintf(path, sizeof(path), "%s/data.jsonl", dir);
	unlink(path);
	rmdir(dir);
}

/* The kind of a file holding text (n bytes). */
static int kind_of_bytes(const char *text, size_t n)
{
	char path[128];
	taco_err err = {{0}};
	FILE *f;
	int kind = -1;

	snprintf(path, sizeof(path), "%s/data.jsonl", dir);
	ck_assert_ptr_nonnull(f = fopen(path, "wb"));
	ck_assert_uint_eq(fwrite(text, 1, n, f), n);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_msg(taco_dataset_kind(path, &kind, &err) == 0, "%s", err.msg);
	return kind;
}

static int kind_of(const char *text)
{
	return kind_of_bytes(text, strlen(text));
}

#define PAIR                                                                   \
	"{\"input\": {\"messages\": [{\"role\": \"user\", \"content\": "       \
	"\"Hi\"}]}, \"preferred_output\": [{\"role\": \"assistant\", "         \
	"\"content\": \"Hello!\"}], \"non_preferred_output\": [{\"role\": "    \
	"\"assistant\", \"content\": \"What.\"}]}"

START_TEST(test_kinds)
{
	static const struct {
		const char *text;
		int kind;
	} cases[] = {
	    {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n",
	     TACO_DATASET_KIND_SUPERVISED},
	    {"{\"prompt\": \"a\", \"completion\": \"b\"}\n",
	     TACO_DATASET_KIND_SUPERVISED},
	    {"{\"text\": \"a\"}", TACO_DATASET_KIND_SUPERVISED},
	    {"{\"input_ids\": [1, 2]}\n", TACO_DATASET_KIND_SUPERVISED},
	    {PAIR "\n", TACO_DATASET_KIND_PREFERENCE},
	    {"{\"input\": {}, \"non_preferred_output\": []}\n",
	     TACO_DATASET_KIND_PREFERENCE},
	    /* a pair wins over a supervised field beside it */
	    {"{\"input\": {}, \"preferred_output\": [], \"text\": \"a\"}\n",
	     TACO_DATASET_KIND_PREFERENCE},
	    /* blank lines first, as the loader skips them */
	    {"\n  \t\r\n\r\n" PAIR "\r\n", TACO_DATASET_KIND_PREFERENCE},
	    /* only the first line counts */
	    {"{\"text\": \"a\"}\n" PAIR "\n", TACO_DATASET_KIND_SUPERVISED},
	    /* nothing to tell by: the validation's report says why */
	    {"", TACO_DATASET_KIND_UNKNOWN},
	    {"\n \n\t\n", TACO_DATASET_KIND_UNKNOWN},
	    {"{\"input\": {}}\n" PAIR "\n", TACO_DATASET_KIND_UNKNOWN},
	    {"{\"preferred_output\": []}\n", TACO_DATASET_KIND_UNKNOWN},
	    {"{\"prompt\": \"a\"}\n", TACO_DATASET_KIND_UNKNOWN},
	    {"{\"text\": \"a\"\n", TACO_DATASET_KIND_UNKNOWN},
	    {"[{\"text\": \"a\"}]\n", TACO_DATASET_KIND_UNKNOWN},
	    {"\"text\"\n", TACO_DATASET_KIND_UNKNOWN},
	    {"{\"text\": \"a\", \"text\": \"b\"}\n", TACO_DATASET_KIND_UNKNOWN},
	    {"{\"text\": \"\xff\"}\n", TACO_DATASET_KIND_UNKNOWN},
	};

	make_dir();
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		ck_assert_msg(kind_of(cases[i].text) == cases[i].kind,
			      "case %zu: %s", i,
			      taco_dataset_kind_name(kind_of(cases[i].text)));
	/* a NUL ends nothing: the line is not JSON */
	ck_assert_int_eq(kind_of_bytes("{\"text\": \"a\"}\0\n", 15),
			 TACO_DATASET_KIND_UNKNOWN);
	remove_dir();
}
END_TEST

/* The read is bounded: a first line of TACO_DATASET_MAX_LINE bytes is
 * read, a longer one is not, and neither is a line after more than that
 * many bytes of blank lines. */
START_TEST(test_bounds)
{
	size_t max = TACO_DATASET_MAX_LINE;
	char *text = malloc(2 * max + 64);
	size_t n;

	ck_assert_ptr_nonnull(text);
	make_dir();
	/* {"text": "a"} padded with spaces to the limit, then a newline */
	n = (size_t)sprintf(text, "{\"text\": \"a\"");
	memset(text + n, ' ', max - 1 - n);
	text[max - 1] = '}';
	text[max] = '\n';
	ck_assert_int_eq(kind_of_bytes(text, max + 1),
			 TACO_DATASET_KIND_SUPERVISED);
	/* one byte more */
	memmove(text + 1, text, max + 1);
	text[0] = ' ';
	ck_assert_int_eq(kind_of_bytes(text, max + 2),
			 TACO_DATASET_KIND_UNKNOWN);
	/* blank lines up to the limit, then a line */
	memset(text, '\n', max);
	n = max + (size_t)sprintf(text + max, "{\"text\": \"a\"}\n");
	ck_assert_int_eq(kind_of_bytes(text, n), TACO_DATASET_KIND_SUPERVISED);
	/* past it */
	memset(text, '\n', max + 1);
	n = max + 1 + (size_t)sprintf(text + max + 1, "{\"text\": \"a\"}\n");
	ck_assert_int_eq(kind_of_bytes(text, n), TACO_DATASET_KIND_UNKNOWN);
	free(text);
	remove_dir();
}
END_TEST

START_TEST(test_unreadable)
{
	taco_err err = {{0}};
	int kind = -1;

	ck_assert_int_eq(
	    taco_dataset_kind("/nonexistent/data.jsonl", &kind, &err), -ENOENT);
	ck_assert_int_eq(kind, TACO_DATASET_KIND_UNKNOWN);
	ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/data.jsonl"));
	/* a directory opens but does not read */
	ck_assert_int_lt(taco_dataset_kind("/", &kind, &err), 0);
	ck_assert_ptr_nonnull(strstr(err.msg, "/: "));
	ck_assert_str_eq(taco_dataset_kind_name(TACO_DATASET_KIND_PREFERENCE),
			 "preference");
	ck_assert_str_eq(taco_dataset_kind_name(TACO_DATASET_KIND_SUPERVISED),
			 "supervised");
	ck_assert_str_eq(taco_dataset_kind_name(TACO_DATASET_KIND_UNKNOWN),
			 "unknown");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("dataset_kind");
	TCase *tc = tcase_create("dataset_kind");

	tcase_add_test(tc, test_kinds);
	tcase_add_test(tc, test_bounds);
	tcase_add_test(tc, test_unreadable);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
