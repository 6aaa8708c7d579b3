/* test_slurm_files.c: what the Slurm scheduler reads and writes without a
 * cluster (daemon/runner/slurm_files.h): squeue's and sbatch's output, the exit
 * status file, the events file read in complete lines from an offset, and the
 * batch script run by sh with a stand-in taco-train (its arguments, its
 * exit status left behind, SIGTERM forwarded). test_slurm runs the real
 * thing. */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/runner/slurm_files.h"
#include "testutil.h"

START_TEST(test_parse_squeue)
{
	const char *out = "17|RUNNING|tacod-ftjob-aaa\n"
			  "18|PENDING|my-own-job\n"
			  "19_3|RUNNING|array\n"
			  "20|NODE_FAIL|tacod-ftjob-bbb\n"
			  "\n"
			  "21|COMPLETED|tacod-ftjob-ccc";
	tacod_slurm_entry e[2];
	taco_err err = {{0}};
	int n = 0;

	ck_assert_int_eq(
	    tacod_slurm_parse_squeue(out, strlen(out), e, 2, &n, &err), 0);
	/* three of tacod's, two stored */
	ck_assert_int_eq(n, 3);
	ck_assert_int_eq(e[0].id, 17);
	ck_assert_str_eq(e[0].state, "RUNNING");
	ck_assert_str_eq(e[0].job_id, "ftjob-aaa");
	ck_assert_int_eq(e[1].id, 20);
	ck_assert_str_eq(e[1].state, "NODE_FAIL");
	out = "x1|RUNNING|tacod-ftjob-aaa\n";
	ck_assert_int_eq(
	    tacod_slurm_parse_squeue(out, strlen(out), e, 2, &n, &err),
	    -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "line 1"));
	out = "5|running|tacod-ftjob-aaa\n";
	ck_assert_int_eq(
	    tacod_slurm_parse_squeue(out, strlen(out), e, 2, &n, &err),
	    -EINVAL);
}
END_TEST

