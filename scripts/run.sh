#!/usr/bin/env bash
# Sets up, builds, and runs tacod in the foreground on 127.0.0.1:8226 with
# the demo model (examples/demo) in its models directory, as "tacod-demo",
# the tool-calling example's (examples/tools) as "tacod-tools" and the tiny
# mixtures of experts of examples/moe as "tacod-demo-moe" (Qwen3-MoE) and
# "tacod-demo-gpt-oss". The
# README's tour starts from here. Ctrl-C stops tacod.
#
#   scripts/run.sh                   set up, build, serve the demo
#   scripts/run.sh --train-example   set up, build, and run taco-train on
#                                    examples/count/job.json instead
#   scripts/run.sh --no-build        serve the demo from an existing build
#
# Environment: TACOD_LISTEN (HOST:PORT, default 127.0.0.1:8226),
# TACOD_DEMO_DIR (default build/demo: models/, state/, tacod.json),
# TACO_BIN_DIR (with --no-build: where tacod and taco-train are; default
# build). tests/readme_tour.sh uses them to run the tour on a free port.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

mode=serve
build=1
case "${1:-}" in
--train-example) mode=train; shift ;;
--no-build) build=0; shift ;;
-h | --help) sed -n '2,16s/^# \{0,1\}//p' "$0"; exit 0 ;;
"") ;;
*) echo "run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
esac

bin=$root/build
if [ "$build" = 1 ]; then
	scripts/setup.sh
	scripts/build.sh build
else
	bin=$(cd "${TACO_BIN_DIR:-build}" && pwd)
fi
if [ "$mode" = train ]; then
	exec "$bin/taco-train" "$@" examples/count/job.json
fi

listen=${TACOD_LISTEN:-127.0.0.1:8226}
if curl -sf -m 2 "http://$listen/healthz" >/dev/null 2>&1; then
	echo "run.sh: something already serves http://$listen (a tacod started" \
		"before?): stop it, or set TACOD_LISTEN=HOST:PORT" >&2
	exit 1
fi
demo=${TACOD_DEMO_DIR:-$root/build/demo}
mkdir -p "$demo/models" "$demo/state"
demo=$(cd "$demo" && pwd) # tacod wants absolute directories
case $demo$bin$listen in
*[\"\\]*)
	# they are written into JSON as they are
	echo "run.sh: a path or TACOD_LISTEN holds a quote or a backslash" >&2
	exit 1
	;;
esac
# A fresh copy of the demo models on every start; any other model put in
# models/ stays.
rm -rf "$demo/models/tacod-demo" "$demo/models/tacod-tools" \
	"$demo/models/tacod-demo-moe" "$demo/models/tacod-demo-gpt-oss"
cp -R examples/demo/model "$demo/models/tacod-demo"
cp -R examples/tools/model "$demo/models/tacod-tools"
cp -R examples/moe/qwen3-moe "$demo/models/tacod-demo-moe"
cp -R examples/moe/gpt-oss "$demo/models/tacod-demo-gpt-oss"

# A one-step job of the demo on a backend: 0 when it trains. tacod runs
# every job this way, so a taco-train that cannot train here is reported
# now instead of by every job later.
probe() {
	local dir=$demo/probe-$1
	rm -rf "$dir"
	mkdir -p "$dir"
	cat >"$dir/job.json" <<-EOF
		{"model": "$root/examples/demo/model",
		 "train": "$root/examples/demo/train.jsonl",
		 "output_dir": "$dir/out", "steps": 1, "batch_size": 1,
		 "seq_len": 32}
	EOF
	if "$bin/taco-train" --backend "$1" --no-progress "$dir/job.json" \
		>"$dir/log" 2>&1; then
		rm -rf "$dir"
		return 0
	fi
	probe_log=$dir/log
	return 1
}

if ! probe cpu; then
	echo "run.sh: taco-train cannot train the demo on the CPU, so every job" \
		"of tacod would fail; not starting it. taco-train said:" >&2
	tail -n 5 "$probe_log" >&2
	exit 1
fi

# The CUDA backend when this build has it and a GPU runs a one-step job of
# the demo; the CPU otherwise. Either way tacod starts.
backend=cpu
device_memory=
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
	if probe cuda; then
		backend=cuda
		mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -n 1)
		device_memory=$((mib * 1048576))
	else
		echo "run.sh: a GPU is present but the CUDA backend is not usable here" \
			"($(tail -n 1 "$probe_log")); using the CPU" >&2
	fi
fi

{
	printf '{\n'
	printf '  "listen": "%s",\n' "$listen"
	printf '  "state_dir": "%s",\n' "$demo/state"
	printf '  "models_dir": "%s",\n' "$demo/models"
	printf '  "taco_train": "%s",\n' "$bin/taco-train"
	[ -z "$device_memory" ] || printf '  "device_memory": %s,\n' "$device_memory"
	printf '  "backend": "%s"\n' "$backend"
	printf '}\n'
} >"$demo/tacod.json"

cat <<EOF
tacod: serving http://$listen with the demo models "tacod-demo",
"tacod-tools", "tacod-demo-moe" and "tacod-demo-gpt-oss" on the $backend backend (configuration:
$demo/tacod.json). Ctrl-C stops it.

Next, in another terminal in $root, the tour of README.md:

    export TACOD_URL=http://$listen
    curl -s \$TACOD_URL/v1/models

or the dashboard in a browser: http://$listen/

EOF
exec "$bin/tacod" --config "$demo/tacod.json"
