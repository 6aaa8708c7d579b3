/* mc.c: multiple-choice evaluation sets, read and tokenized. */
#include "mc.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset.h"

void taco_mc_free(taco_mc_set *s)
{
	if (!s)
		return;
	free(s->answer);
	free(s->first_row);
	free(s->row_off);
	free(s->row_split);
	free(s->tokens);
	free(s);
}

static int reserve(void **p, size_t *cap, size_t need, size_t esize)
{
	size_t c = *cap ? *cap : 64;
	void *g;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	g = realloc(*p, c * esize);
	if (!g)
		return -ENOMEM;
	*p = g;
	*cap = c;
	return 0;
}

typedef struct mc_builder {
	taco_mc_set *s;
	size_t cap_answer, cap_first, cap_off, cap_split, cap_tok;
	taco_tok_ids full, tmp;
	char *text;
	size_t text_cap;
} mc_builder;

/* One candidate row: encode(prompt + choice); the prompt's tokens are the
 * shared prefix of encode(prompt). */
static int add_row(mc_builder *b, const taco_tok *tok, const char *prompt,
		   size_t pn, const char *choice, size_t cn, int special,
		   taco_err *err)
{
	taco_mc_set *s = b->s;
	size_t split, n;
	int r;

	if (reserve((void **)&b->text, &b->text_cap, pn + cn + 1, 1))
		return -ENOMEM;
	memcpy(b->text, prompt, pn);
	memcpy(b->text + pn, choice, cn);
	if ((r = taco_tok_encode(tok, b->text, pn + cn, special, &b->full,
				 err)) ||
	    (r = taco_tokens_before(tok, b->text, pn, special, &b->full,
				    &b->tmp, &split, err)))
		return r;
	n = b->full.n;
	if (reserve((void **)&s->row_off, &b->cap_off, s->n_rows + 2,
		    sizeof(size_t)) ||
	    reserve((void **)&s->row_split, &b->cap_split, s->n_rows + 2,
		    sizeof(size_t)))
		return -ENOMEM;
	if (s->n_rows == 0)
		s->row_off[0] = 0;
	if (reserve((void **)&s->tokens, &b->cap_tok, s->row_off[s->n_rows] + n,
		    sizeof(int32_t)))
		return -ENOMEM;
	memcpy(s->tokens + s->row_off[s->n_rows], b->full.ids,
	       n * sizeof(int32_t));
	s->row_split[s->n_rows] = split;
	s->row_off[s->n_rows + 1] = s->row_off[s->n_rows] + n;
	s->n_rows++;
	return 0;
}

static int mc_choices(mc_builder *b, const taco_tok *tok, json_t *root,
		      const char *pt, size_t pn, int special, const char *path,
		      int64_t line, taco_err *err);

/* A chat's prompt: the messages rendered by the job's chat template with
 * the generation prompt, what the model answers after when served. */
static int chat_prompt(const taco_chat *chat, json_t *msgs, const char *path,
		       int64_t line, taco_chat_out *out, taco_err *err)
{
	char why[256];
	size_t i;
	json_t *m;
	int r;

	if (!chat)
		return taco_err_set(err, -EINVAL,
				    "%s:%lld: \"messages\": the model has no "
				    "chat template to render them with",
				    path, (long long)line);
	json_array_foreach(msgs, i, m)
	{
		if (!json_is_object(m) ||
		    !json_is_string(json_object_get(m, "role")) ||
		    !json_is_string(json_object_get(m, "content")))
			return taco_err_set(err, -EINVAL,
					    "%s:%lld: messages[%zu] must be "
					    "{\"role\", \"content\"} strings",
					    path, (long long)line, i);
	}
	r = taco_chat_render_text(chat, msgs, NULL, 1, out, why, sizeof(why),
				  err);
	if (r == -EINVAL)
		return taco_err_set(err, r, "%s:%lld: %s", path,
				    (long long)line, why);
	return r;
}

static int mc_line(mc_builder *b, const taco_tok *tok, const taco_chat *chat,
		   json_t *root, const char *path, int64_t line, taco_err *err)
{
	json_t *p = json_object_get(root, "prompt");
	json_t *msgs = json_object_get(root, "messages");
	taco_chat_out co = {0};
	const char *pt;
	size_t pn;
	int r;

	if (!p && json_is_array(msgs) && json_array_size(msgs)) {
		/* the template writes its special tokens (BOS) itself */
		if ((r = chat_prompt(chat, msgs, path, line, &co, err)))
			return r;
		pt = co.text;
		pn = co.len;
	} else if (json_is_string(p)) {
		pt = json_string_value(p);
		pn = json_string_length(p);
	} else {
		pt = NULL;
		pn = 0;
	}
	r = mc_choices(b, tok, root, pt, pn, !co.text, path, line, err);
	taco_chat_out_free(&co);
	return r;
}

