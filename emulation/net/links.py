"""Per-interface setup commands: MTU, offloads and HTB shaping. Pure (returns argv lists).

Offloads must be off on every veth: with the OVS userspace datapath, TSO/GSO
super-frames and unfilled checksums reach the far side intact, so ping works
while TCP stalls. The egress queue is an HTB class with a bounded pfifo: that
backlog is the fabric's real queue, which the telemetry agent reads.
"""

from __future__ import annotations

OFFLOADS = ("rx", "tx", "sg", "tso", "gso", "gro", "lro", "rxvlan", "txvlan")


def ip_link_up(intf: str, mtu: int) -> list[str]:
    return ["ip", "link", "set", "dev", intf, "mtu", str(mtu), "up"]


def ethtool_offloads_off(intf: str) -> list[str]:
    args = ["ethtool", "-K", intf]
    for feature in OFFLOADS:
        args += [feature, "off"]
    return args


def htb_shaping(intf: str, rate_bps: float, mtu: int, queue_packets: int) -> list[list[str]]:
    rate = f"{int(rate_bps)}bit"
    # Burst: two MTUs or 2 ms at line rate, whichever is larger, so HTB's timer
    # granularity does not cap jumbo-frame throughput below the shaped rate.
    burst = max(2 * (mtu + 64), int(rate_bps / 8 * 0.002))
    return [
        ["tc", "qdisc", "replace", "dev", intf, "root", "handle", "1:", "htb", "default", "1"],
        [
            "tc",
            "class",
            "replace",
            "dev",
            intf,
            "parent",
            "1:",
            "classid",
            "1:1",
            "htb",
            "rate",
            rate,
            "ceil",
            rate,
            "burst",
            str(burst),
            "cburst",
            str(burst),
        ],
        ["tc", "qdisc", "replace", "dev", intf, "parent", "1:1", "handle", "10:", "pfifo", "limit", str(queue_packets)],
    ]
