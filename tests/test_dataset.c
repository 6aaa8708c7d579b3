/* test_dataset.c: data files against what Hugging Face computes
 * (tests/fixtures/chat/gen_chat.py): chat templates with their assistant
 * masks, prompt/completion and text, multiple-choice scores, the Llama 3
 * template's trim; every validation code and the report's summary. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/dataset.h"
#include "testutil.h"
#include "train/eval.h"

static taco_tok *tok;
static json_t *expected;
static char model_dir[4096];

static void setup(void)
{
	taco_err err = {{0}};

	snprintf(model_dir, sizeof(model_dir), "%s",
		 tu_fixture("models/chat_llama"));
	ck_assert_msg(taco_tok_load(model_dir, &tok, &err) == 0, "%s", err.msg);
	expected = json_load_file(tu_fixture("chat/expected.json"), 0, NULL);
	ck_assert_ptr_nonnull(expected);
}

static void teardown(void)
{
	taco_tok_free(tok);
	json_decref(expected);
}

static void opts(taco_dataset_opts *o, int tmpl)
{
	taco_dataset_defaults(o);
	o->model_dir = model_dir;
	o->template_id = tmpl;
	o->seq_len = 1024;
}

/* Example i of d equals rows[i] of the expected ids and mask. */
static void compare(const taco_data *d, json_t *rows, const char *what)
{
	ck_assert_uint_eq(d->n, json_array_size(rows));
	for (size_t i = 0; i < d->n; i++) {
		json_t *ids = json_object_get(json_array_get(rows, i), "ids");
		json_t *mask = json_object_get(json_array_get(rows, i), "mask");
		size_t o = d->off[i], n = d->off[i + 1] - o;

		ck_assert_msg(n == json_array_size(ids),
			      "%s example %zu: %zu tokens, HF %zu", what, i, n,
			      json_array_size(ids));
		for (size_t t = 0; t < n; t++) {
			int32_t id =
			    (int32_t)json_integer_value(json_array_get(ids, t));
			int m =
			    (int)json_integer_value(json_array_get(mask, t));
			ck_assert_msg(d->tokens[o + t] == id,
				      "%s example %zu token %zu: %d, HF %d",
				      what, i, t, d->tokens[o + t], id);
			ck_assert_msg(d->labels[o + t] == (m ? id : -100),
				      "%s example %zu token %zu: label %d, HF "
				      "mask %d",
				      what, i, t, d->labels[o + t], m);
		}
	}
}

START_TEST(test_chat_templates)
{
	static const char *const names[] = {"chatml", "llama3", "mistral"};
	/* chatml comes from the model's chat_template.jinja */
	static const int ids[] = {TACO_TEMPLATE_AUTO, TACO_TEMPLATE_LLAMA3,
				  TACO_TEMPLATE_MISTRAL};
	taco_dataset_opts o;
	taco_dataset_report rep;
	taco_data *d = NULL;
	taco_err err = {{0}};
	int r;

	opts(&o, ids[_i]);
	r = taco_dataset_load(tu_fixture("chat/chat.jsonl"), tok, &o, &d, &rep,
			      &err);
	ck_assert_msg(r == 0, "%s", err.msg);
	ck_assert_int_eq(rep.errors, 0);
	if (_i == 0)
		ck_assert_int_eq(rep.template_id, TACO_TEMPLATE_CHATML);
	compare(d,
		json_object_get(json_object_get(expected, "chat"), names[_i]),
		names[_i]);
	taco_data_free(d);
}
END_TEST

START_TEST(test_completion_and_text)
{
	taco_dataset_opts o;
	taco_dataset_report rep;
	taco_data *d = NULL;
	taco_err err = {{0}};

	opts(&o, TACO_TEMPLATE_AUTO);
	ck_assert_int_eq(taco_dataset_load(tu_fixture("chat/completion.jsonl"),
					   tok, &o, &d, &rep, &err),
			 0);
	compare(d, json_object_get(expected, "completion"), "completion");
	taco_data_free(d);
}
END_TEST

