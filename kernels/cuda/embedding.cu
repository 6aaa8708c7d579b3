/* embedding.cu: token embedding lookup and its scatter-add.
 *
 * Token ids are validated by the caller (0 <= id < V); a negative id gives
 * a zero row in the forward pass and is skipped by the backward pass
 * (rows[i] < 0: token i adds nothing). out, table and dout are dt (F32 or
 * BF16); the forward copies elements as they are (exact), dtable is f32
 * and accumulates the widened dout.
 *
 * Backward without float atomics (whose order, hence rounding, varies run
 * to run): block i handles token i only when i is the first occurrence of
 * its id; it then collects, in order, every later position with the same
 * id and adds their gradient rows into the table row one after the other.
 * Each table row therefore has one owner, and each element receives the
 * additions in token order, exactly as the CPU backend does it: the result
 * is deterministic and bit-identical to kernels/cpu/embedding.c. Cost:
 * every owner scans the ids after it (n^2 / 2 id reads at worst, from
 * cache), and each gradient row is read once.
 */
#include "cuda_ops.h"

#define EMB_THREADS 256 /* 8 warps: the compaction below */
#define EMB_LIST 4096	/* matched positions held per flush */
#define EMB_WARPS (EMB_THREADS / 32)

/* out [n, H] = table [V, H] [tokens[i], :] */
template <typename T>
__global__ static void embedding_fwd_kernel(T *out, const T *table,
					    const int32_t *tokens, size_t total,
					    int H)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	     e < total; e += stride) {
		int32_t t = tokens[e / H];
		if (t < 0)
			tkc_put(&out[e], 0.0f);
		else
			out[e] = table[(size_t)t * H + e % H];
	}
}

/* row [H] += dout [list[m], :] for m = 0..cnt-1, in that order. */
template <typename T>
__device__ static void emb_flush(float *row, const T *dout, const int *list,
				 int cnt, int H)
{
	for (int c = threadIdx.x; c < H; c += EMB_THREADS) {
		float x = row[c];
		for (int m = 0; m < cnt; m++)
			x += tkc_ld(dout[(size_t)list[m] * H + c]);
		row[c] = x;
	}
}

/* dtable [nr, H] [tokens[i] - r0, :] += dout [n, H] [i, :] for the tokens
 * with r0 <= tokens[i] < r0 + nr; grid n, block EMB_THREADS. */
template <typename T>
__global__ static void __launch_bounds__(EMB_THREADS)
    embedding_bwd_kernel(float *dtable, const T *dout, const int32_t *tokens,
			 int n, int H, int r0, int nr)
{
	__shared__ int list[EMB_LIST];
	__shared__ int warp_cnt[EMB_WARPS];
	int i = blockIdx.x, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	int32_t v = tokens[i];
	int dup = 0, cnt = 0;
	float *row;

	if (v < r0 || v - r0 >= nr)
		return; /* the whole block: v is the same for every thread */
	for (int j = threadIdx.x; j < i; j += EMB_THREADS)
		if (tokens[j] == v) {
			dup = 1;
			break;
		}
	if (__syncthreads_or(dup))
		return; /* an earlier block owns this row */
	row = dtable + (size_t)(v - r0) * H;
	/* Every thread runs the same number of iterations (j0 is uniform),
	 * so the ballots and barriers see the whole block. */
	for (int j0 = i; j0 < n; j0 += EMB_THREADS) {
		int j = j0 + threadIdx.x;
		int hit = j < n && tokens[j] == v;
		unsigned b = __ballot_sync(0xffffffffu, hit);
		int off = cnt, tot = cnt;

		if (lane == 0)
			warp_cnt[w] = __popc(b);
		__syncthreads();
		for (int k = 0; k < EMB_WARPS; k++) {
			if (k < w)
				off += warp_cnt[k];
			tot += warp_cnt[k];
		}
		if (hit)
			list[off + __popc(b & ((1u << lane) - 1u))] = j;
		/* list complete; warp_cnt free for the next tile */
		__syncthreads();
		cnt = tot;
		if (cnt > EMB_LIST - EMB_THREADS) {
			emb_flush(row, dout, list, cnt, H);
			cnt = 0;
			__syncthreads(); /* list read before it is refilled */
		}
	}
	emb_flush(row, dout, list, cnt, H);
}

template <typename T>
static void embedding_fwd(void *out, const void *table, const int32_t *tokens,
			  size_t total, int H)
{
	embedding_fwd_kernel<T>
	    <<<tkc_blocks(total), TKC_THREADS, 0, tkc_stream()>>>(
		(T *)out, (const T *)table, tokens, total, H);
	tkc_check_launch("embedding_fwd");
}

template <typename T>
static void embedding_bwd(float *dtable, const void *dout, const int32_t *rows,
			  int n, int H, int r0, int nr)
{
	embedding_bwd_kernel<T><<<n, EMB_THREADS, 0, tkc_stream()>>>(
	    dtable, (const T *)dout, rows, n, H, r0, nr);
	tkc_check_launch("embedding_bwd");
}

void tkc_embedding_fwd(int dt, void *out, const void *table,
		       const int32_t *tokens, int n, int H)
{
	size_t total = (size_t)(n > 0 ? n : 0) * (H > 0 ? H : 0);

	if (!total)
		return;
	if (dt == TK_F32)
		embedding_fwd<float>(out, table, tokens, total, H);
	else if (dt == TK_BF16)
		embedding_fwd<tkc_bf16>(out, table, tokens, total, H);
	else
		tkc_bad_dtype("embedding_fwd", dt);
}

void tkc_embedding_bwd(int dt, float *dtable, const void *dout,
		       const int32_t *rows, int n, int H, int r0, int nr)
{
	if (n <= 0 || H <= 0 || nr <= 0)
		return;
	if (dt == TK_F32)
		embedding_bwd<float>(dtable, dout, rows, n, H, r0, nr);
	else if (dt == TK_BF16)
		embedding_bwd<tkc_bf16>(dtable, dout, rows, n, H, r0, nr);
	else
		tkc_bad_dtype("embedding_bwd", dt);
}
