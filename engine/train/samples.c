/* samples.c: evaluation's answers (samples.h). */
#include "samples.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

void taco_samples_close(taco_samples *s)
{
	taco_kv_free(s->kv);
	memset(s, 0, sizeof(*s));
}

int taco_samples_open(taco_samples *s, taco_model *m, const taco_job *job,
		      const taco_data *val, const taco_tok *tok, taco_err *err)
{
	int rows, ctx, chunk, most = 0, r;

	memset(s, 0, sizeof(*s));
	if (!taco_job_sample_cache(job, &rows, &ctx, &chunk))
		return 0;
	/* between steps: a streamed model's ring is the step's */
	if ((r = taco_kv_new_beside(m, rows, ctx, chunk, &s->kv, err)))
		return r;
	s->rows = rows;
	s->n_stop =
	    taco_gen_stop_ids(job->model, tok, s->stop, TACO_GEN_MAX_STOP_IDS);
	/* room for the longest reference twice over */
	for (int i = 0; val && i < val->n_prompts && i < rows; i++) {
		taco_tok_ids ids = {0};
		const char *ref = val->prompts[i].reference;
		if ((r = taco_tok_encode(tok, ref, strlen(ref), 0, &ids, err)))
			return r;
		if ((int)ids.n > most)
			most = (int)ids.n;
		taco_tok_ids_free(&ids);
	}
	s->max_tokens = 2 * most + 16;
	if (s->max_tokens > TACO_SAMPLE_MAX_TOKENS)
		s->max_tokens = TACO_SAMPLE_MAX_TOKENS;
	return 0;
}

/* text without the whitespace at either end: [*b, *e) */
static void trim(const char *t, size_t n, size_t *b, size_t *e)
{
	*b = 0;
	*e = n;
	while (*b < *e && isspace((unsigned char)t[*b]))
		(*b)++;
	while (*e > *b && isspace((unsigned char)t[*e - 1]))
		(*e)--;
}

static int same_answer(const char *a, size_t an, const char *ref)
{
	size_t ab, ae, rb, re;

	trim(a, an, &ab, &ae);
	trim(ref, strlen(ref), &rb, &re);
	return ae - ab == re - rb && !memcmp(a + ab, ref + rb, ae - ab);
}

/* At most TACO_SAMPLE_TEXT_MAX bytes of text, cut at a character
 * boundary. */
static json_t *cut_text(const char *t, size_t n)
{
	if (n > TACO_SAMPLE_TEXT_MAX) {
		n = TACO_SAMPLE_TEXT_MAX;
		while (n && ((unsigned char)t[n] & 0xC0) == 0x80)
			n--;
	}
	return json_stringn(t, n);
}

int taco_samples_run(taco_samples *s, taco_model *m, const taco_data *val,
		     const taco_tok *tok, json_t *ev, taco_err *err)
{
	const int32_t *prompt[TACO_JOB_MAX_EVAL_SAMPLES];
	int plen[TACO_JOB_MAX_EVAL_SAMPLES], n = 0, matches = 0, r;
	taco_completion out[TACO_JOB_MAX_EVAL_SAMPLES];
	taco_sampling sp = {.max_tokens = s->max_tokens,
			    .temperature = 0.0f,
			    .top_p = 1.0f,
			    .stop_ids = s->stop,
			    .n_stop_ids = s->n_stop};
	json_t *arr;

	if (!s->kv || !val || !tok)
		return 0;
	/* prompts that leave the answer room in the context */
	for (int i = 0; i < val->n_prompts && n < s->rows; i++)
		if ((int)val->prompts[i].n < taco_kv_ctx(s->kv)) {
			prompt[n] = val->prompts[i].ids;
			plen[n++] = (int)val->prompts[i].n;
		}
	if (!n)
		return 0;
	if ((r = taco_generate(m, s->kv, tok, prompt, plen, n, &sp, NULL, NULL,
			       out, err)))
		return r;
	arr = json_array();
	for (int i = 0, k = 0; i < val->n_prompts && k < n; i++) {
		const taco_data_prompt *p = &val->prompts[i];
		int match;
		if (p->ids != prompt[k])
			continue;
		match = same_answer(out[k].text, out[k].len, p->reference);
		matches += match;
		json_array_append_new(
		    arr,
		    json_pack("{sI so so so sb ss}", "line",
			      (json_int_t)p->line, "prompt",
			      cut_text(p->user, strlen(p->user)), "reference",
			      cut_text(p->reference, strlen(p->reference)),
			      "answer", cut_text(out[k].text, out[k].len),
			      "match", match, "finish",
			      out[k].finish == TACO_FINISH_STOP ? "stop"
								: "length"));
		taco_completion_clear(&out[k]);
		k++;
	}
	json_object_set_new(ev, "val_exact_match",
			    json_real((double)matches / n));
	json_object_set_new(ev, "samples", arr);
	return 0;
}
