#!/usr/bin/env bash
# Installs every build and test dependency of tacod from Debian 12 packages.
# Safe to re-run: it installs only what is missing. Needs root (or sudo).
set -euo pipefail

packages=(
	build-essential cmake pkg-config git
	libjansson-dev      # JSON: config.json, safetensors headers, jobs
	libpcre2-dev        # regex of the tokenizer's pre-tokenizers (PCRE2 8-bit)
	libsqlite3-dev      # tacod's durable store (files, jobs, events)
	libuv1-dev          # tacod's event loop: workers, signals, timers
	libmicrohttpd-dev   # tacod's HTTP server
	libcurl4-openssl-dev # tests only: HTTP client of the server tests
	libopenblas-openmp-dev # CPU GEMM, sharing the OpenMP thread pool
	check libsubunit-dev # unit tests
	clang libclang-rt-14-dev libomp-14-dev # libFuzzer harnesses
)

missing=()
for p in "${packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null || { echo "setup.sh: run as root to install: ${missing[*]}" >&2; exit 1; }
	sudo=sudo
fi
echo "setup.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
