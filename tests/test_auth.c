/* test_auth.c: SHA-256 (FIPS 180-4 vectors), the tokens file, bearer
 * lookups and local peers. */
#include <check.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/http/auth.h"
#include "testutil.h"

static void hex_of(const void *data, size_t len, char hex[65])
{
	tacod_auth_sha256 c;
	uint8_t d[32];

	tacod_auth_sha256_init(&c);
	tacod_auth_sha256_update(&c, data, len);
	tacod_auth_sha256_final(&c, d);
	tacod_auth_hex(d, hex);
}

/* FIPS 180-4 / NIST CAVP examples. */
static const struct {
	const char *msg, *hex;
} vectors[] = {
    {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
    {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
    {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
     "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklm"
     "nopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
     "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
};

START_TEST(test_sha256_vectors)
{
	char hex[65];

	hex_of(vectors[_i].msg, strlen(vectors[_i].msg), hex);
	ck_assert_str_eq(hex, vectors[_i].hex);
}
END_TEST

/* Lengths around the padding boundaries (56 and 64 bytes). */
static const struct {
	size_t n;
	const char *hex;
} as[] = {
    {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
    {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
    {57, "f13b2d724659eb3bf47f2dd6af1accc87b81f09f59f2b75e5c0bed6589dfe8c6"},
    {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
    {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
    {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
    {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
    {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
    {128, "6836cf13bac400e9105071cd6af47084dfacad4e5e302c94bfed24e013afb73e"},
};

START_TEST(test_sha256_boundaries)
{
	char buf[128], hex[65];

	memset(buf, 'a', sizeof(buf));
	hex_of(buf, as[_i].n, hex);
	ck_assert_str_eq(hex, as[_i].hex);
}
END_TEST

START_TEST(test_sha256_million_a_in_pieces)
{
	/* One million 'a' fed in uneven pieces: the incremental path. */
	static const size_t pieces[] = {1, 3, 63, 64, 65, 127, 1000, 7};
	tacod_auth_sha256 c;
	char buf[1000], hex[65];
	uint8_t d[32];
	size_t left = 1000000;

	memset(buf, 'a', sizeof(buf));
	tacod_auth_sha256_init(&c);
	for (int i = 0; left; i++) {
		size_t n = pieces[i % 8] < left ? pieces[i % 8] : left;
		tacod_auth_sha256_update(&c, buf, n);
		left -= n;
	}
	tacod_auth_sha256_final(&c, d);
	tacod_auth_hex(d, hex);
	ck_assert_str_eq(
	    hex,
	    "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}
END_TEST

START_TEST(test_hash_token)
{
	char hex[65];

	tacod_auth_hash_token("secret-token-1", hex);
	ck_assert_str_eq(
	    hex,
	    "d5ba78d16100079e567f1f7df974a9c9761ac7aaf871ba9c66bb5fa362374c47");
}
END_TEST

static char *tokens_text(void)
{
	char h1[65], h2[65];
	char *t = malloc(1024);

	tacod_auth_hash_token("alice-token", h1);
	tacod_auth_hash_token("bob-token", h2);
	snprintf(t, 1024,
		 "# tacod tokens\n"
		 "\n"
		 "%s  alice  user\r\n"
		 "   # indented comment\n"
		 "%s\tbob.admin-1\tadmin   # trailing comment\n",
		 h1, h2);
	return t;
}

START_TEST(test_parse_and_lookup)
{
	char *t = tokens_text();
	tacod_auth *a = NULL;
	tacod_identity id;
	taco_err err = {{0}};

	ck_assert_int_eq(tacod_auth_parse(t, strlen(t), "tokens", &a, &err), 0);
	ck_assert_int_eq(tacod_auth_count(a), 2);
	ck_assert_int_eq(tacod_auth_bearer(a, "alice-token", &id), 0);
	ck_assert_str_eq(id.user, "alice");
	ck_assert_int_eq(id.role, TACOD_ROLE_USER);
	ck_assert_int_eq(tacod_auth_bearer(a, "bob-token", &id), 0);
	ck_assert_str_eq(id.user, "bob.admin-1");
	ck_assert_int_eq(id.role, TACOD_ROLE_ADMIN);
	ck_assert_str_eq(tacod_auth_role_name(id.role), "admin");
	ck_assert_int_eq(tacod_auth_bearer(a, "alice-token ", &id), -EACCES);
	ck_assert_int_eq(tacod_auth_bearer(a, "alice-toke", &id), -EACCES);
	ck_assert_int_eq(tacod_auth_bearer(a, "", &id), -EACCES);
	ck_assert_int_eq(tacod_auth_bearer(a, NULL, &id), -EACCES);

	ck_assert_int_eq(tacod_auth_header(a, "Bearer alice-token", &id), 0);
	ck_assert_str_eq(id.user, "alice");
	ck_assert_int_eq(tacod_auth_header(a, "bearer   bob-token  ", &id), 0);
	ck_assert_str_eq(id.user, "bob.admin-1");
	ck_assert_int_eq(tacod_auth_header(a, "Basic alice-token", &id),
			 -EACCES);
	ck_assert_int_eq(tacod_auth_header(a, "Bearer", &id), -EACCES);
	ck_assert_int_eq(tacod_auth_header(a, "Bearer ", &id), -EACCES);
	ck_assert_int_eq(tacod_auth_header(a, "Beareralice-token", &id),
			 -EACCES);
	ck_assert_int_eq(tacod_auth_header(a, NULL, &id), -EACCES);
	tacod_auth_free(a);
	free(t);
}
END_TEST

START_TEST(test_long_token_refused)
{
	char *t = tokens_text(), *tok = malloc(TACOD_AUTH_TOKEN_MAX + 2);
	tacod_auth *a = NULL;
	tacod_identity id;

	ck_assert_int_eq(tacod_auth_parse(t, strlen(t), "tokens", &a, NULL), 0);
	memset(tok, 'x', TACOD_AUTH_TOKEN_MAX + 1);
	tok[TACOD_AUTH_TOKEN_MAX + 1] = 0;
	ck_assert_int_eq(tacod_auth_bearer(a, tok, &id), -EACCES);
	tacod_auth_free(a);
	free(tok);
	free(t);
}
END_TEST

#define H64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static const struct {
	const char *text, *fragment;
} bad[] = {
    {"# ok\n" H64 " alice\n", "tokens:2: expected"},
    {H64 " alice user extra\n", "tokens:1: expected"},
    {"0123 alice user\n", "tokens:1: the token hash must be 64 hex"},
    {"zz23456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef "
     "alice user\n",
     "tokens:1: the token hash"},
    {H64 " al!ce user\n", "tokens:1: user name 'al!ce'"},
    {H64 " alice root\n", "tokens:1: role must be 'user' or 'admin'"},
    {H64 " alice user\n\n" H64 " bob admin\n",
     "tokens:3: this token is already listed (for 'alice')"},
    {H64 " aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa "
	 "user\n",
     "tokens:1: user name"},
};

START_TEST(test_bad_lines)
{
	tacod_auth *a = (tacod_auth *)1;
	taco_err err = {{0}};

	ck_assert_int_eq(tacod_auth_parse(bad[_i].text, strlen(bad[_i].text),
					  "tokens", &a, &err),
			 -EINVAL);
	ck_assert_ptr_null(a);
	ck_assert_msg(strstr(err.msg, bad[_i].fragment) != NULL, "case %d: %s",
		      _i, err.msg);
}
END_TEST

START_TEST(test_user_names)
{
	char name[80];

	ck_assert(tacod_auth_valid_user("a"));
	ck_assert(tacod_auth_valid_user("A.b_c-9"));
	ck_assert(!tacod_auth_valid_user(""));
	ck_assert(!tacod_auth_valid_user("a b"));
	ck_assert(!tacod_auth_valid_user("a/b"));
	memset(name, 'n', 63);
	name[63] = 0;
	ck_assert(tacod_auth_valid_user(name));
	name[63] = 'n';
	name[64] = 0;
	ck_assert(!tacod_auth_valid_user(name));
}
END_TEST

START_TEST(test_too_many_lines)
{
	size_t n = (TACOD_AUTH_MAX_LINES + 1) * 2;
	char *t = malloc(n + 1);
	tacod_auth *a = NULL;
	taco_err err = {{0}};

	for (size_t i = 0; i < n; i += 2)
		t[i] = '#', t[i + 1] = '\n';
	t[n] = 0;
	ck_assert_int_eq(tacod_auth_parse(t, n, "tokens", &a, &err), -EFBIG);
	ck_assert_msg(strstr(err.msg, "tokens: more than 10000 lines") != NULL,
		      "%s", err.msg);
	/* Exactly the maximum is fine. */
	ck_assert_int_eq(tacod_auth_parse(t, n - 2, "tokens", &a, &err), 0);
	ck_assert_int_eq(tacod_auth_count(a), 0);
	tacod_auth_free(a);
	free(t);
}
END_TEST

START_TEST(test_many_tokens)
{
	/* A few thousand entries: every one is found, others are not. */
	enum { N = 3000 };
	static char t[N * 90];
	char hex[65], tok[32];
	size_t off = 0;
	tacod_auth *a = NULL;
	tacod_identity id;

	for (int i = 0; i < N; i++) {
		snprintf(tok, sizeof(tok), "tok-%d", i);
		tacod_auth_hash_token(tok, hex);
		off += (size_t)snprintf(t + off, sizeof(t) - off, "%s u%d %s\n",
					hex, i, i % 7 ? "user" : "admin");
	}
	ck_assert_int_eq(tacod_auth_parse(t, off, "t", &a, NULL), 0);
	ck_assert_int_eq(tacod_auth_count(a), N);
	for (int i = 0; i < N; i += 37) {
		char want[16];
		snprintf(tok, sizeof(tok), "tok-%d", i);
		snprintf(want, sizeof(want), "u%d", i);
		ck_assert_int_eq(tacod_auth_bearer(a, tok, &id), 0);
		ck_assert_str_eq(id.user, want);
		ck_assert_int_eq(id.role,
				 i % 7 ? TACOD_ROLE_USER : TACOD_ROLE_ADMIN);
	}
	ck_assert_int_eq(tacod_auth_bearer(a, "tok-3000", &id), -EACCES);
	tacod_auth_free(a);
}
END_TEST

START_TEST(test_load_file)
{
	char dir[] = "/tmp/tacod-auth-XXXXXX", path[256];
	char *t = tokens_text();
	tacod_auth *a = NULL;
	taco_err err = {{0}};
	FILE *f;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/tokens", dir);
	ck_assert_int_ne(tacod_auth_load(path, &a, &err), 0);
	ck_assert_msg(strstr(err.msg, path) != NULL, "%s", err.msg);
	f = fopen(path, "w");
	fputs(t, f);
	fputs("bad line\n", f);
	fclose(f);
	ck_assert_int_eq(tacod_auth_load(path, &a, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, path) && strstr(err.msg, ":6:"), "%s",
		      err.msg);
	f = fopen(path, "w");
	fputs(t, f);
	fclose(f);
	ck_assert_int_eq(tacod_auth_load(path, &a, &err), 0);
	ck_assert_int_eq(tacod_auth_count(a), 2);
	tacod_auth_free(a);
	unlink(path);
	rmdir(dir);
	free(t);
}
END_TEST

START_TEST(test_local_users)
{
	tacod_identity id;
	struct passwd *pw;
	int sv[2];
	uid_t uid = 12345;

	tacod_auth_uid(0, &id);
	ck_assert_str_eq(id.user, "root");
	ck_assert_int_eq(id.role, TACOD_ROLE_ADMIN);
	tacod_auth_uid(3999999, &id);
	ck_assert_str_eq(id.user, "uid3999999");
	ck_assert_int_eq(id.role, TACOD_ROLE_USER);
	tacod_auth_local(&id);
	ck_assert_str_eq(id.user, "local");
	ck_assert_int_eq(id.role, TACOD_ROLE_ADMIN);

	/* SO_PEERCRED of a socket pair: ourselves. */
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	ck_assert_int_eq(tacod_auth_peer(sv[0], &id, &uid, NULL), 0);
	ck_assert_uint_eq(uid, getuid());
	pw = getpwuid(getuid());
	if (pw)
		ck_assert_str_eq(id.user, pw->pw_name);
	ck_assert_int_eq(id.role,
			 getuid() == 0 ? TACOD_ROLE_ADMIN : TACOD_ROLE_USER);
	close(sv[0]);
	close(sv[1]);
	ck_assert_int_lt(tacod_auth_peer(-1, &id, NULL, NULL), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("auth");
	TCase *tc = tcase_create("auth");

	tcase_add_loop_test(tc, test_sha256_vectors, 0,
			    sizeof(vectors) / sizeof(vectors[0]));
	tcase_add_loop_test(tc, test_sha256_boundaries, 0,
			    sizeof(as) / sizeof(as[0]));
	tcase_add_test(tc, test_sha256_million_a_in_pieces);
	tcase_add_test(tc, test_hash_token);
	tcase_add_test(tc, test_parse_and_lookup);
	tcase_add_test(tc, test_long_token_refused);
	tcase_add_loop_test(tc, test_bad_lines, 0,
			    sizeof(bad) / sizeof(bad[0]));
	tcase_add_test(tc, test_user_names);
	tcase_add_test(tc, test_too_many_lines);
	tcase_add_test(tc, test_many_tokens);
	tcase_add_test(tc, test_load_file);
	tcase_add_test(tc, test_local_users);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
