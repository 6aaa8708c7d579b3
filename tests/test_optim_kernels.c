/* test_optim_kernels.c: the optimizer kernels of the CPU backend.
 *
 * - FP8 E4M3: every code round-trips, midpoints round to even, saturation,
 *   and encode equals a brute-force nearest search over sampled floats.
 * - kernels/tk_convert.h (run by the CPU and the CUDA kernels alike): bf16,
 *   f16 and FP8 rounding against plain double arithmetic over millions of
 *   patterns (ties, subnormals, infinities, NaNs), f16 / bf16 decoding.
 * - TACO (docs/taco.md): the closed form of exact TACO (k = 1,
 *   beta = 0); bit-exact agreement with the independent Python reference
 *   (tests/reference/taco_ref.py) on the fixture cases of
 *   tests/fixtures/optim (slot rows, FP8 codes, scales and weights after
 *   every step); zero and non-finite gradients; blocking / threads.
 * - AdamW: bitwise against an exact emulation of PyTorch's order of
 *   operations, and within a tight tolerance of torch.optim.AdamW itself.
 *
 * The CPU backend's memory is host memory, so buffers are malloc'd.
 */
#include <check.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors/safetensors.h"
#include "testutil.h"
#include "tk_convert.h"
#include "tk_ops.h"

static const tk_ops *ops;

/* ---- helpers ------------------------------------------------------------ */

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);

	ck_assert_ptr_nonnull(p);
	return p;
}

static void *xdup(const void *src, size_t bytes)
{
	void *p = xcalloc(bytes, 1);

	memcpy(p, src, bytes);
	return p;
}

