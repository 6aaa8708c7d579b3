/* side.cu: the side stream, where the optimizer's updates run while the
 * main stream goes on with the backward.
 *
 * side_begin records an event on the main stream and makes the side stream
 * wait for it, so the side ops see everything issued before (the gradient
 * block they read); tkc_stream() then returns the side stream until
 * side_end, which records the ticket's event on the side stream. A ticket
 * is a number; its event lives in a ring of SIDE_RING slots. Events of one
 * stream complete in order, so waiting for a later ticket also waits for
 * every earlier one: a ticket whose slot has been reused is waited for
 * through the oldest event still in the ring, which is later than it.
 */
#include <errno.h>
#include <mutex>

#include "cuda_ops.h"

#define SIDE_RING 256

static std::mutex side_lock;
static cudaStream_t side;
static cudaEvent_t fork_ev;	    /* on main: side work after this */
static cudaEvent_t ring[SIDE_RING]; /* ticket t in ring[t % SIDE_RING] */
static uint64_t last;		    /* the latest ticket, 0: none yet */
static int on_side;

int tkc_side_init(void)
{
	if (side)
		return 0;
	if (cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) !=
	    cudaSuccess)
		goto fail;
	if (cudaEventCreateWithFlags(&fork_ev, cudaEventDisableTiming) !=
	    cudaSuccess)
		goto fail;
	for (int i = 0; i < SIDE_RING; i++)
		if (cudaEventCreateWithFlags(
			&ring[i], cudaEventDisableTiming) != cudaSuccess)
			goto fail;
	return 0;
fail:
	/* The module has no close: what was created stays, unused. */
	side = NULL;
	(void)cudaGetLastError();
	return -ENODEV;
}

void tkc_side_begin(void)
{
	std::lock_guard<std::mutex> g(side_lock);

	if (on_side)
		return;
	if (tkc_check(cudaEventRecord(fork_ev, tkc_main_stream()),
		      "side_begin record") ||
	    tkc_check(cudaStreamWaitEvent(side, fork_ev, 0), "side_begin wait"))
		return; /* recorded: the ops stay on the main stream */
	on_side = 1;
	tkc_set_stream(side);
}

uint64_t tkc_side_end(void)
{
	std::lock_guard<std::mutex> g(side_lock);

	if (!on_side)
		return last;
	on_side = 0;
	tkc_set_stream(NULL);
	if (tkc_check(cudaEventRecord(ring[(last + 1) % SIDE_RING], side),
		      "side_end record")) {
		/* Nothing to wait for that can be trusted: make the main
		 * stream wait for the whole side stream now. */
		tkc_check(cudaStreamSynchronize(side), "side_end sync");
		return last;
	}
	return ++last;
}

void tkc_side_wait(uint64_t ticket)
{
	std::lock_guard<std::mutex> g(side_lock);

	if (!last)
		return;
	if (ticket == 0 || ticket > last)
		ticket = last;
	if (last - ticket >= SIDE_RING)
		ticket = last - SIDE_RING + 1;
	tkc_check(
	    cudaStreamWaitEvent(tkc_main_stream(), ring[ticket % SIDE_RING], 0),
	    "side_wait");
}
