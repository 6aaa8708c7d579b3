#include "daemon/http/auth.h"

#include <ctype.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/fsutil.h"
#include "util/hex.h"

/* ---- SHA-256, FIPS 180-4 section 6.2 ---- */

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t rotr(uint32_t x, int n)
{
	return (x >> n) | (x << (32 - n));
}

static void block(uint32_t h[8], const uint8_t *p)
{
	uint32_t w[64], a, b, c, d, e, f, g, k, t1, t2;

	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 =
		    rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 =
		    rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	a = h[0], b = h[1], c = h[2], d = h[3];
	e = h[4], f = h[5], g = h[6], k = h[7];
	for (int i = 0; i < 64; i++) {
		t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) +
		     ((e & f) ^ (~e & g)) + K[i] + w[i];
		t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) +
		     ((a & b) ^ (a & c) ^ (b & c));
		k = g, g = f, f = e, e = d + t1;
		d = c, c = b, b = a, a = t1 + t2;
	}
	h[0] += a, h[1] += b, h[2] += c, h[3] += d;
	h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

void tacod_auth_sha256_init(tacod_auth_sha256 *c)
{
	static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372,
				       0xa54ff53a, 0x510e527f, 0x9b05688c,
				       0x1f83d9ab, 0x5be0cd19};

	memcpy(c->h, h0, sizeof(h0));
	c->bytes = 0;
	c->nbuf = 0;
}

void tacod_auth_sha256_update(tacod_auth_sha256 *c, const void *data,
			      size_t len)
{
	const uint8_t *p = data;

	c->bytes += len;
	if (c->nbuf) {
		size_t n = 64 - c->nbuf < len ? 64 - c->nbuf : len;
		memcpy(c->buf + c->nbuf, p, n);
		c->nbuf += n, p += n, len -= n;
		if (c->nbuf < 64)
			return;
		block(c->h, c->buf);
		c->nbuf = 0;
	}
	for (; len >= 64; p += 64, len -= 64)
		block(c->h, p);
	memcpy(c->buf, p, len);
	c->nbuf = len;
}

