# elf_install.sh: shell functions of the tests that look at the built and
# the installed binaries (systemd_verify.sh, check_runpath.sh,
# planted_library.sh). Sourced, not run.

# install_prefix CMAKE BUILD_DIR PREFIX: cmake --install of BUILD_DIR into
# PREFIX (a fresh directory of the test); on failure cmake's log is shown.
install_prefix() {
	"$1" --install "$2" --prefix "$3" >"$3.install.log" 2>&1 && return 0
	cat "$3.install.log"
	echo "FAIL: cmake --install $2 --prefix $3" >&2
	return 1
}

# elf_needed FILE: the libraries FILE NEEDs (DT_NEEDED), one a line.
elf_needed() {
	readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'
}
