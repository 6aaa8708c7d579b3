/* decoders.c: the decoder stage: ByteLevel, Metaspace, Replace (String
 * patterns), ByteFallback, Fuse, Strip and Sequence, read from
 * tokenizer.json; and taco_tok_decode, ids to token strings through the
 * decoder chain (tokens joined by spaces without a decoder). */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"
#include "util/hex.h"

/* ------------------------------------------------------------ loading */

static int get_count(struct tok_loader *L, json_t *o, const char *where,
		     const char *key, size_t *out)
{
	json_t *v = json_object_get(o, key);

	*out = 0;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) > 1000000)
		return tok_fail(L, -EINVAL,
				"%s.%s must be an integer in [0, 1000000]",
				where, key);
	*out = (size_t)json_integer_value(v);
	return 0;
}

static int parse_strip(struct tok_loader *L, struct tok_dec *d, json_t *o,
		       const char *where)
{
	static const char *const keys[] = {"type", "content", "start", "stop",
					   NULL};
	char u[8];
	int ul, r;

	d->type = DEC_STRIP;
	if ((r = tok_check_keys(L, o, where, keys)) ||
	    (r = tok_get_char(L, o, where, "content", u, &ul,
			      &d->strip_char)) ||
	    (r = get_count(L, o, where, "start", &d->start)) ||
	    (r = get_count(L, o, where, "stop", &d->stop)))
		return r;
	return 0;
}

static int parse_metaspace_decoder(struct tok_loader *L, struct tok_dec *d,
				   json_t *o, const char *where)
{
	static const char *const keys[] = {
	    "type",  "replacement",	 "prepend_scheme",
	    "split", "add_prefix_space", "str_rep",
	    NULL};
	char u[8];
	int ul, r;

	d->type = DEC_METASPACE;
	if ((r = tok_check_keys(L, o, where, keys)) ||
	    (r = tok_get_char(L, o, where, "replacement", u, &ul, NULL)) ||
	    (r = tok_get_prepend_scheme(L, o, where, &d->prepend_scheme)))
		return r;
	if (!(d->pat = tok_dupn(u, (size_t)ul)))
		return tok_oom(L);
	d->pat_len = (size_t)ul;
	return 0;
}

/* Replace: String patterns only. */
static int parse_replace(struct tok_loader *L, struct tok_dec *d, json_t *o,
			 const char *where)
{
	static const char *const keys[] = {"type", "pattern", "content", NULL};
	json_t *p = json_object_get(o, "pattern"), *v;
	const char *s;
	size_t n;
	int r;

	d->type = DEC_REPLACE;
	if ((r = tok_check_keys(L, o, where, keys)) ||
	    (r = tok_get_str(L, o, where, "content", 0, &s, &n)))
		return r;
	if (!(d->content = tok_dupn(s, n)))
		return tok_oom(L);
	d->content_len = n;
	if (!json_is_object(p) || json_object_size(p) != 1)
		return tok_fail(L, -EINVAL,
				"%s.pattern must be {\"String\": ...}", where);
	v = json_object_get(p, "String");
	if (!v)
		return tok_fail(L, -ENOTSUP,
				"%s.pattern: only String patterns are "
				"supported in decoders",
				where);
	if (!json_is_string(v))
		return tok_fail(L, -EINVAL,
				"%s.pattern.String must be a string", where);
	if (!(d->pat = tok_dupn(json_string_value(v), json_string_length(v))))
		return tok_oom(L);
	d->pat_len = json_string_length(v);
	return 0;
}

