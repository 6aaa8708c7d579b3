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

#include "data/chat.h"
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
		ck_assert_str_eq(rep.chat_template, "chat_template.jinja");
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
	    {"{\"messages\": [{\"role\": \"function\", \"content\": "
	     "\"x\"}]}",
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

/* OpenAI's tool fields are read (empty tools, parallel_tool_calls) and a
 * message's name is the template's to render; only the legacy functions
 * field is not read: a warning, and the example trains without it. */
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
	    "\"y\"}], \"functions\": [{\"name\": \"f\"}]}\n");

	opts(&o, TACO_TEMPLATE_CHATML);
	o.seq_len = 64;
	ck_assert_int_eq(taco_dataset_load(path, tok, &o, &d, &rep, &err), 0);
	ck_assert_int_eq(rep.errors, 0);
	ck_assert_int_eq(rep.warnings, 1);
	ck_assert_int_eq(rep.by_code[TACO_P_IGNORED_FIELD], 1);
	ck_assert_int_eq(rep.kept, 2);
	ck_assert_int_eq(rep.listed[0].line, 2);
	ck_assert_ptr_nonnull(strstr(rep.listed[0].detail, "\"functions\""));
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
	taco_chat_opts co = {0};
	taco_chat *c = NULL;
	taco_err err = {{0}};
	FILE *f;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
	f = fopen(path, "w");
	fputs("{\"model_max_length\": 1000000000000000019884624838656, "
	      "\"chat_template\": \"{% for m in messages %}<|start_header_id|>"
	      "{% endfor %}\"}",
	      f);
	fclose(f);
	co.model_dir = dir;
	ck_assert_msg(taco_chat_open(&co, tok, &c, &err) == 0, "%s", err.msg);
	ck_assert_str_eq(taco_chat_source(c), "tokenizer_config.json");
	ck_assert_ptr_nonnull(
	    strstr(taco_chat_jinja(c), "<|start_header_id|>"));
	taco_chat_free(c);
	f = fopen(path, "w");
	fputs("{\"chat_template\": ", f); /* cut short */
	fclose(f);
	ck_assert_int_lt(taco_chat_open(&co, tok, &c, &err), 0);
	ck_assert_ptr_nonnull(strstr(err.msg, "tokenizer_config.json:1"));
	/* a template that does not compile names its file and line */
	f = fopen(path, "w");
	fputs("{\"chat_template\": \"x\\n{% for m in messages %}\"}", f);
	fclose(f);
	ck_assert_int_lt(taco_chat_open(&co, tok, &c, &err), 0);
	ck_assert_msg(strstr(err.msg, "tokenizer_config.json") &&
			  strstr(err.msg, "line 2"),
		      "%s", err.msg);
	unlink(path);
	rmdir(dir);
}
END_TEST

START_TEST(test_unrecognised_template)
{
	taco_chat_opts co = {0};
	taco_chat *c = NULL;
	taco_err err = {{0}};

	/* the fixture models have no tokenizer_config.json at all */
	co.model_dir = tu_fixture("models/llama_gqa");
	ck_assert_int_lt(taco_chat_open(&co, tok, &c, &err), 0);
	ck_assert_ptr_nonnull(strstr(err.msg, "chat_template"));
}
END_TEST

/* A multiple-choice line may give a chat: its prompt is the chat rendered
 * by the job's template with the generation prompt, encoded as the
 * template writes it (no BOS added); without a template it is an error. */
START_TEST(test_multiple_choice_chat)
{
	static const char want[] =
	    "<|im_start|>user\n2 + 2?<|im_end|>\n<|im_start|>assistant\n";
	char *path =
	    write_tmp("{\"messages\": [{\"role\": \"user\", \"content\": \"2 + "
		      "2?\"}], \"choices\": [\"4\", \"5\"], \"answer\": 0}\n");
	taco_chat_opts co = {0};
	taco_chat *chat = NULL;
	taco_mc_set *s = NULL;
	taco_tok_ids ids = {0};
	taco_err err = {{0}};

	co.template_id = TACO_TEMPLATE_CHATML;
	ck_assert_int_eq(taco_chat_open(&co, tok, &chat, &err), 0);
	ck_assert_msg(taco_mc_load(path, tok, chat, 100, &s, &err) == 0, "%s",
		      err.msg);
	ck_assert_int_eq(
	    taco_tok_encode(tok, want, strlen(want), 0, &ids, &err), 0);
	ck_assert_uint_eq(s->n, 1);
	ck_assert_uint_eq(s->n_rows, 2);
	for (size_t r = 0; r < 2; r++) {
		ck_assert_uint_eq(s->row_split[r], ids.n);
		ck_assert_int_eq(memcmp(s->tokens + s->row_off[r], ids.ids,
					ids.n * sizeof(int32_t)),
				 0);
		ck_assert_uint_gt(s->row_off[r + 1] - s->row_off[r], ids.n);
	}
	taco_mc_free(s);
	s = NULL;
	ck_assert_int_eq(taco_mc_load(path, tok, NULL, 100, &s, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "no chat template"));
	taco_tok_ids_free(&ids);
	taco_chat_free(chat);
	unlink(path);
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
	    taco_mc_load(tu_fixture("chat/mc.jsonl"), tok, NULL, 100, &s, &err),
	    0);
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

