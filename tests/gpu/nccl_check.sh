#!/usr/bin/env bash
# tests/gpu/nccl_check.sh BUILD_DIR: the CUDA backend's data parallel over
# NCCL (kernels/cuda/comm_nccl.cu, docs/multi-gpu.md), part 3c of
# tests/gpu/run.sh:
#   - one GPU: the same job twice on the CUDA backend, plainly and with
#     TACO_NCCL_ONE_RANK=1 (every gradient piece through ncclAllReduce of
#     one rank): the same weights, byte for byte, and the started event's
#     comm_device_bytes (NCCL's own device memory, against the plan's
#     512 MiB estimate);
#   - two GPUs or more: a job of gpus 2 under mpirun, whose loss follows
#     the one-GPU run's within 1e-3 (NCCL's order of additions), and whose
#     weights the ranks checked against each other at every checkpoint.
# libnccl.so.2: $TACO_NCCL_LIB, else PyPI's nvidia-nccl-cu13 (which a CUDA
# 13 PyTorch installs), else the loader's path or the toolkit's copy.
set -euo pipefail
build=${1:?usage: nccl_check.sh BUILD_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
fx=$root/tests/fixtures
work=$(mktemp -d /tmp/taco-nccl-XXXXXX)
trap 'rm -rf "$work"' EXIT

if [ -z "${TACO_NCCL_LIB:-}" ] && command -v python3 >/dev/null; then
	lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null || true)
	[ -n "$lib" ] && [ -e "$lib" ] && export TACO_NCCL_LIB=$lib
fi
echo "libnccl: ${TACO_NCCL_LIB:-the loader's path, or the toolkit's}"

job() { # NAME GPUS
	cat >"$work/$1.json" <<EOF
{"model": "$fx/models/llama_gqa", "train": "$fx/data/count_train.jsonl",
 "validation": "$fx/data/count_val.jsonl", "output_dir": "$work/$1",
 "steps": 20, "batch_size": 4, "seq_len": 32, "lr": 0.01,
 "checkpoint_every": 10, "eval_every": 10, "log_every": 5, "gpus": $2}
EOF
}
run() { # NAME [ENV...]
	local name=$1
	shift
	env "$@" "$build/taco-train" --backend cuda --no-progress \
		--events-file "$work/$name.events" "$work/$name.json" \
		2>"$work/$name.err" || {
		tail -20 "$work/$name.err" >&2
		echo "nccl_check: $name failed" >&2
		exit 1
	}
}

job plain 1
run plain
job one 1
run one TACO_NCCL_ONE_RANK=1
cmp "$work/plain/model/model.safetensors" "$work/one/model/model.safetensors" || {
	echo "nccl_check: one rank through NCCL changed the weights" >&2
	exit 1
}
python3 - "$work" <<'EOF'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1] + "/one.events")]
start = [e for e in ev if e["event"] == "started"][0]
b = start.get("comm_device_bytes")
assert b is not None, start
print(f"one rank through NCCL: the same bytes; NCCL took {b / 2**20:.1f} MiB "
      f"of device memory (the plan reserves 512 MiB)")
EOF

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [ "${gpus:-0}" -lt 2 ]; then
	echo "one GPU: the job of 2 ranks needs two (skipped)"
	exit 0
fi
job two 2
run two
python3 - "$work" <<'EOF'
import json, sys
w = sys.argv[1]
def losses(n):
    return [(e["step"], e["loss"]) for e in map(json.loads, open(f"{w}/{n}.events"))
            if e["event"] == "progress" and "loss" in e]
a, b = losses("plain"), losses("two")
assert len(a) == len(b) and a, (a, b)
for (s1, x), (s2, y) in zip(a, b):
    assert s1 == s2 and abs(x - y) <= 1e-3 * abs(x), (s1, x, y)
print(f"2 ranks over NCCL: {len(b)} losses within 1e-3 of one GPU's")
EOF
