#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, to try the workflow's SLURM profile and to run the
# `slurm` tests (pytest -m slurm). Debian/Ubuntu, as root: installs slurmd, slurmctld,
# slurm-client and munge with apt-get when they are missing, writes /etc/slurm/slurm.conf (one
# node with this machine's CPUs and memory, one partition `local`, no accounting database, no
# cgroups) and starts munged, slurmctld and slurmd. Every command can be repeated.
#
#   tools/local_slurm.sh start    # install if needed, configure, start; waits until the node is idle
#   tools/local_slurm.sh status   # each daemon's pid and the node; exit 1 unless all are up
#   tools/local_slurm.sh stop     # stops the three daemons by the pids in their pid files
#
# With --nodes 2 each command is that of the two-host cluster instead (tools/local_slurm_hosts.sh:
# hosts glhost1 and glhost2 in network namespaces, partition `hosts`, SLURM_CONF=/etc/slurm-hosts/slurm.conf),
# which runs beside the one-node cluster; its start installs the packages and makes the munge key first:
#
#   tools/local_slurm.sh start --nodes 2
#
# Memory and time limits are enforced without cgroups: the accounting gatherer samples every
# second and kills a step above its --mem (JobAcctGatherParams=OverMemoryKill); slurmctld
# cancels a job past its --time. A slurm.conf this script did not write is never replaced.
set -euo pipefail
PATH=$PATH:/usr/sbin:/sbin

CONF=/etc/slurm/slurm.conf
MARK="# Written by gptlineage tools/local_slurm.sh"
MUNGE_PID=/run/munge/munged.pid
CTLD_PID=/run/slurmctld.pid
SLURMD_PID=/run/slurmd.pid
LOGS=/var/log/slurm
PARTITION=local
# shared_settings: the slurm.conf lines both local clusters share
. "$(dirname "$0")/local_slurm_settings.sh"

say() { echo "local_slurm: $*"; }
fail() {
    echo "error: local_slurm: $*" >&2
    exit 1
}

alive() { # alive PIDFILE: the daemon named in the pid file is running (not a reused pid)
    local pid
    [[ -s $1 ]] || return 1
    pid=$(cat "$1")
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$(basename "$1" .pid)" ]]
}