/* ---- preference pairs (method dpo) ------------------------------------ */

static void opts_dpo(taco_dataset_opts *o, int tmpl)
{
	opts(o, tmpl);
	o->method = TACO_METHOD_DPO;
}

/* A copy of message e without its weight (a prompt has none). */
static json_t *unweighted(json_t *e)
{
	json_t *c = json_deep_copy(e);

	json_object_del(c, "weight");
	return c;
}

/* Labels of example ex: ids[t] where trained[t], else -100; tokens ids. */
static void check_example(const taco_data *d, size_t ex, const int32_t *ids,
			  const int *trained, size_t n, const char *what)
{
	size_t o = d->off[ex];

	ck_assert_msg(d->off[ex + 1] - o == n, "%s: %zu tokens, want %zu", what,
		      d->off[ex + 1] - o, n);
	for (size_t t = 0; t < n; t++) {
		ck_assert_msg(d->tokens[o + t] == ids[t],
			      "%s token %zu: %d, want %d", what, t,
			      d->tokens[o + t], ids[t]);
		ck_assert_msg(d->labels[o + t] == (trained[t] ? ids[t] : -100),
			      "%s token %zu: label %d, want %s", what, t,
			      d->labels[o + t], trained[t] ? "the id" : "-100");
	}
}

/* Only the last run of trained tokens (the last assistant turn) stays. */
static void last_turn_only(int *trained, size_t n)
{
	size_t t = n;

	while (t > 0 && !trained[t - 1])
		t--;
	while (t > 0 && trained[t - 1])
		t--;
	for (size_t i = 0; i < t; i++)
		trained[i] = 0;
}

/* Every chat of chat/chat.jsonl as a pair: its messages but the last as
 * the prompt, the last as preferred_output, the next chat's last as
 * non_preferred_output. The chosen sequence is apply_chat_template's ids
 * of the whole chat (chat/expected.json), labels on the last assistant
 * turn only, also with train_on all; the rejected one the SFT chat of the
 * prompt and that answer (itself checked against Hugging Face above),
 * likewise. For ChatML, Llama 3 and Mistral. */
