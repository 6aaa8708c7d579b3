/* test_tacod_config.c: tacod's configuration file and its checks. */
#include <check.h>
#include <string.h>

#include "daemon/config/config.h"
#include "plan/plan.h"
#include "testutil.h"

static int parse(const char *j, tacod_config *c, taco_err *err)
{
	tacod_config_defaults(c);
	return tacod_config_parse(j, strlen(j), "tacod.json", c, err);
}

START_TEST(test_defaults_are_valid)
{
	tacod_config c;
	taco_err err = {{0}};

	tacod_config_defaults(&c);
	ck_assert_int_eq(tacod_config_check(&c, &err), 0);
	ck_assert_str_eq(c.listen, "127.0.0.1:8226");
	ck_assert(tacod_config_loopback(&c));
	ck_assert_uint_gt(c.device_memory, 0);
	ck_assert_int_eq(c.limits.max_connections_per_client, 32);
	ck_assert_int_eq(c.limits.request_head_timeout_s, 10);
}
END_TEST

START_TEST(test_full_config)
{
	tacod_config c;
	taco_err err = {{0}};
	const char *j =
	    "{\"listen\": \"0.0.0.0:9000\", \"unix_socket\": "
	    "\"/run/tacod.sock\", \"state_dir\": \"/srv/tacod\", "
	    "\"models_dir\": \"/srv/models\", \"tokens_file\": "
	    "\"/etc/tacod/tokens\", \"dataset_roots\": [\"/data\", "
	    "\"/scratch\"], \"device_memory\": \"80GB\", \"backend\": "
	    "\"cuda\", \"max_retries\": 1, \"cancel_timeout_s\": 30, "
	    "\"limits\": {\"max_body_bytes\": 65536, \"max_upload_bytes\": "
	    "\"2GiB\", \"max_connections\": 64, "
	    "\"max_connections_per_client\": 8, "
	    "\"request_head_timeout_s\": 3, "
	    "\"max_queued_jobs_per_user\": 5, \"max_running_jobs\": 2, "
	    "\"max_sync_validate_bytes\": \"16MiB\"}}";

	ck_assert_int_eq(parse(j, &c, &err), 0);
	ck_assert_int_eq(tacod_config_check(&c, &err), 0);
	ck_assert_uint_eq(c.device_memory, 80000000000ull);
	ck_assert_int_eq(c.backend, TACO_BACKEND_CUDA);
	ck_assert_int_eq(c.n_roots, 2);
	ck_assert_str_eq(c.roots[1], "/scratch");
	ck_assert_uint_eq(c.limits.max_upload_bytes, 2ull << 30);
	ck_assert_int_eq(c.limits.max_running_jobs, 2);
	ck_assert_uint_eq(c.limits.max_sync_validate_bytes, 16ull << 20);
	ck_assert_int_eq(c.limits.max_connections_per_client, 8);
	ck_assert_int_eq(c.limits.request_head_timeout_s, 3);
	ck_assert(!tacod_config_loopback(&c));
}
END_TEST

