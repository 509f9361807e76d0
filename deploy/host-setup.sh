#!/usr/bin/env bash
# Idempotent host preparation for Railyard on Debian 12: apt packages, then
# ovsdb-server + ovs-vswitchd (userspace datapath; no kernel module needed).
# Usage: deploy/host-setup.sh [packages|services|all]
set -euo pipefail

PACKAGES=(openvswitch-switch mininet iperf3 ethtool iproute2 iputils-ping procps util-linux
          python3.11 python3.11-venv python3-pip prometheus etcd-server
          slurmctld slurm-client munge
          # Go, with Debian's protobuf and gRPC sources: the protos' Go build check (proto/go-build.sh)
          golang-go protoc-gen-go protoc-gen-go-grpc golang-google-protobuf-dev golang-google-grpc-dev)
# npm installs buf (`make lint`); a Node.js that ships its own npm needs no package.
command -v npm >/dev/null || PACKAGES+=(nodejs npm)

need_root() {
    if [[ $(id -u) -ne 0 ]]; then
        echo "host-setup: must run as root (it installs packages and starts Open vSwitch)" >&2
        exit 1
    fi
}

packages() {
    local missing=()
    for pkg in "${PACKAGES[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
            missing+=("$pkg")
        fi
    done
    if ((${#missing[@]})); then
        echo "host-setup: installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        # policy-rc.d on containers/CI refuses service starts; services() below starts OVS itself.
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
}

# ovs-vswitchd's userspace datapath transmits on ONE AF_PACKET socket shared by
# every port, and packets waiting in a port's qdisc are charged to that
# socket's send buffer. At the kernel default (212 KB, ~23 jumbo frames) one
# congested port's queue fills it and every other port starts dropping, so an
# ECMP collision on one uplink collapses the whole fabric. The socket size is
# fixed when ovs-vswitchd creates it, so this must hold before it starts.
WMEM_BYTES=16777216

# Prints nothing when ovs-vswitchd has no packet socket yet (no bridges).
# awk reads to the end: an early exit would leave ss writing to a closed pipe,
# and under pipefail its SIGPIPE (141) would fail the whole setup, now and then.
vswitchd_sndbuf() {
    ss -0 -m -p 2>/dev/null |
        awk '!found && /ovs-vswitchd/ && match($0, /tb[0-9]+/) { print substr($0, RSTART + 2, RLENGTH - 2); found = 1 }'
}

OVS_RUN=/var/run/openvswitch
OVS_LOG=/var/log/openvswitch

# Runs a start command quietly; on failure shows its output and the daemon's
# log, because a bare exit status is all CI would otherwise show.
run_or_explain() {
    local daemon=$1; shift
    local out
    if ! out=$("$@" 2>&1); then
        echo "host-setup: '$*' failed:" >&2
        echo "$out" >&2
        tail -n 20 "$OVS_LOG/$daemon.log" >&2 2>/dev/null || true
        exit 1
    fi
}

# Started directly rather than through ovs-ctl: ovs-ctl refuses to start
# ovs-vswitchd when it cannot load the openvswitch kernel module, which the
# userspace (netdev) datapath Railyard uses does not need.
start_vswitchd() {
    mkdir -p "$OVS_RUN" "$OVS_LOG"
    run_or_explain ovs-vswitchd ovs-vswitchd "unix:$OVS_RUN/db.sock" -vconsole:emer -vsyslog:err -vfile:info \
        --no-chdir --log-file="$OVS_LOG/ovs-vswitchd.log" --pidfile="$OVS_RUN/ovs-vswitchd.pid" --detach
    local _
    for _ in $(seq 50); do
        ovs-appctl -t ovs-vswitchd version >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "host-setup: ovs-vswitchd did not answer within 5 s" >&2
    tail -n 20 "$OVS_LOG/ovs-vswitchd.log" >&2 || true
    exit 1
}

services() {
    local ctl=/usr/share/openvswitch/scripts/ovs-ctl
    for key in net.core.wmem_default net.core.wmem_max; do
        if (( $(sysctl -n "$key") < WMEM_BYTES )); then
            sysctl -qw "$key=$WMEM_BYTES"
        fi
    done
    if ! ovs-vsctl -t 3 show >/dev/null 2>&1; then
        echo "host-setup: starting ovsdb-server"
        run_or_explain ovsdb-server "$ctl" --no-ovs-vswitchd --system-id=random start
    fi
    if ! ovs-appctl -t ovs-vswitchd version >/dev/null 2>&1; then
        echo "host-setup: starting ovs-vswitchd"
        start_vswitchd
    fi
    local tb
    tb=$(vswitchd_sndbuf)
    if [[ -n "$tb" ]] && (( tb < WMEM_BYTES )); then
        local foreign
        foreign=$(for br in $(ovs-vsctl list-br); do
            ovs-vsctl br-get-external-id "$br" railyard-fabric | grep -q . || echo "$br"; done)
        if [[ -n "$foreign" ]]; then
            echo "host-setup: ovs-vswitchd runs with a ${tb}-byte packet send buffer (need $WMEM_BYTES);" \
                 "not restarting it because other bridges use it: $foreign" >&2
            exit 1
        fi
        echo "host-setup: restarting ovs-vswitchd to pick up the larger packet send buffer"
        ovs-appctl -t ovs-vswitchd exit >/dev/null 2>&1 || true
        start_vswitchd
    fi
    ovs-vsctl get Open_vSwitch . datapath_types | grep -q netdev || {
        echo "host-setup: ovs-vswitchd has no userspace datapath" >&2
        exit 1
    }
}

need_root
case "${1:-all}" in
    packages) packages ;;
    services) services ;;
    all) packages; services ;;
    *) echo "usage: $0 [packages|services|all]" >&2; exit 2 ;;
esac
