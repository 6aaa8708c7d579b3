/* config.h: tacod's configuration: a JSON file, then command-line flags.
 * docs/tacod.md documents every field. */
#ifndef TACOD_CONFIG_H
#define TACOD_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "util/taco_err.h"
#include "webhook.h"

#define TACOD_MAX_ROOTS 64
#define TACOD_CONFIG_MAX_BYTES (1u << 20)

typedef struct tacod_limits {
	uint64_t max_body_bytes;   /* JSON request bodies */
	uint64_t max_upload_bytes; /* one uploaded file */
	int max_connections;
	int max_connections_per_client; /* per address (TCP), per uid (unix) */
	int request_head_timeout_s;	/* a request head must arrive within */
	int max_queued_jobs_per_user;
	int max_running_jobs;
	uint64_t max_sync_validate_bytes; /* data a plan reads at once */
} tacod_limits;

typedef struct tacod_config {
	char listen[256];	/* "host:port", "" = no TCP listener */
	char unix_socket[4096]; /* "" = none */
	char state_dir[4096];
	char models_dir[4096];
	char tokens_file[4096]; /* "" = no tokens: loopback only */
	char taco_train[4096];	/* the worker binary */
	int n_roots;
	char roots[TACOD_MAX_ROOTS][4096]; /* where datasets may be read */
	uint64_t device_memory; /* bytes job plans must fit together */
	int backend;		/* enum taco_plan_backend */
	int max_retries;	/* a crashed worker is retried this often */
	int cancel_timeout_s;	/* SIGKILL this long after SIGTERM */
	tacod_limits limits;
	tacod_webhooks webhooks; /* webhook.h; none by default */
} tacod_config;

void tacod_config_defaults(tacod_config *c);

/* Parses a config file's text over the defaults. Every problem is reported
 * in err (the first one, naming the field); unknown fields are errors. */
int tacod_config_parse(const char *json, size_t len, const char *name,
		       tacod_config *c, taco_err *err);
int tacod_config_load(const char *path, tacod_config *c, taco_err *err);

/* Checks the values together (paths absolute, a listener configured,
 * tokens required off loopback). */
int tacod_config_check(const tacod_config *c, taco_err *err);

/* 1 when listen names a loopback address. */
int tacod_config_loopback(const tacod_config *c);

#endif