/* A job of 2 or 4 GPUs asks Slurm for as many of slurm.gres's. */
START_TEST(test_gres)
{
	char out[32];

	ck_assert_int_eq(tacod_slurm_gres("gpu:1", 2, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "gpu:2");
	ck_assert_int_eq(tacod_slurm_gres("gpu:h100:1", 4, out, sizeof(out)),
			 0);
	ck_assert_str_eq(out, "gpu:h100:4");
	ck_assert_int_eq(tacod_slurm_gres("gpu", 2, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "gpu:2");
	ck_assert_int_eq(tacod_slurm_gres("gpu:h100", 3, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "gpu:h100:3");
	ck_assert_int_eq(tacod_slurm_gres("gpu:1", 1, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "gpu:1");
	ck_assert_int_eq(tacod_slurm_gres("gpu:a-type-name-longer-than-out:1",
					  2, out, sizeof(out)),
			 -ENAMETOOLONG);
}
END_TEST

START_TEST(test_parse_sbatch_and_status)
{
	taco_err err = {{0}};
	int64_t id = 0, st = -1;
	int sig = -1;

	ck_assert_int_eq(tacod_slurm_parse_sbatch("123\n", 4, &id, &err), 0);
	ck_assert_int_eq(id, 123);
	ck_assert_int_eq(tacod_slurm_parse_sbatch("124;lab\n", 8, &id, &err),
			 0);
	ck_assert_int_eq(id, 124);
	ck_assert_int_eq(tacod_slurm_parse_sbatch("", 0, &id, &err), -EINVAL);
	ck_assert_int_eq(tacod_slurm_parse_sbatch("12x", 3, &id, &err),
			 -EINVAL);
	ck_assert_int_eq(tacod_slurm_parse_status("3\n", 2, &st, &sig, &err),
			 0);
	ck_assert(st == 3 && sig == 0);
	ck_assert_int_eq(tacod_slurm_parse_status("137\n", 4, &st, &sig, &err),
			 0);
	ck_assert(st == 0 && sig == 9);
	ck_assert_int_eq(tacod_slurm_parse_status("256", 3, &st, &sig, &err),
			 -EINVAL);
	ck_assert_int_eq(tacod_slurm_parse_status("", 0, &st, &sig, &err),
			 -EINVAL);
	ck_assert_int_eq(tacod_slurm_parse_status("0 x", 3, &st, &sig, &err),
			 -EINVAL);
}
END_TEST

typedef struct lines {
	int n;
	char text[8][64];
} lines;

static void on_line(const char *t, size_t len, void *ctx)
{
	lines *l = ctx;

	ck_assert_int_lt(l->n, 8);
	ck_assert_uint_lt(len, 64);
	memcpy(l->text[l->n], t, len);
	l->text[l->n++][len] = 0;
}

static char *tmpdir(void)
{
	char *d = strdup("/tmp/tacod-slurmf-XXXXXX");

	ck_assert_ptr_nonnull(mkdtemp(d));
	return d;
}

static void put(const char *path, const char *text, const char *mode)
{
	FILE *f = fopen(path, mode);

	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
}

START_TEST(test_read_lines)
{
	char *d = tmpdir(), path[256], big[300];
	lines l = {0};
	int64_t off = 0;
	taco_err err = {{0}};

	snprintf(path, sizeof(path), "%s/events.jsonl", d);
	/* no file yet: no lines */
	ck_assert_int_eq(
	    tacod_slurm_read_lines(path, &off, 4096, 128, on_line, &l, &err),
	    0);
	ck_assert_int_eq(l.n, 0);
	put(path, "{\"a\":1}\n{\"b\":2}\n{\"c\"", "w");
	ck_assert_int_eq(
	    tacod_slurm_read_lines(path, &off, 4096, 128, on_line, &l, &err),
	    0);
	/* the line still being written waits */
	ck_assert_int_eq(l.n, 2);
	ck_assert_str_eq(l.text[1], "{\"b\":2}");
	ck_assert_int_eq(off, 16);
	put(path, ":3}\n", "a");
	ck_assert_int_eq(
	    tacod_slurm_read_lines(path, &off, 4096, 128, on_line, &l, &err),
	    0);
	ck_assert_int_eq(l.n, 3);
	ck_assert_str_eq(l.text[2], "{\"c\":3}");
	ck_assert_int_eq(off, 24);
	/* a line past the limit, ended or not, is an error */
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	put(path, big, "a");
	ck_assert_int_eq(
	    tacod_slurm_read_lines(path, &off, 4096, 128, on_line, &l, &err),
	    -E2BIG);
	ck_assert_int_eq(off, 24);
	ck_assert_int_eq(l.n, 3);
	snprintf(path, sizeof(path), "rm -rf '%s'", d);
	ck_assert_int_eq(system(path), 0);
	free(d);
}
END_TEST

/* The batch script with a stand-in for taco-train: it writes its
 * arguments, then exits 2, or waits for SIGTERM and exits 3 as
 * taco-train does after its checkpoint. */
static void fake_train(const char *d, char *bin, size_t cap)
{
	char text[512];

	snprintf(bin, cap, "%s/fake-train", d);
	snprintf(text, sizeof(text),
		 "#!/bin/sh\n"
		 "echo \"$@\" >'%s/args'\n"
		 "[ -e '%s/wait' ] || exit 2\n"
		 "trap 'exit 3' TERM\n"
		 "while :; do sleep 0.05; done\n",
		 d, d);
	put(bin, text, "w");
	ck_assert_int_eq(chmod(bin, 0755), 0);
}

/* The job's error from the tail of its stderr file: whole when it fits,
 * else its end from a character boundary, marked as cut. */
START_TEST(test_stderr_tail)
{
	char *d = tmpdir(), path[256], out[64], big[1000];
	size_t n = 1;

	snprintf(path, sizeof(path), "%s/" TACOD_SLURM_STDERR, d);
	put(path, "taco-train: out of memory\n", "w");
	tacod_slurm_stderr_tail(d, out, sizeof(out));
	ck_assert_str_eq(out, "taco-train: out of memory\n");
	big[0] = 'x'; /* then 3-byte characters: the cut falls inside one */
	while (n + 3 < sizeof(big) - 8) {
		memcpy(big + n, "\xe2\x82\xac", 3);
		n += 3;
	}
	memcpy(big + n, " done\n", 7);
	put(path, big, "w");
	tacod_slurm_stderr_tail(d, out, sizeof(out));
	ck_assert_msg(!strncmp(out, "[cut] \xe2\x82\xac", 9), "%s", out);
	ck_assert_ptr_nonnull(strstr(out, "\xe2\x82\xac done\n"));
	ck_assert_uint_lt(strlen(out), sizeof(out));
	unlink(path);
	rmdir(d);
	free(d);
}
END_TEST

START_TEST(test_script)
{
	char *d = tmpdir(), bin[256], path[512], cmd[600], line[600];
	taco_err err = {{0}};
	int64_t st = -1;
	int sig = -1, ws;
	FILE *f;
	pid_t pid;

	fake_train(d, bin, sizeof(bin));
	ck_assert_int_eq(tacod_slurm_write_script(d, bin, "cpu", &err), 0);
	ck_assert_int_eq(tacod_slurm_read_status(d, &st, &sig, &err), -ENOENT);
	snprintf(cmd, sizeof(cmd), "sh '%s/slurm.sh'", d);
	ck_assert_int_eq(WEXITSTATUS(system(cmd)), 2);
	ck_assert_int_eq(tacod_slurm_read_status(d, &st, &sig, &err), 0);
	ck_assert(st == 2 && sig == 0);
	snprintf(path, sizeof(path), "%s/args", d);
	f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
	fclose(f);
	snprintf(cmd, sizeof(cmd),
		 "--no-progress --events-file %s/events.jsonl --backend cpu "
		 "--resume %s/job.json\n",
		 d, d);
	ck_assert_str_eq(line, cmd);
	/* SIGTERM to the script (scancel --signal=TERM --batch) reaches
	 * taco-train, whose exit status 3 is left behind */
	ck_assert_int_eq(tacod_slurm_clean(d, &err), 0);
	ck_assert_int_eq(tacod_slurm_read_status(d, &st, &sig, &err), -ENOENT);
	snprintf(path, sizeof(path), "%s/wait", d);
	put(path, "", "w");
	snprintf(path, sizeof(path), "%s/slurm.sh", d);
	pid = fork();
	if (pid == 0) {
		execl("/bin/sh", "sh", path, (char *)NULL);
		_exit(127);
	}
	snprintf(path, sizeof(path), "%s/args", d);
	for (int i = 0; i < 100 && access(path, F_OK); i++)
		usleep(50000);
	usleep(200000);
	kill(pid, SIGTERM);
	waitpid(pid, &ws, 0);
	ck_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 3);
	ck_assert_int_eq(tacod_slurm_read_status(d, &st, &sig, &err), 0);
	ck_assert(st == 3 && sig == 0);
	/* tacod's paths go between single quotes: none may hold one */
	ck_assert_int_eq(
	    tacod_slurm_write_script(d, "/opt/it's/taco-train", "cpu", &err),
	    -EINVAL);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d);
	ck_assert_int_eq(system(cmd), 0);
	free(d);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("slurm_files");
	TCase *tc = tcase_create("slurm_files");

	tcase_add_test(tc, test_parse_squeue);
	tcase_add_test(tc, test_gres);
	tcase_add_test(tc, test_parse_sbatch_and_status);
	tcase_add_test(tc, test_read_lines);
	tcase_add_test(tc, test_script);
	tcase_add_test(tc, test_stderr_tail);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