/* The choices of a line, each a row after the prompt pt[0..pn). */
static int mc_choices(mc_builder *b, const taco_tok *tok, json_t *root,
		      const char *pt, size_t pn, int special, const char *path,
		      int64_t line, taco_err *err)
{
	taco_mc_set *s = b->s;
	json_t *c = json_object_get(root, "choices");
	json_t *a = json_object_get(root, "answer");
	size_t i, nc = json_array_size(c);
	json_t *e;
	int r;

	if (!pt || !json_is_array(c) || nc < 2 || nc > TACO_MC_MAX_CHOICES ||
	    !json_is_integer(a) || json_integer_value(a) < 0 ||
	    (size_t)json_integer_value(a) >= nc)
		return taco_err_set(
		    err, -EINVAL,
		    "%s:%lld: expected {\"prompt\": string (or "
		    "\"messages\": a chat), \"choices\": [2..%d "
		    "strings], \"answer\": index of the right "
		    "choice}",
		    path, (long long)line, TACO_MC_MAX_CHOICES);
	if (reserve((void **)&s->answer, &b->cap_answer, s->n + 2,
		    sizeof(int)) ||
	    reserve((void **)&s->first_row, &b->cap_first, s->n + 2,
		    sizeof(size_t)))
		return taco_err_set(err, -ENOMEM, "out of memory");
	s->first_row[s->n] = s->n_rows;
	s->answer[s->n] = (int)json_integer_value(a);
	json_array_foreach(c, i, e)
	{
		if (!json_is_string(e) || !json_string_length(e))
			return taco_err_set(err, -EINVAL,
					    "%s:%lld: choices[%zu] must be a "
					    "non-empty string",
					    path, (long long)line, i);
		if ((r = add_row(b, tok, pt, pn, json_string_value(e),
				 json_string_length(e), special, err)))
			return r == -ENOMEM
				   ? taco_err_set(err, r, "out of memory")
				   : r;
	}
	s->n++;
	s->first_row[s->n] = s->n_rows;
	return 0;
}

int taco_mc_load(const char *path, const taco_tok *tok, const taco_chat *chat,
		 int64_t max_examples, taco_mc_set **out, taco_err *err)
{
	FILE *f = fopen(path, "rb");
	mc_builder b = {0};
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int64_t lineno = 0;
	int r = 0;

	if (!f)
		return taco_err_set(err, -errno, "%s: %s", path,
				    strerror(errno));
	b.s = calloc(1, sizeof(*b.s));
	if (!b.s) {
		r = taco_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	while ((len = getline(&line, &cap, f)) >= 0) {
		json_error_t jerr;
		json_t *root;

		lineno++;
		if ((size_t)len > TACO_DATASET_MAX_LINE) {
			r = taco_err_set(err, -EINVAL, "%s:%lld: line too long",
					 path, (long long)lineno);
			goto out;
		}
		if (strspn(line, " \t\r\n") == (size_t)len)
			continue;
		if ((int64_t)b.s->n >= max_examples) {
			r = taco_err_set(
			    err, -EINVAL, "%s:%lld: more than %lld examples",
			    path, (long long)lineno, (long long)max_examples);
			goto out;
		}
		root = json_loadb(line, (size_t)len, JSON_REJECT_DUPLICATES,
				  &jerr);
		if (!root) {
			r = taco_err_set(err, -EINVAL,
					 "%s:%lld: invalid JSON: %s", path,
					 (long long)lineno, jerr.text);
			goto out;
		}
		r = mc_line(&b, tok, chat, root, path, lineno, err);
		json_decref(root);
		if (r)
			goto out;
	}
	if (!b.s->n)
		r = taco_err_set(err, -EINVAL, "%s: no examples", path);
out:
	free(line);
	free(b.text);
	taco_tok_ids_free(&b.full);
	taco_tok_ids_free(&b.tmp);
	fclose(f);
	if (r) {
		taco_mc_free(b.s);
		return r;
	}
	*out = b.s;
	return 0;
}
