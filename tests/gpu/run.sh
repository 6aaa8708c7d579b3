#!/usr/bin/env bash
# tests/gpu/run.sh: every GPU check of tacod in one call, for a machine with
# one NVIDIA GPU (made for an H200 with 16 cores, under 8 minutes):
#
#   1. nvidia-smi, and a preflight of the build's tools and libraries
#   2. configure build-gpu (CUDA on, sm_90, Release) and build the targets
#      the checks need with -j16
#   3. ctest -R cuda: the CUDA backend's tests, with their output
#   4. bench_model_step (ours, bf16) and bench/step_gpu_torch.py (PyTorch)
#      on qwen3-1.7b at 4 x 1024; ours alone on qwen3-8b and qwen3-32b at
#      4 x 1024, qwen3-32b with offload at 4 x 1024 and 8 x 2048, and
#      llama-3.3-70b with offload at 4 x 1024 (peak memory against the plan;
#      PyTorch with AdamW would not fit 32B)
#   5. one table, ours against PyTorch, also written as JSON to
#      bench/results/gpu-DATE.json and to $OUT/ when OUT is set
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
#                                    tiny fixture models, 2 steps, no PyTorch,
#                                    results to bench/results/tmp/
#   tests/gpu/run.sh --fetch-deps    here, on Debian 12: download the .deb
#                                    files of the build's libraries into
#                                    .gpu-deps/ (see "Build dependencies")
#
# Options: --build-dir DIR (default build-gpu, build-gpu-smoke with
# --cpu-smoke), --jobs N (default 16, 2 with --cpu-smoke), --no-build (use
# DIR as it is).
#
# Build dependencies. CMake needs pkg-config and jansson, libpcre2-8,
# sqlite3, libuv, libmicrohttpd, check, libcurl and OpenBLAS (OpenMP build).
# The checks build only taco-train, bench_model_step and the test_cuda_*
# suites, which link jansson, pcre2, check and OpenBLAS. Missing ones are
# taken from .gpu-deps/*.deb (--fetch-deps makes it; carry it to the GPU
# machine), unpacked under /tmp/taco-deps, never over /; the four libraries
# only tacod and its tests link get a stub .pc file so that CMake configures.
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

if [ "$FETCH" = 1 ]; then
	mkdir -p "$DEPS_DIR"
	# shellcheck disable=SC2086
	(cd "$DEPS_DIR" && apt-get download $DEPS_DEBS)
	du -sh "$DEPS_DIR"
	echo "Keep it out of git and carry it: echo /.gpu-deps/ >> .git/info/exclude," \
		"then run with carry [\".gpu-deps\"]."
	exit 0
fi

if [ "$SMOKE" = 1 ]; then
	BUILD=${BUILD:-build-gpu-smoke}
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
		cmake --build "$1" -j"$2" --target taco-train bench_model_step >&2
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
	run_part "ctest -R cuda" 200 "$WORK/ctest.log" \
		ctest --test-dir "$BUILD" -R cuda --no-tests=error -V --timeout 180
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

# ---- 4. benchmarks ----

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
	run_part "torch $1" "$4" "$WORK/torch-$1.json" "${PY_ENV[@]}" "$PY" \
		bench/step_gpu_torch.py --config "$2" "${SHAPE[@]}" --steps "$3" --name "$1"
}

if [ "$MODE" = gpu ]; then
	N_SMALL=qwen3-1.7b N_MID=qwen3-8b N_BIG=qwen3-32b
	CFG_HUGE=tests/fixtures/configs/llama-3.3-70b.json N_HUGE=llama-3.3-70b
	BIG_SHAPE=(--batch 8 --seq 2048)
else
	N_SMALL=llama_gqa N_MID=qwen3_tied N_BIG=mistral_sw
	CFG_HUGE=tests/fixtures/models/qwen2_bias/config.json N_HUGE=qwen2_bias
	BIG_SHAPE=(--batch 4 --seq 32)
