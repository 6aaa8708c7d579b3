/* test_store.c: tacod's SQLite store: files, jobs, events, checkpoints,
 * idempotency keys, limits, reopening, and durability across kill -9. */
#include <check.h>

#include "testutil.h"
#include <jansson.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon/store/slurm.h"
#include "daemon/store/store.h"

static char dir[256];
static char db[320];

/* A fresh store in a new temporary directory. */
static tacod_store *open_fresh(void)
{
	const char *tmp = getenv("TMPDIR");
	tacod_store *s;
	taco_err err = {{0}};

	snprintf(dir, sizeof(dir), "%s/test_store.XXXXXX", tmp ? tmp : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(db, sizeof(db), "%s/tacod.db", dir);
	ck_assert_msg(tacod_store_open(db, &s, &err) == 0, "%s", err.msg);
	return s;
}

static tacod_store *reopen(void)
{
	tacod_store *s;
	taco_err err = {{0}};

	ck_assert_msg(tacod_store_open(db, &s, &err) == 0, "%s", err.msg);
	return s;
}

static void remove_dir(void)
{
	char p[400];
	static const char *const ext[] = {"", "-wal", "-shm", "-journal"};

	for (size_t i = 0; i < sizeof(ext) / sizeof(ext[0]); i++) {
		snprintf(p, sizeof(p), "%s%s", db, ext[i]);
		unlink(p);
	}
	rmdir(dir);
}

static const char sha_a[] =
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
static const char sha_b[] =
    "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff";

static tacod_file make_file(const char *id, const char *user, int64_t at)
{
	tacod_file f;

	memset(&f, 0, sizeof(f));
	snprintf(f.id, sizeof(f.id), "%s", id);
	snprintf(f.user, sizeof(f.user), "%s", user);
	snprintf(f.filename, sizeof(f.filename), "%s.jsonl", id);
	snprintf(f.purpose, sizeof(f.purpose), "fine-tune");
	snprintf(f.sha256, sizeof(f.sha256), "%s", sha_a);
	snprintf(f.path, sizeof(f.path), "/state/files/%s", sha_a);
	f.bytes = 1234;
	f.created_at = at;
	return f;
}

static void add_file(tacod_store *s, const char *id, const char *user,
		     int64_t at)
{
	tacod_file f = make_file(id, user, at);
	taco_err err = {{0}};

	ck_assert_msg(tacod_store_file_add(s, &f, &err) == 0, "%s", err.msg);
}

/* A job on stack; request points at a string literal (never cleared). */
static tacod_job make_job(const char *id, const char *user, int status,
			  const char *training_file, int64_t at)
{
	tacod_job j;

	memset(&j, 0, sizeof(j));
	snprintf(j.id, sizeof(j.id), "%s", id);
	snprintf(j.user, sizeof(j.user), "%s", user);
	j.status = status;
	snprintf(j.model, sizeof(j.model), "llama-3.2-1b");
	snprintf(j.training_file, sizeof(j.training_file), "%s", training_file);
	j.request = (char *)"{\"model\":\"llama-3.2-1b\"}";
	j.created_at = at;
	return j;
}

static int64_t add_job(tacod_store *s, const char *id, const char *user,
		       int status, const char *file, int64_t at)
{
	tacod_job j = make_job(id, user, status, file, at);
	taco_err err = {{0}};

	ck_assert_msg(tacod_store_job_add(s, &j, &err) == 0, "%s", err.msg);
	return j.queue_seq;
}

START_TEST(test_ids_and_names)
{
	char a[TACOD_ID_MAX], b[TACOD_ID_MAX], big[TACOD_ID_MAX];
	char prefix[100];

	tacod_new_id("file-", a);
	tacod_new_id("file-", b);
	ck_assert_uint_eq(strlen(a), 5 + 24);
	ck_assert(strncmp(a, "file-", 5) == 0);
	ck_assert_uint_eq(strspn(a + 5, "0123456789abcdef"), 24);
	ck_assert_str_ne(a, b);
	memset(prefix, 'p', sizeof(prefix) - 1);
	prefix[sizeof(prefix) - 1] = 0;
	tacod_new_id(prefix, big); /* the prefix is cut, the hex kept */
	ck_assert_uint_eq(strlen(big), TACOD_ID_MAX - 1);
	ck_assert_uint_eq(strspn(big + TACOD_ID_MAX - 25, "0123456789abcdef"),
			  24);
	for (int st = TACOD_VALIDATING; st <= TACOD_CANCELLED; st++)
		ck_assert_int_eq(tacod_status_from_name(tacod_status_name(st)),
				 st);
	ck_assert_str_eq(tacod_status_name(TACOD_VALIDATING),
			 "validating_files");
	ck_assert_str_eq(tacod_status_name(TACOD_CANCELLED), "cancelled");
	ck_assert_int_eq(tacod_status_from_name("bogus"), -1);
	ck_assert_int_eq(tacod_status_from_name(NULL), -1);
	ck_assert_str_eq(tacod_status_name(42), "unknown");
}
END_TEST

START_TEST(test_files_add_get)
{
	tacod_store *s = open_fresh();
	tacod_file f = make_file("file-1", "alice", 100), g;
	taco_err err = {{0}};
	int64_t n;

	ck_assert_int_eq(tacod_store_file_add(s, &f, &err), 0);
	ck_assert_int_eq(tacod_store_file_add(s, &f, &err), -EEXIST);
	ck_assert_ptr_nonnull(strstr(err.msg, "file-1"));
	ck_assert_int_eq(tacod_store_file_get(s, "alice", "file-1", &g, &err),
			 0);
	ck_assert_str_eq(g.id, "file-1");
	ck_assert_str_eq(g.user, "alice");
	ck_assert_str_eq(g.filename, "file-1.jsonl");
	ck_assert_str_eq(g.purpose, "fine-tune");
	ck_assert_str_eq(g.sha256, sha_a);
	ck_assert_str_eq(g.path, f.path);
	ck_assert_int_eq(g.bytes, 1234);
	ck_assert_int_eq(g.created_at, 100);
	ck_assert_int_eq(tacod_store_file_get(s, "alice", "file-2", &g, &err),
			 -ENOENT);
	ck_assert_int_eq(tacod_store_file_count_sha256(s, sha_a, &n, &err), 0);
	ck_assert_int_eq(n, 1);
	ck_assert_int_eq(tacod_store_file_count_sha256(s, sha_b, &n, &err), 0);
	ck_assert_int_eq(n, 0);
	tacod_store_close(s);
	remove_dir();
}
END_TEST

START_TEST(test_files_list_pagination)
{
	tacod_store *s = open_fresh();
	tacod_file *out = calloc(TACOD_LIST_MAX, sizeof(*out));
	taco_err err = {{0}};
	int n, more;

	/* Seven files; f3..f5 share a second, so rowid breaks the tie. */
	add_file(s, "f1", "alice", 10);
	add_file(s, "f2", "alice", 20);
	add_file(s, "f3", "alice", 30);
	add_file(s, "f4", "alice", 30);
	add_file(s, "f5", "alice", 30);
	add_file(s, "f6", "alice", 40);
	add_file(s, "f7", "alice", 5);
	ck_assert_int_eq(tacod_store_file_list(s, "alice", NULL, 0, "", 3, out,
					       &n, &more, &err),
			 0);
	ck_assert_int_eq(n, 3);
	ck_assert_int_eq(more, 1);
	ck_assert_str_eq(out[0].id, "f6");
	ck_assert_str_eq(out[1].id, "f5");
	ck_assert_str_eq(out[2].id, "f4");
	ck_assert_int_eq(tacod_store_file_list(s, "alice", NULL, 0, "f4", 3,
					       out, &n, &more, &err),
			 0);
	ck_assert_int_eq(n, 3);
	ck_assert_int_eq(more, 1);
	ck_assert_str_eq(out[0].id, "f3");
	ck_assert_str_eq(out[1].id, "f2");
	ck_assert_str_eq(out[2].id, "f1");
	ck_assert_int_eq(tacod_store_file_list(s, "alice", NULL, 0, "f1", 3,
					       out, &n, &more, &err),
			 0);
	ck_assert_int_eq(n, 1);
	ck_assert_int_eq(more, 0);
	ck_assert_str_eq(out[0].id, "f7");
	ck_assert_int_eq(tacod_store_file_list(s, "alice", NULL, 0, "f7", 3,
					       out, &n, &more, &err),
			 0);
	ck_assert_int_eq(n, 0);
	ck_assert_int_eq(more, 0);
	/* Exactly the rest: no more after it. */
	ck_assert_int_eq(tacod_store_file_list(s, "alice", NULL, 0, "f3", 3,
					       out, &n, &more, &err),
			 0);
	ck_assert_int_eq(n, 3);
	ck_assert_int_eq(more, 0);
	/* NULL after is the start too. */
	ck_assert_int_eq(tacod_store_file_list(s, "alice", NULL, 0, NULL, 7,
					       out, &n, &more, &err),
			 0);
	ck_assert_int_eq(n, 7);
	ck_assert_int_eq(more, 0);
	/* Limits are clamped to [1, TACOD_LIST_MAX]. */
	ck_assert_int_eq(tacod_store_file_list(s, "alice", NULL, 0, "", 0, out,
					       &n, &more, &err),
			 0);
	ck_assert_int_eq(n, 1);
	ck_assert_int_eq(more, 1);
	ck_assert_int_eq(tacod_store_file_list(s, "alice", NULL, 0, "", -5, out,
					       &n, &more, &err),
			 0);
	ck_assert_int_eq(n, 1);
	for (int i = 0; i < TACOD_LIST_MAX; i++) {
		char id[32];
		snprintf(id, sizeof(id), "bulk-%03d", i);
		add_file(s, id, "alice", 1000 + i);
	}
	ck_assert_int_eq(tacod_store_file_list(s, "alice", NULL, 0, "", 100000,
					       out, &n, &more, &err),
			 0);
	ck_assert_int_eq(n, TACOD_LIST_MAX);
	ck_assert_int_eq(more, 1);
	ck_assert_str_eq(out[0].id, "bulk-099");
	/* An unknown start is an error, not an empty page. */
	ck_assert_int_eq(tacod_store_file_list(s, "alice", NULL, 0, "nope", 3,
					       out, &n, &more, &err),
			 -ENOENT);
	ck_assert_ptr_nonnull(strstr(err.msg, "after"));
	free(out);
	tacod_store_close(s);
	remove_dir();
}
END_TEST

/* Oldest first (OpenAI's order=asc), and one purpose only: the same
 * cursor rules as newest first. */
START_TEST(test_files_list_order_purpose)
{
	tacod_store *s = open_fresh();
	tacod_file out[8], f;
	taco_err err = {{0}};
	int n, more;

	add_file(s, "f1", "alice", 10);
	add_file(s, "f2", "alice", 20);
	add_file(s, "f3", "alice", 20);
	f = make_file("r1", "alice", 15);
	snprintf(f.purpose, sizeof(f.purpose), "fine-tune-results");
	ck_assert_int_eq(tacod_store_file_add(s, &f, &err), 0);
	add_file(s, "b1", "bob", 1);
	ck_assert_int_eq(tacod_store_file_list(s, "alice", NULL, 1, "", 2, out,
					       &n, &more, &err),
			 0);
	ck_assert_int_eq(n, 2);
	ck_assert_int_eq(more, 1);
	ck_assert_str_eq(out[0].id, "f1");
	ck_assert_str_eq(out[1].id, "r1");
	ck_assert_int_eq(tacod_store_file_list(s, "alice", NULL, 1, "r1", 2,
					       out, &n, &more, &err),
			 0);
	ck_assert_int_eq(n, 2);
	ck_assert_int_eq(more, 0);
	ck_assert_str_eq(out[0].id, "f2"); /* a tie: rowid order */
	ck_assert_str_eq(out[1].id, "f3");
	ck_assert_int_eq(tacod_store_file_list(s, "alice", NULL, 1, "f3", 2,
					       out, &n, &more, &err),
			 0);
	ck_assert_int_eq(n, 0);
	ck_assert_int_eq(more, 0);
	/* a purpose filters both orders, and the cursor may be any file */
	ck_assert_int_eq(tacod_store_file_list(s, "alice", "fine-tune", 0, "",
					       8, out, &n, &more, &err),
			 0);
	ck_assert_int_eq(n, 3);
	ck_assert_str_eq(out[0].id, "f3");
	ck_assert_str_eq(out[2].id, "f1");
	ck_assert_int_eq(tacod_store_file_list(s, "alice", "fine-tune", 1, "r1",
					       8, out, &n, &more, &err),
			 0);
	ck_assert_int_eq(n, 2);
	ck_assert_str_eq(out[0].id, "f2");
	ck_assert_int_eq(tacod_store_file_list(s, "alice", "fine-tune-results",
					       0, "", 8, out, &n, &more, &err),
			 0);
	ck_assert_int_eq(n, 1);
	ck_assert_str_eq(out[0].id, "r1");
	ck_assert_int_eq(tacod_store_file_list(s, "alice", "batch", 0, "", 8,
					       out, &n, &more, &err),
			 0);
	ck_assert_int_eq(n, 0);
	ck_assert_int_eq(more, 0);
	/* another user's file is no cursor, in either order */
	ck_assert_int_eq(tacod_store_file_list(s, "alice", NULL, 1, "b1", 8,
					       out, &n, &more, &err),
			 -ENOENT);
	ck_assert_int_eq(tacod_store_file_list(
			     s, "alice", "a-purpose-longer-than-the-column", 0,
			     "", 8, out, &n, &more, &err),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "purpose"));
	tacod_store_close(s);
	remove_dir();
}
END_TEST

