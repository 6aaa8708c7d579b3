/* testutil.h: helpers shared by the check suites. */
#ifndef TESTUTIL_H
#define TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

/* Path of a file under tests/fixtures (TACO_FIXTURES or the source tree).
 * Returns a static buffer. */
const char *tu_fixture(const char *rel);

/* ||a - ref|| / ||ref|| in double; returns the plain norm of a - ref when
 * ref is all zero. NaN anywhere gives +inf. */
double tu_rel_err(const float *a, const float *ref, size_t n);

/* The same against a double reference. */
double tu_rel_err_d(const float *a, const double *ref, size_t n);

/* A JSON array of B arrays of T integers (a fixture's batch.json rows) as
 * int32 [B * T], B and T set; malloc'd. */
struct json_t;
int32_t *tu_int_matrix(struct json_t *rows, int *B, int *T);

/* Deterministic uniform values in [lo, hi) from a 64-bit state. */
void tu_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t *state);

/* A double loss of a reference, as a function of the arrays in ctx. */
typedef double (*tu_loss_fn)(void *ctx);

/* The analytic gradient g[n] of loss with respect to x[n] (which loss
 * reads through ctx) against central differences of step h, over every
 * entry when n <= samples, else over `samples` entries picked from seed:
 * ||g - fd|| / ||fd|| over the checked entries. */
double tu_grad_check(tu_loss_fn loss, void *ctx, double *x, const float *g,
		     size_t n, size_t samples, uint64_t seed, double h);

/* Runs a suite (forking per test unless no_fork) and returns the process
 * exit status: 0 when every test passed. */
struct Suite;
int tu_run(struct Suite *s, int no_fork);

/* Seconds on CLOCK_MONOTONIC; sleeping ms milliseconds. */
double tu_now_s(void);
void tu_sleep_ms(int ms);

/* Reads a whole file into a NUL-terminated malloc'd buffer (NULL on error). */
char *tu_read_file(const char *path, size_t *len);

/* n preference pairs of the demo's counting task (OpenAI's JSONL): the
 * right count preferred over one off by one, drawn from seed. */
void tu_write_count_pairs(const char *path, int n, unsigned seed);

#endif