fi
# bf16 precision on CUDA (the backend's default); peak against plan in
# every run: the headline shapes, the 32B one also at 8 x 2048 with the
# layer inputs offloaded, and the 70B shape offloaded (it fits an H200 only
# so)
ours "$N_SMALL" "$CFG_SMALL" "$STEPS_SMALL" 90
torch "$N_SMALL" "$CFG_SMALL" "$STEPS_SMALL" 120
ours "$N_MID" "$CFG_MID" "$STEPS_MID" 120
ours "$N_BIG" "$CFG_BIG" "$STEPS_BIG" 200
ours "$N_BIG-offload" "$CFG_BIG" "$STEPS_BIG" 120 --offload
ours "$N_BIG-8x2048-offload" "$CFG_BIG" 1 150 "${BIG_SHAPE[@]}" --offload
ours "$N_HUGE-offload" "$CFG_HUGE" 1 200 --offload

# ---- 5. the table ----

banner "results"
mkdir -p "$RESULTS_DIR"
RESULT="$RESULTS_DIR/gpu-$(date +%F).json"
[ "$MODE" = gpu ] || RESULT="$RESULTS_DIR/gpu-smoke-$(date +%F).json"
if [ -z "$PY" ]; then
	echo "no python3: raw results"
	cat "$PARTS" "$WORK"/*-*.json 2>/dev/null || true
	FAILED=1
elif ! "${PY_ENV[@]}" "$PY" - "$WORK" "$RESULT" "$MODE" "$(elapsed)" \
	"$N_SMALL" "$N_MID" "$N_BIG" "$N_BIG-offload" "$N_BIG-8x2048-offload" \
	"$N_HUGE-offload" <<'EOF'; then
import json, os, sys

work, result, mode, elapsed = sys.argv[1:5]
names = sys.argv[5:]
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


def gb(x):
    if not isinstance(x, (int, float)) or not x:
        return "-"
    return "%.2f" % (x / 1e9) if x >= 1e9 else "%.4f" % (x / 1e9)


def num(x, fmt):
    return fmt % x if isinstance(x, (int, float)) else "-"


rows, runs = [], {}
for n in names:
    for impl in ("ours", "torch"):
        r = load(os.path.join(work, "%s-%s.json" % (impl, n)))
        runs["%s %s" % (impl, n)] = r
        st = status("%s %s" % (impl, n))
        if r is None and st == "-":
            continue
        r = r or {}
        ratio = "-"
        if r.get("peak_bytes") and r.get("planned_bytes"):
            ratio = "%.2f" % (r["peak_bytes"] / r["planned_bytes"])
        rows.append([n, impl, st if "error" not in r else
                     "failed: " + r["error"][:60],
                     num(r.get("step_s"), "%.3f"),
                     num(r.get("tokens_per_s"), "%.0f"),
                     num(r.get("mfu"), "%.3f"), gb(r.get("peak_bytes")),
                     gb(r.get("planned_bytes")),
                     gb(r.get("engine_plan_bytes")), ratio])
    o, t = runs.get("ours " + n), runs.get("torch " + n)
    if o and t and o.get("step_s") and t.get("step_s"):
        rows.append([n, "ours/torch", "", "%.2fx" % (o["step_s"] /
                                                      t["step_s"]),
                     "%.2fx" % (o["tokens_per_s"] / t["tokens_per_s"]),
                     "", "%.2fx" % (o["peak_bytes"] / t["peak_bytes"])
                     if t.get("peak_bytes") else "-", "", "", ""])

head = ["model", "impl", "status", "step s", "tok/s", "MFU", "peak GB",
        "plan GB", "engine-plan GB", "peak/plan"]
table = [head] + rows
w = [max(len(str(r[i])) for r in table) for i in range(len(head))]
print("Benchmarks (%s; plan: the backend's memory plan, engine-plan: the "
      "buffers this engine allocates):" % mode)
for i, r in enumerate(table):
    print("  " + "  ".join(str(c).ljust(w[j]) for j, c in enumerate(r)))
    if i == 0:
        print("  " + "  ".join("-" * x for x in w))
print("\nParts:")
for p in parts:
    print("  %-22s %-16s %5ss  %s" % (p["part"], p["status"] +
          ("" if p["rc"] in ("0", "-") else " rc " + p["rc"]), p["seconds"],
          p["note"]))
failed = [p["part"] for p in parts
          if p["status"] not in ("ok", "skipped-smoke")]
doc = {"mode": mode, "elapsed_s": int(elapsed), "parts": parts,
       "runs": runs, "failed": failed}
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