START_TEST(test_ownership)
{
	tacod_store *s = open_fresh();
	tacod_file *files = calloc(TACOD_LIST_MAX, sizeof(*files));
	tacod_job *jobs = calloc(TACOD_LIST_MAX, sizeof(*jobs));
	tacod_file f;
	tacod_job j;
	taco_err err = {{0}};
	int n, more;

	add_file(s, "fa", "alice", 10);
	add_file(s, "fb", "bob", 20);
	add_job(s, "ja", "alice", TACOD_SUCCEEDED, "fa", 10);
	add_job(s, "jb", "bob", TACOD_SUCCEEDED, "fb", 20);

	ck_assert_int_eq(tacod_store_file_get(s, "bob", "fa", &f, &err),
			 -ENOENT);
	ck_assert_int_eq(tacod_store_file_get(s, NULL, "fa", &f, &err), 0);
	ck_assert_str_eq(f.user, "alice");
	ck_assert_int_eq(tacod_store_job_get(s, "bob", "ja", &j, &err),
			 -ENOENT);
	tacod_job_clear(&j);
	ck_assert_int_eq(tacod_store_job_get(s, NULL, "ja", &j, &err), 0);
	ck_assert_str_eq(j.user, "alice");
	tacod_job_clear(&j);

	ck_assert_int_eq(tacod_store_file_list(s, "bob", NULL, 0, "", 10, files,
					       &n, &more, &err),
			 0);
	ck_assert_int_eq(n, 1);
	ck_assert_str_eq(files[0].id, "fb");
	ck_assert_int_eq(tacod_store_file_list(s, NULL, NULL, 0, "", 10, files,
					       &n, &more, &err),
			 0);
	ck_assert_int_eq(n, 2);
	ck_assert_str_eq(files[0].id, "fb");
	ck_assert_str_eq(files[1].id, "fa");
	/* Another user's id as the start does not leak either. */
	ck_assert_int_eq(tacod_store_file_list(s, "bob", NULL, 0, "fa", 10,
					       files, &n, &more, &err),
			 -ENOENT);
	ck_assert_int_eq(tacod_store_file_list(s, NULL, NULL, 0, "fb", 10,
					       files, &n, &more, &err),
			 0);
	ck_assert_int_eq(n, 1);
	ck_assert_str_eq(files[0].id, "fa");

	ck_assert_int_eq(
	    tacod_store_job_list(s, "alice", "", 10, jobs, &n, &more, &err), 0);
	ck_assert_int_eq(n, 1);
	ck_assert_str_eq(jobs[0].id, "ja");
	tacod_job_clear(&jobs[0]);
	ck_assert_int_eq(
	    tacod_store_job_list(s, "alice", "jb", 10, jobs, &n, &more, &err),
	    -ENOENT);
	ck_assert_int_eq(
	    tacod_store_job_list(s, NULL, "", 10, jobs, &n, &more, &err), 0);
	ck_assert_int_eq(n, 2);
	ck_assert_str_eq(jobs[0].id, "jb");
	ck_assert_str_eq(jobs[1].id, "ja");
	for (int i = 0; i < n; i++)
		tacod_job_clear(&jobs[i]);

	/* Deleting another user's file: as if it were not there. */
	ck_assert_int_eq(tacod_store_file_delete(s, "bob", "fa", &err),
			 -ENOENT);
	ck_assert_int_eq(tacod_store_file_get(s, "alice", "fa", &f, &err), 0);
	ck_assert_int_eq(tacod_store_file_delete(s, NULL, "fa", &err), 0);
	ck_assert_int_eq(tacod_store_file_get(s, NULL, "fa", &f, &err),
			 -ENOENT);
	free(files);
	free(jobs);
	tacod_store_close(s);
	remove_dir();
}
END_TEST