int tok_parse_decoder(struct tok_loader *L, json_t *o, const char *where,
		      int depth)
{
	static const char *const none[] = {"type", NULL};
	static const char *const bl[] = {"type", "add_prefix_space",
					 "trim_offsets", "use_regex", NULL};
	struct tok_dec *d;
	const char *type;
	int r;

	if (!(type = tok_step_type(L, o, where, depth, &r)))
		return r;
	if (!strcmp(type, "Sequence"))
		return tok_parse_sequence(L, o, where, "decoders", depth,
					  tok_parse_decoder);
	if (strcmp(type, "ByteLevel") && strcmp(type, "Metaspace") &&
	    strcmp(type, "Replace") && strcmp(type, "ByteFallback") &&
	    strcmp(type, "Fuse") && strcmp(type, "Strip"))
		return tok_fail(L, -ENOTSUP, "%s type '%s' is not supported",
				where, type);
	if ((r = tok_new_step(L, (void **)&L->tok->decs, &L->tok->n_decs,
			      &L->n_dec_cap, sizeof(*d), where, "decoders",
			      (void **)&d)))
		return r;
	if (!strcmp(type, "ByteLevel")) {
		d->type = DEC_BYTELEVEL;
		return tok_check_keys(L, o, where, bl);
	}
	if (!strcmp(type, "ByteFallback") || !strcmp(type, "Fuse")) {
		d->type = !strcmp(type, "Fuse") ? DEC_FUSE : DEC_BYTEFALLBACK;
		return tok_check_keys(L, o, where, none);
	}
	if (!strcmp(type, "Strip"))
		return parse_strip(L, d, o, where);
	if (!strcmp(type, "Metaspace"))
		return parse_metaspace_decoder(L, d, o, where);
	return parse_replace(L, d, o, where);
}

/* ------------------------------------------------------------ running */

struct toklist {
	struct tok_buf text;
	size_t *off, *len;
	size_t n, cap;
};

static int tl_add(struct toklist *l, const char *s, size_t n)
{
	if (l->n == l->cap) {
		size_t c = l->cap ? l->cap * 2 : 16;
		size_t *a = realloc(l->off, c * sizeof(size_t));
		if (!a)
			return -ENOMEM;
		l->off = a;
		a = realloc(l->len, c * sizeof(size_t));
		if (!a)
			return -ENOMEM;
		l->len = a;
		l->cap = c;
	}
	l->off[l->n] = l->text.n;
	l->len[l->n] = n;
	l->n++;
	return tok_buf_put(&l->text, s, n);
}

/* Appends to the last token. */
static int tl_cat(struct toklist *l, const char *s, size_t n)
{
	l->len[l->n - 1] += n;
	return tok_buf_put(&l->text, s, n);
}

static void tl_free(struct toklist *l)
{
	tok_buf_free(&l->text);
	free(l->off);
	free(l->len);
	memset(l, 0, sizeof(*l));
}

/* Rust u8::from_str_radix(s, 16) on two chars: an optional '+' then hex. */
static int byte_token(const char *t, size_t n)
{
	int a, b;

	if (n != 6 || memcmp(t, "<0x", 3) || t[5] != '>')
		return -1;
	if (t[3] == '+')
		return taco_hex_value(t[4]);
	a = taco_hex_value(t[3]);
	b = taco_hex_value(t[4]);
	return a < 0 || b < 0 ? -1 : a * 16 + b;
}

static int dec_replace(const struct tok_dec *d, const struct toklist *in,
		       struct toklist *o)
{
	int r = 0;

	for (size_t i = 0; i < in->n && !r; i++) {
		const char *t = in->text.p + in->off[i], *e;
		size_t n = in->len[i];
		r = tl_add(o, "", 0);
		while (!r && d->pat_len && n >= d->pat_len &&
		       (e = memmem(t, n, d->pat, d->pat_len))) {
			r = tl_cat(o, t, (size_t)(e - t));
			r = r ? r : tl_cat(o, d->content, d->content_len);
			n -= (size_t)(e - t) + d->pat_len;
			t = e + d->pat_len;
		}
		r = r ? r : tl_cat(o, t, n);
	}
	return r;
}

/* The bytes of a run of <0xNN> tokens: one token when they are UTF-8,
 * else one U+FFFD for each byte. */
static int flush_bytes(struct toklist *o, const struct tok_buf *pend)
{
	size_t bad, k = 0;
	int r = 0;

	while (k < pend->n) {
		size_t l = tok_utf8_valid_prefix((unsigned char *)pend->p + k,
						 pend->n - k, &bad);
		if (!l)
			break;
		k += l;
	}
	if (k == pend->n)
		return tl_add(o, pend->p, pend->n);
	for (size_t j = 0; j < pend->n && !r; j++)
		r = tl_add(o, "\xEF\xBF\xBD", 3);
	return r;
}

