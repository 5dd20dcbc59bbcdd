#!/usr/bin/env bash
# A cluster of N "hosts" on this machine, made of Linux namespaces, for multi-host tests.
#
#   bash jobs/netns-cluster.sh start [N]        # hosts mtp-h0 .. mtp-h(N-1) (default N=2);
#                                               # already up: nothing to do
#   bash jobs/netns-cluster.sh status           # exit 0 if they are up
#   bash jobs/netns-cluster.sh stop             # remove every namespace and link it made;
#                                               # exit 3, stopping nothing, while in use
#   bash jobs/netns-cluster.sh users            # the lease file (below)
#   bash jobs/netns-cluster.sh rate RATE        # tc rate limit on every host's link, both
#                                               # ways (e.g. 200mbit); "off" removes it;
#                                               # htb, burst $NETNS_BURST (64kb), queue
#                                               # $NETNS_QUEUE (200ms of the rate), packets
#                                               # under 128 bytes first; NETNS_SHAPER=tbf:
#                                               # the older token bucket
#   bash jobs/netns-cluster.sh exec HOST CMD... # run CMD on a host (its network + hostname)
#   bash jobs/netns-cluster.sh hosts            # the hosts' addresses, one a line
#
# Host i: a network namespace mtp-hi (lo, and eth0 with 10.231.77.(i+1)/24) and a UTS
# namespace whose hostname is mtp-hi (kept at $NETNS_DIR/uts/mtp-hi). The hosts' eth0 are
# veth pairs into a bridge that lives in a namespace of its own (mtp-sw), so the machine's
# own interfaces, addresses and routes are never touched and no packet of the test bed can
# reach any other address. Processes stay in this machine's PID and mount namespaces (one
# /proc, one file system: like a cluster's shared home). jobs/netns-rsh is the remote shell
# MPI launchers use to start processes on a host (the manual: docs/tutorials/multi-host.md).
#
# One bed, one owner at a time. Its names (mtp-sw, mtp-hI, links mtpI-in/-sw) are global to
# the machine, so start, stop and rate run one at a time, under an exclusive flock on
# $NETNS_LOCK (default /run/lock/mpi-teleport-netns.lock), whoever calls them. A user of
# the bed (a test session) holds a shared flock on the lease file `users` prints
# ($NETNS_LOCK.users) while it uses the bed; stop refuses (exit 3) while one is held, so
# nobody tears the bed down under another's runs, and a start finds a bed that is up and
# leaves it alone. A start interrupted half-way (a namespace mtp-h0 without its UTS file)
# leaves names only this script makes: the next start or stop removes them, saying so.
# Needs root, iproute2 (ip, tc) and util-linux (unshare, nsenter, flock).
set -euo pipefail

DIR="${NETNS_DIR:-/tmp/mpi-teleport-netns}"
LOCK="${NETNS_LOCK:-/run/lock/mpi-teleport-netns.lock}"
USERS="$LOCK.users"
NET=10.231.77
SW=mtp-sw

die() { echo "netns-cluster: $*" >&2; exit 1; }
hosts() { local f; for f in "$DIR"/uts/mtp-h*; do if [[ -e "$f" ]]; then basename "$f"; fi; done | sort -V; }

# start, stop and rate one at a time (fd 9: the lock, held until this script exits)
exclusive() {
    exec 9>>"$LOCK" || die "cannot open the lock $LOCK"
    flock -w "${NETNS_LOCK_WAIT:-300}" 9 || die "another start/stop/rate holds $LOCK for over ${NETNS_LOCK_WAIT:-300}s"
}

