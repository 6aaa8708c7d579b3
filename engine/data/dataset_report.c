/* dataset_report.c: the validation report of a data file as a summary
 * line, JSON and text. */
#include <jansson.h>
#include <stdio.h>

#include "dataset.h"

static const char *const problem_names[TACO_P_COUNT] = {
    [TACO_P_INVALID_JSON] = "invalid_json",
    [TACO_P_INVALID_UTF8] = "invalid_utf8",
    [TACO_P_UNKNOWN_FORMAT] = "unknown_format",
    [TACO_P_MISSING_MESSAGES] = "missing_messages",
    [TACO_P_INVALID_MESSAGE] = "invalid_message",
    [TACO_P_UNRECOGNIZED_ROLE] = "unrecognized_role",
    [TACO_P_MISSING_CONTENT] = "missing_content",
    [TACO_P_NO_ASSISTANT_MESSAGE] = "no_assistant_message",
    [TACO_P_INVALID_WEIGHT] = "invalid_weight",
    [TACO_P_INVALID_FIELD] = "invalid_field",
    [TACO_P_EMPTY_EXAMPLE] = "empty_example",
    [TACO_P_TOO_LONG] = "too_long",
    [TACO_P_ALL_LABELS_MASKED] = "all_labels_masked",
    [TACO_P_LINE_TOO_LONG] = "line_too_long",
    [TACO_P_INVALID_TOKEN] = "invalid_token",
    [TACO_P_IGNORED_FIELD] = "ignored_field",
    [TACO_P_NOT_PREFERENCE] = "not_preference",
    [TACO_P_PREFERENCE_PAIR] = "preference_pair",
    [TACO_P_TEMPLATE_ERROR] = "template_error",
    [TACO_P_ANSWER_NOT_LOCATED] = "answer_not_located",
    [TACO_P_TOOLS_UNSUPPORTED] = "tools_unsupported",
};

const char *taco_problem_name(int code)
{
	return code >= 0 && code < TACO_P_COUNT ? problem_names[code] : "?";
}

void taco_dataset_report_summary(const taco_dataset_report *rep,
				 const char *file, char *buf, size_t cap)
{
	const taco_problem *p =
	    rep->errors ? &rep->first_error : &rep->first_warning;
	long long n = (long long)(rep->errors ? rep->errors : rep->warnings);

	char pairs[64] = "";

	/* what a file of pairs that loads brings */
	if (rep->method == TACO_METHOD_DPO && !rep->errors)
		snprintf(pairs, sizeof(pairs), ", %lld preference pair%s kept",
			 (long long)rep->pairs, rep->pairs == 1 ? "" : "s");
	if (!rep->errors && !rep->warnings)
		snprintf(buf, cap, "%s: no problems in %lld lines%s", file,
			 (long long)rep->lines, pairs);
	else
		snprintf(buf, cap,
			 "%s: %s%lld %s%s in %lld lines%s (first%s: line "
			 "%lld, %s: %s)",
			 file, rep->errors ? "" : "no errors, ", n,
			 rep->errors ? "error" : "warning", n == 1 ? "" : "s",
			 (long long)rep->lines, pairs,
			 rep->errors ? "" : " warning", (long long)p->line,
			 taco_problem_name(p->code), p->detail);
}

/* The preview as segments of text, each trained or not: what a client
 * shows without counting bytes. */
static json_t *preview_json(const taco_dataset_report *rep)
{
	json_t *segs = json_array(), *o;
	size_t at = 0;

	for (int s = 0; s <= rep->preview_n_span; s += 2) {
		size_t a = s < rep->preview_n_span ? rep->preview_span[s]
						   : rep->preview_len;
		size_t b = s < rep->preview_n_span ? rep->preview_span[s + 1]
						   : rep->preview_len;
		if (a > at)
			json_array_append_new(segs,
					      json_pack("{ss% sb}", "text",
							rep->preview + at,
							a - at, "trained", 0));
		if (b > a)
			json_array_append_new(segs,
					      json_pack("{ss% sb}", "text",
							rep->preview + a, b - a,
							"trained", 1));
		at = b > at ? b : at;
	}
	o = json_pack("{sI so sb}", "line", (json_int_t)rep->preview_line,
		      "segments", segs, "truncated", rep->preview_cut);
	return o;
}

json_t *taco_dataset_report_json(const taco_dataset_report *rep,
				 const char *file)
{
	char sum[512];
	json_t *codes = json_object(), *list = json_array();
	json_t *o;

	for (int c = 0; c < TACO_P_COUNT; c++)
		if (rep->by_code[c])
			json_object_set_new(codes, problem_names[c],
					    json_integer(rep->by_code[c]));
	for (int i = 0; i < rep->n_listed; i++) {
		const taco_problem *p = &rep->listed[i];
		json_array_append_new(
		    list,
		    json_pack("{sI ss ss ss}", "line", (json_int_t)p->line,
			      "code", problem_names[p->code], "severity",
			      p->error ? "error" : "warning", "detail",
			      p->detail));
	}
	o = json_pack(
	    "{ss sI sI sI sI sI sI sI sI sI so so ss}", "file", file, "lines",
	    (json_int_t)rep->lines, "examples", (json_int_t)rep->examples,
	    "kept", (json_int_t)rep->kept, "tokens", (json_int_t)rep->tokens,
	    "trainable_tokens", (json_int_t)rep->trainable_tokens, "truncated",
	    (json_int_t)rep->truncated, "dropped", (json_int_t)rep->dropped,
	    "errors", (json_int_t)rep->errors, "warnings",
	    (json_int_t)rep->warnings, "by_code", codes, "problems", list,
	    "chat_template",
	    rep->chat_template[0] ? rep->chat_template
				  : taco_template_name(rep->template_id));
	if (rep->preview_line) {
		json_object_set_new(o, "preview", preview_json(rep));
		json_object_set_new(o, "chat_template_time",
				    json_integer(rep->chat_time));
	}
	if (rep->method == TACO_METHOD_DPO)
		json_object_set_new(o, "pairs", json_integer(rep->pairs));
	taco_dataset_report_summary(rep, file, sum, sizeof(sum));
	json_object_set_new(o, "summary", json_string(sum));
	return o;
}

void taco_dataset_report_print(const taco_dataset_report *rep, const char *file,
			       FILE *f)
{
	fprintf(f,
		"%s: %lld lines, %lld %s, %lld kept; %lld tokens, %lld "
		"trained; %lld truncated, %lld dropped; %lld errors, %lld "
		"warnings\n",
		file, (long long)rep->lines, (long long)rep->examples,
		rep->method == TACO_METHOD_DPO ? "preference pairs"
					       : "examples",
		(long long)rep->kept, (long long)rep->tokens,
		(long long)rep->trainable_tokens, (long long)rep->truncated,
		(long long)rep->dropped, (long long)rep->errors,
		(long long)rep->warnings);
	if (rep->errors || rep->warnings) {
		char sum[512];
		taco_dataset_report_summary(rep, file, sum, sizeof(sum));
		fprintf(f, "  %s\n", sum);
	}
	for (int i = 0; i < rep->n_listed; i++)
		fprintf(f, "  line %lld: %s %s: %s\n",
			(long long)rep->listed[i].line,
			rep->listed[i].error ? "error" : "warning",
			problem_names[rep->listed[i].code],
			rep->listed[i].detail);
	if (rep->errors + rep->warnings > rep->n_listed)
		fprintf(
		    f, "  ... and %lld more\n",
		    (long long)(rep->errors + rep->warnings - rep->n_listed));
}
