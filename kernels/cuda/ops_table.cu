/* ops_table.cu: the CUDA backend's op table, its shared state (stream,
 * cuBLASLt handle, first error) and the module's entry points, which
 * kernels/cuda_loader.c (tk_cuda_open) finds with dlsym.
 *
 * Ops return void, so a failing CUDA or cuBLAS call is recorded once (the
 * first, the root cause: later ones usually follow from it) and the engine
 * polls tk_cuda_last_error() after each step.
 */
#include <errno.h>
#include <mutex>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cuda_ops.h"
#include "tk_why.h"

static std::mutex state_lock;
static int opened;
static cudaStream_t stream;  /* the main stream */
static cudaStream_t current; /* main, or side between side_begin and end */
static cublasLtHandle_t lt;
static tk_ops table;

static std::mutex err_lock;
static int err_set;
static char err_msg[256];

cudaStream_t tkc_stream(void)
{
	return current;
}

cudaStream_t tkc_main_stream(void)
{
	return stream;
}

void tkc_set_stream(cudaStream_t s)
{
	current = s ? s : stream;
}

cublasLtHandle_t tkc_lt(void)
{
	return lt;
}

/* The table the engine holds a pointer to: prof.cu swaps its op pointers
 * for timing wrappers (and back), which every holder then sees. */
tk_ops *tkc_table(void)
{
	std::lock_guard<std::mutex> g(state_lock);

	return opened ? &table : NULL;
}

static void record(const char *what, const char *name, const char *desc)
{
	std::lock_guard<std::mutex> g(err_lock);

	if (err_set)
		return;
	snprintf(err_msg, sizeof(err_msg), "%s: %s (%s)", what, desc, name);
	err_set = 1;
}

int tkc_check(cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return 0;
	record(what, cudaGetErrorName(e), cudaGetErrorString(e));
	return -EIO;
}

int tkc_check_blas(cublasStatus_t s, const char *what)
{
	char code[32];

	if (s == CUBLAS_STATUS_SUCCESS)
		return 0;
	snprintf(code, sizeof(code), "cublas status %d", (int)s);
	record(what, code, "cuBLASLt call failed");
	return -EIO;
}

int tkc_check_launch(const char *what)
{
	return tkc_check(cudaGetLastError(), what);
}

void tkc_bad_dtype(const char *what, int dtype)
{
	char code[32];

	snprintf(code, sizeof(code), "dtype %d", dtype);
	record(what, code, "unsupported dtype");
}

unsigned tkc_blocks(size_t n)
{
	size_t b = (n + TKC_THREADS - 1) / TKC_THREADS;

	if (b < 1)
		b = 1;
	return b > TKC_MAX_BLOCKS ? TKC_MAX_BLOCKS : (unsigned)b;
}

/* The module's entry points, found by kernels/cuda_loader.c with dlsym:
 * these two, and the profile's two (prof.cu); nothing else of the module
 * is exported. */
extern "C" TKC_EXPORT const char *tk_cuda_module_last_error(void)
{
	std::lock_guard<std::mutex> g(err_lock);

	return err_set ? err_msg : NULL;
}

/* A kernel that proves the fatbinary has code this device can run. */
__global__ void probe_kernel(int *x)
{
	*x = 1;
}

