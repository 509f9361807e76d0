"""The NIC pairs of the traffic patterns that the emulated scenarios and the
simulator share (a cross-pod permutation, and an incast with a bystander),
and their flows' ports. `error` is the caller's FieldError kind, so the field
is named in its context (a scenario's or a workload's). Pure."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

from controller.errors import FieldError
from controller.fabric import Fabric, NicId


def permutation_pairs(fabric: Fabric, error: type[FieldError] = FieldError) -> list[tuple[NicId, NicId]]:
    """Every NIC sends to the same server slot, same rail, in the next pod;
    on a fabric of clusters, in the same pod of the next cluster, so every
    flow crosses the core (a full cross-cluster permutation)."""
    pods = sorted({n.pod for n in fabric.nics})
    if len(pods) < 2:
        raise error("traffic.pattern", f"fabric {fabric.spec.name!r} has one pod", "a fabric with 2+ pods")
    step = fabric.spec.pods_per_cluster if fabric.spec.clusters > 1 else 1
    return [(n, NicId(n.rail, pods[(pods.index(n.pod) + step) % len(pods)], n.server)) for n in fabric.nics]


def incast_pairs(
    fabric: Fabric, fan_in: int, seed: int, error: type[FieldError] = FieldError, rail: int | None = None
) -> tuple[list[tuple[NicId, NicId]], tuple[NicId, NicId] | None]:
    """(senders -> one receiver, a bystander pair), all on one rail (a server
    reaches another rail through its NIC on that rail anyway). Senders sit
    in other pods, so the incast crosses the spine tier where routing has a
    say. The bystander comes from another pod too, into a NIC beside the
    receiver (same leaf): it shares the spine -> leaf downlinks the incast
    crosses, but no sender's NIC and not the receiver's."""
    rng = random.Random(seed)
    drawn = rng.choice(sorted({n.rail for n in fabric.nics}))  # drawn either way: a seed keeps its ports
    rail = drawn if rail is None else rail
    on_rail = sorted(n for n in fabric.nics if n.rail == rail)
    dst = on_rail[-1]
    remote = [n for n in on_rail if n.pod != dst.pod]
    if len(remote) < fan_in:
        raise error(
            "traffic.fan_in",
            f"{fan_in} senders on rail {rail} outside the receiver's pod",
            f"at most {len(remote)} on fabric {fabric.spec.name!r}",
        )
    senders, spare = remote[:fan_in], remote[fan_in:]
    leaf = fabric.attachment(dst).node
    beside = [n for n in on_rail if n != dst and fabric.attachment(n).node == leaf]
    bystander = (spare[-1], beside[0]) if spare and beside else None
    return [(s, dst) for s in senders], bystander


ROCE_PORT = 4791  # RoCEv2's UDP port: a UDP flow's destination port, counted up per destination
TCP_BASE_PORT = 5201  # iperf3's: a TCP flow's destination port, one per flow


def flow_ports(pairs: Sequence[tuple[NicId, NicId]], protocol: str, seed: int) -> list[tuple[int, int]]:
    """Per pair, (source port, destination port). Source ports are drawn from
    `seed`: they are the ECMP hash's entropy, and the emulation and the
    simulator draw them here alike, so a seed gives both the same 5-tuples."""
    rng = random.Random(seed)
    n = len(pairs)
    sports = rng.sample(range(20000, 60000), n) if n <= 40000 else [rng.randrange(20000, 60000) for _ in range(n)]
    per_dst: Counter[NicId] = Counter()
    ports = []
    for i, ((_, dst), sport) in enumerate(zip(pairs, sports)):
        if protocol == "tcp":
            dport = TCP_BASE_PORT + i
        else:
            dport = ROCE_PORT + per_dst[dst]
            per_dst[dst] += 1
        ports.append((sport, dport))
    return ports
