#!/usr/bin/env bash
# The install steps of docs/tacod.md ("Running under systemd"), the
# ```sh block after "<!-- command: systemd-install -->", run as written
# from the repository root, as root, in a private mount and network
# namespace: /usr/local, /etc, /var/lib and /run are throwaway there, so
# the machine is left as it was. The systemctl lines need systemd as PID 1,
# which CI lacks: in their place the installed unit is verified
# (systemd-analyze) and its ExecStart= started as its User= with the
# directories systemd would make, until /healthz answers on loopback and
# on the unix socket; SIGTERM then stops it, as systemctl stop would.
#
#   tests/systemd_steps.sh            (CTest: systemd_steps, as root)
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
fail() {
	echo "systemd_steps: FAIL: $*" >&2
	exit 1
}
[ "$(id -u)" = 0 ] || fail "needs root, as docs/tacod.md says (CI runs as root)"

if [ "${1:-}" != --inside ]; then
	exec unshare --mount --net --fork "$0" --inside
fi

# ---- inside the namespaces
mount --make-rprivate /
ip link set lo up
scratch=$(mktemp -d /tmp/systemd-steps.XXXXXX)
mount -t tmpfs tmpfs "$scratch"
# each an overlay: what the steps write goes to the tmpfs, and is gone
# with the namespace
for d in /etc /usr/local /var/lib /run; do
	n=${d//\//_}
	mkdir -p "$scratch/up$n" "$scratch/work$n"
	mount -t overlay overlay \
		-o "lowerdir=$d,upperdir=$scratch/up$n,workdir=$scratch/work$n" "$d"
done

sh "$src/tests/doc_blocks.sh" command "$src/docs/tacod.md" "$scratch/blocks" ||
	fail "docs/tacod.md: a command marker without its block"
block=$scratch/blocks/systemd-install.sh
[ -s "$block" ] || fail "docs/tacod.md has no '<!-- command: systemd-install -->' block"
grep -q '^systemctl enable --now tacod' "$block" ||
	fail "the block no longer enables tacod: update this test"

cd "$src"
echo "== the steps of docs/tacod.md, as written (systemctl lines apart):"
grep -v '^systemctl ' "$block" | tee "$scratch/run.sh" | sed 's/^/   /'
bash -euo pipefail "$scratch/run.sh" || fail "a step exited with $?"

unit=/usr/local/lib/systemd/system/tacod.service
[ -f "$unit" ] || fail "no $unit after cmake --install build"
id tacod >/dev/null || fail "systemd-sysusers made no user tacod"
[ "$(stat -c '%U:%G %a' /etc/tacod/tokens)" = "root:tacod 640" ] ||
	fail "/etc/tacod/tokens: $(stat -c '%U:%G %a' /etc/tacod/tokens)"

echo "== in place of systemctl daemon-reload / enable --now / status:"
# systemd-analyze verify: warnings about the unit fail, as in systemd_unit
out=$(systemd-analyze verify "$unit" 2>&1 | grep -v -e 'Failed to connect to bus' -e 'nvidia-persistenced' || true)
[ -z "$out" ] || fail "systemd-analyze verify $unit: $out"
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
[ "$(sed -n 's/^User=//p' "$unit")" = tacod ] || fail "the unit's User= is not tacod"
# what StateDirectory= and RuntimeDirectory= make
install -d -m 0750 -o tacod -g tacod /var/lib/tacod /run/tacod
# read the tokens file as the group tacod may
echo "$(printf %s secret-token | sha256sum | cut -d' ' -f1) alice user" >>/etc/tacod/tokens
# shellcheck disable=SC2086
setpriv --reuid=tacod --regid=tacod --init-groups --no-new-privs \
	$exec_start >"$scratch/tacod.log" 2>&1 &
pid=$!
up=
for _ in $(seq 300); do
	if curl -sf -H 'Authorization: Bearer secret-token' \
		http://127.0.0.1:8226/healthz >/dev/null 2>&1; then
		up=1
		break
	fi
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.1
done
[ -n "$up" ] || { cat "$scratch/tacod.log"; fail "the installed tacod did not answer /healthz"; }
curl -sf --unix-socket /run/tacod/tacod.sock http://localhost/healthz >/dev/null ||
	fail "no answer on /run/tacod/tacod.sock"
curl -sf -H 'Authorization: Bearer secret-token' http://127.0.0.1:8226/v1/models >/dev/null ||
	fail "GET /v1/models with the token"
code=$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8226/v1/models)
[ "$code" = 401 ] || fail "GET /v1/models without a token: $code, not 401"
[ "$(stat -c %U /var/lib/tacod/tacod.db 2>/dev/null || stat -c %U /var/lib/tacod)" = tacod ] ||
	fail "the state is not tacod's"
kill -TERM "$pid"
wait "$pid" || fail "tacod exited with $? on SIGTERM"
echo "systemd_steps: the steps of docs/tacod.md work as written"
