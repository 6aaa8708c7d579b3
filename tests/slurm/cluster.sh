#!/bin/bash
# cluster.sh start|stop|env DIR: a real single-host Slurm cluster for the
# tests (docs/slurm.md): munged, slurmctld and slurmd on loopback, every
# file (config, key, state, logs, pids) under DIR, so nothing of the
# host's own Slurm or munge is touched. Runs as root (slurmd starts jobs
# as their submitter). `env` prints the variables the commands need.
# Stopped by PID: TERM, a bounded wait, then KILL.
set -euo pipefail

cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
	echo "usage: $0 start|stop|env DIR" >&2
	exit 2
fi
case "$dir" in
/*) ;;
*) dir="$(pwd)/$dir" ;;
esac

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

stop_pid() { # pidfile name
	local f=$1 pid i
	[ -s "$f" ] || return 0
	pid=$(cat "$f")
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		for i in $(seq 1 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$f"
}

stop() {
	# slurmd first: it ends the job steps it started (their process
	# groups, proctrack/pgid)
	stop_pid "$dir/run/slurmd.pid"
	stop_pid "$dir/run/slurmctld.pid"
	stop_pid "$dir/run/munged.pid"
}

wait_for() { # seconds description command...
	local t=$1 what=$2 i
	shift 2
	for i in $(seq 1 $((t * 10))); do
		if "$@" >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.1
	done
	echo "cluster.sh: $what did not happen within ${t}s" >&2
	for l in "$dir"/log/*.log; do
		echo "== $l" >&2
		tail -n 20 "$l" >&2 || true
	done
	return 1
}

node_idle() {
	SLURM_CONF="$dir/etc/slurm.conf" sinfo -h -N -o %t -n localhost |
		grep -qx idle
}

start() {
	stop
	rm -rf "$dir"
	mkdir -p "$dir"/{etc,run,log,state,spool,munge}
	chmod 755 "$dir/munge"
	# a fresh key: nothing else can talk to this cluster's daemons
	dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 \
		status=none
	chmod 400 "$dir/munge/munge.key"
	munged --force --socket="$dir/munge/munge.socket" \
		--key-file="$dir/munge/munge.key" \
		--pid-file="$dir/run/munged.pid" \
		--log-file="$dir/log/munged.log" \
		--seed-file="$dir/munge/munge.seed"
	wait_for 10 "munged's socket" test -S "$dir/munge/munge.socket"
	local cport dport cpus
	cport=$(free_port)
	dport=$(free_port)
	while [ "$dport" = "$cport" ]; do dport=$(free_port); done
	cpus=$(nproc)
	cat >"$dir/etc/slurm.conf" <<CONF
ClusterName=tacotest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$cport
SlurmdPort=$dport
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ReturnToService=2
# a node failure requeues the batch job (tacod then resumes it)
JobRequeue=1
MinJobAge=30
KillWait=5
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
NodeName=localhost NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=$cpus Gres=gpu:2 State=UNKNOWN
PartitionName=gpu Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
	cat >"$dir/etc/gres.conf" <<CONF
AutoDetect=off
NodeName=localhost Name=gpu File=/dev/null
NodeName=localhost Name=gpu File=/dev/zero
CONF
	export SLURM_CONF="$dir/etc/slurm.conf"
	slurmctld -f "$SLURM_CONF" -i
	wait_for 20 "slurmctld's start" scontrol ping
	slurmd -f "$SLURM_CONF" -N localhost
	wait_for 30 "the node's idle state" node_idle
}

case "$cmd" in
start) start ;;
stop) stop ;;
env) echo "SLURM_CONF=$dir/etc/slurm.conf" ;;
*)
	echo "usage: $0 start|stop|env DIR" >&2
	exit 2
	;;
esac
