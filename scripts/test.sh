#!/usr/bin/env bash
# The whole test suite: installs dependencies, builds (the README's build,
# scripts/build.sh, and the other build types), runs every unit test,
# runs them again under AddressSanitizer + UndefinedBehaviorSanitizer, then
# runs each libFuzzer harness briefly on its corpus. It lists every skipped
# test with its reason and fails when one was skipped for any reason but a
# missing GPU (scripts/ctest_skips.py).
#   FUZZ_SECONDS   seconds per fuzz harness (default 30; 0 skips fuzzing)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc)
fuzz_seconds=${FUZZ_SECONDS:-30}

# The README's build (scripts/build.sh: Release in build/), the one that
# scripts/run.sh serves from: the tests below run on it, readme_tour starts
# scripts/run.sh itself on it, build included.
echo "== build (Release, scripts/build.sh: the README's build)"
scripts/build.sh build
# GCC reports different warnings at -O2 -g than at -O3, and warnings are
# errors: every build type a user may pick must compile. Debug compiles in
# the sanitizer build below.
echo "== compile (RelWithDebInfo)"
cmake -S . -B build-relwithdebinfo -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-relwithdebinfo -j "$jobs"
echo "== unit tests"
(cd build && ctest --output-on-failure -j "$jobs" --output-junit ctest.xml)
python3 scripts/ctest_skips.py build/ctest.xml

echo "== unit tests under ASan + UBSan"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DTACO_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	ctest --output-on-failure -j "$jobs" --output-junit ctest.xml)
python3 scripts/ctest_skips.py build-asan/ctest.xml

if [ "$fuzz_seconds" -gt 0 ]; then
	echo "== fuzz harnesses, ${fuzz_seconds}s each"
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
