/* chat.c: the job's chat template (loading, the variables it sees) and the
 * trained spans of a render. */
#include "chat_internal.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset.h" /* TACO_P_* */
#include "template/template.h"
#include "util/fsutil.h"
#include "util/text.h"

enum { T_DEFAULT = 0, T_TOOL_USE, T_N };

#define PATH_CAP 4200 /* a model directory (TACO_PATH_MAX) and a name */

/* transformers' SPECIAL_TOKENS_ATTRIBUTES: the template variables that
 * name the tokenizer's special tokens */
static const char *const special_names[] = {
    "bos_token", "sep_token", "eos_token",  "unk_token",
    "pad_token", "cls_token", "mask_token", NULL};

/* what apply_chat_template passes itself; a kwarg of these names would be
 * a second value */
static const char *const reserved_vars[] = {"messages", "tools", "documents",
					    "add_generation_prompt", NULL};

struct taco_chat {
	taco_tmpl *tmpl[T_N]; /* tool_use NULL: default serves every chat */
	char *text[T_N];
	int has_gen[T_N]; /* the template has {% generation %} blocks */
	const char *source;
	int models;
	json_t *vars; /* special tokens, then the job's kwargs */
	taco_tmpl_opts topts;
	/* the tokenizer's special added tokens: end-of-turn candidates */
	int n_special;
	const char **special;
	size_t *special_len;
	unsigned char first[256]; /* first bytes of special tokens */
	/* the special tokens that end an assistant turn in a probe render
	 * (non-last and last), and the eos token: what a message whose
	 * render changes with its place may end with */
	const char *eot[3];
	size_t eot_len[3];
	int n_eot;
	/* the generation prompt of the probe's first turn: where a chat opens
	 * with an assistant message, the one there is (NULL: unknown) */
	char *gen_prompt;
	size_t gen_prompt_len;
};

/* ---- loading ------------------------------------------------------------ */

static int read_text(const char *path, char **out, int *found, taco_err *err)
{
	size_t len;
	int r = taco_read_file(path, TACO_TMPL_MAX_SOURCE, out, &len, err);

	*found = r == 0;
	return r == -ENOENT ? 0 : r;
}

/* chat_template.jinja and additional_chat_templates/{default,tool_use}.jinja
 * (transformers 5: files take the place of the config's entries) */
static int load_files(taco_chat *c, const char *dir, int *any, taco_err *err)
{
	static const char *const extra[T_N] = {
	    "additional_chat_templates/default.jinja",
	    "additional_chat_templates/tool_use.jinja"};
	char path[PATH_CAP];
	DIR *d;
	int found, r;

	*any = 0;
	snprintf(path, sizeof(path), "%s/chat_template.jinja", dir);
	if ((r = read_text(path, &c->text[T_DEFAULT], &found, err)))
		return r;
	*any |= found;
	for (int t = 0; t < T_N; t++) {
		if (c->text[t])
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, extra[t]);
		if ((r = read_text(path, &c->text[t], &found, err)))
			return r;
		*any |= found;
	}
	/* another named template alone still replaces the config's */
	snprintf(path, sizeof(path), "%s/additional_chat_templates", dir);
	if (!*any && (d = opendir(path))) {
		struct dirent *e;
		while ((e = readdir(d))) {
			size_t n = strlen(e->d_name);
			*any |= n > 6 && !strcmp(e->d_name + n - 6, ".jinja");
		}
		closedir(d);
	}
	c->source = "chat_template.jinja";
	return 0;
}

static int dup_text(const char *s, char **out, taco_err *err)
{
	if (!(*out = strdup(s)))
		return taco_err_set(err, -ENOMEM, "out of memory");
	return 0;
}

/* tokenizer_config.json: chat_template, a string or [{name, template}] */
static int load_config(taco_chat *c, json_t *cfg, taco_err *err)
{
	json_t *t = json_object_get(cfg, "chat_template"), *e;
	size_t i;
	int r;

	c->source = "tokenizer_config.json";
	if (json_is_string(t))
		return dup_text(json_string_value(t), &c->text[T_DEFAULT], err);
	json_array_foreach(t, i, e)
	{
		const char *n = json_string_value(json_object_get(e, "name"));
		json_t *s = json_object_get(e, "template");
		int k = !n			 ? -1
			: !strcmp(n, "default")	 ? T_DEFAULT
			: !strcmp(n, "tool_use") ? T_TOOL_USE
						 : -1;
		if (k >= 0 && json_is_string(s) && !c->text[k] &&
		    (r = dup_text(json_string_value(s), &c->text[k], err)))
			return r;
	}
	return 0;
}

/* The template variables of the special tokens, as transformers'
 * special_tokens_map has them: strings, or AddedToken objects' content. */
