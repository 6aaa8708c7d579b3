/* device.c: tacoctl device: the accelerator (or CPU) tacod plans jobs on,
 * its memory, each GPU of several (tacod.json devices), and the jobs using
 * them. */
#include "ctl.h"

/* A running job's GPUs, "0" or "2,3"; "-" for the one unpinned device. */
static const char *gpus_of(json_t *j, char *out, size_t cap)
{
	json_t *d = json_object_get(j, "devices");
	size_t len = 0;

	out[0] = 0;
	for (size_t i = 0; i < json_array_size(d) && len < cap; i++)
		if (json_is_integer(json_array_get(d, i)))
			len += (size_t)snprintf(out + len, cap - len, "%s%lld",
						len ? "," : "",
						(long long)json_integer_value(
						    json_array_get(d, i)));
	return out[0] ? out : "-";
}

int ctl_cmd_device(ctl *c, const ctl_cmd *cmd, int argc, char **argv)
{
	ctl_resp r = {0};
	json_t *run, *devs;
	ctl_table t;
	char a[32], b[32], g[64], line[64];
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
	devs = json_object_get(r.json, "devices");
	if (json_array_size(devs) > 1) {
		char c1[32], c2[32], c3[32], n[16], k[16];
		ctl_table_init(&t, 6);
		t.right[2] = t.right[3] = t.right[4] = t.right[5] = 1;
		ctl_table_row(&t, "GPU", "NAME", "MEMORY", "PLANNED", "USED",
			      "JOBS");
		for (size_t i = 0; i < json_array_size(devs); i++) {
			json_t *gpu = json_array_get(devs, i);
			const char *name = json_string_value(
			    json_object_get(gpu, "name")); /* "auto"'s */
			snprintf(n, sizeof(n), "%lld", ctl_int(gpu, "index"));
			snprintf(k, sizeof(k), "%zu",
				 json_array_size(
				     json_object_get(gpu, "running_jobs")));
			ctl_table_row(
			    &t, n, name ? name : "-",
			    ctl_fmt_bytes((double)ctl_int(gpu, "memory_total"),
					  c1, sizeof(c1)),
			    ctl_fmt_bytes(
				(double)ctl_int(gpu, "memory_planned"), c2,
				sizeof(c2)),
			    ctl_fmt_bytes((double)ctl_int(gpu, "memory_used"),
					  c3, sizeof(c3)),
			    k);
		}
		putchar('\n');
		ctl_table_print(&t, stdout);
		ctl_table_free(&t);
	}
	if (json_array_size(run)) {
		ctl_table_init(&t, 4);
		t.right[2] = t.right[3] = 1;
		ctl_table_row(&t, "JOB", "GPU", "PLANNED", "PEAK");
		for (size_t i = 0; i < json_array_size(run); i++) {
			json_t *j = json_array_get(run, i);
			ctl_table_row(
			    &t, ctl_str(j, "id"), gpus_of(j, g, sizeof(g)),
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
