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


def htb_shaping(
    intf: str, rate_bps: float, mtu: int, queue_packets: int, ack_priority: bool = False
) -> list[list[str]]:
    """The egress queue of one interface: an HTB class at the link's rate over
    a pfifo of `queue_packets` (handle 10:, the backlog the agent reads).

    With `ack_priority` the class has two children, both free to take the
    whole rate: packets under 128 bytes (TCP's pure ACKs) in one at priority
    0 over a pfifo of their own (11:), everything else in one at priority 1
    over 10:, so HTB sends the ACKs first. Why (README, "ACKs ahead of
    data"): at an emulated rate a full queue of jumbo frames holds an ACK
    for tens of milliseconds, and a flow whose ACKs cross full queues at
    several hops loses link capacity that the fluid model, the optimum and
    RoCE (not ACK-clocked) do not.
    """
    rate = int(rate_bps)
    # Burst: two MTUs or 2 ms at line rate, whichever is larger, so HTB's timer
    # granularity does not cap jumbo-frame throughput below the shaped rate.
    burst = max(2 * (mtu + 64), int(rate_bps / 8 * 0.002))
    shaped = f"ceil {rate}bit burst {burst} cburst {burst}"
    lines = [
        f"qdisc replace dev {intf} root handle 1: htb default {20 if ack_priority else 1}",
        f"class replace dev {intf} parent 1: classid 1:1 htb rate {rate}bit {shaped}",
    ]
    if not ack_priority:
        lines.append(f"qdisc replace dev {intf} parent 1:1 handle 10: pfifo limit {queue_packets}")
    else:
        # Each child is guaranteed a share (the ACKs a twentieth, far more than
        # they carry) and may borrow up to the link's rate; the parent caps the sum.
        acks = max(rate // 20, 1)
        lines += [
            f"class replace dev {intf} parent 1:1 classid 1:10 htb rate {acks}bit {shaped} prio 0",
            f"class replace dev {intf} parent 1:1 classid 1:20 htb rate {rate - acks}bit {shaped} prio 1",
            f"qdisc replace dev {intf} parent 1:20 handle 10: pfifo limit {queue_packets}",
            f"qdisc replace dev {intf} parent 1:10 handle 11: pfifo limit {queue_packets}",
            # The IPv4 total length (the low half of the header's first word) under 128.
            f"filter add dev {intf} parent 1: protocol ip prio 1 u32 match u32 0 0xff80 at 0 flowid 1:10",
        ]
    return [["tc", *line.split()] for line in lines]
