#!/usr/bin/env bash
# A cluster of N "hosts" on this machine, made of Linux namespaces, for multi-host tests.
#
#   bash jobs/netns-cluster.sh start [N]        # hosts mtp-h0 .. mtp-h(N-1) (default N=2)
#   bash jobs/netns-cluster.sh status           # exit 0 if they are up
#   bash jobs/netns-cluster.sh stop             # remove every namespace and link it made
#   bash jobs/netns-cluster.sh rate RATE        # tc rate limit on every host's link, both
#                                               # ways (e.g. 200mbit); "off" removes it;
#                                               # token bucket burst $NETNS_BURST (64kb),
#                                               # queue $NETNS_QUEUE (200ms of the rate)
#   bash jobs/netns-cluster.sh exec HOST CMD... # run CMD on a host (its network + hostname)
#   bash jobs/netns-cluster.sh hosts            # the hosts' addresses, one a line
#
# Host i: a network namespace mtp-hi (lo, and eth0 with 10.231.77.(i+1)/24) and a UTS
# namespace whose hostname is mtp-hi (kept at $NETNS_DIR/uts/mtp-hi). The hosts' eth0 are
# veth pairs into a bridge that lives in a namespace of its own (mtp-sw), so the machine's
# own interfaces, addresses and routes are never touched and no packet of the test bed can
# reach any other address. Processes stay in this machine's PID and mount namespaces (one
# /proc, one file system: like a cluster's shared home). jobs/netns-rsh is the remote shell
# MPI launchers use to start processes on a host (jobs/README.md, "Test bed").
# Needs root, iproute2 (ip, tc) and util-linux (unshare, nsenter).
set -euo pipefail

DIR="${NETNS_DIR:-/tmp/mpi-teleport-netns}"
NET=10.231.77
SW=mtp-sw

die() { echo "netns-cluster: $*" >&2; exit 1; }
hosts() { local f; for f in "$DIR"/uts/mtp-h*; do [[ -e "$f" ]] && basename "$f"; done | sort -V; }
index_of() { local h="$1"; case "$h" in mtp-h*) echo "${h#mtp-h}" ;; "$NET".*) echo $(( ${h##*.} - 1 )) ;; *) return 1 ;; esac; }

start() {
    local n="${1:-2}" i h
    [[ "$(id -u)" == 0 ]] || die "needs root (network and UTS namespaces)"
    for tool in ip tc unshare nsenter; do command -v "$tool" >/dev/null || die "$tool not found"; done
    stop quiet
    mkdir -p "$DIR/uts"
    ip netns add "$SW" || die "cannot create a network namespace (ip netns add): not allowed here"
    ip -n "$SW" link add br0 type bridge
    ip -n "$SW" link set br0 up
    ip -n "$SW" link set lo up
    for ((i = 0; i < n; i++)); do
        h="mtp-h$i"
        ip netns add "$h"
        ip -n "$h" link set lo up
        ip link add "mtp$i-in" netns "$h" type veth peer name "mtp$i-sw" netns "$SW"
        ip -n "$h" link set "mtp$i-in" name eth0
        ip -n "$h" addr add "$NET.$((i + 1))/24" dev eth0
        ip -n "$h" link set eth0 up
        ip -n "$SW" link set "mtp$i-sw" master br0
        ip -n "$SW" link set "mtp$i-sw" up
        touch "$DIR/uts/$h"
        unshare --uts="$DIR/uts/$h" hostname "$h" || die "cannot create a UTS namespace (unshare --uts)"
    done
    echo "netns-cluster: $n hosts up: $(hosts | tr '\n' ' ')($NET.1-$n); remote shell: jobs/netns-rsh"
}

stop() {
    local h
    for h in $(hosts); do
        umount "$DIR/uts/$h" 2>/dev/null || true
        rm -f "$DIR/uts/$h"
        ip netns del "$h" 2>/dev/null || true
    done
    ip netns del "$SW" 2>/dev/null || true
    [[ "${1:-}" == quiet ]] || echo "netns-cluster: stopped"
}

status() {
    local h n=0
    for h in $(hosts); do
        [[ -e "/run/netns/$h" ]] || { echo "netns-cluster: $h has no network namespace"; return 1; }
        n=$((n + 1))
    done
    (( n > 0 )) || { echo "netns-cluster: not running"; return 1; }
    echo "netns-cluster: $n hosts up: $(hosts | tr '\n' ' ')"
}

rate() {  # tbf on both ends of every host's link: the host's sending and receiving
    local r="$1" h i
    for h in $(hosts); do
        i="$(index_of "$h")"
        tc -n "$h" qdisc del dev eth0 root 2>/dev/null || true
        tc -n "$SW" qdisc del dev "mtp$i-sw" root 2>/dev/null || true
        if [[ "$r" != off ]]; then
            tc -n "$h" qdisc add dev eth0 root tbf rate "$r" burst "${NETNS_BURST:-64kb}" latency "${NETNS_QUEUE:-200ms}"
            tc -n "$SW" qdisc add dev "mtp$i-sw" root tbf rate "$r" burst "${NETNS_BURST:-64kb}" latency "${NETNS_QUEUE:-200ms}"
        fi
    done
    echo "netns-cluster: link rate ${r}"
}

run_on() {
    local h="$1" i; shift
    i="$(index_of "$h")" || die "unknown host $h"
    h="mtp-h$i"
    [[ -e "$DIR/uts/$h" ]] || die "no host $h (bash jobs/netns-cluster.sh start)"
    exec nsenter --net="/run/netns/$h" --uts="$DIR/uts/$h" -- "$@"
}

case "${1:-}" in
    start) start "${2:-2}" ;;
    stop) stop ;;
    status) status ;;
    rate) [[ $# == 2 ]] || die "usage: rate RATE|off"; rate "$2" ;;
    exec) [[ $# -ge 3 ]] || die "usage: exec HOST CMD..."; shift; run_on "$@" ;;
    hosts) for h in $(hosts); do echo "$NET.$(( $(index_of "$h") + 1 ))"; done ;;
    *) echo "usage: $0 start [N]|stop|status|rate RATE|exec HOST CMD...|hosts" >&2; exit 2 ;;
esac
