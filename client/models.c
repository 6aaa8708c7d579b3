/* models.c: tacoctl models: the models tacod can fine-tune: the base models
 * and the user's fine-tuned ones (`tacoctl models`), one of them, a
 * checkpoint too (`tacoctl models get MODEL`), and deleting fine-tuned
 * models (`tacoctl models rm MODEL...`). */
#include <string.h>

#include "ctl.h"

static int list(ctl *c)
{
	ctl_resp r = {0};
	json_t *data;
	ctl_table t;
	char when[32];
	int rc;

	if ((rc = ctl_call(c, "GET", "/v1/models", NULL, 0, &r)))
		return rc;
	if (c->json) {
		ctl_print_raw(&r);
		ctl_resp_free(&r);
		return CTL_OK;
	}
	data = json_object_get(r.json, "data");
	ctl_table_init(&t, 4);
	ctl_table_row(&t, "MODEL", "CREATED", "OWNED BY", "PARENT");
	for (size_t i = 0; i < json_array_size(data); i++) {
		json_t *m = json_array_get(data, i);
		const char *parent = ctl_str(m, "parent");
		ctl_table_row(
		    &t, ctl_str(m, "id"),
		    ctl_fmt_time(ctl_int(m, "created"), when, sizeof(when)),
		    ctl_str(m, "owned_by"), parent[0] ? parent : "-");
	}
	ctl_table_print(&t, stdout);
	ctl_table_free(&t);
	ctl_resp_free(&r);
	return CTL_OK;
}

static int get(ctl *c, const char *name)
{
	char path[CTL_PATH_MAX], when[32];
	ctl_resp r = {0};
	const char *parent;
	int rc;

	if ((rc = ctl_pathf(path, sizeof(path), "/v1/models/%s", name)) ||
	    (rc = ctl_call(c, "GET", path, NULL, 0, &r)))
		return rc;
	if (c->json) {
		ctl_print_raw(&r);
		ctl_resp_free(&r);
		return CTL_OK;
	}
	parent = ctl_str(r.json, "parent");
	printf("model     %s\ncreated   %s\nowned by  %s\nroot      %s\n"
	       "parent    %s\n",
	       ctl_str(r.json, "id"),
	       ctl_fmt_time(ctl_int(r.json, "created"), when, sizeof(when)),
	       ctl_str(r.json, "owned_by"), ctl_str(r.json, "root"),
	       parent[0] ? parent : "-");
	ctl_resp_free(&r);
	return CTL_OK;
}

int ctl_cmd_models(ctl *c, const ctl_cmd *cmd, int argc, char **argv)
{
	const char *what;
	int first, rc, n;

	rc = ctl_parse(c, cmd, argc, argv, NULL, NULL, NULL, NULL, &first);
	if (rc != CTL_GO_ON)
		return rc;
	what = first < argc ? argv[first] : "list";
	n = argc - first - (first < argc); /* the arguments after `what` */
	if (!strcmp(what, "list") && n == 0)
		return (rc = ctl_connect(c)) ? rc : list(c);
	if (!strcmp(what, "get") && n == 1)
		return (rc = ctl_connect(c)) ? rc : get(c, argv[first + 1]);
	if (!strcmp(what, "rm") && n >= 1)
		return (rc = ctl_connect(c))
			   ? rc
			   : ctl_delete_each(c, "/v1/models/%s", NULL, n,
					     argv + first + 1);
	if (strcmp(what, "list") && strcmp(what, "get") && strcmp(what, "rm"))
		return ctl_usage(cmd, "unknown command 'models %s'", what);
	return ctl_usage(cmd, "models %s: %s", what,
			 strcmp(what, "list") ? "expected a model name"
					      : "takes no arguments");
}