START_TEST(test_pref_matches_chat)
{
	static const char *const names[] = {"chatml", "llama3", "mistral"};
	static const int tmpls[] = {TACO_TEMPLATE_CHATML, TACO_TEMPLATE_LLAMA3,
				    TACO_TEMPLATE_MISTRAL};
	json_t *rows =
	    json_object_get(json_object_get(expected, "chat"), names[_i]);
	json_t *chats[32];
	size_t n = 0, cap = 0, len;
	char *line = NULL, *pref = NULL, *sft = NULL, pref_path[64];
	FILE *f = fopen(tu_fixture("chat/chat.jsonl"), "r"), *fp, *fs;
	size_t pref_len = 0, sft_len = 0;
	taco_dataset_opts o;
	taco_dataset_report rep;
	taco_data *d = NULL, *ref = NULL;
	taco_err err = {{0}};
	int r;

	ck_assert_ptr_nonnull(f);
	while (getline(&line, &cap, f) > 0 && n < 32)
		ck_assert_ptr_nonnull(chats[n++] = json_loads(line, 0, NULL));
	fclose(f);
	free(line);
	ck_assert_uint_eq(n, json_array_size(rows));
	fp = open_memstream(&pref, &pref_len);
	fs = open_memstream(&sft, &sft_len);
	for (size_t i = 0; i < n; i++) {
		json_t *msgs = json_object_get(chats[i], "messages");
		json_t *next = json_object_get(chats[(i + 1) % n], "messages");
		size_t m = json_array_size(msgs);
		json_t *prompt = json_array(), *p, *chat;
		char *s;

		for (size_t k = 0; k + 1 < m; k++)
			json_array_append_new(
			    prompt, unweighted(json_array_get(msgs, k)));
		p = json_pack("{s{sO} s[o] s[o]}", "input", "messages", prompt,
			      "preferred_output",
			      unweighted(json_array_get(msgs, m - 1)),
			      "non_preferred_output",
			      unweighted(json_array_get(
				  next, json_array_size(next) - 1)));
		s = json_dumps(p, JSON_COMPACT);
		fprintf(fp, "%s\n", s);
		free(s);
		chat = json_copy(prompt);
		json_array_append_new(
		    chat, unweighted(
			      json_array_get(next, json_array_size(next) - 1)));
		chat = json_pack("{so}", "messages", chat);
		s = json_dumps(chat, JSON_COMPACT);
		fprintf(fs, "%s\n", s);
		free(s);
		json_decref(chat);
		json_decref(p);
		json_decref(prompt);
	}
	fclose(fp);
	fclose(fs);
	snprintf(pref_path, sizeof(pref_path), "%s", write_tmp(pref));

	for (int all = 0; all < 2; all++) {
		opts_dpo(&o, tmpls[_i]);
		o.train_on_all = all;
		r = taco_dataset_load(pref_path, tok, &o, &d, &rep, &err);
		ck_assert_msg(r == 0, "%s", err.msg);
		ck_assert_int_eq(d->pairs, 1);
		ck_assert_uint_eq(d->n, 2 * n);
		ck_assert_int_eq(rep.examples, (int64_t)n);
		ck_assert_int_eq(rep.kept, (int64_t)n);
		ck_assert_int_eq(rep.pairs, (int64_t)n);
		ck_assert_int_eq(rep.tokens, (int64_t)d->n_tokens);
		ck_assert_int_eq(rep.trainable_tokens,
				 taco_data_count_targets(d, o.seq_len));
		opts(&o, tmpls[_i]); /* the rejected ones' SFT chats */
		r = taco_dataset_load(write_tmp(sft), tok, &o, &ref, &rep,
				      &err);
		ck_assert_msg(r == 0, "%s", err.msg);
		ck_assert_int_eq(ref->pairs, 0);
		for (size_t i = 0; i < n; i++) {
			json_t *row = json_array_get(rows, i);
			json_t *ids = json_object_get(row, "ids");
			json_t *mask = json_object_get(row, "mask");
			size_t k = json_array_size(ids);
			size_t ro = ref->off[i];
			int32_t *want = malloc((k + 1024) * sizeof(int32_t));
			int *tr = malloc((k + 1024) * sizeof(int));
			char what[64];

			for (size_t t = 0; t < k; t++) {
				want[t] = (int32_t)json_integer_value(
				    json_array_get(ids, t));
				tr[t] = (int)json_integer_value(
				    json_array_get(mask, t));
			}
			last_turn_only(tr, k);
			snprintf(what, sizeof(what), "%s pair %zu chosen",
				 names[_i], i);
			check_example(d, 2 * i, want, tr, k, what);
			len = ref->off[i + 1] - ro;
			ck_assert_uint_lt(len, k + 1024);
			for (size_t t = 0; t < len; t++)
				tr[t] = ref->labels[ro + t] != -100;
			last_turn_only(tr, len);
			snprintf(what, sizeof(what), "%s pair %zu rejected",
				 names[_i], i);
			check_example(d, 2 * i + 1, ref->tokens + ro, tr, len,
				      what);
			free(want);
			free(tr);
		}
		taco_data_free(ref);
		taco_data_free(d);
	}
	unlink(pref_path);
	for (size_t i = 0; i < n; i++)
		json_decref(chats[i]);
	free(pref);
	free(sft);
}
END_TEST

#define PAIR_OK                                                                \
	"\"preferred_output\": [{\"role\": \"assistant\", \"content\": "       \
	"\"yes\"}], \"non_preferred_output\": [{\"role\": \"assistant\", "     \
	"\"content\": \"no\"}]"
#define PROMPT_OK                                                              \
	"\"input\": {\"messages\": [{\"role\": \"user\", "                     \
	"\"content\": \"q\"}]}"

/* Each problem of a preference line at its line, with its code and a
 * detail naming the field; the file fails with all of them. */