static int special_vars(taco_chat *c, json_t *cfg, const taco_tok *tok)
{
	for (int k = 0; special_names[k]; k++) {
		json_t *v = json_object_get(cfg, special_names[k]);
		if (json_is_object(v))
			v = json_object_get(v, "content");
		if (json_is_string(v) &&
		    json_object_set(c->vars, special_names[k], v))
			return -ENOMEM;
	}
	/* a built-in template of a model without a config: the tokenizer's */
	if (tok) {
		taco_tok_special sp = taco_tok_special_ids(tok);
		int32_t ids[2] = {sp.bos, sp.eos};
		const char *names[2] = {"bos_token", "eos_token"};
		for (int k = 0; k < 2; k++) {
			size_t n;
			const char *s =
			    ids[k] >= 0 ? taco_tok_id_to_token(tok, ids[k], &n)
					: NULL;
			if (s && !json_object_get(c->vars, names[k]) &&
			    json_object_set_new(c->vars, names[k],
						json_stringn(s, n)))
				return -ENOMEM;
		}
	}
	return 0;
}

static int set_kwargs(taco_chat *c, const char *text, taco_err *err)
{
	json_error_t jerr;
	json_t *kw;
	const char *k;
	json_t *v;

	if (!text || !*text)
		return 0;
	kw = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(kw)) {
		json_decref(kw);
		return taco_err_set(err, -EINVAL,
				    "chat_template_kwargs: not a JSON object");
	}
	json_object_foreach(kw, k, v)
	{
		for (int i = 0; reserved_vars[i]; i++)
			if (!strcmp(k, reserved_vars[i])) {
				json_decref(kw);
				return taco_err_set(
				    err, -EINVAL,
				    "chat_template_kwargs.%s: set by tacod "
				    "for each chat",
				    reserved_vars[i]);
			}
		if (json_object_set(c->vars, k, v)) {
			json_decref(kw);
			return taco_err_set(err, -ENOMEM, "out of memory");
		}
	}
	json_decref(kw);
	return 0;
}

static int load_specials(taco_chat *c, const taco_tok *tok)
{
	int n = tok ? taco_tok_added_count(tok) : 0, k = 0;

	c->special = calloc((size_t)n + 1, sizeof(*c->special));
	c->special_len = calloc((size_t)n + 1, sizeof(*c->special_len));
	if (!c->special || !c->special_len)
		return -ENOMEM;
	for (int i = 0; i < n; i++) {
		size_t len;
		int sp;
		const char *s = taco_tok_added_token(tok, i, &len, &sp);
		if (s && sp && len) {
			c->special[k] = s;
			c->special_len[k++] = len;
			c->first[(unsigned char)s[0]] = 1;
		}
	}
	c->n_special = k;
	return 0;
}

static int compile(taco_chat *c, const char *what, taco_err *err)
{
	for (int t = 0; t < T_N; t++) {
		const char *s = c->text[t];
		const char *g;
		int r;
		if (!s)
			continue;
		if ((r = taco_tmpl_compile(s, strlen(s), &c->tmpl[t], err)))
			return taco_err_prefix(err, r, "%s%s", what,
					       t == T_TOOL_USE ? " (tool_use)"
							       : "");
		/* transformers' test for generation blocks */
		for (g = strstr(s, "{%"); g && !c->has_gen[t];
		     g = strstr(g + 2, "{%")) {
			const char *p = g + 2;
			if (*p == '-')
				p++;
			p += strspn(p, " \t\r\n");
			c->has_gen[t] = !strncmp(p, "generation", 10);
		}
	}
	return 0;
}

static void probe_eot(taco_chat *c);

