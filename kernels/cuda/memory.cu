/* memory.cu: device memory with byte accounting, like kernels/cpu/memory.c.
 *
 * Plain cudaMalloc (never managed memory, whose page migration would hide
 * from the planner what is really resident). upload and download wait for
 * the copy: the host may reuse or read its buffer as soon as they return.
 * memset0 is only ordered on the backend stream: the host can observe device
 * memory only through download, which synchronises, and cudaFree waits for
 * the device.
 *
 * Host memory for offload is pinned (cudaMallocHost), so that copy_async
 * is a real DMA that overlaps the compute stream; it is counted apart.
 * copy_async runs on a second stream: an event recorded on the compute
 * stream orders the copy after every op issued before the call, and a
 * "copies done" event recorded after it is what copy_wait makes the
 * compute stream wait for. Copies on the copy stream run in issue order,
 * so waiting for the last one waits for all issued before it. The
 * profiler (prof.cu) times each copy through a hook called around it.
 */
#include <atomic>
#include <errno.h>
#include <mutex>

#include "cuda_ops.h"

static std::atomic<size_t> mem_current;
static std::atomic<size_t> mem_peak;
static std::atomic<size_t> host_current;
static std::atomic<size_t> host_peak;

static std::mutex copy_lock;
static cudaStream_t copy_stream;
static cudaEvent_t ev_issued;	   /* on the compute stream: copy after this */
static cudaEvent_t ev_copied;	   /* on the copy stream: the last copy done */
static int copied;		   /* a copy was issued since open */
static tkc_copy_hook_fn copy_hook; /* the profiler's, or NULL */

static void peak_raise(std::atomic<size_t> &peak, size_t now)
{
	size_t p = peak.load();

	while (now > p && !peak.compare_exchange_weak(p, now))
		;
}

void *tkc_alloc(size_t bytes)
{
	void *p = NULL;
	size_t now;

	/* cudaMalloc(0) gives NULL; callers expect a pointer. */
	if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
		/* Out of memory is the caller's to report, not a sticky
		 * error: clear it so the next call does not see it. */
		(void)cudaGetLastError();
		return NULL;
	}
	now = mem_current.fetch_add(bytes) + bytes;
	peak_raise(mem_peak, now);
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

/* Both peaks: device and pinned host memory. */
void tkc_mem_reset_peak(void)
{
	mem_peak.store(mem_current.load());
	host_peak.store(host_current.load());
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

void *tkc_host_alloc(size_t bytes)
{
	void *p = NULL;

	if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
		(void)cudaGetLastError(); /* the caller's to report */
		return NULL;
	}
	peak_raise(host_peak, host_current.fetch_add(bytes) + bytes);
	return p;
}

void tkc_host_free(void *p, size_t bytes)
{
	if (!p)
		return;
	tkc_check(cudaFreeHost(p), "cudaFreeHost");
	host_current.fetch_sub(bytes);
}

size_t tkc_host_current(void)
{
	return host_current.load();
}

size_t tkc_host_peak(void)
{
	return host_peak.load();
}

int tkc_copy_init(void)
{
	if (copy_stream)
		return 0;
	if (cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking) !=
	    cudaSuccess)
		goto fail;
	if (cudaEventCreateWithFlags(&ev_issued, cudaEventDisableTiming) !=
	    cudaSuccess)
		goto fail;
	if (cudaEventCreateWithFlags(&ev_copied, cudaEventDisableTiming) !=
	    cudaSuccess)
		goto fail;
	return 0;
fail:
	if (ev_issued)
		cudaEventDestroy(ev_issued);
	if (copy_stream)
		cudaStreamDestroy(copy_stream);
	ev_issued = NULL;
	copy_stream = NULL;
	(void)cudaGetLastError();
	return -ENODEV;
}

void tkc_copy_async(void *dst, const void *src, size_t bytes, int to_host)
{
	std::lock_guard<std::mutex> g(copy_lock);
	cudaError_t e;

	if (!bytes)
		return;
	if (tkc_check(cudaEventRecord(ev_issued, tkc_stream()),
		      "copy_async record") ||
	    tkc_check(cudaStreamWaitEvent(copy_stream, ev_issued, 0),
		      "copy_async wait"))
		return;
	/* The profiler's events go after the wait, around the copy alone, so
	 * that the copy stream's busy time leaves out its wait for the
	 * compute stream. */
	if (copy_hook)
		copy_hook(0, copy_stream);
	e = cudaMemcpyAsync(dst, src, bytes,
			    to_host ? cudaMemcpyDeviceToHost
				    : cudaMemcpyHostToDevice,
			    copy_stream);
	if (copy_hook)
		copy_hook(1, copy_stream);
	if (tkc_check(e, "copy_async") ||
	    tkc_check(cudaEventRecord(ev_copied, copy_stream),
		      "copy_async done"))
		return;
	copied = 1;
}

void tkc_set_copy_hook(tkc_copy_hook_fn f)
{
	std::lock_guard<std::mutex> g(copy_lock);

	copy_hook = f;
}

void tkc_copy_wait(void)
{
	std::lock_guard<std::mutex> g(copy_lock);

	if (copied)
		tkc_check(cudaStreamWaitEvent(tkc_stream(), ev_copied, 0),
			  "copy_wait");
}
