/* test_job.c: JOB.json validation and learning-rate schedules. */
#include <check.h>

#include "testutil.h"
#include <math.h>
#include <string.h>

#include "job/job.h"

static int parse(const char *json, taco_job *job, taco_job_problems *p)
{
	return taco_job_parse(json, strlen(json), "/jobs", job, p);
}

static int has(const taco_job_problems *p, const char *fragment)
{
	for (int i = 0; i < p->n && i < 64; i++)
		if (strstr(p->msg[i], fragment))
			return 1;
	return 0;
}

START_TEST(test_full_job)
{
	const char *j =
	    "{\"model\":\"m\",\"train\":\"/d/t.jsonl\",\"validation\":"
	    "\"v.jsonl\",\"output_dir\":\"out\",\"steps\":300,"
	    "\"batch_size\":2,\"seq_len\":128,\"grad_accum\":4,\"lr\":2e-4,"
	    "\"schedule\":\"cosine\",\"warmup_steps\":10,\"min_lr_ratio\":"
	    "0.1,\"optimizer\":\"taco\",\"taco\":{\"k\":4,\"beta\":0.5,"
	    "\"weight_decay\":0.01,\"rounding\":\"nearest\"},\"adamw\":{"
	    "\"beta1\":0.8,\"beta2\":0.99,\"eps\":1e-6,\"weight_decay\":0.1}"
	    ",\"freeze\":[\"model.embed_tokens\"],\"seed\":7,\"eval_every\":"
	    "50,\"checkpoint_every\":100,\"keep_checkpoints\":3,"
	    "\"export_shard_bytes\":1048576,\"log_every\":5}";
	taco_job job;
	taco_job_problems p;

	ck_assert_int_eq(parse(j, &job, &p), 0);
	ck_assert_str_eq(job.model, "/jobs/m");
	ck_assert_str_eq(job.train, "/d/t.jsonl");
	ck_assert_str_eq(job.validation, "/jobs/v.jsonl");
	ck_assert_int_eq(job.steps, 300);
	ck_assert_int_eq(job.grad_accum, 4);
	ck_assert_int_eq(job.schedule, TACO_SCHED_COSINE);
	ck_assert_int_eq(job.optim.k, 4);
	ck_assert_int_eq(job.optim.stochastic, 0);
	ck_assert_float_eq(job.optim.adam_eps, 1e-6f);
	ck_assert_int_eq(job.n_freeze, 1);
	ck_assert_str_eq(job.freeze[0], "model.embed_tokens");
	ck_assert_uint_eq(job.optim.seed, 7);
	ck_assert_int_eq(job.keep_checkpoints, 3);
	taco_job_free(&job);
}
END_TEST

START_TEST(test_defaults)
{
	taco_job job;
	taco_job_problems p;

	ck_assert_int_eq(parse("{\"model\":\"m\",\"train\":\"t\","
			       "\"output_dir\":\"o\",\"epochs\":1}",
			       &job, &p),
			 0);
	ck_assert_int_eq(job.batch_size, 4);
	ck_assert_int_eq(job.seq_len, 1024);
	ck_assert_int_eq(job.grad_accum, 1);
	ck_assert_int_eq(job.optim.k, 16);
	ck_assert_float_eq(job.optim.beta, 0.9f);
	ck_assert_int_eq(job.optim.stochastic, 1);
	ck_assert_int_eq(job.optim.all_adamw, 0);
	ck_assert_int_eq(job.schedule, TACO_SCHED_LINEAR);
	taco_job_free(&job);
}
END_TEST

/* Every problem is reported at once, each naming its option. */
START_TEST(test_all_problems_together)
{
	taco_job job;
	taco_job_problems p;
	int r = parse("{\"train\":3,\"output_dir\":\"o\",\"stepz\":5,"
		      "\"batch_size\":0,\"lr\":-1,\"schedule\":\"exp\","
		      "\"taco\":{\"k\":17,\"color\":1},\"freeze\":\"x\","
		      "\"seq_len\":2.5}",
		      &job, &p);

	ck_assert_int_eq(r, -EINVAL);
	ck_assert(has(&p, "stepz: unknown option"));
	ck_assert(has(&p, "model: required"));
	ck_assert(has(&p, "train: must be a non-empty string"));
	ck_assert(has(&p, "steps: set steps or epochs"));
	ck_assert(has(&p, "batch_size: must be an integer"));
	ck_assert(has(&p, "lr: must be a number"));
	ck_assert(has(&p, "schedule: must be one of constant, linear, cosine"));
	ck_assert(has(&p, "taco.k: must be an integer in [1, 16]"));
	ck_assert(has(&p, "taco.color: unknown option"));
	ck_assert(has(&p, "freeze: must be an array"));
	ck_assert(has(&p, "seq_len: must be an integer"));
	ck_assert_int_eq(p.n, 11);
	taco_job_free(&job);
}
END_TEST

START_TEST(test_bad_json)
{
	taco_job job;
	taco_job_problems p;

	ck_assert_int_eq(parse("{\"model\": }", &job, &p), -EINVAL);
	ck_assert(has(&p, "line 1"));
	ck_assert_int_eq(parse("[1]", &job, &p), -EINVAL);
	ck_assert(has(&p, "JSON object"));
	ck_assert_int_eq(parse("{\"steps\":1,\"steps\":2}", &job, &p), -EINVAL);
	ck_assert(has(&p, "duplicate"));
}
END_TEST

START_TEST(test_schedules)
{
	taco_job job;
	taco_job_problems p;

	parse("{\"model\":\"m\",\"train\":\"t\",\"output_dir\":\"o\","
	      "\"steps\":110,\"lr\":1.0,\"warmup_steps\":10,\"schedule\":"
	      "\"linear\"}",
	      &job, &p);
	ck_assert_double_eq_tol(taco_job_lr(&job, 1, 110), 0.1, 1e-12);
	ck_assert_double_eq_tol(taco_job_lr(&job, 10, 110), 1.0, 1e-12);
	ck_assert_double_eq_tol(taco_job_lr(&job, 11, 110), 1.0, 1e-12);
	ck_assert_double_eq_tol(taco_job_lr(&job, 61, 110), 0.5, 1e-12);
	ck_assert_double_eq_tol(taco_job_lr(&job, 110, 110), 0.01, 1e-12);
	job.schedule = TACO_SCHED_COSINE;
	job.min_lr_ratio = 0.2;
	ck_assert_double_eq_tol(taco_job_lr(&job, 11, 110), 1.0, 1e-12);
	ck_assert_double_eq_tol(taco_job_lr(&job, 61, 110), 0.6, 1e-12);
	job.schedule = TACO_SCHED_CONSTANT;
	ck_assert_double_eq_tol(taco_job_lr(&job, 100, 110), 1.0, 1e-12);
	taco_job_free(&job);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("job");
	TCase *tc = tcase_create("job");

	tcase_add_test(tc, test_full_job);
	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_all_problems_together);
	tcase_add_test(tc, test_bad_json);
	tcase_add_test(tc, test_schedules);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