int taco_chat_open(const taco_chat_opts *o, const taco_tok *tok,
		   taco_chat **out, taco_err *err)
{
	char path[PATH_CAP];
	taco_chat *c = calloc(1, sizeof(*c));
	char *cfg_text = NULL;
	json_t *cfg = NULL;
	json_error_t jerr;
	char what[PATH_CAP + 64];
	int any = 0, r;

	if (!c || !(c->vars = json_object()))
		return free(c), taco_err_set(err, -ENOMEM, "out of memory");
	c->topts.now = o->now;
	/* the model's config names the special tokens whatever the template */
	snprintf(path, sizeof(path), "%s/tokenizer_config.json",
		 o->model_dir ? o->model_dir : ".");
	if (o->model_dir &&
	    (r = taco_read_file(path, 16u << 20, &cfg_text, NULL, err)) &&
	    r != -ENOENT)
		goto fail;
	if (cfg_text) {
		/* transformers writes model_max_length = 1e30 as an integer,
		 * which does not fit json_int_t */
		cfg = json_loads(cfg_text, JSON_DECODE_INT_AS_REAL, &jerr);
		if (!json_is_object(cfg)) {
			r = taco_err_set(err, -EINVAL, "%s:%d: %s", path,
					 jerr.line,
					 cfg ? "not a JSON object" : jerr.text);
			goto fail;
		}
	}
	if (o->jinja && *o->jinja) {
		c->source = "chat_template_jinja";
		if ((r = dup_text(o->jinja, &c->text[T_DEFAULT], err)))
			goto fail;
		snprintf(what, sizeof(what), "chat_template_jinja");
	} else if (o->template_id != TACO_TEMPLATE_AUTO) {
		const char *b = taco_chat_builtin(o->template_id);
		if (!b) {
			r = taco_err_set(err, -EINVAL,
					 "chat_template: unknown");
			goto fail;
		}
		c->source = taco_template_name(o->template_id);
		if ((r = dup_text(b, &c->text[T_DEFAULT], err)))
			goto fail;
		snprintf(what, sizeof(what), "chat_template %s", c->source);
	} else {
		c->models = 1;
		if ((r = load_files(c, o->model_dir, &any, err)))
			goto fail;
		if (!any && cfg && (r = load_config(c, cfg, err)))
			goto fail;
		if (!c->text[T_DEFAULT]) {
			r = taco_err_set(
			    err, -ENOTSUP,
			    "%s: %s; set the job option chat_template "
			    "(chatml, llama3, mistral) or chat_template_jinja",
			    o->model_dir,
			    c->text[T_TOOL_USE] || any
				? "no default chat template (only named ones)"
				: "the model has no chat template "
				  "(tokenizer_config.json, "
				  "chat_template.jinja)");
			goto fail;
		}
		snprintf(what, sizeof(what), "%s/%s", o->model_dir, c->source);
	}
	if ((r = compile(c, what, err)))
		goto fail;
	if ((r = special_vars(c, cfg, tok)) || (r = load_specials(c, tok))) {
		r = taco_err_set(err, -ENOMEM, "out of memory");
		goto fail;
	}
	if ((r = set_kwargs(c, o->kwargs, err)))
		goto fail;
	probe_eot(c);
	json_decref(cfg);
	free(cfg_text);
	*out = c;
	return 0;
fail:
	json_decref(cfg);
	free(cfg_text);
	taco_chat_free(c);
	return r;
}

void taco_chat_free(taco_chat *c)
{
	if (!c)
		return;
	for (int t = 0; t < T_N; t++) {
		taco_tmpl_free(c->tmpl[t]);
		free(c->text[t]);
	}
	json_decref(c->vars);
	free(c->gen_prompt);
	free(c->special);
	free(c->special_len);
	free(c);
}

const char *taco_chat_source(const taco_chat *c)
{
	return c->source;
}

const char *taco_chat_jinja(const taco_chat *c)
{
	return c->text[T_DEFAULT];
}

int taco_chat_is_models(const taco_chat *c)
{
	return c->models;
}

void taco_chat_out_free(taco_chat_out *out)
{
	free(out->text);
	free(out->span);
	memset(out, 0, sizeof(*out));
}

/* ---- rendering ---------------------------------------------------------- */

typedef struct render_ctx {
	const taco_chat *c;
	int t;	       /* the template: default or tool_use */
	json_t *tools; /* NULL: None */
	char *why;
	size_t why_cap;
	int *code;
	taco_err *err;
} render_ctx;

/* Renders messages[0..n) (n < 0: all). A template's failure on this chat
 * is the line's problem (-EINVAL, why); other errors are err's. */
static int render_n(const render_ctx *x, json_t *messages, long n, int gen,
		    json_t *tools, taco_tmpl_out *out)
{
	json_t *ctx = json_copy(x->c->vars), *msgs = messages;
	taco_err terr;
	int r;

	if (!ctx)
		return taco_err_set(x->err, -ENOMEM, "out of memory");
	if (n >= 0) {
		msgs = json_array();
		for (long i = 0; msgs && i < n; i++)
			if (json_array_append(
				msgs, json_array_get(messages, (size_t)i)))
				json_decref(msgs), msgs = NULL;
	} else {
		json_incref(msgs);
	}
	if (!msgs || json_object_set_new(ctx, "messages", msgs) ||
	    json_object_set(ctx, "tools", tools ? tools : json_null()) ||
	    json_object_set_new(ctx, "documents", json_null()) ||
	    json_object_set_new(ctx, "add_generation_prompt",
				json_boolean(gen))) {
		json_decref(ctx);
		return taco_err_set(x->err, -ENOMEM, "out of memory");
	}
	r = taco_tmpl_render(x->c->tmpl[x->t], ctx, &x->c->topts, out, &terr);
	json_decref(ctx);
	if (r == -EINVAL || r == -E2BIG) {
		*x->code = TACO_P_TEMPLATE_ERROR;
		snprintf(x->why, x->why_cap, "the chat template: %s", terr.msg);
		return -EINVAL;
	}
	if (r)
		return taco_err_set(x->err, r, "chat template: %s", terr.msg);
	if (out->len > TACO_CHAT_MAX_RENDER) {
		taco_tmpl_out_free(out);
		*x->code = TACO_P_TEMPLATE_ERROR;
		snprintf(x->why, x->why_cap,
			 "the rendered chat is more than %u bytes",
			 TACO_CHAT_MAX_RENDER);
		return -EINVAL;
	}
	return 0;
}

/* The longest special token that starts at s[0..n) (the tokenizer
 * matches the longest), its length, or 0. */
