#!/bin/sh
# run_sh_probe.sh SOURCE_DIR BIN_DIR: scripts/run.sh does not start a tacod
# whose jobs would all fail. With a taco-train that cannot start (as when
# the loader cannot find a library it needs), run.sh must exit non-zero,
# say so, and leave nothing listening.
set -eu
src=$1
bin=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/bin"
ln -s "$bin/tacod" "$work/bin/tacod"
cat >"$work/bin/taco-train" <<'FAKE'
#!/bin/sh
echo "taco-train: error while loading shared libraries: libcudart.so.13: cannot open shared object file: No such file or directory" >&2
exit 127
FAKE
chmod +x "$work/bin/taco-train"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
if TACO_BIN_DIR="$work/bin" TACOD_DEMO_DIR="$work/demo" \
	TACOD_LISTEN="127.0.0.1:$port" timeout 60 "$src/scripts/run.sh" --no-build \
	>"$work/out" 2>&1; then
	echo "FAIL: run.sh started with a taco-train that cannot run"; cat "$work/out"
	exit 1
fi
cat "$work/out"
grep -q "cannot train the demo" "$work/out" || { echo "FAIL: no reason given"; exit 1; }
grep -q "libcudart.so.13" "$work/out" || { echo "FAIL: the loader's message is not shown"; exit 1; }
if curl -s -m 2 "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; then
	echo "FAIL: something listens on $port"; exit 1
fi
echo "ok: run.sh refused to start"
