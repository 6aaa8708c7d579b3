/* tk_hd.h: TK_HD marks a function that is compiled for the host and, under
 * nvcc, for the device as well (__host__ __device__); plain C sees nothing.
 * The kernels' small shared helpers (tk_convert.h, tk_hash.h, tk_taco.h)
 * use it so that the CPU and CUDA backends run one definition of each.
 *
 * tk_fmul_rn / tk_fadd_rn / tk_fsub_rn / tk_fdiv_rn: one fp32 operation,
 * rounded to nearest even on its own. On the device they are the
 * intrinsics (__fmul_rn, ...), which nvcc never fuses into a multiply-add
 * nor replaces by an approximate division, whatever the flags; on the host
 * they are the plain operators, which the build keeps unfused
 * (-ffp-contract=off). Code that must give the same bits on both backends
 * writes each operation through them. */
#ifndef TK_HD_H
#define TK_HD_H

#ifdef __CUDACC__
#define TK_HD __host__ __device__
#else
#define TK_HD
#endif

static inline TK_HD float tk_fmul_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
	return __fmul_rn(a, b);
#else
	return a * b;
#endif
}

static inline TK_HD float tk_fadd_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
	return __fadd_rn(a, b);
#else
	return a + b;
#endif
}

static inline TK_HD float tk_fsub_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
	return __fsub_rn(a, b);
#else
	return a - b;
#endif
}

static inline TK_HD float tk_fdiv_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
	return __fdiv_rn(a, b);
#else
	return a / b;
#endif
}

#endif