START_TEST(test_file_delete_in_use)
{
	tacod_store *s = open_fresh();
	tacod_job j;
	taco_err err = {{0}};
	int64_t n;

	add_file(s, "train", "alice", 10);
	add_file(s, "valid", "alice", 11);
	j = make_job("j1", "alice", TACOD_QUEUED, "train", 12);
	snprintf(j.validation_file, sizeof(j.validation_file), "valid");
	ck_assert_int_eq(tacod_store_job_add(s, &j, &err), 0);

	static const int active[] = {TACOD_VALIDATING, TACOD_QUEUED,
				     TACOD_RUNNING, TACOD_PAUSED};
	int cur = TACOD_QUEUED;
	for (size_t i = 0; i < sizeof(active) / sizeof(active[0]); i++) {
		ck_assert_int_eq(
		    tacod_store_job_transition(s, "j1", cur, active[i], &err),
		    0);
		cur = active[i];
		ck_assert_int_eq(
		    tacod_store_file_delete(s, "alice", "train", &err), -EBUSY);
		ck_assert_ptr_nonnull(strstr(err.msg, "j1"));
		ck_assert_int_eq(
		    tacod_store_file_delete(s, "alice", "valid", &err), -EBUSY);
	}
	ck_assert_int_eq(
	    tacod_store_job_transition(s, "j1", cur, TACOD_CANCELLED, &err), 0);
	ck_assert_int_eq(tacod_store_file_delete(s, "alice", "train", &err), 0);
	ck_assert_int_eq(tacod_store_file_delete(s, "alice", "valid", &err), 0);
	ck_assert_int_eq(tacod_store_file_delete(s, "alice", "valid", &err),
			 -ENOENT);
	ck_assert_int_eq(tacod_store_file_count_sha256(s, sha_a, &n, &err), 0);
	ck_assert_int_eq(n, 0);
	tacod_store_close(s);
	remove_dir();
}
END_TEST

START_TEST(test_jobs_add_get_update)
{
	tacod_store *s = open_fresh();
	tacod_job j = make_job("j1", "alice", TACOD_VALIDATING, "f1", 100);
	tacod_job g;
	taco_err err = {{0}};

	snprintf(j.suffix, sizeof(j.suffix), "my-suffix");
	snprintf(j.output_dir, sizeof(j.output_dir), "/state/jobs/j1");
	j.planned_bytes = 1ll << 40;
	j.estimated_finish = 5000;
	ck_assert_int_eq(tacod_store_job_add(s, &j, &err), 0);
	ck_assert_int_eq(j.queue_seq, 1);
	ck_assert_int_eq(tacod_store_job_add(s, &j, &err), -EEXIST);
	ck_assert_int_eq(add_job(s, "j2", "alice", TACOD_QUEUED, "f1", 101), 2);
	ck_assert_int_eq(add_job(s, "j3", "bob", TACOD_QUEUED, "f1", 102), 3);

	ck_assert_int_eq(tacod_store_job_get(s, "alice", "j1", &g, &err), 0);
	ck_assert_str_eq(g.id, "j1");
	ck_assert_str_eq(g.user, "alice");
	ck_assert_int_eq(g.status, TACOD_VALIDATING);
	ck_assert_str_eq(g.model, "llama-3.2-1b");
	ck_assert_str_eq(g.training_file, "f1");
	ck_assert_str_eq(g.validation_file, "");
	ck_assert_str_eq(g.suffix, "my-suffix");
	ck_assert_str_eq(g.request, "{\"model\":\"llama-3.2-1b\"}");
	ck_assert_ptr_null(g.error);
	ck_assert_str_eq(g.fine_tuned_model, "");
	ck_assert_str_eq(g.output_dir, "/state/jobs/j1");
	ck_assert_int_eq(g.planned_bytes, 1ll << 40);
	ck_assert_int_eq(g.created_at, 100);
	ck_assert_int_eq(g.estimated_finish, 5000);
	ck_assert_int_eq(g.queue_seq, 1);
	ck_assert_int_eq(g.retries, 0);

	/* Update writes every field. */
	free(g.request);
	g.request = NULL;
	g.error = strdup("{\"message\":\"out of memory\",\"code\":\"oom\","
			 "\"param\":null}");
	g.status = TACOD_FAILED;
	snprintf(g.fine_tuned_model, sizeof(g.fine_tuned_model), "ft:x");
	g.trained_tokens = 123456789;
	g.measured_peak_bytes = 42;
	g.started_at = 200;
	g.finished_at = 300;
	g.retries = 2;
	ck_assert_int_eq(tacod_store_job_update(s, &g, &err), 0);
	tacod_job_clear(&g);
	ck_assert_ptr_null(g.error);
	ck_assert_int_eq(tacod_store_job_get(s, NULL, "j1", &g, &err), 0);
	ck_assert_int_eq(g.status, TACOD_FAILED);
	ck_assert_ptr_null(g.request);
	ck_assert_str_eq(g.error, "{\"message\":\"out of memory\",\"code\":"
				  "\"oom\",\"param\":null}");
	ck_assert_str_eq(g.fine_tuned_model, "ft:x");
	ck_assert_int_eq(g.trained_tokens, 123456789);
	ck_assert_int_eq(g.measured_peak_bytes, 42);
	ck_assert_int_eq(g.started_at, 200);
	ck_assert_int_eq(g.finished_at, 300);
	ck_assert_int_eq(g.retries, 2);
	ck_assert_int_eq(g.queue_seq, 1);
	tacod_job_clear(&g);

	j = make_job("nope", "alice", TACOD_QUEUED, "f1", 1);
	ck_assert_int_eq(tacod_store_job_update(s, &j, &err), -ENOENT);
	ck_assert_int_eq(tacod_store_job_get(s, "alice", "nope", &g, &err),
			 -ENOENT);
	tacod_job_clear(&g);
	tacod_store_close(s);
	remove_dir();
}
END_TEST

START_TEST(test_job_transition)
{
	tacod_store *s = open_fresh();
	tacod_job j;
	taco_err err = {{0}};

	add_job(s, "j1", "alice", TACOD_QUEUED, "f1", 1);
	ck_assert_int_eq(tacod_store_job_transition(s, "j1", TACOD_QUEUED,
						    TACOD_RUNNING, &err),
			 0);
	/* The second mover loses: the job is no longer queued. */
	ck_assert_int_eq(tacod_store_job_transition(s, "j1", TACOD_QUEUED,
						    TACOD_RUNNING, &err),
			 -EAGAIN);
	ck_assert_int_eq(tacod_store_job_transition(s, "j1", TACOD_QUEUED,
						    TACOD_CANCELLED, &err),
			 -EAGAIN);
	ck_assert_int_eq(tacod_store_job_transition(s, "nope", TACOD_QUEUED,
						    TACOD_RUNNING, &err),
			 -ENOENT);
	ck_assert_int_eq(
	    tacod_store_job_transition(s, "j1", TACOD_RUNNING, 7, &err),
	    -EINVAL);
	ck_assert_int_eq(
	    tacod_store_job_transition(s, "j1", -1, TACOD_RUNNING, &err),
	    -EINVAL);
	ck_assert_int_eq(tacod_store_job_get(s, NULL, "j1", &j, &err), 0);
	ck_assert_int_eq(j.status, TACOD_RUNNING);

	/* update_from: every field, only from the expected status. */
	j.status = TACOD_SUCCEEDED;
	j.finished_at = 99;
	ck_assert_int_eq(tacod_store_job_update_from(s, &j, TACOD_PAUSED, &err),
			 -EAGAIN);
	ck_assert_int_eq(
	    tacod_store_job_update_from(s, &j, TACOD_RUNNING, &err), 0);
	ck_assert_int_eq(
	    tacod_store_job_update_from(s, &j, TACOD_RUNNING, &err), -EAGAIN);
	tacod_job_clear(&j);
	ck_assert_int_eq(tacod_store_job_get(s, NULL, "j1", &j, &err), 0);
	ck_assert_int_eq(j.status, TACOD_SUCCEEDED);
	ck_assert_int_eq(j.finished_at, 99);
	tacod_job_clear(&j);
	tacod_store_close(s);
	remove_dir();
}
END_TEST

/* started_at is set once, by one statement that writes nothing else. */
START_TEST(test_job_started)
{
	tacod_store *s = open_fresh();
	tacod_job j;
	taco_err err = {{0}};

	add_job(s, "j1", "alice", TACOD_QUEUED, "f1", 10);
	ck_assert_int_eq(tacod_store_job_transition(s, "j1", TACOD_QUEUED,
						    TACOD_RUNNING, &err),
			 0);
	ck_assert_int_eq(tacod_store_job_started(s, "j1", 50, &err), 0);
	ck_assert_int_eq(tacod_store_job_get(s, NULL, "j1", &j, &err), 0);
	ck_assert_int_eq(j.started_at, 50);
	ck_assert_int_eq(j.status, TACOD_RUNNING);
	ck_assert_int_eq(j.created_at, 10);
	ck_assert_str_eq(j.request, "{\"model\":\"llama-3.2-1b\"}");
	tacod_job_clear(&j);
	/* run again (resumed, requeued): the first start stays */
	ck_assert_int_eq(tacod_store_job_started(s, "j1", 70, &err), 0);
	ck_assert_int_eq(tacod_store_job_get(s, NULL, "j1", &j, &err), 0);
	ck_assert_int_eq(j.started_at, 50);
	tacod_job_clear(&j);
	ck_assert_int_eq(tacod_store_job_started(s, "nope", 70, &err), -ENOENT);
	ck_assert_int_eq(tacod_store_job_started(s, "", 70, &err), -EINVAL);
	tacod_store_close(s);
	remove_dir();
}
END_TEST

