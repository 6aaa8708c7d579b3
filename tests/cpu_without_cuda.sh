#!/bin/sh
# cpu_without_cuda.sh BIN_DIR SUITE...: CPU jobs where the CUDA runtime
# cannot be loaded (a toolkit installed from NVIDIA's runfile or tarball,
# with no ld.so.conf entry). Three checks:
#   1. no program in BIN_DIR NEEDs a CUDA library (the CUDA backend is the
#      module libtaco_cuda.so, loaded on demand);
#   2. in a mount namespace where every CUDA runtime and cuBLAS library on
#      the loader's path reads as empty, each check suite SUITE passes, and
#      taco-train --backend cuda fails with a message naming the library;
#   3. without namespaces (no CAP_SYS_ADMIN), a CPU job of taco-train run
#      by the dynamic loader with its cache off (so /usr/local/... is not
#      searched) succeeds.
set -eu
bin=$(cd "$1" && pwd)
shift
fail=0

# 1. NEEDED
for p in "$bin"/taco-train "$bin"/tacod "$bin"/tacoctl "$bin"/test_*; do
	[ -x "$p" ] && [ -f "$p" ] || continue
	if readelf -d "$p" | grep -E 'NEEDED.*\[lib(cudart|cublas|cublasLt|cuda)\.' >/dev/null; then
		echo "FAIL: $(basename "$p") NEEDs the CUDA runtime:" \
			$(readelf -d "$p" | sed -n 's/.*NEEDED.*\[\(libcu[a-zA-Z]*\.so[.0-9]*\)\]/\1/p')
		fail=1
	fi
done
[ "$fail" = 0 ] && echo "ok: no program NEEDs a CUDA library"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/job.json" <<JOB
{"model": "$TACO_FIXTURES/models/llama_gqa", "train": "$TACO_FIXTURES/data/count_train.jsonl",
 "output_dir": "$work/out", "steps": 2, "batch_size": 2, "seq_len": 16}
JOB

if unshare -m true 2>/dev/null; then
	# 2. every CUDA library the loader could find, hidden
	libs=$(ldconfig -p | sed -n 's/.*\(libcudart\|libcublasLt\|libcublas\)\.so[.0-9]* (.*) => //p')
	for d in $(readelf -d "$bin/libtaco_cuda.so" 2>/dev/null | sed -n 's/.*RUNPATH.*\[\(.*\)\]/\1/p' | tr ':' ' '); do
		libs="$libs $(ls "$d"/libcudart.so* "$d"/libcublas*.so* 2>/dev/null || true)"
	done
	[ -n "$(echo $libs)" ] || { echo "no CUDA library on this machine to hide"; }
	cat >"$work/inside.sh" <<'INSIDE'
set -u
for f in $LIBS; do mount --bind /dev/null "$f" || exit 90; done
fail=0
if out=$("$BIN/taco-train" --backend cuda --no-progress "$WORK/job.json" 2>&1); then
	echo "FAIL: taco-train --backend cuda succeeded with CUDA hidden"; fail=1
else
	rc=$?
	if [ "$rc" -gt 128 ]; then echo "FAIL: taco-train --backend cuda crashed ($rc)"; fail=1; fi
	case $out in
	*libcu*|*CUDA*) echo "ok: --backend cuda refused: $(echo "$out" | tail -n 1)" ;;
	*) echo "FAIL: --backend cuda gave no reason: $out"; fail=1 ;;
	esac
fi
for t in $SUITES; do
	if "$BIN/$t" >"$WORK/$t.log" 2>&1; then
		echo "ok: $t"
	else
		echo "FAIL: $t with CUDA hidden:"; tail -n 20 "$WORK/$t.log"; fail=1
	fi
done
exit $fail
INSIDE
	if LIBS="$libs" BIN="$bin" WORK="$work" SUITES="$*" \
		unshare -m --propagation private sh "$work/inside.sh"; then :; else
		rc=$?
		[ "$rc" = 90 ] && echo "FAIL: could not hide the CUDA libraries"
		fail=1
	fi
else
	# 3. no mount namespace here: the loader without its cache
	loader=$(readelf -l "$bin/taco-train" | sed -n 's/.*interpreter: \(.*\)]/\1/p')
	if OMP_WAIT_POLICY=passive "$loader" --inhibit-cache "$bin/taco-train" \
		--no-progress "$work/job.json" >"$work/log" 2>&1; then
		echo "ok: a CPU job without the loader cache (no mount namespace here)"
	else
		echo "FAIL: a CPU job without the loader cache:"; tail -n 5 "$work/log"
		fail=1
	fi
fi
exit $fail
