/* test_chat_template.c: chats rendered with chat templates through the
 * dataset reader, against what transformers 5.24's apply_chat_template
 * gives (tests/fixtures/templates/gen_templates.py): for each template of
 * ours (one per family of the official templates: their constructs, tools,
 * reasoning, dates) and each chat, the rendered text (the report's
 * preview), the ids, the trained tokens (against return_assistant_tokens_mask
 * of the same template with {% generation %} blocks, and from our own
 * location of the spans in the template without them), and the templates'
 * errors. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/dataset.h"
#include "testutil.h"

static taco_tok *tok;
static json_t *expected, *chats;
static char tok_dir[4096];

static void setup(void)
{
	taco_err err = {{0}};
	char path[4200];
	FILE *f;
	char *line = NULL;
	size_t cap = 0;

	snprintf(tok_dir, sizeof(tok_dir), "%s",
		 tu_fixture("templates/tokenizer"));
	ck_assert_msg(taco_tok_load(tok_dir, &tok, &err) == 0, "%s", err.msg);
	expected =
	    json_load_file(tu_fixture("templates/expected.json"), 0, NULL);
	ck_assert_ptr_nonnull(expected);
	chats = json_array();
	snprintf(path, sizeof(path), "%s", tu_fixture("templates/chats.jsonl"));
	f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	while (getline(&line, &cap, f) > 0)
		json_array_append_new(chats, json_string(line));
	free(line);
	fclose(f);
}

static void teardown(void)
{
	taco_tok_free(tok);
	json_decref(expected);
	json_decref(chats);
}

static char *write_tmp(const char *text)
{
	static char path[64];
	int fd;

	snprintf(path, sizeof(path), "/tmp/taco-ct-XXXXXX");
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (int)strlen(text));
	close(fd);
	return path;
}

/* The trained mask of the chat: transformers' assistant mask, each run
 * of ones the span of one assistant message, in order, with the runs of
 * the messages of weight 0 cleared (generation blocks know no weights).
 * 0 when the runs do not pair with the assistant messages (two spans that
 * touch): then the mask is not compared. */
static int trained_mask(const char *line, json_t *mask, int *out, size_t n)
{
	json_t *chat = json_loads(line, 0, NULL), *m;
	int w[512], nw = 0, run = -1, prev = 0;
	size_t i;

	json_array_foreach(json_object_get(chat, "messages"), i, m)
	{
		const char *role =
		    json_string_value(json_object_get(m, "role"));
		json_t *wt = json_object_get(m, "weight");
		if (role && !strcmp(role, "assistant") && nw < 512)
			w[nw++] =
			    !json_is_integer(wt) || json_integer_value(wt) != 0;
	}
	json_decref(chat);
	for (i = 0; i < n; i++) {
		int v = (int)json_integer_value(json_array_get(mask, i));
		if (v && !prev)
			run++;
		prev = v;
		out[i] = v && run < nw && w[run];
	}
	return run + 1 == nw;
}

/* Whether a message's content is neither a string nor null: tacod reads
 * string contents only (transformers hands a list to the template, vLLM
 * joins its text parts: no one way to train as served). */
static int list_content(const char *line)
{
	json_t *chat = json_loads(line, 0, NULL), *m;
	size_t i;
	int list = 0;

	json_array_foreach(json_object_get(chat, "messages"), i, m)
	{
		json_t *c = json_object_get(m, "content");
		list |= c && !json_is_string(c) && !json_is_null(c);
	}
	json_decref(chat);
	return list;
}