/* The walk of tacod_store_event_metrics_each: "step:train_loss|val_loss"
 * of each event, in the order given. */
static int walk(void *ctx, int64_t step, const char *data)
{
	char *out = ctx;
	json_t *d = json_loads(data, 0, NULL);
	json_t *v = json_object_get(d, "train_loss");
	size_t n = strlen(out);

	if (!v)
		v = json_object_get(d, "val_loss");
	snprintf(out + n, 512 - n, "%lld:%g ", (long long)step,
		 json_number_value(v));
	json_decref(d);
	return step == 99 ? -ECANCELED : 0;
}

/* A job's metrics events found by step (the newest at or before a step,
 * with a key) and walked in step order; its result file named and
 * forgotten when the file is deleted. */
START_TEST(test_metrics_and_result_file)
{
	tacod_store *s = open_fresh();
	static const char *const data[] = {
	    "{\"step\":1,\"train_loss\":5}", "{\"step\":2,\"train_loss\":4}",
	    "{\"step\":2,\"val_loss\":7,\"event\":\"eval\"}",
	    "{\"step\":3,\"train_loss\":3}",
	    /* resumed from step 1: steps 2 and 3 again */
	    "{\"step\":2,\"train_loss\":2.5}", "{\"step\":3,\"train_loss\":2}",
	    "{\"step\":4,\"mc_accuracy\":0.5,\"event\":\"eval\"}"};
	char *text = NULL, order[512] = "";
	tacod_job j;
	taco_err err = {{0}};

	add_job(s, "j1", "alice", TACOD_SUCCEEDED, "f1", 10);
	for (size_t i = 0; i < sizeof(data) / sizeof(data[0]); i++)
		ck_assert_int_eq(tacod_store_event_add(s, "j1", "info",
						       "metrics", "m", data[i],
						       NULL, &err),
				 0);
	/* not metrics, or no step: never found */
	ck_assert_int_eq(tacod_store_event_add(s, "j1", "info", "message", "x",
					       "{\"step\":3,"
					       "\"train_loss\":9}",
					       NULL, &err),
			 0);
	ck_assert_int_eq(tacod_store_event_add(s, "j1", "info", "metrics", "x",
					       "{\"train_loss\":9}", NULL,
					       &err),
			 0);
	ck_assert_int_eq(tacod_store_event_metrics_last(s, "j1", "train_loss",
							3, &text, &err),
			 0);
	ck_assert_str_eq(text, "{\"step\":3,\"train_loss\":2}");
	free(text);
	ck_assert_int_eq(tacod_store_event_metrics_last(s, "j1", "train_loss",
							2, &text, &err),
			 0);
	ck_assert_str_eq(text, "{\"step\":2,\"train_loss\":2.5}");
	free(text);
	ck_assert_int_eq(
	    tacod_store_event_metrics_last(s, "j1", "val_loss", 9, &text, &err),
	    0);
	ck_assert_str_eq(text,
			 "{\"step\":2,\"val_loss\":7,\"event\":\"eval\"}");
	free(text);
	text = NULL;
	ck_assert_int_eq(
	    tacod_store_event_metrics_last(s, "j1", "val_loss", 1, &text, &err),
	    -ENOENT);
	ck_assert_ptr_null(text);
	ck_assert_int_eq(tacod_store_event_metrics_last(
			     s, "j1", "val_loss') OR ('1", 9, &text, &err),
			 -EINVAL);
	ck_assert_int_eq(
	    tacod_store_event_metrics_each(s, "j1", walk, order, &err), 0);
	ck_assert_str_eq(order, "1:5 2:4 2:7 2:2.5 3:3 3:2 4:0 ");
	/* the callback's error stops the walk */
	ck_assert_int_eq(tacod_store_event_add(s, "j1", "info", "metrics", "m",
					       "{\"step\":99,\"train_loss\":1}",
					       NULL, &err),
			 0);
	order[0] = 0;
	ck_assert_int_eq(
	    tacod_store_event_metrics_each(s, "j1", walk, order, &err),
	    -ECANCELED);

	add_file(s, "fr", "alice", 20);
	ck_assert_int_eq(tacod_store_job_set_result_file(s, "j1", "fr", &err),
			 0);
	ck_assert_int_eq(tacod_store_job_get(s, NULL, "j1", &j, &err), 0);
	ck_assert_str_eq(j.result_file, "fr");
	tacod_job_clear(&j);
	ck_assert_int_eq(tacod_store_job_set_result_file(s, "nope", "fr", &err),
			 -ENOENT);
	ck_assert_int_eq(tacod_store_file_delete(s, "alice", "fr", &err), 0);
	ck_assert_int_eq(tacod_store_job_get(s, NULL, "j1", &j, &err), 0);
	ck_assert_str_eq(j.result_file, "");
	tacod_job_clear(&j);
	tacod_store_close(s);
	remove_dir();
}
END_TEST

START_TEST(test_by_status)
{
	tacod_store *s = open_fresh();
	tacod_job out[8];
	taco_err err = {{0}};
	int n;

	/* created_at runs backwards: the queue order is queue_seq alone. */
	add_job(s, "q1", "alice", TACOD_QUEUED, "f", 50);
	add_job(s, "r1", "alice", TACOD_RUNNING, "f", 40);
	add_job(s, "q2", "bob", TACOD_QUEUED, "f", 30);
	add_job(s, "q3", "alice", TACOD_QUEUED, "f", 20);
	add_job(s, "q4", "carol", TACOD_QUEUED, "f", 10);
	ck_assert_int_eq(
	    tacod_store_job_by_status(s, TACOD_QUEUED, out, 8, &n, &err), 0);
	ck_assert_int_eq(n, 4);
	ck_assert_str_eq(out[0].id, "q1");
	ck_assert_str_eq(out[1].id, "q2");
	ck_assert_str_eq(out[2].id, "q3");
	ck_assert_str_eq(out[3].id, "q4");
	ck_assert(out[0].queue_seq < out[1].queue_seq);
	for (int i = 0; i < n; i++)
		tacod_job_clear(&out[i]);
	ck_assert_int_eq(
	    tacod_store_job_by_status(s, TACOD_QUEUED, out, 2, &n, &err), 0);
	ck_assert_int_eq(n, 2);
	ck_assert_str_eq(out[1].id, "q2");
	for (int i = 0; i < n; i++)
		tacod_job_clear(&out[i]);
	ck_assert_int_eq(
	    tacod_store_job_by_status(s, TACOD_RUNNING, out, 8, &n, &err), 0);
	ck_assert_int_eq(n, 1);
	ck_assert_str_eq(out[0].id, "r1");
	tacod_job_clear(&out[0]);
	ck_assert_int_eq(
	    tacod_store_job_by_status(s, TACOD_PAUSED, out, 8, &n, &err), 0);
	ck_assert_int_eq(n, 0);
	ck_assert_int_eq(tacod_store_job_by_status(s, 9, out, 8, &n, &err),
			 -EINVAL);
	tacod_store_close(s);
	remove_dir();
}
END_TEST

