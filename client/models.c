/* models.c: tacoctl models: the base models tacod can fine-tune. */
#include "ctl.h"

int ctl_cmd_models(ctl *c, const ctl_cmd *cmd, int argc, char **argv)
{
	ctl_resp r = {0};
	json_t *data;
	ctl_table t;
	char when[32];
	int first, rc;

	rc = ctl_parse(c, cmd, argc, argv, NULL, NULL, NULL, NULL, &first);
	if (rc != CTL_GO_ON)
		return rc;
	if (argc != first)
		return ctl_usage(cmd, "unexpected argument '%s'", argv[first]);
	if ((rc = ctl_connect(c)) ||
	    (rc = ctl_call(c, "GET", "/v1/models", NULL, 0, &r)))
		return rc;
	if (c->json) {
		ctl_print_raw(&r);
		ctl_resp_free(&r);
		return CTL_OK;
	}
	data = json_object_get(r.json, "data");
	ctl_table_init(&t, 3);
	ctl_table_row(&t, "MODEL", "CREATED", "OWNED BY");
	for (size_t i = 0; i < json_array_size(data); i++) {
		json_t *m = json_array_get(data, i);
		ctl_table_row(
		    &t, ctl_str(m, "id"),
		    ctl_fmt_time(ctl_int(m, "created"), when, sizeof(when)),
		    ctl_str(m, "owned_by"));
	}
	ctl_table_print(&t, stdout);
	ctl_table_free(&t);
	ctl_resp_free(&r);
	return CTL_OK;
}
