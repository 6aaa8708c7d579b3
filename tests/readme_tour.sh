#!/usr/bin/env bash
# The README's tour, run as a new user would: each ```sh block that follows
# a "<!-- tour: NAME -->" line of README.md, exactly as written, against a
# tacod that scripts/run.sh starts (on a free port, in a temporary
# directory; with its set-up and build on the README's build/, else
# --no-build). Blocks run in order, each in its own bash with -e,
# from a directory laid out like the repository root (examples/, build/
# with the binaries of TACO_BIN_DIR, build-venv/), with TACOD_URL set.
#
# Required: the blocks curl, tacoctl, sdk, dpo, tools and moe, tacoctl in
# TACO_BIN_DIR and the venv build-venv/sdk (scripts/setup.sh makes it): CI
# has both, so a missing one fails. Optional: the blocks transformers and
# tools-transformers, run when a Python with transformers and torch is found
# (python3, or /opt/tacofix), and the blocks gguf and gguf-server, run when
# the venv build-venv/gguf has llama_cpp and its server (setup.sh builds
# it, so CI runs them).
#
#   TACO_BIN_DIR=build tests/readme_tour.sh        (CTest: readme_tour)
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "${TACO_BIN_DIR:?set TACO_BIN_DIR to the build directory}" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/readme-tour.XXXXXX")
pid=

stop_tacod() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid"
		wait "$pid" 2>/dev/null || true
	fi
	pid=
}
cleanup() {
	stop_tacod
	rm -rf "$work"
}
trap cleanup EXIT

fail() {
	echo "readme_tour: FAIL: $*" >&2
	if [ -s "$work/tacod.log" ]; then
		echo "--- tacod (last 30 lines)" >&2
		tail -n 30 "$work/tacod.log" >&2
	fi
	exit 1
}

# ---- what the tour needs
for b in tacod taco-train tacoctl; do
	[ -x "$bin/$b" ] || fail "no $bin/$b: build it first (cmake --build)"
done
[ -x "$src/build-venv/sdk/bin/python" ] ||
	fail "no $src/build-venv/sdk: run scripts/setup.sh to make the SDK's venv"

# ---- the blocks, as README.md has them
sh "$src/tests/doc_blocks.sh" tour "$src/README.md" "$work/blocks" ||
	fail "README.md: a tour marker without its block"
read -r -a blocks <"$work/blocks/ORDER"
for need in curl tacoctl sdk dpo tools moe; do
	[ -s "$work/blocks/$need.sh" ] || fail "README.md has no '<!-- tour: $need -->' block"
done

# ---- the user's checkout: sources, binaries, venv
repo=$work/repo
mkdir -p "$repo/build"
ln -s "$src/examples" "$repo/examples"
ln -s "$src/build-venv" "$repo/build-venv"
for b in tacod taco-train tacoctl; do
	ln -s "$bin/$b" "$repo/build/$b"
done

# ---- tacod, as scripts/run.sh starts it; another process may take the
# port between the probe and the bind, so up to three ports. On the
# README's build (build/ of this checkout) run.sh runs as the README
# writes it, its set-up and build included (up to date: they change
# nothing); on any other build (the sanitizers') with --no-build.
run_sh=("$src/scripts/run.sh")
[ "$bin" = "$src/build" ] || run_sh+=(--no-build)
port=
for _ in 1 2 3; do
	p=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	TACOD_LISTEN=127.0.0.1:$p TACOD_DEMO_DIR=$work/demo TACO_BIN_DIR=$bin \
		"${run_sh[@]}" >"$work/tacod.log" 2>&1 &
	pid=$!
	# set-up and an up-to-date build take seconds, a GPU machine's
	# one-step CUDA probe up to 60 s: 10 minutes while run.sh lives
	for _ in $(seq 6000); do
		if curl -sf "http://127.0.0.1:$p/healthz" >/dev/null 2>&1; then
			port=$p
			break
		fi
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	[ -z "$port" ] || break
	stop_tacod
done
[ -n "$port" ] || fail "tacod did not start through scripts/run.sh"
export TACOD_URL=http://127.0.0.1:$port
grep -q "export TACOD_URL=http://127.0.0.1:$port" "$work/tacod.log" ||
	fail "scripts/run.sh did not print the tour's first command"