START_TEST(test_pref_errors)
{
	static const struct {
		const char *line, *fragment;
		int code;
	} cases[] = {
	    {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, "
	     "{\"role\": \"assistant\", \"content\": \"y\"}]}",
	     "method dpo needs preference pairs", TACO_P_NOT_PREFERENCE},
	    {"{\"text\": \"x\"}", "method dpo needs preference pairs",
	     TACO_P_NOT_PREFERENCE},
	    {"{" PROMPT_OK ", \"preferred_output\": \"yes\", "
	     "\"non_preferred_output\": [{\"role\": \"assistant\", "
	     "\"content\": \"no\"}]}",
	     "preferred_output must hold one assistant message",
	     TACO_P_INVALID_MESSAGE},
	    {"{" PROMPT_OK ", \"preferred_output\": [{\"role\": \"assistant\", "
	     "\"content\": \"yes\"}], \"non_preferred_output\": []}",
	     "non_preferred_output must hold one assistant message",
	     TACO_P_INVALID_MESSAGE},
	    {"{" PROMPT_OK ", \"preferred_output\": [{\"role\": \"assistant\", "
	     "\"content\": \"yes\"}]}",
	     "non_preferred_output must hold one assistant message",
	     TACO_P_INVALID_MESSAGE},
	    {"{" PROMPT_OK ", \"preferred_output\": [{\"role\": \"assistant\", "
	     "\"content\": \"a\"}, {\"role\": \"assistant\", \"content\": "
	     "\"b\"}], \"non_preferred_output\": [{\"role\": \"assistant\", "
	     "\"content\": \"no\"}]}",
	     "preferred_output must hold one assistant message",
	     TACO_P_INVALID_MESSAGE},
	    {"{" PROMPT_OK ", \"preferred_output\": [{\"role\": \"assistant\", "
	     "\"content\": 3}], \"non_preferred_output\": [{\"role\": "
	     "\"assistant\", \"content\": \"no\"}]}",
	     "preferred_output[0].content must be a string",
	     TACO_P_MISSING_CONTENT},
	    {"{" PROMPT_OK ", \"preferred_output\": [{\"role\": \"user\", "
	     "\"content\": \"yes\"}], \"non_preferred_output\": [{\"role\": "
	     "\"assistant\", \"content\": \"no\"}]}",
	     "preferred_output[0].role must be \"assistant\"",
	     TACO_P_INVALID_MESSAGE},
	    {"{" PROMPT_OK ", \"preferred_output\": [{\"role\": \"assistant\", "
	     "\"content\": \"yes\", \"tool_calls\": [{\"id\": \"c\"}]}], "
	     "\"non_preferred_output\": [{\"role\": \"assistant\", "
	     "\"content\": \"no\"}]}",
	     "preferred_output[0].tool_calls[0] must be {\"type\": "
	     "\"function\"",
	     TACO_P_INVALID_FIELD},
	    {"{" PROMPT_OK ", \"preferred_output\": [{\"role\": \"assistant\", "
	     "\"content\": \"yes\"}], \"non_preferred_output\": [{\"role\": "
	     "\"assistant\", \"content\": \"no\", \"function_call\": "
	     "{\"name\": \"f\"}}]}",
	     "non_preferred_output[0].function_call: OpenAI's legacy field",
	     TACO_P_INVALID_FIELD},
	    {"{" PROMPT_OK ", \"preferred_output\": [{\"role\": \"assistant\", "
	     "\"content\": \"yes\", \"weight\": 1}], \"non_preferred_output\": "
	     "[{\"role\": \"assistant\", \"content\": \"no\"}]}",
	     "preferred_output[0].weight is not allowed",
	     TACO_P_INVALID_WEIGHT},
	    {"{" PAIR_OK "}", "\"input\" must be an object",
	     TACO_P_INVALID_FIELD},
	    {"{\"input\": {}, " PAIR_OK "}",
	     "\"input.messages\" must be a non-empty array",
	     TACO_P_MISSING_MESSAGES},
	    {"{\"input\": {\"messages\": [{\"role\": \"user\", \"content\": "
	     "\"q\"}, {\"role\": \"assistant\", \"content\": \"a\"}]}, " PAIR_OK
	     "}",
	     "input.messages[1]: the last message must not be an assistant's",
	     TACO_P_INVALID_MESSAGE},
	    {"{\"input\": {\"messages\": [{\"role\": \"user\", \"content\": "
	     "\"q\", \"weight\": 1}]}, " PAIR_OK "}",
	     "input.messages[0].weight is not allowed", TACO_P_INVALID_WEIGHT},
	    {"{\"input\": {\"messages\": [{\"role\": \"user\", \"content\": "
	     "\"q\"}, {\"role\": \"assistant\", \"content\": \"a\", "
	     "\"weight\": 0}, {\"role\": \"user\", \"content\": "
	     "\"r\"}]}, " PAIR_OK "}",
	     "input.messages[1].weight is not allowed", TACO_P_INVALID_WEIGHT},
	    {"{\"input\": {\"messages\": [{\"role\": \"function\", "
	     "\"content\": \"q\"}]}, " PAIR_OK "}",
	     "input.messages[0].role 'function' is not known",
	     TACO_P_UNRECOGNIZED_ROLE},
	    {"{\"input\": {\"messages\": [{\"role\": \"tool\", \"content\": "
	     "\"q\"}]}, " PAIR_OK "}",
	     "input.messages[0].tool_call_id must be a string",
	     TACO_P_INVALID_MESSAGE},
	    {"{\"input\": {\"messages\": [{\"role\": \"user\"}]}, " PAIR_OK "}",
	     "input.messages[0].content must be a string",
	     TACO_P_MISSING_CONTENT},
	    {"{\"input\": {\"messages\": [{\"role\": \"user\", \"content\": "
	     "\"q\"}], \"tools\": [{\"type\": \"function\"}]}, " PAIR_OK "}",
	     "input.tools[0] must be {\"type\": \"function\"",
	     TACO_P_INVALID_FIELD},
	    {"{\"input\": {\"messages\": [{\"role\": \"user\", \"content\": "
	     "\"q\"}], \"tools\": [{\"type\": \"function\", \"function\": "
	     "{\"name\": \"f\"}}]}, " PAIR_OK "}",
	     "\"tools\": the chat template renders no tool definitions",
	     TACO_P_TOOLS_UNSUPPORTED},
	    {"{\"input\": {\"messages\": [{\"role\": \"user\", \"content\": "
	     "\"the quick brown fox jumps over the lazy dog the quick brown "
	     "fox\"}]}, " PAIR_OK "}",
	     "input.messages: the prompt is", TACO_P_TOO_LONG},
	};
	const int n = sizeof(cases) / sizeof(cases[0]);
	char text[16384] = "", want[64];
	taco_dataset_opts o;
	taco_dataset_report rep;
	taco_data *d = NULL;
	taco_err err = {{0}};
	char *path;

	for (int i = 0; i < n; i++) {
		strcat(text, cases[i].line);
		strcat(text, "\n");
	}
	/* nothing to render: accepted, the legacy functions a warning */
	strcat(text,
	       "{\"input\": {\"messages\": [{\"role\": \"user\", "
	       "\"content\": \"q\"}], \"tools\": [], \"functions\": "
	       "[{\"name\": \"f\"}], \"parallel_tool_calls\": true}, " PAIR_OK
	       "}\n");
	path = write_tmp(text);
	opts_dpo(&o, TACO_TEMPLATE_CHATML);
	o.seq_len = 28; /* the long prompt is 32 tokens; the good pair fits */
	ck_assert_int_eq(taco_dataset_load(path, tok, &o, &d, &rep, &err),
			 -EINVAL);
	ck_assert_ptr_null(d);
	snprintf(want, sizeof(want),
		 "%d errors in %d lines (first: line 1, "
		 "not_preference",
		 n, n + 1);
	ck_assert_msg(strstr(err.msg, want) && strstr(err.msg, path), "%s",
		      err.msg);
	ck_assert_int_eq(rep.errors, n);
	ck_assert_int_eq(rep.warnings, 1);
	for (int i = 0; i < n; i++)
		ck_assert_msg(
		    rep.listed[i].line == i + 1 &&
			rep.listed[i].code == cases[i].code &&
			rep.listed[i].error &&
			strstr(rep.listed[i].detail, cases[i].fragment),
		    "line %d: got line %lld %s (%s), want %s (%s)", i + 1,
		    (long long)rep.listed[i].line,
		    taco_problem_name(rep.listed[i].code), rep.listed[i].detail,
		    taco_problem_name(cases[i].code), cases[i].fragment);
	ck_assert_int_eq(rep.listed[n].line, n + 1);
	ck_assert_int_eq(rep.listed[n].code, TACO_P_IGNORED_FIELD);
	ck_assert_ptr_nonnull(strstr(rep.listed[n].detail, "input.functions"));
	/* the good line alone loads */
	ck_assert_int_eq(rep.kept, 1);
	ck_assert_str_eq(taco_problem_name(TACO_P_NOT_PREFERENCE),
			 "not_preference");
	ck_assert_str_eq(taco_problem_name(TACO_P_PREFERENCE_PAIR),
			 "preference_pair");
	unlink(path);
}
END_TEST

