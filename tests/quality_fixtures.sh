#!/bin/sh
# tests/fixtures/quality/ is what bench/quality/tasks.py writes: test_train
# fine-tunes the quality benchmark's base on these files, so they must be
# the benchmark's own (seed 0 of the reverse task). To refresh them:
#   python3 bench/quality/tasks.py reverse 0 tests/fixtures/quality
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/quality-fixtures.XXXXXX")
trap 'rm -rf "$work"' EXIT
python3 "$src/bench/quality/tasks.py" reverse 0 "$work"
for f in reverse_train.jsonl reverse_val.jsonl; do
	cmp "$work/$f" "$src/tests/fixtures/quality/$f" || {
		echo "quality_fixtures: tests/fixtures/quality/$f is not what" \
			"bench/quality/tasks.py writes (see this script's header)" >&2
		exit 1
	}
done
echo "quality_fixtures: tests/fixtures/quality/ is current"
