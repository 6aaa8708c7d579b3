/* convert.cu: dst[n] (fp32) = src[n] converted from F32, BF16 or F16, and
 * the general conversion into F32 or BF16 (rounded to nearest even).
 *
 * Integer bit manipulation, the one definition of kernels/tk_convert.h that
 * kernels/cpu/convert.c runs too, so the result is bit-identical to the CPU
 * backend including NaN payloads (the hardware conversions may canonicalise
 * NaNs).
 */
#include "cuda_ops.h"
#include "tk_convert.h"

/* dst [n], src [n] */
__global__ static void bf16_kernel(float *dst, const uint16_t *src, size_t n)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride)
		dst[i] = tk_bf16_f32(src[i]);
}

/* dst [n], src [n] */
__global__ static void f16_kernel(float *dst, const uint16_t *src, size_t n)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride)
		dst[i] = tk_f16_f32(src[i]);
}

void tkc_to_f32(float *dst, const void *src, int dtype, size_t n)
{
	const uint16_t *h = (const uint16_t *)src;

	if (!n)
		return;
	switch (dtype) {
	case TK_F32:
		if (dst != src)
			tkc_check(cudaMemcpyAsync(dst, src, n * sizeof(float),
						  cudaMemcpyDeviceToDevice,
						  tkc_stream()),
				  "to_f32 copy");
		break;
	case TK_BF16:
		bf16_kernel<<<tkc_blocks(n), TKC_THREADS, 0, tkc_stream()>>>(
		    dst, h, n);
		tkc_check_launch("to_f32 bf16");
		break;
	case TK_F16:
		f16_kernel<<<tkc_blocks(n), TKC_THREADS, 0, tkc_stream()>>>(
		    dst, h, n);
		tkc_check_launch("to_f32 f16");
		break;
	default:
		break;
	}
}

/* dst [n] of dst_dtype, src [n] of src_dtype */
__global__ static void convert_kernel(void *dst, int dst_dtype, const void *src,
				      int src_dtype, size_t n)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride)
		tk_store_f32_rne(dst, dst_dtype, i,
				 tk_load_f32(src, src_dtype, i));
}

void tkc_convert(void *dst, int dst_dtype, const void *src, int src_dtype,
		 size_t n)
{
	if (!n)
		return;
	if (dst_dtype == src_dtype) {
		tkc_check(
		    cudaMemcpyAsync(dst, src, n * tk_dtype_size(src_dtype),
				    cudaMemcpyDeviceToDevice, tkc_stream()),
		    "convert copy");
		return;
	}
	convert_kernel<<<tkc_blocks(n), TKC_THREADS, 0, tkc_stream()>>>(
	    dst, dst_dtype, src, src_dtype, n);
	tkc_check_launch("convert");
}
