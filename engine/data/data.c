/* data.c: pre-tokenized JSONL and batching. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "tk_hash.h"

int taco_data_reserve(taco_data *d, size_t need)
{
	size_t cap = d->cap ? d->cap : 4096;
	int32_t *t, *l;

	if (need <= d->cap)
		return 0;
	while (cap < need)
		cap *= 2;
	t = realloc(d->tokens, cap * sizeof(*t));
	if (!t)
		return -ENOMEM;
	d->tokens = t;
	l = realloc(d->labels, cap * sizeof(*l));
	if (!l)
		return -ENOMEM;
	d->labels = l;
	d->cap = cap;
	return 0;
}

/* Appends the integers of array a (input_ids or labels) at d->n_tokens. */
static int read_ids(json_t *a, const char *path, size_t line, const char *key,
		    int vocab, int allow_masked, int32_t *dst, taco_err *err)
{
	size_t i;
	json_t *v;

	json_array_foreach(a, i, v)
	{
		json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
		if (!json_is_integer(v) ||
		    !((x >= 0 && x < vocab) || (allow_masked && x == -100)))
			return taco_err_set(err, -EINVAL,
					    "%s:%zu: %s[%zu] must be a token "
					    "id in [0, %d)%s",
					    path, line, key, i, vocab,
					    allow_masked ? " or -100" : "");
		dst[i] = (int32_t)x;
	}
	return 0;
}

static int parse_line(taco_data *d, const char *buf, size_t len,
		      const char *path, size_t line, int vocab, taco_err *err)
{
	json_error_t jerr;
	json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	json_t *ids, *labels;
	size_t n;
	int r;

	if (!root)
		return taco_err_set(err, -EINVAL, "%s:%zu: invalid JSON: %s",
				    path, line, jerr.text);
	ids = json_object_get(root, "input_ids");
	labels = json_object_get(root, "labels");
	if (!json_is_object(root) || !json_is_array(ids) ||
	    json_array_size(ids) < 2) {
		r = taco_err_set(err, -EINVAL,
				 "%s:%zu: needs \"input_ids\": an array of at "
				 "least 2 token ids",
				 path, line);
		goto out;
	}
	n = json_array_size(ids);
	if (n > TACO_DATA_MAX_TOKENS) {
		r = taco_err_set(
		    err, -EINVAL,
		    "%s:%zu: %zu tokens, more than the limit of %u", path, line,
		    n, TACO_DATA_MAX_TOKENS);
		goto out;
	}
	if (labels &&
	    (!json_is_array(labels) || json_array_size(labels) != n)) {
		r = taco_err_set(err, -EINVAL,
				 "%s:%zu: \"labels\" must be an array as long "
				 "as \"input_ids\"",
				 path, line);
		goto out;
	}
	if ((r = taco_data_reserve(d, d->n_tokens + n))) {
		taco_err_set(err, r, "%s:%zu: out of memory", path, line);
		goto out;
	}
	if ((r = read_ids(ids, path, line, "input_ids", vocab, 0,
			  d->tokens + d->n_tokens, err)))
		goto out;
	if (labels)
		r = read_ids(labels, path, line, "labels", vocab, 1,
			     d->labels + d->n_tokens, err);
	else
		memcpy(d->labels + d->n_tokens, d->tokens + d->n_tokens,
		       n * sizeof(int32_t));
	if (!r)
		d->n_tokens += n;
out:
	json_decref(root);
	return r;
}

