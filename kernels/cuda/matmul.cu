/* matmul.cu: C[M,N] = alpha * op(A)[M,K] op(B)[K,N] + beta * C, row-major,
 * with cuBLASLt. Two kinds:
 * - ab_dtype F32 (C F32): fp32 in and out, CUBLAS_COMPUTE_32F_FAST_16BF so
 *   the tensor cores multiply bf16 with fp32 accumulation.
 * - ab_dtype BF16: A and B are read as they are (CUDA_R_16BF layouts, no
 *   conversion kernel), C/D CUDA_R_16BF or CUDA_R_32F per c_dtype,
 *   CUBLAS_COMPUTE_32F with fp32 alpha/beta: fp32 accumulation, C rounded
 *   once after alpha and beta.
 * F32 A/B with a BF16 C is not a combination cuBLASLt offers (nor one the
 * engine asks for): it is recorded as an error and C is left alone.
 *
 * A is [M,K] (lda >= K), or [K,M] (lda >= M) when transa; B is [K,N]
 * (ldb >= N), or [N,K] (ldb >= K) when transb; C is [M,N] (ldc >= N).
 *
 * cuBLASLt is column-major. A row-major matrix with leading dimension ld is
 * its transpose seen column-major, so we ask for C^T = op(B)^T op(A)^T:
 * m = N, n = M, k = K, with B as the first operand and A as the second,
 * neither transposed by us (their trans flags carry over as they are).
 *
 * Descriptors, layouts and the heuristic's algorithm are cached per shape
 * (dtypes, flags, sizes, leading dimensions, epilogue and pointer
 * alignment, which decides which algorithms are valid): a training step
 * repeats a few dozen shapes.
 *
 * linear_bias is matmul(0, 1, ...) with beta 0 and cuBLASLt's bias
 * epilogue: in the column-major view D^T [N, M] has m = N rows, so bias[N]
 * is the epilogue's per-row vector, added to the fp32 accumulator before D
 * is rounded. Its type is D's (CUDA_R_16BF or CUDA_R_32F), which cuBLASLt
 * takes for a bias; bf16 operands with an f32 C (a bf16 bias over an f32
 * D, which the epilogue does not list) store the product in f32 and add
 * the widened bias in a second kernel: no rounding in between, so the same
 * values. Its pointer is set on the cached descriptor for each call; the
 * heuristic saw one of the same alignment (part of the key).
 */
#include <errno.h>
#include <mutex>
#include <stdint.h>
#include <string.h>

#include "cuda_ops.h"

/* Distinct GEMM shapes of a step are far fewer; LRU beyond. */
#define MM_CACHE 64
/* Enough for the split-K and stream-K kernels of large shapes. */
#define MM_WORKSPACE ((size_t)32 << 20)

typedef struct mm_key {
	int ab, c; /* TK_F32 / TK_BF16 of A and B, of C */
	int ta, tb, M, N, K, lda, ldb, ldc;
	unsigned align_a, align_b, align_c;
	int bias;	     /* 1: the bias epilogue */
	unsigned align_bias; /* its pointer's alignment */
} mm_key;

typedef struct mm_entry {
	mm_key key;
	int used;
	unsigned long long last; /* LRU stamp */
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t la, lb, lc; /* cuBLASLt's A (= our B), B, C */
	cublasLtMatmulAlgo_t algo;
} mm_entry;

static std::mutex mm_lock;
static mm_entry cache[MM_CACHE];
static unsigned long long clock_;
static void *workspace;

int tkc_matmul_init(void)
{
	if (workspace)
		return 0;
	workspace = tkc_alloc(MM_WORKSPACE);
	return workspace ? 0 : -ENOMEM;
}

/* Largest of 16, 8, 4, 2 dividing the address (fp32 pointers are
 * 4-aligned, bf16 ones 2-aligned). */
static unsigned align_of(const void *p)
{
	uintptr_t u = (uintptr_t)p;

	return u % 16 == 0 ? 16 : u % 8 == 0 ? 8 : u % 4 == 0 ? 4 : 2;
}

static int key_eq(const mm_key *a, const mm_key *b)
{
	return a->ab == b->ab && a->c == b->c && a->ta == b->ta &&
	       a->tb == b->tb && a->M == b->M && a->N == b->N && a->K == b->K &&
	       a->lda == b->lda && a->ldb == b->ldb && a->ldc == b->ldc &&
	       a->align_a == b->align_a && a->align_b == b->align_b &&
	       a->align_c == b->align_c && a->bias == b->bias &&
	       a->align_bias == b->align_bias;
}