/* A preference pair with tools: input.tools and an output that calls one,
 * rendered by a template with tools (ours, Qwen3's kind, with the fixture
 * tokenizer of its markers); only the outputs are trained, the call and
 * its end of turn included. */
START_TEST(test_pref_tools)
{
	char *path = write_tmp(
	    "{\"input\": {\"messages\": [{\"role\": \"user\", \"content\": "
	    "\"Weather in Oslo?\"}], \"tools\": [{\"type\": \"function\", "
	    "\"function\": {\"name\": \"get_weather\", \"parameters\": "
	    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
	    "\"string\"}}}}}]}, \"preferred_output\": [{\"role\": "
	    "\"assistant\", \"content\": null, \"tool_calls\": [{\"id\": "
	    "\"call_1\", \"type\": \"function\", \"function\": {\"name\": "
	    "\"get_weather\", \"arguments\": \"{\\\"city\\\": "
	    "\\\"Oslo\\\"}\"}}]}], \"non_preferred_output\": [{\"role\": "
	    "\"assistant\", \"content\": \"I cannot tell.\"}]}\n");
	char *jinja =
	    tu_read_file(tu_fixture("templates/chatml_think.jinja"), NULL);
	taco_tok *ttok = NULL;
	taco_dataset_opts o;
	taco_dataset_report rep;
	taco_data *d = NULL;
	taco_err err = {{0}};
	char *text = NULL;
	size_t n;

	ck_assert_ptr_nonnull(jinja);
	ck_assert_int_eq(
	    taco_tok_load(tu_fixture("templates/tokenizer"), &ttok, &err), 0);
	opts_dpo(&o, TACO_TEMPLATE_AUTO);
	o.model_dir = tu_fixture("templates/tokenizer");
	o.chat_jinja = jinja;
	ck_assert_msg(taco_dataset_load(path, ttok, &o, &d, &rep, &err) == 0,
		      "%s", err.msg);
	ck_assert_int_eq(rep.pairs, 1);
	ck_assert_uint_eq(d->n, 2);
	/* the preferred sequence's trained tokens: the call, then <|im_end|> */
	n = 0;
	for (size_t t = d->off[0]; t < d->off[1]; t++)
		if (d->labels[t] != -100)
			d->tokens[d->off[0] + n++] = d->tokens[t];
	ck_assert_int_eq(taco_tok_decode(ttok, d->tokens + d->off[0], n, 0,
					 &text, NULL, &err),
			 0);
	ck_assert_msg(strstr(text, "\"name\": \"get_weather\"") &&
			  strstr(text, "\"Oslo\"") &&
			  strstr(text, "<|im_end|>") &&
			  !strstr(text, "Weather in Oslo"),
		      "trained: %s", text);
	free(text);
	taco_data_free(d);
	taco_tok_free(ttok);
	free(jinja);
	unlink(path);
}
END_TEST

