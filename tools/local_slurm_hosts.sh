#!/usr/bin/env bash
# A SLURM cluster of two hosts on this one machine, for the two-host tests (tests/test_two_hosts.py):
# each host is a network namespace and a UTS namespace of its own (hostname glhost1, glhost2), its
# slurmd started inside them; one slurmctld and one munged, for both, run outside. As root, with the
# packages tools/local_slurm.sh installs (slurmd, slurmctld, slurm-client, munge).
#
#   tools/local_slurm_hosts.sh start    # namespaces, links, daemons; waits until both nodes are idle
#   tools/local_slurm_hosts.sh status   # the daemons and the nodes; exit 1 unless all are up
#   tools/local_slurm_hosts.sh stop     # removes every namespace, link, hosts file and daemon it made
#
# The SLURM commands find this cluster through SLURM_CONF (the one-node cluster of
# tools/local_slurm.sh keeps /etc/slurm/slurm.conf, and both can run at once):
#
#   export SLURM_CONF=/etc/slurm-hosts/slurm.conf
#   sbatch --partition hosts --nodes 2 --wrap 'srun hostname'    # glhost1 and glhost2
#
# The network: a bridge glbr0 (10.217.0.1/24, this machine's side) with one veth link to each host,
# named cl0 inside it (10.217.0.11, 10.217.0.12), and a second bridge glbr1 linking the hosts'
# side0 interfaces (192.168.217.11, .12) and nothing else: two interfaces in each host, so which
# one gloo takes is a choice (GLOO_SOCKET_IFNAME). The names resolve inside the hosts only, from
# a hosts file bound over /etc/hosts in their own mount namespaces (/etc/netns/<namespace>/hosts, where
# `ip netns exec` finds it too); this
# machine's /etc/hosts is left alone. Only these addresses are used, and the hosts have no route
# out. The machine's CPUs and memory are split between the two hosts (2 CPUs: 1 each), in
# slurm.conf only: without cgroups nothing holds a job to its node's share.
set -euo pipefail
PATH=$PATH:/usr/sbin:/sbin

HOSTS=(glhost1 glhost2)
NAMESPACE_PREFIX=gptl-
CONF_DIR=/etc/slurm-hosts
CONF=$CONF_DIR/slurm.conf
MARK="# Written by gptlineage tools/local_slurm_hosts.sh"
RUN=/run/slurm-hosts
STATE=/var/lib/slurm-hosts
LOGS=/var/log/slurm-hosts
MUNGE=/run/slurm-hosts-munge # its own munged (munged wants a directory of its own user)
MUNGE_SOCKET=$MUNGE/socket
PARTITION=hosts
CTLD_PORT=6827 # not 6817: the one-node cluster's slurmctld may be listening there
CLUSTER_NET=10.217.0
SIDE_NET=192.168.217
# shared_settings: the slurm.conf lines both local clusters share
. "$(dirname "$0")/local_slurm_settings.sh"

say() { echo "local_slurm_hosts: $*"; }
fail() {
    echo "error: local_slurm_hosts: $*" >&2
    exit 1
}

alive() { # alive PIDFILE NAME: the daemon NAME named in the pid file is running (not a reused pid)
    local pid
    [[ -s $1 ]] || return 1
    pid=$(cat "$1")
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$2" ]]
}

namespace() { echo "$NAMESPACE_PREFIX$1"; }
address() { echo "$CLUSTER_NET.$((10 + $1))"; } # address N: host N's address on the cluster link