api() { curl -sf "$TACOD_URL$1"; }

# The newest job into job.json, and all of its events into events.sse
# (the stream of a finished job replays them).
fetch_newest_job() { # what
	api "/v1/fine_tuning/jobs?limit=1" >"$work/job.json" || fail "$1: GET jobs"
	local job
	job=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["data"][0]["id"])' "$work/job.json")
	api "/v1/fine_tuning/jobs/$job/events?stream=true" >"$work/events.sse" ||
		fail "$1: GET events of $job"
}

# The newest job, checked through the API: it succeeded, and its
# evaluations show the demo being learned.
check_newest_job() {
	fetch_newest_job "$1"
	python3 - "$work/job.json" "$work/events.sse" "$1" <<-'EOF' || fail "$1: the job"
		import json, sys
		job = json.load(open(sys.argv[1]))["data"][0]
		events = [json.loads(line[6:]) for line in open(sys.argv[2])
		          if line.startswith("data: {")]
		evals = [e["data"] for e in events if e["data"] and "val_loss" in e["data"]]
		assert job["status"] == "succeeded", job
		assert job["model"] == "tacod-demo", job["model"]
		assert len(evals) >= 2, evals
		first, last = evals[0], evals[-1]
		# untrained: loss 5.9 (ln 389), accuracy 0; measured after 500
		# steps: 0.115 and 0.988 (README.md, "The demo")
		assert last["val_loss"] < 0.5 and last["val_loss"] < first["val_loss"], evals
		assert last["val_token_accuracy"] > 0.9, evals
		print(f"readme_tour: {sys.argv[3]}: {job['id']} succeeded; val_loss "
		      f"{first['val_loss']:.3f} -> {last['val_loss']:.3f}, token accuracy "
		      f"{first['val_token_accuracy']:.1%} -> {last['val_token_accuracy']:.1%}")
	EOF
}

# The newest job is the dpo block's: DPO from a fine-tuned demo model, and
# on the held-out pairs its reward accuracy ends at 90% or more (measured on
# the development VM: 95.8% at step 50, 100% from step 100 on).
check_dpo_job() {
	fetch_newest_job dpo
	python3 - "$work/job.json" "$work/events.sse" <<-'EOF' || fail "dpo: the job"
		import json, math, sys
		job = json.load(open(sys.argv[1]))["data"][0]
		events = [json.loads(line[6:]) for line in open(sys.argv[2])
		          if line.startswith("data: {")]
		data = [e["data"] for e in events if e["data"]]
		evals = [d for d in data if "val_rewards/accuracies" in d]
		steps = [d for d in data if "rewards/accuracies" in d]
		refs = [e for e in events if e["message"].startswith("Reference log-probs")]
		assert job["status"] == "succeeded", job
		assert job["model"].startswith("ft:tacod-demo::"), job["model"]
		assert job["method"]["type"] == "dpo", job["method"]
		assert job["method"]["dpo"]["hyperparameters"]["beta"] == 0.1, job["method"]
		assert refs, "no reference events"
		assert len(evals) >= 2 and steps, evals
		# the policy starts as the reference: the loss of the first step is ln 2
		assert abs(steps[0]["train_loss"] - math.log(2)) < 0.05, steps[0]
		first, last = evals[0], evals[-1]
		assert last["val_pairs"] == 48, last
		assert last["val_rewards/accuracies"] >= 0.9, evals
		assert last["val_rewards/margins"] > first["val_rewards/margins"] > 0, evals
		assert last["val_loss"] < first["val_loss"] < math.log(2), evals
		print(f"readme_tour: dpo: {job['id']} succeeded from {job['model']}; val_loss "
		      f"{first['val_loss']:.3f} -> {last['val_loss']:.3f}, reward accuracy "
		      f"{first['val_rewards/accuracies']:.1%} -> {last['val_rewards/accuracies']:.1%}")
	EOF
}