void tacod_auth_sha256_final(tacod_auth_sha256 *c, uint8_t digest[32])
{
	uint64_t bits = c->bytes * 8;

	c->buf[c->nbuf++] = 0x80;
	if (c->nbuf > 56) {
		memset(c->buf + c->nbuf, 0, 64 - c->nbuf);
		block(c->h, c->buf);
		c->nbuf = 0;
	}
	memset(c->buf + c->nbuf, 0, 56 - c->nbuf);
	for (int i = 0; i < 8; i++)
		c->buf[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
	block(c->h, c->buf);
	for (int i = 0; i < 8; i++) {
		digest[4 * i] = (uint8_t)(c->h[i] >> 24);
		digest[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
		digest[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
		digest[4 * i + 3] = (uint8_t)c->h[i];
	}
	memset(c, 0, sizeof(*c));
}

void tacod_auth_hex(const uint8_t digest[32], char hex[65])
{
	static const char x[] = "0123456789abcdef";

	for (int i = 0; i < 32; i++) {
		hex[2 * i] = x[digest[i] >> 4];
		hex[2 * i + 1] = x[digest[i] & 15];
	}
	hex[64] = 0;
}

static void digest_of(const char *token, size_t len, uint8_t d[32])
{
	tacod_auth_sha256 c;

	tacod_auth_sha256_init(&c);
	tacod_auth_sha256_update(&c, token, len);
	tacod_auth_sha256_final(&c, d);
}

void tacod_auth_hash_token(const char *token, char hex_out[65])
{
	uint8_t d[32];

	digest_of(token, strlen(token), d);
	tacod_auth_hex(d, hex_out);
}

/* ---- the tokens file ---- */

typedef struct entry {
	uint8_t digest[32];
	tacod_identity id;
} entry;

struct tacod_auth {
	entry *e;
	int n, cap;
};

const char *tacod_auth_role_name(int role)
{
	return role == TACOD_ROLE_ADMIN ? "admin" : "user";
}

int tacod_auth_valid_user(const char *name)
{
	size_t n = 0;

	for (; name[n]; n++) {
		unsigned char ch = (unsigned char)name[n];
		if (n >= TACOD_AUTH_USER_MAX - 1 ||
		    !(isalnum(ch) || ch == '.' || ch == '_' || ch == '-'))
			return 0;
	}
	return n > 0;
}

/* Splits a line (NUL-terminated, modified) into at most cap fields. */
static int fields(char *line, char **f, int cap)
{
	int n = 0;
	char *p = line;

	for (;;) {
		while (*p == ' ' || *p == '\t' || *p == '\r')
			p++;
		if (!*p || *p == '#')
			return n;
		if (n == cap)
			return cap + 1;
		f[n++] = p;
		while (*p && *p != ' ' && *p != '\t' && *p != '\r')
			p++;
		if (*p)
			*p++ = 0;
	}
}

static int auth_parse_line(char *line, const char *name, int lineno, entry *e,
			   taco_err *err)
{
	char *f[3];
	int n = fields(line, f, 3);

	if (n == 0)
		return 0;
	if (n != 3)
		return taco_err_set(err, -EINVAL,
				    "%s:%d: expected '<sha256-hex> <user> "
				    "<role>'",
				    name, lineno);
	if (strlen(f[0]) != 64)
		return taco_err_set(err, -EINVAL,
				    "%s:%d: the token hash must be 64 hex "
				    "digits (the SHA-256 of the token)",
				    name, lineno);
	for (int i = 0; i < 32; i++) {
		int hi = taco_hex_value(f[0][2 * i]),
		    lo = taco_hex_value(f[0][2 * i + 1]);
		if (hi < 0 || lo < 0)
			return taco_err_set(err, -EINVAL,
					    "%s:%d: the token hash must be 64 "
					    "hex digits",
					    name, lineno);
		e->digest[i] = (uint8_t)(hi << 4 | lo);
	}
	if (!tacod_auth_valid_user(f[1]))
		return taco_err_set(err, -EINVAL,
				    "%s:%d: user name '%.80s' must be 1-63 of "
				    "[A-Za-z0-9._-]",
				    name, lineno, f[1]);
	snprintf(e->id.user, sizeof(e->id.user), "%s", f[1]);
	if (!strcmp(f[2], "user"))
		e->id.role = TACOD_ROLE_USER;
	else if (!strcmp(f[2], "admin"))
		e->id.role = TACOD_ROLE_ADMIN;
	else
		return taco_err_set(err, -EINVAL,
				    "%s:%d: role must be 'user' or 'admin', "
				    "got '%.40s'",
				    name, lineno, f[2]);
	return 1;
}

int tacod_auth_parse(const char *text, size_t len, const char *name,
		     tacod_auth **out, taco_err *err)
{
	tacod_auth *a = calloc(1, sizeof(*a));
	char *line = NULL;
	size_t pos = 0, cap = 0;
	int lineno = 0, r = 0;

	*out = NULL;
	if (!a)
		return taco_err_set(err, -ENOMEM, "%s: out of memory", name);
	while (pos < len) {
		const char *nl = memchr(text + pos, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - (text + pos)) : len - pos;
		entry e;

		if (++lineno > TACOD_AUTH_MAX_LINES) {
			r = taco_err_set(err, -EFBIG, "%s: more than %d lines",
					 name, TACOD_AUTH_MAX_LINES);
			goto fail;
		}
		if (memchr(text + pos, 0, n)) {
			r = taco_err_set(err, -EINVAL, "%s:%d: NUL byte", name,
					 lineno);
			goto fail;
		}
		if (n + 1 > cap) {
			char *l = realloc(line, n + 1);
			if (!l) {
				r = taco_err_set(err, -ENOMEM,
						 "%s: out of memory", name);
				goto fail;
			}
			line = l, cap = n + 1;
		}
		memcpy(line, text + pos, n);
		line[n] = 0;
		pos += n + 1;
		memset(&e, 0, sizeof(e));
		r = auth_parse_line(line, name, lineno, &e, err);
		if (r < 0)
			goto fail;
		if (r == 0)
			continue;
		for (int i = 0; i < a->n; i++)
			if (!memcmp(a->e[i].digest, e.digest, 32)) {
				r = taco_err_set(err, -EINVAL,
						 "%s:%d: this token is already "
						 "listed (for '%s')",
						 name, lineno, a->e[i].id.user);
				goto fail;
			}
		if (a->n == a->cap) {
			int ncap = a->cap ? 2 * a->cap : 16;
			entry *ne = realloc(a->e, (size_t)ncap * sizeof(*ne));
			if (!ne) {
				r = taco_err_set(err, -ENOMEM,
						 "%s: out of memory", name);
				goto fail;
			}
			a->e = ne, a->cap = ncap;
		}
		a->e[a->n++] = e;
	}
	free(line);
	*out = a;
	return 0;
fail:
	free(line);
	tacod_auth_free(a);
	return r;
}

int tacod_auth_load(const char *path, tacod_auth **out, taco_err *err)
{
	char *buf = NULL;
	size_t n = 0;
	/* 10000 lines of a hash, a 63-byte name and a role, with room for
	 * comments. */
	int r = taco_read_file(path, 4u << 20, &buf, &n, err);

	*out = NULL;
	if (r)
		return r;
	r = tacod_auth_parse(buf, n, path, out, err);
	free(buf);
	return r;
}

void tacod_auth_free(tacod_auth *a)
{
	if (!a)
		return;
	if (a->e)
		memset(a->e, 0, (size_t)a->n * sizeof(*a->e));
	free(a->e);
	free(a);
}

int tacod_auth_count(const tacod_auth *a)
{
	return a ? a->n : 0;
}

int tacod_auth_bearer(const tacod_auth *a, const char *token,
		      tacod_identity *out)
{
	size_t len = token ? strnlen(token, TACOD_AUTH_TOKEN_MAX + 1) : 0;
	uint8_t d[32];
	long hit = -1;

	if (!a || len == 0 || len > TACOD_AUTH_TOKEN_MAX)
		return -EACCES;
	digest_of(token, len, d);
	/* Every entry is compared in full, without early exit; the match
	 * is selected with a mask. */
	for (int i = 0; i < a->n; i++) {
		unsigned diff = 0;
		for (int k = 0; k < 32; k++)
			diff |= (unsigned)(a->e[i].digest[k] ^ d[k]);
		long eq = -(long)((diff - 1) >> 31 & 1); /* all ones if 0 */
		hit = (eq & i) | (~eq & hit);
	}
	if (hit < 0)
		return -EACCES;
	*out = a->e[hit].id;
	return 0;
}

int tacod_auth_header(const tacod_auth *a, const char *header,
		      tacod_identity *out)
{
	const char *p = header;
	size_t n;
	int r;
	char tok[TACOD_AUTH_TOKEN_MAX + 1];

	if (!p)
		return -EACCES;
	while (*p == ' ')
		p++;
	if (strncasecmp(p, "Bearer", 6) || (p[6] != ' ' && p[6] != '\t'))
		return -EACCES;
	p += 6;
	while (*p == ' ' || *p == '\t')
		p++;
	n = strlen(p);
	while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
		n--;
	if (n == 0 || n > TACOD_AUTH_TOKEN_MAX)
		return -EACCES;
	memcpy(tok, p, n);
	tok[n] = 0;
	r = tacod_auth_bearer(a, tok, out);
	memset(tok, 0, sizeof(tok));
	return r;
}

void tacod_auth_uid(uid_t uid, tacod_identity *out)
{
	struct passwd pw, *res = NULL;
	char buf[4096];

	memset(out, 0, sizeof(*out));
	if (getpwuid_r(uid, &pw, buf, sizeof(buf), &res) == 0 && res &&
	    tacod_auth_valid_user(res->pw_name))
		snprintf(out->user, sizeof(out->user), "%s", res->pw_name);
	else
		snprintf(out->user, sizeof(out->user), "uid%lu",
			 (unsigned long)uid);
	out->role = uid == 0 ? TACOD_ROLE_ADMIN : TACOD_ROLE_USER;
}

int tacod_auth_peer(int fd, tacod_identity *out, uid_t *uid, taco_err *err)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return taco_err_set(err, -errno, "SO_PEERCRED: %s",
				    strerror(errno));
	if (len != sizeof(cred))
		return taco_err_set(err, -EIO, "SO_PEERCRED: short answer");
	tacod_auth_uid(cred.uid, out);
	if (uid)
		*uid = cred.uid;
	return 0;
}

void tacod_auth_local(tacod_identity *out)
{
	memset(out, 0, sizeof(*out));
	snprintf(out->user, sizeof(out->user), TACOD_AUTH_LOCAL_USER);
	out->role = TACOD_ROLE_ADMIN;
}