/* One case, read through the template named `field` of the case. */
static void run_case(json_t *cs, const char *field, int *unchecked)
{
	const char *name = json_string_value(json_object_get(cs, field));
	int ci = (int)json_integer_value(json_object_get(cs, "chat"));
	const char *line = json_string_value(json_array_get(chats, ci));
	json_t *err_want = json_object_get(cs, "error");
	json_t *ids = json_object_get(cs, "ids");
	json_t *mask = json_object_get(cs, "assistant_masks");
	char rel[256], *jinja, *kwargs, *path;
	taco_dataset_opts o;
	taco_dataset_report rep;
	taco_data *d = NULL;
	taco_err err = {{0}};
	int r, check_mask, *want = NULL;

	snprintf(rel, sizeof(rel), "templates/%s", name);
	jinja = tu_read_file(tu_fixture(rel), NULL);
	ck_assert_ptr_nonnull(jinja);
	kwargs = json_dumps(json_object_get(cs, "kwargs"), JSON_COMPACT);
	path = write_tmp(line);
	taco_dataset_defaults(&o);
	o.model_dir = tok_dir;
	o.chat_jinja = jinja;
	o.chat_kwargs = kwargs;
	o.chat_now = json_integer_value(json_object_get(cs, "now"));
	o.seq_len = 1 << 16;
	r = taco_dataset_load(path, tok, &o, &d, &rep, &err);
	if (list_content(line)) {
		ck_assert_msg(r == -EINVAL &&
				  rep.listed[0].code == TACO_P_MISSING_CONTENT,
			      "%s chat %d: a list content is not refused", name,
			      ci);
		goto out;
	}
	if (err_want) {
		const char *type =
		    json_string_value(json_object_get(err_want, "type"));
		const char *msg =
		    json_string_value(json_object_get(err_want, "message"));
		ck_assert_msg(r == -EINVAL && rep.errors == 1 &&
				  rep.listed[0].code == TACO_P_TEMPLATE_ERROR,
			      "%s chat %d: want the error %s, got %d: %s", name,
			      ci, msg, r, err.msg);
		/* raise_exception's message is quoted */
		if (!strcmp(type, "TemplateError"))
			ck_assert_msg(strstr(rep.listed[0].detail, msg),
				      "%s chat %d: %s, want %s", name, ci,
				      rep.listed[0].detail, msg);
		goto out;
	}
	ck_assert_msg(r == 0, "%s chat %d: %s", name, ci, err.msg);
	ck_assert_uint_eq(d->n, 1);
	/* the text: the report's preview holds its first 4 KiB */
	{
		const char *text =
		    json_string_value(json_object_get(cs, "text"));
		size_t n = strlen(text);
		if (n <= TACO_DATASET_PREVIEW)
			ck_assert_msg(rep.preview_len == n &&
					  !memcmp(rep.preview, text, n),
				      "%s chat %d: rendered\n%s\nwant\n%s",
				      name, ci, rep.preview, text);
	}
	want = calloc(json_array_size(ids) + 1, sizeof(int));
	check_mask = trained_mask(line, mask, want, json_array_size(ids));
	*unchecked += !check_mask;
	ck_assert_msg(d->off[1] == json_array_size(ids),
		      "%s chat %d: %zu tokens, transformers %zu", name, ci,
		      d->off[1], json_array_size(ids));
	for (size_t t = 0; t < d->off[1]; t++) {
		int32_t id =
		    (int32_t)json_integer_value(json_array_get(ids, t));
		ck_assert_msg(d->tokens[t] == id,
			      "%s chat %d token %zu: %d, transformers %d", name,
			      ci, t, d->tokens[t], id);
		if (check_mask) {
			int m = want[t];
			ck_assert_msg(d->labels[t] == (m ? id : -100),
				      "%s chat %d token %zu: label %d, "
				      "transformers' assistant mask %d",
				      name, ci, t, d->labels[t], m);
		}
	}
out:
	free(want);
	taco_data_free(d);
	unlink(path);
	free(kwargs);
	free(jinja);
}

/* The templates without generation blocks: text, ids, and the trained
 * tokens located by tacod, equal to the generation blocks' mask. */
START_TEST(test_located_spans)
{
	json_t *cases = json_object_get(expected, "cases"), *cs;
	size_t i;
	int unchecked = 0;

	json_array_foreach(cases, i, cs) run_case(cs, "template", &unchecked);
	ck_assert_msg(unchecked < 5, "%d cases' masks not compared", unchecked);
}
END_TEST

/* The same templates with {% generation %} blocks: transformers'
 * return_assistant_tokens_mask. */
START_TEST(test_generation_blocks)
{
	json_t *cases = json_object_get(expected, "cases"), *cs;
	size_t i;
	int unchecked = 0;

	json_array_foreach(cases, i, cs)
	    run_case(cs, "gen_template", &unchecked);
	ck_assert_msg(unchecked < 5, "%d cases' masks not compared", unchecked);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("chat_template");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_located_spans);
	tcase_add_test(tc, test_generation_blocks);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(suite(), 0);
}
