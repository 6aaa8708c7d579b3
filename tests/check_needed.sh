#!/bin/sh
# check_needed.sh TACOD: tacod plans and validates, taco-train trains, so
# tacod's binary must need no kernel backend: no OpenBLAS, no OpenMP, no
# CUDA library in its dynamic NEEDED list.
set -eu
needed=$(readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "tacod needs: $(echo $needed)"
bad=$(echo "$needed" | grep -E '^lib(openblas|gomp|omp|iomp5|cuda|cudart|cublas|cublasLt|cudnn|nvrtc)' || true)
if [ -n "$bad" ]; then
	echo "tacod must not need: $(echo $bad)" >&2
	exit 1
fi
