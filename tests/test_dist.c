/* test_dist.c: the pieces of data parallel that one process can check
 * (engine/train/dist.c, kernels/comm_loader.c), against a stand-in comm
 * of two ranks: the sink hands the inner sink each part summed and
 * contiguous; the weights' check fails, naming the rank, when a rank's
 * digest differs; a comm that times out is an error naming the wait; the
 * launcher's environment gives the world. The ranks themselves, under
 * mpirun, are tests/dist_mpi.sh's. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/model_work.h"
#include "testutil.h"
#include "tk_comm.h"
#include "train/dist.h"

/* The stand-in: rank 0 of two, whose other rank holds `other` times each
 * value, or a digest `skew` apart; -ETIMEDOUT when `timeout`. */
static float other = 2.0f;
static uint64_t skew;
static int timeout, sums;

static int fake_sum_f32(tk_comm *c, float *buf, size_t n)
{
	(void)c;
	sums++;
	if (timeout)
		return -ETIMEDOUT;
	for (size_t i = 0; i < n; i++)
		buf[i] += other * buf[i];
	return 0;
}

static int fake_sum_f64(tk_comm *c, double *buf, size_t n)
{
	(void)c;
	if (timeout)
		return -ETIMEDOUT;
	for (size_t i = 0; i < n; i++)
		buf[i] += (double)other * buf[i];
	return 0;
}

static int fake_gather(tk_comm *c, uint64_t mine, uint64_t *all)
{
	(void)c;
	all[0] = mine;
	all[1] = mine + skew;
	return 0;
}

static tk_comm fake = {.rank = 0,
		       .size = 2,
		       .timeout_s = 600,
		       .sum_f32 = fake_sum_f32,
		       .sum_f64 = fake_sum_f64,
		       .gather_u64 = fake_gather};

static taco_dist two_ranks(void)
{
	taco_dist d;

	memset(&d, 0, sizeof(d));
	d.comm = &fake;
	d.size = 2;
	return d;
}

/* what the inner sink got */
static float got[64];
static int got_ld, got_rows, got_cols, got_parts;

static int inner_part(void *ctx, taco_model *m, const taco_grad_part *p)
{
	(void)ctx, (void)m;
	got_ld = p->ld;
	got_rows = p->rows;
	got_cols = p->cols;
	for (int i = 0; i < p->rows; i++)
		memcpy(got + i * p->cols, p->g + (size_t)i * p->ld,
		       (size_t)p->cols * sizeof(float));
	got_parts++;
	return 0;
}

START_TEST(test_sink_sums_parts)
{
	taco_dist d = two_ranks();
	taco_grad_sink inner = {inner_part, NULL, NULL, NULL, NULL};
	const taco_grad_sink *s = taco_dist_sink(&d, &inner);
	/* a 3 x 2 block of a row-major tensor of 4 columns (ld 4) */
	float g[12] = {1, 2, -1, -1, 3, 4, -1, -1, 5, 6, -1, -1};
	taco_grad_part p = {.tensor = 0,
			    .kind = TACO_PART_COLS,
			    .g = g,
			    .ld = 4,
			    .rows = 3,
			    .cols = 2};
	/* a model whose step buffers hold a comm block of 6 floats */
	float block[6];
	taco_work w = {.comm = block};
	taco_model m = {.work = &w};

	w.s.gblock = 6;
	other = 2.0f;
	timeout = 0;
	ck_assert_ptr_ne(s, &inner);
	ck_assert_int_eq(s->part(s->ctx, &m, &p), 0);
	ck_assert_int_eq(got_parts, 1);
	ck_assert_int_eq(got_ld, 2); /* contiguous */
	ck_assert_int_eq(got_rows, 3);
	ck_assert_int_eq(got_cols, 2);
	for (int i = 0; i < 6; i++)
		ck_assert_float_eq(got[i], 3.0f * (float)(i + 1));
	/* the caller's gradient is left as it was */
	ck_assert_float_eq(g[4], 3.0f);
	/* one rank: the inner sink itself, no sums */
	d.size = 1;
	ck_assert_ptr_eq(taco_dist_sink(&d, &inner), &inner);
	d.size = 2;
	timeout = 1;
	ck_assert_int_eq(s->part(s->ctx, &m, &p), -ETIMEDOUT);
	timeout = 0;
	/* a part larger than the block (never made: parts are cut from
	 * one), or no block: refused, not written past */
	w.s.gblock = 5;
	ck_assert_int_eq(s->part(s->ctx, &m, &p), -EOVERFLOW);
	w.comm = NULL;
	ck_assert_int_eq(s->part(s->ctx, &m, &p), -EOVERFLOW);
}
END_TEST