START_TEST(test_events)
{
	tacod_store *s = open_fresh();
	tacod_event ev[TACOD_LIST_MAX];
	taco_err err = {{0}};
	int64_t seq;
	int n, more;

	add_job(s, "ja", "alice", TACOD_RUNNING, "f", 1);
	add_job(s, "jb", "alice", TACOD_RUNNING, "f", 2);
	for (int i = 1; i <= 10; i++) {
		char msg[32];
		snprintf(msg, sizeof(msg), "step %d", i);
		ck_assert_int_eq(
		    tacod_store_event_add(s, "ja", "info", "metrics", msg,
					  "{\"loss\":1.5}", &seq, &err),
		    0);
		ck_assert_int_eq(seq, i);
		if (i % 3 == 0) {
			ck_assert_int_eq(
			    tacod_store_event_add(s, "jb", "warn", "message",
						  msg, NULL, &seq, &err),
			    0);
			ck_assert_int_eq(seq, i / 3);
		}
	}
	ck_assert_int_eq(tacod_store_event_add(s, "nope", "info", "message",
					       "x", NULL, &seq, &err),
			 -ENOENT);
	ck_assert_int_eq(tacod_store_event_add(s, "ja", "debug", "message", "x",
					       NULL, &seq, &err),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "level"));
	ck_assert_int_eq(
	    tacod_store_event_add(s, "ja", "info", "", "x", NULL, &seq, &err),
	    -EINVAL);

	/* where a newest-first page starts: the last seq, 0 for none */
	ck_assert_int_eq(tacod_store_event_newest(s, "ja", &seq, &err), 0);
	ck_assert_int_eq(seq, 10);
	ck_assert_int_eq(tacod_store_event_newest(s, "jb", &seq, &err), 0);
	ck_assert_int_eq(seq, 3);
	ck_assert_int_eq(tacod_store_event_newest(s, "nope", &seq, &err), 0);
	ck_assert_int_eq(seq, 0);
	ck_assert_int_eq(
	    tacod_store_event_list(s, "ja", 0, 4, ev, &n, &more, &err), 0);
	ck_assert_int_eq(n, 4);
	ck_assert_int_eq(more, 1);
	for (int i = 0; i < n; i++) {
		ck_assert_int_eq(ev[i].seq, i + 1);
		ck_assert_str_eq(ev[i].job_id, "ja");
		ck_assert_str_eq(ev[i].level, "info");
		ck_assert_str_eq(ev[i].type, "metrics");
		ck_assert_str_eq(ev[i].data, "{\"loss\":1.5}");
		ck_assert(ev[i].created_at > 0);
		tacod_event_clear(&ev[i]);
	}
	ck_assert_int_eq(
	    tacod_store_event_list(s, "ja", 4, 100, ev, &n, &more, &err), 0);
	ck_assert_int_eq(n, 6);
	ck_assert_int_eq(more, 0);
	ck_assert_int_eq(ev[0].seq, 5);
	ck_assert_str_eq(ev[0].message, "step 5");
	ck_assert_int_eq(ev[5].seq, 10);
	for (int i = 0; i < n; i++)
		tacod_event_clear(&ev[i]);
	ck_assert_int_eq(
	    tacod_store_event_list(s, "ja", 4, 6, ev, &n, &more, &err), 0);
	ck_assert_int_eq(n, 6);
	ck_assert_int_eq(more, 0);
	for (int i = 0; i < n; i++)
		tacod_event_clear(&ev[i]);
	ck_assert_int_eq(
	    tacod_store_event_list(s, "ja", 10, 5, ev, &n, &more, &err), 0);
	ck_assert_int_eq(n, 0);
	ck_assert_int_eq(
	    tacod_store_event_list(s, "jb", 0, 0, ev, &n, &more, &err), 0);
	ck_assert_int_eq(n, 1);
	ck_assert_int_eq(more, 1);
	ck_assert_str_eq(ev[0].level, "warn");
	ck_assert_ptr_null(ev[0].data);
	tacod_event_clear(&ev[0]);
	ck_assert_int_eq(
	    tacod_store_event_list(s, "nope", 0, 5, ev, &n, &more, &err), 0);
	ck_assert_int_eq(n, 0);
	tacod_store_close(s);
	remove_dir();
}
END_TEST

START_TEST(test_checkpoints)
{
	tacod_store *s = open_fresh();
	tacod_checkpoint c, out[8];
	taco_err err = {{0}};
	int n, more;

	add_job(s, "j1", "alice", TACOD_RUNNING, "f", 1);
	memset(&c, 0, sizeof(c));
	snprintf(c.job_id, sizeof(c.job_id), "j1");
	for (int step = 100; step <= 500; step += 100) {
		snprintf(c.path, sizeof(c.path), "/state/jobs/j1/ckpt-%d",
			 step);
		c.step = step;
		c.created_at = step;
		c.metrics = step == 300 ? NULL : (char *)"{\"loss\":2}";
		ck_assert_int_eq(tacod_store_checkpoint_add(s, &c, &err), 0);
	}
	ck_assert_int_eq(tacod_store_checkpoint_list(s, "j1", INT64_MAX, 8, out,
						     &n, &more, &err),
			 0);
	ck_assert_int_eq(n, 5);
	ck_assert_int_eq(more, 0);
	for (int i = 0; i < n; i++) {
		ck_assert_int_eq(out[i].step, 100 * (5 - i));
		ck_assert_str_eq(out[i].job_id, "j1");
		if (out[i].step == 300)
			ck_assert_ptr_null(out[i].metrics);
		else
			ck_assert_str_eq(out[i].metrics, "{\"loss\":2}");
		free(out[i].metrics);
	}
	/* Pages of two, newest first, each below the last step seen. */
	ck_assert_int_eq(tacod_store_checkpoint_list(s, "j1", INT64_MAX, 2, out,
						     &n, &more, &err),
			 0);
	ck_assert_int_eq(n, 2);
	ck_assert_int_eq(more, 1);
	ck_assert_int_eq(out[0].step, 500);
	ck_assert_int_eq(out[1].step, 400);
	ck_assert_str_eq(out[0].path, "/state/jobs/j1/ckpt-500");
	free(out[0].metrics);
	free(out[1].metrics);
	ck_assert_int_eq(
	    tacod_store_checkpoint_list(s, "j1", 400, 2, out, &n, &more, &err),
	    0);
	ck_assert_int_eq(n, 2);
	ck_assert_int_eq(more, 1);
	ck_assert_int_eq(out[0].step, 300);
	ck_assert_int_eq(out[1].step, 200);
	free(out[0].metrics);
	free(out[1].metrics);
	/* the last page: exactly what is left, nothing more */
	ck_assert_int_eq(
	    tacod_store_checkpoint_list(s, "j1", 200, 1, out, &n, &more, &err),
	    0);
	ck_assert_int_eq(n, 1);
	ck_assert_int_eq(more, 0);
	ck_assert_int_eq(out[0].step, 100);
	free(out[0].metrics);
	/* a cursor that names no row still pages by step */
	ck_assert_int_eq(
	    tacod_store_checkpoint_list(s, "j1", 250, 8, out, &n, &more, &err),
	    0);
	ck_assert_int_eq(n, 2);
	ck_assert_int_eq(out[0].step, 200);
	for (int i = 0; i < n; i++)
		free(out[i].metrics);
	ck_assert_int_eq(
	    tacod_store_checkpoint_list(s, "j1", 100, 8, out, &n, &more, &err),
	    0);
	ck_assert_int_eq(n, 0);
	ck_assert_int_eq(more, 0);
	/* limits are clamped to [1, TACOD_LIST_MAX] */
	ck_assert_int_eq(tacod_store_checkpoint_list(s, "j1", INT64_MAX, 0, out,
						     &n, &more, &err),
			 0);
	ck_assert_int_eq(n, 1);
	ck_assert_int_eq(more, 1);
	free(out[0].metrics);
	/* The same step again replaces it. */
	c.step = 200;
	snprintf(c.path, sizeof(c.path), "/elsewhere");
	c.metrics = NULL;
	ck_assert_int_eq(tacod_store_checkpoint_add(s, &c, &err), 0);
	ck_assert_int_eq(tacod_store_checkpoint_delete(s, "j1", 100, &err), 0);
	ck_assert_int_eq(tacod_store_checkpoint_delete(s, "j1", 100, &err),
			 -ENOENT);
	ck_assert_int_eq(tacod_store_checkpoint_list(s, "j1", INT64_MAX, 8, out,
						     &n, &more, &err),
			 0);
	ck_assert_int_eq(n, 4);
	ck_assert_int_eq(out[3].step, 200);
	ck_assert_str_eq(out[3].path, "/elsewhere");
	ck_assert_ptr_null(out[3].metrics);
	for (int i = 0; i < n; i++)
		free(out[i].metrics);
	snprintf(c.job_id, sizeof(c.job_id), "nope");
	ck_assert_int_eq(tacod_store_checkpoint_add(s, &c, &err), -ENOENT);
	c.step = -1;
	snprintf(c.job_id, sizeof(c.job_id), "j1");
	ck_assert_int_eq(tacod_store_checkpoint_add(s, &c, &err), -EINVAL);
	ck_assert_int_eq(tacod_store_checkpoint_list(s, "nope", INT64_MAX, 8,
						     out, &n, &more, &err),
			 0);
	ck_assert_int_eq(n, 0);
	tacod_store_close(s);
	remove_dir();
}
END_TEST

/* slurm_jobs (store/slurm.h): a row per submitted job; the offset moves
 * only with the transaction around it. */
