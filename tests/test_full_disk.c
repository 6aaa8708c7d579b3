/* test_full_disk.c: tacod on full file systems. The state directory (the
 * store, uploads, files) and the jobs directory (job files, checkpoints,
 * exports) are each a small tmpfs, and a filler file leaves exactly the
 * room a case needs: an upload, a create (its job file, its row), a
 * checkpoint, an export and a running job's event appends. Each answers
 * 507 insufficient_storage or fails the job with that code, names no
 * server path (the harness checks every reply), leaves nothing behind and
 * keeps the store sound; tacod serves on.
 *
 * tmpfs needs a mount namespace: main() enters one (with a user namespace
 * when not root) before the suite starts, so this runs unprivileged
 * wherever user namespaces are allowed, and fails where they are not. */
#include <check.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "daemon/service/internal.h"
#include "tacod_harness.h"
#include "testutil.h"

/* Room for the store, its storage reserve (1 MiB), uploads of the count
 * data (100 KB); and for jobs' files and one job's checkpoints. */
#define STATE_KB 6144
#define JOBS_KB 8192
/* What a job needs in the jobs directory before its first checkpoint or
 * export: job.json, the output directory and its lock. A checkpoint or an
 * export of llama_gqa (its model.safetensors alone is 420 KiB) does not
 * fit. */
#define JOB_ROOM (64u << 10)

static char jobs_mnt[sizeof(th_state) + 8];

static void mount_tmpfs(const char *dir, unsigned kb)
{
	char opt[64];

	snprintf(opt, sizeof(opt), "size=%uk,mode=0755", kb);
	ck_assert_msg(mount("tmpfs", dir, "tmpfs", 0, opt) == 0,
		      "mount tmpfs on %s: %s", dir, strerror(errno));
}

/* th_start's tweak: the state directory and its jobs/ are small tmpfs. */
static void small_disks(tacod_config *c)
{
	mount_tmpfs(c->state_dir, STATE_KB);
	snprintf(jobs_mnt, sizeof(jobs_mnt), "%s/jobs", th_state);
	ck_assert_int_eq(mkdir(jobs_mnt, 0755), 0);
	mount_tmpfs(jobs_mnt, JOBS_KB);
}

static void start(void)
{
	th_start(8ull << 30, small_disks);
}

/* The mounts go first (lazily: tacod still has its store open), then
 * th_stop removes the empty directory beneath them. */
static void stop(void)
{
	ck_assert_int_eq(umount2(jobs_mnt, MNT_DETACH), 0);
	ck_assert_int_eq(umount2(th_state, MNT_DETACH), 0);
	th_stop();
}

static uint64_t avail(const char *dir)
{
	struct statvfs v;

	ck_assert_int_eq(statvfs(dir, &v), 0);
	return (uint64_t)v.f_bavail * v.f_frsize;
}

/* Fills dir's file system with dir/filler until leave bytes are free (at
 * most: tacod may be writing there too, and may free its reserve). */
static void fill(const char *dir, uint64_t leave)
{
	char path[256];
	struct stat st;
	int fd;

	snprintf(path, sizeof(path), "%s/filler", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	ck_assert_int_ge(fd, 0);
	for (;;) {
		uint64_t room = avail(dir);
		int rc;
		if (room <= leave)
			break;
		ck_assert_int_eq(fstat(fd, &st), 0);
		rc = posix_fallocate(fd, st.st_size, (off_t)(room - leave));
		if (!rc)
			break;
		ck_assert_int_eq(rc, ENOSPC); /* taken meanwhile: again */
	}
	close(fd);
}

/* The bytes a file takes on tmpfs: whole pages. */
static uint64_t pages(const char *path)
{
	struct stat st;
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);

	ck_assert_int_eq(stat(path, &st), 0);
	return ((uint64_t)st.st_size + page - 1) / page * page;
}

static void unfill(const char *dir)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/filler", dir);
	ck_assert_int_eq(unlink(path), 0);
}