static size_t special_at(const taco_chat *c, const char *s, size_t n)
{
	size_t best = 0;

	if (!n || !c->first[(unsigned char)s[0]])
		return 0;
	for (int k = 0; k < c->n_special; k++)
		if (c->special_len[k] <= n && c->special_len[k] > best &&
		    !memcmp(s, c->special[k], c->special_len[k]))
			best = c->special_len[k];
	return best;
}

/* The end of the last special token in s[a..b), or 0 when none. */
static size_t last_special_end(const taco_chat *c, const char *s, size_t a,
			       size_t b, size_t *start)
{
	size_t end = 0;

	for (size_t i = a; i < b; i++) {
		size_t k = special_at(c, s + i, b - i);
		if (k) {
			*start = i;
			end = i + k;
			i += k - 1;
		}
	}
	return end;
}

/* The end of the message's end-of-turn marker (marker, or one of c->eot)
 * in s[a..n), ending after min_end, where the message's text in s, s[a..]
 * up to the marker, is its own render before its marker (own[0..own_len))
 * or that render's end: where more follows it, a template may drop the
 * first part of a message (an earlier turn's think block, the line breaks
 * Qwen3 strips from a last turn) but writes the rest as it would. A
 * marker's text inside a message's content or arguments is so told from
 * its end. 0 when there is none. */
static size_t eot_end(const taco_chat *c, const char *s, size_t a, size_t n,
		      size_t min_end, const char *marker, size_t mlen,
		      const char *own, size_t own_len)
{
	size_t lead = a;

	while (lead < n && (s[lead] == ' ' || s[lead] == '\n' ||
			    s[lead] == '\t' || s[lead] == '\r'))
		lead++;
	for (size_t i = a; i < n; i++) {
		size_t k = special_at(c, s + i, n - i);
		size_t len = i > lead ? i - lead : 0;
		int eot = 0;
		if (!k)
			continue;
		eot = k == mlen && !memcmp(s + i, marker, mlen);
		for (int e = 0; e < c->n_eot && !eot; e++)
			eot =
			    k == c->eot_len[e] && !memcmp(s + i, c->eot[e], k);
		if (eot && i + k > min_end && len <= own_len &&
		    (!len || !memcmp(s + lead, own + own_len - len, len)))
			return i + k;
		i += k - 1;
	}
	return 0;
}

/* A probe chat's end-of-turn markers: the special token after a non-last
 * and after the last assistant message's text, and the eos token. A
 * template that fails on the probe leaves the eos token alone. */
static void probe_eot(taco_chat *c)
{
	static const char *const probe =
	    "[{\"role\": \"user\", \"content\": \"tacoprobeQ1\"},"
	    "{\"role\": \"assistant\", \"content\": \"tacoprobeA1\"},"
	    "{\"role\": \"user\", \"content\": \"tacoprobeQ2\"},"
	    "{\"role\": \"assistant\", \"content\": \"tacoprobeA2\"}]";
	const char *marks[2] = {"tacoprobeA1", "tacoprobeA2"};
	json_t *msgs = json_loads(probe, 0, NULL);
	const char *eos =
	    json_string_value(json_object_get(c->vars, "eos_token"));
	char why[64];
	int code;
	taco_err err;
	render_ctx x = {c, T_DEFAULT, NULL, why, sizeof(why), &code, &err};
	taco_tmpl_out o = {0};

	if (eos && *eos) {
		c->eot[c->n_eot] = eos;
		c->eot_len[c->n_eot++] = strlen(eos);
	}
	if (msgs) {
		taco_tmpl_out q = {0}, g = {0};
		if (!render_n(&x, msgs, 1, 0, NULL, &q) &&
		    !render_n(&x, msgs, 1, 1, NULL, &g) && g.len >= q.len &&
		    !memcmp(g.text, q.text, q.len) &&
		    (c->gen_prompt = malloc(g.len - q.len + 1))) {
			memcpy(c->gen_prompt, g.text + q.len, g.len - q.len);
			c->gen_prompt_len = g.len - q.len;
		}
		taco_tmpl_out_free(&q);
		taco_tmpl_out_free(&g);
	}
	if (!msgs || render_n(&x, msgs, -1, 0, NULL, &o)) {
		json_decref(msgs);
		return;
	}
	for (int k = 0; k < 2; k++) {
		const char *p = strstr(o.text, marks[k]);
		size_t i = p ? (size_t)(p - o.text) : o.len;
		for (; i < o.len; i++) {
			size_t len = special_at(c, o.text + i, o.len - i);
			if (len) {
				/* a pointer into the tokenizer's added token */
				for (int s = 0; s < c->n_special; s++)
					if (c->special_len[s] == len &&
					    !memcmp(c->special[s], o.text + i,
						    len)) {
						c->eot[c->n_eot] =
						    c->special[s];
						c->eot_len[c->n_eot++] = len;
						break;
					}
				break;
			}
		}
	}
	taco_tmpl_out_free(&o);
	json_decref(msgs);
}

