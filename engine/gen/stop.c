/* stop.c: a model's end-of-turn tokens (gen.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>

#include "gen.h"
#include "util/json_file.h"

typedef struct stop_set {
	int32_t *ids;
	int n, cap;
} stop_set;

static void add_id(stop_set *s, json_int_t id)
{
	if (id < 0 || id > INT32_MAX)
		return;
	for (int i = 0; i < s->n; i++)
		if (s->ids[i] == (int32_t)id)
			return;
	if (s->n < s->cap)
		s->ids[s->n++] = (int32_t)id;
}

/* eos_token_id: an integer or a list of them (generation_config.json
 * lists a chat model's end-of-turn tokens there). */
static int read_eos(json_t *root, const char *name, void *arg, taco_err *err)
{
	json_t *e = json_object_get(root, "eos_token_id"), *v;
	size_t i;

	(void)name;
	(void)err;
	if (json_is_integer(e))
		add_id(arg, json_integer_value(e));
	json_array_foreach(e, i, v) if (json_is_integer(v))
	    add_id(arg, json_integer_value(v));
	return 0;
}

int taco_gen_stop_ids(const char *model_dir, const taco_tok *tok, int32_t *ids,
		      int cap)
{
	const char *files[2] = {"generation_config.json", "config.json"};
	stop_set s = {ids, 0, cap};
	char path[4200];

	for (int f = 0; f < 2; f++) {
		snprintf(path, sizeof(path), "%s/%s", model_dir, files[f]);
		/* a file that is missing or unreadable names no token */
		(void)taco_json_read_file(path, 1u << 20, TACO_JSON_OBJECT,
					  read_eos, &s, NULL);
	}
	if (tok)
		add_id(&s, taco_tok_special_ids(tok).eos);
	return s.n;
}