START_TEST(test_slurm_rows)
{
	tacod_store *s = open_fresh();
	tacod_slurm_row r, out[4];
	taco_err err = {{0}};
	int n;

	add_job(s, "j1", "alice", TACOD_QUEUED, "f", 1);
	add_job(s, "j2", "alice", TACOD_QUEUED, "f", 2);
	memset(&r, 0, sizeof(r));
	snprintf(r.job_id, sizeof(r.job_id), "j1");
	r.submitted_at = 10;
	ck_assert_int_eq(tacod_store_slurm_put(s, &r, &err), 0);
	r.slurm_id = 42;
	ck_assert_int_eq(tacod_store_slurm_put(s, &r, &err), 0);
	snprintf(r.job_id, sizeof(r.job_id), "j2");
	r.slurm_id = 43;
	r.submitted_at = 11;
	ck_assert_int_eq(tacod_store_slurm_put(s, &r, &err), 0);
	snprintf(r.job_id, sizeof(r.job_id), "nope");
	ck_assert_int_eq(tacod_store_slurm_put(s, &r, &err), -ENOENT);
	ck_assert_int_eq(tacod_store_slurm_offset(s, "j1", 100, &err), 0);
	/* rolled back with its transaction */
	ck_assert_int_eq(tacod_store_tx_begin(s, &err), 0);
	ck_assert_int_eq(tacod_store_slurm_offset(s, "j1", 200, &err), 0);
	ck_assert_int_lt(tacod_store_tx_end(s, -EIO, &err), 0);
	ck_assert_int_eq(tacod_store_slurm_get(s, "j1", &r, &err), 0);
	ck_assert_int_eq(r.slurm_id, 42);
	ck_assert_int_eq(r.events_offset, 100);
	ck_assert_int_eq(tacod_store_slurm_list(s, out, 4, &n, &err), 0);
	ck_assert_int_eq(n, 2);
	ck_assert_str_eq(out[0].job_id, "j1");
	ck_assert_str_eq(out[1].job_id, "j2");
	ck_assert_int_eq(out[1].slurm_id, 43);
	ck_assert_int_eq(tacod_store_slurm_delete(s, "j1", &err), 0);
	ck_assert_int_eq(tacod_store_slurm_get(s, "j1", &r, &err), -ENOENT);
	ck_assert_int_eq(tacod_store_slurm_offset(s, "j1", 1, &err), -ENOENT);
	ck_assert_int_eq(tacod_store_slurm_list(s, out, 4, &n, &err), 0);
	ck_assert_int_eq(n, 1);
	tacod_store_close(s);
}
END_TEST

START_TEST(test_idempotency)
{
	tacod_store *s = open_fresh();
	taco_err err = {{0}};
	char *body;
	int status;
	int64_t gone;

	ck_assert_int_eq(
	    tacod_store_idem_get(s, "alice", "k1", "h1", &status, &body, &err),
	    -ENOENT);
	ck_assert_ptr_null(body);
	ck_assert_int_eq(tacod_store_idem_put(s, "alice", "k1", "h1", 201,
					      "{\"id\":\"ftjob-1\"}", &err),
			 0);
	ck_assert_int_eq(
	    tacod_store_idem_get(s, "alice", "k1", "h1", &status, &body, &err),
	    0);
	ck_assert_int_eq(status, 201);
	ck_assert_str_eq(body, "{\"id\":\"ftjob-1\"}");
	free(body);
	/* The same key with another request. */
	ck_assert_int_eq(
	    tacod_store_idem_get(s, "alice", "k1", "h2", &status, &body, &err),
	    -EEXIST);
	ck_assert_ptr_null(body);
	/* The first response stays. */
	ck_assert_int_eq(
	    tacod_store_idem_put(s, "alice", "k1", "h1", 500, "{}", &err),
	    -EEXIST);
	ck_assert_int_eq(
	    tacod_store_idem_get(s, "alice", "k1", "h1", &status, &body, &err),
	    0);
	ck_assert_int_eq(status, 201);
	free(body);
	/* Keys are per user. */
	ck_assert_int_eq(
	    tacod_store_idem_get(s, "bob", "k1", "h1", &status, &body, &err),
	    -ENOENT);
	ck_assert_int_eq(
	    tacod_store_idem_put(s, "bob", "k1", "h9", 400, "{}", &err), 0);
	ck_assert_int_eq(
	    tacod_store_idem_put(s, "bob", "k2", "h9", 99, "{}", &err),
	    -EINVAL);
	ck_assert_int_eq(
	    tacod_store_idem_put(s, NULL, "k2", "h9", 200, "{}", &err),
	    -EINVAL);
	/* Purging: everything was stored now, so "before the epoch" keeps
	 * it and "before a minute from now" drops it. */
	ck_assert_int_eq(tacod_store_idem_purge(s, 0, &gone, &err), 0);
	ck_assert_int_eq(gone, 0);
	ck_assert_int_eq(
	    tacod_store_idem_purge(s, (int64_t)time(NULL) + 60, &gone, &err),
	    0);
	ck_assert_int_eq(gone, 2);
	ck_assert_int_eq(
	    tacod_store_idem_get(s, "alice", "k1", "h1", &status, &body, &err),
	    -ENOENT);
	tacod_store_close(s);
	remove_dir();
}
END_TEST

/* err names the field of a rejected value. */
#define ck_rejects(call, field)                                                \
	do {                                                                   \
		err.msg[0] = 0;                                                \
		ck_assert_int_eq((call), -EINVAL);                             \
		ck_assert_msg(strstr(err.msg, field) != NULL,                  \
			      "'%s' does not name %s", err.msg, field);        \
	} while (0)

START_TEST(test_limits)
{
	tacod_store *s = open_fresh();
	tacod_file f, g;
	tacod_job j, jg;
	tacod_event ev[2];
	taco_err err = {{0}};
	char *big = malloc((size_t)TACOD_TEXT_MAX + 2);
	char id63[64], id64[65], key[TACOD_IDEM_KEY_MAX + 1];
	char *body;
	int64_t seq;
	int st, n, more;

	memset(id63, 'a', 63);
	id63[63] = 0;
	memset(id64, 'b', 64);
	id64[64] = 0;

	/* Fixed fields filled to the brim (no NUL) are refused. */
	f = make_file("f1", "alice", 1);
	memset(f.id, 'x', sizeof(f.id));
	ck_rejects(tacod_store_file_add(s, &f, &err), "id");
	f = make_file("f1", "alice", 1);
	memset(f.user, 'x', sizeof(f.user));
	ck_rejects(tacod_store_file_add(s, &f, &err), "user");
	f = make_file("f1", "alice", 1);
	memset(f.filename, 'x', sizeof(f.filename));
	ck_rejects(tacod_store_file_add(s, &f, &err), "filename");
	f = make_file("f1", "alice", 1);
	memset(f.path, 'x', sizeof(f.path));
	ck_rejects(tacod_store_file_add(s, &f, &err), "path");
	f = make_file("f1", "alice", 1);
	f.sha256[3] = 'G';
	ck_rejects(tacod_store_file_add(s, &f, &err), "sha256");
	f = make_file("f1", "", 1);
	ck_rejects(tacod_store_file_add(s, &f, &err), "user");
	f = make_file("f1", "alice", 1);
	f.bytes = -1;
	ck_rejects(tacod_store_file_add(s, &f, &err), "bytes");
	/* The longest that fits is fine. */
	f = make_file(id63, "alice", 1);
	memset(f.filename, 'n', sizeof(f.filename) - 1);
	memset(f.path, 'p', sizeof(f.path) - 1);
	ck_assert_int_eq(tacod_store_file_add(s, &f, &err), 0);
	ck_assert_int_eq(tacod_store_file_get(s, "alice", id63, &g, &err), 0);
	ck_assert_uint_eq(strlen(g.filename), sizeof(g.filename) - 1);
	ck_assert_uint_eq(strlen(g.path), sizeof(g.path) - 1);
	ck_rejects(tacod_store_file_get(s, "alice", id64, &g, &err), "id");
	ck_rejects(tacod_store_file_get(s, id64, "f1", &g, &err), "user");
	ck_rejects(tacod_store_file_delete(s, "alice", id64, &err), "id");
	{
		tacod_file *page = calloc(1, sizeof(*page));
		ck_rejects(tacod_store_file_list(s, "alice", NULL, 0, id64, 1,
						 page, &n, &more, &err),
			   "after");
		free(page);
	}

	j = make_job("j1", "alice", TACOD_QUEUED, "f1", 1);
	memset(j.model, 'm', sizeof(j.model));
	ck_rejects(tacod_store_job_add(s, &j, &err), "model");
	j = make_job("j1", "alice", TACOD_QUEUED, "f1", 1);
	memset(j.suffix, 's', sizeof(j.suffix));
	ck_rejects(tacod_store_job_add(s, &j, &err), "suffix");
	j = make_job("j1", "alice", TACOD_QUEUED, "f1", 1);
	memset(j.output_dir, 'o', sizeof(j.output_dir));
	ck_rejects(tacod_store_job_add(s, &j, &err), "output_dir");
	j = make_job("j1", "alice", TACOD_QUEUED, "f1", 1);
	memset(j.validation_file, 'v', sizeof(j.validation_file));
	ck_rejects(tacod_store_job_add(s, &j, &err), "validation_file");
	j = make_job("j1", "alice", TACOD_QUEUED, "f1", 1);
	memset(j.training_file, 't', sizeof(j.training_file));
	ck_rejects(tacod_store_job_add(s, &j, &err), "training_file");
	j = make_job("j1", "alice", 17, "f1", 1);
	ck_rejects(tacod_store_job_add(s, &j, &err), "status");
	j = make_job("j1", "alice", TACOD_QUEUED, "f1", 1);
	memset(big, '"', (size_t)TACOD_TEXT_MAX + 1);
	big[TACOD_TEXT_MAX + 1] = 0;
	j.request = big;
	ck_rejects(tacod_store_job_add(s, &j, &err), "request");
	j.request = NULL;
	j.error = big;
	ck_rejects(tacod_store_job_add(s, &j, &err), "error");
	/* 1 MiB exactly is accepted and comes back whole. */
	big[TACOD_TEXT_MAX] = 0;
	j.error = NULL;
	j.request = big;
	ck_assert_int_eq(tacod_store_job_add(s, &j, &err), 0);
	ck_assert_int_eq(tacod_store_job_get(s, "alice", "j1", &jg, &err), 0);
	ck_assert_uint_eq(strlen(jg.request), TACOD_TEXT_MAX);
	tacod_job_clear(&jg);
	memset(j.fine_tuned_model, 'x', sizeof(j.fine_tuned_model));
	ck_rejects(tacod_store_job_update(s, &j, &err), "fine_tuned_model");
	ck_rejects(tacod_store_job_transition(s, id64, TACOD_QUEUED,
					      TACOD_RUNNING, &err),
		   "id");

	big[TACOD_TEXT_MAX] = 'x';
	ck_rejects(tacod_store_event_add(s, "j1", "info", "message", big, NULL,
					 &seq, &err),
		   "message");
	ck_rejects(tacod_store_event_add(s, "j1", "info", "message", "m", big,
					 &seq, &err),
		   "data");
	memset(key, 't', sizeof(ev[0].type));
	key[sizeof(ev[0].type)] = 0;
	ck_rejects(
	    tacod_store_event_add(s, "j1", "info", key, "m", NULL, &seq, &err),
	    "type");
	key[sizeof(ev[0].type) - 1] = 0;
	ck_assert_int_eq(
	    tacod_store_event_add(s, "j1", "info", key, "m", NULL, &seq, &err),
	    0);
	ck_rejects(tacod_store_event_add(s, id64, "info", "message", "m", NULL,
					 &seq, &err),
		   "job_id");
	ck_rejects(tacod_store_event_list(s, id64, 0, 1, ev, &n, &more, &err),
		   "job_id");

	memset(key, 'k', TACOD_IDEM_KEY_MAX);
	key[TACOD_IDEM_KEY_MAX] = 0;
	ck_rejects(tacod_store_idem_put(s, "alice", key, "h", 200, "{}", &err),
		   "key");
	ck_rejects(tacod_store_idem_get(s, "alice", key, "h", &st, &body, &err),
		   "key");
	ck_rejects(tacod_store_idem_put(s, "alice", "k", "h", 200, big, &err),
		   "body");
	key[TACOD_IDEM_KEY_MAX - 1] = 0;
	ck_assert_int_eq(
	    tacod_store_idem_put(s, "alice", key, "h", 200, "{}", &err), 0);

	/* Nothing refused was stored. */
	{
		tacod_file *page = calloc(TACOD_LIST_MAX, sizeof(*page));
		ck_assert_int_eq(tacod_store_file_list(s, NULL, NULL, 0, "",
						       100, page, &n, &more,
						       &err),
				 0);
		ck_assert_int_eq(n, 1);
		free(page);
	}
	ck_assert_int_eq(
	    tacod_store_event_list(s, "j1", 0, 2, ev, &n, &more, &err), 0);
	ck_assert_int_eq(n, 1);
	ck_assert_int_eq(ev[0].seq, 1);
	tacod_event_clear(&ev[0]);
	free(big);
	tacod_store_close(s);
	remove_dir();
}
END_TEST

