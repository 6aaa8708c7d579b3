#!/bin/sh
# check_runpath.sh CMAKE BUILD_DIR FILE...: no ELF file of the build tree
# or of an install has a RUNPATH (or RPATH) entry that the dynamic loader
# resolves against the current directory, and every library that a file
# NEEDs from a RUNPATH directory is loaded from there.
#
# The loader reads an empty entry (a trailing ':', as CMake leaves for its
# install-time rewrite) as the current directory, and a relative one
# ("lib", ".", "$LIB/x") as a directory under it: whoever can write to the
# working directory of tacod or of a job could plant a library there that
# runs as tacod. Allowed are absolute entries and $ORIGIN ones ("$ORIGIN",
# "$ORIGIN/../lib"): $ORIGIN is the directory of the file itself, as safe
# as the file.
#
# Checked: every ELF file under BUILD_DIR (programs, test programs, benches,
# the CUDA module, CMake's probes), then every one that cmake --install
# writes into a temporary prefix. Each FILE (tacod, libtaco_cuda.so) must
# be among both, or an empty tree would pass.
set -u
. "$(dirname "$0")/elf_install.sh"

[ $# -ge 3 ] || { echo "usage: $0 CMAKE BUILD_DIR FILE..." >&2; exit 2; }
cmake=$1
build=$(cd "$2" && pwd) || exit 1
shift 2
tmp=$(mktemp -d /tmp/tacod-runpath-XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
elf_magic=$(printf '\177ELF')

# entries FILE: "TAG ENTRY" for each entry of its RUNPATH and RPATH, an
# empty RUNPATH being one empty entry; failures on stderr, status 1.
entries() {
	readelf -d "$1" 2>/dev/null | awk -v f="$1" '
	/\((RUNPATH|RPATH)\)/ {
		tag = $2
		gsub(/[()]/, "", tag)
		s = $0
		sub(/^[^[]*\[/, "", s)
		sub(/\][[:space:]]*$/, "", s)
		n = split(s, e, ":")
		if (n == 0) { n = 1; e[1] = "" }
		for (i = 1; i <= n; i++) {
			print tag, e[i]
			if (e[i] ~ /^\// || e[i] ~ /^\$(ORIGIN|\{ORIGIN\})(\/|$)/)
				continue
			printf "FAIL: %s: %s [%s]: entry \"%s\" is searched from " \
			       "the current directory\n", f, tag, s, e[i] > "/dev/stderr"
			bad = 1
		}
	}
	END { exit bad }'
}

# from_runpath FILE ENTRIES: each NEEDED library that is in a RUNPATH
# directory is loaded from the first one that has it, and none is missing.
# Without LD_LIBRARY_PATH, which would come first.
from_runpath() {
	f=$1
	[ -n "$(elf_needed "$f")" ] || return 0
	ldd=$(env -u LD_LIBRARY_PATH ldd "$f" 2>&1)
	if printf '%s\n' "$ldd" | grep -q 'not found'; then
		echo "FAIL: $f: a library is not found:" >&2
		printf '%s\n' "$ldd" | grep 'not found' >&2
		return 1
	fi
	origin=$(dirname "$f")
	for lib in $(elf_needed "$f"); do
		while read -r tag dir; do
			case $dir in
			'${ORIGIN}'*) dir=$origin${dir#'${ORIGIN}'} ;;
			'$ORIGIN'*) dir=$origin${dir#'$ORIGIN'} ;;
			/*) ;;
			*) continue ;; # failed above
			esac
			dir=${dir%/}
			[ -e "$dir/$lib" ] || continue
			got=$(printf '%s\n' "$ldd" |
				awk -v n="$lib" '$1 == n && $2 == "=>" { print $3 }')
			if [ "$got" != "$dir/$lib" ]; then
				echo "FAIL: $f: $lib is loaded from ${got:-nowhere}," \
					"not from its $tag $dir; ldd:" >&2
				printf '%s\n' "$ldd" >&2
				return 1
			fi
			break
		done <"$2"
	done
}

# check_tree DIR: every ELF file under DIR.
check_tree() {
	n=0
	find "$1" -type f >"$tmp/files"
	while IFS= read -r f; do
		[ "$(head -c 4 "$f")" = "$elf_magic" ] || continue
		n=$((n + 1))
		entries "$f" >"$tmp/entries" || fail=1
		from_runpath "$f" "$tmp/entries" || fail=1
	done <"$tmp/files"
	echo "$1: $n ELF files checked"
}

check_tree "$build"
for name; do
	[ -f "$build/$name" ] || { echo "FAIL: not built: $name" >&2; fail=1; }
done

install_prefix "$cmake" "$build" "$tmp/prefix" || exit 1
check_tree "$tmp/prefix"
for name; do
	[ -n "$(find "$tmp/prefix" -type f -name "$name")" ] ||
		{ echo "FAIL: not installed: $name" >&2; fail=1; }
done

[ "$fail" = 0 ] && echo "ok: no RUNPATH or RPATH entry is relative or empty"
exit "$fail"
