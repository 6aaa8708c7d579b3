#!/bin/sh
# systemd_verify.sh: the systemd files of tacod (CTest, CMakeLists.txt).
#
#   systemd_verify.sh unit UNIT JSON SYSUSERS TACOD
#     systemd-analyze verify of the unit configured for the build tree,
#     failing on any warning about it; tacod --check-config of the example
#     configuration; systemd-sysusers --dry-run of the sysusers.d entry.
#   systemd_verify.sh install CMAKE BUILD_DIR PROGRAM...
#     cmake --install into a temporary prefix: lists what lands, checks the
#     programs are in bin/, the unit and the example name the installed
#     binaries, and verifies them.
#
# Exit 77 (skipped) only when systemd-analyze is missing.
set -u
. "$(dirname "$0")/elf_install.sh"

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

need_analyze() {
	if ! command -v systemd-analyze >/dev/null 2>&1; then
		echo "skipped: systemd-analyze not found (apt-get install systemd)"
		exit 77
	fi
}

# systemd-analyze verify prints its warnings and still exits 0 for most of
# them (an unknown key, bad device rights): any line naming the unit fails.
verify_unit() { # FILE (named tacod.service)
	out=$(systemd-analyze verify "$1" 2>&1)
	rc=$?
	[ -n "$out" ] && printf '%s\n' "$out"
	[ $rc -eq 0 ] || return 1
	! printf '%s\n' "$out" | grep -q 'tacod'
}

tmp=$(mktemp -d /tmp/tacod-sd-XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT

case "${1:-}" in
unit)
	[ $# -eq 5 ] || fail "usage: $0 unit UNIT JSON SYSUSERS TACOD"
	unit=$2 json=$3 sysusers=$4 tacod=$5
	need_analyze
	mkdir "$tmp/ok" "$tmp/bad"
	cp "$unit" "$tmp/ok/tacod.service"
	grep -q "^ExecStart=$tacod --config /etc/tacod/tacod.json\$" \
		"$tmp/ok/tacod.service" || fail "ExecStart does not name $tacod"
	verify_unit "$tmp/ok/tacod.service" ||
		fail "systemd-analyze verify: warnings about $unit"
	# the check above must see what verify only warns about
	sed 's/^UMask=0077$/&\nNoSuchKey=1/' "$unit" >"$tmp/bad/tacod.service"
	verify_unit "$tmp/bad/tacod.service" >/dev/null 2>&1 &&
		fail "an unknown key in the unit went unnoticed"
	echo "ok: systemd-analyze verify $unit"
	"$tacod" --config "$json" --check-config ||
		fail "tacod --check-config $json"
	if command -v systemd-sysusers >/dev/null 2>&1; then
		mkdir "$tmp/root"
		systemd-sysusers --dry-run --root="$tmp/root" "$sysusers" \
			>"$tmp/sysusers.out" 2>&1
		cat "$tmp/sysusers.out"
		grep -q "Creating user 'tacod'" "$tmp/sysusers.out" ||
			fail "systemd-sysusers: no user tacod from $sysusers"
	fi
	;;
install)
	[ $# -ge 4 ] || fail "usage: $0 install CMAKE BUILD_DIR PROGRAM..."
	cmake=$2 build=$3
	shift 3
	need_analyze
	prefix="$tmp/prefix"
	install_prefix "$cmake" "$build" "$prefix" || exit 1
	(cd "$prefix" && find . -type f | sort)
	for f in lib/systemd/system/tacod.service lib/sysusers.d/tacod.conf \
		share/doc/tacod/examples/tacod.json share/doc/tacod/README.md \
		share/doc/tacod/tacod.md; do
		[ -f "$prefix/$f" ] || fail "not installed: $f"
	done
	for p in "$@"; do
		[ -x "$prefix/bin/$p" ] || fail "not installed: bin/$p"
	done
	grep -q "^ExecStart=$prefix/bin/tacod --config /etc/tacod/tacod.json\$" \
		"$prefix/lib/systemd/system/tacod.service" ||
		fail "the installed unit does not run $prefix/bin/tacod"
	grep -q "\"taco_train\": \"$prefix/bin/taco-train\"" \
		"$prefix/share/doc/tacod/examples/tacod.json" ||
		fail "the example does not name $prefix/bin/taco-train"
	"$prefix/bin/tacod" --check-config \
		--config "$prefix/share/doc/tacod/examples/tacod.json" ||
		fail "the installed tacod rejects the installed example"
	mkdir "$tmp/unit"
	cp "$prefix/lib/systemd/system/tacod.service" "$tmp/unit/"
	verify_unit "$tmp/unit/tacod.service" ||
		fail "systemd-analyze verify: warnings about the installed unit"
	echo "ok: installed under $prefix"
	;;
*)
	fail "usage: $0 unit|install ..."
	;;
esac
