/* notify.h: the service manager's notification protocol (sd_notify(3)),
 * written by hand so that tacod does not link libsystemd: one datagram of
 * newline-separated VAR=VALUE assignments sent to the AF_UNIX socket named
 * by $NOTIFY_SOCKET (a path, or an abstract name written "@name").
 *
 * Stateless: every call reads the environment and opens its own socket, so
 * it is safe from any thread and survives the manager re-executing. */
#ifndef TACOD_NOTIFY_H
#define TACOD_NOTIFY_H

#include <stdint.h>

/* One message, at most this many bytes: systemd drops a longer datagram
 * (its buffer is PIPE_BUF) with "Got overly long notification datagram". */
#define TACOD_NOTIFY_MAX 4096

/* Sends state ("READY=1\nSTATUS=listening on ..."). 0 when sent, and 0
 * doing nothing when $NOTIFY_SOCKET is unset or empty (not running under a
 * manager that listens). -EINVAL: state empty or longer than
 * TACOD_NOTIFY_MAX; -EAFNOSUPPORT: $NOTIFY_SOCKET is neither a path nor
 * "@name"; -ENAMETOOLONG: it does not fit a sockaddr_un; any other negative
 * errno from socket(2) or sendto(2) (-ENOENT, -ECONNREFUSED: nobody
 * listens; -EAGAIN: the receiver's queue is full, the call never blocks). */
int tacod_notify(const char *state);

/* The watchdog interval the manager expects WATCHDOG=1 within: *usec is set
 * to $WATCHDOG_USEC when it is set and meant for this process
 * ($WATCHDOG_PID unset or equal to getpid()), and to 0 when there is no
 * watchdog for this process. -EINVAL when either variable is set but not a
 * positive decimal number (*usec untouched). */
int tacod_notify_watchdog_usec(uint64_t *usec);

#endif
