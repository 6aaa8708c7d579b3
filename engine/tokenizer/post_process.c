/* post_process.c: the post-processor stage: TemplateProcessing (its single
 * template), ByteLevel (nothing to add to ids), BertProcessing,
 * RobertaProcessing and Sequence, read from tokenizer.json into the ids
 * that encode with add_special_tokens puts before the text (post_pre) and
 * after it (post_suf). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

/* Appends (front: prepends) the k ids of add to *v (*n of them). */
static int push_ids(struct tok_loader *L, int32_t **v, int *n,
		    const int32_t *add, int k, int front)
{
	int32_t *p;

	if (k == 0)
		return 0;
	if (*n + k > 4096)
		return tok_fail(L, -EFBIG,
				"post_processor adds more than 4096 tokens");
	p = realloc(*v, sizeof(int32_t) * (size_t)(*n + k + 1));
	if (!p)
		return tok_oom(L);
	if (front) {
		memmove(p + k, p, sizeof(int32_t) * (size_t)*n);
		memcpy(p, add, sizeof(int32_t) * (size_t)k);
	} else {
		memcpy(p + *n, add, sizeof(int32_t) * (size_t)k);
	}
	*v = p;
	*n += k;
	return 0;
}

/* [token, id] of Bert/RobertaProcessing */
static int pair_id(struct tok_loader *L, json_t *o, const char *where,
		   const char *key, int32_t *out)
{
	json_t *a = json_object_get(o, key);
	char w[256];

	snprintf(w, sizeof(w), "%s.%s", where, key);
	if (!json_is_array(a) || json_array_size(a) != 2 ||
	    !json_is_string(json_array_get(a, 0)))
		return tok_fail(L, -EINVAL, "%s must be [token, id]", w);
	return tok_get_id(L, json_array_get(a, 1), w, out);
}

/* The ids of template item w, {"SpecialToken": s}, from special_tokens
 * sp: appended to *ids (*n of them). */
static int template_special(struct tok_loader *L, json_t *s, json_t *sp,
			    const char *where, const char *w, int32_t **ids,
			    int *n)
{
	json_t *name = json_object_get(s, "id"), *ent, *list, *v;
	size_t k;
	int r;

	if (!json_is_string(name))
		return tok_fail(L, -EINVAL,
				"%s.SpecialToken.id must be a string", w);
	ent = sp ? json_object_get(sp, json_string_value(name)) : NULL;
	if (!json_is_object(ent))
		return tok_fail(L, -EINVAL,
				"%s: special token '%s' is missing from "
				"special_tokens",
				w, json_string_value(name));
	list = json_object_get(ent, "ids");
	if (!json_is_array(list))
		return tok_fail(L, -EINVAL,
				"%s.special_tokens['%s'].ids must be an array",
				where, json_string_value(name));
	json_array_foreach(list, k, v)
	{
		int32_t id = -1;
		if ((r = tok_get_id(L, v, w, &id)) ||
		    (r = push_ids(L, ids, n, &id, 1, 0)))
			return r;
	}
	return 0;
}

/* The single template: special tokens before sequence A into pre, after it
 * into suf. */
static int parse_template(struct tok_loader *L, json_t *o, const char *where,
			  int32_t **pre, int *npre, int32_t **suf, int *nsuf)
{
	json_t *single = json_object_get(o, "single");
	json_t *sp = json_object_get(o, "special_tokens"), *item;
	int seen = 0, r;
	size_t i;

	if (!json_is_array(single))
		return tok_fail(L, -EINVAL, "%s.single must be an array",
				where);
	if (sp && !json_is_null(sp) && !json_is_object(sp))
		return tok_fail(L, -EINVAL,
				"%s.special_tokens must be an object", where);
	json_array_foreach(single, i, item)
	{
		json_t *s = json_object_get(item, "SpecialToken");
		json_t *q = json_object_get(item, "Sequence"), *id;
		char w[256];

		snprintf(w, sizeof(w), "%s.single[%zu]", where, i);
		if (!json_is_object(item) || json_object_size(item) != 1 ||
		    (!s && !q))
			return tok_fail(L, -EINVAL,
					"%s must be {\"SpecialToken\": ...} or "
					"{\"Sequence\": ...}",
					w);
		if (!q) {
			if ((r = template_special(L, s, sp, where, w,
						  seen ? suf : pre,
						  seen ? nsuf : npre)))
				return r;
			continue;
		}
		id = json_object_get(q, "id");
		if (!json_is_string(id) || strcmp(json_string_value(id), "A"))
			return tok_fail(L, -ENOTSUP,
					"%s: only sequence A is supported in "
					"the single template",
					w);
		if (seen++)
			return tok_fail(L, -ENOTSUP,
					"%s: sequence A appears twice", w);
	}
	if (!seen)
		return tok_fail(L, -EINVAL, "%s.single lacks the sequence $A",
				where);
	return 0;
}

/* One processor other than Sequence: its ids before and after the text. */
static int parse_processor(struct tok_loader *L, json_t *o, const char *where,
			   const char *type, int32_t **pre, int *npre,
			   int32_t **suf, int *nsuf)
{
	static const char *const tp[] = {"type", "single", "pair",
					 "special_tokens", NULL};
	static const char *const bert[] = {"type", "sep", "cls", NULL};
	static const char *const rob[] = {
	    "type", "sep", "cls", "trim_offsets", "add_prefix_space", NULL};
	int32_t cls, sep;
	int r;

	if (!strcmp(type, "TemplateProcessing")) {
		if ((r = tok_check_keys(L, o, where, tp)))
			return r;
		return parse_template(L, o, where, pre, npre, suf, nsuf);
	}
	if ((r = tok_check_keys(L, o, where, type[0] == 'B' ? bert : rob)) ||
	    (r = pair_id(L, o, where, "cls", &cls)) ||
	    (r = pair_id(L, o, where, "sep", &sep)) ||
	    (r = push_ids(L, pre, npre, &cls, 1, 0)))
		return r;
	return push_ids(L, suf, nsuf, &sep, 1, 0);
}

int tok_parse_post_processor(struct tok_loader *L, json_t *o, const char *where,
			     int depth)
{
	static const char *const bl[] = {"type", "add_prefix_space",
					 "trim_offsets", "use_regex", NULL};
	taco_tok *t = L->tok;
	const char *type;
	int32_t *pre = NULL, *suf = NULL;
	int npre = 0, nsuf = 0, r;

	if (!(type = tok_step_type(L, o, where, depth, &r)))
		return r;
	if (!strcmp(type, "Sequence"))
		return tok_parse_sequence(L, o, where, "processors", depth,
					  tok_parse_post_processor);
	if (!strcmp(type, "ByteLevel"))
		return tok_check_keys(L, o, where, bl);
	if (strcmp(type, "TemplateProcessing") &&
	    strcmp(type, "BertProcessing") && strcmp(type, "RobertaProcessing"))
		return tok_fail(L, -ENOTSUP, "%s type '%s' is not supported",
				where, type);
	/* each wraps what the earlier processors made */
	if (!(r = parse_processor(L, o, where, type, &pre, &npre, &suf,
				  &nsuf)) &&
	    !(r = push_ids(L, &t->post_pre, &t->n_post_pre, pre, npre, 1)))
		r = push_ids(L, &t->post_suf, &t->n_post_suf, suf, nsuf, 0);
	free(pre);
	free(suf);
	return r;
}
