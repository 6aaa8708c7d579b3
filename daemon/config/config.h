/* config.h: tacod's configuration: a JSON file, then command-line flags.
 * docs/tacod.md documents every field. */
#ifndef TACOD_CONFIG_H
#define TACOD_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "daemon/config/webhooks.h"
#include "util/taco_err.h"

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

enum { TACOD_SCHED_LOCAL = 0, TACOD_SCHED_SLURM = 1 };

#define TACOD_SLURM_MAX_OPTIONS 32 /* slurm.sbatch_options */
#define TACOD_SLURM_OPTION_MAX 256 /* bytes of one, with its NUL */

/* scheduler "slurm" (docs/slurm.md): every accepted job is a Slurm batch
 * job on one GPU. */
typedef struct tacod_slurm_config {
	char partition[128]; /* "" = the cluster's default partition */
	char account[128];   /* "" = the user's default account */
	char time_limit[64]; /* sbatch --time; "" = the partition's */
	char gres[128];	     /* sbatch --gres, "gpu:1" */
	int n_options;
	char options[TACOD_SLURM_MAX_OPTIONS][TACOD_SLURM_OPTION_MAX];
	uint64_t gpu_memory;   /* one GPU of the partition: plans must fit */
	char jobs_dir[4096];   /* job directories, shared with the nodes */
	int poll_interval_s;   /* one squeue for all jobs this often */
	int command_timeout_s; /* an sbatch, squeue or scancel is killed */
	char sbatch[4096], squeue[4096], scancel[4096]; /* the commands */
} tacod_slurm_config;

#define TACOD_MAX_DEVICES 32	   /* GPUs of one tacod */
#define TACOD_DEVICE_INDEX_MAX 255 /* a GPU's number (CUDA_VISIBLE_DEVICES) */

/* One GPU jobs are scheduled on: its CUDA number and the memory the plans
 * of its jobs must fit in together. */
typedef struct tacod_device_config {
	int index; /* -1: the one device of device_memory, not pinned */
	uint64_t memory;
	char name[96]; /* "NVIDIA H200" when "auto" found it, else "" */
} tacod_device_config;

/* Chat completions (service/chat.c): the model workers ("taco-train
 * --serve") and what a user may ask of them. */
typedef struct tacod_chat_config {
	int idle_s;	 /* a worker with no request this long exits */
	int wait_s;	 /* a request that cannot start waits this long,
			    then gets 503 with Retry-After */
	int max_workers; /* models loaded at once */
	int rows;	 /* completions of one request at most (n) */
	int context;	 /* tokens of a prompt and its answer; 0: the
			    model's max_position_embeddings, at most
			    8192 */
	int max_requests_per_user; /* waiting or running at once */
	int request_timeout_s;	   /* a request running longer is ended */
} tacod_chat_config;

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
	/* "devices": the GPUs (0: one device of device_memory) */
	int n_devices;
	/* "devices": "auto": n_devices is 0 until tacod_devices_discover
	 * fills the list from taco-train --list-devices */
	int devices_auto;
	tacod_device_config devices[TACOD_MAX_DEVICES];
	int backend;	      /* enum taco_plan_backend */
	int max_retries;      /* a crashed worker is retried this often */
	int cancel_timeout_s; /* SIGKILL this long after SIGTERM */
	tacod_limits limits;
	tacod_chat_config chat;
	tacod_webhooks webhooks; /* webhooks/webhook.h; none by default */
	int scheduler;		 /* TACOD_SCHED_* */
	tacod_slurm_config slurm;
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

/* An integer field of the config's parsers (config.c, config/slurm.c,
 * webhooks/webhook.c): an absent key leaves *out as it is; a value that is not
 * an integer in [lo, hi] is an error naming the field as where + key
 * ("limits.max_connections", "webhooks[2].timeout_s"). */
int tacod_config_int(json_t *o, const char *where, const char *key, int lo,
		     int hi, int *out, const char *name, taco_err *err);

/* The "slurm" object (config/slurm.c), over what c holds. */
int tacod_config_slurm(json_t *o, tacod_slurm_config *c, const char *name,
		       taco_err *err);
void tacod_config_slurm_defaults(tacod_slurm_config *c);

/* 1 when listen names a loopback address. */
int tacod_config_loopback(const tacod_config *c);

/* Where the job directories are: <state_dir>/jobs, or under Slurm
 * slurm.jobs_dir, which the nodes read and write. */
void tacod_config_jobs_dir(const tacod_config *c, char *out, size_t cap);
/* The memory one job's plan must fit in: device_memory, the largest of
 * "devices", or under Slurm one GPU of the partition (slurm.gpu_memory). */
uint64_t tacod_config_plan_memory(const tacod_config *c);
/* config/devices.c: parses "devices" (a JSON array) into c; and the
 * devices jobs run on, into out (TACOD_MAX_DEVICES): c's list, or one
 * device of device_memory with index -1. Returns how many. */
int tacod_config_devices(json_t *v, tacod_config *c, const char *name,
			 taco_err *err);
int tacod_config_device_list(const tacod_config *c, tacod_device_config *out);

#endif