static const struct {
	const char *json, *fragment;
} bad[] = {
    {"[]", "not a JSON object"},
    {"{\"listen\": 8226}", "'listen' must be a string"},
    {"{\"colour\": 1}", "unknown field 'colour'"},
    {"{\"limits\": {\"max_pods\": 1}}", "unknown field 'limits.max_pods'"},
    {"{\"device_memory\": \"lots\"}", "'device_memory' must be a size"},
    {"{\"backend\": \"tpu\"}", "'backend'"},
    {"{\"max_retries\": -1}", "'max_retries'"},
    {"{\"dataset_roots\": [1]}", "dataset_roots[0]"},
    {"{\"limits\": {\"max_running_jobs\": 0}}", "'limits.max_running_jobs'"},
    {"{\"limits\": {\"request_head_timeout_s\": 0}}",
     "'limits.request_head_timeout_s'"},
    {"{\"limits\": {\"max_connections_per_client\": 0}}",
     "'limits.max_connections_per_client'"},
    {"{\"scheduler\": \"pbs\"}", "'scheduler' must be"},
    {"{\"slurm\": []}", "'slurm' must be an object"},
    {"{\"slurm\": {\"nodes\": 2}}", "unknown field 'slurm.nodes'"},
    {"{\"slurm\": {\"partition\": \"gpu\\nx\"}}", "'slurm.partition'"},
    {"{\"slurm\": {\"gres\": \"\"}}", "'slurm.gres'"},
    {"{\"slurm\": {\"gpu_memory\": \"big\"}}", "'slurm.gpu_memory'"},
    {"{\"slurm\": {\"poll_interval_s\": 0}}", "'slurm.poll_interval_s'"},
    {"{\"slurm\": {\"jobs_dir\": \"/a'b\"}}", "single quote"},
    {"{\"slurm\": {\"sbatch_options\": [\"-p\"]}}", "slurm.sbatch_options[0]"},
    {"{\"slurm\": {\"sbatch_options\": \"--qos=x\"}}",
     "'slurm.sbatch_options' must be an array"},
    {"{\"devices\": []}", "'devices' must be \"auto\" or a list of 1 to 32"},
    {"{\"devices\": {\"index\": 0}}", "'devices' must be \"auto\" or a list"},
    {"{\"devices\": \"all\"}", "'devices' must be \"auto\" or a list"},
    {"{\"devices\": [1]}", "devices[0] must be an object"},
    {"{\"devices\": [{\"index\": -1, \"memory\": 1}]}",
     "devices[0].index must be"},
    {"{\"devices\": [{\"index\": 0}]}", "devices[0].memory must be a size"},
    {"{\"devices\": [{\"index\": 0, \"memory\": \"80GB\", \"name\": "
     "\"a\"}]}",
     "unknown field 'devices[0].name'"},
    {"{\"devices\": [{\"index\": 1, \"memory\": 1}, {\"index\": 1, "
     "\"memory\": 1}]}",
     "devices[0] and devices[1] are both GPU 1"},
    {"{\"device_memory\": \"80GB\", \"devices\": [{\"index\": 0, "
     "\"memory\": 1}]}",
     "'devices' and 'device_memory' both given"},
};

START_TEST(test_slurm_config)
{
	tacod_config c;
	taco_err err = {{0}};
	const char *j =
	    "{\"scheduler\": \"slurm\", \"slurm\": {\"partition\": "
	    "\"h100\", \"account\": \"lab\", \"time_limit\": \"2-00:00:00\", "
	    "\"gres\": \"gpu:h100:1\", \"sbatch_options\": [\"--qos=long\", "
	    "\"--mem=200G\"], \"gpu_memory\": \"80GB\", \"jobs_dir\": "
	    "\"/nfs/tacod/jobs\", \"poll_interval_s\": 10, "
	    "\"command_timeout_s\": 20, \"sbatch\": \"/usr/bin/sbatch\"}}";

	tacod_config_defaults(&c);
	ck_assert_int_eq(c.scheduler, TACOD_SCHED_LOCAL);
	ck_assert_str_eq(c.slurm.gres, "gpu:1");
	ck_assert_int_eq(c.slurm.poll_interval_s, 5);
	ck_assert_int_eq(parse(j, &c, &err), 0);
	ck_assert_int_eq(tacod_config_check(&c, &err), 0);
	ck_assert_int_eq(c.scheduler, TACOD_SCHED_SLURM);
	ck_assert_str_eq(c.slurm.partition, "h100");
	ck_assert_str_eq(c.slurm.account, "lab");
	ck_assert_str_eq(c.slurm.time_limit, "2-00:00:00");
	ck_assert_str_eq(c.slurm.gres, "gpu:h100:1");
	ck_assert_int_eq(c.slurm.n_options, 2);
	ck_assert_str_eq(c.slurm.options[1], "--mem=200G");
	ck_assert_uint_eq(c.slurm.gpu_memory, 80000000000ull);
	ck_assert_str_eq(c.slurm.jobs_dir, "/nfs/tacod/jobs");
	ck_assert_int_eq(c.slurm.poll_interval_s, 10);
	ck_assert_int_eq(c.slurm.command_timeout_s, 20);
	ck_assert_str_eq(c.slurm.sbatch, "/usr/bin/sbatch");
	ck_assert_str_eq(c.slurm.squeue, "squeue");
}
END_TEST