/* The names in dir but the filler (and . and ..), comma-separated. */
static void names_in(const char *dir, char *out, size_t cap)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	size_t n = 0;

	ck_assert_ptr_nonnull(d);
	out[0] = 0;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
		    !strcmp(e->d_name, "filler"))
			continue;
		n += (size_t)snprintf(out + n, n < cap ? cap - n : 0, "%s,",
				      e->d_name);
	}
	closedir(d);
}

static void assert_empty(const char *dir)
{
	char names[1024];

	names_in(dir, names, sizeof(names));
	ck_assert_msg(!names[0], "%s holds %s", dir, names);
}

/* No name in dir holds part. */
static void assert_none_named(const char *dir, const char *part)
{
	char names[1024];

	names_in(dir, names, sizeof(names));
	ck_assert_msg(!strstr(names, part), "%s holds %s", dir, names);
}

/* A reply is the 507 envelope: server_error, insufficient_storage. */
static void assert_507(long status, json_t *j)
{
	json_t *e = json_object_get(j, "error");

	ck_assert_int_eq(status, 507);
	ck_assert_str_eq(th_str(e, "type"), "server_error");
	ck_assert_str_eq(th_str(e, "code"), "insufficient_storage");
	ck_assert_ptr_nonnull(strstr(th_str(e, "message"), "storage"));
}

static void assert_serving(void)
{
	json_t *j;

	ck_assert_int_eq(th_call("GET", "/healthz", NULL, NULL, &j), 200);
	json_decref(j);
	ck_assert_int_eq(th_call("GET", "/v1/fine_tuning/jobs", NULL, NULL, &j),
			 200);
	json_decref(j);
}

static size_t job_count(void)
{
	json_t *j;
	size_t n;

	ck_assert_int_eq(th_call("GET", "/v1/fine_tuning/jobs", NULL, NULL, &j),
			 200);
	n = json_array_size(json_object_get(j, "data"));
	json_decref(j);
	return n;
}

static void assert_store_sound(void)
{
	taco_err err = {{0}};
	int rc;

	pthread_mutex_lock(&th_svc->lock);
	rc = tacod_store_integrity_check(th_svc->store, &err);
	pthread_mutex_unlock(&th_svc->lock);
	ck_assert_msg(rc == 0, "%s", err.msg);
}

/* A job's stored events: how many, and that their seqs run 1..n. */
static int64_t event_count(const char *job)
{
	tacod_event ev[64];
	int64_t after = 0;
	int n = 0, more = 1;

	pthread_mutex_lock(&th_svc->lock);
	while (more) {
		ck_assert_int_eq(tacod_store_event_list(th_svc->store, job,
							after, 64, ev, &n,
							&more, NULL),
				 0);
		for (int i = 0; i < n; i++) {
			ck_assert_int_eq(ev[i].seq, after + 1);
			after = ev[i].seq;
			tacod_event_clear(&ev[i]);
		}
		if (!n)
			break;
	}
	pthread_mutex_unlock(&th_svc->lock);
	return after;
}

static long create(const char *file, const char *taco, const char *header,
		   json_t **out)
{
	char body[1024];

	snprintf(body, sizeof(body),
		 "{\"model\": \"llama_gqa\", \"training_file\": \"%s\", "
		 "\"suffix\": \"t\", \"taco\": {\"seq_len\": 24, %s}}",
		 file, taco);
	return th_call_x("POST", "/v1/fine_tuning/jobs", body, NULL, header,
			 out, NULL, NULL);
}

/* A create on a full disk: 507, and neither a job directory nor a row. */
static void create_refused(const char *file, const char *header)
{
	json_t *j;
	long st = create(file, "\"steps\": 2", header, &j);

	assert_507(st, j);
	json_decref(j);
	assert_empty(jobs_mnt);
	ck_assert_int_eq(job_count(), 0);
}

