/* test_cuda_streams.c: the CUDA backend's side stream (side_begin,
 * side_end, side_wait), as the engine uses it with overlap: gradient
 * blocks made by GEMMs on the main stream in two buffers used in turn,
 * TACO updates of them on the side stream, each buffer refilled only after
 * side_wait on the ticket of the updates that read it.
 *
 * The result must be the bits of the same sequence with every update in
 * line on the main stream: a side update that read its block before the
 * GEMM finished, or a GEMM that overwrote a block still being read, gives
 * other bits. The GEMMs are large (K = 8192) and the updates small, so
 * that a missing wait shows. Exits 77 (skipped) without a usable GPU.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tk_convert.h"
#include "tk_ops.h"

static const tk_ops *gpu;

enum { R = 1024, C = 768, K = 8192, KSLOTS = 4, STEPS = 24 };

typedef struct dev_state {
	void *W;       /* bf16 [R, C] */
	uint16_t *idx; /* [C * KSLOTS] */
	uint8_t *q;    /* [C * KSLOTS] */
	float *scale;  /* [C] */
	float *buf[2]; /* f32 [R, C]: the two gradient blocks */
	void *X, *Y;   /* bf16 [K, R], [K, C] */
} dev_state;

static void *dput(const void *h, size_t bytes)
{
	void *d = gpu->alloc(bytes);

	ck_assert_ptr_nonnull(d);
	gpu->upload(d, h, bytes);
	return d;
}

static void *bf16_rand(size_t n, uint64_t *s)
{
	float *f = malloc(n * sizeof(float));
	uint16_t *b = malloc(n * sizeof(uint16_t));

	ck_assert_ptr_nonnull(f);
	ck_assert_ptr_nonnull(b);
	tu_fill_uniform(f, n, -1, 1, s);
	for (size_t i = 0; i < n; i++)
		b[i] = tk_f32_bf16_rne(f[i]);
	free(f);
	return b;
}

static void state_init(dev_state *d, const void *W, const void *X,
		       const void *Y)
{
	size_t ck = (size_t)C * KSLOTS;

	d->W = dput(W, (size_t)R * C * 2);
	d->X = dput(X, (size_t)K * R * 2);
	d->Y = dput(Y, (size_t)K * C * 2);
	d->idx = gpu->alloc(ck * 2);
	d->q = gpu->alloc(ck);
	d->scale = gpu->alloc((size_t)C * 4);
	ck_assert_ptr_nonnull(d->idx);
	ck_assert_ptr_nonnull(d->q);
	ck_assert_ptr_nonnull(d->scale);
	{
		/* a fresh optimizer: every slot empty */
		uint16_t *ones = malloc(ck * 2);

		memset(ones, 0xFF, ck * 2);
		gpu->upload(d->idx, ones, ck * 2);
		free(ones);
	}
	gpu->memset0(d->q, ck);
	gpu->memset0(d->scale, (size_t)C * 4);
	for (int i = 0; i < 2; i++) {
		d->buf[i] = gpu->alloc((size_t)R * C * 4);
		ck_assert_ptr_nonnull(d->buf[i]);
	}
}

static void state_free(dev_state *d)
{
	size_t ck = (size_t)C * KSLOTS;

	gpu->free(d->W, (size_t)R * C * 2);
	gpu->free(d->X, (size_t)K * R * 2);
	gpu->free(d->Y, (size_t)K * C * 2);
	gpu->free(d->idx, ck * 2);
	gpu->free(d->q, ck);
	gpu->free(d->scale, (size_t)C * 4);
	for (int i = 0; i < 2; i++)
		gpu->free(d->buf[i], (size_t)R * C * 4);
}

/* STEPS updates of W; side: on the side stream with two blocks in turn,
 * else in line through one block. */
static void run(dev_state *d, int side)
{
	uint64_t ticket[2] = {0, 0};

	for (int t = 1; t <= STEPS; t++) {
		int b = side ? t % 2 : 0;
		tk_taco_args a = {.R = R,
				  .C = C,
				  .col0 = 0,
				  .ncols = C,
				  .k = KSLOTS,
				  .lr = 1e-3f,
				  .beta = 0.9f,
				  .weight_decay = 0.01f,
				  .stochastic = 1,
				  .seed = 7,
				  .tensor_index = 3,
				  .step = (uint64_t)t};

		if (side && ticket[b])
			gpu->side_wait(ticket[b]);
		/* G[R, C] = t X^T Y: a different gradient every step */
		gpu->matmul(1, 0, R, C, K, (float)t, TK_BF16, d->X, R, d->Y, C,
			    0.0f, TK_F32, d->buf[b], C);
		if (side)
			gpu->side_begin();
		gpu->taco_update(d->W, TK_BF16, d->buf[b], C, d->idx, d->q,
				 d->scale, &a);
		if (side)
			ticket[b] = gpu->side_end();
	}
	if (side)
		gpu->side_wait(0);
}

START_TEST(test_side_stream_same_bits)
{
	uint64_t s = 42;
	void *W = bf16_rand((size_t)R * C, &s);
	void *X = bf16_rand((size_t)K * R, &s);
	void *Y = bf16_rand((size_t)K * C, &s);
	size_t m0 = gpu->mem_current(), wb = (size_t)R * C * 2;
	uint16_t *w_line = malloc(wb), *w_side = malloc(wb);
	uint8_t *q_line = malloc((size_t)C * KSLOTS);
	uint8_t *q_side = malloc((size_t)C * KSLOTS);
	dev_state d;
	const char *e;
	uint64_t t1, t2;

	state_init(&d, W, X, Y);
	run(&d, 0);
	gpu->download(w_line, d.W, wb);
	gpu->download(q_line, d.q, (size_t)C * KSLOTS);
	state_free(&d);

	state_init(&d, W, X, Y);
	run(&d, 1);
	gpu->download(w_side, d.W, wb);
	gpu->download(q_side, d.q, (size_t)C * KSLOTS);
	state_free(&d);
	e = tk_cuda_last_error();
	ck_assert_msg(e == NULL, "CUDA error: %s", e);

	ck_assert_msg(memcmp(w_line, W, wb) != 0, "W never moved: vacuous");
	ck_assert_msg(memcmp(w_side, w_line, wb) == 0,
		      "side-stream updates differ from the in-line ones");
	ck_assert_msg(memcmp(q_side, q_line, (size_t)C * KSLOTS) == 0,
		      "side-stream state differs from the in-line one");
	/* tickets grow; side_wait(0) with nothing new is harmless */
	gpu->side_begin();
	t1 = gpu->side_end();
	gpu->side_begin();
	t2 = gpu->side_end();
	ck_assert_uint_gt(t1, 0);
	ck_assert_uint_eq(t2, t1 + 1);
	gpu->side_wait(0);
	gpu->side_wait(t1);
	ck_assert_uint_eq(gpu->mem_current(), m0);
	printf("side stream: %d updates, same bits as in line\n", STEPS);
	free(W);
	free(X);
	free(Y);
	free(w_line);
	free(w_side);
	free(q_line);
	free(q_side);
}
END_TEST

static Suite *streams_suite(void)
{
	Suite *s = suite_create("cuda_streams");
	TCase *tc = tcase_create("side");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_side_stream_same_bits);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	char why[256] = "";

	if (tk_cuda_open(&gpu, why, sizeof(why)) < 0) {
		printf("skipped: %s\n", why);
		return 77;
	}
	return tu_run(streams_suite(), 1) ? EXIT_FAILURE : EXIT_SUCCESS;
}