int taco_data_load_pretok(const char *path, int vocab, int64_t max_examples,
			  taco_data **out, taco_err *err)
{
	FILE *f = fopen(path, "rb");
	taco_data *d = NULL;
	char *line = NULL;
	size_t cap = 0, lineno = 0, offcap = 0;
	ssize_t len;
	int r = 0;

	if (!f)
		return taco_err_set(err, -errno, "%s: %s", path,
				    strerror(errno));
	d = calloc(1, sizeof(*d));
	if (!d) {
		r = taco_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	while ((len = getline(&line, &cap, f)) >= 0) {
		lineno++;
		if ((size_t)len > TACO_DATA_MAX_LINE) {
			r = taco_err_set(err, -EINVAL,
					 "%s:%zu: line longer than %u bytes",
					 path, lineno, TACO_DATA_MAX_LINE);
			goto out;
		}
		if (strspn(line, " \t\r\n") == (size_t)len)
			continue; /* blank line */
		if ((int64_t)d->n >= max_examples) {
			r = taco_err_set(err, -EINVAL,
					 "%s:%zu: more than %lld examples",
					 path, lineno, (long long)max_examples);
			goto out;
		}
		if (d->n + 2 > offcap) {
			size_t nc = offcap ? offcap * 2 : 1024;
			size_t *o = realloc(d->off, nc * sizeof(*o));
			if (!o) {
				r = taco_err_set(err, -ENOMEM, "out of memory");
				goto out;
			}
			d->off = o;
			offcap = nc;
		}
		d->off[d->n] = d->n_tokens;
		if ((r = parse_line(d, line, (size_t)len, path, lineno, vocab,
				    err)))
			goto out;
		d->n++;
		d->off[d->n] = d->n_tokens;
	}
	if (ferror(f)) {
		r = taco_err_set(err, -EIO, "%s: read error", path);
		goto out;
	}
	if (d->n == 0)
		r = taco_err_set(err, -EINVAL, "%s: no examples", path);
out:
	free(line);
	fclose(f);
	if (r) {
		taco_data_free(d);
		return r;
	}
	*out = d;
	return 0;
}

void taco_data_free(taco_data *d)
{
	if (!d)
		return;
	free(d->off);
	free(d->tokens);
	free(d->labels);
	for (int i = 0; i < d->n_prompts; i++) {
		free(d->prompts[i].ids);
		free(d->prompts[i].user);
		free(d->prompts[i].reference);
	}
	free(d->prompts);
	free(d);
}

/* Example ex at row position `at`, at most n tokens of it: tokens, shifted
 * targets (the last one -100: nothing follows inside the example) and
 * positions restarting at 0. Returns the tokens written. */
static int put_example(const taco_data *d, size_t ex, int n, int32_t *tok,
		       int32_t *tgt, int32_t *pos)
{
	size_t o = d->off[ex], len = d->off[ex + 1] - o;

	if ((size_t)n > len)
		n = (int)len;
	for (int t = 0; t < n; t++) {
		tok[t] = d->tokens[o + t];
		tgt[t] = (size_t)t + 1 < len && t + 1 < n ? d->labels[o + t + 1]
							  : -100;
		pos[t] = t;
	}
	/* truncated inside the example: the last kept token still has a
	 * target */
	if ((size_t)n < len && n > 0)
		tgt[n - 1] = d->labels[o + n];
	return n;
}

/* Padding: no loss, a document of its own. */
static void pad(int from, int T, int32_t *tok, int32_t *tgt, int32_t *pos)
{
	for (int t = from; t < T; t++) {
		tok[t] = 0;
		tgt[t] = -100;
		pos[t] = t - from;
	}
}

static size_t example_len(const taco_data *d, size_t ex)
{
	return d->off[ex + 1] - d->off[ex];
}

int64_t taco_data_count_targets(const taco_data *d, int seq_len)
{
	int64_t n = 0;

	for (size_t e = 0; e < d->n; e++) {
		size_t o = d->off[e], len = d->off[e + 1] - o;
		/* position t predicts label t + 1: j = t + 1 in [1, min(len-1,
		 * T)] */
		for (size_t j = 1; j < len && j <= (size_t)seq_len; j++)
			n += d->labels[o + j] != -100;
	}
	return n;
}

/* A Fisher-Yates shuffle of 0..n-1 driven by splitmix64 of (seed, epoch). */
static void shuffle(size_t n, uint64_t seed, uint64_t epoch, size_t *order)
{
	uint64_t s = tk_splitmix64(seed ^ tk_splitmix64(epoch));

	for (size_t i = 0; i < n; i++)
		order[i] = i;
	for (size_t i = n; i > 1; i--) {
		size_t j;
		s = tk_splitmix64(s);
		j = (size_t)(s % i);
		size_t t = order[i - 1];
		order[i - 1] = order[j];
		order[j] = t;
	}
}

void taco_data_epoch_order(const taco_data *d, uint64_t seed, uint64_t epoch,
			   size_t *order)
{
	shuffle(d->n, seed, epoch, order);
}

void taco_data_pair_order(const taco_data *d, uint64_t seed, uint64_t epoch,
			  size_t *order)
{
	shuffle(d->n / 2, seed, epoch, order);
}

void taco_data_next_batch(const taco_data *d, uint64_t seed, taco_cursor *cur,
			  size_t *order, uint64_t *order_epoch, int B, int T,
			  int packing, int32_t *tokens, int32_t *targets,
			  int32_t *pos)
{
	for (int b = 0; b < B; b++) {
		size_t row = (size_t)b * T;
		int fill = 0;

		for (;;) {
			size_t ex;
			if (cur->index >= d->n) {
				cur->epoch++;
				cur->index = 0;
			}
			if (*order_epoch != cur->epoch) {
				taco_data_epoch_order(d, seed, cur->epoch,
						      order);
				*order_epoch = cur->epoch;
			}
			ex = order[cur->index];
			/* a row takes at least one example, truncated */
			if (fill > 0 &&
			    (!packing ||
			     fill + (int64_t)example_len(d, ex) > T))
				break;
			fill +=
			    put_example(d, ex, T - fill, tokens + row + fill,
					targets + row + fill, pos + row + fill);
			cur->index++;
			if (!packing || fill == T)
				break;
		}
		pad(fill, T, tokens + row, targets + row, pos + row);
	}
}

void taco_data_rows(const taco_data *d, size_t first, int B, int T,
		    int32_t *tokens, int32_t *targets, int32_t *pos)
{
	for (int b = 0; b < B; b++) {
		size_t row = (size_t)b * T;
		int n = 0;
		if (first + (size_t)b < d->n)
			n = put_example(d, first + (size_t)b, T, tokens + row,
					targets + row, pos + row);
		pad(n, T, tokens + row, targets + row, pos + row);
	}
}

/* Pair p's two sequences into rows 2i and 2i + 1 of T tokens. */
static void put_pair(const taco_data *d, size_t p, int i, int T,
		     int32_t *tokens, int32_t *targets, int32_t *pos)
{
	for (int s = 0; s < 2; s++) {
		size_t row = (size_t)(2 * i + s) * T;
		int n = put_example(d, 2 * p + s, T, tokens + row,
				    targets + row, pos + row);
		pad(n, T, tokens + row, targets + row, pos + row);
	}
}

void taco_data_next_pairs(const taco_data *d, uint64_t seed, taco_cursor *cur,
			  size_t *order, uint64_t *order_epoch, int P, int T,
			  int32_t *tokens, int32_t *targets, int32_t *pos,
			  size_t *ids)
{
	for (int i = 0; i < P; i++) {
		if (cur->index >= d->n / 2) {
			cur->epoch++;
			cur->index = 0;
		}
		if (*order_epoch != cur->epoch) {
			taco_data_pair_order(d, seed, cur->epoch, order);
			*order_epoch = cur->epoch;
		}
		put_pair(d, order[cur->index], i, T, tokens, targets, pos);
		if (ids)
			ids[i] = order[cur->index];
		cur->index++;
	}
}

void taco_data_pair_rows(const taco_data *d, size_t first, int P, int T,
			 int32_t *tokens, int32_t *targets, int32_t *pos)
{
	for (int i = 0; i < P; i++) {
		if (first + (size_t)i < d->n / 2) {
			put_pair(d, first + (size_t)i, i, T, tokens, targets,
				 pos);
			continue;
		}
		for (int s = 0; s < 2; s++) { /* past the end: no loss */
			size_t row = (size_t)(2 * i + s) * T;
			pad(0, T, tokens + row, targets + row, pos + row);
		}
	}
}
