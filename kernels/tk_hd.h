/* tk_hd.h: TK_HD marks a function that is compiled for the host and, under
 * nvcc, for the device as well (__host__ __device__); plain C sees nothing.
 * The kernels' small shared helpers (tk_convert.h, tk_hash.h) use it so that
 * the CPU and CUDA backends run one definition of each. */
#ifndef TK_HD_H
#define TK_HD_H

#ifdef __CUDACC__
#define TK_HD __host__ __device__
#else
#define TK_HD
#endif

#endif