# The newest job is the tools block's: tacod-tools fine-tuned on
# examples/tools, its held-out token accuracy 95% or more at the end
# (measured on the development VM: 91.0% at step 250, 99.8% at 1000).
check_tools_job() {
	fetch_newest_job tools
	python3 - "$work/job.json" "$work/events.sse" <<-'EOF' || fail "tools: the job"
		import json, sys
		job = json.load(open(sys.argv[1]))["data"][0]
		events = [json.loads(line[6:]) for line in open(sys.argv[2])
		          if line.startswith("data: {")]
		evals = [e["data"] for e in events if e["data"] and "val_loss" in e["data"]]
		queued = [e["data"]["validation"] for e in events
		          if e["data"] and "validation" in e["data"]]
		assert job["status"] == "succeeded", job
		assert job["model"] == "tacod-tools", job["model"]
		# the model's own template rendered every line, tools and calls
		assert queued and queued[0]["kept"] == 2000 and queued[0]["errors"] == 0, queued
		assert len(evals) >= 2, evals
		first, last = evals[0], evals[-1]
		assert last["val_token_accuracy"] >= 0.95, evals
		assert last["val_loss"] < first["val_loss"], evals
		print(f"readme_tour: tools: {job['id']} succeeded; val_loss "
		      f"{first['val_loss']:.3f} -> {last['val_loss']:.3f}, token accuracy "
		      f"{first['val_token_accuracy']:.1%} -> {last['val_token_accuracy']:.1%}")
	EOF
}

# The newest job is the moe block's second: the tiny gpt-oss fine-tuned on
# the demo's task (after the Qwen3-MoE), its held-out token accuracy 90%
# or more at the end (measured on the development VM: 92.1% at step 400,
# 95.1% at 500).
check_moe_job() {
	fetch_newest_job moe
	python3 - "$work/job.json" "$work/events.sse" <<-'EOF' || fail "moe: the job"
		import json, sys
		job = json.load(open(sys.argv[1]))["data"][0]
		events = [json.loads(line[6:]) for line in open(sys.argv[2])
		          if line.startswith("data: {")]
		evals = [e["data"] for e in events if e["data"] and "val_loss" in e["data"]]
		assert job["status"] == "succeeded", job
		assert job["model"] == "tacod-demo-gpt-oss", job["model"]
		assert len(evals) >= 2, evals
		first, last = evals[0], evals[-1]
		assert last["val_token_accuracy"] >= 0.9, evals
		assert last["val_loss"] < first["val_loss"], evals
		print(f"readme_tour: moe: {job['id']} succeeded; val_loss "
		      f"{first['val_loss']:.3f} -> {last['val_loss']:.3f}, token accuracy "
		      f"{first['val_token_accuracy']:.1%} -> {last['val_token_accuracy']:.1%}")
	EOF
}

check_model_dir() { # what: DIR
	local d=$repo/$2
	[ -d "$d" ] || fail "$1: no $2"
	for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do
		[ -s "$d/$f" ] || fail "$1: $2/$f missing or empty"
	done
}

# A Python with transformers and torch: python3 when it has them, else
# /opt/tacofix's, through pydir (put first on the PATH); 1 when none.
torch_python() {
	pydir=
	python3 -c 'import transformers, torch' 2>/dev/null && return 0
	[ -x /opt/tacofix/bin/python ] || return 1
	pydir=$work/py
	mkdir -p "$pydir"
	# a script, not a link: a venv's python finds its packages from
	# the path it was started by
	printf '#!/bin/sh\nexec /opt/tacofix/bin/python "$@"\n' >"$pydir/python3"
	chmod +x "$pydir/python3"
}

# ---- each block, and what it must have done
run_block() { # NAME [PYTHON-DIR]
	local t0=$SECONDS
	echo "readme_tour: running the '$1' block"
	if ! (cd "$repo" && PATH=${2:+$2:}$PATH bash -euo pipefail "$work/blocks/$1.sh") \
		>"$work/$1.out" 2>&1; then
		echo "--- output of the '$1' block (last 40 lines)" >&2
		tail -n 40 "$work/$1.out" >&2
		fail "the '$1' block failed"
	fi
	echo "readme_tour: '$1' block done in $((SECONDS - t0)) s"
}