static void entry_clear(mm_entry *e)
{
	if (e->desc)
		cublasLtMatmulDescDestroy(e->desc);
	if (e->la)
		cublasLtMatrixLayoutDestroy(e->la);
	if (e->lb)
		cublasLtMatrixLayoutDestroy(e->lb);
	if (e->lc)
		cublasLtMatrixLayoutDestroy(e->lc);
	memset(e, 0, sizeof(*e));
}

/* The bias epilogue on desc: bias of type t at bias (the heuristic reads
 * the pointer's alignment). */
static int set_bias_epilogue(cublasLtMatmulDesc_t desc, cudaDataType_t t,
			     const void *bias)
{
	cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
	int32_t bt = (int32_t)t;

	return tkc_check_blas(
		   cublasLtMatmulDescSetAttribute(
		       desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)),
		   "matmul epilogue") ||
	       tkc_check_blas(cublasLtMatmulDescSetAttribute(
				  desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
				  &bt, sizeof(bt)),
			      "matmul bias type") ||
	       tkc_check_blas(cublasLtMatmulDescSetAttribute(
				  desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
				  &bias, sizeof(bias)),
			      "matmul bias pointer");
}

/* Fills e for key k: descriptors and the heuristic's first algorithm; bias
 * is the epilogue's vector when k->bias. */
static int entry_build(mm_entry *e, const mm_key *k, const void *bias)
{
	cublasOperation_t opa = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
	cublasOperation_t opb = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
	cublasLtMatmulPreference_t pref = NULL;
	cublasLtMatmulHeuristicResult_t res;
	uint64_t ws = MM_WORKSPACE;
	uint32_t aa = k->align_b, ab = k->align_a, ac = k->align_c;
	cudaDataType_t tab = k->ab == TK_BF16 ? CUDA_R_16BF : CUDA_R_32F;
	cudaDataType_t tc = k->c == TK_BF16 ? CUDA_R_16BF : CUDA_R_32F;
	cublasComputeType_t ct = k->ab == TK_BF16
				     ? CUBLAS_COMPUTE_32F
				     : CUBLAS_COMPUTE_32F_FAST_16BF;
	int found = 0, r = -EIO;

	memset(e, 0, sizeof(*e));
	memset(&res, 0, sizeof(res));
	/* cuBLASLt A: our B, stored [N, K] col-major (or [K, N] when
	 * transposed); cuBLASLt B: our A, [K, M] (or [M, K]); C: [N, M]. */
	if (tkc_check_blas(cublasLtMatmulDescCreate(&e->desc, ct, CUDA_R_32F),
			   "matmul desc") ||
	    tkc_check_blas(
		cublasLtMatmulDescSetAttribute(
		    e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)),
		"matmul transa") ||
	    tkc_check_blas(
		cublasLtMatmulDescSetAttribute(
		    e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)),
		"matmul transb") ||
	    tkc_check_blas(
		cublasLtMatrixLayoutCreate(&e->la, tab, k->tb ? k->K : k->N,
					   k->tb ? k->N : k->K, k->ldb),
		"matmul layout B") ||
	    tkc_check_blas(
		cublasLtMatrixLayoutCreate(&e->lb, tab, k->ta ? k->M : k->K,
					   k->ta ? k->K : k->M, k->lda),
		"matmul layout A") ||
	    tkc_check_blas(
		cublasLtMatrixLayoutCreate(&e->lc, tc, k->N, k->M, k->ldc),
		"matmul layout C") ||
	    (k->bias && set_bias_epilogue(e->desc, tc, bias)) ||
	    tkc_check_blas(cublasLtMatmulPreferenceCreate(&pref),
			   "matmul preference") ||
	    tkc_check_blas(cublasLtMatmulPreferenceSetAttribute(
			       pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
			       &ws, sizeof(ws)),
			   "matmul workspace") ||
	    tkc_check_blas(cublasLtMatmulPreferenceSetAttribute(
			       pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
			       &aa, sizeof(aa)),
			   "matmul align A") ||
	    tkc_check_blas(cublasLtMatmulPreferenceSetAttribute(
			       pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
			       &ab, sizeof(ab)),
			   "matmul align B") ||
	    tkc_check_blas(cublasLtMatmulPreferenceSetAttribute(
			       pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
			       &ac, sizeof(ac)),
			   "matmul align C") ||
	    tkc_check_blas(cublasLtMatmulPreferenceSetAttribute(
			       pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
			       &ac, sizeof(ac)),
			   "matmul align D") ||
	    tkc_check_blas(cublasLtMatmulAlgoGetHeuristic(
			       tkc_lt(), e->desc, e->la, e->lb, e->lc, e->lc,
			       pref, 1, &res, &found),
			   "matmul heuristic"))
		goto out;
	if (found < 1) {
		tkc_check_blas(CUBLAS_STATUS_NOT_SUPPORTED,
			       "matmul: no cuBLASLt algorithm for this shape");
		goto out;
	}
	e->algo = res.algo;
	e->key = *k;
	e->used = 1;
	r = 0;