static int lost(const render_ctx *x, size_t i, const char *fmt)
{
	*x->code = TACO_P_ANSWER_NOT_LOCATED;
	snprintf(x->why, x->why_cap, "messages[%zu]: %s", i, fmt);
	return -EINVAL;
}

/* Python's str.isspace(): what Jinja's trim (str.strip()) removes. */
static int py_isspace(uint32_t c)
{
	return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) ||
	       c == 0x85 || c == 0xA0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
	       c == 0x202F || c == 0x205F || c == 0x3000;
}

/* The length of the well-formed UTF-8 character at s[0..n), its code
 * point in *cp; 0 when it is not one. */
static size_t utf8_at(const unsigned char *s, size_t n, uint32_t *cp)
{
	size_t len = s[0] < 0x80	 ? 1
		     : (s[0] >> 5) == 6	 ? 2
		     : (s[0] >> 4) == 14 ? 3
		     : (s[0] >> 3) == 30 ? 4
					 : 0;

	if (!len || len > n)
		return 0;
	*cp = len == 1 ? s[0] : s[0] & (0x7F >> len);
	for (size_t k = 1; k < len; k++) {
		if ((s[k] & 0xC0) != 0x80)
			return 0;
		*cp = (*cp << 6) | (s[k] & 0x3F);
	}
	return len;
}

/* s[0..*n) trimmed as Python's str.strip() trims: a template's trim, or
 * the line breaks one strips, leave the rest of a content as it is. */
static const char *trimmed(const char *t, size_t *n)
{
	uint32_t cp;
	size_t k;

	while (*n && (k = utf8_at((const unsigned char *)t, *n, &cp)) &&
	       py_isspace(cp))
		t += k, *n -= k;
	while (*n) {
		k = 1;
		while (k < 4 && k < *n &&
		       ((unsigned char)t[*n - k] & 0xC0) == 0x80)
			k++;
		if (utf8_at((const unsigned char *)t + *n - k, k, &cp) != k ||
		    !py_isspace(cp))
			break;
		*n -= k;
	}
	return t;
}

/* The first occurrence of needle[0..n) in s[a..b), or -1. */
static long find(const char *s, size_t a, size_t b, const char *needle,
		 size_t n)
{
	if (!n || b < n)
		return -1;
	for (size_t i = a; i + n <= b; i++)
		if (s[i] == needle[0] && !memcmp(s + i, needle, n))
			return (long)i;
	return -1;
}

/* A message's content: its head (first 32 bytes) or tail (the text after
 * its last line break or tag, '>', at most its last 32 bytes: what a
 * template that takes a think block apart still writes), cut at character
 * boundaries; both trimmed. */
static const char *content_part(json_t *m, const char *key, int tail, size_t *n)
{
	const char *t = json_string_value(json_object_get(m, key));
	size_t k = 32;

	if (!t)
		return *n = 0, NULL;
	*n = strlen(t);
	t = trimmed(t, n);
	if (tail) {
		size_t i = *n;
		while (i && t[i - 1] != '\n' && t[i - 1] != '>')
			i--;
		t += i;
		*n -= i;
		t = trimmed(t, n);
	}
	if (*n <= k)
		return t;
	if (tail) {
		size_t cut = *n - k;
		while (cut < *n && ((unsigned char)t[cut] & 0xC0) == 0x80)
			cut++;
		*n -= cut;
		return t + cut;
	}
	while (k && ((unsigned char)t[k] & 0xC0) == 0x80)
		k--;
	*n = k;
	return t;
}

/* Where the message's first rendered part (its reasoning, content or first
 * tool call's name) is in T[from..), the earliest found; -1 when none. */
static long first_anchor(json_t *m, const taco_tmpl_out *T, size_t from)
{
	static const char *const keys[] = {"reasoning_content", "content",
					   NULL};
	json_t *tc = json_array_get(json_object_get(m, "tool_calls"), 0);
	const char *name = json_string_value(
	    json_object_get(json_object_get(tc, "function"), "name"));
	long best = -1, at;
	size_t n;
	const char *t;

	for (int k = 0; keys[k]; k++) {
		t = content_part(m, keys[k], 0, &n);
		if (t && n && (at = find(T->text, from, T->len, t, n)) >= 0 &&
		    (best < 0 || at < best))
			best = at;
	}
	if (name &&
	    (at = find(T->text, from, T->len, name, strlen(name))) >= 0 &&
	    (best < 0 || at < best))
		best = at;
	/* a think block the template took out of the content: what follows
	 * it */
	if (best < 0 && (t = content_part(m, "content", 1, &n)) && n)
		best = find(T->text, from, T->len, t, n);
	return best;
}

/* The end of the message's last rendered part in T[from..): its content's
 * tail, or its tool calls' names in order; from when none is found. */