# This script's own names left by anything: network namespaces mtp-sw and mtp-hI, veth ends
# mtpI-in/mtpI-sw in the machine's namespace, UTS files (bind mounts) in $DIR/uts.
own_netns() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^mtp-(sw|h[0-9]+)$' || true; }
own_links() { ip -o link show 2>/dev/null | awk -F': ' '{sub(/@.*/, "", $2); print $2}' | grep -E '^mtp[0-9]+-(in|sw)$' || true; }
index_of() { local h="$1"; case "$h" in mtp-h*) echo "${h#mtp-h}" ;; "$NET".*) echo $(( ${h##*.} - 1 )) ;; *) return 1 ;; esac; }

start() {
    local n="${1:-2}" i h
    [[ "$(id -u)" == 0 ]] || die "needs root (network and UTS namespaces)"
    for tool in ip tc unshare nsenter flock; do command -v "$tool" >/dev/null || die "$tool not found"; done
    exclusive
    if status >/dev/null; then
        if [[ "$(hosts | wc -l)" == "$n" ]]; then
            strays "$(hosts; echo "$SW")"
            echo "netns-cluster: already up: $(hosts | tr '\n' ' ')"
            return 0
        fi
        if ! flock -n -x "$USERS" true; then
            echo "netns-cluster: up with $(hosts | wc -l) hosts and in use (a user holds $USERS): not restarting it with $n" >&2
            exit 3
        fi
    fi
    remove quiet
    mkdir -p "$DIR/uts"
    local said
    said="$(ip netns add "$SW" 2>&1)" || die "cannot create a network namespace (ip netns add $SW): ${said:-failed}"
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
    exclusive
    # the lease: taken exclusively (no user holds it) for as long as the stop runs
    exec 8>>"$USERS" || die "cannot open the lease file $USERS"
    flock -n -x 8 || { echo "netns-cluster: in use (a user holds $USERS): not stopped" >&2; exit 3; }
    remove
}

# Remove every name of this bed: its hosts (in $DIR/uts) and switch, then its strays
remove() {
    local h f made
    made="$(hosts)"
    for f in "$DIR"/uts/*; do
        [[ -e "$f" ]] || continue
        [[ -e "/run/netns/$(basename "$f")" ]] || LEFT+=("$(basename "$f") (a UTS file without its network namespace)")
        umount "$f" 2>/dev/null || true
        rm -f "$f"
    done
    for h in $made; do ip netns del "$h" 2>/dev/null || true; done
    [[ -z "$made" ]] || ip netns del "$SW" 2>/dev/null || true
    strays ""
    [[ "${1:-}" == quiet ]] || echo "netns-cluster: stopped"
}

# Remove the names of this bed that are not in KEEP (names, one a line): what an interrupted
# start leaves (a namespace without its UTS file, a switch without hosts, a veth end in this
# machine's namespace), saying what was removed
LEFT=()
strays() {
    local keep="$1" ns h said
    for ns in $(own_netns); do
        grep -qx "$ns" <<<"$keep" && continue
        if [[ "$ns" == "$SW" ]]; then LEFT+=("$ns (the switch without hosts)")
        else LEFT+=("$ns (a network namespace without its UTS file)"); fi
        ip netns del "$ns" || die "cannot remove the network namespace $ns (ip netns del)"
    done
    for h in $(own_links); do
        LEFT+=("$h (a link in this machine's namespace)")
        ip link del "$h" 2>/dev/null || true  # (a veth's peer goes with it)
    done
    if (( ${#LEFT[@]} )); then
        printf -v said '%s; ' "${LEFT[@]}"
        echo "netns-cluster: removed leftovers of an earlier, interrupted start: ${said%; }" >&2
        LEFT=()
    fi
}

status() {
    local h n=0
    [[ -e "/run/netns/$SW" ]] || { echo "netns-cluster: not running"; return 1; }
    for h in $(hosts); do
        [[ -e "/run/netns/$h" ]] || { echo "netns-cluster: $h has no network namespace"; return 1; }
        n=$((n + 1))
    done
    (( n > 0 )) || { echo "netns-cluster: not running"; return 1; }
    echo "netns-cluster: $n hosts up: $(hosts | tr '\n' ' ')"
}

# RATE and NETNS_QUEUE in bits per second and seconds (tc's units: 100mbit, 1gbit, 200ms)
bits_of() { awk -v v="$1" 'BEGIN { match(v, /^[0-9]*\.?[0-9]+/); n = substr(v, 1, RLENGTH) + 0; u = tolower(substr(v, RLENGTH + 1));
    m["bit"] = 1; m["kbit"] = 1e3; m["mbit"] = 1e6; m["gbit"] = 1e9; m["bps"] = 8; m["kbps"] = 8e3; m["mbps"] = 8e6; m["gbps"] = 8e9
    if (!(u in m) || n <= 0) exit 1; printf "%d", n * m[u] }'; }
seconds_of() { awk -v v="$1" 'BEGIN { match(v, /^[0-9]*\.?[0-9]+/); n = substr(v, 1, RLENGTH) + 0; u = substr(v, RLENGTH + 1);
    m["s"] = 1; m["ms"] = 1e-3; m["us"] = 1e-6; if (!(u in m) || n <= 0) exit 1; printf "%.6f", n * m[u] }'; }

# One end of a host's link, shaped to BITS bit/s. htb, not tbf: tbf cuts every GSO packet
# larger than its bucket into 1514-byte frames, and forwarding those one by one through the
# veths and the bridge took 0.9 of this machine's 2 cores for one 400 Mbit/s flow and 1.6
# for one each way (softirq 37 % and 63 %), CPU the ranks need; htb charges a GSO packet's
# frames and headers whole (softirq 1 %). Packets under 128 bytes (TCP's acknowledgements,
# small control messages) leave first: a host's NIC sends at line speed and Linux's default
# queueing (fq_codel) keeps flows apart, so one connection's ACKs never wait behind another
# connection's data on a deep queue; with one FIFO they did, and of two messages crossing
# the link one each way, one took up to 2x its time (benchmarks/results/wire-tc-bandwidth-2026-11-27.md, "The bed's link").
# NETNS_SHAPER=tbf: the token bucket the bed used before (one FIFO, frames cut).
shape() {
    local ns="$1" dev="$2" r="$3" bits queue burst="${NETNS_BURST:-64kb}"
    if [[ "${NETNS_SHAPER:-htb}" == tbf ]]; then
        tc -n "$ns" qdisc add dev "$dev" root tbf rate "$r" burst "$burst" latency "${NETNS_QUEUE:-200ms}"
        return
    fi
    [[ "${NETNS_SHAPER:-htb}" == htb ]] || die "NETNS_SHAPER must be htb or tbf, not ${NETNS_SHAPER}"
    bits="$(bits_of "$r")" || die "rate $r: give bits per second as tc does (100mbit, 1gbit)"
    queue="$(seconds_of "${NETNS_QUEUE:-200ms}")" || die "NETNS_QUEUE ${NETNS_QUEUE}: give a time (200ms)"
    queue="$(awk -v b="$bits" -v q="$queue" 'BEGIN { x = b / 8 * q; printf "%d", (x < 65536 ? 65536 : x) }')"
    tc -n "$ns" qdisc add dev "$dev" root handle 1: htb default 20
    tc -n "$ns" class add dev "$dev" parent 1: classid 1:1 htb rate "${bits}bit" ceil "${bits}bit" \
        burst "$burst" cburst "$burst" quantum 60000
    tc -n "$ns" class add dev "$dev" parent 1:1 classid 1:10 htb rate "$((bits / 10))bit" \
        ceil "${bits}bit" burst "$burst" cburst "$burst" prio 0 quantum 60000
    tc -n "$ns" class add dev "$dev" parent 1:1 classid 1:20 htb rate "$((bits - bits / 10))bit" \
        ceil "${bits}bit" burst "$burst" cburst "$burst" prio 1 quantum 60000
    tc -n "$ns" qdisc add dev "$dev" parent 1:10 bfifo limit "$queue"
    tc -n "$ns" qdisc add dev "$dev" parent 1:20 bfifo limit "$queue"
    # IPv4 total length (bytes 2-3 of the header) under 128
    tc -n "$ns" filter add dev "$dev" parent 1: protocol ip prio 1 u32 match u16 0x0000 0xff80 at 2 flowid 1:10
}

rate() {  # both ends of every host's link: the host's sending and receiving
    local r="$1" h i
    exclusive
    for h in $(hosts); do
        i="$(index_of "$h")"
        tc -n "$h" qdisc del dev eth0 root 2>/dev/null || true
        tc -n "$SW" qdisc del dev "mtp$i-sw" root 2>/dev/null || true
        if [[ "$r" != off ]]; then
            shape "$h" eth0 "$r"
            shape "$SW" "mtp$i-sw" "$r"
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
    users) echo "$USERS" ;;
    hosts) for h in $(hosts); do echo "$NET.$(( $(index_of "$h") + 1 ))"; done ;;
    *) echo "usage: $0 start [N]|stop|status|rate RATE|exec HOST CMD...|hosts|users" >&2; exit 2 ;;
esac