static uint64_t sm64(uint64_t x)
{
	uint64_t z = x + 0x9E3779B97F4A7C15ull;

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static uint64_t rng_next(uint64_t *s)
{
	*s += 0x9E3779B97F4A7C15ull;
	return sm64(*s - 0x9E3779B97F4A7C15ull);
}

/* Uniform in [-1, 1) with 24-bit resolution, or from a small set (ties). */
static float rnd_uniform(uint64_t *s)
{
	return (float)((int64_t)(rng_next(s) >> 40) - (1 << 23)) * 0x1p-23f;
}

static float rnd_ties(uint64_t *s)
{
	static const float set[7] = {-2, -1, -0.5f, 0, 0.5f, 1, 2};

	return set[(rng_next(s) >> 32) % 7];
}

/* State of a TACO tensor: idx (u16 or u32), q, scale. */
typedef struct {
	int R, C, k, wide;
	void *idx;
	uint8_t *q;
	float *scale;
} tstate;

static size_t idx_bytes(const tstate *s)
{
	return (size_t)s->C * s->k * (s->wide ? 4 : 2);
}

static void tstate_init(tstate *s, int R, int C, int k)
{
	s->R = R;
	s->C = C;
	s->k = k;
	s->wide = R > 65535;
	s->idx = xcalloc(idx_bytes(s), 1);
	memset(s->idx, 0xFF, idx_bytes(s));
	s->q = xcalloc((size_t)C * k, 1);
	s->scale = xcalloc((size_t)C, sizeof(float));
}

static void tstate_copy(tstate *d, const tstate *s)
{
	*d = *s;
	d->idx = xdup(s->idx, idx_bytes(s));
	d->q = xdup(s->q, (size_t)s->C * s->k);
	d->scale = xdup(s->scale, (size_t)s->C * sizeof(float));
}

static void tstate_free(tstate *s)
{
	free(s->idx);
	free(s->q);
	free(s->scale);
}

static uint32_t tidx(const tstate *s, int j, int slot)
{
	size_t i = (size_t)j * s->k + slot;

	return s->wide ? ((uint32_t *)s->idx)[i] : ((uint16_t *)s->idx)[i];
}

/* Column j of two states (and of two weight tensors) bitwise equal. */
static int col_equal(const tstate *a, const tstate *b, const void *Wa,
		     const void *Wb, size_t esz, int j)
{
	for (int s = 0; s < a->k; s++)
		if (tidx(a, j, s) != tidx(b, j, s) ||
		    a->q[(size_t)j * a->k + s] != b->q[(size_t)j * b->k + s])
			return 0;
	if (memcmp(&a->scale[j], &b->scale[j], sizeof(float)))
		return 0;
	for (int r = 0; r < a->R; r++)
		if (memcmp((const char *)Wa + ((size_t)r * a->C + j) * esz,
			   (const char *)Wb + ((size_t)r * a->C + j) * esz,
			   esz))
			return 0;
	return 1;
}

static void taco_args(tk_taco_args *a, int R, int C, int k, float lr,
		      float beta, float wd, int stochastic)
{
	memset(a, 0, sizeof(*a));
	a->R = R;
	a->C = C;
	a->col0 = 0;
	a->ncols = C;
	a->k = k;
	a->lr = lr;
	a->beta = beta;
	a->weight_decay = wd;
	a->stochastic = stochastic;
	a->seed = 1234;
	a->tensor_index = 7;
	a->step = 1;
}

static uint32_t f2u(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static float u2f(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

/* ---- FP8 E4M3 ------------------------------------------------------------ */

/* Non-negative finite values, codes 0x00..0x7E (increasing). */
static float pos_value(int c)
{
	int e = c >> 3, m = c & 7;

	return e == 0 ? ldexpf((float)m, -9) : ldexpf(1.0f + m / 8.0f, e - 7);
}

START_TEST(test_fp8_decode_known)
{
	ck_assert(tk_fp8_e4m3_decode(0x38) == 1.0f);
	ck_assert(tk_fp8_e4m3_decode(0x7E) == 448.0f);
	ck_assert(tk_fp8_e4m3_decode(0xFE) == -448.0f);
	ck_assert(tk_fp8_e4m3_decode(0x01) == 0x1p-9f);
	ck_assert(tk_fp8_e4m3_decode(0x07) == 7 * 0x1p-9f);
	ck_assert(tk_fp8_e4m3_decode(0x08) == 0x1p-6f);
	ck_assert(tk_fp8_e4m3_decode(0x3C) == 1.5f);
	ck_assert(isnan(tk_fp8_e4m3_decode(0x7F)));
	ck_assert(isnan(tk_fp8_e4m3_decode(0xFF)));
	ck_assert_uint_eq(f2u(tk_fp8_e4m3_decode(0x00)), 0);
	ck_assert_uint_eq(f2u(tk_fp8_e4m3_decode(0x80)), 0x80000000u);
	for (int c = 0; c < 0x7F; c++) {
		ck_assert(tk_fp8_e4m3_decode((uint8_t)c) == pos_value(c));
		ck_assert(tk_fp8_e4m3_decode((uint8_t)(c | 0x80)) ==
			  -pos_value(c));
	}
}
END_TEST

START_TEST(test_fp8_roundtrip_all)
{
	for (int c = 0; c < 256; c++) {
		float x = tk_fp8_e4m3_decode((uint8_t)c), y;

		if (c == 0x7F || c == 0xFF) {
			ck_assert_uint_eq(tk_fp8_e4m3_encode(x), 0x7F);
			continue;
		}
		ck_assert_uint_eq(tk_fp8_e4m3_encode(x), c);
		y = tk_fp8_e4m3_decode(tk_fp8_e4m3_encode(x));
		ck_assert_uint_eq(f2u(y), f2u(x));
	}
}
END_TEST

START_TEST(test_fp8_midpoints)
{
	for (int c = 0; c < 0x7E; c++) {
		float lo = pos_value(c), hi = pos_value(c + 1);
		float mid = (lo + hi) / 2; /* exact: a few significant bits */
		int even = (c & 1) ? c + 1 : c;

		ck_assert(mid > lo && mid < hi);
		ck_assert_uint_eq(tk_fp8_e4m3_encode(mid), even);
		ck_assert_uint_eq(tk_fp8_e4m3_encode(-mid), 0x80 | even);
		ck_assert_uint_eq(tk_fp8_e4m3_encode(nextafterf(mid, 0)), c);
		ck_assert_uint_eq(tk_fp8_e4m3_encode(nextafterf(mid, 1000)),
				  c + 1);
		ck_assert_uint_eq(tk_fp8_e4m3_encode(-nextafterf(mid, 1000)),
				  0x80 | (c + 1));
	}
}
END_TEST

START_TEST(test_fp8_saturation_and_specials)
{
	ck_assert_uint_eq(tk_fp8_e4m3_encode(448.0f), 0x7E);
	ck_assert_uint_eq(tk_fp8_e4m3_encode(nextafterf(448.0f, 0)), 0x7E);
	ck_assert_uint_eq(tk_fp8_e4m3_encode(432.0f), 0x7E); /* tie 416/448 */
	ck_assert_uint_eq(tk_fp8_e4m3_encode(nextafterf(432.0f, 0)), 0x7D);
	ck_assert_uint_eq(tk_fp8_e4m3_encode(464.0f), 0x7E);
	ck_assert_uint_eq(tk_fp8_e4m3_encode(480.0f), 0x7E);
	ck_assert_uint_eq(tk_fp8_e4m3_encode(1e6f), 0x7E);
	ck_assert_uint_eq(tk_fp8_e4m3_encode(FLT_MAX), 0x7E);
	ck_assert_uint_eq(tk_fp8_e4m3_encode(-FLT_MAX), 0xFE);
	ck_assert_uint_eq(tk_fp8_e4m3_encode(INFINITY), 0x7E);
	ck_assert_uint_eq(tk_fp8_e4m3_encode(-INFINITY), 0xFE);
	ck_assert_uint_eq(tk_fp8_e4m3_encode(NAN), 0x7F);
	ck_assert_uint_eq(tk_fp8_e4m3_encode(-NAN), 0x7F);
	ck_assert_uint_eq(tk_fp8_e4m3_encode(0.0f), 0x00);
	ck_assert_uint_eq(tk_fp8_e4m3_encode(-0.0f), 0x80);
	/* below half the smallest subnormal */
	ck_assert_uint_eq(tk_fp8_e4m3_encode(0x1p-10f), 0x00);
	ck_assert_uint_eq(tk_fp8_e4m3_encode(nextafterf(0x1p-10f, 1)), 0x01);
	ck_assert_uint_eq(tk_fp8_e4m3_encode(-0x1p-11f), 0x80);
	ck_assert_uint_eq(tk_fp8_e4m3_encode(FLT_MIN), 0x00);
	ck_assert_uint_eq(tk_fp8_e4m3_encode(0x1p-149f), 0x00);
	ck_assert_uint_eq(tk_fp8_e4m3_encode(-0x1p-149f), 0x80);
	/* subnormal / normal boundary */
	ck_assert_uint_eq(tk_fp8_e4m3_encode(7.5f * 0x1p-9f), 0x08);
	ck_assert_uint_eq(tk_fp8_e4m3_encode(6.5f * 0x1p-9f), 0x06);
}
END_TEST

/* Brute-force nearest (ties to the even code) over the value table. */
static int fp8_brute(float x)
{
	float a = fabsf(x);
	int sign = signbit(x) ? 0x80 : 0, best = 0;
	double bd = INFINITY;

	if (a >= 448.0f)
		return sign | 0x7E;
	for (int c = 0; c < 0x7F; c++) {
		double d = fabs((double)a - pos_value(c));

		if (d < bd || (d == bd && !(c & 1))) {
			bd = d;
			best = c;
		}
	}
	return sign | best;
}

START_TEST(test_fp8_brute_force)
{
	/* A stride through every float from 0 to past 448, both signs. */
	for (uint32_t b = 0; b < 0x43F00000u; b += 4099) {
		float x = u2f(b);

		ck_assert_uint_eq(tk_fp8_e4m3_encode(x), fp8_brute(x));
		ck_assert_uint_eq(tk_fp8_e4m3_encode(-x), fp8_brute(-x));
	}
}
END_TEST

START_TEST(test_small_float_rounding)
{
	/* The bf16 / fp16 helpers of kernels/tk_convert.h. */
	ck_assert_uint_eq(tk_f32_bf16_rne(1.0f + 0x1p-8f), 0x3F80);
	ck_assert_uint_eq(tk_f32_bf16_rne(1.0f + 3 * 0x1p-8f), 0x3F82);
	ck_assert_uint_eq(tk_f32_bf16_rne(FLT_MAX), 0x7F80);
	ck_assert_uint_eq(tk_f32_bf16_sr(1.0f + 0x1p-8f, 0x7FFF), 0x3F80);
	ck_assert_uint_eq(tk_f32_bf16_sr(1.0f + 0x1p-8f, 0x8000), 0x3F81);
	ck_assert_uint_eq(tk_f32_bf16_sr(1.0f, 0xFFFF), 0x3F80);
	ck_assert_uint_eq(tk_f32_bf16_sr(-1.0f - 0x1p-8f, 0x8000), 0xBF81);
	ck_assert(isnan(tk_bf16_f32(tk_f32_bf16_sr(u2f(0xFFFFFFFFu), 0xFFFF))));
	ck_assert_uint_eq(tk_f32_f16_rne(1.0f + 0x1p-11f), 0x3C00);
	ck_assert_uint_eq(tk_f32_f16_rne(1.0f + 3 * 0x1p-11f), 0x3C02);
	ck_assert_uint_eq(tk_f32_f16_rne(65504.0f), 0x7BFF);
	ck_assert_uint_eq(tk_f32_f16_rne(65520.0f), 0x7C00);
	ck_assert_uint_eq(tk_f32_f16_rne(0x1p-24f), 0x0001);
	ck_assert_uint_eq(tk_f32_f16_rne(0x1p-25f), 0x0000);
	ck_assert_uint_eq(tk_f32_f16_rne(0x1.8p-25f), 0x0001);
	ck_assert_uint_eq(tk_f32_f16_rne(3 * 0x1p-25f), 0x0002);
	ck_assert_uint_eq(tk_f32_f16_rne(-0x1p-14f), 0x8400);
	/* f16 -> f32 -> f16 round trip of every finite code */
	for (uint32_t h = 0; h < 0x10000; h++) {
		if ((h & 0x7C00) == 0x7C00)
			continue;
		ck_assert_uint_eq(tk_f32_f16_rne(tk_f16_f32((uint16_t)h)), h);
	}
}
END_TEST

/* Round |x| (finite) to a binary format with mbits mantissa bits and
 * exponent bias `bias` by plain arithmetic: scale to the format's quantum at
 * the exponent of x (never below the smallest normal one), round to nearest
 * even in double (exact: a float times a power of two), then code =
 * ((e + bias - 1) << mbits) + q, which also covers subnormals (e clamped,
 * q < 2^mbits) and a carry into the next binade (q = 2^(mbits+1)). The sign
 * bit is left to the caller; codes past the largest finite are too. */
static uint32_t ref_round(float x, int mbits, int bias)
{
	double a = fabs((double)x), q;
	int ex;

	if (a == 0)
		return 0;
	frexp(a, &ex); /* a in [2^(ex-1), 2^ex) */
	ex--;
	if (ex < 1 - bias)
		ex = 1 - bias;
	q = nearbyint(ldexp(a, mbits - ex));
	return ((uint32_t)(ex + bias - 1) << mbits) + (uint32_t)q;
}

static uint16_t ref_bf16(float x)
{
	uint32_t c = isinf(x) ? 0x7F80u : ref_round(x, 7, 127);

	return (uint16_t)((signbit(x) ? 0x8000u : 0) |
			  (c > 0x7F80u ? 0x7F80u : c));
}

static uint16_t ref_f16(float x)
{
	uint32_t c = isinf(x) ? 0x7C00u : ref_round(x, 10, 15);

	return (uint16_t)((signbit(x) ? 0x8000u : 0) |
			  (c > 0x7C00u ? 0x7C00u : c));
}

static uint8_t ref_fp8(float x)
{
	uint32_t c = isinf(x) ? 0x7Eu : ref_round(x, 3, 7);

	return (uint8_t)((signbit(x) ? 0x80u : 0) | (c > 0x7Eu ? 0x7Eu : c));
}

/* One input against the reference: NaNs stay quiet NaNs of their sign (bf16
 * keeps the top of the payload; fp8 NaN is 0x7F). */
static void check_rne_one(uint32_t b)
{
	float x = u2f(b);
	uint16_t r;

	if (isnan(x)) {
		r = tk_f32_bf16_rne(x);
		ck_assert_uint_eq(r, (b >> 16) | 0x40);
		ck_assert((r & 0x7F80) == 0x7F80 && (r & 0x40));
		ck_assert_uint_eq(tk_f32_bf16_sr(x, (uint32_t)b * 40503u),
				  (b >> 16) | 0x40);
		ck_assert_uint_eq(tk_f32_f16_rne(x),
				  ((b >> 16) & 0x8000) | 0x7E00);
		ck_assert_uint_eq(tk_fp8_e4m3_encode(x), 0x7F);
		return;
	}
	if (tk_f32_bf16_rne(x) != ref_bf16(x))
		ck_abort_msg("bf16 of %08x: %04x, reference %04x", b,
			     tk_f32_bf16_rne(x), ref_bf16(x));
	if (tk_f32_f16_rne(x) != ref_f16(x))
		ck_abort_msg("f16 of %08x: %04x, reference %04x", b,
			     tk_f32_f16_rne(x), ref_f16(x));
	if (tk_fp8_e4m3_encode(x) != ref_fp8(x))
		ck_abort_msg("fp8 of %08x: %02x, reference %02x", b,
			     tk_fp8_e4m3_encode(x), ref_fp8(x));
}

/* kernels/tk_convert.h (the one definition the CUDA kernels run as well)
 * against plain arithmetic: every upper half-word with lower bits that make
 * ties and near-ties for bf16, f16 (normal and subnormal) and fp8, plus
 * random patterns; and every f16 code decodes to its value. */
START_TEST(test_convert_reference)
{
	static const uint32_t low13[] = {0, 1, 0x0FFF, 0x1000, 0x1001, 0x1FFF};
	uint64_t s = 99;

	for (uint32_t hi = 0; hi < 0x10000; hi++)
		for (uint32_t v = 0; v < 8; v++)
			for (size_t l = 0; l < sizeof(low13) / sizeof(*low13);
			     l++)
				check_rne_one(hi << 16 | v << 13 | low13[l]);
	for (int i = 0; i < 1000000; i++)
		check_rne_one((uint32_t)rng_next(&s));
	/* named cases: infinities, FLT_MAX, the smallest subnormal, ties */
	check_rne_one(0x7F800000u);
	check_rne_one(0xFF800000u);
	check_rne_one(f2u(FLT_MAX));
	check_rne_one(0x00000001u);
	check_rne_one(0x80000001u);
	ck_assert_uint_eq(ref_bf16(1.0f + 0x1p-8f), 0x3F80);
	ck_assert_uint_eq(ref_f16(0x1p-25f), 0x0000);
	ck_assert_uint_eq(ref_f16(65520.0f), 0x7C00);
	ck_assert_uint_eq(ref_fp8(432.0f), 0x7E);

	for (uint32_t h = 0; h < 0x10000; h++) {
		uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
		float f = tk_f16_f32((uint16_t)h), want;

		if (e == 0x1F && m) { /* NaN: sign and payload kept */
			ck_assert_uint_eq(f2u(f), (h & 0x8000u) << 16 |
						      0x7F800000u | m << 13);
			continue;
		}
		want = e == 0x1F ? INFINITY
		       : e == 0	 ? ldexpf((float)m, -24)
				 : ldexpf(1.0f + m / 1024.0f, (int)e - 15);
		if (h & 0x8000)
			want = -want;
		ck_assert_uint_eq(f2u(f), f2u(want));
		ck_assert_uint_eq(f2u(tk_bf16_f32((uint16_t)h)), h << 16);
	}
}
END_TEST

/* ---- TACO: exact TACO ---------------------------------------------------- */

static void check_exact_taco(int R, int C, int ties, uint64_t seed)
{
	const size_t n = (size_t)R * C;
	float *W0 = xcalloc(n, sizeof(float)), *W, *G = xcalloc(n, 4);
	const float lr = 0.01f;
	tk_taco_args a;
	tstate st;
	uint64_t s = seed;

	for (size_t i = 0; i < n; i++) {
		W0[i] = rnd_uniform(&s);
		G[i] = ties ? rnd_ties(&s) * 0.25f : rnd_uniform(&s);
	}
	for (int r = 0; C > 3 && r < R; r++) /* column 3: all zero */
		G[(size_t)r * C + 3] = 0.0f;
	W = xdup(W0, n * sizeof(float));
	tstate_init(&st, R, C, 1);
	taco_args(&a, R, C, 1, lr, 0.0f, 0.0f, 0);
	ops->taco_update(W, TK_F32, G, a.ncols, st.idx, st.q, st.scale, &a);

	for (int j = 0; j < C; j++) {
		int rs = -1;
		float best = 0.0f;

		for (int r = 0; r < R; r++) {
			float m = fabsf(G[(size_t)r * C + j]);

			if (m > best) { /* strict: ties keep the smaller row */
				best = m;
				rs = r;
			}
		}
		for (int r = 0; r < R; r++) {
			size_t i = (size_t)r * C + j;

			if (r == rs) {
				float want = G[i] > 0 ? W0[i] - lr : W0[i] + lr;

				ck_assert_uint_eq(f2u(W[i]), f2u(want));
				ck_assert(fabsf(W[i] - W0[i] -
						(G[i] > 0 ? -lr : lr)) <=
					  1e-6f);
			} else {
				ck_assert_uint_eq(f2u(W[i]), f2u(W0[i]));
			}
		}
		if (rs < 0) {
			ck_assert_uint_eq(tidx(&st, j, 0), 0xFFFF);
			ck_assert_uint_eq(st.q[j], 0);
			ck_assert(st.scale[j] == 0.0f);
		} else {
			float g = G[(size_t)rs * C + j];

			ck_assert_uint_eq(tidx(&st, j, 0), rs);
			ck_assert_uint_eq(st.q[j], g > 0 ? 0x7E : 0xFE);
			ck_assert_uint_eq(f2u(st.scale[j]), f2u(best / 448.0f));
		}
	}
	tstate_free(&st);
	free(W0);
	free(W);
	free(G);
}

START_TEST(test_taco_exact)
{
	check_exact_taco(300, 123, 0, 1);
	check_exact_taco(300, 123, 1, 2); /* many ties of |G| */
	check_exact_taco(700, 150, 1, 3); /* >= 32768: threads, blocks */
	check_exact_taco(2, 5, 1, 4);	  /* tiny */
	check_exact_taco(70000, 2, 1, 5); /* uint32 indices */
}
END_TEST

/* ---- TACO: fixtures of the Python reference ------------------------------ */

#define WTAG 0x5730u
#define GTAG 0x4730u

typedef struct {
	const char *name, *grad;
	int R, C, k, steps, dtype, stochastic, gexp;
	float lr, beta, wd;
	uint64_t seed, tensor_index, gen_seed;
} tcase;

static uint64_t hexfield(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	ck_assert_msg(s != NULL, "manifest: %s", key);
	return strtoull(s, NULL, 16);
}

static int intfield(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	ck_assert_msg(json_is_integer(v), "manifest: %s", key);
	return (int)json_integer_value(v);
}

static float bitsfield(json_t *o, const char *key)
{
	return u2f((uint32_t)json_integer_value(json_object_get(o, key)));
}

static int dtype_of(const char *s)
{
	if (!strcmp(s, "F32"))
		return TK_F32;
	if (!strcmp(s, "BF16"))
		return TK_BF16;
	ck_assert_str_eq(s, "F16");
	return TK_F16;
}

static uint64_t gen_h(uint64_t tag, uint64_t seed, uint64_t t, uint64_t i)
{
	return sm64(sm64(sm64(seed ^ tag) ^ t) ^ i);
}

/* W0 and G of the fixture generator (gen_optim_fixtures.py). */
static void gen_w0(const tcase *c, void *W)
{
	for (size_t i = 0; i < (size_t)c->R * c->C; i++) {
		uint64_t h = gen_h(WTAG, c->gen_seed, 0, i);

		if (c->dtype == TK_F32) {
			((float *)W)[i] =
			    (float)((int64_t)(h >> 40) - (1 << 23)) * 0x1p-23f;
		} else {
			float w = (float)((int)(h >> 56) - 128) * 0x1p-7f;

			((uint16_t *)W)[i] = c->dtype == TK_BF16
						 ? tk_f32_bf16_rne(w)
						 : tk_f32_f16_rne(w);
		}
	}
}

static void gen_g(const tcase *c, uint64_t t, float *G)
{
	static const float ties[7] = {-2, -1, -0.5f, 0, 0.5f, 1, 2};

	for (size_t i = 0; i < (size_t)c->R * c->C; i++) {
		uint64_t h = gen_h(GTAG, c->gen_seed, t, i);
		float uni = ldexpf((float)((int64_t)(h >> 40) - (1 << 23)),
				   c->gexp - 23);
		float g;

		if (!strcmp(c->grad, "uniform"))
			g = uni;
		else if (!strcmp(c->grad, "ties"))
			g = ldexpf(ties[(h >> 32) % 7], c->gexp);
		else if (!strcmp(c->grad, "sparse"))
			g = (h & 7) ? 0.0f : uni;
		else if (!strcmp(c->grad, "striped"))
			g = (i / (size_t)c->C) % 4 == 0 ? uni * 8.0f : uni;
		else
			ck_abort_msg("unknown grad kind %s", c->grad);
		G[i] = g;
	}
}

static const taco_st_tensor *need(const taco_st_file *f, const char *case_,
				  const char *what, int dtype, uint64_t bytes)
{
	char name[256];
	const taco_st_tensor *t;

	snprintf(name, sizeof(name), "%s/%s", case_, what);
	t = taco_st_find(f, name);
	ck_assert_msg(t != NULL, "fixture tensor %s missing", name);
	ck_assert_msg(t->dtype == dtype, "%s: dtype", name);
	if (bytes != UINT64_MAX)
		ck_assert_msg(t->nbytes == bytes, "%s: %llu bytes, want %llu",
			      name, (unsigned long long)t->nbytes,
			      (unsigned long long)bytes);
	return t;
}

static void run_fixture_case(const tcase *c, const taco_st_file *f)
{
	const size_t n = (size_t)c->R * c->C, nk = (size_t)c->C * c->k;
	const size_t esz = c->dtype == TK_F32 ? 4 : 2;
	const int wide = c->R > 65535;
	const taco_st_tensor *ti, *tq, *tsc, *twd;
	void *W = xcalloc(n, esz), *Wexp = xcalloc(n, esz);
	float *G = xcalloc(n, sizeof(float));
	uint32_t *wd;
	size_t nwd, wpos = 0;
	tk_taco_args a;
	tstate st;

	ti = need(f, c->name, "idx", wide ? TACO_ST_U32 : TACO_ST_U16,
		  (uint64_t)c->steps * nk * (wide ? 4 : 2));
	tq = need(f, c->name, "q", TACO_ST_U8, (uint64_t)c->steps * nk);
	tsc = need(f, c->name, "scale", TK_F32, (uint64_t)c->steps * c->C * 4);
	twd = need(f, c->name, "wdiff", TACO_ST_U32, UINT64_MAX);
	ck_assert_int_eq(twd->ndim, 2);
	ck_assert_int_eq(twd->shape[1], 4);
	nwd = (size_t)twd->shape[0];
	wd = xcalloc(nwd * 4 + 1, sizeof(uint32_t));
	if (nwd)
		memcpy(wd, twd->data, nwd * 16);

	gen_w0(c, W);
	memcpy(Wexp, W, n * esz);
	tstate_init(&st, c->R, c->C, c->k);
	taco_args(&a, c->R, c->C, c->k, c->lr, c->beta, c->wd, c->stochastic);
	a.seed = c->seed;
	a.tensor_index = c->tensor_index;
	for (int t = 1; t <= c->steps; t++) {
		const char *ei = (const char *)ti->data +
				 (size_t)(t - 1) * nk * (wide ? 4 : 2);
		const char *eq = (const char *)tq->data + (size_t)(t - 1) * nk;
		const char *es =
		    (const char *)tsc->data + (size_t)(t - 1) * c->C * 4;

		gen_g(c, (uint64_t)t, G);
		a.step = (uint64_t)t;
		ops->taco_update(W, c->dtype, G, a.ncols, st.idx, st.q,
				 st.scale, &a);

		for (; wpos < nwd && wd[wpos * 4] == (uint32_t)t; wpos++) {
			size_t at =
			    (size_t)wd[wpos * 4 + 1] * c->C + wd[wpos * 4 + 2];
			uint32_t bits = wd[wpos * 4 + 3];

			ck_assert(at < n);
			if (esz == 4)
				memcpy((char *)Wexp + at * 4, &bits, 4);
			else
				((uint16_t *)Wexp)[at] = (uint16_t)bits;
		}
		for (int j = 0; j < c->C; j++) {
			for (int s = 0; s < c->k; s++) {
				size_t i = (size_t)j * c->k + s;
				uint32_t want;

				if (wide)
					memcpy(&want, ei + i * 4, 4);
				else {
					uint16_t w16;

					memcpy(&w16, ei + i * 2, 2);
					want = w16;
				}
				ck_assert_msg(
				    tidx(&st, j, s) == want &&
					st.q[i] == (uint8_t)eq[i],
				    "%s step %d col %d slot %d: row "
				    "%u q 0x%02x, want row %u q 0x%02x",
				    c->name, t, j, s, tidx(&st, j, s), st.q[i],
				    want, (uint8_t)eq[i]);
			}
			ck_assert_msg(
			    !memcmp(&st.scale[j], es + (size_t)j * 4, 4),
			    "%s step %d col %d: scale", c->name, t, j);
		}
		for (size_t i = 0; i < n; i++)
			ck_assert_msg(!memcmp((char *)W + i * esz,
					      (char *)Wexp + i * esz, esz),
				      "%s step %d: weight (%zu, %zu)", c->name,
				      t, i / c->C, i % c->C);
	}
	ck_assert_uint_eq(wpos, nwd);
	tstate_free(&st);
	free(W);
	free(Wexp);
	free(G);
	free(wd);
}

START_TEST(test_taco_fixtures)
{
	json_error_t jerr;
	json_t *man =
	    json_load_file(tu_fixture("optim/manifest.json"), 0, &jerr);
	json_t *cases, *o;
	taco_st_file *f = NULL;
	taco_err err;
	size_t i;
	int n16 = 0, n32 = 0, nk[17] = {0};

	ck_assert_msg(man != NULL, "manifest: %s", jerr.text);
	ck_assert_msg(
	    taco_st_open(tu_fixture("optim/taco_expected.safetensors"), &f,
			 &err) == 0,
	    "%s", err.msg);
	cases = json_object_get(man, "taco");
	ck_assert(json_array_size(cases) >= 40);
	json_array_foreach(cases, i, o)
	{
		tcase c;

		c.name = json_string_value(json_object_get(o, "name"));
		c.grad = json_string_value(json_object_get(o, "grad"));
		ck_assert(c.name && c.grad);
		c.R = intfield(o, "R");
		c.C = intfield(o, "C");
		c.k = intfield(o, "k");
		c.steps = intfield(o, "steps");
		c.stochastic = intfield(o, "stochastic");
		c.gexp = intfield(o, "gexp");
		c.dtype =
		    dtype_of(json_string_value(json_object_get(o, "dtype")));
		c.lr = bitsfield(o, "lr_bits");
		c.beta = bitsfield(o, "beta_bits");
		c.wd = bitsfield(o, "weight_decay_bits");
		c.seed = hexfield(o, "seed");
		c.tensor_index = hexfield(o, "tensor_index");
		c.gen_seed = hexfield(o, "gen_seed");
		run_fixture_case(&c, f);
		if (c.R > 65535)
			n32++;
		else
			n16++;
		nk[c.k]++;
	}
	/* the matrix the spec asks for is there */
	ck_assert(n32 >= 1 && n16 >= 36);
	ck_assert(nk[1] >= 12 && nk[4] >= 12 && nk[16] >= 12);
	taco_st_close(f);
	json_decref(man);
}
END_TEST

/* ---- TACO: zero and non-finite gradients, blocking ----------------------- */

START_TEST(test_taco_zero_gradient)
{
	const int R = 50, C = 70, k = 16;
	const size_t n = (size_t)R * C;
	uint16_t *W = xcalloc(n, 2), *W0;
	float *G = xcalloc(n, 4);
	tk_taco_args a;
	tstate st;
	uint64_t s = 9;

	for (size_t i = 0; i < n; i++)
		W[i] = tk_f32_bf16_rne(rnd_uniform(&s));
	W0 = xdup(W, n * 2);
	tstate_init(&st, R, C, k);
	taco_args(&a, R, C, k, 0.01f, 0.9f, 0.1f, 1);
	for (int t = 1; t <= 3; t++) { /* from empty: stays empty */
		a.step = (uint64_t)t;
		ops->taco_update(W, TK_BF16, G, a.ncols, st.idx, st.q, st.scale,
				 &a);
		for (int j = 0; j < C; j++) {
			for (int sl = 0; sl < k; sl++) {
				ck_assert_uint_eq(tidx(&st, j, sl), 0xFFFF);
				ck_assert_uint_eq(st.q[(size_t)j * k + sl], 0);
			}
			ck_assert_uint_eq(f2u(st.scale[j]), 0);
		}
		ck_assert(!memcmp(W, W0, n * 2));
	}
	/* A filled state and a zero gradient with beta = 0: every value
	 * becomes 0, so the state empties and no weight moves. */
	for (size_t i = 0; i < n; i++)
		G[i] = rnd_uniform(&s);
	ops->taco_update(W, TK_BF16, G, a.ncols, st.idx, st.q, st.scale, &a);
	ck_assert(tidx(&st, 0, 0) != 0xFFFF);
	memcpy(W0, W, n * 2);
	memset(G, 0, n * 4);
	a.beta = 0.0f;
	ops->taco_update(W, TK_BF16, G, a.ncols, st.idx, st.q, st.scale, &a);
	for (int j = 0; j < C; j++) {
		for (int sl = 0; sl < k; sl++)
			ck_assert_uint_eq(tidx(&st, j, sl), 0xFFFF);
		ck_assert_uint_eq(f2u(st.scale[j]), 0);
	}
	ck_assert(!memcmp(W, W0, n * 2));
	tstate_free(&st);
	free(W);
	free(W0);
	free(G);
}
END_TEST

START_TEST(test_taco_nonfinite)
{
	const int R = 64, C = 12, k = 4;
	const size_t n = (size_t)R * C;
	uint16_t *W = xcalloc(n, 2), *W1, *W2;
	float *G = xcalloc(n, 4), *G2;
	tk_taco_args a;
	tstate st, s1, s2;
	uint64_t s = 11;
	/* columns made bad at step 3, and how */
	const int bad[6] = {0, 2, 5, 7, 9, 11};

	for (size_t i = 0; i < n; i++)
		W[i] = tk_f32_bf16_rne(rnd_uniform(&s));
	tstate_init(&st, R, C, k);
	taco_args(&a, R, C, k, 0.01f, 0.9f, 0.1f, 1);
	for (int t = 1; t <= 2; t++) {
		for (size_t i = 0; i < n; i++)
			G[i] = rnd_uniform(&s);
		a.step = (uint64_t)t;
		ops->taco_update(W, TK_BF16, G, a.ncols, st.idx, st.q, st.scale,
				 &a);
	}
	for (size_t i = 0; i < n; i++)
		G[i] = rnd_uniform(&s);
	G2 = xdup(G, n * 4);
	G[5 * C + 2] = NAN;			  /* NaN on a small row */
	G[0 * C + 5] = INFINITY;		  /* +inf */
	G[(size_t)(R - 1) * C + 7] = -INFINITY;	  /* -inf, last row */
	G[tidx(&st, 9, 0) * (size_t)C + 9] = NAN; /* NaN on a tracked row */
	/* column 0: NaN everywhere */
	for (int r = 0; r < R; r++)
		G[(size_t)r * C + 0] = NAN;
	tstate_copy(&s1, &st);
	tstate_copy(&s2, &st);
	/* column 11: a corrupt state (infinite scale) is skipped too */
	s1.scale[11] = INFINITY;
	W1 = xdup(W, n * 2);
	W2 = xdup(W, n * 2);
	a.step = 3;
	ops->taco_update(W1, TK_BF16, G, a.ncols, s1.idx, s1.q, s1.scale, &a);
	ops->taco_update(W2, TK_BF16, G2, a.ncols, s2.idx, s2.q, s2.scale, &a);
	st.scale[11] = INFINITY; /* what s1 started from */
	for (int j = 0; j < C; j++) {
		int isbad = 0;

		for (int b = 0; b < 6; b++)
			isbad |= bad[b] == j;
		if (isbad) /* unchanged: state and weights */
			ck_assert_msg(col_equal(&s1, &st, W1, W, 2, j),
				      "bad column %d changed", j);
		else /* as without the bad values */
			ck_assert_msg(col_equal(&s1, &s2, W1, W2, 2, j),
				      "good column %d differs", j);
	}
	/* the good columns did step: the run was not a no-op */
	ck_assert(!col_equal(&s1, &st, W1, W, 2, 1));
	tstate_free(&st);
	tstate_free(&s1);
	tstate_free(&s2);
	free(W);
	free(W1);
	free(W2);
	free(G);
	free(G2);
}
END_TEST

/* The whole tensor at once (threads, column blocks) equals one column at a
 * time (C = 1 calls), for F32 and nearest bf16 (the stochastic hash uses
 * the column index, so it is left out here; the fixtures cover it). */
static void check_blocking(int R, int C, int k, float beta, int dtype)
{
	const size_t n = (size_t)R * C, esz = dtype == TK_F32 ? 4 : 2;
	void *W = xcalloc(n, esz), *Wc = xcalloc(n, esz);
	float *G = xcalloc(n, 4), *g1 = xcalloc((size_t)R, 4);
	void *w1 = xcalloc((size_t)R, esz);
	tstate st, sc, one;
	tk_taco_args a, a1;
	uint64_t s = (uint64_t)R * 31 + C;

	for (size_t i = 0; i < n; i++) {
		float w = rnd_uniform(&s);

		if (dtype == TK_F32)
			((float *)W)[i] = w;
		else
			((uint16_t *)W)[i] = tk_f32_bf16_rne(w);
	}
	memcpy(Wc, W, n * esz);
	tstate_init(&st, R, C, k);
	tstate_init(&sc, R, C, k);
	tstate_init(&one, R, 1, k);
	taco_args(&a, R, C, k, 0.003f, beta, 0.01f, 0);
	a1 = a;
	a1.C = 1;
	a1.ncols = 1;
	for (int t = 1; t <= 4; t++) {
		for (size_t i = 0; i < n; i++)
			G[i] = t % 2 ? rnd_uniform(&s) : rnd_ties(&s);
		a.step = a1.step = (uint64_t)t;
		ops->taco_update(W, dtype, G, a.ncols, st.idx, st.q, st.scale,
				 &a);
		for (int j = 0; j < C; j++) {
			size_t ib = one.wide ? 4 : 2;

			for (int r = 0; r < R; r++) {
				g1[r] = G[(size_t)r * C + j];
				memcpy((char *)w1 + r * esz,
				       (char *)Wc + ((size_t)r * C + j) * esz,
				       esz);
			}
			memcpy(one.idx, (char *)sc.idx + (size_t)j * k * ib,
			       k * ib);
			memcpy(one.q, sc.q + (size_t)j * k, (size_t)k);
			one.scale[0] = sc.scale[j];
			ops->taco_update(w1, dtype, g1, a1.ncols, one.idx,
					 one.q, one.scale, &a1);
			for (int r = 0; r < R; r++)
				memcpy((char *)Wc + ((size_t)r * C + j) * esz,
				       (char *)w1 + r * esz, esz);
			memcpy((char *)sc.idx + (size_t)j * k * ib, one.idx,
			       k * ib);
			memcpy(sc.q + (size_t)j * k, one.q, (size_t)k);
			sc.scale[j] = one.scale[0];
		}
		for (int j = 0; j < C; j++)
			ck_assert_msg(col_equal(&st, &sc, W, Wc, esz, j),
				      "R %d C %d step %d: column %d", R, C, t,
				      j);
	}
	tstate_free(&st);
	tstate_free(&sc);
	tstate_free(&one);
	free(W);
	free(Wc);
	free(G);
	free(g1);
	free(w1);
}

START_TEST(test_taco_blocking)
{
	int nt = omp_get_max_threads();

	check_blocking(200, 300, 16, 0.9f, TK_F32);
	check_blocking(130, 400, 4, 0.0f, TK_BF16);
	check_blocking(40, 1000, 16, 0.9f, TK_BF16);
	omp_set_num_threads(3); /* uneven blocks */
	check_blocking(100, 333, 16, 0.9f, TK_F32);
	omp_set_num_threads(nt);
}
END_TEST

START_TEST(test_taco_bad_args)
{
	float W[6] = {1, 2, 3, 4, 5, 6}, G[6] = {1, -1, 1, -1, 1, -1};
	uint16_t idx[3 * 17];
	uint8_t q[3 * 17] = {0};
	float scale[3] = {0};
	tk_taco_args a;

	memset(idx, 0xFF, sizeof(idx));
	taco_args(&a, 2, 3, 0, 0.1f, 0.9f, 0.0f, 0);
	ops->taco_update(W, TK_F32, G, a.ncols, idx, q, scale, &a); /* k = 0 */
	a.k = 17;
	ops->taco_update(W, TK_F32, G, a.ncols, idx, q, scale, &a);
	a.k = 1;
	ops->taco_update(W, 9, G, a.ncols, idx, q, scale,
			 &a); /* unknown dtype */
	for (int i = 0; i < 6; i++)
		ck_assert(W[i] == i + 1);
	ck_assert_uint_eq(idx[0], 0xFFFF);
}
END_TEST

/* ---- TACO: column ranges and the row-streamed update --------------------- */

/* One configuration of the range / streamed checks. */
typedef struct {
	int R, C, k, dtype, stochastic;
	float beta;
} tcfg;

static void *w_init(const tcfg *c, uint64_t *s)
{
	const size_t n = (size_t)c->R * c->C, esz = c->dtype == TK_F32 ? 4 : 2;
	void *W = xcalloc(n, esz);

	for (size_t i = 0; i < n; i++) {
		float w = rnd_uniform(s);

		if (c->dtype == TK_F32)
			((float *)W)[i] = w;
		else
			((uint16_t *)W)[i] = tk_f32_bf16_rne(w);
	}
	return W;
}

/* Whole states and weights bitwise equal. */
static int all_equal(const tstate *a, const tstate *b, const void *Wa,
		     const void *Wb, const tcfg *c)
{
	const size_t esz = c->dtype == TK_F32 ? 4 : 2;

	return !memcmp(a->idx, b->idx, idx_bytes(a)) &&
	       !memcmp(a->q, b->q, (size_t)a->C * a->k) &&
	       !memcmp(a->scale, b->scale, (size_t)a->C * sizeof(float)) &&
	       !memcmp(Wa, Wb, (size_t)c->R * c->C * esz);
}

static void tcfg_args(tk_taco_args *a, const tcfg *c, int t)
{
	taco_args(a, c->R, c->C, c->k, 0.003f, c->beta, 0.01f, c->stochastic);
	a->step = (uint64_t)t;
}

/* Random splits of the columns into ranges, each updated by its own call
 * (G at the range's first column with the tensor's row stride, or packed
 * [R, ncols]), equal the whole-tensor update, over several steps. */
static void check_ranges(const tcfg *c, uint64_t seed)
{
	const size_t n = (size_t)c->R * c->C;
	uint64_t s = seed;
	void *W = w_init(c, &s), *Wr;
	float *G = xcalloc(n, 4), *P = xcalloc(n, 4);
	tstate st, sr;
	tk_taco_args a;

	Wr = xdup(W, n * (c->dtype == TK_F32 ? 4 : 2));
	tstate_init(&st, c->R, c->C, c->k);
	tstate_init(&sr, c->R, c->C, c->k);
	for (int t = 1; t <= 4; t++) {
		int col0 = 0, nr = 0;

		for (size_t i = 0; i < n; i++)
			G[i] = t % 2 ? rnd_uniform(&s) : rnd_ties(&s);
		tcfg_args(&a, c, t);
		ops->taco_update(W, c->dtype, G, c->C, st.idx, st.q, st.scale,
				 &a);
		while (col0 < c->C) {
			int w = 1 + (int)(rng_next(&s) % (uint64_t)(c->C / 3));

			a.col0 = col0;
			a.ncols = w < c->C - col0 ? w : c->C - col0;
			if (nr++ % 2) {
				for (int r = 0; r < c->R; r++)
					memcpy(P + (size_t)r * a.ncols,
					       G + (size_t)r * c->C + col0,
					       (size_t)a.ncols * 4);
				ops->taco_update(Wr, c->dtype, P, a.ncols,
						 sr.idx, sr.q, sr.scale, &a);
			} else {
				ops->taco_update(Wr, c->dtype, G + col0, c->C,
						 sr.idx, sr.q, sr.scale, &a);
			}
			col0 += a.ncols;
		}
		ck_assert_msg(all_equal(&st, &sr, W, Wr, c),
			      "ranges: R %d C %d k %d dtype %d sr %d beta %g "
			      "step %d (%d ranges)",
			      c->R, c->C, c->k, c->dtype, c->stochastic,
			      (double)c->beta, t, nr);
	}
	tstate_free(&st);
	tstate_free(&sr);
	free(W);
	free(Wr);
	free(G);
	free(P);
}

START_TEST(test_taco_column_ranges)
{
	static const int ks[3] = {1, 4, 16};
	static const float betas[2] = {0.0f, 0.9f};
	uint64_t seed = 100;

	for (int d = 0; d < 3; d++)
		for (int ki = 0; ki < 3; ki++)
			for (int bi = 0; bi < 2; bi++) {
				tcfg c = {90,	  200,
					  ks[ki], d ? TK_BF16 : TK_F32,
					  d == 2, betas[bi]};

				check_ranges(&c, seed++);
			}
	/* parallel blocks inside the ranges */
	{
		tcfg c = {300, 700, 16, TK_BF16, 1, 0.9f};

		check_ranges(&c, seed++);
	}
}
END_TEST

/* Feeds the rows of the dense G [R, C] whose flag active[r] is set, plus
 * some inactive (zero) rows, in increasing order: random chunks, each
 * either a contiguous block row0.. (every row of it, zeros included) or an
 * explicit rows[] list of the chunk's active rows; the rows are copied
 * into a packed buffer with row stride ldg >= C. */
static void feed_rows(void *scan, const float *G, const unsigned char *active,
		      const tk_taco_args *a, uint64_t *s)
{
	const int R = a->R, C = a->C, ldg = C + (int)(rng_next(s) % 3);
	const int maxlen = R / 5 > 1 ? R / 5 : 1;
	float *P = xcalloc((size_t)(maxlen + 1) * ldg, 4);
	int32_t *rows = xcalloc((size_t)maxlen + 1, sizeof(int32_t));
	int r0 = 0;

	while (r0 < R) {
		int len = 1 + (int)(rng_next(s) % (uint64_t)maxlen), m = 0;

		if (len > R - r0)
			len = R - r0;
		if (rng_next(s) % 2) { /* contiguous */
			for (int i = 0; i < len; i++)
				memcpy(P + (size_t)i * ldg,
				       G + (size_t)(r0 + i) * C, (size_t)C * 4);
			ops->taco_feed(scan, P, ldg, NULL, r0, len, a);
		} else { /* a list with gaps */
			for (int i = 0; i < len; i++)
				if (active[r0 + i]) {
					rows[m] = r0 + i;
					memcpy(P + (size_t)m * ldg,
					       G + (size_t)(r0 + i) * C,
					       (size_t)C * 4);
					m++;
				}
			if (m)
				ops->taco_feed(scan, P, ldg, rows, 0, m, a);
		}
		r0 += len;
	}
	free(P);
	free(rows);
}

/* The streamed update equals the whole one on the dense gradient (rows not
 * fed are zero there), over several steps with the state carried. bad:
 * at step 3 put a NaN and an infinity in two columns. */
static void check_streamed(const tcfg *c, double p_active, int bad,
			   uint64_t seed)
{
	const size_t n = (size_t)c->R * c->C;
	uint64_t s = seed;
	void *W = w_init(c, &s), *Ws;
	float *G = xcalloc(n, 4);
	unsigned char *active = xcalloc((size_t)c->R, 1);
	size_t sb = ops->taco_scan_bytes(c->C);
	void *scan = ops->alloc(sb);
	tstate st, ss;
	tk_taco_args a;

	ck_assert_ptr_nonnull(scan);
	ck_assert_uint_eq(
	    sb, tk_taco_scan_bytes(c->C)); /* the fixed size holds it */
	Ws = xdup(W, n * (c->dtype == TK_F32 ? 4 : 2));
	tstate_init(&st, c->R, c->C, c->k);
	tstate_init(&ss, c->R, c->C, c->k);
	for (int t = 1; t <= 5; t++) {
		memset(G, 0, n * 4);
		for (int r = 0; r < c->R; r++) {
			active[r] =
			    (double)(rng_next(&s) >> 11) * 0x1p-53 < p_active;
			if (active[r])
				for (int j = 0; j < c->C; j++)
					G[(size_t)r * c->C + j] =
					    t % 2 ? rnd_uniform(&s)
						  : rnd_ties(&s);
		}
		if (bad && t == 3) {
			int r1 = -1, r2 = -1;

			for (int r = 0; r < c->R; r++)
				if (active[r]) {
					r2 = r;
					if (r1 < 0)
						r1 = r;
				}
			if (r1 >= 0) {
				G[(size_t)r2 * c->C + 1] = NAN;
				G[(size_t)r1 * c->C + c->C - 1] = -INFINITY;
			}
			/* a NaN on a row column 2 tracks, made active */
			if (tidx(&st, 2, 0) !=
			    (st.wide ? 0xFFFFFFFFu : 0xFFFF)) {
				uint32_t r = tidx(&st, 2, 0);

				active[r] = 1;
				G[(size_t)r * c->C + 2] = NAN;
			}
		}
		tcfg_args(&a, c, t);
		ops->taco_update(W, c->dtype, G, c->C, st.idx, st.q, st.scale,
				 &a);
		a.col0 = 7; /* not used by the streamed calls */
		a.ncols = 1;
		ops->taco_begin(scan, ss.idx, ss.q, ss.scale, &a);
		feed_rows(scan, G, active, &a, &s);
		ops->taco_finish(scan, Ws, c->dtype, ss.idx, ss.q, ss.scale,
				 &a);
		ck_assert_msg(all_equal(&st, &ss, W, Ws, c),
			      "streamed: R %d C %d k %d dtype %d sr %d beta %g "
			      "step %d",
			      c->R, c->C, c->k, c->dtype, c->stochastic,
			      (double)c->beta, t);
	}
	if (bad) { /* the bad columns were really skipped at step 3 */
		ck_assert(st.scale[1] == ss.scale[1]);
	}
	ops->free(scan, sb);
	tstate_free(&st);
	tstate_free(&ss);
	free(W);
	free(Ws);
	free(G);
	free(active);
}

START_TEST(test_taco_streamed)
{
	static const int ks[3] = {1, 4, 16};
	static const float betas[2] = {0.0f, 0.9f};
	uint64_t seed = 200;

	for (int d = 0; d < 3; d++)
		for (int ki = 0; ki < 3; ki++)
			for (int bi = 0; bi < 2; bi++) {
				tcfg c = {120,	  150,
					  ks[ki], d ? TK_BF16 : TK_F32,
					  d == 2, betas[bi]};

				check_streamed(&c, 1.0, 0, seed++);
				check_streamed(&c, 0.3, 0, seed++);
			}
	{ /* non-finite values */
		tcfg c = {100, 70, 4, TK_BF16, 1, 0.9f};

		check_streamed(&c, 0.5, 1, seed++);
		c.k = 16;
		check_streamed(&c, 1.0, 1, seed++);
	}
	{ /* parallel feeds, several column groups */
		tcfg c = {400, 333, 16, TK_BF16, 1, 0.9f};

		check_streamed(&c, 0.4, 0, seed++);
	}
}
END_TEST

/* R > 65535: uint32_t slot rows. */
START_TEST(test_taco_streamed_wide)
{
	tcfg c = {70000, 24, 4, TK_BF16, 1, 0.9f};

	check_streamed(&c, 0.02, 0, 300);
	c.k = 16;
	c.dtype = TK_F32;
	check_streamed(&c, 0.01, 1, 301);
	{
		tcfg r = {70000, 40, 16, TK_BF16, 1, 0.9f};

		check_ranges(&r, 302);
	}
}
END_TEST

/* ---- AdamW ----------------------------------------------------------------
 */

static void read_f32(const taco_st_tensor *t, size_t off, float *dst, size_t n)
{
	ck_assert(t->nbytes >= (off + n) * 4);
	memcpy(dst, (const char *)t->data + off * 4, n * 4);
}

START_TEST(test_adamw_fixtures)
{
	json_error_t jerr;
	json_t *man =
	    json_load_file(tu_fixture("optim/manifest.json"), 0, &jerr);
	json_t *cases, *o;
	taco_st_file *f = NULL;
	taco_err err;
	size_t ci;

	ck_assert_msg(man != NULL, "manifest: %s", jerr.text);
	ck_assert_msg(
	    taco_st_open(tu_fixture("optim/adamw.safetensors"), &f, &err) == 0,
	    "%s", err.msg);
	cases = json_object_get(man, "adamw");
	ck_assert(json_array_size(cases) >= 3);
	json_array_foreach(cases, ci, o)
	{
		const char *name =
		    json_string_value(json_object_get(o, "name"));
		int dtype =
		    dtype_of(json_string_value(json_object_get(o, "dtype")));
		size_t n = (size_t)intfield(o, "n");
		int steps = intfield(o, "steps");
		size_t esz = dtype == TK_F32 ? 4 : 2;
		tk_adamw_args a = {
		    .lr = bitsfield(o, "lr_bits"),
		    .beta1 = bitsfield(o, "beta1_bits"),
		    .beta2 = bitsfield(o, "beta2_bits"),
		    .eps = bitsfield(o, "eps_bits"),
		    .weight_decay = bitsfield(o, "weight_decay_bits"),
		};
		const taco_st_tensor *tp0, *tg, *tmas, *tm, *tv, *tp, *ttm,
		    *ttmm, *ttv;
		float *master = xcalloc(n, 4), *m = xcalloc(n, 4),
		      *v = xcalloc(n, 4), *g = xcalloc(n, 4),
		      *want = xcalloc(n, 4);
		void *p = xcalloc(n, esz), *pwant = xcalloc(n, esz);

		ck_assert(name != NULL);
		tp0 = need(f, name, "p0", TK_F32, n * 4);
		tg = need(f, name, "g", TK_F32, (uint64_t)steps * n * 4);
		tmas = need(f, name, "master", TK_F32, (uint64_t)steps * n * 4);
		tm = need(f, name, "m", TK_F32, (uint64_t)steps * n * 4);
		tv = need(f, name, "v", TK_F32, (uint64_t)steps * n * 4);
		tp = need(f, name, "p", dtype == TK_F32 ? TK_F32 : TACO_ST_U16,
			  (uint64_t)steps * n * esz);
		ttm = need(f, name, "torch_master", TK_F32,
			   (uint64_t)steps * n * 4);
		ttmm =
		    need(f, name, "torch_m", TK_F32, (uint64_t)steps * n * 4);
		ttv = need(f, name, "torch_v", TK_F32, (uint64_t)steps * n * 4);
		read_f32(tp0, 0, master, n);
		for (int t = 1; t <= steps; t++) {
			size_t off = (size_t)(t - 1) * n;

			read_f32(tg, off, g, n);
			a.step = (uint64_t)t;
			ops->adamw_update(p, dtype, master, m, v, g, n, &a);
			/* bitwise: the emulation of PyTorch's order */
			read_f32(tmas, off, want, n);
			ck_assert_msg(!memcmp(master, want, n * 4),
				      "%s step %d: master", name, t);
			read_f32(tm, off, want, n);
			ck_assert_msg(!memcmp(m, want, n * 4), "%s step %d: m",
				      name, t);
			read_f32(tv, off, want, n);
			ck_assert_msg(!memcmp(v, want, n * 4), "%s step %d: v",
				      name, t);
			memcpy(pwant, (const char *)tp->data + off * esz,
			       n * esz);
			ck_assert_msg(!memcmp(p, pwant, n * esz),
				      "%s step %d: model copy", name, t);
			/* PyTorch itself: m and v bitwise (no sqrt in them),
			 * the master within a tight tolerance (its CPU sqrt
			 * is not correctly rounded) */
			read_f32(ttmm, off, want, n);
			ck_assert_msg(!memcmp(m, want, n * 4),
				      "%s step %d: m vs torch", name, t);
			read_f32(ttv, off, want, n);
			ck_assert_msg(!memcmp(v, want, n * 4),
				      "%s step %d: v vs torch", name, t);
			read_f32(ttm, off, want, n);
			for (size_t i = 0; i < n; i++) {
				double d = fabs((double)master[i] - want[i]);
				double tol =
				    1e-6 * (fabs((double)want[i]) + a.lr);

				ck_assert_msg(d <= tol,
					      "%s step %d [%zu]: %.9g vs "
					      "torch %.9g",
					      name, t, i, master[i], want[i]);
			}
		}
		free(master);
		free(m);
		free(v);
		free(g);
		free(want);
		free(p);
		free(pwant);
	}
	taco_st_close(f);
	json_decref(man);
}
END_TEST

/* The threaded path (n >= 32768) equals small serial calls; the formula
 * against a direct evaluation in this file for one step. */
START_TEST(test_adamw_parallel_and_formula)
{
	const size_t n = 100003;
	float *m1 = xcalloc(n, 4), *v1 = xcalloc(n, 4), *p1 = xcalloc(n, 4);
	float *m2 = xcalloc(n, 4), *v2 = xcalloc(n, 4), *p2 = xcalloc(n, 4);
	float *g = xcalloc(n, 4), *x0;
	uint16_t *b1 = xcalloc(n, 2), *b2 = xcalloc(n, 2);
	tk_adamw_args a = {.lr = 1e-3f,
			   .beta1 = 0.9f,
			   .beta2 = 0.999f,
			   .eps = 1e-8f,
			   .weight_decay = 0.1f};
	uint64_t s = 5;

	for (size_t i = 0; i < n; i++)
		p1[i] = rnd_uniform(&s);
	memcpy(p2, p1, n * 4);
	x0 = xdup(p1, n * 4);
	for (int t = 1; t <= 3; t++) {
		for (size_t i = 0; i < n; i++)
			g[i] = rnd_uniform(&s) * ldexpf(1, -(int)(i % 20));
		a.step = (uint64_t)t;
		ops->adamw_update(b1, TK_BF16, p1, m1, v1, g, n, &a);
		for (size_t i = 0; i < n; i += 1000) {
			size_t c = n - i < 1000 ? n - i : 1000;

			ops->adamw_update(b2 + i, TK_BF16, p2 + i, m2 + i,
					  v2 + i, g + i, c, &a);
		}
		ck_assert(!memcmp(p1, p2, n * 4));
		ck_assert(!memcmp(m1, m2, n * 4));
		ck_assert(!memcmp(v1, v2, n * 4));
		ck_assert(!memcmp(b1, b2, n * 2));
		if (t == 1) {
			/* step 1 in double: m_hat = g, v_hat = g^2, so
			 * p = p (1 - lr wd) - lr g / (|g| + eps) */
			for (size_t i = 0; i < n; i++) {
				double want =
				    (double)x0[i] * (1 - 1e-4) -
				    1e-3 * g[i] / (fabs((double)g[i]) + 1e-8);

				ck_assert(fabs(p1[i] - want) < 1e-6);
				ck_assert_uint_eq(b1[i],
						  tk_f32_bf16_rne(p1[i]));
			}
		}
	}
	free(m1);
	free(v1);
	free(p1);
	free(m2);
	free(v2);
	free(p2);
	free(g);
	free(x0);
	free(b1);
	free(b2);
}
END_TEST

/* taco_gather after TACO updates: the gathered entries, written at their
 * slot rows into the weights before the update, give the weights after
 * it, bit for bit (the one entry a column changes is at a slot row);
 * empty slots give 0. */
static void check_gather(int R, int C, int k, int dtype, uint64_t seed)
{
	size_t n = (size_t)R * C, es = dtype == TK_F32 ? 4 : 2;
	size_t ib = R <= 65535 ? 2 : 4, ns = (size_t)C * k;
	void *W = xcalloc(n, es), *W0 = xcalloc(n, es), *idx = xcalloc(ns, ib);
	void *vals = xcalloc(ns, es);
	uint8_t *q = xcalloc(ns, 1);
	float *scale = xcalloc((size_t)C, 4), *G = xcalloc(n, 4);
	uint64_t st = seed;
	tk_taco_args a = {.R = R,
			  .C = C,
			  .ncols = C,
			  .k = k,
			  .lr = 1e-2f,
			  .beta = 0.9f,
			  .stochastic = 1,
			  .seed = seed,
			  .tensor_index = 3};

	tu_fill_uniform(G, n, -1, 1, &st);
	for (size_t i = 0; i < n; i++) {
		if (dtype == TK_F32)
			((float *)W)[i] = G[i];
		else
			((uint16_t *)W)[i] = tk_f32_bf16_rne(G[i]);
	}
	memset(idx, 0xFF, ns * ib);
	for (int step = 1; step <= 6; step++) {
		size_t changed = 0, empty = 0;
		a.step = (uint64_t)step;
		tu_fill_uniform(G, n, -1, 1, &st);
		memcpy(W0, W, n * es);
		ops->taco_update(W, dtype, G, C, idx, q, scale, &a);
		memset(vals, 0x5A, ns * es);
		ops->taco_gather(vals, W, dtype, idx, R, C, k);
		for (size_t i = 0; i < n * es; i += es)
			changed +=
			    memcmp((char *)W + i, (char *)W0 + i, es) != 0;
		ck_assert_uint_le(changed, (size_t)C);
		ck_assert_uint_gt(changed, 0);
		for (size_t i = 0; i < ns; i++) {
			uint32_t r = ib == 2 ? ((uint16_t *)idx)[i]
					     : ((uint32_t *)idx)[i];
			size_t j = i / (size_t)k;
			if (r >= (uint32_t)R) {
				static const char zero[4];
				ck_assert(memcmp((char *)vals + i * es, zero,
						 es) == 0);
				empty++;
				continue;
			}
			memcpy((char *)W0 + ((size_t)r * C + j) * es,
			       (char *)vals + i * es, es);
		}
		ck_assert_msg(memcmp(W0, W, n * es) == 0,
			      "R %d C %d k %d step %d: the gathered entries do "
			      "not rebuild W",
			      R, C, k, step);
		if (step == 1 && k > 1 && R > k)
			ck_assert_uint_eq(empty, 0);
	}
	free(W);
	free(W0);
	free(idx);
	free(vals);
	free(q);
	free(scale);
	free(G);
}

START_TEST(test_taco_gather)
{
	check_gather(300, 50, 16, TK_BF16, 1);
	check_gather(70, 40, 4, TK_F32, 2);
	check_gather(12, 9, 16, TK_BF16, 3);   /* fewer rows than slots */
	check_gather(70000, 3, 2, TK_BF16, 4); /* uint32 indices */
}
END_TEST

static Suite *optim_suite(void)
{
	Suite *s = suite_create("optim_kernels");
	TCase *tc = tcase_create("cpu");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_fp8_decode_known);
	tcase_add_test(tc, test_fp8_roundtrip_all);
	tcase_add_test(tc, test_fp8_midpoints);
	tcase_add_test(tc, test_fp8_saturation_and_specials);
	tcase_add_test(tc, test_fp8_brute_force);
	tcase_add_test(tc, test_small_float_rounding);
	tcase_add_test(tc, test_convert_reference);
	tcase_add_test(tc, test_taco_exact);
	tcase_add_test(tc, test_taco_gather);
	tcase_add_test(tc, test_taco_fixtures);
	tcase_add_test(tc, test_taco_zero_gradient);
	tcase_add_test(tc, test_taco_nonfinite);
	tcase_add_test(tc, test_taco_blocking);
	tcase_add_test(tc, test_taco_bad_args);
	tcase_add_test(tc, test_taco_column_ranges);
	tcase_add_test(tc, test_taco_streamed);
	tcase_add_test(tc, test_taco_streamed_wide);
	tcase_add_test(tc, test_adamw_fixtures);
	tcase_add_test(tc, test_adamw_parallel_and_formula);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	ops = tk_cpu_ops();
	sr = srunner_create(optim_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
