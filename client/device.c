/* device.c: tacoctl device: the accelerator (or CPU) tacod plans jobs on,
 * its memory, and the jobs using it. */
#include "ctl.h"

int ctl_cmd_device(ctl *c, const ctl_cmd *cmd, int argc, char **argv)
{
	ctl_resp r = {0};
	json_t *run;
	ctl_table t;
	char a[32], b[32], line[64];
	int first, rc;

	rc = ctl_parse(c, cmd, argc, argv, NULL, NULL, NULL, NULL, &first);
	if (rc != CTL_GO_ON)
		return rc;
	if (argc != first)
		return ctl_usage(cmd, "unexpected argument '%s'", argv[first]);
	if ((rc = ctl_connect(c)) ||
	    (rc = ctl_call(c, "GET", "/v1/device", NULL, 0, &r)))
		return rc;
	if (c->json) {
		ctl_print_raw(&r);
		ctl_resp_free(&r);
		return CTL_OK;
	}
	printf("%-15s %s\n", "backend", ctl_str(r.json, "backend"));
	printf("%-15s %s\n", "name", ctl_str(r.json, "name"));
	printf("%-15s %s\n", "memory total",
	       ctl_fmt_bytes((double)ctl_int(r.json, "memory_total"), a,
			     sizeof(a)));
	printf("%-15s %s\n", "memory planned",
	       ctl_fmt_bytes((double)ctl_int(r.json, "memory_planned"), a,
			     sizeof(a)));
	printf("%-15s %s\n", "memory used",
	       ctl_fmt_bytes((double)ctl_int(r.json, "memory_used"), a,
			     sizeof(a)));
	printf("%-15s %lld\n", "queued jobs", ctl_int(r.json, "queued_jobs"));
	run = json_object_get(r.json, "running_jobs");
	snprintf(line, sizeof(line), "%zu", json_array_size(run));
	printf("%-15s %s\n", "running jobs", line);
	if (json_array_size(run)) {
		ctl_table_init(&t, 3);
		t.right[1] = t.right[2] = 1;
		ctl_table_row(&t, "JOB", "PLANNED", "PEAK");
		for (size_t i = 0; i < json_array_size(run); i++) {
			json_t *j = json_array_get(run, i);
			ctl_table_row(
			    &t, ctl_str(j, "id"),
			    ctl_fmt_bytes((double)ctl_int(j, "planned_bytes"),
					  a, sizeof(a)),
			    ctl_fmt_bytes((double)ctl_int(j, "peak_bytes"), b,
					  sizeof(b)));
		}
		putchar('\n');
		ctl_table_print(&t, stdout);
		ctl_table_free(&t);
	}
	ctl_resp_free(&r);
	return CTL_OK;
}
