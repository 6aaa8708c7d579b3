/* tacod_harness.h: a tacod for tests and a curl client for it. */
#ifndef TACOD_HARNESS_H
#define TACOD_HARNESS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "daemon/config/config.h"
#include "daemon/service/service.h"

extern tacod_service *th_svc;
extern char th_state[64]; /* its state directory */
extern int th_port;	  /* its loopback port */
extern char th_sock[128]; /* set: requests go over this unix socket */

/* An in-process tacod on a free loopback port with the fixture models, a
 * fresh state directory and device_memory; tweak (may be NULL) edits the
 * config first. th_stop shuts it down and removes the state. */
void th_start(uint64_t device_memory, void (*tweak)(tacod_config *));
void th_stop(void);
/* The real tacod binary with a config file; returns once it answers on
 * th_sock. th_try_spawn_tacod returns -1 instead of failing when tacod
 * exits first (a TCP port that another process took since it was picked:
 * pick another and retry). */
pid_t th_spawn_tacod(const char *cfg);
pid_t th_try_spawn_tacod(const char *cfg);
/* A loopback port that was free a moment ago. */
int th_free_port(void);

/* One request: the HTTP status, the body parsed as JSON (out may be NULL)
 * and, with raw, the body's bytes (the caller frees them). header is one
 * extra "Name: value" line or NULL. */
long th_call_x(const char *method, const char *path, const char *json,
	       const char *upload, const char *header, json_t **out, char **raw,
	       size_t *raw_len);
long th_call(const char *method, const char *path, const char *json,
	     const char *upload, json_t **out);
/* th_call with a JSON body that also returns the value of the response
 * header name in value ("" when absent). */
long th_call_h(const char *method, const char *path, const char *json,
	       const char *name, char *value, size_t cap, json_t **out);
/* A GET whose body is returned as text (streams), with an optional
 * Last-Event-ID. */
char *th_get_text(const char *path, const char *last_id);
const char *th_str(json_t *o, const char *k);

/* A line of a tokens file: token's SHA-256, user and role. */
void th_token_line(FILE *f, const char *token, const char *user,
		   const char *role);
/* th_start with a tokens file of three users: "alice-t" (alice) and
 * "carol-t" (carol), users, and "bob-t" (bob), an admin; th_stop removes
 * it. */
void th_start_users(uint64_t device_memory);
/* The same, with tweak (may be NULL) editing the config after. */
void th_start_users_x(uint64_t device_memory, void (*tweak)(tacod_config *));
/* th_call with "Authorization: Bearer token". */
long th_as(const char *token, const char *method, const char *path,
	   const char *json, const char *upload, json_t **out);

/* Uploads the count training data: the file id. */
char *th_upload_count(void);
/* Creates a llama_gqa job with the given "taco" members; asserts the
 * status is want, returns the id on 200. */
char *th_create(const char *file, const char *taco, long want);
/* Asserts a reply was the error want with error.code code, and drops j;
 * got is evaluated first (it sets j). */
#define th_expect_error(got, want, j, code)                                    \
	do {                                                                   \
		long th_got_ = (got);                                          \
		th_expect_error_at(__LINE__, th_got_, want, j, code);          \
	} while (0)
void th_expect_error_at(int line, long got, long want, json_t *j,
			const char *code);
/* Polls a job until it is in status (or 120 s pass); the job object. */
/* How many 100 ms polls a test waits for a job or a conversion: 5 minutes,
 * because under ASan on a busy 2-core CI machine a 60-step job resumed
 * after kill -9 has taken over 2 minutes.  Only a failing test waits it. */
#define TH_WAIT_TICKS 3000

json_t *th_wait_status(const char *id, const char *status);

#endif