for name in "${blocks[@]}"; do
	case $name in
	curl)
		run_block curl
		grep -q '"id":"tacod-demo"' "$work/curl.out" || fail "curl: /v1/models lacks tacod-demo"
		grep -q '^data: \[DONE\]' "$work/curl.out" || fail "curl: the event stream did not end with [DONE]"
		check_newest_job curl
		check_model_dir curl build/demo-ft
		;;
	tacoctl)
		run_block tacoctl
		grep -q 'fits: yes' "$work/tacoctl.out" || fail "tacoctl: the plan does not fit"
		check_newest_job tacoctl
		job=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["data"][0]["id"])' "$work/job.json")
		check_model_dir tacoctl "build/$job"
		;;
	sdk)
		run_block sdk
		grep -q ' succeeded ft:tacod-demo::' "$work/sdk.out" || fail "sdk: the job did not succeed"
		# chat completions: the fine-tune answers, the base model not
		grep -q "^ft:tacod-demo::.* -> 'Sure: 36 37 38 39'$" "$work/sdk.out" ||
			fail "sdk: the fine-tuned model does not count on from 35"
		! grep -q "^tacod-demo -> 'Sure: 36 37 38 39'$" "$work/sdk.out" ||
			fail "sdk: the base model counts already"
		# the evaluation's answers improve: none exact at the first, most
		# at the last (measured: 0% at steps 100 to 300, 75% at 400 and 500)
		python3 - "$work/sdk.out" <<-'EOF' || fail "sdk: the evaluation's answers"
			import re, sys
			exact = [int(m) for m in re.findall(r"exact answers (\d+)%", open(sys.argv[1]).read())]
			assert len(exact) == 5 and exact[-1] >= 75 and exact[-1] > exact[0], exact
			print(f"readme_tour: sdk: exact answers {exact}")
		EOF
		check_newest_job sdk
		check_model_dir sdk build/demo-ft-sdk
		;;
	dpo)
		run_block dpo
		grep -q ' succeeded ft:tacod-demo::.* -> ft:tacod-demo::' "$work/dpo.out" ||
			fail "dpo: the job did not succeed"
		check_dpo_job
		check_model_dir dpo build/demo-dpo
		;;
	transformers)
		if ! torch_python; then
			echo "readme_tour: skipping the optional 'transformers' block: no Python with transformers"
			continue
		fi
		run_block transformers "$pydir"
		grep -q 'build/demo-ft -> Sure: 28 29 30 31 32$' "$work/transformers.out" ||
			fail "transformers: the fine-tuned model does not count on from 27"
		grep -q 'build/demo-dpo -> Sure: 28 29 30 31 32$' "$work/transformers.out" ||
			fail "transformers: the DPO model does not count on from 27"
		# every held-out prompt, greedy: DPO kept the preferred answers
		# (measured: 45 of 48 before and after, the misses start from 93)
		(cd "$repo" && PATH=${pydir:+$pydir:}$PATH python3 - <<-'EOF') >"$work/greedy.out" 2>&1 ||
			import json
			from transformers import AutoModelForCausalLM, AutoTokenizer
			rows = [json.loads(l) for l in open("examples/demo/pref_val.jsonl")]
			for path in ("build/demo-ft-sdk", "build/demo-dpo"):
			    tok = AutoTokenizer.from_pretrained(path)
			    model = AutoModelForCausalLM.from_pretrained(path)
			    right = 0
			    for r in rows:
			        ids = tok.apply_chat_template(r["input"]["messages"], add_generation_prompt=True,
			                                      return_tensors="pt", return_dict=True)
			        out = model.generate(**ids)
			        text = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
			        right += text == r["preferred_output"][0]["content"]
			    print(f"readme_tour: {path}: {right} of {len(rows)} greedy answers preferred")
			    assert right >= 44, path
		EOF
			fail "transformers: greedy answers: $(tail -n 3 "$work/greedy.out")"
		grep '^readme_tour:' "$work/greedy.out"
		;;
	tools)
		run_block tools
		grep -q ' succeeded ft:tacod-tools::' "$work/tools.out" || fail "tools: the job did not succeed"
		check_tools_job
		check_model_dir tools build/tools-ft
		;;
	moe)
		run_block moe
		grep -q ' succeeded ft:tacod-demo-moe::' "$work/moe.out" || fail "moe: the Qwen3-MoE job did not succeed"
		grep -q ' succeeded ft:tacod-demo-gpt-oss::' "$work/moe.out" || fail "moe: the gpt-oss job did not succeed"
		check_moe_job
		;;
	tools-transformers)
		if ! torch_python; then
			echo "readme_tour: skipping the optional 'tools-transformers' block: no Python with transformers"
			continue
		fi
		run_block tools-transformers "$pydir"
		# a held-out question, answered with the right call
		grep -qF "ok   'Good morning, I hope you are well. Any idea what the weather is like in Madrid?' -> '<tool_call>\\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Madrid\"}}\\n</tool_call>'" \
			"$work/tools-transformers.out" || fail "tools-transformers: no call of get_weather for Madrid"
		# greedy, every held-out reply (measured: 130 of 134 right)
		python3 - "$work/tools-transformers.out" <<-'EOF' || fail "tools-transformers: $(tail -n 3 "$work/tools-transformers.out")"
			import re, sys
			m = re.search(r"^(\d+) of (\d+) held-out replies right$", open(sys.argv[1]).read(), re.M)
			right, total = int(m[1]), int(m[2])
			print(f"readme_tour: build/tools-ft: {right} of {total} held-out replies right")
			assert total == 134 and right >= 120, (right, total)
		EOF
		;;
	gguf)
		# llama.cpp from the venv scripts/setup.sh builds (CI has it)
		if ! [ -x "$src/build-venv/gguf/bin/python" ] ||
			! "$src/build-venv/gguf/bin/python" -c 'import llama_cpp' 2>/dev/null; then
			echo "readme_tour: skipping the optional 'gguf' block: no build-venv/gguf with llama_cpp"
			continue
		fi
		run_block gguf
		grep -q '^build/demo-dpo.gguf: ' "$work/gguf.out" ||
			fail "gguf: tacoctl did not download the GGUF file"
		grep -q 'build/demo-dpo.gguf -> Sure: 28 29 30 31 32$' "$work/gguf.out" ||
			fail "gguf: llama.cpp does not count on from 27: $(tail -n 3 "$work/gguf.out")"
		;;
	gguf-server)
		# llama.cpp's server from the same venv, with its [server]
		# extras (tests/gguf/requirements.txt), on a free port
		if ! "$src/build-venv/gguf/bin/python" -c 'import llama_cpp.server.app' 2>/dev/null; then
			echo "readme_tour: skipping the optional 'gguf-server' block: no build-venv/gguf with llama_cpp.server"
			continue
		fi
		PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])') \
			run_block gguf-server
		grep -q "^llama.cpp's server -> Sure: 28 29 30 31 32$" "$work/gguf-server.out" ||
			fail "gguf-server: llama.cpp's server does not count on from 27: $(tail -n 3 "$work/gguf-server.out")"
		;;
	*)
		fail "README.md: unknown tour block '$name'"
		;;
	esac
