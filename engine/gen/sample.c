/* sample.c: one token from a row of logits (gen.h). */
#include <math.h>
#include <stdlib.h>

#include "gen.h"

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

taco_gen_rng taco_gen_rng_of(uint64_t seed, int i)
{
	/* completion i's stream: the seed and i mixed, so that the
	 * completions of one seed are unrelated and each repeats */
	uint64_t s = seed ^ (0x632be59bd9b4e019ull * (uint64_t)(i + 1));
	taco_gen_rng r = {splitmix64(&s)};

	return r;
}

/* uniform in [0, 1), 24 random bits as a float's mantissa holds them */
static float uniform01(taco_gen_rng *r)
{
	return (float)(splitmix64(&r->s) >> 40) * (1.0f / 16777216.0f);
}

int32_t taco_gen_argmax(const float *x, int n)
{
	int32_t b = 0;

	for (int i = 1; i < n; i++)
		if (x[i] > x[b])
			b = i;
	return b;
}

/* the scaled logits (ctx), descending, ties by index */
static int by_logit_desc(const void *a, const void *b, void *ctx)
{
	const float *sort_key = ctx;
	int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;

	if (sort_key[i] != sort_key[j])
		return sort_key[i] > sort_key[j] ? -1 : 1;
	return i < j ? -1 : i > j;
}

int32_t taco_gen_sample(const float *logits, int V, const taco_sampling *s,
			taco_gen_rng *rng, float *pf, int32_t *pi)
{
	int n = V, k = s->top_k > 0 && s->top_k < V ? s->top_k : V;
	float mx, sum = 0.0f, u, acc = 0.0f;

	if (!(s->temperature > 0))
		return taco_gen_argmax(logits, V);
	for (int v = 0; v < V; v++) {
		pf[v] = logits[v] / s->temperature;
		pi[v] = v;
	}
	/* candidates by scaled logit (the sort is the only cost above V;
	 * a completion's logits are a few hundred kB at most) */
	qsort_r(pi, (size_t)V, sizeof(int32_t), by_logit_desc, pf);
	/* top-k: the k largest and every tie of the k-th */
	while (k < V && pf[pi[k]] == pf[pi[k - 1]])
		k++;
	n = k;
	mx = pf[pi[0]];
	for (int j = 0; j < n; j++)
		sum += expf(pf[pi[j]] - mx);
	if (s->top_p < 1.0f) {
		/* top-p: the most likely until their probability reaches
		 * top_p, the one that crosses it included */
		float cum = 0.0f;
		int keep = 0;
		while (keep < n && cum < s->top_p) {
			cum += expf(pf[pi[keep]] - mx) / sum;
			keep++;
		}
		n = keep > 0 ? keep : 1;
		sum = 0.0f;
		for (int j = 0; j < n; j++)
			sum += expf(pf[pi[j]] - mx);
	}
	u = uniform01(rng) * sum;
	for (int j = 0; j < n; j++) {
		acc += expf(pf[pi[j]] - mx);
		if (u < acc)
			return pi[j];
	}
	return pi[n - 1];
}