START_TEST(test_reopen)
{
	tacod_store *s = open_fresh();
	tacod_checkpoint c, cs[4];
	tacod_event ev[4];
	tacod_file f;
	tacod_job j;
	taco_err err = {{0}};
	sqlite3 *raw;
	char *body;
	int64_t seq;
	int n, more, st;

	add_file(s, "f1", "alice", 10);
	add_job(s, "j1", "alice", TACOD_QUEUED, "f1", 11);
	ck_assert_int_eq(tacod_store_job_transition(s, "j1", TACOD_QUEUED,
						    TACOD_RUNNING, &err),
			 0);
	ck_assert_int_eq(tacod_store_event_add(s, "j1", "info", "status",
					       "running", NULL, &seq, &err),
			 0);
	memset(&c, 0, sizeof(c));
	snprintf(c.job_id, sizeof(c.job_id), "j1");
	snprintf(c.path, sizeof(c.path), "/ck/10");
	c.step = 10;
	ck_assert_int_eq(tacod_store_checkpoint_add(s, &c, &err), 0);
	ck_assert_int_eq(
	    tacod_store_idem_put(s, "alice", "k", "h", 200, "{\"a\":1}", &err),
	    0);
	tacod_store_close(s);

	for (int round = 0; round < 2; round++) {
		s = reopen();
		ck_assert_int_eq(
		    tacod_store_file_get(s, "alice", "f1", &f, &err), 0);
		ck_assert_int_eq(f.created_at, 10);
		ck_assert_int_eq(
		    tacod_store_job_get(s, "alice", "j1", &j, &err), 0);
		ck_assert_int_eq(j.status, TACOD_RUNNING);
		ck_assert_int_eq(j.queue_seq, 1);
		tacod_job_clear(&j);
		ck_assert_int_eq(
		    tacod_store_event_list(s, "j1", 0, 4, ev, &n, &more, &err),
		    0);
		ck_assert_int_eq(n, 1 + round);
		ck_assert_str_eq(ev[0].message, "running");
		for (int i = 0; i < n; i++)
			tacod_event_clear(&ev[i]);
		ck_assert_int_eq(tacod_store_checkpoint_list(s, "j1", INT64_MAX,
							     4, cs, &n, &more,
							     &err),
				 0);
		ck_assert_int_eq(n, 1);
		ck_assert_str_eq(cs[0].path, "/ck/10");
		ck_assert_int_eq(tacod_store_idem_get(s, "alice", "k", "h", &st,
						      &body, &err),
				 0);
		ck_assert_str_eq(body, "{\"a\":1}");
		free(body);
		/* Sequences continue where they were. */
		ck_assert_int_eq(add_job(s, round ? "j3" : "j2", "bob",
					 TACOD_QUEUED, "f1", 12),
				 2 + round);
		ck_assert_int_eq(tacod_store_event_add(s, "j1", "info",
						       "message", "again", NULL,
						       &seq, &err),
				 0);
		ck_assert_int_eq(seq, 2 + round);
		ck_assert_int_eq(tacod_store_integrity_check(s, &err), 0);
		tacod_store_close(s);
	}

	/* One schema_version row, journal in WAL. */
	ck_assert_int_eq(sqlite3_open(db, &raw), SQLITE_OK);
	{
		sqlite3_stmt *q;
		ck_assert_int_eq(sqlite3_prepare_v2(raw,
						    "SELECT count(*), "
						    "max(version) FROM "
						    "schema_version",
						    -1, &q, NULL),
				 SQLITE_OK);
		ck_assert_int_eq(sqlite3_step(q), SQLITE_ROW);
		ck_assert_int_eq(sqlite3_column_int(q, 0), 1);
		ck_assert_int_eq(sqlite3_column_int(q, 1), 4);
		sqlite3_finalize(q);
		ck_assert_int_eq(sqlite3_prepare_v2(raw, "PRAGMA journal_mode",
						    -1, &q, NULL),
				 SQLITE_OK);
		ck_assert_int_eq(sqlite3_step(q), SQLITE_ROW);
		ck_assert_str_eq((const char *)sqlite3_column_text(q, 0),
				 "wal");
		sqlite3_finalize(q);
	}
	/* A database from a newer tacod is refused, not changed. */
	ck_assert_int_eq(sqlite3_exec(raw,
				      "UPDATE schema_version SET version = 99",
				      NULL, NULL, NULL),
			 SQLITE_OK);
	sqlite3_close(raw);
	ck_assert_int_eq(tacod_store_open(db, &s, &err), -ENOTSUP);
	ck_assert_ptr_null(s);
	ck_assert_ptr_nonnull(strstr(err.msg, "newer"));
	remove_dir();
}
END_TEST

/* A version 3 store (jobs without model_deleted_at and result_file) gains
 * both columns on open, its rows kept, and the new fields round-trip. */