/* Polls a job until it has ended; the job object. */
static json_t *wait_end(const char *id)
{
	char path[256];
	json_t *j = NULL;

	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s", id);
	for (int i = 0; i < 1200; i++) {
		const char *st;
		json_decref(j);
		ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 200);
		st = th_str(j, "status");
		if (!strcmp(st, "succeeded") || !strcmp(st, "failed") ||
		    !strcmp(st, "cancelled"))
			return j;
		usleep(100000);
	}
	ck_abort_msg("job %s never ended (is %s)", id, th_str(j, "status"));
	return NULL;
}

/* The job failed for lack of storage, saying so without a path. */
static void assert_failed_for_storage(json_t *j)
{
	json_t *e = json_object_get(j, "error");

	ck_assert_str_eq(th_str(j, "status"), "failed");
	ck_assert_str_eq(th_str(e, "code"), "insufficient_storage");
	ck_assert_msg(strstr(th_str(e, "message"), "storage"), "%s",
		      th_str(e, "message"));
	ck_assert_ptr_null(strstr(th_str(e, "message"), th_state));
}

START_TEST(test_upload)
{
	char dir[256];
	json_t *j;
	long st;
	char *file;

	start();
	snprintf(dir, sizeof(dir), "%s/uploads", th_state);
	fill(th_state, 0);
	st = th_call("POST", "/v1/files", NULL,
		     tu_fixture("data/count_train.jsonl"), &j);
	assert_507(st, j);
	json_decref(j);
	assert_empty(dir); /* the temporary file is gone */
	ck_assert_int_eq(th_call("GET", "/v1/files", NULL, NULL, &j), 200);
	ck_assert_int_eq(json_array_size(json_object_get(j, "data")), 0);
	json_decref(j);
	assert_serving();
	/* room for the file but not for its row */
	unfill(th_state);
	fill(th_state, pages(tu_fixture("data/count_train.jsonl")));
	st = th_call("POST", "/v1/files", NULL,
		     tu_fixture("data/count_train.jsonl"), &j);
	assert_507(st, j);
	json_decref(j);
	assert_empty(dir);
	ck_assert_int_eq(th_call("GET", "/v1/files", NULL, NULL, &j), 200);
	ck_assert_int_eq(json_array_size(json_object_get(j, "data")), 0);
	json_decref(j);
	/* room again: the same upload is stored */
	unfill(th_state);
	file = th_upload_count();
	free(file);
	assert_store_sound();
	stop();
}
END_TEST

/* No room for the job file: 507, and neither a job directory nor a row.
 * A plan writes no file: it answers on a full disk, and leaves nothing. */
START_TEST(test_create_no_room_for_job_file)
{
	json_t *j;
	char *file, body[512];
	long st;

	start();
	file = th_upload_count();
	fill(jobs_mnt, 0);
	create_refused(file, NULL);
	snprintf(body, sizeof(body),
		 "{\"model\": \"llama_gqa\", \"training_file\": \"%s\"}", file);
	st = th_call("POST", "/v1/fine_tuning/plan", body, NULL, &j);
	ck_assert_int_eq(st, 200);
	ck_assert_str_eq(th_str(j, "object"), "fine_tuning.plan");
	json_decref(j);
	assert_empty(jobs_mnt);
	assert_serving();
	assert_store_sound();
	unfill(jobs_mnt);
	free(file);
	stop();
}
END_TEST

/* The job file is written but the store is full: 507, the directory is
 * removed, no row and no idempotency record (the same key creates the job
 * once there is room). */
START_TEST(test_create_store_full)
{
	const char *key = "Idempotency-Key: full-disk-1";
	json_t *j;
	char *file, *id;

	start();
	file = th_upload_count();
	fill(th_state, 0);
	create_refused(file, key);
	assert_serving();
	unfill(th_state);
	assert_store_sound();
	ck_assert_int_eq(create(file, "\"steps\": 2", key, &j), 200);
	id = strdup(th_str(j, "id"));
	json_decref(j);
	j = wait_end(id);
	ck_assert_str_eq(th_str(j, "status"), "succeeded");
	json_decref(j);
	free(id);
	free(file);
	stop();
}
END_TEST

/* A checkpoint (or, without one, the export) that does not fit: the job
 * fails with insufficient_storage, its partial files (named with part, in
 * the output directory's sub) are gone, the events before stay. */
