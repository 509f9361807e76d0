"""Per-interface setup commands: MTU, offloads and HTB shaping. Pure (returns argv lists).

Offloads must be off on every veth: with the OVS userspace datapath, TSO/GSO
super-frames and unfilled checksums reach the far side intact, so ping works
while TCP stalls. The egress queue is an HTB class with a bounded pfifo: that
backlog is the fabric's real queue, which the telemetry agent reads.
"""

from __future__ import annotations

from collections.abc import Sequence

from controller.southbound.overlay import IP_PROTO

OFFLOADS = ("rx", "tx", "sg", "tso", "gso", "gro", "lro", "rxvlan", "txvlan")


def ip_link_up(intf: str, mtu: int) -> list[str]:
    return ["ip", "link", "set", "dev", intf, "mtu", str(mtu), "up"]


def ethtool_offloads_off(intf: str) -> list[str]:
    args = ["ethtool", "-K", intf]
    for feature in OFFLOADS:
        args += [feature, "off"]
    return args


FlowPorts = tuple[str, int, int]  # (protocol, source port, destination port): a flow leaving a NIC
FIRST_FLOW_CLASS = 0x100  # HTB class (and pfifo handle) of a NIC's first flow


def htb_shaping(
    intf: str,
    rate_bps: float,
    mtu: int,
    queue_packets: int,
    ack_priority: bool = False,
    flows: Sequence[FlowPorts] = (),
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

    With `flows` (an access link's, either way: nic_arbitration or
    receiver_arbitration per-flow) each flow has a class and pfifo of its own
    beside the one for everything else, all at priority 1 with the same
    quantum, so HTB serves them in turn, a frame each, as a RoCE NIC serves
    its queue pairs: TCP's windows no longer decide who gets the link. The
    port's `queue_packets` are split among the flows' queues (docs/emulation.md,
    "A queue per flow at each end of an access link").
    """
    rate = int(rate_bps)
    # Burst: two MTUs or 2 ms at line rate, whichever is larger, so HTB's timer
    # granularity does not cap jumbo-frame throughput below the shaped rate.
    burst = max(2 * (mtu + 64), int(rate_bps / 8 * 0.002))
    shaped = f"ceil {rate}bit burst {burst} cburst {burst}"
    lines = [
        f"qdisc replace dev {intf} root handle 1: htb default {20 if ack_priority or flows else 1}",
        f"class replace dev {intf} parent 1: classid 1:1 htb rate {rate}bit {shaped}",
    ]
    if not ack_priority and not flows:
        lines.append(f"qdisc replace dev {intf} parent 1:1 handle 10: pfifo limit {queue_packets}")
        return [["tc", *line.split()] for line in lines]
    # Each child is guaranteed a share (the ACKs a twentieth, far more than
    # they carry) and may borrow up to the link's rate; the parent caps the sum.
    acks = max(rate // 20, 1) if ack_priority else 0
    share = max((rate - acks) // (len(flows) + 1), 1)
    turn = f" quantum {mtu + 64}" if flows else ""  # a frame a turn, the same for every flow
    # The port's buffer split among its flows' queues, not a whole one each: a
    # queue per flow must not give a port several times the buffer its FIFO had.
    # The shared queue (ACKs, mostly) takes one share too: at most (n+1)/n of it.
    limit = max(queue_packets // max(len(flows), 1), 2)
    data = [
        f"class replace dev {intf} parent 1:1 classid 1:20 htb rate {share}bit {shaped} prio 1{turn}",
        f"qdisc replace dev {intf} parent 1:20 handle 10: pfifo limit {limit}",
    ]
    if not ack_priority:
        lines += data
    else:
        lines += [
            f"class replace dev {intf} parent 1:1 classid 1:10 htb rate {acks}bit {shaped} prio 0",
            *data,
            f"qdisc replace dev {intf} parent 1:10 handle 11: pfifo limit {queue_packets}",
            # The IPv4 total length (the low half of the header's first word) under 128.
            f"filter add dev {intf} parent 1: protocol ip prio 1 u32 match u32 0 0xff80 at 0 flowid 1:10",
        ]
    for k, (protocol, sport, dport) in enumerate(flows):
        minor = f"{FIRST_FLOW_CLASS + k:x}"
        lines += [
            f"class replace dev {intf} parent 1:1 classid 1:{minor} htb rate {share}bit {shaped} prio 1{turn}",
            f"qdisc replace dev {intf} parent 1:{minor} handle {minor}: pfifo limit {limit}",
            f"filter add dev {intf} parent 1: protocol ip prio 2 u32 match ip protocol {IP_PROTO[protocol]} 0xff"
            f" match ip sport {sport} 0xffff match ip dport {dport} 0xffff flowid 1:{minor}",
        ]
    return [["tc", *line.split()] for line in lines]