static int dec_bytefallback(const struct toklist *in, struct toklist *o)
{
	unsigned char bytes[64];
	size_t nb = 0;
	struct tok_buf pend = {0};
	int r = 0;

	for (size_t i = 0; i <= in->n && !r; i++) {
		int b = i < in->n
			    ? byte_token(in->text.p + in->off[i], in->len[i])
			    : -1;
		if (b >= 0) {
			if (nb == sizeof(bytes)) {
				r = tok_buf_put(&pend, bytes, nb);
				nb = 0;
			}
			bytes[nb++] = (unsigned char)b;
			continue;
		}
		if (nb || pend.n) {
			r = r ? r : tok_buf_put(&pend, bytes, nb);
			nb = 0;
			r = r ? r : flush_bytes(o, &pend);
			pend.n = 0;
		}
		if (!r && i < in->n)
			r = tl_add(o, in->text.p + in->off[i], in->len[i]);
	}
	tok_buf_free(&pend);
	return r;
}

static int dec_fuse(const struct toklist *in, struct toklist *o)
{
	int r = tl_add(o, "", 0);

	for (size_t i = 0; i < in->n && !r; i++)
		r = tl_cat(o, in->text.p + in->off[i], in->len[i]);
	return r;
}

static int dec_strip(const struct tok_dec *d, const struct toklist *in,
		     struct toklist *o)
{
	int r = 0;

	for (size_t i = 0; i < in->n && !r; i++) {
		const unsigned char *t =
		    (const unsigned char *)in->text.p + in->off[i];
		size_t n = in->len[i], a = 0, b = n, k;
		uint32_t cp;
		/* up to start leading, stop trailing chars */
		for (k = 0; k < d->start && a < n; k++) {
			int l = tok_utf8_next(t + a, n - a, &cp);
			if (cp != d->strip_char)
				break;
			a += (size_t)l;
		}
		for (k = 0; k < d->stop && b > a; k++) {
			size_t st = b - 1;
			while (st > a && (t[st] & 0xC0) == 0x80)
				st--;
			tok_utf8_next(t + st, b - st, &cp);
			if (cp != d->strip_char)
				break;
			b = st;
		}
		r = tl_add(o, (const char *)t + a, b - a);
	}
	return r;
}

static int dec_metaspace(const struct tok_dec *d, const struct toklist *in,
			 struct toklist *o)
{
	int r = 0;

	for (size_t i = 0; i < in->n && !r; i++) {
		const char *t = in->text.p + in->off[i], *e;
		size_t n = in->len[i];
		int drop = i == 0 && d->prepend_scheme != PREPEND_NEVER;
		r = tl_add(o, "", 0);
		while (!r && (e = memmem(t, n, d->pat, d->pat_len))) {
			r = tl_cat(o, t, (size_t)(e - t));
			if (!r && !drop)
				r = tl_cat(o, " ", 1);
			n -= (size_t)(e - t) + d->pat_len;
			t = e + d->pat_len;
		}
		r = r ? r : tl_cat(o, t, n);
	}
	return r;
}

/* The bytes of token t[0..n) appended to raw: those of its byte-level
 * chars, or the token as it is when a char is not of the alphabet. */
static int bytelevel_bytes(const unsigned char *t, size_t n,
			   struct tok_buf *raw)
{
	size_t k;

	if (tok_buf_reserve(raw, n))
		return -ENOMEM;
	if (!tok_bytelevel_decode(t, n, raw->p + raw->n, &k))
		return tok_buf_put(raw, t, n);
	raw->n += k;
	raw->p[raw->n] = 0;
	return 0;
}

static int dec_bytelevel(const struct toklist *in, struct toklist *o)
{
	struct tok_buf raw = {0}, txt = {0};
	int r = 0;

	for (size_t i = 0; i < in->n && !r; i++)
		r = bytelevel_bytes((const unsigned char *)in->text.p +
					in->off[i],
				    in->len[i], &raw);
	if (!r) {
		r = tok_utf8_lossy(&txt, (unsigned char *)raw.p, raw.n);
		r = r ? r : tl_add(o, txt.p ? txt.p : "", txt.n);
	}
	tok_buf_free(&txt);
	tok_buf_free(&raw);
	return r;
}

