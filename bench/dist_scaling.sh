#!/usr/bin/env bash
# bench/dist_scaling.sh: data parallel on the CPU backend (docs/multi-gpu.md):
# the same job at 1, 2 and 4 ranks (job option gpus, ranks under mpirun,
# one OpenMP thread each), with tokens/s, the time rank 0 spent in the
# gradient sums against the step, and the speed-up over one rank. The
# global batch is the same at every rank count, so each rank runs 1/N of
# it. On a machine with fewer cores than ranks the ranks share cores: the
# speed-up then says nothing of a GPU server, the sums' share still does.
#   bench/dist_scaling.sh [BUILD_DIR] [MODEL_DIR] [STEPS]
# (defaults: build, tests/fixtures/models/llama_gqa, 60)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build}
model=${2:-$root/tests/fixtures/models/llama_gqa}
steps=${3:-60}
work=$(mktemp -d /tmp/taco-scaling-XXXXXX)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1

printf '%-6s %10s %10s %10s %8s %8s\n' ranks "tok/s" "step ms" "sums ms" "sums %" speedup
base=""
for n in 1 2 4; do
	cat >"$work/j$n.json" <<EOF
{"model": "$model", "train": "$root/tests/fixtures/data/count_train.jsonl",
 "output_dir": "$work/o$n", "steps": $steps, "batch_size": 8, "seq_len": 64,
 "lr": 0.001, "log_every": $steps, "gpus": $n}
EOF
	"$bin/taco-train" --no-progress --events-file "$work/e$n" "$work/j$n.json" 2>"$work/err$n" ||
		{ tail -5 "$work/err$n" >&2; exit 1; }
	read -r tps step comm < <(python3 - "$work/e$n" "$steps" <<'EOF'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
steps = int(sys.argv[2])
prog = [e for e in ev if e["event"] == "progress"][-1]
fin = [e for e in ev if e["event"] == "finished"][-1]
print(prog["tokens_per_s"], prog["elapsed_s"] / steps * 1e3,
      fin.get("comm_s", 0.0) / steps * 1e3)
EOF
)
	[ -n "$base" ] || base=$tps
	python3 -c "import sys; n,t,s,c,b=sys.argv[1:]; t,s,c,b=map(float,(t,s,c,b)); \
print(f'{n:<6} {t:10.0f} {s:10.2f} {c:10.2f} {100*c/s:7.1f}% {t/b:7.2f}x')" "$n" "$tps" "$step" "$comm" "$base"
done