out:
	if (pref)
		cublasLtMatmulPreferenceDestroy(pref);
	if (r)
		entry_clear(e);
	return r;
}

/* The entry of key k, built on a miss over the least recently used one
 * (bias: the epilogue's vector, when k->bias); NULL on failure (recorded).
 * Called with mm_lock held. */
static mm_entry *lookup(const mm_key *k, const void *bias)
{
	mm_entry *victim = NULL;

	for (int i = 0; i < MM_CACHE; i++) {
		mm_entry *e = &cache[i];
		if (e->used && key_eq(&e->key, k)) {
			e->last = ++clock_;
			return e;
		}
		/* The first free slot, else the least recently used. */
		if (!victim ||
		    (victim->used && (!e->used || e->last < victim->last)))
			victim = e;
	}
	entry_clear(victim);
	if (entry_build(victim, k, bias))
		return NULL;
	victim->last = ++clock_;
	return victim;
}

/* C [M, N] (row stride ldc) = beta * C, 0 when beta == 0 (C not read). */
template <typename T>
__global__ static void scale_kernel(T *C, int M, int N, int ldc, float beta)
{
	size_t n = (size_t)M * N, stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		T *c = C + (i / N) * ldc + i % N;
		tkc_put(c, beta == 0.0f ? 0.0f : beta * tkc_ld(*c));
	}
}

/* C [M, N] (row stride ldc, TC) += bias [N] (TB), each sum rounded once;
 * over f32 C that is the epilogue's fp32 sum. */
template <typename TC, typename TB>
__global__ static void bias_add_kernel(TC *C, const TB *bias, int M, int N,
				       int ldc)
{
	size_t n = (size_t)M * N, stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		TC *c = C + (i / N) * ldc + i % N;
		tkc_put(c, tkc_ld(*c) + tkc_ld(bias[i % N]));
	}
}

/* What matmul and linear_bias take: 0, or -1 with the error recorded
 * (what: the op, f32_bf16: the error for f32 A and B with a bf16 C). */
static int dtypes_check(const char *what, const char *f32_bf16, int ab_dtype,
			int c_dtype)
{
	if ((ab_dtype != TK_F32 && ab_dtype != TK_BF16) ||
	    (c_dtype != TK_F32 && c_dtype != TK_BF16)) {
		tkc_bad_dtype(what, ab_dtype != TK_F32 && ab_dtype != TK_BF16
					? ab_dtype
					: c_dtype);
		return -1;
	}
	if (ab_dtype == TK_F32 && c_dtype == TK_BF16) {
		tkc_check_blas(CUBLAS_STATUS_NOT_SUPPORTED, f32_bf16);
		return -1;
	}
	return 0;
}

/* Empty product: C = beta * C, as the CPU backend. */
static void scale_c(int c_dtype, void *C, int M, int N, int ldc, float beta)
{
	if (c_dtype == TK_F32)
		scale_kernel<float>
		    <<<tkc_blocks((size_t)M * N), TKC_THREADS, 0,
		       tkc_stream()>>>((float *)C, M, N, ldc, beta);
	else
		scale_kernel<tkc_bf16>
		    <<<tkc_blocks((size_t)M * N), TKC_THREADS, 0,
		       tkc_stream()>>>((tkc_bf16 *)C, M, N, ldc, beta);
	tkc_check_launch("matmul K = 0");
}

/* The key of a GEMM; bias: the epilogue's vector or NULL. */
static void key_of(mm_key *k, int transa, int transb, int M, int N, int K,
		   int ab_dtype, const void *A, int lda, const void *B, int ldb,
		   int c_dtype, const void *C, int ldc, const void *bias)
{
	memset(k, 0, sizeof(*k));
	k->ab = ab_dtype;
	k->c = c_dtype;
	k->ta = !!transa;
	k->tb = !!transb;
	k->M = M;
	k->N = N;
	k->K = K;
	k->lda = lda;
	k->ldb = ldb;
	k->ldc = ldc;
	k->align_a = align_of(A);
	k->align_b = align_of(B);
	k->align_c = align_of(C);
	k->bias = bias != NULL;
	k->align_bias = bias ? align_of(bias) : 0;
}

