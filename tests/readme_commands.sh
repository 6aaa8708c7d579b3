#!/usr/bin/env bash
# The README's other commands, run as a user runs them: every ```sh block
# that follows a "<!-- command: NAME -->" line of README.md, then of
# docs/quality.md, exactly as written, from the repository root, each in
# its own bash with -e -u -o pipefail. They build into, and run from, the
# README's build (build/ of this checkout, scripts/build.sh), so this test
# exists only there: CTest registers it when the build directory is the
# source's build/.
#
# Required blocks: train-example, gpu-smoke, bench-cpu and bench-quality
# (README.md), own-model (docs/quality.md); a missing one fails, and so
# does any block that exits non-zero. Timings are printed, never checked;
# the quality benchmark's tables are checked for their rows.
#
#   tests/readme_commands.sh          (CTest: readme_commands)
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/readme-commands.XXXXXX")
trap 'rm -rf "$work"' EXIT

fail() {
	echo "readme_commands: FAIL: $*" >&2
	exit 1
}

sh "$src/tests/doc_blocks.sh" command "$src/README.md" "$work" ||
	fail "README.md: a command marker without its block"
read -r -a blocks <"$work/ORDER"
for need in train-example gpu-smoke bench-cpu bench-quality; do
	[ -s "$work/$need.sh" ] || fail "README.md has no '<!-- command: $need -->' block"
done
sh "$src/tests/doc_blocks.sh" command "$src/docs/quality.md" "$work/quality" ||
	fail "docs/quality.md: a command marker without its block"
[ -s "$work/quality/own-model.sh" ] ||
	fail "docs/quality.md has no '<!-- command: own-model -->' block"
for b in $(cat "$work/quality/ORDER"); do
	[ ! -e "$work/$b.sh" ] || fail "block name '$b' in README.md and docs/quality.md"
	cp "$work/quality/$b.sh" "$work/$b.sh"
	blocks+=("$b")
done

cd "$src"
start=$(date +%s)
touch "$work/start"
for b in "${blocks[@]}"; do
	echo "== README command block '$b':"
	sed 's/^/   /' "$work/$b.sh"
	t=$(date +%s)
	rc=0
	bash -euo pipefail "$work/$b.sh" >"$work/$b.log" 2>&1 || rc=$?
	if [ "$rc" != 0 ]; then
		tail -n 40 "$work/$b.log"
		fail "block '$b' exited with $rc"
	fi
	tail -n 15 "$work/$b.log"
	echo "== '$b' passed in $(($(date +%s) - t)) s"
done

# what the blocks say they make
[ "$src/build/demo/model/config.json" -nt "$work/start" ] ||
	fail "scripts/run.sh --train-example exported no build/demo/model"
grep -q '^eval at step 400: loss ' "$work/train-example.log" ||
	fail "scripts/run.sh --train-example printed no evaluation"
# the quality tables: a row per task, optimizer and rate, both auto ones
for task in reverse label; do
	for opt in TACO AdamW; do
		grep -q "^| $task  *| $opt  *| [0-9.e+-]* (auto) " "$work/bench-quality.log" ||
			fail "bench-quality printed no $opt auto row for $task"
	done
	grep -q "^| $task  *| [0-9.]* ([0-9e+-]*) *| [0-9.]* (" "$work/bench-quality.log" ||
		fail "bench-quality printed no summary row for $task"
done
grep -q '^| yours  *| TACO ' "$work/own-model.log" ||
	fail "docs/quality.md's own-model run printed no table"
echo "readme_commands: all ${#blocks[@]} blocks passed in $(($(date +%s) - start)) s"