/* Mistral's turns, across the prompt and the output: the prompt must end
 * with a user turn, alternating from the first. */
START_TEST(test_pref_mistral_turns)
{
	char *path = write_tmp(
	    "{\"input\": {\"messages\": [{\"role\": \"system\", \"content\": "
	    "\"s\"}]}, " PAIR_OK "}\n"
	    "{\"input\": {\"messages\": [{\"role\": \"user\", \"content\": "
	    "\"q\"}, {\"role\": \"user\", \"content\": \"r\"}]}, " PAIR_OK "}\n"
	    "{\"input\": {\"messages\": [{\"role\": \"system\", \"content\": "
	    "\"s\"}, {\"role\": \"user\", \"content\": \"q\"}]}, " PAIR_OK
	    "}\n");
	taco_dataset_opts o;
	taco_dataset_report rep;
	taco_data *d = NULL;
	taco_err err = {{0}};

	opts_dpo(&o, TACO_TEMPLATE_MISTRAL);
	ck_assert_int_eq(taco_dataset_load(path, tok, &o, &d, &rep, &err),
			 -EINVAL);
	ck_assert_int_eq(rep.errors, 2);
	ck_assert_int_eq(rep.listed[0].line, 1);
	ck_assert_int_eq(rep.listed[0].code, TACO_P_TEMPLATE_ERROR);
	ck_assert_ptr_nonnull(strstr(rep.listed[0].detail,
				     "the mistral template needs user and "
				     "assistant turns alternating"));
	ck_assert_int_eq(rep.listed[1].line, 2);
	ck_assert_ptr_nonnull(strstr(rep.listed[1].detail,
				     "the mistral template needs user and "
				     "assistant turns alternating"));
	ck_assert_int_eq(rep.kept, 1);
	/* for ChatML a system prompt alone is a prompt, and turns need not
	 * alternate */
	opts_dpo(&o, TACO_TEMPLATE_CHATML);
	ck_assert_int_eq(taco_dataset_load(path, tok, &o, &d, &rep, &err), 0);
	ck_assert_int_eq(rep.kept, 3);
	taco_data_free(d);
	unlink(path);
}
END_TEST

/* SFT refuses preference pairs, DPO everything else, line by line. */
START_TEST(test_pref_methods_mixed)
{
	char *path = write_tmp(
	    "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, "
	    "{\"role\": \"assistant\", \"content\": \"y\"}]}\n"
	    "{" PROMPT_OK ", " PAIR_OK "}\n"
	    "{\"prompt\": \"a\", \"completion\": \"b\"}\n"
	    "{\"non_preferred_output\": [{\"role\": \"assistant\", "
	    "\"content\": \"no\"}]}\n");
	taco_dataset_opts o;
	taco_dataset_report rep;
	taco_data *d = NULL;
	taco_err err = {{0}};

	opts(&o, TACO_TEMPLATE_CHATML);
	ck_assert_int_eq(taco_dataset_load(path, tok, &o, &d, &rep, &err),
			 -EINVAL);
	ck_assert_int_eq(rep.errors, 2);
	ck_assert_int_eq(rep.by_code[TACO_P_PREFERENCE_PAIR], 2);
	ck_assert_int_eq(rep.listed[0].line, 2);
	ck_assert_str_eq(rep.listed[0].detail,
			 "a preference pair needs method dpo");
	ck_assert_int_eq(rep.listed[1].line, 4);
	ck_assert_int_eq(rep.kept, 2);
	ck_assert_ptr_nonnull(strstr(err.msg, "line 2, preference_pair"));

	opts_dpo(&o, TACO_TEMPLATE_CHATML);
	ck_assert_int_eq(taco_dataset_load(path, tok, &o, &d, &rep, &err),
			 -EINVAL);
	ck_assert_int_eq(rep.by_code[TACO_P_NOT_PREFERENCE], 2);
	ck_assert_int_eq(rep.listed[0].line, 1);
	ck_assert_int_eq(rep.listed[1].line, 3);
	/* line 4 is a pair, with errors of its own */
	ck_assert_int_eq(rep.listed[2].line, 4);
	ck_assert_ptr_nonnull(strstr(rep.listed[2].detail, "\"input\""));
	ck_assert_int_eq(rep.listed[3].line, 4);
	ck_assert_ptr_nonnull(
	    strstr(rep.listed[3].detail, "preferred_output must hold one"));
	ck_assert_int_eq(rep.errors, 4);
	ck_assert_int_eq(rep.kept, 1);
	unlink(path);
}
END_TEST

