#include "testutil.h"
#include "tk_hash.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifndef TACO_SOURCE_FIXTURES
#define TACO_SOURCE_FIXTURES "tests/fixtures"
#endif

int32_t *tu_int_matrix(json_t *rows, int *B, int *T)
{
	int32_t *out;

	*B = (int)json_array_size(rows);
	*T = (int)json_array_size(json_array_get(rows, 0));
	out = malloc(sizeof(int32_t) * (size_t)*B * (size_t)*T + 1);
	ck_assert_ptr_nonnull(out);
	for (int b = 0; b < *B; b++)
		for (int t = 0; t < *T; t++)
			out[b * *T + t] = (int32_t)json_integer_value(
			    json_array_get(json_array_get(rows, b), t));
	return out;
}

const char *tu_fixture(const char *rel)
{
	static char buf[4096];
	const char *root = getenv("TACO_FIXTURES");

	snprintf(buf, sizeof(buf), "%s/%s", root ? root : TACO_SOURCE_FIXTURES,
		 rel);
	return buf;
}

double tu_rel_err(const float *a, const float *ref, size_t n)
{
	double num = 0, den = 0;

	for (size_t i = 0; i < n; i++) {
		double d = (double)a[i] - (double)ref[i];
		if (isnan(a[i]) || isnan(ref[i]))
			return INFINITY;
		num += d * d;
		den += (double)ref[i] * (double)ref[i];
	}
	return den > 0 ? sqrt(num / den) : sqrt(num);
}

void tu_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t *state)
{
	for (size_t i = 0; i < n; i++) {
		double u =
		    (double)(tk_splitmix64_next(state) >> 11) * 0x1.0p-53;
		x[i] = (float)(lo + (hi - lo) * u);
	}
}

double tu_now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void tu_sleep_ms(int ms)
{
	struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};

	nanosleep(&t, NULL);
}

char *tu_read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
	    fseek(f, 0, SEEK_SET) == 0) {
		buf = malloc((size_t)n + 1);
		if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
			free(buf);
			buf = NULL;
		}
		if (buf) {
			buf[n] = 0;
			if (len)
				*len = (size_t)n;
		}
	}
	fclose(f);
	return buf;
}

int tu_run(Suite *s, int no_fork)
{
	SRunner *sr = srunner_create(s);
	int failed;

	if (no_fork)
		srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}

double tu_grad_check(tu_loss_fn loss, void *ctx, double *x, const float *g,
		     size_t n, size_t samples, uint64_t seed, double h)
{
	double num = 0, den = 0;
	size_t cnt = n <= samples ? n : samples;

	for (size_t s = 0; s < cnt; s++) {
		size_t i = n <= samples ? s : tk_splitmix64_next(&seed) % n;
		double x0 = x[i], lp, lm, fd, e;

		x[i] = x0 + h;
		lp = loss(ctx);
		x[i] = x0 - h;
		lm = loss(ctx);
		x[i] = x0;
		fd = (lp - lm) / (2 * h);
		e = (double)g[i] - fd;
		num += e * e;
		den += fd * fd;
	}
	return den > 0 ? sqrt(num / den) : sqrt(num);
}

double tu_rel_err_d(const float *a, const double *ref, size_t n)
{
	double num = 0, den = 0;

	for (size_t i = 0; i < n; i++) {
		double e = (double)a[i] - ref[i];
		if (isnan(a[i]))
			return INFINITY;
		num += e * e;
		den += ref[i] * ref[i];
	}
	return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* The demo's counting task as preferences: the right count over one that
 * is off by one. */
void tu_write_count_pairs(const char *path, int n, unsigned seed)
{
	FILE *f = fopen(path, "w");

	if (!f)
		abort();
	for (int i = 0; i < n; i++) {
		int k = 2 + (int)(seed % 4), s0 = (int)(seed % 80);
		int off = seed & 1 ? 1 : -1;
		seed = seed * 1103515245u + 12345u;
		fprintf(f,
			"{\"input\": {\"messages\": [{\"role\": \"user\", "
			"\"content\": \"%d numbers after %d\"}]}, "
			"\"preferred_output\": [{\"role\": \"assistant\", "
			"\"content\": \"Sure:",
			k, s0);
		for (int j = 1; j <= k; j++)
			fprintf(f, " %d", s0 + j);
		fprintf(f, "\"}], \"non_preferred_output\": [{\"role\": "
			   "\"assistant\", \"content\": \"Sure:");
		for (int j = 1; j <= k; j++)
			fprintf(f, " %d", s0 + j + off);
		fprintf(f, "\"}]}\n");
	}
	fclose(f);
}