/* train_on all: every token is a label. */
START_TEST(test_train_on_all)
{
	taco_dataset_opts o;
	taco_dataset_report rep;
	taco_data *d = NULL;
	taco_err err = {{0}};

	opts(&o, TACO_TEMPLATE_CHATML);
	o.train_on_all = 1;
	ck_assert_int_eq(taco_dataset_load(tu_fixture("chat/chat.jsonl"), tok,
					   &o, &d, &rep, &err),
			 0);
	for (size_t i = 0; i < d->n_tokens; i++)
		ck_assert_int_eq(d->labels[i], d->tokens[i]);
	ck_assert_int_eq(rep.trainable_tokens + (int64_t)d->n,
			 (int64_t)d->n_tokens);
	taco_data_free(d);
}
END_TEST

static char *write_tmp(const char *text)
{
	static char path[64];
	int fd;

	snprintf(path, sizeof(path), "/tmp/taco-ds-XXXXXX");
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (int)strlen(text));
	close(fd);
	return path;
}

/* One line per problem code, each reported at its line with its
 * severity; the file fails with all of them. */
START_TEST(test_every_validation_code)
{
	static const struct {
		const char *line;
		int code, error;
	} cases[] = {
	    {"{not json", TACO_P_INVALID_JSON, 1},
	    {"{\"text\": \"\xff\xfe\"}", TACO_P_INVALID_UTF8, 1},
	    {"{\"foo\": 1}", TACO_P_UNKNOWN_FORMAT, 1},
	    {"{\"messages\": []}", TACO_P_MISSING_MESSAGES, 1},
	    {"{\"messages\": [3]}", TACO_P_INVALID_MESSAGE, 1},
	    {"{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}",
	     TACO_P_UNRECOGNIZED_ROLE, 1},
	    {"{\"messages\": [{\"role\": \"user\"}]}", TACO_P_MISSING_CONTENT,
	     1},
	    {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}",
	     TACO_P_NO_ASSISTANT_MESSAGE, 1},
	    {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, "
	     "{\"role\": \"assistant\", \"content\": \"y\", \"weight\": "
	     "2}]}",
	     TACO_P_INVALID_WEIGHT, 1},
	    {"{\"prompt\": 3, \"completion\": \"x\"}", TACO_P_INVALID_FIELD, 1},
	    {"{\"text\": \"\"}", TACO_P_EMPTY_EXAMPLE, 1},
	    {"{\"input_ids\": [1, 99999]}", TACO_P_INVALID_TOKEN, 1},
	    {"{\"text\": \"the quick brown fox jumps over the lazy dog "
	     "the quick brown fox jumps over the lazy dog\"}",
	     TACO_P_TOO_LONG, 0},
	    {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, "
	     "{\"role\": \"assistant\", \"content\": \"y\", \"weight\": "
	     "0}]}",
	     TACO_P_ALL_LABELS_MASKED, 0},
	};
	const int n = sizeof(cases) / sizeof(cases[0]);
	char text[8192] = "";
	taco_dataset_opts o;
	taco_dataset_report rep;
	taco_data *d = NULL;
	taco_err err = {{0}};
	char *path;

	for (int i = 0; i < n; i++) {
		strcat(text, cases[i].line);
		strcat(text, "\n");
	}
	strcat(text, "{\"text\": \"a good line\"}\n");
	path = write_tmp(text);
	opts(&o, TACO_TEMPLATE_CHATML);
	o.seq_len = 16;
	ck_assert_int_eq(taco_dataset_load(path, tok, &o, &d, &rep, &err),
			 -EINVAL);
	ck_assert_ptr_null(d);
	ck_assert_ptr_nonnull(strstr(err.msg, "12 errors"));
	ck_assert_int_eq(rep.errors, 12);
	ck_assert_int_eq(rep.warnings, 2);
	ck_assert_int_eq(rep.n_listed, n);
	for (int i = 0; i < n; i++) {
		ck_assert_msg(rep.listed[i].line == i + 1 &&
				  rep.listed[i].code == cases[i].code &&
				  rep.listed[i].error == cases[i].error,
			      "line %d: got line %lld %s (%s)", i + 1,
			      (long long)rep.listed[i].line,
			      taco_problem_name(rep.listed[i].code),
			      rep.listed[i].detail);
		ck_assert_int_eq(rep.by_code[cases[i].code], 1);
	}
	ck_assert_int_eq(rep.truncated, 1);
	ck_assert_int_eq(rep.dropped, 1);
	unlink(path);
}
END_TEST

