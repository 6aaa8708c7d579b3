#!/usr/bin/env bash
# tests/gpu/run.sh: every GPU check of tacod in one call, for a machine with
# one NVIDIA GPU (made for an H200 with 16 cores, under 8 minutes):
#
#   1. nvidia-smi, and a preflight of the build's tools and libraries
#   2. configure build-gpu (CUDA on, sm_90, Release) and build the targets
#      the checks need with -j16
#   3. ctest -R '^test_cuda_': the CUDA backend's tests, with their output;
#      taco-train --list-devices (tacod's "devices": "auto") lists the GPU;
#      3c: data parallel over NCCL (tests/gpu/nccl_check.sh: one rank
#      through NCCL gives the plain run's bytes; two GPUs: a 2-rank job)
#   4. bitsandbytes for the PyTorch baseline, installed from the wheel in
#      .gpu-deps/ (the GPU machine has no network) into /tmp/taco-bnb,
#      which only the PyTorch runs get on PYTHONPATH
#   5. the comparisons first: bench_model_step (ours, bf16) with --profile
#      (ms per step by phase from CUDA events around every op) and
#      bench/step_gpu_torch.py (PyTorch + transformers, SDPA, gradient
#      checkpointing, bf16, bitsandbytes 8-bit AdamW; fused torch AdamW,
#      labelled so, when bitsandbytes is not there) on qwen3-8b, then on
#      qwen3-1.7b, at 4 x 1024
#   6. bench_taco_bw: the bandwidth of the TACO update of one 8192 x 8192
#      bf16 weight against a device-to-device copy of as many bytes, whole
#      (taco_update) and fed in row blocks
#   7. the memory runs, ours alone: qwen3-32b at 4 x 1024, with offload at
#      4 x 1024 and 8 x 2048, and llama-3.3-70b with offload at 4 x 1024
#      (peak memory against the plan; PyTorch with AdamW would not fit 32B),
#      and the mixture of experts qwen3-30b-a3b at 4 x 1024 (random weights
#      of the real shape; its experts' buffers sized by the routed slots)
#   7b. streamed weights (weights in host memory, layer by layer through
#      the device): qwen3-8b with every layer streamed (against its
#      device step: at most 1.5x), the 32B shape in a 22 GB device budget
#      (a 24 GB card) and the 70B shape in 75 GB (an 80 GB card), at
#      4 x 1024 with offload, profiled: device and host peak, step time,
#      the copy stream's achieved bandwidth, the fraction of it hidden
#      behind compute, the step against the larger of compute and copy
#   8. the tables: every run; ours against PyTorch per model (tokens/s,
#      their ratio, MFU, peak GB); ours' profile; the TACO bandwidth; all
#      of it also written as JSON to bench/results/gpu-DATE.json and to
#      $OUT/ when OUT is set
#
# MFU, both sides: 6 * params * B * T / step_s / (989e12, dense bf16 of an
# H100/H200), the backward's recomputation not counted. The profiled steps
# of ours pay two event records per op (bench_model_step --help).
#
# Every part runs under `timeout`, inside an overall budget
# (TACO_GPU_BUDGET_S, default 540 s; 1800 s for the smoke run, whose
# nvcc build on 2 cores takes minutes), so one slow part cannot eat the rest; a
# failed part is reported in the table and the script goes on. Exit status:
# 0 when every part passed, 1 otherwise, 2 on bad usage.
#
#   tests/gpu/run.sh                 on the GPU machine
#   tests/gpu/run.sh --cpu-smoke     here, without a GPU (or TACO_GPU_SMOKE=1):
#                                    the same pipeline on the CPU backend with
#                                    tiny fixture models, 2 steps, no PyTorch
#                                    (profile null, bandwidth by wall clock),
#                                    results to bench/results/tmp/
#   tests/gpu/run.sh --fetch-deps    here, on Debian 12 with PyPI reachable:
#                                    download the .deb files of the build's
#                                    libraries and the bitsandbytes wheel into
#                                    .gpu-deps/ (see "Build dependencies")
#
# Options: --build-dir DIR (default build-gpu; with --cpu-smoke build, the
# README's build), --jobs N (default 16, 2 with --cpu-smoke), --no-build (use
# DIR as it is), --stream-only (of 5.-7b. only the qwen3-8b device run and
# the streamed runs: what fits a short device session).
#
# Build dependencies. CMake needs pkg-config and jansson, libpcre2-8,
# sqlite3, libuv, libmicrohttpd, check, libcurl and OpenBLAS (OpenMP build).
# The checks build only taco-train, bench_model_step and the test_cuda_*
# suites, which link jansson, pcre2, check and OpenBLAS. Missing ones are
# taken from .gpu-deps/*.deb (--fetch-deps makes it; carry it to the GPU
# machine), unpacked under /tmp/taco-deps, never over /; the four libraries
# only tacod and its tests link get a stub .pc file so that CMake configures.
#
# bitsandbytes (BNB_VERSION below) is not on the GPU machine's image: the
# py3-none-manylinux wheel --fetch-deps downloads fits any Python 3 there
# (3.12, with torch 2.11+cu130 in the past results). It is slimmed to the
# libraries a CUDA 13 torch loads (cpu, cuda130, cuda132) because the
# whole one (41 MiB) and the .debs would not fit the 64 MiB a device call
# carries with the tree; TACO_GPU_BNB_FULL=1 keeps it as downloaded.
# .gpu-deps/ is ignored by .gitignore: name it in carry.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