/* The GEMM itself, K > 0, dtypes checked; called with mm_lock held. */
static void gemm(int transa, int transb, int M, int N, int K, float alpha,
		 int ab_dtype, const void *A, int lda, const void *B, int ldb,
		 float beta, int c_dtype, void *C, int ldc)
{
	mm_key k;
	mm_entry *e;

	key_of(&k, transa, transb, M, N, K, ab_dtype, A, lda, B, ldb, c_dtype,
	       C, ldc, NULL);
	if (!(e = lookup(&k, NULL)))
		return;
	/* beta == 0: cuBLASLt does not read C (BLAS semantics). */
	tkc_check_blas(cublasLtMatmul(tkc_lt(), e->desc, &alpha, B, e->la, A,
				      e->lb, &beta, C, e->lc, C, e->lc,
				      &e->algo, workspace, MM_WORKSPACE,
				      tkc_stream()),
		       "cublasLtMatmul");
}

void tkc_matmul(int transa, int transb, int M, int N, int K, float alpha,
		int ab_dtype, const void *A, int lda, const void *B, int ldb,
		float beta, int c_dtype, void *C, int ldc)
{
	std::lock_guard<std::mutex> g(mm_lock);

	if (M <= 0 || N <= 0)
		return;
	if (dtypes_check("matmul", "matmul: f32 A and B with a bf16 C",
			 ab_dtype, c_dtype))
		return;
	if (K <= 0) {
		scale_c(c_dtype, C, M, N, ldc, beta);
		return;
	}
	gemm(transa, transb, M, N, K, alpha, ab_dtype, A, lda, B, ldb, beta,
	     c_dtype, C, ldc);
}

void tkc_linear_bias(int M, int N, int K, int ab_dtype, const void *A, int lda,
		     const void *B, int ldb, const void *bias, int c_dtype,
		     void *C, int ldc)
{
	std::lock_guard<std::mutex> g(mm_lock);
	const float one = 1.0f, zero = 0.0f;
	mm_key k;
	mm_entry *e;

	if (M <= 0 || N <= 0)
		return;
	if (dtypes_check("linear_bias",
			 "linear_bias: f32 A and B with a bf16 C", ab_dtype,
			 c_dtype))
		return;
	if (K <= 0 || ab_dtype != c_dtype) {
		/* C = 0 or the f32 product, then + bias in fp32, stored
		 * once more in f32 (exact for the zeros): the bits of the
		 * epilogue. */
		if (K <= 0)
			scale_c(c_dtype, C, M, N, ldc, 0.0f);
		else
			gemm(0, 1, M, N, K, 1.0f, ab_dtype, A, lda, B, ldb,
			     0.0f, c_dtype, C, ldc);
		if (c_dtype == TK_F32 && ab_dtype == TK_BF16)
			bias_add_kernel<float, tkc_bf16>
			    <<<tkc_blocks((size_t)M * N), TKC_THREADS, 0,
			       tkc_stream()>>>(
				(float *)C, (const tkc_bf16 *)bias, M, N, ldc);
		else if (c_dtype == TK_F32)
			bias_add_kernel<float, float>
			    <<<tkc_blocks((size_t)M * N), TKC_THREADS, 0,
			       tkc_stream()>>>((float *)C, (const float *)bias,
					       M, N, ldc);
		else
			bias_add_kernel<tkc_bf16, tkc_bf16>
			    <<<tkc_blocks((size_t)M * N), TKC_THREADS, 0,
			       tkc_stream()>>>((tkc_bf16 *)C,
					       (const tkc_bf16 *)bias, M, N,
					       ldc);
		tkc_check_launch("linear_bias add");
		return;
	}
	key_of(&k, 0, 1, M, N, K, ab_dtype, A, lda, B, ldb, c_dtype, C, ldc,
	       bias);
	if (!(e = lookup(&k, bias)))
		return;
	/* The entry is shared by every call of its shape: this call's
	 * vector, under mm_lock until the call is enqueued. */
	if (tkc_check_blas(cublasLtMatmulDescSetAttribute(
			       e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
			       &bias, sizeof(bias)),
			   "linear_bias pointer"))
		return;
	tkc_check_blas(cublasLtMatmul(tkc_lt(), e->desc, &one, B, e->la, A,
				      e->lb, &zero, C, e->lc, C, e->lc,
				      &e->algo, workspace, MM_WORKSPACE,
				      tkc_stream()),
		       "cublasLtMatmul bias");
}
