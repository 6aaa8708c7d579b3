#!/usr/bin/env bash
# Builds tacod's engine and runs it on the bundled example: one training step
# (forward and backward) of a tiny Llama on the CPU backend.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"
example=tests/fixtures/models/llama_gqa
exec ./build/taco-train --model "$example" --batch "$example/batch.json" --steps 3 "$@"