SMOKE=${TACO_GPU_SMOKE:-0}
BUILD=""
JOBS=""
NO_BUILD=0
FETCH=0
BUDGET=${TACO_GPU_BUDGET_S:-}
DEPS_DIR=${TACO_GPU_DEPS:-$ROOT/.gpu-deps}
SYSROOT=/tmp/taco-deps
MULTIARCH=x86_64-linux-gnu
BNB_VERSION=0.50.2
BNB_DIR=/tmp/taco-bnb
DEPS_DEBS="libjansson-dev libjansson4 libpcre2-dev libpcre2-8-0 check
libsubunit-dev libsubunit0 libopenblas-openmp-dev libopenblas0-openmp
libgfortran5 pkgconf pkgconf-bin libpkgconf3"

usage() {
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
}

while [ $# -gt 0 ]; do
	case $1 in
	--cpu-smoke) SMOKE=1 ;;
	--fetch-deps) FETCH=1 ;;
	--no-build) NO_BUILD=1 ;;
	--stream-only) STREAM_ONLY=1 ;;
	--build-dir)
		[ $# -ge 2 ] || { usage >&2; exit 2; }
		BUILD=$2
		shift
		;;
	--jobs)
		[ $# -ge 2 ] || { usage >&2; exit 2; }
		JOBS=$2
		shift
		;;
	-h | --help)
		usage
		exit 0
		;;
	*)
		echo "run.sh: unknown argument '$1'" >&2
		usage >&2
		exit 2
		;;
	esac
	shift
done

# The bitsandbytes wheel into $DEPS_DIR, slimmed (see above) unless
# TACO_GPU_BNB_FULL=1.
fetch_bnb() {
	local tmp whl
	tmp=$(mktemp -d /tmp/taco-bnb-fetch.XXXXXX)
	# py3-none-manylinux_2_24: the Python and platform are named so that
	# pip picks that wheel whatever this machine is
	python3 -m pip download "bitsandbytes==$BNB_VERSION" --no-deps \
		--only-binary=:all: --python-version 3.12 \
		--platform manylinux_2_24_x86_64 -d "$tmp"
	whl=$(find "$tmp" -name "bitsandbytes-$BNB_VERSION-*.whl" | head -n 1)
	[ -n "$whl" ] || { echo "no bitsandbytes wheel downloaded" >&2; return 1; }
	rm -f "$DEPS_DIR"/bitsandbytes-*.whl
	if [ -n "${TACO_GPU_BNB_FULL:-}" ]; then
		cp "$whl" "$DEPS_DIR/"
	else
		python3 - "$whl" "$DEPS_DIR" <<'EOF_SLIM'
import os, re, sys, zipfile
src, out = sys.argv[1], sys.argv[2]
# the libraries of CUDA 11/12, ROCm and XPU, which a CUDA 13 torch never
# loads; RECORD loses their lines, every other file is kept as it is
drop = re.compile(r"libbitsandbytes_(cuda1[0-2][0-9]|rocm[0-9]+|xpu[0-9]+)\.")
dst = os.path.join(out, os.path.basename(src))
with zipfile.ZipFile(src) as zi, zipfile.ZipFile(dst, "w") as zo:
    for i in zi.infolist():
        if drop.search(i.filename):
            continue
        data = zi.read(i)
        if i.filename.endswith(".dist-info/RECORD"):
            data = "".join(l for l in data.decode().splitlines(True)
                           if not drop.search(l.split(",")[0])).encode()
        zo.writestr(i, data)
print("slimmed %s: %d -> %d bytes" % (os.path.basename(src),
      os.path.getsize(src), os.path.getsize(dst)))
EOF_SLIM
	fi
	rm -rf "$tmp"
}

if [ "$FETCH" = 1 ]; then
	mkdir -p "$DEPS_DIR"
	# shellcheck disable=SC2086
	(cd "$DEPS_DIR" && apt-get download $DEPS_DEBS)
	fetch_bnb
	# nccl.h (25 KB), for a toolkit there without it: the module needs
	# only the header at build time (kernels/CMakeLists.txt)
	if [ -e /usr/local/cuda/include/nccl.h ]; then
		mkdir -p "$DEPS_DIR/include"
		cp /usr/local/cuda/include/nccl.h "$DEPS_DIR/include/"
	fi
	ls -l "$DEPS_DIR"
	du -sh "$DEPS_DIR"
	echo "Carry it to the GPU machine: run with carry [\".gpu-deps\"]" \
		"(.gitignore keeps it out of git)."
	exit 0
fi

if [ "$SMOKE" = 1 ]; then
	# the README's build (scripts/build.sh: Release, CUDA when nvcc is
	# found), brought up to date: the smoke run shares it
	BUILD=${BUILD:-build}
	JOBS=${JOBS:-2}
	BACKEND=cpu
	MODE=cpu-smoke
	# CUDA is built when nvcc is there (AUTO), as on the GPU machine.
	CMAKE_ARGS=(-DCMAKE_BUILD_TYPE=Release)
	# tiny fixture models stand in for 1.7B, 8B and 32B
	CFG_SMALL=tests/fixtures/models/llama_gqa/config.json
	CFG_MID=tests/fixtures/models/qwen3_tied/config.json
	CFG_BIG=tests/fixtures/models/mistral_sw/config.json
	SHAPE=(--batch 2 --seq 16)
	STEPS_SMALL=2 STEPS_MID=2 STEPS_BIG=2
	RESULTS_DIR=bench/results/tmp
	# nvcc on a shared 2-core machine: minutes
	BUDGET=${BUDGET:-1800}
	BUILD_CAP=1500
	# test_cuda_train compares the CPU with itself when there is no GPU
	export TACO_CUDA_TRAIN_SELFTEST=1
