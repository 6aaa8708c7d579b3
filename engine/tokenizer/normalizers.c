/* normalizers.c: the normalizer stage: NFC, NFD, NFKC, NFKD (unicode.c),
 * Prepend, Replace (String or Regex), Strip and Sequence, read from
 * tokenizer.json and run on the text between added tokens. */
#include <errno.h>
#include <jansson.h>
#include <string.h>

#include "tokenizer_internal.h"

/* ------------------------------------------------------------ loading */

static int parse_form(struct tok_norm *nm, const char *type)
{
	if (!strcmp(type, "NFC"))
		nm->type = NORM_NFC;
	else if (!strcmp(type, "NFD"))
		nm->type = NORM_NFD;
	else if (!strcmp(type, "NFKC"))
		nm->type = NORM_NFKC;
	else if (!strcmp(type, "NFKD"))
		nm->type = NORM_NFKD;
	else
		return 0;
	return 1;
}

/* Prepend (its prepend) or Replace (its content): the text in nm->str. */
static int parse_text(struct tok_loader *L, struct tok_norm *nm, json_t *o,
		      const char *where, const char *key,
		      const char *const *keys)
{
	const char *s;
	size_t n;
	int r;

	if ((r = tok_check_keys(L, o, where, keys)) ||
	    (r = tok_get_str(L, o, where, key, 0, &s, &n)))
		return r;
	if (!(nm->str = tok_dupn(s, n)))
		return tok_oom(L);
	nm->str_len = n;
	return 0;
}

int tok_parse_normalizer(struct tok_loader *L, json_t *o, const char *where,
			 int depth)
{
	static const char *const none[] = {"type", NULL};
	static const char *const prep[] = {"type", "prepend", NULL};
	static const char *const repl[] = {"type", "pattern", "content", NULL};
	static const char *const strip[] = {"type", "strip_left", "strip_right",
					    NULL};
	struct tok_norm *nm;
	const char *type;
	int r;

	if (!(type = tok_step_type(L, o, where, depth, &r)))
		return r;
	if (!strcmp(type, "Sequence"))
		return tok_parse_sequence(L, o, where, "normalizers", depth,
					  tok_parse_normalizer);
	if ((r = tok_new_step(L, (void **)&L->tok->norms, &L->tok->n_norms,
			      &L->n_norm_cap, sizeof(*nm), where, "normalizers",
			      (void **)&nm)))
		return r;
	if (parse_form(nm, type))
		return tok_check_keys(L, o, where, none);
	if (!strcmp(type, "Prepend")) {
		nm->type = NORM_PREPEND;
		return parse_text(L, nm, o, where, "prepend", prep);
	}
	if (!strcmp(type, "Replace")) {
		nm->type = NORM_REPLACE;
		if ((r = parse_text(L, nm, o, where, "content", repl)))
			return r;
		return tok_get_pattern(L, o, where, &nm->re, 1);
	}
	if (!strcmp(type, "Strip")) {
		nm->type = NORM_STRIP;
		if ((r = tok_check_keys(L, o, where, strip)) ||
		    (r = tok_get_bool(L, o, where, "strip_left", 1,
				      &nm->left)) ||
		    (r = tok_get_bool(L, o, where, "strip_right", 1,
				      &nm->right)))
			return r;
		return 0;
	}
	L->tok->n_norms--;
	return tok_fail(L, -ENOTSUP, "%s type '%s' is not supported", where,
			type);
}

/* ------------------------------------------------------------ running */

static int replace_all(const struct tok_norm *nm, struct tok_matcher *m,
		       const char *s, size_t n, struct tok_buf *out,
		       taco_err *err)
{
	size_t pos = 0, last = SIZE_MAX, ms, me, prev = 0;
	int r;

	out->n = 0;
	while ((r = tok_regex_next(&nm->re, m, s, n, &pos, &last, &ms, &me,
				   err)) > 0) {
		if (tok_buf_put(out, s + prev, ms - prev) ||
		    tok_buf_put(out, nm->str, nm->str_len))
			return -ENOMEM;
		prev = me;
	}
	if (r < 0)
		return r;
	return tok_buf_put(out, s + prev, n - prev);
}

/* Strip: White_Space off the left and/or right of s, into out. */
static int strip(const struct tok_norm *nm, const char *s, size_t n,
		 struct tok_buf *out)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t a = 0, b = n;
	uint32_t cp;

	while (nm->left && a < b) {
		int l = tok_utf8_next(u + a, b - a, &cp);
		if (!tok_is_whitespace(cp))
			break;
		a += (size_t)l;
	}
	while (nm->right && b > a) {
		size_t st = b - 1;
		while (st > a && (u[st] & 0xC0) == 0x80)
			st--;
		tok_utf8_next(u + st, b - st, &cp);
		if (!tok_is_whitespace(cp))
			break;
		b = st;
	}
	return tok_buf_put(out, s + a, b - a);
}

int tok_normalize(const struct taco_tok *tok, struct tok_matcher *m,
		  const char *s, size_t n, struct tok_buf *out,
		  struct tok_buf *tmp, taco_err *err)
{
	int r = 0;

	out->n = 0;
	if ((r = tok_buf_put(out, s, n)))
		return r;
	for (int k = 0; k < tok->n_norms; k++) {
		const struct tok_norm *nm = &tok->norms[k];
		struct tok_buf t;

		tmp->n = 0;
		switch (nm->type) {
		case NORM_NFC:
		case NORM_NFD:
		case NORM_NFKC:
		case NORM_NFKD:
			r = tok_unicode_normalize(tok, nm->type, out->p, out->n,
						  tmp);
			break;
		case NORM_PREPEND:
			if (out->n == 0)
				continue;
			r = tok_buf_put(tmp, nm->str, nm->str_len);
			r = r ? r : tok_buf_put(tmp, out->p, out->n);
			break;
		case NORM_REPLACE:
			r = replace_all(nm, m, out->p, out->n, tmp, err);
			break;
		case NORM_STRIP:
			r = strip(nm, out->p, out->n, tmp);
			break;
		default:
			r = -EINVAL;
		}
		if (r)
			return r;
		t = *out;
		*out = *tmp;
		*tmp = t;
	}
	return 0;
}