/* OpenAI's function-calling fields and a message's name are not rendered:
 * a warning each, and the examples train as the plain chats. */
START_TEST(test_ignored_fields_warn)
{
	taco_dataset_opts o;
	taco_dataset_report rep;
	taco_data *d = NULL;
	taco_err err = {{0}};
	char *path = write_tmp(
	    "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, "
	    "{\"role\": \"assistant\", \"content\": \"y\"}], \"tools\": "
	    "[], \"parallel_tool_calls\": false}\n"
	    "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", "
	    "\"name\": \"ann\"}, {\"role\": \"assistant\", \"content\": "
	    "\"y\"}]}\n");

	opts(&o, TACO_TEMPLATE_CHATML);
	o.seq_len = 64;
	ck_assert_int_eq(taco_dataset_load(path, tok, &o, &d, &rep, &err), 0);
	ck_assert_int_eq(rep.errors, 0);
	ck_assert_int_eq(rep.warnings, 3);
	ck_assert_int_eq(rep.by_code[TACO_P_IGNORED_FIELD], 3);
	ck_assert_int_eq(rep.kept, 2);
	ck_assert_ptr_nonnull(strstr(rep.listed[0].detail, "\"tools\""));
	ck_assert_ptr_nonnull(
	    strstr(rep.listed[1].detail, "\"parallel_tool_calls\""));
	ck_assert_ptr_nonnull(strstr(rep.listed[2].detail, "messages[0].name"));
	ck_assert_str_eq(taco_problem_name(TACO_P_IGNORED_FIELD),
			 "ignored_field");
	taco_data_free(d);
	unlink(path);
}
END_TEST

/* The Llama 3 template's `| trim` is Python's str.strip(): every
 * str.isspace() character (NBSP, U+3000, U+2028, \x0b, \x1c-\x1f, \x85,
 * ...) is stripped, others (U+200B, U+FEFF, ...) are not; against
 * apply_chat_template (chat/trim_expected.json, gen_chat.py --trim). */
START_TEST(test_llama3_trim)
{
	json_t *exp =
	    json_load_file(tu_fixture("chat/trim_expected.json"), 0, NULL);
	taco_dataset_opts o;
	taco_dataset_report rep;
	taco_data *d = NULL;
	taco_err err = {{0}};
	int r;

	ck_assert_ptr_nonnull(exp);
	ck_assert_uint_eq(json_array_size(json_object_get(exp, "py_space")),
			  29);
	opts(&o, TACO_TEMPLATE_LLAMA3);
	r = taco_dataset_load(tu_fixture("chat/trim.jsonl"), tok, &o, &d, &rep,
			      &err);
	ck_assert_msg(r == 0, "%s", err.msg);
	ck_assert_int_eq(rep.errors, 0);
	compare(d, json_object_get(exp, "llama3"), "llama3 trim");
	taco_data_free(d);
	json_decref(exp);
}
END_TEST

/* The summary (the error a file fails with, the report's "summary" and
 * its printed line) quotes the first error, not an earlier warning, even
 * past the listed problems; with warnings only it says there is no error
 * and quotes the first warning. */