done

stop_tacod

# ---- the curl block stops when its job fails, also as a user runs it
# (bash without -e): a tacod whose worker fails every job, and the block
# must end non-zero, name the failure, and download nothing.
fake=$work/fail-bin
mkdir -p "$fake" "$work/fail/state" "$work/fail/models"
cp -R "$src/examples/demo/model" "$work/fail/models/tacod-demo"
printf '#!/bin/sh\necho "taco-train: this worker fails every job" >&2\nexit 1\n' >"$fake/taco-train"
chmod +x "$fake/taco-train"
p=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf '{"listen": "127.0.0.1:%s", "state_dir": "%s", "models_dir": "%s", "taco_train": "%s"}\n' \
	"$p" "$work/fail/state" "$work/fail/models" "$fake/taco-train" >"$work/fail/tacod.json"
"$bin/tacod" --config "$work/fail/tacod.json" >"$work/tacod.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
	curl -sf "http://127.0.0.1:$p/healthz" >/dev/null 2>&1 && break
	sleep 0.1
done
rm -rf "$repo/build/demo-ft" "$repo/build/model.tar"
if (cd "$repo" && TACOD_URL=http://127.0.0.1:$p bash "$work/blocks/curl.sh") \
	>"$work/curl-fail.out" 2>&1; then
	tail -n 20 "$work/curl-fail.out" >&2
	fail "curl: the block ended with status 0 although its job failed"
fi
grep -q 'job failed' "$work/curl-fail.out" || fail "curl: a failed job is not reported"
[ ! -e "$repo/build/demo-ft" ] || fail "curl: a failed job's model was extracted"
echo "readme_tour: the curl block stops at a failed job"
stop_tacod

echo "readme_tour: the tour works as README.md shows it"
