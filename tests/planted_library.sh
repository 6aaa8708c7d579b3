#!/bin/sh
# planted_library.sh CC CMAKE BUILD_DIR CUDA PROGRAM...: a library planted
# in the current directory is not loaded (check_runpath.sh says why one
# could be).
#
# A library whose constructor exits 42 is planted in an otherwise empty
# directory under the name of every library that a PROGRAM NEEDs
# (libjansson.so.4, libcurl.so.4, ...). From there, each PROGRAM of the
# build tree and of an install (cmake --install into a temporary prefix)
# is run with --help: it must exit 0 with the output it gives from an empty
# directory. With CUDA ON, the same for the libraries that the CUDA module
# NEEDs (libstdc++.so.6, libcudart.so.13, ...), in a directory of their
# own, and taco-train --backend cuda, which loads the module: it must exit
# as it does from an empty directory (trained on a GPU, refused without
# one). Not planted: glibc's libc.so.6, which the planted library needs
# itself, and libm.so.6, whose variables other libraries would miss before
# any constructor runs. Needs TACO_FIXTURES (the job).
set -u
. "$(dirname "$0")/elf_install.sh"

[ $# -ge 5 ] || {
	echo "usage: $0 CC CMAKE BUILD_DIR ON|OFF PROGRAM..." >&2
	exit 2
}
cc=$1 cmake=$2 cuda=$4
build=$(cd "$3" && pwd) || exit 1
shift 4
tmp=$(mktemp -d /tmp/tacod-planted-XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
module=libtaco_cuda.so

install_prefix "$cmake" "$build" "$tmp/prefix" || exit 1

cat >"$tmp/planted.c" <<'C'
#include <unistd.h>
__attribute__((constructor)) static void planted(void) { _exit(42); }
C
"$cc" -shared -fPIC -o "$tmp/planted.so" "$tmp/planted.c" || exit 1
mkdir "$tmp/empty"

# plant DIR FILE...: the planted library in DIR under the name of each
# library a FILE NEEDs.
plant() {
	dir=$1
	shift
	for f; do
		[ -f "$f" ] || { echo "FAIL: missing: $f" >&2; exit 1; }
		for lib in $(elf_needed "$f"); do
			case $lib in
			libc.so.* | libm.so.* | ld-linux*) ;; # glibc: see above
			*) cp "$tmp/planted.so" "$dir/$lib" ;;
			esac
		done
	done
}
mkdir "$tmp/planted"
for p; do
	plant "$tmp/planted" "$build/$p" "$tmp/prefix/bin/$p"
done
echo "planted for the programs:" "$(ls "$tmp/planted" | tr '\n' ' ')"
# The module's own, apart: what the programs NEED must not hide whether
# the module's RUNPATH is searched.
if [ "$cuda" = ON ]; then
	mkdir "$tmp/planted-module"
	plant "$tmp/planted-module" "$build/$module" \
		"$(find "$tmp/prefix" -name $module)"
	echo "planted for the module:" "$(ls "$tmp/planted-module" | tr '\n' ' ')"
fi
unset TACO_CUDA_BACKEND

# run DIR COMMAND...: COMMAND in DIR; its output in $out, its status in $rc.
run() {
	out="$tmp/out.$(basename "$1")"
	(cd "$1" && shift && exec "$@") >"$out" 2>&1
	rc=$?
}

# same PLANTED COMPARE COMMAND...: COMMAND from the directory PLANTED exits
# as from the empty one, and not 42; with the same output too when COMPARE
# is output, or is failed and the command fails. The status from the empty
# directory is left in $want.
same() {
	planted=$1 compare=$2
	shift 2
	run "$tmp/empty" "$@"
	want=$rc
	mv "$out" "$tmp/want"
	run "$planted" "$@"
	if [ "$rc" = 42 ]; then
		echo "FAIL: $*: loaded a library planted in the current" \
			"directory (exit 42)" >&2
		fail=1
	elif [ "$rc" != "$want" ]; then
		echo "FAIL: $*: exit $rc beside the planted libraries," \
			"$want without" >&2
		cat "$out" >&2
		fail=1
	elif { [ "$compare" = output ] ||
		{ [ "$compare" = failed ] && [ "$rc" != 0 ]; }; } &&
		! diff "$tmp/want" "$out" >&2; then
		echo "FAIL: $*: another output beside the planted libraries" >&2
		fail=1
	else
		echo "ok: $* (exit $rc)"
	fi
}

for p; do
	for bin in "$build/$p" "$tmp/prefix/bin/$p"; do
		same "$tmp/planted" output "$bin" --help
		if [ "$want" != 0 ]; then
			echo "FAIL: $bin --help: exit $want" >&2
			fail=1
		fi
	done
done

if [ "$cuda" = ON ]; then
	# A planted library that the module's RUNPATH finds makes dlopen fail
	# (RTLD_NOW: the module's symbols are not there) before it could exit
	# 42: the failure says so, unlike the one without a GPU. output_dir
	# relative: each run trains into its current directory.
	cat >"$tmp/job.json" <<JOB
{"model": "$TACO_FIXTURES/models/llama_gqa", "train": "$TACO_FIXTURES/data/count_train.jsonl",
 "output_dir": "out", "steps": 1, "batch_size": 2, "seq_len": 16}
JOB
	for bin in "$build/taco-train" "$tmp/prefix/bin/taco-train"; do
		rm -rf "$tmp/empty/out" "$tmp/planted-module/out"
		same "$tmp/planted-module" failed \
			"$bin" --backend cuda --no-progress "$tmp/job.json"
	done
fi

[ "$fail" = 0 ] && echo "ok: no program loaded a planted library"
exit "$fail"