START_TEST(test_devices)
{
	tacod_config c;
	tacod_device_config d[TACOD_MAX_DEVICES];
	taco_err err = {{0}};

	/* without "devices": one device of device_memory, not pinned */
	ck_assert_int_eq(parse("{\"device_memory\": \"24GB\"}", &c, &err), 0);
	ck_assert_int_eq(tacod_config_device_list(&c, d), 1);
	ck_assert_int_eq(d[0].index, -1);
	ck_assert_uint_eq(d[0].memory, 24000000000ull);
	ck_assert_uint_eq(tacod_config_plan_memory(&c), 24000000000ull);
	ck_assert_int_eq(
	    parse("{\"backend\": \"cuda\", \"devices\": [{\"index\": 2, "
		  "\"memory\": \"80GB\"}, {\"index\": 0, \"memory\": "
		  "\"141GB\"}, {\"index\": 7, \"memory\": 40000000000}]}",
		  &c, &err),
	    0);
	ck_assert_int_eq(tacod_config_check(&c, &err), 0);
	ck_assert_int_eq(tacod_config_device_list(&c, d), 3);
	ck_assert_int_eq(d[0].index, 2);
	ck_assert_int_eq(d[1].index, 0);
	ck_assert_uint_eq(d[1].memory, 141000000000ull);
	ck_assert_int_eq(d[2].index, 7);
	/* one job's plan must fit the largest */
	ck_assert_uint_eq(tacod_config_plan_memory(&c), 141000000000ull);
	/* "auto": no list until taco-train --list-devices gives one
	 * (test_tacod_devices) */
	ck_assert_int_eq(
	    parse("{\"backend\": \"cuda\", \"devices\": \"auto\"}", &c, &err),
	    0);
	ck_assert_int_eq(tacod_config_check(&c, &err), 0);
	ck_assert_int_eq(c.devices_auto, 1);
	ck_assert_int_eq(c.n_devices, 0);
}
END_TEST

START_TEST(test_bad_files)
{
	tacod_config c;
	taco_err err = {{0}};

	ck_assert_int_eq(parse(bad[_i].json, &c, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, bad[_i].fragment) &&
			  strstr(err.msg, "tacod.json"),
		      "case %d: %s", _i, err.msg);
}
END_TEST

static const struct {
	const char *json, *fragment;
} bad_combos[] = {
    {"{\"listen\": \"0.0.0.0:8226\"}", "needs 'tokens_file'"},
    {"{\"listen\": \"\"}", "set 'listen' or 'unix_socket'"},
    {"{\"listen\": \"localhost\"}", "host:port"},
    {"{\"listen\": \"127.0.0.1:99999\"}", "host:port"},
    {"{\"state_dir\": \"relative\"}", "absolute"},
    {"{\"dataset_roots\": [\"data\"]}", "absolute"},
    {"{\"scheduler\": \"slurm\", \"slurm\": {\"gpu_memory\": \"80GB\"}}",
     "'slurm.jobs_dir'"},
    {"{\"scheduler\": \"slurm\", \"slurm\": {\"jobs_dir\": \"/nfs/j\"}}",
     "'slurm.gpu_memory'"},
    {"{\"scheduler\": \"slurm\", \"slurm\": {\"jobs_dir\": \"/nfs/j\", "
     "\"gpu_memory\": \"80GB\"}, \"devices\": [{\"index\": 0, "
     "\"memory\": \"80GB\"}]}",
     "'devices' are the GPUs of this machine"},
    {"{\"scheduler\": \"slurm\", \"backend\": \"cuda\", \"slurm\": "
     "{\"jobs_dir\": \"/nfs/j\", \"gpu_memory\": \"80GB\"}, \"devices\": "
     "\"auto\"}",
     "'devices' are the GPUs of this machine"},
    {"{\"devices\": \"auto\"}", "it needs backend \"cuda\""},
};

START_TEST(test_bad_combinations)
{
	tacod_config c;
	taco_err err = {{0}};

	ck_assert_int_eq(parse(bad_combos[_i].json, &c, &err), 0);
	ck_assert_int_eq(tacod_config_check(&c, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, bad_combos[_i].fragment) != NULL,
		      "case %d: %s", _i, err.msg);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tacod_config");
	TCase *tc = tcase_create("tacod_config");

	tcase_add_test(tc, test_defaults_are_valid);
	tcase_add_test(tc, test_full_config);
	tcase_add_test(tc, test_slurm_config);
	tcase_add_test(tc, test_devices);
	tcase_add_loop_test(tc, test_bad_files, 0,
			    sizeof(bad) / sizeof(bad[0]));
	tcase_add_loop_test(tc, test_bad_combinations, 0,
			    sizeof(bad_combos) / sizeof(bad_combos[0]));
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
