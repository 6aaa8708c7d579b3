#!/usr/bin/env bash
# The README's other commands, run as a user runs them: every ```sh block
# that follows a "<!-- command: NAME -->" line of README.md, exactly as
# written, from the repository root, each in its own bash with -e -u -o
# pipefail. They build into, and run from, the README's build (build/ of
# this checkout, scripts/build.sh), so this test exists only there: CTest
# registers it when the build directory is the source's build/.
#
# Required blocks: train-example, gpu-smoke and bench-cpu; a missing one
# fails, and so does any block that exits non-zero. Timings are printed,
# never checked.
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
for need in train-example gpu-smoke bench-cpu; do
	[ -s "$work/$need.sh" ] || fail "README.md has no '<!-- command: $need -->' block"
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
echo "readme_commands: all ${#blocks[@]} blocks passed in $(($(date +%s) - start)) s"
