#!/usr/bin/env bash
# Builds tacod's engine and runs the bundled example job: TACO fine-tunes a
# tiny bf16 Llama on the "count" task on the CPU, evaluates it, writes
# checkpoints and exports the model to build/demo/model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"
exec ./build/taco-train "$@" examples/count/job.json
