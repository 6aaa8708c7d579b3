/* convert.cu: dst[n] (fp32) = src[n] converted from F32, BF16 or F16.
 *
 * Integer bit manipulation, the algorithm of kernels/cpu/convert.c, so the
 * result is bit-identical to the CPU backend including NaN payloads (the
 * hardware conversions may canonicalise NaNs).
 */
#include "cuda_ops.h"

/* bf16 is the upper half of an fp32: exact widening. */
__device__ static float bf16_to_f32(uint16_t h)
{
	return __uint_as_float((uint32_t)h << 16);
}

/* IEEE 754 binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. */
__device__ static float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t man = h & 0x3ffu;

	if (exp == 0x1f) /* inf / nan (payload kept) */
		return __uint_as_float(sign | 0x7f800000u | (man << 13));
	if (exp == 0) {
		if (man == 0)
			return __uint_as_float(sign);
		/* Subnormal: man * 2^-24, renormalised (at most 10 shifts). */
		exp = 127 - 15 + 1;
		while (!(man & 0x400u)) {
			man <<= 1;
			exp--;
		}
		man &= 0x3ffu;
		return __uint_as_float(sign | (exp << 23) | (man << 13));
	}
	return __uint_as_float(sign | ((exp + 127 - 15) << 23) | (man << 13));
}

/* dst [n], src [n] */
__global__ static void bf16_kernel(float *dst, const uint16_t *src, size_t n)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride)
		dst[i] = bf16_to_f32(src[i]);
}

/* dst [n], src [n] */
__global__ static void f16_kernel(float *dst, const uint16_t *src, size_t n)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride)
		dst[i] = f16_to_f32(src[i]);
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