install_packages() {
    local missing=()
    command -v munged >/dev/null || missing+=(munge)
    command -v slurmctld >/dev/null || missing+=(slurmctld)
    command -v slurmd >/dev/null || missing+=(slurmd)
    command -v sbatch >/dev/null || missing+=(slurm-client)
    ((${#missing[@]})) || return 0
    [[ $EUID -eq 0 ]] || fail "packages ${missing[*]} are missing; run as root to install them with apt-get"
    command -v apt-get >/dev/null || fail "packages ${missing[*]} are missing and apt-get is not available"
    say "installing ${missing[*]}"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >/tmp/local_slurm.apt.log 2>&1; then
        apt-get update >>/tmp/local_slurm.apt.log 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >>/tmp/local_slurm.apt.log 2>&1 ||
            fail "apt-get install ${missing[*]} failed; see /tmp/local_slurm.apt.log"
    fi
}

write_conf() {
    if [[ -e $CONF && $(head -1 "$CONF") != "$MARK"* ]]; then
        fail "$CONF exists and was not written by this script; move it away to use the local cluster"
    fi
    local host node
    host=$(hostname -s)
    # slurmd -C: this machine as slurmd sees it (CPUs, sockets, cores, threads, RealMemory in MB).
    # (its second line, UpTime, is left out).
    node=$(slurmd -C | head -1)
    [[ $node == NodeName=* ]] || fail "slurmd -C did not describe this machine: $node"
    mkdir -p /etc/slurm "$LOGS" /var/lib/slurm/slurmctld /var/lib/slurm/slurmd
    chown slurm:slurm "$LOGS" /var/lib/slurm/slurmctld
    cat >"$CONF.new" <<EOF
$MARK; rewritten by every start.
ClusterName=gptlineage
SlurmctldHost=$host(127.0.0.1)
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
$(shared_settings)
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    sed -i "s/^NodeName=[^ ]* /NodeName=$host /" "$CONF.new"
    mv "$CONF.new" "$CONF"
}

make_munge_key() { # the key both clusters' munged share
    [[ -s /etc/munge/munge.key ]] && return 0
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
}

start_munge() {
    alive "$MUNGE_PID" && return 0
    make_munge_key
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    runuser -u munge -- /usr/sbin/munged
}

wait_for_node() { # the node accepts jobs: idle, mixed or allocated
    local state=""
    for _ in $(seq 60); do
        state=$(sinfo -h -N -o %T 2>/dev/null | head -1)
        case $state in
        idle* | mix* | alloc* | completing*) return 0 ;;
        down* | drain* | fail*) scontrol update NodeName="$(hostname -s)" State=RESUME 2>/dev/null || true ;;
        esac
        sleep 0.5
    done
    fail "the node did not become idle (state: ${state:-unknown}); see $LOGS/slurmctld.log and $LOGS/slurmd.log"
}

start() {
    install_packages
    if alive "$CTLD_PID" && alive "$SLURMD_PID" && alive "$MUNGE_PID"; then
        wait_for_node
        say "already running"
        status
        return 0
    fi
    [[ $EUID -eq 0 ]] || fail "starting the daemons needs root"
    alive "$CTLD_PID" || alive "$SLURMD_PID" || write_conf
    start_munge
    alive "$CTLD_PID" || slurmctld
    alive "$SLURMD_PID" || slurmd
    wait_for_node
    say "started"
    status
}

stop_one() { # stop_one NAME PIDFILE; the pid file goes too (Debian's package scripts look for it)
    if alive "$2"; then
        local pid
        pid=$(cat "$2")
        kill "$pid"
        for _ in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        if kill -0 "$pid" 2>/dev/null; then
            kill -KILL "$pid" 2>/dev/null || true
            say "$1 (pid $pid) did not stop in 10 s: killed"
        fi
    fi
    rm -f "$2"
}

stop() {
    stop_one slurmd "$SLURMD_PID"
    stop_one slurmctld "$CTLD_PID"
    stop_one munged "$MUNGE_PID"
    say "stopped"
}

status() {
    local ok=0 name file
    for name in munged slurmctld slurmd; do
        case $name in
        munged) file=$MUNGE_PID ;;
        slurmctld) file=$CTLD_PID ;;
        slurmd) file=$SLURMD_PID ;;
        esac
        if alive "$file"; then
            say "$name running (pid $(cat "$file"))"
        else
            say "$name not running"
            ok=1
        fi
    done
    ((ok)) || sinfo -N -o "%N %P %T %c %m" || ok=1
    return $ok
}

two_hosts() { # two_hosts COMMAND: the two-host cluster's COMMAND, after what its start needs from here
    if [[ $1 == start ]]; then
        install_packages
        [[ $EUID -eq 0 ]] || fail "starting the daemons needs root"
        make_munge_key
    fi
    exec "$(dirname "$0")/local_slurm_hosts.sh" "$1"
}

case "${2:-}${3:+ $3}" in
"" | "--nodes 1") ;;
"--nodes 2")
    [[ ${1:-} =~ ^(start|stop|status)$ ]] && two_hosts "$1"
    ;;
"--nodes "*)
    echo "error: local_slurm: --nodes must be 1 or 2, got '$3'" >&2
    exit 2
    ;;
*)
    echo "error: local_slurm: unknown arguments '${*:2}'; usage: $0 start|stop|status [--nodes 1|2]" >&2
    exit 2
    ;;
esac
case "${1:-}" in
start) start ;;
stop) stop ;;
status) status ;;
*)
    echo "usage: $0 start|stop|status [--nodes 1|2]" >&2
    exit 2
    ;;
esac