else
	BUILD=${BUILD:-build-gpu}
	JOBS=${JOBS:-16}
	BACKEND=cuda
	MODE=gpu
	CMAKE_ARGS=(-DCMAKE_BUILD_TYPE=Release -DTACO_CUDA=ON
		-DCMAKE_CUDA_ARCHITECTURES=90)
	# the carried nccl.h where the toolkit has none (--fetch-deps)
	if [ ! -e /usr/local/cuda/include/nccl.h ] && [ -e "$DEPS_DIR/include/nccl.h" ]; then
		CMAKE_ARGS+=("-DTK_NCCL_INCLUDE=$DEPS_DIR/include")
	fi
	CFG_SMALL=tests/fixtures/configs/qwen3-1.7b.json
	CFG_MID=tests/fixtures/configs/qwen3-8b.json
	CFG_BIG=tests/fixtures/configs/qwen3-32b.json
	SHAPE=(--batch 4 --seq 1024)
	STEPS_SMALL=3 STEPS_MID=2 STEPS_BIG=2
	RESULTS_DIR=bench/results
	BUDGET=${BUDGET:-540}
	BUILD_CAP=240
fi

T0=$(date +%s)
WORK=$(mktemp -d /tmp/taco-gpu-run.XXXXXX)
PARTS=$WORK/parts.tsv # name, status, exit code, seconds, note
: >"$PARTS"
FAILED=0

elapsed() { echo $(($(date +%s) - T0)); }

# Seconds a part may take: its cap, or what the budget has left.
allowance() {
	local cap=$1 left=$((BUDGET - $(elapsed) - 10))
	[ "$left" -lt "$cap" ] && cap=$left
	echo "$cap"
}

record() { # name status rc seconds note
	printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" >>"$PARTS"
	case $2 in ok | skipped-smoke) ;; *) FAILED=1 ;; esac
}

part_ok() { grep -q "^$1	ok	" "$PARTS"; }

banner() { printf '\n===== %s (%ss elapsed) =====\n' "$1" "$(elapsed)"; }

# run_part NAME CAP OUTFILE CMD...: stdout to OUTFILE, stderr to the terminal.
run_part() {
	local name=$1 cap=$2 out=$3 t rc start
	shift 3
	t=$(allowance "$cap")
	banner "$name (limit ${t}s)"
	if [ "$t" -lt 15 ]; then
		echo "skipped: the ${BUDGET}s budget is spent"
		record "$name" skipped-time - 0 "budget spent"
		return 0
	fi
	start=$(date +%s)
	if timeout --kill-after=10 "$t" "$@" >"$out"; then rc=0; else rc=$?; fi
	cat "$out"
	if [ "$rc" = 0 ]; then
		record "$name" ok 0 $(($(date +%s) - start)) ""
	elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
		record "$name" timeout "$rc" $(($(date +%s) - start)) "over ${t}s"
	else
		record "$name" failed "$rc" $(($(date +%s) - start)) ""
	fi
}

# ---- 1. the machine and the build's prerequisites ----

banner "machine ($MODE)"
echo "repo $ROOT, build dir $BUILD, -j$JOBS, budget ${BUDGET}s"
if command -v nvidia-smi >/dev/null; then
	nvidia-smi || echo "nvidia-smi failed"
else
	echo "nvidia-smi: not installed"
fi
nproc
command -v nvcc >/dev/null && nvcc --version | tail -1 || echo "nvcc: not found"
PY=$(command -v python3 || true)

# The module names CMake asks pkg-config for.
REAL_PCS="jansson libpcre2-8 check"
STUB_PCS="sqlite3 libuv libmicrohttpd libcurl"
OPENBLAS_DIR=/usr/lib/$MULTIARCH/openblas-openmp