static size_t last_anchor_end(json_t *m, const taco_tmpl_out *T, size_t from)
{
	json_t *calls = json_object_get(m, "tool_calls"), *tc;
	size_t end = from, at = from, n, k;
	const char *t = content_part(m, "content", 1, &n);
	long p;

	if (t && n && (p = find(T->text, from, T->len, t, n)) >= 0)
		end = (size_t)p + n;
	json_array_foreach(calls, k, tc)
	{
		const char *name = json_string_value(
		    json_object_get(json_object_get(tc, "function"), "name"));
		if (name &&
		    (p = find(T->text, at, T->len, name, strlen(name))) >= 0) {
			at = (size_t)p + strlen(name);
			end = at > end ? at : end;
		}
	}
	return end;
}

/* Whether the end of the message's content (trimmed: its last 64 bytes at
 * most, what follows a think block a template takes apart) is inside
 * s[a..b): the check that the span found is this message's. */
static int content_inside(json_t *m, const char *s, size_t a, size_t b)
{
	size_t n;
	const char *t = content_part(m, "content", 1, &n);

	/* beside tool calls a template may leave the content out (Llama
	 * 3.1's does) */
	if (json_array_size(json_object_get(m, "tool_calls")))
		return 1;
	return !t || !n || find(s, a, b, t, n) >= 0;
}

/* Whether the message has reasoning, content or tool calls to render. */
static int has_text(json_t *m)
{
	static const char *const keys[] = {"reasoning_content", "content",
					   NULL};
	size_t n;

	for (int k = 0; keys[k]; k++)
		if (content_part(m, keys[k], 0, &n) && n)
			return 1;
	return json_array_size(json_object_get(m, "tool_calls")) > 0;
}

/* Where the first end-of-turn marker (c->eot) in T[from..) starts, or
 * -1. */
static long first_eot_at(const taco_chat *c, const taco_tmpl_out *T,
			 size_t from)
{
	for (size_t i = from; i < T->len; i++) {
		size_t k = special_at(c, T->text + i, T->len - i);
		for (int e = 0; k && e < c->n_eot; e++)
			if (k == c->eot_len[e] &&
			    !memcmp(T->text + i, c->eot[e], k))
				return (long)i;
		if (k)
			i += k - 1;
	}
	return -1;
}

/* L moved back to the start of the special token of T it falls inside,
 * if any: two renders that part inside a marker part before it. */
static size_t unsplit(const taco_chat *c, const taco_tmpl_out *T, size_t L)
{
	for (size_t j = L; j > 0 && L - j < 64;) {
		size_t k;
		j--;
		k = special_at(c, T->text + j, T->len - j);
		if (k && j + k > L)
			return j;
	}
	return L;
}

static size_t lcp(const taco_tmpl_out *a, const taco_tmpl_out *b)
{
	size_t L = 0;

	while (L < a->len && L < b->len && a->text[L] == b->text[L])
		L++;
	return L;
}

/* Where message i starts in T when T does not begin with P (the render
 * of messages[0..i) and the generation prompt): an earlier message
 * renders otherwise once more follows it (gpt-oss drops an analysis), or
 * the generation prompt is not how the message opens in T (Qwen3 without
 * thinking opens an earlier turn with no empty think block). The start
 * follows the longest part of the generation prompt found in T right
 * before the message's first part; at least its first special token. */
static int locate_start(const render_ctx *x, json_t *messages, size_t i,
			const taco_tmpl_out *T, const taco_tmpl_out *P,
			size_t *start)
{
	taco_tmpl_out Q = {0};
	size_t L0 = 0, glen, gmin, qlen;
	const char *g;
	long anchor;
	int r;

	if (P) {
		L0 = lcp(P, T);
		if ((r = render_n(x, messages, (long)i, 0, x->tools, &Q)))
			return r;
		qlen = Q.len;
		r = Q.len <= P->len && !memcmp(Q.text, P->text, Q.len);
		taco_tmpl_out_free(&Q);
		if (!r)
			return lost(x, i,
				    "the generation prompt does not follow the "
				    "render of the messages before it");
		g = P->text + qlen;
		glen = P->len - qlen;
	} else { /* no render of the chat before it: the probe's prompt */
		g = x->c->gen_prompt;
		glen = x->c->gen_prompt_len;
	}
	/* at least its header: its first special token and the text after
	 * it up to a line break (included) or the next special token
	 * (<|im_start|>assistant\n, <|start_header_id|>assistant) */
	gmin = glen ? special_at(x->c, g, glen) : 0;
	while (gmin && gmin < glen && g[gmin - 1] != '\n' &&
	       !special_at(x->c, g + gmin, glen - gmin))
		gmin++;
	L0 = unsplit(x->c, T, L0);
	anchor = first_anchor(json_array_get(messages, i), T,
			      L0 > glen ? L0 - glen : 0);
	/* a message with nothing to find: its end-of-turn marker, the first
	 * after where P and T part, is where its empty text ends */
	if (anchor < 0 && !has_text(json_array_get(messages, i)))
		anchor = first_eot_at(x->c, T, L0);
	if (anchor < 0)
		return lost(x, i,
			    "the chat renders it otherwise than after its "
			    "generation prompt, and its text is not found");
	if (!gmin) {
		/* no prompt of its own (Mistral's): it follows the special
		 * token that ends the render before it ([/INST]), or, opening
		 * the chat, the last special token before its text */
		size_t hs = 0, he = 0;
		if (P)
			he = last_special_end(x->c, P->text, 0, P->len, &hs);
		for (long p = anchor - 1; p >= 0; p--) {
			size_t k = special_at(x->c, T->text + p,
					      (size_t)anchor - (size_t)p);
			if (k &&
			    (!he || (k == he - hs &&
				     !memcmp(T->text + p, P->text + hs, k)))) {
				*start = (size_t)p + k;
				return 0;
			}
		}
		return lost(x, i,
			    "no special token before its text in the chat's "
			    "render tells where it starts");
	}
	for (long p = anchor - (long)gmin; p >= 0; p--) {
		size_t k = 0;
		while (k < glen && (size_t)p + k < (size_t)anchor &&
		       T->text[p + k] == g[k])
			k++;
		/* the whole prompt, or else its header: what follows the
		 * header is the message's own (reasoning where the prompt
		 * has an empty think block) */
		if (k >= gmin) {
			*start = (size_t)p + (k == glen ? glen : gmin);
			return 0;
		}
	}
	return lost(x, i,
		    "its generation prompt is not found before its text in "
		    "the chat's render");
}

