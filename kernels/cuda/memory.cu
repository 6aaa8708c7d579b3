/* memory.cu: device memory with byte accounting, like kernels/cpu/memory.c.
 *
 * Plain cudaMalloc (never managed memory, whose page migration would hide
 * from the planner what is really resident). upload and download wait for
 * the copy: the host may reuse or read its buffer as soon as they return.
 * memset0 is only ordered on the backend stream: the host can observe device
 * memory only through download, which synchronises, and cudaFree waits for
 * the device.
 */
#include <atomic>

#include "cuda_ops.h"

static std::atomic<size_t> mem_current;
static std::atomic<size_t> mem_peak;

void *tkc_alloc(size_t bytes)
{
	void *p = NULL;
	size_t now, peak;

	/* cudaMalloc(0) gives NULL; callers expect a pointer. */
	if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
		/* Out of memory is the caller's to report, not a sticky
		 * error: clear it so the next call does not see it. */
		(void)cudaGetLastError();
		return NULL;
	}
	now = mem_current.fetch_add(bytes) + bytes;
	peak = mem_peak.load();
	while (now > peak && !mem_peak.compare_exchange_weak(peak, now))
		;
	return p;
}

void tkc_free(void *p, size_t bytes)
{
	if (!p)
		return;
	tkc_check(cudaFree(p), "cudaFree");
	mem_current.fetch_sub(bytes);
}

size_t tkc_mem_current(void)
{
	return mem_current.load();
}

size_t tkc_mem_peak(void)
{
	return mem_peak.load();
}

void tkc_mem_reset_peak(void)
{
	mem_peak.store(mem_current.load());
}

void tkc_upload(void *dst, const void *host_src, size_t bytes)
{
	if (!bytes)
		return;
	if (tkc_check(cudaMemcpyAsync(dst, host_src, bytes,
				      cudaMemcpyHostToDevice, tkc_stream()),
		      "upload") == 0)
		tkc_check(cudaStreamSynchronize(tkc_stream()), "upload sync");
}

void tkc_download(void *host_dst, const void *src, size_t bytes)
{
	if (!bytes)
		return;
	if (tkc_check(cudaMemcpyAsync(host_dst, src, bytes,
				      cudaMemcpyDeviceToHost, tkc_stream()),
		      "download") == 0)
		tkc_check(cudaStreamSynchronize(tkc_stream()), "download sync");
}

void tkc_memset0(void *p, size_t bytes)
{
	if (bytes)
		tkc_check(cudaMemsetAsync(p, 0, bytes, tkc_stream()),
			  "memset0");
}