static void fill_table(tk_ops *t)
{
	memset(t, 0, sizeof(*t));
	t->name = "cuda";
	t->alloc = tkc_alloc;
	t->free = tkc_free;
	t->mem_current = tkc_mem_current;
	t->mem_peak = tkc_mem_peak;
	t->mem_reset_peak = tkc_mem_reset_peak;
	t->upload = tkc_upload;
	t->download = tkc_download;
	t->memset0 = tkc_memset0;
	t->host_alloc = tkc_host_alloc;
	t->host_free = tkc_host_free;
	t->host_current = tkc_host_current;
	t->host_peak = tkc_host_peak;
	t->copy_async = tkc_copy_async;
	t->copy_wait = tkc_copy_wait;
	t->side_begin = tkc_side_begin;
	t->side_end = tkc_side_end;
	t->side_wait = tkc_side_wait;
	t->to_f32 = tkc_to_f32;
	t->convert = tkc_convert;
	t->matmul = tkc_matmul;
	t->add = tkc_add;
	t->bias_fwd = tkc_bias_fwd;
	t->bias_bwd = tkc_bias_bwd;
	t->embedding_fwd = tkc_embedding_fwd;
	t->embedding_bwd = tkc_embedding_bwd;
	t->rmsnorm_fwd = tkc_rmsnorm_fwd;
	t->rmsnorm_bwd = tkc_rmsnorm_bwd;
	t->rope_fwd = tkc_rope_fwd;
	t->rope_bwd = tkc_rope_bwd;
	t->add_rmsnorm_fwd = tkc_add_rmsnorm_fwd;
	t->rmsnorm_bwd_add = tkc_rmsnorm_bwd_add;
	t->qknorm_rope_fwd = tkc_qknorm_rope_fwd;
	t->qknorm_rope_bwd = tkc_qknorm_rope_bwd;
	t->linear_bias = tkc_linear_bias;
	t->attention_fwd = tkc_attention_fwd;
	t->attention_bwd = tkc_attention_bwd;
	t->kv_store = tkc_kv_store;
	t->attention_decode = tkc_attention_decode;
	t->attn_sink_fwd = tkc_attn_sink_fwd;
	t->attn_sink_bwd = tkc_attn_sink_bwd;
	t->glu_clamp_fwd = tkc_glu_clamp_fwd;
	t->glu_clamp_bwd = tkc_glu_clamp_bwd;
	t->moe_route = tkc_moe_route;
	t->moe_route_bwd = tkc_moe_route_bwd;
	t->moe_prob_sum = tkc_moe_prob_sum;
	t->moe_sort = tkc_moe_sort;
	t->moe_gather = tkc_moe_gather;
	t->moe_combine = tkc_moe_combine;
	t->moe_combine_bwd = tkc_moe_combine_bwd;
	t->moe_scatter = tkc_moe_scatter;
	t->swiglu_fwd = tkc_swiglu_fwd;
	t->swiglu_bwd = tkc_swiglu_bwd;
	t->ce_stats = tkc_ce_stats;
	t->ce_finish = tkc_ce_finish;
	t->ce_grad = tkc_ce_grad;
	t->taco_update = tkc_taco_update;
	t->taco_scan_bytes = tkc_taco_scan_bytes;
	t->taco_begin = tkc_taco_begin;
	t->taco_feed = tkc_taco_feed;
	t->taco_finish = tkc_taco_finish;
	t->taco_gather = tkc_taco_gather;
	t->adamw_update = tkc_adamw_update;
	/* Ops of the OPT and GPT-NeoX families */
	t->layernorm_fwd = tkc_layernorm_fwd;
	t->layernorm_bwd = tkc_layernorm_bwd;
	t->act_fwd = tkc_act_fwd;
	t->act_bwd = tkc_act_bwd;
	t->qkv_split = tkc_qkv_split;
	t->qkv_merge = tkc_qkv_merge;
	t->dropout = tkc_dropout;
}

/* Device 0, a stream, one probe launch, a cuBLASLt handle, the GEMM
 * workspace and the copy stream. Returns 0 or -ENODEV with why set. */