write_conf() {
    [[ ! -e $CONF || $(head -1 "$CONF") == "$MARK"* ]] || fail "$CONF exists and was not written by this script"
    local cpus memory nodes="" i
    cpus=$(($(nproc) / 2))
    ((cpus >= 1)) || cpus=1
    memory=$(slurmd -C | head -1 | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
    memory=$((memory / 2))
    for i in 1 2; do
        nodes+="NodeName=${HOSTS[i - 1]} NodeAddr=$(address "$i") CPUs=$cpus RealMemory=$memory State=UNKNOWN"$'\n'
    done
    mkdir -p "$CONF_DIR" "$LOGS" "$STATE/slurmctld" "$RUN"
    chown slurm:slurm "$LOGS" "$STATE/slurmctld" "$RUN"
    cat >"$CONF.new" <<EOF
$MARK; rewritten by every start.
ClusterName=gptlineage-hosts
SlurmctldHost=$(hostname -s)($CLUSTER_NET.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=6818
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$STATE/slurmctld
# %n: the node's name, one directory, pid file and log a host.
SlurmdSpoolDir=$STATE/slurmd-%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd-%n.log
$(shared_settings)
${nodes}PartitionName=$PARTITION Nodes=${HOSTS[0]},${HOSTS[1]} Default=YES MaxTime=INFINITE State=UP
EOF
    mv "$CONF.new" "$CONF"
}

link_host() { # link_host N: namespace, network and hosts file of host N
    local ns i=$1
    ns=$(namespace "${HOSTS[i - 1]}")
    ip netns list | grep -qx "$ns\( .*\)\?" || ip netns add "$ns"
    mkdir -p "/etc/netns/$ns"
    {
        echo "$MARK"
        echo "127.0.0.1 localhost"
        echo "$CLUSTER_NET.1 $(hostname -s)"
        echo "$(address 1) ${HOSTS[0]}"
        echo "$(address 2) ${HOSTS[1]}"
        # the same as IPv6-mapped addresses, as a dual-stack server (c10d's store) sees its clients
        echo "::ffff:$(address 1) ${HOSTS[0]}"
        echo "::ffff:$(address 2) ${HOSTS[1]}"
    } >"/etc/netns/$ns/hosts"
    ip link show "glv$i" >/dev/null 2>&1 || {
        ip link add "glv$i" type veth peer name "glc$i"
        ip link set "glc$i" netns "$ns"
        ip -n "$ns" link set "glc$i" name cl0
        ip -n "$ns" addr add "$(address "$i")/24" dev cl0
    }
    ip link show "gls$i" >/dev/null 2>&1 || {
        ip link add "gls$i" type veth peer name "glt$i"
        ip link set "glt$i" netns "$ns"
        ip -n "$ns" link set "glt$i" name side0
        ip -n "$ns" addr add "$SIDE_NET.$((10 + i))/24" dev side0
    }
    ip link set "glv$i" master glbr0 up
    ip link set "gls$i" master glbr1 up
    ip -n "$ns" link set lo up
    ip -n "$ns" link set cl0 up
    ip -n "$ns" link set side0 up
}

make_network() {
    ip link show glbr0 >/dev/null 2>&1 || {
        ip link add glbr0 type bridge
        ip addr add "$CLUSTER_NET.1/24" dev glbr0
    }
    ip link show glbr1 >/dev/null 2>&1 || ip link add glbr1 type bridge
    ip link set glbr0 up
    ip link set glbr1 up
    link_host 1
    link_host 2
}

start_munge() {
    alive "$MUNGE/munged.pid" munged && return 0
    [[ -s /etc/munge/munge.key ]] || fail "/etc/munge/munge.key is missing: run tools/local_slurm.sh start once"
    mkdir -p "$MUNGE"
    chown munge:munge "$MUNGE"
    chmod 0755 "$MUNGE"
    runuser -u munge -- munged --socket="$MUNGE_SOCKET" --pid-file="$MUNGE/munged.pid" \
        --log-file="$MUNGE/munged.log" --seed-file="$MUNGE/munged.seed"
}

start_slurmd() { # start_slurmd HOST: slurmd in HOST's network namespace, in a UTS namespace named HOST
    alive "$RUN/slurmd-$1.pid" slurmd && return 0
    mkdir -p "$STATE/slurmd-$1"
    # Not `ip netns exec`: it mounts a sysfs of the namespace's own, without the cgroup file system slurmd
    # needs. In a mount namespace of the host's own, its hosts file is bound over /etc/hosts, and this
    # cluster's configuration over /etc/slurm: on the hosts, as on a real cluster's nodes, the SLURM
    # commands find it without SLURM_CONF (which Snakemake's slurm-jobstep executor removes).
    mkdir -p /etc/slurm
    nsenter --net="/run/netns/$(namespace "$1")" unshare --uts --mount --propagation slave sh -c \
        "mount --bind /etc/netns/$(namespace "$1")/hosts /etc/hosts && mount --bind $CONF_DIR /etc/slurm &&
         hostname $1 && exec slurmd -f $CONF -N $1"
}

wait_for_nodes() {
    local states=""
    for _ in $(seq 60); do
        states=$(SLURM_CONF=$CONF sinfo -h -N -p "$PARTITION" -o %T 2>/dev/null | sort -u | tr '\n' ' ')
        [[ $(SLURM_CONF=$CONF sinfo -h -N -p "$PARTITION" -t idle,mix,alloc -o %N 2>/dev/null | sort -u | wc -l) == 2 ]] &&
            return 0
        sleep 0.5
    done
    fail "the two nodes did not become idle (states: ${states:-unknown}); see $LOGS/"
}

start() {
    [[ $EUID -eq 0 ]] || fail "starting the cluster needs root"
    command -v slurmd >/dev/null && command -v sbatch >/dev/null && command -v munged >/dev/null ||
        fail "slurmd, slurmctld, sbatch or munged is missing: tools/local_slurm.sh start installs them"
    alive "$RUN/slurmctld.pid" slurmctld || write_conf
    make_network
    start_munge
    alive "$RUN/slurmctld.pid" slurmctld || SLURM_CONF=$CONF slurmctld -f "$CONF"
    for host in "${HOSTS[@]}"; do start_slurmd "$host"; done
    wait_for_nodes
    say "started"
    status
}

stop_pids() { # stop_pids PID...: SIGTERM to all at once, then SIGKILL to those left after 10 s
    local pid left
    (($#)) || return 0
    kill "$@" 2>/dev/null || true
    for _ in $(seq 100); do
        left=()
        for pid in "$@"; do kill -0 "$pid" 2>/dev/null && left+=("$pid"); done
        ((${#left[@]})) || return 0
        sleep 0.1
    done
    kill -KILL "${left[@]}" 2>/dev/null || true
}

daemon_pid() { # daemon_pid PIDFILE NAME: the pid of the running daemon NAME, if any
    alive "$1" "$2" && cat "$1"
    return 0
}

stop() {
    local host ns i pids=()
    # The daemons stop together: each takes a second or two after SIGTERM.
    for host in "${HOSTS[@]}"; do pids+=($(daemon_pid "$RUN/slurmd-$host.pid" slurmd)); done
    pids+=($(daemon_pid "$RUN/slurmctld.pid" slurmctld) $(daemon_pid "$MUNGE/munged.pid" munged))
    stop_pids "${pids[@]}"
    rm -f "$RUN"/slurmd-*.pid "$RUN/slurmctld.pid"
    rm -rf "$MUNGE"
    for host in "${HOSTS[@]}"; do
        ns=$(namespace "$host")
        if ip netns list | grep -qx "$ns\( .*\)\?"; then
            # what the host's slurmd started (job steps, their ranks) dies with the host
            stop_pids $(ip netns pids "$ns")
            ip netns del "$ns"
        fi
        if [[ -f /etc/netns/$ns/hosts && $(head -1 "/etc/netns/$ns/hosts") == "$MARK" ]]; then
            rm -f "/etc/netns/$ns/hosts"
            rmdir "/etc/netns/$ns"
        fi
    done
    rmdir /etc/netns 2>/dev/null || true
    # deleting a namespace leaves the machine's end of its veth links on some kernels: deleted here
    for i in 1 2; do
        ip link del "glv$i" 2>/dev/null || true
        ip link del "gls$i" 2>/dev/null || true
    done
    ip link del glbr0 2>/dev/null || true
    ip link del glbr1 2>/dev/null || true
    say "stopped"
}

status() {
    local ok=0 host
    alive "$MUNGE/munged.pid" munged && say "munged running (pid $(cat "$MUNGE/munged.pid"))" || {
        say "munged not running"
        ok=1
    }
    alive "$RUN/slurmctld.pid" slurmctld && say "slurmctld running (pid $(cat "$RUN/slurmctld.pid"))" || {
        say "slurmctld not running"
        ok=1
    }
    for host in "${HOSTS[@]}"; do
        if alive "$RUN/slurmd-$host.pid" slurmd; then
            say "slurmd of $host running (pid $(cat "$RUN/slurmd-$host.pid"), namespace $(namespace "$host"))"
        else
            say "slurmd of $host not running"
            ok=1
        fi
    done
    ((ok)) || SLURM_CONF=$CONF sinfo -N -o "%N %P %T %c %m" || ok=1
    ((ok)) || say "use it with: export SLURM_CONF=$CONF"
    return $ok
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) status ;;
*)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