START_TEST(test_summary_first_error)
{
	static const char long_line[] =
	    "{\"text\": \"the quick brown fox jumps over the lazy dog the "
	    "quick brown fox jumps over the lazy dog\"}\n";
	char *text = malloc(200 * sizeof(long_line) + 64), *path, *out = NULL;
	taco_dataset_opts o;
	taco_dataset_report rep;
	taco_data *d = NULL;
	taco_err err = {{0}};
	json_t *j;
	size_t outlen = 0;
	FILE *f;

	/* a warning on line 1, the first error on line 2 */
	strcpy(text, long_line);
	strcat(text, "{not json\n{\"foo\": 1}\n");
	path = write_tmp(text);
	opts(&o, TACO_TEMPLATE_CHATML);
	o.seq_len = 16;
	ck_assert_int_eq(taco_dataset_load(path, tok, &o, &d, &rep, &err),
			 -EINVAL);
	ck_assert_msg(strstr(err.msg, "2 errors in 3 lines (first: line 2, "
				      "invalid_json: ") &&
			  !strstr(err.msg, "too_long"),
		      "%s", err.msg);
	ck_assert_int_eq(rep.first_error.line, 2);
	ck_assert_int_eq(rep.first_warning.line, 1);
	j = taco_dataset_report_json(&rep, "train.jsonl");
	ck_assert_ptr_nonnull(strstr(
	    json_string_value(json_object_get(j, "summary")),
	    "train.jsonl: 2 errors in 3 lines (first: line 2, invalid_json"));
	json_decref(j);
	f = open_memstream(&out, &outlen);
	taco_dataset_report_print(&rep, "train.jsonl", f);
	fclose(f);
	ck_assert_ptr_nonnull(strstr(out, "(first: line 2, invalid_json"));
	free(out);
	unlink(path);

	/* the first error after more warnings than are listed */
	text[0] = 0;
	for (int i = 0; i < TACO_DATASET_MAX_LISTED + 5; i++)
		strcat(text, long_line);
	strcat(text, "{\"foo\": 1}\n");
	path = write_tmp(text);
	ck_assert_int_eq(taco_dataset_load(path, tok, &o, &d, &rep, &err),
			 -EINVAL);
	ck_assert_msg(strstr(err.msg, "1 error in 106 lines (first: line 106, "
				      "unknown_format: "),
		      "%s", err.msg);
	unlink(path);

	/* warnings only: the file loads; no error, the first warning */
	strcpy(text, "{\"text\": \"ok\"}\n");
	strcat(text, long_line);
	strcat(text, long_line);
	path = write_tmp(text);
	ck_assert_int_eq(taco_dataset_load(path, tok, &o, &d, &rep, &err), 0);
	taco_data_free(d);
	j = taco_dataset_report_json(&rep, "train.jsonl");
	ck_assert_str_eq(
	    json_string_value(json_object_get(j, "summary")),
	    "train.jsonl: no errors, 2 warnings in 3 lines (first warning: "
	    "line 2, too_long: 19 tokens, seq_len is 16: truncated)");
	json_decref(j);
	unlink(path);
	free(text);
}
END_TEST

/* Warnings only: the file passes; drop and error policies. */
START_TEST(test_overlength_policies)
{
	const char *text = "{\"text\": \"one two\"}\n"
			   "{\"text\": \"the quick brown fox jumps over the "
			   "lazy dog the quick brown fox\"}\n";
	char *path = write_tmp(text);
	taco_dataset_opts o;
	taco_dataset_report rep;
	taco_data *d = NULL;
	taco_err err = {{0}};

	opts(&o, TACO_TEMPLATE_CHATML);
	o.seq_len = 8;
	ck_assert_int_eq(taco_dataset_load(path, tok, &o, &d, &rep, &err), 0);
	ck_assert_uint_eq(d->n, 2);
	ck_assert_uint_eq(d->off[2] - d->off[1], 8);
	ck_assert_int_eq(rep.truncated, 1);
	taco_data_free(d);
	o.overlength = TACO_OVERLENGTH_DROP;
	ck_assert_int_eq(taco_dataset_load(path, tok, &o, &d, &rep, &err), 0);
	ck_assert_uint_eq(d->n, 1);
	ck_assert_int_eq(rep.dropped, 1);
	taco_data_free(d);
	o.overlength = TACO_OVERLENGTH_ERROR;
	ck_assert_int_eq(taco_dataset_load(path, tok, &o, &d, &rep, &err),
			 -EINVAL);
	ck_assert_int_eq(rep.by_code[TACO_P_TOO_LONG], 1);
	ck_assert_int_eq(rep.listed[0].line, 2);
	unlink(path);
}
END_TEST