static int open_device(char *why, size_t why_len)
{
	cudaDeviceProp prop;
	cudaError_t e;
	int count = 0, *probe = NULL, one = 0;

	e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess) {
		/* No driver, a driver older than the runtime, no device. */
		tk_why(why, why_len, "no usable CUDA driver or device: %s",
		       cudaGetErrorString(e));
		return -ENODEV;
	}
	if (count < 1) {
		tk_why(why, why_len, "no CUDA device");
		return -ENODEV;
	}
	if ((e = cudaSetDevice(0)) != cudaSuccess ||
	    (e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess) {
		tk_why(why, why_len, "CUDA device 0: %s",
		       cudaGetErrorString(e));
		return -ENODEV;
	}
	if (prop.major < 8) {
		tk_why(why, why_len,
		       "%s: compute capability %d.%d, need 8.0 "
		       "(bf16 tensor cores)",
		       prop.name, prop.major, prop.minor);
		return -ENODEV;
	}
	if ((e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) !=
	    cudaSuccess) {
		tk_why(why, why_len, "cudaStreamCreate: %s",
		       cudaGetErrorString(e));
		return -ENODEV;
	}
	current = stream;
	if ((e = cudaMalloc(&probe, sizeof(int))) != cudaSuccess)
		goto fail;
	probe_kernel<<<1, 1, 0, stream>>>(probe);
	if ((e = cudaGetLastError()) != cudaSuccess ||
	    (e = cudaMemcpyAsync(&one, probe, sizeof(int),
				 cudaMemcpyDeviceToHost, stream)) !=
		cudaSuccess ||
	    (e = cudaStreamSynchronize(stream)) != cudaSuccess)
		goto fail;
	cudaFree(probe);
	probe = NULL;
	if (one != 1) {
		tk_why(why, why_len, "%s: probe kernel did not run", prop.name);
		goto fail_quiet;
	}
	if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
		tk_why(why, why_len, "cublasLtCreate failed");
		goto fail_quiet;
	}
	if (tkc_matmul_init() < 0) {
		tk_why(why, why_len, "%s: no memory for the GEMM workspace",
		       prop.name);
		cublasLtDestroy(lt);
		lt = NULL;
		goto fail_quiet;
	}
	/* The copy stream lives as long as the process: the module has no
	 * close (one backend per process, see tk_cuda_module_open). */
	if (tkc_copy_init() < 0) {
		tk_why(why, why_len, "%s: cannot create the copy stream",
		       prop.name);
		cublasLtDestroy(lt);
		lt = NULL;
		goto fail_quiet;
	}
	if (tkc_side_init() < 0) {
		tk_why(why, why_len, "%s: cannot create the side stream",
		       prop.name);
		cublasLtDestroy(lt);
		lt = NULL;
		goto fail_quiet;
	}
	return 0;

fail:
	tk_why(why, why_len, "%s: %s", prop.name, cudaGetErrorString(e));
fail_quiet:
	if (probe)
		cudaFree(probe);
	cudaStreamDestroy(stream);
	stream = NULL;
	return -ENODEV;
}

/* The devices, for tk_cuda_devices: properties only, so no context is
 * made on any of them (a query costs no device memory). */
extern "C" TKC_EXPORT int tk_cuda_module_devices(tk_device_info *out, int cap,
						 char *why, size_t why_len)
{
	cudaDeviceProp prop;
	cudaError_t e;
	int count = 0;

	e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess) {
		tk_why(why, why_len, "no usable CUDA driver or device: %s",
		       cudaGetErrorString(e));
		return -ENODEV;
	}
	for (int d = 0; d < count && d < cap; d++) {
		if ((e = cudaGetDeviceProperties(&prop, d)) != cudaSuccess) {
			tk_why(why, why_len, "CUDA device %d: %s", d,
			       cudaGetErrorString(e));
			return -ENODEV;
		}
		memset(&out[d], 0, sizeof(out[d]));
		out[d].index = d;
		snprintf(out[d].name, sizeof(out[d].name), "%.95s", prop.name);
		out[d].memory = (uint64_t)prop.totalGlobalMem;
		out[d].cc_major = prop.major;
		out[d].cc_minor = prop.minor;
		out[d].usable = prop.major >= 8; /* as open_device demands */
	}
	return count;
}

extern "C" TKC_EXPORT int tk_cuda_module_open(const tk_ops **out, char *why,
					      size_t why_len)
{
	std::lock_guard<std::mutex> g(state_lock);
	int r;

	/* One backend per process: later opens share the first one. */
	if (!opened) {
		r = open_device(why, why_len);
		/* Leave no error of the probing behind for the first
		 * launch check to report (or a failed open for a retry). */
		(void)cudaGetLastError();
		if (r < 0)
			return r;
		fill_table(&table);
		opened = 1;
	}
	*out = &table;
	return 0;
}
