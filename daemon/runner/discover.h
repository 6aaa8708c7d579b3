/* discover.h: the GPUs of tacod.json's "devices": "auto", from taco-train
 * --list-devices. */
#ifndef TACOD_DISCOVER_H
#define TACOD_DISCOVER_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/config/config.h"
#include "util/taco_err.h"

#define TACOD_DISCOVER_TIMEOUT_MS 60000 /* a CUDA init takes seconds */

/* With "devices": "auto" and no devices yet: runs c->taco_train
 * --list-devices (killed after timeout_ms) and sets c's devices to the
 * usable GPUs it lists. 0 (c set; at once without "auto"), -ENODEV (no
 * usable GPU: err says taco-train's reason), -ETIMEDOUT, -EINVAL (its
 * output is not a device list) or -E2BIG; c is unchanged on error. */
int tacod_devices_discover(tacod_config *c, uint64_t timeout_ms, taco_err *err);

/* The usable GPUs of taco-train --list-devices' output into d (at most
 * cap, else -E2BIG), *n of them, and *unusable the ones skipped. */
int tacod_devices_parse_list(const char *out, size_t len,
			     tacod_device_config *d, int cap, int *n,
			     int *unusable, taco_err *err);

#endif
