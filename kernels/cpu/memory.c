/* memory.c: host "device" memory with byte accounting.
 *
 * Buffers are 64-byte aligned (cache line, AVX-512 width). current and peak
 * are C11 atomics so that ops may be called from several threads.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"

static atomic_size_t mem_current;
static atomic_size_t mem_peak;

void *tk_cpu_alloc(size_t bytes)
{
	void *p = NULL;
	size_t now, peak;

	/* posix_memalign(0) may return NULL; callers expect a pointer. */
	if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0)
		return NULL;
	now = atomic_fetch_add(&mem_current, bytes) + bytes;
	peak = atomic_load(&mem_peak);
	while (now > peak &&
	       !atomic_compare_exchange_weak(&mem_peak, &peak, now))
		;
	return p;
}

void tk_cpu_free(void *p, size_t bytes)
{
	if (!p)
		return;
	free(p);
	atomic_fetch_sub(&mem_current, bytes);
}

size_t tk_cpu_mem_current(void)
{
	return atomic_load(&mem_current);
}

size_t tk_cpu_mem_peak(void)
{
	return atomic_load(&mem_peak);
}

static atomic_size_t host_current;
static atomic_size_t host_peak;

/* Both peaks: backend and host memory. */
void tk_cpu_mem_reset_peak(void)
{
	atomic_store(&mem_peak, atomic_load(&mem_current));
	atomic_store(&host_peak, atomic_load(&host_current));
}

void tk_cpu_upload(void *dst, const void *host_src, size_t bytes)
{
	if (bytes)
		memcpy(dst, host_src, bytes);
}

void tk_cpu_download(void *host_dst, const void *src, size_t bytes)
{
	if (bytes)
		memcpy(host_dst, src, bytes);
}

void tk_cpu_memset0(void *p, size_t bytes)
{
	if (bytes)
		memset(p, 0, bytes);
}

/* Host memory for activation offload: plain malloc, counted apart from the
 * backend memory above. */

void *tk_cpu_host_alloc(size_t bytes)
{
	void *p = NULL;
	size_t now, peak;

	if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0)
		return NULL;
	now = atomic_fetch_add(&host_current, bytes) + bytes;
	peak = atomic_load(&host_peak);
	while (now > peak &&
	       !atomic_compare_exchange_weak(&host_peak, &peak, now))
		;
	return p;
}

void tk_cpu_host_free(void *p, size_t bytes)
{
	if (!p)
		return;
	free(p);
	atomic_fetch_sub(&host_current, bytes);
}

size_t tk_cpu_host_current(void)
{
	return atomic_load(&host_current);
}

size_t tk_cpu_host_peak(void)
{
	return atomic_load(&host_peak);
}

/* The CPU backend has no side stream: the copy happens at once. */
void tk_cpu_copy_async(void *dst, const void *src, size_t bytes, int to_host)
{
	(void)to_host;
	if (bytes)
		memcpy(dst, src, bytes);
}

void tk_cpu_copy_wait(void)
{
}

/* Nor a side stream for the optimizer: ops run when they are called, so
 * every ticket is done when it is handed out. */
static _Atomic uint64_t side_tickets;

void tk_cpu_side_begin(void)
{
}

uint64_t tk_cpu_side_end(void)
{
	return atomic_fetch_add(&side_tickets, 1) + 1;
}

void tk_cpu_side_wait(uint64_t ticket)
{
	(void)ticket;
}
