/* http/auth.h: who is calling tacod.
 *
 * TCP clients present "Authorization: Bearer <token>". The tokens file lists
 * the accepted tokens hashed, one per line:
 *
 *	# comment
 *	<sha256 of the token, 64 hex digits>  <user>  <role>
 *
 * role is "user" or "admin"; user names are [A-Za-z0-9._-]{1,63}. Blank
 * lines and lines starting with '#' are skipped; at most
 * TACOD_AUTH_MAX_LINES lines. `tacod_auth_hash_token` gives the hash to put
 * there. A lookup hashes the presented token and compares it in constant
 * time with every entry.
 *
 * Unix-socket clients are who the kernel says they are (SO_PEERCRED): the
 * uid's login name, admin for uid 0. Without a tokens file every loopback
 * TCP client is user "local", admin (tacod listens on loopback only then).
 *
 * Library code: no logging; errors are negative errno codes with a taco_err.
 * SHA-256 is implemented here from FIPS 180-4 (also used for uploads). */
#ifndef TACOD_AUTH_H
#define TACOD_AUTH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/taco_err.h"

#define TACOD_AUTH_MAX_LINES 10000
#define TACOD_AUTH_USER_MAX 64	  /* a user name with its NUL */
#define TACOD_AUTH_TOKEN_MAX 4096 /* longest bearer token accepted */
#define TACOD_AUTH_LOCAL_USER "local"

enum tacod_role {
	TACOD_ROLE_USER = 0,
	TACOD_ROLE_ADMIN = 1,
};

typedef struct tacod_identity {
	char user[TACOD_AUTH_USER_MAX];
	int role; /* enum tacod_role */
} tacod_identity;

/* SHA-256 (FIPS 180-4), incremental. */
typedef struct tacod_auth_sha256 {
	uint32_t h[8];
	uint64_t bytes; /* message length so far */
	uint8_t buf[64];
	size_t nbuf;
} tacod_auth_sha256;

void tacod_auth_sha256_init(tacod_auth_sha256 *c);
void tacod_auth_sha256_update(tacod_auth_sha256 *c, const void *data,
			      size_t len);
void tacod_auth_sha256_final(tacod_auth_sha256 *c, uint8_t digest[32]);
/* Lowercase hex of a digest, NUL-terminated. */
void tacod_auth_hex(const uint8_t digest[32], char hex[65]);
/* SHA-256 of the token's bytes as lowercase hex: the tokens file's first
 * column. */
void tacod_auth_hash_token(const char *token, char hex_out[65]);

const char *tacod_auth_role_name(int role); /* "user", "admin" */
/* 1 when name matches [A-Za-z0-9._-]{1,63}. */
int tacod_auth_valid_user(const char *name);

typedef struct tacod_auth tacod_auth;

/* Parses a tokens file's text; name is used in messages ("tokens:3: ...").
 * -EINVAL for a bad line or a token listed twice, -EFBIG over
 * TACOD_AUTH_MAX_LINES lines. An empty file is valid (nobody gets in). */
int tacod_auth_parse(const char *text, size_t len, const char *name,
		     tacod_auth **out, taco_err *err);
int tacod_auth_load(const char *path, tacod_auth **out, taco_err *err);
void tacod_auth_free(tacod_auth *a);
int tacod_auth_count(const tacod_auth *a); /* tokens listed */

/* The identity of a bearer token: 0, or -EACCES when the token is not
 * listed (or empty, or too long). Thread-safe (read-only). */
int tacod_auth_bearer(const tacod_auth *a, const char *token,
		      tacod_identity *out);
/* The same from a whole Authorization header value ("Bearer <token>",
 * scheme case-insensitive): -EACCES when header is NULL or not Bearer. */
int tacod_auth_header(const tacod_auth *a, const char *header,
		      tacod_identity *out);

/* A local user by uid: the login name (getpwuid_r), "uid<N>" when the
 * uid has none or an unusable one; admin for uid 0. */
void tacod_auth_uid(uid_t uid, tacod_identity *out);
/* The peer of a connected unix socket (SO_PEERCRED). *uid may be NULL. */
int tacod_auth_peer(int fd, tacod_identity *out, uid_t *uid, taco_err *err);
/* The identity of loopback clients when there is no tokens file. */
void tacod_auth_local(tacod_identity *out);

#endif