static int dec_step(const struct tok_dec *d, const struct toklist *in,
		    struct toklist *o)
{
	switch (d->type) {
	case DEC_REPLACE:
		return dec_replace(d, in, o);
	case DEC_BYTEFALLBACK:
		return dec_bytefallback(in, o);
	case DEC_FUSE:
		return dec_fuse(in, o);
	case DEC_STRIP:
		return dec_strip(d, in, o);
	case DEC_METASPACE:
		return dec_metaspace(d, in, o);
	case DEC_BYTELEVEL:
		return dec_bytelevel(in, o);
	}
	return -EINVAL;
}

static int decode_tokens(const struct taco_tok *tok, const char **toks,
			 const size_t *lens, size_t n, struct tok_buf *out,
			 taco_err *err)
{
	struct toklist a = {0}, b = {0};
	int r = 0;

	out->n = 0;
	if (!tok->has_decoder) {
		for (size_t i = 0; i < n && !r; i++) {
			if (i)
				r = tok_buf_put(out, " ", 1);
			r = r ? r : tok_buf_put(out, toks[i], lens[i]);
		}
		r = r ? r : tok_buf_put(out, "", 0);
		goto done;
	}
	{
		/* size the lists once: decoders rarely grow the text much */
		size_t total = 16;
		for (size_t i = 0; i < n; i++)
			total += lens[i] + 3;
		a.off = malloc(sizeof(size_t) * (n + 1));
		a.len = malloc(sizeof(size_t) * (n + 1));
		b.off = malloc(sizeof(size_t) * (n + 1));
		b.len = malloc(sizeof(size_t) * (n + 1));
		if (!a.off || !a.len || !b.off || !b.len ||
		    tok_buf_reserve(&a.text, total) ||
		    tok_buf_reserve(&b.text, total))
			r = -ENOMEM;
		a.cap = b.cap = n + 1;
	}
	for (size_t i = 0; i < n && !r; i++)
		r = tl_add(&a, toks[i], lens[i]);
	for (int k = 0; k < tok->n_decs && !r; k++) {
		struct toklist t;
		b.n = 0;
		b.text.n = 0;
		r = dec_step(&tok->decs[k], &a, &b);
		t = a;
		a = b;
		b = t;
	}
	for (size_t i = 0; i < a.n && !r; i++)
		r = tok_buf_put(out, a.text.p + a.off[i], a.len[i]);
	r = r ? r : tok_buf_put(out, "", 0);
done:
	tl_free(&a);
	tl_free(&b);
	if (r)
		return taco_err_set(err, r, "%s: decode: out of memory",
				    tok->name);
	return 0;
}

int taco_tok_decode(const taco_tok *tok, const int32_t *ids, size_t n,
		    int skip_special_tokens, char **out, size_t *out_len,
		    taco_err *err)
{
	const char **toks = NULL;
	size_t *lens = NULL, k = 0;
	struct tok_buf b = {0};
	int r;

	*out = NULL;
	if (n > TACO_TOK_MAX_INPUT)
		return taco_err_set(err, -EFBIG,
				    "%s: decode: %zu ids is over the limit "
				    "of %u per call",
				    tok->name, n, TACO_TOK_MAX_INPUT);
	toks = malloc(sizeof(*toks) * (n ? n : 1));
	lens = malloc(sizeof(*lens) * (n ? n : 1));
	if (!toks || !lens) {
		free(toks);
		free(lens);
		return taco_err_set(err, -ENOMEM, "%s: decode: out of memory",
				    tok->name);
	}
	for (size_t i = 0; i < n; i++) {
		size_t l;
		const char *t = taco_tok_id_to_token(tok, ids[i], &l);
		if (!t)
			continue;
		if (skip_special_tokens &&
		    tok_added_id_index(tok, ids[i]) >= 0 &&
		    tok->added[tok_added_id_index(tok, ids[i])].skip)
			continue;
		toks[k] = t;
		lens[k++] = l;
	}
	r = decode_tokens(tok, toks, lens, k, &b, err);
	free(toks);
	free(lens);
	if (r) {
		tok_buf_free(&b);
		return r;
	}
	if (!b.p && tok_buf_put(&b, "", 0))
		return taco_err_set(err, -ENOMEM, "%s: decode: out of memory",
				    tok->name);
	*out = b.p;
	if (out_len)
		*out_len = b.n;
	return 0;
}
