#!/bin/sh
# doc_blocks.sh KIND DOC DIR: the ```sh and ```python blocks of DOC that
# follow a "<!-- KIND: NAME -->" line, each written as it is to DIR/NAME.sh
# or DIR/NAME.py, and their names in order to DIR/ORDER. The tests that
# run the commands of the README and docs as written (readme_tour,
# readme_commands, systemd_steps, migration_guide) take them from here. A
# marker not followed by a block, and a name marked twice, are errors
# naming their line.
set -eu
kind=$1 doc=$2 dir=$3
mkdir -p "$dir"
awk -v dir="$dir" -v kind="$kind" -v doc="$doc" '
	$0 ~ "^<!-- " kind ": [a-z-]+ -->$" {
		name = $3; want = 1
		if (name in seen) { printf "%s:%d: <!-- %s: %s --> marks a second block of that name\n", doc, NR, kind, name > "/dev/stderr"; exit 1 }
		seen[name] = 1
		next
	}
	want && /^```(sh|python)$/ { want = 0; inside = 1; file = dir "/" name (/sh$/ ? ".sh" : ".py"); next }
	want && !/^$/ { printf "%s:%d: <!-- %s: %s --> is not followed by a ```sh or ```python block\n", doc, NR, kind, name > "/dev/stderr"; exit 1 }
	inside && /^```$/ { inside = 0; close(file); order = order name " "; next }
	inside { print > file }
	END { print order > (dir "/ORDER") }
' "$doc"