/* The span of assistant message i in the whole render T: after the
 * generation prompt (the render of messages[0..i) with it: where T
 * begins with it, its end), through the last special token of its own
 * render (messages[0..i]) when that is how T goes on; where the message
 * renders otherwise when more follows it (Qwen3 drops an earlier turn's
 * think block), through the first end-of-turn marker after its last part
 * in T. */
static int message_span(const render_ctx *x, json_t *messages, size_t i,
			const taco_tmpl_out *T, size_t *a, size_t *b)
{
	json_t *m = json_array_get(messages, i);
	taco_tmpl_out P = {0}, S = {0};
	size_t start, sp, L, ms = 0, me, from;
	int exact, r;

	r = render_n(x, messages, (long)i, 1, x->tools, &P);
	if (r == -EINVAL && i == 0 && x->c->gen_prompt) {
		/* a chat that opens with an assistant message, on a template
		 * that renders no chat without messages */
		P.text = NULL;
		P.len = 0;
		if ((r = locate_start(x, messages, i, T, NULL, &start)))
			return r;
		exact = 0;
	} else if (r) {
		return r;
	} else {
		exact = P.len <= T->len && !memcmp(P.text, T->text, P.len);
		start = P.len;
		if (!exact &&
		    (r = locate_start(x, messages, i, T, &P, &start))) {
			taco_tmpl_out_free(&P);
			return r;
		}
	}
	sp = P.len;
	if ((r = render_n(x, messages, (long)i + 1, 0, x->tools, &S))) {
		taco_tmpl_out_free(&P);
		return r;
	}
	r = !P.len || (S.len >= P.len && !memcmp(S.text, P.text, P.len));
	taco_tmpl_out_free(&P);
	if (!r && exact) {
		taco_tmpl_out_free(&S);
		return lost(x, i,
			    "its render does not begin with the generation "
			    "prompt");
	}
	/* its own render ends with it: its last special token is its end
	 * marker, wherever the earlier messages put it */
	if (!r)
		sp = 0;
	r = 0;
	L = lcp(&S, T);
	me = last_special_end(x->c, S.text, sp, S.len, &ms);
	if (exact && L == S.len) {
		*b = me ? me : S.len;
	} else if (!me) {
		r = lost(x, i,
			 "its render ends with no special token, and the "
			 "chat renders it otherwise");
	} else if (exact && me <= L) {
		*b = me; /* its marker is where both agree */
	} else if (exact && ms <= L &&
		   special_at(x->c, T->text + ms, T->len - ms)) {
		/* both end with a marker there, another in T */
		*b = ms + special_at(x->c, T->text + ms, T->len - ms);
	} else {
		/* a marker that ends where T and S part, or after the
		 * message's last part */
		from = last_anchor_end(m, T, start);
		if (exact && L > from)
			from = L;
		*b = eot_end(x->c, T->text, start, T->len, from, S.text + ms,
			     me - ms, S.text + sp, ms - sp);
		if (!*b)
			r = lost(x, i,
				 "no end-of-turn marker follows it in the "
				 "chat's render");
	}
	taco_tmpl_out_free(&S);
	if (r)
		return r;
	*a = start;
	if (!content_inside(m, T->text, *a, *b))
		return lost(x, i,
			    "its content is not where the render puts its "
			    "turn");
	return 0;
}

static int is_assistant(json_t *m)
{
	const char *role = json_string_value(json_object_get(m, "role"));
	return role && !strcmp(role, "assistant");
}

/* Spans from the template's generation blocks: the k-th block is the k-th
 * assistant message's, or, when they do not pair up, all of them (when
 * every assistant message is trained). */
