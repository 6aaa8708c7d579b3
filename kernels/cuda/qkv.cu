/* qkv.cu: GPT-NeoX's fused query_key_value layout (kernels/cpu/qkv.c): per
 * row, per head, hd query values, hd key values, hd value values. Pure
 * copies of the stored bits, moved as unsigned integers of the element's
 * width (no float register ever touches them), so the bytes are the
 * CPU's memcpy's.
 */
#include "cuda_ops.h"

/* One thread per element of q (n * heads * hd in all), e = (t * heads + h)
 * * hd + d: it moves q, k and v's element e. MERGE 0: qkv -> q, k, v;
 * 1: q, k, v -> qkv. U is the element's width (uint32_t or uint16_t); I
 * the index type, 32-bit when total allows (the division by hd is then a
 * 32-bit one, several times cheaper than a 64-bit one). */
template <typename U, typename I, int MERGE>
__global__ static void qkv_kernel(U *q, U *k, U *v, U *qkv, I total, I hd)
{
	I stride = (I)gridDim.x * blockDim.x;

	for (I e = (I)blockIdx.x * blockDim.x + threadIdx.x; e < total;
	     e += stride) {
		/* th = t * heads + h; the fused run of (t, h) starts at
		 * th * 3 * hd */
		I th = e / hd, d = e - th * hd;
		size_t f = (size_t)th * 3 * hd + d;

		if (MERGE) {
			qkv[f] = q[e];
			qkv[f + hd] = k[e];
			qkv[f + 2 * (size_t)hd] = v[e];
		} else {
			q[e] = qkv[f];
			k[e] = qkv[f + hd];
			v[e] = qkv[f + 2 * (size_t)hd];
		}
	}
}

template <typename U, int MERGE>
static void qkv_launch(void *q, void *k, void *v, void *qkv, size_t total,
		       int hd, const char *what)
{
	/* the grid-stride index of the 32-bit variant stays below
	 * total + TKC_MAX_BLOCKS * TKC_THREADS */
	if (total <= UINT32_MAX - (size_t)TKC_MAX_BLOCKS * TKC_THREADS)
		qkv_kernel<U, uint32_t, MERGE>
		    <<<tkc_blocks(total), TKC_THREADS, 0, tkc_stream()>>>(
			(U *)q, (U *)k, (U *)v, (U *)qkv, (uint32_t)total,
			(uint32_t)hd);
	else
		qkv_kernel<U, size_t, MERGE>
		    <<<tkc_blocks(total), TKC_THREADS, 0, tkc_stream()>>>(
			(U *)q, (U *)k, (U *)v, (U *)qkv, total, (size_t)hd);
	tkc_check_launch(what);
}

/* The casts drop const: the kernel is one for both directions, and only
 * the destination side is written. */
void tkc_qkv_split(int dt, void *q, void *k, void *v, const void *qkv, int n,
		   int heads, int hd)
{
	size_t total = (size_t)n * heads * hd;

	if (n <= 0 || heads <= 0 || hd <= 0)
		return;
	if (dt == TK_F32)
		qkv_launch<uint32_t, 0>(q, k, v, (void *)qkv, total, hd,
					"qkv_split");
	else if (dt == TK_BF16)
		qkv_launch<uint16_t, 0>(q, k, v, (void *)qkv, total, hd,
					"qkv_split");
	else
		tkc_bad_dtype("qkv_split", dt);
}

void tkc_qkv_merge(int dt, void *dqkv, const void *dq, const void *dk,
		   const void *dv, int n, int heads, int hd)
{
	size_t total = (size_t)n * heads * hd;

	if (n <= 0 || heads <= 0 || hd <= 0)
		return;
	if (dt == TK_F32)
		qkv_launch<uint32_t, 1>((void *)dq, (void *)dk, (void *)dv,
					dqkv, total, hd, "qkv_merge");
	else if (dt == TK_BF16)
		qkv_launch<uint16_t, 1>((void *)dq, (void *)dk, (void *)dv,
					dqkv, total, hd, "qkv_merge");
	else
		tkc_bad_dtype("qkv_merge", dt);
}
