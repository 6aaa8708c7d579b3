#!/usr/bin/env bash
# docs/migrating-from-openai.md, run as a platform engineer would: each
# ```python and ```sh block that follows a "<!-- guide: NAME -->" line,
# exactly as written, in order, against a tacod of TACO_BIN_DIR on a free
# loopback port with a temporary state directory, the fixture models
# (tests/fixtures/models) and a tokens file. The environment is the one the
# page names: OPENAI_BASE_URL, OPENAI_API_KEY (a token of that file) and
# TACOD_URL. Each block runs from a directory laid out like the repository
# root (tests/, build/, build-venv/): a python block with the SDK's venv
# (build-venv/sdk), a sh block in bash -euo pipefail. Every block checks
# its own results (asserts), so any difference between tacod and the page
# fails it. All blocks run; the test fails if any did, naming each.
#
#   TACO_BIN_DIR=build tests/migration_guide.sh        (CTest: migration_guide)
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "${TACO_BIN_DIR:?set TACO_BIN_DIR to the build directory}" && pwd)
page=$src/docs/migrating-from-openai.md
py=$src/build-venv/sdk/bin/python
work=$(mktemp -d "${TMPDIR:-/tmp}/migration-guide.XXXXXX")
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
	echo "migration_guide: FAIL: $*" >&2
	if [ -s "$work/tacod.log" ]; then
		echo "--- tacod (last 30 lines)" >&2
		tail -n 30 "$work/tacod.log" >&2
	fi
	exit 1
}

# ---- what the page needs
for b in tacod taco-train; do
	[ -x "$bin/$b" ] || fail "no $bin/$b: build it first (cmake --build)"
done
[ -x "$py" ] || fail "no $src/build-venv/sdk: run scripts/setup.sh to make the SDK's venv"

# ---- the blocks, as the page has them; each must check what it shows
sh "$src/tests/doc_blocks.sh" guide "$page" "$work/blocks" ||
	fail "$page: a guide marker without its block"
read -r -a blocks <"$work/blocks/ORDER"
[ "${#blocks[@]}" -gt 0 ] || fail "$page has no '<!-- guide: NAME -->' block"
for name in "${blocks[@]}"; do
	if [ -e "$work/blocks/$name.py" ]; then
		grep -q '^ *assert ' "$work/blocks/$name.py" ||
			fail "the '$name' block asserts nothing"
	fi
done

# ---- the user's checkout: the fixtures the page names, and build/ for
# what the blocks write
repo=$work/repo
mkdir -p "$repo/build"
ln -s "$src/tests" "$repo/tests"
ln -s "$src/build-venv" "$repo/build-venv"

# ---- tacod, configured as the page's "Before you start" shows, with a
# token of user "platform"; another process may take the port between the
# probe and the bind, so up to three ports
token=tacod-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
printf '%s platform user\n' "$(printf %s "$token" | sha256sum | cut -d' ' -f1)" >"$work/tokens"
port=
for _ in 1 2 3; do
	p=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	rm -rf "$work/state"
	printf '{"listen": "127.0.0.1:%s", "state_dir": "%s", "models_dir": "%s", "taco_train": "%s", "tokens_file": "%s", "device_memory": "8GB", "cancel_timeout_s": 30}\n' \
		"$p" "$work/state" "$src/tests/fixtures/models" "$bin/taco-train" "$work/tokens" >"$work/tacod.json"
	OMP_WAIT_POLICY=passive "$bin/tacod" --config "$work/tacod.json" >"$work/tacod.log" 2>&1 &
	pid=$!
	for _ in $(seq 100); do
		if curl -sf -H "Authorization: Bearer $token" "http://127.0.0.1:$p/healthz" >/dev/null 2>&1; then
			port=$p
			break
		fi
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	[ -z "$port" ] || break
	stop_tacod
done
[ -n "$port" ] || fail "tacod did not start"

# exactly the environment the page names
export OPENAI_BASE_URL=http://127.0.0.1:$port/v1
export OPENAI_API_KEY=$token
export TACOD_URL=http://127.0.0.1:$port

# ---- each block, in order; all of them, then the verdict
failed=()
for name in "${blocks[@]}"; do
	t0=$SECONDS
	if [ -e "$work/blocks/$name.py" ]; then
		run=("$py" "$work/blocks/$name.py")
	else
		run=(bash -euo pipefail "$work/blocks/$name.sh")
	fi
	if (cd "$repo" && "${run[@]}") >"$work/$name.out" 2>&1; then
		echo "migration_guide: ok   '$name' ($((SECONDS - t0)) s)"
	else
		echo "migration_guide: FAIL '$name' ($((SECONDS - t0)) s); its output (last 25 lines):"
		tail -n 25 "$work/$name.out" | sed 's/^/    /'
		failed+=("$name")
	fi
done
kill -0 "$pid" 2>/dev/null || fail "tacod exited while the blocks ran"
stop_tacod

[ "${#failed[@]}" -eq 0 ] || fail "${#failed[@]} of ${#blocks[@]} blocks failed: ${failed[*]}"
echo "migration_guide: the ${#blocks[@]} blocks of docs/migrating-from-openai.md work as written"