static int gen_spans(const render_ctx *x, json_t *messages,
		     const unsigned char *trained, const taco_tmpl_out *T,
		     taco_chat_out *out)
{
	size_t n = json_array_size(messages), k = 0;
	int assistants = 0, all = 1;

	for (size_t i = 0; i < n; i++)
		if (is_assistant(json_array_get(messages, i))) {
			assistants++;
			all &= trained[i];
		}
	if (assistants != T->n_gen && !all) {
		*x->code = TACO_P_ANSWER_NOT_LOCATED;
		snprintf(x->why, x->why_cap,
			 "the chat template's %d generation blocks do not "
			 "pair with the %d assistant messages, so weight 0 "
			 "cannot be applied",
			 T->n_gen, assistants);
		return -EINVAL;
	}
	for (size_t i = 0; i < n && k < (size_t)T->n_gen; i++) {
		if (assistants == T->n_gen &&
		    !is_assistant(json_array_get(messages, i)))
			continue;
		if (assistants != T->n_gen || trained[i]) {
			out->span[out->n_span++] = T->gen[2 * k];
			out->span[out->n_span++] = T->gen[2 * k + 1];
		}
		k++;
	}
	for (; assistants != T->n_gen && k < (size_t)T->n_gen; k++) {
		out->span[out->n_span++] = T->gen[2 * k];
		out->span[out->n_span++] = T->gen[2 * k + 1];
	}
	return 0;
}

/* A chat with tools or tool calls on a template that renders none of them
 * would train without them: the line's problem. */
static int tools_rendered(const render_ctx *x, json_t *messages,
			  const taco_tmpl_out *T)
{
	size_t i, j, n = json_array_size(messages);
	json_t *m, *tc;

	if (x->tools && json_array_size(x->tools)) {
		taco_tmpl_out N = {0};
		int same, r = render_n(x, messages, -1, 0, NULL, &N);
		if (r)
			return r;
		same = N.len == T->len && !memcmp(N.text, T->text, N.len);
		taco_tmpl_out_free(&N);
		if (same) {
			*x->code = TACO_P_TOOLS_UNSUPPORTED;
			snprintf(x->why, x->why_cap,
				 "\"tools\": the chat template renders no "
				 "tool definitions (%s)",
				 x->c->source);
			return -EINVAL;
		}
	}
	for (i = 0; i < n; i++) {
		m = json_array_get(messages, i);
		json_array_foreach(json_object_get(m, "tool_calls"), j, tc)
		{
			const char *name = json_string_value(json_object_get(
			    json_object_get(tc, "function"), "name"));
			if (name && *name && !strstr(T->text, name)) {
				*x->code = TACO_P_TOOLS_UNSUPPORTED;
				snprintf(x->why, x->why_cap,
					 "messages[%zu].tool_calls: the chat "
					 "template does not render tool calls "
					 "(%s)",
					 i, x->c->source);
				return -EINVAL;
			}
		}
	}
	return 0;
}

static int pick(const taco_chat *c, json_t *tools)
{
	return tools && c->tmpl[T_TOOL_USE] ? T_TOOL_USE : T_DEFAULT;
}

int taco_chat_render(const taco_chat *c, json_t *messages, json_t *tools,
		     const unsigned char *trained, taco_chat_out *out,
		     int *code, char *why, size_t why_cap, taco_err *err)
{
	render_ctx x = {c, pick(c, tools), tools, why, why_cap, code, err};
	taco_tmpl_out T = {0};
	taco_chat_out o = {0};
	size_t n = json_array_size(messages);
	int r;

	if ((r = render_n(&x, messages, -1, 0, tools, &T)))
		return r;
	if ((r = tools_rendered(&x, messages, &T)))
		goto out;
	o.span = malloc((2 * n + 2 * (size_t)T.n_gen + 2) * sizeof(size_t));
	if (!o.span) {
		r = taco_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	if (c->has_gen[x.t]) {
		r = gen_spans(&x, messages, trained, &T, &o);
	} else {
		for (size_t i = 0; i < n && !r; i++) {
			size_t a, b;
			if (!trained[i] ||
			    (r = message_span(&x, messages, i, &T, &a, &b)))
				continue;
			o.span[o.n_span++] = a;
			o.span[o.n_span++] = b;
		}
	}
	if (r)
		goto out;
	o.text = T.text;
	o.len = T.len;
	T.text = NULL;
	*out = o;
	o.span = NULL;
out:
	free(o.span);
	taco_tmpl_out_free(&T);
	return r;
}

int taco_chat_render_text(const taco_chat *c, json_t *messages, json_t *tools,
			  int add_generation_prompt, taco_chat_out *out,
			  char *why, size_t why_cap, taco_err *err)
{
	int code;
	render_ctx x = {c, pick(c, tools), tools, why, why_cap, &code, err};
	taco_tmpl_out T = {0};
	int r = render_n(&x, messages, -1, add_generation_prompt, tools, &T);

	if (r)
		return r;
	memset(out, 0, sizeof(*out));
	out->text = T.text;
	out->len = T.len;
	T.text = NULL;
	taco_tmpl_out_free(&T);
	return 0;
}