START_TEST(test_sums_and_timeouts)
{
	taco_dist d = two_ranks();
	taco_err err = {{0}};
	double v[2] = {1.5, 2};

	other = 1.0f;
	timeout = 0;
	ck_assert_int_eq(taco_dist_sum(&d, v, 2, &err), 0);
	ck_assert(v[0] == 3.0 && v[1] == 4.0);
	timeout = 1;
	ck_assert_int_eq(taco_dist_sum(&d, v, 2, &err), -ETIMEDOUT);
	ck_assert_msg(strstr(err.msg, "rank 0: a sum waited over 600 s for "
				      "the other ranks: one is gone or "
				      "stuck") != NULL,
		      "%s", err.msg);
	timeout = 0;
}
END_TEST

START_TEST(test_weights_check)
{
	taco_dist d = two_ranks();
	taco_err err = {{0}};
	taco_model *m;

	ck_assert_int_eq(taco_model_load(tu_fixture("models/llama_gqa"),
					 tk_cpu_ops(), &m, &err),
			 0);
	skew = 0;
	ck_assert_int_eq(taco_dist_check_weights(&d, m, 10, &err), 0);
	skew = 1;
	ck_assert_int_eq(taco_dist_check_weights(&d, m, 10, &err), -EIO);
	ck_assert_msg(strstr(err.msg, "step 10: rank 1's weights differ "
				      "from rank 0's") != NULL,
		      "%s", err.msg);
	skew = 0;
	taco_model_free(m);
}
END_TEST

START_TEST(test_world)
{
	int rank = -1;

	unsetenv("OMPI_COMM_WORLD_SIZE");
	unsetenv("OMPI_COMM_WORLD_RANK");
	unsetenv("SLURM_STEP_NUM_TASKS");
	unsetenv("PMIX_RANK");
	ck_assert_int_eq(tk_comm_world(&rank), 1);
	ck_assert_int_eq(rank, 0);
	setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
	setenv("OMPI_COMM_WORLD_RANK", "2", 1);
	ck_assert_int_eq(tk_comm_world(&rank), 3);
	ck_assert_int_eq(rank, 2);
	setenv("OMPI_COMM_WORLD_RANK", "3", 1); /* out of range: alone */
	ck_assert_int_eq(tk_comm_world(&rank), 1);
	unsetenv("OMPI_COMM_WORLD_SIZE");
	unsetenv("OMPI_COMM_WORLD_RANK");
	/* srun's step of two tasks (PMIx) */
	setenv("SLURM_STEP_NUM_TASKS", "2", 1);
	setenv("PMIX_RANK", "1", 1);
	ck_assert_int_eq(tk_comm_world(&rank), 2);
	ck_assert_int_eq(rank, 1);
	unsetenv("SLURM_STEP_NUM_TASKS");
	unsetenv("PMIX_RANK");
	/* the rank's index on its machine */
	unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
	unsetenv("SLURM_LOCALID");
	ck_assert_int_eq(tk_comm_local_rank(), -1);
	setenv("SLURM_LOCALID", "1", 1);
	ck_assert_int_eq(tk_comm_local_rank(), 1);
	setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);
	ck_assert_int_eq(tk_comm_local_rank(), 3);
	unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
	unsetenv("SLURM_LOCALID");
}
END_TEST

/* Each rank's GPU: its own of the job's GPUs. */
START_TEST(test_rank_gpu)
{
	char out[16];

	/* tacod pinned the job to GPUs 3, 5 and 6: rank 1 takes 5 */
	ck_assert_int_eq(tk_comm_rank_gpu("3,5,6", 1, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "5");
	ck_assert_int_eq(tk_comm_rank_gpu("3,5,6", 2, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "6");
	ck_assert_int_eq(tk_comm_rank_gpu("3,5,6", 0, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "3");
	/* UUIDs as well as numbers */
	ck_assert_int_eq(tk_comm_rank_gpu("GPU-aa,GPU-bb", 1, out, sizeof(out)),
			 0);
	ck_assert_str_eq(out, "GPU-bb");
	/* srun gave the task one: that one, whatever the local rank */
	ck_assert_int_eq(tk_comm_rank_gpu("2", 1, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "2");
	/* nothing pinned: every GPU, numbered by local rank */
	ck_assert_int_eq(tk_comm_rank_gpu(NULL, 2, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "2");
	/* more local ranks than GPUs; no local rank; too long */
	ck_assert_int_eq(tk_comm_rank_gpu("0,1", 2, out, sizeof(out)), -ERANGE);
	ck_assert_int_eq(tk_comm_rank_gpu("0,1", -1, out, sizeof(out)),
			 -EINVAL);
	ck_assert_int_eq(tk_comm_rank_gpu(NULL, -1, out, sizeof(out)), -EINVAL);
	ck_assert_int_eq(
	    tk_comm_rank_gpu("GPU-0123456789abcdef,1", 0, out, sizeof(out)),
	    -ENAMETOOLONG);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("dist");
	TCase *tc = tcase_create("dist");

	tcase_add_test(tc, test_sink_sums_parts);
	tcase_add_test(tc, test_sums_and_timeouts);
	tcase_add_test(tc, test_weights_check);
	tcase_add_test(tc, test_world);
	tcase_add_test(tc, test_rank_gpu);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
