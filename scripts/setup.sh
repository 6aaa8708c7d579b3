#!/usr/bin/env bash
# Installs every build and test dependency of tacod from Debian 12 packages,
# and the test venv (the openai SDK, schemathesis and selenium, for
# tests/openai_sdk, tests/schemathesis and tests/browser) from PyPI.
# Safe to re-run: it installs only what is missing. Needs root (or sudo).
set -euo pipefail

packages=(
	build-essential cmake pkg-config git
	libjansson-dev      # JSON: config.json, safetensors headers, jobs
	libpcre2-dev        # regex of the tokenizer's pre-tokenizers (PCRE2 8-bit)
	libsqlite3-dev      # tacod's durable store (files, jobs, events)
	libuv1-dev          # tacod's event loop: workers, signals, timers
	libmicrohttpd-dev   # tacod's HTTP server
	libcurl4-openssl-dev # tacod's webhook deliveries, tacoctl, and the
	                    # HTTP client of the server tests
	libssl-dev          # OpenSSL's libcrypto: HMAC-SHA256 of tacod's
	                    # signed webhooks
	libopenblas-openmp-dev # CPU GEMM, sharing the OpenMP thread pool
	check libsubunit-dev # unit tests
	clang libclang-rt-14-dev libomp-14-dev # libFuzzer harnesses
	python3 python3-venv # tests only: the venv of the openai SDK and
	                    # schemathesis tests
	python3-jinja2      # tests only: the reference Jinja that template_diff
	                    # renders beside engine/template
	curl                # the README's tour and its test (tests/readme_tour.sh)
	systemd             # tests only: systemd-analyze verify of the unit,
	                    # systemd-sysusers (systemd_unit, tacod_install)
	util-linux          # tests only: unshare (cpu_without_cuda)
	libjs-chart.js      # Chart.js 3.9, built into tacod for its dashboard
	                    # (daemon/CMakeLists.txt; cmake fails without it)
	chromium chromium-driver # tests only: the headless browser and its
	                    # WebDriver of the dashboard test (tests/browser)
	slurm-wlm           # tests only: slurmctld, slurmd, sbatch, squeue,
	                    # scancel, scontrol: the single-host cluster of
	                    # test_slurm (tests/slurm/cluster.sh, docs/slurm.md)
	munge               # tests only: munged, Slurm's authentication
	openmpi-bin libopenmpi-dev # mpirun, and libmpi for libtaco_mpi.so:
	                    # the ranks of a job of gpus > 1 (docs/multi-gpu.md)
	wrk                 # bench/tacod_load.py, a README command
	                    # (its test: readme_commands)
)

missing=()
for p in "${packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -ne 0 ]; then
	sudo=""
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null || { echo "setup.sh: run as root to install: ${missing[*]}" >&2; exit 1; }
		sudo=sudo
	fi
	echo "setup.sh: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get update -qq
	$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

root="$(cd "$(dirname "$0")/.." && pwd)"

# make_venv NAME REQUIREMENTS: build-venv/NAME from the pinned file, made
# once and refreshed when the file changes; a venv that no longer runs is
# made anew. pip's environment (CMAKE_ARGS) comes from the caller.
make_venv() {
	local venv="$root/build-venv/$1" req="$2"
	if [ -e "$venv" ] && ! "$venv/bin/python" -c '' 2>/dev/null; then
		rm -rf "$venv"
	fi
	if ! cmp -s "$req" "$venv/requirements.txt" 2>/dev/null; then
		echo "setup.sh: making $venv"
		[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
		"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
		cp "$req" "$venv/requirements.txt"
	fi
}

# The test venv (tests/openai_sdk/requirements.txt: the openai SDK,
# schemathesis and selenium).
make_venv sdk "$root/tests/openai_sdk/requirements.txt"

# The GGUF venv (tests/gguf/requirements.txt: gguf, llama-cpp-python and
# its server, for tests/gguf/check.py and the README tour's gguf-server
# block): apart from the SDK's, since pip builds llama.cpp
# from source for it (about 8 minutes on 2 cores), and only when its own
# requirements change. Without the multimodal library, which the test
# does not load.
CMAKE_ARGS="-DLLAVA_BUILD=OFF" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
	make_venv gguf "$root/tests/gguf/requirements.txt"