/* A pair with a long rejected answer. The prompt's length k: prompt
 * tokens at k or beyond seq_len are an error whatever overlength says; else
 * each policy applies to the pair whole (truncate: cut at seq_len, the
 * prompt kept; drop: both sequences go; error). Counts are of pairs,
 * tokens of both sequences. */
START_TEST(test_pref_lengths)
{
	char *path = write_tmp(
	    "{" PROMPT_OK ", \"preferred_output\": [{\"role\": "
	    "\"assistant\", \"content\": \"yes\"}], \"non_preferred_output\": "
	    "[{\"role\": \"assistant\", \"content\": \"the quick brown fox "
	    "jumps over the lazy dog the quick brown fox jumps\"}]}\n"
	    "{" PROMPT_OK ", " PAIR_OK "}\n");
	taco_dataset_opts o;
	taco_dataset_report rep;
	taco_data *d = NULL, *full = NULL;
	taco_err err = {{0}};
	size_t k = 0, len0, len1, S;
	int64_t tokens;
	json_t *j;

	opts_dpo(&o, TACO_TEMPLATE_CHATML);
	ck_assert_int_eq(taco_dataset_load(path, tok, &o, &full, &rep, &err),
			 0);
	ck_assert_uint_eq(full->n, 4);
	ck_assert_int_eq(rep.warnings, 0);
	tokens = rep.tokens;
	ck_assert_int_eq(tokens, (int64_t)full->n_tokens);
	while (full->labels[k] == -100)
		k++;
	len0 = full->off[1];
	len1 = full->off[2] - full->off[1];
	ck_assert_uint_gt(len1, len0 + 8);
	/* the rejected sequence shares the prompt */
	for (size_t t = 0; t < k; t++) {
		ck_assert_int_eq(full->tokens[len0 + t], full->tokens[t]);
		ck_assert_int_eq(full->labels[len0 + t], -100);
	}
	ck_assert_int_ne(full->labels[len0 + k], -100);
	j = taco_dataset_report_json(&rep, "p.jsonl");
	ck_assert_int_eq(json_integer_value(json_object_get(j, "pairs")), 2);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "examples")), 2);
	ck_assert_str_eq(json_string_value(json_object_get(j, "summary")),
			 "p.jsonl: no problems in 2 lines, 2 preference pairs "
			 "kept");
	json_decref(j);

	/* truncate: the rejected one cut at seq_len, the pair kept */
	S = len0 + 2;
	o.seq_len = (int)S;
	ck_assert_int_eq(taco_dataset_load(path, tok, &o, &d, &rep, &err), 0);
	ck_assert_uint_eq(d->n, 4);
	ck_assert_uint_eq(d->off[2] - d->off[1], S);
	ck_assert_mem_eq(d->tokens + d->off[1], full->tokens + full->off[1],
			 S * sizeof(int32_t));
	ck_assert_mem_eq(d->labels + d->off[1], full->labels + full->off[1],
			 S * sizeof(int32_t));
	ck_assert_int_eq(rep.truncated, 1);
	ck_assert_int_eq(rep.kept, 2);
	ck_assert_int_eq(rep.tokens, tokens);
	ck_assert_int_eq(rep.trainable_tokens,
			 taco_data_count_targets(d, 1 << 20));
	ck_assert_int_eq(rep.by_code[TACO_P_TOO_LONG], 1);
	ck_assert_ptr_nonnull(
	    strstr(rep.listed[0].detail, "non_preferred_output: "));
	ck_assert_ptr_nonnull(strstr(rep.listed[0].detail, "truncated"));
	taco_data_free(d);

	/* room for one output token: kept, one target a sequence */
	o.seq_len = (int)k + 1;
	ck_assert_int_eq(taco_dataset_load(path, tok, &o, &d, &rep, &err), 0);
	ck_assert_uint_eq(d->n, 4);
	ck_assert_int_eq(rep.trainable_tokens, 4);
	ck_assert_int_eq(rep.truncated, 2);
	taco_data_free(d);

	/* drop: the whole first pair goes, the second stays */
	o.seq_len = (int)S;
	o.overlength = TACO_OVERLENGTH_DROP;
	ck_assert_int_eq(taco_dataset_load(path, tok, &o, &d, &rep, &err), 0);
	ck_assert_uint_eq(d->n, 2);
	ck_assert_int_eq(rep.examples, 2);
	ck_assert_int_eq(rep.kept, 1);
	ck_assert_int_eq(rep.pairs, 1);
	ck_assert_int_eq(rep.dropped, 1);
	ck_assert_uint_eq(d->n_tokens, full->n_tokens - full->off[2]);
	ck_assert_mem_eq(d->tokens, full->tokens + full->off[2],
			 d->n_tokens * sizeof(int32_t));
	ck_assert_mem_eq(d->labels, full->labels + full->off[2],
			 d->n_tokens * sizeof(int32_t));
	ck_assert_uint_eq(d->off[1], full->off[3] - full->off[2]);
	ck_assert_ptr_nonnull(
	    strstr(rep.listed[0].detail, "the pair is dropped"));
	taco_data_free(d);

	/* error */
	o.overlength = TACO_OVERLENGTH_ERROR;
	ck_assert_int_eq(taco_dataset_load(path, tok, &o, &d, &rep, &err),
			 -EINVAL);
	ck_assert_int_eq(rep.errors, 1);
	ck_assert_int_eq(rep.listed[0].line, 1);
	ck_assert_int_eq(rep.listed[0].code, TACO_P_TOO_LONG);
	ck_assert_ptr_nonnull(
	    strstr(rep.listed[0].detail, "non_preferred_output: "));

	/* no room for an output: an error under every policy */
	for (int ol = 0; ol < 3; ol++) {
		char want[128];
		o.overlength = ol;
		o.seq_len = (int)k;
		ck_assert_int_eq(
		    taco_dataset_load(path, tok, &o, &d, &rep, &err), -EINVAL);
		ck_assert_int_eq(rep.errors, 2);
		snprintf(want, sizeof(want),
			 "input.messages: the prompt is %zu tokens, seq_len "
			 "is %zu: no room for an output",
			 k, k);
		ck_assert_str_eq(rep.listed[0].detail, want);
		ck_assert_int_eq(rep.listed[0].line, 1);
		ck_assert_int_eq(rep.listed[1].line, 2);
		ck_assert_ptr_nonnull(
		    strstr(err.msg, "(first: line 1, too_long"));
	}
	taco_data_free(full);
	unlink(path);
}
END_TEST

