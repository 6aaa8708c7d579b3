/* model_name.c: base, fine-tuned and checkpoint model names (model_name.h). */
#include "api/model_name.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define CKPT_PREFIX "ckpt-step-"

int tacod_model_name_plain(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (!n || n > max || !strcmp(s, ".") || !strcmp(s, ".."))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!(s[i] == '-' || s[i] == '_' || s[i] == '.' ||
		      (s[i] >= '0' && s[i] <= '9') ||
		      (s[i] >= 'a' && s[i] <= 'z') ||
		      (s[i] >= 'A' && s[i] <= 'Z')))
			return 0;
	return 1;
}

/* The part of s up to the next ':' (or its end) into out (cap bytes): its
 * length, or -1 when it does not fit. */
static long part(const char **s, char *out, size_t cap)
{
	size_t n = strcspn(*s, ":");

	if (n >= cap)
		return -1;
	memcpy(out, *s, n);
	out[n] = 0;
	*s += n;
	return (long)n;
}

static int parse_step(const char *s, int64_t *step)
{
	int64_t v = 0;
	size_t n = strlen(s);

	/* at most 18 digits: no overflow; no sign, no leading zero */
	if (!n || n > 18 || (s[0] == '0' && n > 1))
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		v = v * 10 + (s[i] - '0');
	}
	*step = v;
	return 0;
}

int tacod_model_name_parse(const char *name, tacod_model_name *out)
{
	tacod_model_name m = {0};
	char id[TACOD_ID_MAX - 6], last[40];
	const char *s = name;

	if (strncmp(name, "ft:", 3)) {
		if (!tacod_model_name_plain(name, TACOD_BASE_NAME_MAX))
			return -EINVAL;
		m.kind = TACOD_MODEL_BASE;
		memcpy(m.root, name, strlen(name) + 1);
		*out = m;
		return 0;
	}
	s += 3;
	if (part(&s, m.root, TACOD_BASE_NAME_MAX + 1) < 1 || *s++ != ':' ||
	    part(&s, m.suffix, sizeof(m.suffix)) < 0 || *s++ != ':' ||
	    part(&s, id, sizeof(id)) < 1)
		return -EINVAL;
	m.kind = TACOD_MODEL_FINE_TUNED;
	if (*s == ':') {
		s++;
		if (part(&s, last, sizeof(last)) < 0 || *s ||
		    strncmp(last, CKPT_PREFIX, strlen(CKPT_PREFIX)) ||
		    parse_step(last + strlen(CKPT_PREFIX), &m.step))
			return -EINVAL;
		m.kind = TACOD_MODEL_CHECKPOINT;
	}
	if (*s || !tacod_model_name_plain(m.root, TACOD_BASE_NAME_MAX) ||
	    (m.suffix[0] && !tacod_model_name_plain(m.suffix, 64)) ||
	    !tacod_model_name_plain(id, sizeof(id) - 1))
		return -EINVAL;
	memcpy(m.job_id, "ftjob-", 6);
	memcpy(m.job_id + 6, id, strlen(id) + 1);
	*out = m;
	return 0;
}

int tacod_model_name_root(const char *name, char *out, size_t cap)
{
	tacod_model_name m;
	size_t n;

	if (tacod_model_name_parse(name, &m))
		return -EINVAL;
	n = strlen(m.root);
	if (n >= cap)
		return -ENAMETOOLONG;
	memcpy(out, m.root, n + 1);
	return 0;
}

int tacod_model_name_format(const char *job_model, const char *suffix,
			    const char *job_id, int64_t step, char *out,
			    size_t cap)
{
	const char *id = strncmp(job_id, "ftjob-", 6) ? job_id : job_id + 6;
	char tmp[2 * TACOD_MODEL_NAME_MAX];
	tacod_model_name m;
	int n;

	if (tacod_model_name_parse(job_model, &m))
		return -EINVAL;
	n = step < 0
		? snprintf(tmp, sizeof(tmp), "ft:%s:%s:%s", m.root, suffix, id)
		: snprintf(tmp, sizeof(tmp), "ft:%s:%s:%s:" CKPT_PREFIX "%lld",
			   m.root, suffix, id, (long long)step);
	if (n < 0 || (size_t)n >= cap || (size_t)n >= sizeof(tmp))
		return -ENAMETOOLONG;
	memcpy(out, tmp, (size_t)n + 1);
	return 0;
}