START_TEST(test_schema_v4_columns)
{
	tacod_store *s = open_fresh();
	taco_err err = {{0}};
	tacod_job j = {0};
	sqlite3 *raw;

	add_job(s, "j1", "alice", TACOD_SUCCEEDED, "f1", 10);
	tacod_store_close(s);
	ck_assert_int_eq(sqlite3_open(db, &raw), SQLITE_OK);
	ck_assert_int_eq(
	    sqlite3_exec(raw,
			 "ALTER TABLE jobs DROP COLUMN "
			 "model_deleted_at;"
			 "ALTER TABLE jobs DROP COLUMN result_file;"
			 "UPDATE schema_version SET version = 3",
			 NULL, NULL, NULL),
	    SQLITE_OK);
	sqlite3_close(raw);
	ck_assert_msg(tacod_store_open(db, &s, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(tacod_store_job_get(s, NULL, "j1", &j, &err), 0);
	ck_assert_int_eq(j.model_deleted_at, 0);
	ck_assert_str_eq(j.result_file, "");
	j.model_deleted_at = 77;
	snprintf(j.result_file, sizeof(j.result_file), "file-r");
	ck_assert_int_eq(tacod_store_job_update(s, &j, &err), 0);
	tacod_job_clear(&j);
	ck_assert_int_eq(tacod_store_job_get(s, NULL, "j1", &j, &err), 0);
	ck_assert_int_eq(j.model_deleted_at, 77);
	ck_assert_str_eq(j.result_file, "file-r");
	tacod_job_clear(&j);
	ck_assert_int_eq(tacod_store_integrity_check(s, &err), 0);
	tacod_store_close(s);
	/* opened again: nothing to add, nothing lost */
	ck_assert_msg(tacod_store_open(db, &s, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(tacod_store_job_get(s, NULL, "j1", &j, &err), 0);
	ck_assert_int_eq(j.model_deleted_at, 77);
	tacod_job_clear(&j);
	tacod_store_close(s);
	remove_dir();
}
END_TEST

START_TEST(test_open_errors)
{
	tacod_store *s = open_fresh();
	taco_err err = {{0}};
	char junk[400];
	FILE *fp;

	tacod_store_close(s);
	snprintf(junk, sizeof(junk), "%s/junk.db", dir);
	fp = fopen(junk, "w");
	ck_assert_ptr_nonnull(fp);
	for (int i = 0; i < 200; i++)
		fputs("this is not a database at all, just text\n", fp);
	fclose(fp);
	ck_assert_int_lt(tacod_store_open(junk, &s, &err), 0);
	ck_assert_ptr_null(s);
	ck_assert_ptr_nonnull(strstr(err.msg, "junk.db"));
	unlink(junk);
	snprintf(junk, sizeof(junk), "%s/no/such/dir/x.db", dir);
	ck_assert_int_lt(tacod_store_open(junk, &s, &err), 0);
	ck_assert_ptr_null(s);
	ck_assert_int_eq(tacod_store_open("", &s, &err), -EINVAL);
	remove_dir();
}
END_TEST

/* ---- durability: a writer killed with SIGKILL between commits ---- */

static void say(int fd, const char *fmt, long long a, long long b)
{
	char line[64];
	int n = snprintf(line, sizeof(line), fmt, a, b);

	if (write(fd, line, (size_t)n) != n)
		_exit(3);
}

/* The child: opens the store, adds a job and then events, checkpoints and
 * progress updates forever; after each commit one line on fd. */
static void writer(int round, int fd)
{
	tacod_store *s;
	taco_err err;
	char id[32], msg[64], data[1600];
	tacod_job j;
	tacod_checkpoint c;

	if (tacod_store_open(db, &s, &err) < 0)
		_exit(2);
	snprintf(id, sizeof(id), "ftjob-dur-%d", round);
	j = make_job(id, "alice", TACOD_RUNNING, "f", round);
	if (tacod_store_job_add(s, &j, &err) < 0)
		_exit(2);
	say(fd, "J %lld %lld\n", round, 0);
	memset(data, 'd', sizeof(data) - 1);
	data[sizeof(data) - 1] = 0;
	memcpy(data, "\"", 1);
	data[sizeof(data) - 2] = '"';
	memset(&c, 0, sizeof(c));
	snprintf(c.job_id, sizeof(c.job_id), "%s", id);
	for (long long i = 1;; i++) {
		int64_t seq;
		snprintf(msg, sizeof(msg), "round %d event %lld", round, i);
		if (tacod_store_event_add(s, id, "info", "metrics", msg, data,
					  &seq, &err) < 0 ||
		    seq != i)
			_exit(2);
		say(fd, "E %lld %lld\n", round, i);
		if (i % 5 == 0) {
			c.step = i;
			snprintf(c.path, sizeof(c.path), "/ck/%lld", i);
			if (tacod_store_checkpoint_add(s, &c, &err) < 0)
				_exit(2);
			say(fd, "C %lld %lld\n", round, i);
		}
		if (i % 7 == 0) {
			j.trained_tokens = i;
			if (tacod_store_job_update(s, &j, &err) < 0)
				_exit(2);
			say(fd, "T %lld %lld\n", round, i);
		}
	}
}

START_TEST(test_kill9_durability)
{
	/* Markers to wait for before the kill, one round each. */
	static const int kill_after[] = {3, 60, 250};
	tacod_store *s = open_fresh();
	taco_err err = {{0}};

	add_file(s, "f", "alice", 1);
	tacod_store_close(s);
	for (int round = 0; round < 3; round++) {
		long long events = 0, ckpt = 0, tokens = 0;
		int job = 0, lines = 0, fds[2], status;
		char line[128];
		pid_t pid;
		FILE *in;

		ck_assert_int_eq(pipe(fds), 0);
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			close(fds[0]);
			writer(round, fds[1]);
			_exit(0);
		}
		close(fds[1]);
		in = fdopen(fds[0], "r");
		ck_assert_ptr_nonnull(in);
		while (fgets(line, sizeof(line), in)) {
			char kind;
			long long r, v;

			ck_assert_int_eq(
			    sscanf(line, "%c %lld %lld", &kind, &r, &v), 3);
			ck_assert_int_eq(r, round);
			if (kind == 'J')
				job = 1;
			else if (kind == 'E')
				events = v;
			else if (kind == 'C')
				ckpt = v;
			else if (kind == 'T')
				tokens = v;
			if (++lines == kill_after[round])
				kill(pid, SIGKILL); /* mid-way; read the rest */
		}
		fclose(in);
		ck_assert_int_eq(waitpid(pid, &status, 0), pid);
		ck_assert_msg(WIFSIGNALED(status) &&
				  WTERMSIG(status) == SIGKILL,
			      "writer ended with status %d", status);
		ck_assert(job);

		/* Everything acknowledged is there, in order. */
		s = reopen();
		ck_assert_msg(tacod_store_integrity_check(s, &err) == 0, "%s",
			      err.msg);
		{
			char id[32];
			tacod_job j;
			tacod_event ev[TACOD_LIST_MAX];
			tacod_checkpoint cs[64];
			int64_t after = 0, seen = 0;
			int n, more;

			snprintf(id, sizeof(id), "ftjob-dur-%d", round);
			ck_assert_int_eq(
			    tacod_store_job_get(s, "alice", id, &j, &err), 0);
			ck_assert_int_ge(j.trained_tokens, tokens);
			tacod_job_clear(&j);
			do {
				ck_assert_int_eq(
				    tacod_store_event_list(s, id, after, 100,
							   ev, &n, &more, &err),
				    0);
				for (int i = 0; i < n; i++) {
					char msg[64];
					ck_assert_int_eq(ev[i].seq, ++seen);
					snprintf(msg, sizeof(msg),
						 "round %d event %lld", round,
						 (long long)seen);
					ck_assert_str_eq(ev[i].message, msg);
					ck_assert_uint_eq(strlen(ev[i].data),
							  1599);
					after = ev[i].seq;
					tacod_event_clear(&ev[i]);
				}
			} while (more);
			/* At most the one commit that beat its marker. */
			ck_assert_int_ge(seen, events);
			ck_assert_int_le(seen, events + 1);
			ck_assert_int_eq(
			    tacod_store_checkpoint_list(s, id, INT64_MAX, 64,
							cs, &n, &more, &err),
			    0);
			/* Steps ckpt at least, ..., 10, 5 (the latest 64). */
			ck_assert_int_ge(n, ckpt / 5 < 64 ? ckpt / 5 : 64);
			if (ckpt > 0)
				ck_assert_int_ge(cs[0].step, ckpt);
			for (int i = 1; i < n; i++)
				ck_assert_int_eq(cs[i].step,
						 cs[i - 1].step - 5);
			for (int i = 0; i < n; i++)
				free(cs[i].metrics);
		}
		tacod_store_close(s);
	}
	remove_dir();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("store");
	TCase *tc = tcase_create("store");

	/* fsync on every commit: slow disks make the kill -9 test slow. */
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_ids_and_names);
	tcase_add_test(tc, test_files_add_get);
	tcase_add_test(tc, test_files_list_pagination);
	tcase_add_test(tc, test_files_list_order_purpose);
	tcase_add_test(tc, test_ownership);
	tcase_add_test(tc, test_file_delete_in_use);
	tcase_add_test(tc, test_jobs_add_get_update);
	tcase_add_test(tc, test_job_transition);
	tcase_add_test(tc, test_job_started);
	tcase_add_test(tc, test_by_status);
	tcase_add_test(tc, test_metrics_and_result_file);
	tcase_add_test(tc, test_events);
	tcase_add_test(tc, test_checkpoints);
	tcase_add_test(tc, test_idempotency);
	tcase_add_test(tc, test_slurm_rows);
	tcase_add_test(tc, test_limits);
	tcase_add_test(tc, test_reopen);
	tcase_add_test(tc, test_schema_v4_columns);
	tcase_add_test(tc, test_open_errors);
	tcase_add_test(tc, test_kill9_durability);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
