#!/usr/bin/env bash
# The whole test suite: installs dependencies, builds (the README's build,
# scripts/build.sh, and the other build types), runs every unit test,
# runs them again under AddressSanitizer + UndefinedBehaviorSanitizer, then
# runs each libFuzzer harness briefly on its corpus. It lists every skipped
# test with its reason and fails when one was skipped for any reason but a
# missing GPU (scripts/ctest_skips.py).
# It prints each phase's minutes as it ends, and the table of them at the
# end (also when a phase fails): CI's limit is 90 minutes, its goal 50.
#   FUZZ_SECONDS   seconds per fuzz harness (default 30; 0 skips fuzzing)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
fuzz_seconds=${FUZZ_SECONDS:-30}

# phase NAME: ends the running phase, printing its minutes, and starts NAME
phases=""
phase_name=""
phase_start=$SECONDS
minutes() { awk -v s="$1" 'BEGIN { printf "%5.1f", s / 60 }'; }
phase() {
	if [ -n "$phase_name" ]; then
		local m
		m=$(minutes $((SECONDS - phase_start)))
		echo "== $phase_name: done in $(echo $m) min"
		phases+="$m  $phase_name"$'\n'
	fi
	phase_name=$1
	phase_start=$SECONDS
	[ -z "$1" ] || echo "== $1"
}
report() {
	local rc=$?
	phase ""
	printf '\nminutes by phase%s:\n%s%s  total\n' \
		"$([ "$rc" = 0 ] || echo " (failed)")" "$phases" "$(minutes "$SECONDS")"
}
trap report EXIT

phase "setup (scripts/setup.sh)"
scripts/setup.sh

# The README's build (scripts/build.sh: Release in build/), the one that
# scripts/run.sh serves from: the tests below run on it, readme_tour starts
# scripts/run.sh itself on it, build included.
phase "build (Release, scripts/build.sh: the README's build)"
scripts/build.sh build
# GCC reports different warnings at -O2 -g than at -O3, and warnings are
# errors: every build type a user may pick must compile. Debug compiles in
# the sanitizer build below.
phase "compile (RelWithDebInfo)"
cmake -S . -B build-relwithdebinfo -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-relwithdebinfo -j "$jobs"
phase "unit tests"
(cd build && ctest --output-on-failure -j "$jobs" --output-junit ctest.xml)
python3 scripts/ctest_skips.py build/ctest.xml

# The tests whose numbers go through OpenBLAS's GEMM (CTest label numeric)
# once more under another kernel than this CPU's, so that a check holding
# on one kernel only fails here and not on a user's machine
# (tests/README.md). Prescott runs on any x86-64; where it is already the
# kernel, Haswell (AVX2) or else Core2 (SSSE3): both round differently from
# Prescott, and at its speed (Sandybridge's kernel also differs, but ran
# these shapes 5 times slower).
if [ "$(uname -m)" = x86_64 ]; then
	native=$({ OPENBLAS_VERBOSE=2 build/taco-train --help 2>&1 || true; } |
		awk '$1 == "Core:" && !k { k = $2 } END { print k }')
	kernel=Prescott
	if [ "$native" = Prescott ]; then
		kernel=Core2
		grep -qw avx2 /proc/cpuinfo && kernel=Haswell
	fi
	phase "numeric tests under OpenBLAS's $kernel kernel (this CPU's: ${native:-unknown})"
	(cd build && OPENBLAS_CORETYPE=$kernel ctest -L numeric --output-on-failure -j "$jobs")
fi

phase "unit tests under ASan + UBSan"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DTACO_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	ctest --output-on-failure -j "$jobs" --output-junit ctest.xml)
python3 scripts/ctest_skips.py build-asan/ctest.xml

if [ "$fuzz_seconds" -gt 0 ]; then
	phase "fuzz harnesses, ${fuzz_seconds}s each"
	CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTACO_FUZZ=ON >/dev/null
	cmake --build build-fuzz -j "$jobs" --target fuzzers
	for f in build-fuzz/fuzz_*; do
		[ -x "$f" ] || continue
		name=$(basename "$f" | sed 's/^fuzz_//')
		corpus=$(mktemp -d)
		log=$(mktemp)
		cp -r tests/fuzz/corpus/"$name"/. "$corpus"/ 2>/dev/null || true
		echo "-- $name"
		if ! "$f" -max_total_time="$fuzz_seconds" -max_len=65536 -rss_limit_mb=2048 \
			-print_final_stats=1 "$corpus" >"$log" 2>&1; then
			tail -n 60 "$log"
			echo "fuzz harness $name failed (inputs that crash it are in $PWD)" >&2
			exit 1
		fi
		grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|Done)" "$log" || true
		rm -rf "$corpus" "$log"
	done
fi
echo "== all tests passed"