static void run_out_of_room(const char *taco, const char *sub, const char *part)
{
	char path[512];
	json_t *j;
	char *file, *id;

	start();
	file = th_upload_count();
	fill(jobs_mnt, JOB_ROOM);
	ck_assert_int_eq(create(file, taco, NULL, &j), 200);
	id = strdup(th_str(j, "id"));
	json_decref(j);
	j = wait_end(id);
	assert_failed_for_storage(j);
	json_decref(j);
	ck_assert_int_gt(event_count(id), 3);
	snprintf(path, sizeof(path), "%s/%s/out/%s", jobs_mnt, id, sub);
	assert_none_named(path, part);
	assert_serving();
	assert_store_sound();
	unfill(jobs_mnt);
	free(id);
	free(file);
	stop();
}

START_TEST(test_checkpoint)
{
	run_out_of_room("\"steps\": 50, \"checkpoint_every\": 2", "checkpoints",
			"step-");
}
END_TEST

START_TEST(test_export)
{
	run_out_of_room("\"steps\": 2, \"checkpoint_every\": 0", ".", "model");
}
END_TEST

/* The store fills while a job runs: its next event cannot be appended.
 * The job is stopped and fails with insufficient_storage (recorded in the
 * room of tacod's storage reserve), the events stored before stay, the
 * store is sound and tacod serves on. */
START_TEST(test_event_append)
{
	char path[256];
	json_t *j;
	char *file, *id;
	int64_t before;

	start();
	file = th_upload_count();
	ck_assert_int_eq(create(file, "\"steps\": 1000000", NULL, &j), 200);
	id = strdup(th_str(j, "id"));
	json_decref(j);
	json_decref(th_wait_status(id, "running"));
	while (event_count(id) < 8)
		usleep(20000);
	fill(th_state, 0);
	before = event_count(id);
	j = wait_end(id);
	assert_failed_for_storage(j);
	json_decref(j);
	ck_assert_int_ge(event_count(id), before);
	snprintf(path, sizeof(path), "/v1/fine_tuning/jobs/%s/events", id);
	ck_assert_int_eq(th_call("GET", path, NULL, NULL, &j), 200);
	json_decref(j);
	assert_serving();
	assert_store_sound();
	unfill(th_state);
	free(file);
	file = th_upload_count();
	free(file);
	free(id);
	stop();
}
END_TEST

static int write_text(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = write(fd, text, strlen(text));
	close(fd);
	return n == (ssize_t)strlen(text) ? 0 : -EIO;
}

/* A private mount namespace, where tmpfs can be mounted: as root (CI) a
 * mount namespace, else a user namespace mapping this user to root. */
static int enter_namespace(void)
{
	char map[64];
	unsigned uid = (unsigned)geteuid(), gid = (unsigned)getegid();

	if (unshare(CLONE_NEWNS)) {
		if (unshare(CLONE_NEWUSER | CLONE_NEWNS))
			return -errno;
		snprintf(map, sizeof(map), "0 %u 1", uid);
		if (write_text("/proc/self/uid_map", map) ||
		    write_text("/proc/self/setgroups", "deny"))
			return -EPERM;
		snprintf(map, sizeof(map), "0 %u 1", gid);
		if (write_text("/proc/self/gid_map", map))
			return -EPERM;
	}
	/* nothing mounted here shows outside */
	return mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ? -errno : 0;
}

int main(void)
{
	Suite *s = suite_create("full_disk");
	TCase *tc = tcase_create("full_disk");
	int rc = enter_namespace();

	if (rc) {
		fprintf(stderr,
			"test_full_disk: cannot enter a mount namespace (%s): "
			"it needs root or unprivileged user namespaces\n",
			strerror(-rc));
		return 1;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_upload);
	tcase_add_test(tc, test_create_no_room_for_job_file);
	tcase_add_test(tc, test_create_store_full);
	tcase_add_test(tc, test_checkpoint);
	tcase_add_test(tc, test_export);
	tcase_add_test(tc, test_event_append);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