deps_setup() {
	local missing="" stub="" m have_pc=1 debs
	command -v pkg-config >/dev/null || have_pc=0
	for m in $REAL_PCS; do
		if [ "$have_pc" = 0 ] || ! pkg-config --exists "$m"; then
			missing="$missing $m"
		fi
	done
	for m in $STUB_PCS; do
		if [ "$have_pc" = 0 ] || ! pkg-config --exists "$m"; then
			stub="$stub $m"
		fi
	done
	[ -e "$OPENBLAS_DIR/libopenblas.so" ] || missing="$missing openblas-openmp"
	[ "$have_pc" = 1 ] || missing="$missing pkg-config"
	if [ -n "${TACO_GPU_DEPS_FORCE:-}" ]; then # testing this path
		missing=" jansson libpcre2-8 check openblas-openmp pkg-config"
		stub=" $STUB_PCS"
	fi
	if [ -z "$missing$stub" ]; then
		echo "build libraries: all found"
		return 0
	fi
	echo "build libraries missing:${missing:- none}; for tacod only:${stub:- none}"
	debs=$(ls "$DEPS_DIR"/*.deb 2>/dev/null || true)
	if [ -n "$missing" ] && [ -z "$debs" ]; then
		echo "no $DEPS_DIR/*.deb to take them from (run.sh --fetch-deps here, then carry .gpu-deps)"
		return 1
	fi
	rm -rf "$SYSROOT"
	mkdir -p "$SYSROOT/pc"
	for f in $debs; do
		if command -v dpkg-deb >/dev/null; then
			dpkg-deb -x "$f" "$SYSROOT"
		else # a .deb is an ar archive holding data.tar.*
			(cd "$WORK" && ar x "$f" && tar -xf data.tar.* -C "$SYSROOT" &&
				rm -f data.tar.* control.tar.* debian-binary)
		fi
	done
	# Only the missing modules' .pc files are put on the path (present ones
	# stay the system's), pointed into the private root.
	for m in $missing; do
		for f in "$SYSROOT/usr/lib/$MULTIARCH/pkgconfig/$m.pc" \
			"$SYSROOT/usr/share/pkgconfig/$m.pc"; do
			[ -e "$f" ] && sed "s#=/usr#=$SYSROOT/usr#g" "$f" >"$SYSROOT/pc/$m.pc"
		done
	done
	# ... and the modules those require (check needs libsubunit) when the
	# system lacks them too.
	for f in "$SYSROOT/usr/lib/$MULTIARCH/pkgconfig/"*.pc \
		"$SYSROOT/usr/share/pkgconfig/"*.pc; do
		[ -e "$f" ] || continue
		m=$(basename "$f" .pc)
		[ -e "$SYSROOT/pc/$m.pc" ] && continue
		if [ "$have_pc" = 0 ] || ! pkg-config --exists "$m"; then
			sed "s#=/usr#=$SYSROOT/usr#g" "$f" >"$SYSROOT/pc/$m.pc"
		fi
	done
	for m in $stub; do
		printf 'Name: %s\nDescription: stub: only tacod links it, not built here\nVersion: 0\nLibs:\nCflags:\n' \
			"$m" >"$SYSROOT/pc/$m.pc"
	done
	export PKG_CONFIG_PATH="$SYSROOT/pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
	export LD_LIBRARY_PATH="$SYSROOT/usr/lib/$MULTIARCH:$SYSROOT/usr/lib/$MULTIARCH/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	case $missing in *pkg-config*) export PATH="$SYSROOT/usr/bin:$PATH" ;; esac
	case $missing in *openblas*)
		CMAKE_ARGS+=("-DOPENBLAS_LIB=$SYSROOT/usr/lib/$MULTIARCH/openblas-openmp/libopenblas.so"
			"-DOPENBLAS_INCLUDE=$SYSROOT/usr/include/$MULTIARCH/openblas-openmp")
		;;
	esac
	echo "using $SYSROOT for:$missing$stub"
}

# PyTorch runs with the environment it came with.
PY_ENV=(env "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}")
if [ "$NO_BUILD" = 0 ] && ! deps_setup; then
	record preflight failed 1 0 "build libraries missing"
fi

# ---- 2. build ----

if [ "$NO_BUILD" = 1 ]; then
	record build skipped-smoke - 0 "--no-build: $BUILD as it is"
else
	GEN=()
	if [ ! -f "$BUILD/CMakeCache.txt" ] && command -v ninja >/dev/null; then
		GEN=(-G Ninja)
	fi
	# The programs first, so that a test that does not build leaves the
	# benchmarks their run.
	# shellcheck disable=SC2016
	run_part build "$BUILD_CAP" "$WORK/build.log" bash -c '
		set -eo pipefail
		cmake -S . -B "$1" "${@:3}" >&2
		cmake --build "$1" -j"$2" --target taco-train bench_model_step bench_taco_bw >&2
		echo built' \
		_ "$BUILD" "$JOBS" "${GEN[@]}" "${CMAKE_ARGS[@]}"
	# The CUDA tests are targets named as their tests (tests/CMakeLists.txt):
	# ctest -N lists those this configuration has.
	# shellcheck disable=SC2016
	part_ok build && run_part "build tests" "$BUILD_CAP" "$WORK/build-tests.log" bash -c '
		set -eo pipefail
		targets=$(ctest --test-dir "$1" -N -R "^test_cuda_" | sed -n "s/^ *Test *#[0-9]*: *//p" | tr "\n" " ")
		echo "building: $targets" >&2
		[ -z "$targets" ] || cmake --build "$1" -j"$2" --target $targets >&2
		echo built' \
		_ "$BUILD" "$JOBS"
fi
BUILT=0
if { [ "$NO_BUILD" = 1 ] || part_ok build; } &&
	[ -x "$BUILD/bench_model_step" ] && [ -x "$BUILD/taco-train" ]; then
	BUILT=1
fi

# ---- 3. the CUDA tests ----

if [ "$BUILT" = 1 ]; then
	# ^test_cuda_: the suites built above; cpu_without_cuda, which -R cuda
	# would match too, is a CPU check of every suite (scripts/test.sh)
	run_part "ctest -R cuda" 200 "$WORK/ctest.log" \
		ctest --test-dir "$BUILD" -R '^test_cuda_' --no-tests=error -V --timeout 180
	# a skipped test (exit 77: no usable GPU) is a failure on the GPU
	# machine, expected in the smoke run
	SKIPS=$(grep -c '\*\*\*Skipped' "$WORK/ctest.log" || true)
	if [ "${SKIPS:-0}" != 0 ]; then
		if [ "$MODE" = gpu ]; then
			record "ctest skips" failed 77 0 "$SKIPS test(s) skipped: no usable GPU"
		else
			record "ctest skips" skipped-smoke 77 0 "$SKIPS test(s) skipped (no GPU here)"
		fi
	fi
else
	record "ctest -R cuda" skipped-nobuild - 0 "no build"
fi

# ---- 3b. taco-train --list-devices: what tacod's "devices": "auto" reads ----

if [ "$BUILT" = 1 ] && [ "$MODE" = gpu ]; then
	run_part "list devices" 60 "$WORK/devices.json" "$BUILD/taco-train" --list-devices
	if part_ok "list devices" && ! grep -q '"usable": true' "$WORK/devices.json"; then
		record "list devices usable" failed 1 0 "no GPU listed as usable"
	fi
elif [ "$BUILT" = 1 ]; then
	# no GPU here: it must fail, saying why, as tacod reports it
	if "$BUILD/taco-train" --list-devices >"$WORK/devices.json" 2>"$WORK/devices.err"; then
		record "list devices" failed 0 0 "listed a GPU in the smoke run"
	elif grep -q -- '--list-devices: ' "$WORK/devices.err"; then
		record "list devices" skipped-smoke 1 0 "$(head -c 120 "$WORK/devices.err" | tr "\n\t" "  ")"
	else
		record "list devices" failed 1 0 "no reason on stderr"
	fi
fi

# ---- 3c. several GPUs over NCCL (docs/multi-gpu.md) ----

if [ "$BUILT" = 1 ] && [ "$MODE" = gpu ]; then
	# one GPU: one rank through NCCL gives the plain run's bytes; two or
	# more: a job of 2 ranks (tests/gpu/nccl_check.sh)
	run_part "nccl" 120 "$WORK/nccl.log" bash tests/gpu/nccl_check.sh "$BUILD"
fi

# ---- 4. bitsandbytes for the PyTorch baseline ----

# The wheel --fetch-deps put in $DEPS_DIR, into $BNB_DIR with pip (no
# index: there is no network), or unpacked (a wheel is a zip of what pip
# would install) where pip is missing. Only the PyTorch runs get it on
# their PYTHONPATH (BNB_PATH). Without it they use fused AdamW, which the
# tables show; on the GPU machine that is a failed part.
BNB_PATH=""
bnb_install() {
	local whl="" f
	for f in "$DEPS_DIR"/bitsandbytes-"$BNB_VERSION"-*.whl; do
		[ -e "$f" ] && whl=$f
	done
	if [ -z "$whl" ]; then
		if [ "$MODE" = gpu ]; then
			record "bnb install" failed - 0 "no $DEPS_DIR/bitsandbytes-$BNB_VERSION-*.whl: PyTorch with fused AdamW"
		else
			record "bnb install" skipped-smoke - 0 "no wheel in $DEPS_DIR"
		fi
		return 0
	fi
	if [ -z "$PY" ]; then
		record "bnb install" failed - 0 "no python3"
		return 0
	fi
	# shellcheck disable=SC2016
	run_part "bnb install" 60 "$WORK/bnb.log" "${PY_ENV[@]}" bash -c '
		set -eo pipefail
		rm -rf "$3"
		if ! PIP_ROOT_USER_ACTION=ignore "$1" -m pip install -q --no-deps --no-index --no-compile \
			--no-cache-dir --target "$3" "$2" >&2; then
			echo "pip install failed: unpacking the wheel instead" >&2
			rm -rf "$3"
			"$1" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$2" "$3"
		fi
		test -f "$3/bitsandbytes/__init__.py"
		echo "$(basename "$2") in $3"' \
		_ "$PY" "$whl" "$BNB_DIR"
	if part_ok "bnb install"; then BNB_PATH=$BNB_DIR; fi
	return 0
}
bnb_install

# ---- 5.-7. benchmarks ----

# ours NAME CONFIG STEPS CAP [ARGS...]: ARGS after the shape (a later
# --batch or --seq wins)
ours() {
	if [ "$BUILT" = 0 ]; then
		record "ours $1" skipped-nobuild - 0 "no build"
		return 0
	fi
	run_part "ours $1" "$4" "$WORK/ours-$1.json" "$BUILD/bench_model_step" \
		--config "$2" --backend "$BACKEND" "${SHAPE[@]}" --steps "$3" \
		--name "$1" "${@:5}"
}

# torch NAME CONFIG STEPS CAP
torch() {
	if [ "$MODE" != gpu ]; then
		record "torch $1" skipped-smoke - 0 "no PyTorch in the smoke run"
		return 0
	fi
	if [ -z "$PY" ]; then
		record "torch $1" failed - 0 "no python3"
		return 0
	fi
	local envs=("${PY_ENV[@]}")
	[ -z "$BNB_PATH" ] || envs+=("PYTHONPATH=$BNB_PATH${PYTHONPATH:+:$PYTHONPATH}")
	run_part "torch $1" "$4" "$WORK/torch-$1.json" "${envs[@]}" "$PY" \
		bench/step_gpu_torch.py --config "$2" "${SHAPE[@]}" --steps "$3" --name "$1"
}

# taco_bw NAME CAP [ARGS...]: bench_taco_bw on the backend, to NAME.json
taco_bw() {
	if [ "$BUILT" = 0 ] || [ ! -x "$BUILD/bench_taco_bw" ]; then
		record "$1" skipped-nobuild - 0 "no build"
		return 0
	fi
	run_part "$1" "$2" "$WORK/$1.json" "$BUILD/bench_taco_bw" \
		--backend "$BACKEND" "${@:3}"
}

if [ "$MODE" = gpu ]; then
	N_SMALL=qwen3-1.7b N_MID=qwen3-8b N_BIG=qwen3-32b
	CFG_HUGE=tests/fixtures/configs/llama-3.3-70b.json N_HUGE=llama-3.3-70b
	CFG_MOE=tests/fixtures/configs/qwen3-30b-a3b.json N_MOE=qwen3-30b-a3b
	CFG_OSS=tests/fixtures/configs/gpt-oss-20b.json N_OSS=gpt-oss-20b
	BIG_SHAPE=(--batch 8 --seq 2048)
	# the default 8192 x 8192 weight; feed: blocks of 64 MiB of fp32
	# gradient, as the engine's
	BW_ARGS=(--iters 20)
	BW_FEED=2048
	BUDGET_BIG=22GB BUDGET_HUGE=75GB
else
	N_SMALL=llama_gqa N_MID=qwen3_tied N_BIG=mistral_sw
	CFG_HUGE=tests/fixtures/models/qwen2_bias/config.json N_HUGE=qwen2_bias
	CFG_MOE=tests/fixtures/models/qwen3_moe/config.json N_MOE=qwen3_moe
	CFG_OSS=tests/fixtures/models/gpt_oss/config.json N_OSS=gpt_oss
	BIG_SHAPE=(--batch 4 --seq 32)
	BW_ARGS=(--rows 512 --cols 384 --iters 3)
	BW_FEED=100
	# budgets under the tiny models' device plans: some layers stream
	BUDGET_BIG=600KB BUDGET_HUGE=600KB
fi
# bf16 precision on CUDA (the backend's default); peak against plan in
# every run. The comparisons first (8B, then 1.7B), ours profiled; then
# the bandwidth check; then the memory runs: the 32B shape, also at
# 8 x 2048 with the layer inputs offloaded, and the 70B shape offloaded (it
# fits an H200 only so). The caps are each part's most; what is left of
# the budget bounds them too (allowance).
ours "$N_MID" "$CFG_MID" "$STEPS_MID" 90 --profile
if [ "${STREAM_ONLY:-0}" != 1 ]; then
	torch "$N_MID" "$CFG_MID" "$STEPS_MID" 150
	ours "$N_SMALL" "$CFG_SMALL" "$STEPS_SMALL" 60 --profile
	torch "$N_SMALL" "$CFG_SMALL" "$STEPS_SMALL" 100
	taco_bw taco-bw 45 "${BW_ARGS[@]}"
	taco_bw taco-bw-feed 45 "${BW_ARGS[@]}" --feed-rows "$BW_FEED"
	ours "$N_BIG" "$CFG_BIG" "$STEPS_BIG" 150
	ours "$N_BIG-offload" "$CFG_BIG" "$STEPS_BIG" 120 --offload
	ours "$N_BIG-8x2048-offload" "$CFG_BIG" 1 150 "${BIG_SHAPE[@]}" --offload
	ours "$N_HUGE-offload" "$CFG_HUGE" 1 200 --offload
	ours "$N_MOE" "$CFG_MOE" "$STEPS_BIG" 150
	ours "$N_OSS" "$CFG_OSS" "$STEPS_BIG" 120
fi
# 7b. streamed weights: every layer of the 8B from host memory, then the
# 32B and 70B shapes in the budgets of a 24 GB and an 80 GB card (the
# fewest streamed layers that fit, as admission's weights auto)
ours "$N_MID-host" "$CFG_MID" "$STEPS_MID" 90 --profile --stream-layers all
ours "$N_BIG-$BUDGET_BIG" "$CFG_BIG" "$STEPS_BIG" 180 --profile --offload \
	--device-budget "$BUDGET_BIG"
ours "$N_HUGE-$BUDGET_HUGE" "$CFG_HUGE" 1 240 --profile --offload \
	--device-budget "$BUDGET_HUGE"

# ---- 8. the tables ----

banner "results"
mkdir -p "$RESULTS_DIR"
RESULT="$RESULTS_DIR/gpu-$(date +%F).json"
[ "$MODE" = gpu ] || RESULT="$RESULTS_DIR/gpu-smoke-$(date +%F).json"
if [ -z "$PY" ]; then
	echo "no python3: raw results"
	cat "$PARTS" "$WORK"/*-*.json 2>/dev/null || true
	FAILED=1
elif ! "${PY_ENV[@]}" "$PY" - "$WORK" "$RESULT" "$MODE" "$(elapsed)" \
	"$N_MID" "$N_SMALL" "$N_BIG" "$N_BIG-offload" "$N_BIG-8x2048-offload" \
	"$N_HUGE-offload" "$N_MOE" "$N_OSS" "$N_MID-host" "$N_BIG-$BUDGET_BIG" \
	"$N_HUGE-$BUDGET_HUGE" <<'EOF'; then
import json, os, sys

work, result, mode, elapsed = sys.argv[1:5]
names = sys.argv[5:]  # the models, the comparisons first
streamed = names[-3:]  # the streamed runs: 8B all, 32B and 70B in budgets
parts = []
with open(os.path.join(work, "parts.tsv")) as f:
    for line in f:
        name, status, rc, secs, note = line.rstrip("\n").split("\t")
        parts.append({"part": name, "status": status, "rc": rc,
                      "seconds": int(secs), "note": note})


def load(path):
    try:
        with open(path) as f:
            lines = [l for l in f if l.startswith("{")]
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


def status(part):
    for p in parts:
        if p["part"] == part:
            return p["status"] + ("" if p["rc"] in ("0", "-") else
                                  " (%s)" % p["rc"])
    return "-"


def isnum(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def gb(x):
    if not isnum(x) or not x:
        return "-"
    return "%.2f" % (x / 1e9) if x >= 1e9 else "%.4f" % (x / 1e9)


def num(x, fmt):
    return fmt % x if isnum(x) else "-"


def ratio(a, b, fmt="%.2fx"):
    return fmt % (a / b) if isnum(a) and isnum(b) and b else "-"


def show(title, head, rows):
    table = [head] + rows
    w = [max(len(str(r[i])) for r in table) for i in range(len(head))]
    print(title)
    for i, r in enumerate(table):
        print("  " + "  ".join(str(c).ljust(w[j])
                               for j, c in enumerate(r)).rstrip())
        if i == 0:
            print("  " + "  ".join("-" * x for x in w))
    print()


rows, runs = [], {}
for n in names:
    for impl in ("ours", "torch"):
        r = load(os.path.join(work, "%s-%s.json" % (impl, n)))
        runs["%s %s" % (impl, n)] = r
        st = status("%s %s" % (impl, n))
        if r is None and st == "-":
            continue
        r = r or {}
        rows.append([n, impl, st if "error" not in r else
                     "failed: " + r["error"][:60],
                     r.get("optimizer", "-"),
                     num(r.get("step_s"), "%.3f"),
                     num(r.get("tokens_per_s"), "%.0f"),
                     num(r.get("mfu"), "%.3f"), gb(r.get("peak_bytes")),
                     gb(r.get("planned_bytes")),
                     gb(r.get("engine_plan_bytes")),
                     ratio(r.get("peak_bytes"), r.get("planned_bytes"),
                           "%.2f")])
show("Benchmarks (%s; plan: the backend's memory plan, engine-plan: the "
     "buffers this engine allocates):" % mode,
     ["model", "impl", "status", "optimizer", "step s", "tok/s", "MFU",
      "peak GB", "plan GB", "engine-plan GB", "peak/plan"], rows)

# Ours against PyTorch, for the models that have a PyTorch part.
comparison, rows = [], []
for n in names:
    if status("torch " + n) == "-":
        continue
    o, t = runs.get("ours " + n) or {}, runs.get("torch " + n) or {}
    c = {"model": n,
         "ours_tokens_per_s": o.get("tokens_per_s"),
         "torch_tokens_per_s": t.get("tokens_per_s"),
         "ours_over_torch": (o["tokens_per_s"] / t["tokens_per_s"]
                             if isnum(o.get("tokens_per_s")) and
                             isnum(t.get("tokens_per_s")) and
                             t["tokens_per_s"] else None),
         "ours_mfu": o.get("mfu"), "torch_mfu": t.get("mfu"),
         "ours_peak_bytes": o.get("peak_bytes"),
         "torch_peak_bytes": t.get("peak_bytes"),
         "torch_optimizer": t.get("optimizer"),
         "torch_optimizer_note": t.get("optimizer_note"),
         "ours_status": status("ours " + n),
         "torch_status": status("torch " + n)}
    comparison.append(c)
    rows.append([n, num(c["ours_tokens_per_s"], "%.0f"),
                 num(c["torch_tokens_per_s"], "%.0f"),
                 num(c["ours_over_torch"], "%.2fx"),
                 num(c["ours_mfu"], "%.3f"), num(c["torch_mfu"], "%.3f"),
                 gb(c["ours_peak_bytes"]), gb(c["torch_peak_bytes"]),
                 c["torch_optimizer"] or "-"])
if comparison:
    show("Ours against PyTorch (tok/s of a B x T step; ours/torch: the "
         "ratio of tok/s):",
         ["model", "ours tok/s", "torch tok/s", "ours/torch", "ours MFU",
          "torch MFU", "ours peak GB", "torch peak GB", "torch optimizer"],
         rows)
    for c in comparison:
        if c["torch_optimizer_note"]:
            print("  %s, PyTorch: %s" % (c["model"],
                                         c["torch_optimizer_note"]))
    print()

# Ours' profile, ms per step.
profiles, rows = {}, []
keys = ["wall_ms", "gemm_ms", "attention_ms", "elementwise_ms", "loss_ms",
        "optimizer_ms", "optimizer_side_ms", "copy_ms", "copy_stream_ms",
        "idle_ms", "ops_per_step"]
for n in names:
    r = runs.get("ours " + n)
    if not r or "profile" not in r:
        continue
    pr = r["profile"]
    profiles[n] = {"profile": pr, "note": r.get("profile_note")}
    if isinstance(pr, dict):
        rows.append([n] + [num(pr.get(k), "%.0f" if k == "ops_per_step"
                               else "%.1f") for k in keys] +
                    ["" if pr.get("complete") else "partial"])
    else:
        rows.append([n] + ["-"] * len(keys) +
                    [(r.get("profile_note") or "no profile")[:50]])
if rows:
    show("Profile of ours, ms per step (CUDA events around every op; main "
         "stream unless named; side: the optimizer's stream, overlapped; "
         "copy stream: offload, overlapped; idle: main-stream gaps):",
         ["model", "wall", "gemm", "attention", "elementwise", "loss",
          "optimizer", "optim side", "copies", "copy stream", "idle",
          "ops/step", "note"], rows)

# The TACO bandwidth check.
taco_bw, rows = {}, []
for part in ("taco-bw", "taco-bw-feed"):
    r = load(os.path.join(work, part + ".json"))
    st = status(part)
    if r is None and st == "-":
        continue
    taco_bw[part] = r
    r = r or {}
    rows.append([part, st if "error" not in r else
                 "failed: " + r["error"][:60],
                 "%sx%s" % (r["rows"], r["cols"]) if "rows" in r else "-",
                 (r.get("feed_rows") or "whole") if r else "-",
                 num(r.get("bytes") / 1e6 if isnum(r.get("bytes")) else
                     None, "%.1f"),
                 num(r.get("taco_ms"), "%.3f"), num(r.get("taco_gbps"),
                                                     "%.1f"),
                 num(r.get("copy_gbps"), "%.1f"), num(r.get("ratio"), "%.3f"),
                 r.get("taco_timer", "-")])
if rows:
    show("TACO bandwidth (one bf16 weight, k %s; MB: the least the update "
         "moves, the gradient once, the state read and written, one entry "
         "of W per column; copy: as many bytes device to device):" %
         next((r["k"] for r in taco_bw.values() if r and "k" in r), "?"),
         ["part", "status", "shape", "feed rows", "MB", "taco ms",
          "taco GB/s", "copy GB/s", "taco/copy", "timer"], rows)

# Streamed weights.
stream, rows = [], []
for n in streamed:
    r = runs.get("ours " + n)
    st = status("ours " + n)
    if r is None and st == "-":
        continue
    r = r or {}
    dev = runs.get("ours " + names[0]) or {}
    s = {"model": n, "status": st, "stream_layers": r.get("stream_layers"),
         "peak_bytes": r.get("peak_bytes"),
         "planned_bytes": r.get("planned_bytes"),
         "host_peak_bytes": r.get("host_peak_bytes"),
         "step_s": r.get("step_s"), "to_device_bytes":
         r.get("to_device_bytes"), "to_host_bytes": r.get("to_host_bytes"),
         "copy_gbps": r.get("copy_gbps"),
         "hidden_fraction": r.get("hidden_fraction"),
         "step_over_bound": r.get("step_over_bound"),
         "over_device_step": (r["step_s"] / dev["step_s"]
                              if n == streamed[0] and
                              isnum(r.get("step_s")) and
                              isnum(dev.get("step_s")) and dev["step_s"]
                              else None)}
    stream.append(s)
    rows.append([n, st if "error" not in r else
                 "failed: " + r["error"][:60],
                 num(s["stream_layers"], "%d"), gb(s["peak_bytes"]),
                 gb(s["planned_bytes"]), gb(s["host_peak_bytes"]),
                 num(s["step_s"], "%.3f"), gb(s["to_device_bytes"]),
                 gb(s["to_host_bytes"]), num(s["copy_gbps"], "%.1f"),
                 num(s["hidden_fraction"], "%.2f"),
                 num(s["step_over_bound"], "%.2f"),
                 num(s["over_device_step"], "%.2fx")])
if rows:
    show("Streamed weights (layers streamed from host memory; copy GB/s: "
         "the copy stream's bytes over its busy time, offloaded inputs "
         "included; hidden: 1 - main-stream idle / copy time; "
         "step/bound: step over the larger of compute and copy time, "
         "target <= 1.2; vs device: the 8B's step over its device step, "
         "target <= 1.5):",
         ["model", "status", "layers", "peak GB", "plan GB", "host GB",
          "step s", "to dev GB", "to host GB", "copy GB/s", "hidden",
          "step/bound", "vs device"], rows)

print("Parts:")
for p in parts:
    print("  %-22s %-16s %5ss  %s" % (p["part"], p["status"] +
          ("" if p["rc"] in ("0", "-") else " rc " + p["rc"]), p["seconds"],
          p["note"]))
failed = [p["part"] for p in parts
          if p["status"] not in ("ok", "skipped-smoke")]
doc = {"mode": mode, "elapsed_s": int(elapsed), "parts": parts,
       "runs": runs, "comparison": comparison, "profiles": profiles,
       "taco_bw": taco_bw, "streamed": stream, "failed": failed}
text = json.dumps(doc, indent=1) + "\n"
outs = [result]
if os.environ.get("OUT"):
    outs.append(os.path.join(os.environ["OUT"], os.path.basename(result)))
for path in outs:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
print("\nwritten: " + ", ".join(outs))
print("FAILED: " + ", ".join(failed) if failed else "all parts passed")
EOF
	FAILED=1
fi
if [ -n "${OUT:-}" ]; then # the logs come back too
	cp "$WORK/ctest.log" "$OUT/ctest.log" 2>/dev/null || true
	cp "$WORK/build.log" "$OUT/build.log" 2>/dev/null || true
fi
rm -rf "$WORK"
echo "total $(elapsed)s"
exit "$FAILED"