/* The report of a file of pairs, printed; an SFT report has no "pairs". */
START_TEST(test_pref_report)
{
	char *path = write_tmp("{" PROMPT_OK ", " PAIR_OK "}\n");
	taco_dataset_opts o;
	taco_dataset_report rep;
	taco_data *d = NULL;
	taco_err err = {{0}};
	char *out = NULL;
	size_t outlen = 0;
	FILE *f;
	json_t *j;

	opts_dpo(&o, TACO_TEMPLATE_LLAMA3);
	o.max_examples = 1;
	ck_assert_int_eq(taco_dataset_load(path, tok, &o, &d, &rep, &err), 0);
	ck_assert_int_eq(rep.method, TACO_METHOD_DPO);
	f = open_memstream(&out, &outlen);
	taco_dataset_report_print(&rep, "p.jsonl", f);
	fclose(f);
	ck_assert_msg(strstr(out, "p.jsonl: 1 lines, 1 preference pairs, 1 "
				  "kept"),
		      "%s", out);
	free(out);
	taco_data_free(d);
	unlink(path);

	path = write_tmp("{\"text\": \"a b\"}\n");
	opts(&o, TACO_TEMPLATE_LLAMA3);
	ck_assert_int_eq(taco_dataset_load(path, tok, &o, &d, &rep, &err), 0);
	j = taco_dataset_report_json(&rep, "t.jsonl");
	ck_assert_ptr_null(json_object_get(j, "pairs"));
	ck_assert_str_eq(json_string_value(json_object_get(j, "summary")),
			 "t.jsonl: no problems in 1 lines");
	json_decref(j);
	taco_data_free(d);
	unlink(path);
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
	tcase_add_test(tc, test_multiple_choice_chat);
	tcase_add_loop_test(tc, test_pref_matches_chat, 0, 3);
	tcase_add_test(tc, test_pref_errors);
	tcase_add_test(tc, test_pref_tools);
	tcase_add_test(tc, test_pref_mistral_turns);
	tcase_add_test(tc, test_pref_methods_mixed);
	tcase_add_test(tc, test_pref_lengths);
	tcase_add_test(tc, test_pref_report);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