/* transformers' default model_max_length (1e30, written as an integer) is
 * beyond json_int_t; the template must still be found. */
START_TEST(test_template_beside_huge_integer)
{
	char dir[] = "/tmp/taco-tmpl-XXXXXX", path[128];
	taco_err err = {{0}};
	int t = -1;
	FILE *f;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
	f = fopen(path, "w");
	fputs("{\"model_max_length\": 1000000000000000019884624838656, "
	      "\"chat_template\": \"{% for m in messages %}<|start_header_id|>"
	      "{% endfor %}\"}",
	      f);
	fclose(f);
	ck_assert_msg(taco_template_detect(dir, &t, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(t, TACO_TEMPLATE_LLAMA3);
	f = fopen(path, "w");
	fputs("{\"chat_template\": ", f); /* cut short */
	fclose(f);
	ck_assert_int_lt(taco_template_detect(dir, &t, &err), 0);
	ck_assert_ptr_nonnull(strstr(err.msg, "tokenizer_config.json:1"));
	unlink(path);
	rmdir(dir);
}
END_TEST

START_TEST(test_unrecognised_template)
{
	int t;
	taco_err err = {{0}};

	/* the fixture models have no tokenizer_config.json at all */
	ck_assert_int_lt(
	    taco_template_detect(tu_fixture("models/llama_gqa"), &t, &err), 0);
	ck_assert_ptr_nonnull(strstr(err.msg, "chat_template"));
}
END_TEST

/* Multiple choice: the scores and the accuracy transformers computes. */
START_TEST(test_multiple_choice)
{
	taco_mc_set *s = NULL;
	taco_model *m = NULL;
	taco_err err = {{0}};
	json_t *mc = json_object_get(expected, "mc");
	json_t *scores = json_object_get(mc, "scores");
	double acc, *rows;
	size_t row = 0;

	ck_assert_int_eq(
	    taco_mc_load(tu_fixture("chat/mc.jsonl"), tok, 100, &s, &err), 0);
	ck_assert_int_eq(taco_model_load(model_dir, tk_cpu_ops(), &m, &err), 0);
	rows = malloc(s->n_rows * sizeof(double));
	ck_assert_int_eq(taco_mc_eval(m, s, 3, 64, &acc, rows, &err), 0);
	ck_assert_uint_eq(s->n, json_array_size(scores));
	for (size_t e = 0; e < s->n; e++) {
		json_t *ex = json_array_get(scores, e);
		for (size_t c = 0; c < json_array_size(ex); c++, row++) {
			double want = json_real_value(json_array_get(ex, c));
			ck_assert_msg(fabs(rows[row] - want) <
					  1e-4 * fabs(want) + 1e-4,
				      "example %zu choice %zu: %.6f, HF %.6f",
				      e, c, rows[row], want);
		}
	}
	ck_assert_double_eq_tol(
	    acc, json_real_value(json_object_get(mc, "accuracy")), 1e-12);
	free(rows);
	taco_model_free(m);
	taco_mc_free(s);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("dataset");
	TCase *tc = tcase_create("dataset");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_chat_templates, 0, 3);
	tcase_add_test(tc, test_completion_and_text);
	tcase_add_test(tc, test_train_on_all);
	tcase_add_test(tc, test_every_validation_code);
	tcase_add_test(tc, test_ignored_fields_warn);
	tcase_add_test(tc, test_llama3_trim);
	tcase_add_test(tc, test_summary_first_error);
	tcase_add_test(tc, test_overlength_policies);
	tcase_add_test(tc, test_unrecognised_template);
	tcase_add_test(tc, test_template_beside_huge_integer);
	tcase_add_test(tc, test_multiple_choice);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
