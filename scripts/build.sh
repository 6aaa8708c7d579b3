#!/usr/bin/env bash
# The build of the README: what scripts/run.sh serves from and what
# scripts/test.sh tests first, one configuration in one place, so that the
# first command a newcomer runs is the build CI tested.
#
#   scripts/build.sh [DIR]      Release build in DIR (default build)
#
# Release is what users run: -O3 also lets GCC see more (format
# truncation, array bounds) than -O2, and warnings are errors.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$dir" -j "$(nproc)"
